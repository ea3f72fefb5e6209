//! What the fetch layer hands the checks: a read ([`Got`]), why a read failed ([`ApiFailure`],
//! which any check turns into its FAIL), and a Deployment or DaemonSet reduced to what the checks
//! read ([`Workload`]). Separate because every check module shares them and `fetch.rs` builds them.

use std::collections::BTreeMap;
use std::fmt;

use crate::doctor::report::Check;

/// A read that failed (other than 404, which the fetch layer turns into `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiFailure {
    /// The RBAC verb doctor used (`get`, `list`, `create`).
    pub verb: &'static str,
    /// `resource.group` as RBAC names it (`configmaps`, `ingresses.networking.k8s.io`).
    pub resource: String,
    /// Namespace, or None for cluster-wide.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// HTTP status, None for transport errors.
    pub code: Option<u16>,
    /// A transport error that ran out of `--api-timeout` (the server accepted and stayed
    /// silent), which gets its own hint.
    pub timed_out: bool,
    pub message: String,
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(n) = &self.name {
            write!(f, " {n:?}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}")?,
            None => f.write_str(" (cluster-wide)")?,
        }
        match self.code {
            Some(c) => write!(f, ": HTTP {c}: {}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

impl ApiFailure {
    /// What to do about it.
    pub fn action(&self) -> String {
        match self.code {
            Some(403) => format!(
                "doctor's own credentials may not {} {}{}: run doctor as a user that may (see \
                 docs/doctor.md for the read-only role it needs)",
                self.verb,
                self.resource,
                self.namespace
                    .as_ref()
                    .map(|ns| format!(" in namespace {ns}"))
                    .unwrap_or_default()
            ),
            Some(401) => "the credentials were rejected: refresh the kubeconfig's token".into(),
            // Only a GET that tells a missing object from a resource not served returns this.
            Some(404) => format!(
                "the API server does not serve {} (is its CRD installed?): install it, or \
                 correct the kind named",
                self.resource
            ),
            _ => "check that the API server is reachable (kubectl get --raw /readyz) and run \
                  doctor again"
                .into(),
        }
    }

    /// A FAIL for the check that could not read what it needed.
    pub fn check(&self, id: &'static str) -> Check {
        Check::fail(id, format!("could not {} {}", self.verb, self.resource))
            .evidence(self.to_string())
            .action(self.action())
    }
}

/// A read: the object, None when it does not exist (404), or why it could not be read.
pub type Got<T> = Result<Option<T>, ApiFailure>;

/// The pod template of a Deployment or DaemonSet, reduced to what the checks read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Every container's command and args, in order.
    pub args: Vec<String>,
    pub images: Vec<String>,
    /// Each container's memory limit (a quantity, `170Mi`) by its image, where it has one.
    pub memory_limits: BTreeMap<String, String>,
}

impl Workload {
    pub fn reference(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}
