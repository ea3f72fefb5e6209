//! The accept loop and per-connection relay shared by the subcommands that forward TCP.
//!
//! ```text
//! accept (connection cap, backoff on EMFILE) -> task per connection
//!   -> upstream.dial() -> TCP_NODELAY -> PROXY header -> copy both ways (half-close safe)
//!   -> metrics + debug log on close
//! ```

pub mod copy;
pub mod lifecycle;
pub mod metrics;
pub mod upstream;

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::listen::{bind, bind_v6only, parse_listen, ListenAddr};
use crate::proxy_protocol::{encode_tcp, Destination, Source, Version};
pub use copy::{CopyMode, End};
pub use lifecycle::{Lifecycle, ReadyState};
pub use metrics::{ListenerMetrics, RelayMetrics};
pub use upstream::{Cause, DialError, DnsTarget, Lease, Upstream};

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
    pub copy: CopyMode,
    pub metrics: ListenerMetrics,
}

/// Accepts on every listener until `stop` is cancelled, then drops them (new connections are
/// refused). Each connection runs as a task on `tracker`, so the caller can wait for them to
/// drain. With `limit`, a permit is taken before accept(2): past the cap, clients wait in the
/// kernel backlog instead of being accepted. One loop serves all listeners so that a quiet
/// listener does not sit on a permit another one could use.
pub async fn serve<U: Upstream>(
    listeners: Vec<(TcpListener, Arc<Route<U>>)>,
    limit: Option<Arc<Semaphore>>,
    tracker: TaskTracker,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(5);
    let mut next = 0;
    let n = listeners.len();
    if n == 0 {
        return;
    }
    loop {
        let permit = match &limit {
            Some(sem) => tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                p = sem.clone().acquire_owned() => p.ok(),
            },
            None => None,
        };
        // Poll the listeners starting after the last one served, so none can starve another.
        let accept_any = poll_fn(|cx| {
            for i in 0..n {
                let idx = (next + i) % n;
                if let Poll::Ready(r) = listeners[idx].0.poll_accept(cx) {
                    return Poll::Ready((idx, r));
                }
            }
            Poll::Pending
        });
        let (idx, accepted) = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = accept_any => r,
        };
        let route = &listeners[idx].1;
        next = (idx + 1) % n;
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
    for (_, route) in &listeners {
        tracing::info!(listener = route.name, "stopped accepting connections");
    }
}

fn per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO) | Some(libc::EPERM))
}

/// Decrements the active gauge however the task ends.
struct Active<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One connection's task. Only what the relay phase needs lives in this future; dialling and
/// the header write run in a boxed future that is freed before the relay starts.
async fn handle<U: Upstream>(
    mut client: TcpStream,
    peer: SocketAddr,
    route: Arc<Route<U>>,
    _permit: Option<OwnedSemaphorePermit>,
) {
    let m = &route.metrics;
    m.active.inc();
    let _active = Active(&m.active);
    let started = Instant::now();
    let Some((mut up, lease)) = Box::pin(connect(&mut client, peer, &route)).await else {
        return;
    };
    let counters = copy::Counters {
        to_upstream: m.to_upstream.inner(),
        to_client: m.to_client.inner(),
    };
    let (end, to_upstream, to_client) = copy::relay(
        &mut client,
        &mut up,
        route.copy,
        route.idle_timeout,
        counters,
    )
    .await;
    lease.record(to_upstream, to_client);
    drop(lease);
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
            upstream = ?up.peer_addr().ok(),
            to_upstream,
            to_client,
            duration_ms = elapsed.as_millis() as u64,
            result,
            error,
            "connection closed"
        );
    }
}

/// Dials the upstream and writes the PROXY header; `None` when the connection is over.
async fn connect<U: Upstream>(
    client: &mut TcpStream,
    peer: SocketAddr,
    route: &Route<U>,
) -> Option<(TcpStream, U::Lease)> {
    let m = &route.metrics;
    let started = Instant::now();
    let _ = client.set_nodelay(true);
    let local = match client.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(listener = route.name, client = %peer, error = %e, "client gone before relay");
            return None;
        }
    };
    let (mut up, up_addr, lease) = match route.upstream.dial(peer).await {
        Ok(x) => x,
        Err(e) => {
            m.failed(e.cause);
            tracing::warn!(
                listener = route.name,
                client = %peer,
                upstream = %e.target,
                cause = %e.cause,
                error = %e.detail,
                "upstream unreachable; closed the client connection"
            );
            return None;
        }
    };
    m.dial_seconds.observe(started.elapsed().as_secs_f64());
    let _ = up.set_nodelay(true);
    let dst = SocketAddr::new(local.ip(), route.header_port.unwrap_or(local.port()));
    let header = encode_tcp(route.version, Source(peer), Destination(dst));
    // Send the header together with whatever the client already sent (an HTTP request, a TLS
    // ClientHello): one segment instead of two, so the ingress controller is woken once per
    // new connection. Only bytes already queued are taken; nothing waits for the client.
    let mut first = copy::take_buf();
    let hlen = header.as_bytes().len();
    first[..hlen].copy_from_slice(header.as_bytes());
    let early = copy::read_queued(client, &mut first[hlen..]).await;
    let written = up.write_all(&first[..hlen + early]).await;
    copy::give_buf(first);
    if let Err(e) = written {
        m.closed[2].inc();
        tracing::debug!(listener = route.name, client = %peer, upstream = %up_addr, error = %e, "writing the PROXY header failed");
        return None;
    }
    m.to_upstream.inc_by(early as u64);
    Some((up, lease))
}

/// The end of a graceful shutdown, once readiness already fails: keep accepting for `delay`
/// (so endpoint removal propagates), stop accepting, then give in-flight connections up to
/// `grace` to finish.
async fn drain(
    server: tokio::task::JoinHandle<()>,
    stop_accepting: &CancellationToken,
    tracker: &TaskTracker,
    delay: Duration,
    grace: Duration,
) {
    tracing::info!(
        delay_ms = delay.as_millis() as u64,
        "shutting down: /readyz fails now; still accepting during the shutdown delay"
    );
    tokio::time::sleep(delay).await;
    stop_accepting.cancel();
    let _ = server.await;
    tracker.close();
    tracing::info!(
        in_flight = tracker.len(),
        grace_ms = grace.as_millis() as u64,
        "stopped accepting; waiting for in-flight connections"
    );
    if tokio::time::timeout(grace, tracker.wait()).await.is_ok() {
        tracing::info!("all connections finished; exiting");
    } else {
        tracing::warn!(
            open = tracker.len(),
            "shutdown grace expired with connections still open; closing them"
        );
    }
}

/// Dials `upstream`, sends a LOCAL (v2) / UNKNOWN (v1) header and closes: proves the target
/// answers without making it log a broken PROXY header.
pub async fn probe<U: Upstream>(upstream: &U, version: Version) -> Result<(), DialError> {
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let (mut stream, addr, _lease) = upstream.dial(unspecified).await?;
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
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (mut cur, max) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if cur < max {
        setrlimit(Resource::RLIMIT_NOFILE, max, max)?;
        cur = max;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every open connection keeps one of these futures alive: guard its size (no buffers).
    #[tokio::test]
    async fn per_connection_future_stays_small() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let route = Arc::new(Route {
            name: "http",
            upstream: DnsTarget::new("127.0.0.1", addr.port(), Duration::from_secs(1)),
            version: Version::V1,
            header_port: Some(80),
            idle_timeout: Some(Duration::from_secs(60)),
            copy: CopyMode::Userspace,
            metrics: RelayMetrics::register(&mut registry).listener("http"),
        });
        let fut = handle(client, addr, route, None);
        let size = std::mem::size_of_val(&fut);
        // 528 bytes on x86_64 when written; a buffer held inline would be 64 KiB.
        assert!(size <= 600, "per-connection future is {size} bytes");
    }
}
