//! Leader election over a `coordination.k8s.io/v1` Lease with kube-lease-manager: only the
//! holder writes; the others keep their caches warm and take over within the lease duration.
//!
//! kube-lease-manager keeps reporting leadership while its renewals fail (it logs and backs
//! off), so this replica would go on writing after its Lease expired and a standby took over.
//! While the manager reports leadership, the Lease is therefore read back (`get`) at least every
//! [`GRACE_SECONDS`]: writing is allowed only until the last confirmed renewal expires (less
//! [`MARGIN`]) and at most `DURATION - GRACE` after the last successful read. [`decide`] is that
//! rule, pure.
//!
//! API calls (kept equal to `rbac::required`): `get` and `patch` (server-side apply and
//! strategic merge) on `leases/<name>`, `create` on `leases` when it does not exist yet.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kube_client::{Cause, Repeats};

/// Seconds a lease stays valid after its last renewal; a standby takes over within this.
pub const DURATION_SECONDS: u64 = 15;
/// The holder renews this long before expiry, and reads the Lease back at least this often.
pub const GRACE_SECONDS: u64 = 5;
/// The holder stops writing this long before its last confirmed renewal expires: the clock
/// skew tolerated between replicas (a standby takes over at expiry by its own clock).
pub const MARGIN: Duration = Duration::from_secs(2);
/// Retry of a failed read of the Lease (while the deadline has not passed).
const RETRY: Duration = Duration::from_secs(1);

/// This replica's identity in the Lease: the pod name (`HOSTNAME`) and a random suffix, so a
/// restarted pod with the same name is a new holder.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| nix::unistd::gethostname().ok()?.into_string().ok())
        .unwrap_or_else(|| "ouroboros".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{host}-{:08x}", h.finish() as u32)
}

/// What one read of the Lease showed: the fields that decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub holder: Option<String>,
    pub renew: Option<SystemTime>,
    pub duration: Option<Duration>,
}

impl Observed {
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Observed {
            holder: spec.and_then(|s| s.holder_identity.clone()),
            renew: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0.into()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|d| u64::try_from(d).ok())
                .map(Duration::from_secs),
        }
    }
}

/// The last read that showed this replica holding a valid Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirmed {
    /// When that read was made.
    pub at: Instant,
    /// Writes are allowed until then.
    pub until: Instant,
}

/// What to do after a read of the Lease (or a failed one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The new confirmation state (`None`: this replica must not write).
    pub confirmed: Option<Confirmed>,
    /// Why the Lease is not ours, when the read showed it.
    pub lost: Option<String>,
    /// When to read the Lease next.
    pub next_check: Instant,
}

/// Whether this replica may write at `now`.
pub fn may_write(confirmed: Option<Confirmed>, now: Instant) -> bool {
    confirmed.is_some_and(|c| now < c.until)
}

/// Judges a read of the Lease made at `now` (`wall`: the same instant by the system clock, which
/// renewTime is written in), `read` being `None` when it failed. `last` is the state before.
///
/// Ours and valid: writes are allowed until the renewal expires less [`MARGIN`], and at most
/// `DURATION - GRACE` after this read; the next read comes before that deadline. Not ours,
/// released or expired: stop at once. Failed: the previous deadline stands; retry soon.
pub fn decide(
    identity: &str,
    last: Option<Confirmed>,
    now: Instant,
    wall: SystemTime,
    read: Option<&Observed>,
) -> Decision {
    let grace = Duration::from_secs(GRACE_SECONDS);
    let Some(seen) = read else {
        let confirmed = last.filter(|c| now < c.until);
        let next_check = match confirmed {
            Some(c) => (now + RETRY).min(c.until),
            None => now + RETRY,
        };
        return Decision {
            confirmed,
            lost: None,
            next_check,
        };
    };
    let lost = |why: String| Decision {
        confirmed: None,
        lost: Some(why),
        next_check: now + grace,
    };
    match seen.holder.as_deref() {
        Some(h) if h == identity => {}
        Some(other) => return lost(format!("held by {other}")),
        None => return lost("released: no holder".into()),
    }
    let (Some(renew), Some(duration)) = (seen.renew, seen.duration) else {
        return lost("no renewTime or leaseDurationSeconds".into());
    };
    let expiry = renew + duration;
    let left = match expiry.duration_since(wall) {
        // A renewTime ahead of this clock counts from now.
        Ok(left) => left.min(duration),
        Err(e) => {
            return lost(format!(
                "expired {:.1} s ago by this replica's clock",
                e.duration().as_secs_f64()
            ))
        }
    };
    let Some(valid) = left.checked_sub(MARGIN).filter(|v| !v.is_zero()) else {
        return lost(format!(
            "expires in {:.1} s, within the {} s margin",
            left.as_secs_f64(),
            MARGIN.as_secs()
        ));
    };
    let until = (now + valid).min(now + Duration::from_secs(DURATION_SECONDS - GRACE_SECONDS));
    // Read again after the holder's next renewal is due but before the deadline.
    let next_check = (now + grace)
        .min(until.checked_sub(RETRY).unwrap_or(until))
        .max(now + Duration::from_millis(100))
        .min(until);
    Decision {
        confirmed: Some(Confirmed { at: now, until }),
        lost: None,
        next_check,
    }
}

/// Leadership as a watch channel, and the task that keeps it.
pub struct Leadership {
    pub rx: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
    /// Keeps the channel open when there is no election.
    _always: Option<watch::Sender<bool>>,
}

impl Leadership {
    /// No election: always the leader (etc-hosts mode, `--leader-elect=false`).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        Leadership {
            rx,
            task: None,
            _always: Some(tx),
        }
    }

    /// Campaigns for `name` in `namespace` until `stop`, then releases the lease if held.
    pub fn elect(
        client: Client,
        namespace: String,
        name: String,
        identity: String,
        stop: CancellationToken,
    ) -> Self {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(campaign(client, namespace, name, identity, tx, stop));
        Leadership {
            rx,
            task: Some(task),
            _always: None,
        }
    }

    /// Waits (at most `timeout`) for the lease to be released after `stop`.
    pub async fn finish(self, timeout: Duration) {
        if let Some(task) = self.task {
            if tokio::time::timeout(timeout, task).await.is_err() {
                tracing::warn!(
                    "releasing the lease timed out; a standby takes over when it expires"
                );
            }
        }
    }
}

/// The lease manager, once it could be set up (it reads the Lease): retried with backoff, the
/// failure logged with what to grant; `None` when `stop` comes first.
async fn build_manager(
    client: &Client,
    (namespace, name): (&str, &str),
    identity: &str,
    stop: &CancellationToken,
) -> Option<LeaseManager> {
    let lease = format!("{namespace}/{name}");
    let mut delay = Duration::from_secs(1);
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(DURATION_SECONDS)
            .with_grace(GRACE_SECONDS)
            .build();
        let result = tokio::select! {
            _ = stop.cancelled() => return None,
            r = built => r,
        };
        match result {
            Ok(m) => return Some(m),
            Err(e) => {
                let cause = match &e {
                    kube_lease_manager::LeaseManagerError::KubeError(k) => Cause::of(k),
                    _ => Cause::Other,
                };
                let grant = format!(
                    "grant `get`, `patch` on leases/{name} and `create` on leases in namespace \
                     {namespace} (apiGroup coordination.k8s.io)"
                );
                // Once per backoff step: the delay doubles up to a minute.
                tracing::warn!(
                    %lease,
                    error = %e,
                    retry_in_s = delay.as_secs(),
                    "cannot set up leader election: {}; standing by and retrying",
                    cause.hint(&grant)
                );
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}

async fn campaign(
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    tx: watch::Sender<bool>,
    stop: CancellationToken,
) {
    let lease = format!("{namespace}/{name}");
    let Some(manager) = build_manager(&client, (&namespace, &name), &identity, &stop).await else {
        return;
    };
    tracing::info!(%lease, %identity, "campaigning for the lease");
    let (mut lm_rx, handle) = manager.watch().await;
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    // The manager reports this replica as the holder.
    let mut held = false;
    let mut confirmed: Option<Confirmed> = None;
    let mut next_check = Instant::now();
    let mut reading: Option<Reading> = None;
    let mut reports = ReadReports::default();
    // Why writing stopped, for the log line.
    let mut why: Option<String> = None;
    loop {
        let now = Instant::now();
        let writes = held && may_write(confirmed, now);
        if writes != *tx.borrow() {
            if writes {
                why = None;
                tracing::info!(%lease, %identity, "acquired the lease: this replica writes");
            } else {
                let why = why.take().unwrap_or_else(|| match confirmed {
                    Some(c) => format!(
                        "its renewal was not confirmed for {:.1} s: renewing or reading the \
                         Lease fails",
                        now.saturating_duration_since(c.at).as_secs_f64()
                    ),
                    None => "not confirmed".into(),
                });
                tracing::warn!(%lease, %identity, "lost the lease ({why}): standing by");
            }
            tx.send_replace(writes);
        }
        let deadline = confirmed.map(|c| c.until).filter(|_| writes);
        tokio::select! {
            _ = stop.cancelled() => break,
            r = lm_rx.changed() => {
                if r.is_err() {
                    break;
                }
                held = *lm_rx.borrow_and_update();
                confirmed = None;
                reading = None;
                if held {
                    // Confirm before the first write.
                    next_check = Instant::now();
                    tracing::debug!(%lease, %identity, "the lease manager reports the lease held");
                } else {
                    why = Some("the lease manager sees another holder".into());
                }
            }
            read = async { reading.as_mut().expect("guarded").await }, if reading.is_some() => {
                reading = None;
                let read = reports.seen(read, &lease, &name);
                let d = decide(&identity, confirmed, Instant::now(), SystemTime::now(), read.as_ref());
                confirmed = d.confirmed;
                next_check = d.next_check;
                if let Some(l) = d.lost {
                    why = Some(l);
                }
            }
            _ = tokio::time::sleep_until(next_check), if held && reading.is_none() => {
                reading = Some(Box::pin(read_lease(api.clone(), name.clone())));
            }
            _ = sleep_until(deadline), if deadline.is_some() => {}
        }
    }
    // Stop writing before the lease is given up; dropping the receiver makes the manager
    // release it.
    tx.send_replace(false);
    drop(lm_rx);
    match handle.await {
        Ok(Ok(_)) => tracing::info!(%lease, "released the lease"),
        Ok(Err(e)) => {
            tracing::warn!(%lease, error = %e, "releasing the lease failed; it expires on its own")
        }
        Err(e) => tracing::warn!(%lease, error = %e, "the lease task failed"),
    }
}

/// A read of the Lease in flight.
type Reading =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Observed, ReadFailed>> + Send>>;

/// Why a read of the Lease failed.
#[derive(Debug, thiserror::Error)]
enum ReadFailed {
    #[error("{}", crate::kube_client::describe(.0))]
    Api(kube::Error),
    #[error("no answer within {DURATION_SECONDS} s")]
    TimedOut,
}

impl ReadFailed {
    fn cause(&self) -> Cause {
        match self {
            ReadFailed::Api(e) => Cause::of(e),
            // A server that does not answer within the Lease's duration is as good as gone.
            ReadFailed::TimedOut => Cause::Unreachable,
        }
    }
}

/// Reads the Lease; an error when the read fails or takes longer than the lease duration.
async fn read_lease(api: Api<Lease>, name: String) -> Result<Observed, ReadFailed> {
    let timeout = Duration::from_secs(DURATION_SECONDS);
    match tokio::time::timeout(timeout, api.get(&name)).await {
        Ok(Ok(l)) => Ok(Observed::of(&l)),
        Ok(Err(e)) => Err(ReadFailed::Api(e)),
        Err(_) => Err(ReadFailed::TimedOut),
    }
}

/// Reports failed reads of the Lease: they are retried every [`RETRY`] while the manager
/// reports the Lease held, which it does all through an API-server outage, so a repeating
/// failure is logged once per doubling (with the hint for its cause), not every second.
#[derive(Default)]
struct ReadReports {
    repeats: Repeats,
    /// A read has succeeded: the rights were there (a 403 now is likely a starting server's).
    read_before: bool,
}

impl ReadReports {
    /// The observation, or `None` after reporting the failure when it is due.
    fn seen(
        &mut self,
        read: Result<Observed, ReadFailed>,
        lease: &str,
        name: &str,
    ) -> Option<Observed> {
        let failure = match read {
            Ok(observed) => {
                self.succeeded();
                return Some(observed);
            }
            Err(failure) => failure,
        };
        if let Some((failures, hint)) = self.failed(failure.cause(), name) {
            tracing::warn!(
                %lease,
                error = %failure,
                failures,
                "cannot read the Lease to confirm this replica still holds it: {hint}; not \
                 writing once the last confirmation runs out, retrying"
            );
        }
        None
    }

    fn succeeded(&mut self) {
        self.repeats.reset();
        self.read_before = true;
    }

    /// Counts a failed read of Lease `name`; the consecutive count and the hint when it is
    /// to be logged.
    fn failed(&mut self, cause: Cause, name: &str) -> Option<(u64, String)> {
        let failures = self.repeats.failed(cause)?;
        let grant = format!("grant `get` on leases/{name} (apiGroup coordination.k8s.io)");
        let hint = if self.read_before {
            cause.hint_after_success(&grant)
        } else {
            cause.hint(&grant)
        };
        Some((failures, hint))
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_reads_are_reported_once_per_doubling_with_the_hint_for_their_history() {
        let mut r = ReadReports::default();
        // An outage: a read a second, logged at the 1st, 2nd, 4th, 8th and 16th.
        let logged: Vec<u64> = (0..20)
            .filter_map(|_| r.failed(Cause::Unreachable, "l").map(|(n, _)| n))
            .collect();
        assert_eq!(logged, [1, 2, 4, 8, 16]);
        // Refused before any read went through: the grant is what is missing.
        let (n, hint) = r.failed(Cause::Forbidden, "l").unwrap();
        assert_eq!(n, 1, "a new cause is logged at once");
        assert!(
            hint.starts_with("forbidden (403); grant `get` on leases/l"),
            "{hint}"
        );
        // Refused after a read went through: most likely a server that has just started.
        r.succeeded();
        let (n, hint) = r.failed(Cause::Forbidden, "l").unwrap();
        assert_eq!(n, 1, "a success starts the count again");
        assert!(hint.contains("though it was allowed before"), "{hint}");
        assert!(hint.ends_with("grant `get` on leases/l (apiGroup coordination.k8s.io)"));
    }

    const ME: &str = "me-1";

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn seen(holder: Option<&str>, renewed_ago: Option<f64>, wall: SystemTime) -> Observed {
        Observed {
            holder: holder.map(String::from),
            renew: renewed_ago.map(|a| {
                if a >= 0.0 {
                    wall - secs(a)
                } else {
                    wall + secs(-a)
                }
            }),
            duration: Some(Duration::from_secs(DURATION_SECONDS)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_confirms_or_stops_writes() {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        // (holder, renewed seconds ago, Some((writes for, next read in)) or the reason it lost)
        type Want = Result<(f64, f64), &'static str>;
        let table: &[(Option<&str>, Option<f64>, Want)] = &[
            // Just renewed: 13 s left less the margin, capped at DURATION - GRACE after the read.
            (Some(ME), Some(0.0), Ok((10.0, 5.0))),
            (Some(ME), Some(4.0), Ok((9.0, 5.0))),
            // The renewal is due: read again a second before the deadline.
            (Some(ME), Some(11.0), Ok((2.0, 1.0))),
            (Some(ME), Some(12.5), Ok((0.5, 0.1))),
            // A renewTime ahead of this clock counts from now.
            (Some(ME), Some(-30.0), Ok((10.0, 5.0))),
            (Some(ME), Some(13.5), Err("within the 2 s margin")),
            (Some(ME), Some(20.0), Err("expired 5.0 s ago")),
            (Some("other-7"), Some(0.0), Err("held by other-7")),
            (None, None, Err("released: no holder")),
            (Some(ME), None, Err("no renewTime")),
        ];
        for (holder, ago, want) in table {
            let o = seen(*holder, *ago, wall);
            let d = decide(ME, None, now, wall, Some(&o));
            match want {
                Ok((until, next)) => {
                    let c = d.confirmed.unwrap_or_else(|| panic!("{o:?}: {d:?}"));
                    assert_eq!(c.at, now);
                    assert_eq!(c.until - now, secs(*until), "{o:?}");
                    assert_eq!(d.next_check - now, secs(*next), "{o:?}");
                    assert_eq!(d.lost, None);
                }
                Err(why) => {
                    assert_eq!(d.confirmed, None, "{o:?}");
                    let lost = d.lost.unwrap_or_default();
                    assert!(lost.contains(why), "{o:?}: {lost}");
                    assert_eq!(d.next_check - now, Duration::from_secs(GRACE_SECONDS));
                }
            }
        }
        // Even an earlier confirmation does not outlive a read that shows another holder.
        let last = Some(Confirmed {
            at: now,
            until: now + secs(9.0),
        });
        let d = decide(
            ME,
            last,
            now,
            wall,
            Some(&seen(Some("other-7"), Some(0.0), wall)),
        );
        assert_eq!(d.confirmed, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_keeps_the_deadline_and_retries() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let last = Some(Confirmed {
            at: t0,
            until: t0 + secs(3.5),
        });
        // Within the deadline: still writing, retried in a second, never past the deadline.
        for (after, next) in [(0.0, 1.0), (1.0, 1.0), (3.0, 0.5)] {
            tokio::time::advance(secs(after) - (Instant::now() - t0)).await;
            let now = Instant::now();
            let d = decide(ME, last, now, wall, None);
            assert_eq!(d.confirmed, last, "{after}");
            assert!(may_write(d.confirmed, now));
            assert_eq!(d.next_check - now, secs(next), "{after}");
            assert_eq!(d.lost, None);
        }
        // Past it: no confirmation left.
        tokio::time::advance(secs(1.0)).await;
        let now = Instant::now();
        assert!(!may_write(last, now));
        let d = decide(ME, last, now, wall, None);
        assert_eq!(d.confirmed, None);
        assert_eq!(d.next_check - now, RETRY);
        assert_eq!(decide(ME, None, now, wall, None).confirmed, None);
    }

    /// The holder's lease-manager renews `GRACE` before expiry; `renewed(t)` is the renewTime a
    /// read at `t` (seconds since start) shows. Runs the read schedule `decide` asks for over
    /// paused time and returns, per 100 ms step, whether writes were allowed, and the reads.
    async fn run(
        renewed: impl Fn(f64) -> Option<f64>,
        reads_fail_after: f64,
        secs_total: f64,
    ) -> (Vec<(f64, bool)>, usize) {
        let t0 = Instant::now();
        let wall0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut confirmed = None;
        let mut next = t0;
        let mut reads = 0;
        let mut out = Vec::new();
        let step = secs(0.1);
        while Instant::now() - t0 < secs(secs_total) {
            let now = Instant::now();
            let t = (now - t0).as_secs_f64();
            if now >= next {
                reads += 1;
                let wall = wall0 + (now - t0);
                let o = renewed(t).map(|r| Observed {
                    holder: Some(ME.into()),
                    renew: Some(wall0 + secs(r)),
                    duration: Some(Duration::from_secs(DURATION_SECONDS)),
                });
                let read = if t < reads_fail_after {
                    o.as_ref()
                } else {
                    None
                };
                let d = decide(ME, confirmed, now, wall, read);
                confirmed = d.confirmed;
                next = d.next_check;
            }
            out.push((t, may_write(confirmed, now)));
            tokio::time::sleep(step).await;
        }
        (out, reads)
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewing_holder_writes_without_gaps_and_reads_every_few_seconds() {
        // Renewed at 0, 10, 20, ...; each renewal visible 50 ms later.
        let renewed = |t: f64| Some(((t - 0.05) / 10.0).floor().max(0.0) * 10.0);
        let (steps, reads) = run(renewed, f64::MAX, 120.0).await;
        let gaps: Vec<_> = steps.iter().filter(|(_, w)| !w).collect();
        assert!(gaps.is_empty(), "{gaps:?}");
        assert!((24..=40).contains(&reads), "{reads} reads in 120 s");
    }

    /// When writes were last allowed, in seconds since the start.
    fn last_write(steps: &[(f64, bool)]) -> f64 {
        steps
            .iter()
            .filter(|(_, w)| *w)
            .map(|(t, _)| *t)
            .fold(0.0, f64::max)
    }

    #[tokio::test(start_paused = true)]
    async fn failing_renewals_stop_writes_before_the_lease_expires() {
        let last_renewal = 20.0;
        let expiry = last_renewal + DURATION_SECONDS as f64;
        let renewed = |t: f64| Some((t / 10.0).floor().min(2.0) * 10.0);
        // The Lease still reads fine (only the renewals fail), or reads fail too from 21 s on.
        for fail_reads_after in [f64::MAX, 21.0] {
            let (steps, _) = run(renewed, fail_reads_after, 60.0).await;
            let last_write = last_write(&steps);
            assert!(
                last_write < expiry - MARGIN.as_secs_f64() + 0.01,
                "{fail_reads_after}: {last_write}"
            );
            assert!(
                last_write > last_renewal,
                "{fail_reads_after}: {last_write}"
            );
            assert!(
                steps.iter().all(|(t, w)| *t > last_renewal || *w),
                "no gaps before"
            );
        }
        // Reads fail from 12 s on: at most DURATION - GRACE after the last good read.
        let (steps, _) = run(|t| Some((t / 10.0).floor() * 10.0), 12.0, 60.0).await;
        let last_write = last_write(&steps);
        assert!(
            last_write < 12.0 + (DURATION_SECONDS - GRACE_SECONDS) as f64,
            "{last_write}"
        );
        assert!(last_write >= 11.0, "{last_write}");
    }

    #[test]
    fn observed_from_a_lease() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l"},
            "spec": {
                "holderIdentity": "me-1",
                "leaseDurationSeconds": 15,
                "renewTime": "2027-01-15T08:00:00.123456Z"
            }
        }))
        .unwrap();
        let o = Observed::of(&lease);
        assert_eq!(o.holder.as_deref(), Some("me-1"));
        assert_eq!(o.duration, Some(Duration::from_secs(15)));
        let renew = o
            .renew
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(renew.as_micros(), 1_800_000_000_123_456);
        assert_eq!(
            Observed::of(&Lease::default()),
            Observed {
                holder: None,
                renew: None,
                duration: None
            }
        );
    }

    #[test]
    fn identities_differ_per_start() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.len() > 9, "{a}");
    }
}
