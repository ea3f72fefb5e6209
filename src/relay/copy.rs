//! Moving bytes both ways between two connected sockets: half-close correct, in order, with an
//! idle timeout, and holding no buffer while a connection is idle.
//!
//! A buffer is borrowed from a small per-thread pool only once a socket is readable, and given
//! back as soon as everything read from it was written out. An idle connection therefore costs
//! its sockets, its task and this future, not 2 x 64 KiB. All copying goes through [`relay`], so
//! another strategy (e.g. splice(2)) can replace it in one place.

use prometheus_client::metrics::counter::Counter;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Read size: large enough that bulk transfers need few syscalls.
const BUF_SIZE: usize = 64 * 1024;
/// Buffers kept per worker thread for reuse.
const POOL_CAP: usize = 32;

/// A pooled buffer. A boxed array rather than a boxed slice: its pointer is thin, which keeps
/// every relay (and so every idle connection) 16 bytes smaller.
pub(super) type Buf = Box<[u8; BUF_SIZE]>;

thread_local! {
    static POOL: RefCell<Vec<Buf>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn take_buf() -> Buf {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| {
        vec![0u8; BUF_SIZE]
            .into_boxed_slice()
            .try_into()
            .expect("a slice of BUF_SIZE bytes")
    })
}

pub(super) fn give_buf(buf: Buf) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_CAP {
            p.push(buf);
        }
    });
}

/// Reads what `from` already has queued, without waiting: 0 when nothing is, at EOF or on an
/// error (the relay meets those again on its first read). Unlike `try_read`, a short read
/// forgets the socket's readiness, so the relay's first read is not a wasted empty read(2).
pub(super) async fn read_queued(from: &mut TcpStream, buf: &mut [u8]) -> usize {
    std::future::poll_fn(|cx| {
        let mut rb = ReadBuf::new(&mut *buf);
        Poll::Ready(match Pin::new(&mut *from).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => rb.filled().len(),
            Poll::Ready(Err(_)) | Poll::Pending => 0,
        })
    })
    .await
}

/// How this process moves bytes from one socket to the other: every variant is a path of
/// [`relay`], chosen by the matches in `CopyMode::starts_bulk` and `CopyMode::bulk_after`.
/// (The kernel relay, `--copy-mode sockmap`, is not a way of copying here: it is
/// `relay::mode::Relaying::Kernel`, in a build with the cargo feature `kernel-relay`.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CopyMode {
    /// Each direction starts with read(2)/write(2) and switches to splice(2) while its reads
    /// keep filling the 64 KiB buffer (bulk), and back after a short splice (requests and
    /// replies): bulk at splice's CPU cost, small messages at one syscall each way.
    #[default]
    Auto,
    /// read(2) into a pooled 64 KiB buffer, write(2) out of it.
    Userspace,
    /// splice(2) through a pooled pipe: the bytes never enter this process.
    Splice,
}

impl CopyMode {
    /// Whether a direction's first read goes through a pipe.
    fn starts_bulk(self) -> bool {
        match self {
            CopyMode::Splice => true,
            CopyMode::Auto | CopyMode::Userspace => false,
        }
    }

    /// Whether the read after one that moved `n` bytes goes through a pipe; `spliced`: that
    /// one went through a pipe rather than the buffer.
    fn bulk_after(self, n: usize, spliced: bool) -> bool {
        match self {
            // A full buffer: more is probably queued, so the sender is streaming. A short
            // splice: the sender's burst is over.
            CopyMode::Auto if spliced => n >= SHORT_SPLICE,
            CopyMode::Auto => n == BUF_SIZE,
            CopyMode::Userspace => false,
            CopyMode::Splice => true,
        }
    }
}

/// In `Auto` mode, a splice shorter than this means the sender's burst is over: the direction
/// goes back to the buffer. Not "shorter than asked": a pipe has 16 slots and the kernel may
/// fill them with fragments smaller than a page while more data is queued, so a splice can come
/// back short in the middle of a bulk transfer.
const SHORT_SPLICE: usize = 16 * 1024;

/// Empty pipes kept per worker thread for reuse (each holds two descriptors, no data pages).
const PIPE_POOL_CAP: usize = 32;

type Pipe = (std::os::fd::OwnedFd, std::os::fd::OwnedFd);

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

fn take_pipe() -> io::Result<Pipe> {
    use nix::fcntl::OFlag;
    if let Some(p) = PIPES.with(|p| p.borrow_mut().pop()) {
        return Ok(p);
    }
    Ok(nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?)
}

/// Only empty pipes may be given back.
fn give_pipe(pipe: Pipe) {
    PIPES.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < PIPE_POOL_CAP {
            p.push(pipe);
        }
    });
}

fn splice(
    from: impl std::os::fd::AsFd,
    to: impl std::os::fd::AsFd,
    len: usize,
) -> io::Result<usize> {
    use nix::fcntl::SpliceFFlags;
    // No offsets: "use the file position", as required for sockets and pipes.
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    Ok(nix::fcntl::splice(from, None, to, None, len, flags)?)
}

/// How a relayed connection ended.
#[derive(Debug)]
pub enum End {
    /// Both sides finished sending and everything was delivered.
    Done,
    /// No byte moved either way for the idle timeout.
    Idle,
    /// A read, write or shutdown failed on the named side ("client" or "upstream").
    Error(&'static str, io::Error),
}

/// Byte counters the relay adds to as data is written: the listener's metrics, shared by all
/// its connections (each relay holds one reference, not four: every byte of the relay is
/// memory per idle connection).
#[derive(Clone, Default)]
pub struct Counters {
    pub to_upstream: Counter,
    pub to_client: Counter,
    /// The part of each that went through a pipe (splice) rather than a buffer.
    pub spliced_to_upstream: Counter,
    pub spliced_to_client: Counter,
    /// Connections handed to the kernel relay (`--copy-mode sockmap`).
    #[cfg(feature = "kernel-relay")]
    pub kernel: Counter,
    /// Directions the kernel relay handed back to the process because their reader lagged.
    #[cfg(feature = "kernel-relay")]
    pub kernel_held: Counter,
}

/// One direction: bytes read from one socket and not yet written to the other. At most one of
/// `buf` and `pipe` holds data at a time, and the path only changes while both are empty, so
/// switching never reorders bytes.
#[derive(Default)]
struct Half {
    buf: Option<Buf>,
    /// The pipe holding `end` bytes not yet written out.
    pipe: Option<Pipe>,
    start: u32,
    end: u32,
    /// The next read goes through a pipe.
    bulk: bool,
    eof: bool,
    done: bool,
    /// The destination's write side was shut down.
    shut: bool,
    total: u64,
}

/// Counts `n` bytes written out.
fn wrote(total: &mut u64, n: usize, counter: &Counter, moved: &mut bool) {
    *total += n as u64;
    counter.inc_by(n as u64);
    *moved = true;
}

/// Which side failed, for the error report.
struct SideError(&'static str, io::Error);

/// One direction's fixed inputs for [`Half::poll`].
struct Way<'a> {
    names: (&'static str, &'static str),
    mode: CopyMode,
    counter: &'a Counter,
    spliced: &'a Counter,
}

impl Half {
    fn new(mode: CopyMode) -> Self {
        Half {
            bulk: mode.starts_bulk(),
            ..Half::default()
        }
    }

    /// Drives this direction as far as it can go; `Ready(Ok)` once the source reached EOF and
    /// all of it was written ([`Relay::step`] passes the EOF on).
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut TcpStream,
        to: &mut TcpStream,
        way: &Way<'_>,
        moved: &mut bool,
    ) -> Poll<Result<(), SideError>> {
        use tokio::io::Interest;
        let names = way.names;
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            if let Some(buf) = &self.buf {
                while self.start < self.end {
                    let pending = &buf[self.start as usize..self.end as usize];
                    let n = ready!(Pin::new(&mut *to).poll_write(cx, pending))
                        .map_err(|e| SideError(names.1, e))?;
                    if n == 0 {
                        return Poll::Ready(Err(SideError(
                            names.1,
                            io::ErrorKind::WriteZero.into(),
                        )));
                    }
                    self.start += n as u32;
                    wrote(&mut self.total, n, way.counter, moved);
                }
                if let Some(buf) = self.buf.take() {
                    give_buf(buf);
                }
            }
            if let Some((r, _)) = &self.pipe {
                while self.end > 0 {
                    ready!(to.poll_write_ready(cx)).map_err(|e| SideError(names.1, e))?;
                    let len = self.end as usize;
                    match to.try_io(Interest::WRITABLE, || splice(r, &*to, len)) {
                        Ok(0) => {
                            return Poll::Ready(Err(SideError(
                                names.1,
                                io::ErrorKind::WriteZero.into(),
                            )))
                        }
                        Ok(n) => {
                            self.end -= n as u32;
                            wrote(&mut self.total, n, way.counter, moved);
                            way.spliced.inc_by(n as u64);
                        }
                        // Readiness was cleared: the next poll_write_ready registers for more.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Poll::Ready(Err(SideError(names.1, e))),
                    }
                }
                if let Some(p) = self.pipe.take() {
                    give_pipe(p);
                }
            }
            if self.eof {
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            // Only borrow a buffer or pipe once the socket says it has something.
            ready!(from.poll_read_ready(cx)).map_err(|e| SideError(names.0, e))?;
            if self.bulk {
                let pipe = take_pipe().map_err(|e| SideError(names.0, e))?;
                match from.try_io(Interest::READABLE, || splice(&*from, &pipe.1, BUF_SIZE)) {
                    Ok(0) => {
                        give_pipe(pipe);
                        self.eof = true;
                    }
                    Ok(n) => {
                        self.pipe = Some(pipe);
                        self.end = n as u32;
                        self.bulk = way.mode.bulk_after(n, true);
                        *moved = true;
                    }
                    // Readiness was cleared: the next poll_read_ready registers for more.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => give_pipe(pipe),
                    Err(e) => {
                        give_pipe(pipe);
                        return Poll::Ready(Err(SideError(names.0, e)));
                    }
                }
                continue;
            }
            let mut buf = take_buf();
            let mut rb = ReadBuf::new(&mut buf[..]);
            match Pin::new(&mut *from).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        give_buf(buf);
                        self.eof = true;
                    } else {
                        self.bulk = way.mode.bulk_after(n, false);
                        self.buf = Some(buf);
                        self.start = 0;
                        self.end = n as u32;
                        *moved = true;
                    }
                }
                Poll::Ready(Err(e)) => {
                    give_buf(buf);
                    return Poll::Ready(Err(SideError(names.0, e)));
                }
                Poll::Pending => {
                    give_buf(buf);
                    return Poll::Pending;
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    #[project = RelayProj]
    /// The relay as a plain struct rather than an `async` block: it is alive for the whole life
    /// of every connection, so its size is memory per idle connection.
    pub struct Relay<'a> {
        client: &'a mut TcpStream,
        upstream: &'a mut TcpStream,
        counters: &'a Counters,
        up: Half,
        down: Half,
        mode: CopyMode,
        idle: Option<Duration>,
        last: Instant,
        // Structurally pinned: never moved out of `Relay`.
        #[pin]
        timer: Sleep,
    }
}

impl Future for Relay<'_> {
    type Output = (End, u64, u64);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let end = match this.step(cx) {
            Poll::Ready(end) => end,
            Poll::Pending => return Poll::Pending,
        };
        for buf in [this.up.buf.take(), this.down.buf.take()]
            .into_iter()
            .flatten()
        {
            give_buf(buf);
        }
        // A pipe still holding data is closed, never pooled.
        drop((this.up.pipe.take(), this.down.pipe.take()));
        Poll::Ready((end, this.up.total, this.down.total))
    }
}

impl RelayProj<'_, '_> {
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        let mut moved = false;
        let up = Way {
            names: ("client", "upstream"),
            mode: *self.mode,
            counter: &self.counters.to_upstream,
            spliced: &self.counters.spliced_to_upstream,
        };
        let a = self
            .up
            .poll(cx, self.client, self.upstream, &up, &mut moved);
        if let Poll::Ready(Err(SideError(side, e))) = a {
            return Poll::Ready(End::Error(side, e));
        }
        let down = Way {
            names: ("upstream", "client"),
            mode: *self.mode,
            counter: &self.counters.to_client,
            spliced: &self.counters.spliced_to_client,
        };
        let b = self
            .down
            .poll(cx, self.upstream, self.client, &down, &mut moved);
        if let Poll::Ready(Err(SideError(side, e))) = b {
            return Poll::Ready(End::Error(side, e));
        }
        if a.is_ready() && b.is_ready() {
            // Closing the sockets sends both FINs (each receive side is drained, so close(2)
            // sends no reset): a shutdown(2) here would be a wasted syscall per connection.
            return Poll::Ready(End::Done);
        }
        for (half, to, name) in [
            (&mut *self.up, &**self.upstream, "upstream"),
            (&mut *self.down, &**self.client, "client"),
        ] {
            if half.done && !half.shut {
                half.shut = true;
                if let Err(e) = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write) {
                    return Poll::Ready(End::Error(name, e));
                }
            }
        }
        if let Some(idle) = *self.idle {
            if moved {
                *self.last = Instant::now();
            }
            let timer = &mut self.timer;
            // Activity only records a timestamp; the timer, when it fires, moves itself to
            // `last + idle` if something happened meanwhile.
            while timer.as_mut().poll(cx).is_ready() {
                let due = *self.last + idle;
                if due <= Instant::now() {
                    return Poll::Ready(End::Idle);
                }
                timer.as_mut().reset(due);
            }
        }
        Poll::Pending
    }
}

/// Relays until both directions are finished, either side fails, or nothing moved for `idle`
/// (`None` = no limit). Resolves to how it ended and the bytes moved (to upstream, to client).
pub fn relay<'a>(
    client: &'a mut TcpStream,
    upstream: &'a mut TcpStream,
    mode: CopyMode,
    idle: Option<Duration>,
    counters: &'a Counters,
) -> Relay<'a> {
    Relay {
        client,
        upstream,
        counters,
        up: Half::new(mode),
        down: Half::new(mode),
        mode,
        idle,
        last: Instant::now(),
        // Not polled (so never registered with the timer wheel) when `idle` is None.
        timer: tokio::time::sleep(idle.unwrap_or(Duration::from_secs(86400 * 365))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Two connected pairs: (client-facing end held by the test, relay's client end) and
    /// (relay's upstream end, upstream end held by the test).
    async fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
        async fn pair() -> (TcpStream, TcpStream) {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (b, _) = l.accept().await.unwrap();
            (a, b)
        }
        (pair().await, pair().await)
    }

    /// A relay path under test: copying in this process, or (with the cargo feature
    /// `kernel-relay`) handing the pair to the kernel relay.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Path {
        Copy(CopyMode),
        #[cfg(feature = "kernel-relay")]
        Kernel,
    }

    const USERSPACE: Path = Path::Copy(CopyMode::Userspace);

    /// Every path this build has.
    const ALL_PATHS: &[Path] = &[
        Path::Copy(CopyMode::Auto),
        USERSPACE,
        Path::Copy(CopyMode::Splice),
        #[cfg(feature = "kernel-relay")]
        Path::Kernel,
    ];

    /// The paths an idle timeout is tested on: one in this process, and the kernel relay.
    const IDLE_PATHS: &[Path] = &[
        USERSPACE,
        #[cfg(feature = "kernel-relay")]
        Path::Kernel,
    ];

    /// Starts a relay on `path`; on the kernel relay, returns once the kernel took the pair
    /// (failing the test when it relays in this process instead).
    async fn spawn_relay_mode(
        c: TcpStream,
        u: TcpStream,
        idle: Option<Duration>,
        path: Path,
    ) -> tokio::task::JoinHandle<(End, u64, u64)> {
        spawn_relay_watched(c, u, idle, path).await.0
    }

    /// [`spawn_relay_mode`], with the relay's counters.
    async fn spawn_relay_watched(
        c: TcpStream,
        u: TcpStream,
        idle: Option<Duration>,
        path: Path,
    ) -> (tokio::task::JoinHandle<(End, u64, u64)>, Spliced) {
        let counters = Spliced::default();
        let task = spawn_relay_counted(c, u, idle, path, counters.clone());
        #[cfg(feature = "kernel-relay")]
        if path == Path::Kernel {
            within("the kernel taking the connection", async {
                while counters.kernel.get() == 0 {
                    assert!(!task.is_finished(), "the relay ended before the handover");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
        }
        (task, counters)
    }

    /// The relay's counters, readable while it runs.
    type Spliced = Arc<Counters>;

    fn spawn_relay_counted(
        mut c: TcpStream,
        mut u: TcpStream,
        idle: Option<Duration>,
        path: Path,
        counters: Spliced,
    ) -> tokio::task::JoinHandle<(End, u64, u64)> {
        tokio::spawn(async move {
            let r = match path {
                Path::Copy(mode) => relay(&mut c, &mut u, mode, idle, &counters).await,
                #[cfg(feature = "kernel-relay")]
                Path::Kernel => {
                    use super::super::sockmap;
                    let kernel = sockmap::tests::kernel();
                    let fallback = CopyMode::Auto;
                    sockmap::relay_or_copy(&kernel, c, u, 0, idle, fallback, &counters).await
                }
            };
            assert_eq!(counters.to_upstream.get(), r.1);
            assert_eq!(counters.to_client.get(), r.2);
            r
        })
    }

    /// How long a read (or the relay task) in these tests may take before the test fails.
    const DEADLINE: Duration = Duration::from_secs(30);

    /// Awaits `fut`, failing the test naming `what` instead of hanging when it is not done
    /// within [`DEADLINE`].
    async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(DEADLINE, fut)
            .await
            .unwrap_or_else(|_| panic!("{what}: not done within {DEADLINE:?}"))
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bulk_both_ways_in_order() {
        for &mode in ALL_PATHS {
            bulk_both_ways_in_order_with(mode).await;
        }
    }

    async fn bulk_both_ways_in_order_with(mode: Path) {
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        let task = spawn_relay_mode(rc, ru, Some(Duration::from_secs(30)), mode).await;
        let up = pattern(1, 8 << 20);
        let down = pattern(2, 5 << 20);
        let (up2, down2) = (up.clone(), down.clone());
        let s = tokio::spawn(async move {
            let (mut r, mut w) = server.split();
            let mut got = Vec::new();
            let (rr, wr) = within("upstream exchanging its bytes", async {
                tokio::join!(r.read_to_end(&mut got), async {
                    w.write_all(&down2).await?;
                    w.shutdown().await
                })
            })
            .await;
            rr.unwrap();
            wr.unwrap();
            assert!(
                got == up2,
                "upstream received different bytes: {} of {}, first difference at {:?}",
                got.len(),
                up2.len(),
                got.iter().zip(&up2).position(|(a, b)| a != b)
            );
        });
        let (mut r, mut w) = client.split();
        let mut got = Vec::new();
        let (rr, wr) = within("client exchanging its bytes", async {
            tokio::join!(r.read_to_end(&mut got), async {
                w.write_all(&up).await?;
                w.shutdown().await
            })
        })
        .await;
        rr.unwrap();
        wr.unwrap();
        assert!(got == down, "client received different bytes");
        within("upstream task", s).await.unwrap();
        let (end, a, b) = within("relay", task).await.unwrap();
        assert!(matches!(end, End::Done), "{end:?}");
        assert_eq!((a, b), (up.len() as u64, down.len() as u64));
    }

    #[tokio::test]
    async fn half_close_delivers_reply_after_client_eof() {
        for &mode in ALL_PATHS {
            half_close_delivers_reply_after_client_eof_with(mode).await;
        }
    }

    async fn half_close_delivers_reply_after_client_eof_with(mode: Path) {
        let ((client, rc), (ru, server)) = pairs().await;
        let task = spawn_relay_mode(rc, ru, None, mode).await;
        let reply = pattern(3, 1 << 20);
        request_then_reply(client, server, &reply, "").await;
        assert!(matches!(within("relay", task).await.unwrap().0, End::Done));
    }

    /// The client sends "request" and its FIN; the upstream reads both, then sends `reply`
    /// and closes; the client reads it whole. `what` names the case in failures.
    async fn request_then_reply(
        mut client: TcpStream,
        mut server: TcpStream,
        reply: &[u8],
        what: &str,
    ) {
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        // The upstream sees EOF only after the request, and answers after that.
        let mut req = Vec::new();
        within("upstream reading the request", server.read_to_end(&mut req))
            .await
            .unwrap();
        assert_eq!(req, b"request", "{what}");
        server.write_all(reply).await.unwrap();
        drop(server);
        let mut got = Vec::new();
        within("client reading the reply", client.read_to_end(&mut got))
            .await
            .unwrap();
        assert!(got == reply, "{what}: the reply arrived changed");
    }

    /// The kernel relay takes established sockets only: a client that sends its request and
    /// FIN while the relay is handing the pair over is relayed, whichever side of the
    /// handover its FIN lands on (before: copied in the process; between the two sockets: the
    /// client's last bytes are copied here; after: the kernel). Many rounds, to land on each.
    #[cfg(feature = "kernel-relay")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_fin_racing_the_kernel_handover() {
        for round in 0..300 {
            let ((client, rc), (ru, server)) = pairs().await;
            let counters = Spliced::default();
            let task = spawn_relay_counted(rc, ru, None, Path::Kernel, counters);
            if round % 3 == 1 {
                tokio::task::yield_now().await;
            }
            request_then_reply(client, server, b"reply", &format!("round {round}")).await;
            let (end, a, b) = within("relay", task).await.unwrap();
            assert!(matches!(end, End::Done), "round {round}: {end:?}");
            assert_eq!((a, b), (7, 5), "round {round}");
        }
    }

    /// The kernel queues redirected bytes without limit, in memory charged to no socket: the
    /// kernel relay must hold a fast sender back from a slow reader itself. The upstream
    /// streams 256 MiB at a client that reads nothing for a second; by then it can only have
    /// written socket buffers and the relay's backlog limit (a relay without flow control lets
    /// it write everything). Then the client reads it all, intact and in order.
    #[cfg(feature = "kernel-relay")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kernel_relay_holds_a_fast_sender_back_from_a_slow_reader() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        const CHUNK: usize = 1 << 20;
        const CHUNKS: usize = 256;
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        let (task, counters) = spawn_relay_watched(rc, ru, None, Path::Kernel).await;
        let written = Arc::new(AtomicUsize::new(0));
        let w = written.clone();
        let sender = tokio::spawn(async move {
            let chunk = pattern(5, CHUNK);
            for _ in 0..CHUNKS {
                server.write_all(&chunk).await.unwrap();
                w.fetch_add(CHUNK, Relaxed);
            }
            server.shutdown().await.unwrap();
            server
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = written.load(Relaxed);
        assert!(
            held <= 48 << 20,
            "the upstream wrote {} MiB at a client that read nothing",
            held >> 20
        );
        let chunk = pattern(5, CHUNK);
        let mut buf = vec![0u8; CHUNK];
        for i in 0..CHUNKS {
            within("client reading", client.read_exact(&mut buf))
                .await
                .unwrap();
            if buf != chunk {
                let first = buf.iter().zip(&chunk).position(|(a, b)| a != b).unwrap();
                let found = chunk.windows(16).position(|w| w == &buf[first..first + 16]);
                panic!("chunk {i} arrived changed at {first}; those bytes are at {found:?} of the pattern");
            }
        }
        assert_eq!(
            within("client EOF", client.read(&mut buf)).await.unwrap(),
            0
        );
        client.shutdown().await.unwrap();
        let mut server = within("sender", sender).await.unwrap();
        let mut rest = Vec::new();
        within("upstream EOF", server.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(rest.is_empty());
        let (end, a, b) = within("relay", task).await.unwrap();
        assert!(matches!(end, End::Done), "{end:?}");
        assert_eq!((a, b), (0, (CHUNK * CHUNKS) as u64));
        assert_eq!(
            counters.kernel_held.get(),
            1,
            "the lagging direction was not held"
        );
    }

    #[tokio::test]
    async fn upstream_half_close_still_takes_client_data() {
        for &mode in ALL_PATHS {
            upstream_half_close_still_takes_client_data_with(mode).await;
        }
    }

    async fn upstream_half_close_still_takes_client_data_with(mode: Path) {
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        let task = spawn_relay_mode(rc, ru, None, mode).await;
        server.write_all(b"banner").await.unwrap();
        server.shutdown().await.unwrap();
        let mut got = Vec::new();
        within("client reading the banner", client.read_to_end(&mut got))
            .await
            .unwrap();
        assert_eq!(got, b"banner");
        client.write_all(b"late data").await.unwrap();
        client.shutdown().await.unwrap();
        let mut req = Vec::new();
        within(
            "upstream reading the late data",
            server.read_to_end(&mut req),
        )
        .await
        .unwrap();
        assert_eq!(req, b"late data");
        assert!(matches!(within("relay", task).await.unwrap().0, End::Done));
    }

    #[tokio::test]
    async fn idle_timeout_closes_both_sides() {
        for &mode in IDLE_PATHS {
            idle_timeout_closes_both_sides_with(mode).await;
        }
    }

    async fn idle_timeout_closes_both_sides_with(mode: Path) {
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        let started = std::time::Instant::now();
        let task = spawn_relay_mode(rc, ru, Some(Duration::from_millis(200)), mode).await;
        client.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        within("upstream reading x", server.read_exact(&mut b))
            .await
            .unwrap();
        let (end, _, _) = within("relay", task).await.unwrap();
        assert!(matches!(end, End::Idle), "{end:?}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        let eof = |what| format!("{what} waiting for EOF");
        assert_eq!(
            within(&eof("client"), client.read(&mut b)).await.unwrap(),
            0
        );
        assert_eq!(
            within(&eof("upstream"), server.read(&mut b)).await.unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn activity_postpones_idle_timeout() {
        for &mode in IDLE_PATHS {
            activity_postpones_idle_timeout_with(mode).await;
        }
    }

    async fn activity_postpones_idle_timeout_with(mode: Path) {
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        // Real sockets, so real time: a write every 100 ms against a 1 s idle timeout leaves
        // 900 ms of slack for a loaded machine, and the writes go on past the first second.
        let idle = Duration::from_millis(1000);
        let task = spawn_relay_mode(rc, ru, Some(idle), mode).await;
        let started = std::time::Instant::now();
        let mut b = [0u8; 1];
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.write_all(b"x").await.unwrap();
            within("upstream reading x", server.read_exact(&mut b))
                .await
                .unwrap();
        }
        assert!(!task.is_finished(), "closed although traffic kept flowing");
        let (end, a, _) = within("relay", task).await.unwrap();
        assert!(matches!(end, End::Idle), "{end:?}");
        assert_eq!(a, 12);
        assert!(started.elapsed() >= Duration::from_millis(1200 + 1000));
    }

    #[tokio::test]
    async fn reset_on_one_side_closes_the_other() {
        for &mode in ALL_PATHS {
            reset_on_one_side_closes_the_other_with(mode).await;
        }
    }

    async fn reset_on_one_side_closes_the_other_with(mode: Path) {
        let ((client, rc), (ru, mut server)) = pairs().await;
        let task = spawn_relay_mode(rc, ru, None, mode).await;
        // SO_LINGER 0 makes close send RST.
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client);
        let end = within("relay", task).await.unwrap().0;
        let mut b = [0u8; 16];
        let n = within("upstream waiting for the close", server.read(&mut b)).await;
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // The reset surfaces as a read error on the client side.
        assert!(matches!(end, End::Error("client", _)), "{end:?}");
    }

    /// `auto` mode: 1-byte and multi-MiB messages alternate on one connection, each answered
    /// through the relay before the next is sent. The multi-MiB ones switch the direction to
    /// splice, the first small message after them switches it back, and every later small
    /// message goes through the buffer; every byte arrives once and in order. Ends with a
    /// half-close from the client while the reply is still streaming.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auto_switches_between_buffer_and_pipe_in_order() {
        let ((mut client, rc), (ru, mut server)) = pairs().await;
        let spliced = Spliced::default();
        let task = spawn_relay_counted(rc, ru, None, Path::Copy(CopyMode::Auto), spliced.clone());
        let up = || spliced.spliced_to_upstream.get();
        let sizes = [1usize, 4 << 20, 1, 1, 1, 3 << 20, 1, 1, 6 << 20, 1, 1];
        let mut sent = 0u64;
        for (i, &n) in sizes.iter().enumerate() {
            let chunk = pattern(i as u64 + 10, n);
            let before = up();
            let reader = async {
                let mut got = vec![0u8; n];
                server.read_exact(&mut got).await.unwrap();
                // The answer travels back through the relay before the next message is sent.
                server.write_all(&[i as u8]).await.unwrap();
                got
            };
            let (got, wrote) = within(&format!("message {i}"), async {
                tokio::join!(reader, client.write_all(&chunk))
            })
            .await;
            wrote.unwrap();
            assert!(got == chunk, "message {i} ({n} bytes) arrived changed");
            let mut ack = [0u8; 1];
            within("ack", client.read_exact(&mut ack)).await.unwrap();
            assert_eq!(ack[0], i as u8);
            sent += n as u64;
            let spliced_now = up() - before;
            match (n, sizes[i.saturating_sub(1)], sizes[i.saturating_sub(2)]) {
                (n, ..) if n > 1 => assert!(
                    spliced_now >= (n as u64) / 2,
                    "message {i}: only {spliced_now} of {n} bytes spliced"
                ),
                // The first small message after bulk may still take the pipe (and switches back).
                (_, prev, _) if prev > 1 => assert!(spliced_now <= 1),
                (_, _, _) => assert_eq!(spliced_now, 0, "message {i} took the pipe"),
            }
        }
        // The 1-byte acks never made the other direction stream.
        assert_eq!(spliced.spliced_to_client.get(), 0);
        // Half-close while the reply streams: the client's EOF reaches the upstream, and the
        // reply still arrives whole.
        client.shutdown().await.unwrap();
        let reply = pattern(99, 5 << 20);
        let (mut r, mut w) = server.split();
        let mut rest = Vec::new();
        let (read, wrote) = within("reply after half-close", async {
            tokio::join!(r.read_to_end(&mut rest), async {
                w.write_all(&reply).await?;
                w.shutdown().await
            })
        })
        .await;
        read.unwrap();
        wrote.unwrap();
        assert!(rest.is_empty());
        let mut got = Vec::new();
        within("client reading the reply", client.read_to_end(&mut got))
            .await
            .unwrap();
        assert!(got == reply, "reply after half-close arrived changed");
        let (end, a, b) = within("relay", task).await.unwrap();
        assert!(matches!(end, End::Done), "{end:?}");
        assert_eq!(a, sent);
        assert_eq!(b, sizes.len() as u64 + reply.len() as u64);
        assert!(
            spliced.spliced_to_client.get() > 0,
            "the streamed reply was not spliced"
        );
    }

    /// An abrupt peer in the middle of a spliced transfer: the relay ends with the error on
    /// that side and the other side is closed.
    #[tokio::test]
    async fn reset_during_a_spliced_transfer_closes_the_other_side() {
        for mode in [CopyMode::Auto, CopyMode::Splice] {
            let ((mut client, rc), (ru, server)) = pairs().await;
            let spliced = Spliced::default();
            let task = spawn_relay_counted(rc, ru, None, Path::Copy(mode), spliced.clone());
            let payload = pattern(7, 8 << 20);
            let writer = tokio::spawn(async move {
                let _ = client.write_all(&payload).await;
                client
            });
            // Wait until bytes went through the pipe, then reset the upstream mid-transfer.
            within("splicing to start", async {
                while spliced.spliced_to_upstream.get() == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
            socket2::SockRef::from(&server)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(server);
            let (end, _, _) = within("relay", task).await.unwrap();
            assert!(
                matches!(end, End::Error("upstream", _)),
                "{mode:?}: {end:?}"
            );
            let mut client = within("client writer", writer).await.unwrap();
            let mut b = [0u8; 16];
            let n = within("client waiting for the close", client.read(&mut b)).await;
            assert!(matches!(n, Ok(0) | Err(_)), "{mode:?}: {n:?}");
        }
    }
}
