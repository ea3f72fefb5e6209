//! Helpers for the whoami and PROXY-header tests: the `ouroboros whoami` child process, a
//! HAProxy child with its own config, free ports and poll-connect. Included with `#[path]`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(15);

/// A port free on `ip` right now (for configs that need a port before the server starts).
pub fn free_port(ip: IpAddr) -> u16 {
    TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("binding {ip}:0 for a free port: {e}"))
}

/// Connects, retrying until `addr` accepts or the deadline passes.
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

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Default)]
struct LogState {
    lines: Vec<String>,
    /// The child's stderr reached EOF: it exited.
    closed: bool,
}

type Lines = Arc<(Mutex<LogState>, Condvar)>;

/// `ouroboros whoami` as a child process, listening on the address its log announces.
pub struct Whoami {
    child: Child,
    pub addr: SocketAddr,
    logs: Lines,
}

impl Whoami {
    /// Starts `ouroboros --log-format json whoami --listen <listen> <args...>`.
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
        let logs: Lines = Arc::new((Mutex::new(LogState::default()), Condvar::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let (lock, cvar) = &*sink;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lock.lock().unwrap().lines.push(line);
                cvar.notify_all();
            }
            lock.lock().unwrap().closed = true;
            cvar.notify_all();
        });
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

    /// Every log line so far, as JSON.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        let state = self.logs.0.lock().unwrap();
        state
            .lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits (on the log pipe, no polling) for a log line matching `pred`.
    pub fn wait_for_log(&mut self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let start = Instant::now();
        let (lock, cvar) = &*self.logs;
        let mut state = lock.lock().unwrap();
        loop {
            if let Some(v) = state
                .lines
                .iter()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| pred(v))
            {
                return v;
            }
            if state.closed {
                let status = self.child.wait().unwrap();
                panic!(
                    "whoami exited with {status}; logs:\n{}",
                    state.lines.join("\n")
                );
            }
            let left = DEADLINE.checked_sub(start.elapsed()).unwrap_or_else(|| {
                panic!(
                    "no matching log line within {DEADLINE:?}; logs:\n{}",
                    state.lines.join("\n")
                )
            });
            // Woken by each new line and by the child's exit.
            state = cvar.wait_timeout(state, left).unwrap().0;
        }
    }

    pub fn connect(&self) -> TcpStream {
        connect_with_deadline(self.addr, DEADLINE)
    }

    /// SIGTERM, then the exit status (killed if it does not exit within the deadline).
    pub fn terminate(mut self) -> ExitStatus {
        send_signal(self.child.id(), libc::SIGTERM);
        let start = Instant::now();
        let (lock, cvar) = &*self.logs;
        let mut state = lock.lock().unwrap();
        while !state.closed {
            let Some(left) = DEADLINE.checked_sub(start.elapsed()) else {
                let _ = self.child.kill();
                panic!("whoami still running {DEADLINE:?} after SIGTERM");
            };
            state = cvar.wait_timeout(state, left).unwrap().0;
        }
        drop(state);
        self.child.wait().unwrap()
    }
}

impl Drop for Whoami {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send_signal(pid: u32, signal: i32) {
    // SAFETY: plain syscall on our own child's pid.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(
        rc,
        0,
        "kill -{signal} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// HAProxy 2.6 (/usr/sbin/haproxy) in the foreground with a config written to a temp dir.
pub struct Haproxy {
    child: Child,
    _dir: TempDir,
}

impl Haproxy {
    /// Starts haproxy and waits until every address in `ready` accepts connections.
    pub fn start(config: &str, ready: &[SocketAddr]) -> Haproxy {
        let dir = TempDir::new("ouroboros-haproxy");
        let cfg = dir.0.join("haproxy.cfg");
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
        let child = Command::new("/usr/sbin/haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning /usr/sbin/haproxy");
        let me = Haproxy { child, _dir: dir };
        for addr in ready {
            drop(connect_with_deadline(*addr, DEADLINE));
        }
        me
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading a response: {e}"),
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
    stream.read_exact(&mut body).unwrap();
    Some(Response { status, head, body })
}

/// Sends `bytes` then reads one response.
pub fn exchange(stream: &mut TcpStream, bytes: &[u8]) -> Option<Response> {
    stream.write_all(bytes).unwrap();
    read_response(stream)
}

/// True once the peer has closed: EOF or reset, with no response bytes.
pub fn closed_without_reply(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) => panic!("waiting for close: {e}"),
    }
}
