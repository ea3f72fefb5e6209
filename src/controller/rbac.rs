//! Every Kubernetes permission the controller (and `cleanup`) needs, as data. The chart's RBAC
//! is tested against this table and `doctor` checks a ServiceAccount against it, so the three
//! cannot drift apart. Keep it equal to the calls the code really makes: add a rule here in the
//! same change that adds a call.

use super::args::{ElectionArgs, IpModeArgs};
use super::hostnames::{args::HostnameArgs, kinds::Kind, kinds::OptIns};
use crate::dns::mode::DnsArgs;
use crate::dns::mode::{self, Grant};
use crate::dns::Mode;
use crate::header_verdict::HeaderSource;
use std::collections::BTreeMap;

// The uninstall hook's and edge's rules (used by the chart).
pub mod workloads;

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
    /// The opt-in source kinds (`--gateway-api`, `--traefik-ingressroutes`,
    /// `--contour-httpproxies`, `--istio-gateways`).
    pub sources: OptIns,
    /// `--ingress-class` is set (IngressClasses are watched for the default-class rule).
    pub ingress_class_filter: bool,
    /// `--leader-elect` (never in etc-hosts mode).
    pub leader_elect: bool,
    /// The controller's own namespace (Lease).
    pub namespace: String,
    pub lease_name: String,
    /// `cleanup --lease-name`: the controller's Lease (namespace, name) that the uninstall
    /// hook deletes. Never the controller's (it keeps and releases its Lease, never deletes it).
    pub delete_lease: Option<(String, String)>,
    /// `cleanup --stop-controller`: the controller Deployment (namespace, name) the uninstall
    /// hook scales to zero and waits for (with `delete_lease`, reading that Lease too).
    pub stop_controller: Option<(String, String)>,
    /// --node-local-dns: our block is written into node-local-dns's Corefile too.
    pub node_local_dns: bool,
    pub node_local_dns_namespace: String,
    pub node_local_dns_configmap: String,
    /// What the mode writes (`DnsMode::write_grants`).
    pub writes: Vec<Grant>,
    /// What removing the mode's writes needs (`DnsMode::removal_grants`).
    pub removes: Vec<Grant>,
    /// The proxy Service is read for its ClusterIPs (the CoreDNS modes' template answers and
    /// etc-hosts without --proxy-ip, external-dns without --external-dns-proxy-ip).
    pub proxy_service: Option<(String, String)>,
    /// The named targets' proxy Services read likewise (`--target`, without `proxy-ip=`).
    pub target_services: Vec<(String, String)>,
    /// The ingress controller Services watched for `ipMode: Proxy` (--skip-proxy-ipmode) or
    /// listed by name for a direct answer.
    pub ingress_controller_services: Vec<(String, String)>,
    /// The ingress controllers' configuration objects read for the header verdict
    /// (`answer=auto` with `ingress-controller-config=`).
    pub controller_configs: Vec<crate::header_verdict::ConfigRef>,
    /// The ingress controller Services knocked on for the header verdict (`answer=auto` with
    /// `ingress-controller-kind=probe`): read, listed and watched by name.
    pub probed_services: Vec<(String, String)>,
}

impl Needs {
    /// What `controller` started with these flags needs. `namespace` is the controller's own
    /// namespace, the default of --lease-namespace and --external-dns-namespace: the pod's at
    /// run time, the checked ServiceAccount's for `doctor`, the release's for the chart.
    pub fn for_controller(
        dns: &DnsArgs,
        hostnames: &HostnameArgs,
        election: &ElectionArgs,
        ipmode: &IpModeArgs,
        namespace: &str,
    ) -> Needs {
        // Flags that do not check out start no controller: nothing to grant for them.
        let answers = hostnames
            .answer_rules(ipmode.ingress_controller_service.clone())
            .unwrap_or_default();
        Needs {
            sources: hostnames.opt_ins(),
            ingress_class_filter: hostnames.reads_ingress_classes(),
            leader_elect: election.leader_elect,
            namespace: election.lease_namespace_or(namespace),
            lease_name: election.lease_name.clone(),
            proxy_service: mode::proxy_service_read(dns),
            target_services: mode::target_services_read(dns, &hostnames.targets),
            ingress_controller_services: {
                let mut v: Vec<(String, String)> = ipmode
                    .watched(&hostnames.targets)
                    .into_iter()
                    .map(|(_, s)| s)
                    .collect();
                v.extend(
                    answers
                        .iter()
                        .filter(|r| super::answers::may_go_direct(r) && r.direct_ips.is_empty())
                        .filter_map(|r| r.controller_service.clone()),
                );
                v.sort();
                v.dedup();
                v
            },
            controller_configs: answers
                .iter()
                .filter(|r| r.answer == crate::header_verdict::AnswerPick::Auto)
                .filter_map(|r| match &r.config {
                    Some(HeaderSource::Object(c)) => Some(c.clone()),
                    _ => None,
                })
                .collect(),
            probed_services: {
                let mut v: Vec<(String, String)> = answers
                    .iter()
                    .filter(|r| r.answer == crate::header_verdict::AnswerPick::Auto)
                    .filter(|r| r.config == Some(HeaderSource::Probe))
                    .filter_map(|r| r.controller_service.clone())
                    .collect();
                v.sort();
                v.dedup();
                v
            },
            node_local_dns_namespace: dns.shared.node_local_dns.node_local_dns_namespace.clone(),
            node_local_dns_configmap: dns.shared.node_local_dns.node_local_dns_configmap.clone(),
            ..Needs::for_cleanup(dns, namespace)
        }
    }

    /// What `cleanup` with these flags needs (see `cleanup_required`): the DNS targets only; no
    /// sources, no Lease.
    pub fn for_cleanup(dns: &DnsArgs, namespace: &str) -> Needs {
        let writes_node_local_dns = mode::writes_node_local_dns(dns);
        let nl = |s: &String| {
            if writes_node_local_dns {
                s.clone()
            } else {
                String::new()
            }
        };
        Needs {
            mode: dns.shared.mode,
            sources: OptIns::default(),
            ingress_class_filter: false,
            leader_elect: false,
            namespace: namespace.to_string(),
            lease_name: String::new(),
            delete_lease: None,
            stop_controller: None,
            node_local_dns: writes_node_local_dns,
            // Only a block written there is removed there.
            node_local_dns_namespace: nl(&dns.shared.node_local_dns.node_local_dns_namespace),
            node_local_dns_configmap: nl(&dns.shared.node_local_dns.node_local_dns_configmap),
            writes: dns.shared.mode.spec().write_grants(dns, namespace),
            removes: dns.shared.mode.spec().removal_grants(dns, namespace),
            // Removing a CoreDNS block needs no answer, so no Service read.
            proxy_service: mode::proxy_service_read(dns)
                .filter(|_| !dns.shared.mode.spec().edits_coredns()),
            // Removal reads no named target's Service, watches no ingress controller.
            target_services: Vec::new(),
            ingress_controller_services: Vec::new(),
            controller_configs: Vec::new(),
            probed_services: Vec::new(),
        }
    }
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
    let mut rules = vec![rule(
        Scope::Cluster,
        "events.k8s.io",
        "events",
        &[],
        &["create", "patch"],
        "Warning Events on Ingresses, routes and the ConfigMap",
    )];
    rules.extend(source_rules(n));
    rules.extend(lease_rules(n));
    rules.extend(service_rules(n));
    rules.extend(node_local_dns_rules(n));
    rules.extend(mode_rules(n));
    rules.sort();
    rules
}

/// List and watch on each source kind the controller reads, in each group it may be read in
/// (Traefik's kinds in `traefik.io` and `traefik.containo.us`: whichever the cluster serves).
fn source_rules(n: &Needs) -> Vec<Rule> {
    let mut rules = Vec::new();
    for kind in Kind::ALL {
        if !kind.is_read(n.sources, n.ingress_class_filter) {
            continue;
        }
        let mut groups: Vec<&str> = kind.places().iter().map(|p| p.group).collect();
        groups.dedup();
        for group in groups {
            rules.push(rule(
                Scope::Cluster,
                group,
                kind.plural(),
                &[],
                LIST_WATCH,
                kind.purpose(),
            ));
        }
    }
    rules
}

/// The Lease, when a leader is elected.
fn lease_rules(n: &Needs) -> Vec<Rule> {
    if n.leader_elect && !n.mode.spec().runs_per_node() {
        lease(&n.namespace, &n.lease_name)
    } else {
        Vec::new()
    }
}

/// What leader election on Lease `namespace/name` needs (the controller's and the edge's).
pub fn lease(namespace: &str, name: &str) -> Vec<Rule> {
    leases(namespace, &[name], "leader election")
}

/// What leader election on the Leases `names` of `namespace` needs (`[]`: any name, for Leases
/// named only at run time), `why` they are needed.
pub fn leases(namespace: &str, names: &[&str], why: &'static str) -> Vec<Rule> {
    let ns = Scope::Namespace(namespace.to_string());
    vec![
        rule(
            ns.clone(),
            "coordination.k8s.io",
            "leases",
            names,
            // kube-lease-manager reads the Lease and patches it (server-side apply to lock,
            // strategic merge to renew and release).
            &["get", "patch"],
            why,
        ),
        // RBAC cannot restrict create by name.
        rule(
            ns,
            "coordination.k8s.io",
            "leases",
            &[],
            &["create"],
            "leader election (first start)",
        ),
    ]
}

/// The Services read: the proxies' (for their ClusterIPs) and the ingress controllers' (for
/// their ipMode).
fn service_rules(n: &Needs) -> Vec<Rule> {
    let mut rules = Vec::new();
    // The proxy Services read for their ClusterIPs (the default target's and the named ones'),
    // by namespace. The CoreDNS modes also watch them (field selector metadata.name=<name>), to
    // follow a changed Service at once.
    let mut services: BTreeMap<&String, Vec<&str>> = BTreeMap::new();
    for (ns, name) in n.proxy_service.iter().chain(&n.target_services) {
        services.entry(ns).or_default().push(name);
    }
    let coredns = n.mode.spec().edits_coredns();
    for (ns, names) in services {
        rules.push(rule(
            Scope::Namespace(ns.clone()),
            "",
            "services",
            &names,
            if coredns {
                &["get", "list", "watch"]
            } else {
                &["get"]
            },
            if names.len() == 1 {
                "read the proxy Service's ClusterIPs"
            } else {
                "read the proxy Services' ClusterIPs"
            },
        ));
    }
    rules.extend(services_by_namespace(
        &n.ingress_controller_services,
        LIST_WATCH,
        "watch the ingress controller's load-balancer ipMode (KEP-1860) and list its \
         ClusterIPs for direct answers",
    ));
    for c in &n.controller_configs {
        rules.push(rule(
            Scope::Namespace(c.namespace.clone()),
            c.resource.group,
            c.resource.plural,
            &[&c.name],
            &["get", "list", "watch"],
            "read whether the ingress controller takes the PROXY header (answer=auto)",
        ));
    }
    rules.extend(services_by_namespace(
        &n.probed_services,
        &["get", "list", "watch"],
        "read the ingress controller Service to knock on it, whether it takes the PROXY header \
         (answer=auto, ingress-controller-kind=probe)",
    ));
    rules
}

/// One rule per namespace of `services` (`NAMESPACE`, `NAME`), on those Services by name.
fn services_by_namespace(
    services: &[(String, String)],
    verbs: &[&'static str],
    why: &'static str,
) -> Vec<Rule> {
    let mut by_ns: BTreeMap<&String, Vec<&str>> = BTreeMap::new();
    for (ns, name) in services {
        by_ns.entry(ns).or_default().push(name);
    }
    by_ns
        .into_iter()
        .map(|(ns, names)| {
            rule(
                Scope::Namespace(ns.clone()),
                "",
                "services",
                &names,
                verbs,
                why,
            )
        })
        .collect()
}

/// node-local-dns's ConfigMap: written with --node-local-dns, else read for the warning.
fn node_local_dns_rules(n: &Needs) -> Vec<Rule> {
    let mut rules = Vec::new();
    if n.mode.spec().edits_coredns() && n.node_local_dns {
        rules.push(rule(
            Scope::Namespace(n.node_local_dns_namespace.clone()),
            "",
            "configmaps",
            &[&n.node_local_dns_configmap],
            // list/watch: the revert watch, as for the CoreDNS ConfigMap.
            &["get", "list", "watch", "update"],
            "write the block into node-local-dns's Corefile and restore it when reverted",
        ));
    } else if n.mode.spec().edits_corefile() && !n.node_local_dns_configmap.is_empty() {
        rules.push(rule(
            Scope::Namespace(n.node_local_dns_namespace.clone()),
            "",
            "configmaps",
            &[&n.node_local_dns_configmap],
            &["get"],
            "warn when node-local-dns bypasses CoreDNS (--node-local-dns is off)",
        ));
    }
    rules
}

/// What the DNS mode writes (its module's `write_grants`).
fn mode_rules(n: &Needs) -> Vec<Rule> {
    n.writes.iter().map(grant_rule).collect()
}

/// What removing the mode's writes needs (`ouroboros cleanup`, the chart's uninstall hook):
/// its module's `removal_grants`, beside its `write_grants`.
fn mode_cleanup_rules(n: &Needs) -> Vec<Rule> {
    n.removes.iter().map(grant_rule).collect()
}

/// A mode's permission as a Role rule in its namespace.
fn grant_rule(g: &Grant) -> Rule {
    Rule {
        scope: Scope::Namespace(g.namespace.clone()),
        api_group: g.api_group,
        resource: g.resource,
        resource_names: g.names.clone(),
        verbs: g.verbs.to_vec(),
        why: g.why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::mode::external_dns::ExternalDnsOutput;
    use clap::ValueEnum;

    /// What `mode` writes and what removing it needs, with `output` and `extra` flags beside
    /// the chart's defaults, in namespace `own`.
    pub(super) fn grants(
        mode: Mode,
        output: ExternalDnsOutput,
        extra: &[&str],
    ) -> (Vec<Grant>, Vec<Grant>) {
        let output = output.to_possible_value().unwrap();
        let mut argv = vec![
            "--mode",
            mode.name(),
            "--external-dns-output",
            output.get_name(),
        ];
        argv.extend_from_slice(extra);
        let dns: DnsArgs = crate::flags::parse_args(&argv).unwrap();
        let mode = mode.spec();
        (
            mode.write_grants(&dns, "own"),
            mode.removal_grants(&dns, "own"),
        )
    }

    /// The chart's defaults, with leader election and the proxy Service read off.
    fn needs(mode: Mode) -> Needs {
        with_output(mode, ExternalDnsOutput::Dnsendpoint)
    }

    fn with_output(mode: Mode, output: ExternalDnsOutput) -> Needs {
        let (writes, removes) = grants(mode, output, &["--external-dns-namespace", "dns"]);
        Needs {
            mode,
            sources: OptIns::default(),
            ingress_class_filter: false,
            leader_elect: false,
            namespace: "ouroboros".into(),
            lease_name: "ouroboros-controller".into(),
            delete_lease: None,
            stop_controller: None,
            node_local_dns: false,
            node_local_dns_namespace: "kube-system".into(),
            node_local_dns_configmap: "node-local-dns".into(),
            writes,
            removes,
            proxy_service: None,
            target_services: Vec::new(),
            ingress_controller_services: Vec::new(),
            controller_configs: Vec::new(),
            probed_services: Vec::new(),
        }
    }

    fn elect(mode: Mode, leader_elect: bool) -> Needs {
        Needs {
            leader_elect,
            ..needs(mode)
        }
    }

    fn with_proxy(mode: Mode, output: ExternalDnsOutput, proxy: bool) -> Needs {
        Needs {
            leader_elect: true,
            proxy_service: proxy.then(|| ("ouroboros".into(), "ouroboros-proxy".into())),
            ..with_output(mode, output)
        }
    }

    /// The namespaced rules, without the cluster-wide read rules every mode has.
    type Local = (
        String,
        &'static str,
        &'static str,
        Vec<String>,
        Vec<&'static str>,
    );

    fn local(n: &Needs) -> Vec<Local> {
        required(n)
            .into_iter()
            .filter_map(|r| match r.scope {
                Scope::Namespace(ns) => {
                    Some((ns, r.api_group, r.resource, r.resource_names, r.verbs))
                }
                Scope::Cluster => None,
            })
            .filter(|r| r.1 != "coordination.k8s.io")
            .collect()
    }

    #[test]
    fn etc_hosts_and_external_dns_rules_match_their_calls() {
        let svc = |ns: &str| {
            (
                ns.to_string(),
                "",
                "services",
                vec!["ouroboros-proxy".to_string()],
                vec!["get"],
            )
        };
        // etc-hosts: only the proxy Service, and only without --proxy-ip; no lease.
        let n = with_proxy(Mode::EtcHosts, ExternalDnsOutput::Dnsendpoint, true);
        assert_eq!(local(&n), [svc("ouroboros")]);
        assert!(required(&n).iter().all(|r| r.resource != "leases"));
        let n = with_proxy(Mode::EtcHosts, ExternalDnsOutput::Dnsendpoint, false);
        assert!(local(&n).is_empty());

        let write = vec!["list", "create", "patch", "delete"];
        let n = with_proxy(Mode::ExternalDns, ExternalDnsOutput::Dnsendpoint, true);
        assert_eq!(
            local(&n),
            [
                (
                    "dns".to_string(),
                    "externaldns.k8s.io",
                    "dnsendpoints",
                    vec![],
                    write.clone()
                ),
                svc("ouroboros"),
            ]
        );
        let n = with_proxy(Mode::ExternalDns, ExternalDnsOutput::Service, false);
        assert_eq!(
            local(&n),
            [("dns".to_string(), "", "services", vec![], write)]
        );
    }

    fn verbs(rules: &[Rule], resource: &str, named: bool) -> Vec<&'static str> {
        rules
            .iter()
            .filter(|r| r.resource == resource && r.resource_names.is_empty() != named)
            .flat_map(|r| r.verbs.iter().copied())
            .collect()
    }

    /// A kind read in whichever group the cluster serves it is granted in each.
    #[test]
    fn source_kinds_are_granted_in_every_group_they_may_be_read_in() {
        let n = Needs {
            sources: OptIns::EVERY,
            ..needs(Mode::Coredns)
        };
        let rules = required(&n);
        let groups = |resource: &str| {
            rules
                .iter()
                .filter(|r| r.resource == resource && r.verbs == LIST_WATCH)
                .map(|r| r.api_group)
                .collect::<Vec<_>>()
        };
        for plural in ["ingressroutes", "ingressroutetcps"] {
            assert_eq!(groups(plural), ["traefik.containo.us", "traefik.io"]);
        }
        assert_eq!(
            groups("gateways"),
            ["gateway.networking.k8s.io", "networking.istio.io"]
        );
        assert_eq!(groups("httproutes"), ["gateway.networking.k8s.io"]);
        let n = needs(Mode::Coredns);
        assert!(required(&n)
            .iter()
            .all(|r| !r.api_group.starts_with("traefik")));
    }

    #[test]
    fn lease_verbs_are_what_kube_lease_manager_calls() {
        let r = required(&elect(Mode::Coredns, true));
        assert_eq!(verbs(&r, "leases", true), ["get", "patch"]);
        assert_eq!(verbs(&r, "leases", false), ["create"]);
        assert!(verbs(&required(&elect(Mode::EtcHosts, true)), "leases", true).is_empty());
        assert!(verbs(&required(&elect(Mode::Coredns, false)), "leases", true).is_empty());
    }

    #[test]
    fn coredns_mode_watches_its_configmap_and_events_are_events_k8s_io() {
        let r = required(&elect(Mode::Coredns, false));
        assert_eq!(
            verbs(&r, "configmaps", true),
            ["get", "list", "watch", "update", "get"]
        );
        let ev: Vec<_> = r.iter().filter(|r| r.resource == "events").collect();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].api_group, "events.k8s.io");
        assert_eq!(ev[0].verbs, ["create", "patch"]);
    }
}

#[cfg(test)]
mod needs_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        dns: DnsArgs,
        #[command(flatten)]
        hostnames: HostnameArgs,
        #[command(flatten)]
        election: ElectionArgs,
        #[command(flatten)]
        ipmode: IpModeArgs,
    }

    pub(super) fn of(extra: &[&str]) -> (Needs, Needs) {
        let mut argv = vec!["t", "--proxy-service-namespace", "proxy-ns"];
        argv.extend_from_slice(extra);
        let f = Flags::try_parse_from(argv).unwrap();
        (
            Needs::for_controller(&f.dns, &f.hostnames, &f.election, &f.ipmode, "own"),
            Needs::for_cleanup(&f.dns, "own"),
        )
    }

    #[test]
    fn needs_default_and_for_cleanup() {
        let (c, cleanup) = of(&[]);
        assert_eq!(
            c,
            Needs {
                mode: Mode::Coredns,
                sources: OptIns::default(),
                ingress_class_filter: false,
                leader_elect: true,
                namespace: "own".into(),
                lease_name: "ouroboros-controller".into(),
                delete_lease: None,
                stop_controller: None,
                node_local_dns: false,
                node_local_dns_namespace: "kube-system".into(),
                node_local_dns_configmap: "node-local-dns".into(),
                writes: vec![
                    Grant {
                        namespace: "kube-system".into(),
                        api_group: "",
                        resource: "configmaps",
                        names: vec!["coredns".into()],
                        verbs: &["get", "list", "watch", "update"],
                        why: "edit the Corefile and restore it when reverted",
                    },
                    // The memory limit, and auto's version, from this one Deployment.
                    Grant {
                        namespace: "kube-system".into(),
                        api_group: "apps",
                        resource: "deployments",
                        names: vec!["coredns".into()],
                        verbs: &["get"],
                        why: "read CoreDNS's memory limit (the reload guard) and, for \
                              --coredns-answer auto, its version",
                    },
                ],
                removes: vec![Grant {
                    namespace: "kube-system".into(),
                    api_group: "",
                    resource: "configmaps",
                    names: vec!["coredns".into()],
                    verbs: &["get", "update"],
                    why: "remove the block from the Corefile",
                }],
                proxy_service: Some(("proxy-ns".into(), "ouroboros-proxy".into())),
                target_services: Vec::new(),
                ingress_controller_services: Vec::new(),
                controller_configs: Vec::new(),
                probed_services: Vec::new(),
            }
        );
        // cleanup: the same DNS targets, nothing watched, no Lease, and no proxy Service
        // (removing a block needs no answer).
        assert_eq!(
            cleanup,
            Needs {
                leader_elect: false,
                lease_name: String::new(),
                delete_lease: None,
                stop_controller: None,
                node_local_dns_namespace: String::new(),
                node_local_dns_configmap: String::new(),
                proxy_service: None,
                ..c
            }
        );
    }

    /// coredns mode reads the CoreDNS Deployment (memory limit, and `auto`'s version), whatever
    /// the form; coredns-import does not.
    #[test]
    fn the_coredns_deployment_in_coredns_mode_only() {
        let reads = |extra: &[&str]| {
            of(extra)
                .0
                .writes
                .iter()
                .any(|g| g.resource == "deployments")
        };
        assert!(reads(&[]));
        assert!(reads(&["--coredns-version", "1.11.3"]));
        assert!(reads(&["--coredns-answer", "template"]));
        assert!(!reads(&["--mode", "coredns-import"]));
    }

    /// Where the mode's first grant is: its namespace, then its object's name or, with no
    /// name, its resource.
    fn written(n: &Needs) -> (&str, &str) {
        let g = &n.writes[0];
        let what = g.names.first().map_or(g.resource, String::as_str);
        (g.namespace.as_str(), what)
    }

    /// Each flag lands in its field; blank --ingress-class and --lease-namespace are unset.
    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases, one flag set and its expected field each"
    )]
    fn each_flag_lands_in_its_field() {
        type Case = (&'static [&'static str], fn(&Needs) -> bool);
        let table: &[Case] = &[
            (&["--gateway-api"], |n| n.sources.gateway_api),
            (&["--traefik-ingressroutes"], |n| {
                n.sources.traefik_ingressroutes
            }),
            (&["--contour-httpproxies"], |n| {
                n.sources.contour_httpproxies
            }),
            (&["--istio-gateways"], |n| n.sources.istio_gateways),
            (&["--ingress-class", "nginx"], |n| n.ingress_class_filter),
            (&["--ingress-class", " "], |n| !n.ingress_class_filter),
            // Who serves a class is in its IngressClass's spec.controller.
            (
                &["--ingress-class-controller", "k8s.io/ingress-nginx"],
                |n| n.ingress_class_filter,
            ),
            (
                &[
                    "--target",
                    "name=t,service=p,ingress-class-controller=traefik.io/ingress-controller",
                ],
                |n| n.ingress_class_filter,
            ),
            (&["--leader-elect=false"], |n| !n.leader_elect),
            (&["--lease-name", "l2"], |n| n.lease_name == "l2"),
            (&["--lease-namespace", "ctl"], |n| n.namespace == "ctl"),
            (&["--lease-namespace", ""], |n| n.namespace == "own"),
            (&["--node-local-dns-namespace", "nl"], |n| {
                n.node_local_dns_namespace == "nl"
            }),
            (&["--node-local-dns-configmap", "nlc"], |n| {
                n.node_local_dns_configmap == "nlc"
            }),
            (
                &["--coredns-namespace", "dns", "--coredns-configmap", "cf"],
                |n| written(n) == ("dns", "cf"),
            ),
            (
                &[
                    "--mode",
                    "coredns-import",
                    "--coredns-import-namespace",
                    "d",
                    "--coredns-import-configmap",
                    "c",
                ],
                |n| written(n) == ("d", "c"),
            ),
            (&["--mode", "etc-hosts"], |n| {
                n.proxy_service == Some(("proxy-ns".into(), "ouroboros-proxy".into()))
            }),
            // The ingress controllers watched for ipMode: the default target's and a
            // --target's, unless skipping is off.
            (
                &[
                    "--ingress-controller-service",
                    "ingress-nginx/ingress-nginx-controller",
                    "--target",
                    "name=t,service=p,ingress-class=t,ingress-controller=traefik/traefik",
                ],
                |n| {
                    n.ingress_controller_services
                        == [
                            (
                                "ingress-nginx".to_string(),
                                "ingress-nginx-controller".to_string(),
                            ),
                            ("traefik".to_string(), "traefik".to_string()),
                        ]
                },
            ),
            (
                &[
                    "--ingress-controller-service",
                    "ingress-nginx/ingress-nginx-controller",
                    "--skip-proxy-ipmode=false",
                ],
                |n| n.ingress_controller_services.is_empty(),
            ),
            // A --target's Service is read like the default one, in --proxy-service-namespace
            // unless it names its own; a class mapping needs the IngressClasses.
            (
                &["--target", "name=t,service=proxy-t,ingress-class=traefik"],
                |n| {
                    n.target_services == [("proxy-ns".to_string(), "proxy-t".to_string())]
                        && n.ingress_class_filter
                },
            ),
            (
                &["--target", "name=t,service=edge/proxy-t,ingress-class=t"],
                |n| n.target_services == [("edge".to_string(), "proxy-t".to_string())],
            ),
            (
                &[
                    "--target",
                    "name=t,service=proxy-t,ingress-class=t,proxy-ip=10.0.0.9",
                ],
                |n| n.target_services.is_empty(),
            ),
            (
                &[
                    "--coredns-answer",
                    "rewrite",
                    "--target",
                    "name=t,service=proxy-t,ingress-class=t",
                ],
                |n| n.target_services.is_empty(),
            ),
            (&["--mode", "etc-hosts", "--proxy-ip", "10.0.0.1"], |n| {
                n.proxy_service.is_none()
            }),
            (
                &[
                    "--mode",
                    "external-dns",
                    "--external-dns-proxy-service",
                    "p2",
                ],
                |n| {
                    n.proxy_service == Some(("proxy-ns".into(), "p2".into()))
                        && written(n) == ("own", "dnsendpoints")
                },
            ),
            (
                &["--mode", "external-dns", "--external-dns-namespace", "x"],
                |n| written(n) == ("x", "dnsendpoints"),
            ),
            (
                &["--mode", "external-dns", "--external-dns-output", "service"],
                |n| written(n) == ("own", "services"),
            ),
        ];
        for (flags, ok) in table {
            let (n, _) = of(flags);
            assert!(ok(&n), "{flags:?}: {n:#?}");
        }
    }
}

#[cfg(test)]
mod answer_tests {
    use super::needs_tests::of;
    use super::*;

    /// `auto` with a configuration object: `get`, `list`, `watch` on that one object; the
    /// ingress controller Service listed by name even with --skip-proxy-ipmode=false (for a
    /// direct answer). `relay` reads neither.
    #[test]
    fn answers_read_only_the_named_objects() {
        let (c, _) = of(&[
            "--skip-proxy-ipmode=false",
            "--ingress-controller-service",
            "ingress-nginx/ingress-nginx-controller",
            "--ingress-controller-kind",
            "ingress-nginx",
            "--ingress-controller-config",
            "ingress-nginx/ingress-nginx-controller",
        ]);
        let rules = required(&c);
        let cm: Vec<&Rule> = rules
            .iter()
            .filter(|r| {
                r.resource == "configmaps" && r.scope == Scope::Namespace("ingress-nginx".into())
            })
            .collect();
        assert_eq!(cm.len(), 1, "{rules:#?}");
        assert_eq!(cm[0].resource_names, ["ingress-nginx-controller"]);
        assert_eq!(cm[0].verbs, ["get", "list", "watch"]);
        assert!(rules.iter().any(|r| r.resource == "services"
            && r.scope == Scope::Namespace("ingress-nginx".into())
            && r.verbs == LIST_WATCH));
        let (c, _) = of(&[
            "--skip-proxy-ipmode=false",
            "--answer",
            "relay",
            "--ingress-controller-service",
            "ingress-nginx/ingress-nginx-controller",
            "--ingress-controller-kind",
            "ingress-nginx",
            "--ingress-controller-config",
            "ingress-nginx/ingress-nginx-controller",
        ]);
        assert!(c.controller_configs.is_empty() && c.ingress_controller_services.is_empty());
    }

    /// `probe`: `get`, `list`, `watch` on the ingress controller Service by name, no object;
    /// `relay` knocks on nothing.
    #[test]
    fn probe_reads_the_ingress_controller_service_by_name() {
        let flags = |answer| {
            [
                "--skip-proxy-ipmode=false",
                "--answer",
                answer,
                "--ingress-controller-service",
                "haproxy/haproxy-kubernetes-ingress",
                "--ingress-controller-kind",
                "probe",
            ]
        };
        let (c, _) = of(&flags("auto"));
        assert!(c.controller_configs.is_empty(), "{c:#?}");
        let rules = required(&c);
        let got: Vec<&Rule> = rules
            .iter()
            .filter(|r| r.scope == Scope::Namespace("haproxy".into()))
            .filter(|r| r.verbs == ["get", "list", "watch"])
            .collect();
        assert_eq!(got.len(), 1, "{rules:#?}");
        assert_eq!(
            (got[0].resource, got[0].resource_names.as_slice()),
            ("services", &["haproxy-kubernetes-ingress".to_string()][..])
        );
        let (c, _) = of(&flags("relay"));
        assert!(c.probed_services.is_empty(), "{c:#?}");
    }
}
