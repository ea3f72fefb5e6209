//! `--coredns-answer auto` against a real API server: the controller reads CoreDNS's version from
//! the image tag of the Deployment `coredns`, writes the form it picks, and rewrites the block in
//! one write of the ConfigMap when CoreDNS is upgraded; and it reads the container's memory
//! limit, under which no Corefile whose reload would exceed it is written. Each test in a
//! namespace of its own (the CoreDNS ConfigMap and Deployment there), so the other tests'
//! controllers never see that Deployment.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

use super::cluster;
use super::coredns::corefile_fixture;
use super::{spawn, wait_for};
use crate::support::{free_port, http_get, temp_dir, V4};

const NS: &str = "coredns-auto";

/// CoreDNS's Deployment in `ns`: its image and its container's memory limit.
fn deployment(ns: &str, image: &str, limit: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "coredns", "namespace": ns, "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {"containers": [{"name": "coredns", "image": image,
                    "resources": {"limits": {"memory": limit}}}]},
            },
        },
    }))
    .unwrap()
}

/// `ns` with the kubeadm Corefile, CoreDns 1.9.4's Deployment (AKS's tag) with the memory limit
/// `limit`, and an Ingress.
async fn setup(cluster: &cluster::Cluster, ns: &str, limit: &str) -> kube::Client {
    cluster.ensure_namespace(ns).await;
    let client = cluster.admin().await;
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "coredns", "namespace": ns},
        "data": {"Corefile": kubeadm},
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&pp, &cm)
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(
            &pp,
            &deployment(
                ns,
                "mcr.microsoft.com/oss/kubernetes/coredns:v1.9.4-hotfix.20240704",
                limit,
            ),
        )
        .await
        .unwrap();
    cluster
        .apply_yaml(
            &serde_json::json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": "shop", "namespace": ns},
                "spec": {
                    "tls": [{"hosts": ["shop.example.com", "*.apps.example.com"], "secretName": "t"}],
                    "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
                },
            })
            .to_string(),
        )
        .await;
    client
}

/// The controller (`auto`) for the CoreDNS ConfigMap and the Ingresses of `ns`, its admin
/// endpoint on `health`.
fn controller(
    cluster: &cluster::Cluster,
    ns: &str,
    dir: &std::path::Path,
    health: SocketAddr,
) -> super::Process {
    let mut cmd = crate::common::command("controller");
    cmd.args([
        "--kubeconfig",
        cluster.admin_kubeconfig().to_str().unwrap(),
        "--coredns-namespace",
        ns,
        "--include-namespace",
        ns,
        "--proxy-ip",
        "10.96.0.20",
        "--leader-elect=false",
        "--cluster-domain",
        "cluster.local",
    ]);
    cmd.arg(format!("--listen-health={health}"));
    spawn("controller", cmd, &dir.join("controller.log"))
}

/// Upgrades CoreDNS to 1.11.3 and watches the ConfigMap from `rv` (the first write) until five
/// seconds after the view form appears (or 45 s): how many writes, and the last Corefile.
async fn upgrade(client: &kube::Client, cms: &Api<ConfigMap>, rv: &str) -> (usize, String) {
    let wp = WatchParams::default().fields("metadata.name=coredns");
    let mut watch = cms.watch(&wp, rv).await.unwrap().boxed();
    let image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "coredns", "image": "registry.k8s.io/coredns/coredns:v1.11.3"}
    ]}}}});
    Api::<Deployment>::namespaced(client.clone(), NS)
        .patch(
            "coredns",
            &PatchParams::default(),
            &Patch::Strategic(&image),
        )
        .await
        .unwrap();
    let mut modified = Vec::new();
    // The re-read is every 30 s; then a few seconds more, to see any second write.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
    let mut seen_view = None;
    loop {
        let next = tokio::time::timeout_at(deadline, watch.next()).await;
        let Ok(Some(event)) = next else { break };
        if let WatchEvent::Modified(cm) = event.unwrap() {
            let text = cm
                .data
                .unwrap_or_default()
                .remove("Corefile")
                .unwrap_or_default();
            if text.contains("view ouroboros {") && seen_view.is_none() {
                seen_view = Some(tokio::time::Instant::now());
            }
            modified.push(text);
        }
        if seen_view.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break;
        }
    }
    (modified.len(), modified.pop().unwrap_or_default())
}

/// CoreDNS 1.9.4 (AKS's tag): the pair. Upgraded to 1.11.3 (kubeadm's): the view form, in one
/// write (one MODIFIED event of the ConfigMap), within the controller's re-read.
#[test]
fn an_upgraded_coredns_gets_the_view_form_in_one_write() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let dir = temp_dir("coredns-auto");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(setup(cluster, NS, "170Mi"));
    let health: SocketAddr = (V4, free_port(V4)).into();
    let mut controller = controller(cluster, NS, dir.path(), health);
    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let read = || {
        rt.block_on(async {
            let cm = cms.get("coredns").await.ok()?;
            let text = cm.data?.remove("Corefile")?;
            Some((text, cm.metadata.resource_version?))
        })
    };
    let (first, rv) = wait_for(
        "the first write",
        &mut controller,
        Duration::from_secs(60),
        || read().filter(|(t, _)| t.contains("# === BEGIN ouroboros")),
    );
    assert!(first.contains("    template IN A example.com {"), "{first}");
    assert!(!first.contains("view ouroboros"), "{first}");
    let log = controller.log_text();
    assert!(
        log.contains("CoreDNS answer form template: --coredns-answer auto: CoreDNS 1.9.4"),
        "{log}"
    );
    let metric = |form: &str| {
        let (_, metrics) = http_get(health, "/metrics");
        let line = format!(
            "ouroboros_controller_coredns_answer_form{{form=\"{form}\",basis=\"version\"}} 1"
        );
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
        // One series: the pick now.
        let series = metrics
            .lines()
            .filter(|l| l.starts_with("ouroboros_controller_coredns_answer_form{"))
            .count();
        assert_eq!(series, 1, "{metrics}");
    };
    metric("template");

    // Upgrade CoreDNS; watch the ConfigMap from the first write on.
    let (events, text) = rt.block_on(upgrade(&client, &cms, &rv));
    assert_eq!(
        events,
        1,
        "one write of the ConfigMap:\n{}",
        controller.tail()
    );
    assert!(text.starts_with("# === BEGIN ouroboros"), "{text}");
    assert!(text.contains("view ouroboros {"), "{text}");
    assert!(
        !text.contains("template IN A example.com"),
        "the pair is gone: {text}"
    );
    let log = controller.log_text();
    assert!(
        log.contains("CoreDNS answer form view: --coredns-answer auto: CoreDNS 1.11.3"),
        "{log}"
    );
    metric("view");
    assert!(
        !log.contains("WARN"),
        "no warning while the version is known: {log}"
    );
}

/// CoreDNS with a memory limit of 60 MiB, under which even a small block's reload is predicted
/// not to fit (52 MiB and a 20% margin): nothing is written, the ConfigMap keeps its Corefile,
/// a BlockReloadTooLarge Event on it says why and what to do. The limit raised to 170 MiB
/// (kubeadm's), the block is written at the next read of the Deployment.
#[test]
fn a_block_whose_reload_exceeds_the_memory_limit_is_not_written() {
    const NS: &str = "coredns-guard";
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let dir = temp_dir("coredns-guard");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(setup(cluster, NS, "60Mi"));
    let health: SocketAddr = (V4, free_port(V4)).into();
    let mut controller = controller(cluster, NS, dir.path(), health);
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS);
    let note = wait_for(
        "the Event",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("BlockReloadTooLarge"))
                    .and_then(|e| e.note)
            })
        },
    );
    assert!(
        note.contains("over CoreDNS's memory limit of 60 MiB"),
        "{note}"
    );
    assert!(note.contains("raise the memory limit"), "{note}");
    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let corefile = || {
        rt.block_on(async {
            let cm = cms.get("coredns").await.unwrap();
            cm.data.unwrap().remove("Corefile").unwrap()
        })
    };
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    assert_eq!(corefile(), kubeadm, "nothing written");
    let (status, body) = http_get(health, "/readyz");
    assert_eq!(status, 503, "not ready while the write is refused: {body}");
    assert!(body.contains("OOM-killed"), "{body}");
    let (_, metrics) = http_get(health, "/metrics");
    assert!(
        metrics.contains("result=\"reload_too_large\""),
        "the syncs metric counts it:\n{metrics}"
    );

    let limit = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "coredns", "resources": {"limits": {"memory": "170Mi"}}}
    ]}}}});
    rt.block_on(Api::<Deployment>::namespaced(client.clone(), NS).patch(
        "coredns",
        &PatchParams::default(),
        &Patch::Strategic(&limit),
    ))
    .unwrap();
    let written = wait_for(
        "the write under 170 MiB",
        &mut controller,
        Duration::from_secs(60),
        || Some(corefile()).filter(|t| t.contains("# === BEGIN ouroboros")),
    );
    assert!(written.contains("template IN A example.com"), "{written}");
}
