//! The continuous hairpin probe (a side task, leader only): every `--probe-interval`, a
//! rotating sample of each target's names as last written, each resolved through the cluster
//! DNS and checked against the target's answer as picked now, then knocked on without a PROXY
//! header (`crate::probe`). Results are metrics; a host's failure is logged when its state
//! changes, not each round. Not part of `/readyz`: a broken path elsewhere is not the
//! controller's own health.
//!
//! API calls: those of the writers for the expected addresses (`get` on the proxy Services,
//! `list` by name on the ingress controller Services of `direct` targets), none where the
//! addresses are given by flag or the answer is the rewrite form (then the proxy's name is
//! resolved through the same DNS server).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::Args;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::dns::mode::DnsArgs;
use crate::dns::write::plan::Plan;
use crate::dns::write::proxy_ips::ProxyIps;
use crate::dns::write::routes::Routes;
use crate::dns::ProxyFqdn;
use crate::header_verdict::Route;
use crate::hostname::Hostname;
use crate::probe::rotation::Rotation;
use crate::probe::verdict::{Expected, Verdict};
use crate::probe::{Outcome, Settings};
use crate::target::{AnswerRule, Target, TargetRule};

/// How often and how much the controller probes.
#[derive(Args, Clone, Debug)]
pub struct ProbeScheduleArgs {
    /// Probe a sample of each target's hairpinned names this often (resolve through the
    /// cluster DNS, check the answer, send a request without a PROXY header); 0 turns the
    /// probe off. A round stops after half of this; no name is probed more often.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_PROBE_INTERVAL",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = crate::flags::parse_duration
    )]
    pub probe_interval: Duration,

    /// Names probed per target and round; successive rounds walk every name.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_PROBE_SAMPLE",
        value_name = "COUNT",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub probe_sample: u32,

    /// How long after a name is first written a wrong or missing DNS answer is its block still
    /// loading, not a failure (logged at INFO, not counted): kubelet projects the ConfigMap
    /// within its sync period (1 min) plus its cache, then CoreDNS's reload (30 s + 15 s
    /// jitter) reads it. 0 judges every answer at once.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_PROBE_PROPAGATION",
        value_name = "DURATION",
        default_value = "2m",
        value_parser = crate::flags::parse_duration
    )]
    pub probe_propagation: Duration,

    #[command(flatten)]
    pub probe: crate::probe::args::ProbeArgs,
}

impl ProbeScheduleArgs {
    pub fn enabled(&self) -> bool {
        !self.probe_interval.is_zero()
    }
}

/// Whether the probe applies to `dns`: pods resolve through the cluster DNS in the CoreDNS and
/// external-dns modes; etc-hosts writes the nodes' files, one controller per node, and a dry
/// run writes nothing to check.
pub fn applies(dns: &DnsArgs) -> bool {
    !dns.shared.mode.spec().runs_per_node() && !dns.shared.dry_run
}

/// Where a target's expected addresses come from.
pub enum Source {
    /// Read (or given): the proxy's, and the ingress controller Service's for `direct`.
    Ips {
        relay: Box<ProxyIps>,
        direct: Option<Box<ProxyIps>>,
    },
    /// The rewrite form answers with the proxy Service's addresses under the name: the
    /// proxy's name (and the ingress controller Service's) resolved through the same server.
    Names {
        relay: ProxyFqdn,
        direct: Option<ProxyFqdn>,
    },
}

impl Source {
    /// The proxy's addresses, and the ingress controller Service's when `direct` and known.
    pub async fn addresses(
        &self,
        direct: bool,
        settings: &Settings,
    ) -> Result<(Vec<IpAddr>, Option<Vec<IpAddr>>), String> {
        match self {
            Source::Ips { relay, direct: d } => {
                let relay = relay.resolve().await.map_err(|e| e.message)?;
                let d = match d.as_ref().filter(|_| direct) {
                    Some(d) => Some(d.resolve().await.map_err(|e| e.message)?),
                    None => None,
                };
                Ok((relay, d))
            }
            Source::Names { relay, direct: d } => {
                let relay = lookup(relay.as_str(), settings).await?;
                let d = match d.as_ref().filter(|_| direct) {
                    Some(d) => Some(lookup(d.as_str(), settings).await?),
                    None => None,
                };
                Ok((relay, d))
            }
        }
    }
}

/// A Service's name resolved through the first DNS server.
async fn lookup(fqdn: &str, settings: &Settings) -> Result<Vec<IpAddr>, String> {
    let server = settings.servers.first().ok_or("no DNS server")?;
    let l = crate::probe::resolve::lookup(server.addr, fqdn, settings.timeout)
        .await
        .map_err(|e| e.to_string())?;
    if l.addrs.is_empty() {
        return Err(format!(
            "{} answered {fqdn} without an address ({})",
            server.addr, l.rcodes[0]
        ));
    }
    Ok(l.addrs)
}

/// Each target's source, the default target's first (`Target::all` order), as the writers of
/// `dns`'s mode answer.
pub fn sources(
    dns: &DnsArgs,
    client: &kube::Client,
    cluster_domain: &str,
    targets: &[TargetRule],
    rules: &[AnswerRule],
) -> Result<Vec<Source>, String> {
    let mode = dns.shared.mode.spec();
    let rewrite = !mode.answers_with_addresses(dns);
    let services = dns.shared.target_services(targets);
    let mut out = Vec::new();
    for (i, target) in Target::all(targets.len()).enumerate() {
        let rule = rules.iter().find(|r| r.target == target);
        let controller = rule.and_then(|r| r.controller_service.as_ref().map(|s| (r, s)));
        let (relay_ns, relay_name, given, flag) = match target.rule(targets) {
            None => {
                let proxy = mode.proxy(dns);
                let (ns, name) = proxy.service;
                (ns, name, proxy.ips, proxy.flag)
            }
            Some(t) => {
                let (ns, name) = services[i - 1].clone();
                (ns, name, t.proxy_ips.clone(), "--target ...,proxy-ip=")
            }
        };
        out.push(if rewrite {
            Source::Names {
                relay: dns
                    .shared
                    .proxy_fqdn(cluster_domain)
                    .and_then(|default| match target {
                        Target::Default => Ok(default),
                        Target::Named(_) => {
                            ProxyFqdn::for_service(&relay_name, &relay_ns, cluster_domain)
                        }
                    })?,
                direct: controller
                    .map(|(_, (ns, name))| ProxyFqdn::for_service(name, ns, cluster_domain))
                    .transpose()?,
            }
        } else {
            let relay = ProxyIps::new(Some(client.clone()), &given, &relay_ns, &relay_name, flag);
            let direct_flag = match target {
                Target::Default => "--direct-ip",
                Target::Named(_) => "--target ...,direct-ip=",
            };
            // As the writers answer: the Service's addresses, or `direct-ip=` alone.
            let direct = rule
                .and_then(|r| ProxyIps::direct(Some(client.clone()), r.direct_from(), direct_flag))
                .map(Box::new);
            Source::Ips {
                relay: Box::new(relay),
                direct,
            }
        });
    }
    Ok(out)
}

/// When each written name was first written, so the probe can tell a block still propagating
/// from a failure.
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub plan: Plan,
    /// The hosts a write of this controller added, with when; a host absent here was already
    /// in the DNS when this replica first saw it (or was written before it started).
    pub added_at: BTreeMap<Hostname, tokio::time::Instant>,
}

impl Written {
    /// What follows `self` after a sync of `plan` at `now`; `wrote` says whether the sync
    /// changed the DNS (a sync that wrote nothing adds no name to the DNS, so starts no wait).
    pub fn next(
        prev: Option<&Written>,
        plan: Plan,
        wrote: bool,
        now: tokio::time::Instant,
    ) -> Written {
        let added_at = plan
            .hosts
            .iter()
            .filter_map(|h| {
                let known = prev.filter(|p| p.plan.hosts.contains(h));
                match known {
                    Some(p) => p.added_at.get(h).map(|at| (h.clone(), *at)),
                    None => wrote.then(|| (h.clone(), now)),
                }
            })
            .collect();
        Written { plan, added_at }
    }
}

/// How a probe's DNS answer is judged given when its name was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// The answer is the target's: the rest of the probe decides.
    Loaded,
    /// The answer is still the old one, but the name was written less than the window ago:
    /// the cluster DNS has not loaded it yet, which is normal.
    NotYetLoaded,
    /// The answer is wrong and the window has passed (or the write time is unknown).
    Failed,
}

/// Pure: `written_at` the time the name's block was written (`None`: before this replica
/// saw it), `window` the expected propagation time, `answer_matches` whether the DNS
/// answered with the target's addresses.
pub fn propagation(
    written_at: Option<std::time::Instant>,
    now: std::time::Instant,
    window: Duration,
    answer_matches: bool,
) -> Propagation {
    if answer_matches {
        return Propagation::Loaded;
    }
    match written_at {
        Some(at) if now.saturating_duration_since(at) < window => Propagation::NotYetLoaded,
        _ => Propagation::Failed,
    }
}

/// Whether `v` says the DNS answered with the target's addresses (whatever came after).
fn answer_matches(v: Verdict) -> bool {
    !matches!(v, Verdict::DnsWrong | Verdict::DnsMissing)
}

/// A concrete name to probe for `host`: a wildcard's `*` becomes a label of ours.
pub fn probe_name(host: &Hostname) -> String {
    match host.as_str().strip_prefix("*.") {
        Some(rest) => format!("ouroboros-probe.{rest}"),
        None => host.as_str().to_string(),
    }
}

/// Each target's names in `plan`, sorted, leaving out the targets in `skipped`.
pub fn names_by_target(
    plan: &Plan,
    skipped: &std::collections::BTreeSet<Target>,
) -> BTreeMap<Target, Vec<Hostname>> {
    let mut out: BTreeMap<Target, Vec<Hostname>> = BTreeMap::new();
    for h in &plan.hosts {
        let t = plan.placed.get(h).copied().unwrap_or(Target::Default);
        if !skipped.contains(&t) {
            out.entry(t).or_default().push(h.clone());
        }
    }
    out
}

/// What the task reads and reports to.
pub struct Task {
    pub settings: Settings,
    pub interval: Duration,
    pub sample: usize,
    /// The expected propagation time (`--probe-propagation`).
    pub propagation: Duration,
    /// Per target, `Target::all` order.
    pub sources: Vec<Source>,
    pub routes: Routes,
    /// The named targets, for labels and logs.
    pub targets: Vec<TargetRule>,
    /// The hostnames last written, with when (`None`: nothing yet).
    pub written: watch::Receiver<Option<Arc<Written>>>,
    pub leader: watch::Receiver<bool>,
    pub metrics: Metrics,
}

/// Per host, the last verdict and its target (label).
#[derive(Default)]
struct State {
    last: BTreeMap<Hostname, (String, Verdict)>,
    /// Per target, the last failure to learn its expected addresses (logged once).
    expect_failed: BTreeMap<Target, String>,
    /// The hosts with a last-failure series (at most [`MAX_HOST_SERIES`]).
    series: std::collections::BTreeSet<Hostname>,
    /// The hosts last seen not yet loaded (logged once, neither counted nor failing).
    pending: std::collections::BTreeSet<Hostname>,
}

/// The most failing hosts given a series of their own: when everything fails at once (the DNS
/// block gone), thousands of names must not become thousands of series. The per-target count
/// and the log lines still cover every host.
pub const MAX_HOST_SERIES: usize = 100;

impl Task {
    /// Runs rounds until `stop`. Every target's counters and gauge are exported at 0 from the
    /// start, so a rule sees a failure as a change, not as a series appearing.
    pub async fn run(self, stop: CancellationToken) {
        for target in Target::all(self.targets.len()) {
            let label = target.name(&self.targets);
            for v in Verdict::ALL {
                self.metrics.probes_at_zero(label, v);
            }
            self.metrics.probe_failing_hosts(label, 0);
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rotation: Rotation<Target, Hostname> = Rotation::default();
        let mut state = State::default();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !*self.leader.borrow() {
                // A standby reports nothing: the leader's series are the ones to read.
                self.forget(&mut state, |_| true);
                continue;
            }
            let Some(written) = self.written.borrow().clone() else {
                continue;
            };
            self.round(&written, &mut rotation, &mut state).await;
        }
    }

    async fn round(
        &self,
        written: &Written,
        rotation: &mut Rotation<Target, Hostname>,
        state: &mut State,
    ) {
        let names = names_by_target(&written.plan, &self.routes.skipped());
        rotation.retain(&names);
        let present = |h: &Hostname| names.values().any(|v| v.binary_search(h).is_ok());
        self.forget(state, |h| !present(h));
        let now = tokio::time::Instant::now();
        let picks = rotation.pick(&names, self.sample, now.into_std(), self.interval);
        if picks.is_empty() {
            return;
        }
        let mut expected: BTreeMap<Target, Expected> = BTreeMap::new();
        for target in picks.iter().map(|(t, _)| *t) {
            if expected.contains_key(&target) {
                continue;
            }
            if let Some(e) = self.expected(target, state).await {
                expected.insert(target, e);
            }
        }
        let jobs = picks
            .into_iter()
            .filter_map(|(t, h)| Some((t, h, expected.get(&t)?.clone())))
            .map(|(t, h, e)| async move {
                let outcome = crate::probe::probe(&probe_name(&h), &e, &self.settings).await;
                (t, h, outcome)
            });
        let mut results = futures::stream::iter(jobs).buffer_unordered(4);
        let budget = tokio::time::sleep(self.interval / 2);
        tokio::pin!(budget);
        loop {
            let (target, host, outcome) = tokio::select! {
                _ = &mut budget => {
                    tracing::debug!("probe round ran out of time; the rest waits for the next");
                    return;
                }
                r = results.next() => match r {
                    Some(r) => r,
                    None => return,
                },
            };
            rotation.probed(target, host.clone(), now.into_std());
            let written_at = written.added_at.get(&host).map(|at| at.into_std());
            let judged = propagation(
                written_at,
                tokio::time::Instant::now().into_std(),
                self.propagation,
                answer_matches(outcome.verdict),
            );
            match judged {
                Propagation::NotYetLoaded => self.not_yet_loaded(state, target, host, &outcome),
                Propagation::Loaded | Propagation::Failed => {
                    self.record(state, target, host, &outcome)
                }
            }
        }
    }

    /// `target`'s expected answer now; `None` (logged once per distinct failure) when its
    /// addresses cannot be learnt.
    async fn expected(&self, target: Target, state: &mut State) -> Option<Expected> {
        let source = self.sources.get(target.position())?;
        let route = self.routes.get(target);
        let name = target.name(&self.targets).to_string();
        let learnt = source
            .addresses(route == Route::Direct, &self.settings)
            .await;
        match learnt {
            Ok((relay, direct)) => {
                state.expect_failed.remove(&target);
                Some(crate::probe::verdict::expected(
                    route,
                    &relay,
                    direct.as_deref(),
                ))
            }
            Err(e) => {
                if state.expect_failed.get(&target) != Some(&e) {
                    tracing::warn!(
                        proxy_target = %name,
                        "cannot probe the target's names: its expected addresses are unknown: {e}"
                    );
                    state.expect_failed.insert(target, e);
                }
                None
            }
        }
    }

    /// A name whose block is still propagating: logged once at INFO, neither counted nor
    /// failing, so a new name raises no alarm.
    fn not_yet_loaded(&self, state: &mut State, target: Target, host: Hostname, outcome: &Outcome) {
        if state.pending.insert(host.clone()) {
            tracing::info!(
                proxy_target = %target.name(&self.targets),
                hostname = %host,
                result = outcome.verdict.as_str(),
                propagation = ?self.propagation,
                "hairpin probe: the name is not yet loaded by the cluster DNS (written less than \
                 --probe-propagation ago); judged again next round"
            );
        }
    }

    /// Counts `outcome`, keeps the failing hosts' series, and logs a host when its state
    /// changes (a failure, another failure, a recovery), not each round.
    fn record(&self, state: &mut State, target: Target, host: Hostname, outcome: &Outcome) {
        let label = target.name(&self.targets).to_string();
        let verdict = outcome.verdict;
        self.metrics.probed(&label, verdict);
        let before = (state.last.insert(host.clone(), (label.clone(), verdict))).map(|(_, v)| v);
        // The series of the failure before, unless the same one is set again below.
        if let Some(b) = before.filter(|b| !b.is_ok() && *b != verdict) {
            self.metrics.probe_recovered(&label, host.as_str(), b);
        }
        let was_pending = state.pending.remove(&host);
        match &outcome.failure {
            None => {
                state.series.remove(&host);
                if was_pending {
                    tracing::info!(
                        proxy_target = %label,
                        hostname = %host,
                        "hairpin probe passes: the cluster DNS has loaded the name"
                    );
                }
                if let Some(b) = before.filter(|b| !b.is_ok()) {
                    tracing::info!(
                        proxy_target = %label,
                        hostname = %host,
                        was = b.as_str(),
                        "hairpin probe passes again"
                    );
                }
            }
            Some(why) => {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                if state.series.contains(&host) || state.series.len() < MAX_HOST_SERIES {
                    self.metrics
                        .probe_failed(&label, host.as_str(), verdict, now);
                    state.series.insert(host.clone());
                }
                if before != Some(verdict) {
                    tracing::warn!(
                        proxy_target = %label,
                        hostname = %host,
                        result = verdict.as_str(),
                        "hairpin probe fails: {why}; {}",
                        verdict.hint()
                    );
                }
            }
        }
        self.set_failing(state);
    }

    /// Drops the hosts `gone` says, with their series.
    fn forget(&self, state: &mut State, gone: impl Fn(&Hostname) -> bool) {
        let before = state.last.len();
        state.last.retain(|h, (label, v)| {
            if !gone(h) {
                return true;
            }
            if !v.is_ok() {
                self.metrics.probe_recovered(label, h.as_str(), *v);
            }
            false
        });
        let last = &state.last;
        state.series.retain(|h| last.contains_key(h));
        state.pending.retain(|h| !gone(h));
        if state.last.len() != before {
            self.set_failing(state);
        }
    }

    /// `probe_failing_hosts` per target, every target set (0 included).
    fn set_failing(&self, state: &State) {
        let mut failing: BTreeMap<&str, i64> = Target::all(self.targets.len())
            .map(|t| (t.name(&self.targets), 0))
            .collect();
        for (label, v) in state.last.values() {
            if !v.is_ok() {
                *failing.entry(label.as_str()).or_default() += 1;
            }
        }
        for (label, n) in failing {
            self.metrics.probe_failing_hosts(label, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Hostname {
        crate::hostname::HostPolicy::new("cluster.local", &[], &[])
            .check(s)
            .unwrap()
    }

    /// Log lines written through a subscriber, for the once-per-change checks.
    #[derive(Clone, Default)]
    struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Logs {
        fn lines(&self) -> Vec<String> {
            let b = self.0.lock().unwrap();
            String::from_utf8_lossy(&b)
                .lines()
                .map(String::from)
                .collect()
        }
    }

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Logs;
        fn make_writer(&'a self) -> Logs {
            self.clone()
        }
    }

    fn task(metrics: &Metrics) -> Task {
        Task {
            settings: Settings {
                servers: Vec::new(),
                ports: Vec::new(),
                timeout: Duration::from_secs(1),
            },
            interval: Duration::from_secs(60),
            sample: 5,
            propagation: Duration::from_secs(120),
            sources: Vec::new(),
            routes: Routes::default(),
            targets: Vec::new(),
            written: watch::channel(None).1,
            leader: watch::channel(true).1,
            metrics: metrics.clone(),
        }
    }

    fn outcome(verdict: Verdict) -> Outcome {
        Outcome {
            verdict,
            steps: Vec::new(),
            failure: (!verdict.is_ok()).then(|| "why".to_string()),
        }
    }

    /// The host series and the failing count as exported.
    fn exported(r: &prometheus_client::registry::Registry) -> (Vec<String>, String) {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, r).unwrap();
        let hosts = text
            .lines()
            .filter(|l| l.starts_with("ouroboros_controller_probe_last_failure"))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        let failing = text
            .lines()
            .find(|l| l.starts_with("ouroboros_controller_probe_failing_hosts{"))
            .unwrap_or_default()
            .to_string();
        (hosts, failing)
    }

    #[test]
    fn host_series_follow_each_hosts_state_and_are_bounded() {
        let mut r = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut r);
        let t = task(&metrics);
        let mut st = State::default();
        let a = host("a.example.com");
        let series = |result: &str| {
            format!(
                "ouroboros_controller_probe_last_failure_timestamp_seconds{{target=\"default\",\
                 host=\"a.example.com\",result=\"{result}\"}}"
            )
        };
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // (verdict, series after it, what is logged)
            for (verdict, want, logged) in [
                (Verdict::Reset, vec![series("reset")], "WARN"),
                (Verdict::Reset, vec![series("reset")], ""),
                (Verdict::Timeout, vec![series("timeout")], "WARN"),
                (Verdict::Ok, vec![], "INFO"),
                (Verdict::Ok, vec![], ""),
                (Verdict::DnsWrong, vec![series("dns-wrong")], "WARN"),
            ] {
                let before = logs.lines().len();
                t.record(&mut st, Target::Default, a.clone(), &outcome(verdict));
                assert_eq!(exported(&r).0, want, "{verdict:?}");
                let new: Vec<String> = logs.lines().split_off(before);
                match logged {
                    "" => assert!(new.is_empty(), "{verdict:?}: {new:?}"),
                    level => {
                        assert_eq!(new.len(), 1, "{verdict:?}: {new:?}");
                        assert!(new[0].contains(level), "{verdict:?}: {new:?}");
                        assert!(new[0].contains("a.example.com"), "{new:?}");
                    }
                }
            }
        });
        // 150 more failing hosts: every one counted, 100 with a series.
        for i in 0..150 {
            let h = host(&format!("h{i}.example.com"));
            t.record(&mut st, Target::Default, h, &outcome(Verdict::Refused));
        }
        let (hosts, failing) = exported(&r);
        assert_eq!(hosts.len(), MAX_HOST_SERIES);
        assert_eq!(
            failing,
            "ouroboros_controller_probe_failing_hosts{target=\"default\"} 151"
        );
        // Every host gone: no series, nothing failing.
        t.forget(&mut st, |_| true);
        let (hosts, failing) = exported(&r);
        assert!(hosts.is_empty(), "{hosts:?}");
        assert!(st.series.is_empty());
        assert_eq!(
            failing,
            "ouroboros_controller_probe_failing_hosts{target=\"default\"} 0"
        );
    }

    /// The task itself, with paused time: one name per round walks both names, a standby
    /// drops the host series. No DNS server: each probe ends at once as dns-missing.
    #[tokio::test(start_paused = true)]
    async fn rounds_on_the_interval_leader_only() {
        let mut r = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut r);
        let (written_tx, written) = watch::channel(None);
        let (leader_tx, leader) = watch::channel(true);
        let t = Task {
            sample: 1,
            sources: vec![Source::Ips {
                relay: Box::new(ProxyIps::Static(vec!["10.0.0.1".parse().unwrap()])),
                direct: None,
            }],
            written,
            leader,
            ..task(&metrics)
        };
        let stop = CancellationToken::new();
        let running = tokio::spawn(t.run(stop.clone()));
        let missing = |r: &prometheus_client::registry::Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, r).unwrap();
            let line =
                "ouroboros_controller_probes_total{target=\"default\",result=\"dns-missing\"} ";
            let n = text
                .lines()
                .find_map(|l| l.strip_prefix(line))
                .map(str::to_string);
            (n, exported(r).0.len())
        };
        // The first tick, before any write: nothing to probe, every result at 0.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(missing(&r), (Some("0".into()), 0));
        // Written before this replica saw them: judged at once.
        written_tx.send_replace(Some(Arc::new(Written {
            plan: Plan::new(["a.example.com", "b.example.com"].map(host).into()),
            added_at: BTreeMap::new(),
        })));
        for (round, want) in [(1, (Some("1".into()), 1)), (2, (Some("2".into()), 2))] {
            tokio::time::sleep(Duration::from_secs(60)).await;
            assert_eq!(missing(&r), want, "round {round}");
        }
        // The third round: a is due again (60 s since its probe), and still failing.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(missing(&r), (Some("3".into()), 2));
        // A standby reports no hosts.
        leader_tx.send_replace(false);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(missing(&r), (Some("3".into()), 0));
        stop.cancel();
        running.await.unwrap();
    }

    #[test]
    fn a_wrong_answer_is_a_failure_only_after_the_propagation_window() {
        let t0 = std::time::Instant::now();
        let s = Duration::from_secs;
        let window = s(120);
        // (written this long before now, answer matches, window, verdict)
        for (ago, matches, window, want) in [
            (Some(s(0)), true, window, Propagation::Loaded),
            (Some(s(500)), true, window, Propagation::Loaded),
            (None, true, window, Propagation::Loaded),
            (Some(s(0)), false, window, Propagation::NotYetLoaded),
            (Some(s(55)), false, window, Propagation::NotYetLoaded),
            (Some(s(119)), false, window, Propagation::NotYetLoaded),
            (Some(s(120)), false, window, Propagation::Failed),
            (Some(s(600)), false, window, Propagation::Failed),
            // Not written by this replica since it started: judged at once.
            (None, false, window, Propagation::Failed),
            // A window of 0 judges at once.
            (Some(s(0)), false, Duration::ZERO, Propagation::Failed),
        ] {
            let now = t0 + s(1000);
            let written_at = ago.map(|a| now - a);
            assert_eq!(
                propagation(written_at, now, window, matches),
                want,
                "{ago:?} {matches} {window:?}"
            );
        }
        // Only the DNS verdicts say the answer is not the target's.
        let wrong: Vec<Verdict> = Verdict::ALL
            .into_iter()
            .filter(|v| !answer_matches(*v))
            .collect();
        assert_eq!(wrong, [Verdict::DnsWrong, Verdict::DnsMissing]);
    }

    #[test]
    fn a_host_is_timed_from_the_write_that_added_it() {
        let t0 = tokio::time::Instant::now();
        let later = t0 + Duration::from_secs(30);
        let plan = |hs: &[&str]| Plan::new(hs.iter().map(|h| host(h)).collect());
        let at = |w: &Written, h: &str| w.added_at.get(&host(h)).copied();
        // The first sync after start wrote nothing: what is there was already loaded.
        let first = Written::next(None, plan(&["a.example.com"]), false, t0);
        assert_eq!(at(&first, "a.example.com"), None);
        // A write adding b: b from then, a still unknown.
        let second = Written::next(
            Some(&first),
            plan(&["a.example.com", "b.example.com"]),
            true,
            t0,
        );
        assert_eq!(at(&second, "a.example.com"), None);
        assert_eq!(at(&second, "b.example.com"), Some(t0));
        // A later write adding c keeps b's time; a sync without a write adds no time.
        let third = Written::next(
            Some(&second),
            plan(&["b.example.com", "c.example.com"]),
            true,
            later,
        );
        assert_eq!(at(&third, "b.example.com"), Some(t0));
        assert_eq!(at(&third, "c.example.com"), Some(later));
        assert_eq!(third.added_at.len(), 2, "a left: {:?}", third.added_at);
        let fourth = Written::next(Some(&third), plan(&["d.example.com"]), false, later);
        assert!(fourth.added_at.is_empty(), "{:?}", fourth.added_at);
    }

    /// A new name answered the old way inside the window: one INFO line, nothing counted or
    /// failing, then one INFO when it loads; outside the window a WARN as before.
    #[tokio::test(start_paused = true)]
    async fn a_name_still_propagating_is_not_a_failure() {
        let mut r = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut r);
        let (written_tx, written) = watch::channel(None);
        let t = Task {
            sample: 1,
            sources: vec![Source::Ips {
                relay: Box::new(ProxyIps::Static(vec!["10.0.0.1".parse().unwrap()])),
                direct: None,
            }],
            written,
            ..task(&metrics)
        };
        let counted = |r: &prometheus_client::registry::Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, r).unwrap();
            let line =
                "ouroboros_controller_probes_total{target=\"default\",result=\"dns-missing\"} ";
            let n = text
                .lines()
                .find_map(|l| l.strip_prefix(line))
                .map(str::to_string);
            (n, exported(r).1)
        };
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        written_tx.send_replace(Some(Arc::new(Written::next(
            None,
            Plan::new(["a.example.com"].map(host).into()),
            true,
            tokio::time::Instant::now(),
        ))));
        // As `run` does before its first round.
        for v in Verdict::ALL {
            metrics.probes_at_zero("default", v);
        }
        metrics.probe_failing_hosts("default", 0);
        let mut rotation = Rotation::default();
        let mut st = State::default();
        let w = written_tx.borrow().clone().unwrap();
        let not_failing = "ouroboros_controller_probe_failing_hosts{target=\"default\"} 0";
        // No DNS server: every probe is dns-missing. Twice inside the 120 s window.
        for round in 0..2 {
            t.round(&w, &mut rotation, &mut st).await;
            assert_eq!(
                counted(&r),
                (Some("0".into()), not_failing.into()),
                "{round}"
            );
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        let lines = logs.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("INFO") && lines[0].contains("not yet loaded"),
            "{lines:?}"
        );
        // 120 s after the write: a failure, counted, one WARN.
        t.round(&w, &mut rotation, &mut st).await;
        assert_eq!(
            counted(&r),
            (
                Some("1".into()),
                "ouroboros_controller_probe_failing_hosts{target=\"default\"} 1".into()
            )
        );
        let lines = logs.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("WARN") && lines[1].contains("hairpin probe fails"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_pending_name_that_loads_says_so_once() {
        let mut r = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut r);
        let t = task(&metrics);
        let mut st = State::default();
        let a = host("a.example.com");
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            t.not_yet_loaded(
                &mut st,
                Target::Default,
                a.clone(),
                &outcome(Verdict::DnsWrong),
            );
            t.not_yet_loaded(
                &mut st,
                Target::Default,
                a.clone(),
                &outcome(Verdict::DnsWrong),
            );
            t.record(&mut st, Target::Default, a.clone(), &outcome(Verdict::Ok));
            t.record(&mut st, Target::Default, a.clone(), &outcome(Verdict::Ok));
        });
        let lines = logs.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("INFO") && lines[0].contains("not yet loaded"));
        assert!(lines[1].contains("INFO") && lines[1].contains("has loaded the name"));
        assert!(!lines.iter().any(|l| l.contains("WARN")), "{lines:?}");
    }

    #[test]
    fn wildcards_are_probed_under_a_label_of_ours() {
        assert_eq!(probe_name(&host("app.example.com")), "app.example.com");
        assert_eq!(
            probe_name(&host("*.apps.example.com")),
            "ouroboros-probe.apps.example.com"
        );
    }

    #[test]
    fn names_grouped_by_target_without_skipped_ones() {
        let plan = Plan {
            hosts: ["a.example.com", "b.example.com", "c.example.com"]
                .map(host)
                .into(),
            placed: [(host("b.example.com"), Target::Named(0))].into(),
        };
        let all = names_by_target(&plan, &Default::default());
        assert_eq!(
            all,
            [
                (Target::Named(0), vec![host("b.example.com")]),
                (
                    Target::Default,
                    vec![host("a.example.com"), host("c.example.com")]
                ),
            ]
            .into()
        );
        let skipped = names_by_target(&plan, &[Target::Named(0)].into());
        assert_eq!(skipped.keys().collect::<Vec<_>>(), [&Target::Default]);
    }
}
