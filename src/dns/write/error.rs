//! The one error of the write paths: what failed (a [`Reason`], which is also the metric label),
//! on which object, and a message that says what to do. A leaf of `dns::write`: the writers and
//! the `Sink` trait both import it, and it imports neither.

use std::fmt;

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

/// Why a write failed. [`Reason::as_str`] is the `result`/`reason` metric label and the word
/// tests and logs use, so it never changes for a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The target's text (Corefile, hosts file) cannot be parsed; nothing was written.
    Unparseable,
    /// The target object or file, or the proxy Service, does not exist.
    NotFound,
    /// The ConfigMap exists without the data key.
    KeyMissing,
    /// The write would exceed the API server's ConfigMap size limit; never sent.
    TooLarge,
    /// A reload of the written Corefile is predicted to exceed CoreDNS's memory limit; never
    /// sent.
    ReloadTooLarge,
    /// RBAC refused a call.
    Forbidden,
    /// Someone else kept writing the target (409, or a file that kept changing).
    Conflict,
    /// Any other API error.
    Api,
    /// A file system error.
    Io,
    /// A flag or setting that cannot work (found at write time).
    Invalid,
    /// The proxy Service has no ClusterIP to answer with.
    NoClusterIp,
    /// The external-dns CRD is not installed.
    CrdMissing,
    /// An object with our name belongs to someone else.
    ForeignObject,
}

impl Reason {
    /// Every reason, for tables and tests.
    pub const ALL: [Reason; 13] = [
        Reason::Unparseable,
        Reason::NotFound,
        Reason::KeyMissing,
        Reason::TooLarge,
        Reason::ReloadTooLarge,
        Reason::Forbidden,
        Reason::Conflict,
        Reason::Api,
        Reason::Io,
        Reason::Invalid,
        Reason::NoClusterIp,
        Reason::CrdMissing,
        Reason::ForeignObject,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unparseable => "unparseable",
            Reason::NotFound => "not_found",
            Reason::KeyMissing => "key_missing",
            Reason::TooLarge => "too_large",
            Reason::ReloadTooLarge => "reload_too_large",
            Reason::Forbidden => "forbidden",
            Reason::Conflict => "conflict",
            Reason::Api => "api",
            Reason::Io => "io",
            Reason::Invalid => "invalid",
            Reason::NoClusterIp => "no_cluster_ip",
            Reason::CrdMissing => "crd_missing",
            Reason::ForeignObject => "foreign_object",
        }
    }

    /// Another attempt cannot fix it: the input or the configuration is wrong (for `cleanup`'s
    /// retries).
    pub fn is_configuration(self) -> bool {
        matches!(
            self,
            Reason::Unparseable
                | Reason::NotFound
                | Reason::KeyMissing
                | Reason::Invalid
                | Reason::ForeignObject
                // RBAC does not change between attempts: a Role has to be granted.
                | Reason::Forbidden
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the label, so `assert_eq!(e.reason, "forbidden")` reads as the metric does.
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// An object a failed sync left in place although it is to go (taken over from the reference
/// tool, renamed, or no longer wanted): it still publishes names whose object of ours is not
/// written yet, so deleting it would withdraw them from DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub object: ObjectKey,
    /// What it publishes and which of ours it waits for (for a log line and an Event).
    pub note: String,
}

/// The [`Kept`] objects of one failed sync, behind one pointer in [`SinkError`]: the error
/// travels in every `Result` of the write paths, so it stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptObjects(pub Vec<Kept>);

impl std::ops::Deref for KeptObjects {
    type Target = [Kept];

    fn deref(&self) -> &[Kept] {
        &self.0
    }
}

/// A failed apply or cleanup: the message says what failed, on which object and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SinkError {
    pub reason: Reason,
    /// Where to put a Warning Event.
    pub object: Option<ObjectKey>,
    pub message: String,
    /// Objects kept because the write that replaces them failed (external-dns mode).
    pub kept: Box<KeptObjects>,
}

impl SinkError {
    /// An error about `object` with nothing kept.
    pub fn new(reason: Reason, object: Option<ObjectKey>, message: impl Into<String>) -> Self {
        SinkError {
            reason,
            object,
            message: message.into(),
            kept: Box::default(),
        }
    }

    /// A failure another attempt with the same set cannot fix: the block would not fit the
    /// ConfigMap, or its reload CoreDNS's memory limit (a changed limit forces a sync). The controller waits for a new set, a forced sync or the next resync instead
    /// of retrying with backoff. A 403 is not one: a real kube-apiserver that has just
    /// (re)started refuses every ServiceAccount until its authorizer has loaded the RBAC
    /// objects, and a Role granted later is seen without a restart, so RBAC refusals are
    /// retried with the capped backoff (and said once per distinct message).
    pub fn is_permanent(&self) -> bool {
        matches!(self.reason, Reason::TooLarge | Reason::ReloadTooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::HashSet<&str> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Reason::ALL.len());
        assert!(Reason::Forbidden == "forbidden" && Reason::Api != "forbidden");
    }
}
