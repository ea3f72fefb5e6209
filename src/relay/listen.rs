//! Listen addresses as users write them (Go style `:8080`, `host:port`, `[v6]:port`) and binding.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// Room for connections waiting while `--max-connections` is reached (capped by somaxconn).
const BACKLOG: i32 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// `:port`: every interface, IPv6 and IPv4 when the host has IPv6.
    Any(u16),
    /// An IP literal with a port.
    Ip(SocketAddr),
    /// A host name with a port, resolved when binding.
    Host(String, u16),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Any(port) => write!(f, ":{port}"),
            ListenAddr::Ip(addr) => write!(f, "{addr}"),
            ListenAddr::Host(host, port) => write!(f, "{host}:{port}"),
        }
    }
}

/// Parses a listen address; the empty string means "disabled" (`None`).
pub fn parse_listen(s: &str) -> Result<Option<ListenAddr>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let bad = || {
        format!("{s:?} is not a listen address (expected :PORT, HOST:PORT or [IPv6]:PORT, or empty to disable)")
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() {
        return Ok(Some(ListenAddr::Any(port)));
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = v6.parse().map_err(|_| bad())?;
        return Ok(Some(ListenAddr::Ip(SocketAddr::new(ip.into(), port))));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(Some(ListenAddr::Ip(SocketAddr::new(ip.into(), port))));
    }
    let valid_name = host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !valid_name {
        return Err(bad());
    }
    Ok(Some(ListenAddr::Host(host.to_string(), port)))
}

/// Binds a listener. `:port` binds `[::]` dual-stack and falls back to `0.0.0.0` when the host
/// has no IPv6.
pub async fn bind(addr: &ListenAddr) -> std::io::Result<TcpListener> {
    let target = match addr {
        ListenAddr::Any(port) => {
            let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), *port);
            match bind_one(v6, true) {
                Ok(l) => return Ok(l),
                Err(e) if ipv6_unavailable(&e) => {
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), *port)
                }
                Err(e) => return Err(e),
            }
        }
        ListenAddr::Ip(a) => *a,
        ListenAddr::Host(host, port) => tokio::net::lookup_host((host.as_str(), *port))
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{host} has no address"),
                )
            })?,
    };
    bind_one(target, false)
}

/// Like [`bind`], but an explicit IPv6 address (`[::]:443`) takes IPv6 only, so an IPv4
/// listener on the same port (`0.0.0.0:443`) can sit beside it; `:PORT` stays dual-stack.
pub async fn bind_v6only(addr: &ListenAddr) -> std::io::Result<TcpListener> {
    match addr {
        ListenAddr::Ip(a) if a.is_ipv6() => {
            let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
            socket.set_only_v6(true)?;
            socket.set_reuse_address(true)?;
            socket.set_nonblocking(true)?;
            socket.bind(&(*a).into())?;
            socket.listen(BACKLOG)?;
            TcpListener::from_std(socket.into())
        }
        _ => bind(addr).await,
    }
}

fn ipv6_unavailable(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL) | Some(libc::EPROTONOSUPPORT)
    )
}

fn bind_one(addr: SocketAddr, dual_stack: bool) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listen_addresses() {
        let ip = |s: &str| Some(ListenAddr::Ip(s.parse().unwrap()));
        for (input, want) in [
            (":8080", Ok(Some(ListenAddr::Any(8080)))),
            (":0", Ok(Some(ListenAddr::Any(0)))),
            ("", Ok(None)),
            ("  ", Ok(None)),
            ("127.0.0.1:80", Ok(ip("127.0.0.1:80"))),
            ("0.0.0.0:8443", Ok(ip("0.0.0.0:8443"))),
            ("[::1]:8080", Ok(ip("[::1]:8080"))),
            ("[::]:1", Ok(ip("[::]:1"))),
            (
                "localhost:8080",
                Ok(Some(ListenAddr::Host("localhost".into(), 8080))),
            ),
            ("8080", Err(())),
            (":", Err(())),
            (":65536", Err(())),
            ("::1:80", Err(())),
            ("[::1]", Err(())),
            ("[nope]:80", Err(())),
            ("bad host:80", Err(())),
        ] {
            assert_eq!(parse_listen(input).map_err(|_| ()), want, "{input:?}");
        }
    }

    #[tokio::test]
    async fn any_is_dual_stack() {
        let l = bind(&ListenAddr::Any(0)).await.unwrap();
        let port = l.local_addr().unwrap().port();
        for client in ["127.0.0.1", "::1"] {
            let ip: IpAddr = client.parse().unwrap();
            tokio::net::TcpStream::connect((ip, port)).await.unwrap();
            let (_, peer) = l.accept().await.unwrap();
            // IPv4 clients show up as mapped addresses on a dual-stack socket.
            let seen = match peer.ip() {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            };
            assert_eq!(seen, ip);
        }
    }
}
