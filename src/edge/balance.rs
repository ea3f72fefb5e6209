//! Balancing one listener's connections over its backend set, with passive health.
//!
//! A dial walks the backends in the algorithm's order, skipping ejected ones, and moves on to
//! the next after a refusal or timeout: nothing has been sent yet, so the client never sees
//! the failure. A failed backend is ejected for a backoff that doubles with each consecutive
//! failure (capped); after it, the next connection tries it again, and one success clears it.
//! Only when every backend is ejected are ejected ones tried (soonest-to-return first), so a
//! set that failed at once recovers without waiting out the backoff.
//!
//! Connections hold their backend through a lease, never the other way round: replacing the
//! set leaves established connections to drain on their own.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::proxy_protocol::Version;
use crate::relay::{Cause, DialError, Lease, Upstream};

/// Maglev lookup table size: prime, and large against any realistic backend count so each
/// backend's share is within a fraction of a percent of 1/N.
pub const MAGLEV_SIZE: usize = 65537;

/// Backends tried for one connection before giving up.
pub const MAX_ATTEMPTS: usize = 8;

/// The longest ejection, however many failures in a row.
pub const EJECT_CAP: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Algorithm {
    /// Each new connection goes to the next backend in turn.
    RoundRobin,
    /// The backend with the fewest open connections (ties in turn).
    LeastConn,
    /// Maglev consistent hashing of the client IP: a client keeps its backend, and a change of
    /// the set moves only about 1/N of the clients.
    SourceHash,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round-robin",
            Algorithm::LeastConn => "least-conn",
            Algorithm::SourceHash => "source-hash",
        }
    }
}

/// How long a backend stays ejected after `failures` consecutive failures: `base` doubled per
/// failure after the first, at most `max(base, EJECT_CAP)`.
pub fn eject_for(base: Duration, failures: u32) -> Duration {
    let cap = base.max(EJECT_CAP);
    let shift = failures.saturating_sub(1).min(20);
    base.saturating_mul(1 << shift).min(cap)
}

// ---- hashing -------------------------------------------------------------------------------

/// FNV-1a finished with the splitmix64 mixer: stable across builds and platforms (unlike std's
/// hasher), so every edge host maps a client to the same backend.
fn hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The client's IP as hashed: an IPv4 client on a dual-stack socket (`::ffff:a.b.c.d`) hashes
/// like the same client on an IPv4 socket. The port is left out: one client, one backend.
fn client_key(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.octets().to_vec(),
            None => v6.octets().to_vec(),
        },
    }
}

/// The Maglev lookup table (Eisenbud et al., NSDI 2016): `size` slots, each the index of a
/// backend in `names`. Each backend walks its own permutation of the slots (offset and skip
/// from its name) and the backends take turns claiming their next free slot, so shares are
/// near equal and the table depends on the set only, not on its history.
pub fn maglev(names: &[String], size: usize) -> Vec<u32> {
    let n = names.len();
    if n == 0 {
        return Vec::new();
    }
    let m = size as u64;
    let perm: Vec<(u64, u64)> = names
        .iter()
        .map(|name| {
            let offset = hash(name.as_bytes(), 1) % m;
            let skip = hash(name.as_bytes(), 2) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; n];
    let mut table = vec![u32::MAX; size];
    let mut filled = 0;
    loop {
        for i in 0..n {
            let (offset, skip) = perm[i];
            loop {
                let slot = ((offset + next[i] * skip) % m) as usize;
                next[i] += 1;
                if table[slot] == u32::MAX {
                    table[slot] = i as u32;
                    filled += 1;
                    break;
                }
            }
            if filled == size {
                return table;
            }
        }
    }
}

// ---- metrics -------------------------------------------------------------------------------

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    listener: String,
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendCauseLabels {
    listener: String,
    backend: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendDirectionLabels {
    listener: String,
    backend: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

/// Per-backend metric families. A backend's series disappear when it leaves the set.
#[derive(Clone, Default)]
pub struct BackendMetrics {
    connections: Family<BackendLabels, Counter>,
    active: Family<BackendLabels, Gauge>,
    failures: Family<BackendCauseLabels, Counter>,
    bytes: Family<BackendDirectionLabels, Counter>,
    ejections: Family<BackendLabels, Counter>,
    backends: Family<ListenerLabels, Gauge>,
}

impl BackendMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = BackendMetrics::default();
        registry.register(
            "backend_connections",
            "Connections relayed to a backend (successful dials)",
            m.connections.clone(),
        );
        registry.register(
            "backend_connections_active",
            "Connections currently open to a backend",
            m.active.clone(),
        );
        registry.register(
            "backend_failures",
            "Failed dials of a backend, by cause; the client was retried on another backend",
            m.failures.clone(),
        );
        registry.register_with_unit(
            "backend_transferred",
            "Bytes relayed through a backend, by direction, counted when a connection closes",
            Unit::Bytes,
            m.bytes.clone(),
        );
        registry.register(
            "backend_ejections",
            "Times a backend was ejected after a failed dial or health check",
            m.ejections.clone(),
        );
        registry.register(
            "backends",
            "Backends in the listener's current set",
            m.backends.clone(),
        );
        m
    }

    fn labels(listener: &str, backend: &str) -> BackendLabels {
        BackendLabels {
            listener: listener.to_string(),
            backend: backend.to_string(),
        }
    }

    fn direction(listener: &str, backend: &str, d: &str) -> BackendDirectionLabels {
        BackendDirectionLabels {
            listener: listener.to_string(),
            backend: backend.to_string(),
            direction: d.to_string(),
        }
    }

    fn handles(&self, listener: &str, backend: &str) -> Handles {
        let l = Self::labels(listener, backend);
        let connections = self.connections.get_or_create(&l).clone();
        let active = self.active.get_or_create(&l).clone();
        let ejections = self.ejections.get_or_create(&l).clone();
        let to_upstream = self
            .bytes
            .get_or_create(&Self::direction(listener, backend, "to_upstream"))
            .clone();
        let to_client = self
            .bytes
            .get_or_create(&Self::direction(listener, backend, "to_client"))
            .clone();
        Handles {
            connections,
            active,
            ejections,
            to_upstream,
            to_client,
        }
    }

    fn failed(&self, listener: &str, backend: &str, cause: Cause) {
        self.failures
            .get_or_create(&BackendCauseLabels {
                listener: listener.to_string(),
                backend: backend.to_string(),
                cause: cause.as_str().to_string(),
            })
            .inc();
    }

    fn forget(&self, listener: &str, backend: &str) {
        let l = Self::labels(listener, backend);
        self.connections.remove(&l);
        self.active.remove(&l);
        self.ejections.remove(&l);
        for d in ["to_upstream", "to_client"] {
            self.bytes.remove(&Self::direction(listener, backend, d));
        }
        for cause in Cause::ALL {
            self.failures.remove(&BackendCauseLabels {
                listener: listener.to_string(),
                backend: backend.to_string(),
                cause: cause.as_str().to_string(),
            });
        }
    }
}

#[derive(Debug)]
struct Handles {
    connections: Counter,
    active: Gauge,
    ejections: Counter,
    to_upstream: Counter,
    to_client: Counter,
}

// ---- backends ------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Health {
    /// Consecutive failures; 0 = healthy.
    failures: u32,
    ejected_until: Option<Instant>,
}

#[derive(Debug)]
pub struct Backend {
    pub addr: SocketAddr,
    label: String,
    active: AtomicU64,
    health: Mutex<Health>,
    m: Handles,
}

impl Backend {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Not ejected at `now`.
    pub fn available(&self, now: Instant) -> bool {
        self.health().ejected_until.is_none_or(|t| t <= now)
    }

    fn ejected_until(&self) -> Option<Instant> {
        self.health().ejected_until
    }

    /// Records a failure; returns how long the backend is now ejected for.
    fn fail(&self, base: Duration, now: Instant) -> Duration {
        let mut h = self.health();
        h.failures = h.failures.saturating_add(1);
        let d = eject_for(base, h.failures);
        h.ejected_until = Some(now + d);
        self.m.ejections.inc();
        d
    }

    /// Records a success; true when the backend was failing before.
    fn succeed(&self) -> bool {
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
pub struct BackendLease(Arc<Backend>);

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

struct Set {
    backends: Vec<Arc<Backend>>,
    /// Maglev table for source-hash (indices into `backends`).
    table: Vec<u32>,
}

/// One listener's balancer: an [`Upstream`] over a replaceable backend set.
pub struct Balancer {
    listener: String,
    label: String,
    algorithm: Algorithm,
    dial_timeout: Duration,
    eject_base: Duration,
    set: RwLock<Arc<Set>>,
    /// Serialises set changes, so the Maglev table is built without blocking dials.
    writer: Mutex<()>,
    turn: AtomicUsize,
    metrics: BackendMetrics,
    listener_backends: Gauge,
}

impl Balancer {
    pub fn new(
        listener: &str,
        label: String,
        algorithm: Algorithm,
        dial_timeout: Duration,
        eject_base: Duration,
        metrics: BackendMetrics,
    ) -> Balancer {
        let listener_backends = metrics
            .backends
            .get_or_create(&ListenerLabels {
                listener: listener.to_string(),
            })
            .clone();
        Balancer {
            listener: listener.to_string(),
            label,
            algorithm,
            dial_timeout,
            eject_base,
            writer: Mutex::new(()),
            set: RwLock::new(Arc::new(Set {
                backends: Vec::new(),
                table: Vec::new(),
            })),
            turn: AtomicUsize::new(0),
            metrics,
            listener_backends,
        }
    }

    fn snapshot(&self) -> Arc<Set> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the set. Backends still present keep their health and counters; removed ones
    /// are only dropped from the set, their open connections run on.
    pub fn set_backends(&self, addrs: &[SocketAddr]) {
        let mut addrs = addrs.to_vec();
        addrs.sort();
        addrs.dedup();
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.snapshot();
        if old
            .backends
            .iter()
            .map(|b| b.addr)
            .eq(addrs.iter().copied())
        {
            return;
        }
        let backends: Vec<Arc<Backend>> = addrs
            .iter()
            .map(|a| match old.backends.iter().find(|b| b.addr == *a) {
                Some(b) => b.clone(),
                None => {
                    let label = a.to_string();
                    Arc::new(Backend {
                        addr: *a,
                        active: AtomicU64::new(0),
                        health: Mutex::new(Health::default()),
                        m: self.metrics.handles(&self.listener, &label),
                        label,
                    })
                }
            })
            .collect();
        let added: Vec<String> = addrs
            .iter()
            .filter(|a| !old.backends.iter().any(|b| b.addr == **a))
            .map(|a| a.to_string())
            .collect();
        let removed: Vec<&Arc<Backend>> = old
            .backends
            .iter()
            .filter(|b| !addrs.contains(&b.addr))
            .collect();
        for b in &removed {
            self.metrics.forget(&self.listener, &b.label);
        }
        let table = match self.algorithm {
            Algorithm::SourceHash => maglev(
                &backends.iter().map(|b| b.label.clone()).collect::<Vec<_>>(),
                MAGLEV_SIZE,
            ),
            _ => Vec::new(),
        };
        tracing::info!(
            listener = %self.listener,
            backends = backends.len(),
            added = ?added,
            removed = ?removed.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
            draining = removed.iter().map(|b| b.active()).sum::<u64>(),
            "backend set changed"
        );
        self.listener_backends.set(backends.len() as i64);
        *self.set.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Set { backends, table });
    }

    /// The current set, sorted.
    pub fn backends(&self) -> Vec<Arc<Backend>> {
        self.snapshot().backends.clone()
    }

    /// (available, total) backends now.
    pub fn health_counts(&self) -> (usize, usize) {
        let now = Instant::now();
        let set = self.snapshot();
        let up = set.backends.iter().filter(|b| b.available(now)).count();
        (up, set.backends.len())
    }

    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// Backends in the order a connection from `client` tries them.
    fn order(&self, client: IpAddr, now: Instant) -> Vec<Arc<Backend>> {
        let set = self.snapshot();
        let n = set.backends.len();
        if n == 0 {
            return Vec::new();
        }
        let up: Vec<usize> = (0..n).filter(|i| set.backends[*i].available(now)).collect();
        let mut order: Vec<usize> = if up.is_empty() {
            // Everything is ejected: try them anyway, soonest back first.
            let mut all: Vec<usize> = (0..n).collect();
            all.sort_by_key(|i| set.backends[*i].ejected_until());
            all
        } else {
            match self.algorithm {
                Algorithm::RoundRobin => {
                    let start = self.turn.fetch_add(1, Ordering::Relaxed) % up.len();
                    up[start..].iter().chain(&up[..start]).copied().collect()
                }
                Algorithm::LeastConn => {
                    let start = self.turn.fetch_add(1, Ordering::Relaxed) % up.len();
                    let mut rotated: Vec<usize> =
                        up[start..].iter().chain(&up[..start]).copied().collect();
                    // Stable: equal counts keep their turn order.
                    rotated.sort_by_key(|i| set.backends[*i].active());
                    rotated
                }
                Algorithm::SourceHash => {
                    let key = client_key(client);
                    let mut picked = Vec::with_capacity(up.len());
                    // The client's own slot first; while that backend is out, further slots
                    // from re-seeded hashes: deterministic per client, and clients of healthy
                    // backends never move.
                    for seed in 0..(4 * n as u64 + 8) {
                        let slot = (hash(&key, seed) % set.table.len() as u64) as usize;
                        let i = set.table[slot] as usize;
                        if up.contains(&i) && !picked.contains(&i) {
                            picked.push(i);
                            if picked.len() == up.len() {
                                break;
                            }
                        }
                    }
                    for i in &up {
                        if !picked.contains(i) {
                            picked.push(*i);
                        }
                    }
                    picked
                }
            }
        };
        order.truncate(MAX_ATTEMPTS);
        order.into_iter().map(|i| set.backends[i].clone()).collect()
    }

    /// The backend `client` would be sent to first, for tests and diagnostics.
    pub fn pick(&self, client: IpAddr) -> Option<SocketAddr> {
        self.order(client, Instant::now()).first().map(|b| b.addr)
    }

    async fn dial_inner(
        &self,
        client: SocketAddr,
    ) -> Result<(TcpStream, SocketAddr, BackendLease), DialError> {
        let order = self.order(client.ip(), Instant::now());
        if order.is_empty() {
            return Err(DialError {
                cause: Cause::NoBackend,
                target: self.label.clone(),
                detail: "the backend set is empty (no ready endpoint, or not listed yet)".into(),
            });
        }
        let mut errors = Vec::new();
        let mut last = Cause::Error;
        for b in order {
            // Counted from the dial on, so a burst of connections spreads under least-conn
            // instead of piling onto the backend that was idle when the burst began.
            b.active.fetch_add(1, Ordering::Relaxed);
            let result = tokio::time::timeout(self.dial_timeout, TcpStream::connect(b.addr)).await;
            let (cause, detail) = match result {
                Ok(Ok(stream)) => {
                    if b.succeed() {
                        tracing::info!(listener = %self.listener, backend = %b.label, "backend answers again");
                    }
                    b.m.active.inc();
                    b.m.connections.inc();
                    return Ok((stream, b.addr, BackendLease(b)));
                }
                Ok(Err(e)) => (Cause::of_connect(&e), e.to_string()),
                Err(_) => (
                    Cause::Timeout,
                    format!("no answer within {:?}", self.dial_timeout),
                ),
            };
            b.active.fetch_sub(1, Ordering::Relaxed);
            self.metrics.failed(&self.listener, &b.label, cause);
            let ejected = b.fail(self.eject_base, Instant::now());
            tracing::warn!(
                listener = %self.listener,
                client = %client,
                backend = %b.label,
                cause = %cause,
                error = %detail,
                ejected_ms = ejected.as_millis() as u64,
                "backend failed; ejected, trying the next one"
            );
            errors.push(format!("{}: {detail}", b.label));
            last = cause;
        }
        Err(DialError {
            cause: last,
            target: self.label.clone(),
            detail: format!("every backend tried failed: {}", errors.join("; ")),
        })
    }

    /// Active check of every backend: connect, send a LOCAL/UNKNOWN header (so the backend
    /// does not log a broken one) and close. Failures eject like a failed dial; a success
    /// reinstates an ejected backend at once.
    pub async fn check_all(&self, version: Version) {
        let backends = self.backends();
        let checks = backends.iter().map(|b| async move {
            let r = tokio::time::timeout(self.dial_timeout, async {
                let mut s = TcpStream::connect(b.addr).await?;
                s.write_all(crate::proxy_protocol::encode_local(version).as_bytes())
                    .await?;
                s.shutdown().await
            })
            .await;
            (b, r)
        });
        for (b, r) in futures::future::join_all(checks).await {
            let cause = match r {
                Ok(Ok(())) => {
                    if b.succeed() {
                        tracing::info!(listener = %self.listener, backend = %b.label, "health check passed; backend reinstated");
                    }
                    continue;
                }
                Ok(Err(e)) => Cause::of_connect(&e),
                Err(_) => Cause::Timeout,
            };
            self.metrics.failed(&self.listener, &b.label, cause);
            let was_available = b.available(Instant::now());
            let d = b.fail(self.eject_base, Instant::now());
            if was_available {
                tracing::warn!(listener = %self.listener, backend = %b.label, cause = %cause, ejected_ms = d.as_millis() as u64, "health check failed; backend ejected");
            }
        }
    }
}

impl Upstream for Balancer {
    type Lease = BackendLease;

    fn dial(
        &self,
        client: SocketAddr,
    ) -> impl std::future::Future<Output = Result<(TcpStream, SocketAddr, BackendLease), DialError>> + Send
    {
        self.dial_inner(client)
    }

    fn describe(&self) -> &str {
        &self.label
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn balancer(alg: Algorithm, addrs: &[SocketAddr]) -> Balancer {
        let b = Balancer::new(
            "test",
            "test backends".into(),
            alg,
            Duration::from_secs(2),
            Duration::from_secs(1),
            BackendMetrics::default(),
        );
        b.set_backends(addrs);
        b
    }

    fn fake(n: usize) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 8443)))
            .collect()
    }

    fn clients(n: u32) -> Vec<IpAddr> {
        (0..n)
            .map(|i| {
                IpAddr::from(std::net::Ipv4Addr::from(
                    0xC633_6400u32.wrapping_add(i * 7919),
                ))
            })
            .collect()
    }

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

    #[test]
    fn maglev_shares_are_even_and_deterministic() {
        let names: Vec<String> = fake(7).iter().map(|a| a.to_string()).collect();
        let t = maglev(&names, MAGLEV_SIZE);
        assert_eq!(t, maglev(&names, MAGLEV_SIZE));
        let mut counts = [0usize; 7];
        for i in &t {
            counts[*i as usize] += 1;
        }
        let ideal = MAGLEV_SIZE / 7;
        for c in counts {
            assert!(c.abs_diff(ideal) <= ideal / 100 + 1, "{counts:?}");
        }
        assert!(maglev(&[], MAGLEV_SIZE).is_empty());
        assert_eq!(maglev(&names[..1], 13), vec![0; 13]);
    }

    #[test]
    fn source_hash_moves_only_the_removed_backends_clients() {
        for n in [3usize, 10, 25] {
            let set = fake(n);
            let b = balancer(Algorithm::SourceHash, &set);
            let cs = clients(20_000);
            let before: Vec<SocketAddr> = cs.iter().map(|c| b.pick(*c).unwrap()).collect();
            // Sticky: same answer every time.
            assert!(cs.iter().zip(&before).all(|(c, a)| b.pick(*c) == Some(*a)));
            let gone = set[n / 2];
            let rest: Vec<SocketAddr> = set.iter().copied().filter(|a| *a != gone).collect();
            b.set_backends(&rest);
            let (mut moved, mut moved_other, mut on_gone) = (0, 0, 0);
            for (c, was) in cs.iter().zip(&before) {
                let now = b.pick(*c).unwrap();
                if *was == gone {
                    on_gone += 1;
                    assert_ne!(now, gone);
                }
                if now != *was {
                    moved += 1;
                    if *was != gone {
                        moved_other += 1;
                    }
                }
            }
            let share = moved as f64 / cs.len() as f64;
            let ideal = 1.0 / n as f64;
            assert!(
                (share - ideal).abs() < ideal * 0.15 + 0.005,
                "n={n}: {share:.4} of clients moved, ideal {ideal:.4}"
            );
            // Maglev is near-minimal, not exactly minimal: a table rebuild may shift a few
            // slots between surviving backends. Bound it tightly.
            let other_share = moved_other as f64 / cs.len() as f64;
            assert!(
                other_share < 0.01,
                "n={n}: {other_share:.4} of others moved"
            );
            assert!(on_gone > 0);
        }
    }

    #[test]
    fn source_hash_maps_mapped_ipv4_like_ipv4_and_spreads() {
        let b = balancer(Algorithm::SourceHash, &fake(3));
        let v4: IpAddr = "198.51.100.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:198.51.100.7".parse().unwrap();
        assert_eq!(b.pick(v4), b.pick(mapped));
        let mut counts: HashMap<SocketAddr, usize> = HashMap::new();
        for c in clients(3000) {
            *counts.entry(b.pick(c).unwrap()).or_default() += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(
            counts.values().all(|c| (800..1200).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn ejected_backend_is_skipped_then_tried_again() {
        let set = fake(3);
        for alg in [
            Algorithm::RoundRobin,
            Algorithm::LeastConn,
            Algorithm::SourceHash,
        ] {
            let b = balancer(alg, &set);
            let now = Instant::now();
            let victim = b.backends()[1].clone();
            victim.fail(Duration::from_secs(1), now);
            for c in clients(200) {
                let order = b.order(c, now);
                assert_eq!(order.len(), 2, "{alg:?}");
                assert!(order.iter().all(|x| x.addr != victim.addr), "{alg:?}");
            }
            // Past the backoff it is back in the rotation.
            let later = now + Duration::from_millis(1001);
            let seen: Vec<SocketAddr> = clients(200)
                .iter()
                .flat_map(|c| b.order(*c, later))
                .map(|x| x.addr)
                .collect();
            assert!(seen.contains(&victim.addr), "{alg:?}");
            // All ejected: all tried, soonest back first.
            for (i, x) in b.backends().iter().enumerate() {
                if x.addr != victim.addr {
                    x.fail(Duration::from_secs(10 + i as u64), now);
                }
            }
            let order: Vec<SocketAddr> =
                b.order(clients(1)[0], now).iter().map(|x| x.addr).collect();
            assert_eq!(order, vec![set[1], set[0], set[2]], "{alg:?}");
        }
    }

    #[test]
    fn round_robin_rotates_and_least_conn_prefers_idle() {
        let set = fake(3);
        let b = balancer(Algorithm::RoundRobin, &set);
        let c = clients(1)[0];
        let firsts: Vec<SocketAddr> = (0..6).map(|_| b.pick(c).unwrap()).collect();
        assert_eq!(firsts, [set[0], set[1], set[2], set[0], set[1], set[2]]);

        let b = balancer(Algorithm::LeastConn, &set);
        let bs = b.backends();
        bs[0].active.store(5, Ordering::Relaxed);
        bs[2].active.store(1, Ordering::Relaxed);
        for _ in 0..5 {
            let order: Vec<SocketAddr> =
                b.order(c, Instant::now()).iter().map(|x| x.addr).collect();
            assert_eq!(order, vec![set[1], set[2], set[0]]);
        }
        bs[1].active.store(1, Ordering::Relaxed);
        // Ties among the least loaded alternate.
        let firsts: Vec<SocketAddr> = (0..4).map(|_| b.pick(c).unwrap()).collect();
        assert!(
            firsts.contains(&set[1]) && firsts.contains(&set[2]),
            "{firsts:?}"
        );
        assert!(!firsts.contains(&set[0]));
    }

    #[test]
    fn set_changes_keep_state_of_remaining_backends() {
        let set = fake(3);
        let b = balancer(Algorithm::RoundRobin, &set);
        let kept = b.backends()[2].clone();
        kept.fail(Duration::from_secs(30), Instant::now());
        b.set_backends(&[set[2], set[1], set[2]]);
        let now_set = b.backends();
        assert_eq!(
            now_set.iter().map(|x| x.addr).collect::<Vec<_>>(),
            vec![set[1], set[2]]
        );
        assert!(Arc::ptr_eq(&now_set[1], &kept));
        assert!(!now_set[1].available(Instant::now()));
        assert_eq!(b.health_counts(), (1, 2));
        b.set_backends(&[]);
        assert_eq!(b.health_counts(), (0, 0));
        assert!(b.pick(clients(1)[0]).is_none());
    }

    /// Real sockets: a refused backend is ejected and the dial lands on a live one.
    #[tokio::test]
    async fn refused_backend_is_ejected_and_the_dial_retried() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let live_addr = live.local_addr().unwrap();
        let b = balancer(Algorithm::RoundRobin, &[dead, live_addr]);
        let client: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        for _ in 0..4 {
            let (_s, addr, _lease) = b.dial(client).await.unwrap();
            assert_eq!(addr, live_addr);
        }
        let dead_b = b.backends().into_iter().find(|x| x.addr == dead).unwrap();
        assert!(!dead_b.available(Instant::now()));
        assert_eq!(
            dead_b.health().failures,
            1,
            "tried once, then skipped while ejected"
        );
        // Each lease was dropped at the end of its iteration.
        assert_eq!(
            b.backends()
                .iter()
                .find(|x| x.addr == live_addr)
                .unwrap()
                .active(),
            0
        );
        // Nothing answers: the error names every backend tried.
        drop(live);
        let b = balancer(Algorithm::LeastConn, &[dead]);
        let err = b.dial(client).await.unwrap_err();
        assert_eq!(err.cause, Cause::ConnectionRefused, "{err}");
        assert!(err.detail.contains(&dead.to_string()), "{err}");
        let err = balancer(Algorithm::LeastConn, &[])
            .dial(client)
            .await
            .unwrap_err();
        assert_eq!(err.cause, Cause::NoBackend);
    }

    #[tokio::test]
    async fn leases_count_active_connections() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let b = balancer(Algorithm::LeastConn, &[addr]);
        let client: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let (_s1, _, l1) = b.dial(client).await.unwrap();
        let (_s2, _, l2) = b.dial(client).await.unwrap();
        let backend = b.backends()[0].clone();
        assert_eq!(backend.active(), 2);
        drop(l1);
        assert_eq!(backend.active(), 1);
        // Removed from the set, the lease still holds the backend until it is dropped.
        b.set_backends(&[]);
        assert_eq!(backend.active(), 1);
        drop(l2);
        assert_eq!(backend.active(), 0);
    }

    #[tokio::test]
    async fn health_checks_eject_and_reinstate() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = l.local_addr().unwrap();
        let down = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let b = balancer(Algorithm::RoundRobin, &[up, down]);
        b.check_all(Version::V2).await;
        assert_eq!(b.health_counts(), (1, 2));
        // The live backend got a LOCAL header, not a connection to relay.
        let (mut s, _) = l.accept().await.unwrap();
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut got)
            .await
            .unwrap();
        assert_eq!(
            got,
            crate::proxy_protocol::encode_local(Version::V2).as_bytes()
        );
        // The down one comes back: one passing check reinstates it before its backoff ends.
        let back = tokio::net::TcpListener::bind(down).await.unwrap();
        b.check_all(Version::V1).await;
        assert_eq!(b.health_counts(), (2, 2));
        drop(back);
    }
}
