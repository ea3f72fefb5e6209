//! The etc-hosts mode: a marked block in each node's hosts file, written by one controller per
//! node (no lease) through the file the pod mounts (`dns::write::hosts_writer`). It writes no
//! API object, so it needs no RBAC of its own, and removal needs no API client.

use super::build::{default_proxy, proxy_ips, Build};
use super::{DnsMode, Grant, ProxySource};
use crate::dns::args::DnsArgs;
use crate::dns::write::apply::Applied;
use crate::dns::write::error::SinkError;
use crate::dns::write::hosts_writer::HostsWriter;
use crate::dns::write::plan::Plan;
use crate::dns::write::sink::{AnySink, Sink};
use crate::flags::UsageError;

pub struct EtcHosts;

impl DnsMode for EtcHosts {
    fn name(&self) -> &'static str {
        "etc-hosts"
    }

    fn runs_per_node(&self) -> bool {
        true
    }

    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        default_proxy(dns)
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        Ok(AnySink::new(
            hosts_writer(dns, Some(at.client.clone()))
                .targets(at.target_ips(dns))
                .routed(|ips, i| at.route_at(ips, i)),
        ))
    }

    /// A hosts block is removed without the API (and without the proxy's addresses).
    fn offline_removal(&self, dns: &DnsArgs) -> Option<AnySink> {
        Some(AnySink::new(hosts_writer(dns, None)))
    }

    /// A file on the node: no API call.
    fn write_grants(&self, _dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        Vec::new()
    }

    fn removal_grants(&self, _dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        Vec::new()
    }
}

/// The etc-hosts writer. Without a client it can only remove the block (`cleanup`) or write
/// with --proxy-ip.
pub fn hosts_writer(dns: &DnsArgs, client: Option<kube::Client>) -> HostsWriter {
    HostsWriter::new(dns.etc_hosts.clone(), proxy_ips(&default_proxy(dns), client))
        .dry_run(dns.dry_run)
}

impl Sink for HostsWriter {
    fn mode(&self) -> &'static str {
        EtcHosts.name()
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        HostsWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        HostsWriter::cleanup(self).await
    }
}
