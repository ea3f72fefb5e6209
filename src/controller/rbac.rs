//! Every Kubernetes permission the controller (and `cleanup`) needs, as data. The chart's RBAC
//! is tested against this table and `doctor` checks a ServiceAccount against it, so the three
//! cannot drift apart. Keep it equal to the calls the code really makes: add a rule here in the
//! same change that adds a call.

use super::args::{ExternalDnsOutput, Mode};

/// Where a rule applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// A ClusterRole bound cluster-wide.
    Cluster,
    /// A Role in this namespace.
    Namespace(String),
}

/// One RBAC rule: verbs on a resource, optionally restricted to named objects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub scope: Scope,
    /// `""` for the core group.
    pub api_group: &'static str,
    pub resource: &'static str,
    /// Empty: any object.
    pub resource_names: Vec<String>,
    pub verbs: Vec<&'static str>,
    /// Why the controller needs it (shown by `doctor` when it is missing).
    pub why: &'static str,
}

/// What decides the rules: the controller's resolved configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    pub mode: Mode,
    pub gateway_api: bool,
    /// `--ingress-class` is set (IngressClasses are watched for the default-class rule).
    pub ingress_class_filter: bool,
    /// `--leader-elect` (never in etc-hosts mode).
    pub leader_elect: bool,
    /// The controller's own namespace (Lease).
    pub namespace: String,
    pub lease_name: String,
    pub coredns_namespace: String,
    pub coredns_configmap: String,
    pub node_local_dns_namespace: String,
    pub node_local_dns_configmap: String,
    pub import_namespace: String,
    pub import_configmap: String,
    /// The proxy Service is read for its ClusterIPs (etc-hosts without --proxy-ip,
    /// external-dns without --external-dns-proxy-ip).
    pub proxy_service: Option<(String, String)>,
    pub external_dns_namespace: String,
    pub external_dns_output: ExternalDnsOutput,
}

const LIST_WATCH: &[&str] = &["list", "watch"];

fn rule(
    scope: Scope,
    api_group: &'static str,
    resource: &'static str,
    names: &[&str],
    verbs: &[&'static str],
    why: &'static str,
) -> Rule {
    Rule {
        scope,
        api_group,
        resource,
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        verbs: verbs.to_vec(),
        why,
    }
}

/// The rules for one configuration, sorted.
pub fn required(n: &Needs) -> Vec<Rule> {
    use Scope::{Cluster, Namespace};
    let mut rules = vec![
        rule(
            Cluster,
            "networking.k8s.io",
            "ingresses",
            &[],
            LIST_WATCH,
            "read Ingress TLS hosts",
        ),
        rule(
            Cluster,
            "events.k8s.io",
            "events",
            &[],
            &["create", "patch"],
            "Warning Events on Ingresses, routes and the ConfigMap",
        ),
    ];
    if n.ingress_class_filter {
        rules.push(rule(
            Cluster,
            "networking.k8s.io",
            "ingressclasses",
            &[],
            LIST_WATCH,
            "find the default IngressClass for --ingress-class",
        ));
    }
    if n.gateway_api {
        for r in ["gateways", "httproutes", "grpcroutes", "tlsroutes"] {
            rules.push(rule(
                Cluster,
                "gateway.networking.k8s.io",
                r,
                &[],
                LIST_WATCH,
                "read Gateway-API hostnames",
            ));
        }
    }
    if n.leader_elect && n.mode != Mode::EtcHosts {
        let ns = Namespace(n.namespace.clone());
        rules.push(rule(
            ns.clone(),
            "coordination.k8s.io",
            "leases",
            &[&n.lease_name],
            &["get", "update"],
            "leader election",
        ));
        // RBAC cannot restrict create by name.
        rules.push(rule(
            ns,
            "coordination.k8s.io",
            "leases",
            &[],
            &["create"],
            "leader election (first start)",
        ));
    }
    if let Some((ns, name)) = &n.proxy_service {
        rules.push(rule(
            Namespace(ns.clone()),
            "",
            "services",
            &[name],
            &["get"],
            "read the proxy Service's ClusterIPs",
        ));
    }
    match n.mode {
        Mode::Coredns => {
            let ns = Namespace(n.coredns_namespace.clone());
            rules.push(rule(
                ns.clone(),
                "",
                "configmaps",
                &[&n.coredns_configmap],
                &["get", "list", "watch", "update", "patch"],
                "edit the Corefile and restore it when reverted",
            ));
            let nl = Namespace(n.node_local_dns_namespace.clone());
            rules.push(rule(
                nl,
                "",
                "configmaps",
                &[&n.node_local_dns_configmap],
                &["get"],
                "warn when node-local-dns bypasses CoreDNS",
            ));
        }
        Mode::CorednsImport => {
            let ns = Namespace(n.import_namespace.clone());
            rules.push(rule(
                ns.clone(),
                "",
                "configmaps",
                &[&n.import_configmap],
                &["get", "list", "watch", "update", "patch", "delete"],
                "write the import snippet",
            ));
            rules.push(rule(
                ns,
                "",
                "configmaps",
                &[],
                &["create"],
                "create the import ConfigMap when absent",
            ));
        }
        Mode::EtcHosts => {}
        Mode::ExternalDns => {
            let ns = Namespace(n.external_dns_namespace.clone());
            let verbs = &[
                "get", "list", "watch", "create", "patch", "update", "delete",
            ];
            match n.external_dns_output {
                ExternalDnsOutput::Dnsendpoint => rules.push(rule(
                    ns,
                    "externaldns.k8s.io",
                    "dnsendpoints",
                    &[],
                    verbs,
                    "write DNSEndpoints and delete this instance's leftovers",
                )),
                ExternalDnsOutput::Service => rules.push(rule(
                    ns,
                    "",
                    "services",
                    &[],
                    verbs,
                    "write annotated headless Services and delete this instance's leftovers",
                )),
            }
        }
    }
    rules.sort();
    rules
}

/// The rules of `ouroboros cleanup` (the chart's uninstall hook) with the same flags: read and
/// edit what `controller` wrote, or delete it; nothing is watched, created or read elsewhere.
/// Empty for etc-hosts (a file on the node, no API call).
pub fn cleanup_required(n: &Needs) -> Vec<Rule> {
    let mut rules = match n.mode {
        Mode::Coredns => vec![rule(
            Scope::Namespace(n.coredns_namespace.clone()),
            "",
            "configmaps",
            &[&n.coredns_configmap],
            &["get", "update"],
            "remove the block from the Corefile",
        )],
        Mode::CorednsImport => vec![rule(
            Scope::Namespace(n.import_namespace.clone()),
            "",
            "configmaps",
            &[&n.import_configmap],
            &["get", "update", "delete"],
            "remove the snippet key (delete the ConfigMap when it is ours and empty)",
        )],
        Mode::EtcHosts => vec![],
        Mode::ExternalDns => {
            let (group, resource) = match n.external_dns_output {
                ExternalDnsOutput::Dnsendpoint => ("externaldns.k8s.io", "dnsendpoints"),
                ExternalDnsOutput::Service => ("", "services"),
            };
            vec![rule(
                Scope::Namespace(n.external_dns_namespace.clone()),
                group,
                resource,
                &[],
                &["list", "delete"],
                "delete this instance's objects",
            )]
        }
    };
    rules.sort();
    rules
}

/// What decides the rules of `ouroboros edge --service NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeNeeds {
    pub namespace: String,
    pub service: String,
    /// A `--listen` names its Service port by number, so the Service is watched to map it.
    pub numbered_port: bool,
}

/// The rules of `ouroboros edge --service`: its EndpointSlices (label selector, so no names),
/// and the one Service (field selector on its name, which RBAC matches to `resourceNames`).
pub fn edge_required(n: &EdgeNeeds) -> Vec<Rule> {
    let ns = Scope::Namespace(n.namespace.clone());
    let mut rules = vec![rule(
        ns.clone(),
        "discovery.k8s.io",
        "endpointslices",
        &[],
        LIST_WATCH,
        "follow the Service's ready endpoints",
    )];
    if n.numbered_port {
        rules.push(rule(
            ns,
            "",
            "services",
            &[&n.service],
            LIST_WATCH,
            "map a numbered Service port to each slice's target port",
        ));
    }
    rules.sort();
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(mode: Mode, output: ExternalDnsOutput) -> Needs {
        Needs {
            mode,
            gateway_api: true,
            ingress_class_filter: true,
            leader_elect: true,
            namespace: "ns".into(),
            lease_name: "lease".into(),
            coredns_namespace: "kube-system".into(),
            coredns_configmap: "coredns".into(),
            node_local_dns_namespace: "kube-system".into(),
            node_local_dns_configmap: "node-local-dns".into(),
            import_namespace: "imp".into(),
            import_configmap: "custom".into(),
            proxy_service: Some(("ns".into(), "proxy".into())),
            external_dns_namespace: "records".into(),
            external_dns_output: output,
        }
    }

    /// (namespace, group, resource, names, verbs) of a rule.
    type Flat<'a> = (String, &'a str, &'a str, Vec<String>, Vec<&'a str>);

    fn flat(rules: &[Rule]) -> Vec<Flat<'_>> {
        rules
            .iter()
            .map(|r| {
                let ns = match &r.scope {
                    Scope::Cluster => "*".to_string(),
                    Scope::Namespace(n) => n.clone(),
                };
                (
                    ns,
                    r.api_group,
                    r.resource,
                    r.resource_names.clone(),
                    r.verbs.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn cleanup_rules_per_mode() {
        use ExternalDnsOutput::{Dnsendpoint, Service};
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (mode, output, want) in [
            (
                Mode::Coredns,
                Dnsendpoint,
                vec![(
                    "kube-system".to_string(),
                    "",
                    "configmaps",
                    s(&["coredns"]),
                    vec!["get", "update"],
                )],
            ),
            (
                Mode::CorednsImport,
                Dnsendpoint,
                vec![(
                    "imp".into(),
                    "",
                    "configmaps",
                    s(&["custom"]),
                    vec!["get", "update", "delete"],
                )],
            ),
            (Mode::EtcHosts, Dnsendpoint, vec![]),
            (
                Mode::ExternalDns,
                Dnsendpoint,
                vec![(
                    "records".into(),
                    "externaldns.k8s.io",
                    "dnsendpoints",
                    vec![],
                    vec!["list", "delete"],
                )],
            ),
            (
                Mode::ExternalDns,
                Service,
                vec![(
                    "records".into(),
                    "",
                    "services",
                    vec![],
                    vec!["list", "delete"],
                )],
            ),
        ] {
            let got = cleanup_required(&needs(mode, output));
            assert_eq!(flat(&got), want, "{mode:?} {output:?}");
        }
    }

    #[test]
    fn cleanup_never_needs_more_than_the_controller() {
        for mode in [
            Mode::Coredns,
            Mode::CorednsImport,
            Mode::EtcHosts,
            Mode::ExternalDns,
        ] {
            for output in [ExternalDnsOutput::Dnsendpoint, ExternalDnsOutput::Service] {
                let n = needs(mode, output);
                let controller = required(&n);
                for c in cleanup_required(&n) {
                    for v in &c.verbs {
                        assert!(
                            controller.iter().any(|r| r.scope == c.scope
                                && r.api_group == c.api_group
                                && r.resource == c.resource
                                && r.resource_names == c.resource_names
                                && r.verbs.contains(v)),
                            "{mode:?}: cleanup's {v} {} is not a controller permission",
                            c.resource
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn edge_rules() {
        let n = |numbered| EdgeNeeds {
            namespace: "ingress".into(),
            service: "ctl".into(),
            numbered_port: numbered,
        };
        let slices = (
            "ingress".to_string(),
            "discovery.k8s.io",
            "endpointslices",
            vec![],
            vec!["list", "watch"],
        );
        assert_eq!(flat(&edge_required(&n(false))), vec![slices.clone()]);
        assert_eq!(
            flat(&edge_required(&n(true))),
            vec![
                (
                    "ingress".to_string(),
                    "",
                    "services",
                    vec!["ctl".to_string()],
                    vec!["list", "watch"]
                ),
                slices,
            ]
        );
    }
}
