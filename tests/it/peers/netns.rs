//! Network namespaces as the test's hosts (a node, pods, a load balancer): created with
//! iproute2, joined by veth pairs, deleted when dropped. Needs root; nothing here touches the
//! machine's own namespace but the names under /run/netns and /etc/netns.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;

use nix::sched::{setns, CloneFlags};

/// One network namespace, with loopback up; deleted (with its veth ends, routes and iptables
/// rules) when dropped.
pub struct Netns {
    pub name: String,
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this process may create network namespaces (root).
pub fn available() -> bool {
    nix::unistd::geteuid().is_root()
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        ip(&["netns", "add", name]);
        let ns = Netns { name: name.into() };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip ARGS` inside the namespace.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// `sysctl -w KEY=VALUE` inside the namespace (net.* keys are per namespace).
    pub fn sysctl(&self, kv: &str) {
        let out = self.command("sysctl").args(["-qw", kv]).output().unwrap();
        assert!(
            out.status.success(),
            "sysctl {kv} in {}: {out:?}",
            self.name
        );
    }

    /// `program` run inside the namespace (`ip netns exec`, which also lays /etc/netns/NAME/*
    /// over /etc, e.g. resolv.conf).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// `cmd` (program, arguments and environment changes) run inside the namespace.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut inside = self.command(cmd.get_program());
        inside.args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => inside.env(k, v),
                None => inside.env_remove(k),
            };
        }
        inside
    }

    /// Runs `f` on a thread inside the namespace: sockets it creates belong to the namespace,
    /// wherever they are used afterwards. Threads `f` starts stay inside it too.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                setns(&file, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// `/etc/netns/NAME/resolv.conf` with `nameserver` (what a pod's resolv.conf points at).
    pub fn resolv_conf(&self, nameserver: &str) {
        let dir = self.etc_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("resolv.conf"),
            format!("nameserver {nameserver}\n"),
        )
        .unwrap();
    }

    fn etc_dir(&self) -> PathBuf {
        PathBuf::from("/etc/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(self.etc_dir());
    }
}

/// A veth pair: `a_if` in `a` with `a_addr` (CIDR), `b_if` in `b` with `b_addr`, both up.
pub fn veth(a: &Netns, a_if: &str, a_addr: &str, b: &Netns, b_if: &str, b_addr: &str) {
    ip(&[
        "link", "add", a_if, "netns", &a.name, "type", "veth", "peer", "name", b_if, "netns",
        &b.name,
    ]);
    a.ip(&["addr", "add", a_addr, "dev", a_if]);
    b.ip(&["addr", "add", b_addr, "dev", b_if]);
    a.ip(&["link", "set", a_if, "up"]);
    b.ip(&["link", "set", b_if, "up"]);
}

/// Relays TCP from `listener` (bound in some namespace) to `to` as reached from this thread's
/// namespace: how processes in the test's namespaces reach the API server on the machine's
/// loopback without any address or route added outside them.
pub fn forward(listener: TcpListener, to: SocketAddr) {
    std::thread::spawn(move || {
        for inbound in listener.incoming().flatten() {
            let Ok(outbound) = TcpStream::connect(to) else {
                continue;
            };
            for (mut from, mut into) in [
                (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                (outbound, inbound),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}
