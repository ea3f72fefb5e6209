//! The property checks behind the fuzz targets (`fuzz/fuzz_targets/`), shared with
//! `tests/it/fuzz_corpus.rs`, which runs them over the committed seed corpora on stable so every
//! `cargo test` exercises the seeds without libFuzzer. Each check takes arbitrary bytes, goes
//! through the public API only, and panics when a property does not hold. PURE: no I/O.
//!
//! Not part of the product's interface (hidden from the docs); CONTRIBUTING.md says how to fuzz.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use crate::controller::hostnames::{self, kinds::Kind, kinds::OptIns, model::Filters};
use crate::dns::answer::{Answer, ProxyAddrs};
use crate::dns::{
    coredns_import, corefile, etc_hosts, ProxyFqdn, BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER,
};
use crate::hostname::{HostPolicy, Hostname};
use crate::manifests::documents::Format;
use crate::manifests::Manifests;
use crate::proxy_protocol::decode::error::{DecodeError, Invalid};
use crate::proxy_protocol::decode::header::{Command, Header, Transport};
use crate::proxy_protocol::decode::tlv::PP2_TYPE_CRC32C;
use crate::proxy_protocol::decode::{decode, signature, Signature, MAX_HEADER_LEN};
use crate::proxy_protocol::{
    encode_local, encode_tcp, Destination, Source, Version, V1_MAX_LEN, V1_SIGNATURE, V2_FIXED_LEN,
    V2_SIGNATURE,
};

/// A fuzz target: its name (the file in `fuzz/fuzz_targets/` and the seed directory
/// `fuzz/corpus/<name>/`) and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    ("proxy_header", proxy_header),
    ("corefile", corefile_edit),
    ("etc_hosts", etc_hosts_edit),
    ("manifest", manifest),
];

/// Total length a v2 header announces, once its fixed part is there.
fn v2_total(bytes: &[u8]) -> Option<usize> {
    (bytes.len() >= V2_FIXED_LEN)
        .then(|| V2_FIXED_LEN + usize::from(u16::from_be_bytes([bytes[14], bytes[15]])))
}

/// IPv4-mapped IPv6 addresses as IPv4, the way the encoder writes them.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(v4.into(), a.port())),
        IpAddr::V4(_) => a,
    }
}

/// Size of the v2 address block for a transport (the specification's table).
fn v2_address_len(t: Transport) -> usize {
    match t {
        Transport::Unspec => 0,
        Transport::Tcp4 | Transport::Udp4 => 12,
        Transport::Tcp6 | Transport::Udp6 => 36,
        Transport::UnixStream | Transport::UnixDgram => 216,
    }
}

/// The PROXY-protocol decoder on arbitrary bytes:
/// - a header never takes more bytes than it was given, is decided exactly when its last byte
///   arrives (every shorter prefix is `Incomplete`) and does not depend on the bytes after it;
/// - its length matches its own framing (v1: CRLF within 107 bytes; v2: the length field, which
///   the address block and TLVs fill exactly);
/// - `Incomplete` only while a header could still be shorter than what was given, and never for
///   `MAX_HEADER_LEN` bytes; `Invalid` is final, and `is_absent` means exactly "no signature";
/// - a decoded header re-encodes to bytes that decode to the same header (addresses in the
///   encoder's canonical form), byte for byte the same for a plain v2 TCP header.
pub fn proxy_header(data: &[u8]) {
    let result = decode(data);
    // The first prefix that decode decides on (anything but `Incomplete`).
    let first_decided =
        (0..=data.len()).find(|&k| decode(&data[..k]) != Err(DecodeError::Incomplete));
    match &result {
        Ok((header, n)) => {
            let n = *n;
            assert!(n > 0 && n <= data.len(), "took {n} of {} bytes", data.len());
            assert_eq!(first_decided, Some(n), "decided before its last byte");
            assert_eq!(decode(&data[..n]), result, "depends on the bytes after it");
            check_header_framing(header, &data[..n]);
            check_reencode(header, &data[..n]);
            assert!(!header.to_string().is_empty());
        }
        Err(DecodeError::Incomplete) => {
            assert_eq!(first_decided, None);
            assert!(data.len() < MAX_HEADER_LEN);
            match signature(data) {
                Signature::V1 => assert!(data.len() < V1_MAX_LEN),
                Signature::V2 => {
                    if let Some(total) = v2_total(data) {
                        assert!(data.len() < total, "{} >= {total}", data.len());
                    }
                }
                Signature::Undecided => assert!(data.len() < V2_SIGNATURE.len()),
                Signature::Absent => panic!("Incomplete without a signature"),
            }
        }
        Err(e @ DecodeError::Invalid(why)) => {
            assert_eq!(e.is_absent(), signature(data) == Signature::Absent);
            assert_eq!(e.is_absent(), *why == Invalid::NoSignature);
            if *why == Invalid::V1TooLong {
                assert!(data.len() >= V1_MAX_LEN);
            }
            let k = first_decided.expect("the whole input is decided");
            assert!(
                matches!(decode(&data[..k]), Err(DecodeError::Invalid(_))),
                "a prefix of {k} bytes decoded as a header, the whole input is invalid ({why})"
            );
            assert!(!e.to_string().is_empty());
        }
    }
}

/// The header's length agrees with its own framing; its fields agree with each other.
fn check_header_framing(h: &Header, bytes: &[u8]) {
    let n = bytes.len();
    match h.version {
        Version::V1 => {
            assert!(bytes.starts_with(V1_SIGNATURE));
            assert!(n <= V1_MAX_LEN);
            assert_eq!(&bytes[n - 2..], b"\r\n");
            assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
            assert_eq!(h.command, Command::Proxy);
            assert!(h.tlvs.is_empty());
            assert!(matches!(
                h.transport,
                Transport::Unspec | Transport::Tcp4 | Transport::Tcp6
            ));
        }
        Version::V2 => {
            assert!(bytes.starts_with(&V2_SIGNATURE));
            assert_eq!(Some(n), v2_total(bytes));
            let tlv_bytes: usize = h.tlvs.iter().map(|t| 3 + t.value.len()).sum();
            let addresses = v2_address_len(h.transport);
            // A LOCAL header's TLVs are kept only when they fill it exactly.
            if h.command == Command::Proxy || !h.tlvs.is_empty() {
                assert_eq!(V2_FIXED_LEN + addresses + tlv_bytes, n, "{h:?}");
            }
            for t in &h.tlvs {
                if t.kind == PP2_TYPE_CRC32C && h.command == Command::Proxy {
                    assert_eq!(t.value.len(), 4);
                }
                let _ = (t.name(), t.ssl());
            }
        }
    }
    let addressed = h.command == Command::Proxy
        && matches!(
            h.transport,
            Transport::Tcp4 | Transport::Tcp6 | Transport::Udp4 | Transport::Udp6
        );
    assert_eq!(h.addresses.is_some(), addressed, "{h:?}");
    if let Some((s, d)) = h.addresses {
        let v4 = matches!(h.transport, Transport::Tcp4 | Transport::Udp4);
        assert_eq!((s.0.is_ipv4(), d.0.is_ipv4()), (v4, v4), "{h:?}");
    }
}

/// What the encoder can write for a decoded header decodes back to it.
fn check_reencode(h: &Header, bytes: &[u8]) {
    let again = match (h.command, h.addresses, h.transport) {
        (Command::Proxy, Some((s, d)), Transport::Tcp4 | Transport::Tcp6) => {
            encode_tcp(h.version, s, d)
        }
        (Command::Local, _, _) | (Command::Proxy, None, Transport::Unspec)
            if h.command == Command::Local || h.version == Version::V1 =>
        {
            encode_local(h.version)
        }
        // UDP, AF_UNIX and a v2 PROXY UNSPEC header: nothing the encoder writes.
        _ => return,
    };
    let (h2, n2) = decode(again.as_bytes()).expect("the encoder's output decodes");
    assert_eq!(n2, again.as_bytes().len());
    assert_eq!((h2.version, h2.command), (h.version, h.command));
    assert!(h2.tlvs.is_empty());
    match h.addresses {
        Some((s, d)) => {
            let (s, d) = (canonical(s.0), canonical(d.0));
            if s.is_ipv4() == d.is_ipv4() {
                assert_eq!(h2.addresses, Some((Source(s), Destination(d))));
                let t = if s.is_ipv4() {
                    Transport::Tcp4
                } else {
                    Transport::Tcp6
                };
                assert_eq!(h2.transport, t);
                let plain = s == h.addresses.unwrap().0 .0 && d == h.addresses.unwrap().1 .0;
                if h.version == Version::V2 && h.tlvs.is_empty() && plain {
                    assert_eq!(
                        again.as_bytes(),
                        bytes,
                        "a plain v2 header re-encodes as itself"
                    );
                }
            } else {
                assert_eq!((h2.addresses, h2.transport), (None, Transport::Unspec));
            }
            // Encoding is a fixed point after one round.
            if let Some((s2, d2)) = h2.addresses {
                assert_eq!(encode_tcp(h2.version, s2, d2).as_bytes(), again.as_bytes());
            }
        }
        None => assert_eq!((h2.addresses, h2.transport), (None, Transport::Unspec)),
    }
}

/// Whether a line of `text` is one of our markers (the editors' own test: the trimmed line).
fn has_marker_line(text: &str) -> bool {
    text.split('\n')
        .any(|l| l.trim() == BEGIN_MARKER || l.trim() == END_MARKER)
}

/// The trimmed lines between our markers.
fn block_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.split('\n') {
        let t = line.trim();
        if t == END_MARKER {
            inside = false;
        }
        if inside {
            out.push(t);
        }
        if t == BEGIN_MARKER {
            inside = true;
        }
    }
    out
}

fn line_count(text: &str) -> usize {
    text.split('\n').count()
}

/// The host set and answer an editor input is checked with, picked by its length so a seed
/// stays a plain file: a few exact names (one under a zone the seed Corefiles give their own
/// server block, so shadowing is found) plus a wildcard, or a single name.
fn editor_params(len: usize) -> (BTreeSet<Hostname>, Answer) {
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    let names: &[&str] = if len % 2 == 0 {
        &[
            "app.example.com",
            "*.apps.example.org",
            "www.corp.example.com",
            "api.consul",
        ]
    } else {
        &["shop.example.com"]
    };
    let hosts = names
        .iter()
        .map(|n| policy.check(n).expect("a valid fuzzing host name"))
        .collect();
    let ips = |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|s| s.parse().unwrap()).collect() };
    let answer = match (len / 2) % 3 {
        0 => Answer::Template(ProxyAddrs::new(&ips(&["10.96.0.5"])).unwrap()),
        1 => Answer::Template(ProxyAddrs::new(&ips(&["10.96.0.5", "fd00::5"])).unwrap()),
        _ => Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap()),
    };
    (hosts, answer)
}

/// The Corefile editor on arbitrary text (bytes read as UTF-8, invalid sequences replaced):
/// an error names a line of the input; otherwise the edit reports `changed` truly, holds exactly
/// the rendered rules between one pair of markers, applying it again changes nothing, and removing
/// the block gives what removing it from the input gives: the input itself, byte for byte, when
/// the input had no block.
/// Removing the block from an editor's output gives what removing it from the input gives, and,
/// when the input had no block, the input itself, byte for byte.
fn removal_restores(input: &str, removed: &str, stripped: &str, stripped_changed: bool) {
    assert_eq!(removed, stripped, "apply then remove differs from remove");
    if !has_marker_line(input) {
        assert_eq!(removed, input, "apply then remove changed the user's text");
        assert!(!stripped_changed);
    }
}

/// An editor's parse error names a line of the input and says why.
fn error_names_a_line(input: &str, line: usize, reason: &str, shown: &dyn std::fmt::Display) {
    assert!(
        (1..=line_count(input)).contains(&line),
        "error line {line} of {}: {shown}",
        line_count(input)
    );
    assert!(!reason.is_empty());
}

pub fn corefile_edit(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    let input = input.as_ref();
    let (hosts, answer) = editor_params(input.len());
    let out = match corefile::splice(input, &hosts, &answer) {
        Ok(out) => out,
        Err(e) => return error_names_a_line(input, e.line, &e.reason, &e),
    };
    assert_eq!(out.changed, out.text != input);
    let want: Vec<String> = coredns_import::render(&hosts, &answer)
        .lines()
        .map(str::trim)
        .filter(|l| *l != BEGIN_MARKER && *l != END_MARKER)
        .map(str::to_string)
        .collect();
    assert_eq!(block_lines(&out.text), want, "{:?}", out.text);
    assert_eq!(
        out.text
            .split('\n')
            .filter(|l| l.trim() == BEGIN_MARKER)
            .count(),
        1
    );

    let twice = corefile::splice(&out.text, &hosts, &answer)
        .unwrap_or_else(|e| panic!("applying to our own output: {e}\n{:?}", out.text));
    assert_eq!(twice.text, out.text, "applying twice differs from once");
    assert!(!twice.changed);
    let shape = |f: &corefile::Findings| {
        let shadows: Vec<(String, String)> = f
            .shadowing
            .iter()
            .map(|s| (s.host.clone(), s.block.clone()))
            .collect();
        (f.has_reload, f.imports_custom_override, shadows)
    };
    assert_eq!(shape(&twice.findings), shape(&out.findings));

    let removed = corefile::remove(&out.text)
        .unwrap_or_else(|e| panic!("removing from our own output: {e}\n{:?}", out.text));
    let stripped = corefile::remove(input).expect("remove fails where splice succeeded");
    removal_restores(input, &removed.text, &stripped.text, stripped.changed);
    let again = corefile::remove(&stripped.text).expect("removing twice");
    assert_eq!(again.text, stripped.text);
    assert!(!again.changed);
}

/// The hosts-file editor on arbitrary text: the same properties as [`corefile_edit`], plus the
/// block holding one `IP host` line per exact name and (sorted, deduplicated) IP, wildcards
/// skipped and reported.
pub fn etc_hosts_edit(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    let input = input.as_ref();
    let (hosts, _) = editor_params(input.len());
    let ips: Vec<IpAddr> = if input.len() % 3 == 0 {
        vec!["fd00::5".parse().unwrap(), "10.43.0.5".parse().unwrap()]
    } else {
        vec!["10.43.0.5".parse().unwrap()]
    };
    let out = match etc_hosts::splice(input, &hosts, &ips) {
        Ok(out) => out,
        Err(e) => return error_names_a_line(input, e.line, &e.reason, &e),
    };
    assert_eq!(out.changed, out.text != input);
    let exact: Vec<&Hostname> = hosts.iter().filter(|h| !h.is_wildcard()).collect();
    let mut sorted = ips.clone();
    sorted.sort();
    let want: Vec<String> = exact
        .iter()
        .flat_map(|h| sorted.iter().map(move |ip| format!("{ip} {h}")))
        .collect();
    assert_eq!(block_lines(&out.text), want, "{:?}", out.text);
    assert_eq!(out.skipped_wildcards.len(), hosts.len() - exact.len());

    let twice = etc_hosts::splice(&out.text, &hosts, &ips)
        .unwrap_or_else(|e| panic!("applying to our own output: {e}\n{:?}", out.text));
    assert_eq!(twice.text, out.text, "applying twice differs from once");
    assert!(!twice.changed);

    let none = BTreeSet::new();
    let removed = etc_hosts::splice(&out.text, &none, &[])
        .unwrap_or_else(|e| panic!("removing from our own output: {e}\n{:?}", out.text));
    let stripped =
        etc_hosts::splice(input, &none, &[]).expect("remove fails where splice succeeded");
    removal_restores(input, &removed.text, &stripped.text, stripped.changed);
}

/// Every object kind's count and the skipped objects', for comparing two reads.
fn counts(m: &Manifests) -> Vec<usize> {
    Kind::ALL
        .into_iter()
        .map(|k| m.count(k))
        .chain([m.skipped])
        .collect()
}

/// The manifest reader (`Manifests::add_text`, no file system) on arbitrary text as YAML and as
/// JSON: reading is deterministic (the same text added twice gives twice the objects, or the same
/// error), a single JSON document reads the same as YAML (YAML is a superset of JSON), and the
/// host set computed from what was read is consistent (each host has an origin, and passes the
/// policy unchanged).
pub fn manifest(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let mut read = [None, None];
    for (i, format) in [Format::Yaml, Format::Json].into_iter().enumerate() {
        let mut once = Manifests::default();
        let first = once.add_text(text, format);
        let mut twice = Manifests::default();
        let a = twice.add_text(text, format);
        let b = twice.add_text(text, format);
        match (&first, &a, &b) {
            (Ok(()), Ok(()), Ok(())) => {
                assert_eq!(
                    counts(&twice),
                    counts(&once).iter().map(|c| c * 2).collect::<Vec<_>>(),
                    "{format:?}"
                );
            }
            (Err(e1), Err(e2), _) => {
                assert_eq!(format!("{e1:#}"), format!("{e2:#}"));
                continue;
            }
            _ => panic!("{format:?}: the same text read differently: {first:?} {a:?} {b:?}"),
        }
        check_desired(&once);
        read[i] = Some(once);
    }
    // One JSON document (not a stream of several, which YAML does not take) reads the same as
    // YAML: same kinds, same counts.
    if let [yaml, Some(json)] = &read {
        if serde_json::from_str::<serde_json::Value>(text).is_ok() {
            let yaml = yaml
                .as_ref()
                .unwrap_or_else(|| panic!("a JSON document that is no YAML: {text:?}"));
            assert_eq!(counts(yaml), counts(json), "JSON and YAML reads differ");
        }
    }
}

fn check_desired(m: &Manifests) {
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    for every in [false, true] {
        let filters = Filters {
            opt_ins: if every {
                OptIns::EVERY
            } else {
                OptIns::default()
            },
            ..Filters::default()
        };
        let d = hostnames::desired(&m.sources(), &filters, &policy);
        assert!(
            d.origins.keys().eq(d.hosts.iter()),
            "origins and hosts differ"
        );
        for (host, objects) in &d.origins {
            assert!(!objects.is_empty(), "{host} has no origin");
            assert_eq!(policy.check(host.as_str()).as_ref(), Ok(host));
        }
    }
}
