//! `doctor client-ip` against the real API server: every object it creates is accepted, a Pod
//! that never becomes ready (there is no kubelet, nor a scheduler) ends the run at `--timeout`
//! with a message naming it, and nothing is left behind.

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use kube::Client;

use super::cluster;
use crate::common::command;

const SELECTOR: &str = "app.kubernetes.io/managed-by=ouroboros-doctor";

/// Runs `doctor client-ip` with `args` as the admin; (exit code, stderr).
fn client_ip(cluster: &cluster::Cluster, ns: &str, args: &[&str]) -> (i32, String) {
    let kubeconfig = cluster.admin_kubeconfig();
    let out = command("doctor")
        .arg("client-ip")
        .args(["--namespace", ns, "--timeout", "3s", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.code().unwrap_or(-1), stderr)
}

/// How many of the objects the run labels are left in `ns`.
async fn left(client: &Client, ns: &str) -> usize {
    let lp = ListParams::default().labels(SELECTOR);
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    let svcs = Api::<Service>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    let ings = Api::<Ingress>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    pods.items.len() + svcs.items.len() + ings.items.len()
}

#[test]
fn the_real_api_server_accepts_every_object_and_nothing_is_left() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ns = "client-ip";
    rt.block_on(cluster.ensure_namespace(ns));
    // A temporary whoami, Service and Ingress: all accepted; the whoami Pod is never ready.
    let (code, stderr) = client_ip(
        cluster,
        ns,
        &["--host", "check.example.com", "--ingress-class", "nginx"],
    );
    assert_eq!(code, 1, "{stderr}");
    for kind in ["Pod", "Service", "Ingress"] {
        assert!(
            stderr.contains(&format!("created {kind} {ns}/ouroboros-client-ip-")),
            "{kind}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("deleted {kind} {ns}/ouroboros-client-ip-")),
            "{kind}: {stderr}"
        );
    }
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.starts_with(&format!("error: Pod {ns}/ouroboros-client-ip-"))
            && error.contains(
                " did not become ready within 3s (phase Pending, not scheduled to a node)"
            )
            && error.ends_with("; removed what it created"),
        "{stderr}"
    );
    let admin = rt.block_on(cluster.admin());
    assert_eq!(rt.block_on(left(&admin, ns)), 0, "{stderr}");

    // An existing Ingress: only the caller Pod is created (accepted), it never ends, and it is
    // removed; the Ingress is the user's and stays.
    rt.block_on(cluster.apply_yaml(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: whoami\n  \
         namespace: {ns}\nspec:\n  rules:\n  - host: whoami.example.com\n    http:\n      \
         paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          \
         service:\n            name: whoami\n            port:\n              number: 80\n"
    )));
    let (code, stderr) = client_ip(cluster, ns, &["--ingress", &format!("{ns}/whoami")]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("created Pod {ns}/ouroboros-client-ip-"))
            && stderr.contains("-caller did not end within 3s (phase Pending"),
        "{stderr}"
    );
    assert_eq!(rt.block_on(left(&admin, ns)), 0, "{stderr}");
    let kept = rt.block_on(Api::<Ingress>::namespaced(admin.clone(), ns).get_opt("whoami"));
    assert!(kept.unwrap().is_some());
}
