//! What a decode yields: the [`Header`] with its [`Command`] and [`Transport`], and how each is
//! shown. Separate from the decoders so both versions build the same model and readers of the
//! model need not read either wire format.

use std::fmt;

use crate::proxy_protocol::{Destination, Source, Version};

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
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

/// A v2 type-length-value extension (read and named in `tlv`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tlv {
    pub kind: u8,
    pub value: Vec<u8>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy_protocol::decode::decode;
    use crate::proxy_protocol::testdata::capture;

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
}
