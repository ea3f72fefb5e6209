//! `edge --service` fed by the real API server, as the chart installs it: the edge DaemonSet's
//! own arguments and its ServiceAccount's token (the chart's Role is all it may read), in a
//! network namespace of its own as a node, relaying to backend "pods" in another one. No
//! EndpointSlice controller runs, so the test writes the slices a rollout would, and the real
//! server validates them (it refuses loopback endpoint addresses, hence the namespaces).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use super::cluster::{self, Cluster};
use super::controller_modes::{assert_no_refusal, runtime, Install};
use super::netns::{self, veth, Netns};
use super::{spawn, wait_for, Process};
use crate::support::temp_dir;

const RELEASE: &str = "edge-real";
const APPS: &str = "edge-real-apps";
const EDGE_IP: &str = "10.245.1.1";
/// The backend pods' addresses, all on the pods' end of one veth.
const PODS: [&str; 3] = ["10.245.1.2", "10.245.1.3", "10.245.1.4"];
const TARGET_PORT: u16 = 8000;

/// A backend: answers each connection with its own address and the PROXY v1 header it got.
fn backend(ns: &Netns, ip: &'static str) {
    let listener = ns.run(|| TcpListener::bind((ip, TARGET_PORT)).unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = BufReader::new(conn);
            let mut header = String::new();
            if reader.read_line(&mut header).is_ok() {
                let _ = writeln!(reader.get_mut(), "{ip} {}", header.trim_end());
            }
        }
    });
}

/// One connection through edge at `addr` from inside `ns`: the backend's reply, or empty when
/// edge closed it without one (no backend).
fn ask(ns: &Netns, addr: SocketAddr) -> String {
    ns.run(|| {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply
    })
}

/// The backends 12 connections to `addr` reached (round-robin: each of a few, several times).
fn reached(ns: &Netns, addr: SocketAddr) -> Vec<String> {
    let mut seen: Vec<String> = (0..12)
        .filter_map(|_| {
            let reply = ask(ns, addr);
            reply.split_whitespace().next().map(String::from)
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// Server-side applies EndpointSlice `name` of Service `web` with `endpoints` as
/// (address, ready, terminating).
async fn slice(cluster: &Cluster, name: &str, endpoints: &[(&str, bool, bool)]) {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, ready, terminating)| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
            })
        })
        .collect();
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": APPS, "labels": {
                    "kubernetes.io/service-name": "web",
                    "endpointslice.kubernetes.io/managed-by": "ouroboros-tests",
                }},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [{"name": "http", "protocol": "TCP", "port": TARGET_PORT}],
            })
            .to_string(),
        )
        .await;
}

/// Polls until every listener in `addrs` reaches exactly `want`, or fails naming what it saw.
fn eventually_reaches(ns: &Netns, addrs: &[SocketAddr], want: &[&str], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<Vec<String>> = addrs.iter().map(|a| reached(ns, *a)).collect();
        if seen.iter().all(|s| s == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: want {want:?} on each of {addrs:?}, saw {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn delete_slice(cluster: &Cluster, name: &str) {
    Api::<EndpointSlice>::namespaced(cluster.admin().await, APPS)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A node namespace (edge's, at EDGE_IP) and a pods namespace (every address of PODS, each
/// with a backend) on one veth; the API server reachable from the node at its own address.
fn wire(cluster: &Cluster) -> (Netns, Netns) {
    let tag = format!("ed{}", std::process::id() % 100_000);
    let [node, pods] = ["node", "pods"].map(|n| Netns::new(&format!("{tag}-{n}")));
    veth(
        &node,
        "eth0",
        &format!("{EDGE_IP}/24"),
        &pods,
        "eth0",
        &format!("{}/24", PODS[0]),
    );
    for ip in &PODS[1..] {
        pods.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
    }
    for ip in PODS {
        backend(&pods, ip);
    }
    let api: SocketAddr = cluster
        .server
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    netns::forward(node.run(|| TcpListener::bind(api).unwrap()), api);
    (node, pods)
}

/// `edge` in `node` with the chart's DaemonSet arguments (health on the node's loopback) and
/// `kubeconfig`, once every listener accepts.
fn spawn_edge(
    node: &Netns,
    install: &Install,
    kubeconfig: &Path,
    dir: &Path,
    listeners: &[SocketAddr],
) -> Process {
    let args = install.args("DaemonSet", &format!("{}-edge", install.fullname()));
    let mut cmd = node.command(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.arg("edge");
    for a in &args {
        if a.starts_with("--listen-health=") {
            cmd.arg("--listen-health=127.0.0.1:18081");
        } else {
            cmd.arg(a);
        }
    }
    cmd.arg("--kubeconfig").arg(kubeconfig);
    let mut edge = spawn("edge", cmd, &dir.join("edge.log"));
    wait_for("listening", &mut edge, Duration::from_secs(30), || {
        node.run(|| listeners.iter().all(|a| TcpStream::connect(a).is_ok()))
            .then_some(())
    });
    edge
}

#[test]
fn edge_follows_the_real_endpointslices_with_the_charts_rbac() {
    if !netns::available() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the edge test needs root under CI"
        );
        eprintln!("SKIPPED: the edge test needs root (network namespaces)");
        return;
    }
    let Some(cluster) = cluster::shared() else {
        return;
    };
    // A named port (EndpointSlices only) and a numbered one (the Service maps 80 to `http`,
    // so the chart's Role also lets edge read that one Service).
    let named: SocketAddr = format!("{EDGE_IP}:8080").parse().unwrap();
    let numbered: SocketAddr = format!("{EDGE_IP}:8081").parse().unwrap();
    let install = Install::render(
        RELEASE,
        &[
            "edge.enabled=true".into(),
            format!("edge.service={APPS}/web"),
            format!("edge.listen[0]={named}=http"),
            format!("edge.listen[1]={numbered}=80"),
        ],
    );
    let dir = temp_dir("edge-real-api");
    let rt = runtime();

    // Both namespaces live until the end of the test (dropped, they are deleted).
    let (node, _pods) = wire(cluster);

    let kubeconfig = rt.block_on(async {
        cluster.ensure_namespace(APPS).await;
        install.apply(cluster).await;
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "web", "namespace": APPS},
                    "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
                })
                .to_string(),
            )
            .await;
        slice(
            cluster,
            "web-a",
            &[(PODS[0], true, false), (PODS[1], true, false)],
        )
        .await;
        install.edge_kubeconfig(cluster, dir.path()).await
    });

    let listeners = [named, numbered];
    let edge = spawn_edge(&node, &install, &kubeconfig, dir.path(), &listeners);

    // The slice as written: both ready pods, on both listeners; the header names the client
    // (the node's own address here) and the listener it came in on.
    eventually_reaches(&node, &listeners, &PODS[..2], "the first slice");
    let reply = ask(&node, named);
    assert!(
        reply.contains(&format!("PROXY TCP4 {EDGE_IP} {EDGE_IP} ")) && reply.ends_with(" 8080\n"),
        "{reply:?}"
    );

    // A rollout: the first pod terminates, a new one is ready.
    rt.block_on(slice(
        cluster,
        "web-a",
        &[
            (PODS[0], false, true),
            (PODS[1], true, false),
            (PODS[2], true, false),
        ],
    ));
    eventually_reaches(&node, &listeners, &PODS[1..], "the rollout");

    // A second slice of the same Service adds its endpoints; deleting one slice drops its own.
    rt.block_on(slice(cluster, "web-b", &[(PODS[0], true, false)]));
    eventually_reaches(&node, &listeners, &PODS, "a second slice");
    rt.block_on(delete_slice(cluster, "web-a"));
    eventually_reaches(&node, &listeners, &PODS[..1], "the first slice deleted");

    // No slice left: a connection is closed without a backend's reply.
    rt.block_on(delete_slice(cluster, "web-b"));
    eventually_reaches(&node, &listeners, &[], "every slice deleted");
    assert_no_refusal(&edge);
}
