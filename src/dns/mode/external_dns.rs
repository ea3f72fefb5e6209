//! The external-dns mode: DNSEndpoint objects (or annotated headless Services) that
//! external-dns publishes, written by `dns::write::external_writer`.

use super::build::{proxy_ips, Build};
use super::{DnsMode, Grant, ProxySource};
use crate::dns::args::{DnsArgs, ExternalDnsOutput};
use crate::dns::write::apply::Applied;
use crate::dns::write::error::SinkError;
use crate::dns::write::external_writer::{ExternalWriter, Output, Settings};
use crate::dns::write::plan::Plan;
use crate::dns::write::sink::{AnySink, Sink};
use crate::flags::UsageError;

pub struct ExternalDns;

/// The CRD of `--external-dns-output dnsendpoint`.
const DNSENDPOINT_CRD: &str = "dnsendpoints.externaldns.k8s.io";

impl DnsMode for ExternalDns {
    fn name(&self) -> &'static str {
        "external-dns"
    }

    fn crd(&self, dns: &DnsArgs) -> Option<&'static str> {
        match dns.external_dns_output {
            ExternalDnsOutput::Dnsendpoint => Some(DNSENDPOINT_CRD),
            ExternalDnsOutput::Service => None,
        }
    }

    /// --external-dns-proxy-ip, else the Service --external-dns-proxy-service names.
    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        ProxySource {
            service: dns.external_dns_proxy_service(),
            ips: dns.external_dns_proxy_ips.clone(),
            flag: "--external-dns-proxy-ip",
        }
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        Ok(AnySink::new(
            external_writer(dns, at.client.clone())?
                .targets(at.target_ips(dns))
                .routed(|ips, i| at.route_at(ips, i)),
        ))
    }

    // list: this instance's objects (and, before creating, the namespace's names); patch +
    // create: server-side apply (of an absent object creates it); delete: leftovers. See
    // dns::write::external_writer.
    fn write_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant> {
        let (api_group, resource) = written(dns.external_dns_output);
        vec![Grant {
            namespace: dns.external_dns_namespace_or(namespace),
            api_group,
            resource,
            names: Vec::new(),
            verbs: &["list", "create", "patch", "delete"],
            why: match dns.external_dns_output {
                ExternalDnsOutput::Dnsendpoint => {
                    "write DNSEndpoints and delete this instance's leftovers"
                }
                ExternalDnsOutput::Service => {
                    "write annotated headless Services and delete this instance's leftovers"
                }
            },
        }]
    }

    fn removal_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant> {
        let (api_group, resource) = written(dns.external_dns_output);
        vec![Grant {
            namespace: dns.external_dns_namespace_or(namespace),
            api_group,
            resource,
            names: Vec::new(),
            verbs: &["list", "delete"],
            why: "delete this instance's objects",
        }]
    }
}

/// The API group and resource of what `output` writes.
fn written(output: ExternalDnsOutput) -> (&'static str, &'static str) {
    match output {
        ExternalDnsOutput::Dnsendpoint => ("externaldns.k8s.io", "dnsendpoints"),
        ExternalDnsOutput::Service => ("", "services"),
    }
}

/// The external-dns writer; invalid labels, annotations or targets are usage errors.
pub fn external_writer(dns: &DnsArgs, client: kube::Client) -> Result<ExternalWriter, UsageError> {
    let ips = proxy_ips(&ExternalDns.proxy(dns), Some(client.clone()));
    let output = match dns.external_dns_output {
        ExternalDnsOutput::Dnsendpoint => Output::DnsEndpoint,
        ExternalDnsOutput::Service => Output::Service,
    };
    let settings = Settings {
        namespace: dns.external_dns_namespace(),
        instance: dns.records.instance.clone(),
        ttl: dns.records.external_dns_record_ttl,
        labels: dns.records.external_dns_labels.clone(),
        annotations: dns.records.external_dns_annotations.clone(),
        annotation_prefix: dns.external_dns_annotation_prefix.clone(),
        adopt: dns.external_dns_adopt,
    };
    let w = ExternalWriter::new(client, output, settings, ips)
        .map_err(|e| UsageError(format!("external-dns flags: {e}")))?;
    Ok(w.dry_run(dns.dry_run))
}

impl Sink for ExternalWriter {
    fn mode(&self) -> &'static str {
        ExternalDns.name()
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        ExternalWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        ExternalWriter::cleanup(self).await
    }
}
