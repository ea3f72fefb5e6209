//! crds: the CustomResourceDefinitions a configuration needs (Gateway API, Traefik, Contour,
//! Istio, external-dns's DNSEndpoint), required or optional, and whether they are installed.

use super::inputs::Got;
use crate::controller::hostnames::{kinds::Kind, kinds::OptIns, kinds::ReadWhen, kinds::Served};
use crate::doctor::report::Check;

/// The CRDs a configuration needs: (name, required). Not required: the controller runs
/// without it (a source kind whose CRD is absent is read as empty, and picked up once the
/// CRD is installed) but reads nothing of that kind. `mode_crd`: the CRD the DNS mode writes
/// (`DnsMode::crd`), required.
pub fn needed_crds(mode_crd: Option<&'static str>, opt_ins: OptIns) -> Vec<(&'static str, bool)> {
    let mut v: Vec<(&'static str, bool)> = crd_kinds(opt_ins)
        .into_iter()
        .map(|k| (k.resource(), false))
        .collect();
    v.extend(mode_crd.map(|crd| (crd, true)));
    v
}

/// The source kinds a configuration reads that are CRDs.
pub fn crd_kinds(opt_ins: OptIns) -> Vec<Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| k.is_crd() && k.is_read(opt_ins, false))
        .collect()
}

/// Where the cluster serves `kind`, as the check says it: the first of its places served,
/// which is where the controller reads it (`None`: served at none, its CRD is not installed).
pub fn where_served(kind: Kind, served: &Served) -> Option<String> {
    let place = kind.served_place(served)?;
    let first = kind.preferred();
    Some(if place == first {
        format!("served at {place}, read there")
    } else {
        format!("served at {place} (not at {first}), read there")
    })
}

/// The flags that read the kinds of these CRDs, each once.
fn flags_reading(crds: &[&str]) -> Vec<&'static str> {
    let mut flags = Vec::new();
    for kind in Kind::ALL
        .into_iter()
        .filter(|k| crds.contains(&k.resource()))
    {
        if let ReadWhen::OptIn(o) = kind.read_when() {
            if !flags.contains(&o.flag()) {
                flags.push(o.flag());
            }
        }
    }
    flags
}

/// `results`: each CRD's name, whether it is required, and what was found of it (`Some`: it
/// is installed, with where it is served when that matters).
pub fn crds(results: &[(&'static str, bool, Got<String>)]) -> Check {
    const ID: &str = "crds";
    if results.is_empty() {
        return Check::skip(
            ID,
            "no custom resources needed (no --gateway-api, --traefik-ingressroutes, \
             --contour-httpproxies or --istio-gateways, no external-dns DNSEndpoints)",
        );
    }
    let mut evidence = Vec::new();
    let (mut missing_required, mut missing_optional) = (Vec::new(), Vec::new());
    for (name, required, got) in results {
        match got {
            Err(e) => return e.check(ID),
            Ok(Some(found)) => evidence.push(format!("{name}: {found}")),
            Ok(None) => {
                evidence.push(format!("{name}: not installed"));
                if *required {
                    missing_required.push(*name);
                } else {
                    missing_optional.push(*name);
                }
            }
        }
    }
    if !missing_required.is_empty() {
        Check::fail(
            ID,
            format!("missing CRD(s): {}", missing_required.join(", ")),
        )
        .evidence_all(evidence)
        .action(
            "install the DNSEndpoint CRD (external-dns's crd manifest), or use \
             --external-dns-output service",
        )
    } else if !missing_optional.is_empty() {
        Check::warn(
            ID,
            format!(
                "CRD(s) not installed, so no hostnames of those kinds are read: {}",
                missing_optional.join(", ")
            ),
        )
        .evidence_all(evidence)
        .action(format!(
            "install them if objects of those kinds are to be hairpinned (the controller picks \
             them up once installed); without them at all, drop {}",
            flags_reading(&missing_optional).join(", ")
        ))
    } else {
        Check::ok(ID, "every CRD this configuration needs is installed").evidence_all(evidence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Status;

    #[test]
    fn crd_verdicts() {
        let none = OptIns::default();
        let gw = OptIns {
            gateway_api: true,
            ..none
        };
        assert!(needed_crds(None, none).is_empty());
        let dnsendpoints = "dnsendpoints.externaldns.k8s.io";
        assert_eq!(
            needed_crds(Some(dnsendpoints), none),
            [(dnsendpoints, true)]
        );
        assert_eq!(needed_crds(None, gw).len(), 4);
        assert!(needed_crds(None, gw).iter().all(|(_, required)| !required));
        for (opt_ins, want) in [
            (
                OptIns {
                    traefik_ingressroutes: true,
                    ..none
                },
                &["ingressroutes.traefik.io", "ingressroutetcps.traefik.io"][..],
            ),
            (
                OptIns {
                    contour_httpproxies: true,
                    ..none
                },
                &["httpproxies.projectcontour.io"],
            ),
            (
                OptIns {
                    istio_gateways: true,
                    ..none
                },
                &["gateways.networking.istio.io"],
            ),
        ] {
            let got = needed_crds(None, opt_ins);
            let names: Vec<&str> = got.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, want);
            assert!(got.iter().all(|(_, required)| !required));
        }
        let r = |req: bool, present: bool| {
            vec![("x.y", req, Ok(present.then(|| "installed".to_string())))]
        };
        assert_eq!(crds(&r(true, true)).status, Status::Ok);
        assert_eq!(crds(&r(true, false)).status, Status::Fail);
        assert_eq!(crds(&r(false, false)).status, Status::Warn);
        assert_eq!(crds(&[]).status, Status::Skip);
        let missing = [
            ("tlsroutes.gateway.networking.k8s.io", false, Ok(None)),
            ("httproutes.gateway.networking.k8s.io", false, Ok(None)),
            ("gateways.networking.istio.io", false, Ok(None)),
        ];
        let action = crds(&missing).action.unwrap();
        assert!(
            action.ends_with("drop --gateway-api, --istio-gateways"),
            "{action}"
        );
    }

    /// A kind served at another of its places is found, and said where.
    #[test]
    fn where_each_kind_is_served() {
        let mut served = Served::default();
        served.insert("networking.istio.io", "v1beta1", "gateways");
        served.insert("traefik.io", "v1alpha1", "ingressroutes");
        served.insert("traefik.containo.us", "v1alpha1", "ingressroutetcps");
        for (kind, want) in [
            (
                Kind::IstioGateway,
                Some(
                    "served at networking.istio.io/v1beta1 (not at networking.istio.io/v1), \
                     read there",
                ),
            ),
            (
                Kind::TraefikIngressRoute,
                Some("served at traefik.io/v1alpha1, read there"),
            ),
            (
                Kind::TraefikIngressRouteTcp,
                Some(
                    "served at traefik.containo.us/v1alpha1 (not at traefik.io/v1alpha1), read \
                     there",
                ),
            ),
            (Kind::ContourHttpProxy, None),
        ] {
            assert_eq!(where_served(kind, &served).as_deref(), want, "{kind}");
        }
        let results: Vec<_> = [Kind::IstioGateway, Kind::ContourHttpProxy]
            .into_iter()
            .map(|k| (k.resource(), false, Ok(where_served(k, &served))))
            .collect();
        let c = crds(&results);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.summary.ends_with("httpproxies.projectcontour.io"),
            "{c:#?}"
        );
        assert!(
            c.evidence[0].starts_with("gateways.networking.istio.io: served at"),
            "{c:#?}"
        );
    }
}
