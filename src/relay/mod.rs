//! The per-connection relay shared by the subcommands that forward TCP (`proxy`, `edge`): a
//! [`Route`] is the [`Handler`] the shared accept loop (`crate::accept`) runs for each connection.
//!
//! ```text
//! accept (crate::accept: cap, backoff) -> task per connection
//!   -> upstream.dial() -> TCP_NODELAY -> PROXY header -> copy both ways (half-close safe)
//!        (mode::Relaying: copy in this process; or, with the cargo feature kernel-relay,
//!         sockmap: handed to the kernel, ends watched here)
//!   -> metrics + debug log on close
//! ```

pub mod copy;
pub mod lifecycle;
pub mod metrics;
pub mod mode;
#[cfg(feature = "kernel-relay")]
pub mod sockmap;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::accept::Handler;
use crate::proxy_protocol::{encode_tcp, Destination, Source, Version};
use copy::End;
use metrics::ListenerMetrics;
use upstream::{Cause, DialError, Lease, Upstream};

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
    /// How the bytes are moved (`--copy-mode`).
    pub relaying: mode::Relaying,
    pub metrics: ListenerMetrics,
}

impl<U: Upstream> Handler for Route<U> {
    fn name(&self) -> &str {
        self.name
    }

    fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        handle(stream, peer, self)
    }

    fn accepted(&self) {
        self.metrics.accepted.inc();
    }

    fn accept_failed(&self) {
        self.metrics.accept_errors.inc();
    }
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
async fn handle<U: Upstream>(mut client: TcpStream, peer: SocketAddr, route: Arc<Route<U>>) {
    let m = &route.metrics;
    m.active.inc();
    let _active = Active(&m.active);
    let started = Instant::now();
    // The early bytes went out with the header and are counted; only the kernel relay, whose
    // byte counts start at the handover, needs their number.
    #[cfg_attr(not(feature = "kernel-relay"), allow(unused_variables))]
    let Some((mut up, lease, early)) = Box::pin(connect(&mut client, peer, &route)).await
    else {
        return;
    };
    let debug = tracing::enabled!(tracing::Level::DEBUG);
    let upstream_addr = |up: &TcpStream| if debug { up.peer_addr().ok() } else { None };
    let (end, to_upstream, to_client, up_addr) = match &route.relaying {
        mode::Relaying::Copy(copy) => {
            let (end, to_upstream, to_client) =
                copy::relay(&mut client, &mut up, *copy, route.idle_timeout, &m.bytes).await;
            (end, to_upstream, to_client, upstream_addr(&up))
        }
        // Boxed: only connections the kernel relays pay for this future.
        #[cfg(feature = "kernel-relay")]
        mode::Relaying::Kernel { kernel, fallback } => {
            // Asked first: the relay takes the sockets.
            let addr = upstream_addr(&up);
            let relayed = Box::pin(sockmap::relay_or_copy(
                kernel,
                client,
                up,
                early,
                route.idle_timeout,
                *fallback,
                &m.bytes,
            ))
            .await;
            (relayed.0, relayed.1, relayed.2, addr)
        }
    };
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
    if debug {
        let error = match &end {
            End::Error(side, e) => format!("{side}: {e}"),
            _ => String::new(),
        };
        tracing::debug!(
            listener = route.name,
            client = %peer,
            upstream = ?up_addr,
            to_upstream,
            to_client,
            duration_ms = elapsed.as_millis() as u64,
            result,
            error,
            "connection closed"
        );
    }
}

/// Dials the upstream and writes the PROXY header with the client's early bytes; `None` when
/// the connection is over, else the upstream socket, its lease and how many early bytes went.
async fn connect<U: Upstream>(
    client: &mut TcpStream,
    peer: SocketAddr,
    route: &Route<U>,
) -> Option<(TcpStream, U::Lease, u64)> {
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
    m.bytes.to_upstream.inc_by(early as u64);
    Some((up, lease, early as u64))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::copy::CopyMode;
    use crate::relay::metrics::RelayMetrics;
    use crate::relay::upstream::DnsTarget;
    use tokio::net::TcpListener;

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
            relaying: mode::Relaying::Copy(CopyMode::Userspace),
            metrics: RelayMetrics::register(&mut registry).listener("http"),
        });
        let fut = route.serve(client, addr);
        let size = std::mem::size_of_val(&fut);
        // 472 bytes on x86_64 in a release build (496 in a debug one; edge's, with its backend
        // lease, 480); a buffer held inline would be 64 KiB. The task adds the cap permit
        // (`accept::Held`) and tokio's ~100-byte header and rounds the whole to 128 bytes:
        // 640 per connection today, the next step up past 536 bytes of future.
        assert!(size <= 512, "per-connection future is {size} bytes");
    }
}
