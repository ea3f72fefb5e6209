//! Property tests: encode then decode, and arbitrary (mostly signature-seeded) input never
//! panics, never reads past the header, and keeps `Incomplete` and `Invalid` final.

use super::*;
use proptest::prelude::*;

fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(v4.into(), a.port())),
        _ => a,
    }
}

fn any_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(Ipv4Addr::from(ip).to_ipv6_mapped().into(), p)),
    ]
}

/// Total length a v2 header announces, once its fixed part is there.
fn v2_total(bytes: &[u8]) -> Option<usize> {
    (bytes.len() >= V2_FIXED_LEN)
        .then(|| V2_FIXED_LEN + u16::from_be_bytes([bytes[14], bytes[15]]) as usize)
}

/// Inputs that mostly start with a signature, so the decoder gets past it: random bytes
/// alone practically never do.
fn seeded_input() -> impl Strategy<Value = Vec<u8>> {
    // Bytes a v1 line is made of, plus a few that break it.
    let v1_byte = proptest::sample::select(b"TCP46UNKOW .:0123456789abcdef\r\n\0\xff".to_vec());
    let v1_words = proptest::collection::vec(
        prop_oneof![
            3 => proptest::sample::select(vec![
                &b"TCP4 "[..], b"TCP6 ", b"UNKNOWN", b"127.0.0.1 ", b"::1 ", b"80 ",
                b"65535 ", b"65536 ", b"\r\n", b" ",
            ])
            .prop_map(|w| w.to_vec()),
            1 => proptest::collection::vec(v1_byte, 0..8),
        ],
        0..12,
    )
    .prop_map(|words| {
        let mut b = V1_SIGNATURE.to_vec();
        b.extend(words.concat());
        b
    });
    // Well-formed v1 lines (any addresses, ports up to 65535), sometimes with one byte
    // replaced, and with a few bytes of data after them.
    let v1_lines = (
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<u16>(),
        prop::option::of((any::<proptest::sample::Index>(), any::<u8>())),
        proptest::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(v6, src, dst, sport, dport, mutation, tail)| {
            let line = if v6 {
                let (s, d) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
                format!("PROXY TCP6 {s} {d} {sport} {dport}\r\n")
            } else {
                let s = Ipv4Addr::new(src[0], src[1], src[2], src[3]);
                let d = Ipv4Addr::new(dst[0], dst[1], dst[2], dst[3]);
                format!("PROXY TCP4 {s} {d} {sport} {dport}\r\n")
            };
            let mut b = line.into_bytes();
            if let Some((at, byte)) = mutation {
                let at = V1_SIGNATURE.len() + at.index(b.len() - V1_SIGNATURE.len());
                b[at] = byte;
            }
            b.extend_from_slice(&tail);
            b
        });
    let v2 = (
        // Version/command: mostly valid (0x20, 0x21).
        prop_oneof![3 => 0x20u8..=0x21, 1 => any::<u8>()],
        prop_oneof![
            3 => proptest::sample::select(vec![0x00u8, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32]),
            1 => any::<u8>(),
        ],
        // Declared length: often the body's own, sometimes off.
        prop_oneof![2 => Just(None), 1 => (0u16..300).prop_map(Some)],
        proptest::collection::vec(any::<u8>(), 0..280),
        // Cut the result anywhere, so prefixes are exercised too.
        any::<proptest::sample::Index>(),
    )
        .prop_map(|(ver, fam, len, body, cut)| {
            let mut b = V2_SIGNATURE.to_vec();
            b.extend_from_slice(&[ver, fam]);
            let len = len.unwrap_or(body.len() as u16);
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&body);
            let keep = cut.index(b.len() + 1);
            if keep < b.len() / 4 {
                b.truncate(keep);
            }
            b
        });
    prop_oneof![
        2 => v1_words,
        2 => v1_lines,
        4 => v2,
        1 => proptest::collection::vec(any::<u8>(), 0..300),
    ]
}

proptest! {
    #[test]
    fn encode_then_decode(src in any_addr(), dst in any_addr(), v2 in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let v = if v2 { Version::V2 } else { Version::V1 };
        let e = encode_tcp(v, Source(src), Destination(dst));
        let mut bytes = e.as_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        let (h, n) = decode(&bytes).unwrap();
        prop_assert_eq!(n, e.as_bytes().len());
        prop_assert_eq!(h.version, v);
        prop_assert_eq!(h.command, Command::Proxy);
        let (s, d) = (canonical(src), canonical(dst));
        if s.is_ipv4() == d.is_ipv4() {
            prop_assert_eq!(h.addresses, Some((Source(s), Destination(d))));
            prop_assert_eq!(h.transport, if s.is_ipv4() { Transport::Tcp4 } else { Transport::Tcp6 });
        } else {
            prop_assert_eq!(h.addresses, None);
            prop_assert_eq!(h.transport, Transport::Unspec);
        }
        for k in 0..e.as_bytes().len() {
            prop_assert_eq!(decode(&bytes[..k]), Err(DecodeError::Incomplete));
        }
    }

    #[test]
    fn never_panics_and_never_overreads(bytes in seeded_input()) {
        let result = decode(&bytes);
        match &result {
            Ok((h, n)) => {
                prop_assert!(*n <= bytes.len());
                match h.version {
                    Version::V1 => {
                        prop_assert!(*n <= V1_MAX_LEN);
                        prop_assert_eq!(&bytes[n - 2..*n], b"\r\n");
                    }
                    Version::V2 => prop_assert_eq!(*n, v2_total(&bytes).unwrap()),
                }
                // The header alone decodes the same: what follows it is not looked at.
                prop_assert_eq!(decode(&bytes[..*n]), result.clone());
                // A decode is final: every shorter prefix was only `Incomplete`.
                for k in 0..*n {
                    prop_assert_eq!(decode(&bytes[..k]), Err(DecodeError::Incomplete));
                }
            }
            // `Incomplete` only for a valid prefix that is still shorter than a header
            // can be: a reader with `MAX_HEADER_LEN` bytes always gets a decision.
            Err(DecodeError::Incomplete) => {
                prop_assert!(bytes.len() < MAX_HEADER_LEN);
                match signature(&bytes) {
                    Signature::V1 => prop_assert!(bytes.len() < V1_MAX_LEN),
                    Signature::V2 => {
                        if let Some(total) = v2_total(&bytes) {
                            prop_assert!(bytes.len() < total, "{} >= {}", bytes.len(), total);
                        }
                    }
                    Signature::Undecided => prop_assert!(bytes.len() < V2_SIGNATURE.len()),
                    Signature::Absent => prop_assert!(false, "Incomplete without a signature"),
                }
            }
            Err(e @ DecodeError::Invalid(why)) => {
                // `is_absent` means exactly "no signature at all".
                prop_assert_eq!(e.is_absent(), signature(&bytes) == Signature::Absent);
                prop_assert_eq!(e.is_absent(), *why == Invalid::NoSignature);
                if *why == Invalid::V1TooLong {
                    prop_assert!(bytes.len() >= V1_MAX_LEN);
                }
                prop_assert!(!e.to_string().is_empty());
            }
        }
        // `Invalid` is final: more bytes never turn it into a header or `Incomplete`.
        for k in 0..=bytes.len() {
            if let Err(DecodeError::Invalid(why)) = decode(&bytes[..k]) {
                prop_assert!(
                    matches!(result, Err(DecodeError::Invalid(_))),
                    "prefix of {} bytes was invalid ({}), whole input gave {:?}",
                    k, why, result
                );
                break;
            }
        }
    }

    #[test]
    fn v2_random_bodies_never_panic(fam in any::<u8>(), cmd in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = V2_SIGNATURE.to_vec();
        bytes.extend_from_slice(&[cmd, fam]);
        bytes.extend_from_slice(&(body.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&body);
        if let Ok((_, n)) = decode(&bytes) {
            prop_assert_eq!(n, bytes.len());
        }
    }
}
