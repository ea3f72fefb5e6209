//! Rules of the other pods the chart runs: the uninstall hook (`ouroboros cleanup`) and
//! `ouroboros edge`. Same shape and same promise as `required`: equal to the calls made.

use super::{mode_cleanup_rules, rule, Needs, Rule, Scope, LIST_WATCH};

/// The rules of `ouroboros cleanup` (the chart's uninstall hook) with the same flags: read and
/// edit what `controller` wrote, or delete it; nothing is watched, created or read elsewhere.
/// Empty for etc-hosts (a file on the node, no API call).
pub fn cleanup_required(n: &Needs) -> Vec<Rule> {
    let mut rules = mode_cleanup_rules(n);
    if n.node_local_dns && n.mode.spec().edits_coredns() {
        rules.push(rule(
            Scope::Namespace(n.node_local_dns_namespace.clone()),
            "",
            "configmaps",
            &[&n.node_local_dns_configmap],
            &["get", "update"],
            "remove the block from node-local-dns's Corefile",
        ));
    }
    // `--stop-controller`: its Deployment's scale, that one alone.
    if let Some((namespace, name)) = &n.stop_controller {
        rules.push(rule(
            Scope::Namespace(namespace.clone()),
            "apps",
            "deployments/scale",
            &[name],
            &["get", "patch"],
            "stop the controller before its writes are removed",
        ));
    }
    // `--lease-name`: the controller's Lease goes too, that one alone (read first while
    // waiting for the stopped controller to release it).
    if let Some((namespace, name)) = &n.delete_lease {
        let verbs: &[&str] = if n.stop_controller.is_some() {
            &["delete", "get"]
        } else {
            &["delete"]
        };
        rules.push(rule(
            Scope::Namespace(namespace.clone()),
            "coordination.k8s.io",
            "leases",
            &[name],
            verbs,
            "delete the controller's Lease on uninstall",
        ));
    }
    rules.sort();
    rules
}

/// What decides the rules of `ouroboros edge`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeNeeds {
    /// `--service NAMESPACE/NAME`.
    Service {
        namespace: String,
        service: String,
        /// A `--listen` names its Service port by number, so the Service is watched to map it.
        numbered_port: bool,
    },
    /// `--pools`: the load balancer of a class, over Services in every namespace; with
    /// `--leader-elect`, the Lease (namespace, name) whose holder writes; with a pool that has
    /// `l2`, the namespace of the per-address Leases (`--lease-namespace`).
    LoadBalancer {
        lease: Option<(String, String)>,
        l2_leases: Option<String>,
    },
}

/// The rules of `ouroboros edge`. With `--service`: its EndpointSlices (label selector, so no
/// names), and the one Service (field selector on its name, which RBAC matches to
/// `resourceNames`). With `--pools`: every Service (to allocate over all of them), their status
/// (the addresses), the EndpointSlices of the served ones, and Events on them.
pub fn edge_required(n: &EdgeNeeds) -> Vec<Rule> {
    let (namespace, service, numbered_port) = match n {
        EdgeNeeds::Service {
            namespace,
            service,
            numbered_port,
        } => (namespace, service, *numbered_port),
        EdgeNeeds::LoadBalancer { lease, l2_leases } => {
            let mut rules = vec![
                rule(
                    Scope::Cluster,
                    "",
                    "services",
                    &[],
                    LIST_WATCH,
                    "allocate addresses over every LoadBalancer Service",
                ),
                rule(
                    Scope::Cluster,
                    "",
                    "services/status",
                    &[],
                    &["patch"],
                    "write status.loadBalancer (ipMode Proxy) of the Services of the class",
                ),
                rule(
                    Scope::Cluster,
                    "discovery.k8s.io",
                    "endpointslices",
                    &[],
                    LIST_WATCH,
                    "follow the ready endpoints of each served Service",
                ),
                rule(
                    Scope::Cluster,
                    "events.k8s.io",
                    "events",
                    &[],
                    &["create", "patch"],
                    "tell a Service's owner why it has no address",
                ),
            ];
            if let Some((namespace, name)) = lease {
                rules.extend(super::lease(namespace, name));
            }
            if let Some(namespace) = l2_leases {
                // Named after the addresses allocated: not known when the role is written.
                rules.extend(super::leases(
                    namespace,
                    &[],
                    "elect the holder of each address of a layer-2 pool",
                ));
            }
            rules.sort();
            rules.dedup();
            return rules;
        }
    };
    let ns = Scope::Namespace(namespace.clone());
    let mut rules = vec![rule(
        ns.clone(),
        "discovery.k8s.io",
        "endpointslices",
        &[],
        LIST_WATCH,
        "follow the Service's ready endpoints",
    )];
    if numbered_port {
        rules.push(rule(
            ns,
            "",
            "services",
            &[service],
            LIST_WATCH,
            "map a numbered Service port to each slice's target port",
        ));
    }
    rules.sort();
    rules
}

#[cfg(test)]
mod tests {
    use super::super::required;
    use super::*;
    use crate::dns::mode::external_dns::ExternalDnsOutput;
    use crate::dns::Mode;

    fn needs(mode: Mode, output: ExternalDnsOutput) -> Needs {
        let (writes, removes) = super::super::tests::grants(
            mode,
            output,
            &[
                "--coredns-import-namespace",
                "imp",
                "--coredns-import-configmap",
                "custom",
                "--external-dns-namespace",
                "records",
            ],
        );
        Needs {
            mode,
            sources: crate::controller::hostnames::kinds::OptIns {
                gateway_api: true,
                ..Default::default()
            },
            ingress_class_filter: true,
            leader_elect: true,
            namespace: "ns".into(),
            lease_name: "lease".into(),
            delete_lease: None,
            stop_controller: None,
            node_local_dns: false,
            node_local_dns_namespace: "kube-system".into(),
            node_local_dns_configmap: "node-local-dns".into(),
            writes,
            removes,
            proxy_service: Some(("ns".into(), "proxy".into())),
            target_services: Vec::new(),
            ingress_controller_services: Vec::new(),
            controller_configs: Vec::new(),
            probed_services: Vec::new(),
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

    /// `--lease-name`: `delete` on that one Lease in its namespace, added to the mode's rules;
    /// the one grant the controller has not (it never deletes its Lease).
    #[test]
    fn cleanup_deletes_only_the_named_lease() {
        for mode in [Mode::Coredns, Mode::ExternalDns] {
            let output = ExternalDnsOutput::Dnsendpoint;
            let without = cleanup_required(&needs(mode, output));
            let n = Needs {
                delete_lease: Some(("rel".into(), "rel-controller".into())),
                ..needs(mode, output)
            };
            let with = cleanup_required(&n);
            let added: Vec<_> = flat(&with)
                .into_iter()
                .filter(|r| !flat(&without).contains(r))
                .collect();
            assert_eq!(
                added,
                [(
                    "rel".to_string(),
                    "coordination.k8s.io",
                    "leases",
                    vec!["rel-controller".to_string()],
                    vec!["delete"],
                )],
                "{mode:?}"
            );
            assert_eq!(with.len(), without.len() + 1, "{mode:?}");
        }
    }

    /// `--stop-controller` with `--lease-name`: the one Deployment's scale (read and patched),
    /// and reading the one Lease it waits on; nothing else is added.
    #[test]
    fn stopping_the_controller_needs_its_scale_and_reads_its_lease() {
        let output = ExternalDnsOutput::Dnsendpoint;
        let lease_only = Needs {
            delete_lease: Some(("rel".into(), "rel-controller".into())),
            ..needs(Mode::Coredns, output)
        };
        let n = Needs {
            stop_controller: Some(("rel".into(), "rel-controller".into())),
            ..lease_only.clone()
        };
        let (before, after) = (cleanup_required(&lease_only), cleanup_required(&n));
        let (before, after) = (flat(&before), flat(&after));
        let added: Vec<_> = after.iter().filter(|r| !before.contains(r)).collect();
        let scale = (
            "rel".to_string(),
            "apps",
            "deployments/scale",
            vec!["rel-controller".to_string()],
            vec!["get", "patch"],
        );
        let lease = (
            "rel".to_string(),
            "coordination.k8s.io",
            "leases",
            vec!["rel-controller".to_string()],
            vec!["delete", "get"],
        );
        assert_eq!(added, [&scale, &lease]);
        assert_eq!(
            after.len(),
            before.len() + 1,
            "the Lease's rule is replaced"
        );
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
        let n = |numbered| EdgeNeeds::Service {
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
        let lb = edge_required(&EdgeNeeds::LoadBalancer {
            lease: None,
            l2_leases: None,
        });
        let verbs = |r: &str| {
            (flat(&lb).into_iter())
                .find(|f| f.2 == r)
                .map(|f| (f.0, f.4))
        };
        for (resource, want) in [
            ("services", vec!["list", "watch"]),
            ("services/status", vec!["patch"]),
            ("endpointslices", vec!["list", "watch"]),
            ("events", vec!["create", "patch"]),
        ] {
            assert_eq!(verbs(resource), Some(("*".to_string(), want)), "{resource}");
        }
        assert_eq!(lb.len(), 4);
        // With --leader-elect: the Lease, as the controller's.
        let lease = Some(("ouroboros".to_string(), "ouroboros-edge".to_string()));
        let elected = edge_required(&EdgeNeeds::LoadBalancer {
            lease,
            l2_leases: None,
        });
        let leases: Vec<_> = flat(&elected)
            .into_iter()
            .filter(|f| f.2 == "leases")
            .collect();
        let lease = super::super::lease("ouroboros", "ouroboros-edge");
        let mut want = flat(&lease);
        want.sort();
        assert_eq!(leases, want);
        assert_eq!(elected.len(), 6);
        // With a layer-2 pool: any Lease of the namespace (the names come from the addresses),
        // and create once, shared with the edge's own Lease.
        let l2 = edge_required(&EdgeNeeds::LoadBalancer {
            lease: Some(("ouroboros".to_string(), "ouroboros-edge".to_string())),
            l2_leases: Some("ouroboros".into()),
        });
        let leases: Vec<_> = flat(&l2).into_iter().filter(|f| f.2 == "leases").collect();
        let any = |verbs: Vec<&'static str>| {
            (
                "ouroboros".to_string(),
                "coordination.k8s.io",
                "leases",
                vec![],
                verbs,
            )
        };
        assert!(leases.contains(&any(vec!["get", "patch"])), "{leases:?}");
        assert_eq!(
            leases.iter().filter(|l| **l == any(vec!["create"])).count(),
            1,
            "{leases:?}"
        );
        assert_eq!(l2.len(), 7);
    }
}
