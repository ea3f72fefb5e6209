//! PURE: proxy targets, one type from `--target` to the metric label. A hostname goes to the
//! default target (the proxy of `--proxy-service-name`) or to a named one (`--target`, in flag
//! order); [`Target`] says which, and "default" is a variant, not an index. The one place a
//! target becomes a number is [`Target::position`], the layout of the per-target lists the DNS
//! writers keep (the default target's first, then `--target` order).

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::header_verdict::{AnswerPick, Route};

/// The name the default target goes by in logs, metrics and Events; no `--target` may take it.
pub const DEFAULT_TARGET: &str = "default";

/// A named target and the sources it takes, as `--target` gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetRule {
    /// A DNS-1123 label, unique among targets.
    pub name: String,
    /// The proxy Service (`namespace`, `name`) whose ClusterIPs answer for its hosts; without a
    /// namespace, in `--proxy-service-namespace`.
    pub service: (Option<String>, String),
    pub ingress_classes: BTreeSet<String>,
    /// IngressClass `spec.controller` values (`ingress-class-controller=`): an Ingress whose
    /// IngressClass names one of them comes here whatever the class is called.
    pub ingress_class_controllers: BTreeSet<String>,
    pub gateway_classes: BTreeSet<String>,
    /// Gateways (`namespace`, `name`); a Gateway named here is taken before any class rule.
    pub gateways: BTreeSet<(String, String)>,
    /// The proxy's addresses when given (`proxy-ip=`, as --proxy-ip for the default target;
    /// `render` needs them): no Service lookup then.
    pub proxy_ips: Vec<IpAddr>,
    /// Its ingress controller's Service (`ingress-controller=NAMESPACE/NAME`), watched for
    /// `ipMode: Proxy` and answered with under `answer=direct` (as
    /// --ingress-controller-service for the default target).
    pub ingress_controller: Option<(String, String)>,
    /// How its names are answered (`answer=`, as --answer for the default target).
    pub answer: AnswerPick,
    /// Where its ingress controller's header verdict comes from: the object that says whether
    /// it takes the PROXY header (`ingress-controller-kind=` and `ingress-controller-config=`),
    /// or knocks on its Service (`ingress-controller-kind=probe`); as
    /// --ingress-controller-kind and --ingress-controller-config for the default target.
    pub controller_config: Option<crate::header_verdict::HeaderSource>,
    /// The ingress controller Service's ClusterIPs when given (`direct-ip=`; `render` needs them
    /// for `answer=direct`): no Service lookup then.
    pub direct_ips: Vec<IpAddr>,
}

/// One target's answer settings, the default target's from its flags, a named one's from its
/// `--target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerRule {
    pub target: Target,
    pub answer: AnswerPick,
    /// Where the header verdict comes from (`auto`): an object read, or knocks on the Service.
    pub config: Option<crate::header_verdict::HeaderSource>,
    /// The ingress controller Service (`NAMESPACE`, `NAME`): the direct answer's addresses.
    pub controller_service: Option<(String, String)>,
    /// Its addresses when given: no Service lookup then.
    pub direct_ips: Vec<IpAddr>,
}

/// Where a target's direct answer (`answer=direct`, or `auto` picking it) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectFrom<'a> {
    /// The ingress controller Service (`NAMESPACE`, `NAME`): its ClusterIPs, read, unless
    /// `ips` gives them.
    Service {
        service: &'a (String, String),
        ips: &'a [IpAddr],
    },
    /// `direct-ip=` (`--direct-ip`) without the Service: these addresses, nothing read.
    Addresses(&'a [IpAddr]),
    /// Neither: nothing to answer directly with (start-up refuses `direct` so).
    Nothing,
}

impl AnswerRule {
    /// Where its direct answer comes from.
    pub fn direct_from(&self) -> DirectFrom<'_> {
        match (&self.controller_service, self.direct_ips.as_slice()) {
            (Some(service), ips) => DirectFrom::Service { service, ips },
            (None, []) => DirectFrom::Nothing,
            (None, ips) => DirectFrom::Addresses(ips),
        }
    }

    /// The route when it does not depend on what is read: `relay`, `direct`, `skip` as set,
    /// and `auto` without a configuration to read (`relay`, as before; ipMode Proxy aside).
    pub fn fixed(&self) -> Option<Route> {
        match self.answer {
            AnswerPick::Relay => Some(Route::Relay),
            AnswerPick::Direct => Some(Route::Direct),
            AnswerPick::Skip => Some(Route::Skip),
            AnswerPick::Auto => None,
        }
    }
}

/// Where an object's hostnames go: a named target (its place in `--target` order) or the
/// default one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Sorts before the default: on equal priority, named targets win in flag order.
    Named(u16),
    Default,
}

impl Target {
    /// Every target of a configuration with `named` `--target`s, in the writers' order: the
    /// default first, then flag order.
    pub fn all(named: usize) -> impl Iterator<Item = Target> {
        let named = u16::try_from(named).unwrap_or(u16::MAX);
        std::iter::once(Target::Default).chain((0..named).map(Target::Named))
    }

    /// Its place among [`Target::all`]: the index of its entry in a writer's per-target list.
    pub fn position(self) -> usize {
        match self {
            Target::Default => 0,
            Target::Named(i) => usize::from(i) + 1,
        }
    }

    /// Its rule among `rules` (`None` for the default target, and for one `rules` lacks).
    pub fn rule(self, rules: &[TargetRule]) -> Option<&TargetRule> {
        match self {
            Target::Named(i) => rules.get(usize::from(i)),
            Target::Default => None,
        }
    }

    /// The target's name among `rules`, as logs, metric labels and Events give it.
    pub fn name(self, rules: &[TargetRule]) -> &str {
        match self {
            Target::Named(_) => self.rule(rules).map_or("?", |r| r.name.as_str()),
            Target::Default => DEFAULT_TARGET,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_a_direct_answer_comes_from() {
        let svc = ("traefik".to_string(), "traefik".to_string());
        let ip: IpAddr = "10.43.0.9".parse().unwrap();
        let rule = |service: Option<&(String, String)>, ips: &[IpAddr]| AnswerRule {
            target: Target::Default,
            answer: AnswerPick::Direct,
            config: None,
            controller_service: service.cloned(),
            direct_ips: ips.to_vec(),
        };
        for (service, ips, want) in [
            (
                Some(&svc),
                &[][..],
                DirectFrom::Service {
                    service: &svc,
                    ips: &[],
                },
            ),
            (
                Some(&svc),
                &[ip][..],
                DirectFrom::Service {
                    service: &svc,
                    ips: &[ip],
                },
            ),
            // direct-ip= alone is enough: those addresses, never the relay.
            (None, &[ip][..], DirectFrom::Addresses(&[ip])),
            (None, &[][..], DirectFrom::Nothing),
        ] {
            assert_eq!(
                rule(service, ips).direct_from(),
                want,
                "{service:?} {ips:?}"
            );
        }
    }

    #[test]
    fn targets_in_order_with_names_and_positions() {
        let rules = [
            TargetRule {
                name: "traefik".into(),
                ..TargetRule::default()
            },
            TargetRule {
                name: "internal".into(),
                ..TargetRule::default()
            },
        ];
        let all: Vec<Target> = Target::all(rules.len()).collect();
        assert_eq!(all, [Target::Default, Target::Named(0), Target::Named(1)]);
        let names: Vec<&str> = all.iter().map(|t| t.name(&rules)).collect();
        assert_eq!(names, ["default", "traefik", "internal"]);
        let positions: Vec<usize> = all.iter().map(|t| t.position()).collect();
        assert_eq!(positions, [0, 1, 2]);
        assert_eq!(Target::Named(5).name(&rules), "?");
        assert_eq!(Target::Default.rule(&rules), None);
        // Named targets sort first: on equal priority they win, in flag order.
        assert!(Target::Named(1) < Target::Default);
    }
}
