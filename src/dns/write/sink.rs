//! The interface between the controller (and `cleanup`) and the DNS modes' writers: each makes
//! its target hold exactly a host set, or removes what it wrote. The controller is generic over
//! it, so its sync loop, metrics and Events are the same for every mode. Each mode's module
//! (`dns::mode`) implements it for its writer.

use std::future::Future;
use std::pin::Pin;

use super::apply::{Applied, ApplyError};
use super::error::{ObjectKey, SinkError};
use super::plan::Plan;

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

/// The backend `--mode` chose (`dns::mode`). `Sink`'s methods are async, which makes it no
/// trait object, so `AnySink` holds the writer behind [`BoxedSink`], whose methods box each
/// call's future (a few calls a sync: the allocation does not matter). That keeps the dispatch
/// in one place with no arm per mode: a mode's writer only implements `Sink`.
pub struct AnySink(Box<dyn BoxedSink>);

impl AnySink {
    pub fn new(sink: impl Sink + 'static) -> Self {
        Self(Box::new(sink))
    }
}

/// A boxed future of a write.
pub type Writing<'a> = Pin<Box<dyn Future<Output = Result<Applied, SinkError>> + Send + 'a>>;

/// [`Sink`] as a trait object: the same calls, each future boxed. Every `Sink` is one.
pub trait BoxedSink: Send + Sync {
    fn mode(&self) -> &'static str;
    fn apply<'a>(&'a self, plan: &'a Plan) -> Writing<'a>;
    fn cleanup(&self) -> Writing<'_>;
}

impl<S: Sink> BoxedSink for S {
    fn mode(&self) -> &'static str {
        Sink::mode(self)
    }

    fn apply<'a>(&'a self, plan: &'a Plan) -> Writing<'a> {
        Box::pin(Sink::apply(self, plan))
    }

    fn cleanup(&self) -> Writing<'_> {
        Box::pin(Sink::cleanup(self))
    }
}

impl Sink for AnySink {
    fn mode(&self) -> &'static str {
        self.0.mode()
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        self.0.apply(plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        self.0.cleanup().await
    }
}
