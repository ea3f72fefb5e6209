//! Tests against real peers: CoreDNS (the newest release and the oldest we support), etcd,
//! kube-apiserver and kube-proxy, built from the Go module proxy by `.ci/peers/build.sh` and
//! found in `$OUROBOROS_PEERS_DIR` (default `.ci/peers/bin`).
//!
//! A peer that is not there skips its tests with the reason (the build's own message when it
//! failed) on a developer's machine, and fails them under `CI=true`, so a broken build can never
//! turn into a silent run of no peer test. Run them alone with
//! `.ci/peers/build.sh && cargo test --test it peers::`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

mod answers;
mod api_rules;
mod client_ip;
pub mod cluster;
mod controller;
mod controller_modes;
pub mod coredns;
mod coredns_auto;
mod crd_sources;
pub mod dns;
mod edge;
mod edge_kube_proxy;
mod edge_l2;
mod edge_lb;
mod hairpin;
mod header_probe;
mod ingress_class;
pub mod netns;
pub mod probe;
mod resilience;
mod shutdown;

pub fn peers_dir() -> PathBuf {
    std::env::var_os("OUROBOROS_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/peers/bin"))
}

/// The peer `name`'s binary, or `None` after saying why it is missing (a panic under CI=true).
pub fn binary(name: &str) -> Option<PathBuf> {
    let dir = peers_dir();
    let path = dir.join(name);
    if path.exists() {
        return Some(path);
    }
    let why = match std::fs::read_to_string(dir.join(format!("{name}.failed"))) {
        Ok(build_error) => build_error,
        Err(_) => format!(
            "peer {name} is not built ({} has no {name}): run .ci/peers/build.sh",
            dir.display()
        ),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED (real peer missing): {why}");
    None
}

/// A peer process, killed when dropped; its stdout and stderr go to `log`.
pub struct Process {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log lines that are JSON (`--log-format=json`), from byte `from` on.
    pub fn json_lines(&self, from: usize) -> Vec<serde_json::Value> {
        self.log_text()
            .get(from..)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Sends it SIGTERM (the way the kubelet stops a pod).
    pub fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last lines of its log, for a failure message.
    pub fn tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `cmd` with its output in `log`. Every peer is spawned by one thread that lives as long
/// as the test binary, with SIGKILL as its parent-death signal (`sys::kill_with_parent`), so the
/// peers shared by all tests (the control plane, never dropped) die with the run.
pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Process {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("peer-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The senders live in a static: never reached.
                loop {
                    std::thread::park();
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    let out = File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    crate::sys::kill_with_parent(&mut cmd);
    let (tx, rx) = mpsc::channel();
    spawner.lock().unwrap().send((cmd, tx)).unwrap();
    let child = rx
        .recv()
        .unwrap()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    Process {
        name: name.to_string(),
        child,
        log: log.to_path_buf(),
    }
}

/// Polls `ready` every 100 ms until it returns `Some`, for at most `timeout`; panics naming
/// `what` and the process's last log lines otherwise (or when it exits first).
pub fn wait_for<T>(
    what: &str,
    process: &mut Process,
    timeout: Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = ready() {
            return v;
        }
        if !process.running() {
            panic!(
                "{} exited while waiting for {what}:\n{}",
                process.name,
                process.tail()
            );
        }
        if start.elapsed() > timeout {
            panic!(
                "{} not {what} after {timeout:?}:\n{}",
                process.name,
                process.tail()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
