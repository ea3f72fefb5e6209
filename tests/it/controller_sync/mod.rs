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

mod idle_watch;
