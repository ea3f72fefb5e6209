//! The one accept loop behind every TCP server of the binary (`proxy`, `edge`, `whoami`): the
//! connection cap, backoff on accept(2) failures, the filter for errors that belong to one
//! connection rather than the listener, task tracking, and the drain at shutdown. What each
//! server does with a connection is its [`Handler`].
//!
//! One loop rather than one per server because the subtle parts (a permit taken *before*
//! accept(2) so that clients past the cap wait in the kernel backlog, a backoff that shutdown
//! can interrupt, ECONNABORTED not treated as a listener failure) drifted apart when each server
//! had its own copy.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest pause after an accept(2) failure such as EMFILE.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);

/// What one listener does with the connections it accepts.
pub trait Handler: Send + Sync + 'static {
    /// Listener name for logs (`http`, `https`, `whoami`).
    fn name(&self) -> &str;

    /// Serves one accepted connection to its end; runs as its own task.
    fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> impl Future<Output = ()> + Send + 'static;

    /// Counts an accepted connection (metrics); nothing by default.
    fn accepted(&self) {}

    /// Counts an accept(2) failure of the listener itself; nothing by default.
    fn accept_failed(&self) {}
}

/// Accepts on every listener until `stop` is cancelled, then drops them (new connections are
/// refused). Each connection runs as a task on `tracker`, so the caller can wait for them to
/// drain. With `limit`, a permit is taken before accept(2): past the cap, clients wait in the
/// kernel backlog instead of being accepted. One loop serves all listeners so that a quiet
/// listener does not sit on a permit another one could use.
pub async fn serve<H: Handler>(
    listeners: Vec<(TcpListener, Arc<H>)>,
    limit: Option<Arc<Semaphore>>,
    tracker: TaskTracker,
    stop: CancellationToken,
) {
    let mut backoff = FIRST_ACCEPT_BACKOFF;
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
        let handler = &listeners[idx].1;
        next = (idx + 1) % n;
        match accepted {
            Ok((stream, peer)) => {
                backoff = FIRST_ACCEPT_BACKOFF;
                handler.accepted();
                let connection = handler.clone().serve(stream, peer);
                tracker.spawn(async move {
                    // Held for the connection's whole life: the cap counts open connections.
                    let _permit = permit;
                    connection.await;
                });
            }
            // The connection died in the backlog; nothing wrong with the listener.
            Err(e) if per_connection(&e) => {}
            Err(e) => {
                handler.accept_failed();
                tracing::warn!(
                    listener = handler.name(),
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
    for (_, handler) in &listeners {
        tracing::info!(listener = handler.name(), "stopped accepting connections");
    }
}

/// accept(2) errors that concern one connection, not the listener.
fn per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO) | Some(libc::EPERM))
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
        match raise_fd_limit() {
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
    pub fn serve<H: Handler>(
        &self,
        listeners: Vec<(TcpListener, Arc<H>)>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(serve(
            listeners,
            self.limit.clone(),
            self.tracker.clone(),
            self.stop_accepting.clone(),
        ))
    }

    /// Stops accepting, then gives the open connections up to `grace` to finish.
    pub async fn drain(&self, server: tokio::task::JoinHandle<()>, grace: Duration) {
        self.stop_accepting.cancel();
        let _ = server.await;
        self.tracker.close();
        tracing::info!(
            in_flight = self.tracker.len(),
            grace_ms = grace.as_millis() as u64,
            "stopped accepting; waiting for in-flight connections"
        );
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            tracing::info!("all connections finished; exiting");
        } else {
            tracing::warn!(
                open = self.tracker.len(),
                "shutdown grace expired with connections still open; closing them"
            );
        }
    }
}

/// Raises the soft open-files limit to the hard limit: every relayed connection holds two
/// descriptors, and the default soft limit (often 1024) would cap a server far below its
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Echoes one byte and counts what the loop reports.
    #[derive(Default)]
    struct Echo {
        accepted: AtomicUsize,
    }

    impl Handler for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn accepted(&self) {
            self.accepted.fetch_add(1, Ordering::Relaxed);
        }
        async fn serve(self: Arc<Self>, mut stream: TcpStream, _peer: SocketAddr) {
            let mut b = [0u8; 1];
            if stream.read_exact(&mut b).await.is_ok() {
                let _ = stream.write_all(&b).await;
            }
        }
    }

    async fn echo_once(addr: SocketAddr, byte: u8) -> std::io::Result<u8> {
        let mut c = TcpStream::connect(addr).await?;
        c.write_all(&[byte]).await?;
        let mut b = [0u8; 1];
        c.read_exact(&mut b).await?;
        Ok(b[0])
    }

    #[tokio::test]
    async fn serves_every_listener_and_stops_on_cancel() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr_a, addr_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let handler = Arc::new(Echo::default());
        let life = Lifecycle::new(0);
        let server = life.serve(vec![(a, handler.clone()), (b, handler.clone())]);
        let deadline = Duration::from_secs(15);
        for (addr, byte) in [(addr_a, 1), (addr_b, 2), (addr_a, 3)] {
            let got = tokio::time::timeout(deadline, echo_once(addr, byte)).await;
            assert_eq!(got.unwrap().unwrap(), byte);
        }
        assert_eq!(handler.accepted.load(Ordering::Relaxed), 3);
        tokio::time::timeout(deadline, life.drain(server, deadline))
            .await
            .unwrap();
        assert!(
            TcpStream::connect(addr_a).await.is_err(),
            "the listener is closed after the drain"
        );
    }

    #[tokio::test]
    async fn the_cap_holds_clients_in_the_backlog() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let handler = Arc::new(Echo::default());
        let life = Lifecycle::new(1);
        let server = life.serve(vec![(l, handler.clone())]);
        let deadline = Duration::from_secs(15);
        // The first connection holds the only permit until it sends its byte.
        let mut first = TcpStream::connect(addr).await.unwrap();
        let accepted_first = async {
            while handler.accepted.load(Ordering::Relaxed) < 1 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(deadline, accepted_first)
            .await
            .unwrap();
        // The second connects (the kernel backlog completes the handshake) but is not accepted
        // while the first is open.
        let second = tokio::spawn(echo_once(addr, 9));
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(handler.accepted.load(Ordering::Relaxed), 1);
        first.write_all(&[1]).await.unwrap();
        let mut b = [0u8; 1];
        first.read_exact(&mut b).await.unwrap();
        drop(first);
        let got = tokio::time::timeout(deadline, second).await.unwrap();
        assert_eq!(got.unwrap().unwrap(), 9);
        assert_eq!(handler.accepted.load(Ordering::Relaxed), 2);
        life.drain(server, deadline).await;
    }

    #[test]
    fn connection_errors_are_not_listener_errors() {
        use std::io::{Error, ErrorKind};
        for (e, want) in [
            (Error::from(ErrorKind::ConnectionAborted), true),
            (Error::from(ErrorKind::ConnectionReset), true),
            (Error::from_raw_os_error(libc::EPROTO), true),
            (Error::from_raw_os_error(libc::EMFILE), false),
            (Error::from_raw_os_error(libc::ENFILE), false),
            (Error::from_raw_os_error(libc::ENOMEM), false),
        ] {
            assert_eq!(per_connection(&e), want, "{e}");
        }
    }
}
