//! Kubernetes Events (`events.k8s.io/v1`, reporter `ouroboros-controller`) for what an object's
//! owner should see in `kubectl describe`: `HostnameRejected` on an Ingress or route,
//! `CorefileUnparseable` and `BlockReverted` on the CoreDNS ConfigMap. Published from a task
//! so the sync engine never waits on the API.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::hostnames::{ObjectRef, Rejected};
use crate::dns::sink::ObjectKey;

pub const REPORTER: &str = "ouroboros-controller";
pub const HOSTNAME_REJECTED: &str = "HostnameRejected";
pub const COREFILE_UNPARSEABLE: &str = "CorefileUnparseable";
pub const BLOCK_REVERTED: &str = "BlockReverted";
pub const BLOCK_TOO_LARGE: &str = "BlockTooLarge";
pub const PROXY_ADDRESS_MISSING: &str = "ProxyAddressMissing";
pub const HOSTNAME_SHADOWED: &str = "HostnameShadowed";
pub const OBJECT_UNREADABLE: &str = "ObjectUnreadable";
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

/// Which (object, name) rejections were already reported, so each gets one Event rather than
/// one per sync. A rejection that disappears is forgotten, so it is reported again if it
/// comes back.
#[derive(Debug, Default)]
pub struct Reported {
    seen: BTreeSet<(ObjectRef, String)>,
}

impl Reported {
    /// The rejections not reported yet; remembers the current set.
    pub fn fresh<'a>(&mut self, rejected: &'a [Rejected]) -> Vec<&'a Rejected> {
        let now: BTreeSet<(ObjectRef, String)> = rejected
            .iter()
            .map(|r| (r.object.clone(), r.raw.clone()))
            .collect();
        let mut out = Vec::new();
        let mut emitted = BTreeSet::new();
        for r in rejected {
            let key = (r.object.clone(), r.raw.clone());
            if !self.seen.contains(&key) && emitted.insert(key) {
                out.push(r);
            }
        }
        self.seen = now;
        out
    }
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
        let fresh: Vec<_> = r.fresh(&round1).into_iter().cloned().collect();
        assert_eq!(fresh, [a.clone(), b.clone()]);
        assert!(r.fresh(&round1).is_empty(), "not every sync");
        assert!(r.fresh(std::slice::from_ref(&b)).is_empty());
        let fresh: Vec<_> = r.fresh(&round1).into_iter().cloned().collect();
        assert_eq!(fresh, [a], "came back after going away");
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
