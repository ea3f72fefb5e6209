//! SIGTERM/SIGINT -> a CancellationToken every long-running task watches.

use tokio_util::sync::CancellationToken;

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
        cancel.cancel();
    });
    Ok(token)
}
