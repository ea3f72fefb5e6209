//! Replacing objects that publish names (issue #34): the reference tool's objects taken over with
//! `--external-dns-adopt`, ours under a name an earlier naming scheme gave, and `cleanup`, against
//! the stateful fake API (`external_dns_fake`), for both outputs. The fake checks after every
//! request it serves that no desired record that was published has been withdrawn; each
//! scenario asserts the exact requests of every sync (one write in flight, so the order is
//! fixed), the errors, and what is left.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kube::Client;
use serde_json::{json, Value};

use crate::external_dns_fake::{Fake, Fault, Kind, Served};
use crate::kube_mock::serve_fn;

use ouroboros::dns::external;
use ouroboros::dns::mode::external_dns::{ExternalWriter, Output, Settings};
use ouroboros::dns::write::apply::Outcome;
use ouroboros::dns::write::error::SinkError;
use ouroboros::dns::write::proxy_ips::ProxyIps;
use ouroboros::hostname::{HostPolicy, Hostname};

const OURS: &str =
    "labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.io%2Finstance%3Douroboros";
const THEIRS: &str = "labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.lexfrei.tech%2Finstance%3Douroboros";
/// Our targets: dual-stack, so each name has an A and an AAAA record.
const OUR_IPS: [&str; 2] = ["10.96.0.10", "fd00::a"];
const HOSTS: [&str; 3] = ["api.example.com", "shop.example.com", "www.example.com"];

fn output(kind: Kind) -> Output {
    match kind {
        Kind::DnsEndpoint => Output::DnsEndpoint,
        Kind::Service => Output::Service,
    }
}

fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

/// Our object name for `host`.
fn ours(kind: Kind, host: &str) -> String {
    let h = hosts(&[host]).into_iter().next().unwrap();
    match kind {
        Kind::DnsEndpoint => external::object_name(external::DEFAULT_INSTANCE, &h),
        Kind::Service => external::service_name(external::DEFAULT_INSTANCE, &h),
    }
}

fn writer(client: Client, kind: Kind, adopt: bool) -> ExternalWriter {
    let settings = Settings {
        namespace: "ouroboros".into(),
        instance: external::DEFAULT_INSTANCE.into(),
        ttl: 60,
        labels: vec![],
        annotations: vec![],
        annotation_prefix: None,
        adopt,
    };
    let ips = ProxyIps::Static(OUR_IPS.iter().map(|s| s.parse().unwrap()).collect());
    ExternalWriter::new(client, output(kind), settings, ips).unwrap()
}

/// An object lexfrei/ouroboros wrote for instance `ouroboros`: a DNSEndpoint per name and family
/// (`-v4`/`-v6`), a Service per name with its targets under the alpha prefix.
fn theirs(kind: Kind, name: &str, host: &str, targets: &[&str]) -> Value {
    let metadata = json!({
        "name": name, "namespace": "ouroboros", "resourceVersion": "40", "uid": format!("uid-{name}"),
        "labels": {
            "app.kubernetes.io/managed-by": "ouroboros",
            "ouroboros.lexfrei.tech/instance": "ouroboros"
        },
        "annotations": {"ouroboros.lexfrei.tech/source": "controller"}
    });
    match kind {
        Kind::DnsEndpoint => {
            let rtype = if targets[0].contains(':') {
                "AAAA"
            } else {
                "A"
            };
            json!({
                "apiVersion": external::API_VERSION, "kind": external::KIND, "metadata": metadata,
                "spec": {"endpoints": [
                    {"dnsName": host, "recordType": rtype, "targets": targets, "recordTTL": 60}
                ]}
            })
        }
        Kind::Service => {
            let mut svc = json!({
                "apiVersion": "v1", "kind": "Service", "metadata": metadata,
                "spec": {"type": "ClusterIP", "clusterIP": "None"}
            });
            let a = &mut svc["metadata"]["annotations"];
            a["external-dns.alpha.kubernetes.io/hostname"] = json!(host);
            a["external-dns.alpha.kubernetes.io/target"] = json!(targets.join(","));
            svc
        }
    }
}

/// One of ours under `name`, a name an earlier naming scheme gave (not the one written now).
fn ours_renamed(kind: Kind, name: &str, host: &str) -> Value {
    let mut o = match kind {
        Kind::DnsEndpoint => json!({
            "apiVersion": external::API_VERSION, "kind": external::KIND,
            "spec": {"endpoints": [
                {"dnsName": host, "recordType": "A", "targets": ["10.96.0.10"], "recordTTL": 60},
                {"dnsName": host, "recordType": "AAAA", "targets": ["fd00::a"], "recordTTL": 60}
            ]}
        }),
        Kind::Service => json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"annotations": {
                "external-dns.kubernetes.io/hostname": host,
                "external-dns.kubernetes.io/target": "10.96.0.10,fd00::a"
            }},
            "spec": {"type": "ClusterIP", "clusterIP": "None"}
        }),
    };
    let annotations = o["metadata"]["annotations"].clone();
    o["metadata"] = json!({
        "name": name, "namespace": "ouroboros", "resourceVersion": "30", "uid": format!("uid-{name}"),
        "labels": {"app.kubernetes.io/managed-by": "ouroboros", "ouroboros.io/instance": "ouroboros"},
        "annotations": annotations
    });
    o
}

/// Their names for www (two DNSEndpoints, one per family; one Service), api and old.
fn their_www(kind: Kind) -> Vec<&'static str> {
    match kind {
        Kind::DnsEndpoint => vec![
            "ouroboros-www-example-com-v4",
            "ouroboros-www-example-com-v6",
        ],
        Kind::Service => vec!["ouroboros-www-example-com"],
    }
}

/// The cluster in the middle of a migration: theirs for www, api and a name no longer wanted,
/// and one of ours for shop under a name of an earlier scheme. Every desired name is published.
fn migrating(kind: Kind) -> Vec<Value> {
    let mut v = match kind {
        Kind::DnsEndpoint => vec![
            theirs(
                kind,
                "ouroboros-www-example-com-v4",
                "www.example.com",
                &["10.96.0.99"],
            ),
            theirs(
                kind,
                "ouroboros-www-example-com-v6",
                "www.example.com",
                &["fd00::99"],
            ),
        ],
        Kind::Service => vec![theirs(
            kind,
            "ouroboros-www-example-com",
            "www.example.com",
            &["10.96.0.99", "fd00::99"],
        )],
    };
    v.push(theirs(
        kind,
        "ouroboros-api-example-com",
        "api.example.com",
        &["10.96.0.99"],
    ));
    v.push(theirs(
        kind,
        "ouroboros-old-example-com",
        "old.example.com",
        &["10.96.0.99"],
    ));
    v.push(ours_renamed(kind, "shop-example-com", "shop.example.com"));
    v
}

/// The records the writer is asked to publish.
const DESIRED: [(&str, &str); 6] = [
    ("api.example.com", "A"),
    ("api.example.com", "AAAA"),
    ("shop.example.com", "A"),
    ("shop.example.com", "AAAA"),
    ("www.example.com", "A"),
    ("www.example.com", "AAAA"),
];

type Shared = Arc<Mutex<Fake>>;

fn start(fake: Fake) -> (Client, Shared) {
    let fake = Arc::new(Mutex::new(fake));
    let f = fake.clone();
    let (client, _task) = serve_fn(move |s| f.lock().unwrap().handle(s));
    (client, fake)
}

/// Expected requests: (method, URI, status).
struct Want(Vec<Served>);

impl Want {
    fn new() -> Self {
        Want(Vec::new())
    }

    fn push(mut self, method: &str, uri: String, code: u16) -> Self {
        self.0.push(Served {
            method: method.into(),
            uri,
            code,
        });
        self
    }

    /// The lists every adopting sync starts with; `meta`: the metadata list too (a desired
    /// object is not ours yet).
    fn lists(self, kind: Kind, meta: bool) -> Self {
        let b = kind.base();
        let s = self.push("GET", format!("{b}?&{OURS}"), 200).push(
            "GET",
            format!("{b}?&{THEIRS}"),
            200,
        );
        if meta {
            s.push("GET", format!("{b}?"), 200)
        } else {
            s
        }
    }

    fn apply(self, kind: Kind, host: &str, code: u16) -> Self {
        let uri = format!(
            "{}/{}?&force=true&fieldManager=ouroboros",
            kind.base(),
            ours(kind, host)
        );
        self.push("PATCH", uri, code)
    }

    fn delete(self, kind: Kind, name: &str, code: u16) -> Self {
        self.push("DELETE", format!("{}/{name}?", kind.base()), code)
    }
}

/// Runs one sync, checks that no name was unpublished during it, and returns its result and
/// the requests it made.
async fn sync(
    w: &ExternalWriter,
    fake: &Shared,
    set: &[&str],
) -> (Result<Outcome, SinkError>, Vec<Served>) {
    let from = fake.lock().unwrap().served.len();
    let r = w.apply(&hosts(set)).await.map(|a| a.outcome);
    assert_held(fake);
    let served = fake.lock().unwrap().served[from..].to_vec();
    (r, served)
}

fn kept(e: &SinkError) -> Vec<&str> {
    e.kept.iter().map(|k| k.object.name.as_str()).collect()
}

fn assert_held(fake: &Shared) {
    let f = fake.lock().unwrap();
    assert!(f.violations.is_empty(), "{:#?}", f.violations);
}

/// Three 500s on our write for www (one on shop's): theirs for www, and our old-named object
/// for shop, stay until ours are written; api's and the unwanted old name go at once.
async fn adoption_under_500s(kind: Kind) {
    let mut f = Fake::new(migrating(kind), &[kind]);
    f.faults = vec![
        Fault::new("PATCH", &ours(kind, "www.example.com"), 500, 3),
        Fault::new("PATCH", &ours(kind, "shop.example.com"), 500, 1),
    ];
    f.desire(&DESIRED);
    let (client, fake) = start(f);
    let w = writer(client, kind, true).concurrency(1);

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "api.example.com", 200)
        .apply(kind, "shop.example.com", 500)
        .apply(kind, "www.example.com", 500)
        .delete(kind, "ouroboros-api-example-com", 200)
        .delete(kind, "ouroboros-old-example-com", 200);
    assert_eq!(served, want.0, "sync 1");
    let e = r.unwrap_err();
    assert_eq!(e.reason, "api");
    assert!(!e.is_permanent(), "a 500 is retried with backoff");
    let mut waiting = their_www(kind);
    waiting.push("shop-example-com");
    assert_eq!(kept(&e), waiting);
    let www = ours(kind, "www.example.com");
    let note = &e.kept[0].note;
    assert!(
        note.contains("still publishes www.example.com")
            && note.contains(&format!(
                "is kept until ours ({} ouroboros/{www}) is written",
                kind_name(kind)
            )),
        "{note}"
    );
    assert!(
        e.message.contains("kept until ours are written"),
        "{}",
        e.message
    );

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "shop.example.com", 200)
        .apply(kind, "www.example.com", 500)
        .delete(kind, "shop-example-com", 200);
    assert_eq!(served, want.0, "sync 2");
    assert_eq!(kept(&r.unwrap_err()), their_www(kind));

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "www.example.com", 500);
    assert_eq!(served, want.0, "sync 3");
    assert_eq!(kept(&r.unwrap_err()), their_www(kind));

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let mut want = Want::new()
        .lists(kind, true)
        .apply(kind, "www.example.com", 200);
    for n in their_www(kind) {
        want = want.delete(kind, n, 200);
    }
    assert_eq!(served, want.0, "sync 4");
    assert_eq!(r.unwrap(), Outcome::Written);

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    assert_eq!(served, Want::new().lists(kind, false).0, "sync 5");
    assert_eq!(r.unwrap(), Outcome::Unchanged);

    assert_held(&fake);
    let left = fake.lock().unwrap().names(kind);
    let mut all: Vec<String> = HOSTS.iter().map(|h| ours(kind, h)).collect();
    all.sort();
    assert_eq!(left, all, "only ours are left");
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::DnsEndpoint => "DNSEndpoint",
        Kind::Service => "Service",
    }
}

#[tokio::test]
async fn adoption_under_500s_dnsendpoints() {
    adoption_under_500s(Kind::DnsEndpoint).await;
}

#[tokio::test]
async fn adoption_under_500s_services() {
    adoption_under_500s(Kind::Service).await;
}

/// The same with 8 writes in flight: the order within a run of writes is not fixed, the rule
/// is the same.
#[tokio::test]
async fn adoption_under_500s_with_concurrent_writes() {
    for kind in [Kind::DnsEndpoint, Kind::Service] {
        let mut f = Fake::new(migrating(kind), &[kind]);
        f.faults = vec![
            Fault::new("PATCH", &ours(kind, "www.example.com"), 500, 2),
            Fault::new("PATCH", &ours(kind, "api.example.com"), 500, 1),
        ];
        f.desire(&DESIRED);
        let (client, fake) = start(f);
        let w = writer(client, kind, true);
        let mut results = Vec::new();
        for _ in 0..4 {
            results.push(sync(&w, &fake, &HOSTS).await.0.map_err(|e| kept(&e).len()));
        }
        assert_eq!(
            results,
            [
                Err(their_www(kind).len() + 1),
                Err(their_www(kind).len()),
                Ok(Outcome::Written),
                Ok(Outcome::Unchanged)
            ],
            "{kind:?}"
        );
        assert_held(&fake);
    }
}

/// 409s: our write for www conflicts once, and the reference tool (still running, its watch
/// just reset) re-applies its objects between our list and our deletes, so the deletes'
/// preconditions fail: everything it wrote stays until the next sync lists it again.
async fn adoption_under_409s_and_their_relist(kind: Kind) {
    let mut f = Fake::new(migrating(kind), &[kind]);
    f.faults = vec![Fault::new("PATCH", &ours(kind, "www.example.com"), 409, 1)];
    let mut relisted = false;
    f.before = Some(Box::new(move |_, s, objects| {
        if s.method == "PATCH" && !relisted {
            relisted = true;
            for ((_, _), o) in objects.iter_mut() {
                if o["metadata"]["labels"]["ouroboros.lexfrei.tech/instance"] == "ouroboros" {
                    o["metadata"]["resourceVersion"] = json!("41");
                }
            }
        }
    }));
    f.desire(&DESIRED);
    let (client, fake) = start(f);
    let w = writer(client, kind, true).concurrency(1);

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "api.example.com", 200)
        .apply(kind, "shop.example.com", 200)
        .apply(kind, "www.example.com", 409)
        .delete(kind, "ouroboros-api-example-com", 409)
        .delete(kind, "ouroboros-old-example-com", 409)
        .delete(kind, "shop-example-com", 200);
    assert_eq!(served, want.0, "sync 1");
    let e = r.unwrap_err();
    assert_eq!(e.reason, "conflict");
    assert!(
        e.message
            .starts_with("3 external-dns objects failed: apply ")
            && e.message.contains("changed since it was listed"),
        "{}",
        e.message
    );
    assert_eq!(kept(&e), their_www(kind));

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let mut want = Want::new()
        .lists(kind, true)
        .apply(kind, "www.example.com", 200)
        .delete(kind, "ouroboros-api-example-com", 200)
        .delete(kind, "ouroboros-old-example-com", 200);
    for n in their_www(kind) {
        want = want.delete(kind, n, 200);
    }
    assert_eq!(served, want.0, "sync 2");
    assert_eq!(r.unwrap(), Outcome::Written);
    assert_held(&fake);
}

#[tokio::test]
async fn adoption_under_409s_and_their_relist_dnsendpoints() {
    adoption_under_409s_and_their_relist(Kind::DnsEndpoint).await;
}

#[tokio::test]
async fn adoption_under_409s_and_their_relist_services() {
    adoption_under_409s_and_their_relist(Kind::Service).await;
}

/// A Role without `create` (as a real API server judges it: a server-side apply of an absent
/// object is a create): none of ours can be written, so every old object publishing a wanted
/// name stays; the error names the one verb missing and the chart values, is permanent (no
/// retry loop), and the next resync asks the same once more. Granted, the next sync finishes.
async fn adoption_refused_without_create(kind: Kind) {
    let mut f = Fake::new(migrating(kind), &[kind]);
    f.denied = BTreeSet::from(["create"]);
    f.desire(&DESIRED);
    let (client, fake) = start(f);
    let w = writer(client, kind, true).concurrency(1);

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "api.example.com", 403)
        .apply(kind, "shop.example.com", 403)
        .apply(kind, "www.example.com", 403)
        .delete(kind, "ouroboros-old-example-com", 200);
    assert_eq!(served, want.0, "sync 1");
    let e = r.unwrap_err();
    assert_eq!(e.reason, "forbidden");
    assert!(!e.is_permanent(), "RBAC is retried with the backoff");
    let (resource, value) = match kind {
        Kind::DnsEndpoint => ("dnsendpoints (apiGroup externaldns.k8s.io)", "dnsendpoint"),
        Kind::Service => ("services (core apiGroup \"\")", "service"),
    };
    assert!(
        e.message.contains(&format!(
            "grant the controller's ServiceAccount `create` on {resource} in namespace ouroboros"
        )) && e.message.contains(&format!(
            "controller.mode=external-dns, controller.externalDns.output={value} and \
             controller.externalDns.namespace=ouroboros"
        )),
        "{}",
        e.message
    );
    let mut waiting = vec!["ouroboros-api-example-com"];
    waiting.extend(their_www(kind));
    waiting.push("shop-example-com");
    assert_eq!(kept(&e), waiting);

    let (r, served) = sync(&w, &fake, &HOSTS).await;
    let want = Want::new()
        .lists(kind, true)
        .apply(kind, "api.example.com", 403)
        .apply(kind, "shop.example.com", 403)
        .apply(kind, "www.example.com", 403);
    assert_eq!(served, want.0, "the next resync");
    assert_eq!(kept(&r.unwrap_err()), waiting);

    fake.lock().unwrap().denied.clear();
    let (r, _) = sync(&w, &fake, &HOSTS).await;
    assert_eq!(r.unwrap(), Outcome::Written);
    assert_held(&fake);
    assert_eq!(
        fake.lock().unwrap().names(kind).len(),
        3,
        "only ours are left"
    );
}

#[tokio::test]
async fn adoption_refused_without_create_dnsendpoints() {
    adoption_refused_without_create(Kind::DnsEndpoint).await;
}

#[tokio::test]
async fn adoption_refused_without_create_services() {
    adoption_refused_without_create(Kind::Service).await;
}

/// A Role without `delete`: ours are written, theirs cannot go (both publish the names); a Role
/// that grants nothing: the first list is refused and nothing else is sent.
#[tokio::test]
async fn adoption_refused_delete_or_everything() {
    for kind in [Kind::DnsEndpoint, Kind::Service] {
        let mut f = Fake::new(migrating(kind), &[kind]);
        f.denied = BTreeSet::from(["delete"]);
        f.desire(&DESIRED);
        let (client, fake) = start(f);
        let w = writer(client, kind, true).concurrency(1);
        let e = sync(&w, &fake, &HOSTS).await.0.unwrap_err();
        assert_eq!(e.reason, "forbidden");
        assert!(!e.is_permanent());
        assert!(e.message.contains("`delete` on"), "{}", e.message);
        assert!(e.kept.is_empty(), "nothing waits for a write: {:?}", e.kept);
        assert_held(&fake);
        assert_eq!(
            fake.lock().unwrap().names(kind).len(),
            migrating(kind).len() + 3
        );

        let mut f = Fake::new(migrating(kind), &[kind]);
        f.denied = BTreeSet::from(["list", "create", "patch", "delete"]);
        let (client, fake) = start(f);
        let w = writer(client, kind, true).concurrency(1);
        let (r, served) = sync(&w, &fake, &HOSTS).await;
        let e = r.unwrap_err();
        assert!(!e.is_permanent());
        assert!(e.message.contains("`list` on"), "{}", e.message);
        let list = format!("{}?&{OURS}", kind.base());
        assert_eq!(served, Want::new().push("GET", list, 403).0);
    }
}

/// `cleanup` with adoption deletes ours (the old-named one too) and theirs: nothing is wanted,
/// so nothing waits. A 500 on one delete leaves that object for the next attempt; a Role
/// without `delete` ends the cleanup after three attempts (the first two may be a new Role the
/// authorizer has not seen yet).
#[tokio::test]
async fn cleanup_with_adoption() {
    for kind in [Kind::DnsEndpoint, Kind::Service] {
        let mut f = Fake::new(migrating(kind), &[kind]);
        f.faults = vec![Fault::new("DELETE", "ouroboros-api-example-com", 500, 1)];
        let (client, fake) = start(f);
        let w = writer(client, kind, true).concurrency(1);
        let from = fake.lock().unwrap().served.len();
        let e = w.cleanup().await.unwrap_err();
        assert_eq!(e.reason, "api");
        assert!(e.kept.is_empty());
        let mut want = Want::new()
            .lists(kind, false)
            .delete(kind, "ouroboros-api-example-com", 500)
            .delete(kind, "ouroboros-old-example-com", 200);
        for n in their_www(kind) {
            want = want.delete(kind, n, 200);
        }
        want = want.delete(kind, "shop-example-com", 200);
        assert_eq!(fake.lock().unwrap().served[from..], want.0[..], "{kind:?}");
        let a = ouroboros::cleanup::with_retries(&w, 3, |_| std::time::Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(a.outcome, Outcome::Written);
        assert!(fake.lock().unwrap().names(kind).is_empty());

        let mut f = Fake::new(migrating(kind), &[kind]);
        f.denied = BTreeSet::from(["delete"]);
        let (client, fake) = start(f);
        let w = writer(client, kind, true).concurrency(1);
        let e = ouroboros::cleanup::with_retries(&w, 5, |_| std::time::Duration::ZERO)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failed after 3 attempt(s)") && e.contains("`delete` on"),
            "{e}"
        );
        let lists = fake
            .lock()
            .unwrap()
            .served
            .iter()
            .filter(|s| s.method == "GET")
            .count();
        assert_eq!(lists, 2 * 3, "three attempts: {e}");
    }
}

/// Switching `--external-dns-output` (Service to DNSEndpoint and back) never unpublishes a name:
/// the objects of the output left are not deleted (the Role of one output grants nothing on
/// the other), and switching back rewrites the Services still there.
#[tokio::test]
async fn switching_outputs_never_unpublishes_a_name() {
    let mut f = Fake::new(vec![], &[Kind::DnsEndpoint, Kind::Service]);
    f.desire(&DESIRED);
    let (client, fake) = start(f);
    let as_services = writer(client.clone(), Kind::Service, false).concurrency(1);
    let as_endpoints = writer(client, Kind::DnsEndpoint, false).concurrency(1);
    assert_eq!(
        sync(&as_services, &fake, &HOSTS).await.0.unwrap(),
        Outcome::Written
    );
    assert_eq!(
        sync(&as_endpoints, &fake, &HOSTS).await.0.unwrap(),
        Outcome::Written
    );
    let (r, served) = sync(&as_services, &fake, &HOSTS[..2]).await;
    assert_eq!(r.unwrap(), Outcome::Written);
    assert_eq!(
        served,
        Want::new()
            .push("GET", format!("{}?&{OURS}", Kind::Service.base()), 200)
            .delete(Kind::Service, &ours(Kind::Service, "www.example.com"), 200)
            .0
    );
    let f = fake.lock().unwrap();
    assert!(f.violations.is_empty(), "{:#?}", f.violations);
    assert_eq!(
        f.names(Kind::DnsEndpoint).len(),
        3,
        "the other output's objects stay"
    );
    assert_eq!(f.names(Kind::Service).len(), 2);
}

// ---- The whole controller: backoff, Events, metrics, and a watch reset during adoption ----

const INGRESS_LIST: &str = "/apis/networking.k8s.io/v1/ingresses?&limit=500";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/";

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    c: ouroboros::controller::ControllerArgs,
}

fn ingress(hosts: &[&str]) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "web", "resourceVersion": "10"},
        "spec": {"tls": [{"hosts": hosts, "secretName": "cert"}]}
    })
}

/// The controller in external-dns mode, adopting, against the fake (for the external-dns
/// objects) and one Ingress; Ingress lists can be held and the watch is held until answered.
struct Controller {
    api: crate::kube_mock::Routed,
    fake: Shared,
    hold_list: Arc<Mutex<bool>>,
    port: u16,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Controller {
    fn start(kind: Kind, fake: Fake) -> Self {
        use crate::kube_mock::{list, route, Answer};
        let fake = Arc::new(Mutex::new(fake));
        let hold_list = Arc::new(Mutex::new(false));
        let (f, hold) = (fake.clone(), hold_list.clone());
        let (client, api) = route(move |s| {
            let u = s.uri.as_str();
            if s.is_watch() || (u == INGRESS_LIST && *hold.lock().unwrap()) {
                return Answer::Hold;
            }
            if u == INGRESS_LIST {
                let items = vec![ingress(&HOSTS)];
                return Answer::Json(
                    200,
                    list("networking.k8s.io/v1", "IngressList", "100", items),
                );
            }
            if u.starts_with(EVENTS) {
                return Answer::Json(
                    if s.method == "POST" { 201 } else { 200 },
                    s.body.clone().unwrap(),
                );
            }
            let (code, v) = f.lock().unwrap().handle(s);
            Answer::Json(code, v)
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let output = match kind {
            Kind::DnsEndpoint => "dnsendpoint",
            Kind::Service => "service",
        };
        let argv = [
            "t",
            "--mode",
            "external-dns",
            "--external-dns-adopt",
            "--external-dns-output",
            output,
            "--external-dns-namespace",
            "ouroboros",
            "--external-dns-proxy-ip",
            OUR_IPS[0],
            "--external-dns-proxy-ip",
            OUR_IPS[1],
            "--cluster-domain",
            "cluster.local",
            "--leader-elect=false",
            "--debounce",
            "50ms",
            "--listen-health",
            &listen,
            // The probe has tests of its own; here it would add reads of the proxy Service.
            "--probe-interval=0s",
        ];
        let args = crate::common::parse_without_env::<Flags, _, _>(argv)
            .expect("flags")
            .c;
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(ouroboros::controller::run_with(client, args, stop.clone()));
        Controller {
            api,
            fake,
            hold_list,
            port,
            stop,
            task,
        }
    }

    /// Waits (up to 15 s) until /metrics has every one of `lines`; returns the last scrape.
    async fn metrics_until(&self, lines: &[&str]) -> String {
        let mut last = String::new();
        for _ in 0..750 {
            if let Some(m) = scrape(self.port).await {
                if lines.iter().all(|l| m.lines().any(|x| x == *l)) {
                    return m;
                }
                last = m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("{lines:?} not in\n{last}\n{:#?}", self.api.calls());
    }

    /// The Warning Events posted with `reason`, by the object they are about.
    fn events(&self, reason: &str) -> Vec<String> {
        self.api
            .matching("POST", EVENTS)
            .into_iter()
            .filter_map(|(_, b)| b)
            .filter(|b| b["reason"] == reason)
            .map(|b| b["regarding"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    async fn shutdown(self) -> Shared {
        self.stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(10), self.task)
            .await
            .expect("stops within 10 s")
            .unwrap()
            .expect("run_with returns Ok");
        self.fake
    }
}

/// GET /metrics on the admin port; `None` until it listens.
async fn scrape(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    buf.split("\r\n\r\n").nth(1).map(String::from)
}

/// Two 500s on our write for www, and the Ingress watch reset (410) while theirs are kept: the
/// relist is held across the first retry. Theirs for www stay until the third sync writes ours;
/// each kept object gets one RecordKept Event; the gauge follows; no name is ever unpublished.
async fn controller_adopts_through_500s_and_a_watch_reset(kind: Kind) {
    let mut f = Fake::new(migrating(kind), &[kind]);
    let www = ours(kind, "www.example.com");
    f.faults = vec![Fault::new("PATCH", &www, 500, 2)];
    f.desire(&DESIRED);
    let c = Controller::start(kind, f);
    let kept_now = format!(
        "ouroboros_controller_kept_objects {}",
        their_www(kind).len()
    );
    c.metrics_until(&[
        &kept_now,
        "ouroboros_controller_syncs_total{mode=\"external-dns\",result=\"api\"} 1",
    ])
    .await;
    // The watch resets in the middle of the adoption; its relist waits.
    *c.hold_list.lock().unwrap() = true;
    let gone = json!({"type": "ERROR", "object": crate::kube_mock::status(410, "Expired", "too old resource version")});
    c.api.deliver("watch=true", gone).await;
    assert!(
        c.api
            .wait_for(10, |a| a.count("GET", INGRESS_LIST) == 2)
            .await,
        "{:#?}",
        c.api.calls()
    );
    c.metrics_until(&["ouroboros_controller_syncs_total{mode=\"external-dns\",result=\"api\"} 2"])
        .await;
    *c.hold_list.lock().unwrap() = false;
    assert_eq!(c.api.release(INGRESS_LIST, &[]), 1);
    c.metrics_until(&[
        "ouroboros_controller_kept_objects 0",
        "ouroboros_controller_syncs_total{mode=\"external-dns\",result=\"written\"} 1",
    ])
    .await;
    assert!(
        c.api
            .wait_for(5, |a| a.count("POST", EVENTS) >= their_www(kind).len())
            .await
    );
    let mut events = c.events("RecordKept");
    events.sort();
    assert_eq!(events, their_www(kind), "one Event per kept object");
    let fake = c.shutdown().await;
    let f = fake.lock().unwrap();
    assert!(f.violations.is_empty(), "{:#?}", f.violations);
    let mut all: Vec<String> = HOSTS.iter().map(|h| ours(kind, h)).collect();
    all.sort();
    assert_eq!(f.names(kind), all, "only ours are left");
    let www_writes = f
        .served
        .iter()
        .filter(|s| s.method == "PATCH" && s.uri.contains(&www))
        .count();
    assert_eq!(www_writes, 3, "two 500s, then written");
}

#[tokio::test]
async fn controller_adopts_through_500s_and_a_watch_reset_dnsendpoints() {
    controller_adopts_through_500s_and_a_watch_reset(Kind::DnsEndpoint).await;
}

#[tokio::test]
async fn controller_adopts_through_500s_and_a_watch_reset_services() {
    controller_adopts_through_500s_and_a_watch_reset(Kind::Service).await;
}

/// A Role without `create` (or an API server that has just started and not yet loaded its
/// RBAC objects): the sync is refused, said once (one WriteForbidden Event, one RecordKept
/// Event per kept object) however often it is retried with the backoff, and once `create` is
/// allowed the next retry writes everything, with no change of hostnames to prompt it.
#[tokio::test]
async fn controller_reports_a_refused_write_once_and_writes_once_it_is_allowed() {
    for kind in [Kind::DnsEndpoint, Kind::Service] {
        let mut f = Fake::new(migrating(kind), &[kind]);
        f.denied = BTreeSet::from(["create"]);
        f.desire(&DESIRED);
        let c = Controller::start(kind, f);
        // Refused at 0 s, retried at 1 s (the backoff's first step).
        c.metrics_until(&[
            "ouroboros_controller_syncs_total{mode=\"external-dns\",result=\"forbidden\"} 2",
        ])
        .await;
        let mut kept = vec!["ouroboros-api-example-com".to_string()];
        kept.extend(their_www(kind).into_iter().map(String::from));
        kept.push("shop-example-com".into());
        let expected = kept.len() + 1;
        assert!(
            c.api
                .wait_for(5, |a| a.count("POST", EVENTS) >= expected)
                .await
        );
        c.fake.lock().unwrap().denied.clear();
        c.metrics_until(&[
            "ouroboros_controller_kept_objects 0",
            "ouroboros_controller_syncs_total{mode=\"external-dns\",result=\"written\"} 1",
        ])
        .await;
        let mut events = c.events("RecordKept");
        events.sort();
        assert_eq!(
            events, kept,
            "one Event per kept object, however many retries"
        );
        assert_eq!(c.events("WriteForbidden").len(), 1, "said once");
        let fake = c.shutdown().await;
        let f = fake.lock().unwrap();
        assert!(f.violations.is_empty(), "{:#?}", f.violations);
    }
}
