//! What every subcommand that relays TCP (`proxy`, `edge`) does around the shared accept loop:
//! readiness bookkeeping, the admin server, and the signal -> fail readiness -> drain -> exit
//! sequence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::accept::Lifecycle;
use crate::admin::{AdminState, ReadyCheck};
use crate::listen::ListenAddr;

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

/// The relay's end of [`Lifecycle`]: the admin server and the readiness-first shutdown. An
/// inherent impl here rather than in `crate::accept` because only the relaying subcommands have
/// readiness to fail before they drain.
impl Lifecycle {
    /// Serves `/healthz`, `/readyz`, `/metrics` on `health`, then on `signal`: readiness fails
    /// at once, accepting goes on for `delay` (none after SIGINT), in-flight connections get
    /// `grace`, the admin server stops.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_until_signal(
        &self,
        server: tokio::task::JoinHandle<()>,
        signal: CancellationToken,
        health: Option<&ListenAddr>,
        registry: Registry,
        ready: &ReadyState,
        check: ReadyCheck,
        delay: Duration,
        grace: Duration,
    ) -> Result<(), crate::admin::BindError> {
        let admin_stop = CancellationToken::new();
        let admin = crate::admin::start(
            health,
            AdminState::new(Arc::new(registry), check),
            admin_stop.clone(),
        )
        .await?;
        signal.cancelled().await;
        ready.begin_shutdown();
        // The delay lets endpoint removal propagate after Kubernetes' SIGTERM; Ctrl-C in a
        // terminal has nothing to propagate.
        let delay = if crate::shutdown::interrupted() {
            Duration::ZERO
        } else {
            delay
        };
        tracing::info!(
            delay_ms = delay.as_millis() as u64,
            "shutting down: /readyz fails now; still accepting during the shutdown delay"
        );
        tokio::time::sleep(delay).await;
        self.drain(server, grace).await;
        admin_stop.cancel();
        if let Some(a) = admin {
            let _ = a.await;
        }
        Ok(())
    }
}
