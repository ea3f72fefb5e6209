//! The kernel relay (`--copy-mode sockmap`): once the PROXY header is written, the kernel moves
//! each connection's bytes between its two sockets and this process only watches for the ends.
//!
//! ```text
//! peers  (sockhash, no program):   peers[cookie(client)] = upstream, peers[cookie(upstream)] = client
//! active (sockhash, the program):  active[cookie(s)] = s   -- joining it hands s to the kernel
//! held, bytes (hashes):            sockets whose segments stay with them; bytes each redirected
//! bells (ring buffer):             a socket's cookie each time its count crosses a MiB
//! program (sk_skb stream verdict, on every segment that arrives on an active socket):
//!     held? keep it : (count it, ring on a new MiB, redirect_hash(peers, cookie) -- out of the peer)
//! ```
//!
//! A socket joins `peers` first, then `active`, so no byte is ever judged before its
//! destination is in place. Bytes that arrived before the socket joined are handed over by
//! re-arming SO_RCVLOWAT, which makes TCP run the (now replaced) data-ready callback.
//!
//! What stays here: an end-of-stream on one side becomes a FIN on the other once every byte
//! before it was queued there (the kernel does not carry FINs, and it sends redirected bytes
//! from a work queue, so shutting down at once could overtake them); errors, the idle timeout
//! and the byte counts (both read from the sockets' TCP_INFO and send queues); and flow
//! control, which the kernel lacks: on a doorbell, a direction whose peer lags by more than
//! 8 MiB (`BACKLOG_HIGH`) is held and copied here from then on. Each connection has a small epoll
//! instance of its own that wakes only on hang-ups and errors (and on readiness for a
//! direction copied here): the sockets leave tokio's reactor, which would otherwise be woken
//! by every segment the kernel moves. The kernel drops a socket from the socket maps when it
//! is closed; the relay removes the rest of its entries.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use socket2::SockRef;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::copy::{Counters, End};
use crate::sys::{self, BpfInsn};

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_PROG_TYPE_SK_SKB: u32 = 14;
const BPF_SK_SKB_STREAM_VERDICT: u32 = 5;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_GET_SOCKET_COOKIE: i32 = 46;
const BPF_FUNC_SK_REDIRECT_HASH: i32 = 72;
const BPF_FUNC_RINGBUF_OUTPUT: i32 = 130;
/// The doorbell ring's size: 64 KiB holds 4,096 doorbells of 16 bytes.
const RING_BYTES: usize = 64 * 1024;
/// `src` of a 64-bit immediate load whose value is a map descriptor (BPF_PSEUDO_MAP_FD).
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// The instruction encodings the program uses (linux/bpf_common.h, linux/bpf.h): class |
/// operation | source.
mod op {
    pub const MOV64_REG: u8 = 0x07 | 0xb0 | 0x08;
    pub const MOV64_IMM: u8 = 0x07 | 0xb0;
    pub const ADD64_IMM: u8 = 0x07;
    pub const ADD64_REG: u8 = 0x07 | 0x08;
    pub const RSH64_IMM: u8 = 0x07 | 0x70;
    pub const LDX_W: u8 = 0x01 | 0x60;
    pub const LDX_DW: u8 = 0x01 | 0x60 | 0x18;
    pub const JEQ_IMM: u8 = 0x05 | 0x10;
    pub const JEQ_REG: u8 = 0x05 | 0x10 | 0x08;
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

/// The maps the program reads: the redirect targets, the bytes each socket had redirected,
/// and the ring that tells this process when to look at a connection's backlog.
struct ProgramMaps {
    peers: RawFd,
    held: RawFd,
    redirected: RawFd,
    ring: RawFd,
}

/// Redirected bytes between doorbells: the ring gets the socket's cookie each time its count
/// crosses a multiple of 2^DOORBELL_SHIFT bytes (1 MiB).
const DOORBELL_SHIFT: i32 = 20;
/// bpf_ringbuf_output flag: wake the consumer for every record (doorbells are rare).
const BPF_RB_FORCE_WAKEUP: i32 = 2;

/// The stream verdict program, for every segment that arrives on an active socket:
///
/// 1. An empty segment (a bare FIN: TCP has already taken note of it) is dropped: sending
///    nothing out of the peer after its write side was shut down fails with EPIPE, which the
///    kernel would then report as the peer socket's error.
/// 2. A socket in `held` keeps its segments (SK_PASS: they wait in its own queue, charged to
///    its receive buffer, so TCP's window holds the sender back), for this process to read.
/// 3. The socket's count in `redirected` grows by the segment's length (the verdict for one
///    socket runs under its lock, so a plain add is enough); when the count crosses a MiB
///    boundary, the socket's cookie goes into the ring: this process then compares what the
///    socket had redirected with what the peer has sent, and holds the socket if the peer's
///    reader lags (the kernel does not: redirected segments wait in memory charged to no
///    socket, and taking a socket out of `active` while segments arrive can drop one).
/// 4. The segment is redirected out of the socket stored in `peers` under this socket's
///    cookie. A miss (the peer already closed, so already left the map) drops the segment:
///    there is nowhere to deliver it.
fn verdict_program(maps: &ProgramMaps) -> [BpfInsn; 43] {
    let ProgramMaps {
        peers,
        held,
        redirected,
        ring,
    } = *maps;
    [
        insn(op::MOV64_REG, 6, 1, 0, 0),                     // 0: r6 = skb
        insn(op::LDX_W, 2, 6, 0, 0),                         // 1: r2 = skb->len
        insn(op::JNE_IMM, 2, 0, 2, 0),                       // 2: if r2 != 0 goto 5
        insn(op::MOV64_IMM, 0, 0, 0, 0),                     // 3: r0 = SK_DROP
        insn(op::EXIT, 0, 0, 0, 0),                          // 4
        insn(op::CALL, 0, 0, 0, BPF_FUNC_GET_SOCKET_COOKIE), // 5: r0 = cookie(skb->sk)
        insn(op::STX_DW, 10, 0, -8, 0),                      // 6: *(u64 *)(fp - 8) = r0
        insn(op::LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, held),   // 7: r1 = &held
        insn(0, 0, 0, 0, 0),                                 // 8:   (upper half)
        insn(op::MOV64_REG, 2, 10, 0, 0),                    // 9: r2 = fp
        insn(op::ADD64_IMM, 2, 0, 0, -8),                    // 10: r2 = fp - 8 (the key)
        insn(op::CALL, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM),   // 11: r0 = &held[cookie]
        insn(op::JEQ_IMM, 0, 0, 2, 0),                       // 12: if r0 == NULL goto 15
        insn(op::MOV64_IMM, 0, 0, 0, 1),                     // 13: r0 = SK_PASS
        insn(op::EXIT, 0, 0, 0, 0),                          // 14
        insn(op::LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, redirected), // 15: r1 = &redirected
        insn(0, 0, 0, 0, 0),                                 // 16:   (upper half)
        insn(op::MOV64_REG, 2, 10, 0, 0),                    // 17: r2 = fp
        insn(op::ADD64_IMM, 2, 0, 0, -8),                    // 18: r2 = fp - 8 (the key)
        insn(op::CALL, 0, 0, 0, BPF_FUNC_MAP_LOOKUP_ELEM),   // 19: r0 = &redirected[cookie]
        insn(op::JEQ_IMM, 0, 0, 14, 0),                      // 20: if r0 == NULL goto 35
        insn(op::LDX_DW, 1, 0, 0, 0),                        // 21: r1 = *r0 (before)
        insn(op::LDX_W, 2, 6, 0, 0),                         // 22: r2 = skb->len
        insn(op::ADD64_REG, 2, 1, 0, 0),                     // 23: r2 += r1 (after)
        insn(op::STX_DW, 0, 2, 0, 0),                        // 24: *r0 = r2
        insn(op::RSH64_IMM, 1, 0, 0, DOORBELL_SHIFT),        // 25: r1 >>= 20
        insn(op::RSH64_IMM, 2, 0, 0, DOORBELL_SHIFT),        // 26: r2 >>= 20
        insn(op::JEQ_REG, 1, 2, 7, 0),                       // 27: same MiB: goto 35
        insn(op::LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, ring),   // 28: r1 = &ring
        insn(0, 0, 0, 0, 0),                                 // 29:   (upper half)
        insn(op::MOV64_REG, 2, 10, 0, 0),                    // 30: r2 = fp
        insn(op::ADD64_IMM, 2, 0, 0, -8),                    // 31: r2 = fp - 8 (the cookie)
        insn(op::MOV64_IMM, 3, 0, 0, 8),                     // 32: r3 = 8 bytes
        insn(op::MOV64_IMM, 4, 0, 0, BPF_RB_FORCE_WAKEUP),   // 33: r4 = flags
        insn(op::CALL, 0, 0, 0, BPF_FUNC_RINGBUF_OUTPUT),    // 34: doorbell
        insn(op::MOV64_REG, 1, 6, 0, 0),                     // 35: r1 = skb
        insn(op::LD_IMM64, 2, BPF_PSEUDO_MAP_FD, 0, peers),  // 36: r2 = &peers
        insn(0, 0, 0, 0, 0),                                 // 37:   (upper half)
        insn(op::MOV64_REG, 3, 10, 0, 0),                    // 38: r3 = fp
        insn(op::ADD64_IMM, 3, 0, 0, -8),                    // 39: r3 = fp - 8 (the key)
        insn(op::MOV64_IMM, 4, 0, 0, 0),                     // 40: r4 = 0 (out of the peer)
        insn(op::CALL, 0, 0, 0, BPF_FUNC_SK_REDIRECT_HASH),  // 41: r0 = SK_PASS or SK_DROP
        insn(op::EXIT, 0, 0, 0, 0),                          // 42
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

/// A side whose bytes redirected but not yet taken by its peer exceed this is held: its peer's
/// reader is slower than its sender, and from then on this process copies that direction,
/// with TCP's flow control (the kernel would queue them without limit).
const BACKLOG_HIGH: u64 = 8 << 20;

/// The loaded program and its maps, shared by every connection of the process.
pub struct Sockmap {
    peers: OwnedFd,
    active: OwnedFd,
    held: OwnedFd,
    redirected: OwnedFd,
    _program: OwnedFd,
    /// The doorbell ring, until [`Sockmap::ring_doorbells`] takes it.
    ring: Mutex<Option<sys::RingBuf>>,
    /// The connection each socket cookie belongs to, for its doorbells.
    bells: Mutex<HashMap<u64, Arc<Notify>>>,
}

impl Sockmap {
    /// Creates the maps for `max_connections` relayed connections and loads and attaches the
    /// program. Needs CAP_BPF and CAP_NET_ADMIN.
    pub fn load(max_connections: usize) -> Result<Self, LoadError> {
        // Two sockets per connection; the kernel allocates entries as they are added, so a
        // large bound only costs the hash buckets (16 bytes per slot).
        let entries = (max_connections.saturating_mul(2)).clamp(2, 1 << 22) as u32;
        let create = |map_type, key, value, max, name| {
            sys::bpf_map_create(map_type, key, value, max, name)
                .map_err(|e| LoadError::new("creating the BPF maps", e, ""))
        };
        let peers = create(BPF_MAP_TYPE_SOCKHASH, 8, 4, entries, "ouroboros_peers")?;
        let active = create(BPF_MAP_TYPE_SOCKHASH, 8, 4, entries, "ouroboros_active")?;
        let held = create(BPF_MAP_TYPE_HASH, 8, 8, entries, "ouroboros_held")?;
        let redirected = create(BPF_MAP_TYPE_HASH, 8, 8, entries, "ouroboros_bytes")?;
        let ring = create(
            BPF_MAP_TYPE_RINGBUF,
            0,
            0,
            RING_BYTES as u32,
            "ouroboros_bells",
        )?;
        let program = verdict_program(&ProgramMaps {
            peers: peers.as_raw_fd(),
            held: held.as_raw_fd(),
            redirected: redirected.as_raw_fd(),
            ring: ring.as_raw_fd(),
        });
        let mut log = vec![0u8; 4096];
        let prog = match sys::bpf_prog_load(
            BPF_PROG_TYPE_SK_SKB,
            &program,
            c"Dual BSD/GPL",
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
        let ring = sys::RingBuf::map(ring, RING_BYTES)
            .map_err(|e| LoadError::new("mapping the doorbell ring", e, ""))?;
        Ok(Sockmap {
            peers,
            active,
            held,
            redirected,
            _program: prog,
            ring: Mutex::new(Some(ring)),
            bells: Mutex::default(),
        })
    }

    /// Passes the program's doorbells to their connections, for the life of the process (run
    /// it once, as a task of its own).
    pub async fn ring_doorbells(self: Arc<Self>) {
        let Some(ring) = lock(&self.ring).take() else {
            return;
        };
        let mut ring = match sys::watch_ring(ring) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch the kernel relay's doorbell ring; a slow reader's backlog is not bounded");
                return;
            }
        };
        let mut cookies = Vec::new();
        loop {
            let mut guard = match ring.readable_mut().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!(error = %e, "the kernel relay's doorbell ring failed; a slow reader's backlog is no longer bounded");
                    return;
                }
            };
            guard.get_inner_mut().drain(|record| {
                if let Ok(bytes) = <[u8; 8]>::try_from(record) {
                    cookies.push(u64::from_ne_bytes(bytes));
                }
            });
            // Every doorbell forces a wake-up, so one written after the drain marks the ring
            // ready again rather than being lost here.
            guard.clear_ready();
            let bells = lock(&self.bells);
            for cookie in cookies.drain(..) {
                if let Some(bell) = bells.get(&cookie) {
                    bell.notify_one();
                }
            }
        }
    }

    /// Hands the pair to the kernel and watches it until both sides finished, either failed,
    /// or nothing moved for `idle`. `early` is how many bytes of the client's this process
    /// already forwarded (with the header). `Err` (nothing handed over: a socket is no longer
    /// established, or a map is full) leaves the sockets as they were, to be relayed in
    /// userspace.
    pub async fn relay(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        early: u64,
        idle: Option<Duration>,
        counters: &Counters,
    ) -> io::Result<(End, u64, u64)> {
        let pair = Pair::new(client, upstream, early)?;
        let keys = pair.cookie;
        let joined = Joined {
            kernel: self,
            pair: &pair,
        };
        // Counts and redirect targets first: a socket in `peers` alone moves nothing. Then the
        // upstream: if it cannot join (it is no longer established: it closed meanwhile),
        // nothing has moved in the kernel yet, so the process can still relay the connection.
        let placed = (|| {
            for k in keys {
                sys::bpf_map_set_u64(self.redirected.as_fd(), k, 0)?;
            }
            sys::bpf_map_set_socket(self.peers.as_fd(), keys[CLIENT], upstream.as_fd())?;
            sys::bpf_map_set_socket(self.peers.as_fd(), keys[UPSTREAM], client.as_fd())?;
            sys::bpf_map_set_socket(self.active.as_fd(), keys[UPSTREAM], upstream.as_fd())
        })();
        if let Err(e) = placed {
            for k in keys {
                let _ = sys::bpf_map_delete(self.peers.as_fd(), k);
            }
            return Err(e);
        }
        counters.kernel.inc();
        let bell = Arc::new(Notify::new());
        {
            let mut bells = lock(&self.bells);
            for k in keys {
                bells.insert(k, bell.clone());
            }
        }
        let end = match self.hand_over_client(&pair) {
            Ok(ways) => pair.watch(self, &bell, idle, ways, counters).await,
            Err(end) => end,
        };
        drop(joined);
        let (up, down) = pair.moved();
        counters.to_upstream.inc_by(up);
        counters.to_client.inc_by(down);
        Ok((end, up, down))
    }

    /// Hands the client over and has both sockets judge what they queued before: how each
    /// direction starts. From here on bytes may move in the kernel, so a failure ends the
    /// connection rather than falling back, which could reorder them. A client that already
    /// sent its FIN cannot join (a socket map takes established sockets only); its last bytes
    /// are all queued, and only this process writes to the upstream, so they are copied here.
    fn hand_over_client(&self, pair: &Pair<'_>) -> Result<[Way; 2], End> {
        let joined = sys::bpf_map_set_socket(
            self.active.as_fd(),
            pair.cookie[CLIENT],
            pair.sockets[CLIENT].as_fd(),
        );
        pair.kick(UPSTREAM)?;
        match joined {
            Ok(()) => pair.kick(CLIENT).map(|()| [Way::Kernel, Way::Kernel]),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                Ok([Way::copying(), Way::Kernel])
            }
            Err(e) => Err(End::Error("client", e)),
        }
    }

    /// Bytes socket `key` had redirected.
    fn redirected(&self, key: u64) -> io::Result<u64> {
        Ok(sys::bpf_map_get_u64(self.redirected.as_fd(), key)?.unwrap_or(0))
    }

    /// From now on socket `key` keeps what it receives, for this process to read.
    fn hold(&self, key: u64) -> io::Result<()> {
        sys::bpf_map_set_u64(self.held.as_fd(), key, 1)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's entries outside the socket maps (which the kernel empties when a socket
/// closes): its doorbell, its byte counts and holds, removed when the relay ends (also when
/// its task is dropped at the end of the shutdown grace).
struct Joined<'a> {
    kernel: &'a Sockmap,
    pair: &'a Pair<'a>,
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        let mut bells = lock(&self.kernel.bells);
        for side in [CLIENT, UPSTREAM] {
            let k = self.pair.cookie[side];
            bells.remove(&k);
            let _ = sys::bpf_map_delete(self.kernel.redirected.as_fd(), k);
            if self.pair.held[side].load(Ordering::Relaxed) {
                let _ = sys::bpf_map_delete(self.kernel.held.as_fd(), k);
            }
        }
    }
}

/// Both results, or the connection's end naming the side that failed.
fn both<T>(client: io::Result<T>, upstream: io::Result<T>) -> Result<(T, T), End> {
    match (client, upstream) {
        (Ok(c), Ok(u)) => Ok((c, u)),
        (Err(e), _) => Err(End::Error("client", e)),
        (_, Err(e)) => Err(End::Error("upstream", e)),
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
    fallback: super::copy::CopyMode,
    counters: &Counters,
) -> (End, u64, u64) {
    static FULL: AtomicBool = AtomicBool::new(false);
    // Out of tokio's reactor: it would be woken by every segment the kernel moves.
    let (client, upstream) = match both(client.into_std(), upstream.into_std()) {
        Ok(pair) => pair,
        Err(end) => return (end, 0, 0),
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
    let (mut client, mut upstream) = match both(from_std(client), from_std(upstream)) {
        Ok(pair) => pair,
        Err(end) => return (end, 0, 0),
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
    /// Each socket was held (is in the `held` map).
    held: [AtomicBool; 2],
    /// The connection's own epoll instance.
    events: AsyncFd<sys::EpollWatch>,
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
            held: Default::default(),
            sockets,
            events: sys::watch_epoll(ep)?,
        })
    }

    /// Bytes sent after the handover (to upstream, to client).
    fn moved(&self) -> (u64, u64) {
        let out = |side| self.sent(side).unwrap_or(0);
        (out(UPSTREAM), out(CLIENT))
    }

    /// Bytes received on both sides, to tell activity from idleness.
    fn activity(&self) -> u64 {
        self.sockets.iter().map(|s| received(s).unwrap_or(0)).sum()
    }

    /// Has `side`'s socket judge what it queued before it joined `active`.
    fn kick(&self, side: usize) -> Result<(), End> {
        sys::set_rcvlowat(self.sockets[side].as_fd(), 1).map_err(|e| End::Error(NAMES[side], e))
    }

    /// Bytes `side`'s socket sent since the handover (the kernel's and this process's).
    fn sent(&self, side: usize) -> io::Result<u64> {
        let fin = u64::from(self.shut[side].load(Ordering::Relaxed));
        Ok(queued_out(self.sockets[side])?.saturating_sub(self.base[side] + fin))
    }

    /// Whether `side`'s socket has sent `target` bytes since the handover. `seen` and `since`
    /// track its progress; nothing sent for `idle` ends the connection as idle.
    fn caught_up(
        &self,
        side: usize,
        target: u64,
        seen: &mut u64,
        since: &mut Instant,
        idle: Option<Duration>,
    ) -> Result<bool, End> {
        let sent = self.sent(side).map_err(|e| End::Error(NAMES[side], e))?;
        if sent >= target {
            return Ok(true);
        }
        if sent != *seen {
            (*seen, *since) = (sent, Instant::now());
        } else if idle.is_some_and(|d| since.elapsed() >= d) {
            return Err(End::Idle);
        }
        Ok(false)
    }

    /// What the per-connection epoll waits for on each socket: hang-ups and errors always;
    /// readability of a socket this process copies from, writability of one it copies to.
    fn rearm(&self, ways: &[Way; 2]) -> io::Result<()> {
        for side in [CLIENT, UPSTREAM] {
            let mut flags = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
            if matches!(ways[side], Way::Copying { .. }) {
                flags |= EpollFlags::EPOLLIN;
            }
            if matches!(ways[1 - side], Way::Copying { .. }) {
                flags |= EpollFlags::EPOLLOUT;
            }
            let mut ev = EpollEvent::new(flags, side as u64);
            self.events
                .get_ref()
                .epoll()
                .modify(self.sockets[side], &mut ev)?;
        }
        Ok(())
    }

    /// Moves direction `side` as far as it goes now; `Err` ends the connection.
    fn advance(
        &self,
        kernel: &Sockmap,
        side: usize,
        way: &mut Way,
        idle: Option<Duration>,
    ) -> Result<(), End> {
        let other = 1 - side;
        let fail = |s: usize| move |e: io::Error| End::Error(NAMES[s], e);
        match way {
            Way::Kernel | Way::Ended => {}
            Way::Draining { total, seen, since } => {
                if self.caught_up(other, *total, seen, since, idle)? {
                    self.shut_down(other)?;
                    *way = Way::Ended;
                }
            }
            Way::Holding { seen, since } => {
                // Everything the kernel redirected must be out of the peer before this process
                // writes to it.
                let redirected = kernel.redirected(self.cookie[side]).map_err(fail(side))?;
                if self.caught_up(other, redirected, seen, since, idle)? {
                    *way = Way::copying();
                    return self.advance(kernel, side, way, idle);
                }
            }
            Way::Copying { buf, start, end } => {
                use std::io::{Read, Write};
                let buf = buf.get_or_insert_with(super::copy::take_buf);
                let (mut from, mut to) = (self.sockets[side], self.sockets[other]);
                loop {
                    while *start < *end {
                        match to.write(&buf[*start..*end]) {
                            Ok(n) => *start += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                            Err(e) => return Err(fail(other)(e)),
                        }
                    }
                    match from.read(&mut buf[..]) {
                        Ok(0) => {
                            self.shut_down(other)?;
                            *way = Way::Ended;
                            return Ok(());
                        }
                        Ok(n) => (*start, *end) = (0, n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(e) => return Err(fail(side)(e)),
                    }
                }
            }
        }
        Ok(())
    }

    /// Shuts `side`'s sending side down: a FIN after everything sent before.
    fn shut_down(&self, side: usize) -> Result<(), End> {
        SockRef::from(self.sockets[side])
            .shutdown(Shutdown::Write)
            .map_err(|e| End::Error(NAMES[side], e))?;
        self.shut[side].store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Watches the pair until both directions ended (each end passed on once the bytes before
    /// it were sent on the other side), a side failed, or nothing moved for `idle`. A doorbell
    /// from the program has each direction whose backlog grew past [`BACKLOG_HIGH`] held and
    /// then copied here.
    async fn watch(
        &self,
        kernel: &Sockmap,
        bell: &Notify,
        idle: Option<Duration>,
        mut ways: [Way; 2],
        counters: &Counters,
    ) -> End {
        let mut last = (self.activity(), Instant::now());
        let mut rounds = 0u32;
        let far = Duration::from_secs(86400 * 365);
        let timer = tokio::time::sleep(idle.unwrap_or(far));
        tokio::pin!(timer);
        // Which directions the epoll registrations are set up to copy.
        let mut armed = [false; 2];
        loop {
            for (side, way) in ways.iter_mut().enumerate() {
                if let Err(end) = self.advance(kernel, side, way, idle) {
                    return end;
                }
            }
            if matches!(ways, [Way::Ended, Way::Ended]) {
                return End::Done;
            }
            let copying = |w: &[Way; 2]| w.each_ref().map(|w| matches!(w, Way::Copying { .. }));
            if copying(&ways) != armed {
                if let Err(e) = self.rearm(&ways) {
                    return End::Error("client", e);
                }
                armed = copying(&ways);
            }
            let waiting = ways
                .iter()
                .any(|w| matches!(w, Way::Draining { .. } | Way::Holding { .. }));
            // The kernel's work queue usually sends within microseconds: look again at once a
            // few times, then every millisecond.
            let tick = if rounds < 4 {
                Duration::ZERO
            } else {
                Duration::from_millis(1)
            };
            tokio::select! {
                g = self.events.readable() => {
                    let mut guard = match g {
                        Ok(g) => g,
                        Err(e) => return End::Error("client", e),
                    };
                    let mut events = [EpollEvent::empty(); 2];
                    let n = match guard.get_inner().epoll().wait(&mut events, 0u8) {
                        Ok(n) => n,
                        Err(e) => return End::Error("client", e.into()),
                    };
                    if n == 0 {
                        guard.clear_ready();
                    }
                    for ev in &events[..n] {
                        let side = ev.data() as usize;
                        let flags = ev.events();
                        if flags.contains(EpollFlags::EPOLLERR) {
                            if let Ok(Some(e)) = SockRef::from(self.sockets[side]).take_error() {
                                return End::Error(NAMES[side], e);
                            }
                        }
                        let hangup = flags.intersects(EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP);
                        if hangup && matches!(ways[side], Way::Kernel) {
                            // Less the FIN, which `received` counts.
                            let total = match received(self.sockets[side]) {
                                Ok(n) => n.saturating_sub(1 + self.forwarded[side]),
                                Err(e) => return End::Error(NAMES[side], e),
                            };
                            ways[side] = Way::Draining { total, seen: u64::MAX, since: Instant::now() };
                        }
                    }
                    rounds = 0;
                }
                () = bell.notified() => {
                    for side in [CLIENT, UPSTREAM] {
                        if !matches!(ways[side], Way::Kernel) {
                            continue;
                        }
                        let backlog = kernel
                            .redirected(self.cookie[side])
                            .and_then(|r| Ok(r.saturating_sub(self.sent(1 - side)?)));
                        match backlog {
                            Ok(n) if n > BACKLOG_HIGH => {
                                if let Err(e) = kernel.hold(self.cookie[side]) {
                                    return End::Error(NAMES[side], e);
                                }
                                self.held[side].store(true, Ordering::Relaxed);
                                counters.kernel_held.inc();
                                ways[side] = Way::Holding { seen: u64::MAX, since: Instant::now() };
                            }
                            Ok(_) => {}
                            Err(e) => return End::Error(NAMES[side], e),
                        }
                    }
                    rounds = 0;
                }
                () = tokio::time::sleep(tick), if waiting => rounds += 1,
                () = &mut timer, if idle.is_some() => {
                    let now = self.activity();
                    if now == last.0 {
                        return End::Idle;
                    }
                    last = (now, Instant::now());
                    timer.as_mut().reset(last.1 + idle.unwrap_or(far));
                }
            }
        }
    }
}

/// How one direction of a connection the kernel took is moving.
enum Way {
    /// The program redirects its bytes.
    Kernel,
    /// Its sender's FIN arrived: once the peer sent `total` bytes, the peer's sending side is
    /// shut down. `seen` and `since`: the last count and when it changed.
    Draining {
        total: u64,
        seen: u64,
        since: Instant,
    },
    /// Its socket keeps what it receives (the peer's reader lagged); once the peer sent what
    /// the kernel had redirected, this process copies the direction.
    Holding {
        seen: u64,
        since: Instant,
    },
    /// This process copies it, through `buf[start..end]`.
    Copying {
        buf: Option<super::copy::Buf>,
        start: usize,
        end: usize,
    },
    Ended,
}

impl Way {
    fn copying() -> Self {
        Way::Copying {
            buf: None,
            start: 0,
            end: 0,
        }
    }
}

impl Drop for Way {
    fn drop(&mut self) {
        if let Way::Copying { buf, .. } = self {
            if let Some(b) = buf.take() {
                super::copy::give_buf(b);
            }
        }
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
            Ok(k) => {
                let k = Arc::new(k);
                // Each test has a runtime of its own; the doorbells need one for the process.
                let bells = k.clone();
                std::thread::spawn(move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                        .block_on(bells.ring_doorbells())
                });
                k
            }
            Err(e) => panic!(
                "the kernel relay did not load ({e}); run the tests as root, or set \
                 OUROBOROS_TEST_NO_BPF=1 to leave its tests out"
            ),
        })
        .clone()
    }

    /// The program, instruction by instruction (code, dst | src << 4, offset, immediate), as
    /// the kernel's own macros encode it (BPF_MOV64_REG, BPF_LDX_MEM, BPF_JMP_IMM,
    /// BPF_JMP_REG, BPF_MOV64_IMM, BPF_EXIT_INSN, BPF_EMIT_CALL, BPF_STX_MEM, BPF_LD_MAP_FD,
    /// BPF_ALU64_IMM, BPF_ALU64_REG).
    #[test]
    fn program_encoding() {
        let maps = ProgramMaps {
            peers: 7,
            held: 8,
            redirected: 9,
            ring: 10,
        };
        let got: Vec<(u8, u8, i16, i32)> = verdict_program(&maps)
            .iter()
            .map(|i| (i.code, i.regs, i.off, i.imm))
            .collect();
        if cfg!(target_endian = "little") {
            #[rustfmt::skip]
            let want = [
                (0xbf, 0x16, 0, 0), (0x61, 0x62, 0, 0), (0x55, 0x02, 2, 0), (0xb7, 0x00, 0, 0),
                (0x95, 0x00, 0, 0), (0x85, 0x00, 0, 46), (0x7b, 0x0a, -8, 0), (0x18, 0x11, 0, 8),
                (0x00, 0x00, 0, 0), (0xbf, 0xa2, 0, 0), (0x07, 0x02, 0, -8), (0x85, 0x00, 0, 1),
                (0x15, 0x00, 2, 0), (0xb7, 0x00, 0, 1), (0x95, 0x00, 0, 0), (0x18, 0x11, 0, 9),
                (0x00, 0x00, 0, 0), (0xbf, 0xa2, 0, 0), (0x07, 0x02, 0, -8), (0x85, 0x00, 0, 1),
                (0x15, 0x00, 14, 0), (0x79, 0x01, 0, 0), (0x61, 0x62, 0, 0), (0x0f, 0x12, 0, 0),
                (0x7b, 0x20, 0, 0), (0x77, 0x01, 0, 20), (0x77, 0x02, 0, 20), (0x1d, 0x21, 7, 0),
                (0x18, 0x11, 0, 10), (0x00, 0x00, 0, 0), (0xbf, 0xa2, 0, 0), (0x07, 0x02, 0, -8),
                (0xb7, 0x03, 0, 8), (0xb7, 0x04, 0, 2), (0x85, 0x00, 0, 130), (0xbf, 0x61, 0, 0),
                (0x18, 0x12, 0, 7), (0x00, 0x00, 0, 0), (0xbf, 0xa3, 0, 0), (0x07, 0x03, 0, -8),
                (0xb7, 0x04, 0, 0), (0x85, 0x00, 0, 72), (0x95, 0x00, 0, 0),
            ];
            assert_eq!(got, want);
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
