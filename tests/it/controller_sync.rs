//! The whole controller (`controller::run_with`) against a routing mock API: watches, initial
//! list gating, the coredns write path, Events, leader election and shutdown. Every request is
//! recorded; the assertions name method, exact path and query, and body.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::kube_mock::{list, route, status, Answer, Routed, Seen};

use ouroboros::controller::{run_with, ControllerArgs};
use ouroboros::dns::BEGIN_MARKER;

const INGRESS_LIST: &str = "/apis/networking.k8s.io/v1/ingresses?&limit=500";
const COREDNS: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
const COREDNS_PUT: &str =
    "/api/v1/namespaces/kube-system/configmaps/coredns?&fieldManager=ouroboros";
const COREDNS_WATCH_LIST: &str =
    "/api/v1/namespaces/kube-system/configmaps?&fieldSelector=metadata.name%3Dcoredns&limit=500";
const COREDNS_WATCH: &str = "&watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dcoredns";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/";
const NODE_LOCAL: &str = "/api/v1/namespaces/kube-system/configmaps/node-local-dns";
const NODE_LOCAL_PUT: &str =
    "/api/v1/namespaces/kube-system/configmaps/node-local-dns?&fieldManager=ouroboros";
const NODE_LOCAL_WATCH_LIST: &str =
    "/api/v1/namespaces/kube-system/configmaps?&fieldSelector=metadata.name%3Dnode-local-dns&limit=500";
const PROXY_SERVICE: &str = "/api/v1/namespaces/ouroboros/services/ouroboros-proxy";
const PROXY_SERVICE_WATCH_LIST: &str =
    "/api/v1/namespaces/ouroboros/services?&fieldSelector=metadata.name%3Douroboros-proxy&limit=500";
const PROXY_SERVICE_WATCH: &str = "/api/v1/namespaces/ouroboros/services?&watch=true";
const SERVICES: &str = "/api/v1/namespaces/ouroboros/services";
const CONFIGMAPS: &str = "/api/v1/namespaces/ouroboros/configmaps";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ouroboros/leases/ouroboros-controller";
const COREFILE: &str = ".:53 {\n    errors\n    health\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

#[derive(Parser)]
struct T {
    #[command(flatten)]
    c: ControllerArgs,
}

fn args(extra: &[&str]) -> ControllerArgs {
    let mut v = vec![
        "t",
        "--cluster-domain",
        "cluster.local",
        "--proxy-fqdn",
        "ouroboros-proxy.ouroboros.svc.cluster.local.",
        "--listen-health",
        "",
        "--lease-namespace",
        "ouroboros",
        "--debounce",
        "50ms",
    ];
    if extra.contains(&"--listen-health") {
        let at = v.iter().position(|a| *a == "--listen-health").unwrap();
        v.drain(at..at + 2);
    }
    // The engine's tests read the block as one line per host; the template answers and the
    // proxy Service they follow have tests of their own (`template_answers_*`).
    if !extra.contains(&"--coredns-answer") {
        v.extend(["--coredns-answer", "rewrite"]);
    }
    // The probe's reads and queries are its own test's (`the_probe_*`); the engine's tests
    // check exact requests without them.
    if !extra.contains(&"--probe-interval") {
        v.extend(["--probe-interval", "0s"]);
    }
    v.extend_from_slice(extra);
    crate::common::parse_without_env::<T, _, _>(v)
        .expect("flags")
        .c
}

fn ingress(name: &str, hosts: &[&str]) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name, "namespace": "web", "resourceVersion": "10",
            "managedFields": [{"manager": "kubectl", "operation": "Update"}]
        },
        "spec": {
            "tls": [{"hosts": hosts, "secretName": "cert"}],
            "rules": [{"host": hosts[0]}]
        }
    })
}

fn configmap(rv: u64, corefile: &str) -> Value {
    named_configmap("coredns", rv, corefile)
}

fn named_configmap(name: &str, rv: u64, corefile: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": "kube-system",
            "uid": "8d5c1f4e-2f0a-4a52-9a57-3f1e0c6b7a11",
            "resourceVersion": rv.to_string()
        },
        "data": {"Corefile": corefile}
    })
}

fn not_found(what: &str) -> Answer {
    Answer::Json(404, status(404, "NotFound", &format!("{what} not found")))
}

/// The fake cluster's state, shared by the handler and the test.
#[derive(Default)]
struct State {
    corefile: String,
    rv: u64,
    ingresses: Vec<Value>,
    /// Gateway-API list paths answered 404 (CRD not installed).
    gateway_crds: bool,
    /// HTTPRoutes served once `gateway_crds` is set.
    http_routes: Vec<Value>,
    /// Traefik's, Contour's and Istio's objects by list path prefix
    /// (`/apis/traefik.io/v1alpha1/ingressroutes?`), served once their CRD is: a path absent
    /// here is answered 404 (CRD not installed).
    crd_objects: Vec<(&'static str, Vec<Value>)>,
    /// List paths never answered.
    hold_lists: Vec<&'static str>,
    /// Replies for the next PUTs on the CoreDNS ConfigMap (default: accept).
    put_replies: Vec<u16>,
    /// The Lease, when leader election runs.
    lease: Option<Value>,
    /// Every request on the Lease is answered 500 (the API server cannot renew it).
    lease_fails: bool,
    /// When each GET of the CoreDNS ConfigMap arrived.
    coredns_reads: Vec<std::time::SystemTime>,
    /// The proxy Service (`None`: 404).
    proxy_service: Option<Value>,
    /// Other Services in the `ouroboros` namespace (named targets' proxies), by name.
    services: Vec<Value>,
    /// node-local-dns's Corefile and resourceVersion (`None`: 404).
    node_local: Option<(String, u64)>,
    /// Answers for the next Ingress list requests (any page), before the list of `ingresses`.
    ingress_lists: Vec<Answer>,
    /// Other ConfigMaps in the `ouroboros` namespace (ingress controllers' configuration).
    configmaps: Vec<Value>,
    /// The IngressClasses listed.
    ingress_classes: Vec<Value>,
    /// The discovery documents (`/apis/{group}/{version}`) answered, with the resources each
    /// lists; any other group version is not served (404).
    served: Vec<(&'static str, Vec<&'static str>)>,
}

/// `GET /apis/{group}/{version}`: a group version's discovery document.
fn is_discovery(u: &str) -> bool {
    u.strip_prefix("/apis/")
        .is_some_and(|rest| !rest.contains('?') && rest.split('/').count() == 2)
}

type Shared = Arc<Mutex<State>>;

/// A GET under the namespaced collection `base` answered from `objects`: one by the name in
/// the path (404 without it), or a `kind` list of those a `metadata.name` field selector names.
fn get_named(u: &str, base: &str, objects: &[Value], kind: &str, plural: &str) -> Answer {
    let named = |name: &str| {
        objects
            .iter()
            .filter(|o| o["metadata"]["name"] == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    match u[base.len()..].strip_prefix("?&fieldSelector=metadata.name%3D") {
        Some(rest) => {
            let name = rest.split('&').next().unwrap();
            Answer::Json(200, list("v1", kind, "100", named(name)))
        }
        None => {
            let name = u[base.len()..].trim_start_matches('/');
            match named(name).pop() {
                Some(o) => Answer::Json(200, o),
                None => not_found(&format!("{plural} \"{name}\"")),
            }
        }
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the fake API server's route table: one arm a request"
)]
fn handler(state: Shared) -> impl FnMut(&Seen) -> Answer + Send + 'static {
    move |s| {
        let mut st = state.lock().unwrap();
        let (m, u) = (s.method.as_str(), s.uri.as_str());
        if u.contains("watch=true") {
            return Answer::Hold;
        }
        if m == "GET" && st.hold_lists.iter().any(|p| u.starts_with(p)) {
            return Answer::Hold;
        }
        if m == "GET" && u.starts_with(INGRESS_LIST) && !st.ingress_lists.is_empty() {
            return st.ingress_lists.remove(0);
        }
        match m {
            "GET" if is_discovery(u) => {
                let gv = &u["/apis/".len()..];
                match st.served.iter().find(|(v, _)| *v == gv) {
                    Some((_, resources)) => Answer::Json(
                        200,
                        json!({
                            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                            "resources": resources.iter().map(|r| json!({
                                "name": r, "singularName": "", "namespaced": true,
                                "kind": "X", "verbs": ["list", "watch"]
                            })).collect::<Vec<_>>()
                        }),
                    ),
                    None => not_found("the server could not find the requested resource"),
                }
            }
            "GET" if u == INGRESS_LIST => Answer::Json(
                200,
                list(
                    "networking.k8s.io/v1",
                    "IngressList",
                    "100",
                    st.ingresses.clone(),
                ),
            ),
            "GET" if u.starts_with("/apis/networking.k8s.io/v1/ingressclasses?") => Answer::Json(
                200,
                list(
                    "networking.k8s.io/v1",
                    "IngressClassList",
                    "100",
                    st.ingress_classes.clone(),
                ),
            ),
            "GET"
                if [
                    "/apis/traefik.io/",
                    "/apis/traefik.containo.us/",
                    "/apis/projectcontour.io/",
                    "/apis/networking.istio.io/",
                ]
                .iter()
                .any(|p| u.starts_with(p)) =>
            {
                match st.crd_objects.iter().find(|(p, _)| u.starts_with(p)) {
                    Some((_, items)) => Answer::Json(200, list("v1", "List", "100", items.clone())),
                    None => not_found("the server could not find the requested resource"),
                }
            }
            "GET" if u.starts_with("/apis/gateway.networking.k8s.io/v1/") => {
                if st.gateway_crds {
                    let items = if u.contains("/httproutes?") {
                        st.http_routes.clone()
                    } else {
                        vec![]
                    };
                    Answer::Json(
                        200,
                        list("gateway.networking.k8s.io/v1", "List", "100", items),
                    )
                } else {
                    not_found("the server could not find the requested resource")
                }
            }
            "GET" if u == COREDNS_WATCH_LIST => Answer::Json(
                200,
                list(
                    "v1",
                    "ConfigMapList",
                    &st.rv.to_string(),
                    vec![configmap(st.rv, &st.corefile)],
                ),
            ),
            "GET" if u == COREDNS => {
                st.coredns_reads.push(std::time::SystemTime::now());
                Answer::Json(200, configmap(st.rv, &st.corefile))
            }
            "PUT" if u == COREDNS_PUT => {
                let body = s.body.clone().unwrap();
                let code = if st.put_replies.is_empty() {
                    200
                } else {
                    st.put_replies.remove(0)
                };
                if code == 409 {
                    return Answer::Json(
                        409,
                        status(409, "Conflict", "the object has been modified"),
                    );
                }
                if code == 403 {
                    // What a kube-apiserver that has just started says until its authorizer
                    // has loaded the RBAC objects.
                    return Answer::Json(
                        403,
                        status(
                            403,
                            "Forbidden",
                            "configmaps \"coredns\" is forbidden: User \"system:serviceaccount:\
                             ouroboros:ouroboros-controller\" cannot update resource \"configmaps\" \
                             in API group \"\" in the namespace \"kube-system\": RBAC: \
                             clusterrole.rbac.authorization.k8s.io \"ouroboros-controller\" not found",
                        ),
                    );
                }
                assert_eq!(
                    body["metadata"]["resourceVersion"],
                    json!(st.rv.to_string()),
                    "writes carry the resourceVersion read"
                );
                st.rv += 1;
                st.corefile = body["data"]["Corefile"].as_str().unwrap().to_string();
                Answer::Json(200, configmap(st.rv, &st.corefile))
            }
            "GET" if u == PROXY_SERVICE => match &st.proxy_service {
                Some(svc) => Answer::Json(200, svc.clone()),
                None => not_found("services \"ouroboros-proxy\""),
            },
            "GET" if u == PROXY_SERVICE_WATCH_LIST => Answer::Json(
                200,
                list(
                    "v1",
                    "ServiceList",
                    "100",
                    st.proxy_service.iter().cloned().collect(),
                ),
            ),
            "GET" if u.starts_with(SERVICES) => {
                get_named(u, SERVICES, &st.services, "ServiceList", "services")
            }
            "GET" if u == NODE_LOCAL && st.node_local.is_some() => {
                let (text, rv) = st.node_local.clone().unwrap();
                Answer::Json(200, named_configmap("node-local-dns", rv, &text))
            }
            "GET" if u == NODE_LOCAL_WATCH_LIST => {
                let items = st.node_local.iter();
                let items = items.map(|(t, rv)| named_configmap("node-local-dns", *rv, t));
                Answer::Json(200, list("v1", "ConfigMapList", "1", items.collect()))
            }
            "PUT" if u == NODE_LOCAL_PUT => {
                let body = s.body.clone().unwrap();
                let (_, rv) = st.node_local.clone().expect("PUT of an absent ConfigMap");
                assert_eq!(body["metadata"]["resourceVersion"], json!(rv.to_string()));
                let text = body["data"]["Corefile"].as_str().unwrap().to_string();
                st.node_local = Some((text.clone(), rv + 1));
                Answer::Json(200, named_configmap("node-local-dns", rv + 1, &text))
            }
            "GET" if u.contains("/configmaps/node-local-dns") => {
                not_found("configmaps \"node-local-dns\"")
            }
            "GET" if u.starts_with(CONFIGMAPS) => {
                get_named(u, CONFIGMAPS, &st.configmaps, "ConfigMapList", "configmaps")
            }
            "POST" if u.starts_with(EVENTS) => Answer::Json(201, s.body.clone().unwrap()),
            "PATCH" if u.starts_with(EVENTS) => Answer::Json(200, s.body.clone().unwrap()),
            _ if u.starts_with(LEASE) && st.lease_fails => Answer::Json(
                500,
                status(500, "InternalError", "etcdserver: request timed out"),
            ),
            "GET" if u == LEASE => match &st.lease {
                Some(l) => Answer::Json(200, l.clone()),
                None => not_found("leases \"ouroboros-controller\""),
            },
            "PATCH" if u.starts_with(LEASE) => {
                let lease = st.lease.as_mut().expect("patch of an absent lease");
                let patch = s.body.clone().unwrap();
                for (k, v) in patch["spec"].as_object().unwrap() {
                    if v.is_null() {
                        lease["spec"].as_object_mut().unwrap().remove(k);
                    } else {
                        lease["spec"][k] = v.clone();
                    }
                }
                Answer::Json(200, lease.clone())
            }
            _ => Answer::Json(500, status(500, "InternalError", "unexpected request")),
        }
    }
}

struct Running {
    api: Routed,
    state: Shared,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

fn start(state: State, flags: &[&str]) -> Running {
    let state = Arc::new(Mutex::new(state));
    let (client, api) = route(handler(state.clone()));
    let stop = CancellationToken::new();
    let task = tokio::spawn(run_with(client, args(flags), stop.clone()));
    Running {
        api,
        state,
        stop,
        task,
    }
}

impl Running {
    async fn shutdown(self) -> Routed {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops within 10 s")
            .unwrap()
            .expect("run_with returns Ok");
        self.api
    }

    /// The CoreDNS ConfigMap as the fake API server holds it now.
    fn coredns_now(&self) -> Value {
        let st = self.state.lock().unwrap();
        configmap(st.rv, &st.corefile)
    }

    fn puts(&self) -> Vec<Value> {
        self.api
            .matching("PUT", COREDNS)
            .into_iter()
            .filter_map(|(_, b)| b)
            .collect()
    }
}

fn state_with(ingresses: Vec<Value>) -> State {
    State {
        corefile: COREFILE.to_string(),
        rv: 1,
        ingresses,
        ..State::default()
    }
}

fn writes(api: &Routed) -> Vec<(String, String)> {
    api.calls()
        .into_iter()
        .filter(|(m, u)| m != "GET" && !u.starts_with(EVENTS))
        .collect()
}

#[tokio::test]
async fn first_sync_writes_once_and_an_identical_resync_writes_nothing() {
    let r = start(
        state_with(vec![ingress(
            "shop",
            &["shop.example.com", "api.example.com"],
        )]),
        &["--leader-elect=false", "--resync", "300ms"],
    );
    // The first write, then at least two resyncs (each a get that finds nothing to do).
    assert!(
        r.api
            .wait_for(10, |a| a.count("GET", COREDNS) >= 3
                && a.count("PUT", COREDNS) >= 1)
            .await,
        "{:#?}",
        r.api.calls()
    );
    let puts = r.puts();
    let api = r.shutdown().await;
    assert_eq!(writes(&api), [("PUT".to_string(), COREDNS_PUT.to_string())]);
    let corefile = puts[0]["data"]["Corefile"].as_str().unwrap();
    assert!(corefile.contains(BEGIN_MARKER), "{corefile}");
    for h in ["shop.example.com", "api.example.com"] {
        assert!(
            corefile.contains(&format!(
                "rewrite name {h} ouroboros-proxy.ouroboros.svc.cluster.local."
            )),
            "{corefile}"
        );
    }
    assert!(puts[0]["metadata"].get("managedFields").is_none());
    // The list came before the first write.
    let calls = api.calls();
    let list_at = calls.iter().position(|(_, u)| u == INGRESS_LIST).unwrap();
    let put_at = calls.iter().position(|(m, _)| m == "PUT").unwrap();
    assert!(list_at < put_at);
    // The revert watch: a list with the field selector on the ConfigMap's name.
    assert_eq!(api.count("GET", COREDNS_WATCH_LIST), 1);
}

#[tokio::test]
async fn a_conflict_is_retried_from_the_get() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.put_replies = vec![409];
    let r = start(st, &["--leader-elect=false"]);
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    let api = r.shutdown().await;
    let seq: Vec<(String, String)> = api
        .calls()
        .into_iter()
        .filter(|(_, u)| u == COREDNS || u == COREDNS_PUT)
        .collect();
    let want = [
        ("GET", COREDNS),
        ("PUT", COREDNS_PUT),
        ("GET", COREDNS),
        ("PUT", COREDNS_PUT),
    ];
    assert_eq!(
        seq[..4],
        want.map(|(m, u)| (m.to_string(), u.to_string())),
        "{seq:#?}"
    );
    assert_eq!(api.count("PUT", COREDNS), 2);
}

/// A write refused (403) after one was allowed, as by an API server that has just restarted
/// and not yet loaded its RBAC objects: said once, as that (a warning Event whose note puts the
/// restart first), retried with the backoff, and written on the first retry that is allowed,
/// with no change of hostnames to prompt it.
#[tokio::test]
async fn a_write_refused_after_one_was_allowed_is_retried_and_said_once() {
    let st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    // The resync finds the block gone at 5 s; retries at 6 s and 8 s. Waiting for the next
    // resync instead would take until 15 s.
    let r = start(st, &["--leader-elect=false", "--resync", "5s"]);
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) == 1).await);
    {
        // Our block removed behind our back, and the next two writes refused.
        let mut st = r.state.lock().unwrap();
        st.corefile = COREFILE.to_string();
        st.rv += 1;
        st.put_replies = vec![403, 403];
    }
    assert!(
        r.api.wait_for(12, |a| a.count("PUT", COREDNS) == 4).await,
        "{:#?}",
        r.api.calls()
    );
    assert!(r.coredns_now()["data"]["Corefile"]
        .as_str()
        .unwrap()
        .contains("rewrite name shop.example.com"));
    let api = r.shutdown().await;
    let events: Vec<Value> = api
        .matching(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/kube-system/events",
        )
        .into_iter()
        .filter_map(|(_, b)| b)
        .filter(|b| b["reason"] == "WriteForbidden")
        .collect();
    assert_eq!(events.len(), 1, "one Event for two refusals: {events:#?}");
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with(
            "forbidden (403), though it was allowed before: an API server that has just started"
        ) && note.contains("grant the controller's ServiceAccount `update`"),
        "{note}"
    );
}

#[tokio::test]
async fn an_unparseable_corefile_is_never_written_and_gets_an_event() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.corefile = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n".into();
    let r = start(st, &["--leader-elect=false"]);
    assert!(
        r.api
            .wait_for(10, |a| a.count("POST", "/namespaces/kube-system/events")
                >= 1)
            .await,
        "{:#?}",
        r.api.calls()
    );
    // Let a retry happen too (backoff 1 s): still no write, no second Event.
    assert!(r.api.wait_for(5, |a| a.count("GET", COREDNS) >= 2).await);
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 0);
    let events = api.matching(
        "POST",
        "/apis/events.k8s.io/v1/namespaces/kube-system/events",
    );
    assert_eq!(events.len(), 1, "{events:#?}");
    let ev = events[0].1.clone().unwrap();
    assert_eq!(ev["reason"], "CorefileUnparseable");
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["reportingController"], "ouroboros-controller");
    assert_eq!(
        ev["regarding"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "coredns"})
    );
    let note = ev["note"].as_str().unwrap();
    assert!(
        note.contains("ConfigMap kube-system/coredns") && note.contains("line"),
        "{note}"
    );
}

#[tokio::test]
async fn missing_gateway_crds_neither_block_nor_crash() {
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &["--leader-elect=false", "--gateway-api"],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let api = r.shutdown().await;
    for kind in ["gateways", "httproutes", "grpcroutes", "tlsroutes"] {
        let path = format!("/apis/gateway.networking.k8s.io/v1/{kind}?&limit=500");
        assert!(api.count("GET", &path) >= 1, "{path} listed");
    }
    assert_eq!(api.count("PUT", COREDNS), 1);
}

#[tokio::test]
async fn a_gateway_api_crd_installed_later_is_picked_up() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.http_routes = vec![json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "blog", "namespace": "web", "resourceVersion": "7"},
        "spec": {"hostnames": ["blog.example.com"], "parentRefs": [{"name": "gw"}]}
    })];
    let r = start(st, &["--leader-elect=false", "--gateway-api"]);
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    assert!(!r
        .state
        .lock()
        .unwrap()
        .corefile
        .contains("blog.example.com"));
    r.state.lock().unwrap().gateway_crds = true;
    assert!(
        r.api
            .wait_for(20, |_| r
                .state
                .lock()
                .unwrap()
                .corefile
                .contains("rewrite name blog.example.com "))
            .await,
        "{:#?}",
        r.api.calls()
    );
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 2);
}

/// One object of each of Traefik's, Contour's and Istio's kinds, by the list path serving it.
fn crd_objects() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "/apis/traefik.io/v1alpha1/ingressroutes?",
            vec![json!({
                "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
                "metadata": {"name": "blog", "namespace": "web", "resourceVersion": "7"},
                "spec": {"entryPoints": ["websecure"], "routes": [
                    {"match": "Host(`blog.example.com`) && PathPrefix(`/`)", "kind": "Rule",
                     "services": [{"name": "blog", "port": 80}]},
                    {"match": "HostRegexp(`^.+\\.example\\.org$`)", "kind": "Rule",
                     "services": [{"name": "any", "port": 80}]}
                ]}
            })],
        ),
        (
            "/apis/traefik.io/v1alpha1/ingressroutetcps?",
            vec![json!({
                "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRouteTCP",
                "metadata": {"name": "pg", "namespace": "db", "resourceVersion": "8"},
                "spec": {"routes": [{"match": "HostSNI(`pg.example.com`)",
                                     "services": [{"name": "pg", "port": 5432}]}],
                         "tls": {"passthrough": true}}
            })],
        ),
        (
            "/apis/projectcontour.io/v1/httpproxies?",
            vec![json!({
                "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
                "metadata": {"name": "docs", "namespace": "web", "resourceVersion": "9"},
                "spec": {"virtualhost": {"fqdn": "docs.example.com", "tls": {"secretName": "c"}},
                         "routes": [{"services": [{"name": "docs", "port": 80}]}]}
            })],
        ),
        (
            "/apis/networking.istio.io/v1/gateways?",
            vec![json!({
                "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
                "metadata": {"name": "public", "namespace": "istio-system", "resourceVersion": "10"},
                "spec": {"selector": {"istio": "ingressgateway"}, "servers": [
                    {"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                     "hosts": ["web/app.example.com"], "tls": {"mode": "SIMPLE", "credentialName": "c"}}
                ]}
            })],
        ),
    ]
}

/// Traefik's, Contour's and Istio's CRDs missing at start: the Ingress hosts are written at
/// once; the CRDs installed later (objects already there, as `kubectl apply` of a chart with
/// its CRDs leaves them) are picked up, and all their hosts arrive in one write. A rule
/// naming hosts by a pattern is reported, not guessed.
#[tokio::test]
async fn traefik_contour_and_istio_crds_installed_later_are_picked_up_in_one_write() {
    const ROUTES: &str = "/apis/traefik.io/v1alpha1/ingressroutes?";
    const TCP: &str = "/apis/traefik.io/v1alpha1/ingressroutetcps?";
    const PROXIES: &str = "/apis/projectcontour.io/v1/httpproxies?";
    const GATEWAYS: &str = "/apis/networking.istio.io/v1/gateways?";
    let st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--traefik-ingressroutes",
            "--contour-httpproxies",
            "--istio-gateways",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    for path in [ROUTES, TCP, PROXIES, GATEWAYS] {
        assert!(r.api.count("GET", path) >= 1, "{path} listed");
    }
    let objects = crd_objects();
    // Traefik's CRDs first: the IngressRoute's name arrives in one write.
    let (traefik, others): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(p, _)| *p == ROUTES);
    r.state.lock().unwrap().crd_objects = traefik;
    let has = |r: &Running, h: &str| {
        r.state
            .lock()
            .unwrap()
            .corefile
            .contains(&format!("rewrite name {h} "))
    };
    assert!(
        r.api.wait_for(40, |_| has(&r, "blog.example.com")).await,
        "{:#?}",
        r.api.calls()
    );
    assert_eq!(r.api.count("PUT", COREDNS), 2);
    assert!(has(&r, "shop.example.com"));
    // Then the others, each picked up when its list is retried.
    r.state.lock().unwrap().crd_objects.extend(others);
    let want = ["app.example.com", "docs.example.com", "pg.example.com"];
    assert!(
        r.api
            .wait_for(40, |_| want.iter().all(|h| has(&r, h)))
            .await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    assert!(!corefile.contains("example.org"), "{corefile}");
    let api = r.shutdown().await;
    // The pattern is reported on the IngressRoute, not guessed.
    let rejected: Vec<Value> = api
        .matching("POST", EVENTS)
        .into_iter()
        .filter_map(|(_, b)| b)
        .filter(|e| e["reason"] == "HostnameRejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    assert_eq!(rejected[0]["regarding"]["kind"], "IngressRoute");
    assert_eq!(
        rejected[0]["regarding"]["apiVersion"],
        "traefik.io/v1alpha1"
    );
    let note = rejected[0]["note"].as_str().unwrap();
    assert!(
        note.contains("HostRegexp") && note.contains("regular expression"),
        "{note}"
    );
}

/// Istio's Gateway and Traefik's IngressRoute as `at` (an apiVersion) serves them.
fn istio_and_traefik_at(istio: &str, traefik: &str) -> (Value, Value) {
    let gateway = json!({
        "apiVersion": istio, "kind": "Gateway",
        "metadata": {"name": "public", "namespace": "istio-system", "resourceVersion": "10"},
        "spec": {"servers": [{"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                              "hosts": ["web/app.example.com"]}]}
    });
    let route = json!({
        "apiVersion": traefik, "kind": "IngressRoute",
        "metadata": {"name": "blog", "namespace": "web", "resourceVersion": "7"},
        "spec": {"routes": [
            {"match": "Host(`blog.example.com`)", "kind": "Rule"},
            {"match": "HostRegexp(`^.+\\.example\\.org$`)", "kind": "Rule"}
        ]}
    });
    (gateway, route)
}

/// A cluster serving only Istio's older versions (1.20: v1beta1 and v1alpha3) and Traefik's
/// older group (`traefik.containo.us`): discovery finds where, the watches list there (never
/// at the places not served), and the hosts are written; the Event on the IngressRoute names
/// the apiVersion read. Then Istio and Traefik are upgraded (v1 and `traefik.io` served too):
/// the next discovery round moves both watches, and while the new lists are held the hosts
/// stay; no write ever drops them.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario: start at the old places, move, check every write"
)]
async fn crd_kinds_are_read_where_served_and_move_to_the_newer_place() {
    const OLD_GATEWAYS: &str = "/apis/networking.istio.io/v1beta1/gateways?";
    const OLD_ROUTES: &str = "/apis/traefik.containo.us/v1alpha1/ingressroutes?";
    const OLD_TCP: &str = "/apis/traefik.containo.us/v1alpha1/ingressroutetcps?";
    const GATEWAYS: &str = "/apis/networking.istio.io/v1/gateways?";
    const ROUTES: &str = "/apis/traefik.io/v1alpha1/ingressroutes?";
    const TCP: &str = "/apis/traefik.io/v1alpha1/ingressroutetcps?";
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    let (gateway, route) = istio_and_traefik_at(
        "networking.istio.io/v1beta1",
        "traefik.containo.us/v1alpha1",
    );
    st.served = vec![
        (
            "networking.istio.io/v1beta1",
            vec!["gateways", "virtualservices"],
        ),
        ("networking.istio.io/v1alpha3", vec!["gateways"]),
        // Another Istio kind is served at v1 already: only the resource list tells.
        ("networking.istio.io/v1", vec!["sidecars"]),
        (
            "traefik.containo.us/v1alpha1",
            vec!["ingressroutes", "ingressroutetcps"],
        ),
    ];
    st.crd_objects = vec![
        (OLD_GATEWAYS, vec![gateway]),
        (OLD_ROUTES, vec![route]),
        (OLD_TCP, vec![]),
    ];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--traefik-ingressroutes",
            "--istio-gateways",
            "--source-discovery-interval",
            "200ms",
        ],
    );
    let has = |r: &Running, h: &str| {
        r.state
            .lock()
            .unwrap()
            .corefile
            .contains(&format!("rewrite name {h} "))
    };
    let ours = ["app.example.com", "blog.example.com", "shop.example.com"];
    assert!(
        r.api
            .wait_for(20, |_| ours.iter().all(|h| has(&r, h)))
            .await,
        "{:#?}",
        r.api.calls()
    );
    assert_eq!(r.api.count("PUT", COREDNS), 1, "all in the first write");
    for path in [GATEWAYS, ROUTES, TCP] {
        assert_eq!(
            r.api.count("GET", path),
            0,
            "{path}: not served, not listed"
        );
    }
    // Upgraded: both served at their newer places too; the new lists held at first.
    let (gateway, route) = istio_and_traefik_at("networking.istio.io/v1", "traefik.io/v1alpha1");
    {
        let mut st = r.state.lock().unwrap();
        st.served.retain(|(gv, _)| *gv != "networking.istio.io/v1");
        st.served
            .push(("networking.istio.io/v1", vec!["gateways", "sidecars"]));
        st.served.push((
            "traefik.io/v1alpha1",
            vec!["ingressroutes", "ingressroutetcps"],
        ));
        st.crd_objects.extend([
            (GATEWAYS, vec![gateway]),
            (ROUTES, vec![route]),
            (TCP, vec![]),
        ]);
        st.hold_lists = vec![GATEWAYS, ROUTES];
    }
    assert!(
        r.api
            .wait_for(20, |a| a.count("GET", GATEWAYS) >= 1
                && a.count("GET", ROUTES) >= 1)
            .await,
        "{:#?}",
        r.api.calls()
    );
    // Moved, the new lists not in yet: the objects read at the old places still count.
    assert!(ours.iter().all(|h| has(&r, h)));
    assert_eq!(
        r.api.release(GATEWAYS, &[]) + r.api.release(ROUTES, &[]),
        2,
        "an empty body is not a list: the watch retries, and the retry is answered"
    );
    r.state.lock().unwrap().hold_lists.clear();
    assert!(
        r.api
            .wait_for(20, |a| a.count("GET", GATEWAYS) >= 2
                && a.count("GET", ROUTES) >= 2
                && a.count("GET", TCP) >= 1)
            .await,
        "{:#?}",
        r.api.calls()
    );
    let api = r.shutdown().await;
    // The moved watches list the same objects: nothing to write, and no write ever lacked
    // a host of theirs.
    let puts: Vec<Value> = api
        .matching("PUT", COREDNS)
        .into_iter()
        .filter_map(|(_, b)| b)
        .collect();
    assert_eq!(puts.len(), 1, "{puts:#?}");
    for put in &puts {
        let corefile = put["data"]["Corefile"].as_str().unwrap();
        for h in ours {
            assert!(
                corefile.contains(&format!("rewrite name {h} ")),
                "{corefile}"
            );
        }
    }
    // The old places are not listed again after the move (their watches are held, so each
    // was listed once).
    for old in [OLD_GATEWAYS, OLD_ROUTES] {
        assert_eq!(api.count("GET", &format!("{old}&limit=500")), 1, "{old}");
    }
    // The pattern is reported once, naming the apiVersion the IngressRoute was read at.
    let rejected: Vec<Value> = api
        .matching("POST", EVENTS)
        .into_iter()
        .filter_map(|(_, b)| b)
        .filter(|e| e["reason"] == "HostnameRejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    assert_eq!(
        rejected[0]["regarding"]["apiVersion"],
        "traefik.containo.us/v1alpha1"
    );
}

// Paused clock: the sleep below is virtual, so everything the controller does in that time
// has happened when it ends, however slow the machine.
#[tokio::test(start_paused = true)]
async fn nothing_is_computed_or_written_before_every_initial_list() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.gateway_crds = true;
    st.hold_lists = vec!["/apis/gateway.networking.k8s.io/v1/httproutes?"];
    let r = start(st, &["--leader-elect=false", "--gateway-api"]);
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", INGRESS_LIST) >= 1)
            .await
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Answer the held list: the sync follows.
    assert_eq!(
        r.api.count("GET", COREDNS),
        0,
        "no read or write before all lists"
    );
    assert_eq!(
        r.api.release(
            "/apis/gateway.networking.k8s.io/v1/httproutes?",
            &[] // an empty body is not a list: the watcher retries; the retry is answered
        ),
        1
    );
    r.state.lock().unwrap().hold_lists.clear();
    assert!(
        r.api.wait_for(15, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    r.shutdown().await;
}

#[tokio::test]
async fn a_rejected_hostname_gets_one_event_on_its_ingress() {
    let r = start(
        state_with(vec![ingress(
            "shop",
            &["shop.example.com", "db.svc.cluster.local"],
        )]),
        &["--leader-elect=false", "--resync", "200ms"],
    );
    assert!(r.api.wait_for(10, |a| a.count("GET", COREDNS) >= 4).await);
    let api = r.shutdown().await;
    let events = api.matching("POST", "/apis/events.k8s.io/v1/namespaces/web/events");
    assert_eq!(events.len(), 1, "once, not every sync: {events:#?}");
    let ev = events[0].1.clone().unwrap();
    assert_eq!(ev["reason"], "HostnameRejected");
    assert_eq!(ev["type"], "Warning");
    assert_eq!(
        ev["regarding"],
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "namespace": "web", "name": "shop"})
    );
    assert!(ev["note"]
        .as_str()
        .unwrap()
        .contains("\"db.svc.cluster.local\""));
}

fn lease(holder: Option<&str>, duration: u64) -> Value {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let mut spec = json!({});
    if let Some(h) = holder {
        spec = json!({
            "holderIdentity": h,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now
        });
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "ouroboros-controller", "namespace": "ouroboros", "resourceVersion": "5"},
        "spec": spec
    })
}

// Paused clock: the sleep below is virtual, so everything the controller does in that time
// has happened when it ends, however slow the machine.
#[tokio::test(start_paused = true)]
async fn a_standby_replica_never_writes() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.lease = Some(lease(Some("other-replica"), 3600));
    let r = start(st, &["--resync", "200ms"]);
    assert!(r.api.wait_for(10, |a| a.count("GET", LEASE) >= 1).await);
    assert!(
        r.api
            .wait_for(10, |a| a.count("GET", INGRESS_LIST) >= 1)
            .await
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let api = r.shutdown().await;
    assert_eq!(api.count("GET", COREDNS), 0, "a standby does not even read");
    assert!(
        writes(&api).is_empty(),
        "a standby writes nothing: {:#?}",
        writes(&api)
    );
}

#[tokio::test]
async fn the_lease_holder_writes_and_releases_the_lease_on_stop() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.lease = Some(lease(None, 0));
    let r = start(st, &[]);
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let state = r.state.clone();
    let api = r.shutdown().await;
    let patches = api.matching("PATCH", LEASE);
    // Acquired by server-side apply with our identity.
    let (uri, body) = &patches[0];
    assert!(uri.contains("fieldManager=kube-lease-manager-"), "{uri}");
    let holder = body.as_ref().unwrap()["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!holder.is_empty());
    // Released on stop, after the write.
    let calls = api.calls();
    let put_at = calls.iter().position(|(m, _)| m == "PUT").unwrap();
    let last_patch = calls
        .iter()
        .rposition(|(m, u)| m == "PATCH" && u.starts_with(LEASE))
        .unwrap();
    assert!(put_at < last_patch);
    let lease = state.lock().unwrap().lease.clone().unwrap();
    assert!(
        lease["spec"].get("holderIdentity").is_none(),
        "released: {lease}"
    );
}

#[tokio::test]
async fn a_holder_that_cannot_renew_stops_writing_before_its_lease_expires() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.lease = Some(lease(None, 0));
    let r = start(st, &["--resync", "200ms"]);
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    // Confirmed by a read of the Lease before the first write.
    let calls = r.api.calls();
    let put_at = calls.iter().position(|(m, _)| m == "PUT").unwrap();
    assert!(
        calls[..put_at]
            .iter()
            .any(|(m, u)| m == "GET" && u == LEASE),
        "{calls:#?}"
    );
    // From now on the API server fails every request on the Lease: renewals and reads.
    let renewed = {
        let mut st = r.state.lock().unwrap();
        st.lease_fails = true;
        let lease = st.lease.clone().unwrap();
        let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime =
            serde_json::from_value(lease["spec"]["renewTime"].clone()).unwrap();
        std::time::SystemTime::from(t.0)
    };
    let expiry = renewed + Duration::from_secs(15);
    let reads_at_failure = r.state.lock().unwrap().coredns_reads.len();
    // Wait until a second past expiry, when a standby may have taken over.
    let wait = expiry
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
        + Duration::from_secs(1);
    tokio::time::sleep(wait).await;
    let state = r.state.clone();
    let api = r.shutdown().await;
    let st = state.lock().unwrap();
    // It kept syncing (resync every 200 ms) while the lease was valid ...
    assert!(
        st.coredns_reads.len() > reads_at_failure + 10,
        "{} reads, {reads_at_failure} at the failure",
        st.coredns_reads.len()
    );
    // ... and stopped before the lease expired.
    let last = *st.coredns_reads.last().unwrap();
    assert!(
        last < expiry,
        "read {:?} after expiry",
        last.duration_since(expiry).unwrap()
    );
    assert!(
        expiry.duration_since(last).unwrap() < Duration::from_secs(6),
        "stopped {:?} before expiry",
        expiry.duration_since(last).unwrap()
    );
    assert_eq!(api.count("PUT", COREDNS), 1);
    // The failures that were seen: the replica read the Lease back and tried to renew it.
    assert!(api.count("GET", LEASE) >= 3, "{:#?}", api.calls());
    assert!(api.count("PATCH", LEASE) >= 2, "{:#?}", api.calls());
}

#[tokio::test]
async fn a_reverted_block_is_restored_and_repeated_reverts_are_reported() {
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &["--leader-elect=false"],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    for round in 1..=3u64 {
        // Someone re-renders the Corefile without our block.
        let rv = {
            let mut st = r.state.lock().unwrap();
            st.corefile = COREFILE.to_string();
            st.rv += 1;
            st.rv
        };
        r.api
            .deliver(
                COREDNS_WATCH,
                json!({"type": "MODIFIED", "object": configmap(rv, COREFILE)}),
            )
            .await;
        if round < 3 {
            assert!(
                r.api
                    .wait_for(5, |a| a.count("PUT", COREDNS) as u64 > round)
                    .await,
                "round {round}: restored within seconds: {:#?}",
                r.api.calls()
            );
            assert!(r.state.lock().unwrap().corefile.contains(BEGIN_MARKER));
        }
    }
    assert!(
        r.api
            .wait_for(5, |a| a.count("POST", "/namespaces/kube-system/events")
                >= 1)
            .await
    );
    let api = r.shutdown().await;
    let ev = api.matching(
        "POST",
        "/apis/events.k8s.io/v1/namespaces/kube-system/events",
    )[0]
    .1
    .clone()
    .unwrap();
    assert_eq!(ev["reason"], "BlockReverted");
    assert_eq!(ev["regarding"]["name"], "coredns");
    assert!(ev["note"].as_str().unwrap().contains("3 or more times"));
    // The third restore waits (backoff), so it has not happened yet.
    assert_eq!(api.count("PUT", COREDNS), 3);
}

// Paused clock: the sleep below is virtual, so everything the controller does in that time
// has happened when it ends, however slow the machine.
#[tokio::test(start_paused = true)]
async fn our_own_writes_seen_late_on_the_watch_are_not_reverts() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &["--leader-elect=false", "--listen-health", &listen],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let first = r.coredns_now();
    // A second Ingress: the set grows and is written again.
    let blog = ingress("blog", &["blog.example.com"]);
    r.state.lock().unwrap().ingresses.push(blog.clone());
    r.api
        .deliver(
            "/apis/networking.k8s.io/v1/ingresses?&watch=true",
            json!({"type": "ADDED", "object": blog}),
        )
        .await;
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    let second = r.coredns_now();
    // Only now does the watch bring the first write (which lacks the new host), then the second.
    for cm in [first, second] {
        r.api
            .deliver(COREDNS_WATCH, json!({"type": "MODIFIED", "object": cm}))
            .await;
    }
    tokio::time::sleep(ouroboros::controller::revert::SETTLE + Duration::from_millis(500)).await;
    let (code, metrics) = http_get(port, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l == "ouroboros_controller_block_reverts_total 0"),
        "no revert counted:\n{metrics}"
    );
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 2, "nothing restored");
    assert_eq!(api.count("POST", EVENTS), 0, "no Event");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` on 127.0.0.1:`port` (HTTP/1.0): (status, body).
async fn http_get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("admin endpoint");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf[9..12].parse().unwrap();
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

#[tokio::test]
async fn readiness_and_metrics() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut st = state_with(vec![ingress(
        "shop",
        &["shop.example.com", "db.svc.cluster.local"],
    )]);
    st.hold_lists = vec![INGRESS_LIST];
    let r = start(st, &["--leader-elect=false", "--listen-health", &listen]);
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", INGRESS_LIST) >= 1)
            .await
    );
    // Polls until the admin listener is up; the deadline is only a safety net.
    let mut ready = (0, String::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            drop(s);
            ready = http_get(port, "/readyz").await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready.0, 503, "not ready before the lists: {ready:?}");
    assert!(ready.1.starts_with("syncing"), "{ready:?}");
    assert_eq!(http_get(port, "/healthz").await.0, 200);

    r.state.lock().unwrap().hold_lists.clear();
    r.api.release(INGRESS_LIST, &[]);
    assert!(r.api.wait_for(15, |a| a.count("PUT", COREDNS) >= 1).await);
    let mut ok = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        if http_get(port, "/readyz").await.0 == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "ready after the first write");
    let (code, metrics) = http_get(port, "/metrics").await;
    assert_eq!(code, 200);
    for line in [
        "ouroboros_controller_syncs_total{mode=\"coredns\",result=\"written\"} 1",
        "ouroboros_controller_desired_hostnames 1",
        "ouroboros_controller_rejected_hostnames{reason=\"cluster-domain\"} 1",
        "ouroboros_controller_leader 1",
        "ouroboros_controller_write_conflicts_total 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let since = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ouroboros_controller_seconds_since_last_success "))
        .expect("seconds since last success");
    let since: f64 = since.parse().unwrap();
    assert!((0.0..5.0).contains(&since), "{since}");
    r.shutdown().await;
}

#[tokio::test]
async fn dry_run_reads_but_writes_nothing() {
    let mut st = state_with(vec![ingress(
        "shop",
        &["shop.example.com", "db.svc.cluster.local"],
    )]);
    st.lease = Some(lease(None, 0));
    let r = start(st, &["--dry-run", "--resync", "200ms"]);
    assert!(r.api.wait_for(10, |a| a.count("GET", COREDNS) >= 3).await);
    let api = r.shutdown().await;
    assert!(writes(&api).is_empty(), "{:#?}", writes(&api));
    assert_eq!(api.count("GET", LEASE), 0, "no lease in a dry run");
    assert_eq!(api.count("POST", EVENTS), 0, "no Events in a dry run");
}

fn proxy_service(ips: &[&str]) -> Value {
    service("ouroboros-proxy", ips)
}

fn service(name: &str, ips: &[&str]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ouroboros", "resourceVersion": "100"},
        "spec": {"type": "ClusterIP", "clusterIP": ips[0], "clusterIPs": ips}
    })
}

/// An Ingress of IngressClass `class`, with the priority annotation when given.
fn classed(name: &str, class: &str, priority: Option<&str>, hosts: &[&str]) -> Value {
    let mut v = ingress(name, hosts);
    v["spec"]["ingressClassName"] = json!(class);
    if let Some(p) = priority {
        v["metadata"]["annotations"] = json!({"ouroboros.io/priority": p});
    }
    v
}

/// nginx's Ingresses on the default proxy, traefik's on their own; a host both claim goes to
/// traefik (a named target, equal priority), and the nginx Ingress that lost it gets one
/// HostnameConflict Event naming the winner.
#[tokio::test]
async fn two_ingress_controllers_two_targets() {
    let mut st = state_with(vec![
        classed(
            "shop",
            "nginx",
            None,
            &["shop.example.com", "www.example.com"],
        ),
        classed("blog", "traefik", None, &["blog.example.com"]),
        classed("shop-traefik", "traefik", None, &["shop.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60", "fd00::60"])];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let r = start(
        st,
        &[
            "--listen-health",
            &listen,
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    let (_, metrics) = http_get(port, "/metrics").await;
    for line in [
        "ouroboros_controller_target_hostnames{target=\"default\"} 1",
        "ouroboros_controller_target_hostnames{target=\"traefik\"} 2",
        "ouroboros_controller_hostname_conflicts 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let corefile = r.state.lock().unwrap().corefile.clone();
    let api = r.shutdown().await;

    // Both proxies' addresses are read, and both Services are watched.
    assert_eq!(api.count("GET", PROXY_SERVICE), 1, "{:#?}", api.calls());
    assert_eq!(api.count("GET", &format!("{SERVICES}/proxy-traefik")), 1);
    assert_eq!(api.count("GET", PROXY_SERVICE_WATCH_LIST), 1);
    assert_eq!(
        api.count(
            "GET",
            &format!("{SERVICES}?&fieldSelector=metadata.name%3Dproxy-traefik&limit=500")
        ),
        1
    );
    assert_eq!(writes(&api), [("PUT".to_string(), COREDNS_PUT.to_string())]);

    // One template pair per target, each answering with its own proxy.
    let pairs: Vec<&str> = corefile.split("template IN A ").skip(1).collect();
    assert_eq!(pairs.len(), 2, "{corefile}");
    assert!(
        pairs[0].contains(r"match ^www\.example\.com\.$")
            && pairs[0].contains("IN A 10.96.0.53")
            && !pairs[0].contains("shop"),
        "{corefile}"
    );
    assert!(
        pairs[1].contains("blog")
            && pairs[1].contains("shop")
            && pairs[1].contains("IN A 10.96.0.60"),
        "{corefile}"
    );
    assert!(
        corefile.contains(r#"answer "{{ .Name }} 30 IN AAAA fd00::60""#),
        "the traefik proxy is dual-stack: {corefile}"
    );

    // The loser, named with the winner and its target.
    let events = api.matching("POST", EVENTS);
    assert_eq!(events.len(), 1, "{events:#?}");
    let ev = events[0].1.as_ref().unwrap();
    assert_eq!(ev["reason"], "HostnameConflict");
    assert_eq!(ev["regarding"]["name"], "shop");
    let note = ev["note"].as_str().unwrap();
    assert!(
        note.contains("shop.example.com goes to target traefik through Ingress web/shop-traefik"),
        "{note}"
    );
}

#[tokio::test]
async fn template_answers_follow_the_proxy_service() {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let first = r.state.lock().unwrap().corefile.clone();
    assert!(
        first.contains("    template IN A example.com {\n"),
        "{first}"
    );
    assert!(first.contains(r"match ^shop\.example\.com\.$"), "{first}");
    assert!(
        first.contains(r#"answer "{{ .Name }} 30 IN A 10.96.0.53""#),
        "{first}"
    );
    assert!(!first.contains("rewrite"), "{first}");

    // The Service is recreated with new ClusterIPs (dual-stack now): the block follows at once,
    // not at the next resync.
    let moved = proxy_service(&["10.96.7.7", "fd00::7"]);
    r.state.lock().unwrap().proxy_service = Some(moved.clone());
    r.api
        .deliver(
            PROXY_SERVICE_WATCH,
            json!({"type": "MODIFIED", "object": moved}),
        )
        .await;
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await,
        "{:#?}",
        r.api.calls()
    );
    let second = r.state.lock().unwrap().corefile.clone();
    assert!(
        second.contains(r#"answer "{{ .Name }} 30 IN A 10.96.7.7""#),
        "{second}"
    );
    assert!(
        second.contains(r#"answer "{{ .Name }} 30 IN AAAA fd00::7""#),
        "{second}"
    );
    r.shutdown().await;
}

#[tokio::test]
async fn template_answers_without_a_proxy_address_write_nothing_and_tell_once() {
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--resync",
            "200ms",
        ],
    );
    // Several syncs find no Service; none writes, one Event names the Service.
    assert!(
        r.api
            .wait_for(10, |a| a.count("GET", PROXY_SERVICE) >= 3)
            .await,
        "{:#?}",
        r.api.calls()
    );
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 0, "{:#?}", api.calls());
    let events = api.matching("POST", "/apis/events.k8s.io/v1/namespaces/ouroboros/events");
    assert_eq!(events.len(), 1, "{events:#?}");
    let ev = events[0].1.clone().unwrap();
    assert_eq!(ev["reason"], "ProxyAddressMissing");
    assert_eq!(ev["regarding"]["kind"], "Service");
    assert_eq!(ev["regarding"]["name"], "ouroboros-proxy");
}

/// The controller with `--coredns-answer form`, `--proxy-ip 10.96.0.53` and `--node-local-dns`
/// over one Ingress for shop.example.com and node-local-dns's `corefile`, once it has written
/// both: the run, CoreDNS's Corefile and node-local-dns's.
async fn with_node_local_dns(form: &str, corefile: &str) -> (Running, String, String) {
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.node_local = Some((corefile.to_string(), 7));
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            form,
            "--proxy-ip",
            "10.96.0.53",
            "--node-local-dns",
        ],
    );
    assert!(
        r.api
            .wait_for(10, |a| a.count("PUT", COREDNS) >= 1
                && a.count("PUT", NODE_LOCAL) >= 1)
            .await,
        "{:#?}",
        r.api.calls()
    );
    let (coredns, node_local) = {
        let st = r.state.lock().unwrap();
        (st.corefile.clone(), st.node_local.clone().unwrap().0)
    };
    (r, coredns, node_local)
}

/// Opted in, node-local-dns's Corefile gets the same block in the same sync, its `__PILLAR__`
/// tokens untouched, and a revert there is restored like one in CoreDNS's.
#[tokio::test]
async fn node_local_dns_gets_the_same_block_and_it_is_restored() {
    const NODE_LOCAL_COREFILE: &str = ".:53 {\n    errors\n    cache 30\n    reload\n    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n";
    let (r, coredns, node_local) = with_node_local_dns("template", NODE_LOCAL_COREFILE).await;
    let block = |t: &str| {
        let start = t.find(BEGIN_MARKER).unwrap();
        t[start..]
            .lines()
            .take_while(|l| !l.contains("=== END"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(block(&node_local), block(&coredns));
    assert!(
        node_local.contains(r#"answer "{{ .Name }} 30 IN A 10.96.0.53""#),
        "{node_local}"
    );
    assert_eq!(
        node_local.matches("__PILLAR__").count(),
        NODE_LOCAL_COREFILE.matches("__PILLAR__").count()
    );

    // Someone re-applies the upstream manifest: the block is back within seconds.
    r.state.lock().unwrap().node_local = Some((NODE_LOCAL_COREFILE.to_string(), 9));
    r.api
        .deliver(
            "/api/v1/namespaces/kube-system/configmaps?&watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dnode-local-dns",
            json!({"type": "MODIFIED", "object": named_configmap("node-local-dns", 9, NODE_LOCAL_COREFILE)}),
        )
        .await;
    assert!(
        r.api
            .wait_for(10, |a| a.count("PUT", NODE_LOCAL) >= 2)
            .await,
        "{:#?}",
        r.api.calls()
    );
    let api = r.shutdown().await;
    assert_eq!(
        api.count("GET", PROXY_SERVICE),
        0,
        "--proxy-ip: no Service read"
    );
}

/// With the `view` form, CoreDNS's Corefile gets server blocks before its root block, and
/// node-local-dns (no `view` plugin) the template pair with the same address inside its own.
#[tokio::test]
async fn view_answers_go_before_the_root_block_and_node_local_dns_gets_the_pair() {
    const NODE_LOCAL_COREFILE: &str =
        ".:53 {\n    bind __PILLAR__LOCAL__DNS__\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n";
    let (r, coredns, node_local) = with_node_local_dns("view", NODE_LOCAL_COREFILE).await;
    let view = "com:53 {\n    cache 30\n    view ouroboros {\n        expr type() in ['A','AAAA'] && name() in ['shop.example.com.']\n    }\n    template IN A {\n        answer \"{{ .Name }} 30 IN A 10.96.0.53\"\n    }\n    template IN AAAA\n}\n";
    let at = coredns.find(view).unwrap_or_else(|| panic!("{coredns}"));
    assert!(at < coredns.find(".:53 {").unwrap(), "{coredns}");
    assert!(!node_local.contains("view"), "{node_local}");
    assert!(
        node_local.contains("    template IN A example.com {\n        match ^shop\\.example\\.com\\.$\n        answer \"{{ .Name }} 30 IN A 10.96.0.53\"\n"),
        "{node_local}"
    );
    r.shutdown().await;
}

/// One Ingress the client cannot read (a field of the wrong type) is left out and reported once;
/// the rest of the list is written as usual.
#[tokio::test]
async fn an_unreadable_object_is_skipped_and_reported_not_the_whole_list() {
    let mut bad = ingress("broken", &["broken.example.com"]);
    bad["spec"]["tls"] = json!("not-a-list");
    bad["metadata"]["namespace"] = json!("web");
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"]), bad]),
        &["--leader-elect=false"],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    assert!(
        corefile.contains("rewrite name shop.example.com "),
        "{corefile}"
    );
    assert!(!corefile.contains("broken.example.com"), "{corefile}");
    assert!(
        r.api
            .wait_for(5, |a| a
                .count("POST", "/apis/events.k8s.io/v1/namespaces/web/events")
                >= 1)
            .await
    );
    let api = r.shutdown().await;
    let events = api.matching("POST", "/apis/events.k8s.io/v1/namespaces/web/events");
    assert_eq!(events.len(), 1, "{events:#?}");
    let ev = events[0].1.clone().unwrap();
    assert_eq!(ev["reason"], "ObjectUnreadable");
    assert_eq!(ev["regarding"]["kind"], "Ingress");
    assert_eq!(ev["regarding"]["name"], "broken");
}

// ---- The idle-watch detector (--watch-idle-timeout) ----

const INGRESSES: &str = "/apis/networking.k8s.io/v1/ingresses?";
/// The Ingress watch as it is opened, up to its resourceVersion.
const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=";

/// [`http_get`] on the real clock: with the clock paused the runtime would move it on while
/// waiting for the socket, firing the controller's timers in between.
async fn http_get_unpaused(port: u16, path: &str) -> (u16, String) {
    tokio::time::resume();
    let got = http_get(port, path).await;
    tokio::time::pause();
    got
}

/// The controller with a 2-minute --watch-idle-timeout and its admin port (for /readyz and
/// /metrics).
fn start_idle_2m(state: State) -> (Running, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flags = [
        "--leader-elect=false",
        "--listen-health",
        &listen,
        "--watch-idle-timeout",
        "2m",
    ];
    (start(state, &flags), port)
}

fn restarts_line(metrics: &str) -> Option<&str> {
    metrics
        .lines()
        .find(|l| l.starts_with("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"}"))
}

fn ingress_calls(api: &Routed) -> Vec<String> {
    api.calls()
        .into_iter()
        .filter(|(m, u)| m == "GET" && u.starts_with(INGRESSES))
        .map(|(_, u)| u)
        .collect()
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

// Paused clock: minutes of watch silence pass in virtual time.
#[tokio::test(start_paused = true)]
async fn a_quiet_watch_is_relisted_and_what_was_deleted_meanwhile_goes_away() {
    let (r, port) = start_idle_2m(state_with(vec![
        ingress("shop", &["shop.example.com"]),
        ingress("blog", &["blog.example.com"]),
    ]));
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    // The list arrived just before the first write (the 50 ms debounce).
    let listed = tokio::time::Instant::now();
    assert!(r
        .state
        .lock()
        .unwrap()
        .corefile
        .contains("blog.example.com"));

    // A minute later the API server ends the watch at its timeout, without an event: it is
    // resumed, and that is no sign that events arrive.
    tokio::time::sleep_until(listed + Duration::from_secs(60)).await;
    let tasks = alive_tasks();
    assert_eq!(r.api.release(INGRESS_WATCH, &[]), 1);
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", INGRESS_WATCH) == 2)
            .await
    );
    // Then the watch dies silently; `blog` is deleted and the watch never says so. The next
    // list is held, so readiness can be seen while it is pending.
    {
        let mut st = r.state.lock().unwrap();
        st.ingresses.retain(|i| i["metadata"]["name"] == "shop");
        st.hold_lists = vec![INGRESS_LIST];
    }
    tokio::time::sleep_until(listed + Duration::from_secs(110)).await;
    assert_eq!(r.api.count("GET", INGRESS_LIST), 1, "not before 2 minutes");
    // Two minutes after the last event (the list), not after the resumed watch.
    tokio::time::sleep_until(listed + Duration::from_secs(121)).await;
    assert_eq!(
        r.api.count("GET", INGRESS_LIST),
        2,
        "relisted: {:#?}",
        r.api.calls()
    );
    let (code, reason) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(
        (code, reason.as_str()),
        (503, "relisting Ingress after 2m without events\n")
    );
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    assert_eq!(
        restarts_line(&metrics),
        Some("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        r.api.count("PUT", COREDNS),
        1,
        "nothing written while relisting"
    );

    // The new list arrives: it holds only `shop`, so `blog` leaves the store and the block.
    r.state.lock().unwrap().hold_lists.clear();
    let fresh = list(
        "networking.k8s.io/v1",
        "IngressList",
        "100",
        vec![ingress("shop", &["shop.example.com"])],
    );
    assert_eq!(r.api.release(INGRESS_LIST, &[fresh]), 1);
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    assert!(
        corefile.contains("rewrite name shop.example.com "),
        "{corefile}"
    );
    assert!(!corefile.contains("blog.example.com"), "{corefile}");
    let (code, _) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(code, 200, "ready again once the new list is in");
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "ouroboros_controller_desired_hostnames 1"),
        "{metrics}"
    );
    // The restart dropped the old stream and spawned nothing (the admin connections end).
    assert!(
        r.api.wait_for(5, |_| alive_tasks() == tasks).await,
        "{} tasks alive, {tasks} before the restart",
        alive_tasks()
    );

    let api = r.shutdown().await;
    let watch = format!("{INGRESS_WATCH}100");
    assert_eq!(
        ingress_calls(&api),
        [INGRESS_LIST, &watch, &watch, INGRESS_LIST, &watch]
    );
    assert_eq!(
        writes(&api),
        [
            ("PUT".to_string(), COREDNS_PUT.to_string()),
            ("PUT".to_string(), COREDNS_PUT.to_string())
        ]
    );
}

/// The sync engine does not hand a relist's unchanged set to the writer: no read, no write.
#[tokio::test(start_paused = true)]
async fn a_relist_that_finds_the_same_objects_writes_nothing() {
    let (r, port) = start_idle_2m(state_with(vec![ingress("shop", &["shop.example.com"])]));
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let listed = tokio::time::Instant::now();
    const SKIPPED: &str = "ouroboros_controller_syncs_total{mode=\"coredns\",result=\"skipped\"} ";
    let skipped = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(SKIPPED))
            .map_or(0, |n| n.parse().unwrap())
    };
    tokio::time::sleep_until(listed + Duration::from_secs(60)).await;
    let before = skipped(&http_get_unpaused(port, "/metrics").await.1);
    tokio::time::sleep_until(listed + Duration::from_secs(125)).await;
    assert_eq!(r.api.count("GET", INGRESS_LIST), 2, "{:#?}", r.api.calls());
    let (code, _) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(code, 200);
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    for line in [
        "ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 1",
        "ouroboros_controller_syncs_total{mode=\"coredns\",result=\"written\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The relist's change was computed and found equal to the set written.
    assert_eq!(skipped(&metrics), before + 1, "{metrics}");
    let api = r.shutdown().await;
    assert_eq!(api.count("GET", COREDNS), 1, "only the first sync read");
    assert_eq!(writes(&api), [("PUT".to_string(), COREDNS_PUT.to_string())]);
}

/// An update to fields the controller never reads (labels, other annotations, kubectl's
/// last-applied copy, http paths, status) is computed and found equal: no read, no write. The
/// next real change is written, so the first one was seen and not merely lost.
#[tokio::test]
async fn a_change_to_fields_never_read_writes_nothing() {
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &["--leader-elect=false"],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let reads = r.api.count("GET", COREDNS);
    let mut noise = ingress("shop", &["shop.example.com"]);
    noise["metadata"]["resourceVersion"] = json!("11");
    noise["metadata"]["labels"] = json!({"app": "shop", "version": "2"});
    noise["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"rules\":[]}}",
        "cert-manager.io/cluster-issuer": "letsencrypt"
    });
    noise["spec"]["tls"][0]["secretName"] = json!("cert-2");
    noise["spec"]["rules"][0]["http"] = json!({"paths": [{"path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]});
    noise["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}});
    r.api
        .deliver(INGRESS_WATCH, json!({"type": "MODIFIED", "object": noise}))
        .await;
    // Well past the 50 ms debounce.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "{:#?}", r.api.calls());
    assert_eq!(
        r.api.count("GET", COREDNS),
        reads,
        "the sink was not even called"
    );
    let mut renamed = ingress("shop", &["shop.example.com", "new.example.com"]);
    renamed["metadata"]["resourceVersion"] = json!("12");
    r.api
        .deliver(
            INGRESS_WATCH,
            json!({"type": "MODIFIED", "object": renamed}),
        )
        .await;
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await,
        "{:#?}",
        r.api.calls()
    );
    let puts = r.puts();
    let api = r.shutdown().await;
    assert_eq!(writes(&api).len(), 2);
    let corefile = puts[1]["data"]["Corefile"].as_str().unwrap();
    assert!(
        corefile.contains("rewrite name new.example.com "),
        "{corefile}"
    );
}

/// Bookmarks alone, then events alone, keep a watch alive well past the timeout; each ends the
/// held watch (as the API server's timeout would), which is resumed from the resourceVersion
/// they carried.
#[tokio::test(start_paused = true)]
async fn a_watch_with_bookmarks_or_events_is_not_restarted() {
    let (r, port) = start_idle_2m(state_with(vec![ingress("shop", &["shop.example.com"])]));
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let mut versions = vec![100];
    for rv in 201..=210 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"resourceVersion": rv.to_string()}
        }});
        r.api.deliver(INGRESS_WATCH, bookmark).await;
        versions.push(rv);
    }
    for rv in 301..=305 {
        tokio::time::sleep(Duration::from_secs(90)).await;
        let mut shop = ingress("shop", &["shop.example.com"]);
        shop["metadata"]["resourceVersion"] = json!(rv.to_string());
        r.api
            .deliver(INGRESS_WATCH, json!({"type": "MODIFIED", "object": shop}))
            .await;
        versions.push(rv);
    }
    // The last resumed watch is open.
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", &format!("{INGRESS_WATCH}305")) == 1)
            .await
    );
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    // Exported at 0 from the start (so an alert sees the first restart), and still 0.
    assert_eq!(
        restarts_line(&metrics),
        Some("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 0"),
        "{metrics}"
    );
    let api = r.shutdown().await;
    let mut want = vec![INGRESS_LIST.to_string()];
    want.extend(versions.iter().map(|v| format!("{INGRESS_WATCH}{v}")));
    assert_eq!(ingress_calls(&api), want, "one list in 17.5 minutes");
    assert_eq!(api.count("PUT", COREDNS), 1);
}

/// A LoadBalancer Service whose every address reports `ipMode: Proxy` (KEP-1860).
fn proxied_lb(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ouroboros", "resourceVersion": "7"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.1.1", "clusterIPs": ["10.96.1.1"]},
        "status": {"loadBalancer": {"ingress": [
            {"ip": "203.0.113.7", "ipMode": "Proxy"},
            {"ip": "2001:db8::7", "ipMode": "Proxy"}
        ]}}
    })
}

/// traefik's load balancer reports ipMode Proxy: in-cluster clients reach it themselves, so its
/// names leave the block (nginx's stay), with an Event on its Service and the target_skipped
/// gauge; with --skip-proxy-ipmode=false they stay.
#[tokio::test]
async fn a_target_behind_an_ipmode_proxy_load_balancer_is_left_out() {
    const CONTROLLER_LIST: &str =
        "/api/v1/namespaces/ouroboros/services?&fieldSelector=metadata.name%3Dtraefik&limit=500";
    let run = |skip: &'static str| async move {
        let mut st = state_with(vec![
            classed("shop", "nginx", None, &["shop.example.com"]),
            classed("blog", "traefik", None, &["blog.example.com"]),
        ]);
        st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
        st.services = vec![
            service("proxy-traefik", &["10.96.0.60"]),
            proxied_lb("traefik"),
        ];
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let r = start(
            st,
            &[
                "--listen-health",
                &listen,
                "--leader-elect=false",
                "--coredns-answer",
                "template",
                "--proxy-service-namespace",
                "ouroboros",
                "--target",
                "name=traefik,service=proxy-traefik,ingress-class=traefik,\
                 ingress-controller=ouroboros/traefik",
                skip,
            ],
        );
        let settled = r
            .api
            .wait_for(10, |a| {
                let last = a.matching("PUT", COREDNS).pop().and_then(|(_, b)| b);
                last.is_some_and(|b| {
                    let text = b["data"]["Corefile"].as_str().unwrap_or_default();
                    text.contains("shop")
                        && text.contains("blog") != (skip == "--skip-proxy-ipmode=true")
                })
            })
            .await;
        assert!(settled, "{:#?}", r.api.calls());
        let (_, metrics) = http_get(port, "/metrics").await;
        let corefile = r.state.lock().unwrap().corefile.clone();
        (r.shutdown().await, corefile, metrics)
    };

    let (api, corefile, metrics) = run("--skip-proxy-ipmode=true").await;
    assert!(
        !corefile.contains("blog") && corefile.contains("10.96.0.53"),
        "{corefile}"
    );
    assert!(!corefile.contains("10.96.0.60"), "{corefile}");
    assert_eq!(api.count("GET", CONTROLLER_LIST), 1, "{:#?}", api.calls());
    let ev = api
        .matching("POST", EVENTS)
        .into_iter()
        .filter_map(|(_, b)| b)
        .find(|b| b["reason"] == "HairpinSkipped")
        .expect("a HairpinSkipped Event");
    assert_eq!(
        (
            ev["regarding"]["kind"].as_str(),
            ev["regarding"]["name"].as_str()
        ),
        (Some("Service"), Some("traefik"))
    );
    assert!(
        ev["note"].as_str().unwrap().contains("target traefik"),
        "{ev}"
    );
    for line in [
        "ouroboros_controller_target_skipped{target=\"traefik\"} 1",
        "ouroboros_controller_target_hostnames{target=\"traefik\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Off: traefik's names are hairpinned whatever its load balancer says; it is not watched.
    let (api, corefile, _) = run("--skip-proxy-ipmode=false").await;
    assert!(
        corefile.contains("blog") && corefile.contains("10.96.0.60"),
        "{corefile}"
    );
    assert_eq!(api.count("GET", CONTROLLER_LIST), 0);
}

/// Source selection through the whole controller: an opted-out Ingress, an excluded namespace
/// and `--ingress-hosts all` decide what the block holds.
#[tokio::test]
async fn opt_out_namespaces_and_rule_hosts_shape_the_block() {
    let mut opted_out = ingress("legacy", &["legacy.example.com"]);
    opted_out["metadata"]["annotations"] = json!({"ouroboros.io/hairpin": "false"});
    let mut staging = ingress("staging", &["staging.example.com"]);
    staging["metadata"]["namespace"] = json!("staging");
    let mut http = ingress("shop", &["shop.example.com"]);
    http["spec"]["rules"] = json!([{"host": "shop.example.com"}, {"host": "plain.example.com"}]);
    let r = start(
        state_with(vec![opted_out, staging, http]),
        &[
            "--leader-elect=false",
            "--exclude-namespace",
            "staging",
            "--ingress-hosts",
            "all",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    r.shutdown().await;
    let rewritten: Vec<&str> = corefile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rewrite name "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        rewritten,
        ["plain.example.com", "shop.example.com"],
        "{corefile}"
    );
}

/// The Events' bodies, in the order sent, for one method.
fn event_bodies(api: &Routed, method: &str) -> Vec<(String, Value)> {
    api.matching(method, EVENTS)
        .into_iter()
        .map(|(u, b)| (u, b.expect("an Event request has a body")))
        .collect()
}

/// Two conflicts on one Ingress (another host lost, to another winner) are two Events, each
/// with its own note; the second conflict going away and coming back is a true repeat, counted
/// up on its own Event (not on the first).
#[tokio::test]
async fn each_conflict_message_is_its_own_event_and_a_repeat_counts_up() {
    const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true";
    let mut st = state_with(vec![
        classed(
            "shop",
            "nginx",
            None,
            &["shop.example.com", "www.example.com"],
        ),
        classed("shop-traefik", "traefik", None, &["shop.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    let mut www = classed("www-traefik", "traefik", None, &["www.example.com"]);
    www["metadata"]["resourceVersion"] = json!("11");
    let puts = |a: &Routed| a.count("PUT", COREDNS);
    let step = |kind: &'static str, rv: &'static str| {
        let mut o = www.clone();
        o["metadata"]["resourceVersion"] = json!(rv);
        json!({"type": kind, "object": o})
    };
    r.api.deliver(INGRESS_WATCH, step("ADDED", "11")).await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 2).await);
    // Gone (www goes back to nginx's proxy: a write), then back: the same loss again.
    let before = puts(&r.api);
    r.api.deliver(INGRESS_WATCH, step("DELETED", "12")).await;
    assert!(r.api.wait_for(10, |a| puts(a) > before).await);
    r.api.deliver(INGRESS_WATCH, step("ADDED", "13")).await;
    assert!(
        r.api.wait_for(10, |a| a.count("PATCH", EVENTS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = r.shutdown().await;

    let created = event_bodies(&api, "POST");
    assert_eq!(created.len(), 2, "{created:#?}");
    for (uri, ev) in &created {
        assert_eq!(uri, "/apis/events.k8s.io/v1/namespaces/web/events?");
        assert_eq!(ev["reason"], "HostnameConflict");
        assert_eq!(ev["type"], "Warning");
        assert_eq!(ev["regarding"]["name"], "shop");
        assert_eq!(ev["reportingController"], "ouroboros-controller");
    }
    let notes: Vec<&str> = created
        .iter()
        .map(|(_, e)| e["note"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        [
            "not hairpinned through target default: shop.example.com goes to target traefik \
             through Ingress web/shop-traefik; set the ouroboros.io/priority annotation (higher \
             wins) to choose",
            "not hairpinned through target default: www.example.com goes to target traefik \
             through Ingress web/www-traefik; set the ouroboros.io/priority annotation (higher \
             wins) to choose",
        ]
    );
    let second = created[1].1["metadata"]["name"].as_str().unwrap();
    let repeats = event_bodies(&api, "PATCH");
    assert_eq!(repeats.len(), 1, "{repeats:#?}");
    assert_eq!(
        repeats[0].0,
        format!("/apis/events.k8s.io/v1/namespaces/web/events/{second}?")
    );
    let series = &repeats[0].1["series"];
    assert_eq!(series["count"], 2, "{:#?}", repeats[0].1);
    assert!(series["lastObservedTime"].is_string());
    assert_eq!(
        repeats[0].1.as_object().unwrap().len(),
        1,
        "only the series changes: the API refuses a changed note"
    );
}

/// A target's names coming back after `ipMode: Proxy` went away is a `HairpinRestored` Event
/// (Normal) of its own, not a repeat of the skip; the skip seen again counts up its own Event.
#[tokio::test]
async fn a_target_hairpinned_again_gets_its_own_event() {
    const TRAEFIK_WATCH: &str =
        "watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dtraefik";
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        classed("blog", "traefik", None, &["blog.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![
        service("proxy-traefik", &["10.96.0.60"]),
        proxied_lb("traefik"),
    ];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,\
             ingress-controller=ouroboros/traefik",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    let mut vip = proxied_lb("traefik");
    vip["metadata"]["resourceVersion"] = json!("8");
    vip["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("VIP");
    r.api
        .deliver(TRAEFIK_WATCH, json!({"type": "MODIFIED", "object": vip}))
        .await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 2).await);
    let mut proxied = proxied_lb("traefik");
    proxied["metadata"]["resourceVersion"] = json!("9");
    r.api
        .deliver(
            TRAEFIK_WATCH,
            json!({"type": "MODIFIED", "object": proxied}),
        )
        .await;
    assert!(r.api.wait_for(10, |a| a.count("PATCH", EVENTS) >= 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = r.shutdown().await;

    let created = event_bodies(&api, "POST");
    let seen: Vec<(&str, &str, &str)> = created
        .iter()
        .map(|(u, e)| {
            assert_eq!(u, "/apis/events.k8s.io/v1/namespaces/ouroboros/events?");
            assert_eq!(e["regarding"]["name"], "traefik");
            (
                e["reason"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["note"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "HairpinSkipped",
                "Warning",
                "every load-balancer address reports ipMode: Proxy (KEP-1860), so in-cluster \
                 clients of target traefik go through the load balancer and ouroboros leaves its \
                 names out (--skip-proxy-ipmode=false keeps them)"
            ),
            (
                "HairpinRestored",
                "Normal",
                "not every load-balancer address reports ipMode: Proxy any more: ouroboros \
                 hairpins the names of target traefik again"
            ),
        ]
    );
    let first = created[0].1["metadata"]["name"].as_str().unwrap();
    let repeats = event_bodies(&api, "PATCH");
    assert_eq!(repeats.len(), 1, "{repeats:#?}");
    assert_eq!(
        repeats[0].0,
        format!("/apis/events.k8s.io/v1/namespaces/ouroboros/events/{first}?")
    );
    assert_eq!(repeats[0].1["series"]["count"], 2);
}

/// One Ingress with `n` hosts h0..h(n-1).example.com.
fn many(n: usize) -> Value {
    let hosts: Vec<String> = (0..n).map(|i| format!("h{i}.example.com")).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    ingress("shop", &hosts)
}

/// The Ingress `shop` now has `n` hosts (on the watch, and for any relist).
async fn shrink_to(r: &Running, n: usize, rv: u64) {
    let mut o = many(n);
    o["metadata"]["resourceVersion"] = json!(rv.to_string());
    r.state.lock().unwrap().ingresses = vec![o.clone()];
    r.api
        .deliver(
            "/apis/networking.k8s.io/v1/ingresses?&watch=true",
            json!({"type": "MODIFIED", "object": o}),
        )
        .await;
}

fn hosts_in(corefile: &str) -> usize {
    corefile.matches(".example.com").count()
}

/// A change that removes 10 of 12 hosts is held: the block keeps the 12, a RemovalHeld Event on
/// the ConfigMap, the held-hostnames metric and a /readyz cause say so. Another set meanwhile
/// starts the hold again; the set written is the one that stayed the same for 5 minutes.
#[tokio::test(start_paused = true)]
async fn a_mass_removal_is_held_until_the_same_set_stays_for_the_hold_time() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flags = [
        "--leader-elect=false",
        "--listen-health",
        &listen,
        "--resync",
        "1h",
        "--watch-idle-timeout",
        "0",
    ];
    let r = start(state_with(vec![many(12)]), &flags);
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 12);

    shrink_to(&r, 2, 11).await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "held 4 minutes in");
    assert_eq!(
        hosts_in(&r.state.lock().unwrap().corefile),
        12,
        "old block kept"
    );
    let (code, ready) = http_get(port, "/readyz").await;
    assert_eq!(
        (code, ready.as_str()),
        (
            503,
            "removal-held: a write that removes 10 of 12 hostnames is held\n"
        )
    );
    let (_, metrics) = http_get(port, "/metrics").await;
    for line in [
        "ouroboros_controller_removal_held_hostnames 10",
        "ouroboros_controller_removal_holds_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Another set: the hold starts again, so 5 minutes after the first change nothing is written.
    shrink_to(&r, 1, 12).await;
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "the hold restarted");
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 1);
    let (code, _) = http_get(port, "/readyz").await;
    assert_eq!(code, 200);
    let (_, metrics) = http_get(port, "/metrics").await;
    for line in [
        "ouroboros_controller_removal_held_hostnames 0",
        "ouroboros_controller_removal_holds_total 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 2, "{:#?}", api.calls());
    let created = event_bodies(&api, "POST");
    let held: Vec<(&str, &str, &str)> = created
        .iter()
        .map(|(u, e)| {
            assert_eq!(u, "/apis/events.k8s.io/v1/namespaces/kube-system/events?");
            (
                e["reason"].as_str().unwrap(),
                e["regarding"]["name"].as_str().unwrap(),
                e["note"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(held.len(), 2, "one a held set: {created:#?}");
    assert_eq!(held[0].0, "RemovalHeld");
    assert_eq!(held[0].1, "coredns");
    assert!(
        held[0]
            .2
            .starts_with("a write would remove 10 of the 12 hostnames"),
        "{}",
        held[0].2
    );
    assert!(
        held[1]
            .2
            .starts_with("a write would remove 11 of the 12 hostnames"),
        "{}",
        held[1].2
    );
}

/// With --removal-guard-hold=0s the same removal is written at once, with no Event.
#[tokio::test]
async fn a_zero_hold_writes_a_mass_removal_at_once() {
    let r = start(
        state_with(vec![many(12)]),
        &["--leader-elect=false", "--removal-guard-hold=0s"],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    shrink_to(&r, 2, 11).await;
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 2);
    let api = r.shutdown().await;
    assert_eq!(api.count("POST", EVENTS), 0);
}

fn list_failed() -> Answer {
    Answer::Json(
        500,
        status(500, "InternalError", "etcdserver: request timed out"),
    )
}

/// An initial Ingress list that keeps failing writes nothing, and /readyz says why; the first
/// list that succeeds is written.
#[tokio::test(start_paused = true)]
async fn an_initial_list_that_fails_writes_nothing() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.ingress_lists = (0..4).map(|_| list_failed()).collect();
    let r = start(st, &["--leader-elect=false", "--listen-health", &listen]);
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", INGRESS_LIST) >= 4)
            .await,
        "{:#?}",
        r.api.calls()
    );
    assert_eq!(
        r.api.count("PUT", COREDNS),
        0,
        "nothing written on a failed list"
    );
    assert_eq!(r.api.count("GET", COREDNS), 0, "nothing even read");
    let (code, why) = http_get(port, "/readyz").await;
    assert_eq!(
        (code, why.as_str()),
        (
            503,
            "syncing: waiting for the initial list of every watched kind\n"
        )
    );
    assert!(r.api.wait_for(60, |a| a.count("PUT", COREDNS) >= 1).await);
    assert!(r
        .state
        .lock()
        .unwrap()
        .corefile
        .contains("shop.example.com"));
    r.shutdown().await;
}

/// A watch that must list again (410 Gone) and whose new list fails, then comes back partial
/// (the second page fails), never empties the block: the store keeps the last complete list
/// until a new one is complete, so a sync meanwhile (the resync) writes no host away.
#[tokio::test(start_paused = true)]
async fn a_relist_that_fails_or_comes_back_partial_removes_nothing() {
    const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true";
    let ingresses = vec![
        ingress("shop", &["shop.example.com"]),
        ingress("blog", &["blog.example.com"]),
    ];
    let r = start(
        state_with(ingresses.clone()),
        &[
            "--leader-elect=false",
            "--resync",
            "1m",
            "--watch-idle-timeout",
            "0",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let mut first_page = list(
        "networking.k8s.io/v1",
        "IngressList",
        "",
        vec![ingresses[0].clone()],
    );
    first_page["metadata"]["continue"] = json!("page-2");
    r.state.lock().unwrap().ingress_lists = vec![
        list_failed(),
        list_failed(),
        Answer::Json(200, first_page),
        list_failed(),
        Answer::Hold,
    ];
    let gone =
        json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
    r.api.deliver(INGRESS_WATCH, gone).await;
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", "&continue=page-2") >= 1)
            .await,
        "the partial list was read: {:#?}",
        r.api.calls()
    );
    // The next list hangs, so the store is as the failures left it when the resync (1m)
    // computes and writes the set: the block must still hold both hosts.
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", INGRESS_LIST) >= 5)
            .await
    );
    let reads = r.api.count("GET", COREDNS);
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert!(
        r.api.count("GET", COREDNS) > reads,
        "the resync read the ConfigMap"
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    let api = r.shutdown().await;
    assert!(
        corefile.contains("shop.example.com") && corefile.contains("blog.example.com"),
        "{corefile}"
    );
    assert_eq!(api.count("PUT", COREDNS), 1, "{:#?}", api.calls());
}

/// ingress-nginx's ConfigMap as its users write it, with `use-proxy-protocol` set to `on`.
fn nginx_config(on: &str, rv: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ouroboros",
                     "resourceVersion": rv.to_string()},
        "data": {"use-proxy-protocol": on, "use-forwarded-headers": "true"}
    })
}

/// The last Corefile written.
fn last_corefile(a: &Routed) -> String {
    a.matching("PUT", COREDNS)
        .pop()
        .and_then(|(_, b)| b)
        .and_then(|b| b["data"]["Corefile"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The controller answering with templates, the proxy at 10.96.0.53, the default target's
/// ingress controller Service `ouroboros/ingress-nginx-controller`, and `extra` flags.
fn start_auto(mut st: State, extra: &[&str]) -> Running {
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    let mut flags = vec![
        "--leader-elect=false",
        "--coredns-answer",
        "template",
        "--proxy-service-namespace",
        "ouroboros",
        "--ingress-controller-service",
        "ouroboros/ingress-nginx-controller",
    ];
    flags.extend_from_slice(extra);
    start(st, &flags)
}

/// Asserts that the default target's answer metric is 1 on `picked` and 0 on the others.
async fn assert_answer_metric(port: u16, picked: &str) {
    let (_, metrics) = http_get(port, "/metrics").await;
    for answer in ["relay", "direct", "skip"] {
        let line = format!(
            "ouroboros_controller_target_answer{{target=\"default\",answer=\"{answer}\"}} {}",
            u8::from(answer == picked)
        );
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// Whether the `n`th write of the CoreDNS ConfigMap has been made, answering with `ip`.
fn wrote(n: usize, ip: &'static str) -> impl Fn(&Routed) -> bool {
    move |a: &Routed| a.count("PUT", COREDNS) == n && last_corefile(a).contains(ip)
}

/// Asserts that the object at the path ending in `suffix` was read before the first write.
fn read_before_the_first_write(api: &Routed, suffix: &str) {
    let calls = api.calls();
    let read_at = calls
        .iter()
        .position(|(m, u)| m == "GET" && u.ends_with(suffix))
        .unwrap_or_else(|| panic!("no read of {suffix}: {calls:#?}"));
    let put_at = calls.iter().position(|(m, _)| m == "PUT").unwrap();
    assert!(read_at < put_at, "{suffix} read before the first write");
}

/// `--answer auto` with ingress-nginx's ConfigMap: the header is required, so the names go to
/// the proxy, read before the first write (one write); `use-proxy-protocol` flipped to false
/// answers them with the ingress controller Service's ClusterIPs in exactly one more write,
/// listed by name (no `get` on it); flipped back, one more.
#[tokio::test]
async fn auto_follows_the_ingress_nginx_configmap_one_write_per_flip() {
    const CONFIG_WATCH: &str = "/api/v1/namespaces/ouroboros/configmaps?&watch=true";
    const CONTROLLER_LIST: &str = "/api/v1/namespaces/ouroboros/services?&fieldSelector=\
         metadata.name%3Dingress-nginx-controller";
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.services = vec![service("ingress-nginx-controller", &["10.96.7.7"])];
    st.configmaps = vec![nginx_config("true", 3)];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let r = start_auto(
        st,
        &[
            "--listen-health",
            &listen,
            "--ingress-controller-kind",
            "ingress-nginx",
            "--ingress-controller-config",
            "ouroboros/ingress-nginx-controller",
        ],
    );
    assert!(
        r.api.wait_for(10, wrote(1, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    assert_answer_metric(port, "relay").await;
    let flip = |on: &'static str, rv: u64| {
        let event = json!({"type": "MODIFIED", "object": nginx_config(on, rv)});
        r.api.deliver(CONFIG_WATCH, event)
    };
    read_before_the_first_write(&r.api, "/configmaps/ingress-nginx-controller");

    flip("false", 4).await;
    assert!(
        r.api.wait_for(10, wrote(2, "10.96.7.7")).await,
        "{:#?}",
        r.api.calls()
    );
    let direct = last_corefile(&r.api);
    assert!(!direct.contains("10.96.0.53"), "{direct}");
    assert!(r.api.count("GET", CONTROLLER_LIST) >= 1);
    assert_answer_metric(port, "direct").await;

    // An edit that keeps the verdict writes nothing.
    flip("False", 5).await;
    flip("true", 6).await;
    assert!(
        r.api.wait_for(10, wrote(3, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let api = r.shutdown().await;
    assert_eq!(
        api.count("PUT", COREDNS),
        3,
        "one write per flip: {:#?}",
        api.calls()
    );
    assert_eq!(
        api.count("GET", "/services/ingress-nginx-controller"),
        0,
        "the ingress controller Service is listed by name, never read with get"
    );
}

/// An ingress controller stand-in on 127.0.0.1: answers `HTTP/1.1 200` when it is happy with
/// what came, `400` to a PROXY header it does not expect (as nginx does), and closes on a
/// connection without the header it requires. `requires` switches it while it runs.
async fn header_listener(requires: Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let requires = requires.load(Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let headed = buf[..n].starts_with(b"PROXY ");
                let reply: &[u8] = match (requires, headed) {
                    (true, false) => return,
                    (false, true) => b"HTTP/1.1 400 Bad Request\r\n\r\n",
                    _ => b"HTTP/1.1 200 OK\r\n\r\n",
                };
                let _ = c.write_all(reply).await;
            });
        }
    });
    port
}

/// The ingress controller Service on 127.0.0.1 with `port` named `http` (so it is knocked on
/// with HTTP there).
fn probed_service(port: u16, rv: u64) -> Value {
    let mut svc = service("ingress-nginx-controller", &["127.0.0.1"]);
    svc["metadata"]["resourceVersion"] = json!(rv.to_string());
    svc["spec"]["ports"] = json!([{"name": "http", "port": port, "protocol": "TCP"}]);
    svc
}

/// `--ingress-controller-kind probe`: the Service is read and knocked on before the first
/// write (a listener that requires the header: relay); once it stops requiring it, the next
/// resync answers directly in exactly one more write; the Service moved to a port that
/// requires it again, its watch relays in one more; resyncs that find the same verdict write
/// nothing.
#[tokio::test]
async fn probe_follows_the_ingress_controller_service_one_write_per_flip() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const SERVICE_WATCH: &str =
        "watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dingress-nginx-controller";
    let first = Arc::new(AtomicBool::new(true));
    let port = header_listener(first.clone()).await;
    let other = header_listener(Arc::new(AtomicBool::new(true))).await;
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.services = vec![probed_service(port, 100)];
    let r = start_auto(
        st,
        &[
            "--ingress-controller-kind",
            "probe",
            "--skip-proxy-ipmode=false",
            "--resync",
            "2s",
        ],
    );
    assert!(
        r.api.wait_for(10, wrote(1, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    read_before_the_first_write(&r.api, "/services/ingress-nginx-controller");

    // No longer requires the header: the next resync knocks and answers directly.
    first.store(false, Ordering::SeqCst);
    assert!(
        r.api.wait_for(10, wrote(2, "127.0.0.1")).await,
        "{:#?}",
        r.api.calls()
    );
    assert!(!last_corefile(&r.api).contains("10.96.0.53"));

    // The Service moves to a port whose listener requires it: its watch relays again.
    let moved = json!({"type": "MODIFIED", "object": probed_service(other, 101)});
    r.state.lock().unwrap().services = vec![probed_service(other, 101)];
    r.api.deliver(SERVICE_WATCH, moved).await;
    assert!(
        r.api.wait_for(10, wrote(3, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    // Two more resyncs knock again and find the same: nothing written.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let api = r.shutdown().await;
    assert_eq!(
        api.count("PUT", COREDNS),
        3,
        "one write per flip: {:#?}",
        api.calls()
    );
}

/// `answer=direct` answers a target's names with its ingress controller Service's ClusterIPs
/// (dual-stack: both); `answer=skip` leaves its names out while the others stay.
#[tokio::test]
async fn direct_answers_the_ingress_controller_and_skip_leaves_names_out() {
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        classed("blog", "traefik", None, &["blog.example.com"]),
        classed("wiki", "internal", None, &["wiki.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![
        service("proxy-traefik", &["10.96.0.60"]),
        service("traefik", &["10.96.9.9", "fd00::9"]),
        service("proxy-internal", &["10.96.0.61"]),
    ];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,answer=direct,\
             ingress-controller=ouroboros/traefik",
            "--target",
            "name=internal,service=proxy-internal,ingress-class=internal,answer=skip",
        ],
    );
    assert!(
        r.api
            .wait_for(10, |a| last_corefile(a).contains("blog"))
            .await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = last_corefile(&r.api);
    let api = r.shutdown().await;
    assert!(
        corefile.contains("10.96.0.53") && corefile.contains("shop"),
        "{corefile}"
    );
    assert!(
        corefile.contains("IN A 10.96.9.9") && corefile.contains("IN AAAA fd00::9"),
        "{corefile}"
    );
    assert!(
        !corefile.contains("10.96.0.60"),
        "not through the traefik proxy: {corefile}"
    );
    assert!(
        !corefile.contains("wiki") && !corefile.contains("10.96.0.61"),
        "{corefile}"
    );
    assert_eq!(api.count("PUT", COREDNS), 1);
}

/// `answer=direct` without the ingress controller Service is refused before any request.
#[tokio::test]
async fn direct_without_the_ingress_controller_service_is_refused_at_start() {
    let r = start(
        state_with(vec![]),
        &["--leader-elect=false", "--answer", "direct"],
    );
    let got = tokio::time::timeout(Duration::from_secs(5), r.task)
        .await
        .unwrap()
        .unwrap();
    let e = got.unwrap_err().to_string();
    assert!(
        e.contains("answer direct") && e.contains("--ingress-controller-service"),
        "{e}"
    );
    assert!(r.api.calls().is_empty(), "{:#?}", r.api.calls());
}

/// Answers every connection with an HTTP status line once it has read the request.
async fn answering_listener(addr: &str) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            });
        }
    });
    (port, task)
}

/// Polls /metrics until `done` holds for it (the deadline is only a safety net).
async fn metrics_until(port: u16, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            drop(s);
            let (_, m) = http_get(port, "/metrics").await;
            if done(&m) {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}; metrics now:\n{m}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn probe_lines(metrics: &str) -> Vec<&str> {
    let mut v: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("ouroboros_controller_probe_failing_hosts{")
                || l.starts_with("ouroboros_controller_probe_last_failure_timestamp_seconds{")
        })
        .map(|l| l.rsplit_once(' ').map_or(l, |(series, _)| series))
        .collect();
    v.sort();
    v
}

/// The controller's flags for the probe test: template answers with both addresses given, a
/// probe every second through `dns` to HTTP on `http`.
fn probe_flags<'a>(listen: &'a str, dns: &'a str, http: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect=false",
        "--listen-health",
        listen,
        "--coredns-answer",
        "template",
        "--proxy-ip",
        "127.0.0.1,127.0.0.2",
        "--probe-interval",
        "1s",
        "--probe-dns-server",
        dns,
        "--probe-https-port",
        "0",
        "--probe-http-port",
        http,
        "--probe-timeout",
        "1s",
        // The CoreDNS here answers from a hosts file, not from what the controller writes:
        // judge its answers at once, not as a block still propagating.
        "--probe-propagation",
        "0s",
    ]
}

#[tokio::test]
async fn the_probe_counts_results_and_keeps_series_only_for_failing_hosts() {
    let dir = crate::support::temp_dir("probe-controller");
    // Real CoreDNS answers the names: shop and down with the proxy's addresses, wrong with a
    // public one.
    let Some(dns) = crate::peers::probe::hosts_dns(
        dir.path(),
        &[
            ("127.0.0.1", "shop.example.com"),
            ("127.0.0.2", "down.example.com"),
            ("192.0.2.7", "wrong.example.com"),
        ],
    ) else {
        return;
    };
    let (http, _listener) = answering_listener("127.0.0.1:0").await;
    let port = free_port();
    let (listen, dns_addr, http_port) = (
        format!("127.0.0.1:{port}"),
        dns.addr().to_string(),
        http.to_string(),
    );
    let mut wrong = ingress("wrong", &["wrong.example.com"]);
    wrong["metadata"]["resourceVersion"] = json!("11");
    let st = state_with(vec![
        ingress("shop", &["shop.example.com"]),
        ingress("down", &["down.example.com"]),
        wrong.clone(),
    ]);
    let r = start(st, &probe_flags(&listen, &dns_addr, &http_port));
    // shop answers; nothing listens on 127.0.0.2 (refused); wrong is answered publicly.
    let m = metrics_until(port, "the three verdicts counted", |m| {
        [
            "ouroboros_controller_probes_total{target=\"default\",result=\"ok\"}",
            "ouroboros_controller_probes_total{target=\"default\",result=\"refused\"}",
            "ouroboros_controller_probes_total{target=\"default\",result=\"dns-wrong\"}",
        ]
        .iter()
        .all(|s| m.contains(s))
    })
    .await;
    assert_eq!(
        probe_lines(&m),
        [
            "ouroboros_controller_probe_failing_hosts{target=\"default\"}",
            "ouroboros_controller_probe_last_failure_timestamp_seconds{target=\"default\",host=\"down.example.com\",result=\"refused\"}",
            "ouroboros_controller_probe_last_failure_timestamp_seconds{target=\"default\",host=\"wrong.example.com\",result=\"dns-wrong\"}",
        ],
        "{m}"
    );
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 2"),
        "{m}"
    );
    // Every result is exported from the start; these two never happened.
    for absent in ["reset", "timeout"] {
        let line = format!(
            "ouroboros_controller_probes_total{{target=\"default\",result=\"{absent}\"}} 0"
        );
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    // The probe is not the controller's own health.
    assert_eq!(http_get(port, "/readyz").await.0, 200);

    // wrong's Ingress goes: its series goes with the next write.
    wrong["metadata"]["resourceVersion"] = json!("12");
    r.api
        .deliver(INGRESS_WATCH, json!({"type": "DELETED", "object": wrong}))
        .await;
    let m = metrics_until(port, "wrong's series removed", |m| {
        !m.contains("host=\"wrong.example.com\"")
    })
    .await;
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 1"),
        "{m}"
    );

    // Something answers on 127.0.0.2 now: down recovers and its series goes.
    let (_, _recovered) = answering_listener(&format!("127.0.0.2:{http}")).await;
    let m = metrics_until(port, "down recovered", |m| {
        !m.contains("host=\"down.example.com\"")
    })
    .await;
    assert_eq!(
        probe_lines(&m),
        ["ouroboros_controller_probe_failing_hosts{target=\"default\"}"],
        "{m}"
    );
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 0"),
        "{m}"
    );
    r.shutdown().await;
}

const INGRESS_CLASS_WATCH: &str = "/apis/networking.k8s.io/v1/ingressclasses?&watch=true";

/// An IngressClass served by `controller`, the default class when `default`.
fn ingress_class(name: &str, controller: &str, default: bool, rv: u64) -> Value {
    let mut v = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": name, "resourceVersion": rv.to_string()},
        "spec": {"controller": controller}
    });
    if default {
        v["metadata"]["annotations"] =
            json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    }
    v
}

/// Which of `hosts` the A templates of `corefile` answer with `ip` (each template's `match`
/// regex applied to the name).
fn answered_with<'h>(corefile: &str, ip: &str, hosts: &[&'h str]) -> Vec<&'h str> {
    let mut matching = Vec::new();
    for pair in corefile.split("template IN A ").skip(1) {
        // The A template's lines, up to its closing brace (the AAAA one follows).
        let lines: Vec<&str> = pair.lines().take_while(|l| l.trim() != "}").collect();
        if !lines
            .iter()
            .any(|l| l.trim() == format!("answer \"{{{{ .Name }}}} 30 IN A {ip}\""))
        {
            continue;
        }
        for l in &lines {
            if let Some(re) = l.trim().strip_prefix("match ") {
                matching.push(regex::Regex::new(re).unwrap());
            }
        }
    }
    hosts
        .iter()
        .copied()
        .filter(|h| matching.iter().any(|re| re.is_match(&format!("{h}."))))
        .collect()
}

const TRAEFIK: &str = "traefik.io/ingress-controller";
const INGRESS_NGINX: &str = "k8s.io/ingress-nginx";

/// Traefik serves `ingressClassName: nginx`: its hosts go to the traefik target by the
/// IngressClass's `spec.controller`, not to the default proxy by the class name. Each change to
/// the IngressClasses (the controller, a new default class, a deleted one) moves the hosts in
/// exactly one write, and no write ever lacks a host.
#[allow(
    clippy::too_many_lines,
    reason = "one scenario whose steps build on each other"
)]
#[tokio::test]
async fn a_changed_ingress_class_moves_its_hosts_in_one_write() {
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        ingress("old", &["old.example.com"]),
    ]);
    st.ingress_classes = vec![ingress_class("nginx", TRAEFIK, true, 10)];
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            &format!("name=traefik,service=proxy-traefik,ingress-class-controller={TRAEFIK}"),
        ],
    );
    let both = ["old.example.com", "shop.example.com"];
    let mut puts = 1;
    let wait_put = |n: usize| {
        let api = &r.api;
        async move {
            assert!(
                api.wait_for(10, |a| a.count("PUT", COREDNS) >= n).await,
                "{:#?}",
                api.calls()
            );
        }
    };
    wait_put(puts).await;
    let now = || r.state.lock().unwrap().corefile.clone();
    assert_eq!(
        answered_with(&now(), "10.96.0.60", &both),
        both,
        "{}",
        now()
    );
    assert!(
        answered_with(&now(), "10.96.0.53", &both).is_empty(),
        "{}",
        now()
    );

    // The events, what they do, the names then answered by traefik and by the default proxy.
    type Step<'a> = (Vec<Value>, &'a str, &'a [&'a str], &'a [&'a str]);
    let steps: [Step<'_>; 3] = [
        // The class is served by ingress-nginx now: both Ingresses go to the default proxy.
        // `spec.controller` is immutable, so the class is replaced (`kubectl replace --force`:
        // deleted and created again, both within the debounce).
        (
            vec![
                json!({"type": "DELETED",
                    "object": ingress_class("nginx", TRAEFIK, true, 11)}),
                json!({"type": "ADDED",
                    "object": ingress_class("nginx", INGRESS_NGINX, true, 12)}),
            ],
            "the class replaced with another controller",
            &[],
            &both,
        ),
        // A Traefik class becomes the default one: the classless Ingress follows it.
        (
            vec![
                json!({"type": "MODIFIED",
                    "object": ingress_class("nginx", INGRESS_NGINX, false, 13)}),
                json!({"type": "ADDED",
                    "object": ingress_class("traefik", TRAEFIK, true, 14)}),
            ],
            "a new default class",
            &["old.example.com"],
            &["shop.example.com"],
        ),
        // And goes away: no default class, so the classless Ingress is the default proxy's.
        (
            vec![json!({"type": "DELETED",
                "object": ingress_class("traefik", TRAEFIK, true, 15)})],
            "the default class deleted",
            &[],
            &both,
        ),
    ];
    for (events, what, traefik, default) in steps {
        assert_eq!(r.api.release(INGRESS_CLASS_WATCH, &events), 1, "{what}");
        puts += 1;
        wait_put(puts).await;
        // Well past the 50 ms debounce: nothing more is written for this change.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(r.api.count("PUT", COREDNS), puts, "{what}: one write");
        let corefile = now();
        assert_eq!(
            answered_with(&corefile, "10.96.0.60", &both),
            traefik,
            "{what}: {corefile}"
        );
        assert_eq!(
            answered_with(&corefile, "10.96.0.53", &both),
            default,
            "{what}: {corefile}"
        );
    }
    let writes = r.puts();
    let api = r.shutdown().await;
    assert_eq!(writes.len(), 4, "{:#?}", api.calls());
    // Every write answers both names: a move is never a removal then an addition.
    for w in &writes {
        let corefile = w["data"]["Corefile"].as_str().unwrap();
        let mut answered = answered_with(corefile, "10.96.0.60", &both);
        answered.extend(answered_with(corefile, "10.96.0.53", &both));
        answered.sort();
        assert_eq!(answered, both, "{corefile}");
    }
}

/// `answer=direct` with `direct-ip=` and no `ingress-controller=`: the target's names are
/// answered with those addresses, never silently with its proxy's.
#[tokio::test]
async fn a_direct_answer_from_direct_ips_alone_is_not_relayed() {
    let mut st = state_with(vec![
        classed("blog", "traefik", None, &["blog.example.com"]),
        classed("shop", "nginx", None, &["shop.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,answer=direct,\
             direct-ip=10.43.0.9",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    let api = r.shutdown().await;
    let hosts = ["blog.example.com", "shop.example.com"];
    let answered = |ip| answered_with(&corefile, ip, &hosts);
    assert_eq!(answered("10.43.0.9"), ["blog.example.com"], "{corefile}");
    assert!(answered("10.96.0.60").is_empty(), "{corefile}");
    assert_eq!(answered("10.96.0.53"), ["shop.example.com"], "{corefile}");
    // The addresses are given: the ingress controller's Service is never read.
    assert_eq!(api.count("GET", "/api/v1/namespaces/traefik"), 0);
}
