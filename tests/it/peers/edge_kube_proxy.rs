//! The hairpin removed at its root: real kube-proxy (nftables mode) short-circuits a
//! LoadBalancer address whose status says `ipMode: VIP`, so a pod's connection reaches the
//! ingress controller without a PROXY header; once `edge --pools` has written `ipMode: Proxy`
//! for the same address, kube-proxy leaves it alone and the pod goes through the edge, whose
//! header carries the pod's own address. A control plane of its own (kube-proxy programs every
//! Service it sees).
//!
//! ```text
//!   pod 10.247.1.2 ──┐                        ┌── ingress (PROXY-decoding backend) 10.247.2.2:8443
//!                    ├── node (kube-proxy) ───┤
//!                    │                        └── lb (edge --pools, 192.0.2.10)
//! ```

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::cluster::{self, Cluster};
use super::controller_modes::{assert_no_refusal, runtime};
use super::edge_lb::{
    ask, backend, eventually, eventually_replies, install_with_pool, pools_file, proxy_at,
    spawn_edge_in, APPS,
};
use super::netns::{self, veth, Netns};
use super::{binary, spawn, wait_for, Process};
use crate::support::temp_dir;

const LB_IP: &str = "192.0.2.10";
const POD_IP: &str = "10.247.1.2";
const INGRESS_IP: &str = "10.247.2.2";
const NODE: &str = "edge-kp-node";

/// Whether kube-proxy's nftables rules in `node` send `LB_IP` straight to the endpoints: the
/// address is an element of its `service-ips` map (before the first sync, no table at all).
fn short_circuits(node: &Netns) -> bool {
    let out = node
        .command("nft")
        .args(["list", "table", "ip", "kube-proxy"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains(LB_IP)
}

/// The namespaces, wired as the module's picture shows; the API server reachable from the node
/// and from the load balancer at its own address.
fn wire(cluster: &Cluster) -> [Netns; 4] {
    let tag = format!("kp{}", std::process::id() % 100_000);
    let [node, pod, ingress, lb] =
        ["node", "pod", "ingress", "lb"].map(|n| Netns::new(&format!("{tag}-{n}")));
    veth(
        &node,
        "to-pod",
        "10.247.1.1/24",
        &pod,
        "eth0",
        &format!("{POD_IP}/24"),
    );
    veth(
        &node,
        "to-ingress",
        "10.247.2.1/24",
        &ingress,
        "eth0",
        &format!("{INGRESS_IP}/24"),
    );
    veth(
        &node,
        "to-lb",
        "192.0.2.1/24",
        &lb,
        "eth0",
        &format!("{LB_IP}/24"),
    );
    for (ns, gw) in [
        (&pod, "10.247.1.1"),
        (&ingress, "10.247.2.1"),
        (&lb, "192.0.2.1"),
    ] {
        ns.ip(&["route", "add", "default", "via", gw]);
    }
    node.sysctl("net.ipv4.ip_forward=1");
    let api: SocketAddr = cluster
        .server
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    for ns in [&node, &lb] {
        netns::forward(ns.run(|| TcpListener::bind(api).unwrap()), api);
    }
    [node, pod, ingress, lb]
}

/// The Node, the ingress controller's Service of our class with its slice, and the status
/// another load balancer left on it: the address with `ipMode: VIP`.
async fn objects(cluster: &Cluster) {
    cluster.ensure_namespace(APPS).await;
    cluster
        .apply_yaml(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}).to_string(),
        )
        .await;
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "ingress", "namespace": APPS},
                "spec": {
                    "type": "LoadBalancer",
                    "loadBalancerClass": "ouroboros.io/edge",
                    "allocateLoadBalancerNodePorts": false,
                    "selector": {"app": "ingress"},
                    "ports": [{"name": "https", "port": 443, "targetPort": 8443}],
                },
            })
            .to_string(),
        )
        .await;
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "ingress-1", "namespace": APPS, "labels": {
                    "kubernetes.io/service-name": "ingress",
                    "endpointslice.kubernetes.io/managed-by": "ouroboros-tests",
                }},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [INGRESS_IP], "conditions": {"ready": true}, "nodeName": NODE}],
                "ports": [{"name": "https", "protocol": "TCP", "port": 8443}],
            })
            .to_string(),
        )
        .await;
    let vip = json!({"status": {"loadBalancer": {"ingress": [
        {"ip": LB_IP, "ipMode": "VIP", "ports": [{"port": 443, "protocol": "TCP"}]}
    ]}}});
    Api::<Service>::namespaced(cluster.admin().await, APPS)
        .patch_status("ingress", &PatchParams::default(), &Patch::Merge(&vip))
        .await
        .unwrap();
}

fn kube_proxy(
    node: &Netns,
    cluster: &Cluster,
    binary: &std::path::Path,
    dir: &std::path::Path,
) -> Process {
    let mut kp = node.command(binary);
    kp.arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args([
            &format!("--hostname-override={NODE}"),
            "--proxy-mode=nftables",
            "--cluster-cidr=10.247.0.0/16",
            "--conntrack-max-per-core=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ]);
    spawn("kube-proxy", kp, &dir.join("kube-proxy.log"))
}

#[test]
fn kube_proxy_stops_short_circuiting_once_the_edge_writes_ip_mode_proxy() {
    if !netns::available() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the edge and kube-proxy test needs root under CI"
        );
        eprintln!("SKIPPED: the edge and kube-proxy test needs root (network namespaces)");
        return;
    }
    let Some(kube_proxy_binary) = binary("kube-proxy") else {
        return;
    };
    let Some(cluster) = cluster::private("edge-kube-proxy") else {
        return;
    };
    let dir = temp_dir("edge-kube-proxy");
    let install = install_with_pool(&format!("{LB_IP}/32"));
    let pools = pools_file(&install, dir.path());
    let rt = runtime();
    let [node, pod, ingress, lb] = wire(&cluster);
    backend(&ingress, format!("{INGRESS_IP}:8443").parse().unwrap());
    let kubeconfig = rt.block_on(async {
        install.apply(&cluster).await;
        objects(&cluster).await;
        install.edge_kubeconfig(&cluster, dir.path()).await
    });
    let mut kp = kube_proxy(&node, &cluster, &kube_proxy_binary, dir.path());
    let vip: SocketAddr = format!("{LB_IP}:443").parse().unwrap();

    // ipMode VIP: kube-proxy sends the pod straight to the ingress controller, no header.
    wait_for(
        "short-circuiting the VIP",
        &mut kp,
        Duration::from_secs(60),
        || short_circuits(&node).then_some(()),
    );
    let reply = ask(&pod, vip);
    assert!(
        reply.starts_with("bad header") || reply.starts_with("no header"),
        "short-circuited, the backend should get no PROXY header: {reply:?}"
    );

    // The edge takes the Service over: it keeps the address and writes ipMode Proxy.
    let edge = spawn_edge_in(&lb, &install, &pools, &kubeconfig, dir.path());
    rt.block_on(eventually(
        &cluster,
        &edge,
        "ingress",
        &proxy_at(LB_IP),
        "ipMode Proxy",
    ));
    wait_for(
        "no longer short-circuiting",
        &mut kp,
        Duration::from_secs(60),
        || (!short_circuits(&node)).then_some(()),
    );
    let reply = eventually_replies(&pod, &edge, vip, "v2 ");
    assert!(
        reply.starts_with(&format!("v2 {POD_IP}:")) && reply.ends_with(&format!(" {vip}\n")),
        "through the edge, the header carries the pod's own address: {reply:?}"
    );
    assert_no_refusal(&edge);
}
