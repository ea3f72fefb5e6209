//! The DNS modes, one module each behind one trait, [`DnsMode`]: what the mode reads (the
//! proxy's addresses), how it writes and what removing it takes (the `Sink` it builds), the
//! RBAC both need ([`Grant`]s), and its facts (whether it edits CoreDNS, the CRD it writes,
//! whether it runs one controller per node); and, for `render`, [`render::RenderMode`]. The
//! table is `for_each_mode!`: one row per mode, from which the `Mode` enum (in `dns`),
//! [`Mode::spec`], the per-mode flags of [`DnsArgs`] and `render`'s subcommands are generated.
//! A new mode is its module (its `DnsMode`, its `Flags`, its `Render`), its `pub mod` line and
//! its row. Everything that differs by mode asks the table rather than naming modes.
//!
//! `build` holds what several modes build with: the context of a build (`Build`), each
//! target's addresses and how the controller's picks route them (`Routing`). `render` holds
//! what `render` hands a mode: the names placed on their targets, and the flags the modes'
//! `render` subcommands share.

pub mod build;
pub mod coredns;
pub mod coredns_import;
pub mod etc_hosts;
pub mod external_dns;
pub mod render;

use std::net::IpAddr;

use crate::dns::args::SharedArgs;
use crate::dns::write::sink::AnySink;
use crate::dns::Mode;
use crate::flags::UsageError;
use crate::target::TargetRule;
use build::Build;

/// The mode table: each mode once, as (its module here, its `Mode` variant, its `--mode` value
/// and `render` subcommand, the help line of that value; the last two as single tokens, which
/// the callbacks paste into attributes). `for_each_mode!(callback)` hands the
/// rows to the `callback!` macro in scope where it is called. A macro rather than a `const`
/// table, because what the rows become are items clap's derives read at compile time: the
/// `Mode` variants (`dns`), the fields of [`DnsArgs`] (here) and `render`'s subcommands
/// (`crate::render`). The module is also the name of the mode's field in `DnsArgs`, and holds
/// the mode's unit struct (named as the variant, implementing [`DnsMode`]), its `Flags` and its
/// `Render` (implementing [`render::RenderMode`]).
macro_rules! for_each_mode {
    ($callback:ident) => {
        $callback! {
            coredns, Coredns, "coredns",
                "A marked block in the CoreDNS Corefile ConfigMap (see --coredns-answer).";
            coredns_import, CorednsImport, "coredns-import",
                "A snippet under one key of the ConfigMap a Corefile imports (`import /etc/coredns/custom/*.override`).";
            etc_hosts, EtcHosts, "etc-hosts",
                "A marked block in each node's hosts file (one controller per node, no lease).";
            external_dns, ExternalDns, "external-dns",
                "external-dns `DNSEndpoint` objects (or annotated headless Services).";
        }
    };
}
// A `macro_rules!` macro gets a path (`dns::mode::for_each_mode!`) only through a `use` of it.
pub(crate) use for_each_mode;

/// `Mode::spec` and `DnsArgs` from the table's rows.
macro_rules! mode_items {
    ($($module:ident, $variant:ident, $value:tt, $help:tt;)*) => {
        impl Mode {
            /// The mode's module. The one place a mode is named to choose behaviour.
            pub fn spec(self) -> &'static dyn DnsMode {
                match self {
                    $(Mode::$variant => &$module::$variant,)*
                }
            }
        }

        /// The DNS-target flags of `controller`, `cleanup` and `doctor`: the shared ones and
        /// each mode's own, listed in `--help` as they always were (`dns::args::in_published_order`).
        #[derive(Clone, Debug)]
        pub struct DnsArgs {
            pub shared: SharedArgs,
            $(pub $module: $module::Flags,)*
        }

        // By hand rather than derived: a derive adds each flattened struct's flags in one run,
        // and `in_published_order` needs them all before it adds them.
        impl clap::FromArgMatches for DnsArgs {
            fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
                Self::from_arg_matches_mut(&mut m.clone())
            }

            fn from_arg_matches_mut(m: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
                Ok(Self {
                    shared: SharedArgs::from_arg_matches_mut(m)?,
                    $($module: $module::Flags::from_arg_matches_mut(m)?,)*
                })
            }

            fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
                self.update_from_arg_matches_mut(&mut m.clone())
            }

            fn update_from_arg_matches_mut(
                &mut self,
                m: &mut clap::ArgMatches,
            ) -> Result<(), clap::Error> {
                self.shared.update_from_arg_matches_mut(m)?;
                $(self.$module.update_from_arg_matches_mut(m)?;)*
                Ok(())
            }
        }

        impl clap::Args for DnsArgs {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                crate::dns::args::in_published_order(cmd, |c| {
                    let c = SharedArgs::augment_args(c);
                    $(let c = $module::Flags::augment_args(c);)*
                    c
                })
            }

            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                crate::dns::args::in_published_order(cmd, |c| {
                    let c = SharedArgs::augment_args_for_update(c);
                    $(let c = $module::Flags::augment_args_for_update(c);)*
                    c
                })
            }
        }
    };
}

for_each_mode!(mode_items);

/// One DNS mode. The flags every method reads are the DNS-target flags, `DnsArgs`: the shared
/// ones (whose `mode` chose this one) and every mode's own (this one's in its field).
pub trait DnsMode: Sync {
    /// Whether the mode writes CoreDNS's configuration (a Corefile block or an imported
    /// snippet): node-local-dns, the proxy watches, the Services' `list`/`watch` and doctor's
    /// CoreDNS checks follow it.
    fn edits_coredns(&self) -> bool {
        false
    }

    /// Whether the mode edits the Corefile ConfigMap itself: the controller watches it for
    /// reverts and guards it against removal, and, without --node-local-dns, warns when
    /// node-local-dns bypasses it.
    fn edits_corefile(&self) -> bool {
        false
    }

    /// Whether one controller runs per node (no leader election, no probe through the
    /// cluster DNS), rather than one elected for the cluster.
    fn runs_per_node(&self) -> bool {
        false
    }

    /// The CRD whose objects the mode writes, when it needs one (doctor checks it).
    fn crd(&self, _dns: &DnsArgs) -> Option<&'static str> {
        None
    }

    /// The flag combinations the mode refuses; errors are `UsageError`s (exit 64).
    fn check(&self, _dns: &DnsArgs) -> Result<(), UsageError> {
        Ok(())
    }

    /// Where the default target's addresses come from: given by flag, else read from a
    /// Service.
    fn proxy(&self, dns: &DnsArgs) -> ProxySource;

    /// Whether the mode answers with the proxies' addresses (and so reads their Services when
    /// no address is given), rather than with a name.
    fn answers_with_addresses(&self, _dns: &DnsArgs) -> bool {
        true
    }

    /// The writer, with one answer per proxy target. Building makes no request.
    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError>;

    /// The writer that removes what the mode wrote without an API client, when it needs none
    /// (`cleanup` then connects to nothing).
    fn offline_removal(&self, _dns: &DnsArgs) -> Option<AnySink> {
        None
    }

    /// What writing needs, beyond reading the proxy Services. `namespace`: the controller's
    /// own, the default of the namespaces the mode's flags leave unset.
    fn write_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant>;

    /// What removing the mode's writes needs (`ouroboros cleanup`, the chart's uninstall
    /// hook): beside [`write_grants`](Self::write_grants), so a mode's RBAC is in one place.
    fn removal_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant>;
}

/// The default target's addresses: `ips` when given (by `flag`), else `service`'s ClusterIPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxySource {
    /// (namespace, name).
    pub service: (String, String),
    pub ips: Vec<IpAddr>,
    pub flag: &'static str,
}

/// One permission a mode needs, in one namespace (every mode writes namespaced objects):
/// `verbs` on `resource`, restricted to `names` unless empty. The controller's RBAC table
/// (`controller::rbac`) turns it into a Role rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub namespace: String,
    /// `""` for the core group.
    pub api_group: &'static str,
    pub resource: &'static str,
    pub names: Vec<String>,
    pub verbs: &'static [&'static str],
    /// Why the mode needs it (shown by `doctor` when it is missing).
    pub why: &'static str,
}

impl Grant {
    /// A permission on core-group ConfigMaps.
    fn configmaps(
        namespace: &str,
        names: &[&str],
        verbs: &'static [&'static str],
        why: &'static str,
    ) -> Self {
        Self {
            namespace: namespace.to_string(),
            api_group: "",
            resource: "configmaps",
            names: names.iter().map(|s| s.to_string()).collect(),
            verbs,
            why,
        }
    }
}

/// The flag combinations `--mode` refuses; errors are `UsageError`s (exit 64).
pub fn check(dns: &DnsArgs) -> Result<(), UsageError> {
    dns.shared.mode.spec().check(dns)
}

/// Whether the block is also written into node-local-dns (CoreDNS modes, opted in).
pub fn writes_node_local_dns(dns: &DnsArgs) -> bool {
    dns.shared.node_local_dns.enabled && dns.shared.mode.spec().edits_coredns()
}

/// The Service whose ClusterIPs this mode reads for the default target (for RBAC and the
/// proxy watch), if any: none when the mode answers with a name or the addresses are given.
pub fn proxy_service_read(dns: &DnsArgs) -> Option<(String, String)> {
    let mode = dns.shared.mode.spec();
    let proxy = mode.proxy(dns);
    (mode.answers_with_addresses(dns) && proxy.ips.is_empty()).then_some(proxy.service)
}

/// The named targets' Services this mode reads for their ClusterIPs (as
/// [`proxy_service_read`] for the default one): none when it answers with a name, none for a
/// target given its `proxy-ip=`.
pub fn target_services_read(dns: &DnsArgs, targets: &[TargetRule]) -> Vec<(String, String)> {
    let reads = dns.shared.mode.spec().answers_with_addresses(dns);
    targets
        .iter()
        .zip(dns.shared.target_services(targets))
        .filter(|(t, _)| reads && t.proxy_ips.is_empty())
        .map(|(_, s)| s)
        .collect()
}

/// The backend for `--mode`, with one answer per proxy target (`at.targets`: the named ones,
/// in `--target` order). Flag errors are `UsageError`s (exit 64).
pub fn sink(dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
    check(dns)?;
    dns.shared.mode.spec().sink(dns, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::write::sink::Sink;
    use crate::flags::parse_args;
    use clap::ValueEnum;

    fn parse(args: &[&str]) -> DnsArgs {
        let mut v = vec!["--proxy-service-namespace", "ouroboros"];
        v.extend_from_slice(args);
        parse_args::<DnsArgs>(&v).unwrap()
    }

    fn build(client: &kube::Client) -> Build<'static> {
        Build::new(client.clone(), "cluster.local", &[])
    }

    /// Each mode's facts, which the controller's tasks, the RBAC table and doctor follow.
    #[test]
    fn facts_per_mode() {
        type Facts = (bool, bool, bool, Option<&'static str>, Option<&'static str>);
        let dnsendpoints = Some("dnsendpoints.externaldns.k8s.io");
        // (edits CoreDNS, edits the Corefile, one per node, CRD for DNSEndpoints, for Services)
        let table: [(Mode, Facts); 4] = [
            (Mode::Coredns, (true, true, false, None, None)),
            (Mode::CorednsImport, (true, false, false, None, None)),
            (Mode::EtcHosts, (false, false, true, None, None)),
            (Mode::ExternalDns, (false, false, false, dnsendpoints, None)),
        ];
        for (mode, want) in table {
            let name = mode.name();
            let crd = |output: &str| {
                let d = parse(&["--mode", name, "--external-dns-output", output]);
                mode.spec().crd(&d)
            };
            let spec = mode.spec();
            let got = (
                spec.edits_coredns(),
                spec.edits_corefile(),
                spec.runs_per_node(),
                crd("dnsendpoint"),
                crd("service"),
            );
            assert_eq!(got, want, "{mode:?}");
        }
    }

    /// The Services read for addresses, the default target's and the named ones': none when
    /// the answer is a name, none for a target whose addresses are given.
    #[test]
    fn services_read_per_mode() {
        let targets = [
            TargetRule {
                name: "t".into(),
                service: (None, "p-t".into()),
                ..TargetRule::default()
            },
            TargetRule {
                name: "u".into(),
                service: (None, "p-u".into()),
                proxy_ips: vec!["10.0.0.9".parse().unwrap()],
                ..TargetRule::default()
            },
        ];
        let s = |name: &str| Some(("ouroboros".to_string(), name.to_string()));
        let t = vec![("ouroboros".to_string(), "p-t".to_string())];
        type Case<'a> = (
            &'a [&'a str],
            Option<(String, String)>,
            Vec<(String, String)>,
        );
        let table: [Case<'_>; 8] = [
            (&["--mode", "coredns"], s("ouroboros-proxy"), t.clone()),
            (
                &["--mode", "coredns", "--coredns-answer", "view"],
                s("ouroboros-proxy"),
                t.clone(),
            ),
            (
                &["--mode", "coredns", "--coredns-answer", "rewrite"],
                None,
                vec![],
            ),
            (
                &["--mode", "coredns-import", "--coredns-answer", "rewrite"],
                None,
                vec![],
            ),
            (
                &["--mode", "coredns-import", "--proxy-ip", "10.0.0.1"],
                None,
                t.clone(),
            ),
            // etc-hosts always answers with addresses.
            (
                &["--mode", "etc-hosts", "--coredns-answer", "rewrite"],
                s("ouroboros-proxy"),
                t.clone(),
            ),
            // external-dns has a Service and addresses of its own.
            (
                &[
                    "--mode",
                    "external-dns",
                    "--proxy-ip",
                    "10.0.0.1",
                    "--external-dns-proxy-service",
                    "e",
                ],
                s("e"),
                t.clone(),
            ),
            (
                &[
                    "--mode",
                    "external-dns",
                    "--external-dns-proxy-ip",
                    "10.0.0.1",
                ],
                None,
                t,
            ),
        ];
        for (args, default, named) in table {
            let d = parse(args);
            assert_eq!(proxy_service_read(&d), default, "{args:?}");
            assert_eq!(target_services_read(&d, &targets), named, "{args:?}");
        }
    }

    #[tokio::test]
    async fn etc_hosts_and_external_dns_sinks() {
        // Building the sinks makes no request.
        let client = crate::test_api::unreachable();
        let d = parse(&["--mode", "etc-hosts", "--etc-hosts", "/tmp/h"]);
        let s = sink(&d, &build(&client)).unwrap();
        assert_eq!(s.mode(), "etc-hosts");
        assert_eq!(
            proxy_service_read(&d),
            Some(("ouroboros".into(), "ouroboros-proxy".into()))
        );
        let d = parse(&["--mode", "etc-hosts", "--proxy-ip", "10.0.0.1"]);
        assert_eq!(proxy_service_read(&d), None);

        let d = parse(&[
            "--mode",
            "external-dns",
            "--external-dns-proxy-service",
            "edge",
            "--external-dns-namespace",
            "dns",
        ]);
        let s = sink(&d, &build(&client)).unwrap();
        assert_eq!(s.mode(), "external-dns");
        assert_eq!(d.external_dns.namespace(), "dns");
        assert_eq!(
            proxy_service_read(&d),
            Some(("ouroboros".into(), "edge".into()))
        );
        // Flag values that parse but make no sense are usage errors (exit 64).
        for bad in [
            &["--external-dns-label", "ouroboros.io/instance=x"][..],
            &["--external-dns-annotation", "ouroboros.io/x=y"][..],
            &["--instance", "not valid"][..],
            &["--external-dns-namespace", "Bad_NS"][..],
        ] {
            let mut args = vec!["--mode", "external-dns"];
            args.extend_from_slice(bad);
            // Refused, as a `UsageError` (exit 64): the signature says so.
            let refused = sink(&parse(&args), &build(&client));
            assert!(refused.is_err(), "{bad:?} accepted");
        }
        // The unspecified address is refused earlier, by the flag's parser.
        assert!(parse_args::<DnsArgs>(&["--external-dns-proxy-ip", "0.0.0.0"]).is_err());
    }

    /// Each mode's sink says its own name, and the CoreDNS modes' flag checks refuse what
    /// they cannot write.
    #[tokio::test]
    async fn each_mode_builds_its_own_sink() {
        let client = crate::test_api::unreachable();
        for mode in Mode::value_variants() {
            let name = mode.name();
            let d = parse(&["--mode", name, "--etc-hosts", "/tmp/h"]);
            assert_eq!(sink(&d, &build(&client)).unwrap().mode(), name);
        }
        for (args, ok) in [
            (&["--mode", "coredns", "--coredns-answer", "view"][..], true),
            (
                &["--mode", "coredns-import", "--coredns-answer", "view"],
                false,
            ),
            (
                &[
                    "--mode",
                    "coredns",
                    "--node-local-dns",
                    "--coredns-answer",
                    "rewrite",
                ],
                false,
            ),
            (
                &[
                    "--mode",
                    "coredns-import",
                    "--node-local-dns",
                    "--coredns-answer",
                    "rewrite",
                ],
                false,
            ),
            // Only the CoreDNS modes write node-local-dns.
            (
                &[
                    "--mode",
                    "external-dns",
                    "--node-local-dns",
                    "--coredns-answer",
                    "rewrite",
                ],
                true,
            ),
        ] {
            assert_eq!(sink(&parse(args), &build(&client)).is_ok(), ok, "{args:?}");
        }
    }

    /// The table's name for a mode is the `--mode` value that chooses it.
    #[test]
    fn each_mode_is_named_as_its_flag_value() {
        for mode in Mode::value_variants() {
            let value = mode.to_possible_value().unwrap();
            assert_eq!(mode.name(), value.get_name(), "{mode:?}");
        }
    }
}
