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

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    match (s.ready)().await {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
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
    axum::serve(listener, router(state))
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
