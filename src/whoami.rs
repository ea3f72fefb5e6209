//! `ouroboros whoami`: a PROXY-aware HTTP echo server. It shows what a backend really sees: the
//! socket peer, the PROXY header (if any) and the request line and headers, so one can check that
//! the client address survives a path (ingress controller, hairpin proxy, load balancer).
//!
//! HTTP/1.1 is served by a small reader over `httparse` rather than hyper: an echo server must show
//! header names with their original case, order and duplicates, which hyper's `HeaderMap`
//! normalises away. Bodies are skipped (Content-Length) or end the connection (chunked), since the
//! answer never depends on them.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::flags::UsageError;
use crate::proxy_protocol::{self, DecodeError, Header, Version};
use crate::relay;

/// How to treat a PROXY-protocol header at the start of each connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyMode {
    /// Every connection must start with a valid v1 or v2 header; others are closed.
    Required,
    /// Decode a v1 or v2 header when the connection starts with one, plain HTTP otherwise.
    #[default]
    Optional,
    /// Never look for a header: the first bytes are HTTP.
    Off,
}

#[derive(clap::Args, Debug)]
pub struct WhoamiArgs {
    /// Address to listen on: `:PORT` (every interface, IPv4 and IPv6), `HOST:PORT`, `IPv4:PORT`
    /// or `[IPv6]:PORT`. Port 0 picks a free port (the log line `listening` shows it).
    #[arg(
        long,
        env = "OUROBOROS_WHOAMI_LISTEN",
        default_value = ":8080",
        value_name = "ADDR"
    )]
    pub listen: String,
    /// PROXY-protocol header handling: `required` closes connections without a valid v1/v2
    /// header, `optional` auto-detects v1, v2 or none, `off` treats every byte as HTTP.
    #[arg(
        long,
        env = "OUROBOROS_WHOAMI_PROXY_PROTOCOL",
        value_enum,
        default_value_t = ProxyMode::Optional,
        value_name = "MODE"
    )]
    pub proxy_protocol: ProxyMode,
    /// Time a client has to send the PROXY header and then each request head (e.g. `500ms`,
    /// `10s`); an idle keep-alive connection is closed after it. Must be above 0.
    #[arg(
        long,
        env = "OUROBOROS_WHOAMI_READ_TIMEOUT",
        default_value = "10s",
        value_parser = crate::flags::parse_duration,
        value_name = "DURATION"
    )]
    pub read_timeout: Duration,
}

pub async fn run(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let listen = relay::parse_listen(&args.listen)
        .and_then(|l| l.ok_or_else(|| "the address is empty; use e.g. :8080".to_string()))
        .map_err(|e| UsageError::err(format!("invalid --listen {:?}: {e}", args.listen)))?;
    if args.read_timeout.is_zero() {
        return Err(UsageError::err(
            "invalid --read-timeout 0: a timeout is required so silent clients cannot hold connections; use e.g. 10s",
        ));
    }
    let token = crate::shutdown::on_signal()?;
    let listener = relay::bind(&listen)
        .await
        .with_context(|| format!("listening on {:?} (--listen)", args.listen))?;
    let local = listener.local_addr()?;
    let ctx = Arc::new(Context {
        hostname: hostname(),
        ips: interface_ips(),
        mode: args.proxy_protocol,
        read_timeout: args.read_timeout,
    });
    let mode = clap::ValueEnum::to_possible_value(&args.proxy_protocol)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    info!(address = %local, proxy_protocol = mode, "listening");

    let tracker = TaskTracker::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(10);
                    tracker.spawn(serve_connection(ctx.clone(), stream, peer, token.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: wait and retry, never give up the listener.
                    warn!(error = %e, retry_in = ?backoff, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
    drop(listener);
    tracker.close();
    // Idle connections close at once; a request in progress gets at most one read timeout.
    let grace = ctx.read_timeout + Duration::from_secs(1);
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        warn!(
            connections = tracker.len(),
            "connections still open after the grace period; exiting anyway"
        );
    }
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}

struct Context {
    hostname: String,
    ips: Vec<IpAddr>,
    mode: ProxyMode,
    read_timeout: Duration,
}

/// Longest request head accepted (request line + headers).
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

async fn serve_connection(
    ctx: Arc<Context>,
    mut stream: TcpStream,
    peer: SocketAddr,
    token: CancellationToken,
) {
    // A dual-stack listener sees IPv4 clients as `::ffff:a.b.c.d`: show them as IPv4.
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let peer = canonical(peer);
    let local = stream.local_addr().ok().map(canonical);
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);

    let proxy = if ctx.mode == ProxyMode::Off {
        None
    } else {
        let read = read_proxy_header(&mut stream, &mut buf, ctx.mode);
        match tokio::time::timeout(ctx.read_timeout, read).await {
            Ok(Ok(header)) => header,
            Ok(Err(HeaderFailure::ClosedEmpty)) => {
                debug!(%peer, "connection closed before sending anything");
                return;
            }
            Ok(Err(HeaderFailure::Broken(reason))) => {
                warn!(%peer, reason = %reason, "closing connection: bad PROXY header");
                return;
            }
            Err(_) if buf.is_empty() => {
                debug!(%peer, timeout = ?ctx.read_timeout, "closing silent connection");
                return;
            }
            Err(_) => {
                warn!(
                    %peer,
                    reason = %format!("incomplete PROXY header after {:?} ({} bytes received)", ctx.read_timeout, buf.len()),
                    "closing connection: bad PROXY header"
                );
                return;
            }
        }
    };
    if let Some(h) = &proxy {
        debug!(%peer, header = %h, "PROXY header");
    }

    let mut served = 0u64;
    loop {
        let head = tokio::select! {
            _ = token.cancelled(), if buf.is_empty() => return,
            head = tokio::time::timeout(ctx.read_timeout, read_head(&mut stream, &mut buf)) => head,
        };
        let request = match head {
            Err(_) => {
                if !buf.is_empty() {
                    let _ = write_error(&mut stream, 408, "Request Timeout").await;
                }
                return;
            }
            Ok(Err(HeadFailure::Closed)) => return,
            Ok(Err(HeadFailure::Io(e))) => {
                debug!(%peer, error = %e, "read failed");
                return;
            }
            Ok(Err(HeadFailure::Bad(status, why))) => {
                debug!(%peer, status, reason = why, "bad HTTP request");
                let _ = write_error(&mut stream, status, why).await;
                return;
            }
            Ok(Ok(r)) => r,
        };
        served += 1;
        let body = match body_framing(&request) {
            Ok(b) => b,
            Err(why) => {
                let _ = write_error(&mut stream, 400, why).await;
                return;
            }
        };
        let keep_alive = keep_alive(&request) && body != BodyFraming::Chunked;
        if let BodyFraming::Length(n) = body {
            let waiting = n > buf.len() as u64 && request.expects_continue();
            if waiting
                && stream
                    .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                    .await
                    .is_err()
            {
                return;
            }
            if let Err(e) = skip_body(&mut stream, &mut buf, n, ctx.read_timeout).await {
                debug!(%peer, error = %e, "request body not received");
                return;
            }
        }
        let report = Report {
            hostname: &ctx.hostname,
            ips: &ctx.ips,
            remote: peer,
            local,
            proxy: proxy.as_ref(),
            request: &request,
            request_number: served,
        };
        let (content_type, text) = if wants_json(&request) {
            ("application/json", render_json(&report))
        } else {
            ("text/plain; charset=utf-8", render_text(&report))
        };
        let response = response_bytes(200, "OK", content_type, &text, &request, keep_alive);
        if stream.write_all(&response).await.is_err() {
            return;
        }
        if !keep_alive {
            linger_close(&mut stream).await;
            return;
        }
    }
}

enum HeaderFailure {
    /// EOF before any byte: a TCP probe, not a broken header.
    ClosedEmpty,
    Broken(String),
}

/// Reads until the buffer holds a whole PROXY header (removed from `buf`), or proves there is
/// none (`optional`: `Ok(None)`, bytes kept for HTTP).
async fn read_proxy_header(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    mode: ProxyMode,
) -> Result<Option<Header>, HeaderFailure> {
    loop {
        match proxy_protocol::decode(buf) {
            Ok((header, used)) => {
                buf.drain(..used);
                return Ok(Some(header));
            }
            Err(e) if e.is_absent() && mode == ProxyMode::Optional => return Ok(None),
            Err(DecodeError::Incomplete) => {}
            Err(e) => return Err(HeaderFailure::Broken(e.to_string())),
        }
        // Never more than the longest header: the rest stays in the socket for HTTP.
        let want = (proxy_protocol::MAX_HEADER_LEN - buf.len()).min(4096);
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk[..want]).await {
            Ok(0) if buf.is_empty() => return Err(HeaderFailure::ClosedEmpty),
            Ok(0) => {
                return Err(HeaderFailure::Broken(format!(
                    "connection closed after {} bytes of an incomplete PROXY header",
                    buf.len()
                )))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                return Err(HeaderFailure::Broken(format!(
                    "read failed during the PROXY header: {e}"
                )))
            }
        }
    }
}

/// A parsed request head, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// In arrival order, names as sent.
    pub headers: Vec<(String, String)>,
}

impl Request {
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.header_values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    fn expects_continue(&self) -> bool {
        self.minor_version >= 1 && self.has_token("expect", "100-continue")
    }

    pub fn version(&self) -> &'static str {
        if self.minor_version == 0 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        }
    }
}

#[derive(Debug)]
enum HeadFailure {
    /// Clean EOF between requests.
    Closed,
    Io(std::io::Error),
    Bad(u16, &'static str),
}

/// Parses a request head from the start of `buf`: `Ok(Some((request, head_len)))` when whole,
/// `Ok(None)` when more bytes are needed. PURE.
fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize)>, (u16, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let request = Request {
                method: req.method.unwrap_or_default().to_string(),
                target: req.path.unwrap_or_default().to_string(),
                minor_version: req.version.unwrap_or(1),
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
            };
            Ok(Some((request, len)))
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            Err((431, "Request Header Fields Too Large"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err((431, "Request Header Fields Too Large")),
        Err(_) => Err((400, "Bad Request")),
    }
}

async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Request, HeadFailure> {
    loop {
        if !buf.is_empty() {
            match parse_head(buf) {
                Ok(Some((request, len))) => {
                    buf.drain(..len);
                    return Ok(request);
                }
                Ok(None) => {}
                Err((status, why)) => return Err(HeadFailure::Bad(status, why)),
            }
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) => return Err(HeadFailure::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(HeadFailure::Io(e)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyFraming {
    Length(u64),
    /// Not read: the connection closes after the answer.
    Chunked,
}

/// RFC 9112 section 6: Transfer-Encoding wins; Content-Length values must agree.
fn body_framing(r: &Request) -> Result<BodyFraming, &'static str> {
    if r.header_values("transfer-encoding").next().is_some() {
        return Ok(BodyFraming::Chunked);
    }
    let mut length = None;
    for v in r.header_values("content-length").flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err("invalid Content-Length");
        }
        let n: u64 = v.parse().map_err(|_| "invalid Content-Length")?;
        if length.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length values");
        }
        length = Some(n);
    }
    Ok(BodyFraming::Length(length.unwrap_or(0)))
}

fn keep_alive(r: &Request) -> bool {
    if r.has_token("connection", "close") {
        return false;
    }
    r.minor_version >= 1 || r.has_token("connection", "keep-alive")
}

/// Discards a request body; each read gets the read timeout, so slow but steady uploads pass.
async fn skip_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    len: u64,
    read_timeout: Duration,
) -> std::io::Result<()> {
    let from_buf = (buf.len() as u64).min(len) as usize;
    buf.drain(..from_buf);
    let mut left = len - from_buf as u64;
    let mut chunk = [0u8; 8192];
    while left > 0 {
        let want = (left as usize).min(chunk.len());
        let n = tokio::time::timeout(read_timeout, stream.read(&mut chunk[..want]))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "body read timed out")
            })??;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        left -= n as u64;
    }
    Ok(())
}

/// `?format=json|text` wins over `Accept: application/json`.
fn wants_json(r: &Request) -> bool {
    let query = r.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let query = query.split('#').next().unwrap_or("");
    for pair in query.split('&') {
        if let Some(("format", v)) = pair.split_once('=') {
            return v.eq_ignore_ascii_case("json");
        }
    }
    r.header_values("accept")
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
}

fn response_bytes(
    status: u16,
    reason: &str,
    content_type: &str,
    body: &str,
    request: &Request,
    keep_alive: bool,
) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
        body.len()
    );
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    } else if request.minor_version == 0 {
        head.push_str("Connection: keep-alive\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !request.method.eq_ignore_ascii_case("HEAD") {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

async fn write_error(stream: &mut TcpStream, status: u16, reason: &str) -> std::io::Result<()> {
    let body = format!("{status} {reason}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    linger_close(stream).await;
    Ok(())
}

/// Half-closes, then drains what the client still sends (briefly, bounded): closing a socket
/// with unread bytes makes the kernel send a reset, which can destroy the answer in flight.
async fn linger_close(stream: &mut TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut total = 0usize;
        while total < 1024 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

/// Everything one answer shows.
struct Report<'a> {
    hostname: &'a str,
    ips: &'a [IpAddr],
    remote: SocketAddr,
    local: Option<SocketAddr>,
    proxy: Option<&'a Header>,
    request: &'a Request,
    request_number: u64,
}

impl Report<'_> {
    /// The client as the backend should see it: the PROXY source when the header names one.
    fn client(&self) -> SocketAddr {
        self.proxy
            .and_then(|h| h.source())
            .map_or(self.remote, |s| s.0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A TLV value as text when it is printable UTF-8 (ALPN, AUTHORITY, UNIQUE_ID usually are).
fn printable(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_control))
}

fn version_number(v: Version) -> u8 {
    match v {
        Version::V1 => 1,
        Version::V2 => 2,
    }
}

/// `ProxyTLV: 0x05 UNIQUE_ID 7265712d37663361 "req-7f3a"`: type, name, hex, text if printable.
fn tlv_line(out: &mut String, prefix: &str, t: &proxy_protocol::Tlv) {
    let _ = write!(out, "ProxyTLV: {prefix}{:#04x}", t.kind);
    if let Some(name) = t.name() {
        let _ = write!(out, " {name}");
    }
    let _ = write!(out, " {}", hex(&t.value));
    if let Some(s) = printable(&t.value) {
        let _ = write!(out, " {s:?}");
    }
    out.push('\n');
}

fn tlv_json(t: &proxy_protocol::Tlv) -> serde_json::Value {
    serde_json::json!({
        "type": t.kind,
        "name": t.name(),
        "value_hex": hex(&t.value),
        "value": printable(&t.value),
    })
}

fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Hostname: {}", r.hostname);
    for ip in r.ips {
        let _ = writeln!(out, "IP: {ip}");
    }
    let _ = writeln!(out, "RemoteAddr: {}", r.remote);
    if let Some(local) = r.local {
        let _ = writeln!(out, "LocalAddr: {local}");
    }
    match r.proxy {
        None => out.push_str("Proxy: none\n"),
        Some(h) => {
            let _ = writeln!(out, "Proxy: {h}");
            for t in &h.tlvs {
                tlv_line(&mut out, "", t);
                if let Some(ssl) = t.ssl() {
                    let _ = writeln!(
                        out,
                        "ProxyTLV: {:#04x} SSL client={:#04x} verify={}",
                        t.kind, ssl.client, ssl.verify
                    );
                    for sub in &ssl.tlvs {
                        tlv_line(&mut out, "0x20.", sub);
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "ClientAddr: {}", r.client());
    let _ = writeln!(out, "ConnectionRequest: {}", r.request_number);
    let q = r.request;
    let _ = writeln!(out, "{} {} {}", q.method, q.target, q.version());
    for (name, value) in &q.headers {
        let _ = writeln!(out, "{name}: {value}");
    }
    out
}

fn render_json(r: &Report) -> String {
    use serde_json::{json, Value};
    let proxy = r.proxy.map_or(Value::Null, |h| {
        json!({
            "version": version_number(h.version),
            "command": h.command.to_string(),
            "transport": h.transport.as_str(),
            "source": h.source().map(|s| s.0.to_string()),
            "destination": h.destination().map(|d| d.0.to_string()),
            "tlvs": h.tlvs.iter().map(|t| {
                let mut v = tlv_json(t);
                if let Some(ssl) = t.ssl() {
                    v["ssl"] = json!({
                        "client": ssl.client,
                        "verify": ssl.verify,
                        "tlvs": ssl.tlvs.iter().map(tlv_json).collect::<Vec<_>>(),
                    });
                }
                v
            }).collect::<Vec<_>>(),
        })
    });
    let q = r.request;
    let body = json!({
        "hostname": r.hostname,
        "ips": r.ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "remote_addr": r.remote.to_string(),
        "local_addr": r.local.map(|l| l.to_string()),
        "proxy": proxy,
        "client_addr": r.client().to_string(),
        "connection_request": r.request_number,
        "request": {
            "method": q.method,
            "target": q.target,
            "version": q.version(),
            "headers": q.headers.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
        },
    });
    let mut s = serde_json::to_string_pretty(&body).unwrap_or_default();
    s.push('\n');
    s
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from("unknown"))
}

/// Addresses of this host's interfaces (the Pod IP in a cluster), loopback included.
fn interface_ips() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = addrs
        .filter_map(|a| {
            let addr = a.address?;
            addr.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect();
    ips.dedup();
    ips
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy_protocol::{Command, Destination, Source, Tlv, Transport};

    fn req(raw: &str) -> Request {
        let (r, len) = parse_head(raw.as_bytes()).unwrap().unwrap();
        assert_eq!(len, raw.len(), "{raw:?}");
        r
    }

    #[test]
    fn request_heads() {
        let r = req("GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8\r\n\r\n");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/a?b=c");
        assert_eq!(r.version(), "HTTP/1.1");
        // Case, order and duplicates as sent.
        assert_eq!(
            r.headers,
            vec![
                ("Host".into(), "x".into()),
                ("X-Forwarded-For".into(), "1.2.3.4".into()),
                ("x-forwarded-for".into(), "5.6.7.8".into()),
            ]
        );
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(parse_head(b""), Ok(None));
        assert_eq!(
            parse_head(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n\r\n"),
            Err((400, "Bad Request"))
        );
        assert_eq!(
            parse_head(b"\r\n\r\n\0\r\nQUIT\n"),
            Err((400, "Bad Request"))
        );
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(
            parse_head(many.as_bytes()),
            Err((431, "Request Header Fields Too Large"))
        );
        let huge = format!("GET / HTTP/1.1\r\nA: {}", "b".repeat(MAX_HEAD));
        assert_eq!(
            parse_head(huge.as_bytes()),
            Err((431, "Request Header Fields Too Large"))
        );
    }

    #[test]
    fn framing_and_keep_alive() {
        for (raw, framing, alive) in [
            ("GET / HTTP/1.1\r\n\r\n", Ok(BodyFraming::Length(0)), true),
            (
                "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                false,
            ),
            (
                "GET / HTTP/1.1\r\nConnection: Upgrade, Close\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                false,
            ),
            ("GET / HTTP/1.0\r\n\r\n", Ok(BodyFraming::Length(0)), false),
            (
                "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                Err("conflicting Content-Length values"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                Err("invalid Content-Length"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
                Err("invalid Content-Length"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Chunked),
                true,
            ),
        ] {
            let r = req(raw);
            assert_eq!(body_framing(&r), framing, "{raw:?}");
            assert_eq!(keep_alive(&r), alive, "{raw:?}");
        }
        assert!(req("POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").expects_continue());
        assert!(!req("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expects_continue());
    }

    #[test]
    fn json_negotiation() {
        for (raw, json) in [
            ("GET / HTTP/1.1\r\n\r\n", false),
            ("GET /?format=json HTTP/1.1\r\n\r\n", true),
            ("GET /x?a=1&format=JSON HTTP/1.1\r\n\r\n", true),
            (
                "GET /?format=text HTTP/1.1\r\nAccept: application/json\r\n\r\n",
                false,
            ),
            ("GET / HTTP/1.1\r\nAccept: application/json\r\n\r\n", true),
            (
                "GET / HTTP/1.1\r\nAccept: text/html, application/json;q=0.9\r\n\r\n",
                true,
            ),
            ("GET / HTTP/1.1\r\nAccept: text/plain\r\n\r\n", false),
            ("GET /format=json HTTP/1.1\r\n\r\n", false),
        ] {
            assert_eq!(wants_json(&req(raw)), json, "{raw:?}");
        }
    }

    fn sample_header() -> Header {
        Header {
            version: Version::V2,
            command: Command::Proxy,
            transport: Transport::Tcp4,
            addresses: Some((
                Source("192.0.2.10:51234".parse().unwrap()),
                Destination("203.0.113.7:443".parse().unwrap()),
            )),
            tlvs: vec![
                Tlv {
                    kind: 0x05,
                    value: b"req-7f3a".to_vec(),
                },
                Tlv {
                    kind: 0xea,
                    value: vec![0, 1],
                },
                Tlv {
                    kind: 0x20,
                    value: b"\x01\0\0\0\0\x21\0\x07TLSv1.3".to_vec(),
                },
            ],
        }
    }

    #[test]
    fn text_report() {
        let request =
            req("GET /x HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: 198.51.100.1\r\n\r\n");
        let header = sample_header();
        let ips = ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let report = Report {
            hostname: "node-1",
            ips: &ips,
            remote: "10.0.0.5:40000".parse().unwrap(),
            local: Some("10.0.0.6:8080".parse().unwrap()),
            proxy: Some(&header),
            request: &request,
            request_number: 2,
        };
        assert_eq!(
            render_text(&report),
            "Hostname: node-1\n\
             IP: 127.0.0.1\n\
             IP: ::1\n\
             RemoteAddr: 10.0.0.5:40000\n\
             LocalAddr: 10.0.0.6:8080\n\
             Proxy: v2 PROXY TCP4 192.0.2.10:51234 -> 203.0.113.7:443\n\
             ProxyTLV: 0x05 UNIQUE_ID 7265712d37663361 \"req-7f3a\"\n\
             ProxyTLV: 0xea 0001\n\
             ProxyTLV: 0x20 SSL 0100000000210007544c5376312e33\n\
             ProxyTLV: 0x20 SSL client=0x01 verify=0\n\
             ProxyTLV: 0x20.0x21 SSL_VERSION 544c5376312e33 \"TLSv1.3\"\n\
             ClientAddr: 192.0.2.10:51234\n\
             ConnectionRequest: 2\n\
             GET /x HTTP/1.1\n\
             Host: a.example\n\
             X-Forwarded-For: 198.51.100.1\n"
        );
        let plain = Report {
            proxy: None,
            ..report
        };
        let text = render_text(&plain);
        assert!(
            text.contains("\nProxy: none\nClientAddr: 10.0.0.5:40000\n"),
            "{text}"
        );
    }

    #[test]
    fn json_report() {
        let request = req("GET /?format=json HTTP/1.0\r\nHost: a\r\n\r\n");
        let header = sample_header();
        let report = Report {
            hostname: "node-1",
            ips: &[],
            remote: "[::1]:40000".parse().unwrap(),
            local: None,
            proxy: Some(&header),
            request: &request,
            request_number: 1,
        };
        let v: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(v["remote_addr"], "[::1]:40000");
        assert_eq!(v["local_addr"], serde_json::Value::Null);
        assert_eq!(v["client_addr"], "192.0.2.10:51234");
        assert_eq!(v["proxy"]["version"], 2);
        assert_eq!(v["proxy"]["command"], "PROXY");
        assert_eq!(v["proxy"]["transport"], "TCP4");
        assert_eq!(v["proxy"]["destination"], "203.0.113.7:443");
        assert_eq!(v["proxy"]["tlvs"][0]["name"], "UNIQUE_ID");
        assert_eq!(v["proxy"]["tlvs"][0]["value"], "req-7f3a");
        assert_eq!(v["proxy"]["tlvs"][1]["name"], serde_json::Value::Null);
        assert_eq!(v["proxy"]["tlvs"][1]["value_hex"], "0001");
        assert_eq!(v["proxy"]["tlvs"][1]["value"], serde_json::Value::Null);
        assert_eq!(v["proxy"]["tlvs"][1].get("ssl"), None);
        let ssl = &v["proxy"]["tlvs"][2]["ssl"];
        assert_eq!(ssl["client"], 1);
        assert_eq!(ssl["verify"], 0);
        assert_eq!(ssl["tlvs"][0]["name"], "SSL_VERSION");
        assert_eq!(ssl["tlvs"][0]["value"], "TLSv1.3");
        assert_eq!(v["request"]["version"], "HTTP/1.0");
        assert_eq!(v["request"]["headers"][0]["name"], "Host");
    }

    #[test]
    fn responses() {
        let get = req("GET / HTTP/1.1\r\n\r\n");
        let head = req("HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let r =
            String::from_utf8(response_bytes(200, "OK", "text/plain", "abc", &get, false)).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nabc"
        );
        let r =
            String::from_utf8(response_bytes(200, "OK", "text/plain", "abc", &head, true)).unwrap();
        assert!(
            r.ends_with(
                "Content-Length: 3\r\nCache-Control: no-store\r\nConnection: keep-alive\r\n\r\n"
            ),
            "{r}"
        );
    }

    #[test]
    fn host_facts() {
        assert!(!hostname().is_empty());
        assert!(interface_ips().iter().any(|ip| ip.is_loopback()));
    }
}
