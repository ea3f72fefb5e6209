//! `doctor` against a mock Kubernetes API (kube-rs's mock-service pattern): a routed fake cluster
//! answers by method and exact path+query, every request is recorded, and the reports are
//! compared with golden files in tests/fixtures/doctor/ (`UPDATE_GOLDEN=1 cargo test --test
//! it doctor::` rewrites them).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::golden_file;
use crate::kube_mock;
use crate::kube_mock::{not_found, serve_fn, status, Seen};

use ouroboros::cli::{Cli, Command};
use ouroboros::dns::answer::{Answer, Group, ProxyAddrs};
use ouroboros::dns::{corefile, ProxyFqdn, DEFAULT_PROXY_FQDN};
use ouroboros::doctor::report::{Report, Status};
use ouroboros::doctor::{diagnose, DoctorArgs};
use ouroboros::hostname::{HostPolicy, Hostname};

const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews?";

fn args(extra: &[&str]) -> DoctorArgs {
    let mut argv = vec![
        "ouroboros",
        "doctor",
        "--cluster-domain",
        "cluster.local",
        "--proxy-service-namespace",
        "ouroboros",
    ];
    if !extra.contains(&"--dial") {
        argv.extend(["--dial", "never"]);
    }
    // The scenarios hold the template pair, which `auto` (the default) picks only where
    // CoreDNS is older than 1.10; `auto` itself: auto_answers_are_judged_in_the_picked_form.
    if !extra.contains(&"--coredns-answer") {
        argv.extend(["--coredns-answer", "template"]);
    }
    argv.extend_from_slice(extra);
    match crate::common::parse_without_env::<Cli, _, _>(argv)
        .unwrap()
        .command
    {
        Command::Doctor(a) => a,
        other => panic!("parsed {other:?}"),
    }
}

/// A group version's discovery document, listing `resources`.
fn served(group_version: &str, resources: &[&str]) -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": resources.iter().map(|r| json!({
            "name": r, "singularName": "", "namespaced": true, "kind": "X",
            "verbs": ["list", "watch"]
        })).collect::<Vec<_>>()
    })
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "100"}, "items": items})
}

fn meta(ns: &str, name: &str) -> Value {
    json!({"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"), "resourceVersion": "1"})
}

fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(ns, name), "data": data})
}

fn nginx_service(ip_mode: Option<&str>) -> Value {
    let mut ingress = json!({"ip": "203.0.113.10"});
    if let Some(m) = ip_mode {
        ingress["ipMode"] = json!(m);
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx",
                     "labels": {"app.kubernetes.io/name": "ingress-nginx",
                                "app.kubernetes.io/component": "controller"}},
        "spec": {"type": "LoadBalancer",
                 "selector": {"app.kubernetes.io/name": "ingress-nginx",
                              "app.kubernetes.io/component": "controller"},
                 "ports": [{"name": "https", "port": 443, "targetPort": "https"}]},
        "status": {"loadBalancer": {"ingress": [ingress]}}
    })
}

fn deployment(ns: &str, name: &str, labels: Value, image: &str, args: Vec<&str>) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(ns, name),
        "spec": {"selector": {"matchLabels": labels.clone()},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": image, "args": args}]}}}
    })
}

fn ingress(ns: &str, name: &str, hosts: &[&str]) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(ns, name),
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": hosts, "secretName": "tls"}]}
    })
}

fn proxy_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": meta("ouroboros", "ouroboros-proxy"),
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                 "selector": {"app": "ouroboros-proxy"},
                 "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                           {"name": "https", "port": 8443, "protocol": "TCP"}]}
    })
}

fn slices(ready: &[(&str, bool)]) -> Value {
    let eps: Vec<Value> = ready
        .iter()
        .map(|(ip, r)| json!({"addresses": [ip], "conditions": {"ready": r}}))
        .collect();
    list(
        "EndpointSliceList",
        "discovery.k8s.io/v1",
        vec![json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": meta("ouroboros", "ouroboros-proxy-abcde"),
            "addressType": "IPv4", "endpoints": eps,
            "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]
        })],
    )
}

fn event(reason: &str, count: i32, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event", "metadata": meta("kube-system", "coredns.1"),
        "involvedObject": {"kind": "ConfigMap", "namespace": "kube-system", "name": "coredns"},
        "reason": reason, "type": "Warning", "count": count, "message": message
    })
}

fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

fn corefile_fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corefiles")
        .join(name);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The default answer: the template pair with the proxy Service's ClusterIP.
fn template() -> Answer {
    Answer::Template(ProxyAddrs::new(&["10.96.0.20".parse().unwrap()]).unwrap())
}

/// `--coredns-answer rewrite`: `rewrite name` lines to the proxy Service's FQDN.
fn rewrite() -> Answer {
    Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap())
}

fn with_block(corefile: &str, names: &[&str], answer: &Answer) -> String {
    corefile::splice(corefile, &hosts(names), answer)
        .unwrap()
        .text
}

/// A fake cluster: replies by exact URI (path and query), SubjectAccessReviews answered from a
/// deny list of "verb resource" pairs. Anything else is a 404.
#[derive(Clone, Default)]
struct Cluster {
    routes: BTreeMap<String, (u16, Value)>,
    denied: BTreeSet<String>,
    /// Replies served once before the route, per URI (for retry tests).
    first: BTreeMap<String, Vec<(u16, Value)>>,
}

impl Cluster {
    fn at(mut self, uri: &str, v: Value) -> Self {
        self.routes.insert(uri.to_string(), (200, v));
        self
    }
    fn fail(mut self, uri: &str, code: u16, reason: &str) -> Self {
        self.routes.insert(
            uri.to_string(),
            (code, status(code, reason, "denied by the test")),
        );
        self
    }
    fn deny(mut self, verb_resource: &str) -> Self {
        self.denied.insert(verb_resource.to_string());
        self
    }

    fn answer(&mut self, s: &Seen) -> (u16, Value) {
        if let Some(q) = self.first.get_mut(&s.uri) {
            if !q.is_empty() {
                return q.remove(0);
            }
        }
        if s.method == "POST" && s.uri == SAR {
            if let Some(r) = self.routes.get(SAR) {
                return r.clone();
            }
            let mut body = s.body.clone().unwrap();
            let ra = &body["spec"]["resourceAttributes"];
            let key = format!(
                "{} {}",
                ra["verb"].as_str().unwrap(),
                ra["resource"].as_str().unwrap()
            );
            // "verb resource" denies it on every object, "verb resource name" on that one.
            let named = format!("{key} {}", ra["name"].as_str().unwrap_or(""));
            let allowed = !self.denied.contains(&key) && !self.denied.contains(&named);
            body["status"] = json!({"allowed": allowed});
            return (201, body);
        }
        match self.routes.get(&s.uri) {
            Some(r) if s.method == "GET" => r.clone(),
            _ => not_found("thing", &s.uri),
        }
    }
}

async fn run(cluster: Cluster, a: &DoctorArgs) -> (Report, Vec<Seen>) {
    let state = Arc::new(Mutex::new(cluster));
    let (client, task) = serve_fn(move |s| state.lock().unwrap().answer(s));
    let report = diagnose(&client, a).await.unwrap();
    drop(client);
    (report, task.await.unwrap())
}

fn check<'a>(r: &'a Report, id: &str) -> &'a ouroboros::doctor::report::Check {
    r.checks
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id} in {r:#?}"))
}

fn golden(name: &str, actual: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/doctor");
    golden_file::check(&dir.join(name), actual);
}

const SERVICES_AUTO: &str =
    "/api/v1/services?&labelSelector=app.kubernetes.io%2Fname+in+%28ingress-nginx%2Ctraefik%29";
const NGINX_DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/ingress-nginx/deployments?";
const NGINX_DAEMONSETS: &str = "/apis/apps/v1/namespaces/ingress-nginx/daemonsets?";
const NGINX_CM: &str = "/api/v1/namespaces/ingress-nginx/configmaps/ingress-nginx-controller";
const INGRESSES: &str = "/apis/networking.k8s.io/v1/ingresses?";
const COREDNS: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
const EVENTS: &str = "/api/v1/namespaces/kube-system/events?&fieldSelector=involvedObject.kind%3DConfigMap%2CinvolvedObject.name%3Dcoredns%2Creason%3DBlockReverted";
const CUSTOM: &str = "/api/v1/namespaces/kube-system/configmaps/coredns-custom";
const COREDNS_DEPLOY: &str = "/apis/apps/v1/namespaces/kube-system/deployments/coredns";
const KUBE_DNS_DEPLOYS: &str =
    "/apis/apps/v1/namespaces/kube-system/deployments?&labelSelector=k8s-app%3Dkube-dns";
const NODE_LOCAL: &str = "/api/v1/namespaces/kube-system/configmaps/node-local-dns";
const PROXY_SVC: &str = "/api/v1/namespaces/ouroboros/services/ouroboros-proxy";
const PROXY_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/ouroboros/endpointslices?&labelSelector=kubernetes.io%2Fservice-name%3Douroboros-proxy";
const SA: &str = "/api/v1/namespaces/ouroboros/serviceaccounts/ouroboros-controller";
const CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/";

/// ingress-nginx with the PROXY protocol, two TLS Ingresses, CoreDNS holding the current block,
/// the proxy ready, the ServiceAccount allowed everything.
fn healthy() -> Cluster {
    let labels = json!({"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"});
    Cluster::default()
        .at(
            SERVICES_AUTO,
            list("ServiceList", "v1", vec![nginx_service(None)]),
        )
        .at(
            NGINX_DEPLOYMENTS,
            list(
                "DeploymentList",
                "apps/v1",
                vec![deployment(
                    "ingress-nginx",
                    "ingress-nginx-controller",
                    labels,
                    "registry.k8s.io/ingress-nginx/controller:v1.11.2",
                    vec![
                        "/nginx-ingress-controller",
                        "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller",
                    ],
                )],
            ),
        )
        .at(NGINX_DAEMONSETS, list("DaemonSetList", "apps/v1", vec![]))
        .at(
            NGINX_CM,
            configmap(
                "ingress-nginx",
                "ingress-nginx-controller",
                json!({"use-proxy-protocol": "true"}),
            ),
        )
        .at(
            INGRESSES,
            list(
                "IngressList",
                "networking.k8s.io/v1",
                vec![
                    ingress("shop", "web", &["shop.example.com"]),
                    ingress("blog", "web", &["blog.example.com", "*.blog.example.com"]),
                ],
            ),
        )
        .at(
            COREDNS,
            configmap(
                "kube-system",
                "coredns",
                json!({"Corefile": with_block(&corefile_fixture("kubeadm.Corefile"),
                    &["shop.example.com", "blog.example.com", "*.blog.example.com"], &template())}),
            ),
        )
        .at(EVENTS, list("EventList", "v1", vec![]))
        .at(
            COREDNS_DEPLOY,
            deployment(
                "kube-system",
                "coredns",
                json!({"k8s-app": "kube-dns"}),
                "registry.k8s.io/coredns/coredns:v1.11.3",
                vec!["-conf", "/etc/coredns/Corefile"],
            ),
        )
        .at(PROXY_SVC, proxy_service())
        .at(PROXY_SLICES, slices(&[("10.244.1.7", true), ("10.244.2.9", true)]))
        .at(
            SA,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("ouroboros", "ouroboros-controller")}),
        )
}

#[tokio::test]
async fn healthy_cluster_passes_with_the_exact_calls() {
    let (report, seen) = run(healthy(), &args(&[])).await;
    golden("healthy.txt", &report.to_text());
    golden("healthy.json", &report.to_json());
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    for c in &report.checks {
        assert!(
            matches!(c.status, Status::Ok | Status::Skip),
            "{}",
            report.to_text()
        );
    }
    let calls: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.uri.as_str()))
        .collect();
    let mut want = vec![
        ("GET", SERVICES_AUTO),
        ("GET", NGINX_DEPLOYMENTS),
        ("GET", NGINX_DAEMONSETS),
        ("GET", NGINX_CM),
        ("GET", INGRESSES),
        ("GET", PROXY_SVC),
        ("GET", COREDNS),
        ("GET", EVENTS),
        ("GET", CUSTOM),
        ("GET", COREDNS_DEPLOY),
        ("GET", NODE_LOCAL),
        ("GET", PROXY_SLICES),
        ("GET", SA),
    ];
    // One review per verb and resource name of the controller's rule table.
    let a = args(&[]);
    let rules = ouroboros::controller::rbac::required(&a.needs());
    let reviews = ouroboros::doctor::checks::permissions::questions(&rules).len();
    assert!(reviews >= 10, "{rules:?}");
    want.extend(std::iter::repeat_n(("POST", SAR), reviews));
    assert_eq!(calls, want);
    // One review in full: the ServiceAccount as user and groups, the namespaced, named resource.
    let review = seen
        .iter()
        .filter_map(|s| s.body.as_ref())
        .find(|b| {
            b["spec"]["resourceAttributes"]["resource"] == "configmaps"
                && b["spec"]["resourceAttributes"]["verb"] == "update"
        })
        .unwrap();
    assert_eq!(
        review,
        &json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": {
                "user": "system:serviceaccount:ouroboros:ouroboros-controller",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:ouroboros",
                           "system:authenticated"],
                "resourceAttributes": {"group": "", "resource": "configmaps", "verb": "update",
                                       "namespace": "kube-system", "name": "coredns"}
            }
        })
    );
}

/// Traefik without the PROXY protocol, a rejected hostname, a stale (rewrite) block in a Corefile
/// without `reload` that keeps being reverted, a `.server` fragment taking two hairpinned names,
/// RKE2's CoreDNS Deployment (found by label) too old for the wildcard rewrite line, node-local-dns
/// without --node-local-dns, the proxy not ready, Gateway API with TLSRoute missing, and a
/// ServiceAccount short of two permissions. Run with BROKEN_ARGS.
fn broken() -> Cluster {
    let traefik = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "traefik", "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/name": "traefik"}},
        "spec": {"type": "LoadBalancer", "selector": {"app.kubernetes.io/name": "traefik"},
                 "ports": [{"port": 443}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.5", "ipMode": "VIP"}]}}
    });
    let gw = |kind: &str| list(kind, "gateway.networking.k8s.io/v1", vec![]);
    // hairpin-proxy's line left behind, taking one of the hairpinned names.
    let base = corefile_fixture("no-reload.Corefile").replacen(
        "    errors\n",
        "    errors\n    rewrite name shop.example.com hairpin-proxy.hairpin-proxy.svc.cluster.local\n",
        1,
    );
    Cluster::default()
        .at(SERVICES_AUTO, list("ServiceList", "v1", vec![traefik]))
        .at(
            "/apis/apps/v1/namespaces/kube-system/deployments?",
            list(
                "DeploymentList",
                "apps/v1",
                vec![deployment(
                    "kube-system",
                    "traefik",
                    json!({"app.kubernetes.io/name": "traefik"}),
                    "rancher/mirrored-library-traefik:3.1.2",
                    vec!["--entryPoints.websecure.address=:8443/tcp", "--providers.kubernetesingress"],
                )],
            ),
        )
        .at(
            "/apis/apps/v1/namespaces/kube-system/daemonsets?",
            list("DaemonSetList", "apps/v1", vec![]),
        )
        .at(
            INGRESSES,
            list(
                "IngressList",
                "networking.k8s.io/v1",
                vec![ingress("shop", "web", &["shop.example.com", "*.shop.example.com", "shop_admin.example.com"])],
            ),
        )
        .at("/apis/gateway.networking.k8s.io/v1/gateways?", gw("GatewayList"))
        .at("/apis/gateway.networking.k8s.io/v1/httproutes?", gw("HTTPRouteList"))
        .at("/apis/gateway.networking.k8s.io/v1/grpcroutes?", gw("GRPCRouteList"))
        .at(
            COREDNS,
            configmap(
                "kube-system",
                "coredns",
                json!({"Corefile": with_block(&base, &["old.example.com"], &rewrite())}),
            ),
        )
        .at(
            EVENTS,
            list(
                "EventList",
                "v1",
                vec![event("BlockReverted", 6, "our block was removed by another writer; restored it")],
            ),
        )
        .at(
            CUSTOM,
            configmap(
                "kube-system",
                "coredns-custom",
                json!({"shop.server": "shop.example.com:53 {\n    forward . 10.0.0.53\n}\n"}),
            ),
        )
        .at(
            KUBE_DNS_DEPLOYS,
            list(
                "DeploymentList",
                "apps/v1",
                vec![deployment(
                    "kube-system",
                    "rke2-coredns-rke2-coredns",
                    json!({"k8s-app": "kube-dns"}),
                    "rancher/hardened-coredns:v1.8.3-build20210223",
                    vec!["-conf", "/etc/coredns/Corefile"],
                )],
            ),
        )
        .at(NODE_LOCAL, configmap("kube-system", "node-local-dns", json!({"Corefile": "cluster.local:53 {}"})))
        .at(PROXY_SVC, proxy_service())
        .at(PROXY_SLICES, slices(&[("10.244.1.7", false)]))
        .at(
            SA,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("ouroboros", "ouroboros-controller")}),
        )
        .at(
            "/apis/gateway.networking.k8s.io/v1",
            served("gateway.networking.k8s.io/v1", &["gateways", "httproutes", "grpcroutes"]),
        )
        .deny("watch configmaps")
        .deny("create leases")
}

/// Traefik's, Contour's and Istio's kinds: listed with their flags, their names counted and
/// their unread rules reported by the hostnames check; the crds check names a CRD that is
/// missing (Istio's here, whose list is a 404 too), and the rbac check asks for list and watch
/// on each kind.
#[tokio::test]
async fn crd_source_kinds_are_listed_and_their_crds_checked() {
    let route = json!({
        "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
        "metadata": {"name": "app", "namespace": "web"},
        "spec": {"routes": [{"match": "Host(`app.example.com`) || HostRegexp(`^x`)", "kind": "Rule"}]}
    });
    let proxy = json!({
        "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "docs", "namespace": "web"},
        "spec": {"virtualhost": {"fqdn": "docs.example.com"}}
    });
    let cluster = healthy()
        .at(
            "/apis/traefik.io/v1alpha1/ingressroutes?",
            list("IngressRouteList", "traefik.io/v1alpha1", vec![route]),
        )
        .at(
            "/apis/traefik.io/v1alpha1/ingressroutetcps?",
            list("IngressRouteTCPList", "traefik.io/v1alpha1", vec![]),
        )
        .at(
            "/apis/projectcontour.io/v1/httpproxies?",
            list("HTTPProxyList", "projectcontour.io/v1", vec![proxy]),
        )
        .at(
            "/apis/traefik.io/v1alpha1",
            served(
                "traefik.io/v1alpha1",
                &["ingressroutes", "ingressroutetcps"],
            ),
        )
        .at(
            "/apis/projectcontour.io/v1",
            served("projectcontour.io/v1", &["httpproxies"]),
        );
    let flags = [
        "--traefik-ingressroutes",
        "--contour-httpproxies",
        "--istio-gateways",
    ];
    let (report, seen) = run(cluster, &args(&flags)).await;
    let hostnames = check(&report, "hostnames");
    assert!(hostnames.summary.contains("5 hostname"), "{hostnames:#?}");
    assert!(
        hostnames
            .evidence
            .iter()
            .any(|e| e.contains("IngressRoute web/app")
                && e.contains("HostRegexp(`^x`)")
                && e.contains("pattern")),
        "{hostnames:#?}"
    );
    let crds = check(&report, "crds");
    assert_eq!(crds.status, Status::Warn, "{crds:#?}");
    assert!(
        crds.summary.contains("gateways.networking.istio.io"),
        "{crds:#?}"
    );
    assert!(!crds.summary.contains("traefik"), "{crds:#?}");
    for path in [
        "/apis/traefik.io/v1alpha1/ingressroutes?",
        "/apis/projectcontour.io/v1/httpproxies?",
        "/apis/networking.istio.io/v1/gateways?",
    ] {
        assert!(seen.iter().any(|s| s.uri == path), "{path} not listed");
    }
    let asked: Vec<String> = seen
        .iter()
        .filter(|s| s.uri == SAR)
        .map(|s| {
            let ra = &s.body.as_ref().unwrap()["spec"]["resourceAttributes"];
            format!("{} {} {}", ra["verb"], ra["group"], ra["resource"])
        })
        .collect();
    for (group, resource) in [
        ("traefik.io", "ingressroutes"),
        ("traefik.io", "ingressroutetcps"),
        ("projectcontour.io", "httpproxies"),
        ("networking.istio.io", "gateways"),
    ] {
        for verb in ["list", "watch"] {
            let want = format!("\"{verb}\" \"{group}\" \"{resource}\"");
            assert!(asked.contains(&want), "{want} not asked: {asked:#?}");
        }
    }
}

/// A cluster serving Istio's Gateway at v1beta1 only (Istio 1.20) and Traefik's kinds in
/// `traefik.containo.us` only (Traefik 2 before 2.10): the crds check finds each where it is
/// served and says so, the hostnames check lists them there (never at the places not served),
/// and the rbac check asks for both Traefik groups.
#[tokio::test]
async fn crd_source_kinds_are_found_and_listed_at_their_older_places() {
    let route = json!({
        "apiVersion": "traefik.containo.us/v1alpha1", "kind": "IngressRoute",
        "metadata": {"name": "app", "namespace": "web"},
        "spec": {"routes": [{"match": "Host(`app.example.com`)", "kind": "Rule"}]}
    });
    let gateway = json!({
        "apiVersion": "networking.istio.io/v1beta1", "kind": "Gateway",
        "metadata": {"name": "public", "namespace": "istio-system"},
        "spec": {"servers": [{"hosts": ["web/mesh.example.com"]}]}
    });
    let cluster = healthy()
        .at(
            "/apis/traefik.containo.us/v1alpha1",
            served(
                "traefik.containo.us/v1alpha1",
                &["ingressroutes", "ingressroutetcps"],
            ),
        )
        .at(
            "/apis/networking.istio.io/v1beta1",
            served("networking.istio.io/v1beta1", &["gateways"]),
        )
        .at(
            "/apis/networking.istio.io/v1",
            served("networking.istio.io/v1", &["virtualservices"]),
        )
        .at(
            "/apis/traefik.containo.us/v1alpha1/ingressroutes?",
            list(
                "IngressRouteList",
                "traefik.containo.us/v1alpha1",
                vec![route],
            ),
        )
        .at(
            "/apis/traefik.containo.us/v1alpha1/ingressroutetcps?",
            list(
                "IngressRouteTCPList",
                "traefik.containo.us/v1alpha1",
                vec![],
            ),
        )
        .at(
            "/apis/networking.istio.io/v1beta1/gateways?",
            list("GatewayList", "networking.istio.io/v1beta1", vec![gateway]),
        );
    let flags = ["--traefik-ingressroutes", "--istio-gateways"];
    let (report, seen) = run(cluster, &args(&flags)).await;
    let crds = check(&report, "crds");
    assert_eq!(crds.status, Status::Ok, "{crds:#?}");
    assert_eq!(
        crds.evidence,
        [
            "ingressroutes.traefik.io: served at traefik.containo.us/v1alpha1 (not at \
             traefik.io/v1alpha1), read there",
            "ingressroutetcps.traefik.io: served at traefik.containo.us/v1alpha1 (not at \
             traefik.io/v1alpha1), read there",
            "gateways.networking.istio.io: served at networking.istio.io/v1beta1 (not at \
             networking.istio.io/v1), read there",
        ]
    );
    let hostnames = check(&report, "hostnames");
    // The healthy cluster's three, and one each from the IngressRoute and the Gateway.
    assert_eq!(
        hostnames.summary, "5 hostname(s) to hairpin from 4 object(s)",
        "{hostnames:#?}"
    );
    for path in [
        "/apis/traefik.io/v1alpha1/ingressroutes?",
        "/apis/networking.istio.io/v1/gateways?",
    ] {
        assert!(!seen.iter().any(|s| s.uri == path), "{path} listed");
    }
    let asked: Vec<String> = seen
        .iter()
        .filter(|s| s.uri == SAR)
        .map(|s| {
            let ra = &s.body.as_ref().unwrap()["spec"]["resourceAttributes"];
            format!("{} {} {}", ra["verb"], ra["group"], ra["resource"])
        })
        .collect();
    for group in ["traefik.io", "traefik.containo.us"] {
        for resource in ["ingressroutes", "ingressroutetcps"] {
            let want = format!("\"list\" \"{group}\" \"{resource}\"");
            assert!(asked.contains(&want), "{want} not asked: {asked:#?}");
        }
    }
}

const BROKEN_ARGS: &[&str] = &["--gateway-api", "--coredns-answer", "rewrite"];

#[tokio::test]
async fn broken_cluster_reports_each_problem() {
    let (report, seen) = run(broken(), &args(BROKEN_ARGS)).await;
    golden("broken.txt", &report.to_text());
    golden("broken.json", &report.to_json());
    assert_eq!(report.exit_code(), 1);
    let want = [
        ("ingress-controller", Status::Ok),
        ("kep-1860-ipmode", Status::Ok),
        ("proxy-protocol", Status::Warn),
        ("answer", Status::Ok),
        ("hostnames", Status::Warn),
        ("coredns-configmap", Status::Ok),
        ("coredns-corefile", Status::Ok),
        ("coredns-reload", Status::Warn),
        ("coredns-import", Status::Ok),
        ("coredns-block", Status::Fail),
        ("coredns-reverted", Status::Warn),
        ("coredns-shadowing", Status::Warn),
        ("coredns-rewrites", Status::Warn),
        ("coredns-version", Status::Fail),
        ("coredns-reload-memory", Status::Skip),
        ("node-local-dns", Status::Warn),
        ("proxy-service", Status::Ok),
        ("proxy-endpoints", Status::Fail),
        ("proxy-answers", Status::Skip),
        ("crds", Status::Warn),
        ("controller-service-account", Status::Ok),
        ("rbac", Status::Fail),
    ];
    let got: Vec<(&str, Status)> = report.checks.iter().map(|c| (c.id, c.status)).collect();
    assert_eq!(got, want, "{}", report.to_text());
    let rbac = check(&report, "rbac");
    assert_eq!(
        rbac.evidence,
        [
            "may not watch configmaps \"coredns\" in namespace kube-system (for: edit the \
             Corefile and restore it when reverted)",
            "may not create leases.coordination.k8s.io in namespace ouroboros (for: leader \
             election (first start))",
        ]
    );
    let rejected = check(&report, "hostnames");
    assert!(
        rejected.evidence[0].starts_with("Ingress shop/web: \"shop_admin.example.com\" rejected"),
        "{rejected:?}"
    );
    assert!(check(&report, "coredns-reverted")
        .summary
        .contains("6 time(s)"));
    // The shadowing `.server` fragment and the CoreDNS Deployment found by its label.
    assert_eq!(
        check(&report, "coredns-shadowing").evidence,
        [
            "*.shop.example.com: server block 'shop.example.com:53' in ConfigMap \
             kube-system/coredns-custom key \"shop.server\" (line 1)",
            "shop.example.com: server block 'shop.example.com:53' in ConfigMap \
             kube-system/coredns-custom key \"shop.server\" (line 1)",
        ]
    );
    assert_eq!(
        check(&report, "coredns-rewrites").evidence,
        ["shop.example.com: rewrite name shop.example.com \
          hairpin-proxy.hairpin-proxy.svc.cluster.local (line 3)"]
    );
    let v = check(&report, "coredns-version");
    assert_eq!(
        v.evidence[0],
        "Deployment kube-system/rke2-coredns-rke2-coredns: image \
         rancher/hardened-coredns:v1.8.3-build20210223"
    );
    assert!(
        v.action
            .as_deref()
            .unwrap()
            .starts_with("use --coredns-answer template (what auto picks before CoreDNS 1.10)"),
        "{v:?}"
    );
    let uris: Vec<&str> = seen.iter().map(|s| s.uri.as_str()).collect();
    let at = |u: &str| uris.iter().position(|x| *x == u).unwrap();
    assert!(at(EVENTS) < at(CUSTOM) && at(CUSTOM) < at(COREDNS_DEPLOY));
    assert_eq!(at(COREDNS_DEPLOY) + 1, at(KUBE_DNS_DEPLOYS));
    assert_eq!(at(KUBE_DNS_DEPLOYS) + 1, at(NODE_LOCAL));
    assert!(check(&report, "node-local-dns")
        .action
        .as_deref()
        .unwrap()
        .starts_with(
        "use --coredns-answer template or auto (node-local-dns needs the template pair, which both \
         write there) and turn on --node-local-dns"
    ));
}

#[tokio::test]
async fn ipmode_proxy_says_ouroboros_may_be_unnecessary() {
    let c = healthy().at(
        SERVICES_AUTO,
        list("ServiceList", "v1", vec![nginx_service(Some("Proxy"))]),
    );
    let (report, _) = run(c, &args(&[])).await;
    let k = check(&report, "kep-1860-ipmode");
    assert_eq!(k.status, Status::Warn);
    assert!(k.summary.contains("may be unnecessary"), "{k:?}");
    assert_eq!(k.evidence, ["203.0.113.10: ipMode Proxy"]);
    assert_eq!(report.exit_code(), 0);
}

#[tokio::test]
async fn ingress_controller_flag_and_not_found() {
    let svc = "/api/v1/namespaces/edge/services/my-lb";
    // Found: its namespace's workloads are read; not an ingress-nginx/Traefik one: SKIP.
    let c = healthy().at(
        svc,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("edge", "my-lb"),
               "spec": {"type": "NodePort", "selector": {"app": "lb"}}}),
    );
    let (report, seen) = run(c, &args(&["--ingress-controller-service", "edge/my-lb"])).await;
    assert_eq!(seen[0].uri, svc);
    assert_eq!(seen[1].uri, "/apis/apps/v1/namespaces/edge/deployments?");
    assert_eq!(check(&report, "ingress-controller").status, Status::Ok);
    assert_eq!(check(&report, "kep-1860-ipmode").status, Status::Skip);
    assert_eq!(check(&report, "proxy-protocol").status, Status::Skip);
    // Not found: FAIL, and nothing else is read for it.
    let (report, seen) = run(
        healthy(),
        &args(&["--ingress-controller-service", "edge/my-lb"]),
    )
    .await;
    assert_eq!(check(&report, "ingress-controller").status, Status::Fail);
    assert_eq!(seen[1].uri, INGRESSES);
    assert_eq!(report.exit_code(), 1);
    // Auto-detection finding nothing: WARN.
    let c = healthy().at(SERVICES_AUTO, list("ServiceList", "v1", vec![]));
    let (report, _) = run(c, &args(&[])).await;
    assert_eq!(check(&report, "ingress-controller").status, Status::Warn);
}

#[tokio::test]
async fn ingress_nginx_without_proxy_protocol_warns() {
    let c = healthy().at(
        NGINX_CM,
        configmap(
            "ingress-nginx",
            "ingress-nginx-controller",
            json!({"use-proxy-protocol": "false"}),
        ),
    );
    let (report, _) = run(c, &args(&[])).await;
    let p = check(&report, "proxy-protocol");
    assert_eq!(p.status, Status::Warn);
    assert_eq!(
        p.evidence,
        ["ConfigMap ingress-nginx/ingress-nginx-controller: use-proxy-protocol=\"false\""]
    );
}

#[tokio::test]
async fn forbidden_reads_fail_with_the_permission_doctor_lacks() {
    let c = healthy().fail(INGRESSES, 403, "Forbidden");
    let (report, seen) = run(c, &args(&[])).await;
    let h = check(&report, "hostnames");
    assert_eq!(h.status, Status::Fail);
    assert_eq!(
        h.evidence,
        ["list ingresses.networking.k8s.io (cluster-wide): HTTP 403: denied by the test"]
    );
    assert!(
        h.action
            .as_deref()
            .unwrap()
            .contains("may not list ingresses.networking.k8s.io"),
        "{h:?}"
    );
    // Without the desired hostnames the block is not judged, nor what depends on it, which is
    // not read either.
    assert_eq!(check(&report, "coredns-block").status, Status::Skip);
    assert_eq!(check(&report, "coredns-shadowing").status, Status::Skip);
    assert_eq!(check(&report, "coredns-version").status, Status::Skip);
    assert!(seen
        .iter()
        .all(|s| s.uri != CUSTOM && s.uri != COREDNS_DEPLOY));
    assert_eq!(report.exit_code(), 1);
}

#[tokio::test]
async fn server_errors_are_retried() {
    let mut c = healthy();
    c.first.insert(
        COREDNS.to_string(),
        vec![(500, status(500, "InternalError", "etcd timeout"))],
    );
    let (report, seen) = run(c, &args(&[])).await;
    assert_eq!(seen.iter().filter(|s| s.uri == COREDNS).count(), 2);
    assert_eq!(check(&report, "coredns-block").status, Status::Ok);
}

#[tokio::test]
async fn stale_and_missing_blocks_fail() {
    let stale = healthy().at(
        COREDNS,
        configmap(
            "kube-system",
            "coredns",
            json!({"Corefile": with_block(&corefile_fixture("kubeadm.Corefile"), &["shop.example.com"], &template())}),
        ),
    );
    let (report, _) = run(stale, &args(&[])).await;
    let b = check(&report, "coredns-block");
    assert_eq!(b.status, Status::Fail);
    assert_eq!(b.summary, "our block is stale");
    assert_eq!(b.evidence.len(), 2, "{b:?}"); // blog.example.com and its wildcard
    let missing = healthy().at(
        COREDNS,
        configmap(
            "kube-system",
            "coredns",
            json!({"Corefile": corefile_fixture("kubeadm.Corefile")}),
        ),
    );
    let (report, _) = run(missing, &args(&[])).await;
    assert_eq!(
        check(&report, "coredns-block").summary,
        "our block is missing (3 hostname(s) to hairpin)"
    );
    let gone = healthy();
    let mut gone = gone;
    gone.routes.remove(COREDNS);
    let (report, _) = run(gone, &args(&[])).await;
    assert_eq!(check(&report, "coredns-configmap").status, Status::Fail);
}

#[tokio::test]
async fn coredns_import_mode_reads_the_snippet() {
    use ouroboros::dns::coredns_import;
    let snippet = coredns_import::render(
        &hosts(&["shop.example.com", "blog.example.com", "*.blog.example.com"]),
        &template(),
    );
    let importing = corefile_fixture("kubeadm.Corefile").replace(
        "reload\n",
        "reload\n    import /etc/coredns/custom/*.override\n",
    );
    let c = healthy()
        .at(
            COREDNS,
            configmap("kube-system", "coredns", json!({"Corefile": importing})),
        )
        .at(
            CUSTOM,
            configmap(
                "kube-system",
                "coredns-custom",
                json!({"ouroboros.override": snippet}),
            ),
        );
    let a = args(&["--mode", "coredns-import"]);
    let (report, seen) = run(c.clone(), &a).await;
    assert_eq!(check(&report, "coredns-import").status, Status::Ok);
    assert_eq!(check(&report, "coredns-import-snippet").status, Status::Ok);
    assert!(
        seen.iter().all(|s| s.uri != EVENTS),
        "no revert Events in import mode"
    );
    assert!(report.checks.iter().all(|c| c.id != "coredns-reverted"));
    // The import ConfigMap is read once, for the snippet and the `.server` fragments.
    assert_eq!(seen.iter().filter(|s| s.uri == CUSTOM).count(), 1);
    assert_eq!(check(&report, "coredns-shadowing").status, Status::Ok);
    assert_eq!(check(&report, "coredns-version").status, Status::Ok);
    // The Corefile without the import: the snippet is never loaded.
    let c = c.at(
        COREDNS,
        configmap(
            "kube-system",
            "coredns",
            json!({"Corefile": corefile_fixture("kubeadm.Corefile")}),
        ),
    );
    let (report, _) = run(c, &a).await;
    assert_eq!(check(&report, "coredns-import").status, Status::Fail);
}

#[tokio::test]
async fn external_dns_mode_needs_the_crd_and_its_rules() {
    let a = args(&["--mode", "external-dns"]);
    let (report, seen) = run(healthy(), &a).await;
    assert_eq!(check(&report, "coredns").status, Status::Skip);
    let crds = check(&report, "crds");
    assert_eq!(crds.status, Status::Fail);
    assert_eq!(
        crds.evidence,
        ["dnsendpoints.externaldns.k8s.io: not installed"]
    );
    assert!(seen
        .iter()
        .any(|s| s.uri == format!("{CRD}dnsendpoints.externaldns.k8s.io")));
    assert!(seen
        .iter()
        .all(|s| s.uri != COREDNS && s.uri != CUSTOM && s.uri != COREDNS_DEPLOY));
    assert!(report.checks.iter().all(|c| !c.id.starts_with("coredns-")));
    // The rules asked about include DNSEndpoint writes and reading the proxy Service.
    let asked: BTreeSet<String> = seen
        .iter()
        .filter_map(|s| s.body.as_ref())
        .map(|b| {
            let r = &b["spec"]["resourceAttributes"];
            format!(
                "{} {}",
                r["verb"].as_str().unwrap(),
                r["resource"].as_str().unwrap()
            )
        })
        .collect();
    assert!(asked.contains("delete dnsendpoints"), "{asked:?}");
    assert!(asked.contains("get services"), "{asked:?}");
    assert!(!asked.contains("update configmaps"), "{asked:?}");
}

#[tokio::test]
async fn forbidden_reviews_stop_after_the_first() {
    let c = healthy().fail(SAR, 403, "Forbidden");
    let (report, seen) = run(c, &args(&[])).await;
    assert_eq!(seen.iter().filter(|s| s.uri == SAR).count(), 1);
    let r = check(&report, "rbac");
    assert_eq!(r.status, Status::Fail);
    assert!(
        r.action
            .as_deref()
            .unwrap()
            .contains("may not create subjectaccessreviews.authorization.k8s.io"),
        "{r:?}"
    );
}

#[tokio::test]
async fn missing_service_account_and_proxy_fail() {
    let mut c = healthy();
    c.routes.remove(SA);
    c.routes.remove(PROXY_SVC);
    let (report, seen) = run(
        c,
        &args(&[
            "--controller-service-account",
            "ouroboros/ouroboros-controller",
        ]),
    )
    .await;
    assert_eq!(
        check(&report, "controller-service-account").status,
        Status::Fail
    );
    assert_eq!(check(&report, "proxy-service").status, Status::Fail);
    assert_eq!(check(&report, "proxy-endpoints").status, Status::Skip);
    assert!(seen.iter().all(|s| s.uri != PROXY_SLICES));
    // Our block is still in the Corefile: orphaned, with the one command that removes it.
    let orphan = check(&report, "orphaned-block");
    assert_eq!(orphan.status, Status::Fail);
    assert!(
        orphan.action.as_deref().unwrap().contains(
            "ouroboros cleanup --mode coredns --coredns-namespace kube-system \
             --coredns-configmap coredns --coredns-key Corefile"
        ),
        "{orphan:?}"
    );
}

#[tokio::test]
async fn no_orphaned_block_while_the_proxy_service_exists() {
    let (report, _) = run(healthy(), &args(&[])).await;
    assert!(
        report.checks.iter().all(|c| c.id != "orphaned-block"),
        "{report:#?}"
    );
}

#[tokio::test]
async fn dials_the_proxy_service() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap().port();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let svc = |ports: &[u16]| {
        let ports: Vec<Value> = ports.iter().map(|p| json!({"port": p})).collect();
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("ouroboros", "ouroboros-proxy"),
               "spec": {"clusterIP": "127.0.0.1", "clusterIPs": ["127.0.0.1"], "ports": ports}})
    };
    let a = args(&["--dial", "always", "--dial-timeout", "2s"]);
    let (report, _) = run(healthy().at(PROXY_SVC, svc(&[open])), &a).await;
    let d = check(&report, "proxy-answers");
    assert_eq!(d.status, Status::Ok, "{d:?}");
    assert!(d.evidence[0].starts_with(&format!("127.0.0.1:{open}: connected in ")));
    let (report, _) = run(healthy().at(PROXY_SVC, svc(&[open, closed])), &a).await;
    let d = check(&report, "proxy-answers");
    assert_eq!(d.status, Status::Fail, "{d:?}");
    assert!(
        d.evidence[1].starts_with(&format!("127.0.0.1:{closed}: ")),
        "{d:?}"
    );
    drop(listener);
}

#[tokio::test]
async fn unreachable_api_server_is_an_error_not_a_report() {
    let client = kube_mock::unreachable();
    let err = diagnose(&client, &args(&[])).await.unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with(
            "the API server is unreachable; check the address and the network path to it \
             (list services (cluster-wide): "
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn traefik_with_proxy_protocol_class_filter_and_unparseable_corefile() {
    let traefik = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "traefik", "namespace": "traefik",
                     "labels": {"app.kubernetes.io/name": "traefik"}},
        "spec": {"type": "LoadBalancer", "selector": {"app.kubernetes.io/name": "traefik"}},
        "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}}
    });
    let daemonset = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("traefik", "traefik"),
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "traefik"}},
                 "template": {"metadata": {"labels": {"app.kubernetes.io/name": "traefik", "pod-template-hash": "x"}},
                              "spec": {"containers": [{"name": "traefik", "image": "traefik:v3.1",
                                  "args": ["--entryPoints.websecure.proxyProtocol.trustedIPs=10.42.0.0/16"]}]}}}
    });
    let class = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "nginx", "uid": "u1",
                     "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "k8s.io/ingress-nginx"}
    });
    let c = healthy()
        .at(SERVICES_AUTO, list("ServiceList", "v1", vec![traefik]))
        .at(
            "/apis/apps/v1/namespaces/traefik/deployments?",
            list("DeploymentList", "apps/v1", vec![]),
        )
        .at(
            "/apis/apps/v1/namespaces/traefik/daemonsets?",
            list("DaemonSetList", "apps/v1", vec![daemonset]),
        )
        .at(
            "/apis/networking.k8s.io/v1/ingressclasses?",
            list("IngressClassList", "networking.k8s.io/v1", vec![class]),
        )
        .at(
            COREDNS,
            configmap(
                "kube-system",
                "coredns",
                json!({"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n"}),
            ),
        );
    let (report, seen) = run(c, &args(&["--ingress-class", "traefik"])).await;
    assert!(seen
        .iter()
        .any(|s| s.uri == "/apis/networking.k8s.io/v1/ingressclasses?"));
    let p = check(&report, "proxy-protocol");
    assert_eq!(p.status, Status::Ok, "{p:?}");
    assert_eq!(
        p.evidence,
        [
            "DaemonSet traefik/traefik",
            "entrypoint websecure: proxyProtocol.trustedips=10.42.0.0/16"
        ]
    );
    assert_eq!(
        check(&report, "kep-1860-ipmode").evidence,
        ["lb.example.net: ipMode unset (VIP)"]
    );
    // Both Ingresses are class nginx, filtered out under --ingress-class traefik.
    let h = check(&report, "hostnames");
    assert_eq!(h.summary, "0 hostname(s) to hairpin from 0 object(s)");
    assert_eq!(h.evidence.len(), 2, "{h:?}");
    let cf = check(&report, "coredns-corefile");
    assert_eq!(cf.status, Status::Fail);
    assert!(cf.evidence[0].starts_with("line "), "{cf:?}");
    assert!(report.checks.iter().all(|c| c.id != "coredns-block"));
}

/// node-local-dns's Corefile as its upstream manifest has it (trimmed): zone blocks for the
/// cluster domain and reverse lookups, and a `.:53` block forwarding upstream.
const NODE_LOCAL_COREFILE: &str = "cluster.local:53 {\n    errors\n    cache 30\n    reload\n    bind 169.254.20.10 10.96.0.10\n    forward . 10.96.0.11 {\n        force_tcp\n    }\n}\nin-addr.arpa:53 {\n    errors\n    bind 169.254.20.10 10.96.0.10\n    forward . 10.96.0.11\n}\n.:53 {\n    errors\n    cache 30\n    reload\n    bind 169.254.20.10 10.96.0.10\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n";

#[tokio::test]
async fn node_local_dns_holds_the_same_block_when_opted_in() {
    let a = args(&["--node-local-dns"]);
    // Missing: the controller cannot write it.
    let (report, seen) = run(healthy(), &a).await;
    let n = check(&report, "node-local-dns");
    assert_eq!(n.status, Status::Fail, "{n:?}");
    assert!(
        n.action.as_deref().unwrap().contains("`nodelocaldns`"),
        "{n:?}"
    );
    assert!(seen.iter().any(|s| s.uri == NODE_LOCAL));
    assert_eq!(report.exit_code(), 1);
    let all = ["shop.example.com", "blog.example.com", "*.blog.example.com"];
    let node_local = |text: String| {
        healthy().at(
            NODE_LOCAL,
            configmap("kube-system", "node-local-dns", json!({ "Corefile": text })),
        )
    };
    // Current: the same block as CoreDNS's, in its `.:53` block.
    let current = with_block(NODE_LOCAL_COREFILE, &all, &template());
    assert!(current.find("template IN A") > current.find(".:53 {"));
    let (report, _) = run(node_local(current), &a).await;
    let n = check(&report, "node-local-dns");
    assert_eq!(
        (n.status, n.summary.as_str()),
        (
            Status::Ok,
            "our block in ConfigMap kube-system/node-local-dns is present and current (3 \
             hostname(s))"
        )
    );
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    // Stale and missing.
    let stale = with_block(NODE_LOCAL_COREFILE, &["shop.example.com"], &template());
    let (report, _) = run(node_local(stale), &a).await;
    let n = check(&report, "node-local-dns");
    assert_eq!(
        (n.status, n.summary.as_str()),
        (
            Status::Fail,
            "our block in ConfigMap kube-system/node-local-dns is stale"
        )
    );
    assert_eq!(n.evidence.len(), 2, "{n:?}");
    let (report, _) = run(node_local(NODE_LOCAL_COREFILE.to_string()), &a).await;
    assert_eq!(
        check(&report, "node-local-dns").summary,
        "our block in ConfigMap kube-system/node-local-dns is missing (3 hostname(s) to hairpin)"
    );
    // Off: installed node-local-dns bypasses the block, and the option is named.
    let (report, _) = run(node_local(NODE_LOCAL_COREFILE.to_string()), &args(&[])).await;
    let n = check(&report, "node-local-dns");
    assert_eq!(n.status, Status::Warn);
    assert!(
        n.action
            .as_deref()
            .unwrap()
            .starts_with("turn on --node-local-dns (chart: controller.nodeLocalDns.enabled)"),
        "{n:?}"
    );
}

/// `--coredns-answer auto`: doctor reads the Deployment `coredns` first, judges the block in
/// the form the controller picks from its image tag (view on 1.11.3, the pair on 1.9.4) and
/// says the pick in the coredns-version check.
#[tokio::test]
async fn auto_answers_are_judged_in_the_picked_form() {
    let hosts = ["shop.example.com", "blog.example.com", "*.blog.example.com"];
    let view = Answer::View(ProxyAddrs::new(&["10.96.0.20".parse().unwrap()]).unwrap());
    let corefile = |answer: &Answer| {
        configmap(
            "kube-system",
            "coredns",
            json!({"Corefile": with_block(&corefile_fixture("kubeadm.Corefile"), &hosts, answer)}),
        )
    };
    let image = |img: &str| {
        deployment(
            "kube-system",
            "coredns",
            json!({"k8s-app": "kube-dns"}),
            img,
            vec![],
        )
    };
    let auto = args(&["--coredns-answer", "auto"]);
    for (img, block, want, form) in [
        (
            "registry.k8s.io/coredns/coredns:v1.11.3",
            &view,
            Status::Ok,
            "answer form view: --coredns-answer auto: CoreDNS 1.11.3",
        ),
        (
            "registry.k8s.io/coredns/coredns:v1.11.3",
            &template(),
            Status::Fail,
            "answer form view",
        ),
        (
            "mcr.microsoft.com/oss/kubernetes/coredns:v1.9.4-hotfix.20240704",
            &template(),
            Status::Ok,
            "answer form template: --coredns-answer auto: CoreDNS 1.9.4",
        ),
        (
            "registry.k8s.io/coredns/coredns@sha256:0123abcd",
            &template(),
            Status::Ok,
            "answer form template: --coredns-answer auto does not know",
        ),
    ] {
        let cluster = healthy()
            .at(COREDNS, corefile(block))
            .at(COREDNS_DEPLOY, image(img));
        let (report, seen) = run(cluster, &auto).await;
        let b = check(&report, "coredns-block");
        assert_eq!(b.status, want, "{img}: {b:?}");
        let v = check(&report, "coredns-version");
        assert!(
            v.evidence.iter().any(|e| e.starts_with(form)),
            "{img}: {v:?}"
        );
        let reads = seen
            .iter()
            .filter(|s| s.uri.starts_with(COREDNS_DEPLOY))
            .count();
        assert_eq!(reads, 1, "{img}: the Deployment is read once");
    }
}

#[tokio::test]
async fn coredns_version_comes_from_the_deployment_image() {
    let image = |img: &str| {
        deployment(
            "kube-system",
            "coredns",
            json!({"k8s-app": "kube-dns"}),
            img,
            vec![],
        )
    };
    let v = |r: &Report| check(r, "coredns-version").clone();
    let (report, _) = run(healthy(), &args(&[])).await;
    assert_eq!(
        v(&report).summary,
        "CoreDNS 1.11.3 parses our template block (needs 1.7.0 or later)"
    );
    // Too old for a wildcard rewrite line (the Corefile's template block is stale for rewrite,
    // which coredns-block reports; here only the version matters).
    let old = healthy().at(COREDNS_DEPLOY, image("registry.k8s.io/coredns:1.8.3"));
    let (report, _) = run(old.clone(), &args(&["--coredns-answer", "rewrite"])).await;
    assert_eq!(v(&report).status, Status::Fail, "{:?}", v(&report));
    let (report, _) = run(old, &args(&[])).await;
    assert_eq!(v(&report).status, Status::Ok);
    // An unparseable tag, a forbidden read, no Deployment at all: WARN, with how to check.
    let digest = healthy().at(
        COREDNS_DEPLOY,
        image("registry.k8s.io/coredns/coredns@sha256:0123abcd"),
    );
    let (report, _) = run(digest, &args(&[])).await;
    assert_eq!(v(&report).status, Status::Warn);
    assert!(v(&report).action.unwrap().contains("logs deploy/coredns"));
    let (report, _) = run(healthy().fail(COREDNS_DEPLOY, 403, "Forbidden"), &args(&[])).await;
    let c = v(&report);
    assert_eq!(c.status, Status::Warn);
    assert_eq!(
        c.evidence[0],
        "get deployments.apps \"coredns\" in namespace kube-system: HTTP 403: denied by the test"
    );
    assert!(
        c.action.as_deref().unwrap().starts_with(
            "check the version by hand: kubectl -n kube-system get deploy coredns -o \
             jsonpath='{.spec.template.spec.containers[*].image}'"
        ),
        "{c:?}"
    );
    assert_eq!(report.exit_code(), 0);
    let mut gone = healthy();
    gone.routes.remove(COREDNS_DEPLOY);
    let (report, seen) = run(gone, &args(&[])).await;
    assert_eq!(v(&report).status, Status::Warn);
    assert!(seen.iter().any(|s| s.uri == KUBE_DNS_DEPLOYS));
}

#[tokio::test]
async fn server_blocks_for_more_specific_zones_shadow_hosts() {
    let all = ["shop.example.com", "blog.example.com", "*.blog.example.com"];
    let corefile = format!(
        "blog.example.com:53 {{\n    forward . 10.0.0.53\n}}\n{}",
        with_block(&corefile_fixture("kubeadm.Corefile"), &all, &template())
    );
    let c = healthy().at(
        COREDNS,
        configmap("kube-system", "coredns", json!({ "Corefile": corefile })),
    );
    let (report, _) = run(c, &args(&[])).await;
    let s = check(&report, "coredns-shadowing");
    assert_eq!(s.status, Status::Warn, "{s:?}");
    assert_eq!(
        s.evidence,
        [
            "*.blog.example.com: server block 'blog.example.com:53' (line 1)",
            "blog.example.com: server block 'blog.example.com:53' (line 1)",
        ]
    );
    assert_eq!(
        s.action.as_deref(),
        Some(
            "add the same ouroboros template block to that server block (copy the lines between \
             the markers, without the marker lines, which the controller would move into the \
             root block), or remove the block"
        )
    );
    assert_eq!(check(&report, "coredns-block").status, Status::Ok);
    assert_eq!(report.exit_code(), 0);
}

/// With --target, the block is judged against every target's rules: each named target's names
/// answered with its own proxy Service's ClusterIPs (read from the API), as the controller
/// writes them; a block with one answer for all is stale.
#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[tokio::test]
async fn several_targets_are_judged_with_each_proxys_answer() {
    const NEWS_PROXY: &str = "/api/v1/namespaces/ouroboros/services/proxy-news";
    let mut news = ingress("news", "web", &["news.example.com"]);
    news["spec"]["ingressClassName"] = json!("traefik");
    let ingresses = list(
        "IngressList",
        "networking.k8s.io/v1",
        vec![
            ingress("shop", "web", &["shop.example.com"]),
            ingress("blog", "web", &["blog.example.com", "*.blog.example.com"]),
            news,
        ],
    );
    let mut news_proxy = proxy_service();
    news_proxy["metadata"]["name"] = json!("proxy-news");
    news_proxy["spec"]["clusterIP"] = json!("10.96.0.30");
    news_proxy["spec"]["clusterIPs"] = json!(["10.96.0.30"]);
    let news_answer = Answer::Template(ProxyAddrs::new(&["10.96.0.30".parse().unwrap()]).unwrap());
    let (default_hosts, news_hosts) = (
        hosts(&["shop.example.com", "blog.example.com", "*.blog.example.com"]),
        hosts(&["news.example.com"]),
    );
    let default_answer = template();
    let two = corefile::splice_groups(
        &corefile_fixture("kubeadm.Corefile"),
        &[
            Group {
                hosts: &default_hosts,
                answer: &default_answer,
            },
            Group {
                hosts: &news_hosts,
                answer: &news_answer,
            },
        ],
    )
    .unwrap()
    .text;
    // news's load balancer reports ipMode Proxy; judged here as a controller that hairpins it
    // anyway (`--skip-proxy-ipmode=false`), and below as one that leaves it out.
    let target =
        "name=news,service=proxy-news,ingress-class=traefik,ingress-controller=traefik/traefik";
    let a = args(&["--target", target, "--skip-proxy-ipmode=false"]);
    let mut traefik = nginx_service(Some("Proxy"));
    traefik["metadata"] = meta("traefik", "traefik");
    let cluster = |corefile: String| {
        healthy()
            .at(INGRESSES, ingresses.clone())
            .at(
                "/apis/networking.k8s.io/v1/ingressclasses?",
                list("IngressClassList", "networking.k8s.io/v1", vec![]),
            )
            .at(NEWS_PROXY, news_proxy.clone())
            .at(
                "/api/v1/namespaces/traefik/services/traefik",
                traefik.clone(),
            )
            .at(
                COREDNS,
                configmap("kube-system", "coredns", json!({"Corefile": corefile})),
            )
    };
    // By default the controller leaves news out: the block with its names is stale, the one
    // without them current, and the hostnames check says why.
    let skipping = args(&["--target", target]);
    let (report, _) = run(cluster(two.clone()), &skipping).await;
    assert_eq!(check(&report, "coredns-block").status, Status::Fail);
    let default_only = corefile::splice_groups(
        &corefile_fixture("kubeadm.Corefile"),
        &[Group {
            hosts: &default_hosts,
            answer: &default_answer,
        }],
    )
    .unwrap()
    .text;
    let (report, _) = run(cluster(default_only), &skipping).await;
    assert_eq!(
        check(&report, "coredns-block").status,
        Status::Ok,
        "{report:#?}"
    );
    let h = check(&report, "hostnames");
    assert!(
        h.evidence
            .iter()
            .any(|e| e.starts_with("target news: 1 name(s) left out")),
        "{h:?}"
    );

    let (report, seen) = run(cluster(two), &a).await;
    let b = check(&report, "coredns-block");
    assert_eq!(b.status, Status::Ok, "{b:?}");
    assert_eq!(
        b.summary,
        "our block is present and current (4 hostname(s))"
    );
    assert_eq!(
        seen.iter().filter(|s| s.uri == NEWS_PROXY).count(),
        1,
        "the news proxy is read once"
    );
    // The named target's proxy gets its own checks, marked with the target.
    let of_news: Vec<(&str, Status)> = report
        .checks
        .iter()
        .filter(|c| c.target.as_deref() == Some("news"))
        .map(|c| (c.id, c.status))
        .collect();
    assert_eq!(
        of_news,
        [
            ("ingress-controller", Status::Ok),
            ("kep-1860-ipmode", Status::Warn),
            ("proxy-protocol", Status::Skip),
            ("answer", Status::Ok),
            ("proxy-service", Status::Ok),
            ("proxy-endpoints", Status::Fail),
        ],
        "{report:#?}"
    );
    let text = report.to_text();
    assert!(
        text.contains("proxy-service (target news): Service ouroboros/proxy-news exists")
            && text.contains(
                "ingress-controller (target news): Service traefik/traefik (traefik, type \
                 LoadBalancer, from ingress-controller= of --target news)"
            ),
        "{text}"
    );

    // One answer for every name: news.example.com would reach the wrong proxy.
    let one = with_block(
        &corefile_fixture("kubeadm.Corefile"),
        &[
            "shop.example.com",
            "blog.example.com",
            "*.blog.example.com",
            "news.example.com",
        ],
        &template(),
    );
    let (report, _) = run(cluster(one), &a).await;
    let b = check(&report, "coredns-block");
    assert_eq!(
        (b.status, b.summary.as_str()),
        (Status::Fail, "our block is stale"),
        "{b:?}"
    );
}

/// A listener on 127.0.0.1 answering each request with a redirect; its port.
async fn redirecting_listener() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 308 Permanent Redirect\r\n\r\n")
                .await;
        }
    });
    port
}

/// `doctor --probe HOST` against the mock API (the sources and the proxy Service, each read
/// once) and real CoreDNS: the name's target, each step, the verdict.
#[tokio::test]
async fn probe_prints_each_step_with_the_exact_calls() {
    use ouroboros::probe::knock::Hello;
    use ouroboros::probe::verdict::Verdict;
    use ouroboros::probe::{Server, Settings};

    let dir = crate::support::temp_dir("doctor-probe");
    let Some(dns) = crate::peers::probe::hosts_dns(
        dir.path(),
        &[
            ("127.0.0.1", "app.example.test"),
            ("192.0.2.7", "stale.example.test"),
        ],
    ) else {
        return;
    };
    let port = redirecting_listener().await;
    let mut proxy = proxy_service();
    proxy["spec"]["clusterIP"] = json!("127.0.0.1");
    proxy["spec"]["clusterIPs"] = json!(["127.0.0.1"]);
    let cluster = || {
        Cluster::default()
            .at(
                INGRESSES,
                list(
                    "IngressList",
                    "networking.k8s.io/v1",
                    vec![ingress(
                        "web",
                        "shop",
                        &["app.example.test", "stale.example.test"],
                    )],
                ),
            )
            .at(PROXY_SVC, proxy.clone())
    };
    let settings = Settings {
        servers: vec![Server {
            addr: dns.addr(),
            what: "the cluster DNS".into(),
        }],
        ports: vec![(port, Hello::Http)],
        timeout: std::time::Duration::from_secs(2),
    };
    let probe = |host: &'static str| {
        let a = args(&["--probe", host]);
        let state = Arc::new(Mutex::new(cluster()));
        let settings = settings.clone();
        async move {
            let (client, task) = serve_fn(move |s| state.lock().unwrap().answer(s));
            let out = ouroboros::doctor::probe::report(&client, &a, host, &settings)
                .await
                .unwrap();
            drop(client);
            (out, task.await.unwrap())
        }
    };

    let ((text, verdict), seen) = probe("app.example.test").await;
    assert_eq!(verdict, Verdict::Ok, "{text}");
    let d = dns.addr();
    assert_eq!(
        text,
        format!(
            "probe app.example.test\n\
             \x20 target    default (hairpinned as app.example.test, answer=auto)\n\
             \x20 expected  127.0.0.1 (the proxy)\n\
             \x20 dns       asked {d} (the cluster DNS) for app.example.test: A NOERROR, AAAA \
             NOERROR: 127.0.0.1; as expected, the proxy\n\
             \x20 connect   127.0.0.1:{port}, HTTP HEAD for app.example.test: answered with \
             \"HTTP/1.1 308 Permanent Redirect\"\n\
             \x20 verdict   ok\n"
        )
    );
    let calls: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        calls,
        [format!("GET {INGRESSES}"), format!("GET {PROXY_SVC}")],
        "the sources, then the proxy's addresses, once each"
    );

    let ((text, verdict), _) = probe("stale.example.test").await;
    assert_eq!(verdict, Verdict::DnsWrong, "{text}");
    assert!(
        text.contains("127.0.0.1 (the proxy)")
            && text.contains(
                "A NOERROR, AAAA NOERROR: 192.0.2.7; not expected: 192.0.2.7 [dns-wrong]"
            )
            && text.ends_with(&format!(
                "  verdict   dns-wrong: {}\n",
                Verdict::DnsWrong.hint()
            )),
        "{text}"
    );
    assert!(!text.contains("connect"), "stops at the DNS answer: {text}");
}

mod answers;
