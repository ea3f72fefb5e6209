//! SIGTERM/SIGINT -> a CancellationToken every long-running task watches.

use tokio_util::sync::CancellationToken;

/// Returns a token cancelled on the first SIGTERM or SIGINT.
pub fn on_signal() -> anyhow::Result<CancellationToken> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("installing the SIGTERM handler: {e}"))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("installing the SIGINT handler: {e}"))?;
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
