//! The coredns-import mode: a snippet under one key of the ConfigMap a Corefile imports
//! (`import /etc/coredns/custom/*.override`). It answers and writes node-local-dns as the
//! coredns mode does (`coredns`: `CorednsSink`), into a ConfigMap of its own.

use clap::Args;

use super::build::Build;
use super::coredns::{self, CorednsSink, CorednsTarget};
use super::render::{AnswerArgs, Placed, RenderMode, LOG_TARGET};
use super::{DnsArgs, DnsMode, Grant, ProxySource};
use crate::dns::answer::groups;
use crate::dns::answer_form::AnswerForm;
use crate::dns::write::apply::{ImportWriter, Retry};
use crate::dns::write::sink::AnySink;
use crate::dns::{self, ConfigMapKey};
use crate::flags::UsageError;

/// Why `--coredns-answer view` is refused with `--mode coredns-import` (and what to do instead,
/// in the words of the command refusing it: the controller's flags, or `render`'s subcommands).
const VIEW_NEEDS_COREFILE: &str = "--coredns-answer view writes server blocks before the \
     Corefile's root block, which an `import …/*.override` snippet (inside the root block) \
     cannot hold";

pub struct CorednsImport;

impl DnsMode for CorednsImport {
    fn edits_coredns(&self) -> bool {
        true
    }

    fn check(&self, dns: &DnsArgs) -> Result<(), UsageError> {
        coredns::check_node_local_dns(dns)?;
        if dns.shared.coredns_answer == AnswerForm::View {
            return Err(UsageError::new(format!(
                "{VIEW_NEEDS_COREFILE}: use --mode coredns or --coredns-answer template"
            )));
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
            ImportWriter::new(
                at.client.clone(),
                dns.coredns_import.target(),
                Retry::default(),
            )
            .dry_run(dns.shared.dry_run),
        );
        Ok(AnySink::new(CorednsSink::new(dns, at, target)?))
    }

    fn write_grants(&self, dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        let ns = &dns.coredns_import.coredns_import_namespace;
        vec![
            Grant::configmaps(
                ns,
                &[&dns.coredns_import.coredns_import_configmap],
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
            &dns.coredns_import.coredns_import_namespace,
            &[&dns.coredns_import.coredns_import_configmap],
            &["get", "update", "delete"],
            "remove the snippet key (delete the ConfigMap when it is ours and empty)",
        )]
    }
}

/// coredns-import's own flags: the ConfigMap key it writes.
#[derive(Args, Clone, Debug)]
#[group(skip)]
pub struct Flags {
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
}

impl Flags {
    pub fn target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.coredns_import_namespace,
            &self.coredns_import_configmap,
            &self.coredns_import_key,
        )
    }
}

/// `render coredns-import`'s own flags: how the block answers.
#[derive(Args, Clone, Debug)]
pub struct Render {
    #[command(flatten)]
    pub proxy: AnswerArgs,
}

impl RenderMode for Render {
    const ABOUT: &'static str =
        "The block alone, for a Corefile with `import /etc/coredns/custom/*.override`";

    fn check(&self) -> anyhow::Result<()> {
        if self.proxy.coredns_answer == AnswerForm::View {
            return Err(UsageError::err(format!(
                "{VIEW_NEEDS_COREFILE}: use `render coredns` or --coredns-answer template"
            )));
        }
        Ok(())
    }

    fn render(&self, _edited: &str, placed: &Placed) -> anyhow::Result<String> {
        let proxy = self.proxy.resolved(true, placed.plan.hosts.len());
        let text = dns::coredns_import::render_groups(&groups(&placed.rules(&proxy)?));
        proxy.fits_configmap(&text, "import snippet")?;
        tracing::info!(
            target: LOG_TARGET,
            hosts = placed.plan.hosts.len(),
            "rendered the CoreDNS import snippet"
        );
        Ok(text)
    }
}
