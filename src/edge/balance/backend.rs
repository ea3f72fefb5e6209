//! One backend: its address, its open connections, and its health (consecutive failures and the
//! ejection they earn, with a backoff that doubles and caps), and the lease a connection holds on
//! it. Separate from the balancer: the state a backend keeps across set changes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::Handles;
use crate::relay::upstream::Lease;

/// The longest ejection, however many failures in a row.
pub const EJECT_CAP: Duration = Duration::from_secs(60);

/// How long a backend stays ejected after `failures` consecutive failures: `base` doubled per
/// failure after the first, at most `max(base, EJECT_CAP)`.
pub fn eject_for(base: Duration, failures: u32) -> Duration {
    let cap = base.max(EJECT_CAP);
    let shift = failures.saturating_sub(1).min(20);
    base.saturating_mul(1 << shift).min(cap)
}

#[derive(Debug, Default)]
pub(super) struct Health {
    /// Consecutive failures; 0 = healthy.
    pub(super) failures: u32,
    ejected_until: Option<Instant>,
}

#[derive(Debug)]
pub struct Backend {
    pub addr: SocketAddr,
    pub(super) label: String,
    pub(super) active: AtomicU64,
    pub(super) health: Mutex<Health>,
    pub(super) m: Handles,
}

impl Backend {
    pub(super) fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Not ejected at `now`.
    pub fn available(&self, now: Instant) -> bool {
        self.health().ejected_until.is_none_or(|t| t <= now)
    }

    pub(super) fn ejected_until(&self) -> Option<Instant> {
        self.health().ejected_until
    }

    /// Records a failure; returns how long the backend is now ejected for.
    pub(super) fn fail(&self, base: Duration, now: Instant) -> Duration {
        let mut h = self.health();
        h.failures = h.failures.saturating_add(1);
        let d = eject_for(base, h.failures);
        h.ejected_until = Some(now + d);
        self.m.ejections.inc();
        d
    }

    /// Records a success; true when the backend was failing before.
    pub(super) fn succeed(&self) -> bool {
        let mut h = self.health();
        let was = h.failures > 0;
        *h = Health::default();
        was
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }
}

/// A connection's hold on its backend: counts it as active until dropped.
#[derive(Debug)]
pub struct BackendLease(pub(super) Arc<Backend>);

impl Lease for BackendLease {
    fn record(&self, to_upstream: u64, to_client: u64) {
        self.0.m.to_upstream.inc_by(to_upstream);
        self.0.m.to_client.inc_by(to_client);
    }
}

impl Drop for BackendLease {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.m.active.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejection_backoff_doubles_and_caps() {
        let s = Duration::from_secs;
        for (base, failures, want) in [
            (s(1), 1, s(1)),
            (s(1), 2, s(2)),
            (s(1), 3, s(4)),
            (s(1), 6, s(32)),
            (s(1), 7, s(60)),
            (s(1), 1000, s(60)),
            (s(90), 1, s(90)), // a base above the cap is used as is
            (s(90), 5, s(90)),
            (Duration::from_millis(100), 4, Duration::from_millis(800)),
        ] {
            assert_eq!(eject_for(base, failures), want, "{base:?} x{failures}");
        }
    }
}
