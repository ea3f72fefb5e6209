//! The flags ([`HostnameArgs`]) that `controller`, `render` and `doctor` share, and how they become
//! the [`Filters`] and the [`HostPolicy`]. Separate: flag parsing and validation, no objects.

use super::targets::{
    check_answer, check_targets, header_source, parse_class_controller, parse_target,
};
use super::{kinds::OptIns, model::Filters, model::IngressHosts, non_empty};
use crate::header_verdict::AnswerPick;
use crate::header_verdict::{HeaderSource, SourceKind};
use crate::hostname::HostPolicy;
use crate::target::TargetRule;
use crate::target::{AnswerRule, Target};

/// Source filters and hostname policy flags. The same flags and environment variables serve
/// `controller` and `render`, so `render` shows exactly what the controller would pick.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct HostnameArgs {
    /// Also read Gateway-API objects: Gateway listener hostnames (any protocol) and HTTPRoute,
    /// GRPCRoute and TLSRoute hostnames. Each kind at v1, else at the older version the
    /// cluster serves (v1beta1, v1alpha3, v1alpha2).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_GATEWAY_API",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub gateway_api: bool,

    /// Also read Traefik's IngressRoute and IngressRouteTCP (`traefik.io/v1alpha1`, else
    /// Traefik 2's `traefik.containo.us/v1alpha1`): the names in `Host()`, `HostSNI()` of their
    /// `match` rules, to the target their `kubernetes.io/ingress.class` annotation maps to, if
    /// any. A rule naming hosts by a pattern (`HostRegexp`) or a negation is reported, not
    /// guessed. Read once the CRDs are installed.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_TRAEFIK_INGRESSROUTES",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub traefik_ingressroutes: bool,

    /// Also read Contour's HTTPProxy (`projectcontour.io/v1`): `spec.virtualhost.fqdn` of root
    /// HTTPProxies. Read once the CRD is installed.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_CONTOUR_HTTPPROXIES",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub contour_httpproxies: bool,

    /// Also read Istio's Gateway (`networking.istio.io/v1`, else `v1beta1` or `v1alpha3` before
    /// Istio 1.22): `spec.servers[].hosts`, the namespace prefix (`ns/`, `*/`, `./`) dropped.
    /// Read once the CRD is installed.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_ISTIO_GATEWAYS",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub istio_gateways: bool,

    /// Only Ingresses of this class: `spec.ingressClassName`, else the `kubernetes.io/ingress.class`
    /// annotation, else the IngressClass annotated `ingressclass.kubernetes.io/is-default-class:
    /// "true"`. Ingresses whose class stays unknown are dropped. Empty: all Ingresses.
    #[arg(long, env = "OUROBOROS_CONTROLLER_INGRESS_CLASS", value_name = "CLASS")]
    pub ingress_class: Option<String>,

    /// The default target's ingress controller as IngressClasses name it in `spec.controller`
    /// (repeatable; comma-separated in the environment variable), e.g. `k8s.io/ingress-nginx`:
    /// an Ingress whose IngressClass names one of these goes to the default proxy whatever the
    /// class is called, before any --target's `ingress-class=`. With it, only such Ingresses
    /// and those of --ingress-class are taken (docs/targets.md). A --target takes
    /// `ingress-class-controller=` likewise.
    #[arg(
        long = "ingress-class-controller",
        env = "OUROBOROS_CONTROLLER_INGRESS_CLASS_CONTROLLER",
        value_name = "DOMAIN/PATH",
        value_delimiter = ',',
        value_parser = parse_class_controller
    )]
    pub ingress_class_controllers: Vec<String>,

    /// Only Gateways with this `spec.gatewayClassName`, and routes whose `parentRefs` name one of
    /// them (namespace defaults to the route's own). Needs --gateway-api. Empty: all.
    #[arg(long, env = "OUROBOROS_CONTROLLER_GATEWAY_CLASS", value_name = "CLASS")]
    pub gateway_class: Option<String>,

    /// A proxy target of its own for some sources (repeatable; `;`-separated in the environment
    /// variable): `name=NAME,service=[NAMESPACE/]SERVICE` and any of `ingress-class=CLASS`,
    /// `ingress-class-controller=DOMAIN/PATH` (an IngressClass's `spec.controller`, which wins
    /// over the class name), `gateway-class=CLASS`, `gateway=NAMESPACE/NAME` (each
    /// repeatable), and optionally
    /// `proxy-ip=IP` (repeatable) instead of reading the Service (`render` needs it). Their
    /// hostnames are answered with that proxy's addresses; everything no --target takes goes to the
    /// proxy of --proxy-service-name, under --ingress-class/--gateway-class. A name claimed by
    /// two targets goes to the object with the higher `ouroboros.io/priority` annotation, then
    /// to the first --target (the default proxy last).
    #[arg(
        long = "target",
        env = "OUROBOROS_CONTROLLER_TARGETS",
        value_name = "SPEC",
        value_delimiter = ';',
        value_parser = parse_target
    )]
    pub targets: Vec<TargetRule>,

    /// How the default target's names are answered: `auto` (picked from what
    /// --ingress-controller-config says, or the knocks of --ingress-controller-kind probe:
    /// `relay` when the ingress controller requires the PROXY
    /// header, `direct` when it takes connections without one, `skip` when its load balancer
    /// reports ipMode Proxy, `relay` when nothing says), `relay` (the proxy's addresses),
    /// `direct` (the ingress controller Service's ClusterIPs, no relay hop; needs
    /// --ingress-controller-service or --direct-ip) or `skip` (leave the names alone). A
    /// --target takes `answer=` likewise.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_ANSWER",
        value_name = "ANSWER",
        value_enum,
        default_value_t = AnswerPick::Auto
    )]
    pub answer: AnswerPick,

    /// The default target's ingress controller, for reading whether it takes the PROXY header.
    /// ingress-nginx, haproxy, traefik, contour, envoy-gateway, nginx-gateway-fabric or cilium
    /// (each needs --ingress-controller-config), or `probe`: read no configuration, knock on the
    /// --ingress-controller-service's ClusterIP (port 443 with a TLS hello, else 80 with HTTP)
    /// without and with a PROXY header at start-up, when the Service changes and every
    /// --resync. A --target takes `ingress-controller-kind=` likewise.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_INGRESS_CONTROLLER_KIND",
        value_name = "KIND",
        value_parser = SourceKind::parse
    )]
    pub ingress_controller_kind: Option<SourceKind>,

    /// The one object that says whether the default target's ingress controller takes the PROXY
    /// header, watched by name. NAMESPACE/NAME of ingress-nginx's or HAProxy's ConfigMap,
    /// Cilium's `cilium-config` ConfigMap, Traefik's or Contour's Deployment
    /// (`daemonset/NAMESPACE/NAME` for a DaemonSet), an Envoy Gateway ClientTrafficPolicy or an
    /// NGINX Gateway Fabric NginxProxy (docs/targets.md). A --target takes
    /// `ingress-controller-config=` likewise.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_INGRESS_CONTROLLER_CONFIG",
        value_name = "[daemonset/]NAMESPACE/NAME"
    )]
    pub ingress_controller_config: Option<String>,

    /// The default target's ingress controller Service's ClusterIPs, for a direct answer
    /// (repeatable; comma-separated in the environment variable) [default: read from
    /// --ingress-controller-service]; `render` needs them for `--answer direct`. A --target
    /// takes `direct-ip=` likewise.
    #[arg(
        long = "direct-ip",
        env = "OUROBOROS_CONTROLLER_DIRECT_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = crate::flags::parse_answer_ip
    )]
    pub direct_ips: Vec<std::net::IpAddr>,

    /// Which Ingress fields name the hosts: `tls` (`spec.tls[].hosts`, the names served over
    /// TLS) or `all` (also `spec.rules[].host`: plain-HTTP names, e.g. for cert-manager's HTTP-01
    /// self-check, which goes over port 80).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_INGRESS_HOSTS",
        value_name = "FIELDS",
        value_enum,
        default_value_t = IngressHosts::Tls
    )]
    pub ingress_hosts: IngressHosts,

    /// Only read Ingresses, Gateways and routes in this namespace (repeatable; comma-separated in
    /// the environment variable). Default: every namespace. The watches stay cluster-wide.
    #[arg(
        long = "include-namespace",
        env = "OUROBOROS_CONTROLLER_INCLUDE_NAMESPACE",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub include_namespaces: Vec<String>,

    /// Never read Ingresses, Gateways and routes in this namespace (repeatable; comma-separated
    /// in the environment variable). Wins over --include-namespace.
    #[arg(
        long = "exclude-namespace",
        env = "OUROBOROS_CONTROLLER_EXCLUDE_NAMESPACE",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub exclude_namespaces: Vec<String>,

    /// Cluster DNS domain; names inside it are never hairpinned. Default: detected from the
    /// `svc.<domain>` search entry in /etc/resolv.conf, else `cluster.local`.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_CLUSTER_DOMAIN",
        value_name = "DOMAIN"
    )]
    pub cluster_domain: Option<String>,

    /// Only hairpin names equal to or under this suffix (repeatable; comma-separated in the
    /// environment variable). Default: any name that passes the other checks.
    #[arg(
        long = "allow-domain",
        env = "OUROBOROS_CONTROLLER_ALLOW_DOMAIN",
        value_name = "SUFFIX",
        value_delimiter = ','
    )]
    pub allow_domains: Vec<String>,

    /// Never hairpin names equal to or under this suffix (repeatable; comma-separated in the
    /// environment variable). Wins over --allow-domain.
    #[arg(
        long = "deny-domain",
        env = "OUROBOROS_CONTROLLER_DENY_DOMAIN",
        value_name = "SUFFIX",
        value_delimiter = ','
    )]
    pub deny_domains: Vec<String>,
}

impl HostnameArgs {
    /// --ingress-class, unless blank (blank: every Ingress).
    pub fn ingress_class_filter(&self) -> Option<&str> {
        non_empty(self.ingress_class.as_deref())
    }

    /// Whether IngressClasses are read: the default-class rule decides an Ingress's class, and
    /// its `spec.controller` who serves it, under --ingress-class, --ingress-class-controller or
    /// a --target mapping by class or controller ([`Filters::reads_ingress_classes`] likewise).
    pub fn reads_ingress_classes(&self) -> bool {
        self.ingress_class_filter().is_some()
            || !self.ingress_class_controllers.is_empty()
            || self
                .targets
                .iter()
                .any(|t| !t.ingress_classes.is_empty() || !t.ingress_class_controllers.is_empty())
    }

    /// The opt-in sources read.
    pub fn opt_ins(&self) -> OptIns {
        OptIns {
            gateway_api: self.gateway_api,
            traefik_ingressroutes: self.traefik_ingressroutes,
            contour_httpproxies: self.contour_httpproxies,
            istio_gateways: self.istio_gateways,
        }
    }

    /// The filters, or a usage message for a combination that makes no sense.
    pub fn filters(&self) -> Result<Filters, String> {
        let ingress_class = self.ingress_class_filter().map(str::to_string);
        let gateway_class = non_empty(self.gateway_class.as_deref()).map(str::to_string);
        if let Some(t) = self
            .targets
            .iter()
            .find(|t| !t.gateway_classes.is_empty() || !t.gateways.is_empty())
            .filter(|_| !self.gateway_api)
        {
            return Err(format!(
                "--target {} maps Gateway-API objects, which are only read with --gateway-api",
                t.name
            ));
        }
        if gateway_class.is_some() && !self.gateway_api {
            return Err(
                "--gateway-class filters Gateway-API objects, which are only read with --gateway-api"
                    .into(),
            );
        }
        let namespaces = |flag: &str, list: &[String]| {
            list.iter()
                .map(|n| {
                    let n = n.trim();
                    if crate::dns_name::is_label(n) {
                        Ok(n.to_string())
                    } else {
                        Err(format!(
                            "{flag} {n:?} is not a namespace name ({})",
                            crate::dns_name::LABEL_SYNTAX
                        ))
                    }
                })
                .collect::<Result<_, _>>()
        };
        Ok(Filters {
            opt_ins: self.opt_ins(),
            ingress_class,
            ingress_class_controllers: self.ingress_class_controllers.iter().cloned().collect(),
            gateway_class,
            include_namespaces: namespaces("--include-namespace", &self.include_namespaces)?,
            exclude_namespaces: namespaces("--exclude-namespace", &self.exclude_namespaces)?,
            ingress_hosts: self.ingress_hosts,
            targets: {
                check_targets(
                    &self.targets,
                    &self.ingress_class_controllers.iter().cloned().collect(),
                )?;
                self.targets.clone()
            },
        })
    }

    /// Where the default target's header verdict comes from (--ingress-controller-kind and
    /// --ingress-controller-config, both or neither; `probe` alone).
    pub fn default_controller_config(&self) -> Result<Option<HeaderSource>, String> {
        header_source(
            self.ingress_controller_kind,
            self.ingress_controller_config.as_deref(),
        )
        .map_err(|e| {
            e.replace("ingress-controller-kind=", "--ingress-controller-kind ")
                .replace("ingress-controller-config=", "--ingress-controller-config")
        })
    }

    /// Every target's answer settings, in the writers' order (the default target's first);
    /// `default_service` is the default target's ingress controller Service
    /// (--ingress-controller-service), which only `controller` and `doctor` take.
    pub fn answer_rules(
        &self,
        default_service: Option<(String, String)>,
    ) -> Result<Vec<AnswerRule>, String> {
        let rules = self.answer_settings(default_service)?;
        let default = &rules[0];
        check_answer(
            crate::target::DEFAULT_TARGET,
            default.answer,
            default.config.as_ref(),
            (
                default.controller_service.is_some(),
                !default.direct_ips.is_empty(),
            ),
            ("--ingress-controller-service NAMESPACE/NAME", "--direct-ip"),
        )
        .map_err(|e| {
            e.replace(
                "ingress-controller-kind=probe",
                "--ingress-controller-kind probe",
            )
        })?;
        Ok(rules)
    }

    /// [`answer_rules`](Self::answer_rules) without checking that the default target's answer
    /// has the addresses it needs: `render`, which reads no Service, checks that itself.
    pub fn answer_settings(
        &self,
        default_service: Option<(String, String)>,
    ) -> Result<Vec<AnswerRule>, String> {
        let config = self.default_controller_config()?;
        let default = AnswerRule {
            target: Target::Default,
            answer: self.answer,
            config,
            controller_service: default_service,
            direct_ips: self.direct_ips.clone(),
        };
        let named = self.targets.iter().enumerate().map(|(i, t)| AnswerRule {
            target: Target::Named(u16::try_from(i).unwrap_or(u16::MAX)),
            answer: t.answer,
            config: t.controller_config.clone(),
            controller_service: t.ingress_controller.clone(),
            direct_ips: t.direct_ips.clone(),
        });
        Ok(std::iter::once(default).chain(named).collect())
    }

    /// Checks the domain flags; `cluster_domain` is the resolved one (see `cluster_domain::resolve`).
    pub fn policy(&self, cluster_domain: &str) -> Result<HostPolicy, String> {
        let flags = std::iter::once(("--cluster-domain", cluster_domain))
            .chain(
                self.allow_domains
                    .iter()
                    .map(|d| ("--allow-domain", d.as_str())),
            )
            .chain(
                self.deny_domains
                    .iter()
                    .map(|d| ("--deny-domain", d.as_str())),
            );
        for (flag, value) in flags {
            if !valid_suffix(value) {
                return Err(format!(
                    "{flag} {value:?} is not a DNS suffix (labels of a-z, 0-9 and inner '-', separated by dots)"
                ));
            }
        }
        Ok(HostPolicy::new(
            cluster_domain,
            &self.allow_domains,
            &self.deny_domains,
        ))
    }
}

/// A DNS suffix as the flags take it: `example.com`, `.example.com`, `*.example.com`, `com.`
fn valid_suffix(s: &str) -> bool {
    let s = s.trim().trim_end_matches('.');
    let s = s.strip_prefix("*.").unwrap_or(s).trim_start_matches('.');
    crate::dns_name::is_hostname(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostname::Rejection;

    #[test]
    fn args_to_filters_and_policy() {
        let args = HostnameArgs {
            gateway_class: Some("pp".into()),
            ..Default::default()
        };
        assert!(args.filters().unwrap_err().contains("--gateway-api"));
        let args = HostnameArgs {
            gateway_api: true,
            ingress_class: Some(" ".into()),
            gateway_class: Some("pp".into()),
            allow_domains: vec!["*.example.com".into(), ".example.org.".into()],
            deny_domains: vec!["secret.example.com".into()],
            ..Default::default()
        };
        assert_eq!(
            args.filters().unwrap(),
            Filters {
                opt_ins: OptIns::GATEWAY_API,
                ingress_class: None,
                gateway_class: Some("pp".into()),
                ..Filters::default()
            }
        );
        let p = args.policy("corp.internal").unwrap();
        assert!(p.check("a.example.org").is_ok());
        assert_eq!(p.check("a.secret.example.com"), Err(Rejection::Denied));
        assert_eq!(p.check("a.example.net"), Err(Rejection::NotAllowed));
        for (bad, flag) in [
            (
                HostnameArgs {
                    allow_domains: vec!["exa mple.com".into()],
                    ..Default::default()
                },
                "--allow-domain",
            ),
            (
                HostnameArgs {
                    deny_domains: vec!["".into()],
                    ..Default::default()
                },
                "--deny-domain",
            ),
        ] {
            assert!(bad.policy("cluster.local").unwrap_err().contains(flag));
        }
        let args = HostnameArgs {
            include_namespaces: vec!["shop".into(), " web ".into()],
            exclude_namespaces: vec!["kube-system".into()],
            ingress_hosts: IngressHosts::All,
            ..Default::default()
        };
        let f = args.filters().unwrap();
        assert_eq!(
            (f.include_namespaces, f.exclude_namespaces, f.ingress_hosts),
            (
                ["shop".to_string(), "web".to_string()].into(),
                ["kube-system".to_string()].into(),
                IngressHosts::All
            )
        );
        let args = HostnameArgs {
            exclude_namespaces: vec!["Web".into()],
            ..Default::default()
        };
        assert!(args
            .filters()
            .unwrap_err()
            .contains("--exclude-namespace \"Web\""));
        assert!(HostnameArgs::default()
            .policy("bad domain")
            .unwrap_err()
            .contains("--cluster-domain"));
    }
}
