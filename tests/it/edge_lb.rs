//! `edge --pools` (the load balancer of a class) against a mock API: the exact status writes and
//! Events of allocation, conflicts, pool exhaustion, release and a restart.
//!
//! The mock lists the Services given and holds the watch open; the test delivers watch events
//! as the API server would. A pass is known to be finished (its writes sent) once the pass after
//! it has published its listeners, which [`Lb::settle`] waits for.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_mock::{list, route, Answer, Routed};

use ouroboros::controller::events;
use ouroboros::edge::load_balancer::{self, Config, Served, REPORTER};
use ouroboros::edge::pool::parse_pools;
use ouroboros::proxy_protocol::Version;

const SERVICES: &str = "/api/v1/services";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/web/events";

/// Service `web/NAME` created at second `age`, of `type` LoadBalancer and our class unless
/// `spec` overrides them; `status` as given.
fn svc(name: &str, age: u32, spec: Value, status: Value, annotations: Value) -> Value {
    let mut s = json!({
        "type": "LoadBalancer",
        "loadBalancerClass": "ouroboros.io/edge",
        "ipFamilies": ["IPv4"],
        "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
    });
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "namespace": "web", "name": name, "uid": format!("uid-{name}"),
            "resourceVersion": format!("{}", 10 + age),
            "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z"),
            "annotations": annotations,
        },
        "spec": s,
        "status": status,
    })
}

fn ours(name: &str, age: u32) -> Value {
    svc(name, age, json!({}), json!({}), json!({}))
}

/// The status an address of ours is reported with, for the 443 port of [`svc`].
fn held(ips: &[&str]) -> Value {
    let ingress: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"ip": ip, "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]}))
        .collect();
    json!({"loadBalancer": {"ingress": ingress}})
}

/// The merge patch that makes Service `web/name` (at `rv`) report `ips` (none: removed).
fn patch_to(rv: &str, ips: &[&str]) -> Value {
    let ingress = if ips.is_empty() {
        Value::Null
    } else {
        held(ips)["loadBalancer"]["ingress"].clone()
    };
    json!({"metadata": {"resourceVersion": rv}, "status": {"loadBalancer": {"ingress": ingress}}})
}

struct Lb {
    api: Routed,
    served: watch::Receiver<Option<Served>>,
    /// Whether this edge holds the Lease.
    leader: watch::Sender<bool>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Lb {
    /// The edge over `pools` with these Services listed.
    async fn start(pools: &str, services: Vec<Value>) -> Lb {
        Lb::answering(pools, services, 200).await
    }

    /// Like [`Lb::start`], with every status write answered `code`.
    async fn answering(pools: &str, services: Vec<Value>, code: u16) -> Lb {
        Lb::with(pools, services, code, true).await
    }

    /// Like [`Lb::answering`], holding the Lease from the start or not (`leader`).
    async fn with(pools: &str, services: Vec<Value>, code: u16, leader: bool) -> Lb {
        let (client, api) = route(move |s| {
            let path = s.path().to_string();
            match (s.method.as_str(), path.as_str()) {
                ("GET", SERVICES) if !s.is_watch() => {
                    Answer::Json(200, list("v1", "ServiceList", "100", services.clone()))
                }
                ("GET", _) => Answer::Hold,
                ("PATCH", p) if p.ends_with("/status") && code != 200 => Answer::Json(
                    code,
                    crate::kube_mock::status(code, "Refused", "refused by the test"),
                ),
                ("PATCH", p) if p.ends_with("/status") => {
                    let name = p.split('/').nth_back(1).unwrap();
                    Answer::Json(
                        200,
                        json!({"apiVersion": "v1", "kind": "Service",
                               "metadata": {"namespace": "web", "name": name}}),
                    )
                }
                ("POST", EVENTS) => Answer::Json(201, s.body.clone().unwrap()),
                _ => Answer::Json(
                    404,
                    crate::kube_mock::status(404, "NotFound", "not in this test"),
                ),
            }
        });
        let (notifier, _publisher) =
            events::spawn_as(client.clone(), REPORTER, "edge", "edge-0".into());
        let config = Config {
            class: "ouroboros.io/edge".into(),
            pools: parse_pools(pools).unwrap(),
            default_version: Version::V2,
        };
        let (tx, mut served) = watch::channel(None);
        let (leader, lease) = watch::channel(leader);
        let stop = CancellationToken::new();
        let task = tokio::spawn(load_balancer::run(
            client,
            config,
            (notifier, lease),
            tx,
            stop.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(10), served.wait_for(Option::is_some))
            .await
            .expect("a first pass")
            .unwrap();
        Lb {
            api,
            served,
            leader,
            stop,
            task,
        }
    }

    /// Delivers one watch event.
    async fn event(&self, ty: &str, object: Value) {
        self.api
            .deliver(SERVICES, json!({"type": ty, "object": object}))
            .await;
    }

    /// Waits until every pass so far has sent its writes: delivers a Service that is not a
    /// LoadBalancer (no write of its own) and waits for the pass it starts.
    async fn settle(&mut self) {
        self.served.mark_unchanged();
        let plain = svc(
            "zz-plain",
            59,
            json!({"type": "ClusterIP", "loadBalancerClass": null}),
            json!({}),
            json!({}),
        );
        self.event("MODIFIED", plain).await;
        tokio::time::timeout(Duration::from_secs(10), self.served.changed())
            .await
            .expect("the pass after the event")
            .unwrap();
    }

    /// The status writes so far, as (Service name, patch), with their Content-Type checked.
    fn patches(&self) -> Vec<(String, Value)> {
        let seen = self.api.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method == "PATCH")
            .map(|s| {
                assert_eq!(
                    s.content_type.as_deref(),
                    Some("application/merge-patch+json"),
                    "{}",
                    s.uri
                );
                let p = s.path();
                assert!(
                    p.starts_with("/api/v1/namespaces/web/services/") && p.ends_with("/status"),
                    "{p}"
                );
                let name = p.split('/').nth_back(1).unwrap().to_string();
                (name, s.body.clone().unwrap())
            })
            .collect()
    }

    /// The Events created so far (waiting up to 5 s for `n` of them), as (Service, reason, note).
    async fn events(&self, n: usize) -> Vec<(String, String, String)> {
        self.api.wait_for(5, |a| a.count("POST", EVENTS) >= n).await;
        self.api
            .matching("POST", EVENTS)
            .into_iter()
            .map(|(_, body)| {
                let e = body.unwrap();
                assert_eq!(e["type"], "Warning");
                assert_eq!(e["reportingController"], REPORTER);
                assert_eq!(e["regarding"]["kind"], "Service");
                let name = e["regarding"]["name"].as_str().unwrap().to_string();
                assert_eq!(e["regarding"]["uid"], format!("uid-{name}"));
                (
                    name,
                    e["reason"].as_str().unwrap().into(),
                    e["note"].as_str().unwrap().into(),
                )
            })
            .collect()
    }

    fn listeners(&self, key: &str) -> Vec<String> {
        let served = self.served.borrow();
        let plan = &served.as_ref().unwrap()[key];
        plan.listeners
            .iter()
            .map(|l| format!("{} {}", l.addr, l.port_name))
            .collect()
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

fn strings(v: &[(&str, Value)]) -> Vec<(String, Value)> {
    v.iter().map(|(n, p)| (n.to_string(), p.clone())).collect()
}

#[tokio::test]
async fn allocation_writes_ip_mode_proxy_lowest_first_and_skips_other_load_balancers() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n- name: v6\n  addresses: ['2001:db8::/126']\n";
    let mut lb = Lb::start(
        pools,
        vec![
            ours("a", 1),
            svc(
                "dual",
                2,
                json!({"ipFamilies": ["IPv6", "IPv4"], "ports": [
                    {"name": "https", "port": 443, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "protocol": "UDP"}]}),
                json!({}),
                json!({"ouroboros.io/proxy-protocol": "v1"}),
            ),
            // Another load balancer's Service holds .1: never handed out.
            svc(
                "metal",
                0,
                json!({"loadBalancerClass": null}),
                json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}),
                json!({}),
            ),
            svc(
                "plain",
                0,
                json!({"type": "ClusterIP", "loadBalancerClass": null}),
                json!({}),
                json!({}),
            ),
        ],
    )
    .await;
    lb.settle().await;
    let dual_ingress = json!([
        {"ip": "2001:db8::", "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]},
        {"ip": "192.0.2.3", "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]},
    ]);
    assert_eq!(
        lb.patches(),
        strings(&[
            ("a", patch_to("11", &["192.0.2.2"])),
            (
                "dual",
                json!({"metadata": {"resourceVersion": "12"},
                       "status": {"loadBalancer": {"ingress": dual_ingress}}})
            ),
        ])
    );
    assert!(lb.events(0).await.is_empty());
    assert_eq!(lb.listeners("web/a"), ["192.0.2.2:443 https"]);
    assert_eq!(
        lb.listeners("web/dual"),
        ["192.0.2.3:443 https", "[2001:db8::]:443 https"]
    );
    let served = lb.served.borrow().clone().unwrap();
    assert_eq!(served["web/dual"].version, Version::V1, "annotation");
    assert_eq!(served["web/a"].version, Version::V2, "default");
    assert_eq!(served.len(), 2, "{served:?}");
    lb.stop().await;
}

/// Edges on several nodes: each listens on every address, only the Lease holder writes the
/// status and sends the Events. A standby that gains the Lease writes what is due at once,
/// with no Service changing to prompt it, and reports the problems it sees.
#[tokio::test]
async fn a_standby_listens_and_writes_nothing_until_it_holds_the_lease() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/30]\n";
    let want = json!({"ouroboros.io/load-balancer-ips": "192.0.2.9"});
    let services = vec![ours("a", 1), svc("outside", 2, json!({}), json!({}), want)];
    let mut lb = Lb::with(pools, services, 200, false).await;
    lb.settle().await;
    assert_eq!(
        lb.listeners("web/a"),
        ["192.0.2.1:443 https"],
        "listens all the same"
    );
    assert!(lb.patches().is_empty(), "a standby writes no status");
    assert_eq!(lb.api.count("POST", EVENTS), 0, "nor Events");
    lb.leader.send_replace(true);
    assert!(
        lb.api
            .wait_for(5, |a| a
                .count("PATCH", "/api/v1/namespaces/web/services/a/status")
                == 1)
            .await
    );
    assert_eq!(
        lb.patches(),
        strings(&[("a", patch_to("11", &["192.0.2.1"]))])
    );
    let events = lb.events(1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "InvalidAddressRequest");
    // Losing it: nothing more is written, whatever changes.
    lb.leader.send_replace(false);
    lb.event("MODIFIED", ours("b", 3)).await;
    lb.settle().await;
    assert_eq!(lb.listeners("web/b"), ["192.0.2.2:443 https"]);
    assert_eq!(lb.patches().len(), 1);
    lb.stop().await;
}

#[tokio::test]
async fn conflicts_and_exhaustion_get_an_event_and_no_write() {
    let pools =
        "pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n- name: v6\n  addresses: ['2001:db8::1/128']\n";
    let want = |ip: &str| json!({"ouroboros.io/load-balancer-ips": ip});
    let dual = json!({"ipFamilies": ["IPv4", "IPv6"]});
    let mut lb = Lb::start(
        pools,
        vec![
            svc("old", 1, json!({}), json!({}), want("192.0.2.2")),
            svc("young", 2, json!({}), json!({}), want("192.0.2.2")),
            svc("dual", 3, dual.clone(), json!({}), json!({})),
            // IPv4 addresses are left, the one IPv6 address is dual's: nothing at all.
            svc("dual-late", 4, dual, json!({}), json!({})),
        ],
    )
    .await;
    lb.settle().await;
    assert_eq!(
        lb.patches(),
        strings(&[
            ("dual", patch_to("13", &["192.0.2.1", "2001:db8::1"])),
            ("old", patch_to("11", &["192.0.2.2"])),
        ])
    );
    let events = lb.events(2).await;
    assert_eq!(
        events,
        [
            (
                "dual-late".to_string(),
                "AddressPoolExhausted".to_string(),
                "no free IPv6 address left in pools v6; nothing assigned: add addresses to a \
                 pool or free some"
                    .to_string()
            ),
            (
                "young".to_string(),
                "AddressConflict".to_string(),
                "requested address 192.0.2.2 is taken by Service web/old; request another \
                 address or free it there"
                    .to_string()
            ),
        ]
    );
    // Another pass: the same findings are not published again.
    lb.settle().await;
    assert_eq!(lb.events(3).await.len(), 2);
    assert_eq!(lb.patches().len(), 2);
    lb.stop().await;
}

#[tokio::test]
async fn deleted_and_retyped_services_release_their_addresses() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/30]\n";
    let a = svc("a", 1, json!({}), held(&["192.0.2.1"]), json!({}));
    let b = svc("b", 2, json!({}), held(&["192.0.2.2"]), json!({}));
    let mut lb = Lb::start(pools, vec![a.clone(), b.clone(), ours("c", 3)]).await;
    lb.settle().await;
    assert!(lb.patches().is_empty(), "{:?}", lb.patches());
    let events = lb.events(1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1, "AddressPoolExhausted");

    // a deleted: c, which was waiting, gets its address.
    lb.event("DELETED", a).await;
    lb.settle().await;
    assert_eq!(
        lb.patches(),
        strings(&[("c", patch_to("13", &["192.0.2.1"]))])
    );

    // b is no longer a LoadBalancer. The real API server drops status.loadBalancer with the
    // type change itself (tests/it/peers/edge_lb.rs), so the event carries none: nothing to
    // write, and b's address is free for the next Service.
    let mut retyped = b.clone();
    retyped["spec"]["type"] = json!("ClusterIP");
    retyped["spec"]["loadBalancerClass"] = Value::Null;
    retyped["metadata"]["resourceVersion"] = json!("30");
    retyped["status"] = json!({"loadBalancer": {}});
    lb.event("MODIFIED", retyped.clone()).await;
    lb.event("ADDED", ours("d", 4)).await;
    lb.settle().await;
    assert_eq!(
        lb.patches()[1..],
        strings(&[("d", patch_to("14", &["192.0.2.2"]))])[..]
    );

    // A status left behind on a Service that is no longer a LoadBalancer (written by hand, or
    // by a server that kept it) is removed.
    retyped["status"] = held(&["192.0.2.2"]);
    retyped["metadata"]["resourceVersion"] = json!("31");
    lb.event("MODIFIED", retyped).await;
    lb.settle().await;
    assert_eq!(
        lb.patches()[2..],
        strings(&[("b", patch_to("31", &[]))])[..]
    );
    assert!(!lb.served.borrow().as_ref().unwrap().contains_key("web/b"));
    lb.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_every_address_and_writes_nothing() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n";
    // Not the lowest addresses, and in the opposite order of age: kept as they are.
    let mut lb = Lb::start(
        pools,
        vec![
            svc("old", 1, json!({}), held(&["192.0.2.5"]), json!({})),
            svc("young", 2, json!({}), held(&["192.0.2.3"]), json!({})),
        ],
    )
    .await;
    lb.settle().await;
    assert!(lb.patches().is_empty(), "{:?}", lb.patches());
    assert!(lb.events(0).await.is_empty());
    assert_eq!(lb.listeners("web/old"), ["192.0.2.5:443 https"]);
    assert_eq!(lb.listeners("web/young"), ["192.0.2.3:443 https"]);
    let non_reads: Vec<_> = lb
        .api
        .calls()
        .into_iter()
        .filter(|(m, _)| m != "GET")
        .collect();
    assert!(non_reads.is_empty(), "{non_reads:?}");
    lb.stop().await;
}

#[tokio::test]
async fn an_unreadable_proxy_annotation_is_an_event_and_no_address() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n";
    let bad = svc(
        "bad",
        1,
        json!({}),
        held(&["192.0.2.1"]),
        json!({"ouroboros.io/proxy-protocol": "v3"}),
    );
    let mut lb = Lb::start(pools, vec![bad]).await;
    lb.settle().await;
    assert_eq!(lb.patches(), strings(&[("bad", patch_to("11", &[]))]));
    let events = lb.events(1).await;
    assert_eq!(events[0].1, "InvalidAnnotation");
    assert!(
        events[0]
            .2
            .contains("\"v3\" is not a PROXY-protocol version"),
        "{events:?}"
    );
    assert!(lb.served.borrow().as_ref().unwrap().is_empty());
    lb.stop().await;
}

#[tokio::test]
async fn a_write_refused_as_invalid_is_not_sent_again_and_a_forbidden_one_is_retried() {
    let pools = "pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n";
    // 422: sent once, not again on later passes while the Service stays the same.
    let mut lb = Lb::answering(pools, vec![ours("a", 1)], 422).await;
    lb.settle().await;
    lb.settle().await;
    assert_eq!(
        lb.patches(),
        strings(&[("a", patch_to("11", &["192.0.2.1"]))])
    );
    lb.stop().await;

    // 403: tried again after a backoff (1 s, then 2 s...), with no other change to prompt it.
    let lb = Lb::answering(pools, vec![ours("a", 1)], 403).await;
    assert!(
        lb.api
            .wait_for(10, |a| a.count("PATCH", "/status") >= 2)
            .await,
        "{:?}",
        lb.api.calls()
    );
    let patches = lb.patches();
    assert!(patches.iter().all(|p| p == &patches[0]), "{patches:?}");
    lb.stop().await;
}
