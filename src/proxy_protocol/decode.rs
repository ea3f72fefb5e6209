//! PROXY header decoder (v1 text and v2 binary). PURE: works on the bytes received so far.
//!
//! `decode` is meant to be called again each time more bytes arrive: it answers `Incomplete`
//! for every prefix of a valid header (never giving up early), `Invalid` as soon as the bytes
//! cannot become a valid header, and the header plus the number of bytes it took otherwise.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{Destination, Source, Version, V2_SIGNATURE};

/// The v1 signature, including the space that follows `PROXY`.
pub const V1_SIGNATURE: &[u8; 6] = b"PROXY ";
/// Longest v1 line the specification allows, CRLF included.
pub const V1_MAX_LEN: usize = 107;
/// Fixed part of a v2 header: signature, version/command, family/protocol, length.
pub const V2_FIXED_LEN: usize = 16;
/// Longest v2 header: the length field is 16 bits.
pub const V2_MAX_LEN: usize = V2_FIXED_LEN + u16::MAX as usize;
/// A reader that buffers this many bytes always gets a decision from `decode`.
pub const MAX_HEADER_LEN: usize = V2_MAX_LEN;

/// v2 command; v1 headers are always `Proxy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// The connection was made by the proxy itself (health check): use the socket's addresses.
    Local,
    /// The connection is relayed on behalf of the client named in the header.
    Proxy,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Command::Local => "LOCAL",
            Command::Proxy => "PROXY",
        })
    }
}

/// Address family and transport protocol announced by the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// v1 `UNKNOWN` or v2 `AF_UNSPEC`: no addresses, the receiver uses the socket's own.
    Unspec,
    Tcp4,
    Tcp6,
    Udp4,
    Udp6,
    UnixStream,
    UnixDgram,
}

impl Transport {
    /// The name v1 uses (`TCP4`, `TCP6`, `UNKNOWN`); v2-only transports get a similar name.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Unspec => "UNKNOWN",
            Transport::Tcp4 => "TCP4",
            Transport::Tcp6 => "TCP6",
            Transport::Udp4 => "UDP4",
            Transport::Udp6 => "UDP6",
            Transport::UnixStream => "UNIX_STREAM",
            Transport::UnixDgram => "UNIX_DGRAM",
        }
    }

    /// From the v2 family/protocol byte; only the combinations the specification defines.
    fn from_v2(byte: u8) -> Option<Transport> {
        Some(match byte {
            0x00 => Transport::Unspec,
            0x11 => Transport::Tcp4,
            0x12 => Transport::Udp4,
            0x21 => Transport::Tcp6,
            0x22 => Transport::Udp6,
            0x31 => Transport::UnixStream,
            0x32 => Transport::UnixDgram,
            _ => return None,
        })
    }

    /// Size of the v2 address block for this family.
    fn v2_address_len(self) -> usize {
        match self {
            Transport::Unspec => 0,
            Transport::Tcp4 | Transport::Udp4 => 12,
            Transport::Tcp6 | Transport::Udp6 => 36,
            Transport::UnixStream | Transport::UnixDgram => 216,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A v2 type-length-value extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tlv {
    pub kind: u8,
    pub value: Vec<u8>,
}

pub const PP2_TYPE_ALPN: u8 = 0x01;
pub const PP2_TYPE_AUTHORITY: u8 = 0x02;
pub const PP2_TYPE_CRC32C: u8 = 0x03;
pub const PP2_TYPE_NOOP: u8 = 0x04;
pub const PP2_TYPE_UNIQUE_ID: u8 = 0x05;
pub const PP2_TYPE_SSL: u8 = 0x20;
pub const PP2_TYPE_NETNS: u8 = 0x30;

/// Name of a TLV type defined by the specification (SSL sub-types included), if it is one.
pub fn tlv_name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        PP2_TYPE_ALPN => "ALPN",
        PP2_TYPE_AUTHORITY => "AUTHORITY",
        PP2_TYPE_CRC32C => "CRC32C",
        PP2_TYPE_NOOP => "NOOP",
        PP2_TYPE_UNIQUE_ID => "UNIQUE_ID",
        PP2_TYPE_SSL => "SSL",
        0x21 => "SSL_VERSION",
        0x22 => "SSL_CN",
        0x23 => "SSL_CIPHER",
        0x24 => "SSL_SIG_ALG",
        0x25 => "SSL_KEY_ALG",
        PP2_TYPE_NETNS => "NETNS",
        _ => return None,
    })
}

impl Tlv {
    pub fn name(&self) -> Option<&'static str> {
        tlv_name(self.kind)
    }
}

/// A decoded header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: Version,
    pub command: Command,
    pub transport: Transport,
    /// Present for a PROXY command over IPv4/IPv6; absent for LOCAL, UNKNOWN/UNSPEC and AF_UNIX.
    pub addresses: Option<(Source, Destination)>,
    pub tlvs: Vec<Tlv>,
}

impl Header {
    pub fn source(&self) -> Option<Source> {
        self.addresses.map(|(s, _)| s)
    }

    pub fn destination(&self) -> Option<Destination> {
        self.addresses.map(|(_, d)| d)
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        write!(f, "{v} {} {}", self.command, self.transport)?;
        if let Some((s, d)) = self.addresses {
            write!(f, " {} -> {}", s.0, d.0)?;
        }
        Ok(())
    }
}

/// Why bytes are not a valid PROXY header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The first bytes match neither signature: the stream carries no PROXY header at all.
    #[error("no PROXY protocol signature (the stream does not start with \"PROXY \" or the v2 signature)")]
    NoSignature,
    #[error("v1 line has no CRLF within {V1_MAX_LEN} bytes")]
    V1TooLong,
    #[error("v1 line is malformed: {0}")]
    V1Syntax(&'static str),
    #[error("v2 version nibble is {0}, expected 2")]
    V2Version(u8),
    #[error("v2 command nibble is {0:#x}, expected 0 (LOCAL) or 1 (PROXY)")]
    V2Command(u8),
    #[error("v2 family/protocol byte {0:#04x} is not a combination the specification defines")]
    V2Family(u8),
    #[error("v2 address block is {got} bytes, {transport} addresses need {need}")]
    V2ShortAddresses {
        transport: Transport,
        got: usize,
        need: usize,
    },
    #[error(
        "v2 TLV at offset {offset} overruns the header (declares {declared} bytes, {left} left)"
    )]
    V2TlvOverrun {
        offset: usize,
        declared: usize,
        left: usize,
    },
    #[error("v2 CRC32C TLV is {0} bytes long, expected 4")]
    V2Crc32cLength(usize),
    #[error("v2 CRC32C mismatch: header carries {carried:#010x}, computed {computed:#010x}")]
    V2Crc32cMismatch { carried: u32, computed: u32 },
}

/// Outcome of a decode attempt that produced no header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes so far are a valid prefix of a header: read more and call again.
    #[error("incomplete PROXY header: more bytes needed")]
    Incomplete,
    #[error("invalid PROXY header: {0}")]
    Invalid(Invalid),
}

impl DecodeError {
    /// True when the stream starts with something that is no PROXY header at all (not a broken
    /// one): the `optional` mode then treats the bytes as the application's own.
    pub fn is_absent(&self) -> bool {
        matches!(self, DecodeError::Invalid(Invalid::NoSignature))
    }
}

fn invalid<T>(why: Invalid) -> Result<T, DecodeError> {
    Err(DecodeError::Invalid(why))
}

/// What the first bytes of a stream announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signature {
    V1,
    V2,
    /// Too few bytes to tell (a prefix of a signature, possibly empty).
    Undecided,
    /// Cannot start either signature.
    Absent,
}

/// Looks only at the signature bytes.
pub fn signature(buf: &[u8]) -> Signature {
    let matches = |sig: &[u8]| {
        let n = buf.len().min(sig.len());
        buf[..n] == sig[..n]
    };
    let (v1, v2) = (matches(V1_SIGNATURE), matches(&V2_SIGNATURE));
    if v1 && buf.len() >= V1_SIGNATURE.len() {
        Signature::V1
    } else if v2 && buf.len() >= V2_SIGNATURE.len() {
        Signature::V2
    } else if v1 || v2 {
        Signature::Undecided
    } else {
        Signature::Absent
    }
}

/// Decodes the header at the start of `buf`; on success returns it and how many bytes it took
/// (the application's data starts right after).
pub fn decode(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
    match signature(buf) {
        Signature::V1 => decode_v1(buf),
        Signature::V2 => decode_v2(buf),
        Signature::Undecided => Err(DecodeError::Incomplete),
        Signature::Absent => invalid(Invalid::NoSignature),
    }
}

fn decode_v1(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
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

fn decode_v2(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
    // Check the fixed bytes as soon as they arrive.
    let command = match buf.get(12) {
        None => return Err(DecodeError::Incomplete),
        Some(&b) if b >> 4 != 2 => return invalid(Invalid::V2Version(b >> 4)),
        Some(&b) => match b & 0x0f {
            0 => Command::Local,
            1 => Command::Proxy,
            c => return invalid(Invalid::V2Command(c)),
        },
    };
    let Some(&family) = buf.get(13) else {
        return Err(DecodeError::Incomplete);
    };
    let transport = Transport::from_v2(family);
    if transport.is_none() && command == Command::Proxy {
        return invalid(Invalid::V2Family(family));
    }
    if buf.len() < V2_FIXED_LEN {
        return Err(DecodeError::Incomplete);
    }
    let total = V2_FIXED_LEN + u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if buf.len() < total {
        return Err(DecodeError::Incomplete);
    }
    let header = &buf[..total];
    let block = &header[V2_FIXED_LEN..];
    let mut out = Header {
        version: Version::V2,
        command,
        transport: transport.unwrap_or(Transport::Unspec),
        addresses: None,
        tlvs: Vec::new(),
    };
    let need = out.transport.v2_address_len();
    if command == Command::Local {
        // The receiver must ignore a LOCAL header's address block; TLVs are kept when well formed.
        if block.len() >= need {
            out.tlvs = parse_tlvs(header, need).unwrap_or_default();
        }
        return Ok((out, total));
    }
    if block.len() < need {
        return invalid(Invalid::V2ShortAddresses {
            transport: out.transport,
            got: block.len(),
            need,
        });
    }
    let port = |at: usize| u16::from_be_bytes([block[at], block[at + 1]]);
    out.addresses = match out.transport {
        Transport::Tcp4 | Transport::Udp4 => {
            let ip = |at: usize| IpAddr::from(<[u8; 4]>::try_from(&block[at..at + 4]).unwrap());
            Some((
                Source(SocketAddr::new(ip(0), port(8))),
                Destination(SocketAddr::new(ip(4), port(10))),
            ))
        }
        Transport::Tcp6 | Transport::Udp6 => {
            let ip = |at: usize| IpAddr::from(<[u8; 16]>::try_from(&block[at..at + 16]).unwrap());
            Some((
                Source(SocketAddr::new(ip(0), port(32))),
                Destination(SocketAddr::new(ip(16), port(34))),
            ))
        }
        // AF_UNIX paths are not socket addresses; reported without addresses.
        Transport::Unspec | Transport::UnixStream | Transport::UnixDgram => None,
    };
    out.tlvs = parse_tlvs(header, need)?;
    Ok((out, total))
}

/// Splits `bytes[from..]` into TLVs, each with the offset of its value.
fn split_tlvs(bytes: &[u8], from: usize) -> Result<Vec<(usize, Tlv)>, Invalid> {
    let mut tlvs = Vec::new();
    let mut at = from;
    while at < bytes.len() {
        let left = bytes.len() - at;
        if left < 3 {
            return Err(Invalid::V2TlvOverrun {
                offset: at,
                declared: 3,
                left,
            });
        }
        let kind = bytes[at];
        let len = u16::from_be_bytes([bytes[at + 1], bytes[at + 2]]) as usize;
        if len > left - 3 {
            return Err(Invalid::V2TlvOverrun {
                offset: at,
                declared: len,
                left: left - 3,
            });
        }
        let value = bytes[at + 3..at + 3 + len].to_vec();
        tlvs.push((at + 3, Tlv { kind, value }));
        at += 3 + len;
    }
    Ok(tlvs)
}

/// Parses the TLVs after the address block and verifies a CRC32C TLV if one is present.
fn parse_tlvs(header: &[u8], address_len: usize) -> Result<Vec<Tlv>, DecodeError> {
    let tlvs = split_tlvs(header, V2_FIXED_LEN + address_len).map_err(DecodeError::Invalid)?;
    for (c, tlv) in &tlvs {
        if tlv.kind != PP2_TYPE_CRC32C {
            continue;
        }
        let c = *c;
        if tlv.value.len() != 4 {
            return invalid(Invalid::V2Crc32cLength(tlv.value.len()));
        }
        let carried = u32::from_be_bytes(header[c..c + 4].try_into().unwrap());
        let computed =
            crc32c(
                header
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| if (c..c + 4).contains(&i) { 0 } else { b }),
            );
        if carried != computed {
            return invalid(Invalid::V2Crc32cMismatch { carried, computed });
        }
    }
    Ok(tlvs.into_iter().map(|(_, t)| t).collect())
}

/// The value of a PP2_TYPE_SSL TLV: how the client connected to the proxy over TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ssl {
    /// Bit field: 0x01 client used TLS, 0x02 sent a certificate on this connection,
    /// 0x04 on this session.
    pub client: u8,
    /// 0 when the client certificate was verified (or none was presented).
    pub verify: u32,
    /// SSL_VERSION, SSL_CN, SSL_CIPHER, SSL_SIG_ALG, SSL_KEY_ALG.
    pub tlvs: Vec<Tlv>,
}

impl Tlv {
    /// Decodes an SSL TLV's nested structure; `None` for other types or a malformed value.
    pub fn ssl(&self) -> Option<Ssl> {
        if self.kind != PP2_TYPE_SSL || self.value.len() < 5 {
            return None;
        }
        let tlvs = split_tlvs(&self.value, 5).ok()?;
        Some(Ssl {
            client: self.value[0],
            verify: u32::from_be_bytes(self.value[1..5].try_into().unwrap()),
            tlvs: tlvs.into_iter().map(|(_, t)| t).collect(),
        })
    }
}

/// CRC-32C (Castagnoli), bitwise: headers are tiny and arrive once per connection.
pub(crate) fn crc32c(bytes: impl IntoIterator<Item = u8>) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::super::testdata::{capture, haproxy_captures, unhex};
    use super::super::{encode_local, encode_tcp};
    use super::*;

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

    fn tlv(kind: u8, value: &[u8]) -> Tlv {
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
    const HAPROXY_TLS: &str = "0d0a0d0a000d0a515549540a211100787f0000017f000001ab808c09\
        030004cd6d8ece010008687474702f312e3102001073686f702e6578616d706c652e636f6d\
        2000440100000000210007544c5376312e33250005454332353624001165636473612d7769\
        74682d534841323536230016544c535f4145535f3235365f47434d5f534841333834";

    #[test]
    fn haproxy_ssl_tlv() {
        let (h, _) = decode(&unhex(HAPROXY_TLS)).unwrap();
        let ssl = h.tlvs[3].ssl().unwrap();
        assert_eq!((ssl.client, ssl.verify), (1, 0));
        let subs: Vec<(Option<&str>, &[u8])> = ssl
            .tlvs
            .iter()
            .map(|t| (t.name(), t.value.as_slice()))
            .collect();
        assert_eq!(
            subs,
            [
                (Some("SSL_VERSION"), &b"TLSv1.3"[..]),
                (Some("SSL_KEY_ALG"), b"EC256"),
                (Some("SSL_SIG_ALG"), b"ecdsa-with-SHA256"),
                (Some("SSL_CIPHER"), b"TLS_AES_256_GCM_SHA384"),
            ]
        );
    }

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
                syntax(
                    "unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)",
                ),
            ),
            (
                "v1 bad char",
                b"PROXY TCP4 1.2.3.x".to_vec(),
                syntax(
                    "unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)",
                ),
            ),
            (
                "v1 CR inside",
                b"PROXY TCP4 1.2.3.4\r 5".to_vec(),
                syntax(
                    "unexpected byte (expected TCP4, TCP6 or UNKNOWN and then addresses and ports)",
                ),
            ),
            (
                "v1 bare LF",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(),
                syntax("line ends in LF without CR"),
            ),
            (
                "v1 double space",
                b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n".to_vec(),
                syntax(
                    "expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces",
                ),
            ),
            (
                "v1 missing port",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n".to_vec(),
                syntax(
                    "expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces",
                ),
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
                syntax(
                    "expected `TCP4|TCP6 <src> <dst> <sport> <dport>` separated by single spaces",
                ),
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
    fn ssl_tlv_structure() {
        let ssl = tlv(
            PP2_TYPE_SSL,
            &unhex(
                "07 00000000 210007 544c5376312e33 220004 616c6963"
                    .replace(' ', "")
                    .as_str(),
            ),
        );
        assert_eq!(
            ssl.ssl(),
            Some(Ssl {
                client: 7,
                verify: 0,
                tlvs: vec![tlv(0x21, b"TLSv1.3"), tlv(0x22, b"alic")],
            })
        );
        assert_eq!(tlv(PP2_TYPE_SSL, &[1, 0, 0, 0]).ssl(), None);
        assert_eq!(tlv(PP2_TYPE_SSL, &[1, 0, 0, 0, 0, 0x21, 0, 9]).ssl(), None);
        assert_eq!(tlv(PP2_TYPE_ALPN, &[1, 0, 0, 0, 0]).ssl(), None);
        assert_eq!(
            tlv(PP2_TYPE_SSL, &[0, 0, 0, 0, 1])
                .ssl()
                .map(|s| (s.verify, s.tlvs.len())),
            Some((1, 0))
        );
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789".iter().copied()), 0xE306_9283);
    }

    #[test]
    fn tlv_names() {
        for (kind, name) in [
            (0x01, Some("ALPN")),
            (0x02, Some("AUTHORITY")),
            (0x03, Some("CRC32C")),
            (0x04, Some("NOOP")),
            (0x05, Some("UNIQUE_ID")),
            (0x20, Some("SSL")),
            (0x30, Some("NETNS")),
            (0xea, None),
        ] {
            assert_eq!(tlv_name(kind), name);
        }
    }

    #[test]
    fn display() {
        let (h, _) = decode(&capture("ipv6", Version::V2).bytes).unwrap();
        assert_eq!(
            h.to_string(),
            "v2 PROXY TCP6 [2001:db8::1]:51234 -> [2001:db8:ffff:1:2:3:4:5]:8443"
        );
        let (h, _) = decode(b"PROXY UNKNOWN\r\n").unwrap();
        assert_eq!(h.to_string(), "v1 PROXY UNKNOWN");
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

    mod props {
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
                (any::<[u8; 4]>(), any::<u16>())
                    .prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
                (any::<[u8; 16]>(), any::<u16>())
                    .prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
                (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::new(
                    Ipv4Addr::from(ip).to_ipv6_mapped().into(),
                    p
                )),
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
            let v1_byte =
                proptest::sample::select(b"TCP46UNKOW .:0123456789abcdef\r\n\0\xff".to_vec());
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
    }
}
