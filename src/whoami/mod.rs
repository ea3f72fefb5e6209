//! `ouroboros whoami`: a PROXY-aware HTTP echo server. It shows what a backend really sees: the
//! socket peer, the PROXY header (if any) and the request line and headers, so one can check that
//! the client address survives a path (ingress controller, hairpin proxy, load balancer).
//!
//! This file is the socket side (the [`Handler`] the shared accept loop runs, the PROXY header
//! read, request heads read with deadlines, bodies skipped); `http` parses and frames requests
//! and answers, `report` renders what the answer shows; both are pure. Bodies are skipped
//! (Content-Length) or end the connection (chunked), since the answer never depends on them.

mod http;
mod report;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::accept::{Handler, Lifecycle};
use crate::flags::UsageError;
use crate::proxy_protocol::decode::error::DecodeError;
use crate::proxy_protocol::decode::header::Header;
use crate::proxy_protocol::decode::{decode, MAX_HEADER_LEN};
use crate::proxy_protocol::Version;
use http::{
    body_framing, keep_alive, parse_head, response_bytes, wants_json, BodyFraming, Request,
};
use report::{render_json, render_text, Report};

/// How to treat a PROXY-protocol header at the start of each connection. `v1` and `v2` are the
/// values `proxy --proxy-protocol` and `edge --proxy-protocol` send, so one vocabulary reads the
/// same in all three: whoami given `v2` expects what a proxy given `v2` sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyMode {
    /// Every connection must start with a valid v1 header; others (v2 included) are closed.
    V1,
    /// Every connection must start with a valid v2 header; others (v1 included) are closed.
    V2,
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
    /// PROXY-protocol header handling: `v1` or `v2` closes connections without a valid header
    /// of that version (what `proxy --proxy-protocol v1|v2` sends), `required` without a valid
    /// v1/v2 header, `optional` auto-detects v1, v2 or none, `off` treats every byte as HTTP.
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
    /// Connections served at once; past it new connections wait in the kernel's listen
    /// backlog. Each holds up to a 64 KiB request head, so the default bounds that at 64 MiB.
    /// 0 = unlimited.
    #[arg(
        long,
        env = "OUROBOROS_WHOAMI_MAX_CONNECTIONS",
        default_value_t = 1024,
        value_name = "N"
    )]
    pub max_connections: usize,
}

pub async fn run(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let listen = crate::listen::parse_listen(&args.listen)
        .and_then(|l| l.ok_or_else(|| "the address is empty; use e.g. :8080".to_string()))
        .map_err(|e| UsageError::err(format!("invalid --listen {:?}: {e}", args.listen)))?;
    if args.read_timeout.is_zero() {
        return Err(UsageError::err(
            "invalid --read-timeout 0: a timeout is required so silent clients cannot hold connections; use e.g. 10s",
        ));
    }
    let token = crate::shutdown::on_signal()?;
    let listener = crate::listen::bind(&listen)
        .await
        .with_context(|| format!("listening on {:?} (--listen)", args.listen))?;
    let local = listener.local_addr()?;
    let ctx = Arc::new(Context {
        hostname: hostname(),
        ips: interface_ips(),
        mode: args.proxy_protocol,
        read_timeout: args.read_timeout,
        stop: token.clone(),
    });
    let mode = clap::ValueEnum::to_possible_value(&args.proxy_protocol)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    info!(address = %local, proxy_protocol = mode, "listening");

    let lifecycle = Lifecycle::new(args.max_connections);
    let server = lifecycle.serve(vec![(listener, ctx.clone())])?;
    token.cancelled().await;
    // Idle keep-alive connections close at once (they watch the same token); a request in
    // progress gets at most one read timeout.
    lifecycle
        .drain(server, ctx.read_timeout + Duration::from_secs(1))
        .await;
    info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The whoami connection handler: what every connection's answer needs.
struct Context {
    hostname: String,
    ips: Vec<IpAddr>,
    mode: ProxyMode,
    read_timeout: Duration,
    /// The shutdown signal: idle keep-alive connections close when it fires.
    stop: CancellationToken,
}

impl Handler for Context {
    fn name(&self) -> &str {
        "whoami"
    }

    fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        serve_connection(self, stream, peer)
    }
}

async fn serve_connection(ctx: Arc<Context>, mut stream: TcpStream, peer: SocketAddr) {
    // A dual-stack listener sees IPv4 clients as `::ffff:a.b.c.d`: show them as IPv4.
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let peer = canonical(peer);
    let local = stream.local_addr().ok().map(canonical);
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);

    let Ok(proxy) = proxy_header(&ctx, &mut stream, &mut buf, peer).await else {
        return;
    };
    if let Some(h) = &proxy {
        debug!(%peer, header = %h, "PROXY header");
    }

    let mut served = 0u64;
    loop {
        let head = tokio::select! {
            _ = ctx.stop.cancelled(), if buf.is_empty() => return,
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

/// The connection's PROXY header as --proxy-protocol asks for it (`None`: off, or optional and
/// absent); `Err` when the connection is to be closed (already logged).
async fn proxy_header(
    ctx: &Context,
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    peer: SocketAddr,
) -> Result<Option<Header>, ()> {
    if ctx.mode == ProxyMode::Off {
        return Ok(None);
    }
    let read = read_proxy_header(stream, buf, ctx.mode);
    match tokio::time::timeout(ctx.read_timeout, read).await {
        Ok(Ok(header)) => Ok(header),
        Ok(Err(HeaderFailure::ClosedEmpty)) => {
            debug!(%peer, "connection closed before sending anything");
            Err(())
        }
        Ok(Err(HeaderFailure::Broken(reason))) => {
            warn!(%peer, reason = %reason, "closing connection: bad PROXY header");
            Err(())
        }
        Err(_) if buf.is_empty() => {
            debug!(%peer, timeout = ?ctx.read_timeout, "closing silent connection");
            Err(())
        }
        Err(_) => {
            warn!(
                %peer,
                reason = %format!("incomplete PROXY header after {:?} ({} bytes received)", ctx.read_timeout, buf.len()),
                "closing connection: bad PROXY header"
            );
            Err(())
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
        match decode(buf) {
            Ok((header, used)) => {
                let want = match mode {
                    ProxyMode::V1 => Some(Version::V1),
                    ProxyMode::V2 => Some(Version::V2),
                    _ => None,
                };
                if let Some(want) = want.filter(|w| *w != header.version) {
                    return Err(HeaderFailure::Broken(format!(
                        "a PROXY {} header, where --proxy-protocol {} expects {}",
                        header.version.as_str(),
                        want.as_str(),
                        want.as_str()
                    )));
                }
                buf.drain(..used);
                return Ok(Some(header));
            }
            Err(e) if e.is_absent() && mode == ProxyMode::Optional => return Ok(None),
            Err(DecodeError::Incomplete) => {}
            Err(e) => return Err(HeaderFailure::Broken(e.to_string())),
        }
        // Never more than the longest header: the rest stays in the socket for HTTP.
        let want = (MAX_HEADER_LEN - buf.len()).min(4096);
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

#[derive(Debug)]
enum HeadFailure {
    /// Clean EOF between requests.
    Closed,
    Io(std::io::Error),
    Bad(u16, &'static str),
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

async fn write_error(stream: &mut TcpStream, status: u16, reason: &str) -> std::io::Result<()> {
    stream
        .write_all(http::error_response(status, reason).as_bytes())
        .await?;
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

    #[test]
    fn host_facts() {
        assert!(!hostname().is_empty());
        assert!(interface_ips().iter().any(|ip| ip.is_loopback()));
    }
}
