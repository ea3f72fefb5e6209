//! `ouroboros cleanup`: removes what `ouroboros controller` with the same DNS flags wrote (the
//! Corefile block, the import ConfigMap key, the hosts-file block, this instance's external-dns
//! objects), with the same write paths, so the Helm uninstall hooks need no kubectl or sed.
//! With `--lease-name` it also deletes the controller's Lease, which would otherwise outlive the
//! release naming a deleted pod.
//!
//! The chart runs it before Helm deletes anything (pre-delete), so that removal never
//! blackholes a name: `--stop-controller` first stops the controller (it would write the block
//! back), and `--drain` then keeps the hook running, and with it the proxy Helm deletes only
//! after the hook, until the cluster DNS has dropped the block. Removed after the proxy (as a
//! post-delete hook did), the block kept answering the proxy's deleted ClusterIP on every
//! CoreDNS replica until it reloaded: 40 to 80 s of timeouts for every hairpinned name, on the
//! real node of tests/it/node.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::dns::mode::build::Build;
use crate::dns::mode::DnsArgs;
use crate::dns::write::apply::{Applied, Outcome};
use crate::dns::write::error::{Reason, SinkError};
use crate::dns::write::sink::Sink;

pub mod stop;

#[derive(Args, Debug)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub dns: DnsArgs,

    /// Attempts before giving up on a failing API or file operation [1, 100]; the wait between
    /// attempts starts at 1s and doubles (at most 8s).
    #[arg(
        long,
        env = "OUROBOROS_CLEANUP_ATTEMPTS",
        value_name = "N",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub attempts: u32,

    /// Also delete the controller's leader-election Lease of this name (the uninstall hook
    /// passes it; a Lease already gone is fine). Needs --lease-namespace.
    #[arg(
        long,
        env = "OUROBOROS_CLEANUP_LEASE_NAME",
        value_name = "NAME",
        requires = "lease_namespace"
    )]
    pub lease_name: Option<String>,

    /// The namespace of --lease-name's Lease (the controller's --lease-namespace).
    #[arg(
        long,
        env = "OUROBOROS_CLEANUP_LEASE_NAMESPACE",
        value_name = "NAMESPACE",
        requires = "lease_name"
    )]
    pub lease_namespace: Option<String>,

    /// Before removing anything, scale this Deployment (the controller's) to zero and wait
    /// until it has stopped.
    ///
    /// Stopped: no pod left and, with --lease-name, its Lease released or expired, so it cannot
    /// write back what is removed. The chart's uninstall hook passes it.
    #[arg(
        long,
        env = "OUROBOROS_CLEANUP_STOP_CONTROLLER",
        value_name = "NAMESPACE/NAME",
        value_parser = crate::flags::parse_namespaced_name
    )]
    pub stop_controller: Option<crate::flags::NamespacedName>,

    /// After removing something, wait this long before exiting (0: exit at once).
    ///
    /// What still serves the names keeps serving meanwhile, until the cluster DNS has dropped
    /// them: the chart deletes the proxy only after this hook, and each CoreDNS replica drops
    /// the block only once the kubelet has projected the ConfigMap (its pod sync, 1 minute by
    /// default) and `reload` has read it (30 s, plus up to 15 s).
    #[arg(
        long,
        env = "OUROBOROS_CLEANUP_DRAIN",
        value_name = "DURATION",
        default_value = "0s",
        value_parser = crate::flags::parse_duration
    )]
    pub drain: Duration,
}

impl CleanupArgs {
    /// The Lease to delete, (namespace, name).
    pub fn lease(&self) -> Option<(&str, &str)> {
        Some((
            self.lease_namespace.as_deref()?,
            self.lease_name.as_deref()?,
        ))
    }

    /// What these flags need from RBAC (`rbac::workloads::cleanup_required`), with the
    /// DNS writes' namespace `namespace`: the removal of the mode's writes, and the Lease.
    pub fn needs(&self, namespace: &str) -> crate::controller::rbac::Needs {
        let mut n = crate::controller::rbac::Needs::for_cleanup(&self.dns, namespace);
        n.delete_lease = self
            .lease()
            .map(|(ns, name)| (ns.to_string(), name.to_string()));
        n.stop_controller =
            (self.stop_controller.as_ref()).map(|d| (d.namespace.clone(), d.name.clone()));
        n
    }
}

/// The controller's Lease could not be deleted.
#[derive(Debug, thiserror::Error)]
#[error("cannot delete the controller's Lease {namespace}/{name}: {source}{hint}")]
pub struct LeaseDeleteError {
    pub namespace: String,
    pub name: String,
    pub source: kube::Error,
    /// What to do, for a refusal.
    pub hint: &'static str,
}

/// Attempts a 403 gets before it counts as permanent. The uninstall hook's Role is created
/// moments before its Job, and an API server's authorizer sees a new Role only once its informer
/// has (usually well under a second; behind a load balancer, API servers lag each other): the
/// first refusals may be that lag, later ones are a missing grant.
const FORBIDDEN_ATTEMPTS: u32 = 3;

/// Errors that another attempt (`attempt`, from 1) cannot fix: the input or the configuration is
/// wrong.
fn permanent(e: &SinkError, attempt: u32) -> bool {
    match e.reason {
        Reason::Forbidden => attempt >= FORBIDDEN_ATTEMPTS,
        reason => reason.is_configuration(),
    }
}

/// The wait before attempt `n + 1` (n >= 1): 1s, 2s, 4s, 8s, 8s, ...
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1 << n.saturating_sub(1).min(3))
}

pub async fn run(args: CleanupArgs) -> anyhow::Result<ExitCode> {
    let dns = &args.dns;
    let client = || {
        crate::kube_client::client(
            dns.shared.kubeconfig.as_deref(),
            dns.shared.api_timeout,
            crate::kube_client::Calls::Requests,
        )
    };
    if let Some(deployment) = &args.stop_controller {
        let (namespace, name) = (&deployment.namespace, &deployment.name);
        if dns.shared.dry_run {
            tracing::info!(namespace, name, "dry run: would stop the controller");
        } else {
            let lease = args.lease();
            let client = client().await?;
            stop::stop_controller(&client, namespace, name, lease, args.attempts).await?;
        }
    }
    let sink = match dns.shared.mode.spec().offline_removal(dns) {
        Some(sink) => sink,
        None => {
            let client = client().await?;
            // The rewrite target does not matter for removal; the domain only has to be valid.
            let domain = crate::cluster_domain::resolve(None);
            // Removal needs no answer, so no named target's Service either.
            crate::dns::mode::sink(dns, &Build::new(client, &domain, &[]))?
        }
    };
    let applied = with_retries(&sink, args.attempts, backoff).await?;
    report(sink.mode(), &applied);
    if applied.outcome == Outcome::Written && !args.drain.is_zero() {
        tracing::info!(
            mode = sink.mode(),
            drain_s = args.drain.as_secs(),
            "waiting for the cluster DNS to drop what was removed (--drain) before the proxy goes"
        );
        tokio::time::sleep(args.drain).await;
    }
    // After the DNS: a Lease left behind is only litter, a block left behind breaks names.
    if let Some((namespace, name)) = args.lease() {
        if dns.shared.dry_run {
            tracing::info!(
                namespace,
                name,
                "dry run: would delete the controller's Lease"
            );
        } else {
            delete_lease(&client().await?, namespace, name, args.attempts, backoff).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes the Lease `namespace/name`; one already gone (404) is success. Retried like the
/// DNS removal (a 403 up to `FORBIDDEN_ATTEMPTS` times: the hook's Role may be new).
pub async fn delete_lease(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    attempts: u32,
    backoff: impl Fn(u32) -> Duration,
) -> Result<(), LeaseDeleteError> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
    let what = format!("deleting the controller's Lease {namespace}/{name}");
    let params = kube::api::DeleteParams::default();
    match call_with_retries(&what, attempts, backoff, || api.delete(name, &params)).await {
        Ok(Some(_)) => {
            tracing::info!(namespace, name, "deleted the controller's Lease");
            Ok(())
        }
        Ok(None) => {
            tracing::info!(namespace, name, "the controller's Lease is already gone");
            Ok(())
        }
        Err(e) => Err(LeaseDeleteError {
            namespace: namespace.to_string(),
            name: name.to_string(),
            hint: if is_forbidden(&e) {
                "; grant `delete` on leases (apiGroup coordination.k8s.io) named it in its \
                 namespace (the <fullname>-cleanup Role), or delete it by hand"
            } else {
                ""
            },
            source: e,
        }),
    }
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// One API call on one object, retried: `Ok(None)` when the object is not there (404), the last
/// error after `attempts` tries (a 403 after `FORBIDDEN_ATTEMPTS`: the hook's Role may be new,
/// a later refusal is a missing grant), `backoff(n)` between them, each failure logged as `what`.
pub async fn call_with_retries<T, Fut>(
    what: &str,
    attempts: u32,
    backoff: impl Fn(u32) -> Duration,
    mut call: impl FnMut() -> Fut,
) -> Result<Option<T>, kube::Error>
where
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let attempts = attempts.max(1);
    let mut n = 1;
    loop {
        let e = match call().await {
            Ok(t) => return Ok(Some(t)),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => e,
        };
        if n >= attempts || (is_forbidden(&e) && n >= FORBIDDEN_ATTEMPTS) {
            return Err(e);
        }
        let wait = backoff(n);
        tracing::warn!(
            attempt = n,
            of = attempts,
            retry_in_ms = wait.as_millis() as u64,
            error = %e,
            "{what} failed; retrying"
        );
        tokio::time::sleep(wait).await;
        n += 1;
    }
}

/// `sink.cleanup()`, retried up to `attempts` times unless the error is permanent.
pub async fn with_retries<S: Sink>(
    sink: &S,
    attempts: u32,
    backoff: impl Fn(u32) -> Duration,
) -> anyhow::Result<Applied> {
    let attempts = attempts.max(1);
    let mut n = 1;
    loop {
        match sink.cleanup().await {
            Ok(a) => return Ok(a),
            Err(e) if n < attempts && !permanent(&e, n) => {
                let wait = backoff(n);
                tracing::warn!(
                    mode = sink.mode(),
                    attempt = n,
                    of = attempts,
                    retry_in_ms = wait.as_millis() as u64,
                    reason = e.reason.as_str(),
                    error = %e,
                    "cleanup failed; retrying"
                );
                tokio::time::sleep(wait).await;
                n += 1;
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cleanup (--mode {}) failed after {n} attempt(s): {e}",
                    sink.mode()
                ))
            }
        }
    }
}

/// The lines of `before` that `after` no longer has: what was removed.
pub fn removed_lines(before: &str, after: &str) -> Vec<String> {
    let kept: std::collections::HashSet<&str> = after.lines().collect();
    before
        .lines()
        .filter(|l| !l.trim().is_empty() && !kept.contains(l))
        .map(|l| l.trim_end_matches('\r').to_string())
        .collect()
}

fn report(mode: &str, a: &Applied) {
    let removed = a
        .change
        .as_ref()
        .map(|c| {
            removed_lines(
                c.before.as_deref().unwrap_or(""),
                c.after.as_deref().unwrap_or(""),
            )
        })
        .unwrap_or_default();
    // One line of log however many lines went: trimmed, separated by " | ".
    let one_line = removed
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" | ");
    match a.outcome {
        Outcome::Unchanged => tracing::info!(mode, "nothing to remove"),
        Outcome::Written => tracing::info!(
            mode,
            lines = removed.len(),
            removed = %one_line,
            "removed what ouroboros wrote"
        ),
        Outcome::DryRun => tracing::info!(
            mode,
            lines = removed.len(),
            would_remove = %one_line,
            "dry run: nothing was removed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_eight_seconds() {
        let got: Vec<u64> = (1..=6).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 8, 8]);
    }

    #[test]
    fn removed_lines_are_the_difference() {
        assert_eq!(
            removed_lines("a\n# B\n1 x\n# E\nb\n", "a\nb\n"),
            ["# B", "1 x", "# E"]
        );
        assert_eq!(removed_lines("n1\nn2\n", ""), ["n1", "n2"]);
        assert!(removed_lines("a\n", "a\n").is_empty());
        assert_eq!(removed_lines("a\r\nb\r\n", "a\r\n"), ["b"]);
    }

    /// Fails with `reason` `fails` times, then succeeds; counts calls.
    struct Flaky {
        reason: crate::dns::write::error::Reason,
        fails: u32,
        calls: std::sync::atomic::AtomicU32,
    }

    impl Sink for Flaky {
        fn mode(&self) -> &'static str {
            "test"
        }

        async fn apply(&self, _: &crate::dns::write::plan::Plan) -> Result<Applied, SinkError> {
            unreachable!("cleanup never applies")
        }

        async fn cleanup(&self) -> Result<Applied, SinkError> {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n < self.fails {
                return Err(SinkError {
                    reason: self.reason,
                    object: None,
                    message: format!("failure {}", n + 1),
                    kept: Box::default(),
                });
            }
            Ok(Applied {
                rules: None,
                texts: Vec::new(),
                outcome: Outcome::Written,
                findings: None,
                conflicts: 0,
                change: None,
            })
        }
    }

    fn flaky(reason: crate::dns::write::error::Reason, fails: u32) -> Flaky {
        Flaky {
            reason,
            fails,
            calls: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_with_backoff() {
        let s = flaky(crate::dns::write::error::Reason::Api, 2);
        let start = tokio::time::Instant::now();
        let a = with_retries(&s, 5, backoff).await.unwrap();
        assert_eq!(a.outcome, Outcome::Written);
        assert_eq!(s.calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2));

        let s = flaky(crate::dns::write::error::Reason::Conflict, 10);
        let e = with_retries(&s, 5, backoff).await.unwrap_err();
        assert_eq!(s.calls.load(std::sync::atomic::Ordering::SeqCst), 5);
        assert!(
            e.to_string()
                .contains("cleanup (--mode test) failed after 5 attempt(s): failure 5"),
            "{e}"
        );

        let s = flaky(crate::dns::write::error::Reason::Unparseable, 10);
        let start = tokio::time::Instant::now();
        with_retries(&s, 5, backoff).await.unwrap_err();
        assert_eq!(s.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn permanence() {
        let e = |reason| SinkError {
            reason,
            object: None,
            message: String::new(),
            kept: Box::default(),
        };
        use crate::dns::write::error::Reason::*;
        for r in [Unparseable, NotFound, KeyMissing, Invalid, ForeignObject] {
            assert!(permanent(&e(r), 1), "{r}");
        }
        for r in [Api, Conflict, Io, NoClusterIp] {
            assert!(!permanent(&e(r), 1) && !permanent(&e(r), 10), "{r}");
        }
        // A new Role may not be seen yet: a 403 is retried twice, then given up.
        let refusals: Vec<bool> = (1..=4).map(|n| permanent(&e(Forbidden), n)).collect();
        assert_eq!(refusals, [false, false, true, true]);
    }
}
