//! Why bytes yield no header: [`DecodeError`] tells "read more" (`Incomplete`) from "never a
//! header" (`Invalid`), and [`Invalid`] says what broke. Shared by every decoder, so separate.

use super::header::Transport;
use crate::proxy_protocol::V1_MAX_LEN;

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

pub(super) fn invalid<T>(why: Invalid) -> Result<T, DecodeError> {
    Err(DecodeError::Invalid(why))
}
