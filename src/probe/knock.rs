//! The request a client sends, without a PROXY header: a TLS ClientHello with the name as SNI,
//! or `HEAD / HTTP/1.1` with the name as Host. Only whether the listener answers matters, so
//! the probe reads the first bytes of the answer and closes: the TLS handshake is never
//! finished and no certificate is checked (an empty root store is enough for that). The same
//! request behind a PROXY header tells whether the listener takes one
//! ([`super::header_verdict`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::verdict::Reply;
use crate::proxy_protocol::{encode_tcp, Destination, Source, Version, MAX_ENCODED};

/// What is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hello {
    /// A TLS ClientHello with SNI.
    Tls,
    /// `HEAD / HTTP/1.1` with Host.
    Http,
}

impl Hello {
    pub fn as_str(self) -> &'static str {
        match self {
            Hello::Tls => "TLS ClientHello",
            Hello::Http => "HTTP HEAD",
        }
    }
}

/// The bytes of `hello` for `host`. Err: `host` cannot be an SNI name.
pub fn request(hello: Hello, host: &str) -> Result<Vec<u8>, String> {
    match hello {
        Hello::Http => Ok(format!(
            "HEAD / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ouroboros-probe\r\nConnection: \
             close\r\n\r\n"
        )
        .into_bytes()),
        Hello::Tls => client_hello(host),
    }
}

fn client_hello(host: &str) -> Result<Vec<u8>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Connects to `addr`, sends `request` and waits for the first bytes of an answer: each of
/// connecting and answering within `timeout`.
pub async fn knock(addr: SocketAddr, request: &[u8], timeout: Duration) -> Reply {
    exchange(addr, false, request, timeout).await
}

/// Like [`knock`], with a PROXY v1 header before `request` naming the connection's own
/// addresses (this end as the source, `addr` as the destination), as the relay sends it.
pub async fn knock_behind_header(addr: SocketAddr, request: &[u8], timeout: Duration) -> Reply {
    exchange(addr, true, request, timeout).await
}

async fn exchange(addr: SocketAddr, header: bool, request: &[u8], timeout: Duration) -> Reply {
    let mut stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Reply::NoAnswer,
        Ok(Err(e)) => return Reply::Failed(e),
        Ok(Ok(s)) => s,
    };
    let exchange = async {
        let mut bytes = Vec::with_capacity(MAX_ENCODED + request.len());
        if header {
            let (src, dst) = (
                Source(stream.local_addr()?),
                Destination(stream.peer_addr()?),
            );
            bytes.extend_from_slice(encode_tcp(Version::V1, src, dst).as_bytes());
        }
        // One write: the header and the request arrive together, as the relay's do.
        bytes.extend_from_slice(request);
        stream.write_all(&bytes).await?;
        let mut buf = vec![0u8; 512];
        let n = stream.read(&mut buf).await?;
        buf.truncate(n);
        Ok::<_, std::io::Error>(buf)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Reply::NoAnswer,
        Ok(Err(e)) => Reply::Failed(e),
        Ok(Ok(b)) if b.is_empty() => Reply::Closed,
        Ok(Ok(b)) => Reply::Bytes(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_name() {
        let head = request(Hello::Http, "app.example.com").unwrap();
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "HEAD / HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: ouroboros-probe\r\n\
             Connection: close\r\n\r\n"
        );
        let hello = request(Hello::Tls, "app.example.com").unwrap();
        // A handshake record holding a ClientHello (type 1), with the name as SNI.
        assert_eq!(&hello[..2], &[0x16, 3]);
        assert_eq!(hello[5], 1);
        let sni = b"app.example.com";
        assert!(hello.windows(sni.len()).any(|w| w == sni));
        assert!(request(Hello::Tls, "not a name").is_err());
    }
}
