//! What the edge does for a LoadBalancer Service of its class once [`super::allocate`] has
//! decided its addresses, as pure functions: the `status.loadBalancer` it writes, and the
//! listeners it opens (address, port, the Service port they forward to, the PROXY version).
//!
//! Rules (documented in docs/edge.md):
//! - every address gets one `status.loadBalancer.ingress` entry `{ip, ipMode: Proxy, ports}`;
//!   `ports` lists the Service's TCP ports (the edge relays TCP only) and is left out when there
//!   is none. The API server refuses an `ipMode` without an `ip` and an `ip` without an
//!   `ipMode` (KEP-1860), so both are always written together;
//! - a Service without addresses (released, or refused with a reason) gets its ingress list
//!   removed, and nothing is written when the Service already reports what is wanted;
//! - the write is a JSON merge patch of the `status` subresource that carries the Service's
//!   `resourceVersion`: a Service changed since it was read (its type, its ports) is refused
//!   with 409 rather than given a status computed from its old spec;
//! - the PROXY version comes from the `ouroboros.io/proxy-protocol` annotation (`v1` or `v2`),
//!   else the edge's default; any other value is refused with the reason.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, ObjectReference, PortStatus, Service};
use serde_json::{json, Value};

use super::allocate::Ingress;
use crate::proxy_protocol::Version;

/// The `ipMode` the edge writes: clients inside the cluster are sent to the load balancer
/// rather than short-circuited to the endpoints, so they get the PROXY header too.
pub const IP_MODE_PROXY: &str = "Proxy";

/// The annotation through which a Service chooses its PROXY version.
pub const PROXY_PROTOCOL_ANNOTATION: &str = "ouroboros.io/proxy-protocol";

/// The ingress entries to report for `addresses` (empty: none).
pub fn ingress(addresses: &[Ingress]) -> Vec<LoadBalancerIngress> {
    addresses
        .iter()
        .map(|a| {
            let ports: Vec<PortStatus> = (a.ports.iter())
                .filter(|p| p.protocol == "TCP")
                .map(|p| PortStatus {
                    port: p.port,
                    protocol: p.protocol.clone(),
                    error: None,
                })
                .collect();
            LoadBalancerIngress {
                ip: Some(a.ip.to_string()),
                ip_mode: Some(IP_MODE_PROXY.into()),
                ports: (!ports.is_empty()).then_some(ports),
                ..LoadBalancerIngress::default()
            }
        })
        .collect()
}

/// The merge patch of `services/status` that makes `svc` report `addresses`, or `None` when it
/// already does.
pub fn patch(svc: &Service, addresses: &[Ingress]) -> Option<Value> {
    let want = ingress(addresses);
    let have: &[LoadBalancerIngress] = (svc.status.as_ref())
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default();
    if have == want.as_slice() {
        return None;
    }
    let ingress = if want.is_empty() {
        Value::Null
    } else {
        json!(want)
    };
    Some(json!({
        "metadata": {"resourceVersion": svc.metadata.resource_version},
        "status": {"loadBalancer": {"ingress": ingress}},
    }))
}

/// One listener of a Service: the address and port it accepts on, and the name of the Service
/// port whose endpoints it forwards to (empty for a Service's one unnamed port).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listener {
    pub addr: SocketAddr,
    pub port_name: String,
}

/// What the edge opens for one Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The Service, for the Events about its listeners (with its UID, so they are not shown
    /// on a later Service of the same name).
    pub regarding: ObjectReference,
    pub version: Version,
    /// Sorted.
    pub listeners: Vec<Listener>,
}

/// `svc` as the object an Event is about.
pub fn reference(svc: &Service) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: svc.metadata.namespace.clone(),
        name: svc.metadata.name.clone(),
        uid: svc.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// The listeners of `svc` on `addresses`: one per address and TCP Service port, with the PROXY
/// version its annotation asks for (`default` without one). The error is the Event's note.
pub fn plan(svc: &Service, addresses: &[Ingress], default: Version) -> Result<Plan, String> {
    let version = match (svc.metadata.annotations.as_ref())
        .and_then(|a| a.get(PROXY_PROTOCOL_ANNOTATION))
        .map(|v| v.trim())
    {
        None => default,
        Some("v1") => Version::V1,
        Some("v2") => Version::V2,
        Some(other) => {
            return Err(format!(
                "annotation {PROXY_PROTOCOL_ANNOTATION}: {other:?} is not a PROXY-protocol \
                 version; write v1 or v2 (or remove it for {}); the Service is not served \
                 until then",
                default.as_str()
            ))
        }
    };
    let ports = (svc.spec.as_ref())
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut listeners = Vec::new();
    for a in addresses {
        for p in ports
            .iter()
            .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        {
            let Ok(port) = u16::try_from(p.port) else {
                continue; // the API server only stores 1-65535
            };
            listeners.push(Listener {
                addr: SocketAddr::new(a.ip, port),
                port_name: p.name.clone().unwrap_or_default(),
            });
        }
    }
    listeners.sort();
    Ok(Plan {
        regarding: reference(svc),
        version,
        listeners,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::allocate::Port;

    fn service(json: Value) -> Service {
        serde_json::from_value(json).unwrap()
    }

    fn at(ip: &str, ports: &[(i32, &str)]) -> Ingress {
        Ingress {
            ip: ip.parse().unwrap(),
            ports: ports
                .iter()
                .map(|(port, protocol)| Port {
                    port: *port,
                    protocol: protocol.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn ingress_entries_carry_ip_mode_and_tcp_ports_only() {
        let got = serde_json::to_value(ingress(&[
            at("192.0.2.1", &[(443, "TCP"), (53, "UDP")]),
            at("2001:db8::1", &[(53, "UDP")]),
        ]))
        .unwrap();
        assert_eq!(
            got,
            json!([
                {"ip": "192.0.2.1", "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]},
                {"ip": "2001:db8::1", "ipMode": "Proxy"},
            ])
        );
    }

    #[test]
    fn patches_only_what_differs() {
        let with_status = |status: Value| {
            service(json!({
                "metadata": {"namespace": "web", "name": "s", "resourceVersion": "42"},
                "spec": {"type": "LoadBalancer"},
                "status": status,
            }))
        };
        let one = [at("192.0.2.1", &[(443, "TCP")])];
        let reported = json!({"loadBalancer": {"ingress": [
            {"ip": "192.0.2.1", "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]}
        ]}});
        let cases: &[(&str, Value, &[Ingress], Option<Value>)] = &[
            (
                "nothing reported yet",
                json!({"loadBalancer": {}}),
                &one,
                Some(json!({
                    "metadata": {"resourceVersion": "42"},
                    "status": {"loadBalancer": {"ingress": [
                        {"ip": "192.0.2.1", "ipMode": "Proxy", "ports": [{"port": 443, "protocol": "TCP"}]}
                    ]}},
                })),
            ),
            ("already reported", reported.clone(), &one, None),
            (
                "a port added to the Service",
                reported.clone(),
                &[at("192.0.2.1", &[(443, "TCP"), (80, "TCP")])],
                Some(json!({
                    "metadata": {"resourceVersion": "42"},
                    "status": {"loadBalancer": {"ingress": [
                        {"ip": "192.0.2.1", "ipMode": "Proxy", "ports": [
                            {"port": 443, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}
                    ]}},
                })),
            ),
            (
                "released: the list is removed",
                reported.clone(),
                &[],
                Some(json!({
                    "metadata": {"resourceVersion": "42"},
                    "status": {"loadBalancer": {"ingress": null}},
                })),
            ),
            ("nothing to remove", json!({}), &[], None),
            (
                "another load balancer's VIP entry is replaced",
                json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}),
                &[at("192.0.2.1", &[])],
                Some(json!({
                    "metadata": {"resourceVersion": "42"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "Proxy"}]}},
                })),
            ),
        ];
        for (name, status, addresses, want) in cases {
            assert_eq!(
                &patch(&with_status(status.clone()), addresses),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn listeners_per_address_and_tcp_port_with_the_annotated_version() {
        let svc = |annotations: Value| {
            service(json!({
                "metadata": {"namespace": "web", "name": "s", "annotations": annotations},
                "spec": {"type": "LoadBalancer", "ports": [
                    {"name": "https", "port": 443},
                    {"name": "http", "port": 80, "protocol": "TCP"},
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                ]},
            }))
        };
        let addrs = [at("192.0.2.1", &[]), at("2001:db8::1", &[])];
        let l = |a: &str, n: &str| Listener {
            addr: a.parse().unwrap(),
            port_name: n.into(),
        };
        let want = vec![
            l("192.0.2.1:80", "http"),
            l("192.0.2.1:443", "https"),
            l("[2001:db8::1]:80", "http"),
            l("[2001:db8::1]:443", "https"),
        ];
        for (annotations, default, version) in [
            (json!({}), Version::V2, Version::V2),
            (json!({}), Version::V1, Version::V1),
            (
                json!({PROXY_PROTOCOL_ANNOTATION: "v1"}),
                Version::V2,
                Version::V1,
            ),
            (
                json!({PROXY_PROTOCOL_ANNOTATION: " v2 "}),
                Version::V1,
                Version::V2,
            ),
        ] {
            assert_eq!(
                plan(&svc(annotations.clone()), &addrs, default),
                Ok(Plan {
                    regarding: reference(&svc(annotations.clone())),
                    version,
                    listeners: want.clone()
                }),
                "{annotations}"
            );
        }
        let err = plan(
            &svc(json!({PROXY_PROTOCOL_ANNOTATION: "2"})),
            &addrs,
            Version::V2,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "annotation ouroboros.io/proxy-protocol: \"2\" is not a PROXY-protocol version; \
             write v1 or v2 (or remove it for v2); the Service is not served until then"
        );
        let unnamed = service(json!({"metadata": {}, "spec": {"ports": [{"port": 8080}]}}));
        assert_eq!(
            plan(&unnamed, &addrs[..1], Version::V2).unwrap().listeners,
            vec![l("192.0.2.1:8080", "")]
        );
    }
}
