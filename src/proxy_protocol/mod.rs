//! PROXY protocol v1 (text) and v2 (binary) headers, as specified by HAProxy's
//! `proxy-protocol.txt`. PURE: no I/O.
//!
//! Written here rather than taken from a crate because the relay encodes one header per
//! connection on the hot path into a stack buffer (no allocation), and `whoami` needs a decoder
//! that tells "need more bytes" from "not a PROXY header", which the crates' error types blur.

use std::net::{IpAddr, SocketAddr};

pub mod decode;

/// Which header version to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Version {
    #[default]
    V1,
    V2,
}

impl Version {
    /// `v1` / `v2`, as the flag takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
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
// The wire format's sizes live here with the signature, not in `decode::v1`/`v2`: the
// decoder's errors and TLV reader need them too, and reaching them in `v1`/`v2` made the
// decoder's modules import each other in a cycle.
/// The v1 signature, including the space that follows `PROXY`.
pub const V1_SIGNATURE: &[u8; 6] = b"PROXY ";
/// Longest v1 line the specification allows, CRLF included.
pub const V1_MAX_LEN: usize = 107;
/// Fixed part of a v2 header: signature, version/command, family/protocol, length.
pub const V2_FIXED_LEN: usize = 16;
/// Longest v2 header: the length field is 16 bits.
pub const V2_MAX_LEN: usize = V2_FIXED_LEN + u16::MAX as usize;

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

/// Test data shared by the encoder and decoder tests.
#[cfg(test)]
pub(crate) mod testdata {
    use std::net::SocketAddr;

    pub fn unhex(s: &str) -> Vec<u8> {
        assert!(s.len() % 2 == 0, "odd hex length: {s}");
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
            .collect()
    }

    /// One header HAProxy 2.6 wrote (tests/fixtures/haproxy-2.6-proxy-headers.txt).
    #[derive(Debug)]
    pub struct Capture {
        pub case: &'static str,
        pub version: super::Version,
        pub src: SocketAddr,
        pub dst: SocketAddr,
        pub options: &'static str,
        pub bytes: Vec<u8>,
    }

    pub fn haproxy_captures() -> Vec<Capture> {
        let text = include_str!("../../tests/fixtures/haproxy-2.6-proxy-headers.txt");
        let captures: Vec<Capture> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                assert_eq!(f.len(), 6, "fixture line {line:?}");
                Capture {
                    case: f[0],
                    version: match f[1] {
                        "v1" => super::Version::V1,
                        "v2" => super::Version::V2,
                        v => panic!("fixture version {v}"),
                    },
                    src: f[2].parse().expect("fixture source"),
                    dst: f[3].parse().expect("fixture destination"),
                    options: f[4],
                    bytes: unhex(f[5]),
                }
            })
            .collect();
        assert_eq!(captures.len(), 15, "fixture has 7 v1 and 8 v2 captures");
        captures
    }

    pub fn capture(case: &str, version: super::Version) -> Capture {
        haproxy_captures()
            .into_iter()
            .find(|c| c.case == case && c.version == version)
            .unwrap_or_else(|| panic!("no fixture capture {case} {version:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::decode::decode;
    use super::decode::header::Transport;
    use super::testdata::{capture, haproxy_captures, unhex};
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn enc(v: Version, src: &str, dst: &str) -> Vec<u8> {
        encode_tcp(v, Source(sa(src)), Destination(sa(dst)))
            .as_bytes()
            .to_vec()
    }

    #[test]
    fn v1_table() {
        let longest_src = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535";
        let longest_dst = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
        for (src, dst, want) in [
            (
                "192.0.2.10:51234",
                "203.0.113.7:443",
                "PROXY TCP4 192.0.2.10 203.0.113.7 51234 443\r\n",
            ),
            (
                "[2001:db8::1]:51234",
                "[2001:db8::2]:80",
                "PROXY TCP6 2001:db8::1 2001:db8::2 51234 80\r\n",
            ),
            (
                "[::ffff:192.0.2.10]:51234",
                "[::ffff:203.0.113.7]:443",
                "PROXY TCP4 192.0.2.10 203.0.113.7 51234 443\r\n",
            ),
            ("192.0.2.10:51234", "[2001:db8::2]:443", "PROXY UNKNOWN\r\n"),
            (
                "[2001:db8::1]:51234",
                "203.0.113.7:443",
                "PROXY UNKNOWN\r\n",
            ),
            // Mapped on one side only: canonical forms differ in family.
            (
                "[::ffff:192.0.2.10]:1",
                "[2001:db8::2]:2",
                "PROXY UNKNOWN\r\n",
            ),
            (
                "10.0.0.1:0",
                "10.255.255.254:65535",
                "PROXY TCP4 10.0.0.1 10.255.255.254 0 65535\r\n",
            ),
            ("[::]:0", "[::1]:65535", "PROXY TCP6 :: ::1 0 65535\r\n"),
            (
                "255.255.255.255:65535",
                "255.255.255.255:65535",
                "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
            ),
            (
                longest_src,
                longest_dst,
                "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe \
                 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
            ),
        ] {
            let got = enc(Version::V1, src, dst);
            assert_eq!(
                got.escape_ascii().to_string(),
                want.as_bytes().escape_ascii().to_string(),
                "{src} -> {dst}"
            );
        }
        // The longest line a TCP header can produce fits the 107-byte limit.
        let longest = enc(Version::V1, longest_src, longest_dst);
        assert_eq!(longest.len(), 104);
        assert!(longest.len() <= V1_MAX_LEN);
    }

    #[test]
    fn v2_table() {
        let sig = "0d0a0d0a000d0a515549540a";
        for (src, dst, want) in [
            (
                "192.0.2.10:51234",
                "203.0.113.7:443",
                "2111000c c000020a cb007107 c822 01bb",
            ),
            (
                "[2001:db8::1]:51234",
                "[2001:db8::2]:80",
                "21210024 20010db8000000000000000000000001 20010db8000000000000000000000002 c822 0050",
            ),
            (
                "[::ffff:192.0.2.10]:51234",
                "[::ffff:203.0.113.7]:443",
                "2111000c c000020a cb007107 c822 01bb",
            ),
            ("192.0.2.10:51234", "[2001:db8::2]:443", "21000000"),
            ("[2001:db8::1]:51234", "203.0.113.7:443", "21000000"),
            (
                "10.0.0.1:0",
                "10.255.255.254:65535",
                "2111000c 0a000001 0afffffe 0000 ffff",
            ),
            (
                "[::]:0",
                "[::1]:65535",
                "21210024 00000000000000000000000000000000 00000000000000000000000000000001 0000 ffff",
            ),
        ] {
            let want = unhex(&format!("{sig}{}", want.replace(' ', "")));
            assert_eq!(enc(Version::V2, src, dst), want, "{src} -> {dst}");
        }
    }

    #[test]
    fn local_headers() {
        assert_eq!(encode_local(Version::V1).as_bytes(), b"PROXY UNKNOWN\r\n");
        assert_eq!(
            encode_local(Version::V2).as_bytes(),
            unhex("0d0a0d0a000d0a515549540a20000000")
        );
    }

    /// Same bytes as HAProxy 2.6 wherever the addresses are of one plain family.
    #[test]
    fn equals_haproxy_for_same_family() {
        let mut compared = 0;
        for c in haproxy_captures() {
            if c.options != "-" || c.case.starts_with("mapped") || c.case.starts_with("mixed") {
                continue;
            }
            let ours = encode_tcp(c.version, Source(c.src), Destination(c.dst));
            assert_eq!(
                ours.as_bytes().escape_ascii().to_string(),
                c.bytes.escape_ascii().to_string(),
                "{} {:?}",
                c.case,
                c.version
            );
            compared += 1;
        }
        assert_eq!(compared, 8, "ipv4, ipv6, ports, longest in v1 and v2");
    }

    /// Deliberate differences from HAProxy: it writes IPv4-mapped addresses as TCP6 and maps the
    /// IPv4 side of a mixed pair into IPv6. We write mapped addresses as plain IPv4 (what the
    /// receiver logs and matches against allow-lists) and mixed pairs as UNKNOWN / UNSPEC.
    #[test]
    fn differs_from_haproxy_for_mapped_and_mixed_on_purpose() {
        for v in [Version::V1, Version::V2] {
            let mapped = capture("mapped", v);
            let ours = encode_tcp(v, Source(mapped.src), Destination(mapped.dst));
            assert_ne!(ours.as_bytes(), &mapped.bytes[..]);
            let plain = encode_tcp(
                v,
                Source(sa("192.0.2.10:51234")),
                Destination(sa("203.0.113.7:80")),
            );
            assert_eq!(ours.as_bytes(), plain.as_bytes(), "{v:?}");
            // HAProxy's own mapped header still decodes to the mapped addresses.
            let (h, n) = decode(&mapped.bytes).unwrap();
            assert_eq!(n, mapped.bytes.len());
            assert_eq!(
                h.addresses,
                Some((Source(mapped.src), Destination(mapped.dst)))
            );

            for case in ["mixed_v4_v6", "mixed_v6_v4"] {
                let mixed = capture(case, v);
                let ours = encode_tcp(v, Source(mixed.src), Destination(mixed.dst));
                assert_eq!(ours.as_bytes(), encode_local_unspec(v), "{case} {v:?}");
                let (h, _) = decode(&mixed.bytes).unwrap();
                assert_eq!(h.transport, Transport::Tcp6, "{case}");
            }
        }
    }

    fn encode_local_unspec(v: Version) -> Vec<u8> {
        match v {
            Version::V1 => b"PROXY UNKNOWN\r\n".to_vec(),
            Version::V2 => unhex("0d0a0d0a000d0a515549540a21000000"),
        }
    }
}
