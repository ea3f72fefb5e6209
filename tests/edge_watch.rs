//! `edge`'s Kubernetes watch against a mock API (kube-rs's mock-service pattern): the list and
//! watch requests it makes (paths, label and field selectors) and a backend set that follows
//! the EndpointSlices as they change.

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tower_test::mock;

use ouroboros::edge::backends::PortRef;
use ouroboros::edge::balance::{Algorithm, BackendMetrics, Balancer};
use ouroboros::edge::watch::follow;
use ouroboros::edge::ServiceRef;

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

fn list(kind: &str, api_version: &str, rv: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": { "resourceVersion": rv },
        "items": items
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

fn watch_events(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ty, obj) in events {
        out.extend(serde_json::to_vec(&json!({ "type": ty, "object": obj })).unwrap());
        out.push(b'\n');
    }
    out
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

#[tokio::test]
async fn backend_sets_follow_the_endpointslices() {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let api = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let mut slice_watches = 0;
        let mut held = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let uri = req.uri().to_string();
            record.lock().unwrap().push(uri.clone());
            let path = req.uri().path().to_string();
            let watching = uri.contains("watch=true");
            let body: Vec<u8> = match (path.as_str(), watching) {
                (SLICES, false) => serde_json::to_vec(&list(
                    "EndpointSliceList",
                    "discovery.k8s.io/v1",
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
                ))
                .unwrap(),
                (SLICES, true) if slice_watches == 0 => {
                    slice_watches += 1;
                    watch_events(&[
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
                    ])
                }
                (SERVICES, false) => {
                    serde_json::to_vec(&list("ServiceList", "v1", "8", vec![service()])).unwrap()
                }
                // Later watches stay open with nothing to say.
                _ => {
                    held.push(send);
                    continue;
                }
            };
            send.send_response(Response::new(Body::from(body)));
        }
    });

    let by_name = balancer("[::]:443=websecure");
    let by_number = balancer("0.0.0.0:80=80");
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(follow(
        Client::new(svc, "default"),
        ServiceRef {
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

    let uris = seen.lock().unwrap().clone();
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
    api.abort();
}

#[tokio::test]
async fn named_ports_do_not_watch_the_service() {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let api = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let mut held = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let uri = req.uri().to_string();
            record.lock().unwrap().push(uri.clone());
            if uri.contains("watch=true") {
                held.push(send);
                continue;
            }
            let body = list("EndpointSliceList", "discovery.k8s.io/v1", "5", vec![]);
            send.send_response(Response::new(Body::from(
                serde_json::to_vec(&body).unwrap(),
            )));
        }
    });
    let b = balancer("web");
    b.set_backends(&["10.0.0.9:1".parse().unwrap()]);
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(follow(
        Client::new(svc, "default"),
        ServiceRef {
            namespace: "kube-system".into(),
            name: "traefik".into(),
        },
        vec![(PortRef::Name("web".into()), b.clone())],
        stop.clone(),
    ));
    // An empty list empties the set.
    eventually("the empty set", || addrs(&b).is_empty()).await;
    eventually("the watch request", || seen.lock().unwrap().len() >= 2).await;
    let uris = seen.lock().unwrap().clone();
    assert!(uris.iter().all(|u| u.starts_with(SLICES)), "{uris:#?}");
    stop.cancel();
    watch.await.unwrap();
    api.abort();
}
