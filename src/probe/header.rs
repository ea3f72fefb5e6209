//! PURE: whether a listener requires, takes optionally or refuses the PROXY header, from two
//! knocks on it with the same request: one bare, one behind a PROXY v1 header carrying the
//! prober's own connection addresses (`TCP4`/`TCP6`, as the relay sends by default).
//!
//! v1 with real addresses rather than v2 LOCAL or `PROXY UNKNOWN`: it is the header the proxy
//! actually sends, so the knock asks exactly what the relay will ask; a LOCAL or UNKNOWN
//! header makes some receivers skip their source checks (or refuse it), which would answer a
//! different question. Every controller ouroboros reads accepts v1 and v2 alike.
//!
//! What counts as answered is stricter than "some bytes came back", because a listener that
//! does not expect the header still answers it with an error: a plain HTTP server reads the
//! `PROXY ...` line as a malformed request line and sends `400 Bad Request`, a TLS server may
//! send an alert. So a TLS knock is answered only by a TLS handshake record (the
//! ServerHello), and an HTTP knock only by an HTTP status line other than 400.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Service;

use super::knock::Hello;
use super::verdict::{describe_reply, io_verdict, Reply};
use crate::dns::write::proxy_ips::cluster_ips;
use crate::header_verdict::{Header, Verdict};

/// The name the knocks on an ingress controller Service carry (SNI, Host): it serves no name
/// of ours in particular, and a made-up one under `.invalid` (RFC 2606) routes to its default
/// server, which answers as well as any (a 404 counts as answered).
pub const SERVICE_KNOCK_HOST: &str = "ouroboros-header-probe.invalid";

/// Each knock's connect and first answer on an ingress controller Service (both knocks run at
/// once): a Service in the cluster answers well within it.
pub const SERVICE_KNOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Where an ingress controller Service is knocked on, and with what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceKnock {
    /// Its first ClusterIP and the Service port.
    pub addr: SocketAddr,
    pub hello: Hello,
}

/// Where to knock on `svc` (the ingress controller Service): its first ClusterIP (IPv4 first),
/// at the port numbered 443 or named `https` with a TLS hello when it has one (what most
/// clients use, and where a controller's header setting applies alike), else at the port
/// numbered 80 or named `http` with an HTTP request. Err: why there is nothing to knock on.
pub fn service_knock(svc: &Service) -> Result<ServiceKnock, String> {
    let ip = *cluster_ips(svc)?.first().ok_or("it has no ClusterIP")?;
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let find = |number: i32, name: &str| {
        ports
            .iter()
            .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .find(|p| p.port == number || p.name.as_deref() == Some(name))
    };
    let (port, hello) = match (find(443, "https"), find(80, "http")) {
        (Some(p), _) => (p, Hello::Tls),
        (None, Some(p)) => (p, Hello::Http),
        (None, None) => {
            return Err("it has no TCP port numbered 443 or named https, nor 80 or http".into())
        }
    };
    let port =
        u16::try_from(port.port).map_err(|_| format!("its port {} is out of range", port.port))?;
    Ok(ServiceKnock {
        addr: SocketAddr::new(ip, port),
        hello,
    })
}

/// Whether `reply` answers `hello` as a listener that understood the connection would, and
/// what it was (for the verdict's `how`).
pub fn answered(hello: Hello, reply: &Reply) -> (bool, String) {
    match reply {
        Reply::Bytes(b) => {
            let what = describe_reply(b);
            let ok = match hello {
                Hello::Tls => matches!(b[..], [0x16, 3, ..]),
                Hello::Http => http_status(b).is_some_and(|s| s != 400),
            };
            (ok, format!("answered {what}"))
        }
        Reply::Closed => (false, "closed without answering".into()),
        Reply::Failed(e) => (false, format!("{} ({e})", io_verdict(e).as_str())),
        Reply::NoAnswer => (false, "no answer in time".into()),
    }
}

/// The status code of an `HTTP/x.y NNN ...` status line.
fn http_status(bytes: &[u8]) -> Option<u16> {
    let line = bytes.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_ascii_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

/// The header verdict from the replies to `hello` at `addr` (`host:port`, for `how`), bare
/// (`without`) and behind a v1 header (`with`).
pub fn verdict(addr: &str, hello: Hello, without: &Reply, with: &Reply) -> Verdict {
    let (bare, bare_says) = answered(hello, without);
    let (headed, headed_says) = answered(hello, with);
    let header = match (bare, headed) {
        (false, true) => Header::Required,
        (true, true) => Header::Optional,
        (true, false) => Header::Refused,
        (false, false) => Header::Unknown,
    };
    let why = match header {
        Header::Unknown => ": answered neither way, so nothing is concluded",
        _ => "",
    };
    Verdict {
        header,
        how: format!(
            "probed {addr} ({}): without a PROXY header {bare_says}, behind a PROXY v1 \
             header {headed_says}{why}",
            hello.as_str()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use std::io;

    fn service(ips: &[&str], ports: &[(i32, Option<&str>, Option<&str>)]) -> Service {
        Service {
            spec: Some(ServiceSpec {
                cluster_ip: ips.first().map(|s| s.to_string()),
                cluster_ips: Some(ips.iter().map(|s| s.to_string()).collect()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(port, name, protocol)| ServicePort {
                            port: *port,
                            name: name.map(str::to_string),
                            protocol: protocol.map(str::to_string),
                            ..ServicePort::default()
                        })
                        .collect(),
                ),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn service_knocks_443_with_tls_else_80_with_http() {
        let knock = |addr: &str, hello| {
            Ok(ServiceKnock {
                addr: addr.parse().unwrap(),
                hello,
            })
        };
        for (ips, ports, want) in [
            (
                &["10.96.0.80"][..],
                &[(80, Some("http"), None), (443, Some("https"), Some("TCP"))][..],
                knock("10.96.0.80:443", Hello::Tls),
            ),
            (
                &["fd00::80", "10.96.0.80"],
                &[(80, None, None)],
                knock("10.96.0.80:80", Hello::Http),
            ),
            // By name, whatever the number (as a test listener or an odd chart has it).
            (
                &["10.96.0.80"],
                &[(8080, Some("http"), None)],
                knock("10.96.0.80:8080", Hello::Http),
            ),
            (
                &["10.96.0.80"],
                &[(8443, Some("https"), None), (80, Some("web"), None)],
                knock("10.96.0.80:8443", Hello::Tls),
            ),
            // 443 over UDP (HTTP/3) is not knocked on.
            (
                &["10.96.0.80"],
                &[(443, Some("h3"), Some("UDP")), (80, None, None)],
                knock("10.96.0.80:80", Hello::Http),
            ),
        ] {
            assert_eq!(
                service_knock(&service(ips, ports)),
                want,
                "{ips:?} {ports:?}"
            );
        }
        for (ips, ports, says) in [
            (
                &["10.96.0.80"][..],
                &[(8080, Some("web"), None)][..],
                "no TCP port",
            ),
            (&["None"], &[(443, None, None)], "headless"),
            (&[], &[(443, None, None)], "no ClusterIP"),
        ] {
            let e = service_knock(&service(ips, ports)).unwrap_err();
            assert!(e.contains(says), "{says:?} in {e:?}");
        }
    }

    const HELLO: &[u8] = &[0x16, 3, 3, 0, 0x7a];
    const ALERT: &[u8] = &[0x15, 3, 3, 0, 2];

    fn bytes(b: &[u8]) -> Reply {
        Reply::Bytes(b.to_vec())
    }

    fn refused() -> Reply {
        Reply::Failed(io::Error::from(io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn answered_only_by_a_server_hello_or_a_status_line_other_than_400() {
        for (hello, reply, want) in [
            (Hello::Tls, bytes(HELLO), true),
            (Hello::Tls, bytes(ALERT), false),
            (Hello::Tls, bytes(b"HTTP/1.1 400 Bad Request\r\n"), false),
            (Hello::Http, bytes(b"HTTP/1.1 200 OK\r\n"), true),
            (Hello::Http, bytes(b"HTTP/1.0 404 Not Found\r\n"), true),
            (Hello::Http, bytes(b"HTTP/1.1 400 Bad Request\r\n"), false),
            (Hello::Http, bytes(b"HTTP/1.1 400"), false),
            (Hello::Http, bytes(b"SSH-2.0-OpenSSH\r\n"), false),
            (Hello::Http, bytes(HELLO), false),
            (Hello::Http, bytes(b""), false),
            (Hello::Http, Reply::Closed, false),
            (Hello::Tls, Reply::NoAnswer, false),
            (Hello::Tls, refused(), false),
        ] {
            assert_eq!(answered(hello, &reply).0, want, "{hello:?} {reply:?}");
        }
    }

    #[test]
    fn verdict_from_two_knocks() {
        let ok = || bytes(b"HTTP/1.1 200 OK\r\n");
        let bad = || bytes(b"HTTP/1.1 400 Bad Request\r\n");
        for (without, with, want, says) in [
            (
                Reply::Closed,
                ok(),
                Header::Required,
                "probed 10.96.0.80:80 (HTTP HEAD): without a PROXY header closed without \
                 answering, behind a PROXY v1 header answered \"HTTP/1.1 200 OK\"",
            ),
            (
                ok(),
                ok(),
                Header::Optional,
                "without a PROXY header answered",
            ),
            (
                ok(),
                bad(),
                Header::Refused,
                "behind a PROXY v1 header answered \"HTTP/1.1 400 Bad Request\"",
            ),
            (
                refused(),
                refused(),
                Header::Unknown,
                "without a PROXY header refused (connection refused), behind a PROXY v1 header \
                 refused (connection refused): answered neither way, so nothing is concluded",
            ),
            (
                Reply::NoAnswer,
                Reply::Closed,
                Header::Unknown,
                "no answer in time",
            ),
        ] {
            let v = verdict("10.96.0.80:80", Hello::Http, &without, &with);
            assert_eq!(v.header, want, "{}", v.how);
            assert!(v.how.contains(says), "{says:?} in {:?}", v.how);
        }
        let v = verdict("10.96.0.80:443", Hello::Tls, &bytes(ALERT), &bytes(HELLO));
        assert_eq!(v.header, Header::Required, "{}", v.how);
        assert!(v.how.contains("a TLS alert"), "{}", v.how);
    }
}
