//! Where the DNS configuration is written: the DNS-target flags `controller`, `cleanup`,
//! `render` and `doctor` share (so `cleanup` finds exactly what `controller` wrote). What each
//! mode does with them is its module's, in `dns::mode`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};

use crate::dns::answer::{Answer, ProxyAddrs};
use crate::dns::external;
use crate::dns::{ConfigMapKey, Mode, ProxyFqdn};
use crate::flags::parse_answer_ip;
use crate::target::TargetRule;

/// How the CoreDNS block answers (coredns and coredns-import modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AnswerForm {
    /// `template IN A` / `template IN AAAA` answering only A and AAAA queries with the proxy
    /// Service's ClusterIPs (or --proxy-ip); every other query type keeps its public answer.
    /// Works on CoreDNS 1.7 and later and in node-local-dns.
    Template,
    /// For large sets (thousands of names): a server block per top-level domain before the root
    /// block, whose `view` passes only A and AAAA queries for the hairpinned names (one set
    /// lookup) to the same `template` answers; every other query goes to the root block as
    /// before. About a third of the template pair's size per name. Needs CoreDNS 1.10 or later;
    /// coredns mode only (node-local-dns, which has no `view`, gets the template pair).
    View,
    /// `rewrite name` lines to --proxy-fqdn, as the reference tool writes. A name rewrite
    /// answers every query type for the host from the cluster domain (breaks cert-manager
    /// DNS-01 for apex and delegated hosts; before CoreDNS 1.8.4 for every host), autopath
    /// skips it, and wildcard lines need CoreDNS 1.8.4 or later (`answer auto`).
    Rewrite,
}

impl AnswerForm {
    /// The answer with the proxy's addresses in this form; `None` for `rewrite`, which answers
    /// with a name.
    pub fn with_addrs(self, addrs: ProxyAddrs) -> Option<Answer> {
        match self {
            AnswerForm::Template => Some(Answer::Template(addrs)),
            AnswerForm::View => Some(Answer::View(addrs)),
            AnswerForm::Rewrite => None,
        }
    }
}

/// What external-dns mode writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExternalDnsOutput {
    /// `externaldns.k8s.io/v1alpha1` DNSEndpoint objects (external-dns `--source=crd`, hence
    /// the alias `crd`).
    #[value(alias = "crd")]
    Dnsendpoint,
    /// Annotated headless Services (external-dns `--source=service`).
    Service,
}

pub const DEFAULT_PROXY_SERVICE: &str = "ouroboros-proxy";
pub const DEFAULT_NAMESPACE: &str = "ouroboros";
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Args, Clone, Debug)]
pub struct DnsArgs {
    /// Where to publish the names: coredns, coredns-import, etc-hosts or external-dns.
    #[arg(long, env = "OUROBOROS_CONTROLLER_MODE", value_enum, default_value_t = Mode::Coredns)]
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

    /// Write nothing: log the change each sync would make.
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

    /// coredns: namespace of the CoreDNS ConfigMap.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_NAMESPACE",
        value_name = "NS",
        default_value = "kube-system"
    )]
    pub coredns_namespace: String,

    /// coredns: name of the CoreDNS ConfigMap.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_CONFIGMAP",
        value_name = "NAME",
        default_value = "coredns"
    )]
    pub coredns_configmap: String,

    /// coredns: data key holding the Corefile.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_KEY",
        value_name = "KEY",
        default_value = "Corefile"
    )]
    pub coredns_key: String,

    /// coredns-import: namespace of the ConfigMap the Corefile imports.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_IMPORT_NAMESPACE",
        value_name = "NS",
        default_value = "kube-system"
    )]
    pub coredns_import_namespace: String,

    /// coredns-import: name of that ConfigMap (created if absent).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_IMPORT_CONFIGMAP",
        value_name = "NAME",
        default_value = "coredns-custom"
    )]
    pub coredns_import_configmap: String,

    /// coredns-import: our key in it; must match the import glob (`*.override`).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_COREDNS_IMPORT_KEY",
        value_name = "KEY",
        default_value = "ouroboros.override"
    )]
    pub coredns_import_key: String,

    /// coredns, coredns-import: how the block answers. `template` (A/AAAA only, with the proxy
    /// Service's ClusterIPs) works on every CoreDNS from 1.7; `rewrite` (a name target,
    /// --proxy-fqdn) hijacks every query type for the host and its wildcard lines need CoreDNS
    /// 1.8.4 or later (docs/coredns-answers.md).
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_ANSWER", value_enum, default_value_t = AnswerForm::Template)]
    pub coredns_answer: AnswerForm,

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

    /// etc-hosts: the host's hosts file, mounted into the pod.
    #[arg(
        long = "etc-hosts",
        env = "OUROBOROS_CONTROLLER_ETC_HOSTS",
        value_name = "PATH",
        default_value = "/host/etc/hosts"
    )]
    pub etc_hosts: PathBuf,

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

    /// external-dns: namespace of the objects written [default: this pod's namespace, else
    /// `ouroboros`].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_NAMESPACE",
        value_name = "NS"
    )]
    pub external_dns_namespace: Option<String>,

    /// external-dns: record targets (repeatable; comma-separated in the environment variable)
    /// [default: the proxy Service's ClusterIPs, A and AAAA for dual-stack].
    #[arg(
        long = "external-dns-proxy-ip",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = parse_answer_ip
    )]
    pub external_dns_proxy_ips: Vec<IpAddr>,

    /// external-dns: the Service whose ClusterIPs are the record targets, in
    /// --proxy-service-namespace [default: --proxy-service-name].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_SERVICE",
        value_name = "NAME"
    )]
    pub external_dns_proxy_service: Option<String>,

    /// external-dns: write DNSEndpoint objects (`dnsendpoint`, for external-dns
    /// `--source=crd`) or annotated headless Services (`service`, for `--source=service`).
    #[arg(long, env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_OUTPUT", value_enum, default_value_t = ExternalDnsOutput::Dnsendpoint)]
    pub external_dns_output: ExternalDnsOutput,

    /// external-dns, `--external-dns-output service`: the one annotation prefix the Services'
    /// records are written under, ending in `/`: the `--annotation-prefix` of the external-dns
    /// instance that should publish them (split-horizon: other instances ignore them)
    /// [default: both external-dns.kubernetes.io/ and external-dns.alpha.kubernetes.io/, which
    /// every external-dns version reads].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ANNOTATION_PREFIX",
        value_name = "PREFIX",
        value_parser = external::parse_annotation_prefix
    )]
    pub external_dns_annotation_prefix: Option<String>,

    /// external-dns: take over the DNSEndpoints (or Services) that lexfrei/ouroboros wrote for
    /// this --instance (labels app.kubernetes.io/managed-by=ouroboros and
    /// ouroboros.lexfrei.tech/instance=INSTANCE): each is deleted once ours publishing its names
    /// is written (or, under a name we write, rewritten and relabelled), so no name goes
    /// unpublished, even while a write fails, and that tool's uninstall no longer deletes it.
    /// Other instances' objects are never touched. `cleanup` with it also deletes them.
    #[arg(
        long = "external-dns-adopt",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ADOPT",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub external_dns_adopt: bool,

    #[command(flatten)]
    pub records: RecordArgs,

    #[command(flatten)]
    pub node_local_dns: NodeLocalDnsArgs,
}

/// What every external-dns record carries: flags of `controller` and `cleanup` and of
/// `render external-dns` (same names and variables, so `render` shows what the controller writes).
#[derive(Args, Clone, Debug)]
pub struct RecordArgs {
    /// external-dns: TTL of every record, in seconds [1, 86400].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_RECORD_TTL",
        value_name = "SECONDS",
        default_value_t = external::DEFAULT_TTL,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(external::MAX_TTL))
    )]
    pub external_dns_record_ttl: u32,

    /// external-dns: label key=value added to every object (repeatable; comma-separated in the
    /// environment variable), e.g. for external-dns `--label-filter`. Reserved:
    /// app.kubernetes.io/managed-by and ouroboros.io/* keys.
    #[arg(
        long = "external-dns-label",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_LABEL",
        value_name = "KEY=VALUE",
        value_delimiter = ',',
        value_parser = external::parse_key_value
    )]
    pub external_dns_labels: Vec<(String, String)>,

    /// external-dns: annotation key=value added to every object (repeatable; one per line in
    /// the environment variable, since values may hold commas). Reserved: ouroboros.io/* keys.
    #[arg(
        long = "external-dns-annotation",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ANNOTATION",
        value_name = "KEY=VALUE",
        value_delimiter = '\n',
        value_parser = external::parse_key_value
    )]
    pub external_dns_annotations: Vec<(String, String)>,

    /// Instance name: the `ouroboros.io/instance` label on what external-dns mode writes, so
    /// two installations never delete each other's records.
    #[arg(long, env = "OUROBOROS_INSTANCE", value_name = "NAME", default_value = external::DEFAULT_INSTANCE)]
    pub instance: String,
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

impl DnsArgs {
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

    pub fn coredns_target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.coredns_namespace,
            &self.coredns_configmap,
            &self.coredns_key,
        )
    }

    pub fn import_target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.coredns_import_namespace,
            &self.coredns_import_configmap,
            &self.coredns_import_key,
        )
    }

    pub fn node_local_dns_target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.node_local_dns.node_local_dns_namespace,
            &self.node_local_dns.node_local_dns_configmap,
            "Corefile",
        )
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

    /// --external-dns-namespace, else this pod's namespace, else `ouroboros`.
    pub fn external_dns_namespace(&self) -> String {
        self.external_dns_namespace_or(&own_namespace())
    }

    /// --external-dns-namespace, else `default` (the controller's own namespace).
    pub fn external_dns_namespace_or(&self, default: &str) -> String {
        self.external_dns_namespace
            .clone()
            .unwrap_or_else(|| default.to_string())
    }

    /// The Service whose ClusterIPs are the external-dns record targets (namespace, name).
    pub fn external_dns_proxy_service(&self) -> (String, String) {
        (
            self.proxy_service_namespace(),
            self.external_dns_proxy_service
                .clone()
                .unwrap_or_else(|| self.proxy_service_name.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::parse_args;

    #[test]
    fn external_dns_output_takes_external_dns_own_name_for_dnsendpoints() {
        for (value, want) in [
            ("dnsendpoint", Some(ExternalDnsOutput::Dnsendpoint)),
            ("crd", Some(ExternalDnsOutput::Dnsendpoint)),
            ("service", Some(ExternalDnsOutput::Service)),
            ("ingress", None),
        ] {
            let got = parse_args::<DnsArgs>(&["--external-dns-output", value]).ok();
            assert_eq!(got.map(|d| d.external_dns_output), want, "{value}");
        }
    }

    #[test]
    fn default_fqdn_is_the_reference_tools() {
        let d: DnsArgs = parse_args(&["--proxy-service-namespace", "ouroboros"]).unwrap();
        assert_eq!(
            d.proxy_fqdn("cluster.local").unwrap().as_str(),
            crate::dns::DEFAULT_PROXY_FQDN
        );
        let d: DnsArgs = parse_args(&["--proxy-fqdn", "p.x.svc.example.org."]).unwrap();
        assert_eq!(
            d.proxy_fqdn("cluster.local").unwrap().as_str(),
            "p.x.svc.example.org."
        );
    }
}
