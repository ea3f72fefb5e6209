//! The controller's own flag groups: leader election (shared with `doctor`) and what the
//! hostname flags select. The DNS-target flags every DNS subcommand shares live in
//! `crate::dns::args` and are re-exported here.

use clap::{ArgAction, Args};

use super::hostnames::{Filters, HostnameArgs};
use crate::flags::UsageError;
use crate::hostname::HostPolicy;

pub use crate::dns::args::*;

pub const DEFAULT_LEASE_NAME: &str = "ouroboros-controller";

/// Leader election: flags of `controller`, which `doctor` takes too (same names, variables and
/// defaults) to check the controller's permissions.
#[derive(Args, Clone, Debug)]
pub struct ElectionArgs {
    /// Only the holder of a Lease writes (`--leader-elect=false` to turn off); never used in
    /// etc-hosts mode or with --dry-run.
    #[arg(long, env = "OUROBOROS_CONTROLLER_LEADER_ELECT", value_name = "BOOL", default_value_t = true, action = ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the Lease.
    #[arg(long, env = "OUROBOROS_CONTROLLER_LEASE_NAME", value_name = "NAME", default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// Namespace of the Lease [default: this pod's namespace, else `ouroboros`].
    #[arg(long, env = "OUROBOROS_CONTROLLER_LEASE_NAMESPACE", value_name = "NS")]
    pub lease_namespace: Option<String>,
}

impl ElectionArgs {
    /// --lease-namespace, else `default` (the controller's own namespace).
    pub fn lease_namespace_or(&self, default: &str) -> String {
        self.lease_namespace
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| default.to_string())
    }
}

/// What the hostname flags select: the filters, the cluster domain (the flag, else detected
/// from /etc/resolv.conf) and the name policy.
pub struct Selection {
    pub filters: Filters,
    pub cluster_domain: String,
    pub policy: HostPolicy,
}

impl Selection {
    /// Checks the hostname flags; errors are `UsageError`s (exit 64).
    pub fn of(hostnames: &HostnameArgs) -> Result<Selection, UsageError> {
        let filters = hostnames.filters().map_err(UsageError)?;
        let cluster_domain = crate::cluster_domain::resolve(hostnames.cluster_domain.as_deref());
        let policy = hostnames.policy(&cluster_domain).map_err(UsageError)?;
        Ok(Selection {
            filters,
            cluster_domain,
            policy,
        })
    }
}
