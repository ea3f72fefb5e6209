//! The backend set of one listener as a pure function of a Service's EndpointSlices.
//!
//! Rules (documented in docs/cli/edge.md):
//! - an endpoint is used when it is ready (`conditions.ready` true or unset), serving (true or
//!   unset) and not terminating (false or unset);
//! - the port is resolved per slice: the slice port whose name is the wanted Service port name
//!   (unnamed = empty string), TCP only; a slice without that port contributes nothing;
//! - a numeric `--listen` PORT names the Service port with that `port` number (what clients of
//!   the Service dial), never a target port: EndpointSlices only carry target ports, which can
//!   differ per slice, so the Service's port list maps the number to the port name first;
//! - `IPv4` and `IPv6` slices are both used (dual stack), `FQDN` slices are ignored;
//! - duplicates across slices collapse; the result is sorted.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

/// The Service port a listener forwards to, as written after `=` in `--listen`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortRef {
    /// A Service port name (`websecure`).
    Name(String),
    /// A Service port number (`443`).
    Number(u16),
}

impl PortRef {
    pub fn parse(s: &str) -> Result<PortRef, String> {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<u16>() {
                Ok(n) if n > 0 => Ok(PortRef::Number(n)),
                _ => Err(format!("{s:?} is not a port number (1-65535)")),
            };
        }
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if ok {
            Ok(PortRef::Name(s.to_string()))
        } else {
            Err(format!(
                "{s:?} is neither a port number (1-65535) nor a Service port name (lowercase letters, digits, '-')"
            ))
        }
    }
}

impl std::fmt::Display for PortRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortRef::Name(n) => f.write_str(n),
            PortRef::Number(n) => write!(f, "{n}"),
        }
    }
}

fn is_tcp(protocol: &Option<String>) -> bool {
    protocol.as_deref().is_none_or(|p| p == "TCP")
}

/// The Service port name (empty for the one unnamed port) that `port` designates. A name is
/// taken as is (it need not be in `service_ports`: the slices decide); a number needs the
/// Service's ports.
pub fn port_name(port: &PortRef, service_ports: Option<&[ServicePort]>) -> Result<String, String> {
    match port {
        PortRef::Name(n) => Ok(n.clone()),
        PortRef::Number(n) => {
            let ports = service_ports.ok_or_else(|| {
                format!("port {n}: the Service is not known yet, so its port number cannot be mapped to a port name")
            })?;
            ports
                .iter()
                .find(|p| p.port == i32::from(*n) && is_tcp(&p.protocol))
                .map(|p| p.name.clone().unwrap_or_default())
                .ok_or_else(|| {
                    let have: Vec<String> = ports
                        .iter()
                        .filter(|p| is_tcp(&p.protocol))
                        .map(|p| match &p.name {
                            Some(name) if !name.is_empty() => format!("{} ({name})", p.port),
                            _ => p.port.to_string(),
                        })
                        .collect();
                    format!(
                        "the Service has no TCP port {n} (it has: {}); use one of its port numbers or names",
                        if have.is_empty() { "none".to_string() } else { have.join(", ") }
                    )
                })
        }
    }
}

fn usable(e: &Endpoint) -> bool {
    let c = e.conditions.clone().unwrap_or_default();
    c.ready != Some(false) && c.serving != Some(false) && c.terminating != Some(true)
}

/// Addresses of the usable endpoints for the Service port named `port_name`, sorted, deduped.
pub fn backends(slices: &[EndpointSlice], port_name: &str) -> Vec<SocketAddr> {
    let mut out = BTreeSet::new();
    for slice in slices {
        let v6 = match slice.address_type.as_str() {
            "IPv4" => false,
            "IPv6" => true,
            _ => continue, // FQDN: not dialled by address
        };
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name && is_tcp(&p.protocol));
        let Some(port) = port
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        for e in slice.endpoints.iter().filter(|e| usable(e)) {
            for a in &e.addresses {
                match a.parse::<IpAddr>() {
                    Ok(ip) if ip.is_ipv6() == v6 => {
                        out.insert(SocketAddr::new(ip, port));
                    }
                    _ => {
                        tracing::debug!(address = %a, address_type = %slice.address_type, "skipping an endpoint address that does not match its slice's address type")
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointPort};

    fn ep(
        addrs: &[&str],
        ready: Option<bool>,
        serving: Option<bool>,
        term: Option<bool>,
    ) -> Endpoint {
        Endpoint {
            addresses: addrs.iter().map(|s| s.to_string()).collect(),
            conditions: Some(EndpointConditions {
                ready,
                serving,
                terminating: term,
            }),
            ..Default::default()
        }
    }

    fn ok(addrs: &[&str]) -> Endpoint {
        ep(addrs, Some(true), Some(true), Some(false))
    }

    fn port(name: Option<&str>, n: Option<i32>, proto: Option<&str>) -> EndpointPort {
        EndpointPort {
            name: name.map(str::to_string),
            port: n,
            protocol: proto.map(str::to_string),
            ..Default::default()
        }
    }

    fn slice(ty: &str, ports: Vec<EndpointPort>, eps: Vec<Endpoint>) -> EndpointSlice {
        EndpointSlice {
            address_type: ty.to_string(),
            endpoints: eps,
            ports: Some(ports),
            ..Default::default()
        }
    }

    fn web() -> Vec<EndpointPort> {
        vec![
            port(Some("web"), Some(8000), Some("TCP")),
            port(Some("websecure"), Some(8443), None),
            port(Some("dns"), Some(53), Some("UDP")),
        ]
    }

    fn addrs(v: &[&str]) -> Vec<SocketAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn endpoint_conditions() {
        // (ready, serving, terminating) -> used
        for (r, s, t, want) in [
            (Some(true), Some(true), Some(false), true),
            (None, None, None, true), // nil ready/serving = true, nil terminating = false
            (Some(false), Some(true), Some(false), false),
            (None, Some(false), None, false),
            (Some(true), Some(true), Some(true), false), // publishNotReadyAddresses + terminating
            (Some(false), Some(true), Some(true), false), // terminating but still serving
            (Some(true), None, Some(false), true),
        ] {
            let sl = slice("IPv4", web(), vec![ep(&["10.0.0.1"], r, s, t)]);
            let got = backends(&[sl], "websecure");
            assert_eq!(!got.is_empty(), want, "{r:?} {s:?} {t:?}");
        }
        // No conditions at all: every field nil.
        let mut e = ok(&["10.0.0.9"]);
        e.conditions = None;
        let got = backends(&[slice("IPv4", web(), vec![e])], "web");
        assert_eq!(got, addrs(&["10.0.0.9:8000"]));
    }

    #[test]
    fn ports_resolved_per_slice() {
        let a = slice("IPv4", web(), vec![ok(&["10.0.0.1"])]);
        // Another slice of the same Service after a rollout changed the target port.
        let b = slice(
            "IPv4",
            vec![port(Some("websecure"), Some(9443), Some("TCP"))],
            vec![ok(&["10.0.0.2"])],
        );
        let all = [a, b];
        for (name, want) in [
            ("websecure", addrs(&["10.0.0.1:8443", "10.0.0.2:9443"])),
            ("web", addrs(&["10.0.0.1:8000"])),
            ("dns", vec![]), // UDP is never a backend
            ("missing", vec![]),
            ("", vec![]),
        ] {
            assert_eq!(backends(&all, name), want, "{name:?}");
        }
        // Unnamed single port: name absent or empty.
        for name in [None, Some("")] {
            let s = slice(
                "IPv4",
                vec![port(name, Some(80), None)],
                vec![ok(&["10.0.0.3"])],
            );
            assert_eq!(backends(&[s], ""), addrs(&["10.0.0.3:80"]), "{name:?}");
        }
        // A port without a number ("all ports") or out of range cannot be dialled.
        for n in [None, Some(0), Some(70000), Some(-1)] {
            let s = slice(
                "IPv4",
                vec![port(Some("web"), n, None)],
                vec![ok(&["10.0.0.4"])],
            );
            assert_eq!(backends(&[s], "web"), vec![], "{n:?}");
        }
        // A slice with no ports at all.
        let mut s = slice("IPv4", vec![], vec![ok(&["10.0.0.5"])]);
        s.ports = None;
        assert_eq!(backends(&[s], "web"), vec![]);
    }

    #[test]
    fn dual_stack_dedupe_and_order() {
        let v4 = slice(
            "IPv4",
            web(),
            vec![ok(&["10.0.0.2"]), ok(&["10.0.0.1"]), ok(&["10.0.0.2"])],
        );
        let v6 = slice("IPv6", web(), vec![ok(&["fd00::1"]), ok(&["10.0.0.7"])]);
        let fqdn = slice("FQDN", web(), vec![ok(&["ingress.example.com"])]);
        // The same endpoint listed in two slices (during slice rebalancing).
        let dup = slice("IPv4", web(), vec![ok(&["10.0.0.1"])]);
        let want = addrs(&["10.0.0.1:8443", "10.0.0.2:8443", "[fd00::1]:8443"]);
        assert_eq!(
            backends(
                &[v6.clone(), fqdn.clone(), v4.clone(), dup.clone()],
                "websecure"
            ),
            want
        );
        assert_eq!(
            backends(&[dup, v4, fqdn, v6], "websecure"),
            want,
            "order independent"
        );
        // An IPv4 text in an IPv6 slice (10.0.0.7) was skipped above; garbage too.
        let bad = slice("IPv4", web(), vec![ok(&["not-an-ip", "fd00::2"])]);
        assert_eq!(backends(&[bad], "web"), vec![]);
        assert_eq!(backends(&[], "web"), vec![]);
    }

    fn sp(name: Option<&str>, port: i32, proto: Option<&str>) -> ServicePort {
        ServicePort {
            name: name.map(str::to_string),
            port,
            protocol: proto.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn port_names_from_service_ports() {
        let svc = [
            sp(Some("web"), 80, Some("TCP")),
            sp(Some("websecure"), 443, None),
            sp(Some("quic"), 8443, Some("UDP")),
        ];
        let single = [sp(None, 80, None)];
        for (port, ports, want) in [
            (PortRef::Name("websecure".into()), None, Ok("websecure")),
            (PortRef::Name("other".into()), Some(&svc[..]), Ok("other")),
            (PortRef::Number(443), Some(&svc[..]), Ok("websecure")),
            (PortRef::Number(80), Some(&svc[..]), Ok("web")),
            (PortRef::Number(80), Some(&single[..]), Ok("")),
            // A target port number is not a Service port.
            (
                PortRef::Number(8000),
                Some(&svc[..]),
                Err("no TCP port 8000 (it has: 80 (web), 443 (websecure))"),
            ),
            (
                PortRef::Number(8443),
                Some(&svc[..]),
                Err("no TCP port 8443"),
            ),
            (PortRef::Number(443), None, Err("not known yet")),
        ] {
            crate::table::expect(&port_name(&port, ports), &want, &port);
        }
    }

    #[test]
    fn parses_port_refs() {
        for (input, want) in [
            ("443", Ok(PortRef::Number(443))),
            ("websecure", Ok(PortRef::Name("websecure".into()))),
            ("http-2", Ok(PortRef::Name("http-2".into()))),
            ("0", Err(())),
            ("70000", Err(())),
            ("Web", Err(())),
            ("", Err(())),
            ("-web", Err(())),
        ] {
            assert_eq!(PortRef::parse(input).map_err(|_| ()), want, "{input:?}");
        }
    }
}
