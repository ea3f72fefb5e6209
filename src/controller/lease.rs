//! Leader election over a `coordination.k8s.io/v1` Lease with kube-lease-manager: only the
//! holder writes; the others keep their caches warm and take over within the lease duration.
//!
//! API calls (kept equal to `rbac::required`): `get` and `patch` (server-side apply and
//! strategic merge) on `leases/<name>`, `create` on `leases` when it does not exist yet.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Seconds a lease stays valid after its last renewal; a standby takes over within this.
pub const DURATION_SECONDS: u64 = 15;
/// The holder renews this long before expiry (also the tolerated clock skew).
pub const GRACE_SECONDS: u64 = 5;

/// This replica's identity in the Lease: the pod name (`HOSTNAME`) and a random suffix, so a
/// restarted pod with the same name is a new holder.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| nix::unistd::gethostname().ok()?.into_string().ok())
        .unwrap_or_else(|| "ouroboros".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{host}-{:08x}", h.finish() as u32)
}

/// Leadership as a watch channel, and the task that keeps it.
pub struct Leadership {
    pub rx: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
    /// Keeps the channel open when there is no election.
    _always: Option<watch::Sender<bool>>,
}

impl Leadership {
    /// No election: always the leader (etc-hosts mode, `--leader-elect=false`).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        Leadership {
            rx,
            task: None,
            _always: Some(tx),
        }
    }

    /// Campaigns for `name` in `namespace` until `stop`, then releases the lease if held.
    pub fn elect(
        client: Client,
        namespace: String,
        name: String,
        identity: String,
        stop: CancellationToken,
    ) -> Self {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(campaign(client, namespace, name, identity, tx, stop));
        Leadership {
            rx,
            task: Some(task),
            _always: None,
        }
    }

    /// Waits (at most `timeout`) for the lease to be released after `stop`.
    pub async fn finish(self, timeout: Duration) {
        if let Some(task) = self.task {
            if tokio::time::timeout(timeout, task).await.is_err() {
                tracing::warn!(
                    "releasing the lease timed out; a standby takes over when it expires"
                );
            }
        }
    }
}

async fn campaign(
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    tx: watch::Sender<bool>,
    stop: CancellationToken,
) {
    let lease = format!("{namespace}/{name}");
    let mut delay = Duration::from_secs(1);
    let manager: LeaseManager = loop {
        let built = LeaseManagerBuilder::new(client.clone(), &name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_duration(DURATION_SECONDS)
            .with_grace(GRACE_SECONDS)
            .build();
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = built => r,
        };
        match result {
            Ok(m) => break m,
            Err(e) => {
                tracing::warn!(
                    %lease,
                    error = %e,
                    retry_in_s = delay.as_secs(),
                    "cannot set up leader election (needs `get`, `patch` on leases/{name} and \
                     `create` on leases in namespace {namespace}, apiGroup coordination.k8s.io); \
                     standing by and retrying"
                );
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    };
    tracing::info!(%lease, %identity, "campaigning for the lease");
    let (mut lm_rx, handle) = manager.watch().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            r = lm_rx.changed() => {
                if r.is_err() {
                    break;
                }
                let leader = *lm_rx.borrow_and_update();
                if leader {
                    tracing::info!(%lease, %identity, "acquired the lease: this replica writes");
                } else {
                    tracing::info!(%lease, %identity, "lost the lease: standing by");
                }
                tx.send_replace(leader);
            }
        }
    }
    // Stop writing before the lease is given up; dropping the receiver makes the manager
    // release it.
    tx.send_replace(false);
    drop(lm_rx);
    match handle.await {
        Ok(Ok(_)) => tracing::info!(%lease, "released the lease"),
        Ok(Err(e)) => {
            tracing::warn!(%lease, error = %e, "releasing the lease failed; it expires on its own")
        }
        Err(e) => tracing::warn!(%lease, error = %e, "the lease task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_per_start() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.len() > 9, "{a}");
    }
}
