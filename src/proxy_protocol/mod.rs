//! PROXY protocol v1 (text) and v2 (binary) headers, as specified by HAProxy's
//! `proxy-protocol.txt`. PURE: no I/O.
//!
//! Written here rather than taken from a crate because the relay encodes one header per
//! connection on the hot path into a stack buffer (no allocation), and `whoami` needs a decoder
//! that tells "need more bytes" from "not a PROXY header", which the crates' error types blur.

use std::net::{IpAddr, SocketAddr};

/// Which header version to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Version {
    #[default]
    V1,
    V2,
}

/// The client end of the proxied connection (the accepted socket's peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source(pub SocketAddr);

/// The address the client dialled (the accepted socket's local address, port as seen by clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destination(pub SocketAddr);

/// v1 is at most 107 bytes, v2 over TCP/IPv6 is 52: one buffer fits both.
pub const MAX_ENCODED: usize = 108;

/// An encoded header held inline, so writing it costs no allocation.
#[derive(Clone, Copy)]
pub struct Encoded {
    buf: [u8; MAX_ENCODED],
    len: u8,
}

impl Encoded {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    fn push(&mut self, bytes: &[u8]) {
        let at = self.len as usize;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len() as u8;
    }
}

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Encoded({:?})",
            self.as_bytes().escape_ascii().to_string()
        )
    }
}

/// The v2 signature: `\r\n\r\n\0\r\nQUIT\n`.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are written as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The header for a proxied TCP connection. Mixed address families become `PROXY UNKNOWN` (v1)
/// or an UNSPEC-family PROXY command (v2).
pub fn encode_tcp(version: Version, src: Source, dst: Destination) -> Encoded {
    let (s, d) = (canonical(src.0.ip()), canonical(dst.0.ip()));
    let (sp, dp) = (src.0.port(), dst.0.port());
    let mut out = Encoded {
        buf: [0; MAX_ENCODED],
        len: 0,
    };
    match version {
        Version::V1 => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut out.buf[..]);
            // Infallible: the longest v1 line (TCP6, two full IPv6 addresses) is 104 bytes.
            let _ = match (s, d) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    write!(cursor, "PROXY TCP4 {s} {d} {sp} {dp}\r\n")
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    write!(cursor, "PROXY TCP6 {s} {d} {sp} {dp}\r\n")
                }
                _ => write!(cursor, "PROXY UNKNOWN\r\n"),
            };
            out.len = cursor.position() as u8;
        }
        Version::V2 => {
            out.push(&V2_SIGNATURE);
            match (s, d) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    out.push(&[0x21, 0x11, 0, 12]);
                    out.push(&s.octets());
                    out.push(&d.octets());
                    out.push(&sp.to_be_bytes());
                    out.push(&dp.to_be_bytes());
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    out.push(&[0x21, 0x21, 0, 36]);
                    out.push(&s.octets());
                    out.push(&d.octets());
                    out.push(&sp.to_be_bytes());
                    out.push(&dp.to_be_bytes());
                }
                _ => out.push(&[0x21, 0x00, 0, 0]),
            }
        }
    }
    out
}

/// A header that carries no address: v1 `PROXY UNKNOWN`, v2 LOCAL command. Health probes send
/// it so the receiver sees a well-formed connection instead of logging a broken header.
pub fn encode_local(version: Version) -> Encoded {
    let mut out = Encoded {
        buf: [0; MAX_ENCODED],
        len: 0,
    };
    match version {
        Version::V1 => out.push(b"PROXY UNKNOWN\r\n"),
        Version::V2 => {
            out.push(&V2_SIGNATURE);
            out.push(&[0x20, 0x00, 0, 0]);
        }
    }
    out
}
