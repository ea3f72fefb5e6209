//! `cleanup --stop-controller`: the controller scaled to zero, and waited for until it can no
//! longer write, before what it wrote is removed. Otherwise a controller still running (the
//! chart's hook runs before Helm deletes anything) would put the block back at its next sync.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use kube::Api;

use crate::controller::lease::Observed;

/// How long the controller may take to stop: its pods' grace period is 30 s by default, and it
/// releases its Lease within about a second of SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_secs(1);

/// The controller could not be stopped; nothing was removed.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    #[error(
        "cannot scale the controller Deployment {namespace}/{name} to zero: {source}{hint}; \
         nothing was removed"
    )]
    Scale {
        namespace: String,
        name: String,
        source: kube::Error,
        hint: &'static str,
    },
    #[error(
        "the controller {namespace}/{name} has not stopped after {secs} s ({state}); nothing was \
         removed: see why its pods are still running (kubectl -n {namespace} get pods), then run \
         the uninstall again"
    )]
    Timeout {
        namespace: String,
        name: String,
        secs: u64,
        state: String,
    },
}

/// Whether a Lease as read at `wall` still binds: `Some(holder)` while a holder's renewal is
/// valid, `None` once it is released (no holder) or expired.
pub fn still_held(seen: &Observed, wall: SystemTime) -> Option<String> {
    let holder = seen.holder.as_deref().filter(|h| !h.is_empty())?;
    match (seen.renew, seen.duration) {
        (Some(renew), Some(duration)) if renew + duration <= wall => None,
        _ => Some(holder.to_string()),
    }
}

/// Scales `namespace/name` to zero replicas and waits until it has no pod left and, with
/// `lease` (namespace, name), until its Lease is released or expired. A Deployment already gone
/// is stopped. The scale is retried as every call of `cleanup` is (`call_with_retries`), a
/// refusal then reported with the grant that is missing.
pub async fn stop_controller(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    lease: Option<(&str, &str)>,
    attempts: u32,
) -> Result<(), StopError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let scale = serde_json::json!({"spec": {"replicas": 0}});
    let (params, body) = (PatchParams::default(), Patch::Merge(&scale));
    let what = format!("scaling the controller {namespace}/{name} to zero");
    let patch = || deployments.patch_scale(name, &params, &body);
    match super::call_with_retries(&what, attempts, super::backoff, patch).await {
        Ok(Some(_)) => {}
        Ok(None) => tracing::info!(namespace, name, "the controller Deployment is already gone"),
        Err(e) => {
            return Err(StopError::Scale {
                namespace: namespace.into(),
                name: name.into(),
                hint: if super::is_forbidden(&e) {
                    "; grant `get` and `patch` on deployments/scale (apiGroup apps) named it \
                     (the <fullname>-cleanup Role)"
                } else {
                    ""
                },
                source: e,
            })
        }
    }
    tracing::info!(
        namespace,
        name,
        "scaled the controller to zero; waiting for it to stop"
    );
    let started = tokio::time::Instant::now();
    let mut last_error = String::new();
    loop {
        let state = match running(client, &deployments, name, lease).await {
            Ok(None) => {
                tracing::info!(
                    namespace,
                    name,
                    took_ms = started.elapsed().as_millis() as u64,
                    "the controller has stopped"
                );
                return Ok(());
            }
            Ok(Some(state)) => state,
            Err(e) => {
                // Logged once per distinct error, not once per poll.
                if e != last_error {
                    tracing::warn!(namespace, name, error = %e, "reading the controller's state failed; retrying");
                    last_error = e.clone();
                }
                e
            }
        };
        if started.elapsed() >= STOP_TIMEOUT {
            return Err(StopError::Timeout {
                namespace: namespace.into(),
                name: name.into(),
                secs: STOP_TIMEOUT.as_secs(),
                state,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What still runs of the controller: `None` when nothing does, else what (pods, Lease holder).
async fn running(
    client: &kube::Client,
    deployments: &Api<Deployment>,
    name: &str,
    lease: Option<(&str, &str)>,
) -> Result<Option<String>, String> {
    match deployments.get_scale(name).await {
        Ok(s) => {
            let pods = s.status.map(|s| s.replicas).unwrap_or(0);
            if pods > 0 {
                return Ok(Some(format!("{pods} pod(s) left")));
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(format!("reading deployments/scale: {e}")),
    }
    let Some((namespace, lease)) = lease else {
        return Ok(None);
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get_opt(lease).await {
        Ok(Some(l)) => Ok(still_held(&Observed::of(&l), SystemTime::now())
            .map(|holder| format!("its Lease {namespace}/{lease} still held by {holder}"))),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("reading the Lease {namespace}/{lease}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_binds_while_a_holder_renews_it() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let seen = |holder: Option<&str>, renewed_ago: u64, duration: Option<u64>| Observed {
            holder: holder.map(String::from),
            renew: Some(now - Duration::from_secs(renewed_ago)),
            duration: duration.map(Duration::from_secs),
        };
        let cases = [
            (seen(Some("pod-a"), 3, Some(15)), Some("pod-a")),
            (seen(None, 3, Some(15)), None),
            (seen(Some(""), 3, Some(15)), None),
            (seen(Some("pod-a"), 15, Some(15)), None),
            (seen(Some("pod-a"), 60, Some(15)), None),
            // Without a duration nothing says it expired: it binds.
            (seen(Some("pod-a"), 60, None), Some("pod-a")),
        ];
        for (observed, want) in cases {
            assert_eq!(still_held(&observed, now).as_deref(), want, "{observed:?}");
        }
    }
}
