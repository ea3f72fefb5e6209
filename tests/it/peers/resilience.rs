//! The controller through outages of a real API server, on a control plane of its own (the
//! shared one's tests must not see it stop): installed as `controller_modes.rs` installs a
//! coredns-mode release (the chart's objects and RBAC, its ServiceAccount's token), then
//!
//! 1. kube-apiserver is killed for longer than the Lease lasts: the controller keeps running and
//!    keeps the block it wrote (no write, no removal), and says the API server is unreachable
//!    once per backoff step of each thing it retries, not once per retry;
//! 2. it is started again on the same port and etcd: the controller takes its Lease again, its
//!    watches resume, and the next changes are written;
//! 3. it is killed again, Ingresses are changed through a second API server on the same etcd
//!    (so the controller never sees those events), etcd is compacted past everything the
//!    controller has seen, and the first API server is started again: the resumed watch gets
//!    410 Gone, the controller lists again and writes the current hostnames, exactly, once.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::cluster::{self, client_from, Cluster};
use super::controller_modes::{
    answers, configmap_text, lease_holder, run_controller, runtime, Install, ACQUIRED, WROTE,
};
use super::coredns::corefile_fixture;
use super::{wait_for, Process};
use crate::support::temp_dir;

const RELEASE: &str = "resilience";
const CONFIGMAP: &str = "coredns-resilience";
/// Longer than the Lease (15 s), so the controller gives it up, and than several backoff steps.
const OUTAGE: Duration = Duration::from_secs(30);
const HOSTS: [&str; 3] = [
    "one.resilience.example.com",
    "two.resilience.example.com",
    "three.resilience.example.com",
];

fn dns_namespace() -> String {
    format!("{RELEASE}-dns")
}

fn apps_namespace() -> String {
    format!("{RELEASE}-apps")
}

fn message(line: &Value) -> &str {
    line["message"].as_str().unwrap_or_default()
}

/// How many of the controller's log lines from byte `from` on have a message containing `text`.
fn count(controller: &Process, from: usize, text: &str) -> usize {
    controller
        .json_lines(from)
        .iter()
        .filter(|l| message(l).contains(text))
        .count()
}

/// Server-side applies Ingress `name` (one TLS host) in the apps namespace through `client`.
async fn put_ingress(client: &Client, name: &str, host: &str) {
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": apps_namespace()},
        "spec": {
            "tls": [{"hosts": [host], "secretName": format!("{name}-tls")}],
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}
            }]}}],
        },
    });
    Api::<Ingress>::namespaced(client.clone(), &apps_namespace())
        .patch(
            name,
            &PatchParams::apply("ouroboros-tests").force(),
            &Patch::Apply(&ingress),
        )
        .await
        .unwrap_or_else(|e| panic!("applying Ingress {name}: {e}"));
}

async fn delete_ingress(client: &Client, name: &str) {
    Api::<Ingress>::namespaced(client.clone(), &apps_namespace())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Ingress {name}: {e}"));
}

/// The scenario's state: its own control plane and the controller running against it.
struct Scene {
    cluster: Cluster,
    rt: tokio::runtime::Runtime,
    install: Install,
    controller: Process,
    health: std::net::SocketAddr,
}

impl Scene {
    /// The kubeadm Corefile, the chart's objects and Ingress `one`, then the controller.
    fn start(dir: &Path) -> Option<Scene> {
        let cluster = cluster::private("resilience-control-plane")?;
        let rt = runtime();
        let install = Install::with_own_coredns(RELEASE, CONFIGMAP, &[]);
        let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
        let (controller, health) = rt.block_on(async {
            cluster.ensure_namespace(&dns_namespace()).await;
            cluster
                .apply_yaml(
                    &json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": CONFIGMAP, "namespace": dns_namespace()},
                        "data": {"Corefile": kubeadm},
                    })
                    .to_string(),
                )
                .await;
            install.apply(&cluster).await;
            cluster.ensure_namespace(&apps_namespace()).await;
            put_ingress(&cluster.admin().await, "one", HOSTS[0]).await;
            let args = install.controller_args();
            run_controller(&cluster, &install, &args, dir, "a").await
        });
        Some(Scene {
            cluster,
            rt,
            install,
            controller,
            health,
        })
    }

    /// The ConfigMap as the (running) API server has it.
    fn configmap(&self) -> ConfigMap {
        self.rt.block_on(async {
            Api::<ConfigMap>::namespaced(self.cluster.admin().await, &dns_namespace())
                .get(CONFIGMAP)
                .await
                .unwrap()
        })
    }

    /// Waits until the block answers exactly `hosts` of [`HOSTS`]; the Corefile.
    fn wait_for_block(&mut self, what: &str, hosts: &[&str]) -> String {
        let (cluster, rt) = (&self.cluster, &self.rt);
        let mut last = String::new();
        let found = wait_for(what, &mut self.controller, Duration::from_secs(90), || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns_namespace(), CONFIGMAP, "Corefile").await?;
                let answered: Vec<&str> = HOSTS.into_iter().filter(|h| answers(&text, h)).collect();
                last = text.clone();
                (answered == hosts).then_some(text)
            })
        });
        assert!(!last.is_empty());
        found
    }

    /// The Lease's holder, read from the API server.
    fn holder(&self) -> Option<String> {
        let lease = format!("{}-controller", self.install.fullname());
        self.rt
            .block_on(async { lease_holder(&self.cluster.admin().await, RELEASE, &lease).await })
    }

    /// This replica's Lease identity, from its log line taking the Lease.
    fn identity(&self) -> String {
        self.controller
            .json_lines(0)
            .iter()
            .find(|l| message(l).contains(ACQUIRED))
            .and_then(|l| l["identity"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no `{ACQUIRED}` line:\n{}", self.controller.log_text()))
    }

    /// The controller's log so far, in bytes: where the next phase's lines start.
    fn mark(&self) -> usize {
        self.controller.log_text().len()
    }
}

/// What the controller logged while the API server was down (from byte `from`): it is told
/// once per backoff step for all the retrying parts together, every line says the server is
/// unreachable, no line is an error, and it wrote nothing.
fn assert_outage_log(controller: &Process, from: usize) {
    let lines = controller.json_lines(from);
    let text = controller.log_text()[from..].to_string();
    let warnings: Vec<&Value> = lines.iter().filter(|l| l["level"] == "WARN").collect();
    assert!(
        !warnings.is_empty(),
        "nothing said about the outage:\n{text}"
    );
    for l in &lines {
        assert_ne!(
            l["level"], "ERROR",
            "an outage is no error of ours: {l}\n{text}"
        );
        assert!(
            !message(l).contains(WROTE),
            "wrote while the API server was down: {l}"
        );
    }
    // Each retrying part (a watch, the Lease) logs once per backoff step: with steps doubling
    // from about a second, at most 6 lines each in 30 s; one per retry would be 15 or more.
    let mut per_message: std::collections::BTreeMap<String, usize> = Default::default();
    for w in &warnings {
        // A watch's target is in a field, so one message is one retrying part.
        let part = format!("{} {}", message(w), w["kind"].as_str().unwrap_or_default());
        *per_message.entry(part).or_default() += 1;
        if w.get("error").is_some() {
            assert!(
                message(w).contains("is unreachable"),
                "a failed call without the hint that fits it: {w}"
            );
        }
    }
    for (part, n) in &per_message {
        assert!(*n <= 6, "{n} lines of `{part}` in {OUTAGE:?}:\n{text}");
    }
    // An unreachable server fails every part alike (four watches and the Lease): the first part
    // to reach a step says it for all, so the outage takes one line per doubling in all, not
    // one per part.
    let unreachable = warnings
        .iter()
        .filter(|w| message(w).contains("is unreachable"))
        .count();
    assert!(
        unreachable <= 6,
        "{unreachable} lines say the server is unreachable in {OUTAGE:?}:\n{text}"
    );
}

#[test]
fn the_controller_survives_api_server_restarts_and_a_compaction() {
    let dir = temp_dir("controller-resilience");
    let Some(mut s) = Scene::start(dir.path()) else {
        return;
    };
    s.wait_for_block("writing the block", &[HOSTS[0]]);
    let identity = s.identity();
    assert_eq!(s.holder(), Some(identity.clone()));
    let written = s.configmap();
    assert_eq!(count(&s.controller, 0, WROTE), 1);

    outage(&mut s, &written);

    // The API server is back: the Lease is ours again, renewed, and nothing was rewritten.
    let from = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&s.controller, from, ACQUIRED) < 2 {
        assert!(Instant::now() < deadline, "{}", s.controller.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(s.holder(), Some(identity.clone()));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        s.configmap().metadata.resource_version,
        written.metadata.resource_version,
        "the unchanged block was written again:\n{}",
        s.controller.log_text()
    );

    // Changes after the restart reach the block: the watch resumed.
    s.rt.block_on(async {
        let client = s.cluster.admin().await;
        put_ingress(&client, "two", HOSTS[1]).await;
        delete_ingress(&client, "one").await;
    });
    s.wait_for_block("writing the changes after the restart", &[HOSTS[1]]);

    compaction(&mut s);
    assert_eq!(s.holder(), Some(identity));
    assert_no_refusal_but_a_starting_servers(&s.controller);
}

/// No error logged, and no refusal but a restarted API server's: until its authorizer has
/// loaded the RBAC objects, a real kube-apiserver refuses the ServiceAccount what it allowed a
/// moment before (`RBAC: [clusterrole ... not found]`), and the controller must say that rather
/// than ask for a grant it has. Whether a request falls in that window is a matter of timing.
fn assert_no_refusal_but_a_starting_servers(controller: &Process) {
    for l in controller.json_lines(0) {
        assert_ne!(l["level"], "ERROR", "{l}");
        let text = l.to_string().to_ascii_lowercase();
        if text.contains("forbidden") {
            assert!(
                message(&l).contains("though it was allowed before"),
                "a refusal not explained by the restart: {l}"
            );
        }
    }
}

/// Kills the API server for [`OUTAGE`] and starts it again; checks what the controller did in
/// between: the block `written` is kept, `/readyz` as documented, the log.
fn outage(s: &mut Scene, written: &ConfigMap) {
    let from = s.mark();
    s.cluster.stop_apiserver();
    std::thread::sleep(OUTAGE);
    assert!(s.controller.running(), "{}", s.controller.tail());
    // Ready as a standby: the caches are listed, and it gave the Lease up (docs/cli/controller.md).
    let (status, body) = crate::support::http_get(s.health, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert_outage_log(&s.controller, from);
    assert!(
        count(&s.controller, from, "lost the lease") == 1,
        "{}",
        &s.controller.log_text()[from..]
    );
    s.cluster.start_apiserver();
    // Nothing removed or rewritten while it was down.
    assert_eq!(
        s.configmap().metadata.resource_version,
        written.metadata.resource_version
    );
}

/// Kills the API server, changes the Ingresses through a second one, compacts etcd past
/// everything the controller has seen, and starts the first again: the controller lists again
/// (410 Gone) and writes exactly the current hostnames, once.
fn compaction(s: &mut Scene) {
    let from = s.mark();
    let writes = count(&s.controller, 0, WROTE);
    s.cluster.stop_apiserver();
    let (second, kubeconfig) = s.cluster.second_apiserver();
    s.rt.block_on(async {
        let client = client_from(&kubeconfig).await;
        put_ingress(&client, "three", HOSTS[2]).await;
        delete_ingress(&client, "two").await;
    });
    drop(second);
    let revision = s.cluster.etcd_revision();
    s.cluster.compact_etcd(revision);
    s.cluster.start_apiserver();
    s.wait_for_block("writing the changes seen by the new list", &[HOSTS[2]]);
    // Let a second write show if there is one.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        count(&s.controller, 0, WROTE),
        writes + 1,
        "{}",
        &s.controller.log_text()[from..]
    );
    let log = &s.controller.log_text()[from..];
    // Said as what it is: routine, at INFO, with no failure counted and no backoff hint.
    let gone: Vec<Value> = s
        .controller
        .json_lines(from)
        .into_iter()
        .filter(|l| message(l).contains("cannot resume the Ingress watch"))
        .collect();
    assert!(
        !gone.is_empty(),
        "no 410 on the Ingress watch after the compaction:\n{log}"
    );
    for l in &gone {
        assert_eq!(l["level"], "INFO", "{l}");
        assert!(
            message(l).contains("410 Gone") && message(l).ends_with("listing again"),
            "{l}"
        );
    }
    assert!(!log.contains("unexpected API error"), "{log}");
}
