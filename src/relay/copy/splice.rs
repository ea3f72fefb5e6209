//! Linux zero-copy path for [`Half`]: socket -> pipe -> socket with splice(2), so payload bytes
//! never enter user space. It only pays off for bulk data: for a short message it costs one more
//! syscall than read/write (a short splice cannot tell "socket drained" from "pipe full", so
//! readiness is only cleared by an EAGAIN). A direction therefore switches to splicing while its
//! reads come back large (>= `BULK_MIN`) and back to the buffer as soon as one is short; the
//! switch happens only with buffer and pipe empty, so order is kept. Like the buffers, a pipe is
//! borrowed from a per-thread pool only while it holds data, so an idle connection holds no pipe
//! (no memory, no descriptors).

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::{Half, SideError};

/// Bytes asked for per splice into the pipe (the default pipe capacity).
const CHUNK: usize = 64 * 1024;
/// Pipes kept per worker thread for reuse.
const POOL_CAP: usize = 32;
/// A read at least this large means data queues faster than it is relayed: splice from now on.
const BULK_MIN: usize = 16 * 1024;

/// Per-direction splice state, part of [`Half`].
#[derive(Default)]
pub(super) struct PipeState {
    /// Next read goes through a pipe.
    pub(super) bulk: bool,
    pipe: Option<Pipe>,
    /// Bytes in `pipe` not yet spliced out.
    len: usize,
}

impl PipeState {
    /// Records the size of a read (buffer or pipe) to pick the path of the next one.
    pub(super) fn saw_read(&mut self, n: usize) {
        self.bulk = n >= BULK_MIN;
    }
}

/// Both ends of one pipe; only ever pooled while empty.
pub(super) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        Ok(unsafe {
            Pipe {
                r: OwnedFd::from_raw_fd(fds[0]),
                w: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }
}

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

fn take_pipe() -> io::Result<Pipe> {
    match PIPES.with(|p| p.borrow_mut().pop()) {
        Some(p) => Ok(p),
        None => Pipe::new(),
    }
}

fn give_pipe(pipe: Pipe) {
    PIPES.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_CAP {
            p.push(pipe);
        }
    });
}

/// Bytes spliced into pipes, so tests can tell the zero-copy path was really taken.
#[cfg(test)]
static SPLICED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain syscall on descriptors that outlive the call; null offsets = stream fds.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl Half {
    /// Writes out whatever is in the pipe; `Ready(Ok)` once it is empty (and back in the pool).
    pub(super) fn drain_pipe(
        &mut self,
        cx: &mut Context<'_>,
        to: &mut TcpStream,
        side: &'static str,
        counter: &AtomicU64,
        moved: &mut bool,
    ) -> Poll<Result<(), SideError>> {
        let Some(pipe) = &self.pipe.pipe else {
            return Poll::Ready(Ok(()));
        };
        let (pr, out) = (pipe.r.as_raw_fd(), to.as_raw_fd());
        while self.pipe.len > 0 {
            ready!(to.poll_write_ready(cx)).map_err(|e| SideError(side, e))?;
            match to.try_io(Interest::WRITABLE, || splice(pr, out, self.pipe.len)) {
                Ok(0) => return Poll::Ready(Err(SideError(side, io::ErrorKind::WriteZero.into()))),
                Ok(n) => {
                    self.pipe.len -= n;
                    self.total += n as u64;
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                    *moved = true;
                }
                // readiness is cleared now; the next poll_write_ready registers the waker
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(SideError(side, e))),
            }
        }
        if let Some(pipe) = self.pipe.pipe.take() {
            give_pipe(pipe);
        }
        Poll::Ready(Ok(()))
    }

    /// One splice from the (readable) source into an empty pipe. On EAGAIN the socket's
    /// readiness is cleared, so the caller's next poll_read_ready waits for data.
    pub(super) fn fill_pipe(
        &mut self,
        from: &mut TcpStream,
        side: &'static str,
        moved: &mut bool,
    ) -> Result<(), SideError> {
        let pipe = take_pipe().map_err(|e| SideError(side, e))?;
        let (inp, pw) = (from.as_raw_fd(), pipe.w.as_raw_fd());
        match from.try_io(Interest::READABLE, || splice(inp, pw, CHUNK)) {
            Ok(0) => {
                give_pipe(pipe);
                self.eof = true;
            }
            Ok(n) => {
                #[cfg(test)]
                SPLICED.fetch_add(n as u64, Ordering::Relaxed);
                self.pipe.pipe = Some(pipe);
                self.pipe.len = n;
                self.pipe.saw_read(n);
                *moved = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => give_pipe(pipe),
            Err(e) => {
                give_pipe(pipe);
                return Err(SideError(side, e));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{relay, Counters, End};
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// Bulk and tiny messages alternate on one connection, so the relay switches between the
    /// buffer and the pipe several times; every byte must arrive once and in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn switching_between_buffer_and_pipe_keeps_order() {
        let ((mut client, mut rc), (mut ru, mut server)) = (pair().await, pair().await);
        let task = tokio::spawn(async move {
            let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
            let counters = Counters {
                to_upstream: &a,
                to_client: &b,
            };
            relay(&mut rc, &mut ru, None, counters).await
        });
        let sizes = [3usize, 4 << 20, 1, 200_000, 7, 6 << 20, 2];
        let before = SPLICED.load(Ordering::Relaxed);
        let mut sent = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let chunk: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            let reader = async {
                let mut got = vec![0u8; n];
                server.read_exact(&mut got).await.unwrap();
                server.write_all(&[i as u8]).await.unwrap(); // ack back through the relay
                got
            };
            let (got, _) = tokio::join!(reader, client.write_all(&chunk));
            assert!(got == chunk, "message {i} ({n} bytes) arrived changed");
            let mut ack = [0u8; 1];
            client.read_exact(&mut ack).await.unwrap();
            assert_eq!(ack[0], i as u8);
            sent.extend_from_slice(&chunk);
        }
        assert!(
            SPLICED.load(Ordering::Relaxed) - before >= 1 << 20,
            "the multi-MiB messages should have gone through the pipe"
        );
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        server.shutdown().await.unwrap();
        let (end, up, down) = task.await.unwrap();
        assert!(matches!(end, End::Done), "{end:?}");
        assert_eq!((up, down), (sent.len() as u64, sizes.len() as u64));
    }
}
