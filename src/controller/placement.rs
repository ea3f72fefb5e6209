//! Where each source kind is read: the first of its places (`Kind::places`, e.g. Istio's
//! Gateway at `networking.istio.io` v1, else v1beta1, else v1alpha3; Traefik's IngressRoute in
//! `traefik.io`, else `traefik.containo.us`) that the cluster serves, from the API's discovery
//! documents (`GET /apis/{group}/{version}`, one per place, each once however many kinds share
//! it). Checked at start and every `--source-discovery-interval` after, so a CRD installed or
//! upgraded later moves its kind's watch (`sources`), and the Events about an object name the
//! `apiVersion` it is read at (`events::Notifier`).
//!
//! A kind with one place is read there without asking. A kind served at none of its places is
//! read at its first (its watch then finds the CRD missing, reads it as empty and says so). A
//! discovery round that fails moves nothing; the first one failing, each kind is read at its
//! first place, so the watches start (and report what is wrong) rather than wait.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::core::ApiResource;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::hostnames::kinds::{group_versions, Kind, Place, Served};
use crate::kube_client::{Cause, Repeats};

/// The places found, shared by the watches and the Event publisher: `None` until the first
/// discovery round is done; a kind missing from the map is read at its first place.
#[derive(Clone, Debug)]
pub struct Places(watch::Receiver<Option<BTreeMap<Kind, Place>>>);

impl Places {
    /// Every kind at its first place, with no discovery (tests, and configurations reading no
    /// kind with more than one place).
    pub fn fixed() -> Self {
        Places(watch::channel(Some(BTreeMap::new())).1)
    }

    /// Where `kind` is read now.
    pub fn of(&self, kind: Kind) -> Place {
        self.0
            .borrow()
            .as_ref()
            .and_then(|m| m.get(&kind).copied())
            .unwrap_or_else(|| kind.preferred())
    }

    /// Where `kind` is read once the first discovery round is done (at once when there is
    /// none, or it has ended).
    pub async fn first(&mut self, kind: Kind) -> Place {
        let _ = self.0.wait_for(Option::is_some).await;
        self.of(kind)
    }

    /// Resolves with `kind`'s new place when discovery finds it served elsewhere than
    /// `current`; never when discovery has ended. Cancel-safe.
    pub async fn moved(&mut self, kind: Kind, current: Place) -> Place {
        loop {
            if self.0.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            let now = self.of(kind);
            if now != current {
                return now;
            }
        }
    }
}

/// Starts discovery for the `kinds` read, every `interval` until `stop`; with no kind of more
/// than one place, nothing is started.
pub fn start(
    client: &Client,
    kinds: &[Kind],
    interval: Duration,
    stop: &CancellationToken,
) -> (Places, Option<JoinHandle<()>>) {
    let asked = group_versions(kinds);
    if asked.is_empty() {
        return (Places::fixed(), None);
    }
    let kinds: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| k.places().len() > 1)
        .collect();
    let (tx, rx) = watch::channel(None);
    let (client, stop) = (client.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let mut repeats = Repeats::default();
        loop {
            let found = tokio::select! {
                () = stop.cancelled() => break,
                found = discover(&client, &asked) => found,
            };
            match found {
                Ok(served) => {
                    repeats.reset();
                    let found = kinds
                        .iter()
                        .map(|&k| (k, k.served_place(&served).unwrap_or_else(|| k.preferred())))
                        .collect();
                    tx.send_if_modified(|v| replace(v, Some(found)));
                }
                Err((place, e)) => {
                    failed(&mut repeats, place, &e);
                    // The first round: the watches start at each kind's first place.
                    tx.send_if_modified(|v| v.is_none() && replace(v, Some(BTreeMap::new())));
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
    });
    (Places(rx), Some(task))
}

fn replace<T: PartialEq>(slot: &mut T, new: T) -> bool {
    let changed = *slot != new;
    *slot = new;
    changed
}

/// A failed discovery round, logged once per doubling of a repeating failure.
fn failed(repeats: &mut Repeats, place: Place, e: &kube::Error) {
    let cause = Cause::of(e);
    if let Some(failures) = repeats.failed(cause) {
        let hint = cause.hint(
            "grant the controller's ServiceAccount `get` on the discovery paths under /apis \
             (the system:discovery ClusterRole, bound to every authenticated user by default)",
        );
        tracing::warn!(
            error = %e,
            failures,
            "cannot read the discovery document of {place}: {hint}; the source kinds stay \
             where they are read, and discovery is tried again"
        );
    }
}

/// The resources `asked` serve: each group version's discovery document; one not served
/// (404) lists nothing. Any other failure is returned with the group version it was for.
pub async fn discover(client: &Client, asked: &[Place]) -> Result<Served, (Place, kube::Error)> {
    let mut served = Served::default();
    for &place in asked {
        match client.list_api_group_resources(&place.api_version()).await {
            Ok(document) => served.add(place, &document),
            Err(e) if Cause::of(&e) == Cause::NotFound => {}
            Err(e) => return Err((place, e)),
        }
    }
    Ok(served)
}

/// `kind` at `place`, for an `Api` of its projection (`Api::all_with`).
pub fn resource_at(kind: Kind, place: Place) -> ApiResource {
    ApiResource {
        group: place.group.into(),
        version: place.version.into(),
        api_version: place.api_version(),
        kind: kind.as_str().into(),
        plural: kind.plural().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind's watch waits for the first round, then is told only of a move of its own
    /// kind to another place; a kind missing from the map is at its first place.
    #[tokio::test]
    async fn places_tell_each_watch_of_its_own_moves() {
        let (tx, rx) = watch::channel(None);
        let mut places = Places(rx);
        let istio = Kind::IstioGateway;
        let older = Place::new("networking.istio.io", "v1beta1");
        assert_eq!(places.of(istio), istio.preferred(), "before any round");
        tx.send_replace(Some(BTreeMap::from([(istio, older)])));
        assert_eq!(places.first(istio).await, older);
        assert_eq!(
            places.of(Kind::TraefikIngressRoute),
            Kind::TraefikIngressRoute.preferred()
        );
        // Another kind moving is no move of this one; this one's is.
        let moved = tokio::spawn({
            let mut places = places.clone();
            async move { places.moved(istio, older).await }
        });
        let traefik = Place::new("traefik.containo.us", "v1alpha1");
        tx.send_replace(Some(BTreeMap::from([
            (istio, older),
            (Kind::TraefikIngressRoute, traefik),
        ])));
        tokio::task::yield_now().await;
        assert!(!moved.is_finished());
        tx.send_replace(Some(BTreeMap::from([
            (istio, istio.preferred()),
            (Kind::TraefikIngressRoute, traefik),
        ])));
        assert_eq!(moved.await.unwrap(), istio.preferred());
    }

    #[tokio::test]
    async fn without_several_places_nothing_is_discovered() {
        let client = crate::test_api::route(|_| crate::test_api::Answer::Hold).0;
        let (mut places, task) = start(
            &client,
            &[Kind::Ingress, Kind::ContourHttpProxy],
            Duration::from_secs(30),
            &CancellationToken::new(),
        );
        assert!(task.is_none());
        assert_eq!(
            places.first(Kind::ContourHttpProxy).await,
            Kind::ContourHttpProxy.preferred()
        );
    }
}
