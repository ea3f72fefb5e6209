//! The coredns-import mode: a snippet under one key of the ConfigMap a Corefile imports
//! (`import /etc/coredns/custom/*.override`). It answers and writes node-local-dns as the
//! coredns mode does (`coredns`: `CorednsSink`), into a ConfigMap of its own.

use super::build::Build;
use super::coredns::{self, CorednsSink, CorednsTarget};
use super::{DnsMode, Grant, ProxySource};
use crate::dns::args::{AnswerForm, DnsArgs};
use crate::dns::write::apply::{ImportWriter, Retry};
use crate::dns::write::sink::AnySink;
use crate::flags::UsageError;

/// Why `--coredns-answer view` is refused with `--mode coredns-import`.
pub const VIEW_NEEDS_COREFILE: &str = "--coredns-answer view writes server blocks before the \
     Corefile's root block, which an `import …/*.override` snippet (inside the root block) \
     cannot hold: use --mode coredns or --coredns-answer template";

pub struct CorednsImport;

impl DnsMode for CorednsImport {
    fn name(&self) -> &'static str {
        "coredns-import"
    }

    fn edits_coredns(&self) -> bool {
        true
    }

    fn check(&self, dns: &DnsArgs) -> Result<(), UsageError> {
        coredns::check_node_local_dns(dns)?;
        if dns.coredns_answer == AnswerForm::View {
            return Err(UsageError::new(VIEW_NEEDS_COREFILE));
        }
        Ok(())
    }

    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        super::build::default_proxy(dns)
    }

    fn answers_with_addresses(&self, dns: &DnsArgs) -> bool {
        coredns::answers_with_addresses(dns)
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        let target = CorednsTarget::Import(
            ImportWriter::new(at.client.clone(), dns.import_target(), Retry::default())
                .dry_run(dns.dry_run),
        );
        Ok(AnySink::new(CorednsSink::new(dns, at, target)?))
    }

    fn write_grants(&self, dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        let ns = &dns.coredns_import_namespace;
        vec![
            Grant::configmaps(
                ns,
                &[&dns.coredns_import_configmap],
                // delete: cleanup removes the ConfigMap it created once our key was the last.
                &["get", "update", "delete"],
                "write the import snippet",
            ),
            Grant::configmaps(
                ns,
                &[],
                &["create"],
                "create the import ConfigMap when absent",
            ),
        ]
    }

    fn removal_grants(&self, dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        vec![Grant::configmaps(
            &dns.coredns_import_namespace,
            &[&dns.coredns_import_configmap],
            &["get", "update", "delete"],
            "remove the snippet key (delete the ConfigMap when it is ours and empty)",
        )]
    }
}
