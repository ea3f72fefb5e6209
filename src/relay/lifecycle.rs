//! What every subcommand that relays TCP (`proxy`, `edge`) does around [`super::serve`]: the
//! connection cap and task tracking, readiness bookkeeping, the admin server, and the
//! signal -> fail readiness -> drain -> exit sequence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ListenAddr, Route, Upstream};
use crate::admin::{AdminState, ReadyCheck};

/// Readiness shared by `/readyz`, the `ready` gauge and shutdown.
pub struct ReadyState {
    shutting_down: AtomicBool,
    /// The last outcome's key, to log a change once instead of on every probe.
    last: Mutex<Option<String>>,
    gauge: Gauge,
}

impl ReadyState {
    /// Registers the `ready` gauge with `help` in `registry`.
    pub fn register(registry: &mut Registry, help: &str) -> Self {
        let gauge = Gauge::default();
        registry.register("ready", help, gauge.clone());
        Self {
            shutting_down: AtomicBool::new(false),
            last: Mutex::new(None),
            gauge,
        }
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        self.gauge.set(0);
    }

    /// Records one check: sets the gauge and logs only when `key` differs from the last one
    /// (`ready_message` at INFO when ready, `not_ready_message` with `reason` at WARN when not).
    pub fn record(
        &self,
        key: String,
        ready: bool,
        ready_message: &str,
        not_ready_message: &str,
        reason: &str,
    ) {
        let changed = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let changed = last.as_ref() != Some(&key);
            *last = Some(key);
            changed
        };
        if changed {
            if ready {
                tracing::info!("{ready_message}");
            } else {
                tracing::warn!(reason = %reason, "{not_ready_message}");
            }
        }
        self.gauge.set(i64::from(ready));
    }
}

/// The accept side's shared state: connection cap, connection tasks, stop signal.
pub struct Lifecycle {
    limit: Option<Arc<Semaphore>>,
    tracker: TaskTracker,
    stop_accepting: CancellationToken,
}

impl Lifecycle {
    /// Raises the open-files limit and sets the connection cap (`0` = unlimited).
    pub fn new(max_connections: usize) -> Self {
        match super::raise_fd_limit() {
            Ok(n) => tracing::debug!(open_files = n, "open-files limit"),
            Err(e) => tracing::debug!(error = %e, "could not raise the open-files limit"),
        }
        let limit = (max_connections > 0)
            .then(|| Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))));
        Self {
            limit,
            tracker: TaskTracker::new(),
            stop_accepting: CancellationToken::new(),
        }
    }

    /// Starts accepting on `listeners`.
    pub fn serve<U: Upstream>(
        &self,
        listeners: Vec<(TcpListener, Arc<Route<U>>)>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(super::serve(
            listeners,
            self.limit.clone(),
            self.tracker.clone(),
            self.stop_accepting.clone(),
        ))
    }

    /// Serves `/healthz`, `/readyz`, `/metrics` on `health`, then on `signal`: readiness fails
    /// at once, accepting goes on for `delay`, in-flight connections get `grace`, the admin
    /// server stops.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_until_signal(
        self,
        server: tokio::task::JoinHandle<()>,
        signal: CancellationToken,
        health: Option<&ListenAddr>,
        registry: Registry,
        ready: &ReadyState,
        check: ReadyCheck,
        delay: Duration,
        grace: Duration,
    ) -> anyhow::Result<()> {
        let admin_stop = CancellationToken::new();
        let admin = crate::admin::start(
            health,
            AdminState::new(Arc::new(registry), check),
            admin_stop.clone(),
        )
        .await?;
        signal.cancelled().await;
        ready.begin_shutdown();
        super::drain(server, &self.stop_accepting, &self.tracker, delay, grace).await;
        admin_stop.cancel();
        if let Some(a) = admin {
            let _ = a.await;
        }
        Ok(())
    }
}
