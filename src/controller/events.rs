//! Kubernetes Events (`events.k8s.io/v1`, reporter `ouroboros-controller`) for what an object's
//! owner should see in `kubectl describe`: `HostnameRejected` on an Ingress or route,
//! `HostnameConflict` on an object that lost a hostname to another target's object,
//! `CorefileUnparseable` and `BlockReverted` on the CoreDNS ConfigMap, `RecordKept` on an
//! external-dns object kept until the one replacing it is written, `WriteForbidden` on what RBAC
//! did not let us write. Published from a task so the sync engine never waits on the API.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::hostnames::{Conflict, ObjectRef, Rejected};
use crate::dns::write::error::ObjectKey;
use crate::target::TargetRule;

pub const REPORTER: &str = "ouroboros-controller";
pub const HOSTNAME_REJECTED: &str = "HostnameRejected";
pub const HOSTNAME_CONFLICT: &str = "HostnameConflict";
pub const HAIRPIN_SKIPPED: &str = "HairpinSkipped";
pub const COREFILE_UNPARSEABLE: &str = "CorefileUnparseable";
pub const BLOCK_REVERTED: &str = "BlockReverted";
pub const BLOCK_TOO_LARGE: &str = "BlockTooLarge";
pub const PROXY_ADDRESS_MISSING: &str = "ProxyAddressMissing";
pub const HOSTNAME_SHADOWED: &str = "HostnameShadowed";
pub const HOSTNAME_REWRITTEN: &str = "HostnameRewritten";
pub const OBJECT_UNREADABLE: &str = "ObjectUnreadable";
pub const RECORD_KEPT: &str = "RecordKept";
pub const WRITE_FORBIDDEN: &str = "WriteForbidden";
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

/// The log line of a hostname claimed by objects of two targets (the controller's and `render`'s).
pub fn warn_conflict(c: &Conflict, rules: &[TargetRule]) {
    tracing::warn!(
        hostname = %c.host,
        object = %c.loser,
        target = c.loser_target.name(rules),
        winner = %c.winner,
        winner_target = c.winner_target.name(rules),
        "hostname claimed by two targets; the winner's target answers for it"
    );
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
                super::hostnames::PRIORITY_ANNOTATION
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
pub struct Notifier(Option<mpsc::UnboundedSender<Notice>>);

impl Notifier {
    /// Drops every notice (dry run, tests).
    pub fn disabled() -> Self {
        Notifier(None)
    }

    pub fn send(&self, n: Notice) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(n);
        }
    }
}

/// Starts the publishing task; it ends when every [`Notifier`] is dropped.
pub fn spawn(client: Client, instance: String) -> (Notifier, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Notice>();
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: REPORTER.into(),
            instance: Some(instance),
        },
    );
    let task = tokio::spawn(async move {
        let mut forbidden_logged = false;
        while let Some(n) = rx.recv().await {
            let mut note = n.note.clone();
            if note.len() > MAX_NOTE {
                let mut cut = MAX_NOTE;
                while !note.is_char_boundary(cut) {
                    cut -= 1;
                }
                note.truncate(cut);
            }
            let ev = Event {
                type_: EventType::Warning,
                reason: n.reason.into(),
                note: Some(note),
                action: n.action.into(),
                secondary: None,
            };
            let object = format!(
                "{} {}/{}",
                n.regarding.kind.as_deref().unwrap_or_default(),
                n.regarding.namespace.as_deref().unwrap_or_default(),
                n.regarding.name.as_deref().unwrap_or_default()
            );
            match recorder.publish(&ev, &n.regarding).await {
                Ok(()) => tracing::debug!(reason = n.reason, %object, "published Event"),
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    if !forbidden_logged {
                        tracing::warn!(
                            reason = n.reason,
                            %object,
                            error = %s.message,
                            "cannot publish Events: forbidden; grant the controller's \
                             ServiceAccount `create` and `patch` on events (apiGroup \
                             events.k8s.io)"
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
    (Notifier(Some(tx)), task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::hostnames::Kind;
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
        use crate::controller::hostnames::parse_target;
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
