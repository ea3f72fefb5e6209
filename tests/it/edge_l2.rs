//! Layer-2 pools against a mock API that keeps Leases as the API server does (create refuses an
//! existing name, a server-side apply that would take another holder's Lease is a conflict,
//! strategic merges set and clear fields): two edges elect one holder per address through the
//! election the controller uses, different addresses can have different holders, a holder that
//! loses an address's Lease takes the address off and the other edge takes it, and an edge that
//! stops gives up what it holds. The host is a recording fake here; tests/it/peers/edge_l2.rs
//! runs the real one in network namespaces.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_mock::{route, status, Answer};

use ouroboros::edge::l2::link::Host;
use ouroboros::edge::l2::{self, lease_name, Settings};
use ouroboros::edge::load_balancer::Served;
use ouroboros::edge::pool::parse_pools;
use ouroboros::edge::serve::{Listener, Plan};
use ouroboros::proxy_protocol::Version;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ouroboros/leases";
const A: &str = "192.0.2.1";
const B: &str = "192.0.2.2";

/// The Leases of the mock, by name.
type Store = Arc<Mutex<BTreeMap<String, Value>>>;

/// Answers the Lease calls of the election from `store`.
fn leases(store: Store) -> impl FnMut(&crate::kube_mock::Seen) -> Answer + Send + 'static {
    let mut rv = 100u64;
    move |s| {
        let path = s.path().to_string();
        let mut leases = store.lock().unwrap();
        rv += 1;
        let name = path.strip_prefix(&format!("{LEASES}/")).map(String::from);
        match (s.method.as_str(), name) {
            ("GET", Some(n)) => match leases.get(&n) {
                Some(l) => Answer::Json(200, l.clone()),
                None => Answer::Json(404, status(404, "NotFound", "leases not found")),
            },
            ("POST", None) if path == LEASES => {
                let mut l = s.body.clone().unwrap();
                let n = l["metadata"]["name"].as_str().unwrap().to_string();
                if leases.contains_key(&n) {
                    return Answer::Json(409, status(409, "AlreadyExists", "already exists"));
                }
                l["metadata"]["resourceVersion"] = json!(rv.to_string());
                leases.insert(n, l.clone());
                Answer::Json(201, l)
            }
            ("PATCH", Some(n)) => {
                let Some(l) = leases.get_mut(&n) else {
                    return Answer::Json(404, status(404, "NotFound", "leases not found"));
                };
                let patch = s.body.clone().unwrap();
                let apply = s
                    .content_type
                    .as_deref()
                    .is_some_and(|c| c.contains("apply-patch"));
                let held = l["spec"]["holderIdentity"]
                    .as_str()
                    .filter(|h| !h.is_empty());
                let taking = patch["spec"]["holderIdentity"].as_str();
                // Server-side apply of holderIdentity, owned by another manager: a conflict.
                if apply && held.is_some() && taking.is_some() && held != taking {
                    return Answer::Json(
                        409,
                        status(409, "Conflict", "Apply failed with 1 conflict"),
                    );
                }
                for (k, v) in patch["spec"].as_object().unwrap() {
                    if v.is_null() {
                        l["spec"].as_object_mut().map(|o| o.remove(k));
                    } else {
                        l["spec"][k] = v.clone();
                    }
                }
                l["metadata"]["resourceVersion"] = json!(rv.to_string());
                Answer::Json(200, l.clone())
            }
            _ => Answer::Json(404, status(404, "NotFound", "not in this test")),
        }
    }
}

/// The addresses an edge's host holds now.
#[derive(Clone, Default)]
struct FakeHost(Arc<Mutex<BTreeSet<IpAddr>>>);

impl FakeHost {
    fn held(&self) -> BTreeSet<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|ip| ip.to_string())
            .collect()
    }
}

impl Host for FakeHost {
    fn add(&self, ip: IpAddr, named: Option<&str>) -> Result<String, String> {
        assert_eq!(named, Some("eth0"), "the pool's interface");
        self.0.lock().unwrap().insert(ip);
        Ok("eth0".into())
    }
    fn announce(&self, ip: IpAddr, _: Option<&str>) -> Result<(), String> {
        assert!(
            self.0.lock().unwrap().contains(&ip),
            "announced {ip} without holding it"
        );
        Ok(())
    }
    fn remove(&self, ip: IpAddr, _: Option<&str>) -> Result<(), String> {
        self.0.lock().unwrap().remove(&ip);
        Ok(())
    }
    fn host_addresses(&self) -> Result<Vec<IpAddr>, String> {
        Ok(self.0.lock().unwrap().iter().copied().collect())
    }
}

/// The plans of one Service on `addrs`, port 443.
fn served(addrs: &[&str]) -> Option<Served> {
    let plan = Plan {
        regarding: Default::default(),
        version: Version::V2,
        listeners: (addrs.iter())
            .map(|a| Listener {
                addr: format!("{a}:443").parse().unwrap(),
                port_name: "https".into(),
            })
            .collect(),
    };
    Some([("web/site".to_string(), plan)].into())
}

struct Edge {
    host: FakeHost,
    served: watch::Sender<Option<Served>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// An edge `identity` serving `first`, whose host has `leftovers` on it (from an earlier run).
fn edge(client: &kube::Client, identity: &str, first: &[&str], leftovers: &[&str]) -> Edge {
    let pools =
        parse_pools("pools:\n- name: lan\n  addresses: [192.0.2.0/28]\n  l2: {interface: eth0}\n")
            .unwrap();
    let host = FakeHost::default();
    host.0
        .lock()
        .unwrap()
        .extend(leftovers.iter().map(|ip| ip.parse::<IpAddr>().unwrap()));
    let settings = Settings {
        client: client.clone(),
        namespace: "ouroboros".into(),
        prefix: "ouroboros-edge".into(),
        identity: identity.into(),
        host: Arc::new(host.clone()),
    };
    let (tx, rx) = watch::channel(served(first));
    let stop = CancellationToken::new();
    let task = tokio::spawn(l2::follow(settings, pools, rx, stop.clone()));
    Edge {
        host,
        served: tx,
        stop,
        task,
    }
}

/// Waits (at most `limit`) until both edges hold what `want` says; how long it took.
async fn until(edges: [&Edge; 2], want: [&[&str]; 2], limit: Duration, what: &str) -> Duration {
    let start = Instant::now();
    let want: Vec<BTreeSet<String>> = want
        .iter()
        .map(|w| w.iter().map(|s| s.to_string()).collect())
        .collect();
    loop {
        let got: Vec<BTreeSet<String>> = edges.iter().map(|e| e.host.held()).collect();
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{what}: the edges hold {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn holder(store: &Store, ip: &str) -> Option<String> {
    let name = lease_name("ouroboros-edge", ip.parse().unwrap());
    let leases = store.lock().unwrap();
    leases.get(&name)?["spec"]["holderIdentity"]
        .as_str()
        .map(String::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_elect_a_holder_per_address_and_a_lost_lease_moves_it() {
    let store: Store = Default::default();
    let (client, _api) = route(leases(store.clone()));
    // Each edge first serves one address alone, so each wins one. edge-b's host still has A
    // from an earlier run that was killed: it is taken off at start.
    let a = edge(&client, "edge-a", &[A], &[]);
    let mut b = edge(&client, "edge-b", &[B], &[A]);
    until(
        [&a, &b],
        [&[A], &[B]],
        Duration::from_secs(10),
        "first holders",
    )
    .await;
    assert_eq!(holder(&store, A).as_deref(), Some("edge-a"));
    assert_eq!(holder(&store, B).as_deref(), Some("edge-b"));

    // Both now serve both: each address keeps its holder, nobody takes the other's.
    a.served.send_replace(served(&[A, B]));
    b.served.send_replace(served(&[A, B]));
    tokio::time::sleep(Duration::from_secs(3)).await;
    until(
        [&a, &b],
        [&[A], &[B]],
        Duration::ZERO,
        "after both serve both",
    )
    .await;

    // edge-a loses A's Lease (another edge's renewal after a partition, as a read shows it):
    // it takes A off within its next read, and edge-b, now the holder, puts it on.
    {
        let mut leases = store.lock().unwrap();
        let l = leases
            .get_mut(&lease_name("ouroboros-edge", A.parse().unwrap()))
            .unwrap();
        l["spec"]["holderIdentity"] = json!("edge-b");
        l["spec"]["renewTime"] = renewed_now();
    }
    let moved = until(
        [&a, &b],
        [&[], &[A, B]],
        Duration::from_secs(20),
        "A moving to edge-b",
    )
    .await;
    eprintln!(
        "A moved to edge-b {:.1} s after edge-a lost its Lease",
        moved.as_secs_f64()
    );

    // An address no longer served is given up; a stopped edge gives up everything it holds.
    b.served.send_replace(served(&[A]));
    until(
        [&a, &b],
        [&[], &[A]],
        Duration::from_secs(10),
        "B no longer served",
    )
    .await;
    // Off the interface first, then the Lease released.
    let start = Instant::now();
    while holder(&store, B).is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "B's Lease not released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), &mut b.task)
        .await
        .unwrap()
        .unwrap();
    assert!(b.host.held().is_empty());
    assert_eq!(holder(&store, A), None, "A's Lease released");
    // edge-a, which still serves both, takes both at its next read of the Leases: within the
    // lease duration of the release.
    let back = until(
        [&a, &b],
        [&[A, B], &[]],
        Duration::from_secs(17),
        "both to edge-a",
    )
    .await;
    eprintln!(
        "edge-a took both {:.1} s after edge-b stopped",
        back.as_secs_f64()
    );
    a.stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), a.task)
        .await
        .unwrap()
        .unwrap();
    assert!(a.host.held().is_empty());
}

/// Now as a Lease's renewTime (MicroTime, as the election writes it).
fn renewed_now() -> Value {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    serde_json::to_value(MicroTime(k8s_openapi::jiff::Timestamp::now())).unwrap()
}
