//! `edge`'s Kubernetes watch against a mock API (kube-rs's mock-service pattern): the list and
//! watch requests it makes (paths, label and field selectors) and a backend set that follows
//! the EndpointSlices as they change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::kube_mock::{list, route, Answer};

use ouroboros::edge::backends::PortRef;
use ouroboros::edge::balance::metrics::BackendMetrics;
use ouroboros::edge::balance::pick::Algorithm;
use ouroboros::edge::balance::Balancer;
use ouroboros::edge::watch::follow;
use ouroboros::flags::NamespacedName;

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices";
const SERVICES: &str = "/api/v1/namespaces/kube-system/services";

fn endpoint(ip: &str, ready: bool, terminating: bool) -> Value {
    json!({
        "addresses": [ip],
        "conditions": { "ready": ready, "serving": ready, "terminating": terminating },
        "targetRef": { "kind": "Pod", "namespace": "kube-system", "name": format!("traefik-{ip}") }
    })
}

fn slice(name: &str, rv: &str, ty: &str, endpoints: Vec<Value>) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "resourceVersion": rv,
            "labels": { "kubernetes.io/service-name": "traefik" }
        },
        "addressType": ty,
        "endpoints": endpoints,
        "ports": [
            { "name": "web", "port": 8000, "protocol": "TCP" },
            { "name": "websecure", "port": 8443, "protocol": "TCP" }
        ]
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "traefik", "namespace": "kube-system", "resourceVersion": "7" },
        "spec": {
            "ports": [
                { "name": "web", "port": 80, "protocol": "TCP", "targetPort": "web" },
                { "name": "websecure", "port": 443, "protocol": "TCP", "targetPort": "websecure" }
            ]
        }
    })
}

fn watch_events(events: &[(&str, Value)]) -> Vec<Value> {
    events
        .iter()
        .map(|(ty, obj)| json!({ "type": ty, "object": obj }))
        .collect()
}

fn balancer(name: &str) -> Arc<Balancer> {
    Arc::new(Balancer::new(
        name,
        name.into(),
        Algorithm::RoundRobin,
        Duration::from_secs(1),
        Duration::from_secs(1),
        BackendMetrics::default(),
    ))
}

fn addrs(b: &Balancer) -> Vec<String> {
    b.backends().iter().map(|x| x.addr.to_string()).collect()
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[tokio::test]
async fn backend_sets_follow_the_endpointslices() {
    let mut slice_watches = 0;
    let (client, api) = route(move |s| match (s.path(), s.is_watch()) {
        (SLICES, false) => Answer::Json(
            200,
            list(
                "discovery.k8s.io/v1",
                "EndpointSliceList",
                "100",
                vec![slice(
                    "traefik-abc",
                    "99",
                    "IPv4",
                    vec![
                        endpoint("10.42.0.1", true, false),
                        endpoint("10.42.0.2", true, false),
                        endpoint("10.42.0.3", false, false),
                    ],
                )],
            ),
        ),
        (SLICES, true) if slice_watches == 0 => {
            slice_watches += 1;
            Answer::Events(watch_events(&[
                // A rollout: .2 terminates, .4 appears.
                (
                    "MODIFIED",
                    slice(
                        "traefik-abc",
                        "101",
                        "IPv4",
                        vec![
                            endpoint("10.42.0.1", true, false),
                            endpoint("10.42.0.2", false, true),
                            endpoint("10.42.0.4", true, false),
                        ],
                    ),
                ),
                // The IPv6 family of a dual-stack Service.
                (
                    "ADDED",
                    slice(
                        "traefik-v6",
                        "102",
                        "IPv6",
                        vec![endpoint("fd00::4", true, false)],
                    ),
                ),
            ]))
        }
        (SERVICES, false) => Answer::Json(200, list("v1", "ServiceList", "8", vec![service()])),
        // Later watches stay open with nothing to say.
        _ => Answer::Hold,
    });

    let by_name = balancer("[::]:443=websecure");
    let by_number = balancer("0.0.0.0:80=80");
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(follow(
        client,
        NamespacedName {
            namespace: "kube-system".into(),
            name: "traefik".into(),
        },
        vec![
            (PortRef::Name("websecure".into()), by_name.clone()),
            (PortRef::Number(80), by_number.clone()),
        ],
        stop.clone(),
    ));

    let want_443 = ["10.42.0.1:8443", "10.42.0.4:8443", "[fd00::4]:8443"];
    let want_80 = ["10.42.0.1:8000", "10.42.0.4:8000", "[fd00::4]:8000"];
    eventually("the watched set", || {
        addrs(&by_name) == want_443 && addrs(&by_number) == want_80
    })
    .await;

    let uris: Vec<String> = api.calls().into_iter().map(|(_, u)| u).collect();
    let slice_calls: Vec<&String> = uris.iter().filter(|u| u.starts_with(SLICES)).collect();
    assert!(slice_calls.len() >= 2, "{uris:#?}");
    for u in &slice_calls {
        assert!(
            u.contains("labelSelector=kubernetes.io%2Fservice-name%3Dtraefik"),
            "{u}"
        );
    }
    assert!(
        !slice_calls[0].contains("watch=true"),
        "list first: {uris:#?}"
    );
    assert!(
        slice_calls[1].contains("watch=true") && slice_calls[1].contains("resourceVersion=100"),
        "then watch from the list's version: {uris:#?}"
    );
    let service_calls: Vec<&String> = uris.iter().filter(|u| u.starts_with(SERVICES)).collect();
    assert!(
        !service_calls.is_empty(),
        "numeric port needs the Service: {uris:#?}"
    );
    for u in &service_calls {
        assert!(u.contains("fieldSelector=metadata.name%3Dtraefik"), "{u}");
    }
    assert!(
        uris.iter()
            .all(|u| u.starts_with(SLICES) || u.starts_with(SERVICES)),
        "{uris:#?}"
    );

    stop.cancel();
    watch.await.unwrap();
}

#[tokio::test]
async fn named_ports_do_not_watch_the_service() {
    let (client, api) = route(|s| {
        if s.is_watch() {
            Answer::Hold
        } else {
            Answer::Json(
                200,
                list("discovery.k8s.io/v1", "EndpointSliceList", "5", vec![]),
            )
        }
    });
    let b = balancer("web");
    b.set_backends(&["10.0.0.9:1".parse().unwrap()]);
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(follow(
        client,
        NamespacedName {
            namespace: "kube-system".into(),
            name: "traefik".into(),
        },
        vec![(PortRef::Name("web".into()), b.clone())],
        stop.clone(),
    ));
    // An empty list empties the set.
    eventually("the empty set", || addrs(&b).is_empty()).await;
    eventually("the watch request", || api.calls().len() >= 2).await;
    let uris: Vec<String> = api.calls().into_iter().map(|(_, u)| u).collect();
    assert!(uris.iter().all(|u| u.starts_with(SLICES)), "{uris:#?}");
    stop.cancel();
    watch.await.unwrap();
}
