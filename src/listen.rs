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
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(Some(ListenAddr::Ip(addr)));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} has no port; expected :PORT, HOST:PORT or [IPv6]:PORT"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("port {port:?} in {s:?} is not a number in 0..65535"))?;
    if host.is_empty() {
        return Ok(Some(ListenAddr::Any(port)));
    }
    if host.contains(':') || host.starts_with('[') {
        return Err(format!(
            "{host:?} is neither a host name nor a bracketed IPv6 address; write IPv6 addresses in brackets, e.g. [::1]:{port}"
        ));
    }
    // A numeric last label is a mistyped IPv4 address, not a name.
    let numeric_tail = host
        .rsplit('.')
        .next()
        .is_some_and(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    let valid_name = crate::dns_name::is_hostname(host, false);
    if numeric_tail || !valid_name {
        return Err(format!("{host:?} is neither an IP address nor a host name"));
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

/// Binds `addr` even when the host does not have the address (yet): IP_FREEBIND, so a load
/// balancer's listener can be opened before or while its address is routed or assigned to this
/// host. An IPv6 address takes IPv6 only.
pub fn bind_freebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
        socket.set_freebind_v6(true)?;
    } else {
        socket.set_freebind_v4(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
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
        let ip = |s: &str| Ok(Some(ListenAddr::Ip(s.parse().unwrap())));
        let host = |h: &str, port| Ok(Some(ListenAddr::Host(h.into(), port)));
        for (input, want) in [
            (":8080", Ok(Some(ListenAddr::Any(8080)))),
            (":0", Ok(Some(ListenAddr::Any(0)))),
            ("", Ok(None)),
            ("  ", Ok(None)),
            ("127.0.0.1:80", ip("127.0.0.1:80")),
            ("0.0.0.0:8443", ip("0.0.0.0:8443")),
            ("[::1]:8080", ip("[::1]:8080")),
            ("[::]:1", ip("[::]:1")),
            ("localhost:8080", host("localhost", 8080)),
            ("whoami.example.com:1", host("whoami.example.com", 1)),
            ("8080", Err("has no port")),
            (":", Err("is not a number")),
            (":http", Err("is not a number")),
            (":65536", Err("is not a number")),
            ("::1:80", Err("in brackets")),
            ("[::1:8080", Err("in brackets")),
            ("[nope]:80", Err("in brackets")),
            ("[::1]", Err("is not a number")),
            ("1.2.3:80", Err("neither an IP address nor a host name")),
            ("bad host:80", Err("neither an IP address nor a host name")),
            ("a..b:80", Err("neither an IP address nor a host name")),
        ] {
            match (parse_listen(input), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{input:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{input:?}: {got}"),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[tokio::test]
    async fn freebind_binds_an_address_the_host_does_not_have() {
        // TEST-NET-3: on no interface of a test host.
        let l = bind_freebind("203.0.113.77:0".parse().unwrap()).unwrap();
        assert_eq!(l.local_addr().unwrap().ip().to_string(), "203.0.113.77");
        match bind_freebind("[2001:db8::77]:0".parse().unwrap()) {
            Ok(l) => assert_eq!(l.local_addr().unwrap().ip().to_string(), "2001:db8::77"),
            // A host without IPv6 at all.
            Err(e) => assert!(ipv6_unavailable(&e), "{e}"),
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
