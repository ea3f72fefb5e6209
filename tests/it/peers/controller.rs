//! The controller against a real API server, as the chart installs it: every object of
//! `helm template` applied (so the real server validates the chart too), the controller run with
//! the chart's own arguments and its ServiceAccount's token, so the chart's RBAC is all it may
//! do; what it writes is then loaded into real CoreDNS.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, ListParams, PostParams};
use simple_dns::TYPE;

use super::cluster::{self, Cluster};
use super::coredns::{corefile_fixture, Scene};
use super::{binary, spawn, wait_for, Process};
use crate::chart::{chart_dir, tool};
use crate::support::{free_port, temp_dir, V4};

const NAMESPACE: &str = "ouroboros";

/// `helm template` of the chart into `namespace` with `sets`.
fn chart(namespace: &str, sets: &[&str]) -> String {
    let mut cmd = Command::new(tool("helm"));
    cmd.args(["template", "ouroboros"]).arg(chart_dir()).args([
        "--namespace",
        namespace,
        "--no-hooks",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    crate::common::ok(crate::common::run(&mut cmd, None))
}

/// The controller container's arguments in the rendered chart.
fn controller_args(yaml: &str) -> Vec<String> {
    use serde::Deserialize;
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let v = serde_json::Value::deserialize(doc).unwrap();
        if v["kind"] == "Deployment" && v["metadata"]["name"] == "ouroboros-controller" {
            let args = &v["spec"]["template"]["spec"]["containers"][0]["args"];
            return serde_json::from_value(args.clone()).unwrap();
        }
    }
    panic!("no controller Deployment in the chart:\n{yaml}");
}

/// Runs the controller with the chart's arguments as ServiceAccount `ouroboros-controller`
/// (health on a free loopback port instead of the pod's :8081).
async fn run_controller(
    cluster: &Cluster,
    args: &[String],
    dir: &std::path::Path,
) -> (Process, SocketAddr) {
    let kubeconfig = cluster
        .service_account_kubeconfig(NAMESPACE, "ouroboros-controller", dir)
        .await;
    let health: SocketAddr = (V4, free_port(V4)).into();
    let mut cmd = crate::common::command("controller");
    for a in &args[1..] {
        if a.starts_with("--listen-health=") {
            cmd.arg(format!("--listen-health={health}"));
        } else {
            cmd.arg(a);
        }
    }
    cmd.arg("--kubeconfig").arg(&kubeconfig);
    (
        spawn("controller", cmd, &dir.join("controller.log")),
        health,
    )
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[test]
fn controller_with_the_charts_rbac_writes_a_corefile_real_coredns_answers() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let Some(coredns) = binary("coredns") else {
        return;
    };
    let dir = temp_dir("controller-real-api");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let yaml = chart(NAMESPACE, &[]);
    let (proxy_ip, mut controller, health) = rt.block_on(async {
        cluster.ensure_namespace(NAMESPACE).await;
        cluster.apply_yaml(&yaml).await;
        let client = cluster.admin().await;
        let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "coredns", "namespace": "kube-system"},
            "data": {"Corefile": kubeadm},
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        cluster.ensure_namespace("shop").await;
        cluster
            .apply_yaml(
                &serde_json::json!({
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "Ingress",
                    "metadata": {"name": "shop", "namespace": "shop"},
                    "spec": {
                        "tls": [{"hosts": ["shop.example.com", "*.apps.example.com", "203.0.113.9"], "secretName": "shop-tls"}],
                        "rules": [{"host": "shop.example.com", "http": {"paths": [{
                            "path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": "web", "port": {"number": 80}}}
                        }]}}],
                    },
                })
                .to_string(),
            )
            .await;
        let proxy = Api::<Service>::namespaced(client, NAMESPACE)
            .get("ouroboros-proxy")
            .await
            .unwrap();
        let proxy_ip = proxy.spec.unwrap().cluster_ip.unwrap();
        let (controller, health) = run_controller(cluster, &controller_args(&yaml), dir.path()).await;
        (proxy_ip, controller, health)
    });

    // The block appears in the real ConfigMap.
    let corefile = wait_for(
        "writing the Corefile",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let api = Api::<ConfigMap>::namespaced(cluster.admin().await, "kube-system");
                let text = api.get("coredns").await.ok()?.data?.remove("Corefile")?;
                text.contains("# === BEGIN ouroboros").then_some(text)
            })
        },
    );
    assert!(
        corefile.contains(&proxy_ip),
        "answers with the proxy Service's ClusterIP {proxy_ip}:\n{corefile}"
    );

    // Ready, and the rejected name was reported on its Ingress as an Event the RBAC let it write.
    let (status, _) = crate::support::http_get(health, "/readyz");
    assert_eq!(status, 200, "{}", controller.tail());
    let reasons = wait_for(
        "publishing the Event",
        &mut controller,
        Duration::from_secs(30),
        || {
            rt.block_on(async {
                let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
                    cluster.admin().await,
                    "shop",
                );
                let list = events.list(&ListParams::default()).await.ok()?;
                let reasons: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("shop")
                    })
                    .filter_map(|e| e.reason.clone())
                    .collect();
                (!reasons.is_empty()).then_some(reasons)
            })
        },
    );
    assert!(
        reasons.iter().any(|r| r.contains("Rejected")),
        "{reasons:?}"
    );

    // Nothing the API server refused and no error in the whole log. The server's refusal and
    // our hint both say "forbidden"; a bare "403" would match ports and timestamps.
    let log = controller.log_text();
    for line in log.lines() {
        assert!(!line.contains("forbidden"), "refused by RBAC: {line}");
        assert!(!line.contains("\"level\":\"ERROR\""), "{line}");
    }

    // What it wrote, loaded in real CoreDNS, answers with the proxy.
    let Some(scene) = Scene::new("controller-real-api-coredns") else {
        return;
    };
    let dns = scene.coredns(&coredns, "from-configmap", &corefile);
    for name in ["shop.example.com.", "x.apps.example.com."] {
        let a = dns.ask(name, TYPE::A, false);
        assert_eq!(a.answers, vec![format!("A {proxy_ip}")], "{name}");
    }
}
