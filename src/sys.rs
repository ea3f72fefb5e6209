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

#[cfg(feature = "kernel-relay")]
pub(crate) mod kernel_relay;
