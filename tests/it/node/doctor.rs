//! `doctor` against the real node with the chart installed: from outside the cluster with a
//! kubeconfig (as an operator runs it), no check fails; `doctor --probe` from the node (a host
//! that routes to the ClusterIPs) says `ok` for the hairpinned name; `doctor client-ip` says
//! the client address arrives `intact` at a whoami behind the ingress controller.

use std::time::Duration;

use super::hairpin::{restricted_namespace, Flavor, Setup, HOST};
use super::PodSync;
use super::DNS_SERVICE_IP;
use crate::common::command;

/// The controller's flags that say what doctor checks, as the chart sets them.
const CHART_FLAGS: [&str; 5] = [
    "--mode=coredns",
    "--proxy-service-name=ouroboros-proxy",
    "--proxy-service-namespace=ouroboros",
    "--lease-name=ouroboros-controller",
    "--lease-namespace=ouroboros",
];

#[test]
fn doctor_from_outside_passes_and_the_probe_from_the_node_says_ok() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    restricted_namespace(node);
    setup.helm(&["install"]);
    setup.wait_fixed(Duration::from_secs(240));
    // The probe asks the kube-dns Service, which may pick either replica.
    setup.wait_every_replica(HOST, Duration::from_secs(120));

    // From outside: the API through the kubeconfig, nothing dialled.
    let out = command("doctor")
        .arg("--kubeconfig")
        .arg(&node.kubeconfig)
        .args(CHART_FLAGS)
        .args(["--output", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor's JSON: {e}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = report["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks in {report}"));
    // SKIP is what cannot be checked from outside (ClusterIPs are not dialled from here).
    let bad: Vec<&serde_json::Value> = checks
        .iter()
        .filter(|c| c["status"] == "FAIL" || c["status"] == "WARN")
        .collect();
    assert!(bad.is_empty(), "doctor on a working install: {bad:#?}");
    assert!(out.status.success(), "doctor's exit code: {report:#}");
    let ok = checks.iter().filter(|c| c["status"] == "OK").count();
    assert!(ok >= 10, "only {ok} checks said OK: {report:#}");

    // From the node, which routes to the ClusterIPs through kube-proxy's rules.
    let mut probe = command("doctor");
    probe
        .arg("--kubeconfig")
        .arg(node.kubeconfig_on_node())
        .args(CHART_FLAGS)
        .args(["--probe", HOST])
        .args(["--probe-dns-server", &format!("{DNS_SERVICE_IP}:53")]);
    let mut probe = node.on_node(&probe);
    let out = probe.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["verdict", "ok"]),
        "doctor --probe {HOST} from the node:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The client address end to end: doctor's caller pod (our image, already on the node)
    // calls an Ingress whose backend is our whoami, through the cluster DNS and our proxy.
    whoami(node);
    let out = command("doctor")
        .args(["client-ip", "--kubeconfig"])
        .arg(&node.kubeconfig)
        .args([
            "--ingress",
            "app/whoami",
            "--host",
            WHOAMI_HOST,
            "--namespace",
            "app",
        ])
        .args(["--timeout", "3m", "--output", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor client-ip's JSON: {e}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        report["verdict"],
        "intact",
        "doctor client-ip on the real path: {report:#}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.diagnose()
    );
    assert!(out.status.success());
    setup.helm(&["uninstall"]);
}

const WHOAMI_HOST: &str = "whoami.example.com";

/// `ouroboros whoami` behind an Ingress for [`WHOAMI_HOST`] (in its TLS section, so the chart's
/// default `ingressHosts: tls` hairpins it); the node's nginx routes the name to it.
fn whoami(node: &super::Node) {
    let labels = serde_json::json!({"app": "whoami"});
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "whoami", "namespace": "app"},
             "spec": {"replicas": 1, "selector": {"matchLabels": labels},
              "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "whoami", "image": super::images::ours_name(),
                "imagePullPolicy": "IfNotPresent",
                "args": ["whoami", "--listen", ":8080", "--proxy-protocol", "off"],
                "ports": [{"containerPort": 8080}]}]}}}},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "whoami", "namespace": "app"},
             "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]}},
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
             "metadata": {"name": "whoami", "namespace": "app"},
             "spec": {"ingressClassName": "nginx", "tls": [{"hosts": [WHOAMI_HOST]}],
              "rules": [{"host": WHOAMI_HOST, "http": {"paths": [{"path": "/",
                "pathType": "Prefix",
                "backend": {"service": {"name": "whoami", "port": {"number": 8080}}}}]}}]}},
        ]})
        .to_string(),
    );
    super::hairpin::wait_ready(node, "app", "app=whoami", "120s");
}
