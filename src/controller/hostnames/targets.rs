//! Proxy targets: which sources a named target takes (its IngressClasses, GatewayClasses and
//! Gateways), parsed from `--target`, and the rule that settles a hostname two targets claim.
//! Separate: the mapping is configuration, [`desired`](super::desired) only applies it.
//!
//! Everything no named target takes goes to the default target (the proxy of
//! `--proxy-service-name`), under the `--ingress-class` and `--gateway-class` filters as before.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::Filters;
use crate::dns_name::{is_label, is_subdomain, LABEL_SYNTAX};
use crate::flags::parse_answer_ip;
use crate::header_verdict::AnswerPick;
use crate::header_verdict::{ConfigRef, HeaderSource, SourceKind};
use crate::target::{AnswerRule, Target, TargetRule, DEFAULT_TARGET};

/// The annotation that settles a hostname claimed by objects of two targets: the higher integer
/// wins (absent or not an integer: 0).
pub const PRIORITY_ANNOTATION: &str = "ouroboros.io/priority";

/// Where an Ingress of class `class` goes, its IngressClass naming `controller` (`None`: no
/// such IngressClass, or no `spec.controller`): a target, or `None` when the default target's
/// filters leave it out.
///
/// The controller is the truth of who serves the Ingress, the class name only a label (Traefik
/// 3.6+ serves `ingressClassName: nginx`), so:
/// 1. the first target (named, then the default's `--ingress-class-controller`) listing the
///    controller takes it;
/// 2. else the first named target listing the class name, unless that target lists
///    controllers and the class names another one;
/// 3. else the default target, under `--ingress-class` and `--ingress-class-controller`
///    (with either set, only the class named, with the same proviso).
pub(super) fn for_ingress(
    filters: &Filters,
    class: Option<&str>,
    controller: Option<&str>,
) -> Option<Target> {
    let rules = filters.targets.as_slice();
    if let Some(k) = controller {
        if let Some(t) = position(rules, |r| r.ingress_class_controllers.contains(k)) {
            return Some(t);
        }
        if filters.ingress_class_controllers.contains(k) {
            return Some(Target::Default);
        }
    }
    // A controller listed by a target claiming the name would have matched above.
    let by_name = |classes: &BTreeSet<String>, controllers: &BTreeSet<String>| {
        class.is_some_and(|c| classes.contains(c))
            && (controllers.is_empty() || controller.is_none())
    };
    if let Some(t) = position(rules, |r| {
        by_name(&r.ingress_classes, &r.ingress_class_controllers)
    }) {
        return Some(t);
    }
    let default_classes: BTreeSet<String> = super::non_empty(filters.ingress_class.as_deref())
        .map(str::to_string)
        .into_iter()
        .collect();
    if default_classes.is_empty() && filters.ingress_class_controllers.is_empty() {
        return Some(Target::Default);
    }
    by_name(&default_classes, &filters.ingress_class_controllers).then_some(Target::Default)
}

/// Where a Traefik IngressRoute (or IngressRouteTCP) goes whose `kubernetes.io/ingress.class`
/// annotation names `class` (Traefik's `providers.kubernetesCRD.ingressClass` picks the
/// instance that serves it by this annotation), its IngressClass naming `controller`: the
/// named target an Ingress of that class goes to, else the default target. The default
/// target's `--ingress-class` filters Ingresses only, as before: a route is never left out by
/// its annotation.
pub(super) fn for_annotated_route(
    filters: &Filters,
    class: &str,
    controller: Option<&str>,
) -> Target {
    match for_ingress(filters, Some(class), controller) {
        Some(named @ Target::Named(_)) => named,
        Some(Target::Default) | None => Target::Default,
    }
}

/// The first rule naming the Gateway, else the first taking its class.
pub(super) fn for_gateway(
    rules: &[TargetRule],
    namespace: &str,
    name: &str,
    class: &str,
) -> Option<Target> {
    position(rules, |r| {
        r.gateways.iter().any(|(n, g)| n == namespace && g == name)
    })
    .or_else(|| position(rules, |r| r.gateway_classes.contains(class)))
}

fn position(rules: &[TargetRule], f: impl Fn(&TargetRule) -> bool) -> Option<Target> {
    rules
        .iter()
        .position(f)
        .and_then(|i| u16::try_from(i).ok())
        .map(Target::Named)
}

/// The object's `ouroboros.io/priority`, 0 when absent or not an integer.
pub(super) fn priority(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(PRIORITY_ANNOTATION))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Parses one `--target`: comma-separated `key=value` pairs, `name` and `service` once, the
/// mapping keys and `proxy-ip` repeatable:
/// `name=traefik,service=ouroboros/ouroboros-proxy-traefik,ingress-class=traefik,gateway-class=traefik,gateway=infra/public`.
/// `service` without a namespace is in `--proxy-service-namespace`.
pub fn parse_target(spec: &str) -> Result<TargetRule, String> {
    let mut rule = TargetRule::default();
    let mut service = None;
    let (mut kind, mut config) = (None, None);
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "name" if !rule.name.is_empty() => return Err("name is given twice".into()),
            "service" if service.is_some() => return Err("service is given twice".into()),
            "name" => rule.name = value.to_string(),
            "service" => service = Some(value.to_string()),
            "ingress-class" => {
                rule.ingress_classes.insert(class(key, value)?);
            }
            "ingress-class-controller" => {
                rule.ingress_class_controllers.insert(
                    parse_class_controller(value)
                        .map_err(|e| format!("ingress-class-controller: {e}"))?,
                );
            }
            "gateway-class" => {
                rule.gateway_classes.insert(class(key, value)?);
            }
            "ingress-controller" if rule.ingress_controller.is_some() => {
                return Err("ingress-controller is given twice".into())
            }
            "ingress-controller" => rule.ingress_controller = Some(parse_namespaced(value)?),
            "answer" => rule.answer = AnswerPick::parse(value)?,
            "ingress-controller-kind" if kind.is_some() => {
                return Err("ingress-controller-kind is given twice".into())
            }
            "ingress-controller-kind" => kind = Some(SourceKind::parse(value)?),
            "ingress-controller-config" if config.is_some() => {
                return Err("ingress-controller-config is given twice".into())
            }
            "ingress-controller-config" => config = Some(value.to_string()),
            "direct-ip" => rule
                .direct_ips
                .push(parse_answer_ip(value).map_err(|e| format!("direct-ip: {e}"))?),
            "proxy-ip" => rule
                .proxy_ips
                .push(parse_answer_ip(value).map_err(|e| format!("proxy-ip: {e}"))?),
            "gateway" => {
                let g = crate::flags::parse_namespaced_name(value)
                    .map_err(|e| format!("gateway {e}"))?;
                rule.gateways.insert((g.namespace, g.name));
            }
            other => {
                return Err(format!(
                    "unknown key {other:?} (known: name, service, ingress-class, \
                     ingress-class-controller, gateway-class, gateway, proxy-ip, ingress-controller, answer, ingress-controller-kind, \
                     ingress-controller-config, direct-ip)"
                ))
            }
        }
    }
    if rule.name.is_empty() {
        return Err("name=NAME is missing".into());
    }
    rule.controller_config = header_source(kind, config.as_deref())?;
    if !is_label(&rule.name) {
        return Err(format!(
            "name {:?} is not a DNS label ({LABEL_SYNTAX})",
            rule.name
        ));
    }
    if rule.name == DEFAULT_TARGET {
        return Err(format!(
            "name {DEFAULT_TARGET:?} is the target of --proxy-service-name; pick another"
        ));
    }
    let service = service.ok_or("service=[NAMESPACE/]NAME is missing")?;
    rule.service = namespaced(&service)
        .ok_or_else(|| format!("service {service:?} is not [NAMESPACE/]NAME"))?;
    if rule.ingress_classes.is_empty()
        && rule.ingress_class_controllers.is_empty()
        && rule.gateway_classes.is_empty()
        && rule.gateways.is_empty()
    {
        return Err(
            "it takes no sources: give ingress-class=, ingress-class-controller=, \
                    gateway-class= or gateway= (repeatable)"
                .into(),
        );
    }
    Ok(rule)
}

/// Where the header verdict comes from, by a kind and a `[daemonset/]NAMESPACE/NAME`: a
/// controller kind needs the object, `probe` takes none (it knocks on the ingress controller
/// Service; [`check_answer`] checks that one is named), and neither gives nothing
/// (`--ingress-controller-kind` and `--ingress-controller-config` likewise).
pub fn header_source(
    kind: Option<SourceKind>,
    config: Option<&str>,
) -> Result<Option<HeaderSource>, String> {
    match (kind, config) {
        (None, None) => Ok(None),
        (Some(SourceKind::Probe), None) => Ok(Some(HeaderSource::Probe)),
        (Some(SourceKind::Probe), Some(c)) => Err(format!(
            "ingress-controller-kind=probe knocks on the ingress controller Service and reads \
             no configuration object: drop ingress-controller-config= ({c}), or name the \
             controller's kind to read that object"
        )),
        (Some(SourceKind::Read(kind)), Some(c)) => {
            ConfigRef::parse(kind, c).map(|c| Some(HeaderSource::Object(c)))
        }
        (Some(k), None) => Err(format!(
            "ingress-controller-kind={} needs ingress-controller-config= (the object that says \
             whether {} takes the PROXY header; see docs/targets.md), or use \
             ingress-controller-kind=probe to knock on its Service instead",
            k.as_str(),
            k.as_str()
        )),
        (None, Some(_)) => Err(
            "ingress-controller-config= needs ingress-controller-kind= (which controller's \
             configuration it is)"
                .into(),
        ),
    }
}

/// Checks what an answer needs, for a target named `name`, given whether its ingress
/// controller Service and its `direct-ip=` addresses are named (`service_flag`, `ip_flag`: how
/// the operator names them there): `direct`, and `auto` with a header source (which may pick
/// direct), answer with the ingress controller Service's ClusterIPs; `probe` knocks on the
/// Service itself, which addresses alone do not give (nor its ports).
pub fn check_answer(
    name: &str,
    answer: AnswerPick,
    config: Option<&HeaderSource>,
    (has_service, has_ips): (bool, bool),
    (service_flag, ip_flag): (&str, &str),
) -> Result<(), String> {
    if config == Some(&HeaderSource::Probe) && !has_service {
        return Err(format!(
            "target {name}: ingress-controller-kind=probe knocks on the ingress controller \
             Service (its ClusterIP and port 443 or 80): name the Service with {service_flag}"
        ));
    }
    if has_service || has_ips {
        return Ok(());
    }
    match answer {
        AnswerPick::Direct => Err(format!(
            "target {name}: answer direct answers with the ingress controller Service's \
             ClusterIPs: name the Service with {service_flag} (or give its ClusterIPs with \
             {ip_flag})"
        )),
        AnswerPick::Auto if config.is_some() => Err(format!(
            "target {name}: answer auto with an ingress controller configuration may answer \
             directly with the ingress controller Service's ClusterIPs: name the Service with \
             {service_flag} (or give its ClusterIPs with {ip_flag}), or set the answer to relay"
        )),
        _ => Ok(()),
    }
}

/// Checks that each target's direct answer can be written when the CoreDNS answer is a name
/// (`rewrite`): the ingress controller Service's name, which `direct-ip=` (`--direct-ip`)
/// alone does not give. Without this a direct pick would silently go through the relay.
pub fn check_direct_by_name(rules: &[AnswerRule], names: &[TargetRule]) -> Result<(), String> {
    for r in rules {
        let may_go_direct =
            r.answer == AnswerPick::Direct || (r.answer == AnswerPick::Auto && r.config.is_some());
        if may_go_direct && r.controller_service.is_none() {
            let flag = match r.target {
                Target::Default => "--ingress-controller-service NAMESPACE/NAME",
                Target::Named(_) => "ingress-controller=NAMESPACE/NAME",
            };
            return Err(format!(
                "target {}: answer {} may answer directly, and --coredns-answer rewrite answers \
                 with the ingress controller Service's name, which direct-ip= alone does not \
                 give: name the Service with {flag}, or use --coredns-answer template",
                r.target.name(names),
                r.answer.as_str()
            ));
        }
    }
    Ok(())
}

/// `NAMESPACE/NAME` of a Service, as `--ingress-controller-service` and `ingress-controller=`
/// take it (`flags::parse_service_name`'s rule, as a pair).
pub fn parse_namespaced(s: &str) -> Result<(String, String), String> {
    crate::flags::parse_service_name(s).map(|n| (n.namespace, n.name))
}

/// An IngressClass `spec.controller` value as `ingress-class-controller=` and
/// `--ingress-class-controller` take it: `DOMAIN/PATH`, as the API server requires of the field
/// (a domain-prefixed path of at most 250 characters), e.g. `k8s.io/ingress-nginx`.
pub fn parse_class_controller(s: &str) -> Result<String, String> {
    let s = s.trim();
    let path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+=:".contains(c);
    match s.split_once('/') {
        Some((domain, path))
            if s.len() <= 250
                && is_subdomain(domain)
                && !path.is_empty()
                && path.chars().all(path_char) =>
        {
            Ok(s.to_string())
        }
        _ => Err(format!(
            "{s:?} is not an IngressClass controller value: DOMAIN/PATH as the IngressClass's \
             spec.controller says it, e.g. k8s.io/ingress-nginx or traefik.io/ingress-controller \
             (kubectl get ingressclass -o custom-columns=NAME:.metadata.name,CONTROLLER:.spec.controller)"
        )),
    }
}

/// Checks a whole `--target` list: unique names, each class, controller value and Gateway
/// taken once; `default_controllers` are the default target's (`--ingress-class-controller`).
pub fn check_targets(
    rules: &[TargetRule],
    default_controllers: &BTreeSet<String>,
) -> Result<(), String> {
    if rules.len() > usize::from(u16::MAX) {
        return Err("too many --target flags".into());
    }
    let mut names = BTreeSet::new();
    // "ingress-class=nginx" and the like, with the target that takes it.
    let mut taken: BTreeMap<String, String> = default_controllers
        .iter()
        .map(|c| {
            (
                format!("ingress-class-controller={c}"),
                "--ingress-class-controller".to_string(),
            )
        })
        .collect();
    for r in rules {
        check_answer(
            &r.name,
            r.answer,
            r.controller_config.as_ref(),
            (r.ingress_controller.is_some(), !r.direct_ips.is_empty()),
            ("ingress-controller=NAMESPACE/NAME", "direct-ip=IP"),
        )?;
        if !names.insert(r.name.as_str()) {
            return Err(format!("--target name {:?} is given twice", r.name));
        }
        let keys = r
            .ingress_classes
            .iter()
            .map(|c| format!("ingress-class={c}"))
            .chain(
                r.ingress_class_controllers
                    .iter()
                    .map(|c| format!("ingress-class-controller={c}")),
            )
            .chain(
                r.gateway_classes
                    .iter()
                    .map(|c| format!("gateway-class={c}")),
            )
            .chain(r.gateways.iter().map(|(n, g)| format!("gateway={n}/{g}")));
        for k in keys {
            if let Some(other) = taken.get(&k) {
                return Err(format!(
                    "{k} is taken by both {other} and --target {}",
                    r.name
                ));
            }
            taken.insert(k, format!("--target {}", r.name));
        }
    }
    Ok(())
}

fn class(key: &str, value: &str) -> Result<String, String> {
    if is_subdomain(value) {
        Ok(value.to_string())
    } else {
        Err(format!("{key} {value:?} is not a class name"))
    }
}

/// `NAMESPACE/NAME` or `NAME`, both DNS labels (a Gateway's name may be a subdomain).
fn namespaced(s: &str) -> Option<(Option<String>, String)> {
    let (ns, name) = match s.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, s),
    };
    if ns.is_some_and(|n| !is_label(n)) || !is_subdomain(name) {
        return None;
    }
    Some((ns.map(str::to_string), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_target_specs() {
        let r = parse_target(
            "name=traefik, service=ouroboros/proxy-traefik, ingress-class=traefik, \
             ingress-class=traefik-internal, gateway-class=traefik, gateway=infra/public",
        )
        .unwrap();
        assert_eq!(r.name, "traefik");
        assert_eq!(
            r.service,
            (Some("ouroboros".into()), "proxy-traefik".into())
        );
        assert_eq!(
            r.ingress_classes,
            ["traefik".to_string(), "traefik-internal".to_string()].into()
        );
        assert_eq!(
            r.gateways,
            [("infra".to_string(), "public".to_string())].into()
        );
        let r = parse_target(
            "name=a,service=proxy-a,gateway=ns/gw,proxy-ip=10.0.0.7,proxy-ip=fd00::7,\
             ingress-controller=traefik/traefik",
        )
        .unwrap();
        assert_eq!(r.service, (None, "proxy-a".into()));
        assert_eq!(
            r.ingress_controller,
            Some(("traefik".to_string(), "traefik".to_string()))
        );
        assert_eq!(
            r.proxy_ips,
            [
                "10.0.0.7".parse::<std::net::IpAddr>().unwrap(),
                "fd00::7".parse().unwrap()
            ]
        );

        for (spec, err) in [
            ("service=x,ingress-class=a", "name=NAME is missing"),
            (
                "name=a,ingress-class=a",
                "service=[NAMESPACE/]NAME is missing",
            ),
            ("name=a,service=x", "takes no sources"),
            ("name=A,service=x,ingress-class=a", "not a DNS label"),
            (
                "name=default,service=x,ingress-class=a",
                "--proxy-service-name",
            ),
            (
                "name=a,name=b,service=x,ingress-class=a",
                "name is given twice",
            ),
            (
                "name=a,service=x,service=y,ingress-class=a",
                "service is given twice",
            ),
            ("name=a,service=x,gateway=gw", "not NAMESPACE/NAME"),
            (
                "name=a,service=x/y/z,ingress-class=a",
                "not [NAMESPACE/]NAME",
            ),
            (
                "name=a,service=x,ingres-class=a",
                "unknown key \"ingres-class\"",
            ),
            ("name=a,service=x,ingress-class", "not key=value"),
            ("name=a,service=x,ingress-class=a b", "not a class name"),
            (
                "name=a,service=x,ingress-class=a,proxy-ip=10.0.0",
                "not an IP address",
            ),
            (
                "name=a,service=x,ingress-class=a,ingress-controller=traefik",
                "not NAMESPACE/NAME",
            ),
            (
                "name=a,service=x,ingress-class=a,answer=proxy",
                "not one of auto, relay, direct, skip",
            ),
            (
                "name=a,service=x,ingress-class=a,ingress-controller-kind=traefik",
                "needs ingress-controller-config=",
            ),
            (
                "name=a,service=x,ingress-class=a,ingress-controller-config=t/t",
                "needs ingress-controller-kind=",
            ),
            (
                "name=a,service=x,ingress-class=a,ingress-controller-kind=nginx,\
                 ingress-controller-config=t/t",
                "is not one of ingress-nginx",
            ),
            (
                "name=a,service=x,ingress-class=a,direct-ip=x",
                "direct-ip: ",
            ),
        ] {
            let got = parse_target(spec).unwrap_err();
            assert!(got.contains(err), "{spec}: {got}");
        }
    }

    #[test]
    fn answers_and_what_they_need() {
        let r = parse_target(
            "name=t,service=p,ingress-class=traefik,answer=direct,ingress-controller=traefik/traefik,\
             ingress-controller-kind=traefik,ingress-controller-config=daemonset/traefik/traefik,\
             direct-ip=10.43.0.9",
        )
        .unwrap();
        assert_eq!(r.answer, AnswerPick::Direct);
        let Some(HeaderSource::Object(c)) = r.controller_config.as_ref() else {
            panic!("{:?}", r.controller_config)
        };
        assert_eq!(
            (c.kind, c.resource.kind),
            (crate::header_verdict::ControllerKind::Traefik, "DaemonSet")
        );
        assert_eq!(
            r.direct_ips,
            ["10.43.0.9".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(
            parse_target("name=t,service=p,ingress-class=x")
                .unwrap()
                .answer,
            AnswerPick::Auto
        );
        // direct, and auto that may pick direct, need the ingress controller Service.
        for (spec, err) in [
            (
                "name=t,service=p,ingress-class=x,answer=direct",
                Some("answer direct"),
            ),
            (
                "name=t,service=p,ingress-class=x,ingress-controller-kind=ingress-nginx,\
                 ingress-controller-config=ingress-nginx/ingress-nginx-controller",
                Some("answer auto"),
            ),
            (
                "name=t,service=p,ingress-class=x,answer=direct,direct-ip=10.0.0.1",
                None,
            ),
            ("name=t,service=p,ingress-class=x", None),
            ("name=t,service=p,ingress-class=x,answer=skip", None),
            // probe knocks on the Service itself: its addresses alone do not do.
            (
                "name=t,service=p,ingress-class=x,ingress-controller-kind=probe",
                Some("ingress-controller-kind=probe knocks on the ingress controller Service"),
            ),
            (
                "name=t,service=p,ingress-class=x,ingress-controller-kind=probe,\
                 direct-ip=10.0.0.1",
                Some("ingress-controller-kind=probe knocks on the ingress controller Service"),
            ),
            (
                "name=t,service=p,ingress-class=x,ingress-controller-kind=probe,\
                 ingress-controller=ingress-nginx/ingress-nginx-controller",
                None,
            ),
        ] {
            let got = check_targets(&[parse_target(spec).unwrap()], &BTreeSet::new());
            match err {
                None => assert_eq!(got, Ok(()), "{spec}"),
                Some(e) => {
                    let got = got.unwrap_err();
                    assert!(
                        got.contains(e) && got.contains("ingress-controller="),
                        "{spec}: {got}"
                    );
                }
            }
        }
    }

    #[test]
    fn probe_alone_reads_no_object() {
        let r = parse_target(
            "name=t,service=p,ingress-class=x,ingress-controller-kind=probe,\
             ingress-controller=ingress-nginx/ingress-nginx-controller",
        )
        .unwrap();
        assert_eq!(r.controller_config, Some(HeaderSource::Probe));
        assert_eq!(
            header_source(Some(SourceKind::Probe), None),
            Ok(Some(HeaderSource::Probe))
        );
        assert_eq!(header_source(None, None), Ok(None));
        for (spec, err) in [
            (
                "name=a,service=x,ingress-class=a,ingress-controller-kind=probe,\
                 ingress-controller-config=ingress-nginx/ingress-nginx-controller",
                "ingress-controller-kind=probe knocks on the ingress controller Service and \
                 reads no configuration object: drop ingress-controller-config= \
                 (ingress-nginx/ingress-nginx-controller)",
            ),
            (
                "name=a,service=x,ingress-class=a,ingress-controller-kind=probes",
                "or probe (knock on the ingress controller Service)",
            ),
        ] {
            let got = parse_target(spec).unwrap_err();
            assert!(got.contains(err), "{spec}: {got}");
        }
    }

    /// `direct-ip=` without `ingress-controller=` answers with those addresses in the address
    /// forms (never the relay: `AnswerRule::direct_from`); a rewrite answers with a name, so
    /// there it is refused at start-up rather than relayed.
    #[test]
    fn a_direct_answer_by_name_needs_the_service() {
        let rules_of = |spec: &str| {
            let t = parse_target(spec).unwrap();
            check_targets(std::slice::from_ref(&t), &BTreeSet::new()).unwrap();
            let rule = AnswerRule {
                target: Target::Named(0),
                answer: t.answer,
                config: t.controller_config.clone(),
                controller_service: t.ingress_controller.clone(),
                direct_ips: t.direct_ips.clone(),
            };
            (vec![rule], vec![t])
        };
        for (spec, refused) in [
            (
                "name=t,service=p,ingress-class=x,answer=direct,direct-ip=10.0.0.1",
                true,
            ),
            (
                "name=t,service=p,ingress-class=x,direct-ip=10.0.0.1,\
                 ingress-controller-kind=ingress-nginx,ingress-controller-config=n/n",
                true,
            ),
            (
                "name=t,service=p,ingress-class=x,answer=direct,direct-ip=10.0.0.1,\
                 ingress-controller=traefik/traefik",
                false,
            ),
            (
                "name=t,service=p,ingress-class=x,answer=relay,direct-ip=10.0.0.1",
                false,
            ),
            ("name=t,service=p,ingress-class=x,direct-ip=10.0.0.1", false),
            ("name=t,service=p,ingress-class=x,answer=skip", false),
        ] {
            let (rules, names) = rules_of(spec);
            match check_direct_by_name(&rules, &names) {
                Ok(()) => assert!(!refused, "{spec}"),
                Err(e) => {
                    assert!(refused, "{spec}: {e}");
                    assert!(
                        e.starts_with("target t: answer ")
                            && e.contains("ingress-controller=NAMESPACE/NAME")
                            && e.contains("--coredns-answer template"),
                        "{e}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_class_or_gateway_goes_to_one_target() {
        let a = parse_target("name=a,service=x,ingress-class=nginx,gateway=infra/gw").unwrap();
        let b = parse_target("name=b,service=y,ingress-class=traefik,gateway-class=eg").unwrap();
        assert!(check_targets(&[a.clone(), b.clone()], &BTreeSet::new()).is_ok());
        let dup = parse_target("name=a,service=z,ingress-class=other").unwrap();
        assert!(check_targets(&[a.clone(), dup], &BTreeSet::new())
            .unwrap_err()
            .contains("name \"a\" is given twice"));
        let c = parse_target("name=c,service=z,ingress-class=nginx").unwrap();
        assert_eq!(
            check_targets(&[a.clone(), b.clone(), c], &BTreeSet::new()).unwrap_err(),
            "ingress-class=nginx is taken by both --target a and --target c"
        );

        let rules = [a, b];
        // The Gateway named by a beats b's class rule.
        assert_eq!(
            for_gateway(&rules, "infra", "gw", "eg"),
            Some(Target::Named(0))
        );
        assert_eq!(
            for_gateway(&rules, "infra", "other", "eg"),
            Some(Target::Named(1))
        );
        assert_eq!(for_gateway(&rules, "infra", "other", "cilium"), None);
        assert_eq!(Target::Named(1).name(&rules), "b");
        assert_eq!(Target::Default.name(&rules), "default");
        assert!(Target::Named(7) < Target::Default);
    }

    #[test]
    fn class_controller_values() {
        for ok in [
            "k8s.io/ingress-nginx",
            "traefik.io/ingress-controller",
            "haproxy.org/ingress-controller/haproxy",
            "nginx.org/ingress-controller",
            "projectcontour.io/ingress-controller",
        ] {
            assert_eq!(
                parse_class_controller(&format!(" {ok} ")).as_deref(),
                Ok(ok)
            );
        }
        for bad in [
            "",
            "ingress-nginx",
            "k8s.io/",
            "/ingress-nginx",
            "K8S.io/ingress-nginx",
            "k8s.io/a b",
            "k8s.io/a,b",
            "k8s.io/a;b",
        ] {
            let e = parse_class_controller(bad).unwrap_err();
            assert!(e.contains("DOMAIN/PATH"), "{bad:?}: {e}");
        }
        let long = format!("k8s.io/{}", "a".repeat(250));
        assert!(parse_class_controller(&long).is_err());

        let r = parse_target(
            "name=t,service=p,ingress-class-controller=traefik.io/ingress-controller,\
             ingress-class-controller=example.com/other",
        )
        .unwrap();
        assert_eq!(
            r.ingress_class_controllers,
            [
                "example.com/other".to_string(),
                "traefik.io/ingress-controller".to_string()
            ]
            .into(),
            "repeatable, and enough on its own"
        );
        let e = parse_target("name=t,service=p,ingress-class-controller=traefik").unwrap_err();
        assert!(e.starts_with("ingress-class-controller: "), "{e}");
    }

    #[test]
    fn a_controller_value_goes_to_one_target() {
        let t = |spec: &str| parse_target(spec).unwrap();
        let a = t("name=a,service=x,ingress-class-controller=k8s.io/ingress-nginx");
        let b = t(
            "name=b,service=y,ingress-class=nginx,ingress-class-controller=k8s.io/ingress-nginx",
        );
        assert_eq!(
            check_targets(&[a.clone(), b], &BTreeSet::new()).unwrap_err(),
            "ingress-class-controller=k8s.io/ingress-nginx is taken by both --target a and \
             --target b"
        );
        let default = ["k8s.io/ingress-nginx".to_string()].into();
        assert_eq!(
            check_targets(&[a], &default).unwrap_err(),
            "ingress-class-controller=k8s.io/ingress-nginx is taken by both \
             --ingress-class-controller and --target a"
        );
    }

    /// Where an Ingress goes by its class's name and controller: the controller first, then
    /// the name, then the default target under its filters.
    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases, one Ingress and its expected target each"
    )]
    fn the_class_controller_wins_over_the_class_name() {
        const NGINX: &str = "k8s.io/ingress-nginx";
        const TRAEFIK: &str = "traefik.io/ingress-controller";
        let t = |spec: &str| parse_target(spec).unwrap();
        let filters =
            |targets: Vec<TargetRule>, class: Option<&str>, controllers: &[&str]| Filters {
                ingress_class: class.map(str::to_string),
                ingress_class_controllers: controllers.iter().map(|c| c.to_string()).collect(),
                targets,
                ..Filters::default()
            };
        // nginx by name, traefik by controller.
        let by_name_and_controller = filters(
            vec![
                t("name=nginx,service=p,ingress-class=nginx"),
                t(&format!(
                    "name=traefik,service=q,ingress-class-controller={TRAEFIK}"
                )),
            ],
            None,
            &[],
        );
        // nginx says which controller it is.
        let nginx_says = filters(
            vec![t(&format!(
                "name=nginx,service=p,ingress-class=nginx,ingress-class-controller={NGINX}"
            ))],
            None,
            &[],
        );
        // The default proxy is Traefik's; a named target takes class nginx by name.
        let default_traefik = filters(
            vec![t("name=nginx,service=p,ingress-class=nginx")],
            None,
            &[TRAEFIK],
        );
        // The default proxy takes only class nginx or ingress-nginx's classes.
        let default_filtered = filters(vec![], Some("nginx"), &[NGINX]);
        let (n0, d) = (Some(Target::Named(0)), Some(Target::Default));
        for (name, f, class, controller, want) in [
            (
                "class nginx served by Traefik",
                &by_name_and_controller,
                Some("nginx"),
                Some(TRAEFIK),
                Some(Target::Named(1)),
            ),
            (
                "class nginx served by ingress-nginx",
                &by_name_and_controller,
                Some("nginx"),
                Some(NGINX),
                n0,
            ),
            (
                "class nginx without an IngressClass object",
                &by_name_and_controller,
                Some("nginx"),
                None,
                n0,
            ),
            (
                "any class served by Traefik",
                &by_name_and_controller,
                Some("web"),
                Some(TRAEFIK),
                Some(Target::Named(1)),
            ),
            (
                "nobody's class",
                &by_name_and_controller,
                Some("other"),
                Some("example.com/x"),
                d,
            ),
            ("no class", &by_name_and_controller, None, None, d),
            (
                "the name of a target serving another controller",
                &nginx_says,
                Some("nginx"),
                Some(TRAEFIK),
                d,
            ),
            (
                "its own controller",
                &nginx_says,
                Some("nginx"),
                Some(NGINX),
                n0,
            ),
            (
                "its name, controller unknown",
                &nginx_says,
                Some("nginx"),
                None,
                n0,
            ),
            (
                "default's controller beats a target's class name",
                &default_traefik,
                Some("nginx"),
                Some(TRAEFIK),
                d,
            ),
            (
                "a target's class name otherwise",
                &default_traefik,
                Some("nginx"),
                Some(NGINX),
                n0,
            ),
            (
                "default filter: by controller",
                &default_filtered,
                Some("web"),
                Some(NGINX),
                d,
            ),
            (
                "default filter: by name",
                &default_filtered,
                Some("nginx"),
                None,
                d,
            ),
            (
                "default filter: name served by another controller",
                &default_filtered,
                Some("nginx"),
                Some(TRAEFIK),
                None,
            ),
            (
                "default filter: neither",
                &default_filtered,
                Some("web"),
                Some(TRAEFIK),
                None,
            ),
            (
                "default filter: no class",
                &default_filtered,
                None,
                None,
                None,
            ),
        ] {
            assert_eq!(for_ingress(f, class, controller), want, "{name}");
        }
    }

    #[test]
    fn priorities() {
        let meta = |v: Option<&str>| ObjectMeta {
            annotations: v.map(|v| [(PRIORITY_ANNOTATION.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        };
        for (v, want) in [
            (None, 0),
            (Some("10"), 10),
            (Some(" -3 "), -3),
            (Some("high"), 0),
        ] {
            assert_eq!(priority(&meta(v)), want, "{v:?}");
        }
    }
}
