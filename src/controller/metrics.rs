//! The controller's metrics (`ouroboros_controller_*`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::hostnames::model::Desired;
use crate::dns::write::routes::Routes;
use crate::header_verdict::Route;
use crate::hostname::Rejection;
use crate::target::{Target, TargetRule};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    pub mode: String,
    /// `written`, `unchanged`, `dry_run`, `skipped` (same set as last applied, no call), or the
    /// error reason (`unparseable`, `forbidden`, `conflict`, `not_found`, `api`, ...).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// The watched kind (`Ingress`, `HTTPRoute`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// A proxy target (`default`, or a `--target` name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    pub target: String,
}

/// A proxy target and one of the answers its names can get (`relay`, `direct`, `skip`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabels {
    pub target: String,
    pub answer: String,
}

/// The CoreDNS block's answer form (`template`, `view`, `rewrite`) and why (`asked`, `version`,
/// `unknown_version`, `import_snippet`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FormLabels {
    pub form: String,
    pub basis: String,
}

/// A probe's target and verdict (`ok`, `dns-wrong`, `dns-missing`, `refused`, `reset`,
/// `timeout`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub target: String,
    pub result: String,
}

/// A failing host: its target, name and verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeHostLabels {
    pub target: String,
    pub host: String,
    pub result: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub syncs: Family<SyncLabels, Counter>,
    pub desired: Gauge,
    /// The desired hostnames per proxy target.
    pub target_hostnames: Family<TargetLabel, Gauge>,
    /// 1 while a target's names are left out (its load balancer reports ipMode Proxy).
    pub target_skipped: Family<TargetLabel, Gauge>,
    /// 1 on the answer picked for each target's names (`answer=`, or `auto`'s pick), 0 on the
    /// others.
    pub target_answer: Family<AnswerLabels, Gauge>,
    pub rejected: Family<ReasonLabel, Gauge>,
    /// 1 on the CoreDNS block's answer form and why it is that form; one series.
    pub coredns_answer_form: Family<FormLabels, Gauge>,
    /// (hostname, losing object) pairs: hosts claimed by objects of two targets.
    pub hostname_conflicts: Gauge,
    pub conflicts: Counter,
    pub leader: Gauge,
    pub reverts: Counter,
    /// Watches restarted with a fresh list after delivering nothing for --watch-idle-timeout.
    pub watch_restarts: Family<KindLabel, Counter>,
    /// Objects the last sync kept although they are to go, because the object of ours that
    /// replaces them is not written yet (external-dns mode).
    pub kept_objects: Gauge,
    /// The hostnames a write held by the removal guard would remove (0: nothing held).
    pub removal_held: Gauge,
    /// Writes the removal guard started holding.
    pub removal_holds: Counter,
    /// Hairpin probes by target and result.
    pub probes: Family<ProbeLabels, Counter>,
    /// Hosts whose last probe failed, per target.
    pub probe_failing: Family<TargetLabel, Gauge>,
    /// When each failing host last failed (Unix seconds); only failing hosts have a series.
    pub probe_last_failure: Family<ProbeHostLabels, Gauge>,
    pub last_success: Arc<Mutex<Option<Instant>>>,
}

/// `seconds_since_last_success`, computed at scrape time.
#[derive(Debug)]
struct SinceLastSuccess(Arc<Mutex<Option<Instant>>>);

impl Collector for SinceLastSuccess {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let since = self
            .0
            .lock()
            .map(|t| t.map(|t| t.elapsed().as_secs_f64()))
            .unwrap_or(None);
        // -1 until the first success, so "never" is not mistaken for "just now".
        let g = ConstGauge::new(since.unwrap_or(-1.0));
        let m = encoder.encode_descriptor(
            "seconds_since_last_success",
            "Seconds since the last successful sync (-1: none yet)",
            None,
            g.metric_type(),
        )?;
        g.encode(m)
    }
}

/// The CoreDNS block's families.
fn register_coredns(r: &mut Registry, m: &Metrics) {
    r.register(
        "coredns_answer_form",
        "1 on the form the CoreDNS block answers in (template, view, rewrite), labelled with \
         why: asked (--coredns-answer), version (auto, from CoreDNS's version), \
         unknown_version (auto without a version: the pair; set --coredns-version), \
         import_snippet (auto in coredns-import mode: the pair)",
        m.coredns_answer_form.clone(),
    );
}

/// The hairpin probe's families.
fn register_probe(r: &mut Registry, m: &Metrics) {
    r.register(
        "probes",
        "Hairpin probes (--probe-interval) by target and result: ok, dns-wrong, \
         dns-missing, refused, reset, timeout",
        m.probes.clone(),
    );
    r.register(
        "probe_failing_hosts",
        "Hosts whose last hairpin probe failed, per target",
        m.probe_failing.clone(),
    );
    r.register(
        "probe_last_failure_timestamp_seconds",
        "When a host's hairpin probe last failed (Unix time), with the result; a series \
         exists only while the host's last probe failed",
        m.probe_last_failure.clone(),
    );
}

impl Metrics {
    pub fn register(r: &mut Registry) -> Self {
        let m = Metrics {
            syncs: Family::default(),
            desired: Gauge::default(),
            target_hostnames: Family::default(),
            target_skipped: Family::default(),
            target_answer: Family::default(),
            rejected: Family::default(),
            coredns_answer_form: Family::default(),
            hostname_conflicts: Gauge::default(),
            conflicts: Counter::default(),
            leader: Gauge::default(),
            reverts: Counter::default(),
            watch_restarts: Family::default(),
            kept_objects: Gauge::default(),
            removal_held: Gauge::default(),
            removal_holds: Counter::default(),
            probes: Family::default(),
            probe_failing: Family::default(),
            probe_last_failure: Family::default(),
            last_success: Arc::default(),
        };
        let r = r.sub_registry_with_prefix("ouroboros_controller");
        r.register("syncs", "Sync attempts by mode and result", m.syncs.clone());
        r.register(
            "desired_hostnames",
            "Hostnames in the desired set",
            m.desired.clone(),
        );
        r.register(
            "target_hostnames",
            "Hostnames in the desired set per proxy target (default, or a --target name)",
            m.target_hostnames.clone(),
        );
        r.register(
            "target_skipped",
            "1 while a target's names are left out: every load-balancer address of its ingress \
             controller Service reports ipMode Proxy (KEP-1860)",
            m.target_skipped.clone(),
        );
        r.register(
            "target_answer",
            "1 on the answer picked for a target's names (relay: the proxy; direct: the \
             ingress controller Service's ClusterIPs; skip: left out), 0 on the others",
            m.target_answer.clone(),
        );
        r.register(
            "rejected_hostnames",
            "Hostnames refused by the policy, by reason",
            m.rejected.clone(),
        );
        r.register(
            "hostname_conflicts",
            "Hostnames an object claims that an object of another target won (one per \
             hostname and losing object; HostnameConflict Events name them)",
            m.hostname_conflicts.clone(),
        );
        r.register(
            "write_conflicts",
            "409 Conflicts met (and retried) while writing",
            m.conflicts.clone(),
        );
        r.register(
            "leader",
            "1 when this replica holds the lease (or needs none)",
            m.leader.clone(),
        );
        r.register(
            "block_reverts",
            "Times our Corefile block was removed or changed by someone else",
            m.reverts.clone(),
        );
        r.register(
            "watch_restarts",
            "Watches restarted with a fresh list after delivering neither an event nor a \
             bookmark for --watch-idle-timeout, by kind",
            m.watch_restarts.clone(),
        );
        r.register(
            "kept_objects",
            "external-dns objects the last sync left in place although they are to go (taken \
             over, renamed or no longer wanted), because the object of ours publishing their \
             names is not written yet; RecordKept Events name them",
            m.kept_objects.clone(),
        );
        r.register(
            "removal_held_hostnames",
            "Hostnames a held write would remove: it removes more than --removal-guard-share \
             of the last write's, so the last write stays until the same set has been seen for \
             --removal-guard-hold (0: nothing held); a RemovalHeld Event says which",
            m.removal_held.clone(),
        );
        r.register(
            "removal_holds",
            "Writes the mass removal guard started holding",
            m.removal_holds.clone(),
        );
        register_probe(r, &m);
        register_coredns(r, &m);
        r.register_collector(Box::new(SinceLastSuccess(m.last_success.clone())));
        m
    }

    /// The CoreDNS answer form now: one series, the old one (another form or reason) gone.
    pub fn coredns_answer(&self, picked: &crate::dns::answer_form::Picked) {
        self.coredns_answer_form.clear();
        self.coredns_answer_form
            .get_or_create(&FormLabels {
                form: picked.form.as_str().into(),
                basis: picked.basis.as_str().into(),
            })
            .set(1);
    }

    pub fn sync(&self, mode: &str, result: &str) {
        self.syncs
            .get_or_create(&SyncLabels {
                mode: mode.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The desired set's figures; `targets` names the `--target`s (each is set, even at 0).
    pub fn desired(&self, d: &Desired, targets: &[TargetRule]) {
        self.desired.set(d.hosts.len() as i64);
        // One pass over the placed hosts, however many targets there are.
        let mut placed: BTreeMap<Target, usize> = BTreeMap::new();
        for t in d.placed.values() {
            *placed.entry(*t).or_default() += 1;
        }
        for target in Target::all(targets.len()) {
            let n = match target {
                Target::Default => d.hosts.len() - d.placed.len(),
                named => placed.get(&named).copied().unwrap_or(0),
            };
            self.target_hostnames
                .get_or_create(&TargetLabel {
                    target: target.name(targets).to_string(),
                })
                .set(n as i64);
        }
        self.hostname_conflicts.set(d.conflicts.len() as i64);
        for reason in Rejection::ALL {
            let n = d.rejected.iter().filter(|r| r.reason == reason).count();
            self.rejected
                .get_or_create(&ReasonLabel {
                    reason: reason.as_str().into(),
                })
                .set(n as i64);
        }
    }

    /// Each target's picked answer (a target without a pick is relayed), every answer set so a
    /// changed pick leaves no stale 1.
    pub fn answers(&self, routes: &Routes, targets: &[TargetRule]) {
        for target in Target::all(targets.len()) {
            let picked = routes.get(target);
            for route in Route::ALL {
                self.target_answer
                    .get_or_create(&AnswerLabels {
                        target: target.name(targets).to_string(),
                        answer: route.as_str().into(),
                    })
                    .set(i64::from(route == picked));
            }
        }
    }

    /// One probe of `target`'s with `result`.
    pub fn probed(&self, target: &str, result: crate::probe::verdict::Verdict) {
        self.probes
            .get_or_create(&ProbeLabels {
                target: target.into(),
                result: result.as_str().into(),
            })
            .inc();
    }

    /// Exports `target`'s counter of `result` (at 0 until a probe has that result).
    pub fn probes_at_zero(&self, target: &str, result: crate::probe::verdict::Verdict) {
        let _created = self.probes.get_or_create(&ProbeLabels {
            target: target.into(),
            result: result.as_str().into(),
        });
    }

    /// `host` failed with `result` at `unix_seconds`.
    pub fn probe_failed(
        &self,
        target: &str,
        host: &str,
        result: crate::probe::verdict::Verdict,
        unix_seconds: u64,
    ) {
        self.probe_last_failure
            .get_or_create(&Self::probe_host(target, host, result))
            .set(i64::try_from(unix_seconds).unwrap_or(i64::MAX));
    }

    /// `host`'s failure with `result` is over (it passes, fails otherwise, or is gone).
    pub fn probe_recovered(
        &self,
        target: &str,
        host: &str,
        result: crate::probe::verdict::Verdict,
    ) {
        self.probe_last_failure
            .remove(&Self::probe_host(target, host, result));
    }

    pub fn probe_failing_hosts(&self, target: &str, n: i64) {
        self.probe_failing
            .get_or_create(&TargetLabel {
                target: target.into(),
            })
            .set(n);
    }

    fn probe_host(
        target: &str,
        host: &str,
        result: crate::probe::verdict::Verdict,
    ) -> ProbeHostLabels {
        ProbeHostLabels {
            target: target.into(),
            host: host.into(),
            result: result.as_str().into(),
        }
    }

    pub fn succeeded(&self) {
        if let Ok(mut t) = self.last_success.lock() {
            *t = Some(Instant::now());
        }
    }
}
