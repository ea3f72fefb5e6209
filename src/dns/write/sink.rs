//! The interface between the controller (and `cleanup`) and the four DNS backends: each makes
//! its target hold exactly a host set, or removes what it wrote. The controller is generic over
//! it, so its sync loop, metrics and Events are the same for every mode.

use std::future::Future;

use super::apply::{Applied, ApplyError, CorefileWriter, ImportWriter, Outcome};
use super::error::{ObjectKey, Reason, SinkError};
use super::external_writer::ExternalWriter;
use super::hosts_writer::HostsWriter;
use super::plan::Plan;
use super::proxy_ips::ProxyIps;
use super::routes::Routes;
use crate::dns::answer::{self, Answer, ProxyAddrs, Rules};
use crate::dns::ProxyFqdn;
use crate::header_verdict::Route;
use crate::target::Target;

impl From<ApplyError> for SinkError {
    fn from(e: ApplyError) -> Self {
        let t = e.target();
        Self {
            reason: e.reason(),
            object: Some(ObjectKey {
                api_version: "v1",
                kind: "ConfigMap",
                namespace: t.namespace.clone(),
                name: t.name.clone(),
            }),
            message: e.to_string(),
            kept: Box::default(),
        }
    }
}

/// One DNS backend. Implementations are idempotent: applying the same set twice writes nothing
/// the second time (`Outcome::Unchanged`).
pub trait Sink: Send + Sync {
    /// The mode name (`coredns`, `coredns-import`, `etc-hosts`, `external-dns`) for logs and
    /// metric labels.
    fn mode(&self) -> &'static str;

    /// Makes the target hold exactly the plan's hosts, each answered by its proxy target (an
    /// empty set removes every entry but may keep the markers).
    fn apply(&self, plan: &Plan) -> impl Future<Output = Result<Applied, SinkError>> + Send;

    /// Removes everything this instance wrote (for `ouroboros cleanup` and uninstall hooks).
    fn cleanup(&self) -> impl Future<Output = Result<Applied, SinkError>> + Send;
}

/// Where the CoreDNS modes' answers come from.
pub enum AnswerSource {
    /// The proxy's addresses, resolved at each apply, answered by the template pair or, when
    /// `true`, by the `view` form's server blocks.
    Addresses(ProxyIps, bool),
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
            AnswerSource::Addresses(ips, view) => {
                let ips = ips.resolve().await?;
                // `resolve` never returns an empty list on success.
                ProxyAddrs::new(&ips)
                    .map(if *view {
                        Answer::View
                    } else {
                        Answer::Template
                    })
                    .ok_or_else(|| SinkError {
                        reason: Reason::NoClusterIp,
                        object: None,
                        message: "the proxy has no address to answer with".into(),
                        kept: Box::default(),
                    })
            }
        }
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
    pub target: CorednsTarget,
    pub node_local: Option<CorefileWriter>,
    /// One per proxy target, the default target's first (see [`Plan`]).
    pub answers: Vec<AnswerSource>,
}

impl CorednsSink {
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
        match self.target {
            CorednsTarget::Corefile(_) => "coredns",
            CorednsTarget::Import(_) => "coredns-import",
        }
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

impl Sink for HostsWriter {
    fn mode(&self) -> &'static str {
        "etc-hosts"
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        HostsWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        HostsWriter::cleanup(self).await
    }
}

impl Sink for ExternalWriter {
    fn mode(&self) -> &'static str {
        "external-dns"
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        ExternalWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        ExternalWriter::cleanup(self).await
    }
}

/// The backend chosen by `--mode`. (An enum rather than `dyn`: `Sink` has async methods.)
// One per process, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum AnySink {
    /// coredns and coredns-import.
    Coredns(CorednsSink),
    EtcHosts(HostsWriter),
    ExternalDns(ExternalWriter),
}

impl Sink for AnySink {
    fn mode(&self) -> &'static str {
        match self {
            AnySink::Coredns(s) => s.mode(),
            AnySink::EtcHosts(s) => s.mode(),
            AnySink::ExternalDns(s) => s.mode(),
        }
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        match self {
            AnySink::Coredns(s) => Sink::apply(s, plan).await,
            AnySink::EtcHosts(s) => Sink::apply(s, plan).await,
            AnySink::ExternalDns(s) => Sink::apply(s, plan).await,
        }
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        match self {
            AnySink::Coredns(s) => Sink::cleanup(s).await,
            AnySink::EtcHosts(s) => Sink::cleanup(s).await,
            AnySink::ExternalDns(s) => Sink::cleanup(s).await,
        }
    }
}
