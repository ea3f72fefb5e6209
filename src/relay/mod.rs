//! The accept loop and per-connection relay shared by the subcommands that forward TCP.
//!
//! ```text
//! accept (connection cap, backoff on EMFILE) -> task per connection
//!   -> upstream.dial() -> TCP_NODELAY -> PROXY header -> copy both ways (half-close safe)
//!   -> metrics + debug log on close
//! ```

pub mod copy;
pub mod listen;
pub mod metrics;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::proxy_protocol::{encode_tcp, Destination, Encoded, Source, Version};
pub use copy::End;
pub use listen::{bind, parse_listen, ListenAddr};
pub use metrics::{ListenerMetrics, RelayMetrics};
pub use upstream::{Cause, DialError, DnsTarget, Upstream};

/// Longest pause after an accept(2) failure such as EMFILE.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What one listener does with its connections.
pub struct Route<U> {
    /// Listener name for logs and metric labels (`http`, `https`).
    pub name: &'static str,
    pub upstream: U,
    pub version: Version,
    /// Destination port written in the header (the port clients dialled on the Service);
    /// `None` writes the accepted socket's own local port.
    pub header_port: Option<u16>,
    /// Close a connection after this long without traffic either way; `None` = never.
    pub idle_timeout: Option<Duration>,
    pub metrics: ListenerMetrics,
}

/// Accepts until `stop` is cancelled, then drops the listener (new connections are refused).
/// Each connection runs as a task on `tracker`, so the caller can wait for them to drain.
/// With `limit`, a permit is taken before accept(2): past the cap, clients wait in the kernel
/// backlog instead of being accepted.
pub async fn serve<U: Upstream>(
    listener: TcpListener,
    route: Arc<Route<U>>,
    limit: Option<Arc<Semaphore>>,
    tracker: TaskTracker,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(5);
    loop {
        let permit = match &limit {
            Some(sem) => tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                p = sem.clone().acquire_owned() => p.ok(),
            },
            None => None,
        };
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                route.metrics.accepted.inc();
                tracker.spawn(handle(stream, peer, route.clone(), permit));
            }
            // The connection died in the backlog; nothing wrong with the listener.
            Err(e) if per_connection(&e) => {}
            Err(e) => {
                route.metrics.accept_errors.inc();
                tracing::warn!(
                    listener = route.name,
                    error = %e,
                    retry_in_ms = backoff.as_millis() as u64,
                    "accept failed (file descriptor or memory limit?); retrying"
                );
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
            }
        }
    }
    tracing::info!(listener = route.name, "stopped accepting connections");
}

fn per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO) | Some(libc::EPERM))
}

/// Decrements the active gauge however the task ends.
struct Active(prometheus_client::metrics::gauge::Gauge);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn handle<U: Upstream>(
    mut client: TcpStream,
    peer: SocketAddr,
    route: Arc<Route<U>>,
    _permit: Option<OwnedSemaphorePermit>,
) {
    let m = &route.metrics;
    m.active.inc();
    let _active = Active(m.active.clone());
    let started = Instant::now();
    let _ = client.set_nodelay(true);
    let local = match client.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(listener = route.name, client = %peer, error = %e, "client gone before relay");
            return;
        }
    };
    // Boxed so the dial's state does not enlarge every idle connection's future.
    let (mut up, up_addr) = match Box::pin(route.upstream.dial()).await {
        Ok(x) => x,
        Err(e) => {
            m.failed(e.cause);
            tracing::warn!(
                listener = route.name,
                client = %peer,
                target = %e.target,
                cause = %e.cause,
                error = %e.detail,
                "upstream unreachable; closed the client connection"
            );
            return;
        }
    };
    m.dial_seconds.observe(started.elapsed().as_secs_f64());
    let _ = up.set_nodelay(true);
    let dst = SocketAddr::new(local.ip(), route.header_port.unwrap_or(local.port()));
    let header = encode_tcp(route.version, Source(peer), Destination(dst));
    if let Err(e) = Box::pin(write_header(&mut up, header)).await {
        m.closed[2].inc();
        tracing::debug!(listener = route.name, client = %peer, upstream = %up_addr, error = %e, "writing the PROXY header failed");
        return;
    }
    let counters = copy::Counters {
        to_upstream: counter_atomic(&m.to_upstream),
        to_client: counter_atomic(&m.to_client),
    };
    let (end, to_upstream, to_client) =
        copy::relay(&mut client, &mut up, route.idle_timeout, counters).await;
    let elapsed = started.elapsed();
    m.duration_seconds.observe(elapsed.as_secs_f64());
    let (idx, result) = match &end {
        End::Done => (0, "done"),
        End::Idle => (1, "idle-timeout"),
        End::Error(..) => (2, "error"),
    };
    m.closed[idx].inc();
    if tracing::enabled!(tracing::Level::DEBUG) {
        let error = match &end {
            End::Error(side, e) => format!("{side}: {e}"),
            _ => String::new(),
        };
        tracing::debug!(
            listener = route.name,
            client = %peer,
            upstream = %up_addr,
            to_upstream,
            to_client,
            duration_ms = elapsed.as_millis() as u64,
            result,
            error,
            "connection closed"
        );
    }
}

async fn write_header(up: &mut TcpStream, header: Encoded) -> std::io::Result<()> {
    up.write_all(header.as_bytes()).await
}

fn counter_atomic(c: &prometheus_client::metrics::counter::Counter) -> &AtomicU64 {
    c.inner()
}

/// Dials `upstream`, sends a LOCAL (v2) / UNKNOWN (v1) header and closes: proves the target
/// answers without making it log a broken PROXY header.
pub async fn probe<U: Upstream>(upstream: &U, version: Version) -> Result<(), DialError> {
    let (mut stream, addr) = upstream.dial().await?;
    let header = crate::proxy_protocol::encode_local(version);
    stream
        .write_all(header.as_bytes())
        .await
        .map_err(|e| DialError {
            cause: Cause::of_connect(&e),
            target: upstream.describe().to_string(),
            detail: format!("{addr}: writing the probe header: {e}"),
        })?;
    let _ = stream.shutdown().await;
    Ok(())
}

/// Raises the soft open-files limit to the hard limit: every relayed connection holds two
/// descriptors, and the default soft limit (often 1024) would cap the proxy far below
/// `--max-connections`. Returns the limit now in force.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            lim = want;
        }
        Ok(lim.rlim_cur as u64)
    }
}
