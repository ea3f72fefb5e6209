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
//!
//! | module | owns |
//! | --- | --- |
//! | this one | [`Balancer`]: the replaceable set, dialling through it, active health checks |
//! | `pick` | [`Algorithm`] and the order a connection tries the backends in |
//! | `maglev` | the stable hash and the Maglev table behind `source-hash` |
//! | `backend` | one [`Backend`]: its health (ejection and backoff) and the lease connections hold |
//! | `metrics` | the per-backend metric families and each backend's handles into them |

pub mod backend;
pub mod maglev;
pub mod metrics;
pub mod pick;

use backend::{Backend, BackendLease};
use maglev::{maglev, MAGLEV_SIZE};
use metrics::BackendMetrics;
use pick::Algorithm;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::proxy_protocol::Version;
use crate::relay::upstream::{Cause, DialError, Upstream};
use backend::Health;
use metrics::ListenerLabels;

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

    pub(super) fn balancer(alg: Algorithm, addrs: &[SocketAddr]) -> Balancer {
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

    pub(super) fn fake(n: usize) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 8443)))
            .collect()
    }

    pub(super) fn clients(n: u32) -> Vec<IpAddr> {
        (0..n)
            .map(|i| {
                IpAddr::from(std::net::Ipv4Addr::from(
                    0xC633_6400u32.wrapping_add(i * 7919),
                ))
            })
            .collect()
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
