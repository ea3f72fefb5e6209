//! `doctor` against the real node with the chart installed: from outside the cluster with a
//! kubeconfig (as an operator runs it), no check fails; `doctor --probe` from the node (a host
//! that routes to the ClusterIPs) says `ok` for the hairpinned name.

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
    setup.helm(&["uninstall"]);
}
