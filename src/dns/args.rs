//! The DNS-target flags every mode shares (`SharedArgs`), which `controller`, `cleanup` and
//! `doctor` take with each mode's own (`DnsArgs`, generated in `dns::mode` from the mode table),
//! so `cleanup` finds exactly what `controller` wrote. A mode's own flags are its module's
//! `Flags`; what a mode does with the flags is its module's too, in `dns::mode`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Arg, ArgAction, Args, Command};

use crate::dns::answer::Version;
use crate::dns::answer_form::{parse_version, AnswerForm};
use crate::dns::{ConfigMapKey, Mode, ProxyFqdn, MODE_HELP};
use crate::flags::parse_answer_ip;
use crate::target::TargetRule;

pub const DEFAULT_PROXY_SERVICE: &str = "ouroboros-proxy";
pub const DEFAULT_NAMESPACE: &str = "ouroboros";
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The flags of more than one mode (and of none in particular: the API client's, `--dry-run`),
/// flattened into `DnsArgs` beside each mode's own `Flags`.
#[derive(Args, Clone, Debug)]
#[group(skip)]
pub struct SharedArgs {
    // The help lists the values from the mode table (`MODE_HELP`), so a new mode is named there
    // without an edit here.
    #[arg(long, env = "OUROBOROS_CONTROLLER_MODE", value_enum, default_value_t = Mode::Coredns, help = MODE_HELP)]
    pub mode: Mode,

    /// Kubeconfig file [default: in-cluster service account, else $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "OUROBOROS_CONTROLLER_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// How long to wait for the API server to connect (TCP and TLS) and, in doctor and
    /// cleanup, to answer each request; then the call fails with a hint that says so.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_API_TIMEOUT",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::flags::parse_duration
    )]
    pub api_timeout: std::time::Duration,

    /// Write nothing: log what would be written or removed (the controller: at each sync).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_DRY_RUN",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub dry_run: bool,

    /// coredns, coredns-import: how the block answers. `auto` picks `view` in coredns mode on
    /// CoreDNS 1.10 and later (--coredns-version, else the CoreDNS Deployment's image tag) and
    /// `template` otherwise; `template` (A/AAAA only, with the proxy Service's ClusterIPs) works
    /// on every CoreDNS from 1.7; `view` needs 1.10; `rewrite` (a name target, --proxy-fqdn)
    /// hijacks every query type for the host and its wildcard lines need CoreDNS 1.8.4 or later
    /// (docs/coredns-answers.md).
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_ANSWER", value_enum, default_value_t = AnswerForm::Auto)]
    pub coredns_answer: AnswerForm,

    /// coredns with --coredns-answer auto: the cluster's CoreDNS version (e.g. 1.11.3), for
    /// when the CoreDNS Deployment's image tag does not say it (a digest-only image, a
    /// Deployment not named `coredns`) [default: read from that tag].
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_VERSION", value_name = "VERSION", value_parser = parse_version)]
    pub coredns_version: Option<Version>,

    /// coredns, coredns-import with --coredns-answer rewrite: the rewrite target, the proxy
    /// Service's FQDN with its trailing dot [default:
    /// PROXY_SERVICE_NAME.PROXY_SERVICE_NAMESPACE.svc.CLUSTER_DOMAIN.].
    #[arg(long, env = "OUROBOROS_CONTROLLER_PROXY_FQDN", value_name = "FQDN", value_parser = ProxyFqdn::parse)]
    pub proxy_fqdn: Option<ProxyFqdn>,

    /// The proxy Service's name: without --proxy-ip its ClusterIPs are the answers (watched, so
    /// a changed Service is followed), and the default --proxy-fqdn is built from it.
    #[arg(long, env = "OUROBOROS_CONTROLLER_PROXY_SERVICE_NAME", value_name = "NAME", default_value = DEFAULT_PROXY_SERVICE)]
    pub proxy_service_name: String,

    /// The proxy Service's namespace [default: this pod's namespace, else `ouroboros`].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_PROXY_SERVICE_NAMESPACE",
        value_name = "NS"
    )]
    pub proxy_service_namespace: Option<String>,

    /// coredns, coredns-import (template answers), etc-hosts: the proxy's IP addresses
    /// (repeatable; comma-separated in the environment variable) [default: the proxy Service's
    /// ClusterIPs, read from the API].
    #[arg(
        long = "proxy-ip",
        env = "OUROBOROS_CONTROLLER_PROXY_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = parse_answer_ip
    )]
    pub proxy_ips: Vec<IpAddr>,

    #[command(flatten)]
    pub node_local_dns: NodeLocalDnsArgs,
}

/// node-local-dns: part of the DNS-target flags, so `controller`, `cleanup` and `doctor` agree
/// on whether its Corefile holds our block.
#[derive(Args, Clone, Debug)]
pub struct NodeLocalDnsArgs {
    /// coredns, coredns-import: also write the template block into node-local-dns's Corefile
    /// (its `.:53` server block), whose cache otherwise forwards public names past CoreDNS.
    /// Off: the controller only warns when that ConfigMap exists. Needs --coredns-answer
    /// template.
    #[arg(
        long = "node-local-dns",
        env = "OUROBOROS_CONTROLLER_NODE_LOCAL_DNS",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub enabled: bool,

    /// coredns, coredns-import: namespace of the node-local-dns ConfigMap.
    #[arg(
        long,
        env = "OUROBOROS_NODE_LOCAL_DNS_NAMESPACE",
        value_name = "NS",
        default_value = "kube-system"
    )]
    pub node_local_dns_namespace: String,

    /// coredns, coredns-import: name of the node-local-dns ConfigMap (`nodelocaldns` on
    /// kubespray); its key `Corefile` holds the Corefile.
    #[arg(
        long,
        env = "OUROBOROS_NODE_LOCAL_DNS_CONFIGMAP",
        value_name = "NAME",
        default_value = "node-local-dns"
    )]
    pub node_local_dns_configmap: String,
}

/// This pod's namespace (from its service account), if running in a cluster.
pub fn pod_namespace() -> Option<String> {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The namespace this process runs in: the pod's, else `ouroboros`. The default of every
/// "this pod's namespace" flag.
pub fn own_namespace() -> String {
    pod_namespace().unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

impl SharedArgs {
    pub fn proxy_service_namespace(&self) -> String {
        self.proxy_service_namespace
            .clone()
            .unwrap_or_else(own_namespace)
    }

    /// --proxy-fqdn, else composed from the proxy Service and the cluster domain.
    pub fn proxy_fqdn(&self, cluster_domain: &str) -> Result<ProxyFqdn, String> {
        match &self.proxy_fqdn {
            Some(f) => Ok(f.clone()),
            None => ProxyFqdn::for_service(
                &self.proxy_service_name,
                &self.proxy_service_namespace(),
                cluster_domain,
            ),
        }
    }

    /// (namespace, name) of each named target's proxy Service; without a namespace, in
    /// --proxy-service-namespace.
    pub fn target_services(&self, targets: &[TargetRule]) -> Vec<(String, String)> {
        targets
            .iter()
            .map(|t| {
                let (namespace, name) = &t.service;
                let ns = namespace
                    .clone()
                    .unwrap_or_else(|| self.proxy_service_namespace());
                (ns, name.clone())
            })
            .collect()
    }
}

impl NodeLocalDnsArgs {
    pub fn target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.node_local_dns_namespace,
            &self.node_local_dns_configmap,
            "Corefile",
        )
    }
}

/// The DNS-target flags in the order `--help` and docs/cli have always listed them, interleaving
/// the shared ones with the modes' own. Each mode's flags are a struct of their own, flattened
/// one after the other, which would regroup them; `in_published_order` puts them back. A flag
/// not listed (a new mode's) follows these, in the mode table's order.
const PUBLISHED_ORDER: &[&str] = &[
    "mode",
    "kubeconfig",
    "api-timeout",
    "dry-run",
    "coredns-namespace",
    "coredns-configmap",
    "coredns-key",
    "coredns-import-namespace",
    "coredns-import-configmap",
    "coredns-import-key",
    "coredns-answer",
    "coredns-version",
    "proxy-fqdn",
    "proxy-service-name",
    "proxy-service-namespace",
    "etc-hosts",
    "proxy-ip",
    "external-dns-namespace",
    "external-dns-proxy-ip",
    "external-dns-proxy-service",
    "external-dns-output",
    "external-dns-annotation-prefix",
    "external-dns-adopt",
    "external-dns-record-ttl",
    "external-dns-label",
    "external-dns-annotation",
    "instance",
    "node-local-dns",
    "node-local-dns-namespace",
    "node-local-dns-configmap",
];

/// Adds to `cmd` the flags `add` declares, in `PUBLISHED_ORDER`. They are declared on a scratch
/// command first (clap adds a flattened struct's flags in one run, and has no way to move a flag
/// once added), without a display order of their own, so `cmd` numbers them as it adds them.
/// Their help heading is none: no command that takes them sets one before them.
pub fn in_published_order(cmd: Command, add: impl FnOnce(Command) -> Command) -> Command {
    let scratch = add(Command::new("dns").next_display_order(None));
    let mut flags: Vec<Arg> = scratch.get_arguments().cloned().collect();
    // Stable: the unlisted flags keep the order they were declared in.
    flags.sort_by_key(|a| {
        a.get_long()
            .and_then(|long| PUBLISHED_ORDER.iter().position(|p| *p == long))
            .unwrap_or(PUBLISHED_ORDER.len())
    });
    cmd.args(flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::mode::DnsArgs;
    use crate::flags::parse_args;
    use clap::CommandFactory;

    #[test]
    fn default_fqdn_is_the_reference_tools() {
        let d: DnsArgs = parse_args(&["--proxy-service-namespace", "ouroboros"]).unwrap();
        assert_eq!(
            d.shared.proxy_fqdn("cluster.local").unwrap().as_str(),
            crate::dns::DEFAULT_PROXY_FQDN
        );
        let d: DnsArgs = parse_args(&["--proxy-fqdn", "p.x.svc.example.org."]).unwrap();
        assert_eq!(
            d.shared.proxy_fqdn("cluster.local").unwrap().as_str(),
            "p.x.svc.example.org."
        );
    }

    /// The published order names flags that exist, each once, and puts them first, in its
    /// order; whatever it does not name follows in the order declared.
    #[test]
    fn flags_come_in_the_published_order() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            dns: DnsArgs,
        }
        let cmd = Cli::command();
        let longs: Vec<&str> = cmd.get_arguments().filter_map(Arg::get_long).collect();
        assert_eq!(&longs[..PUBLISHED_ORDER.len()], PUBLISHED_ORDER);
        let declared = in_published_order(Command::new("t"), |c| {
            c.arg(Arg::new("z").long("zz"))
                .arg(Arg::new("m").long("mode"))
                .arg(Arg::new("a").long("aa"))
        });
        let got: Vec<&str> = declared.get_arguments().filter_map(Arg::get_long).collect();
        assert_eq!(got, ["mode", "zz", "aa"]);
    }
}
