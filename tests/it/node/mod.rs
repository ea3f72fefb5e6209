//! Tests on a real Kubernetes node: kubelet and containerd run our chart's pods from an image
//! built here (`deploy/image.sh`), installed by Helm, beside real CoreDNS, nginx and a client
//! pod, with kube-proxy programming the node. Everything of a node lives in network namespaces
//! of its own and in one cgroup subtree, and is torn down when its test ends; a run that was
//! killed is swept by the next one.
//!
//! ```text
//!   lan netns: 10.213.0.1 (the node's gateway, the public DNS stub :53)
//!        │ veth
//!   node netns: eth0 10.213.0.2 (etcd, kube-apiserver :6443, controller manager, scheduler,
//!        │      kube-proxy nftables, containerd and kubelet in a mount namespace of their own)
//!        └─ cni0 10.244.0.1/24 (bridge): every pod, CoreDNS behind 10.96.0.10
//! ```
//!
//! The test process reaches the API server through a relay on 127.0.0.1 of the machine
//! (nothing is added to the machine's own network); kubectl and helm from `.ci/bin` use it.
//! Node tests run one at a time (one node up at once: memory, and one cgroup subtree each).
//! Needs root, the peers of `.ci/peers/build.sh` (kubelet, kube-controller-manager,
//! kube-scheduler, kube-apiserver, kube-proxy, etcd, CoreDNS, pause), containerd, runc and the
//! CNI plugins from apt, and our image (`deploy/image.sh`, `target/image/ouroboros.oci.tar`).
//! A missing piece skips the tests with the reason on a developer's machine and fails them
//! under `CI=true`, as for the peers. One test alone: `cargo test --test it node::hairpin`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::peers::cluster::{pki, remove_stale_dirs_tagged, write_kubeconfig, OWNER_FILE};
use crate::peers::netns::{self, forward, Netns};
use crate::peers::{binary, spawn, wait_for, Process};
use crate::support::{free_port, V4};

mod bench;
mod doctor;
mod edge;
mod hairpin;
mod images;
mod lease;
mod modes;

/// The node's address on its link, the API server's advertise address.
pub const NODE_IP: &str = "10.213.0.2";
/// The node's gateway in the lan namespace: the public DNS stub and an outside client.
pub const LAN_IP: &str = "10.213.0.1";
pub const POD_CIDR: &str = "10.244.0.0/24";
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The kube-dns Service's ClusterIP, as kubeadm fixes it.
pub const DNS_SERVICE_IP: &str = "10.96.0.10";
pub const NODE_NAME: &str = "node-1";
const ADMIN_TOKEN: &str = "node-admin-token";
/// The node's own /etc/hosts, as a Debian node starts with it.
pub const HOSTS: &str = "127.0.0.1\tlocalhost\n10.213.0.2\tnode-1\n\n# The following lines are desirable for IPv6 capable hosts\n::1     localhost ip6-localhost ip6-loopback\n";
/// Every node's directories, namespaces and cgroups start with this, then the owner's pid.
const TAG: &str = "node";

/// What a node test needs that is not there, or `None` when everything is.
fn missing() -> Option<String> {
    if !netns::available() {
        return Some("the node needs root (network and mount namespaces, cgroups)".into());
    }
    for tool in ["containerd", "runc", "ctr", "nsenter", "unshare", "openssl"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(format!(
                "{tool} is not installed (apt-get install containerd runc util-linux; .ci/run does)"
            ));
        }
    }
    if !Path::new("/usr/lib/cni/bridge").exists() {
        return Some(
            "the CNI plugins are not installed (apt-get install containernetworking-plugins)"
                .into(),
        );
    }
    for tool in ["kubectl", "helm"] {
        if !tool_path(tool).exists() {
            return Some(format!("{tool} is not in .ci/bin: run .ci/tools.sh"));
        }
    }
    if !images::ours().exists() {
        return Some(format!(
            "our image {} is not built: run deploy/image.sh",
            images::ours().display()
        ));
    }
    None
}

/// `.ci/bin/NAME`: kubectl and helm as `.ci/tools.sh` installs them.
pub fn tool_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".ci/bin")
        .join(name)
}

/// Skips (on a developer's machine) or fails (under CI=true) with `why`.
fn unavailable(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("the real node cannot run: {why}");
    }
    eprintln!("SKIPPED (real node): {why}");
}

/// The binaries a node runs, from `.ci/peers/build.sh`.
struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kubelet: PathBuf,
    kube_proxy: PathBuf,
    coredns: PathBuf,
    pause: PathBuf,
}

impl Binaries {
    fn find() -> Option<Binaries> {
        Some(Binaries {
            etcd: binary("etcd")?,
            apiserver: binary("kube-apiserver")?,
            controller_manager: binary("kube-controller-manager")?,
            scheduler: binary("kube-scheduler")?,
            kubelet: binary("kubelet")?,
            kube_proxy: binary("kube-proxy")?,
            coredns: binary("coredns")?,
            pause: binary("pause")?,
        })
    }
}

/// One node test at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cgroup v1 hierarchies (and the cgroup2 mount beside them) of this machine.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.join("cgroup.procs").exists());
    out.sort();
    out
}

/// Kills every process in the cgroup `root` (of the pids hierarchy, which holds every process
/// of a node: its daemons, the containerd shims they start, and the pods' containers), then
/// removes `root`'s directories in every hierarchy, deepest first.
fn remove_cgroup(root: &str) {
    let pids_root = Path::new("/sys/fs/cgroup/pids").join(root);
    for _ in 0..50 {
        let mut alive = 0;
        for procs in walk(&pids_root, "cgroup.procs") {
            for pid in std::fs::read_to_string(&procs).unwrap_or_default().lines() {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    alive += 1;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        if alive == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for hierarchy in cgroup_hierarchies() {
        let top = hierarchy.join(root);
        let mut dirs: Vec<PathBuf> = walk(&top, "cgroup.procs")
            .into_iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        // Deepest first: a cgroup with children cannot be removed.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            for _ in 0..20 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Every file named `name` under `dir`, at any depth.
fn walk(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else if e.file_name() == name {
                out.push(path);
            }
        }
    }
    out
}

fn pid_alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

/// Removes what nodes of runs that are gone left behind: their cgroups (and the processes in
/// them), their network namespaces and their directories.
fn sweep() {
    let prefix = format!("ouroboros-{TAG}-");
    for hierarchy in cgroup_hierarchies() {
        let Ok(entries) = std::fs::read_dir(&hierarchy) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix(&prefix) {
                if !pid_alive(pid) {
                    remove_cgroup(&name);
                }
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let owner = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('-').next());
            if owner.is_some_and(|pid| !pid_alive(pid)) {
                let _ = Command::new("ip").args(["netns", "del", &name]).output();
            }
        }
    }
    remove_stale_dirs_tagged(TAG);
    remove_unmounted_cni_netns();
}

/// The pods' network-namespace files a node made in the machine's /run/netns before they went
/// to a private tmpfs: empty files with nothing mounted on them (`ip netns list` fails on
/// each), which no runtime can use again.
fn remove_unmounted_cni_netns() {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounted: Vec<&str> = mounts.lines().filter_map(|l| l.split(' ').nth(4)).collect();
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let is_cni = e.file_name().to_string_lossy().starts_with("cni-");
        let empty = e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0);
        if is_cni && empty && !mounted.contains(&&*path.to_string_lossy()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// How often the kubelet syncs each pod (`syncFrequency`), which is when a changed ConfigMap
/// reaches the pods that mount it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PodSync {
    /// The kubelet's default, 1 minute: what a cluster runs (time-to-hairpin is measured so).
    Default,
    /// 10 seconds, for tests that only need the block loaded: a minute less of waiting each.
    Fast,
}

/// A running node with its control plane; torn down when dropped.
pub struct Node {
    pub dir: PathBuf,
    pub ns: Netns,
    /// The node's link and the public DNS stub live in it; a client outside the node too.
    pub lan: Netns,
    /// The admin's kubeconfig, through the relay on the machine's 127.0.0.1.
    pub kubeconfig: PathBuf,
    /// The root of the node's cgroups in every hierarchy.
    cgroup: String,
    /// Stopped in reverse order: kubelet first, etcd last.
    processes: Vec<Process>,
    _upstream: crate::peers::dns::Upstream,
    _one: MutexGuard<'static, ()>,
}

/// `ip netns` names are free-form; interface names are at most 15 bytes.
fn ns_name(role: &str) -> String {
    format!("ouroboros-{TAG}-{}-{role}", std::process::id())
}

impl Node {
    /// Starts a node, or returns `None` after saying what is missing (a panic under CI=true).
    pub fn start(sync: PodSync) -> Option<Node> {
        if let Some(why) = missing() {
            unavailable(&why);
            return None;
        }
        let bins = Binaries::find()?;
        let one = one_at_a_time();
        sweep();
        let started = Instant::now();
        let dir = crate::support::temp_dir(TAG).keep();
        std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string()).unwrap();
        let cgroup = format!("ouroboros-{TAG}-{}", std::process::id());
        // A cgroup left by an earlier node of this process (one whose test panicked in Drop).
        remove_cgroup(&cgroup);
        make_cgroups(&cgroup);

        // The network: the lan and the node, joined by a veth.
        let lan = Netns::new(&ns_name("lan"));
        let ns = Netns::new(&ns_name("node"));
        netns::veth(
            &lan,
            "lan0",
            &format!("{LAN_IP}/24"),
            &ns,
            "eth0",
            &format!("{NODE_IP}/24"),
        );
        ns.ip(&["route", "add", "default", "via", LAN_IP]);
        lan.ip(&["route", "add", POD_CIDR, "via", NODE_IP]);
        ns.sysctl("net.ipv4.ip_forward=1");
        // The public DNS the node's resolv.conf names (CoreDNS forwards to it): every name is
        // the load balancer's address.
        let upstream = lan.run(|| {
            let udp = std::net::UdpSocket::bind((LAN_IP, 53)).unwrap();
            let tcp = TcpListener::bind((LAN_IP, 53)).unwrap();
            (udp, tcp)
        });
        let upstream = crate::peers::dns::Upstream::serve(
            upstream.0,
            upstream.1,
            hairpin::LB_IP.parse().unwrap(),
        );
        std::fs::write(dir.join("resolv.conf"), format!("nameserver {LAN_IP}\n")).unwrap();

        let mut node = Node {
            dir: dir.clone(),
            ns,
            lan,
            kubeconfig: PathBuf::new(),
            cgroup,
            processes: Vec::new(),
            _upstream: upstream,
            _one: one,
        };
        node.control_plane(&bins);
        node.runtime(&bins, sync);
        eprintln!("node: up in {:.1?}", started.elapsed());
        Some(node)
    }

    /// `program` in the node's network namespace (nsenter: unlike `ip netns exec`, it keeps
    /// the machine's /sys, whose cgroup mounts the kubelet and containerd need).
    fn in_node(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.ns.name))
            .arg("--")
            .arg(program);
        cmd
    }

    /// `cmd` (program, arguments and environment changes) run in the node's network namespace,
    /// as a process on the node.
    pub fn on_node(&self, cmd: &Command) -> Command {
        let mut inside = self.in_node(Path::new(cmd.get_program()));
        inside.args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => inside.env(k, v),
                None => inside.env_remove(k),
            };
        }
        inside
    }

    /// The admin's kubeconfig for a process on the node (the API server's own address).
    pub fn kubeconfig_on_node(&self) -> PathBuf {
        write_kubeconfig(
            &self.dir,
            &format!("https://{NODE_IP}:6443"),
            ADMIN_TOKEN,
            "admin-on-node",
        )
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    fn start_process(&mut self, name: &str, cmd: Command) -> &mut Process {
        let process = spawn(name, cmd, &self.dir.join(format!("{name}.log")));
        self.processes.push(process);
        self.processes.last_mut().unwrap()
    }

    /// etcd, kube-apiserver, kube-controller-manager and kube-scheduler in the node's network,
    /// the admin's kubeconfig through a relay from the machine's loopback.
    fn control_plane(&mut self, bins: &Binaries) {
        self.identities();
        self.api_server(bins);
        self.controllers(bins);
    }

    /// The serving certificate, the static tokens (the admin, and each component as kubeadm's
    /// certificates would name it) and a kubeconfig for each component.
    fn identities(&self) {
        let dir = self.dir.clone();
        pki(
            &dir,
            &format!(
                "IP:127.0.0.1,IP:{NODE_IP},IP:10.96.0.1,DNS:localhost,DNS:kubernetes,\
                 DNS:kubernetes.default,DNS:kubernetes.default.svc,\
                 DNS:kubernetes.default.svc.cluster.local"
            ),
        );
        let tokens = [
            (ADMIN_TOKEN, "admin", "system:masters"),
            (
                "kubelet-token",
                &*format!("system:node:{NODE_NAME}"),
                "system:nodes",
            ),
            (
                "controller-manager-token",
                "system:kube-controller-manager",
                "",
            ),
            ("scheduler-token", "system:kube-scheduler", ""),
            ("kube-proxy-token", "system:kube-proxy", ""),
        ];
        let csv: String = tokens
            .iter()
            .map(|(token, user, group)| format!("{token},{user},uid-{user},\"{group}\"\n"))
            .collect();
        std::fs::write(dir.join("tokens.csv"), csv).unwrap();
        let inside = format!("https://{NODE_IP}:6443");
        for (token, user, _) in &tokens[1..] {
            let file = user.trim_start_matches("system:").replace(':', "-");
            write_kubeconfig(&dir, &inside, token, &file);
        }
    }

    /// etcd and kube-apiserver, and the relay to it from the machine's loopback; waits until
    /// the API server is ready.
    fn api_server(&mut self, bins: &Binaries) {
        let dir = self.dir.clone();
        let mut etcd = self.in_node(&bins.etcd);
        etcd.args(["--name", "node", "--data-dir", &self.path("etcd")])
            .args(["--listen-client-urls", "http://127.0.0.1:2379"])
            .args(["--advertise-client-urls", "http://127.0.0.1:2379"])
            .args(["--listen-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-advertise-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-cluster", "node=http://127.0.0.1:2380"])
            .args(["--unsafe-no-fsync", "--listen-metrics-urls", ""]);
        self.start_process("etcd", etcd);

        let mut api = self.in_node(&bins.apiserver);
        api.args([
            "--etcd-servers=http://127.0.0.1:2379",
            "--secure-port=6443",
            "--bind-address=0.0.0.0",
            &format!("--advertise-address={NODE_IP}"),
            &format!("--cert-dir={}", self.path("pki")),
            &format!("--tls-cert-file={}", self.path("serving.crt")),
            &format!("--tls-private-key-file={}", self.path("serving.key")),
            &format!("--client-ca-file={}", self.path("ca.crt")),
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            &format!("--token-auth-file={}", self.path("tokens.csv")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={}", self.path("sa.pub")),
            &format!("--service-account-signing-key-file={}", self.path("sa.key")),
            "--allow-privileged=true",
            // Logs and exec reach the kubelet by its address, not a DNS name nothing serves.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]);
        let apiserver = self.start_process("kube-apiserver", api);
        let _ = apiserver;

        // The relay the test process, kubectl and helm use.
        let port = free_port(V4);
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let to: SocketAddr = format!("{NODE_IP}:6443").parse().unwrap();
        self.ns.run(|| forward(listener, to));
        self.kubeconfig = write_kubeconfig(
            &dir,
            &format!("https://127.0.0.1:{port}"),
            ADMIN_TOKEN,
            "admin",
        );
        let kubeconfig = self.kubeconfig.clone();
        let apiserver = self.processes.last_mut().unwrap();
        wait_for(
            "ready (/readyz)",
            apiserver,
            Duration::from_secs(90),
            || {
                let out = Command::new(tool_path("kubectl"))
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["get", "--raw", "/readyz"])
                    .output()
                    .ok()?;
                out.status.success().then_some(())
            },
        );
    }

    /// kube-controller-manager and kube-scheduler.
    fn controllers(&mut self, bins: &Binaries) {
        let mut kcm = self.in_node(&bins.controller_manager);
        kcm.args([
            &format!(
                "--kubeconfig={}",
                self.path("kube-controller-manager.kubeconfig")
            ),
            // Each controller with its own ServiceAccount's rights, as kubeadm runs it (without
            // it the Deployment controller may not create ReplicaSets).
            "--use-service-account-credentials=true",
            &format!("--service-account-private-key-file={}", self.path("sa.key")),
            &format!("--root-ca-file={}", self.path("ca.crt")),
            "--leader-elect=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle",
            "--bind-address=127.0.0.1",
        ]);
        self.start_process("kube-controller-manager", kcm);
        let mut scheduler = self.in_node(&bins.scheduler);
        scheduler.args([
            &format!("--kubeconfig={}", self.path("kube-scheduler.kubeconfig")),
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ]);
        self.start_process("kube-scheduler", scheduler);
    }

    /// containerd (with the images imported), the kubelet, kube-proxy; waits for the node to be
    /// Ready.
    fn runtime(&mut self, bins: &Binaries, sync: PodSync) {
        let containerd = self.containerd();
        let started = Instant::now();
        images::import_all(self, bins);
        eprintln!("node: images imported in {:.1?}", started.elapsed());
        self.kubelet(bins, containerd, sync);

        let mut kube_proxy = self.in_node(&bins.kube_proxy);
        kube_proxy.args([
            &format!("--kubeconfig={}", self.path("kube-proxy.kubeconfig")),
            &format!("--hostname-override={NODE_NAME}"),
            "--proxy-mode=nftables",
            &format!("--cluster-cidr={POD_CIDR}"),
            "--conntrack-max-per-core=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ]);
        self.start_process("kube-proxy", kube_proxy);
        let started = Instant::now();
        let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        while self
            .kubectl(&["get", "node", NODE_NAME, "-o", ready])
            .stdout
            != b"True"
        {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "node {NODE_NAME} not Ready after 90 s\n{}",
                self.diagnose()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!("node: Ready in {:.1?}", started.elapsed());
    }

    /// containerd, in a mount namespace of its own and in the node's cgroup; its pid, once its
    /// socket answers.
    fn containerd(&mut self) -> u32 {
        let dir = self.dir.clone();
        for d in [
            "containerd",
            "cni/net.d",
            "cni/ipam",
            "cni/cache",
            "kubelet",
            "log",
        ] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let socket = self.path("containerd/containerd.sock");
        std::fs::write(
            dir.join("cni/net.d/10-node.conflist"),
            serde_json::json!({
                "cniVersion": "0.4.0",
                "name": "node",
                "plugins": [
                    {"type": "bridge", "bridge": "cni0", "isGateway": true, "hairpinMode": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": self.path("cni/ipam")}},
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                ],
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.join("containerd/config.toml"),
            format!(
                r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # Without CAP_SYS_RESOURCE in the machine's job, runc cannot lower oom_score_adj to -998.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
                root = self.path("containerd/root"),
                state = self.path("containerd/state"),
                opt = self.path("containerd/opt"),
                pause = images::PAUSE,
                cni = self.path("cni/net.d"),
            ),
        )
        .unwrap();
        // containerd in a mount namespace of its own (the kubelet joins it below): its mounts,
        // the pods' volumes and network-namespace files, stay there; /run/containerd, /var/log
        // the CNI cache and the pods' network-namespace files (/run/netns) are private, so
        // nothing is written to the machine's;
        // /etc/hosts is the node's own file (the etc-hosts DaemonSet's hostPath).
        std::fs::write(dir.join("hosts"), HOSTS).unwrap();
        let script = format!(
            "set -e; mount --make-rshared /; \
             mkdir -p /run/containerd && mount -t tmpfs tmpfs /run/containerd; \
             mount --bind {log} /var/log; \
             mkdir -p /var/lib/cni && mount --bind {cache} /var/lib/cni; \
             mount -t tmpfs tmpfs /run/netns; \
             mount --bind {hosts} /etc/hosts; \
             exec containerd --config {config}",
            hosts = self.path("hosts"),
            log = self.path("log"),
            cache = self.path("cni/cache"),
            config = self.path("containerd/config.toml"),
        );
        let mut containerd = Command::new("nsenter");
        containerd
            .arg(format!("--net=/run/netns/{}", self.ns.name))
            .args(["--", "unshare", "--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", &script]);
        let cgroup = self.cgroup.clone();
        let process = self.start_process("containerd", containerd);
        let pid = process.pid();
        join_cgroup(&cgroup, pid);
        let socket_path = PathBuf::from(&socket);
        wait_for("serving", process, Duration::from_secs(30), || {
            socket_path.exists().then_some(())
        });
        pid
    }

    /// The kubelet, in containerd's mount namespace (else volume mounts would not reach the
    /// containers) and the node's cgroup.
    fn kubelet(&mut self, bins: &Binaries, containerd: u32, sync: PodSync) {
        let dir = self.dir.clone();
        let socket = self.path("containerd/containerd.sock");
        let (pid, cgroup) = (containerd, self.cgroup.clone());
        let mut kubelet_config = serde_json::json!({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                // The machine's controllers are cgroup v1 (the cgroup2 mount beside them has
                // none the kubelet needs).
                "failCgroupV1": false,
                "failSwapOn": false,
                "cgroupDriver": "cgroupfs",
                "cgroupRoot": format!("/{}", self.cgroup),
                "clusterDNS": [DNS_SERVICE_IP],
                "clusterDomain": "cluster.local",
                "resolvConf": self.path("resolv.conf"),
                "address": NODE_IP,
                "readOnlyPort": 0,
                "containerRuntimeEndpoint": format!("unix://{socket}"),
                // Imported images are never pulled again: never collect them.
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                                 "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
                // Test-only: the API server's logs and exec calls need no client certificate.
                "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
                "authorization": {"mode": "AlwaysAllow"},
                "podLogsDir": self.path("log/pods"),
        });
        if sync == PodSync::Fast {
            kubelet_config["syncFrequency"] = serde_json::json!("10s");
        }
        std::fs::write(dir.join("kubelet.yaml"), kubelet_config.to_string()).unwrap();
        let mut kubelet = Command::new("nsenter");
        kubelet
            .args(["-t", &pid.to_string(), "-m", "-n", "--"])
            .arg(&bins.kubelet)
            .args([
                &format!("--config={}", self.path("kubelet.yaml")),
                &format!("--kubeconfig={}", self.path("node-node-1.kubeconfig")),
                &format!("--root-dir={}", self.path("kubelet")),
                &format!("--node-ip={NODE_IP}"),
                &format!("--hostname-override={NODE_NAME}"),
            ]);
        let kubelet = self.start_process("kubelet", kubelet);
        let pid = kubelet.pid();
        join_cgroup(&cgroup, pid);
    }

    /// kubectl as the admin, with `args`.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(tool_path("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }

    /// kubectl that must succeed: its stdout, or a panic with its stderr and the node's state.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        if !out.status.success() {
            panic!(
                "kubectl {}: {}\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                self.diagnose()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) {
        let mut child = Command::new(tool_path("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// helm (4) as the admin, with `args`, from the repository's root (where `charts/` is).
    pub fn helm(&self, args: &[&str]) -> Output {
        Command::new(tool_path("helm"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .output()
            .unwrap()
    }

    /// Pods, events and the kubelet's last lines: what a failed wait shows.
    pub fn diagnose(&self) -> String {
        let run = |args: &[&str]| {
            let out = self.kubectl(args);
            format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let mut text = run(&["get", "pods", "-A", "-o", "wide"]);
        text += &run(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
        for p in &self.processes {
            if p.name == "kubelet" || p.name == "containerd" {
                text += &format!("--- {} ---\n{}\n", p.name, p.tail());
            }
        }
        text
    }
}

/// Polls `check` every 500 ms until it holds, for at most `within`; panics with `what`.
pub fn eventually(node: &Node, what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < within,
            "{what}: not after {within:?}\n{}",
            node.diagnose()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Creates `root` in every hierarchy, with cpuset's CPUs and memory nodes copied from the top
/// (a cpuset cgroup without them takes no process).
fn make_cgroups(root: &str) {
    for hierarchy in cgroup_hierarchies() {
        for dir in [hierarchy.join(root), hierarchy.join(root).join("daemons")] {
            let _ = std::fs::create_dir_all(&dir);
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(v) = std::fs::read_to_string(hierarchy.join(f)) {
                    let _ = std::fs::write(dir.join(f), v.trim());
                }
            }
        }
    }
}

/// Moves `pid` into `root/daemons` of the pids hierarchy, so that teardown finds it and every
/// process it starts (containerd's shims); the other hierarchies keep the machine's placement.
fn join_cgroup(root: &str, pid: u32) {
    let procs = Path::new("/sys/fs/cgroup/pids")
        .join(root)
        .join("daemons/cgroup.procs");
    std::fs::write(&procs, pid.to_string()).unwrap_or_else(|e| panic!("{}: {e}", procs.display()));
}

impl Drop for Node {
    fn drop(&mut self) {
        let started = Instant::now();
        // The kubelet and kube-proxy first, then the pods and shims (every process in the
        // node's cgroup), then the control plane; the namespaces go with their handles.
        while let Some(p) = self.processes.pop() {
            drop(p);
        }
        remove_cgroup(&self.cgroup);
        if std::thread::panicking() {
            // The logs of a failed test stay for a look; the next node's sweep removes them.
            eprintln!("node: logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        eprintln!("node: torn down in {:.1?}", started.elapsed());
    }
}
