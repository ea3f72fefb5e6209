//! The interface between the controller (and `cleanup`) and the four DNS backends: each makes
//! its target hold exactly a host set, or removes what it wrote. The controller is generic over
//! it, so its sync loop, metrics and Events are the same for every mode.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;

use super::apply::{Applied, ApplyError, CorefileWriter, ImportWriter};
use super::external_writer::ExternalWriter;
use super::hosts_writer::HostsWriter;
use crate::hostname::Hostname;

/// The object an error is about, for a Kubernetes Event on it (`None` in [`SinkError`] for
/// targets that are not API objects, such as a hosts file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKey {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A failed apply or cleanup: the message says what failed, on which object and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SinkError {
    /// Short label for the `result`/`reason` metric labels (`unparseable`, `forbidden`, ...).
    pub reason: &'static str,
    /// Where to put a Warning Event.
    pub object: Option<ObjectKey>,
    pub message: String,
}

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
        }
    }
}

/// One DNS backend. Implementations are idempotent: applying the same set twice writes nothing
/// the second time (`Outcome::Unchanged`).
pub trait Sink: Send + Sync {
    /// The mode name (`coredns`, `coredns-import`, `etc-hosts`, `external-dns`) for logs and
    /// metric labels.
    fn mode(&self) -> &'static str;

    /// Makes the target hold exactly `hosts` (an empty set removes every entry but may keep
    /// the markers).
    fn apply(
        &self,
        hosts: &BTreeSet<Hostname>,
    ) -> impl Future<Output = Result<Applied, SinkError>> + Send;

    /// Removes everything this instance wrote (for `ouroboros cleanup` and uninstall hooks).
    fn cleanup(&self) -> impl Future<Output = Result<Applied, SinkError>> + Send;
}

impl Sink for CorefileWriter {
    fn mode(&self) -> &'static str {
        "coredns"
    }

    async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        Ok(CorefileWriter::apply(self, hosts).await?)
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        Ok(CorefileWriter::cleanup(self).await?)
    }
}

impl Sink for ImportWriter {
    fn mode(&self) -> &'static str {
        "coredns-import"
    }

    async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        Ok(ImportWriter::apply(self, hosts).await?)
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        Ok(ImportWriter::cleanup(self).await?)
    }
}

impl Sink for HostsWriter {
    fn mode(&self) -> &'static str {
        "etc-hosts"
    }

    async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        HostsWriter::apply(self, hosts).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        HostsWriter::cleanup(self).await
    }
}

impl Sink for ExternalWriter {
    fn mode(&self) -> &'static str {
        "external-dns"
    }

    async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        ExternalWriter::apply(self, hosts).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        ExternalWriter::cleanup(self).await
    }
}

/// The backend chosen by `--mode`. (An enum rather than `dyn`: `Sink` has async methods.)
pub enum AnySink {
    Coredns(CorefileWriter),
    CorednsImport(ImportWriter),
    EtcHosts(HostsWriter),
    ExternalDns(ExternalWriter),
}

impl Sink for AnySink {
    fn mode(&self) -> &'static str {
        match self {
            AnySink::Coredns(s) => s.mode(),
            AnySink::CorednsImport(s) => s.mode(),
            AnySink::EtcHosts(s) => s.mode(),
            AnySink::ExternalDns(s) => s.mode(),
        }
    }

    async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        match self {
            AnySink::Coredns(s) => Sink::apply(s, hosts).await,
            AnySink::CorednsImport(s) => Sink::apply(s, hosts).await,
            AnySink::EtcHosts(s) => Sink::apply(s, hosts).await,
            AnySink::ExternalDns(s) => Sink::apply(s, hosts).await,
        }
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        match self {
            AnySink::Coredns(s) => Sink::cleanup(s).await,
            AnySink::CorednsImport(s) => Sink::cleanup(s).await,
            AnySink::EtcHosts(s) => Sink::cleanup(s).await,
            AnySink::ExternalDns(s) => Sink::cleanup(s).await,
        }
    }
}
