//! `ouroboros edge` end to end in static-backend mode: the built binary in front of three real
//! nginx instances that require the PROXY protocol, each answering with its own name; plus the
//! balancer under the relay engine for draining.

use crate::kube_mock;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];

fn three() -> Vec<Nginx> {
    NAMES.iter().map(|n| Nginx::start_tagged(n)).collect()
}

/// `ouroboros edge` with `--backend` for every nginx http port, the given listeners (`--listen`
/// values) and extra flags.
fn edge_command(backends: &[&Nginx], listen: &[&str], extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.args([
        "--log-format",
        "json",
        "edge",
        "--listen-health",
        "127.0.0.1:0",
        "--shutdown-delay",
        "0",
    ]);
    for n in backends {
        cmd.args(["--backend", &format!("127.0.0.1:{}", n.http_port)]);
    }
    for l in listen {
        cmd.args(["--listen", l]);
    }
    cmd.args(extra)
        .env_remove("OUROBOROS_LOG_LEVEL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// Starts `cmd` and returns it with the bound address of each of the `listen` listeners.
fn spawn(cmd: Command, listen: &[&str]) -> (Proxy, Vec<SocketAddr>) {
    let p = Proxy::spawn(cmd);
    let logs = p.logs();
    let addrs = listen
        .iter()
        .map(|l| {
            let v = logs
                .iter()
                .find(|v| v["message"] == "listening" && v["listener"] == *l)
                .unwrap_or_else(|| panic!("no listening line for {l}: {logs:#?}"));
            v["addr"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    (p, addrs)
}

fn edge(backends: &[&Nginx], listen: &[&str], extra: &[&str]) -> (Proxy, Vec<SocketAddr>) {
    spawn(edge_command(backends, listen, extra), listen)
}

/// One request through `addr`: (backend name, client socket, rest of the answer).
fn ask(addr: SocketAddr) -> (String, SocketAddr, String) {
    let (me, status, body) = http_get_via(addr);
    assert_eq!(status, 200, "{body}");
    let (name, rest) = body.trim().split_once(' ').expect("tagged answer");
    (name.to_string(), me, rest.to_string())
}

fn tally(addr: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        *seen.entry(ask(addr).0).or_insert(0) += 1;
    }
    seen
}

/// Sum of every series of `metric` whose labels contain all of `labels`.
fn metric_sum(p: &Proxy, metric: &str, labels: &[&str]) -> f64 {
    let (_, body) = p.admin("/metrics");
    body.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn round_robin_spreads_evenly_with_the_client_address_in_the_header() {
    round_robin_with(&[]);
}

/// The same through the kernel relay, and the backend metrics still count each connection's
/// bytes. An HTTP/1.0 answer may arrive and close the backend's side before the handover (the
/// request went with the header); such a connection is copied in the process instead, so
/// only some of the 31 need to reach the kernel.
#[cfg(feature = "kernel-relay")]
#[test]
fn round_robin_through_the_kernel_relay() {
    let p = round_robin_with(&["--copy-mode", "sockmap"]);
    let kernel = metric_sum(&p, "ouroboros_edge_kernel_relayed_connections_total", &[]);
    assert!(kernel > 0.0 && kernel <= 31.0, "{kernel}");
}

fn round_robin_with(extra: &[&str]) -> Proxy {
    let ngx = three();
    let (p, addrs) = edge(&ngx.iter().collect::<Vec<_>>(), &["127.0.0.1:0"], extra);
    let addr = addrs[0];
    let (name, me, rest) = ask(addr);
    assert!(NAMES.contains(&name.as_str()), "{name}");
    // The backend saw our socket as the source and the edge's listener as the destination.
    assert_eq!(rest, format!("{} {}", plain(me), plain(addr)));
    let seen = tally(addr, 30);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.values().all(|c| *c == 10),
        "sequential round-robin is exact: {seen:?}"
    );
    assert_eq!(p.admin("/readyz").0, 200);
    // Per-backend metrics: 31 connections in all, bytes counted for each backend.
    wait_until("connections to close", || {
        metric_sum(&p, "ouroboros_edge_backend_connections_active", &[]) == 0.0
    });
    assert_eq!(
        metric_sum(&p, "ouroboros_edge_backend_connections_total", &[]),
        31.0
    );
    for n in &ngx {
        let backend = format!("backend=\"127.0.0.1:{}\"", n.http_port);
        assert!(
            metric_sum(
                &p,
                "ouroboros_edge_backend_transferred_bytes_total",
                &[&backend, "to_client"]
            ) > 0.0
        );
        assert!(metric_sum(&p, "ouroboros_edge_backend_connections_total", &[&backend]) >= 10.0);
    }
    p
}

#[test]
fn one_thread_relays_on_the_single_threaded_scheduler() {
    let ngx = three();
    let backends: Vec<_> = ngx.iter().collect();
    // More than one thread would mean a second event loop or the multi-threaded scheduler.
    let (p, addrs) = edge(&backends, &["127.0.0.1:0"], &["--threads", "1"]);
    let (name, me, rest) = ask(addrs[0]);
    assert!(NAMES.contains(&name.as_str()), "{name}");
    assert_eq!(rest, format!("{} {}", plain(me), plain(addrs[0])));
    let seen = tally(addrs[0], 30);
    assert!(seen.values().all(|c| *c == 10), "{seen:?}");
    assert_eq!(p.threads(), 1);
    let (p, addrs) = edge(
        &backends,
        &["127.0.0.1:0"],
        &["--threads", "3", "--busy-poll", "50us"],
    );
    assert_eq!(p.threads(), 3, "the main event loop and two more");
    let seen = tally(addrs[0], 30);
    assert!(seen.values().all(|c| *c == 10), "{seen:?}");
}

#[test]
fn source_hash_keeps_a_client_ip_on_one_backend() {
    let ngx = three();
    let (_p, addrs) = edge(
        &ngx.iter().collect::<Vec<_>>(),
        &["127.0.0.1:0", "[::1]:0"],
        &["--balance", "source-hash"],
    );
    for addr in addrs {
        // Every connection has a new source port; the IP alone decides.
        let seen = tally(addr, 20);
        assert_eq!(seen.len(), 1, "{addr}: {seen:?}");
    }
}

#[test]
fn least_conn_sends_new_connections_to_the_idle_backend() {
    let ngx = three();
    let (p, addrs) = edge(
        &ngx.iter().collect::<Vec<_>>(),
        &["127.0.0.1:0"],
        &["--balance", "least-conn"],
    );
    let addr = addrs[0];
    // Two connections held open (nginx waits for their request) load two backends.
    let held: Vec<TcpStream> = (0..2).map(|_| connect(addr)).collect();
    wait_until("two backend connections", || {
        metric_sum(&p, "ouroboros_edge_backend_connections_active", &[]) == 2.0
    });
    let mut seen = BTreeMap::new();
    for _ in 0..12 {
        *seen.entry(ask(addr).0).or_insert(0) += 1;
        // The edge closes its side of a finished request a moment after the client did.
        wait_until("the request's backend connection to close", || {
            metric_sum(&p, "ouroboros_edge_backend_connections_active", &[]) == 2.0
        });
    }
    assert_eq!(
        seen.len(),
        1,
        "every request goes to the idle one: {seen:?}"
    );
    let idle = seen.keys().next().unwrap().clone();
    // The held connections still work and were on the two other backends.
    let mut others = Vec::new();
    for mut s in held {
        s.write_all(b"GET / HTTP/1.0\r\nHost: t\r\n\r\n").unwrap();
        let mut resp = String::new();
        read_ok("held connection's response", s.read_to_string(&mut resp));
        let body = resp.split_once("\r\n\r\n").unwrap().1;
        others.push(body.split(' ').next().unwrap().to_string());
    }
    others.sort();
    let mut all = others.clone();
    all.push(idle.clone());
    all.sort();
    assert_eq!(all, NAMES, "held on {others:?}, requests on {idle}");
}

#[test]
fn killed_backend_is_ejected_and_no_client_sees_an_error() {
    let mut ngx = three();
    let (mut p, addrs) = edge(
        &ngx.iter().collect::<Vec<_>>(),
        &["127.0.0.1:0"],
        &["--eject-backoff", "30s"],
    );
    let addr = addrs[0];
    assert_eq!(tally(addr, 3).len(), 3);
    let dead = ngx.remove(1); // bravo
    let dead_backend = format!("backend=\"127.0.0.1:{}\"", dead.http_port);
    drop(dead);
    // Even the connection whose turn was bravo's succeeds: retried before any byte was sent.
    let seen = tally(addr, 30);
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["alpha", "charlie"],
        "{seen:?}"
    );
    assert_eq!(seen.values().sum::<usize>(), 30);
    // Ejected once, then skipped for the backoff: one failed dial only.
    assert_eq!(
        metric_sum(
            &p,
            "ouroboros_edge_backend_failures_total",
            &[&dead_backend, "cause=\"connection-refused\""]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(&p, "ouroboros_edge_connections_failed_total", &[]),
        0.0
    );
    p.wait_log(
        |v| v["message"] == "backend failed; ejected, trying the next one",
        Duration::from_secs(5),
    );
    assert_eq!(p.admin("/readyz").0, 200);

    // All gone: the client's connection is closed, /readyz fails naming the listener.
    drop(ngx);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(buf.is_empty(), "{buf:?}");
    let (status, body) = p.admin("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("no-backend: listener 127.0.0.1:0: all 3 backends ejected"),
        "{body}"
    );
    assert_eq!(
        metric_sum(
            &p,
            "ouroboros_edge_connections_failed_total",
            &["connection-refused"]
        ),
        1.0
    );

    // SIGTERM: /readyz goes down, the process exits cleanly.
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn ipv6_listener_forwards_to_ipv4_backends() {
    let ngx = three();
    for version in ["v1", "v2"] {
        let (_p, addrs) = edge(
            &ngx.iter().collect::<Vec<_>>(),
            &["[::1]:0"],
            &["--proxy-protocol", version],
        );
        let (name, me, rest) = ask(addrs[0]);
        assert!(NAMES.contains(&name.as_str()));
        assert!(me.is_ipv6());
        // nginx reached over IPv4 still learns the IPv6 client and destination.
        assert_eq!(
            rest,
            format!("{} {}", plain(me), plain(addrs[0])),
            "{version}"
        );
    }
}

#[test]
fn environment_configures_and_flags_override() {
    let ngx = three();
    let list = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        ngx[0].http_port, ngx[2].http_port
    );
    let mut cmd = edge_command(&[], &[], &["--balance", "round-robin"]);
    cmd.env("OUROBOROS_EDGE_BACKEND", &list)
        .env("OUROBOROS_EDGE_LISTEN", "127.0.0.1:0=8080,[::1]:0=8080")
        .env("OUROBOROS_EDGE_BALANCE", "source-hash")
        .env("OUROBOROS_EDGE_PROXY_PROTOCOL", "v2");
    let (_p, addrs) = spawn(cmd, &["127.0.0.1:0=8080", "[::1]:0=8080"]);
    for addr in addrs {
        // Round-robin from the flag, not source-hash from the environment.
        let seen = tally(addr, 4);
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            ["alpha", "charlie"],
            "{seen:?}"
        );
        assert!(seen.values().all(|c| *c == 2), "{seen:?}");
    }
    // A bad value in the environment is a usage error naming the variable's flag.
    let out = edge_command(&ngx.iter().collect::<Vec<_>>(), &["127.0.0.1:0"], &[])
        .env("OUROBOROS_EDGE_BALANCE", "random")
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--balance"));
}

/// The reference's dual-stack layout: an IPv6 and an IPv4 listener on the same port, each
/// taking its own family (`:PORT` would be one dual-stack socket instead).
#[test]
fn ipv6_and_ipv4_listeners_share_a_port() {
    let ngx = three();
    let port = free_port(V4);
    let (v6, v4) = (format!("[::]:{port}=443"), format!("0.0.0.0:{port}=443"));
    let (p, addrs) = edge(&ngx.iter().collect::<Vec<_>>(), &[&v6, &v4], &[]);
    assert_eq!(addrs[0].port(), addrs[1].port());
    for ip in [V6, V4, V6] {
        let (_, me, rest) = ask(SocketAddr::new(ip, port));
        assert_eq!(rest, format!("{} {ip}:{port}", plain(me)));
    }
    let accepted = |l: &str| {
        metric_sum(
            &p,
            "ouroboros_edge_connections_accepted_total",
            &[&format!("listener=\"{l}\"")],
        )
    };
    assert_eq!((accepted(&v6), accepted(&v4)), (2.0, 1.0));
}

#[test]
fn unanswering_backend_times_out_and_the_client_is_served_by_another() {
    let ngx = three();
    let (_hole, _filled, hole_port) = black_hole();
    let mut cmd = edge_command(&[&ngx[0]], &["127.0.0.1:0"], &["--dial-timeout", "300ms"]);
    cmd.args(["--backend", &format!("127.0.0.1:{hole_port}")]);
    let (p, addrs) = spawn(cmd, &["127.0.0.1:0"]);
    let started = Instant::now();
    let seen = tally(addrs[0], 4);
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["alpha"], "{seen:?}");
    // One connection waited out one dial timeout ...
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(280), "{took:?}");
    // ... and only one: the rest skipped the ejected backend (one timeout counted in all).
    let hole = format!("backend=\"127.0.0.1:{hole_port}\"");
    assert_eq!(
        metric_sum(
            &p,
            "ouroboros_edge_backend_failures_total",
            &[&hole, "cause=\"timeout\""]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(&p, "ouroboros_edge_backend_ejections_total", &[&hole]),
        1.0
    );
}

#[test]
fn active_checks_eject_without_client_traffic() {
    let mut ngx = three();
    let (p, _addrs) = edge(&[&ngx[0]], &["127.0.0.1:0"], &["--health-interval", "50ms"]);
    assert_eq!(p.admin("/readyz").0, 200);
    drop(ngx.remove(0));
    wait_until("readiness to fail", || p.admin("/readyz").0 == 503);
    let (_, body) = p.admin("/readyz");
    assert!(body.contains("all 1 backends ejected"), "{body}");
    // Found by the checks alone: no client connection was made.
    assert_eq!(
        metric_sum(&p, "ouroboros_edge_connections_accepted_total", &[]),
        0.0
    );
    // The checks that ejected it failed; with which cause depends on when they met nginx's
    // shutdown (a reset while it closes, refused once it is gone).
    assert!(
        metric_sum(&p, "ouroboros_edge_backend_failures_total", &[]) >= 1.0,
        "{}",
        p.admin("/metrics").1
    );
}

/// The balancer under the relay engine: a connection established to a backend keeps flowing
/// after that backend leaves the set; new connections go elsewhere (or fail when none is left).
#[tokio::test]
async fn removed_backend_drains_its_connections() {
    use ouroboros::edge::balance::metrics::BackendMetrics;
    use ouroboros::edge::balance::pick::Algorithm;
    use ouroboros::edge::balance::Balancer;
    use ouroboros::proxy_protocol::Version;
    use ouroboros::relay::copy::CopyMode;
    use ouroboros::relay::metrics::RelayMetrics;
    use ouroboros::relay::mode::Relaying;
    use ouroboros::relay::Route;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // An echo backend that swallows the PROXY header line first.
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = backend.accept().await.unwrap();
            tokio::spawn(async move {
                let mut header = Vec::new();
                let mut b = [0u8; 1];
                while !header.ends_with(b"\r\n") {
                    if s.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    header.push(b[0]);
                }
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let balancer = Arc::new(Balancer::new(
        "test",
        "test".into(),
        Algorithm::RoundRobin,
        Duration::from_secs(2),
        Duration::from_secs(1),
        BackendMetrics::register(&mut registry),
    ));
    balancer.set_backends(&[backend_addr]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let route = Arc::new(Route {
        name: "test",
        upstream: balancer.clone(),
        version: Version::V1,
        header_port: None,
        idle_timeout: None,
        relaying: Relaying::Copy(CopyMode::Userspace),
        metrics: RelayMetrics::register(&mut registry).listener("test"),
    });
    let tracker = tokio_util::task::TaskTracker::new();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(ouroboros::accept::serve(
        vec![(listener, route)],
        None,
        tracker.clone(),
        stop.clone(),
    ));

    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 5];
    c.write_all(b"hello").await.unwrap();
    within("echo of hello", c.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"hello");
    let b = balancer.backends()[0].clone();
    assert_eq!(b.active(), 1);

    balancer.set_backends(&[]);
    assert!(balancer.backends().is_empty());
    // The established relay still carries data both ways.
    for _ in 0..3 {
        c.write_all(b"again").await.unwrap();
        within("echo on a drained relay", c.read_exact(&mut buf))
            .await
            .unwrap();
        assert_eq!(&buf, b"again");
    }
    assert_eq!(b.active(), 1);
    // A new connection finds no backend and is closed without data.
    let mut n = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut got = Vec::new();
    let _ = n.write_all(b"x").await;
    let _ = within(
        "close of a connection without backend",
        n.read_to_end(&mut got),
    )
    .await;
    assert!(got.is_empty());
    // The drained connection ends when its client does, releasing the backend.
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.active() != 0 {
        assert!(Instant::now() < deadline, "lease never released");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
}

/// `--service` end to end: a kubeconfig pointing at a fake API whose EndpointSlices list the
/// three nginx (one slice each, each with its own target port for `websecure`, plus a
/// terminating endpoint that must not be used).
#[test]
fn service_mode_balances_over_the_endpointslices() {
    use serde_json::json;
    let ngx = three();
    let slice = |name: &str, port: u16, endpoints: serde_json::Value| {
        json!({
            "metadata": { "name": name, "namespace": "kube-system", "resourceVersion": "10",
                          "labels": { "kubernetes.io/service-name": "traefik" } },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [ { "name": "websecure", "port": port, "protocol": "TCP" } ]
        })
    };
    let ready = json!([{ "addresses": ["127.0.0.1"], "conditions": { "ready": true } }]);
    let mut items: Vec<serde_json::Value> = ngx
        .iter()
        .enumerate()
        .map(|(i, n)| slice(&format!("traefik-{i}"), n.http_port, ready.clone()))
        .collect();
    let dead_port = free_port(V4);
    items.push(slice(
        "traefik-old",
        dead_port,
        json!([{ "addresses": ["127.0.0.1"], "conditions": { "ready": false, "serving": true, "terminating": true } }]),
    ));
    let list = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
        "metadata": { "resourceVersion": "11" }, "items": items
    });
    // The fake API answers the EndpointSlice list and holds the watches open without events.
    let (api, seen) = kube_mock::http(move |s| {
        if s.is_watch() {
            kube_mock::Answer::Hold
        } else {
            kube_mock::Answer::Json(200, list.clone())
        }
    });
    let dir = temp_dir("edge-kubeconfig");
    let kubeconfig = api.kubeconfig(dir.path());
    let listen = "127.0.0.1:0=websecure";
    let mut cmd = edge_command(&[], &[listen], &["--service", "kube-system/traefik"]);
    cmd.arg("--kubeconfig").arg(&kubeconfig);
    let (p, addrs) = spawn(cmd, &[listen]);
    wait_until("readiness from the EndpointSlices", || {
        p.admin("/readyz").0 == 200
    });
    let seen_backends = tally(addrs[0], 30);
    assert_eq!(
        seen_backends.keys().collect::<Vec<_>>(),
        NAMES,
        "{seen_backends:?}"
    );
    assert!(
        seen_backends.values().all(|c| *c == 10),
        "{seen_backends:?}"
    );
    assert_eq!(metric_sum(&p, "ouroboros_edge_backends", &[]), 3.0);
    assert_eq!(
        metric_sum(&p, "ouroboros_edge_backend_failures_total", &[]),
        0.0
    );
    let requests: Vec<String> = seen.calls().into_iter().map(|(_, u)| u).collect();
    assert!(
        requests.iter().any(|r| r
            .starts_with("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?")
            && r.contains("labelSelector=kubernetes.io%2Fservice-name%3Dtraefik")),
        "{requests:#?}"
    );
}
