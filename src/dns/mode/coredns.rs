//! The coredns mode: a marked block in the CoreDNS Corefile ConfigMap. Also what it shares
//! with coredns-import (`coredns_import`): the sink writing one CoreDNS target and, opted in,
//! node-local-dns's Corefile ([`CorednsSink`]), each target's answer ([`AnswerSource`]) and
//! the flag checks.

use std::path::{Path, PathBuf};

use clap::Args;

use super::build::{default_proxy, proxy_ips, Build};
use super::render::{AnswerArgs, Placed, RenderMode, LOG_TARGET};
use super::{DnsArgs, DnsMode, Grant, ProxySource};
use crate::dns::answer::{self, groups, Answer, ProxyAddrs, Rules};
use crate::dns::answer_form::AnswerForm;
use crate::dns::answer_form::{pick, Known, COREDNS_DEPLOYMENT};
use crate::dns::write::apply::{Applied, CorefileWriter, ImportWriter, Outcome, Retry};
use crate::dns::write::error::{Reason, SinkError};
use crate::dns::write::form::CurrentForm;
use crate::dns::write::plan::Plan;
use crate::dns::write::proxy_ips::ProxyIps;
use crate::dns::write::routes::Routes;
use crate::dns::write::sink::{AnySink, Sink};
use crate::dns::{self, ConfigMapKey, ProxyFqdn};
use crate::flags::UsageError;
use crate::header_verdict::Route;
use crate::target::Target;

pub struct Coredns;

impl DnsMode for Coredns {
    fn edits_coredns(&self) -> bool {
        true
    }

    fn edits_corefile(&self) -> bool {
        true
    }

    fn check(&self, dns: &DnsArgs) -> Result<(), UsageError> {
        check_node_local_dns(dns)
    }

    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        default_proxy(dns)
    }

    fn answers_with_addresses(&self, dns: &DnsArgs) -> bool {
        answers_with_addresses(dns)
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        let mut writer =
            CorefileWriter::new(at.client.clone(), dns.coredns.target(), Retry::default())
                .dry_run(dns.shared.dry_run);
        if let Some(limit) = &at.limit {
            writer = writer.reload_limit(limit.clone());
        }
        let target = CorednsTarget::Corefile(writer);
        Ok(AnySink::new(CorednsSink::new(dns, at, target)?))
    }

    fn write_grants(&self, dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        let mut grants = vec![Grant::configmaps(
            &dns.coredns.coredns_namespace,
            &[&dns.coredns.coredns_configmap],
            // list/watch: the revert watch (field selector metadata.name=<name>).
            &["get", "list", "watch", "update"],
            "edit the Corefile and restore it when reverted",
        )];
        grants.push(Grant {
            namespace: dns.coredns.coredns_namespace.clone(),
            api_group: "apps",
            resource: "deployments",
            names: vec![COREDNS_DEPLOYMENT.to_string()],
            verbs: &["get"],
            why: "read CoreDNS's memory limit (the reload guard) and, for --coredns-answer \
                  auto, its version",
        });
        grants
    }

    fn removal_grants(&self, dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        vec![Grant::configmaps(
            &dns.coredns.coredns_namespace,
            &[&dns.coredns.coredns_configmap],
            &["get", "update"],
            "remove the block from the Corefile",
        )]
    }
}

/// coredns's own flags: the Corefile ConfigMap it edits.
#[derive(Args, Clone, Debug)]
#[group(skip)]
pub struct Flags {
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
}

impl Flags {
    pub fn target(&self) -> ConfigMapKey {
        ConfigMapKey::new(
            &self.coredns_namespace,
            &self.coredns_configmap,
            &self.coredns_key,
        )
    }
}

/// `render coredns`'s own flags: the Corefile to edit and how the block answers.
#[derive(Args, Clone, Debug)]
pub struct Render {
    /// The Corefile to edit (e.g. `kubectl -n kube-system get configmap coredns -o
    /// jsonpath='{.data.Corefile}'`), or `-` for stdin.
    #[arg(long, env = "OUROBOROS_RENDER_COREFILE", value_name = "FILE")]
    pub corefile: PathBuf,
    #[command(flatten)]
    pub proxy: AnswerArgs,
}

impl RenderMode for Render {
    const ABOUT: &'static str = "A Corefile with the ouroboros block spliced in: the A/AAAA \
        template pair in its root server block (the same text suits node-local-dns's Corefile), \
        or with `--coredns-answer view` server blocks before it";

    fn edits(&self) -> Option<(&Path, &'static str)> {
        Some((&self.corefile, "Corefile"))
    }

    fn render(&self, edited: &str, placed: &Placed) -> anyhow::Result<String> {
        let hosts = &placed.plan.hosts;
        let proxy = self.proxy.resolved(false, hosts.len());
        let rules = placed.rules(&proxy)?;
        let edit = dns::corefile::splice_groups(edited, &groups(&rules)).map_err(|e| {
            anyhow::anyhow!("{}: {e} (nothing was printed)", self.corefile.display())
        })?;
        for t in edit.findings.taken() {
            tracing::warn!(
                target: LOG_TARGET,
                corefile = %self.corefile.display(),
                hostname = %t.host,
                by = %t.by,
                line = t.line,
                "{}",
                t.note
            );
        }
        if !hosts.is_empty() && !edit.findings.has_reload {
            tracing::warn!(
                target: LOG_TARGET,
                corefile = %self.corefile.display(),
                "the root server block has no `reload` plugin: CoreDNS reads its Corefile only at start, so restart CoreDNS after applying this (or add `reload`)"
            );
        }
        if edit.findings.view_as_pair {
            tracing::warn!(
                target: LOG_TARGET,
                corefile = %self.corefile.display(),
                "this is node-local-dns's Corefile (no `kubernetes` plugin, a link-local `bind`): its node-cache has no `view` plugin and would not start with one, so the names are answered with the template pair in its root block instead of --coredns-answer view"
            );
        }
        if edit.findings.imports_custom_override {
            tracing::warn!(
                target: LOG_TARGET,
                corefile = %self.corefile.display(),
                "the Corefile imports /etc/coredns/custom/*.override: consider `ouroboros render coredns-import` and put the snippet into the coredns-custom ConfigMap instead of editing the Corefile"
            );
        }
        proxy.fits_configmap(&edit.text, "Corefile")?;
        tracing::info!(
            target: LOG_TARGET,
            hosts = hosts.len(),
            changed = edit.changed,
            bytes = edit.text.len(),
            "rendered the Corefile"
        );
        Ok(edit.text)
    }
}

/// The CoreDNS modes' flag check: node-local-dns needs addresses to answer with.
pub(super) fn check_node_local_dns(dns: &DnsArgs) -> Result<(), UsageError> {
    if super::writes_node_local_dns(dns) && dns.shared.coredns_answer == AnswerForm::Rewrite {
        return Err(UsageError::new(
            "--node-local-dns needs --coredns-answer template or view (it then gets the \
             template pair): node-local-dns has no kubernetes plugin, so a rewritten cluster \
             name would be forwarded upstream and fail",
        ));
    }
    Ok(())
}

/// Whether the controller reads the CoreDNS Deployment: coredns mode, `--coredns-answer auto`
/// and no `--coredns-version`.
pub fn reads_coredns_version(dns: &DnsArgs) -> bool {
    dns.shared.mode == crate::dns::Mode::Coredns
        && dns.shared.coredns_answer == AnswerForm::Auto
        && dns.shared.coredns_version.is_none()
}

/// Whether the CoreDNS modes answer with the proxy's addresses (not `rewrite`).
pub(super) fn answers_with_addresses(dns: &DnsArgs) -> bool {
    dns.shared.coredns_answer != AnswerForm::Rewrite
}

/// The form the CoreDNS writers answer in: the controller's (`auto`'s pick, kept up to date),
/// else the flags' with `auto` as the pair until picked.
fn current_form(dns: &DnsArgs, at: &Build<'_>) -> CurrentForm {
    at.form.clone().unwrap_or_else(|| {
        let known = Known::Unknown("not read".into());
        CurrentForm::new(pick(
            dns.shared.coredns_answer,
            &known,
            dns.shared.mode == crate::dns::Mode::CorednsImport,
        ))
    })
}

/// Where the CoreDNS modes' answers come from.
pub enum AnswerSource {
    /// The proxy's addresses, resolved at each apply, answered in the form `CurrentForm` holds
    /// then (the template pair or the `view` form's server blocks).
    Addresses(ProxyIps, CurrentForm),
    /// Rewrite lines to the proxy Service's name.
    Rewrite(ProxyFqdn),
    /// Rewrite lines to the proxy Service's name or, when `target`'s pick is direct, to the
    /// ingress controller Service's.
    RoutedRewrite {
        relay: ProxyFqdn,
        direct: ProxyFqdn,
        routes: Routes,
        target: Target,
    },
}

impl AnswerSource {
    pub async fn resolve(&self) -> Result<Answer, SinkError> {
        match self {
            AnswerSource::Rewrite(fqdn) => Ok(Answer::Rewrite(fqdn.clone())),
            AnswerSource::RoutedRewrite {
                relay,
                direct,
                routes,
                target,
            } => Ok(Answer::Rewrite(match routes.get(*target) {
                Route::Direct => direct.clone(),
                Route::Relay | Route::Skip => relay.clone(),
            })),
            AnswerSource::Addresses(ips, form) => {
                let ips = ips.resolve().await?;
                // `resolve` never returns an empty list on success.
                ProxyAddrs::new(&ips)
                    .and_then(|a| form.form().with_addrs(a))
                    .ok_or_else(|| SinkError {
                        reason: Reason::NoClusterIp,
                        object: None,
                        message: "the proxy has no address to answer with".into(),
                        kept: Box::default(),
                    })
            }
        }
    }

    /// Where the CoreDNS modes' answers come from: the default target's, then each named
    /// target's, each as the routing picks (relay or direct). `client`: `None` only for
    /// removal.
    fn all(
        dns: &DnsArgs,
        client: Option<kube::Client>,
        at: &Build<'_>,
    ) -> Result<Vec<AnswerSource>, UsageError> {
        let sources = Self::relayed(dns, client.clone(), at)?;
        let Some(routing) = at.routing else {
            return Ok(sources);
        };
        sources
            .into_iter()
            .zip(routing.rules)
            .map(|(source, rule)| {
                Ok(match (source, rule.controller_service.as_ref()) {
                    (AnswerSource::Addresses(ips, view), _) => {
                        AnswerSource::Addresses(routing.wrap(ips, rule, client.clone()), view)
                    }
                    // A rewrite answers with a name: the Service's (start-up refuses a direct
                    // answer from `direct-ip=` alone under rewrite).
                    (AnswerSource::Rewrite(relay), Some(service)) => AnswerSource::RoutedRewrite {
                        relay,
                        direct: ProxyFqdn::for_service(&service.1, &service.0, at.cluster_domain)
                            .map_err(UsageError)?,
                        routes: routing.routes.clone(),
                        target: rule.target,
                    },
                    (other, _) => other,
                })
            })
            .collect()
    }

    /// [`all`](Self::all) through the proxies only.
    fn relayed(
        dns: &DnsArgs,
        client: Option<kube::Client>,
        at: &Build<'_>,
    ) -> Result<Vec<AnswerSource>, UsageError> {
        let form = current_form(dns, at);
        let default = match dns.shared.coredns_answer {
            AnswerForm::Auto | AnswerForm::Template | AnswerForm::View => AnswerSource::Addresses(
                proxy_ips(&default_proxy(dns), client.clone()),
                form.clone(),
            ),
            AnswerForm::Rewrite => AnswerSource::Rewrite(
                dns.shared
                    .proxy_fqdn(at.cluster_domain)
                    .map_err(UsageError)?,
            ),
        };
        let mut out = vec![default];
        let services = dns.shared.target_services(at.targets);
        let ips = super::build::target_ips(dns, client.as_ref(), at.targets);
        for ((ns, name), ips) in services.into_iter().zip(ips) {
            out.push(match dns.shared.coredns_answer {
                AnswerForm::Auto | AnswerForm::Template | AnswerForm::View => {
                    AnswerSource::Addresses(ips, form.clone())
                }
                AnswerForm::Rewrite => AnswerSource::Rewrite(
                    ProxyFqdn::for_service(&name, &ns, at.cluster_domain).map_err(UsageError)?,
                ),
            });
        }
        Ok(out)
    }
}

/// The CoreDNS target of the coredns or coredns-import mode.
pub enum CorednsTarget {
    Corefile(CorefileWriter),
    Import(ImportWriter),
}

/// The coredns and coredns-import modes: the CoreDNS target and, opted in, node-local-dns's
/// Corefile, both holding the same rules. Without an address to answer with nothing is
/// written (an empty answer would black-hole the names).
pub struct CorednsSink {
    /// The mode's name, for logs and metric labels.
    pub mode: &'static str,
    pub target: CorednsTarget,
    pub node_local: Option<CorefileWriter>,
    /// One per proxy target, the default target's first (see [`Plan`]).
    pub answers: Vec<AnswerSource>,
}

impl CorednsSink {
    /// The sink writing `target` and, with --node-local-dns, node-local-dns's Corefile.
    pub(super) fn new(
        dns: &DnsArgs,
        at: &Build<'_>,
        target: CorednsTarget,
    ) -> Result<Self, UsageError> {
        let node_local = super::writes_node_local_dns(dns).then(|| {
            CorefileWriter::node_local_dns(
                at.client.clone(),
                dns.shared.node_local_dns.target(),
                Retry::default(),
            )
            .dry_run(dns.shared.dry_run)
        });
        Ok(CorednsSink {
            mode: dns.shared.mode.name(),
            target,
            node_local,
            answers: AnswerSource::all(dns, Some(at.client.clone()), at)?,
        })
    }

    /// Resolves each target's answer (the default's always, a named target's when it has
    /// names), then writes the main target and node-local-dns.
    async fn write(&self, plan: &Plan) -> Result<Applied, SinkError> {
        let mut rules: Rules = Vec::new();
        for (i, hosts) in plan.groups(self.answers.len())?.into_iter().enumerate() {
            if i > 0 && hosts.is_empty() {
                continue;
            }
            let answer = self.answers[i].resolve().await?;
            rules.push((hosts.into_owned(), answer));
        }
        let groups = answer::groups(&rules);
        let main = match &self.target {
            CorednsTarget::Corefile(w) => w.apply_groups(&groups).await?,
            CorednsTarget::Import(w) => w.apply_groups(&groups).await?,
        };
        let applied = match &self.node_local {
            Some(w) => merge(main, w.apply_groups(&groups).await?),
            None => main,
        };
        Ok(Applied {
            rules: Some(rules),
            ..applied
        })
    }
}

/// One report for two writes: the main target's change and findings, the node-local one's
/// write counted in the outcome and conflicts.
fn merge(main: Applied, node_local: Applied) -> Applied {
    let outcome = match (main.outcome, node_local.outcome) {
        (Outcome::Unchanged, other) => other,
        (own, _) => own,
    };
    Applied {
        rules: None,
        outcome,
        conflicts: main.conflicts + node_local.conflicts,
        change: main.change.or(node_local.change),
        findings: main.findings,
        texts: [main.texts, node_local.texts].concat(),
    }
}

impl Sink for CorednsSink {
    fn mode(&self) -> &'static str {
        self.mode
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        self.write(plan).await
    }

    /// Needs no answer (and so no proxy address): removing a block only reads the ConfigMap.
    async fn cleanup(&self) -> Result<Applied, SinkError> {
        let main = match &self.target {
            CorednsTarget::Corefile(w) => w.cleanup().await?,
            CorednsTarget::Import(w) => w.cleanup().await?,
        };
        Ok(match &self.node_local {
            Some(w) => merge(main, w.cleanup().await?),
            None => main,
        })
    }
}
