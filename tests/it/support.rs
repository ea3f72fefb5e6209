//! Real peers for integration tests: nginx and HAProxy speaking the PROXY protocol, the built
//! `ouroboros proxy` and `ouroboros whoami`, temp dirs, free ports, poll-connect waits and small
//! HTTP clients. Every process is killed when its handle drops.
#![allow(dead_code)]

pub use nix::sys::signal::Signal;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const V4: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
pub const V6: IpAddr = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);

/// How long a test waits for a server to come up, answer or log.
pub const DEADLINE: Duration = Duration::from_secs(15);

pub use tempfile::TempDir;

/// A finished command's stdout when it succeeded, else its stderr: what a client (curl) printed
/// as Ok(body) or Err(message).
pub fn body_or_message(out: std::process::Output) -> Result<String, String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A fresh directory under the system temp dir, named after `tag`, removed on drop.
pub fn temp_dir(tag: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ouroboros-{tag}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("creating a temp dir for {tag}: {e}"))
}

/// A port free on `ip` now, for TCP and UDP (for servers that take a port in their config).
pub fn free_port(ip: IpAddr) -> u16 {
    free_ports(ip, 1)[0]
}

/// `n` distinct ports free on `ip` now, for TCP and UDP alike, and never handed out twice in
/// this process.
///
/// Below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768 on by default):
/// a port the kernel hands out for `:0` can be taken again at once by any test's outgoing
/// socket, a DNS query's UDP source port above all, between this check and the server's own
/// bind; CoreDNS then fails with "address already in use". Ports below that range are only
/// ever bound by asking for them. Each process starts at its own offset, so two test binaries
/// running at once seldom try the same port (and skip it if the other bound it first).
pub fn free_ports(ip: IpAddr, n: usize) -> Vec<u16> {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let end = ephemeral_start().max(FIRST + 1_000);
    let span = end - FIRST;
    let offset = std::process::id() * 97 % span;
    let any = match ip {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..span {
        if out.len() == n {
            break;
        }
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (offset + i) % span).unwrap();
        // Free on every address of the family, for both protocols: servers such as CoreDNS
        // bind the wildcard address.
        let free = [ip, any]
            .iter()
            .all(|a| TcpListener::bind((*a, port)).is_ok() && UdpSocket::bind((*a, port)).is_ok());
        if free {
            out.push(port);
        }
    }
    assert_eq!(out.len(), n, "no {n} free ports on {ip} below {end}");
    out
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Gives `s` a read deadline of [`DEADLINE`] unless it has one already, and returns it: a read
/// that would otherwise block forever fails (see [`read_ok`]) instead of hanging the test.
pub fn with_read_deadline(s: TcpStream) -> TcpStream {
    ensure_read_deadline(&s);
    s
}

/// [`with_read_deadline`] on a borrowed stream.
pub fn ensure_read_deadline(s: &TcpStream) {
    if s.read_timeout().unwrap().is_none() {
        s.set_read_timeout(Some(DEADLINE)).unwrap();
    }
}

/// Connects to `addr` (one attempt) with a read deadline of [`DEADLINE`].
/// A log-line predicate: the message starts with `prefix` (messages often go on with details).
pub fn message_starts(prefix: &str) -> impl Fn(&serde_json::Value) -> bool + '_ {
    move |v| v["message"].as_str().is_some_and(|m| m.starts_with(prefix))
}

pub fn connect(addr: impl std::net::ToSocketAddrs + std::fmt::Debug) -> TcpStream {
    let s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect {addr:?}: {e}"));
    with_read_deadline(s)
}

/// Whether a read failed because its deadline passed (`set_read_timeout` reports `WouldBlock`
/// on Unix, `TimedOut` elsewhere).
pub fn is_deadline(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Unwraps a read's result; a read that hit its deadline fails the test naming `what`.
#[track_caller]
pub fn read_ok<T>(what: &str, r: std::io::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) if is_deadline(&e) => {
            panic!("{what}: nothing arrived within the read deadline ({e})")
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Awaits `fut` (an async read, typically), failing the test naming `what` if it has not
/// finished within [`DEADLINE`] instead of waiting forever.
pub fn within<F: std::future::Future>(
    what: &str,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    let what = what.to_string();
    async move {
        tokio::time::timeout(DEADLINE, fut)
            .await
            .unwrap_or_else(|_| panic!("{what}: not done within {DEADLINE:?}"))
    }
}

/// Connects, retrying until `addr` accepts or `deadline` passes; reads time out after
/// [`DEADLINE`].
pub fn connect_with_deadline(addr: SocketAddr, deadline: Duration) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => {
                s.set_read_timeout(Some(DEADLINE)).unwrap();
                return s;
            }
            Err(e) if start.elapsed() > deadline => {
                panic!("{addr} not accepting after {deadline:?}: {e}")
            }
            // Poll interval, not a wait for readiness: the loop ends as soon as a connect works.
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Polls connect until `addr` accepts; `None` once `child` has exited or [`DEADLINE`] passed.
fn poll_connect(addr: SocketAddr, child: &mut Child) -> Option<TcpStream> {
    let start = Instant::now();
    loop {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            return Some(s);
        }
        if child.try_wait().unwrap().is_some() || start.elapsed() > DEADLINE {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn send_signal(child: &Child, sig: Signal) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    if let Err(e) = nix::sys::signal::kill(pid, sig) {
        panic!("kill -{sig} {}: {e}", child.id());
    }
}

/// A child's stderr, one JSON log line at a time, collected by a thread. Waiters are woken by
/// each new line and by the child's exit (EOF).
#[derive(Clone, Default)]
pub struct Logs(Arc<(Mutex<LogState>, Condvar)>);

#[derive(Default)]
struct LogState {
    lines: Vec<serde_json::Value>,
    closed: bool,
}

impl Logs {
    fn collect(child: &mut Child) -> Logs {
        let stderr = child.stderr.take().expect("stderr is piped");
        let logs = Logs::default();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let (lock, cv) = &*sink.0;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "message": line, "raw": true }));
                lock.lock().unwrap().lines.push(v);
                cv.notify_all();
            }
            lock.lock().unwrap().closed = true;
            cv.notify_all();
        });
        logs
    }

    pub fn all(&self) -> Vec<serde_json::Value> {
        self.0 .0.lock().unwrap().lines.clone()
    }

    /// Waits for a line matching `pred`; panics with every line on timeout or exit.
    pub fn wait(
        &self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
        timeout: Duration,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap();
        loop {
            if let Some(v) = state.lines.iter().find(|v| pred(v)) {
                return v.clone();
            }
            let now = Instant::now();
            if state.closed || now >= deadline {
                let why = if state.closed { "exited" } else { "timed out" };
                panic!(
                    "{what} {why} before the expected log line; logs:\n{:#?}",
                    state.lines
                );
            }
            state = cv.wait_timeout(state, deadline - now).unwrap().0;
        }
    }

    /// Waits until the child closed its stderr (it exited); false on timeout.
    fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap();
        while !state.closed {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = cv.wait_timeout(state, deadline - now).unwrap().0;
        }
        true
    }
}

/// Raises this process's open-files limit (children inherit it).
pub fn raise_fd_limit() {
    ouroboros::accept::raise_fd_limit().expect("raising the open-files limit");
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
        let dir = temp_dir("nginx");
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        let [http_port, stream_port] = free_ports(V4, 2)[..] else {
            unreachable!()
        };
        let user = if nix::unistd::geteuid().is_root() {
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
                match poll_connect(SocketAddr::new(ip, port), &mut child) {
                    // Say "no addresses" before closing, so the stream server does not log a
                    // broken header for the readiness check itself.
                    Some(mut c) => {
                        let _ = c.write_all(b"PROXY UNKNOWN\r\n");
                    }
                    None => {
                        // Most likely a port race: try again with new ports.
                        eprintln!(
                            "{}",
                            std::fs::read_to_string(&error_log).unwrap_or_default()
                        );
                        kill(&mut child);
                        return None;
                    }
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

/// HAProxy 2.6 (/usr/sbin/haproxy) in the foreground with its own config in a temp dir.
pub struct Haproxy {
    child: Child,
    /// The first address waited for at start-up.
    pub port: u16,
    _dir: TempDir,
}

impl Haproxy {
    /// `mode http`, `bind ... accept-proxy` on 127.0.0.1 and [::1], answering
    /// `%[src]:%[src_port] %[dst]:%[dst_port]` (addresses as taken from the PROXY header).
    pub fn start() -> Haproxy {
        for _ in 0..5 {
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
            // A port race makes haproxy exit: try again with a new port.
            if let Ok(h) = Haproxy::try_start(&conf, &[(V4, port).into(), (V6, port).into()]) {
                return h;
            }
        }
        panic!("haproxy did not start");
    }

    /// Starts haproxy with `config` (checked with `haproxy -c` first) and waits until every
    /// address in `ready` accepts connections.
    pub fn with_config(config: &str, ready: &[SocketAddr]) -> Haproxy {
        Haproxy::try_start(config, ready).unwrap_or_else(|stderr| {
            panic!("haproxy did not listen on {ready:?} with:\n{config}\nstderr:\n{stderr}")
        })
    }

    /// Err carries what haproxy wrote to stderr.
    fn try_start(config: &str, ready: &[SocketAddr]) -> Result<Haproxy, String> {
        let dir = temp_dir("haproxy");
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, config).unwrap();
        let check = Command::new("/usr/sbin/haproxy")
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .expect("running /usr/sbin/haproxy -c (apt install haproxy)");
        assert!(
            check.status.success(),
            "haproxy rejects the config:\n{config}\n{}",
            String::from_utf8_lossy(&check.stderr)
        );
        let mut child = Command::new("/usr/sbin/haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .expect("running /usr/sbin/haproxy (apt install haproxy)");
        for addr in ready {
            if poll_connect(*addr, &mut child).is_none() {
                kill(&mut child);
                return Err(std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default());
            }
        }
        Ok(Haproxy {
            child,
            port: ready.first().map_or(0, |a| a.port()),
            _dir: dir,
        })
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
    logs: Logs,
}

impl Proxy {
    /// Starts `ouroboros proxy ARGS --listen-health 127.0.0.1:0` and waits until it listens.
    /// Listener flags default to port 0 on 127.0.0.1 unless given in `args`.
    pub fn start(args: &[&str]) -> Proxy {
        Proxy::spawn(Proxy::command(args))
    }

    /// Both listeners on `listen`, relaying to `target` (`--target-http-port`,
    /// `--target-https-port` from `ports`), plus `extra` flags.
    pub fn relaying(listen: &str, target: IpAddr, ports: (u16, u16), extra: &[&str]) -> Proxy {
        let (target, http, https) = (target.to_string(), ports.0.to_string(), ports.1.to_string());
        let mut args = vec![
            "--listen-http",
            listen,
            "--listen-https",
            listen,
            "--target-host",
            &target,
            "--target-http-port",
            &http,
            "--target-https-port",
            &https,
        ];
        args.extend_from_slice(extra);
        Proxy::start(&args)
    }

    /// The command `start` runs, for tests that need to adjust it.
    pub fn command(args: &[&str]) -> Command {
        let mut cmd = Proxy::bare_command();
        for (flag, default) in [
            ("--listen-http", "127.0.0.1:0"),
            ("--listen-https", "127.0.0.1:0"),
        ] {
            if !args.contains(&flag) {
                cmd.args([flag, default]);
            }
        }
        cmd.args(args);
        cmd
    }

    /// `ouroboros --log-format json proxy --listen-health 127.0.0.1:0` with no listener flags,
    /// for tests that set them through the environment.
    pub fn bare_command() -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
        cmd.args([
            "--log-format",
            "json",
            "proxy",
            "--listen-health",
            "127.0.0.1:0",
        ])
        .env_remove("OUROBOROS_LOG_LEVEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        cmd
    }

    pub fn spawn(mut cmd: Command) -> Proxy {
        let mut child = cmd.spawn().expect("running the ouroboros binary");
        let logs = Logs::collect(&mut child);
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
            DEADLINE,
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
        self.logs.all()
    }

    /// Waits for a log line matching `pred`; panics with the logs on timeout or exit.
    pub fn wait_log(
        &mut self,
        pred: impl Fn(&serde_json::Value) -> bool,
        timeout: Duration,
    ) -> serde_json::Value {
        self.logs.wait("ouroboros proxy", pred, timeout)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn signal(&self, sig: Signal) {
        send_signal(&self.child, sig);
    }

    /// The number of threads the process runs now (from /proc).
    pub fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("Threads: line in /proc/PID/status")
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        assert!(
            self.logs.wait_closed(timeout),
            "proxy still running after {timeout:?}; logs:\n{:#?}",
            self.logs()
        );
        self.child.wait().unwrap()
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

/// `ouroboros whoami` as a child process, listening on the address its log announces.
pub struct Whoami {
    child: Child,
    pub addr: SocketAddr,
    logs: Logs,
}

impl Whoami {
    /// Starts `ouroboros --log-format json --log-level debug whoami --listen LISTEN ARGS`.
    pub fn start(listen: &str, args: &[&str]) -> Whoami {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ouroboros"))
            .args([
                "--log-format",
                "json",
                "--log-level",
                "debug",
                "whoami",
                "--listen",
                listen,
            ])
            .args(args)
            .env_remove("OUROBOROS_WHOAMI_LISTEN")
            .env_remove("OUROBOROS_WHOAMI_PROXY_PROTOCOL")
            .env_remove("OUROBOROS_WHOAMI_READ_TIMEOUT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning ouroboros whoami");
        let logs = Logs::collect(&mut child);
        let mut me = Whoami {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            logs,
        };
        let line = me.wait_for_log(|v| v["message"] == "listening");
        me.addr = line["address"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line}"));
        me
    }

    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.logs.all()
    }

    /// Waits (on the log pipe, no polling) for a log line matching `pred`.
    pub fn wait_for_log(&mut self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        self.logs.wait("ouroboros whoami", pred, DEADLINE)
    }

    pub fn connect(&self) -> TcpStream {
        connect_with_deadline(self.addr, DEADLINE)
    }

    /// SIGTERM, then the exit status (killed if it does not exit within the deadline).
    pub fn terminate(mut self) -> ExitStatus {
        send_signal(&self.child, Signal::SIGTERM);
        if !self.logs.wait_closed(DEADLINE) {
            kill(&mut self.child);
            panic!("whoami still running {DEADLINE:?} after SIGTERM");
        }
        self.child.wait().unwrap()
    }
}

impl Drop for Whoami {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// One HTTP/1.1 response read off a keep-alive connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

/// Reads one response (Content-Length framed) from `stream`; `None` if it closes first.
pub fn read_response(stream: &mut TcpStream) -> Option<Response> {
    ensure_read_deadline(stream);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => read_ok("reading a response", Err(e)),
        }
    }
    let head = String::from_utf8(head).unwrap();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    read_ok("reading a response body", stream.read_exact(&mut body));
    Some(Response { status, head, body })
}

/// Sends `bytes` then reads one response.
pub fn exchange(stream: &mut TcpStream, bytes: &[u8]) -> Option<Response> {
    stream.write_all(bytes).unwrap();
    read_response(stream)
}

/// True once the peer has closed: EOF or reset, with no response bytes.
pub fn closed_without_reply(stream: &mut TcpStream) -> bool {
    ensure_read_deadline(stream);
    let mut buf = [0u8; 1];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) => read_ok("waiting for close", Err(e)),
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
    ensure_read_deadline(s);
    let what = "reading a PROXY header";
    let mut head = vec![0u8; 16];
    read_ok(what, s.read_exact(&mut head[..5]));
    if &head[..5] == b"PROXY" {
        head.truncate(5);
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n") {
            read_ok(what, s.read_exact(&mut b));
            head.push(b[0]);
            assert!(head.len() <= 107, "v1 header too long: {head:?}");
        }
        return head;
    }
    read_ok(what, s.read_exact(&mut head[5..16]));
    assert_eq!(&head[..12], b"\r\n\r\n\0\r\nQUIT\n", "not a PROXY header");
    let len = u16::from_be_bytes([head[14], head[15]]) as usize;
    let mut rest = vec![0u8; len];
    read_ok(what, s.read_exact(&mut rest));
    head.extend_from_slice(&rest);
    head
}

/// The lines between ouroboros' BEGIN and END markers, trimmed (for the DNS editor tests).
pub fn block_lines(text: &str) -> Vec<String> {
    use ouroboros::dns::{BEGIN_MARKER, END_MARKER};
    let mut v = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t == END_MARKER {
            inside = false;
        }
        if inside {
            v.push(t.to_string());
        }
        if t == BEGIN_MARKER {
            inside = true;
        }
    }
    v
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
