//! The crate's only `unsafe` code: safe wrappers around the few system calls no dependency
//! offers a safe interface for. Everything else goes through `nix` (or std, tokio, socket2),
//! and the crate root denies `unsafe` outside this module.
//!
//! Written by hand because:
//! - [`poll`]: `nix::poll::poll` takes `PollFd`s built from `BorrowedFd`s, but the busy-poll hook
//!   (`runtime`) watches tokio's own epoll descriptors, which it only knows as raw numbers found
//!   in /proc/self/fd; borrowing them as `BorrowedFd` would itself need `unsafe`.
//! - [`getaddrinfo`]: neither std nor `nix` exposes getaddrinfo(3)'s return code (std's
//!   `lookup_host` folds "no such name" and "resolver did not answer" into one opaque error), and
//!   no resolver crate is in the dependency tree.
//! - [`listxattr`], [`getxattr`], [`fsetxattr`]: `nix` 0.32 has no extended-attribute calls
//!   (`rustix` has, but is not a dependency).
//! - [`send_link_frame`]: sending an Ethernet frame (the edge's ARP announcement) on an
//!   `AF_PACKET` socket takes a `sockaddr_ll` naming the interface, and neither `nix` 0.32 (its
//!   `LinkAddr` has no constructor but the unsafe `from_raw`) nor `socket2` (its `SockAddr` is
//!   built from raw storage only) builds one safely.
//! - The kernel relay's bpf(2) calls, ring buffer, TCP_INFO, SIOCOUTQ and SO_RCVLOWAT: in
//!   [`kernel_relay`], compiled only with the cargo feature `kernel-relay` (off by default, so
//!   the default build has none of that `unsafe`); neither `nix` nor `socket2` has them.
//!
//! Each wrapper makes exactly the system call(s) its caller made before, with no allocation of
//! its own beyond what the call's result needs.

#![allow(unsafe_code)]

use std::ffi::{c_int, CStr};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

/// poll(2) over raw descriptors: how many have events (`revents` is filled in). Negative
/// descriptors are skipped, as poll(2) does.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> io::Result<usize> {
    // SAFETY: the pointer and length come from one live, exclusively borrowed slice of pollfd,
    // which poll(2) only reads and writes within. poll(2) acts on no descriptor: a number that is
    // closed or reused only yields POLLNVAL or another file's readiness, never memory unsafety.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A failed getaddrinfo(3): its return code and the message for it.
pub(crate) struct GaiError {
    pub code: c_int,
    pub detail: String,
}

/// Resolves `name` to its IPv4 and IPv6 stream addresses, in the resolver's order, each with
/// `port`. Blocks.
pub(crate) fn getaddrinfo(name: &CStr, port: u16) -> Result<Vec<SocketAddr>, GaiError> {
    // SAFETY: an all-zero addrinfo is a valid value (integers zero, pointers null).
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated, a null service is allowed with a node, `hints` has only
    // the documented input fields set, and `res` is a valid place for the result list.
    let rc = unsafe { libc::getaddrinfo(name.as_ptr(), std::ptr::null(), &hints, &mut res) };
    if rc != 0 {
        let detail = if rc == libc::EAI_SYSTEM {
            io::Error::last_os_error().to_string()
        } else {
            // SAFETY: gai_strerror returns a pointer to a static NUL-terminated string.
            unsafe { CStr::from_ptr(libc::gai_strerror(rc)) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(GaiError { code: rc, detail });
    }
    let mut out = Vec::new();
    let mut cur = res;
    while !cur.is_null() {
        // SAFETY: `cur` is a non-null node of the list getaddrinfo returned, not yet freed; only
        // read. Its `ai_addr` points to a sockaddr of the kind `ai_family` names (sockaddr_in
        // for AF_INET, sockaddr_in6 for AF_INET6), as getaddrinfo(3) guarantees.
        let ai = unsafe { &*cur };
        match ai.ai_family {
            libc::AF_INET => {
                // SAFETY: see above.
                let sa = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
                out.push(SocketAddr::new(ip.into(), port));
            }
            libc::AF_INET6 => {
                // SAFETY: see above.
                let sa = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
                out.push(SocketAddr::new(ip.into(), port));
            }
            _ => {}
        }
        cur = ai.ai_next;
    }
    // SAFETY: `res` is the list getaddrinfo returned (rc 0), freed exactly once; no reference
    // into it outlives this point.
    unsafe { libc::freeaddrinfo(res) };
    Ok(out)
}

#[cfg(target_os = "linux")]
/// The pointer for a buffer argument: null for an empty buffer (a size query), as the xattr
/// calls document.
fn buf_ptr(buf: &mut [u8]) -> *mut libc::c_char {
    if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    }
}

#[cfg(target_os = "linux")]
/// listxattr(2): writes the NUL-separated attribute names of `path` into `buf` and returns their
/// length; with an empty `buf`, only returns the length needed.
pub(crate) fn listxattr(path: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `path` is NUL-terminated; the buffer is null with size 0, or a live, exclusively
    // borrowed slice with its true length, which the kernel writes at most `len` bytes into.
    let n = unsafe { libc::listxattr(path.as_ptr(), buf_ptr(buf), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(target_os = "linux")]
/// getxattr(2): writes the value of attribute `name` of `path` into `buf` and returns its length;
/// with an empty `buf`, only returns the length needed.
pub(crate) fn getxattr(path: &CStr, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: as in `listxattr`; `name` is NUL-terminated too.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf_ptr(buf).cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(target_os = "linux")]
/// fsetxattr(2): sets attribute `name` of the open file `fd` to `value` (flags 0: create or
/// replace).
pub(crate) fn fsetxattr(fd: impl AsFd, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `fd` is borrowed, so open for the call; `name` is NUL-terminated; the kernel only
    // reads `value.len()` bytes from the live `value` slice.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_fd().as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
/// sendto(2) of the whole Ethernet frame `frame` (header included) on interface `ifindex` through
/// `socket`, an `AF_PACKET`/`SOCK_RAW` socket; `dest` and `protocol` (host order) are the frame's
/// own destination MAC and EtherType, as packet(7) asks them in the address.
pub(crate) fn send_link_frame(
    socket: impl AsFd,
    ifindex: u32,
    dest: [u8; 6],
    protocol: u16,
    frame: &[u8],
) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_ll is a valid value (integers and byte arrays).
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = ifindex as c_int;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&dest);
    // SAFETY: `socket` is borrowed, so open for the call; `frame` is a live slice the kernel only
    // reads `frame.len()` bytes of; `addr` is a live, initialised sockaddr_ll whose size is passed.
    let n = unsafe {
        libc::sendto(
            socket.as_fd().as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The kernel relay's system calls (`relay::sockmap`, only in a build with the cargo feature
/// `kernel-relay`): bpf(2), the BPF ring buffer's mappings, and the TCP socket state the relay
/// reads (TCP_INFO, SIOCOUTQ, SO_RCVLOWAT), none of which `nix` or `socket2` has.
///
/// Written by hand because the Rust BPF crates load programs from ELF objects only: `aya` needs
/// the object built by `bpf-linker` on a nightly toolchain, `libbpf-rs` builds libbpf (C, libelf,
/// zlib). The relay's program is 43 instructions assembled in `relay::sockmap`, and it needs
/// six bpf(2) commands; the attribute layouts below are the prefixes of `union bpf_attr`
/// (linux/bpf.h) that those commands read. The kernel accepts a shorter attribute as long as
/// it covers the fields it needs, so the structures end at the last field set.
#[cfg(feature = "kernel-relay")]
pub(crate) mod kernel_relay {
    use std::ffi::{c_int, CStr};
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

    const BPF_MAP_CREATE: c_int = 0;
    const BPF_MAP_LOOKUP_ELEM: c_int = 1;
    const BPF_MAP_UPDATE_ELEM: c_int = 2;
    const BPF_MAP_DELETE_ELEM: c_int = 3;
    const BPF_PROG_LOAD: c_int = 5;
    const BPF_PROG_ATTACH: c_int = 8;

    /// One eBPF instruction (`struct bpf_insn`): `regs` holds dst in its low nibble and src in its
    /// high one on little-endian machines (the C bitfield order), the reverse on big-endian ones.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) struct BpfInsn {
        pub code: u8,
        pub regs: u8,
        pub off: i16,
        pub imm: i32,
    }

    #[repr(C)]
    #[derive(Default)]
    struct MapCreateAttr {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
        inner_map_fd: u32,
        numa_node: u32,
        map_name: [u8; 16],
    }

    #[repr(C)]
    #[derive(Default)]
    struct ProgLoadAttr {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
    }

    #[repr(C)]
    #[derive(Default)]
    struct ProgAttachAttr {
        target_fd: u32,
        attach_bpf_fd: u32,
        attach_type: u32,
        attach_flags: u32,
    }

    #[repr(C)]
    #[derive(Default)]
    struct MapElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        /// `value` for update, `next_key` for get-next-key.
        value: u64,
        flags: u64,
    }

    /// An object name for bpftool and /proc: at most 15 bytes, NUL-padded.
    fn bpf_name(name: &str) -> [u8; 16] {
        let mut out = [0u8; 16];
        let n = name.len().min(15);
        out[..n].copy_from_slice(&name.as_bytes()[..n]);
        out
    }

    /// bpf(2) with `attr`; its non-negative result.
    ///
    /// # Safety
    /// Every address inside `attr` must point to memory that is live, and writable where the
    /// command writes, for the length the attribute gives, for the duration of the call.
    unsafe fn bpf<T>(cmd: c_int, attr: &mut T) -> io::Result<i64> {
        // SAFETY: `attr` is a live, exclusively borrowed repr(C) prefix of `union bpf_attr` whose
        // size is passed, so the kernel reads and writes only within it; what it points to is the
        // caller's promise.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                attr as *mut T,
                std::mem::size_of::<T>() as libc::c_uint,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as i64)
        }
    }

    /// Wraps a descriptor bpf(2) returned (the kernel opens them close-on-exec).
    fn bpf_fd(rc: i64) -> OwnedFd {
        // SAFETY: a successful BPF_MAP_CREATE or BPF_PROG_LOAD returns a new descriptor that
        // nothing else owns.
        unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
    }

    /// BPF_MAP_CREATE: a map of `map_type` with `key_size`-byte keys and `value_size`-byte values
    /// (a socket map's values are descriptors on update, 4 bytes).
    pub(crate) fn bpf_map_create(
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        name: &str,
    ) -> io::Result<OwnedFd> {
        let mut attr = MapCreateAttr {
            map_type,
            key_size,
            value_size,
            max_entries,
            map_name: bpf_name(name),
            ..Default::default()
        };
        // SAFETY: the attribute holds no addresses.
        unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.map(bpf_fd)
    }

    /// BPF_PROG_LOAD of `insns` as a `prog_type` program; the verifier's log (level 1) goes to
    /// `log` when the load is refused.
    pub(crate) fn bpf_prog_load(
        prog_type: u32,
        insns: &[BpfInsn],
        license: &CStr,
        log: &mut [u8],
        name: &str,
    ) -> io::Result<OwnedFd> {
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            prog_name: bpf_name(name),
            ..Default::default()
        };
        // SAFETY: `insns` (insn_cnt entries) and `license` (NUL-terminated) are live borrows the
        // kernel only reads; `log` is a live, exclusive borrow of log_size bytes (or none).
        unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.map(bpf_fd)
    }

    /// BPF_PROG_ATTACH of `prog` to `target` (a map, for socket programs) as `attach_type`.
    pub(crate) fn bpf_prog_attach(
        target: BorrowedFd<'_>,
        prog: BorrowedFd<'_>,
        attach_type: u32,
    ) -> io::Result<()> {
        let mut attr = ProgAttachAttr {
            target_fd: target.as_raw_fd() as u32,
            attach_bpf_fd: prog.as_raw_fd() as u32,
            attach_type,
            attach_flags: 0,
        };
        // SAFETY: the attribute holds no addresses.
        unsafe { bpf(BPF_PROG_ATTACH, &mut attr) }.map(drop)
    }

    /// BPF_MAP_UPDATE_ELEM (BPF_ANY): `map[key] = socket` for a socket map.
    pub(crate) fn bpf_map_set_socket(
        map: BorrowedFd<'_>,
        key: u64,
        socket: BorrowedFd<'_>,
    ) -> io::Result<()> {
        map_update(map, key, &(socket.as_raw_fd() as u32))
    }

    /// BPF_MAP_UPDATE_ELEM (BPF_ANY): `map[key] = value` for a map of 8-byte keys and values.
    pub(crate) fn bpf_map_set_u64(map: BorrowedFd<'_>, key: u64, value: u64) -> io::Result<()> {
        map_update(map, key, &value)
    }

    /// BPF_MAP_UPDATE_ELEM (BPF_ANY) of an 8-byte key; `V` must be the map's value size (`u32`
    /// for a socket map's descriptor, `u64` otherwise), which both callers above fix.
    fn map_update<V: Copy>(map: BorrowedFd<'_>, key: u64, value: &V) -> io::Result<()> {
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: &key as *const u64 as u64,
            value: value as *const V as u64,
            ..Default::default()
        };
        // SAFETY: `key` and `value` are alive for the call and have the sizes the map was created
        // with; the kernel only reads them.
        unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
    }

    /// BPF_MAP_LOOKUP_ELEM in a map of 8-byte keys and values; `None` when `key` is absent.
    pub(crate) fn bpf_map_get_u64(map: BorrowedFd<'_>, key: u64) -> io::Result<Option<u64>> {
        let mut value: u64 = 0;
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: &key as *const u64 as u64,
            value: &mut value as *mut u64 as u64,
            ..Default::default()
        };
        // SAFETY: `key` (read) and `value` (written, 8 bytes: the value size) are locals alive for
        // the call.
        match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
            Ok(_) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// BPF_MAP_DELETE_ELEM of `key`.
    pub(crate) fn bpf_map_delete(map: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: &key as *const u64 as u64,
            ..Default::default()
        };
        // SAFETY: `key` is an 8-byte local alive for the call; the kernel only reads it.
        unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) }.map(drop)
    }

    /// getsockopt(TCP_INFO): the kernel's view of a TCP socket (byte counts, state).
    pub(crate) fn tcp_info(socket: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
        // SAFETY: an all-zero tcp_info is a valid value (integers only).
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `info` is a live local of `len` bytes; the kernel writes at most `len` of them and
        // stores the length written in `len`.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(info)
        }
    }

    /// ioctl(SIOCOUTQ): bytes in a TCP socket's send queue not yet acknowledged by the peer
    /// (sent or not).
    pub(crate) fn send_queue_bytes(socket: BorrowedFd<'_>) -> io::Result<u64> {
        let mut n: c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int to the pointer, a live local.
        let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut c_int) };
        if rc != 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n.max(0) as u64)
        }
    }

    /// setsockopt(SO_RCVLOWAT). For TCP the kernel re-runs the socket's data-ready callback when
    /// this many bytes are already queued: how the kernel relay hands over bytes that arrived
    /// before the socket joined the map.
    pub(crate) fn set_rcvlowat(socket: BorrowedFd<'_>, bytes: c_int) -> io::Result<()> {
        // SAFETY: the kernel reads one int from the pointer, a live borrow.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&bytes as *const c_int).cast(),
                std::mem::size_of::<c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// An epoll instance that tokio's reactor watches (readable when it has events to report).
    /// Its descriptor is private, so it stays the one registered for as long as this lives.
    pub(crate) struct EpollWatch(nix::sys::epoll::Epoll);

    impl AsRawFd for EpollWatch {
        fn as_raw_fd(&self) -> RawFd {
            self.0 .0.as_raw_fd()
        }
    }

    impl EpollWatch {
        pub(crate) fn epoll(&self) -> &nix::sys::epoll::Epoll {
            &self.0
        }
    }

    /// Registers `epoll` with the current tokio reactor for readability.
    pub(crate) fn watch_epoll(
        epoll: nix::sys::epoll::Epoll,
    ) -> io::Result<tokio::io::unix::AsyncFd<EpollWatch>> {
        // SAFETY: `EpollWatch` owns the descriptor (an OwnedFd inside the Epoll) and never exposes
        // it for replacement, so it stays open and the same until the AsyncFd drops it.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                EpollWatch(epoll),
                tokio::io::Interest::READABLE,
            )
        }
        .map_err(io::Error::from)
    }

    /// The consumer side of a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF): its two mappings and its
    /// descriptor, which epoll reports readable while records wait.
    ///
    /// Layout (kernel/bpf/ringbuf.c): page 0, writable, holds the consumer position; from page 1,
    /// read-only, the producer position, then the data area mapped twice in a row so a record
    /// that wraps reads as one slice. Each record starts with an 8-byte header whose first word is
    /// its length with a busy bit (still being written) and a discard bit; records are 8-aligned.
    pub(crate) struct RingBuf {
        fd: OwnedFd,
        consumer: *mut u8,
        producer: *const u8,
        page: usize,
        size: usize,
    }

    // SAFETY: the pointers are to shared mappings that live as long as the value; the kernel
    // synchronises with the consumer through the atomic positions, and `drain` takes `&mut self`,
    // so one thread at a time consumes.
    unsafe impl Send for RingBuf {}
    // SAFETY: `&RingBuf` only exposes the descriptor.
    unsafe impl Sync for RingBuf {}

    const RINGBUF_BUSY: u32 = 1 << 31;
    const RINGBUF_DISCARD: u32 = 1 << 30;
    const RINGBUF_HDR: usize = 8;

    impl RingBuf {
        /// Maps the ring buffer map `fd` created with `size` (a power of two number of pages).
        pub(crate) fn map(fd: OwnedFd, size: usize) -> io::Result<Self> {
            // SAFETY: sysconf has no memory effects.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            let raw = fd.as_raw_fd();
            // SAFETY: a fresh shared mapping of the map's consumer page; the kernel validates the
            // length, offset and protection against the map.
            let consumer = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    raw,
                    0,
                )
            };
            if consumer == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above, read-only: the producer page and the data area twice.
            let producer = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page + 2 * size,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    raw,
                    page as libc::off_t,
                )
            };
            if producer == libc::MAP_FAILED {
                let e = io::Error::last_os_error();
                // SAFETY: the consumer mapping made above, unmapped once.
                unsafe { libc::munmap(consumer, page) };
                return Err(e);
            }
            Ok(RingBuf {
                fd,
                consumer: consumer.cast(),
                producer: producer.cast(),
                page,
                size,
            })
        }

        /// Passes each committed record (not discarded) to `each`, in order, and frees its space.
        pub(crate) fn drain(&mut self, mut each: impl FnMut(&[u8])) {
            use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
            // SAFETY: both positions are 8-aligned u64s at the start of mapped pages, accessed only
            // atomically, as the kernel does.
            let (cons, prod) = unsafe {
                (
                    AtomicU64::from_ptr(self.consumer.cast()),
                    AtomicU64::from_ptr(self.producer.cast_mut().cast()),
                )
            };
            let mut pos = cons.load(Ordering::Acquire);
            let end = prod.load(Ordering::Acquire);
            while pos < end {
                let off = (pos as usize) & (self.size - 1);
                // SAFETY: `off` < size, and the data area (mapped twice) starts one page after the
                // producer page, so the header and a record of up to `size` bytes are mapped.
                let hdr = unsafe { self.producer.add(self.page + off) };
                // SAFETY: the header's first word is an aligned u32 the kernel writes atomically.
                let len =
                    unsafe { AtomicU32::from_ptr(hdr.cast_mut().cast()) }.load(Ordering::Acquire);
                if len & RINGBUF_BUSY != 0 {
                    break;
                }
                let n = (len & !(RINGBUF_BUSY | RINGBUF_DISCARD)) as usize;
                if len & RINGBUF_DISCARD == 0 {
                    // SAFETY: a committed record of `n` bytes follows its header, within the double
                    // mapping; the kernel does not write it again until the consumer moves past.
                    each(unsafe { std::slice::from_raw_parts(hdr.add(RINGBUF_HDR), n) });
                }
                pos += ((n + RINGBUF_HDR + 7) & !7) as u64;
                cons.store(pos, Ordering::Release);
            }
        }
    }

    impl AsRawFd for RingBuf {
        fn as_raw_fd(&self) -> RawFd {
            self.fd.as_raw_fd()
        }
    }

    impl Drop for RingBuf {
        fn drop(&mut self) {
            // SAFETY: the two mappings made in `map`, with their lengths, unmapped once; nothing
            // borrows them past `drain`.
            unsafe {
                libc::munmap(self.consumer.cast(), self.page);
                libc::munmap(self.producer.cast_mut().cast(), self.page + 2 * self.size);
            }
        }
    }

    /// Registers `ring` with the current tokio reactor for readability.
    pub(crate) fn watch_ring(ring: RingBuf) -> io::Result<tokio::io::unix::AsyncFd<RingBuf>> {
        // SAFETY: `RingBuf` owns its descriptor privately and never replaces it.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)
    }
}
