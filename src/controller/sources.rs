//! The watch caches: one kube-runtime `watcher` + `reflector` per source kind (Ingress always,
//! IngressClass with `--ingress-class`, Gateway/HTTPRoute/GRPCRoute/TLSRoute with
//! `--gateway-api`), trimmed to what [`hostnames::desired`] reads. Tells the sync engine when
//! something changed and when every kind has delivered its initial list.
//!
//! A Gateway-API kind whose CRD is not installed (404 on list) is logged once and counted as
//! "synced, empty", so it does not hold back writes; the watcher keeps retrying with its
//! backoff (at most every 30 s or so), so the kind is picked up when its CRD appears.

use std::fmt::Debug;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::error_boundary::InvalidObject;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::events::{self, Notifier};
use super::hostnames::{self, Desired, Filters, ReadWhen, SourceObject, Sources};
use crate::hostname::HostPolicy;
use crate::kube_client::{Cause, Repeats};

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what the controller never reads, so 10,000 objects fit in a few MiB.
pub trait Trim {
    fn trim(&mut self);
}

fn trim_meta(m: &mut ObjectMeta) {
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    m.labels = None;
    m.owner_references = None;
    m.finalizers = None;
}

impl Trim for Ingress {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.status = None;
        if let Some(s) = self.spec.as_mut() {
            // Only the TLS hosts, the rules' hosts (--ingress-hosts all) and the class count.
            if let Some(rules) = s.rules.as_mut() {
                for r in rules {
                    r.http = None;
                }
            }
            s.default_backend = None;
        }
    }
}

impl Trim for IngressClass {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.spec = None;
    }
}

impl Trim for Gateway {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.status = None;
    }
}

impl Trim for HttpRoute {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.status = None;
        self.spec.rules = None;
    }
}

impl Trim for GrpcRoute {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.status = None;
        self.spec.rules = None;
    }
}

impl Trim for TlsRoute {
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.status = None;
        self.spec.rules = Vec::new();
    }
}

/// Which kinds have delivered their initial list, and a change counter, shared by the watch
/// tasks and read by the sync engine.
#[derive(Clone)]
struct Progress {
    synced: Arc<Mutex<Vec<bool>>>,
    synced_tx: Arc<watch::Sender<bool>>,
    changes_tx: Arc<watch::Sender<u64>>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            synced: Arc::default(),
            synced_tx: Arc::new(watch::channel(false).0),
            changes_tx: Arc::new(watch::channel(0).0),
        }
    }

    fn slot(&self) -> usize {
        let mut s = self.synced.lock().expect("progress lock");
        s.push(false);
        s.len() - 1
    }

    fn mark_synced(&self, slot: usize) {
        let all = {
            let mut s = self.synced.lock().expect("progress lock");
            s[slot] = true;
            s.iter().all(|&b| b)
        };
        self.synced_tx.send_if_modified(|v| {
            let changed = *v != all;
            *v = all;
            changed
        });
    }

    fn bump(&self) {
        self.changes_tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The watch caches of the configured kinds (`None`: not read in this configuration).
#[derive(Clone)]
pub struct Stores {
    filters: Filters,
    ingresses: Option<Store<Ingress>>,
    ingress_classes: Option<Store<IngressClass>>,
    gateways: Option<Store<Gateway>>,
    http_routes: Option<Store<HttpRoute>>,
    grpc_routes: Option<Store<GrpcRoute>>,
    tls_routes: Option<Store<TlsRoute>>,
}

fn state<K: Resource + Clone>(s: &Option<Store<K>>) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + Hash + Clone,
{
    s.as_ref().map(Store::state).unwrap_or_default()
}

impl Stores {
    /// The desired set from the caches as they are now.
    pub fn desired(&self, policy: &HostPolicy) -> Desired {
        let ingresses = state(&self.ingresses);
        let classes = state(&self.ingress_classes);
        let gateways = state(&self.gateways);
        let http = state(&self.http_routes);
        let grpc = state(&self.grpc_routes);
        let tls = state(&self.tls_routes);
        let sources = Sources {
            ingresses: ingresses.iter().map(AsRef::as_ref).collect(),
            ingress_classes: classes.iter().map(AsRef::as_ref).collect(),
            gateways: gateways.iter().map(AsRef::as_ref).collect(),
            http_routes: http.iter().map(AsRef::as_ref).collect(),
            grpc_routes: grpc.iter().map(AsRef::as_ref).collect(),
            tls_routes: tls.iter().map(AsRef::as_ref).collect(),
        };
        hostnames::desired(&sources, &self.filters, policy)
    }
}

/// Running watches: the caches, the engine's `changes` and `synced` signals, and the tasks.
pub struct Watches {
    pub stores: Stores,
    pub changes: watch::Receiver<u64>,
    pub synced: watch::Receiver<bool>,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Starts one watch per configured kind; they run until `stop`. An object that does not
/// deserialize is reported on `notifier` and left out, not the whole list.
pub fn start(
    client: &Client,
    filters: &Filters,
    notifier: &Notifier,
    stop: &CancellationToken,
) -> Watches {
    let mut w = Starter {
        client,
        filters,
        progress: Progress::new(),
        notifier,
        stop,
        tasks: Vec::new(),
    };
    // In `Kind::ALL` order, so the initial lists go out in a fixed order.
    let stores = Stores {
        filters: filters.clone(),
        ingresses: w.follow(),
        ingress_classes: w.follow(),
        gateways: w.follow(),
        http_routes: w.follow(),
        grpc_routes: w.follow(),
        tls_routes: w.follow(),
    };
    Watches {
        stores,
        changes: w.progress.changes_tx.subscribe(),
        synced: w.progress.synced_tx.subscribe(),
        tasks: w.tasks,
    }
}

/// What starting one watch per kind needs.
struct Starter<'a> {
    client: &'a Client,
    filters: &'a Filters,
    progress: Progress,
    notifier: &'a Notifier,
    stop: &'a CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Starter<'_> {
    /// Watches kind `K` when this configuration reads it.
    fn follow<K>(&mut self) -> Option<Store<K>>
    where
        K: SourceObject + Trim + Default + Debug + Send + Sync + 'static,
    {
        let f = self.filters;
        K::KIND
            .is_read(f.gateway_api, f.ingress_class.is_some())
            .then(|| {
                follow(
                    Api::<DeserializeGuard<K>>::all(self.client.clone()),
                    K::KIND.read_when() == ReadWhen::GatewayApi,
                    &self.progress,
                    self.notifier,
                    self.stop,
                    &mut self.tasks,
                )
            })
    }
}

/// Watches one kind into a store until `stop`. `optional`: a 404 (CRD not installed) counts as
/// an empty, synced list.
fn follow<K>(
    api: Api<DeserializeGuard<K>>,
    optional: bool,
    progress: &Progress,
    notifier: &Notifier,
    stop: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource + Trim + Default + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let slot = progress.slot();
    let (progress, stop) = (progress.clone(), stop.clone());
    let dt = K::DynamicType::default();
    let kind = K::kind(&dt).to_string();
    let resource = K::plural(&dt).to_string();
    let group = K::group(&dt).to_string();
    let mut unreadable = Unreadable::new(notifier.clone());
    let stream = watcher(api)
        .default_backoff()
        .filter_map(move |e| std::future::ready(e.map(|e| unreadable.screen(e)).transpose()))
        .modify(K::trim)
        .reflect(writer);
    let store = reader.clone();
    let task = tokio::spawn(async move {
        let mut stream = pin!(stream);
        let mut missing = false;
        // A failure repeating every retry is logged once per doubling, not every time.
        let mut repeats = Repeats::default();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => break,
                e = stream.next() => e,
            };
            match event {
                None => break,
                Some(Ok(Event::InitDone)) => {
                    repeats.reset();
                    if missing {
                        tracing::info!(%kind, "the CRD is installed now; watching it");
                        missing = false;
                    }
                    tracing::debug!(%kind, objects = store.len(), "initial list received");
                    progress.mark_synced(slot);
                    progress.bump();
                }
                Some(Ok(Event::Apply(_) | Event::Delete(_))) => progress.bump(),
                Some(Ok(Event::Init | Event::InitApply(_))) => {}
                Some(Err(e)) => {
                    let cause = Cause::of_watch(&e);
                    if cause == Cause::NotFound && optional {
                        if !missing {
                            tracing::warn!(
                                %kind,
                                "{group}/{resource} is not served (CRD not installed): skipping \
                                 {kind} objects; checking again periodically"
                            );
                            missing = true;
                        }
                        progress.mark_synced(slot);
                    } else if let Some(failures) = repeats.failed(cause) {
                        let grant = format!(
                            "grant the controller's ServiceAccount `list` and `watch` on \
                             {resource} (apiGroup {group:?}) cluster-wide"
                        );
                        tracing::warn!(
                            %kind,
                            error = %e,
                            failures,
                            "cannot list/watch {kind}: {}; retrying with backoff",
                            cause.hint(&grant)
                        );
                    }
                }
            }
        }
    });
    tasks.push(task);
    reader
}

/// Objects of a watched kind that do not deserialize (a field of the wrong type, an enum value
/// this version does not know): each is logged and given one Warning Event per version, and the
/// watch goes on without it, so one bad object cannot hold back the whole list.
struct Unreadable {
    notifier: Notifier,
    /// (namespace, name, resourceVersion) already reported.
    reported: std::collections::HashSet<(String, String, String)>,
}

impl Unreadable {
    fn new(notifier: Notifier) -> Self {
        Self {
            notifier,
            reported: Default::default(),
        }
    }

    /// The event with an unreadable object left out: skipped in the initial list, and as a
    /// deletion afterwards (a version that was readable before must not linger in the cache).
    fn screen<K>(&mut self, e: Event<DeserializeGuard<K>>) -> Option<Event<K>>
    where
        K: Resource + Default,
        K::DynamicType: Default,
    {
        Some(match e {
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
            Event::InitApply(DeserializeGuard(Ok(k))) => Event::InitApply(k),
            Event::Apply(DeserializeGuard(Ok(k))) => Event::Apply(k),
            Event::Delete(DeserializeGuard(Ok(k))) => Event::Delete(k),
            Event::InitApply(DeserializeGuard(Err(bad))) => {
                self.report::<K>(&bad);
                return None;
            }
            Event::Apply(DeserializeGuard(Err(bad))) => {
                self.report::<K>(&bad);
                Event::Delete(placeholder(bad))
            }
            Event::Delete(DeserializeGuard(Err(bad))) => Event::Delete(placeholder(bad)),
        })
    }

    fn report<K>(&mut self, bad: &InvalidObject)
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let m = &bad.metadata;
        let (namespace, name) = (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        let version = m.resource_version.clone().unwrap_or_default();
        if !self
            .reported
            .insert((namespace.clone(), name.clone(), version))
        {
            return;
        }
        let dt = K::DynamicType::default();
        let kind = K::kind(&dt).to_string();
        tracing::warn!(
            %kind,
            object = %format!("{namespace}/{name}"),
            error = %bad.error,
            "cannot read this object; its hostnames are left out until it is fixed"
        );
        self.notifier.send(events::Notice {
            regarding: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(K::api_version(&dt).to_string()),
                kind: Some(kind),
                namespace: m.namespace.clone(),
                name: m.name.clone(),
                uid: m.uid.clone(),
                ..Default::default()
            },
            reason: events::OBJECT_UNREADABLE,
            action: "Read",
            note: format!(
                "ouroboros cannot read this object ({}); its hostnames are not hairpinned \
                 until it is fixed",
                bad.error
            ),
        });
    }
}

/// An object with only the metadata of an unreadable one: enough for the cache to drop it.
fn placeholder<K: Resource + Default>(bad: InvalidObject) -> K {
    let mut k = K::default();
    *k.meta_mut() = bad.metadata;
    k
}

fn watcher<K>(api: Api<K>) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default())
}

#[cfg(test)]
mod tests {
    #[test]
    fn unreadable_objects_are_left_out_or_dropped() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let meta = |name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some("web".into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        let bad = |name: &str| {
            DeserializeGuard::<Ingress>(Err(InvalidObject {
                error: "invalid type".into(),
                metadata: meta(name),
            }))
        };
        let good = |name: &str| {
            DeserializeGuard(Ok(Ingress {
                metadata: meta(name),
                ..Ingress::default()
            }))
        };
        let mut u = Unreadable::new(Notifier::disabled());
        let name = |e: &Event<Ingress>| match e {
            Event::Apply(k) | Event::InitApply(k) | Event::Delete(k) => k.metadata.name.clone(),
            Event::Init | Event::InitDone => None,
        };
        assert!(matches!(
            u.screen(Event::InitApply(good("a"))),
            Some(Event::InitApply(_))
        ));
        assert!(
            u.screen(Event::InitApply(bad("b"))).is_none(),
            "skipped in the list"
        );
        let dropped = u.screen(Event::Apply(bad("c"))).unwrap();
        assert!(
            matches!(dropped, Event::Delete(_)),
            "a bad update drops the cached version"
        );
        assert_eq!(name(&dropped).as_deref(), Some("c"));
        assert!(matches!(
            u.screen(Event::Delete(bad("d"))),
            Some(Event::Delete(_))
        ));
        assert!(matches!(
            u.screen::<Ingress>(Event::InitDone),
            Some(Event::InitDone)
        ));
        // Reported once per object version.
        assert_eq!(u.reported.len(), 2);
        u.screen(Event::Apply(bad("c")));
        assert_eq!(u.reported.len(), 2);
    }

    use super::*;
    use kube::core::Status;
    use serde_json::json;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value::<Status>(json!({
                "status": "Failure", "message": "m", "reason": "R", "code": code
            }))
            .unwrap()
            .into(),
        )
    }

    #[test]
    fn classifies_watch_errors() {
        assert_eq!(
            Cause::of_watch(&watcher::Error::InitialListFailed(api_error(404))),
            Cause::NotFound
        );
        assert_eq!(
            Cause::of_watch(&watcher::Error::WatchStartFailed(api_error(403))),
            Cause::Forbidden
        );
        assert_eq!(
            Cause::of_watch(&watcher::Error::InitialListFailed(api_error(500))),
            Cause::Other
        );
    }

    #[test]
    fn trims_what_is_never_read() {
        let mut ing: Ingress = serde_json::from_value(json!({
            "metadata": {
                "name": "a", "namespace": "web",
                "annotations": {
                    LAST_APPLIED: "{\"big\": true}",
                    "kubernetes.io/ingress.class": "nginx"
                },
                "managedFields": [{"manager": "kubectl"}],
                "labels": {"app": "a"}
            },
            "spec": {
                "ingressClassName": "nginx",
                "tls": [{"hosts": ["a.example.com"]}],
                "rules": [{"host": "a.example.com", "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}
                }]}}]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}
        }))
        .unwrap();
        ing.trim();
        let v = serde_json::to_value(&ing).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {
                    "name": "a", "namespace": "web",
                    "annotations": {"kubernetes.io/ingress.class": "nginx"}
                },
                "spec": {
                    "ingressClassName": "nginx",
                    "tls": [{"hosts": ["a.example.com"]}],
                    "rules": [{"host": "a.example.com"}]
                }
            })
        );
    }

    #[tokio::test]
    async fn synced_only_when_every_kind_is() {
        let p = Progress::new();
        let rx = p.synced_tx.subscribe();
        let (a, b) = (p.slot(), p.slot());
        p.mark_synced(a);
        assert!(!*rx.borrow());
        p.mark_synced(b);
        assert!(*rx.borrow());
    }
}
