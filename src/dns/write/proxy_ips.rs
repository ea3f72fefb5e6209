//! The proxy's IP addresses for the etc-hosts and external-dns modes: given by flag, or read from
//! the proxy Service's ClusterIPs (`spec.clusterIPs`: one per family on a dual-stack Service).
//!
//! The Service is read again on every sync rather than cached: a ClusterIP is immutable only
//! while the Service exists (a reinstall allocates new ones, and switching `ipFamilyPolicy` to
//! dual-stack adds one in place), and one GET per sync is small next to the watches every
//! controller keeps. So a record never points at a stale address for longer than one sync.
//!
//! API call: `get` on `services/<name>` in the proxy Service's namespace.

use crate::kube_client::describe;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::api::ListParams;
use kube::{Api, Client};

use super::error::{ObjectKey, Reason, SinkError};
use super::routes::Routes;
use crate::header_verdict::Route;
use crate::target::{DirectFrom, Target};

/// Where the proxy IPs come from.
pub enum ProxyIps {
    /// Given by a flag (never empty).
    Static(Vec<IpAddr>),
    /// The ClusterIPs of a Service, read on each call.
    Service {
        api: Api<Service>,
        namespace: String,
        name: String,
        /// The flag that would make the lookup unnecessary, for error messages.
        flag: &'static str,
        /// Read with `list` (field selector `metadata.name`) rather than `get`: the ingress
        /// controller's Service, which the controller already may `list` and `watch` by name.
        listed: bool,
    },
    /// A target's proxy or its ingress controller, as its pick in `routes` says at each call.
    Routed {
        relay: Box<ProxyIps>,
        direct: Box<ProxyIps>,
        routes: Routes,
        target: Target,
    },
    /// Neither: only usable for removing (`cleanup` without API access); resolving fails.
    Unavailable(String),
}

impl ProxyIps {
    /// The flag's IPs when any, else the Service's ClusterIPs (with a client).
    pub fn new(
        client: Option<Client>,
        ips: &[IpAddr],
        namespace: &str,
        name: &str,
        flag: &'static str,
    ) -> Self {
        if !ips.is_empty() {
            return ProxyIps::Static(ips.to_vec());
        }
        match client {
            Some(client) => ProxyIps::Service {
                api: Api::namespaced(client, namespace),
                namespace: namespace.to_string(),
                name: name.to_string(),
                flag,
                listed: false,
            },
            None => ProxyIps::Unavailable(format!(
                "{flag} is not set and there is no Kubernetes client to read Service \
                 {namespace}/{name}"
            )),
        }
    }

    /// The ingress controller Service's ClusterIPs (`direct-ip=`/--direct-ip when given), for
    /// a direct answer.
    pub fn ingress_controller(
        client: Option<Client>,
        ips: &[IpAddr],
        (namespace, name): (&str, &str),
        flag: &'static str,
    ) -> Self {
        match Self::new(client, ips, namespace, name, flag) {
            ProxyIps::Service {
                api,
                namespace,
                name,
                flag,
                ..
            } => ProxyIps::Service {
                api,
                namespace,
                name,
                flag,
                listed: true,
            },
            other => other,
        }
    }

    /// A target's direct answer as `from` says: the ingress controller Service's ClusterIPs
    /// (its `direct-ip=` when given) or the addresses alone; `None` with neither.
    pub fn direct(
        client: Option<Client>,
        from: DirectFrom<'_>,
        flag: &'static str,
    ) -> Option<Self> {
        match from {
            DirectFrom::Service {
                service: (namespace, name),
                ips,
            } => Some(Self::ingress_controller(
                client,
                ips,
                (namespace, name),
                flag,
            )),
            DirectFrom::Addresses(ips) => Some(ProxyIps::Static(ips.to_vec())),
            DirectFrom::Nothing => None,
        }
    }

    /// `relay` or `direct` as `target`'s pick in `routes` says when resolved.
    pub fn routed(self, direct: ProxyIps, routes: Routes, target: Target) -> Self {
        ProxyIps::Routed {
            relay: Box::new(self),
            direct: Box::new(direct),
            routes,
            target,
        }
    }

    /// The addresses, sorted, IPv4 first, deduplicated; never empty on success.
    pub async fn resolve(&self) -> Result<Vec<IpAddr>, SinkError> {
        match self {
            ProxyIps::Routed {
                relay,
                direct,
                routes,
                target,
            } => match routes.get(*target) {
                Route::Direct => direct.resolve_one().await,
                Route::Relay | Route::Skip => relay.resolve_one().await,
            },
            other => other.resolve_one().await,
        }
    }

    /// One source's addresses (a `Routed` one nested is not: the constructors never nest).
    async fn resolve_one(&self) -> Result<Vec<IpAddr>, SinkError> {
        let (api, namespace, name, flag, listed) = match self {
            ProxyIps::Static(ips) => {
                let mut v = ips.clone();
                v.sort();
                v.dedup();
                return Ok(v);
            }
            ProxyIps::Service {
                api,
                namespace,
                name,
                flag,
                listed,
            } => (api, namespace, name, *flag, *listed),
            ProxyIps::Routed { .. } => {
                return Err(SinkError {
                    reason: Reason::Invalid,
                    object: None,
                    message: "nested answer routes".into(),
                    kept: Box::default(),
                })
            }
            ProxyIps::Unavailable(why) => {
                return Err(SinkError {
                    reason: Reason::Invalid,
                    object: None,
                    message: why.clone(),
                    kept: Box::default(),
                })
            }
        };
        let object = || {
            Some(ObjectKey {
                api_version: "v1",
                kind: "Service",
                namespace: namespace.clone(),
                name: name.clone(),
            })
        };
        let (what, verb) = if listed {
            ("ingress controller Service", "list")
        } else {
            ("proxy Service", "get")
        };
        let read = if listed {
            let lp = ListParams::default().fields(&format!("metadata.name={name}"));
            api.list(&lp).await.map(|l| l.items.into_iter().next())
        } else {
            api.get_opt(name).await
        };
        let svc = match read {
            Ok(Some(svc)) => svc,
            Ok(None) => {
                return Err(SinkError {
                    reason: Reason::NotFound,
                    object: object(),
                    message: if listed {
                        format!(
                            "ingress controller Service {namespace}/{name} not found: check its \
                             name (ingress-controller=, --ingress-controller-service), or pass {flag}"
                        )
                    } else {
                        format!(
                            "proxy Service {namespace}/{name} not found: check --proxy-service-name \
                             and --proxy-service-namespace, or pass {flag}"
                        )
                    },
                    kept: Box::default(),
                })
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Err(SinkError {
                    reason: Reason::Forbidden,
                    object: object(),
                    message: format!(
                    "{verb} services/{name} in {namespace}: forbidden ({}); grant the \
                         controller's ServiceAccount `{verb}` on services (resourceNames: [{name}]) \
                         in namespace {namespace}, or pass {flag}",
                    s.message
                ),
                    kept: Box::default(),
                })
            }
            Err(e) => {
                return Err(SinkError {
                    reason: Reason::Api,
                    object: object(),
                    message: format!("{verb} Service {namespace}/{name}: {}", describe(&e)),
                    kept: Box::default(),
                })
            }
        };
        cluster_ips(&svc).map_err(|e| SinkError {
            reason: Reason::NoClusterIp,
            object: object(),
            message: format!("{what} {namespace}/{name}: {e}; pass {flag} instead"),
            kept: Box::default(),
        })
    }
}

/// A writer's per-target addresses (the default target's first) with the named targets'
/// after it, in `--target` order (index 1 on).
pub fn set_named(ips: &mut Vec<ProxyIps>, named: Vec<ProxyIps>) {
    ips.truncate(1);
    ips.extend(named);
}

/// Each target's addresses (index `i`, the default target's 0) passed through `f`: how a
/// target answered directly gets its ingress controller's.
pub fn route_each(ips: &mut Vec<ProxyIps>, f: impl Fn(ProxyIps, usize) -> ProxyIps) {
    let taken = std::mem::take(ips);
    *ips = taken
        .into_iter()
        .enumerate()
        .map(|(i, p)| f(p, i))
        .collect();
}

/// A Service's ClusterIPs (`spec.clusterIPs`, else `spec.clusterIP`), sorted, IPv4 first.
pub fn cluster_ips(svc: &Service) -> Result<Vec<IpAddr>, String> {
    let spec = svc.spec.as_ref();
    let listed: Vec<&str> = spec
        .and_then(|s| s.cluster_ips.as_ref())
        .filter(|v| !v.is_empty())
        .map(|v| v.iter().map(String::as_str).collect())
        .or_else(|| {
            spec.and_then(|s| s.cluster_ip.as_deref())
                .map(|ip| vec![ip])
        })
        .unwrap_or_default();
    let listed: Vec<&str> = listed.into_iter().filter(|s| !s.is_empty()).collect();
    if listed.is_empty() {
        let kind = spec.and_then(|s| s.type_.as_deref()).unwrap_or("ClusterIP");
        return Err(format!("it has no ClusterIP (type {kind})"));
    }
    if listed.iter().any(|s| s.eq_ignore_ascii_case("None")) {
        return Err("it is headless (clusterIP: None), so it has no ClusterIP".into());
    }
    let mut ips = listed
        .iter()
        .map(|s| {
            s.parse::<IpAddr>()
                .map_err(|_| format!("its ClusterIP {s:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    ips.sort();
    ips.dedup();
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn svc(cluster_ip: Option<&str>, cluster_ips: Option<&[&str]>, type_: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                cluster_ip: cluster_ip.map(String::from),
                cluster_ips: cluster_ips.map(|v| v.iter().map(|s| s.to_string()).collect()),
                type_: type_.map(String::from),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn cluster_ips_table() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (s, want) in [
            (
                svc(Some("10.43.0.5"), None, None),
                Ok(vec![ip("10.43.0.5")]),
            ),
            (
                svc(Some("fd00::5"), Some(&["fd00::5", "10.43.0.5"]), None),
                Ok(vec![ip("10.43.0.5"), ip("fd00::5")]),
            ),
            (
                svc(Some("10.43.0.5"), Some(&["10.43.0.5"]), None),
                Ok(vec![ip("10.43.0.5")]),
            ),
            // Older API servers fill only clusterIP.
            (
                svc(Some("10.43.0.5"), Some(&[]), None),
                Ok(vec![ip("10.43.0.5")]),
            ),
            (svc(Some("None"), Some(&["None"]), None), Err("headless")),
            (
                svc(None, None, Some("ExternalName")),
                Err("type ExternalName"),
            ),
            (svc(Some(""), None, None), Err("no ClusterIP")),
            (Service::default(), Err("no ClusterIP")),
            (svc(Some("10.0.0.300"), None, None), Err("not an IP")),
        ] {
            match (cluster_ips(&s), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(got), Err(want)) => assert!(got.contains(want), "{got}"),
                (got, want) => panic!("{got:?} vs {want:?}"),
            }
        }
    }
}
