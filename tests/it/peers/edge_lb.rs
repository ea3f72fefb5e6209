//! `edge --pools` against a real kube-apiserver of its own (a private control plane), as the
//! chart installs it: the chart's ConfigMap as the pools file, its DaemonSet's arguments and its
//! ServiceAccount's token, so the chart's ClusterRole is all the edge may do. What the real
//! server stores is compared with what the mock-API tests (tests/it/edge_lb.rs) assume.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{json, Value};

use super::cluster::{self, Cluster};
use super::controller_modes::{assert_no_refusal, runtime, Install};
use super::netns::{self, veth, Netns};
use super::{spawn, wait_for, Process};
use crate::support::{free_port, temp_dir, V4};

pub(super) const RELEASE: &str = "edge-lb";
pub(super) const APPS: &str = "edge-lb-apps";
const POOL: &str = "192.0.2.0/29";

fn install() -> Install {
    install_with_pool(POOL)
}

/// The chart with the edge as the load balancer of one pool of `addresses`.
pub(super) fn install_with_pool(addresses: &str) -> Install {
    Install::render(
        RELEASE,
        &[
            "edge.enabled=true".into(),
            "edge.loadBalancer.enabled=true".into(),
            "edge.loadBalancer.pools[0].name=public".into(),
            format!("edge.loadBalancer.pools[0].addresses={{{addresses}}}"),
        ],
    )
}

/// The pools file as the chart renders it (its ConfigMap's one key), written into `dir`.
pub(super) fn pools_file(install: &Install, dir: &Path) -> std::path::PathBuf {
    let cm = install.object("ConfigMap", &format!("{}-edge-pools", install.fullname()));
    let path = dir.join("pools.yaml");
    std::fs::write(&path, cm["data"]["pools.yaml"].as_str().unwrap()).unwrap();
    path
}

/// `edge` with the chart's DaemonSet arguments, `pools` as its pools file and `kubeconfig`,
/// once /readyz answers (the Services are listed).
fn spawn_edge(install: &Install, pools: &Path, kubeconfig: &Path, dir: &Path, n: u32) -> Process {
    let health: SocketAddr = (V4, free_port(V4)).into();
    let args = install.args("DaemonSet", &format!("{}-edge", install.fullname()));
    let mut cmd = crate::common::command("edge");
    for a in &args {
        if a.starts_with("--listen-health=") {
            cmd.arg(format!("--listen-health={health}"));
        } else if a.starts_with("--pools=") {
            cmd.arg(format!("--pools={}", pools.display()));
        } else {
            cmd.arg(a);
        }
    }
    cmd.arg("--kubeconfig").arg(kubeconfig);
    let mut edge = spawn("edge", cmd, &dir.join(format!("edge-{n}.log")));
    wait_for("ready", &mut edge, Duration::from_secs(30), || {
        let mut s = std::net::TcpStream::connect(health).ok()?;
        use std::io::{Read, Write};
        write!(s, "GET /readyz HTTP/1.0\r\n\r\n").ok()?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok()?;
        reply.starts_with("HTTP/1.0 200").then_some(())
    });
    edge
}

/// A LoadBalancer Service `name` of our class, created at the real server.
async fn service(cluster: &Cluster, name: &str, annotations: Value) {
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": APPS, "annotations": annotations},
                "spec": {
                    "type": "LoadBalancer",
                    "loadBalancerClass": "ouroboros.io/edge",
                    "allocateLoadBalancerNodePorts": false,
                    "ports": [
                        {"name": "https", "port": 443, "targetPort": 8443},
                        {"name": "dns", "port": 53, "protocol": "UDP"},
                    ],
                },
            })
            .to_string(),
        )
        .await;
}

/// `status.loadBalancer` of Service `name` as the real server stores it (`null`: gone).
pub(super) async fn stored(cluster: &Cluster, name: &str) -> (Value, String) {
    let svc = Api::<Service>::namespaced(cluster.admin().await, APPS)
        .get_opt(name)
        .await
        .unwrap();
    match svc {
        Some(s) => (
            serde_json::to_value(s.status.and_then(|s| s.load_balancer)).unwrap(),
            s.metadata.resource_version.unwrap(),
        ),
        None => (Value::Null, String::new()),
    }
}

/// Polls until Service `name`'s stored `status.loadBalancer` is `want`; its resourceVersion.
pub(super) async fn eventually(
    cluster: &Cluster,
    edge: &Process,
    name: &str,
    want: &Value,
    what: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (got, rv) = stored(cluster, name).await;
        if &got == want {
            return rv;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: Service {name} stores {got}, want {want}\n{}",
            edge.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn proxy_at(ip: &str) -> Value {
    json!({"ingress": [{"ip": ip, "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]}]})
}

/// The (reason, note) of the Events the edge published on Service `name`.
/// The edge's Events about Service `name` (reason, note). Each must name the Service by its UID
/// too, so that `kubectl describe` of a later Service of the same name does not show them.
async fn events_of(cluster: &Cluster, name: &str) -> Vec<(String, String)> {
    let client = cluster.admin().await;
    let uid = Api::<Service>::namespaced(client.clone(), APPS)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid;
    let list = Api::<Event>::namespaced(client, APPS)
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reporting_controller.as_deref() == Some("ouroboros-edge")
        })
        .inspect(|e| {
            let r = e.regarding.as_ref().unwrap();
            assert_eq!(r.uid, uid, "the Event names the Service's UID: {e:?}");
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Allocation, a conflict (an Event, nothing written) and a release, as the server stores them.
async fn allocate_refuse_release(cluster: &Cluster, edge: &Process) {
    // Allocation: the lowest address, ipMode Proxy, the TCP port only, as the server stores it.
    service(cluster, "first", json!({})).await;
    let first_rv = eventually(cluster, edge, "first", &proxy_at("192.0.2.1"), "allocation").await;

    // A conflict: the address another Service holds is refused with an Event, nothing written.
    service(
        cluster,
        "second",
        json!({"ouroboros.io/load-balancer-ips": "192.0.2.1"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let e = events_of(cluster, "second").await;
        if !e.is_empty() || Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        events,
        [(
            "AddressConflict".to_string(),
            "requested address 192.0.2.1 is taken by Service edge-lb-apps/first; request \
             another address or free it there"
                .to_string()
        )],
        "{}",
        edge.tail()
    );
    assert_eq!(
        stored(cluster, "second").await.0,
        json!({}),
        "nothing half-written"
    );
    assert_eq!(
        stored(cluster, "first").await.1,
        first_rv,
        "the holder is left alone"
    );

    // Release: first deleted, second gets the address it asked for.
    Api::<Service>::namespaced(cluster.admin().await, APPS)
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        cluster,
        edge,
        "second",
        &proxy_at("192.0.2.1"),
        "release to the requester",
    )
    .await;

    // A third Service takes the next address.
    service(cluster, "third", json!({})).await;
    eventually(
        cluster,
        edge,
        "third",
        &proxy_at("192.0.2.2"),
        "a third Service",
    )
    .await;
}

#[test]
fn edge_is_the_load_balancer_of_its_class_at_the_real_api_server() {
    let Some(cluster) = cluster::private("edge-lb") else {
        return;
    };
    let install = install();
    let dir = temp_dir("edge-lb-real");
    let pools = pools_file(&install, dir.path());
    let rt = runtime();
    let kubeconfig = rt.block_on(async {
        install.apply(&cluster).await;
        cluster.ensure_namespace(APPS).await;
        install.edge_kubeconfig(&cluster, dir.path()).await
    });
    let edge = spawn_edge(&install, &pools, &kubeconfig, dir.path(), 1);

    rt.block_on(allocate_refuse_release(&cluster, &edge));
    assert_no_refusal(&edge);
    drop(edge);

    // A restart: nothing is reallocated or written again. A new Service getting its address
    // proves the restarted edge has finished its first pass (passes run one after another).
    let before: Vec<(Value, String)> = rt.block_on(async {
        vec![
            stored(&cluster, "second").await,
            stored(&cluster, "third").await,
        ]
    });
    let edge = spawn_edge(&install, &pools, &kubeconfig, dir.path(), 2);
    rt.block_on(async {
        service(&cluster, "fourth", json!({})).await;
        eventually(&cluster, &edge, "fourth", &proxy_at("192.0.2.3"), "after the restart").await;
        let after = vec![stored(&cluster, "second").await, stored(&cluster, "third").await];
        assert_eq!(after, before, "a restart rewrote a status");

        // No longer a LoadBalancer: no address, and the next Service gets it.
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "fourth", "namespace": APPS},
                    "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
                })
                .to_string(),
            )
            .await;
        eventually(&cluster, &edge, "fourth", &json!({}), "retyped to ClusterIP").await;
        service(&cluster, "fifth", json!({})).await;
        eventually(&cluster, &edge, "fifth", &proxy_at("192.0.2.3"), "the retyped Service's address").await;
    });
    // The server itself drops status.loadBalancer when the type changes: the edge wrote
    // fourth's address once and never had to remove it.
    let writes = |name: &str| {
        (edge.log_text().lines())
            .filter(|l| l.contains("wrote the load-balancer status"))
            .filter(|l| l.contains(&format!("\"service\":\"{APPS}/{name}\"")))
            .count()
    };
    assert_eq!(writes("fourth"), 1, "{}", edge.log_text());
    assert_eq!(
        writes("second") + writes("third"),
        0,
        "rewritten after the restart"
    );
    assert_no_refusal(&edge);
    assert!(
        !edge.log_text().contains("refused the load-balancer status"),
        "{}",
        edge.tail()
    );
}

const NODE_IP: &str = "10.246.1.1";
const POD_IP: &str = "10.246.1.2";
const CLIENT_IP: &str = "10.246.2.2";
const TARGET_PORT: u16 = 8443;

/// A backend "pod": answers each connection with the PROXY header it got, decoded:
/// `VERSION SOURCE DESTINATION`.
pub(super) fn backend(ns: &Netns, addr: SocketAddr) {
    let listener = ns.run(|| std::net::TcpListener::bind(addr).unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut buf = Vec::new();
            let mut chunk = [0u8; 256];
            let reply = loop {
                match ouroboros::proxy_protocol::decode::decode(&buf) {
                    Ok((h, _)) => {
                        let (src, dst) = h.addresses.unwrap();
                        break format!("{} {} {}\n", h.version.as_str(), src.0, dst.0);
                    }
                    Err(ouroboros::proxy_protocol::decode::error::DecodeError::Incomplete) => {}
                    Err(e) => break format!("bad header: {e}\n"),
                }
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break "no header\n".to_string(),
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let _ = conn.write_all(reply.as_bytes());
        }
    });
}

/// The node (edge, with the pool routed to it: AnyIP on its loopback, the "static mode"), the
/// pods (one backend) and a client on a network of its own, routed to the pool through the node;
/// the API server reachable from the node at its own address.
fn wire(cluster: &Cluster) -> [Netns; 3] {
    let tag = format!("lb{}", std::process::id() % 100_000);
    let [node, pods, client] =
        ["node", "pods", "client"].map(|n| Netns::new(&format!("{tag}-{n}")));
    veth(
        &node,
        "eth0",
        &format!("{NODE_IP}/24"),
        &pods,
        "eth0",
        &format!("{POD_IP}/24"),
    );
    veth(
        &node,
        "eth1",
        "10.246.2.1/24",
        &client,
        "eth0",
        &format!("{CLIENT_IP}/24"),
    );
    node.ip(&["route", "add", "local", POOL, "dev", "lo"]);
    client.ip(&["route", "add", POOL, "via", "10.246.2.1"]);
    backend(&pods, SocketAddr::new(POD_IP.parse().unwrap(), TARGET_PORT));
    let api: SocketAddr = cluster
        .server
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    netns::forward(node.run(|| std::net::TcpListener::bind(api).unwrap()), api);
    [node, pods, client]
}

/// One connection from `ns` to `addr` that sends a line and ends its side: the backend's reply,
/// or the error.
pub(super) fn ask(ns: &Netns, addr: SocketAddr) -> String {
    ns.run(|| {
        use std::io::{Read, Write};
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(mut s) => {
                let _ = s.write_all(b"hello\n");
                let _ = s.shutdown(std::net::Shutdown::Write);
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut reply = String::new();
                let _ = s.read_to_string(&mut reply);
                reply
            }
            Err(e) => format!("connect: {e}"),
        }
    })
}

/// Polls until a connection from `ns` to `addr` gets a reply starting with `prefix`; that reply.
pub(super) fn eventually_replies(
    ns: &Netns,
    edge: &Process,
    addr: SocketAddr,
    prefix: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = ask(ns, addr);
        if got.starts_with(prefix) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{addr} answered {got:?}, want it to start with {prefix:?}\n{}",
            edge.tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `edge --pools` in the node namespace with the chart's arguments, once /readyz answers.
pub(super) fn spawn_edge_in(
    node: &Netns,
    install: &Install,
    pools: &Path,
    kubeconfig: &Path,
    dir: &Path,
) -> Process {
    let args = install.args("DaemonSet", &format!("{}-edge", install.fullname()));
    let mut cmd = node.command(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.arg("edge");
    for a in &args {
        if a.starts_with("--listen-health=") {
            cmd.arg("--listen-health=127.0.0.1:18082");
        } else if a.starts_with("--pools=") {
            cmd.arg(format!("--pools={}", pools.display()));
        } else {
            cmd.arg(a);
        }
    }
    cmd.arg("--kubeconfig").arg(kubeconfig);
    let mut edge = spawn("edge", cmd, &dir.join("edge-netns.log"));
    let health: SocketAddr = "127.0.0.1:18082".parse().unwrap();
    wait_for("ready", &mut edge, Duration::from_secs(30), || {
        node.run(|| {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(health).ok()?;
            write!(s, "GET /readyz HTTP/1.0\r\n\r\n").ok()?;
            let mut reply = String::new();
            s.read_to_string(&mut reply).ok()?;
            reply.starts_with("HTTP/1.0 200").then_some(())
        })
    });
    edge
}

/// The LoadBalancer Service `name` of our class (port 443 to the pods' 8443) and its slice.
pub(super) async fn with_endpoint(cluster: &Cluster, name: &str, annotations: Value) {
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": APPS, "annotations": annotations},
                "spec": {
                    "type": "LoadBalancer",
                    "loadBalancerClass": "ouroboros.io/edge",
                    "allocateLoadBalancerNodePorts": false,
                    "ports": [{"name": "https", "port": 443, "targetPort": TARGET_PORT}],
                },
            })
            .to_string(),
        )
        .await;
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-a"), "namespace": APPS, "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "ouroboros-tests",
                }},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "protocol": "TCP", "port": TARGET_PORT}],
            })
            .to_string(),
        )
        .await;
}

#[test]
fn a_client_reaches_the_load_balancer_address_and_the_backend_sees_its_own_address() {
    if !netns::available() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the edge load-balancer test needs root under CI"
        );
        eprintln!("SKIPPED: the edge load-balancer test needs root (network namespaces)");
        return;
    }
    let Some(cluster) = cluster::private("edge-lb-net") else {
        return;
    };
    let install = install();
    let dir = temp_dir("edge-lb-net");
    let pools = pools_file(&install, dir.path());
    let rt = runtime();
    // Every namespace lives until the end of the test (dropped, they are deleted).
    let [node, _pods, client] = wire(&cluster);
    let kubeconfig = rt.block_on(async {
        install.apply(&cluster).await;
        cluster.ensure_namespace(APPS).await;
        with_endpoint(&cluster, "web", json!({})).await;
        install.edge_kubeconfig(&cluster, dir.path()).await
    });
    let edge = spawn_edge_in(&node, &install, &pools, &kubeconfig, dir.path());
    rt.block_on(eventually(
        &cluster,
        &edge,
        "web",
        &proxy_at("192.0.2.1"),
        "allocation",
    ));

    // The default PROXY version (v2): the backend sees the client's own address, and the
    // load-balancer address and port it dialled.
    let vip: SocketAddr = "192.0.2.1:443".parse().unwrap();
    let dest = "192.0.2.1:443";
    let reply = eventually_replies(&client, &edge, vip, "v2 ");
    assert!(
        reply.starts_with(&format!("v2 {CLIENT_IP}:")) && reply.ends_with(&format!(" {dest}\n")),
        "{reply:?}"
    );

    // The annotation asks for v1: the listener is opened again with it.
    rt.block_on(with_endpoint(
        &cluster,
        "web",
        json!({"ouroboros.io/proxy-protocol": "v1"}),
    ));
    let reply = eventually_replies(&client, &edge, vip, "v1 ");
    assert!(
        reply.starts_with(&format!("v1 {CLIENT_IP}:")) && reply.ends_with(&format!(" {dest}\n")),
        "{reply:?}\n{}",
        edge.tail()
    );

    // A port another program holds on the node: a ListenFailed Event, and the listener is
    // opened once the port is free.
    let squatter = node.run(|| std::net::TcpListener::bind("192.0.2.2:443").unwrap());
    rt.block_on(async {
        with_endpoint(&cluster, "other", json!({})).await;
        eventually(
            &cluster,
            &edge,
            "other",
            &proxy_at("192.0.2.2"),
            "a second Service",
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let events = events_of(&cluster, "other").await;
            if events.iter().any(|(reason, note)| {
                reason == "ListenFailed" && note.starts_with("cannot listen on 192.0.2.2:443: ")
            }) {
                break;
            }
            assert!(Instant::now() < deadline, "{events:?}\n{}", edge.tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    drop(squatter);
    let other: SocketAddr = "192.0.2.2:443".parse().unwrap();
    let reply = eventually_replies(&client, &edge, other, "v2 ");
    assert!(reply.starts_with(&format!("v2 {CLIENT_IP}:")), "{reply:?}");

    // Deleted: the address is released and nothing listens on it any more.
    rt.block_on(async {
        Api::<Service>::namespaced(cluster.admin().await, APPS)
            .delete("web", &DeleteParams::default())
            .await
            .unwrap();
    });
    let reply = eventually_replies(&client, &edge, vip, "connect: ");
    assert!(reply.contains("refused"), "{reply:?}\n{}", edge.tail());
    assert_no_refusal(&edge);
}
