//! v2: the binary header: signature, version/command and family/protocol bytes, length, then the
//! address block and TLVs (parsed in `tlv`). Checks each fixed byte as soon as it arrives, so a
//! broken header is refused before its declared length is read.

use std::net::{IpAddr, SocketAddr};

use super::error::invalid;
use super::error::{DecodeError, Invalid};
use super::header::{Command, Header, Transport};
use super::tlv::parse_tlvs;
use crate::proxy_protocol::{Destination, Source, Version, V2_FIXED_LEN};

impl Transport {
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

pub(super) fn decode_v2(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
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
