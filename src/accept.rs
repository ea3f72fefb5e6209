//! The one accept loop behind every TCP server of the binary (`proxy`, `edge`, `whoami`): the
//! connection cap, backoff on accept(2) failures, the filter for errors that belong to one
//! connection rather than the listener, task tracking, and the drain at shutdown. What each
//! server does with a connection is its [`Handler`].
//!
//! With several event loops ([`crate::runtime::Loops`]), every loop runs this same accept loop on
//! its own duplicate of each listening socket (one socket, one epoll registration per loop):
//! whichever loop is free first takes the next connection, and the socket stays one bind(2), so
//! a port already in use still fails at start. (SO_REUSEPORT would give each loop a socket of its
//! own, but spreads connections by hash, to a busy loop as readily as an idle one, and lets a
//! second process of the same user silently share the port.)
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

use crate::runtime::Loops;

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
                tracker.spawn(Held {
                    connection,
                    _permit: permit,
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
}

pin_project_lite::pin_project! {
    /// A connection's future and its cap permit, held for the connection's whole life (the cap
    /// counts open connections). A struct rather than `async move { let _p = permit;
    /// connection.await }`: rustc keeps a captured future and the same future being awaited in
    /// separate slots of an async block, so that block is twice the connection's size, and every
    /// open connection's task would carry the copy (1.28 KiB tasks instead of 0.64 KiB).
    struct Held<F> {
        #[pin]
        connection: F,
        _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    }
}

impl<F: Future<Output = ()>> Future for Held<F> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        self.project().connection.poll(cx)
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

/// A listening socket could not be shared with an event loop.
#[derive(Debug, thiserror::Error)]
#[error("sharing the listening sockets with the relay event loops: {0}; lower --threads or raise the open-files limit")]
pub struct ServeError(std::io::Error);

/// The accept side's shared state: connection cap, connection tasks, stop signal, and the
/// event loops beside the caller's that accept too.
pub struct Lifecycle {
    limit: Option<Arc<Semaphore>>,
    tracker: TaskTracker,
    stop_accepting: CancellationToken,
    loops: Loops,
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
            loops: Loops::none(),
        }
    }

    /// Accepts on `loops` too (see the module documentation); they stop when this is dropped.
    pub fn with_loops(mut self, loops: Loops) -> Self {
        self.loops = loops;
        self
    }

    /// Starts accepting on `listeners`, on this runtime and on every extra loop. The handle
    /// finishes when every loop has stopped accepting. Fails only when a listening socket
    /// cannot be duplicated for a loop (e.g. out of descriptors).
    pub fn serve<H: Handler>(
        &self,
        listeners: Vec<(TcpListener, Arc<H>)>,
    ) -> Result<tokio::task::JoinHandle<()>, ServeError> {
        self.serve_until(listeners, self.stop_accepting.clone())
    }

    /// A token that stops the listeners served with it ([`Lifecycle::serve_until`]) and no
    /// others; the shutdown cancels it too.
    pub fn listener_stop(&self) -> CancellationToken {
        self.stop_accepting.child_token()
    }

    /// Like [`Lifecycle::serve`], until `stop` (from [`Lifecycle::listener_stop`]): for
    /// listeners opened and closed while the server runs (`edge --pools`). Their connections
    /// are drained at shutdown with every other.
    pub fn serve_until<H: Handler>(
        &self,
        listeners: Vec<(TcpListener, Arc<H>)>,
        stop: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, ServeError> {
        use std::os::fd::AsFd;
        let mut loops = Vec::new();
        for handle in self.loops.handles() {
            let copies = listeners
                .iter()
                .map(|(l, h)| Ok((l.as_fd().try_clone_to_owned()?, h.clone())))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(ServeError)?;
            let (limit, tracker) = self.parts();
            let stop = stop.clone();
            loops.push(handle.spawn(async move {
                // Registered with this loop's reactor, so it must happen on the loop.
                let mut own = Vec::new();
                for (fd, h) in copies {
                    match TcpListener::from_std(std::net::TcpListener::from(fd)) {
                        Ok(l) => own.push((l, h)),
                        Err(e) => tracing::error!(listener = h.name(), error = %e,
                            "an event loop cannot watch the listening socket; the others still accept"),
                    }
                }
                serve(own, limit, tracker, stop).await
            }));
        }
        let (limit, tracker) = self.parts();
        let first = tokio::spawn(serve(listeners, limit, tracker, stop));
        Ok(tokio::spawn(async move {
            let _ = first.await;
            for l in loops {
                let _ = l.await;
            }
        }))
    }

    fn parts(&self) -> (Option<Arc<Semaphore>>, TaskTracker) {
        (self.limit.clone(), self.tracker.clone())
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

    /// Echoes one byte, counts what the loop reports and notes which thread served.
    #[derive(Default)]
    struct Echo {
        accepted: AtomicUsize,
        threads: std::sync::Mutex<Vec<String>>,
    }

    impl Handler for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn accepted(&self) {
            self.accepted.fetch_add(1, Ordering::Relaxed);
        }
        async fn serve(self: Arc<Self>, mut stream: TcpStream, _peer: SocketAddr) {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            self.threads.lock().unwrap().push(thread);
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
        let server = life
            .serve(vec![(a, handler.clone()), (b, handler.clone())])
            .unwrap();
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
        let server = life.serve(vec![(l, handler.clone())]).unwrap();
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

    /// With extra event loops, a connection is served while the caller's loop cannot run at
    /// all, on one of the extra loops' threads; the drain stops every loop's accepting.
    #[test]
    fn extra_loops_accept_while_the_main_loop_is_blocked() {
        let (rt, loops) = crate::runtime::relay_loops(3, crate::runtime::BusyPoll::Off).unwrap();
        assert_eq!(loops.handles().len(), 2);
        rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let handler = Arc::new(Echo::default());
            let life = Lifecycle::new(0).with_loops(loops);
            let server = life.serve(vec![(l, handler.clone())]).unwrap();
            let client = std::thread::spawn(move || {
                use std::io::{Read, Write};
                (0..5u8)
                    .map(|i| {
                        let mut c = std::net::TcpStream::connect(addr).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                        c.write_all(&[i]).unwrap();
                        let mut b = [0u8; 1];
                        c.read_exact(&mut b).unwrap();
                        b[0]
                    })
                    .collect::<Vec<_>>()
            });
            // Blocks this loop on purpose until the client is done.
            let echoed = client.join().unwrap();
            assert_eq!(echoed, [0, 1, 2, 3, 4]);
            let threads = handler.threads.lock().unwrap().clone();
            assert_eq!(threads.len(), 5);
            assert!(
                threads.iter().all(|t| t.starts_with("relay-")),
                "served on {threads:?}"
            );
            let deadline = Duration::from_secs(15);
            tokio::time::timeout(deadline, life.drain(server, deadline))
                .await
                .unwrap();
            assert!(TcpStream::connect(addr).await.is_err());
        });
    }

    /// What each open connection's task holds beside the handler's future: the permit, no copy.
    #[test]
    fn a_held_connection_adds_only_its_permit() {
        let connection = async {
            let state = [7u8; 512];
            tokio::task::yield_now().await;
            std::hint::black_box(&state);
        };
        let inner = std::mem::size_of_val(&connection);
        let held = Held {
            connection,
            _permit: None,
        };
        let size = std::mem::size_of_val(&held);
        assert!(
            size <= inner + 16,
            "{size} bytes around a {inner}-byte connection future"
        );
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
