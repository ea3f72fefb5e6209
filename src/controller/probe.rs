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
    /// Per target, `Target::all` order.
    pub sources: Vec<Source>,
    pub routes: Routes,
    /// The named targets, for labels and logs.
    pub targets: Vec<TargetRule>,
    /// The hostnames last written (`None`: nothing yet).
    pub written: watch::Receiver<Option<Arc<Plan>>>,
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
            let Some(plan) = self.written.borrow().clone() else {
                continue;
            };
            self.round(&plan, &mut rotation, &mut state).await;
        }
    }

    async fn round(
        &self,
        plan: &Plan,
        rotation: &mut Rotation<Target, Hostname>,
        state: &mut State,
    ) {
        let names = names_by_target(plan, &self.routes.skipped());
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
            self.record(state, target, host, &outcome);
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
        match &outcome.failure {
            None => {
                state.series.remove(&host);
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
        written_tx.send_replace(Some(Arc::new(Plan {
            hosts: ["a.example.com", "b.example.com"].map(host).into(),
            placed: BTreeMap::new(),
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
