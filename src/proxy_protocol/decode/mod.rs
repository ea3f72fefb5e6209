//! PROXY header decoder (v1 text and v2 binary). PURE: works on the bytes received so far.
//!
//! `decode` is meant to be called again each time more bytes arrive: it answers `Incomplete`
//! for every prefix of a valid header (never giving up early), `Invalid` as soon as the bytes
//! cannot become a valid header, and the header plus the number of bytes it took otherwise.
//!
//! The front (`decode`, `signature`) is here; it hands the bytes to the version's decoder:
//!
//! | module | owns |
//! | --- | --- |
//! | `header` | what a decode yields: [`Header`], [`Command`](header::Command), [`Transport`](header::Transport) |
//! | `error` | why a decode yields no header: [`DecodeError`], [`Invalid`] |
//! | `v1` | the text line (`PROXY TCP4 ...\r\n`) |
//! | `v2` | the binary header: fixed part, address block |
//! | `tlv` | v2 TLVs: splitting, CRC32C, the SSL TLV's nested structure, the type names |

pub mod error;
pub mod header;
pub mod tlv;
mod v1;
mod v2;

use error::{DecodeError, Invalid};
use header::Header;

use super::{V1_SIGNATURE, V2_MAX_LEN, V2_SIGNATURE};
use error::invalid;
use v1::decode_v1;
use v2::decode_v2;

/// A reader that buffers this many bytes always gets a decision from `decode`.
pub const MAX_HEADER_LEN: usize = V2_MAX_LEN;

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

#[cfg(test)]
mod tests;
