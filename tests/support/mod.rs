//! Real peers for integration tests: nginx and HAProxy speaking the PROXY protocol, the built
//! `ouroboros` binary, temp dirs, free ports and poll-connect waits. Every process is killed
//! when its handle drops.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const V4: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
pub const V6: IpAddr = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ouroboros-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port the OS just handed out on `ip` (for servers that take a port in their config).
pub fn free_port(ip: IpAddr) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls connect until `addr` accepts or the deadline passes; fails early if `child` died.
pub fn wait_for_port(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited with {status} before listening on {addr}");
        }
        assert!(Instant::now() < deadline, "{what} never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Raises this process's open-files limit (children inherit it).
pub fn raise_fd_limit() {
    // SAFETY: plain get/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

/// nginx 1.22 in the foreground with its own config: an http server (`listen ...
/// proxy_protocol`) and a stream server, both answering
/// `$proxy_protocol_addr:$proxy_protocol_port $proxy_protocol_server_addr:$proxy_protocol_server_port`.
pub struct Nginx {
    child: Child,
    pub http_port: u16,
    pub stream_port: u16,
    pub error_log: PathBuf,
    _dir: TempDir,
}

impl Nginx {
    /// Listens on 127.0.0.1 and [::1] (same port numbers).
    pub fn start() -> Nginx {
        Nginx::start_tagged("")
    }

    /// Like [`Nginx::start`], with `tag` (plus a space) before every answer, to tell several
    /// instances apart.
    pub fn start_tagged(tag: &str) -> Nginx {
        let prefix = if tag.is_empty() {
            String::new()
        } else {
            format!("{tag} ")
        };
        for _ in 0..5 {
            if let Some(n) = Nginx::try_start(&prefix) {
                return n;
            }
        }
        panic!("nginx did not start (see the error log printed above)");
    }

    fn try_start(prefix: &str) -> Option<Nginx> {
        let dir = TempDir::new("nginx");
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        let http_port = free_port(V4);
        let stream_port = free_port(V4);
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let answer = "{prefix}$proxy_protocol_addr:$proxy_protocol_port $proxy_protocol_server_addr:$proxy_protocol_server_port\\n"
            .replace("{prefix}", prefix);
        let conf = format!(
            r#"load_module /usr/lib/nginx/modules/ngx_stream_module.so;
master_process off;
{user}
pid {d}/nginx.pid;
error_log {d}/error.log info;
worker_rlimit_nofile 10000;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{http_port} proxy_protocol;
    listen [::1]:{http_port} proxy_protocol;
    location / {{ default_type text/plain; return 200 "{answer}"; }}
  }}
}}
stream {{
  server {{
    listen 127.0.0.1:{stream_port} proxy_protocol;
    listen [::1]:{stream_port} proxy_protocol;
    return "{answer}";
  }}
}}
"#
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut child = Command::new("/usr/sbin/nginx")
            .args(["-p", &d, "-c"])
            .arg(&conf_path)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("running /usr/sbin/nginx (apt install nginx libnginx-mod-stream)");
        let error_log = dir.path().join("error.log");
        for port in [http_port, stream_port] {
            for ip in [V4, V6] {
                let deadline = Instant::now() + Duration::from_secs(15);
                loop {
                    // Say "no addresses" before closing, so the stream server does not log a
                    // broken header for the readiness check itself.
                    if let Ok(mut c) = TcpStream::connect((ip, port)) {
                        let _ = c.write_all(b"PROXY UNKNOWN\r\n");
                        break;
                    }
                    if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                        // Most likely a port race: try again with new ports.
                        eprintln!(
                            "{}",
                            std::fs::read_to_string(&error_log).unwrap_or_default()
                        );
                        kill(&mut child);
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        Some(Nginx {
            child,
            http_port,
            stream_port,
            error_log,
            _dir: dir,
        })
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(&self.error_log).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// HAProxy 2.6 in the foreground, `mode http`, `bind ... accept-proxy`, answering
/// `%[src]:%[src_port] %[dst]:%[dst_port]` (addresses as taken from the PROXY header).
pub struct Haproxy {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl Haproxy {
    pub fn start() -> Haproxy {
        for _ in 0..5 {
            let dir = TempDir::new("haproxy");
            let port = free_port(V4);
            let conf = format!(
                r#"global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fe
  bind 127.0.0.1:{port} accept-proxy
  bind [::1]:{port} accept-proxy
  http-request return status 200 content-type text/plain lf-string "%[src]:%[src_port] %[dst]:%[dst_port]\n"
"#
            );
            let conf_path = dir.path().join("haproxy.cfg");
            std::fs::write(&conf_path, conf).unwrap();
            let mut child = Command::new("/usr/sbin/haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("running /usr/sbin/haproxy (apt install haproxy)");
            let deadline = Instant::now() + Duration::from_secs(15);
            let up = loop {
                if [V4, V6]
                    .iter()
                    .all(|ip| TcpStream::connect((*ip, port)).is_ok())
                {
                    break true;
                }
                if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            if up {
                return Haproxy {
                    child,
                    port,
                    _dir: dir,
                };
            }
            kill(&mut child);
        }
        panic!("haproxy did not start");
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// The built `ouroboros proxy` as a child process with JSON logs collected from stderr.
pub struct Proxy {
    child: Child,
    pub http: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub health: SocketAddr,
    logs: Arc<(Mutex<Vec<serde_json::Value>>, Condvar)>,
}

impl Proxy {
    /// Starts `ouroboros proxy ARGS --listen-health 127.0.0.1:0` and waits until it listens.
    /// Listener flags default to port 0 on 127.0.0.1 unless given in `args`.
    pub fn start(args: &[&str]) -> Proxy {
        Proxy::spawn(Proxy::command(args))
    }

    /// The command `start` runs, for tests that need to adjust it.
    pub fn command(args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
        cmd.args([
            "--log-format",
            "json",
            "proxy",
            "--listen-health",
            "127.0.0.1:0",
        ]);
        for (flag, default) in [
            ("--listen-http", "127.0.0.1:0"),
            ("--listen-https", "127.0.0.1:0"),
        ] {
            if !args.contains(&flag) {
                cmd.args([flag, default]);
            }
        }
        cmd.args(args)
            .env_remove("OUROBOROS_LOG_LEVEL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn spawn(mut cmd: Command) -> Proxy {
        let mut child = cmd.spawn().expect("running the ouroboros binary");
        let stderr = child.stderr.take().unwrap();
        let logs: Arc<(Mutex<Vec<serde_json::Value>>, Condvar)> = Arc::default();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "message": line, "raw": true }));
                sink.0.lock().unwrap().push(v);
                sink.1.notify_all();
            }
        });
        let mut p = Proxy {
            child,
            http: None,
            https: None,
            health: "0.0.0.0:0".parse().unwrap(),
            logs,
        };
        let addr = |v: &serde_json::Value| v["addr"].as_str().unwrap().parse().unwrap();
        let health = p.wait_log(
            |v| v["message"] == "listening" && v["listener"] == "health",
            Duration::from_secs(15),
        );
        p.health = addr(&health);
        for v in p.logs() {
            if v["message"] == "listening" {
                match v["listener"].as_str() {
                    Some("http") => p.http = Some(addr(&v)),
                    Some("https") => p.https = Some(addr(&v)),
                    _ => {}
                }
            }
        }
        p
    }

    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.logs.0.lock().unwrap().clone()
    }

    /// Waits for a log line matching `pred`; panics with the logs on timeout or exit.
    pub fn wait_log(
        &mut self,
        pred: impl Fn(&serde_json::Value) -> bool,
        timeout: Duration,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.logs;
        let mut logs = lock.lock().unwrap();
        loop {
            if let Some(v) = logs.iter().find(|v| pred(v)) {
                return v.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                panic!("expected log line not seen; logs:\n{logs:#?}");
            }
            logs = cv.wait_timeout(logs, deadline - now).unwrap().0;
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: sends a signal to our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, sig);
        }
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "proxy still running after {timeout:?}; logs:\n{:#?}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// GET on the admin listener: (status, body).
    pub fn admin(&self, path: &str) -> (u16, String) {
        http_get(self.health, path)
    }

    /// The value of one metric series from /metrics (exact name with labels).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.admin("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// A one-shot HTTP/1.0 GET: (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    parse_response(&resp)
}

/// A one-shot HTTP/1.0 GET that also returns the client socket's own address.
pub fn http_get_via(addr: SocketAddr) -> (SocketAddr, u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let me = s.local_addr().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (status, body) = parse_response(&resp);
    (me, status, body)
}

fn parse_response(resp: &str) -> (u16, String) {
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {resp:?}"));
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

/// Formats an address the way nginx and HAProxy print `addr:port` (IPv6 without brackets).
pub fn plain(addr: SocketAddr) -> String {
    format!("{}:{}", addr.ip(), addr.port())
}

/// FNV-1a over a stream, for comparing what was sent with what arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn update(&mut self, data: &[u8]) {
        for b in data {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), generated in chunks.
pub struct Pattern(u64);

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        Pattern(seed | 1)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            let bytes = self.0.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Reads a PROXY header (v1 line or v2 binary) off `s` byte by byte and returns it.
pub fn read_proxy_header(s: &mut TcpStream) -> Vec<u8> {
    let mut head = vec![0u8; 16];
    s.read_exact(&mut head[..5]).unwrap();
    if &head[..5] == b"PROXY" {
        head.truncate(5);
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
            assert!(head.len() <= 107, "v1 header too long: {head:?}");
        }
        return head;
    }
    s.read_exact(&mut head[5..16]).unwrap();
    assert_eq!(&head[..12], b"\r\n\r\n\0\r\nQUIT\n", "not a PROXY header");
    let len = u16::from_be_bytes([head[14], head[15]]) as usize;
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).unwrap();
    head.extend_from_slice(&rest);
    head
}

/// A listener whose accept queue is full: the kernel drops further SYNs, so connecting to it
/// hangs until the caller's timeout. Returns the socket and the connections filling the queue.
pub fn black_hole() -> (socket2::Socket, Vec<TcpStream>, u16) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((V4, 0)).into()).unwrap();
    s.listen(0).unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    let mut filled = Vec::new();
    // Backlog 0 admits one connection; connect until one no longer completes quickly.
    for _ in 0..4 {
        match TcpStream::connect_timeout(&SocketAddr::from((V4, port)), Duration::from_millis(200))
        {
            Ok(c) => filled.push(c),
            Err(_) => break,
        }
    }
    (s, filled, port)
}
