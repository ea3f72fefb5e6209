//! The PROXY headers HAProxy 2.6 writes (`send-proxy`, `send-proxy-v2`), captured live and
//! compared with tests/fixtures/haproxy-2.6-proxy-headers.txt and with our encoder and decoder.
//! `OUROBOROS_WRITE_FIXTURES=1` rewrites the fixture from the live capture.

use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};

use ouroboros::proxy_protocol::decode::decode;
use ouroboros::proxy_protocol::{encode_tcp, Destination, Source, Version};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/haproxy-2.6-proxy-headers.txt"
);

/// (case, source, destination, proxy-v2-options): HAProxy is told to use these addresses.
const CASES: &[(&str, &str, &str, &str)] = &[
    ("ipv4", "192.0.2.10:51234", "203.0.113.7:443", "-"),
    (
        "ipv6",
        "[2001:db8::1]:51234",
        "[2001:db8:ffff:1:2:3:4:5]:8443",
        "-",
    ),
    ("ports_0_65535", "10.0.0.1:0", "10.255.255.254:65535", "-"),
    (
        "mapped",
        "[::ffff:192.0.2.10]:51234",
        "[::ffff:203.0.113.7]:80",
        "-",
    ),
    ("mixed_v4_v6", "192.0.2.10:51234", "[2001:db8::7]:443", "-"),
    ("mixed_v6_v4", "[2001:db8::1]:51234", "203.0.113.7:443", "-"),
    (
        "longest",
        "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535",
        "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
        "-",
    ),
    (
        "tlvs",
        "192.0.2.10:51234",
        "203.0.113.7:443",
        "crc32c,unique-id",
    ),
];

struct Capture {
    case: String,
    version: &'static str,
    src: SocketAddr,
    dst: SocketAddr,
    options: String,
    hex: String,
}

impl Capture {
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.case, self.version, self.src, self.dst, self.options, self.hex
        )
    }
}

fn converter(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("ipv4({v4})"),
        IpAddr::V6(v6) => format!("ipv6({v6})"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One HAProxy with a frontend/backend pair per (case, version); each backend server is a
/// listener of ours that records what arrives before the client's marker byte.
fn capture_live() -> Vec<Capture> {
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let mut jobs = Vec::new();
    // Frontend ports stay bound until every backend listener has its port, so none collide.
    let mut held = Vec::new();
    let mut cfg = String::from(
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n",
    );
    for (version, keyword) in [("v1", "send-proxy"), ("v2", "send-proxy-v2")] {
        for &(case, src, dst, options) in CASES {
            if version == "v1" && options != "-" {
                continue;
            }
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let backend = TcpListener::bind((lo, 0)).unwrap();
            let hold = TcpListener::bind((lo, 0)).unwrap();
            let front = hold.local_addr().unwrap();
            held.push(hold);
            let extra = if options == "-" {
                String::new()
            } else {
                format!(" proxy-v2-options {options}")
            };
            cfg.push_str(&format!(
                "frontend f_{case}_{version}\n  bind {front}\n\
                 \x20 tcp-request connection set-src {}\n\
                 \x20 tcp-request connection set-src-port int({})\n\
                 \x20 tcp-request connection set-dst {}\n\
                 \x20 tcp-request connection set-dst-port int({})\n\
                 \x20 unique-id-format req-7f3a\n\
                 \x20 default_backend b_{case}_{version}\n\
                 backend b_{case}_{version}\n  server s {}{keyword}{extra}\n",
                converter(src.ip()),
                src.port(),
                converter(dst.ip()),
                dst.port(),
                format_args!("{} ", backend.local_addr().unwrap()),
            ));
            jobs.push((case, version, src, dst, options, front, backend));
        }
    }
    let fronts: Vec<SocketAddr> = jobs.iter().map(|j| j.5).collect();
    drop(held);
    let _haproxy = support::Haproxy::with_config(&cfg, &fronts);
    jobs.into_iter()
        .map(|(case, version, src, dst, options, front, backend)| {
            let mut client = support::connect_with_deadline(front, support::DEADLINE);
            client.write_all(b"X").unwrap();
            // The readiness probe connections reach the backend too, as empty connections:
            // take the one that carries the marker.
            let bytes = loop {
                let (mut conn, _) = backend.accept().unwrap();
                conn.set_read_timeout(Some(support::DEADLINE)).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                while !got.ends_with(b"X") {
                    match conn.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        // A probe connection HAProxy aborts because its client already left.
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                        Err(e) => panic!("{case} {version}: reading the backend side: {e}"),
                    }
                }
                if got.ends_with(b"X") {
                    got.pop();
                    break got;
                }
            };
            Capture {
                case: case.to_string(),
                version,
                src,
                dst,
                options: options.to_string(),
                hex: hex(&bytes),
            }
        })
        .collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn haproxy_writes_the_fixture_bytes_and_ours_match() {
    let live = capture_live();
    assert_eq!(live.len(), 15);
    let text = std::fs::read_to_string(FIXTURE).unwrap();
    let comments: String = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let fixture: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let live_lines: Vec<String> = live.iter().map(Capture::line).collect();
    if std::env::var_os("OUROBOROS_WRITE_FIXTURES").is_some() {
        std::fs::write(FIXTURE, format!("{comments}{}\n", live_lines.join("\n"))).unwrap();
    } else {
        assert_eq!(
            fixture, live_lines,
            "the live haproxy no longer writes the fixture's bytes; inspect the difference, then \
             regenerate with OUROBOROS_WRITE_FIXTURES=1"
        );
    }

    for c in &live {
        let bytes = unhex(&c.hex);
        let version = if c.version == "v1" {
            Version::V1
        } else {
            Version::V2
        };
        // Our decoder reads every header HAProxy writes, CRC32C included.
        let (h, n) = decode(&bytes).unwrap_or_else(|e| panic!("{} {}: {e}", c.case, c.version));
        assert_eq!(n, bytes.len());
        assert_eq!(h.version, version);
        let ours = encode_tcp(version, Source(c.src), Destination(c.dst));
        match c.case.as_str() {
            "ipv4" | "ipv6" | "ports_0_65535" | "longest" => {
                assert_eq!(hex(ours.as_bytes()), c.hex, "{} {}", c.case, c.version);
                assert_eq!(h.addresses, Some((Source(c.src), Destination(c.dst))));
            }
            "tlvs" => {
                assert_eq!(h.addresses, Some((Source(c.src), Destination(c.dst))));
                let names: Vec<_> = h.tlvs.iter().map(|t| t.name()).collect();
                assert_eq!(names, [Some("CRC32C"), Some("UNIQUE_ID")]);
                assert_eq!(h.tlvs[1].value, b"req-7f3a");
                // Without the TLVs, the address part is byte for byte ours.
                let ours = ours.as_bytes();
                assert_eq!(&bytes[..13], &ours[..13]);
                assert_eq!(&bytes[16..28], &ours[16..28]);
            }
            // Deliberate differences (see proxy_protocol tests): HAProxy writes mapped addresses
            // as TCP6 and maps a mixed pair into IPv6; we write IPv4 and UNKNOWN/UNSPEC.
            "mapped" => {
                assert_ne!(hex(ours.as_bytes()), c.hex);
                assert_eq!(h.addresses, Some((Source(c.src), Destination(c.dst))));
            }
            _ => {
                assert!(c.case.starts_with("mixed"), "{}", c.case);
                let (o, _) = decode(ours.as_bytes()).unwrap();
                assert_eq!(o.addresses, None, "{}", c.case);
            }
        }
    }
}
