//! v2 type-length-value extensions: the [`Tlv`] type and the type names the specification
//! defines, splitting the bytes after the address block, verifying a CRC32C TLV, and the SSL
//! TLV's nested structure. Separate: TLVs have their own grammar (also nested inside the SSL
//! TLV) and their own checksum.

use super::error::invalid;
use super::error::{DecodeError, Invalid};
use super::header::Tlv;
use crate::proxy_protocol::V2_FIXED_LEN;

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
pub(super) fn parse_tlvs(header: &[u8], address_len: usize) -> Result<Vec<Tlv>, DecodeError> {
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
    use super::*;
    use crate::proxy_protocol::decode::decode;
    use crate::proxy_protocol::decode::tests::{tlv, HAPROXY_TLS};
    use crate::proxy_protocol::testdata::unhex;

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
}
