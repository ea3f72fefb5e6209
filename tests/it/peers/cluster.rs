//! A real control plane, etcd and kube-apiserver, started once per test binary (a start costs
//! 10-20 s on two cores) and shared by the tests, each in namespaces of its own. Authentication
//! is a static token file for the admin and the API server's own TokenRequest for service
//! accounts, so a test can run the controller as the chart's ServiceAccount with the chart's RBAC
//! as its only rights (`--authorization-mode RBAC`).
//!
//! What is missing without kube-controller-manager, so no test waits for it: namespaces are never
//! finalized (tests use fresh names), no garbage collection, no EndpointSlices for Services, no
//! ServiceAccount token controller.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use ouroboros::kube_client::Calls;

use super::{binary, spawn, wait_for, Process};
use crate::support::{free_ports, temp_dir, V4};

/// Dual-stack, as a dual-stack cluster's: a Service is IPv4 unless it asks for IPv6
/// (`ipFamilyPolicy`), so single-stack tests see what they always did.
pub const SERVICE_CIDR: &str = "10.96.0.0/12,fd00:10:96::/112";
const ADMIN_TOKEN: &str = "admin-token-for-tests";

pub struct Cluster {
    pub server: String,
    dir: PathBuf,
    /// etcd's client URL, for the test's own requests to it (revision, compaction).
    etcd_url: String,
    apiserver_binary: PathBuf,
    api_port: u16,
    /// API server starts so far, numbering their logs.
    starts: u32,
    _etcd: Process,
    /// `None` while a test has it stopped.
    apiserver: Option<Process>,
}

/// The shared control plane, started on first use; `None` (after saying why) when etcd or
/// kube-apiserver is not built.
pub fn shared() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER.get_or_init(|| private("control-plane")).as_ref()
}

/// A control plane of the caller's own, for a test that stops and restarts its API server or
/// compacts its etcd (which the shared one's tests would see); `None` (after saying why) when
/// etcd or kube-apiserver is not built. Stopped when dropped.
pub fn private(tag: &str) -> Option<Cluster> {
    let etcd = binary("etcd")?;
    let apiserver = binary("kube-apiserver")?;
    Some(Cluster::start(tag, &etcd, &apiserver))
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a serving certificate for `sans` (an openssl subjectAltName list, such as
/// `IP:127.0.0.1,DNS:localhost`) signed by it (rustls refuses a self-signed leaf as its own
/// anchor), and the service-account signing key pair, with openssl.
pub fn pki(dir: &Path, sans: &str) {
    let openssl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    // `openssl req` making a new P-256 key, unencrypted, into KEY, then ARGS.
    let req = |key: &str, args: &[&str]| {
        let mut all = vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ];
        all.extend(["-nodes", "-keyout", key]);
        all.extend(args);
        openssl(&all)
    };
    req(
        "ca.key",
        &[
            "-x509",
            "-out",
            "ca.crt",
            "-days",
            "7",
            "-subj",
            "/CN=ouroboros-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    req(
        "serving.key",
        &["-out", "serving.csr", "-subj", "/CN=kube-apiserver"],
    );
    std::fs::write(
        dir.join("serving.ext"),
        format!(
            "subjectAltName={sans}\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "serving.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "serving.crt",
        "-days",
        "7",
        "-extfile",
        "serving.ext",
    ]);
    openssl(&["genrsa", "-out", "sa.key", "2048"]);
    openssl(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
}

/// Every control plane's directory starts with this tag (then the test's own).
const DIR_TAG: &str = "peers";
/// The pid of the test process that owns a control plane's directory.
pub const OWNER_FILE: &str = "owner.pid";

/// Removes the directories of control planes whose test process has exited: a leftover is
/// one whose owner's pid is no longer running, or one that names none and is over a minute
/// old (a run killed before writing it; a younger one may be another run's, starting now).
fn remove_stale_dirs() {
    remove_stale_dirs_tagged(DIR_TAG);
}

/// [`remove_stale_dirs`] for the directories tagged `tag` (whose owner wrote [`OWNER_FILE`]).
pub fn remove_stale_dirs_tagged(tag: &str) {
    let prefix = format!("ouroboros-{tag}-");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let stale = match std::fs::read_to_string(entry.path().join(OWNER_FILE)) {
            Ok(pid) => !Path::new("/proc").join(pid.trim()).exists(),
            Err(_) => entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(60))),
        };
        if stale {
            // Best effort: a directory another user owns stays, and costs only disk.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Cluster {
    fn start(tag: &str, etcd: &Path, apiserver: &Path) -> Cluster {
        // Kept for the whole run (the processes write into it, and the shared one is a static,
        // never dropped); a later run removes it once its test process is gone (126 MiB of
        // etcd each).
        remove_stale_dirs();
        let dir = temp_dir(&format!("{DIR_TAG}-{tag}")).keep();
        std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string()).unwrap();
        pki(&dir, "IP:127.0.0.1,DNS:localhost");
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{ADMIN_TOKEN},admin,uid-admin,\"system:masters\"\n"),
        )
        .unwrap();
        let ports = free_ports(V4, 3);
        let (client_port, peer_port, api_port) = (ports[0], ports[1], ports[2]);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(etcd);
        cmd.args(["--name", "default", "--data-dir"])
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .arg("--unsafe-no-fsync");
        let mut etcd = spawn("etcd", cmd, &dir.join("etcd.log"));
        let etcd_addr: SocketAddr = format!("127.0.0.1:{client_port}").parse().unwrap();
        wait_for(
            "accepting connections",
            &mut etcd,
            Duration::from_secs(30),
            || std::net::TcpStream::connect(etcd_addr).ok(),
        );
        let server = format!("https://127.0.0.1:{api_port}");
        write_kubeconfig(&dir, &server, ADMIN_TOKEN, "admin");
        let mut cluster = Cluster {
            server,
            dir,
            etcd_url,
            apiserver_binary: apiserver.to_path_buf(),
            api_port,
            starts: 0,
            _etcd: etcd,
            apiserver: None,
        };
        cluster.start_apiserver();
        cluster
    }

    /// Starts kube-apiserver on the cluster's port (again, after [`Cluster::stop_apiserver`]),
    /// with the same etcd and keys, and waits until it is ready.
    pub fn start_apiserver(&mut self) {
        assert!(
            self.apiserver.is_none(),
            "kube-apiserver is running already"
        );
        let process = self.spawn_apiserver(self.api_port, &self.admin_kubeconfig());
        self.apiserver = Some(process);
    }

    /// Stops kube-apiserver (SIGKILL, as a crashed or evicted one) and waits until it is gone;
    /// etcd keeps running.
    pub fn stop_apiserver(&mut self) {
        let process = self.apiserver.take().expect("kube-apiserver is running");
        drop(process);
    }

    /// A second kube-apiserver on another port, on the same etcd, and a kubeconfig of the
    /// admin for it: writes through it are unseen by clients of the first (stopped) one until
    /// they list again. Stopped when dropped.
    pub fn second_apiserver(&mut self) -> (Process, PathBuf) {
        let port = crate::support::free_port(V4);
        let server = format!("https://127.0.0.1:{port}");
        let kubeconfig = write_kubeconfig(&self.dir, &server, ADMIN_TOKEN, "admin-second");
        (self.spawn_apiserver(port, &kubeconfig), kubeconfig)
    }

    fn spawn_apiserver(&mut self, port: u16, kubeconfig: &Path) -> Process {
        self.starts += 1;
        let dir = &self.dir;
        let path = |f: &str| dir.join(f).display().to_string();
        let mut cmd = Command::new(&self.apiserver_binary);
        cmd.args([
            &format!("--etcd-servers={}", self.etcd_url),
            &format!("--secure-port={port}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--cert-dir={}", path("pki")),
            &format!("--tls-cert-file={}", path("serving.crt")),
            &format!("--tls-private-key-file={}", path("serving.key")),
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=RBAC",
            &format!("--token-auth-file={}", path("tokens.csv")),
            // One issuer for every instance: the tokens one issued are valid on the others.
            &format!("--service-account-issuer={}", self.server),
            &format!("--service-account-key-file={}", path("sa.pub")),
            &format!("--service-account-signing-key-file={}", path("sa.key")),
            // No token controller runs, so no default ServiceAccount would ever appear for
            // the admission plugin to wait for.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
        ]);
        let log = dir.join(format!("kube-apiserver-{}.log", self.starts));
        let mut apiserver = spawn("kube-apiserver", cmd, &log);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        wait_for(
            "ready (/readyz)",
            &mut apiserver,
            Duration::from_secs(90),
            || {
                rt.block_on(async {
                    let client = client_from(kubeconfig).await;
                    let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
                    client.request_text(req).await.ok()
                })
            },
        );
        apiserver
    }

    /// etcd's current revision (through its JSON gateway: a range request's header).
    pub fn etcd_revision(&self) -> i64 {
        // Any key: the header carries the store's revision whether or not it exists.
        let reply = self.etcd_post("/v3/kv/range", &serde_json::json!({"key": "AA=="}));
        reply["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no revision in etcd's reply {reply}"))
    }

    /// Compacts etcd's history up to `revision` (physically, so it is gone when this returns):
    /// a watch from an older resourceVersion then gets 410 Gone, as after the API server's own
    /// periodic compaction in a long-running cluster.
    pub fn compact_etcd(&self, revision: i64) {
        self.etcd_post(
            "/v3/kv/compaction",
            &serde_json::json!({"revision": revision.to_string(), "physical": true}),
        );
    }

    /// POSTs `body` to etcd's gRPC gateway at `path`; its JSON reply (panics on an error).
    fn etcd_post(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        use std::io::{Read, Write};
        let addr = self.etcd_url.trim_start_matches("http://");
        let body = body.to_string();
        let mut s = std::net::TcpStream::connect(addr)
            .unwrap_or_else(|e| panic!("connecting to etcd {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        let (head, json) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "etcd {path} {body}: {reply}"
        );
        serde_json::from_str(json).unwrap_or_else(|e| panic!("etcd {path}: {e}: {json}"))
    }

    /// A kubeconfig with the admin's token (`system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    pub async fn admin(&self) -> Client {
        client_from(&self.admin_kubeconfig()).await
    }

    /// Creates namespace `name` unless it exists.
    pub async fn ensure_namespace(&self, name: &str) {
        self.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
        ))
        .await;
    }

    /// Server-side applies every document of `yaml` (JSON is YAML too) as the admin, as
    /// `kubectl apply --server-side` would: the real server validates and defaults each one.
    pub async fn apply_yaml(&self, yaml: &str) {
        use kube::api::{Api, DynamicObject, Patch, PatchParams};
        use kube::core::{ApiResource, GroupVersionKind};
        use serde::Deserialize;
        let client = self.admin().await;
        for doc in yaml_serde::Deserializer::from_str(yaml) {
            let value = serde_json::Value::deserialize(doc).unwrap();
            if value.is_null() {
                continue;
            }
            let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
            let types = obj.types.clone().expect("apiVersion and kind");
            let gvk = GroupVersionKind::try_from(&types).unwrap();
            // The plural the API serves, for the kinds the tests apply.
            let lower = gvk.kind.to_ascii_lowercase();
            // A consonant's y becomes ies (policies); a vowel's stays (gateways).
            let plural = if let Some(stem) = lower
                .strip_suffix('y')
                .filter(|stem| !stem.ends_with(['a', 'e', 'o', 'u']))
            {
                format!("{stem}ies")
            } else if lower.ends_with('s') {
                format!("{lower}es")
            } else {
                format!("{lower}s")
            };
            let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
            let name = obj.metadata.name.clone().expect("metadata.name");
            let api: Api<DynamicObject> = match &obj.metadata.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            api.patch(
                &name,
                &PatchParams::apply("ouroboros-tests").force(),
                &Patch::Apply(&value),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {} {name}: {e}", gvk.kind));
        }
    }

    /// Applies every `*.yaml` file of `dir` (a CRD set as its project publishes it, see
    /// `.ci/peers/build.sh`), then waits until the server reports each CRD `Established` and
    /// answers a list of each served version, so that what a test creates next never races the
    /// server's setup of the new resources.
    pub async fn install_crds(&self, dir: &Path) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::Api;
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let mut crds = Vec::new();
        for file in &files {
            let yaml = std::fs::read_to_string(file).unwrap();
            self.apply_yaml(&yaml).await;
            use serde::Deserialize;
            for doc in yaml_serde::Deserializer::from_str(&yaml) {
                let v = serde_json::Value::deserialize(doc).unwrap();
                if v["kind"] == "CustomResourceDefinition" {
                    crds.push(serde_json::from_value::<CustomResourceDefinition>(v).unwrap());
                }
            }
        }
        assert!(!crds.is_empty(), "no CRD in {}", dir.display());
        let client = self.admin().await;
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let pause = || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap();
            loop {
                let live = api.get(&name).await.unwrap();
                let established = live
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "CRD {name} not Established after 60 s"
                );
                pause().await;
            }
            let (group, plural) = (&crd.spec.group, &crd.spec.names.plural);
            for version in crd.spec.versions.iter().filter(|v| v.served) {
                let path = format!("/apis/{group}/{}/{plural}?limit=1", version.name);
                loop {
                    let req = http::Request::get(&path).body(Vec::new()).unwrap();
                    match client.request_text(req).await {
                        Ok(_) => break,
                        Err(e) => assert!(
                            std::time::Instant::now() < deadline,
                            "{path} not served after 60 s: {e}"
                        ),
                    }
                    pause().await;
                }
            }
        }
    }

    /// A kubeconfig in `dir` whose token the API server issued for ServiceAccount
    /// `namespace/name` (TokenRequest), so RBAC decides what it may do.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        dir: &Path,
    ) -> PathBuf {
        let admin = self.admin().await;
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let req = http::Request::post(format!(
            "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
        let reply: serde_json::Value = admin
            .request(req)
            .await
            .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"));
        let token = reply["status"]["token"].as_str().unwrap();
        std::fs::copy(self.dir.join("ca.crt"), dir.join("ca.crt")).unwrap();
        write_kubeconfig(dir, &self.server, token, name)
    }
}

/// `dir/<user>.kubeconfig` for `server` with `token`, trusting `dir/ca.crt`.
pub fn write_kubeconfig(dir: &Path, server: &str, token: &str, user: &str) -> PathBuf {
    let path = dir.join(format!("{user}.kubeconfig"));
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server,
            "certificate-authority": dir.join("ca.crt"),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    });
    // JSON is YAML: kubeconfig readers take it as it is.
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

pub async fn client_from(kubeconfig: &Path) -> Client {
    // The test's own reads and watches; kube's connect timeout.
    let timeout = Duration::from_secs(30);
    ouroboros::kube_client::client(Some(kubeconfig), timeout, Calls::Watches)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
