//! The watch caches: one list/watch (`list_watch`) into a kube-runtime reflector store per
//! source kind (Ingress always, IngressClass with `--ingress-class`,
//! Gateway/HTTPRoute/GRPCRoute/TLSRoute with `--gateway-api`, Traefik's, Contour's and Istio's
//! kinds with their flags), each object read straight into
//! its projection (`projection`: only what [`hostnames::desired`] reads is ever allocated).
//! Tells the sync engine when something changed and when every kind has delivered its initial
//! list.
//!
//! Each kind is watched at the first of its places the cluster serves (`placement`, from the
//! discovery documents); when that changes, the watch lists again at the new place into the
//! same store, which keeps the kind's objects until the new list is complete.
//!
//! A CRD kind (Gateway API, Traefik, Contour, Istio) whose CRD is not installed (404 on list)
//! is logged once and counted as "synced, empty", so it does not hold back writes; the watch
//! keeps retrying with kube-runtime's default backoff (at most every 30 s or so), so the kind
//! is picked up when its CRD appears.
//!
//! The idle-watch detector: a watch that delivers neither an event nor a bookmark for
//! `--watch-idle-timeout` is restarted with a fresh list (a watch through a tunnel such as
//! konnectivity can stop without an error), logged, counted in `watch_restarts_total` and
//! reported by `/readyz` until the new list has arrived.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::error_boundary::InvalidObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::events::{self, Notifier};
use super::hostnames::{
    self, contour::HttpProxy, istio::IstioGateway, kinds::Kind, kinds::Place, kinds::SourceObject,
    kinds::Sources, model::Desired, model::Filters, model::IngressHosts, traefik::IngressRoute,
    traefik::IngressRouteTcp,
};
use super::metrics::{KindLabel, Metrics};
use super::placement::{self, resource_at, Places};
use super::projection::{Project, Projected};
use crate::hostname::HostPolicy;
use crate::kube_client::{Cause, Repeats};

/// Which kinds have delivered their initial list, and a change counter, shared by the watch
/// tasks and read by the sync engine.
#[derive(Clone)]
struct Progress {
    synced: Arc<Mutex<Vec<bool>>>,
    synced_tx: Arc<watch::Sender<bool>>,
    changes_tx: Arc<watch::Sender<u64>>,
    relisting: Relisting,
}

impl Progress {
    fn new() -> Self {
        Progress {
            synced: Arc::default(),
            synced_tx: Arc::new(watch::channel(false).0),
            changes_tx: Arc::new(watch::channel(0).0),
            relisting: Relisting::default(),
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

/// The kinds the idle-watch detector is relisting (by slot), with the reason `/readyz` gives.
/// Only those: the first list is `synced`'s business, a 410's relist is routine.
#[derive(Clone, Debug, Default)]
pub struct Relisting(Arc<Mutex<BTreeMap<usize, String>>>);

impl Relisting {
    /// `Err(reason)` while a kind restarted by the detector waits for its new list, e.g.
    /// `relisting Ingress after 10m without events`.
    pub fn check(&self) -> Result<(), String> {
        match self.0.lock().expect("relisting lock").values().next() {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }

    fn start(&self, slot: usize, reason: String) {
        self.0.lock().expect("relisting lock").insert(slot, reason);
    }

    fn done(&self, slot: usize) {
        self.0.lock().expect("relisting lock").remove(&slot);
    }
}

/// The idle-watch detector's settings: `--watch-idle-timeout` (`None`: off) and the
/// `watch_restarts_total` counter.
#[derive(Clone, Debug)]
pub struct Idle {
    timeout: Option<Duration>,
    restarts: Family<KindLabel, Counter>,
}

impl Idle {
    pub fn new(timeout: Option<Duration>, metrics: &Metrics) -> Self {
        Idle {
            timeout,
            restarts: metrics.watch_restarts.clone(),
        }
    }

    /// Resolves when a watch quiet since `since` has been quiet too long; never when off.
    async fn expired(&self, since: Instant) {
        match self.timeout {
            Some(t) => tokio::time::sleep_until(since + t).await,
            None => std::future::pending().await,
        }
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
    ingress_routes: Option<Store<IngressRoute>>,
    ingress_route_tcps: Option<Store<IngressRouteTcp>>,
    http_proxies: Option<Store<HttpProxy>>,
    istio_gateways: Option<Store<IstioGateway>>,
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
        let ingress_routes = state(&self.ingress_routes);
        let ingress_route_tcps = state(&self.ingress_route_tcps);
        let http_proxies = state(&self.http_proxies);
        let istio_gateways = state(&self.istio_gateways);
        let sources = Sources {
            ingresses: ingresses.iter().map(AsRef::as_ref).collect(),
            ingress_classes: classes.iter().map(AsRef::as_ref).collect(),
            gateways: gateways.iter().map(AsRef::as_ref).collect(),
            http_routes: http.iter().map(AsRef::as_ref).collect(),
            grpc_routes: grpc.iter().map(AsRef::as_ref).collect(),
            tls_routes: tls.iter().map(AsRef::as_ref).collect(),
            ingress_routes: ingress_routes.iter().map(AsRef::as_ref).collect(),
            ingress_route_tcps: ingress_route_tcps.iter().map(AsRef::as_ref).collect(),
            http_proxies: http_proxies.iter().map(AsRef::as_ref).collect(),
            istio_gateways: istio_gateways.iter().map(AsRef::as_ref).collect(),
        };
        hostnames::desired_without_origins(&sources, &self.filters, policy)
    }
}

/// Running watches: the caches, the engine's `changes` and `synced` signals, the kinds being
/// relisted (for `/readyz`), and the tasks.
pub struct Watches {
    pub stores: Stores,
    pub changes: watch::Receiver<u64>,
    pub synced: watch::Receiver<bool>,
    pub relisting: Relisting,
    /// Where each kind is read (discovery's task is among `tasks`).
    pub places: Places,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Starts one watch per configured kind, each at the first of its places the cluster serves
/// (asked again every `discovery`: `placement`); they run until `stop`. An object that does
/// not deserialize is reported on `notifier` and left out, not the whole list. A watch quiet
/// for `idle`'s timeout is restarted with a fresh list.
pub fn start(
    client: &Client,
    filters: &Filters,
    notifier: &Notifier,
    (idle, discovery): (Idle, Duration),
    stop: &CancellationToken,
) -> Watches {
    let read: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| k.is_read(filters.opt_ins, filters.reads_ingress_classes()))
        .collect();
    let (places, discovering) = placement::start(client, &read, discovery, stop);
    let notifier = &notifier.clone().reading_at(places.clone());
    let mut w = Starter {
        client,
        filters,
        places: places.clone(),
        progress: Progress::new(),
        notifier,
        idle,
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
        ingress_routes: w.follow(),
        ingress_route_tcps: w.follow(),
        http_proxies: w.follow(),
        istio_gateways: w.follow(),
    };
    w.tasks.extend(discovering);
    Watches {
        stores,
        changes: w.progress.changes_tx.subscribe(),
        synced: w.progress.synced_tx.subscribe(),
        relisting: w.progress.relisting.clone(),
        places,
        tasks: w.tasks,
    }
}

/// What starting one watch per kind needs.
struct Starter<'a> {
    client: &'a Client,
    filters: &'a Filters,
    places: Places,
    progress: Progress,
    notifier: &'a Notifier,
    idle: Idle,
    stop: &'a CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Starter<'_> {
    /// Watches kind `K` when this configuration reads it.
    fn follow<K>(&mut self) -> Option<Store<K>>
    where
        K: SourceObject + Project + Default + Debug + Send + Sync + 'static,
    {
        let f = self.filters;
        K::KIND
            .is_read(f.opt_ins, f.reads_ingress_classes())
            .then(|| {
                follow::<K>(
                    self.client.clone(),
                    Reading {
                        optional: K::KIND.is_crd(),
                        ingress_hosts: f.ingress_hosts,
                        places: self.places.clone(),
                    },
                    &self.progress,
                    self.notifier,
                    &self.idle,
                    self.stop,
                    &mut self.tasks,
                )
            })
    }
}

/// How one kind is read.
struct Reading {
    /// A 404 (CRD not installed) counts as an empty, synced list.
    optional: bool,
    /// Which Ingress fields count (the rest of a projection is dropped: [`Project::narrow`]).
    ingress_hosts: IngressHosts,
    /// Where the kind is served (its watch moves when that changes).
    places: Places,
}

/// The API of kind `kind` at `place`.
fn api_at<K: Resource>(client: &Client, kind: Kind, place: Place) -> Api<Projected<K>> {
    Api::all_with(client.clone(), &resource_at(kind, place))
}

/// Watches one kind into a store until `stop`, at the place the cluster serves it.
///
/// The store's writer lives in the task rather than in a `reflect` adapter, so that the idle
/// detector can drop a quiet watch (with any request hanging in it) and start a new one into
/// the same store: the store keeps the old objects until the new list is complete, then holds
/// exactly that list (an object deleted while the watch was dead goes away). A restart spawns
/// nothing; the old stream is simply dropped. A move to another place (discovery found the
/// kind served at a more preferred one, or only at another) is such a restart at the new place:
/// the kind's objects stay in the store, and so its hosts in the desired set, until the list
/// there is complete.
fn follow<K>(
    client: Client,
    reading: Reading,
    progress: &Progress,
    notifier: &Notifier,
    idle: &Idle,
    stop: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: SourceObject + Project + Default + Clone + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = WatchedKind {
        kind: K::KIND,
        optional: reading.optional,
        missing: false,
        listed_before: false,
        // A failure repeating every retry is logged once per doubling, not every time.
        repeats: Repeats::default(),
        slot: progress.slot(),
        progress: progress.clone(),
        idle: idle.clone(),
        place: K::KIND.preferred(),
    };
    // Exported at 0 from the start, so an alert on its increase sees the first restart.
    if kind.idle.timeout.is_some() {
        let _ = kind.restarts();
    }
    let watch = Follow {
        client,
        kind,
        reading,
        writer,
        store: reader.clone(),
        // Kept across restarts, so a relist does not report the same unreadable object again.
        unreadable: Unreadable::new(notifier.clone()),
        stop: stop.clone(),
    };
    tasks.push(tokio::spawn(watch.run()));
    reader
}

/// One kind's watch task.
struct Follow<K: Resource<DynamicType = ()> + Clone + 'static> {
    client: Client,
    kind: WatchedKind,
    reading: Reading,
    writer: reflector::store::Writer<K>,
    store: Store<K>,
    unreadable: Unreadable,
    stop: CancellationToken,
}

impl<K> Follow<K>
where
    K: SourceObject + Project + Default + Clone + Debug + Send + Sync + 'static,
{
    async fn run(mut self) {
        let kind = K::KIND;
        self.kind.place = tokio::select! {
            () = self.stop.cancelled() => return,
            place = self.reading.places.first(kind) => place,
        };
        self.kind.watching();
        // One pass per list: the first, then one after each idle restart or move.
        loop {
            let api = api_at::<K>(&self.client, kind, self.kind.place);
            let mut stream = Box::pin(list_watch(api).default_backoff());
            // Anything the stream yields is a sign of life: events, bookmarks, and errors too
            // (a failing watch is not silent; it is already retrying with backoff, and a kind
            // whose CRD is missing must not be "restarted" every timeout).
            let mut alive_at = Instant::now();
            loop {
                let item = tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = self.kind.idle.expired(alive_at) => {
                        self.kind.restart_idle(alive_at);
                        break;
                    }
                    place = self.reading.places.moved(kind, self.kind.place) => {
                        self.kind.moved(place);
                        break;
                    }
                    item = stream.next() => item,
                };
                alive_at = Instant::now();
                match item {
                    // The list/watch stream never ends on its own.
                    None => return,
                    Some(Ok(Seen::Bookmark)) => {}
                    Some(Ok(Seen::Event(event))) => self.apply(event),
                    Some(Err(e)) => self.kind.failed(&e),
                }
            }
        }
    }

    fn apply(&mut self, event: Event<Projected<K>>) {
        let Some(event) = self.unreadable.screen(event) else {
            return;
        };
        let ingress_hosts = self.reading.ingress_hosts;
        let event = event.modify(|k| k.narrow(ingress_hosts));
        self.writer.apply_watcher_event(&event);
        match event {
            Event::InitDone => self.kind.listed(self.store.len()),
            Event::Apply(_) | Event::Delete(_) => self.kind.progress.bump(),
            Event::Init | Event::InitApply(_) => {}
        }
    }
}

/// One watched kind as its task reports on it: logs, the restart counter, readiness.
struct WatchedKind {
    kind: Kind,
    /// Where it is read now.
    place: Place,
    /// A 404 (CRD not installed) counts as an empty, synced list.
    optional: bool,
    /// The CRD was found missing (logged once until it is installed).
    missing: bool,
    /// A list has come in: the rights were there (a later 403 is likely a starting server's).
    listed_before: bool,
    repeats: Repeats,
    /// This kind's place in `progress`.
    slot: usize,
    progress: Progress,
    idle: Idle,
}

impl WatchedKind {
    fn restarts(&self) -> Counter {
        self.idle.restarts.get_or_create_owned(&KindLabel {
            kind: self.kind.as_str().to_string(),
        })
    }

    /// The watch starts at the place found; said when that is not the kind's first.
    fn watching(&self) {
        let (kind, place) = (self.kind, self.place);
        if place != kind.preferred() {
            tracing::info!(
                %kind,
                %place,
                "{kind} is not served at {}: reading it at {place}",
                kind.preferred()
            );
        }
    }

    /// Discovery found the kind served at `place` now: the watch moves there (restarts with a
    /// list there, into the same store).
    fn moved(&mut self, place: Place) {
        let (kind, from) = (self.kind, self.place);
        tracing::info!(
            %kind,
            %place,
            from = %from,
            "{kind} is served at {place} now: moving its watch there from {from}; its objects \
             are kept until the list there is complete"
        );
        self.place = place;
        self.missing = false;
        self.repeats.reset();
        self.listed_before = false;
    }

    /// The watch has been quiet since `alive_at` past the idle timeout: counted, logged, and
    /// the kind marked relisting until the fresh list is in.
    fn restart_idle(&self, alive_at: Instant) {
        let kind = &self.kind;
        // Whole seconds: `10m`, not `10m 1ms` of timer granularity.
        let quiet = Duration::from_secs(alive_at.elapsed().as_secs());
        let quiet = humantime::format_duration(quiet);
        let restarts = self.restarts();
        restarts.inc();
        tracing::warn!(
            %kind,
            quiet = %quiet,
            restarts = restarts.get(),
            "the {kind} watch delivered neither an event nor a bookmark for \
             {quiet}: restarting it with a fresh list. Watches through a tunnel \
             or proxy that drops idle streams (konnectivity, an HTTP proxy or load \
             balancer in front of the API server) stop like this without an \
             error; check its idle timeout"
        );
        self.progress.relisting.start(
            self.slot,
            format!("relisting {kind} after {quiet} without events"),
        );
    }

    /// A complete list of `objects` is in the store.
    fn listed(&mut self, objects: usize) {
        let kind = &self.kind;
        self.repeats.reset();
        self.listed_before = true;
        if self.missing {
            tracing::info!(%kind, "the CRD is installed now; watching it");
            self.missing = false;
        }
        tracing::debug!(%kind, objects, "list received");
        self.progress.relisting.done(self.slot);
        self.progress.mark_synced(self.slot);
        self.progress.bump();
    }

    /// The list or watch failed (it retries with backoff): a missing optional CRD counts as
    /// an empty list; anything else is logged, once per doubling of a repeating failure.
    fn failed(&mut self, e: &watcher::Error) {
        let (kind, place) = (self.kind, self.place);
        let resource = kind.plural();
        let cause = Cause::of_watch(e);
        if cause == Cause::NotFound && self.optional {
            if !self.missing {
                let places: Vec<String> = kind.places().iter().map(Place::to_string).collect();
                tracing::warn!(
                    %kind,
                    "{}/{resource} is not served (CRD not installed; {kind} is read at the \
                     first of {} that the cluster serves, none yet): skipping {kind} objects; \
                     checking again periodically",
                    place.group,
                    places.join(", ")
                );
                self.missing = true;
            }
            self.progress.relisting.done(self.slot);
            self.progress.mark_synced(self.slot);
        } else if cause == Cause::Expired {
            // Routine (a compaction, a restarted API server): the list that follows is the
            // recovery, so no failure is counted and nothing is to be done.
            tracing::info!(%kind, error = %e, "cannot resume the {kind} watch: {}", cause.hint(""));
        } else if let Some(failures) = self.repeats.failed(cause) {
            let grant = format!(
                "grant the controller's ServiceAccount `list` and `watch` on \
                 {resource} (apiGroup {:?}) cluster-wide",
                place.group
            );
            let hint = if self.listed_before {
                cause.hint_after_success(&grant)
            } else {
                cause.hint(&grant)
            };
            tracing::warn!(
                %kind,
                error = %e,
                failures,
                "cannot list/watch {kind}: {hint}; retrying with backoff"
            );
        }
    }
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
    /// The Event names the object at its kind's first place; the notifier (`reading_at`) names
    /// it where the cluster serves it.
    fn screen<K>(&mut self, e: Event<Projected<K>>) -> Option<Event<K>>
    where
        K: Resource + Default,
        K::DynamicType: Default,
    {
        Some(match e {
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
            Event::InitApply(Projected(Ok(k))) => Event::InitApply(k),
            Event::Apply(Projected(Ok(k))) => Event::Apply(k),
            Event::Delete(Projected(Ok(k))) => Event::Delete(k),
            Event::InitApply(Projected(Err(bad))) => {
                self.report::<K>(&bad);
                return None;
            }
            Event::Apply(Projected(Err(bad))) => {
                self.report::<K>(&bad);
                Event::Delete(placeholder(bad))
            }
            Event::Delete(Projected(Err(bad))) => Event::Delete(placeholder(bad)),
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

/// What [`list_watch`] yields besides errors.
enum Seen<K> {
    /// An event for the store, with kube-runtime's watcher semantics (`Init`, `InitApply`s,
    /// `InitDone`, then `Apply`/`Delete`).
    Event(Event<K>),
    /// A BOOKMARK: nothing changed, but the watch is alive.
    Bookmark,
}

/// Objects per list page (kube-runtime's watcher default, client-go's too).
const PAGE_SIZE: u32 = 500;
/// The server-side timeout of each watch request; the API server ends the watch then, with a
/// bookmark shortly before, and it is resumed from the last resourceVersion (kube's default).
const WATCH_TIMEOUT_SECS: u32 = 290;
/// A watch response that has been silent this long is dead (the server would have ended it at
/// its timeout): it is dropped and resumed from the last resourceVersion, as kube-runtime's
/// watcher does. Cheap, but it only covers a stalled body; the idle detector covers the rest.
const WATCH_SILENCE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 5);

/// A paged list, then a watch from its resourceVersion with bookmarks
/// (`allowWatchBookmarks=true`), resumed from the last resourceVersion seen when it ends, and
/// started over with a new list after a 410 Gone. Errors are yielded and the next poll retries
/// (put a backoff in front).
///
/// Why not kube-runtime's `watcher`: in kube-runtime 4.2 it asks for bookmarks but consumes
/// them inside its state machine (a `WatchEvent::Bookmark` only updates its resourceVersion and
/// loops, `watcher.rs` `step_trampolined`), and so is the re-watch after each server-side
/// timeout; its `step` and states are private, so nothing of either reaches its stream. A quiet
/// but healthy watch would look exactly like a dead one to the idle detector. `Api::watch` does
/// yield `WatchEvent::Bookmark`, so this is the same list-then-watch on that level, with the
/// bookmarks passed on as [`Seen::Bookmark`]. A re-watch is not yielded: it is no sign that
/// events arrive.
fn list_watch<K>(api: Api<K>) -> impl Stream<Item = Result<Seen<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let state = ListWatch {
        api,
        phase: Phase::Start,
    };
    // `unfold` keeps the step in flight inside the stream, so a `select!` that drops
    // `stream.next()` loses nothing.
    futures::stream::unfold(state, |mut s| async move {
        let item = s.step().await;
        Some((item, s))
    })
}

struct ListWatch<K> {
    api: Api<K>,
    phase: Phase<K>,
}

enum Phase<K> {
    /// Begin a new list (the store starts buffering at `Init`).
    Start,
    /// Fetch the list page after `token` (`None`: the first page).
    Fetch { token: Option<String> },
    /// Hand out a fetched page; then fetch the next one, or watch from `version`.
    Page {
        items: VecDeque<K>,
        token: Option<String>,
        version: String,
    },
    /// Open the watch from `version`.
    Open { version: String },
    Watching {
        version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    },
}

impl<K> ListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    /// The next item; steps that yield nothing (a list request, opening or resuming the watch)
    /// loop here.
    async fn step(&mut self) -> Result<Seen<K>, watcher::Error> {
        use watcher::Error as E;
        loop {
            // On an early return the phase stays `Start`: the error restarts the list.
            match std::mem::replace(&mut self.phase, Phase::Start) {
                Phase::Start => {
                    self.phase = Phase::Fetch { token: None };
                    return Ok(Seen::Event(Event::Init));
                }
                Phase::Fetch { token } => {
                    let mut params = ListParams::default().limit(PAGE_SIZE);
                    params.continue_token = token;
                    let page = self.api.list(&params).await.map_err(E::InitialListFailed)?;
                    let version = page.metadata.resource_version.filter(|v| !v.is_empty());
                    let token = page.metadata.continue_.filter(|t| !t.is_empty());
                    if version.is_none() && token.is_none() {
                        return Err(E::NoResourceVersion);
                    }
                    self.phase = Phase::Page {
                        items: page.items.into(),
                        token,
                        version: version.unwrap_or_default(),
                    };
                }
                Phase::Page {
                    mut items,
                    token,
                    version,
                } => {
                    if let Some(item) = items.pop_front() {
                        self.phase = Phase::Page {
                            items,
                            token,
                            version,
                        };
                        return Ok(Seen::Event(Event::InitApply(item)));
                    }
                    if token.is_some() {
                        self.phase = Phase::Fetch { token };
                    } else {
                        self.phase = Phase::Open { version };
                        return Ok(Seen::Event(Event::InitDone));
                    }
                }
                Phase::Open { version } => {
                    // WatchParams' default asks for bookmarks.
                    let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
                    match self.api.watch(&params, &version).await {
                        Ok(stream) => {
                            self.phase = Phase::Watching {
                                version,
                                stream: stream.boxed(),
                            }
                        }
                        Err(e) => {
                            self.phase = Phase::Open { version };
                            return Err(E::WatchStartFailed(e));
                        }
                    }
                }
                Phase::Watching { version, stream } => {
                    if let Some(item) = self.watched(version, stream).await {
                        return item;
                    }
                }
            }
        }
    }

    /// The watch's next event, in phase `Watching` from `version`; `None` when the watch
    /// ended and is to be opened again (the phase says from where).
    async fn watched(
        &mut self,
        version: String,
        mut stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    ) -> Option<Result<Seen<K>, watcher::Error>> {
        use watcher::Error as E;
        let next = tokio::time::timeout(WATCH_SILENCE, stream.next()).await;
        let event = match next {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(e))) => {
                // A broken body ends the stream at the next poll.
                self.phase = Phase::Watching { version, stream };
                return Some(Err(E::WatchFailed(e)));
            }
            // Ended (the server-side timeout, a closed connection) or silent past it: resume
            // from where it was.
            Ok(None) | Err(_) => {
                tracing::debug!(%version, "watch ended; resuming it");
                self.phase = Phase::Open { version };
                return None;
            }
        };
        let (seen, version) = match event {
            WatchEvent::Added(k) | WatchEvent::Modified(k) => {
                let v = k.resource_version().unwrap_or_default();
                (Seen::Event(Event::Apply(k)), v)
            }
            WatchEvent::Deleted(k) => {
                let v = k.resource_version().unwrap_or_default();
                (Seen::Event(Event::Delete(k)), v)
            }
            WatchEvent::Bookmark(b) => (Seen::Bookmark, b.metadata.resource_version),
            WatchEvent::Error(status) => {
                // 410 Gone: `version` is too old to resume from; list again.
                if status.code != 410 {
                    self.phase = Phase::Watching { version, stream };
                }
                return Some(Err(E::WatchError(status)));
            }
        };
        if version.is_empty() {
            return Some(Err(E::NoResourceVersion));
        }
        self.phase = Phase::Watching { version, stream };
        Some(Ok(seen))
    }
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
            Projected::<Ingress>(Err(InvalidObject {
                error: "invalid type".into(),
                metadata: meta(name),
            }))
        };
        let good = |name: &str| {
            Projected(Ok(Ingress {
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

    /// The list/watch yields the bookmarks kube-runtime's watcher swallows, resumes an ended
    /// watch from the last resourceVersion (a bookmark's too) without yielding anything, and
    /// lists again after a 410.
    #[tokio::test(start_paused = true)]
    async fn list_watch_yields_bookmarks_and_resumes_quietly() {
        use crate::test_api::{list, route, Answer};
        const LIST: &str = "/apis/networking.k8s.io/v1/ingresses?&limit=500";
        const WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=";
        let ingress = |name: &str, rv: &str| {
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": name, "namespace": "web", "resourceVersion": rv}
            })
        };
        let mut watches = 0;
        let (client, api) = route(move |s| {
            if !s.is_watch() {
                return Answer::Json(
                    200,
                    list(
                        "networking.k8s.io/v1",
                        "IngressList",
                        "100",
                        vec![ingress("a", "90")],
                    ),
                );
            }
            watches += 1;
            match watches {
                // Ends after one bookmark, as at the server-side timeout.
                1 => Answer::Events(vec![json!({"type": "BOOKMARK", "object": {
                    "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                    "metadata": {"resourceVersion": "150"}
                }})]),
                2 => Answer::Events(vec![
                    json!({"type": "ADDED", "object": ingress("b", "160")}),
                    json!({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Expired", "message": "too old resource version", "code": 410
                    }}),
                ]),
                _ => Answer::Hold,
            }
        });
        let mut stream = Box::pin(list_watch(Api::<Ingress>::all(client)));
        let mut got = Vec::new();
        for _ in 0..9 {
            got.push(match stream.next().await.unwrap() {
                Ok(Seen::Bookmark) => "bookmark".to_string(),
                Ok(Seen::Event(Event::Init)) => "init".to_string(),
                Ok(Seen::Event(Event::InitDone)) => "init-done".to_string(),
                Ok(Seen::Event(Event::InitApply(k))) => format!("init-apply {}", k.name_any()),
                Ok(Seen::Event(Event::Apply(k))) => format!("apply {}", k.name_any()),
                Ok(Seen::Event(Event::Delete(k))) => format!("delete {}", k.name_any()),
                Err(e) => format!("error {}", Cause::of_watch(&e).hint("")),
            });
        }
        assert_eq!(
            got,
            [
                "init",
                "init-apply a",
                "init-done",
                "bookmark",
                "apply b",
                "error its resourceVersion is too old (410 Gone): etcd compacted it or the API server restarted; listing again",
                "init",
                "init-apply a",
                "init-done",
            ]
        );
        // The watch after the new list is held open: nothing more is yielded.
        assert!(tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .is_err());
        let calls: Vec<String> = api.calls().into_iter().map(|(_, u)| u).collect();
        let want = [
            LIST.to_string(),
            format!("{WATCH}100"),
            format!("{WATCH}150"),
            LIST.to_string(),
            format!("{WATCH}100"),
        ];
        assert_eq!(calls, want);
    }

    #[test]
    fn relisting_is_reported_until_done() {
        let r = Relisting::default();
        assert_eq!(r.check(), Ok(()));
        r.start(1, "relisting HTTPRoute after 10m without events".into());
        r.start(0, "relisting Ingress after 10m without events".into());
        assert_eq!(
            r.check(),
            Err("relisting Ingress after 10m without events".into())
        );
        r.done(0);
        assert!(r.check().unwrap_err().contains("HTTPRoute"));
        r.done(1);
        assert_eq!(r.check(), Ok(()));
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
