//! Where a relayed connection goes. `proxy` dials one DNS name re-resolved on every dial; `edge`
//! can plug a balancer in behind the same trait.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// Why a dial failed, as a stable token for metrics labels, logs and `/readyz` bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// The name does not exist or has no address.
    DnsNxdomain,
    /// The resolver did not answer in time (or answered "try again").
    DnsTimeout,
    /// Any other resolver failure.
    DnsError,
    /// The target actively refused the connection (nothing listens there).
    ConnectionRefused,
    /// No answer within the dial timeout.
    Timeout,
    /// No route to the target.
    Unreachable,
    /// A balancer had no backend to try (none known yet, or the set is empty).
    NoBackend,
    /// Anything else.
    Error,
}

impl Cause {
    pub const ALL: [Cause; 8] = [
        Cause::DnsNxdomain,
        Cause::DnsTimeout,
        Cause::DnsError,
        Cause::ConnectionRefused,
        Cause::Timeout,
        Cause::Unreachable,
        Cause::NoBackend,
        Cause::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::DnsNxdomain => "dns-nxdomain",
            Cause::DnsTimeout => "dns-timeout",
            Cause::DnsError => "dns-error",
            Cause::ConnectionRefused => "connection-refused",
            Cause::Timeout => "timeout",
            Cause::Unreachable => "unreachable",
            Cause::NoBackend => "no-backend",
            Cause::Error => "error",
        }
    }

    /// Classifies a connect(2) error.
    pub fn of_connect(e: &std::io::Error) -> Cause {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => Cause::ConnectionRefused,
            K::TimedOut => Cause::Timeout,
            K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Cause::Unreachable,
            _ => Cause::Error,
        }
    }

    /// Classifies a getaddrinfo(3) return code.
    pub fn of_gai(code: libc::c_int) -> Cause {
        match code {
            libc::EAI_NONAME | libc::EAI_NODATA => Cause::DnsNxdomain,
            libc::EAI_AGAIN => Cause::DnsTimeout,
            _ => Cause::DnsError,
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed dial: the cause token, the target as configured and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("dialling {target}: {cause}: {detail}")]
pub struct DialError {
    pub cause: Cause,
    pub target: String,
    pub detail: String,
}

/// Held by a relayed connection for its whole life and told its byte counts when it closes
/// (a balancer counts per-backend connections and bytes with it).
pub trait Lease: Send + 'static {
    fn record(&self, _to_upstream: u64, _to_client: u64) {}
}

impl Lease for () {}

/// A source of upstream connections for the relay.
pub trait Upstream: Send + Sync + 'static {
    type Lease: Lease;

    /// Opens a connection to the upstream for a client at `client` (a balancer may hash it);
    /// the returned address is the peer actually reached.
    fn dial(
        &self,
        client: SocketAddr,
    ) -> impl Future<Output = Result<(TcpStream, SocketAddr, Self::Lease), DialError>> + Send;

    /// The target as configured, for logs.
    fn describe(&self) -> &str;
}

/// A shared upstream (e.g. a balancer that the watch, readiness and health checks also hold).
impl<U: Upstream> Upstream for Arc<U> {
    type Lease = U::Lease;

    fn dial(
        &self,
        client: SocketAddr,
    ) -> impl Future<Output = Result<(TcpStream, SocketAddr, Self::Lease), DialError>> + Send {
        (**self).dial(client)
    }

    fn describe(&self) -> &str {
        (**self).describe()
    }
}

/// A `host:port` target resolved at dial time (A and AAAA), so a Service whose ClusterIP
/// changes or an ingress controller that moves is followed. Every address is tried within one
/// dial timeout. An optional short cache spares the resolver a query per connection (with the
/// usual `ndots:5` a cluster name costs several); it is dropped whenever no address answers.
#[derive(Debug)]
pub struct DnsTarget {
    host: String,
    port: u16,
    timeout: Duration,
    label: String,
    cache_ttl: Duration,
    cache: Mutex<Option<(Instant, Arc<[SocketAddr]>)>>,
    resolutions: AtomicU64,
}

impl DnsTarget {
    /// A target resolved on every dial.
    pub fn new(host: impl Into<String>, port: u16, timeout: Duration) -> Self {
        let host = host.into();
        let label = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        DnsTarget {
            host,
            port,
            timeout,
            label,
            cache_ttl: Duration::ZERO,
            cache: Mutex::new(None),
            resolutions: AtomicU64::new(0),
        }
    }

    /// Reuses a successful resolution for `ttl`.
    pub fn with_cache(mut self, ttl: Duration) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// How many times the name was looked up (not served from the cache).
    pub fn resolutions(&self) -> u64 {
        self.resolutions.load(Ordering::Relaxed)
    }

    fn cached(&self) -> Option<Arc<[SocketAddr]>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        match &*cache {
            Some((at, addrs)) if at.elapsed() < self.cache_ttl => Some(addrs.clone()),
            _ => None,
        }
    }

    fn store(&self, addrs: Option<Arc<[SocketAddr]>>) {
        if !self.cache_ttl.is_zero() {
            *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
                addrs.map(|a| (Instant::now(), a));
        }
    }

    async fn addresses(&self, deadline: Instant) -> Result<Arc<[SocketAddr]>, DialError> {
        if let Some(addrs) = self.cached() {
            return Ok(addrs);
        }
        self.resolutions.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout_at(deadline, resolve(&self.host, self.port)).await {
            Ok(Ok(addrs)) => {
                let addrs: Arc<[SocketAddr]> = addrs.into();
                self.store(Some(addrs.clone()));
                Ok(addrs)
            }
            Ok(Err((cause, detail))) => Err(self.error(cause, detail)),
            Err(_) => Err(self.error(
                Cause::DnsTimeout,
                format!("no DNS answer within {:?}", self.timeout),
            )),
        }
    }

    async fn dial_inner(&self) -> Result<(TcpStream, SocketAddr), DialError> {
        let deadline = Instant::now() + self.timeout;
        let addrs = self.addresses(deadline).await?;
        let mut last = None;
        for (i, addr) in addrs.iter().enumerate() {
            // Share what is left of the timeout among the addresses still to try, so a
            // black-holed first address cannot starve the others.
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = left / (addrs.len() - i) as u32;
            match tokio::time::timeout(attempt, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok((stream, *addr)),
                Ok(Err(e)) => last = Some((Cause::of_connect(&e), format!("{addr}: {e}"))),
                Err(_) => {
                    last = Some((
                        Cause::Timeout,
                        format!("{addr}: no answer within {attempt:?}"),
                    ))
                }
            }
        }
        // Nothing answered: the target may have moved, look it up again next time.
        self.store(None);
        let (cause, detail) =
            last.unwrap_or((Cause::DnsNxdomain, "the name has no addresses".into()));
        Err(self.error(cause, detail))
    }

    fn error(&self, cause: Cause, detail: String) -> DialError {
        DialError {
            cause,
            target: self.label.clone(),
            detail,
        }
    }
}

impl Upstream for DnsTarget {
    type Lease = ();

    async fn dial(&self, _client: SocketAddr) -> Result<(TcpStream, SocketAddr, ()), DialError> {
        let (s, a) = self.dial_inner().await?;
        Ok((s, a, ()))
    }

    fn describe(&self) -> &str {
        &self.label
    }
}

/// Resolves `host` to every address (IPv4 and IPv6). getaddrinfo(3) is called directly, not
/// through `lookup_host`, because its return code is what tells "no such name" from "resolver
/// did not answer"; std folds both into one opaque error.
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, (Cause, String)> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let name = std::ffi::CString::new(host)
        .map_err(|_| (Cause::DnsError, format!("{host:?} contains a NUL byte")))?;
    tokio::task::spawn_blocking(move || getaddrinfo(&name, port))
        .await
        .map_err(|e| (Cause::DnsError, format!("resolver task failed: {e}")))?
}

fn getaddrinfo(name: &std::ffi::CStr, port: u16) -> Result<Vec<SocketAddr>, (Cause, String)> {
    let mut out =
        crate::sys::getaddrinfo(name, port).map_err(|e| (Cause::of_gai(e.code), e.detail))?;
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

    #[test]
    fn cause_tokens() {
        use std::io::{Error, ErrorKind};
        for (cause, token) in [
            (Cause::DnsNxdomain, "dns-nxdomain"),
            (Cause::DnsTimeout, "dns-timeout"),
            (Cause::ConnectionRefused, "connection-refused"),
            (Cause::Timeout, "timeout"),
        ] {
            assert_eq!(cause.as_str(), token);
        }
        for (kind, want) in [
            (ErrorKind::ConnectionRefused, Cause::ConnectionRefused),
            (ErrorKind::TimedOut, Cause::Timeout),
            (ErrorKind::NetworkUnreachable, Cause::Unreachable),
            (ErrorKind::PermissionDenied, Cause::Error),
        ] {
            assert_eq!(Cause::of_connect(&Error::from(kind)), want, "{kind:?}");
        }
        for (code, want) in [
            (libc::EAI_NONAME, Cause::DnsNxdomain),
            (libc::EAI_NODATA, Cause::DnsNxdomain),
            (libc::EAI_AGAIN, Cause::DnsTimeout),
            (libc::EAI_FAIL, Cause::DnsError),
        ] {
            assert_eq!(Cause::of_gai(code), want, "{code}");
        }
    }

    #[tokio::test]
    async fn resolves_literals_and_names() {
        assert_eq!(
            resolve("::1", 80).await.unwrap(),
            vec!["[::1]:80".parse().unwrap()]
        );
        let local = resolve("localhost", 8080).await.unwrap();
        assert!(
            local
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080),
            "{local:?}"
        );
        // RFC 6761 reserves .invalid: it never resolves.
        let err = resolve("no-such-host.invalid", 80).await.unwrap_err();
        assert_eq!(err.0, Cause::DnsNxdomain, "{err:?}");
    }

    #[tokio::test]
    async fn refused_and_label() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = DnsTarget::new("127.0.0.1", port, Duration::from_secs(2));
        let err = t.dial(ANY).await.unwrap_err();
        assert_eq!(err.cause, Cause::ConnectionRefused, "{err}");
        assert_eq!(
            DnsTarget::new("::1", 443, Duration::ZERO).describe(),
            "[::1]:443"
        );
    }

    #[tokio::test]
    async fn cache_spares_lookups_and_is_dropped_when_nothing_answers() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let uncached = DnsTarget::new("localhost", port, Duration::from_secs(2));
        let cached = DnsTarget::new("localhost", port, Duration::from_secs(2))
            .with_cache(Duration::from_secs(60));
        for _ in 0..3 {
            uncached.dial(ANY).await.unwrap();
            cached.dial(ANY).await.unwrap();
        }
        assert_eq!((uncached.resolutions(), cached.resolutions()), (3, 1));
        drop(l);
        for _ in 0..3 {
            let err = cached.dial(ANY).await.unwrap_err();
            assert_eq!(err.cause, Cause::ConnectionRefused, "{err}");
        }
        // The first failure came from the cache and dropped it; the next two looked up again.
        assert_eq!(cached.resolutions(), 3);
    }
}
