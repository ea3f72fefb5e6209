//! v1: the text line `PROXY TCP4|TCP6|UNKNOWN ...\r\n`, at most 107 bytes. Separate from v2:
//! nothing of the grammar is shared but the [`Header`] it yields, and it rejects a garbage
//! stream early (`v1_prefix_ok`) rather than after 107 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::error::invalid;
use super::error::{DecodeError, Invalid};
use super::header::{Command, Header, Transport};
use crate::proxy_protocol::{Destination, Source, Version, V1_MAX_LEN, V1_SIGNATURE};

pub(super) fn decode_v1(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
    let window = &buf[..buf.len().min(V1_MAX_LEN)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if !v1_prefix_ok(&window[V1_SIGNATURE.len()..]) {
            return invalid(Invalid::V1Syntax(
                "unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)",
            ));
        }
        return if buf.len() >= V1_MAX_LEN {
            invalid(Invalid::V1TooLong)
        } else {
            Err(DecodeError::Incomplete)
        };
    };
    if window[lf - 1] != b'\r' {
        return invalid(Invalid::V1Syntax("line ends in LF without CR"));
    }
    let header = parse_v1_line(&window[V1_SIGNATURE.len()..lf - 1])?;
    Ok((header, lf + 1))
}

const V1_PROTOCOLS: [&[u8]; 3] = [b"TCP4", b"TCP6", b"UNKNOWN"];

/// Whether bytes after `PROXY ` (no LF yet) can still become a valid line; lets a garbage
/// stream be rejected early instead of after 107 bytes.
fn v1_prefix_ok(rest: &[u8]) -> bool {
    let end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(rest.len());
    let protocol = &rest[..end];
    if end == rest.len() {
        return V1_PROTOCOLS.iter().any(|p| p.starts_with(protocol));
    }
    if protocol == b"UNKNOWN" {
        return true; // anything may follow UNKNOWN up to CRLF
    }
    if protocol != b"TCP4" && protocol != b"TCP6" {
        return false;
    }
    let fields = &rest[end..];
    let cr_ok = match fields.iter().position(|&b| b == b'\r') {
        Some(i) => i == fields.len() - 1,
        None => true,
    };
    cr_ok
        && fields.iter().filter(|&&b| b == b' ').count() <= 4
        && fields
            .iter()
            .all(|b| b" .:\r".contains(b) || b.is_ascii_hexdigit())
}

fn parse_v1_line(rest: &[u8]) -> Result<Header, DecodeError> {
    let unknown = Header {
        version: Version::V1,
        command: Command::Proxy,
        transport: Transport::Unspec,
        addresses: None,
        tlvs: Vec::new(),
    };
    if rest == b"UNKNOWN" || rest.starts_with(b"UNKNOWN ") {
        return Ok(unknown);
    }
    let syntax = |why| DecodeError::Invalid(Invalid::V1Syntax(why));
    let text = std::str::from_utf8(rest).map_err(|_| syntax("non-ASCII byte"))?;
    let fields: Vec<&str> = text.split(' ').collect();
    let [protocol, src, dst, sport, dport] = fields[..] else {
        return Err(syntax(
            "expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces",
        ));
    };
    let (transport, src, dst): (Transport, IpAddr, IpAddr) = match protocol {
        "TCP4" => (
            Transport::Tcp4,
            src.parse::<Ipv4Addr>()
                .map_err(|_| syntax("source is not an IPv4 address"))?
                .into(),
            dst.parse::<Ipv4Addr>()
                .map_err(|_| syntax("destination is not an IPv4 address"))?
                .into(),
        ),
        "TCP6" => (
            Transport::Tcp6,
            src.parse::<Ipv6Addr>()
                .map_err(|_| syntax("source is not an IPv6 address"))?
                .into(),
            dst.parse::<Ipv6Addr>()
                .map_err(|_| syntax("destination is not an IPv6 address"))?
                .into(),
        ),
        _ => return Err(syntax("protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let port = |s: &str, what| {
        if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(syntax(what));
        }
        s.parse::<u16>().map_err(|_| syntax(what))
    };
    let sport = port(sport, "source port is not a number in 0..65535")?;
    let dport = port(dport, "destination port is not a number in 0..65535")?;
    Ok(Header {
        transport,
        addresses: Some((
            Source(SocketAddr::new(src, sport)),
            Destination(SocketAddr::new(dst, dport)),
        )),
        ..unknown
    })
}
