//! The edge as the node's bare-metal load balancer, installed by the chart: a layer-2 pool on
//! the node's link, a `LoadBalancer` Service of the edge's class for the ingress controller.
//! The edge pod (host network) gives the Service an address of the pool with `ipMode: Proxy`,
//! puts it on the node's interface and announces it; a client outside the node (the lan
//! namespace) reaches nginx through it with its own address in the PROXY header, and so does
//! a pod of the cluster (kube-proxy does not short-circuit an `ipMode: Proxy` address, so the
//! edge alone keeps that path's client address). Uninstall takes the address off the link.

use std::process::Command;
use std::time::Duration;

use super::hairpin::{client_curl, Flavor, Setup, HOST, INGRESS_NAMESPACE, RELEASE_NAMESPACE};
use super::{eventually, Node, PodSync, LAN_IP};

/// The pool's one address, on the node's link (10.213.0.0/24).
const EDGE_IP: &str = "10.213.0.100";
const CLASS: &str = "ouroboros.io/edge";
const SERVICE: &str = "ingress-nginx-edge";

/// The ingress controller's pods behind a second `LoadBalancer` Service, of the edge's class.
fn edge_service(node: &Node) {
    let labels = serde_json::json!({"app.kubernetes.io/name": "ingress-nginx"});
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": INGRESS_NAMESPACE},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "selector": labels,
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http"},
                    {"name": "https", "port": 443, "targetPort": "https"}]}})
        .to_string(),
    );
}

/// The Service's `status.loadBalancer.ingress`, as JSON.
fn service_ingress(node: &Node) -> serde_json::Value {
    let out = node.kubectl_ok(&[
        "get",
        "svc",
        "-n",
        INGRESS_NAMESPACE,
        SERVICE,
        "-o",
        "jsonpath={.status.loadBalancer.ingress}",
    ]);
    serde_json::from_str(&out).unwrap_or_default()
}

/// The IPv4 addresses on the node's `eth0`.
fn node_addresses(node: &Node) -> String {
    let out = Command::new("ip")
        .args([
            "-n",
            &node.ns.name,
            "-4",
            "-o",
            "addr",
            "show",
            "dev",
            "eth0",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `curl https://HOST/` from the lan namespace (outside the node), the name resolved to the
/// edge's address: Ok(body) or Err(curl's message).
fn outside_get(node: &Node, ca: &std::path::Path) -> Result<String, String> {
    let out = node
        .lan
        .command("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{HOST}:443:{EDGE_IP}")])
        .arg(format!("https://{HOST}/"))
        .output()
        .unwrap();
    crate::support::body_or_message(out)
}

/// The client address nginx reported in `body` (`client=ADDRESS via=...`).
fn client_seen(body: &str) -> &str {
    body.trim()
        .strip_prefix("client=")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("nginx's answer: {body}"))
}

#[test]
fn edge_as_the_load_balancer_serves_a_client_outside_the_node_with_its_own_address() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    edge_service(node);
    // The edge pods run as root on the host network with NET_ADMIN and NET_RAW (layer-2
    // pools): the exception to `restricted` (docs/install.md, Security), so the namespace is
    // not labelled here.
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": RELEASE_NAMESPACE}})
        .to_string(),
    );
    let values = node.dir.join("edge-values.yaml");
    std::fs::write(
        &values,
        format!(
            "edge:\n  enabled: true\n  loadBalancer:\n    enabled: true\n    pools:\n      \
             - name: lan\n        addresses: [{EDGE_IP}/32]\n        l2: {{}}\n"
        ),
    )
    .unwrap();
    setup.helm(&["install", "--values", &values.display().to_string()]);

    // The Service gets the pool's address, marked as a proxy's, and the node holds it.
    eventually(
        node,
        "the Service's address from the pool, ipMode Proxy",
        Duration::from_secs(60),
        || {
            let ingress = service_ingress(node);
            ingress.as_array().is_some_and(|a| a.len() == 1)
                && ingress[0]["ip"] == EDGE_IP
                && ingress[0]["ipMode"] == "Proxy"
        },
    );
    eventually(
        node,
        "the address on the node's eth0",
        Duration::from_secs(60),
        || node_addresses(node).contains(&format!("{EDGE_IP}/32")),
    );

    // A client outside the node: real TLS through the edge, its own address in the header.
    let ca = node.dir.join("app-tls/ca.crt");
    let mut last = String::new();
    eventually(
        node,
        "the outside client served",
        Duration::from_secs(60),
        || match outside_get(node, &ca) {
            Ok(body) => {
                last = body;
                true
            }
            Err(e) => {
                last = e;
                false
            }
        },
    );
    assert_eq!(
        client_seen(&last),
        LAN_IP,
        "nginx sees the outside client's own address"
    );

    // A pod of the cluster dialling the same address: kube-proxy leaves an `ipMode: Proxy`
    // address alone, so the connection reaches the edge and nginx sees the pod.
    let url = format!("https://{HOST}/");
    let resolve = format!("{HOST}:443:{EDGE_IP}");
    let body = client_curl(
        node,
        &[
            "--max-time",
            "5",
            "--cacert",
            "/ca/ca.crt",
            "--resolve",
            &resolve,
            &url,
        ],
    )
    .unwrap_or_else(|e| panic!("the client pod through the edge: {e}\n{}", node.diagnose()));
    assert_eq!(
        client_seen(&body),
        setup.client_ip,
        "nginx sees the client pod's own address through the edge"
    );

    // Uninstall: the edge takes the address off the link as it stops.
    setup.helm(&["uninstall"]);
    eventually(
        node,
        "the address off the node's eth0",
        Duration::from_secs(60),
        || !node_addresses(node).contains(EDGE_IP),
    );
    setup.assert_nothing_left();
    // What stays: the edge's Leases (its own and one per address), which carry no label of the
    // release. Helm deletes the edge's Role and ServiceAccount while its pod is still stopping,
    // so its last renewal stands until the Lease expires (docs/edge.md, "After uninstall"); the
    // controller's Lease is gone (the uninstall hook deletes it).
    let leases = node.kubectl_ok(&["get", "leases", "-n", RELEASE_NAMESPACE, "-o", "name"]);
    eprintln!("node: Leases after uninstall:\n{leases}");
    let mut left: Vec<&str> = leases.lines().collect();
    left.sort();
    assert_eq!(
        left,
        [
            "lease.coordination.k8s.io/ouroboros-edge",
            "lease.coordination.k8s.io/ouroboros-edge-10-213-0-100"
        ],
        "only the edge's Leases are left"
    );
}
