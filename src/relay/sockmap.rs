//! The kernel relay (`--copy-mode sockmap`): once the PROXY header is written, the kernel moves
//! each connection's bytes between its two sockets and this process only watches for the ends.
//!
//! ```text
//! peers  (sockhash, no program):   peers[cookie(client)] = upstream, peers[cookie(upstream)] = client
//! active (sockhash, the program):  active[cookie(s)] = s   -- joining it hands s to the kernel
//! program (sk_skb stream verdict, on every segment that arrives on an active socket):
//!     return redirect_hash(peers, socket_cookie(skb))   -- out of the peer socket, in order
//! ```
//!
//! A socket joins `peers` first, then `active`, so no byte is ever judged before its
//! destination is in place. Bytes that arrived before the socket joined are handed over by
//! re-arming SO_RCVLOWAT, which makes TCP run the (now replaced) data-ready callback.
//!
//! What stays here: an end-of-stream on one side becomes a FIN on the other once every byte
//! before it was queued there (the kernel does not carry FINs, and it sends redirected bytes
//! from a work queue, so shutting down at once could overtake them); errors, the idle timeout
//! and the byte counts (both read from the sockets' TCP_INFO and send queues). Each connection
//! has a small epoll instance of its own that wakes only on hang-ups and errors: the sockets
//! leave tokio's reactor, which would otherwise be woken by every segment the kernel moves.
//! The kernel drops a socket from both maps when it is closed.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use socket2::SockRef;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::copy::{Counters, End};
use crate::sys::{self, BpfInsn};

const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
const BPF_PROG_TYPE_SK_SKB: u32 = 14;
const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;
const BPF_FUNC_GET_SOCKET_COOKIE: i32 = 46;
const BPF_FUNC_SK_REDIRECT_HASH: i32 = 72;
/// `src` of a 64-bit immediate load whose value is a map descriptor (BPF_PSEUDO_MAP_FD).
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// The instruction encodings the program uses (linux/bpf_common.h, linux/bpf.h): class |
/// operation | source.
mod op {
    pub const MOV64_REG: u8 = 0x07 | 0xb0 | 0x08;
    pub const MOV64_IMM: u8 = 0x07 | 0xb0;
    pub const ADD64_IMM: u8 = 0x07;
    pub const LDX_W: u8 = 0x01 | 0x60;
    pub const JNE_IMM: u8 = 0x05 | 0x50;
    pub const STX_DW: u8 = 0x03 | 0x60 | 0x18;
    pub const LD_IMM64: u8 = 0x18;
    pub const CALL: u8 = 0x05 | 0x80;
    pub const EXIT: u8 = 0x05 | 0x90;
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    let regs = if cfg!(target_endian = "little") {
        dst | (src << 4)
    } else {
        (dst << 4) | src
    };
    BpfInsn {
        code,
        regs,
        off,
        imm,
    }
}

/// The stream verdict program: redirect every segment to the socket stored in `peers` under
/// the receiving socket's cookie, out of that socket's send side. A miss (the peer already
/// closed, so already left the map) drops the segment: there is nowhere to deliver it.
/// An empty segment (a bare FIN: TCP has already taken note of it) is dropped too, because
/// sending nothing out of the peer after its write side was shut down fails with EPIPE, which
/// the kernel then reports as the peer socket's error.
fn verdict_program(peers: RawFd) -> [BpfInsn; 15] {
    [
        insn(op::MOV64_REG, 6, 1, 0, 0), // r6 = skb
        insn(op::LDX_W, 2, 1, 0, 0),     // r2 = skb->len
        insn(op::JNE_IMM, 2, 0, 2, 0),   // if r2 != 0 skip 2
        insn(op::MOV64_IMM, 0, 0, 0, 0), // r0 = SK_DROP
        insn(op::EXIT, 0, 0, 0, 0),
        insn(op::CALL, 0, 0, 0, BPF_FUNC_GET_SOCKET_COOKIE), // r0 = cookie(skb->sk)
        insn(op::STX_DW, 10, 0, -8, 0),                      // *(u64 *)(fp - 8) = r0
        insn(op::MOV64_REG, 1, 6, 0, 0),                     // r1 = skb
        insn(op::LD_IMM64, 2, BPF_PSEUDO_MAP_FD, 0, peers),  // r2 = &peers
        insn(0, 0, 0, 0, 0),                                 //   (upper half of the immediate)
        insn(op::MOV64_REG, 3, 10, 0, 0),                    // r3 = fp
        insn(op::ADD64_IMM, 3, 0, 0, -8),                    // r3 = fp - 8 (the key)
        insn(op::MOV64_IMM, 4, 0, 0, 0),                     // r4 = 0 (egress of the peer)
        insn(op::CALL, 0, 0, 0, BPF_FUNC_SK_REDIRECT_HASH),  // r0 = SK_PASS or SK_DROP
        insn(op::EXIT, 0, 0, 0, 0),
    ]
}

/// Why the kernel relay could not be set up; the relay then copies in this process.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}{hint}")]
pub struct LoadError {
    step: &'static str,
    #[source]
    source: io::Error,
    hint: String,
}

impl LoadError {
    fn new(step: &'static str, source: io::Error, log: &str) -> Self {
        let hint = match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) if log.is_empty() => {
                " (the process needs CAP_BPF and CAP_NET_ADMIN, which root has; the chart adds \
                 them with copyMode: sockmap; on kernels before 5.11 a low RLIMIT_MEMLOCK also \
                 refuses BPF maps)"
                    .to_string()
            }
            Some(libc::ENOSYS) => " (bpf(2) is missing: a kernel without CONFIG_BPF_SYSCALL, or \
                                    a seccomp profile that forbids it)"
                .to_string(),
            Some(libc::EINVAL) if log.is_empty() => " (the kernel lacks socket maps with a stream \
                                                     verdict and no parser: Linux 5.10 or later \
                                                     with CONFIG_BPF_STREAM_PARSER)"
                .to_string(),
            _ if !log.is_empty() => format!(" (verifier: {})", log.trim()),
            _ => String::new(),
        };
        LoadError { step, source, hint }
    }
}

/// The loaded program and its two maps, shared by every connection of the process.
#[derive(Debug)]
pub struct Sockmap {
    peers: OwnedFd,
    active: OwnedFd,
    _program: OwnedFd,
}

impl Sockmap {
    /// Creates the maps for `max_connections` relayed connections and loads and attaches the
    /// program. Needs CAP_BPF and CAP_NET_ADMIN.
    pub fn load(max_connections: usize) -> Result<Self, LoadError> {
        // Two sockets per connection; the kernel allocates entries as they are added, so a
        // large bound only costs the hash buckets (16 bytes per slot).
        let entries = (max_connections.saturating_mul(2)).clamp(2, 1 << 22) as u32;
        let map = |name| {
            sys::bpf_map_create(BPF_MAP_TYPE_SOCKHASH, entries, name)
                .map_err(|e| LoadError::new("creating the socket map", e, ""))
        };
        let peers = map("ouroboros_peers")?;
        let active = map("ouroboros_active")?;
        let program = verdict_program(peers.as_raw_fd());
        let mut log = vec![0u8; 4096];
        let license = c"Dual BSD/GPL";
        let prog = match sys::bpf_prog_load(
            BPF_PROG_TYPE_SK_SKB,
            &program,
            license,
            &mut log,
            "ouroboros_relay",
        ) {
            Ok(p) => p,
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                return Err(LoadError::new("loading the relay program", e, &text));
            }
        };
        sys::bpf_prog_attach(active.as_fd(), prog.as_fd(), BPF_SK_SKB_STREAM_VERDICT)
            .map_err(|e| LoadError::new("attaching the relay program", e, ""))?;
        Ok(Sockmap {
            peers,
            active,
            _program: prog,
        })
    }

    /// Sockets in the map of redirect targets (two per connection the kernel relays).
    pub fn sockets(&self) -> io::Result<usize> {
        let mut n = 0;
        let mut key = None;
        while let Some(k) = sys::bpf_map_next_key(self.peers.as_fd(), key)? {
            n += 1;
            key = Some(k);
        }
        Ok(n)
    }

    /// Hands the pair to the kernel and watches it until both sides finished, either failed,
    /// or nothing moved for `idle`. `early` is how many bytes of the client's this process
    /// already forwarded (with the header). `Err` (nothing handed over: the map is full) leaves
    /// the sockets as they were, to be relayed in userspace.
    pub async fn relay(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        early: u64,
        idle: Option<Duration>,
        counters: &Counters,
    ) -> io::Result<(End, u64, u64)> {
        let pair = Pair::new(client, upstream, early)?;
        let keys = [pair.cookie[CLIENT], pair.cookie[UPSTREAM]];
        // Redirect targets first: a socket in `peers` alone moves nothing.
        let placed = sys::bpf_map_set_socket(self.peers.as_fd(), keys[CLIENT], upstream.as_fd())
            .and_then(|()| {
                sys::bpf_map_set_socket(self.peers.as_fd(), keys[UPSTREAM], client.as_fd())
            });
        // The upstream goes first. If it cannot (it is no longer established: the upstream
        // closed meanwhile), nothing has moved in the kernel yet, so the process can still
        // relay the connection.
        let activated = placed.and_then(|()| {
            sys::bpf_map_set_socket(self.active.as_fd(), keys[UPSTREAM], upstream.as_fd())
        });
        if let Err(e) = activated {
            for k in keys {
                let _ = sys::bpf_map_delete(self.peers.as_fd(), k);
            }
            return Err(e);
        }
        counters.kernel.inc();
        let end = match self.hand_over_client(&pair).await {
            Ok(ended) => pair.watch(idle, ended).await,
            Err(end) => end,
        };
        let (up, down) = pair.moved();
        counters.to_upstream.inc_by(up);
        counters.to_client.inc_by(down);
        Ok((end, up, down))
    }

    /// Hands the client over and has both sockets judge what they queued before: which sides
    /// already ended. From here on bytes may move in the kernel, so a failure ends the
    /// connection rather than falling back, which could reorder them. A client that already
    /// sent its FIN cannot join (a socket map takes established sockets only); its last bytes
    /// are all queued, and only this process writes to the upstream, so they are copied here.
    async fn hand_over_client(&self, pair: &Pair<'_>) -> Result<[bool; 2], End> {
        let [client, upstream] = pair.sockets;
        let joined =
            sys::bpf_map_set_socket(self.active.as_fd(), pair.cookie[CLIENT], client.as_fd());
        let kick = |side: usize| {
            sys::set_rcvlowat(pair.sockets[side].as_fd(), 1).map_err(|e| End::Error(NAMES[side], e))
        };
        kick(UPSTREAM)?;
        match joined {
            Ok(()) => kick(CLIENT).map(|()| [false, false]),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                pair.copy_rest(CLIENT, upstream).await?;
                Ok([true, false])
            }
            Err(e) => Err(End::Error("client", e)),
        }
    }
}

/// Relays `client` and `upstream` in the kernel, or in this process with `fallback` when the
/// kernel does not take them: a side already closed (a socket map takes established sockets
/// only) or the map is full (logged once).
pub async fn relay_or_copy(
    kernel: &Sockmap,
    client: tokio::net::TcpStream,
    upstream: tokio::net::TcpStream,
    early: u64,
    idle: Option<Duration>,
    fallback: super::CopyMode,
    counters: &Counters,
) -> (End, u64, u64) {
    static FULL: AtomicBool = AtomicBool::new(false);
    // Out of tokio's reactor: it would be woken by every segment the kernel moves.
    let (client, upstream) = match (client.into_std(), upstream.into_std()) {
        (Ok(c), Ok(u)) => (c, u),
        (Err(e), _) => return (End::Error("client", e), 0, 0),
        (_, Err(e)) => return (End::Error("upstream", e), 0, 0),
    };
    match kernel
        .relay(&client, &upstream, early, idle, counters)
        .await
    {
        Ok(r) => return r,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(e) => {
            if !FULL.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, "the kernel relay's socket map refused a connection (full?); relaying such connections in this process (logged once)");
            }
        }
    }
    let from_std = tokio::net::TcpStream::from_std;
    let (mut client, mut upstream) = match (from_std(client), from_std(upstream)) {
        (Ok(c), Ok(u)) => (c, u),
        (Err(e), _) => return (End::Error("client", e), 0, 0),
        (_, Err(e)) => return (End::Error("upstream", e), 0, 0),
    };
    super::copy::relay(&mut client, &mut upstream, fallback, idle, counters).await
}

const CLIENT: usize = 0;
const UPSTREAM: usize = 1;
const NAMES: [&str; 2] = ["client", "upstream"];

/// Bytes this socket's sending side took so far (acknowledged plus queued), counted from the
/// same origin each time.
fn queued_out(s: &TcpStream) -> io::Result<u64> {
    // Acknowledged first: an ACK arriving between the two reads moves bytes from the queue to
    // the acknowledged count, so the sum can only come out low, never high.
    let acked = sys::tcp_info(s.as_fd())?.tcpi_bytes_acked;
    Ok(acked + sys::send_queue_bytes(s.as_fd())?)
}

/// Bytes this socket received so far (a FIN counts one: TCP counts sequence space).
fn received(s: &TcpStream) -> io::Result<u64> {
    Ok(sys::tcp_info(s.as_fd())?.tcpi_bytes_received)
}

struct Pair<'a> {
    sockets: [&'a TcpStream; 2],
    cookie: [u64; 2],
    /// `queued_out` of each socket before the kernel took over.
    base: [u64; 2],
    /// Bytes of each side's stream this process forwarded itself.
    forwarded: [u64; 2],
    /// Each socket's sending side was shut down here (its FIN counts in `queued_out`).
    shut: [AtomicBool; 2],
    watch: AsyncFd<sys::EpollWatch>,
}

impl<'a> Pair<'a> {
    fn new(client: &'a TcpStream, upstream: &'a TcpStream, early: u64) -> io::Result<Self> {
        let sockets = [client, upstream];
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        // Hang-ups and errors only (both always reported): data wake-ups carry EPOLLIN and
        // are filtered out by the kernel before they reach this instance.
        let flags = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
        for (side, s) in sockets.iter().enumerate() {
            ep.add(s, EpollEvent::new(flags, side as u64))?;
        }
        Ok(Pair {
            cookie: [
                SockRef::from(client).cookie()?,
                SockRef::from(upstream).cookie()?,
            ],
            base: [queued_out(client)?, queued_out(upstream)?],
            forwarded: [early, 0],
            shut: Default::default(),
            sockets,
            watch: sys::watch_epoll(ep)?,
        })
    }

    /// Bytes the kernel moved (to upstream, to client).
    fn moved(&self) -> (u64, u64) {
        let out = |side: usize| {
            let fin = u64::from(self.shut[side].load(Ordering::Relaxed));
            queued_out(self.sockets[side]).map_or(0, |q| q.saturating_sub(self.base[side] + fin))
        };
        (out(UPSTREAM), out(CLIENT))
    }

    /// Bytes received on both sides, to tell activity from idleness.
    fn activity(&self) -> u64 {
        self.sockets.iter().map(|s| received(s).unwrap_or(0)).sum()
    }

    /// Copies what `side` (which reached end of stream) still has queued to `to`, then shuts
    /// `to`'s sending side down.
    async fn copy_rest(&self, side: usize, to: &TcpStream) -> Result<(), End> {
        use std::io::{Read, Write};
        let other = 1 - side;
        let mut buf = super::copy::take_buf();
        let mut from = self.sockets[side];
        let mut to_ref = to;
        let result = loop {
            let n = match from.read(&mut buf[..]) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                Err(e) => break Err(End::Error(NAMES[side], e)),
            };
            let mut done = 0;
            while done < n {
                match to_ref.write(&buf[done..n]) {
                    Ok(w) => done += w,
                    // Rare and short (a request's worth): poll rather than register for
                    // writability.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        tokio::time::sleep(Duration::from_millis(1)).await
                    }
                    Err(e) => return Err(End::Error(NAMES[other], e)),
                }
            }
        };
        super::copy::give_buf(buf);
        result?;
        SockRef::from(to)
            .shutdown(std::net::Shutdown::Write)
            .map_err(|e| End::Error(NAMES[other], e))?;
        self.shut[other].store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn watch(&self, idle: Option<Duration>, mut ended: [bool; 2]) -> End {
        let mut last = (self.activity(), Instant::now());
        let far = Duration::from_secs(86400 * 365);
        let timer = tokio::time::sleep(idle.unwrap_or(far));
        tokio::pin!(timer);
        loop {
            let mut guard = tokio::select! {
                g = self.watch.readable() => match g {
                    Ok(g) => g,
                    Err(e) => return End::Error("client", e),
                },
                () = &mut timer, if idle.is_some() => {
                    let now = self.activity();
                    if now == last.0 {
                        return End::Idle;
                    }
                    last = (now, Instant::now());
                    timer.as_mut().reset(last.1 + idle.unwrap_or(far));
                    continue;
                }
            };
            let mut events = [EpollEvent::empty(); 2];
            let n = match guard.get_inner().epoll().wait(&mut events, 0u8) {
                Ok(n) => n,
                Err(e) => return End::Error("client", e.into()),
            };
            if n == 0 {
                guard.clear_ready();
                continue;
            }
            for ev in &events[..n] {
                let side = ev.data() as usize;
                let flags = ev.events();
                if flags.contains(EpollFlags::EPOLLERR) {
                    if let Ok(Some(e)) = SockRef::from(self.sockets[side]).take_error() {
                        return End::Error(NAMES[side], e);
                    }
                }
                if !ended[side] && flags.intersects(EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP) {
                    if let Err(end) = self.pass_end(side, idle).await {
                        return end;
                    }
                    ended[side] = true;
                }
            }
            if ended == [true, true] {
                return End::Done;
            }
        }
    }

    /// `side` reached end of stream: once every byte it sent is queued on the other socket,
    /// shut that socket's sending side down (a FIN after the data).
    async fn pass_end(&self, side: usize, idle: Option<Duration>) -> Result<(), End> {
        let other = 1 - side;
        let fail = |s: usize| move |e: io::Error| End::Error(NAMES[s], e);
        // Less the FIN, which `received` counts.
        let total = received(self.sockets[side])
            .map_err(fail(side))?
            .saturating_sub(1 + self.forwarded[side]);
        let mut progress = (0, Instant::now());
        let mut round = 0u32;
        loop {
            let moved = queued_out(self.sockets[other])
                .map_err(fail(other))?
                .saturating_sub(self.base[other]);
            if moved >= total {
                break;
            }
            if moved != progress.0 {
                progress = (moved, Instant::now());
            } else if idle.is_some_and(|d| progress.1.elapsed() >= d) {
                return Err(End::Idle);
            }
            // The kernel's work queue sends within microseconds unless the receiver's window
            // is closed: yield first, then back off to at most 50 ms between looks.
            if round < 4 {
                tokio::task::yield_now().await;
            } else {
                let ms = 1u64 << (round - 4).min(6);
                tokio::time::sleep(Duration::from_millis(ms.min(50))).await;
            }
            round += 1;
        }
        SockRef::from(self.sockets[other])
            .shutdown(std::net::Shutdown::Write)
            .map_err(fail(other))?;
        self.shut[other].store(true, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, OnceLock};

    /// The process's kernel relay for tests. Loading needs CAP_BPF and CAP_NET_ADMIN (CI runs
    /// as root); `OUROBOROS_TEST_NO_BPF=1` skips its tests on a machine without them.
    pub(crate) fn kernel() -> Arc<Sockmap> {
        static K: OnceLock<Arc<Sockmap>> = OnceLock::new();
        K.get_or_init(|| match Sockmap::load(1024) {
            Ok(k) => Arc::new(k),
            Err(e) => panic!(
                "the kernel relay did not load ({e}); run the tests as root, or set \
                 OUROBOROS_TEST_NO_BPF=1 to leave its tests out"
            ),
        })
        .clone()
    }

    /// The program, instruction by instruction, as the kernel's own macros encode it
    /// (BPF_MOV64_REG, BPF_LDX_MEM, BPF_JMP_IMM, BPF_MOV64_IMM, BPF_EXIT_INSN, BPF_EMIT_CALL,
    /// BPF_STX_MEM, BPF_LD_MAP_FD, BPF_ALU64_IMM).
    #[test]
    fn program_encoding() {
        let p = verdict_program(7);
        let bytes: Vec<[u8; 8]> = p
            .iter()
            .map(|i| {
                let mut b = [0u8; 8];
                b[0] = i.code;
                b[1] = i.regs;
                b[2..4].copy_from_slice(&i.off.to_le_bytes());
                b[4..8].copy_from_slice(&i.imm.to_le_bytes());
                b
            })
            .collect();
        if cfg!(target_endian = "little") {
            let want: [[u8; 8]; 15] = [
                [0xbf, 0x16, 0, 0, 0, 0, 0, 0],
                [0x61, 0x12, 0, 0, 0, 0, 0, 0],
                [0x55, 0x02, 2, 0, 0, 0, 0, 0],
                [0xb7, 0x00, 0, 0, 0, 0, 0, 0],
                [0x95, 0x00, 0, 0, 0, 0, 0, 0],
                [0x85, 0x00, 0, 0, 46, 0, 0, 0],
                [0x7b, 0x0a, 0xf8, 0xff, 0, 0, 0, 0],
                [0xbf, 0x61, 0, 0, 0, 0, 0, 0],
                [0x18, 0x12, 0, 0, 7, 0, 0, 0],
                [0x00, 0x00, 0, 0, 0, 0, 0, 0],
                [0xbf, 0xa3, 0, 0, 0, 0, 0, 0],
                [0x07, 0x03, 0, 0, 0xf8, 0xff, 0xff, 0xff],
                [0xb7, 0x04, 0, 0, 0, 0, 0, 0],
                [0x85, 0x00, 0, 0, 72, 0, 0, 0],
                [0x95, 0x00, 0, 0, 0, 0, 0, 0],
            ];
            assert_eq!(bytes, want);
        }
    }

    #[test]
    fn load_error_hints_fit_the_cause() {
        let cases = [
            (libc::EPERM, "", "CAP_BPF and CAP_NET_ADMIN"),
            (libc::ENOSYS, "", "seccomp"),
            (libc::EINVAL, "", "Linux 5.10"),
            (
                libc::EACCES,
                "R2 type=scalar expected=map_ptr\n",
                "verifier: R2",
            ),
        ];
        for (errno, log, hint) in cases {
            let e = LoadError::new("loading", io::Error::from_raw_os_error(errno), log);
            let text = e.to_string();
            assert!(text.contains(hint), "{errno}: {text}");
        }
    }
}
