//! Kubernetes Events (`events.k8s.io/v1`, reporter `ouroboros-controller`) for what an object's
//! owner should see in `kubectl describe`: `HostnameRejected` on an Ingress or route,
//! `HostnameConflict` on an object that lost a hostname to another target's object,
//! `CorefileUnparseable` and `BlockReverted` on the CoreDNS ConfigMap, `RecordKept` on an
//! external-dns object kept until the one replacing it is written, `WriteForbidden` on what RBAC
//! did not let us write, `RemovalHeld` on the DNS target (or the controller's Pod) when a write
//! that removes most hostnames is held. Published from a task so the sync engine never waits on the API.
//!
//! Each distinct message is an Event of its own; only a repeat of the same message counts up
//! (`series`) on the Event already sent. kube-runtime's `Recorder` is not used because it counts
//! up any Event with the same object, reason and action, so a second message (another host lost,
//! another winner, a state restored) would show the first one's note.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::hostnames::{kinds::Kind, model::Conflict, model::ObjectRef, model::Rejected};
use super::placement::Places;
use crate::dns::write::error::ObjectKey;
use crate::target::TargetRule;

pub const REPORTER: &str = "ouroboros-controller";
pub const HOSTNAME_REJECTED: &str = "HostnameRejected";
pub const HOSTNAME_CONFLICT: &str = "HostnameConflict";
pub const HAIRPIN_SKIPPED: &str = "HairpinSkipped";
/// A target skipped for ipMode Proxy is hairpinned again: a reason of its own (and a `Normal`
/// Event), so it never reads as another skip.
pub const HAIRPIN_RESTORED: &str = "HairpinRestored";
pub const COREFILE_UNPARSEABLE: &str = "CorefileUnparseable";
pub const BLOCK_REVERTED: &str = "BlockReverted";
pub const BLOCK_TOO_LARGE: &str = "BlockTooLarge";
/// The block's reload would exceed CoreDNS's memory limit (`dns::reload_memory`): not written.
pub const BLOCK_RELOAD_TOO_LARGE: &str = "BlockReloadTooLarge";
pub const PROXY_ADDRESS_MISSING: &str = "ProxyAddressMissing";
pub const HOSTNAME_SHADOWED: &str = "HostnameShadowed";
pub const HOSTNAME_REWRITTEN: &str = "HostnameRewritten";
pub const OBJECT_UNREADABLE: &str = "ObjectUnreadable";
pub const RECORD_KEPT: &str = "RecordKept";
pub const WRITE_FORBIDDEN: &str = "WriteForbidden";
pub const REMOVAL_HELD: &str = "RemovalHeld";
/// The API keeps at most 1 kB of an Event's note.
const MAX_NOTE: usize = 1000;

/// One Warning Event to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

pub fn source_reference(o: &ObjectRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(o.kind.api_version()),
        kind: Some(o.kind.as_str().into()),
        namespace: Some(o.namespace.clone()),
        name: Some(o.name.clone()),
        ..ObjectReference::default()
    }
}

pub fn key_reference(k: &ObjectKey) -> ObjectReference {
    ObjectReference {
        api_version: Some(k.api_version.into()),
        kind: Some(k.kind.into()),
        namespace: Some(k.namespace.clone()),
        name: Some(k.name.clone()),
        ..ObjectReference::default()
    }
}

/// The `HostnameRejected` notice for one rejected name.
pub fn rejected_notice(r: &Rejected) -> Notice {
    Notice {
        regarding: source_reference(&r.object),
        reason: HOSTNAME_REJECTED,
        action: "Hairpin",
        note: format!(
            "hostname {:?} is not hairpinned by ouroboros: {} ({})",
            r.raw,
            r.reason.explain(),
            r.reason.as_str()
        ),
    }
}

/// The `HostnameConflict` notices: one per losing object, naming each host it lost and the
/// object and target that won it (`rules` names the targets).
pub fn conflict_notices(conflicts: &[&Conflict], rules: &[TargetRule]) -> Vec<Notice> {
    let mut by_loser: std::collections::BTreeMap<&ObjectRef, Vec<&Conflict>> = Default::default();
    for c in conflicts {
        by_loser.entry(&c.loser).or_default().push(c);
    }
    by_loser
        .into_iter()
        .map(|(loser, lost)| {
            let what: Vec<String> = lost
                .iter()
                .map(|c| {
                    format!(
                        "{} goes to target {} through {}",
                        c.host,
                        c.winner_target.name(rules),
                        c.winner
                    )
                })
                .collect();
            // Long lists are cut to the API's limit when published.
            let note = format!(
                "not hairpinned through target {}: {}; set the {} annotation (higher wins) to \
                 choose",
                lost[0].loser_target.name(rules),
                what.join("; "),
                super::hostnames::targets::PRIORITY_ANNOTATION
            );
            Notice {
                regarding: source_reference(loser),
                reason: HOSTNAME_CONFLICT,
                action: "Hairpin",
                note,
            }
        })
        .collect()
}

/// Which findings (an object and a name: a rejected name, a host lost in a conflict) were
/// already reported, so each gets one Event rather than one per sync. A finding that
/// disappears is forgotten, so it is reported again if it comes back.
#[derive(Debug, Default)]
pub struct Reported {
    seen: BTreeSet<(ObjectRef, String)>,
}

impl Reported {
    /// The items whose `key` was not reported yet; remembers the current set.
    pub fn fresh<'a, T>(
        &mut self,
        items: &'a [T],
        key: impl Fn(&T) -> (ObjectRef, String),
    ) -> Vec<&'a T> {
        let now: BTreeSet<(ObjectRef, String)> = items.iter().map(&key).collect();
        let mut out = Vec::new();
        let mut emitted = BTreeSet::new();
        for item in items {
            let k = key(item);
            if !self.seen.contains(&k) && emitted.insert(k) {
                out.push(item);
            }
        }
        self.seen = now;
        out
    }
}

/// The key of a rejection in [`Reported`].
pub fn rejection_key(r: &Rejected) -> (ObjectRef, String) {
    (r.object.clone(), r.raw.clone())
}

/// The key of a lost host in [`Reported`].
pub fn conflict_key(c: &Conflict) -> (ObjectRef, String) {
    (c.loser.clone(), c.host.as_str().to_string())
}

/// Hands notices to the publishing task.
#[derive(Clone, Debug)]
pub struct Notifier {
    tx: Option<mpsc::UnboundedSender<Notice>>,
    /// Where each source kind is read: the `apiVersion` a notice about a source object names.
    places: Places,
}

impl Notifier {
    /// Drops every notice (dry run, tests).
    pub fn disabled() -> Self {
        Notifier {
            tx: None,
            places: Places::fixed(),
        }
    }

    /// The same, naming source objects at the places `places` says they are read at.
    pub fn reading_at(self, places: Places) -> Self {
        Notifier { places, ..self }
    }

    pub fn send(&self, mut n: Notice) {
        let Some(tx) = &self.tx else { return };
        // A notice names a source object at its kind's first place (`source_reference`, pure,
        // knows no cluster); the object is read, and so named, where the cluster serves it.
        let r = &mut n.regarding;
        let read = r
            .api_version
            .as_deref()
            .zip(r.kind.as_deref())
            .and_then(|(v, k)| Kind::at(v, k));
        if let Some(kind) = read {
            r.api_version = Some(self.places.of(kind).api_version());
        }
        let _ = tx.send(n);
    }
}

/// How long a repeat of a message counts up on the Event already sent (its `series`) rather
/// than making a new one. The API server keeps Events for an hour by default (`--event-ttl`), so
/// an Event last seen within this window is still there to be counted up.
const SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// What makes two notices the same Event: the object, reason, action and the note itself. The
/// note is part of it because the API server never changes an Event's note after it is created
/// (an update may only count it up), so a new message on the same object and reason must be an
/// Event of its own, or `kubectl describe` shows the first message for every later one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// An Event already created, with what its next repeat counts up from.
#[derive(Clone, Debug)]
struct Sent {
    namespace: String,
    name: String,
    count: i32,
    last: tokio::time::Instant,
}

/// What to send the API server for one notice.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// A new Event (`POST`).
    Create {
        namespace: String,
        event: Box<K8sEvent>,
    },
    /// A repeat of an Event created earlier: a merge patch of its `series` (`PATCH`).
    Repeat {
        namespace: String,
        name: String,
        series: EventSeries,
    },
}

/// The API keeps at most 1 kB of a note; a longer one is cut at a character boundary.
fn cut_note(note: &str) -> String {
    let mut cut = note.len().min(MAX_NOTE);
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    note[..cut].to_string()
}

/// `Normal` for a notice that tells of a fault gone away, `Warning` for every other.
fn event_type(reason: &str) -> &'static str {
    if reason == HAIRPIN_RESTORED {
        "Normal"
    } else {
        "Warning"
    }
}

/// Turns notices into Event requests: each distinct message is created once, and a repeat of
/// the same message within the series window (30 minutes) counts up the Event created for it.
#[derive(Debug)]
pub struct Publisher {
    controller: String,
    instance: String,
    sent: std::collections::HashMap<SeriesKey, Sent>,
}

impl Publisher {
    pub fn new(controller: &str, instance: &str) -> Self {
        Publisher {
            controller: controller.into(),
            instance: instance.into(),
            sent: Default::default(),
        }
    }

    /// The request for `n` at `now` (monotonic, for the series window) and `wall` (the time
    /// written into the Event).
    pub fn request(&mut self, n: &Notice, now: tokio::time::Instant, wall: Timestamp) -> Request {
        self.sent
            .retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
        let note = cut_note(&n.note);
        let r = &n.regarding;
        let key = SeriesKey {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            reason: n.reason,
            action: n.action,
            note: note.clone(),
        };
        if let Some(s) = self.sent.get_mut(&key) {
            s.count += 1;
            s.last = now;
            return Request::Repeat {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                series: EventSeries {
                    count: s.count,
                    last_observed_time: MicroTime(wall),
                },
            };
        }
        // Events of cluster-scoped objects go to `default`, as kubectl's do.
        let namespace = r.namespace.clone().unwrap_or_else(|| "default".into());
        // The object's name and the creation time, as every Kubernetes component names them.
        let name = format!(
            "{}.{:x}",
            r.name.as_deref().unwrap_or(&self.controller),
            wall.as_nanosecond()
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(wall)),
            type_: Some(event_type(n.reason).into()),
            reason: Some(n.reason.into()),
            action: Some(n.action.into()),
            note: Some(note),
            regarding: Some(r.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        };
        self.sent.insert(
            key,
            Sent {
                namespace: namespace.clone(),
                name,
                count: 1,
                last: now,
            },
        );
        Request::Create {
            namespace,
            event: Box::new(event),
        }
    }

    /// The Event of a repeat is gone (deleted, or expired sooner than the window assumed):
    /// forget it, so that the next repeat creates it again.
    fn forget(&mut self, namespace: &str, name: &str) {
        self.sent
            .retain(|_, s| !(s.namespace == namespace && s.name == name));
    }
}

/// Sends one request; a repeat whose Event is gone is sent again as a new Event.
async fn send(
    client: &Client,
    publisher: &mut Publisher,
    n: &Notice,
    request: Request,
) -> Result<(), kube::Error> {
    match request {
        Request::Create { namespace, event } => {
            let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
            api.create(&PostParams::default(), &*event).await.map(drop)
        }
        Request::Repeat {
            namespace,
            name,
            series,
        } => {
            let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    publisher.forget(&namespace, &name);
                    let again = publisher.request(n, tokio::time::Instant::now(), Timestamp::now());
                    Box::pin(send(client, publisher, n, again)).await
                }
                r => r.map(drop),
            }
        }
    }
}

/// Starts the controller's publishing task; it ends when every [`Notifier`] is dropped.
pub fn spawn(client: Client, instance: String) -> (Notifier, JoinHandle<()>) {
    spawn_as(
        client,
        REPORTER,
        "the controller's ServiceAccount",
        instance,
    )
}

/// Starts the publishing task of `reporter` (`ouroboros-controller`, `ouroboros-edge`); it ends
/// when every [`Notifier`] is dropped. `account` names whose rights a 403 asks to extend.
pub fn spawn_as(
    client: Client,
    reporter: &'static str,
    account: &'static str,
    instance: String,
) -> (Notifier, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Notice>();
    let mut publisher = Publisher::new(reporter, &instance);
    let task = tokio::spawn(async move {
        let mut forbidden_logged = false;
        while let Some(n) = rx.recv().await {
            let request = publisher.request(&n, tokio::time::Instant::now(), Timestamp::now());
            let object = format!(
                "{} {}/{}",
                n.regarding.kind.as_deref().unwrap_or_default(),
                n.regarding.namespace.as_deref().unwrap_or_default(),
                n.regarding.name.as_deref().unwrap_or_default()
            );
            match send(&client, &mut publisher, &n, request).await {
                Ok(()) => tracing::debug!(reason = n.reason, %object, "published Event"),
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    if !forbidden_logged {
                        tracing::warn!(
                            reason = n.reason,
                            %object,
                            error = %s.message,
                            account,
                            "cannot publish Events: forbidden; grant the account `create` and \
                             `patch` on events (apiGroup events.k8s.io)"
                        );
                        forbidden_logged = true;
                    }
                }
                Err(e) => tracing::warn!(
                    reason = n.reason,
                    %object,
                    error = %e,
                    "publishing an Event failed"
                ),
            }
        }
    });
    (
        Notifier {
            tx: Some(tx),
            places: Places::fixed(),
        },
        task,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::hostnames::kinds::Kind;
    use crate::hostname::Rejection;

    fn rej(name: &str, raw: &str) -> Rejected {
        Rejected {
            object: ObjectRef {
                kind: Kind::Ingress,
                namespace: "web".into(),
                name: name.into(),
            },
            raw: raw.into(),
            reason: Rejection::ClusterDomain,
        }
    }

    #[test]
    fn each_rejection_is_reported_once_while_it_lasts() {
        let mut r = Reported::default();
        let a = rej("a", "x.svc.cluster.local");
        let b = rej("b", "x.svc.cluster.local");
        let round1 = [a.clone(), a.clone(), b.clone()];
        let k = rejection_key;
        let fresh: Vec<_> = r.fresh(&round1, k).into_iter().cloned().collect();
        assert_eq!(fresh, [a.clone(), b.clone()]);
        assert!(r.fresh(&round1, k).is_empty(), "not every sync");
        assert!(r.fresh(std::slice::from_ref(&b), k).is_empty());
        let fresh: Vec<_> = r.fresh(&round1, k).into_iter().cloned().collect();
        assert_eq!(fresh, [a], "came back after going away");
    }

    #[test]
    fn one_conflict_notice_per_losing_object_naming_the_winner() {
        use crate::controller::hostnames::targets::parse_target;
        use crate::target::Target;
        let rules = [parse_target("name=traefik,service=p,ingress-class=traefik").unwrap()];
        let obj = |name: &str| ObjectRef {
            kind: Kind::Ingress,
            namespace: "web".into(),
            name: name.into(),
        };
        let host = |h: &str| {
            crate::hostname::HostPolicy::new("cluster.local", &[], &[])
                .check(h)
                .unwrap()
        };
        let c = |h: &str| Conflict {
            host: host(h),
            winner: obj("new"),
            winner_target: Target::Named(0),
            loser: obj("old"),
            loser_target: Target::Default,
        };
        let all = [c("a.example.com"), c("b.example.com")];
        let mut r = Reported::default();
        let fresh = r.fresh(&all, conflict_key);
        let n = conflict_notices(&fresh, &rules);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].reason, "HostnameConflict");
        assert_eq!(n[0].regarding.name.as_deref(), Some("old"));
        assert_eq!(
            n[0].note,
            "not hairpinned through target default: a.example.com goes to target traefik \
             through Ingress web/new; b.example.com goes to target traefik through Ingress \
             web/new; set the ouroboros.io/priority annotation (higher wins) to choose"
        );
        assert!(
            r.fresh(&all, conflict_key).is_empty(),
            "once while it lasts"
        );
    }

    fn notice(object: &str, reason: &'static str, note: &str) -> Notice {
        Notice {
            regarding: source_reference(&ObjectRef {
                kind: Kind::Ingress,
                namespace: "web".into(),
                name: object.into(),
            }),
            reason,
            action: "Hairpin",
            note: note.into(),
        }
    }

    /// (notice, minutes after the first) -> created (with its note) or counted up (Event name
    /// index, count).
    #[test]
    fn each_message_is_an_event_of_its_own_and_repeats_count_up() {
        #[derive(Debug, PartialEq)]
        enum Want {
            Create(String),
            Repeat(usize, i32),
        }
        use Want::*;
        let c = |note: &str| Create(note.to_string());
        let steps: &[(&str, &'static str, &str, u64, Want)] = &[
            (
                "shop",
                HOSTNAME_CONFLICT,
                "lost a to x",
                0,
                c("lost a to x"),
            ),
            (
                "shop",
                HOSTNAME_CONFLICT,
                "lost b to y",
                1,
                c("lost b to y"),
            ),
            ("shop", HOSTNAME_CONFLICT, "lost a to x", 2, Repeat(0, 2)),
            ("shop", HOSTNAME_CONFLICT, "lost a to x", 3, Repeat(0, 3)),
            (
                "blog",
                HOSTNAME_CONFLICT,
                "lost a to x",
                3,
                c("lost a to x"),
            ),
            (
                "shop",
                HOSTNAME_REJECTED,
                "lost a to x",
                3,
                c("lost a to x"),
            ),
            ("shop", HOSTNAME_CONFLICT, "lost b to y", 4, Repeat(1, 2)),
            // 30 minutes after it was last seen, a repeat is a new Event.
            (
                "shop",
                HOSTNAME_CONFLICT,
                "lost a to x",
                33,
                c("lost a to x"),
            ),
        ];
        let t0 = tokio::time::Instant::now();
        let wall = Timestamp::from_second(1_700_000_000).unwrap();
        let mut p = Publisher::new(REPORTER, "pod-1");
        let mut created: Vec<String> = Vec::new();
        for (i, (object, reason, note, min, want)) in steps.iter().enumerate() {
            let at = std::time::Duration::from_secs(min * 60 + i as u64);
            let r = p.request(&notice(object, reason, note), t0 + at, wall + at);
            let got = match r {
                Request::Create { namespace, event } => {
                    assert_eq!(namespace, "web");
                    assert_eq!(event.reporting_controller.as_deref(), Some(REPORTER));
                    assert_eq!(event.reporting_instance.as_deref(), Some("pod-1"));
                    assert_eq!(event.type_.as_deref(), Some("Warning"));
                    assert_eq!(event.regarding.unwrap().name.as_deref(), Some(*object));
                    let name = event.metadata.name.unwrap();
                    assert!(name.starts_with(&format!("{object}.")), "{name}");
                    assert!(!created.contains(&name), "names are unique: {name}");
                    created.push(name);
                    Create(event.note.unwrap())
                }
                Request::Repeat { name, series, .. } => {
                    assert_eq!(series.last_observed_time, MicroTime(wall + at));
                    Repeat(
                        created.iter().position(|c| *c == name).unwrap(),
                        series.count,
                    )
                }
            };
            assert_eq!(&got, want, "step {i}");
        }
    }

    #[test]
    fn notes_are_cut_to_the_api_limit_and_a_restored_state_is_normal() {
        let mut p = Publisher::new(REPORTER, "pod-1");
        let long = "é".repeat(600);
        let now = tokio::time::Instant::now();
        let Request::Create { event, .. } = p.request(
            &notice("shop", HAIRPIN_RESTORED, &long),
            now,
            Timestamp::now(),
        ) else {
            panic!("a first notice is created");
        };
        let note = event.note.unwrap();
        assert_eq!(
            note.len(),
            1000,
            "600 two-byte characters cut at 1000 bytes"
        );
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert!(matches!(
            p.request(
                &notice("shop", HAIRPIN_RESTORED, &long),
                now,
                Timestamp::now()
            ),
            Request::Repeat { .. }
        ));
    }

    #[test]
    fn notice_names_the_object_and_why() {
        let n = rejected_notice(&rej("a", "x.svc.cluster.local"));
        assert_eq!(n.reason, "HostnameRejected");
        assert_eq!(n.regarding.kind.as_deref(), Some("Ingress"));
        assert_eq!(
            n.regarding.api_version.as_deref(),
            Some("networking.k8s.io/v1")
        );
        assert_eq!(n.regarding.namespace.as_deref(), Some("web"));
        assert!(n.note.contains("\"x.svc.cluster.local\""), "{}", n.note);
    }
}
