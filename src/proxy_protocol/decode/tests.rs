//! Tests of the whole decoder: every valid and invalid header through `decode`, byte at a time,
//! HAProxy's captures, signature detection, and (in `props`) the property tests. The fixtures
//! here are shared with `tlv`'s tests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::super::testdata::{capture, haproxy_captures, unhex};
use super::super::{encode_local, encode_tcp};
use super::header::{Command, Tlv, Transport};
use super::tlv::*;
use super::*;
use crate::proxy_protocol::{Destination, Source, Version, V1_MAX_LEN, V2_FIXED_LEN};

const SIG: &str = "0d0a0d0a000d0a515549540a";

fn v2(rest: &str) -> Vec<u8> {
    unhex(&format!("{SIG}{}", rest.replace(' ', "")))
}

fn addrs(src: &str, dst: &str) -> Option<(Source, Destination)> {
    Some((
        Source(src.parse().unwrap()),
        Destination(dst.parse().unwrap()),
    ))
}

fn hdr(
    version: Version,
    command: Command,
    transport: Transport,
    addresses: Option<(Source, Destination)>,
    tlvs: Vec<Tlv>,
) -> Header {
    Header {
        version,
        command,
        transport,
        addresses,
        tlvs,
    }
}

pub(super) fn tlv(kind: u8, value: &[u8]) -> Tlv {
    Tlv {
        kind,
        value: value.to_vec(),
    }
}

/// Appends a correct CRC32C TLV to a v2 header and fixes its length field.
fn with_crc(mut h: Vec<u8>) -> Vec<u8> {
    h.extend_from_slice(&[PP2_TYPE_CRC32C, 0, 4, 0, 0, 0, 0]);
    let len = (h.len() - V2_FIXED_LEN) as u16;
    h[14..16].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c(h.iter().copied());
    let at = h.len() - 4;
    h[at..].copy_from_slice(&crc.to_be_bytes());
    h
}

#[allow(
    clippy::too_many_lines,
    reason = "a table of cases: header bytes and the header they decode to"
)]
fn valid_cases() -> Vec<(&'static str, Vec<u8>, Header)> {
    let unknown = hdr(Version::V1, Command::Proxy, Transport::Unspec, None, vec![]);
    let mut longest_unknown = b"PROXY UNKNOWN ".to_vec();
    longest_unknown.resize(V1_MAX_LEN - 2, b'x');
    longest_unknown.extend_from_slice(b"\r\n");
    let mut unix = v2("2131 00d8");
    unix.extend_from_slice(&[b'/'; 216]);
    vec![
        (
            "v1 tcp4",
            b"PROXY TCP4 192.0.2.10 203.0.113.7 51234 443\r\n".to_vec(),
            hdr(
                Version::V1,
                Command::Proxy,
                Transport::Tcp4,
                addrs("192.0.2.10:51234", "203.0.113.7:443"),
                vec![],
            ),
        ),
        (
            "v1 tcp6",
            b"PROXY TCP6 2001:db8::1 ::ffff:203.0.113.7 0 65535\r\n".to_vec(),
            hdr(
                Version::V1,
                Command::Proxy,
                Transport::Tcp6,
                addrs("[2001:db8::1]:0", "[::ffff:203.0.113.7]:65535"),
                vec![],
            ),
        ),
        ("v1 unknown", b"PROXY UNKNOWN\r\n".to_vec(), unknown.clone()),
        (
            "v1 unknown with ignored addresses",
            b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n".to_vec(),
            unknown.clone(),
        ),
        ("v1 unknown, 107 bytes", longest_unknown, unknown),
        (
            "v2 tcp4",
            v2("2111 000c c000020a cb007107 c822 01bb"),
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Tcp4,
                addrs("192.0.2.10:51234", "203.0.113.7:443"),
                vec![],
            ),
        ),
        (
            "v2 tcp6",
            v2("2121 0024 20010db8000000000000000000000001 20010db8000000000000000000000002 0000 ffff"),
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Tcp6,
                addrs("[2001:db8::1]:0", "[2001:db8::2]:65535"),
                vec![],
            ),
        ),
        (
            "v2 udp4",
            v2("2112 000c 0a000001 0a000002 0035 0035"),
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Udp4,
                addrs("10.0.0.1:53", "10.0.0.2:53"),
                vec![],
            ),
        ),
        (
            "v2 local",
            v2("2000 0000"),
            hdr(Version::V2, Command::Local, Transport::Unspec, None, vec![]),
        ),
        (
            "v2 local ignores addresses and undefined family",
            v2("2013 0004 01020304"),
            hdr(Version::V2, Command::Local, Transport::Unspec, None, vec![]),
        ),
        (
            "v2 local keeps tlvs",
            v2("2011 0011 0a000001 0a000002 0001 0002 040002 0000"),
            hdr(
                Version::V2,
                Command::Local,
                Transport::Tcp4,
                None,
                vec![tlv(PP2_TYPE_NOOP, &[0, 0])],
            ),
        ),
        (
            "v2 unspec",
            v2("2100 0000"),
            hdr(Version::V2, Command::Proxy, Transport::Unspec, None, vec![]),
        ),
        (
            "v2 unix without addresses",
            unix,
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::UnixStream,
                None,
                vec![],
            ),
        ),
        (
            "v2 standard tlvs",
            v2("2111 0034 0a000001 0a000002 0001 0002 \
                010002 6832 \
                02000b 6578616d706c652e636f6d \
                040000 \
                300003 6e7331 \
                200005 0100000000 \
                ea0001 ff"),
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Tcp4,
                addrs("10.0.0.1:1", "10.0.0.2:2"),
                vec![
                    tlv(PP2_TYPE_ALPN, b"h2"),
                    tlv(PP2_TYPE_AUTHORITY, b"example.com"),
                    tlv(PP2_TYPE_NOOP, b""),
                    tlv(PP2_TYPE_NETNS, b"ns1"),
                    tlv(PP2_TYPE_SSL, &[1, 0, 0, 0, 0]),
                    tlv(0xea, &[0xff]),
                ],
            ),
        ),
        (
            "v2 crc32c computed here",
            with_crc(v2("2111 000c 0a000001 0a000002 0001 0002")),
            {
                let h = with_crc(v2("2111 000c 0a000001 0a000002 0001 0002"));
                hdr(
                    Version::V2,
                    Command::Proxy,
                    Transport::Tcp4,
                    addrs("10.0.0.1:1", "10.0.0.2:2"),
                    vec![tlv(PP2_TYPE_CRC32C, &h[h.len() - 4..])],
                )
            },
        ),
        (
            "v2 crc32c and unique id written by haproxy",
            capture("tlvs", Version::V2).bytes,
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Tcp4,
                addrs("192.0.2.10:51234", "203.0.113.7:443"),
                vec![
                    tlv(PP2_TYPE_CRC32C, &unhex("cb5ce4c0")),
                    tlv(PP2_TYPE_UNIQUE_ID, b"req-7f3a"),
                ],
            ),
        ),
        (
            "v2 tls tlvs written by haproxy (ssl,cert-sig,cert-key,ssl-cipher,authority,crc32c)",
            unhex(HAPROXY_TLS),
            hdr(
                Version::V2,
                Command::Proxy,
                Transport::Tcp4,
                addrs("127.0.0.1:43904", "127.0.0.1:35849"),
                vec![
                    tlv(PP2_TYPE_CRC32C, &unhex("cd6d8ece")),
                    tlv(PP2_TYPE_ALPN, b"http/1.1"),
                    tlv(PP2_TYPE_AUTHORITY, b"shop.example.com"),
                    tlv(
                        PP2_TYPE_SSL,
                        &unhex(&HAPROXY_TLS[HAPROXY_TLS.len() - 2 * 0x44..]),
                    ),
                ],
            ),
        ),
    ]
}

/// Captured from HAProxy 2.6 terminating TLS 1.3 (`proxy-v2-options
/// ssl,cert-cn,ssl-cipher,cert-sig,cert-key,authority,crc32c`).
pub(super) const HAPROXY_TLS: &str = "0d0a0d0a000d0a515549540a211100787f0000017f000001ab808c09\
    030004cd6d8ece010008687474702f312e3102001073686f702e6578616d706c652e636f6d\
    2000440100000000210007544c5376312e33250005454332353624001165636473612d7769\
    74682d534841323536230016544c535f4145535f3235365f47434d5f534841333834";

#[test]
fn valid_headers_decode() {
    for (name, bytes, want) in valid_cases() {
        assert_eq!(decode(&bytes), Ok((want.clone(), bytes.len())), "{name}");
        // Application bytes after the header are left alone.
        let mut more = bytes.clone();
        more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(decode(&more), Ok((want, bytes.len())), "{name} + payload");
    }
}

#[test]
fn byte_at_a_time_is_incomplete_until_the_last_byte() {
    for (name, bytes, _) in valid_cases() {
        let whole = decode(&bytes);
        for n in 0..bytes.len() {
            assert_eq!(
                decode(&bytes[..n]),
                Err(DecodeError::Incomplete),
                "{name}: prefix of {n} bytes"
            );
        }
        assert_eq!(decode(&bytes), whole, "{name}");
        assert!(whole.is_ok(), "{name}");
    }
}

#[test]
fn every_haproxy_capture_decodes_to_its_addresses() {
    for c in haproxy_captures() {
        let (h, n) = decode(&c.bytes).unwrap_or_else(|e| panic!("{}: {e}", c.case));
        assert_eq!(n, c.bytes.len(), "{}", c.case);
        assert_eq!(h.version, c.version);
        assert_eq!(h.command, Command::Proxy);
        // HAProxy maps the IPv4 side of a mixed pair into IPv6.
        let mapped = |a: std::net::SocketAddr| match a.ip() {
            IpAddr::V4(v4) => SocketAddr::new(v4.to_ipv6_mapped().into(), a.port()),
            _ => a,
        };
        let (src, dst) = if c.case.starts_with("mixed") {
            (mapped(c.src), mapped(c.dst))
        } else {
            (c.src, c.dst)
        };
        assert_eq!(
            h.addresses,
            Some((Source(src), Destination(dst))),
            "{}",
            c.case
        );
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a table of cases: header bytes and the error they give"
)]
fn invalid_headers() {
    let mut no_crlf = b"PROXY UNKNOWN ".to_vec();
    no_crlf.resize(V1_MAX_LEN, b'x');
    let mut crlf_at_108 = no_crlf.clone();
    crlf_at_108.extend_from_slice(b"\r\n");
    let mut bad_crc = with_crc(v2("2111 000c 0a000001 0a000002 0001 0002"));
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let syntax = |s| Invalid::V1Syntax(s);
    let cases: Vec<(&str, Vec<u8>, Invalid)> = vec![
        ("http", b"GET / HTTP/1.1\r\n".to_vec(), Invalid::NoSignature),
        ("tls", vec![0x16, 0x03, 0x01], Invalid::NoSignature),
        ("lowercase", b"proxy TCP4".to_vec(), Invalid::NoSignature),
        ("POST", b"POST / HTTP/1.1".to_vec(), Invalid::NoSignature),
        (
            "PROXY without space",
            b"PROXYTCP4".to_vec(),
            Invalid::NoSignature,
        ),
        (
            "v2 signature broken",
            v2("")[..11].iter().copied().chain([b'X']).collect(),
            Invalid::NoSignature,
        ),
        (
            "v1 bad protocol",
            b"PROXY TCP5 ".to_vec(),
            syntax("unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)"),
        ),
        (
            "v1 bad char",
            b"PROXY TCP4 1.2.3.x".to_vec(),
            syntax("unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)"),
        ),
        (
            "v1 CR inside",
            b"PROXY TCP4 1.2.3.4\r 5".to_vec(),
            syntax("unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)"),
        ),
        (
            "v1 bare LF",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(),
            syntax("line ends in LF without CR"),
        ),
        (
            "v1 double space",
            b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n".to_vec(),
            syntax("expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces"),
        ),
        (
            "v1 missing port",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n".to_vec(),
            syntax("expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces"),
        ),
        (
            "v1 tcp4 with ipv6",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n".to_vec(),
            syntax("source is not an IPv4 address"),
        ),
        (
            "v1 tcp6 with ipv4",
            b"PROXY TCP6 ::1 5.6.7.8 1 2\r\n".to_vec(),
            syntax("destination is not an IPv6 address"),
        ),
        (
            "v1 ipv4 leading zero",
            b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
            syntax("source is not an IPv4 address"),
        ),
        (
            "v1 port 65536",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n".to_vec(),
            syntax("source port is not a number in 0..65535"),
        ),
        (
            "v1 port too long",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 000080\r\n".to_vec(),
            syntax("destination port is not a number in 0..65535"),
        ),
        (
            "v1 unknown protocol",
            b"PROXY TCP9 1 2 3 4\r\n".to_vec(),
            syntax("protocol is not TCP4, TCP6 or UNKNOWN"),
        ),
        (
            "v1 empty protocol",
            b"PROXY \r\n".to_vec(),
            syntax("expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces"),
        ),
        ("v1 no CRLF in 107 bytes", no_crlf, Invalid::V1TooLong),
        ("v1 CRLF at 108", crlf_at_108, Invalid::V1TooLong),
        ("v2 version 1", v2("11"), Invalid::V2Version(1)),
        ("v2 version 3", v2("3100 0000"), Invalid::V2Version(3)),
        ("v2 command 2", v2("22"), Invalid::V2Command(2)),
        ("v2 family 4", v2("2141"), Invalid::V2Family(0x41)),
        (
            "v2 inet unspec protocol",
            v2("2110"),
            Invalid::V2Family(0x10),
        ),
        (
            "v2 tcp4 short",
            v2("2111 0008 0a000001 0a000002"),
            Invalid::V2ShortAddresses {
                transport: Transport::Tcp4,
                got: 8,
                need: 12,
            },
        ),
        (
            "v2 tcp6 given ipv4 length",
            v2("2121 000c 0a000001 0a000002 0001 0002"),
            Invalid::V2ShortAddresses {
                transport: Transport::Tcp6,
                got: 12,
                need: 36,
            },
        ),
        (
            "v2 tlv overruns",
            v2("2111 0010 0a000001 0a000002 0001 0002 010005 6832"),
            Invalid::V2TlvOverrun {
                offset: 28,
                declared: 5,
                left: 1,
            },
        ),
        (
            "v2 tlv header cut",
            v2("2111 000e 0a000001 0a000002 0001 0002 0100"),
            Invalid::V2TlvOverrun {
                offset: 28,
                declared: 3,
                left: 2,
            },
        ),
        (
            "v2 crc32c length",
            v2("2111 0012 0a000001 0a000002 0001 0002 030003 000000"),
            Invalid::V2Crc32cLength(3),
        ),
    ];
    for (name, bytes, want) in cases {
        assert_eq!(decode(&bytes), Err(DecodeError::Invalid(want)), "{name}");
        // No prefix of an invalid input is accepted either.
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "{name}: prefix of {n} bytes");
        }
    }
    match decode(&bad_crc) {
        Err(DecodeError::Invalid(Invalid::V2Crc32cMismatch { carried, computed })) => {
            assert_eq!(carried ^ computed, 1)
        }
        other => panic!("bad crc: {other:?}"),
    }
}

#[test]
fn absence_is_told_apart_from_a_broken_header() {
    for (bytes, sig) in [
        (&b""[..], Signature::Undecided),
        (b"P", Signature::Undecided),
        (b"PROXY", Signature::Undecided),
        (b"PROXY ", Signature::V1),
        (b"PO", Signature::Absent),
        (b"PUT /", Signature::Absent),
        (b"\r\n\r\n", Signature::Undecided),
        (b"\r\n\r\nGET", Signature::Absent),
        (b"\r\n\r\n\0\r\nQUIT\n", Signature::V2),
        (b"GET", Signature::Absent),
    ] {
        assert_eq!(
            signature(bytes),
            sig,
            "{:?}",
            bytes.escape_ascii().to_string()
        );
        let absent = decode(bytes).err().is_some_and(|e| e.is_absent());
        assert_eq!(absent, sig == Signature::Absent);
    }
    assert!(!decode(b"PROXY TCP9").unwrap_err().is_absent());
}

#[test]
fn local_headers_round_trip() {
    for v in [Version::V1, Version::V2] {
        let e = encode_local(v);
        let (h, n) = decode(e.as_bytes()).unwrap();
        assert_eq!(n, e.as_bytes().len());
        assert_eq!(h.addresses, None);
        assert_eq!(
            h.command,
            if v == Version::V2 {
                Command::Local
            } else {
                Command::Proxy
            }
        );
    }
}

mod props;
