//! The admin HTTP endpoint every long-running subcommand serves: `/healthz` (the process is
//! serving), `/readyz` (a caller-supplied check), `/metrics` (Prometheus / OpenMetrics text).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A readiness check: `Ok` when ready, `Err(reason)` (starting with a cause token) when not.
pub type ReadyCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

#[derive(Clone)]
pub struct AdminState {
    registry: Arc<Registry>,
    ready: ReadyCheck,
}

impl AdminState {
    pub fn new(registry: Arc<Registry>, ready: ReadyCheck) -> Self {
        AdminState { registry, ready }
    }
}

/// What the handlers share: the caller's state and the token that ends the process.
#[derive(Clone)]
struct Shared {
    state: AdminState,
    stop: CancellationToken,
}

fn router(state: AdminState, stop: CancellationToken) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Shared { state, stop })
}

/// Why `/readyz` fails once shutdown has begun.
const STOPPING: &str = "stopping: the process is shutting down";

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    // A readiness check may wait on something slow (a DNS lookup up to `--ready-timeout`), and
    // graceful shutdown waits for requests in flight: ending the check when shutdown begins keeps
    // a probe from delaying the exit, and a stopping process is not ready anyway.
    let verdict = tokio::select! {
        biased;
        () = s.stop.cancelled() => Err(STOPPING.to_string()),
        verdict = (s.state.ready)() => verdict,
    };
    match verdict {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}\n"),
        ),
    }
}

/// Serves the admin endpoint on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state, stop.clone()))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// The admin listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("binding --listen-health {addr}: {error}; is the port free and allowed?")]
pub struct BindError {
    addr: String,
    error: std::io::Error,
}

/// Binds `addr` (when set) and serves the admin endpoint on it until `stop` is cancelled; logs
/// the bound address as listener `health`.
pub async fn start(
    addr: Option<&crate::listen::ListenAddr>,
    state: AdminState,
    stop: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, BindError> {
    let Some(addr) = addr else { return Ok(None) };
    let bind_error = |error| BindError {
        addr: addr.to_string(),
        error,
    };
    let listener = crate::listen::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    tracing::info!(listener = "health", addr = %local, "listening");
    Ok(Some(tokio::spawn(serve(listener, state, stop))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A `/readyz` whose check never ends is answered "stopping" once shutdown begins, and the
    /// server then exits instead of waiting for the check.
    #[tokio::test]
    async fn a_readiness_check_in_flight_ends_when_shutdown_begins() {
        let entered = Arc::new(tokio::sync::Notify::new());
        let ready: ReadyCheck = {
            let entered = entered.clone();
            Arc::new(move || {
                let entered = entered.clone();
                Box::pin(async move {
                    entered.notify_one();
                    std::future::pending::<()>().await;
                    Ok(())
                })
            })
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let state = AdminState::new(Arc::new(Registry::default()), ready);
        let server = tokio::spawn(serve(listener, state, stop.clone()));

        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /readyz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        entered.notified().await;
        stop.cancel();

        // Bounds a regression (a hang) rather than timing anything.
        let bound = std::time::Duration::from_secs(30);
        let mut reply = String::new();
        tokio::time::timeout(bound, conn.read_to_string(&mut reply))
            .await
            .expect("the response to /readyz in flight at shutdown")
            .unwrap();
        assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
        assert!(reply.ends_with(&format!("{STOPPING}\n")), "{reply}");
        tokio::time::timeout(bound, server)
            .await
            .expect("the server exits after the answer")
            .unwrap()
            .unwrap();
    }
}
