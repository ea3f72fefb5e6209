//! The ingress controller: which Service and workload it is, whether kube-proxy short-circuits
//! its load-balancer IP (KEP-1860 `ipMode`), and whether it expects the PROXY protocol
//! (ingress-nginx's ConfigMap, Traefik's entrypoint arguments). Separate from the DNS checks:
//! it judges the far end of the hairpin, not the names that lead there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Service};

use super::{inputs::Got, inputs::Workload, ns_name};
use crate::doctor::report::Check;

/// The ingress controllers whose PROXY-protocol setting doctor can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerKind {
    IngressNginx,
    Traefik,
    Unknown,
}

impl ControllerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::IngressNginx => "ingress-nginx",
            ControllerKind::Traefik => "traefik",
            ControllerKind::Unknown => "unknown",
        }
    }
}

/// The label selector that auto-detection lists Services with.
pub const AUTO_DETECT_SELECTOR: &str = "app.kubernetes.io/name in (ingress-nginx,traefik)";

/// Among auto-detected Services, the ingress controller's: LoadBalancer first, then the one
/// labelled as the controller component (ingress-nginx also ships an admission Service), then
/// by namespace/name. Returns it and the names of the others.
pub fn pick_ingress_service(candidates: &[Service]) -> (Option<&Service>, Vec<String>) {
    let mut sorted: Vec<&Service> = candidates.iter().collect();
    let label = |s: &Service, k: &str| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    sorted.sort_by_key(|s| {
        let lb = s.spec.as_ref().and_then(|p| p.type_.as_deref()) == Some("LoadBalancer");
        let component = label(s, "app.kubernetes.io/component");
        let not_controller = !(component.is_empty() || component == "controller");
        (!lb, not_controller, ns_name(&s.metadata))
    });
    let first = sorted.first().copied();
    let others = sorted
        .iter()
        .skip(1)
        .map(|s| ns_name(&s.metadata))
        .collect();
    (first, others)
}

/// The Deployment or DaemonSet whose pods the Service selects.
pub fn matching_workload<'a>(svc: &Service, workloads: &'a [Workload]) -> Option<&'a Workload> {
    let selector = svc.spec.as_ref()?.selector.as_ref()?;
    if selector.is_empty() {
        return None;
    }
    workloads
        .iter()
        .find(|w| selector.iter().all(|(k, v)| w.labels.get(k) == Some(v)))
}

/// Which ingress controller a Service fronts: its labels, else its workload's images, else its
/// name.
pub fn controller_kind(svc: &Service, workload: Option<&Workload>) -> ControllerKind {
    let classify = |s: &str| {
        let s = s.to_ascii_lowercase();
        if s.contains("ingress-nginx") || s.contains("nginx-ingress") {
            Some(ControllerKind::IngressNginx)
        } else if s.contains("traefik") {
            Some(ControllerKind::Traefik)
        } else {
            None
        }
    };
    let labels = svc.metadata.labels.as_ref();
    let from_labels = ["app.kubernetes.io/name", "app"]
        .iter()
        .filter_map(|k| labels.and_then(|l| l.get(*k)))
        .find_map(|v| classify(v));
    from_labels
        .or_else(|| workload.and_then(|w| w.images.iter().find_map(|i| classify(i))))
        .or_else(|| svc.metadata.name.as_deref().and_then(classify))
        .unwrap_or(ControllerKind::Unknown)
}

/// `given`: the Service's NAMESPACE/NAME and the flag that named it, when one did.
pub fn ingress_service(
    given: Option<(&str, &str)>,
    got: &Got<Service>,
    others: &[String],
    kind: ControllerKind,
) -> Check {
    const ID: &str = "ingress-controller";
    let svc = match got {
        Err(e) => return e.check(ID),
        Ok(None) => {
            return match given {
                Some((f, by)) => Check::fail(ID, format!("Service {f} not found"))
                    .action(format!("check {by} (NAMESPACE/NAME of the ingress controller's Service)")),
                None => Check::warn(ID, "no ingress-nginx or Traefik Service found")
                    .evidence(format!("listed Services with label selector {AUTO_DETECT_SELECTOR:?}"))
                    .action("pass --ingress-controller-service NAMESPACE/NAME to check the ingress controller"),
            }
        }
        Ok(Some(s)) => s,
    };
    let ty = svc
        .spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("ClusterIP");
    let how = match given {
        Some((_, by)) => format!("from {by}"),
        None => "auto-detected".to_string(),
    };
    let mut c = Check::ok(
        ID,
        format!(
            "Service {} ({}, type {ty}, {how})",
            ns_name(&svc.metadata),
            kind.as_str()
        ),
    );
    if !others.is_empty() {
        c = c
            .evidence(format!("also found: {}", others.join(", ")))
            .action("pass --ingress-controller-service NAMESPACE/NAME to check another one");
    }
    c
}

/// KEP-1860: with `ipMode: Proxy` kube-proxy no longer short-circuits the LoadBalancer IP, so
/// in-cluster clients go through the load balancer (and its PROXY header) like everyone else.
pub fn ip_mode(svc: Option<&Service>) -> Check {
    const ID: &str = "kep-1860-ipmode";
    let Some(svc) = svc else {
        return Check::skip(ID, "no ingress controller Service to check");
    };
    let name = ns_name(&svc.metadata);
    let ty = svc.spec.as_ref().and_then(|s| s.type_.as_deref());
    if ty != Some("LoadBalancer") {
        return Check::skip(
            ID,
            format!(
                "Service {name} is type {}, not LoadBalancer: no load-balancer IP to hairpin through",
                ty.unwrap_or("ClusterIP")
            ),
        );
    }
    let ingress = crate::controller::ipmode::load_balancer_ingress(svc);
    // Who assigns the address: ouroboros edge for its class, another load balancer for theirs,
    // else the cloud controller. Said, so the hint fits.
    let class = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref());
    let edge = class == Some(crate::edge::allocate::DEFAULT_CLASS);
    if ingress.is_empty() {
        let check = Check::warn(
            ID,
            format!("Service {name} has no load-balancer address yet"),
        );
        return match class {
            _ if edge => check.action(format!(
                "ouroboros edge serves its class ({}): its Warning Events on the Service say                  why it gave none (kubectl describe service {name}: NoAddressPool,                  AddressPoolExhausted, AddressConflict, InvalidAddressRequest), else check                  that the edge runs with --pools",
                crate::edge::allocate::DEFAULT_CLASS
            )),
            Some(c) => check.action(format!(
                "wait for the load balancer of class {c} to assign one (kubectl get svc -o                  wide), then run doctor again"
            )),
            None => check.action(
                "wait for the cloud controller to assign one (kubectl get svc -o wide), then                  run doctor again",
            ),
        };
    }
    let mut evidence: Vec<String> = ingress
        .iter()
        .map(|i| {
            format!(
                "{}: ipMode {}",
                i.ip.as_deref().or(i.hostname.as_deref()).unwrap_or("?"),
                i.ip_mode.as_deref().unwrap_or("unset (VIP)")
            )
        })
        .collect();
    evidence.extend(class.map(|c| format!("loadBalancerClass {c}")));
    let proxy = ingress
        .iter()
        .filter(|i| i.ip_mode.as_deref() == Some("Proxy"))
        .count();
    if proxy == 0 {
        Check::ok(
            ID,
            "ipMode is VIP: kube-proxy short-circuits the load-balancer IP, so in-cluster clients \
             skip the load balancer and its PROXY header; ouroboros is needed",
        )
        .evidence_all(evidence)
    } else if proxy == ingress.len() && edge {
        Check::ok(
            ID,
            "ipMode is Proxy, written by ouroboros edge, the load balancer of this Service's \
             class: in-cluster clients go through the edge and get its PROXY header like \
             everyone else, so the controller leaves this target's names out",
        )
        .evidence_all(evidence)
    } else if proxy == ingress.len() {
        Check::warn(
            ID,
            "ipMode is Proxy (KEP-1860): in-cluster traffic already goes through the load \
             balancer, so the hairpin path does not exist and ouroboros may be unnecessary",
        )
        .evidence_all(evidence)
        .action(
            "check that the CNI honours ipMode (if it replaces kube-proxy); if it does, \
             ouroboros can be removed",
        )
    } else {
        Check::warn(
            ID,
            "ipMode differs between the load-balancer addresses: clients of the VIP ones still \
             hairpin",
        )
        .evidence_all(evidence)
        .action("keep ouroboros until every address reports ipMode Proxy")
    }
}

/// Where ingress-nginx reads its settings: `--configmap=NS/NAME`, or None when the flag is
/// absent (built-in defaults).
pub fn nginx_configmap(workload: &Workload) -> Option<(String, String)> {
    let mut args = workload.args.iter();
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--configmap") {
            Some(rest) if rest.starts_with('=') => rest[1..].to_string(),
            Some("") => args.next().cloned().unwrap_or_default(),
            _ => continue,
        };
        let value = value.replace("$(POD_NAMESPACE)", &workload.namespace);
        return Some(match value.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (workload.namespace.clone(), value),
        });
    }
    None
}

/// Traefik entrypoints with PROXY protocol enabled by argument
/// (`--entryPoints.NAME.proxyProtocol.trustedIPs=...` or `...proxyProtocol.insecure[=true]`).
pub fn traefik_proxy_entrypoints(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for a in args {
        let Some(rest) = a
            .strip_prefix("--")
            .filter(|r| r.to_ascii_lowercase().starts_with("entrypoints."))
            .map(|r| &r["entrypoints.".len()..])
        else {
            continue;
        };
        let (key, value) = rest.split_once('=').unwrap_or((rest, "true"));
        let lower = key.to_ascii_lowercase();
        let Some((ep, setting)) = lower.split_once(".proxyprotocol.") else {
            continue;
        };
        let on = match setting {
            "trustedips" => !value.trim().is_empty(),
            "insecure" => value.eq_ignore_ascii_case("true"),
            _ => false,
        };
        if on {
            let name = &key[..ep.len()];
            out.insert(name.to_string(), format!("{setting}={value}"));
        }
    }
    out
}

const NOT_NEEDED: &str = "ouroboros is not needed for this controller, and hairpinned requests \
                          would fail there: the proxy's PROXY header is not expected";

/// Does the ingress controller expect the PROXY protocol?
pub fn proxy_protocol(
    kind: ControllerKind,
    workload: Option<&Workload>,
    nginx_cm: Option<(&(String, String), &Got<ConfigMap>)>,
) -> Check {
    const ID: &str = "proxy-protocol";
    match kind {
        ControllerKind::Unknown => Check::skip(
            ID,
            "doctor reads the PROXY-protocol setting of ingress-nginx and Traefik only",
        )
        .action("check by hand that the ingress controller accepts the PROXY protocol on the ports the proxy targets"),
        ControllerKind::IngressNginx => {
            let Some(((ns, name), got)) = nginx_cm else {
                return match workload {
                    Some(w) => Check::warn(
                        ID,
                        "ingress-nginx runs without --configmap, so use-proxy-protocol is false",
                    )
                    .evidence(w.reference())
                    .action(NOT_NEEDED),
                    None => Check::skip(ID, "the ingress-nginx workload was not found"),
                };
            };
            let cm = match got {
                Err(e) => return e.check(ID),
                Ok(None) => {
                    return Check::warn(
                        ID,
                        format!("ConfigMap {ns}/{name} not found, so use-proxy-protocol is false"),
                    )
                    .action(NOT_NEEDED)
                }
                Ok(Some(cm)) => cm,
            };
            let value = cm
                .data
                .as_ref()
                .and_then(|d| d.get("use-proxy-protocol"))
                .map(|v| v.trim().to_string());
            let evidence = format!(
                "ConfigMap {ns}/{name}: use-proxy-protocol={}",
                value.as_deref().map_or("unset".into(), |v| format!("{v:?}"))
            );
            if value.as_deref() == Some("true") {
                Check::ok(ID, "ingress-nginx expects the PROXY protocol").evidence(evidence)
            } else {
                Check::warn(ID, "ingress-nginx does not expect the PROXY protocol")
                    .evidence(evidence)
                    .action(NOT_NEEDED)
            }
        }
        ControllerKind::Traefik => {
            let Some(w) = workload else {
                return Check::skip(ID, "the Traefik workload was not found");
            };
            let eps = traefik_proxy_entrypoints(&w.args);
            if eps.is_empty() {
                Check::warn(
                    ID,
                    "Traefik has no --entryPoints.*.proxyProtocol.* argument",
                )
                .evidence(w.reference())
                .action(format!(
                    "if its static configuration file enables proxyProtocol, ignore this; \
                     otherwise {NOT_NEEDED}"
                ))
            } else {
                let mut c = Check::ok(ID, "Traefik expects the PROXY protocol")
                    .evidence(w.reference())
                    .evidence_all(
                        eps.iter()
                            .map(|(ep, s)| format!("entrypoint {ep}: proxyProtocol.{s}")),
                    );
                if eps.values().all(|s| s.starts_with("trustedips")) {
                    c = c.action(
                        "trustedIPs must include the proxy pods' addresses (the pod CIDR), or \
                         Traefik ignores their PROXY headers",
                    );
                }
                c
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::fixtures::cm;
    use crate::doctor::checks::inputs::ApiFailure;
    use crate::doctor::report::Status;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn lb(ingress: serde_json::Value) -> Service {
        svc(json!({
            "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx",
                         "labels": {"app.kubernetes.io/name": "ingress-nginx"}},
            "spec": {"type": "LoadBalancer", "selector": {"app": "x"}},
            "status": {"loadBalancer": {"ingress": ingress}}
        }))
    }

    #[test]
    fn ip_mode_verdicts() {
        for (ingress, want) in [
            (json!([]), Status::Warn),
            (json!([{"ip": "203.0.113.7"}]), Status::Ok),
            (json!([{"ip": "203.0.113.7", "ipMode": "VIP"}]), Status::Ok),
            (
                json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}]),
                Status::Warn,
            ),
            (
                json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}, {"ip": "203.0.113.8", "ipMode": "VIP"}]),
                Status::Warn,
            ),
        ] {
            let c = ip_mode(Some(&lb(ingress.clone())));
            assert_eq!(c.status, want, "{ingress}");
        }
        let np = svc(json!({"metadata": {"name": "t"}, "spec": {"type": "NodePort"}}));
        assert_eq!(ip_mode(Some(&np)).status, Status::Skip);
        assert_eq!(ip_mode(None).status, Status::Skip);
        let proxy = ip_mode(Some(&lb(json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}]))));
        assert!(proxy.summary.contains("may be unnecessary"), "{proxy:?}");
        assert_eq!(proxy.evidence, ["203.0.113.7: ipMode Proxy"]);
    }

    /// The load balancer's class says who assigns the address and writes ipMode: the hint
    /// names ouroboros edge and its Events for its class, the class for another.
    #[test]
    fn ip_mode_names_the_load_balancer_class() {
        let classed = |class: &str, ingress: serde_json::Value| {
            let mut s = lb(ingress);
            s.spec.as_mut().unwrap().load_balancer_class = Some(class.into());
            ip_mode(Some(&s))
        };
        let edge = classed(
            "ouroboros.io/edge",
            json!([{"ip": "192.0.2.1", "ipMode": "Proxy"}]),
        );
        assert_eq!(edge.status, Status::Ok, "{edge:?}");
        assert!(
            edge.summary.contains("written by ouroboros edge"),
            "{edge:?}"
        );
        assert_eq!(
            edge.evidence,
            [
                "192.0.2.1: ipMode Proxy",
                "loadBalancerClass ouroboros.io/edge"
            ]
        );
        let waiting = classed("ouroboros.io/edge", json!([]));
        assert_eq!(waiting.status, Status::Warn);
        let action = waiting.action.as_deref().unwrap();
        assert!(
            action.contains("AddressPoolExhausted") && !action.contains("cloud"),
            "{action}"
        );
        let other = classed("example.com/lb", json!([]));
        let action = other.action.as_deref().unwrap();
        assert!(action.contains("class example.com/lb"), "{action}");
        let other = classed(
            "example.com/lb",
            json!([{"ip": "192.0.2.1", "ipMode": "Proxy"}]),
        );
        assert_eq!(
            other.status,
            Status::Warn,
            "only the edge's is known to be ours"
        );
    }

    #[test]
    fn picks_the_load_balancer_controller_service() {
        let s = |ns: &str, name: &str, ty: &str, component: &str| {
            svc(json!({
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"app.kubernetes.io/component": component}},
                "spec": {"type": ty}
            }))
        };
        let all = [
            s(
                "ingress-nginx",
                "ingress-nginx-controller-admission",
                "ClusterIP",
                "controller",
            ),
            s(
                "ingress-nginx",
                "ingress-nginx-controller",
                "LoadBalancer",
                "controller",
            ),
            s("kube-system", "traefik", "LoadBalancer", ""),
        ];
        let (first, others) = pick_ingress_service(&all);
        assert_eq!(
            first.unwrap().metadata.name.as_deref(),
            Some("ingress-nginx-controller")
        );
        assert_eq!(
            others,
            [
                "kube-system/traefik",
                "ingress-nginx/ingress-nginx-controller-admission"
            ]
        );
        assert_eq!(pick_ingress_service(&[]).0, None);
    }

    fn workload(args: &[&str], image: &str) -> Workload {
        Workload {
            kind: "Deployment",
            namespace: "ingress-nginx".into(),
            name: "ingress-nginx-controller".into(),
            labels: [("app".to_string(), "x".to_string())].into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            images: vec![image.into()],
            memory_limits: BTreeMap::new(),
        }
    }

    #[test]
    fn controller_kinds() {
        let plain = svc(
            json!({"metadata": {"name": "edge-lb", "namespace": "n"}, "spec": {"selector": {"app": "x"}}}),
        );
        let w = workload(&[], "docker.io/library/traefik:v3.1");
        assert_eq!(controller_kind(&plain, Some(&w)), ControllerKind::Traefik);
        assert_eq!(controller_kind(&plain, None), ControllerKind::Unknown);
        assert_eq!(
            controller_kind(&lb(json!([])), None),
            ControllerKind::IngressNginx
        );
        assert_eq!(
            matching_workload(&plain, std::slice::from_ref(&w)),
            Some(&w)
        );
        let other = svc(json!({"metadata": {"name": "x"}, "spec": {"selector": {"app": "y"}}}));
        assert_eq!(matching_workload(&other, std::slice::from_ref(&w)), None);
    }

    #[test]
    fn nginx_configmap_arg() {
        for (args, want) in [
            (
                vec![
                    "/nginx-ingress-controller",
                    "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller",
                ],
                Some(("ingress-nginx", "ingress-nginx-controller")),
            ),
            (vec!["--configmap", "other/cm"], Some(("other", "cm"))),
            (vec!["--configmap=cm"], Some(("ingress-nginx", "cm"))),
            (vec!["--configmap-x=a/b", "--election-id=x"], None),
        ] {
            let got = nginx_configmap(&workload(&args, "i"));
            assert_eq!(
                got,
                want.map(|(a, b)| (a.to_string(), b.to_string())),
                "{args:?}"
            );
        }
    }

    #[test]
    fn traefik_entrypoints() {
        let args: Vec<String> = [
            "--entryPoints.websecure.proxyProtocol.trustedIPs=10.42.0.0/16",
            "--entrypoints.web.proxyprotocol.insecure",
            "--entryPoints.metrics.proxyProtocol.insecure=false",
            "--entryPoints.websecure.address=:8443/tcp",
            "--providers.kubernetesingress",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = traefik_proxy_entrypoints(&args);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("web".to_string(), "insecure=true".to_string()),
                (
                    "websecure".to_string(),
                    "trustedips=10.42.0.0/16".to_string()
                ),
            ]
        );
    }

    #[test]
    fn proxy_protocol_verdicts() {
        let key = (
            "ingress-nginx".to_string(),
            "ingress-nginx-controller".to_string(),
        );
        let w = workload(&[], "registry.k8s.io/ingress-nginx/controller:v1.11.2");
        for (got, want) in [
            (
                Ok(Some(cm(json!({"use-proxy-protocol": "true"})))),
                Status::Ok,
            ),
            (
                Ok(Some(cm(json!({"use-proxy-protocol": "false"})))),
                Status::Warn,
            ),
            (Ok(Some(cm(json!({})))), Status::Warn),
            (Ok(None), Status::Warn),
            (
                Err(ApiFailure {
                    verb: "get",
                    resource: "configmaps".into(),
                    namespace: Some("ingress-nginx".into()),
                    name: Some("ingress-nginx-controller".into()),
                    code: Some(403),
                    timed_out: false,
                    message: "forbidden".into(),
                }),
                Status::Fail,
            ),
        ] {
            let c = proxy_protocol(ControllerKind::IngressNginx, Some(&w), Some((&key, &got)));
            assert_eq!(c.status, want, "{got:?}");
        }
        assert_eq!(
            proxy_protocol(ControllerKind::IngressNginx, Some(&w), None).status,
            Status::Warn
        );
        let mut t = workload(&["--entryPoints.web.proxyProtocol.insecure"], "traefik");
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, Some(&t), None).status,
            Status::Ok
        );
        t.args.clear();
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, Some(&t), None).status,
            Status::Warn
        );
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, None, None).status,
            Status::Skip
        );
        assert_eq!(
            proxy_protocol(ControllerKind::Unknown, None, None).status,
            Status::Skip
        );
    }
}
