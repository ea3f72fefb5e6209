//! SIGTERM/SIGINT -> a CancellationToken every long-running task watches.
//!
//! Kubernetes stops a pod with SIGTERM; SIGINT comes from a terminal (Ctrl-C). The relays'
//! shutdown delay exists for the first (endpoint removal has to propagate before the listeners
//! close) and only slows down the second, so which one arrived is kept.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// Set when the shutdown came from SIGINT. Process-wide like the signal itself.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether the shutdown was asked for with SIGINT (a terminal's Ctrl-C), not SIGTERM.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// A signal handler could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("installing the {signal} handler: {error}")]
pub struct SignalError {
    signal: &'static str,
    error: std::io::Error,
}

/// Returns a token cancelled on the first SIGTERM or SIGINT.
pub fn on_signal() -> Result<CancellationToken, SignalError> {
    use tokio::signal::unix::{signal, SignalKind};
    let install = |kind, name| {
        signal(kind).map_err(|error| SignalError {
            signal: name,
            error,
        })
    };
    let mut term = install(SignalKind::terminate(), "SIGTERM")?;
    let mut int = install(SignalKind::interrupt(), "SIGINT")?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = which, "shutdown requested");
        INTERRUPTED.store(which == "SIGINT", Ordering::Relaxed);
        cancel.cancel();
    });
    Ok(token)
}
