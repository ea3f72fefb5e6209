//! The live controller: flags (`args`), sources to hostnames (`hostnames`, pure, shared with
//! `render`), the permissions it needs (`rbac`) and the sync engine (`sync`).

pub mod answers;
pub mod args;
pub mod coredns_deployment;
pub mod events;
pub mod hostnames;
pub mod ipmode;
pub mod lease;
pub mod metrics;
pub mod placement;
pub mod probe;
pub mod projection;
pub mod proxy_watch;
pub mod rbac;
pub mod removal_guard;
pub mod revert;
pub mod sources;
pub mod sync;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::args::{ElectionArgs, Selection};
use self::events::Notifier;
use self::hostnames::{args::HostnameArgs, model::Desired};
use self::lease::Leadership;
use self::metrics::Metrics;
use self::removal_guard::{Policy, Verdict};
use crate::admin::{AdminState, ReadyCheck};
use crate::dns::corefile::Findings;
use crate::dns::mode::build::Build;
use crate::dns::mode::DnsArgs;
use crate::dns::write::apply::{Applied, Outcome};
use crate::dns::write::error::{ObjectKey, Reason, SinkError};
use crate::dns::write::form::{CurrentForm, MemoryLimit};
use crate::dns::write::routes::Routes;
use crate::dns::write::sink::Sink;
use crate::dns::ConfigMapKey;
use crate::flags::UsageError;
use crate::hostname::{Hostname, LogName};
use crate::kube_client::Cause;
use crate::target::{AnswerRule, TargetRule};

/// `ouroboros controller`: keeps in-cluster DNS for the hairpinned hostnames pointing at the
/// proxy.
#[derive(Args, Clone, Debug)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub dns: DnsArgs,

    #[command(flatten)]
    pub hostnames: HostnameArgs,

    /// Apply the desired state this often even without events (repairs drift).
    #[arg(long, env = "OUROBOROS_CONTROLLER_RESYNC", value_name = "DURATION", default_value = "10m", value_parser = crate::flags::parse_duration)]
    pub resync: Duration,

    /// Quiet time after the last change before syncing; a constant stream of changes still
    /// syncs every 5 × this.
    #[arg(long, env = "OUROBOROS_CONTROLLER_DEBOUNCE", value_name = "DURATION", default_value = "1s", value_parser = crate::flags::parse_duration)]
    pub debounce: Duration,

    #[command(flatten)]
    pub watch: args::WatchArgs,

    #[command(flatten)]
    pub ipmode: args::IpModeArgs,

    #[command(flatten)]
    pub removal_guard: args::RemovalGuardArgs,

    /// The continuous hairpin probe.
    #[command(flatten)]
    pub probe: probe::ProbeScheduleArgs,

    /// Leader election (shared with `doctor`).
    #[command(flatten)]
    pub election: ElectionArgs,

    /// Listener for /healthz, /readyz and /metrics; empty disables it.
    #[arg(long, env = "OUROBOROS_CONTROLLER_LISTEN_HEALTH", value_name = "ADDR", default_value = ":8081", value_parser = crate::flags::Listen::parse)]
    pub listen_health: crate::flags::Listen,
}

impl ControllerArgs {
    pub fn lease_namespace(&self) -> String {
        self.election
            .lease_namespace_or(&crate::dns::args::own_namespace())
    }

    /// Checks the flag combinations; errors are `UsageError`s (exit 64).
    pub fn validate(&self) -> Result<Selection, UsageError> {
        if self.resync.is_zero() {
            return Err(UsageError::new("--resync must be longer than 0 (e.g. 10m)"));
        }
        crate::dns::mode::check(&self.dns)?;
        let rules = self.answer_rules()?;
        // Answering with a name (`rewrite`), a direct answer needs the ingress controller
        // Service's name: `direct-ip=` alone gives none.
        if !self
            .dns
            .shared
            .mode
            .spec()
            .answers_with_addresses(&self.dns)
        {
            hostnames::targets::check_direct_by_name(&rules, &self.hostnames.targets)
                .map_err(UsageError)?;
        }
        Selection::of(&self.hostnames)
    }

    /// Every target's answer settings, the default target's first.
    pub fn answer_rules(&self) -> Result<Vec<crate::target::AnswerRule>, UsageError> {
        self.hostnames
            .answer_rules(self.ipmode.ingress_controller_service.clone())
            .map_err(UsageError)
    }

    /// Whether a Lease is used (never in etc-hosts mode, which runs one per node, nor in a dry
    /// run, which writes nothing).
    pub fn elects(&self) -> bool {
        self.election.leader_elect
            && !self.dns.shared.mode.spec().runs_per_node()
            && !self.dns.shared.dry_run
    }
}

/// Entry point of `ouroboros controller`.
pub async fn run(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    // Bad flags exit 64 before anything talks to the cluster.
    args.validate()?;
    let stop = crate::shutdown::on_signal()?;
    let client = crate::kube_client::client(
        args.dns.shared.kubeconfig.as_deref(),
        args.dns.shared.api_timeout,
        crate::kube_client::Calls::Watches,
    )
    .await?;
    run_with(client, args, stop).await?;
    Ok(ExitCode::SUCCESS)
}

/// Readiness as the admin endpoint reports it.
#[derive(Debug, Default)]
struct Status {
    leader: bool,
    /// Result of the last sink call while leader (`None`: none yet).
    last: Option<Result<(), String>>,
    /// Why a write is held by the removal guard (`None`: nothing held).
    held: Option<String>,
}

fn ready(synced: bool, status: &Status) -> Result<(), String> {
    if !synced {
        return Err("syncing: waiting for the initial list of every watched kind".into());
    }
    if !status.leader {
        return Ok(()); // a warm standby
    }
    if let Some(why) = &status.held {
        return Err(format!("removal-held: {why}"));
    }
    match &status.last {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(format!("write-failed: {e}")),
        None => Err("syncing: no successful write yet".into()),
    }
}

/// Runs the controller with `client` until `stop`: watches, sync engine, lease, admin
/// endpoint, Events. Returns once the in-flight write is finished and the lease released.
pub async fn run_with(
    client: Client,
    args: ControllerArgs,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let Selection {
        filters,
        cluster_domain,
        policy,
    } = args.validate()?;
    let (rules, routes) = (args.answer_rules()?, Routes::default());
    let targets = &filters.targets;
    let form = CurrentForm::new(coredns_deployment::from_flags(&args.dns, "not read yet"));
    let at = Build::new(client.clone(), &cluster_domain, targets).routed(&rules, &routes);
    let limit = MemoryLimit::default();
    let at = at.picking(form.clone(), limit.clone());
    let sink = crate::dns::mode::sink(&args.dns, &at)?;
    let mode = sink.mode();
    let identity = lease::identity();
    log_start(
        &args,
        mode,
        &identity,
        filters.opt_ins.gateway_api,
        &cluster_domain,
    );

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let status = Arc::new(Mutex::new(Status::default()));

    let (notifier, events_task) = start_events(&client, &args, &identity);

    let idle = sources::Idle::new(args.watch.idle_timeout(), &metrics);
    let discovery = args.watch.source_discovery_interval;
    let watches = sources::start(&client, &filters, &notifier, (idle, discovery), &stop);
    let notifier = notifier.reading_at(watches.places.clone());
    let admin = start_admin(&args, registry, &status, &watches, &stop).await?;

    // The lease outlives `stop` until the write in flight is finished.
    let lease_stop = CancellationToken::new();
    let leadership = start_leadership(&client, &args, &identity, &lease_stop);

    let (forced_tx, forced_rx) = watch::channel(0u64);
    let (applied_tx, applied_rx) = watch::channel(None);
    let (written_tx, written_rx) = watch::channel(None);
    let skipped = ipmode::Skipped::default();
    let side_tasks = {
        let start = SideStart {
            client: &client,
            args: &args,
            targets: &filters.targets,
            metrics: &metrics,
            notifier: &notifier,
            forced: &forced_tx,
            applied: &applied_rx,
            skipped: &skipped,
            stop: &stop,
            probe: (&written_rx, &leadership.rx, &routes),
        };
        start.spawn_all()
    };
    // Before the first write: it already answers (and in the CoreDNS form) as picked.
    let picks = (&rules[..], &filters.targets[..], &routes, (&form, &limit));
    let answer_tasks = start_picks(&client, &args, picks, &metrics, (&forced_tx, &stop)).await;
    drop((applied_rx, forced_tx));

    let mut hooks = ControllerHooks::new(
        &args,
        mode,
        (metrics, notifier),
        status,
        (filters.targets.clone(), routes.clone()),
        (applied_tx, written_tx),
    );
    let inputs = sync::Inputs {
        changes: watches.changes.clone(),
        forced: forced_rx,
        synced: watches.synced.clone(),
        leader: leadership.rx.clone(),
    };
    let stores = watches.stores.clone();
    sync::run(
        &sink,
        || {
            let mut d = stores.desired(&policy);
            d.skip_targets(&answers::skipped(&routes, &rules, &skipped.get()));
            d
        },
        inputs,
        (
            sync::Timing::new(args.debounce, args.resync),
            removal_guard::Guard::new(args.removal_guard.policy()),
        ),
        &mut hooks,
        stop.clone(),
    )
    .await;

    // Shutdown: the engine has finished any write in flight; now give up the lease.
    lease_stop.cancel();
    leadership.finish(Duration::from_secs(5)).await;
    for t in side_tasks.into_iter().chain(answer_tasks) {
        t.abort();
    }
    drop(hooks);
    wait_stopped(watches.tasks, events_task, admin).await;
    tracing::info!("controller stopped");
    Ok(())
}

/// What the writers read of the CoreDNS Deployment: the answer form and the memory limit.
type CorednsReads<'a> = (&'a CurrentForm, &'a MemoryLimit);

/// Makes the picks the first write needs, each target's answer and the CoreDNS form, and
/// starts the tasks that follow what they were picked from.
async fn start_picks(
    client: &Client,
    args: &ControllerArgs,
    (rules, targets, routes, coredns): (&[AnswerRule], &[TargetRule], &Routes, CorednsReads<'_>),
    metrics: &Metrics,
    (forced, stop): (&watch::Sender<u64>, &CancellationToken),
) -> Vec<JoinHandle<()>> {
    let form_task =
        coredns_deployment::start(client, &args.dns, coredns, metrics, (forced, stop)).await;
    let answer_tasks =
        answers::start(client, rules, targets, routes, (forced, stop, args.resync)).await;
    answer_tasks.into_iter().chain(form_task).collect()
}

/// The Events task (none with --dry-run, which writes nothing) and its Notifier.
fn start_events(
    client: &Client,
    args: &ControllerArgs,
    identity: &str,
) -> (Notifier, Option<JoinHandle<()>>) {
    if args.dns.shared.dry_run {
        return (Notifier::disabled(), None);
    }
    let (n, t) = events::spawn(client.clone(), identity.to_owned());
    (n, Some(t))
}

fn log_start(
    args: &ControllerArgs,
    mode: &str,
    identity: &str,
    gateway_api: bool,
    cluster_domain: &str,
) {
    tracing::info!(
        mode,
        %identity,
        dry_run = args.dns.shared.dry_run,
        gateway_api,
        cluster_domain = %cluster_domain,
        "starting controller"
    );
}

/// Waits, a little each, for the tasks that end on `stop` by themselves: the watches, the
/// Events task (it ends once the last Notifier is dropped) and the admin endpoint.
async fn wait_stopped(
    watches: Vec<JoinHandle<()>>,
    events_task: Option<JoinHandle<()>>,
    admin: Option<JoinHandle<std::io::Result<()>>>,
) {
    let grace = Duration::from_secs(2);
    for t in watches {
        let _ = tokio::time::timeout(grace, t).await;
    }
    if let Some(t) = events_task {
        let _ = tokio::time::timeout(grace, t).await;
    }
    if let Some(a) = admin {
        let _ = tokio::time::timeout(grace, a).await;
    }
}

/// The admin endpoint: metrics from `registry`, readiness from the watches and the last write.
async fn start_admin(
    args: &ControllerArgs,
    registry: Registry,
    status: &Arc<Mutex<Status>>,
    watches: &sources::Watches,
    stop: &CancellationToken,
) -> Result<Option<JoinHandle<std::io::Result<()>>>, crate::admin::BindError> {
    let ready_check: ReadyCheck = {
        let (status, synced) = (status.clone(), watches.synced.clone());
        let relisting = watches.relisting.clone();
        Arc::new(move || {
            let r = ready(*synced.borrow(), &status.lock().expect("status lock"))
                .and_then(|()| relisting.check());
            Box::pin(async move { r })
        })
    };
    crate::admin::start(
        args.listen_health.0.as_ref(),
        AdminState::new(Arc::new(registry), ready_check),
        stop.clone(),
    )
    .await
}

/// The Lease when the flags elect a leader, else leadership from the start.
fn start_leadership(
    client: &Client,
    args: &ControllerArgs,
    identity: &str,
    lease_stop: &CancellationToken,
) -> Leadership {
    if args.elects() {
        Leadership::elect(
            client.clone(),
            args.lease_namespace(),
            args.election.lease_name.clone(),
            identity.to_owned(),
            lease_stop.clone(),
        )
    } else {
        Leadership::always()
    }
}

/// What the side tasks are started from: the controller's flags and the channels to the engine.
struct SideStart<'a> {
    client: &'a Client,
    args: &'a ControllerArgs,
    targets: &'a [TargetRule],
    metrics: &'a Metrics,
    notifier: &'a Notifier,
    /// Bumped to make the engine write again whatever its change detection says.
    forced: &'a watch::Sender<u64>,
    /// The set last written, for the revert watches.
    applied: &'a watch::Receiver<Option<revert::Written>>,
    skipped: &'a ipmode::Skipped,
    stop: &'a CancellationToken,
    /// What the probe reads beside the flags: the hostnames last written, the leadership and
    /// the targets' picks.
    probe: ProbeStart<'a>,
}

type ProbeStart<'a> = (
    &'a watch::Receiver<Option<Arc<probe::Written>>>,
    &'a watch::Receiver<bool>,
    &'a Routes,
);

/// One kind of task the controller runs beside the sync engine: when it runs (on the flags)
/// and how it is started (none, one or one per object).
struct SideTask {
    name: &'static str,
    when: fn(&ControllerArgs) -> bool,
    spawn: fn(&SideStart<'_>) -> Vec<JoinHandle<()>>,
}

/// The controller's start-up beside the engine, in order. A new side task is one row here.
const SIDE_TASKS: &[SideTask] = &[
    // Our own Corefile blocks: restored within seconds when another writer drops them.
    SideTask {
        name: "revert-watch",
        when: |args| !args.dns.shared.dry_run,
        spawn: |s| s.revert_watches(),
    },
    // The warning needs `get` on that ConfigMap, which the coredns mode's Role grants.
    SideTask {
        name: "node-local-dns-check",
        when: |args| {
            args.dns.shared.mode.spec().edits_corefile() && !args.dns.shared.node_local_dns.enabled
        },
        spawn: |s| s.node_local_dns_check(),
    },
    // The proxy's and the targets' Service addresses are what the Corefile blocks answer.
    SideTask {
        name: "proxy-watch",
        when: |args| args.dns.shared.mode.spec().edits_coredns(),
        spawn: |s| s.proxy_watches(),
    },
    // KEP-1860: targets whose ingress controller's load balancer reports ipMode Proxy.
    SideTask {
        name: "ipmode-watch",
        when: |_| true,
        spawn: |s| s.ipmode_watches(),
    },
    // The continuous hairpin probe: leader only (it waits while a standby).
    SideTask {
        name: "hairpin-probe",
        when: |args| args.probe.enabled() && probe::applies(&args.dns),
        spawn: |s| s.hairpin_probe(),
    },
    // Keeps the forced channel open (a closed one is simply ignored by the engine).
    SideTask {
        name: "forced-keepalive",
        when: |_| true,
        spawn: |s| s.keep_forced_open(),
    },
];

impl SideStart<'_> {
    /// Starts every task of [`SIDE_TASKS`] whose condition holds.
    fn spawn_all(&self) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for task in SIDE_TASKS.iter().filter(|t| (t.when)(self.args)) {
            let started = (task.spawn)(self);
            tracing::debug!(task = task.name, count = started.len(), "started side task");
            tasks.extend(started);
        }
        tasks
    }

    fn revert_watches(&self) -> Vec<JoinHandle<()>> {
        let dns = &self.args.dns;
        let mut corefiles = Vec::new();
        if dns.shared.mode.spec().edits_corefile() {
            corefiles.push(dns.coredns.target());
        }
        if crate::dns::mode::writes_node_local_dns(dns) {
            corefiles.push(dns.shared.node_local_dns.target());
        }
        corefiles
            .into_iter()
            .map(|target| {
                let on_revert =
                    revert_reporter(&target, self.metrics.clone(), self.notifier.clone());
                tokio::spawn(revert::watch(
                    self.client.clone(),
                    target,
                    self.applied.clone(),
                    self.forced.clone(),
                    on_revert,
                    self.stop.clone(),
                ))
            })
            .collect()
    }

    fn node_local_dns_check(&self) -> Vec<JoinHandle<()>> {
        vec![tokio::spawn(check_node_local_dns(
            self.client.clone(),
            self.args.dns.shared.node_local_dns.target(),
        ))]
    }

    fn proxy_watches(&self) -> Vec<JoinHandle<()>> {
        let dns = &self.args.dns;
        let services = crate::dns::mode::proxy_service_read(dns).into_iter();
        services
            .chain(crate::dns::mode::target_services_read(dns, self.targets))
            .map(|(namespace, name)| {
                tokio::spawn(proxy_watch::watch(
                    self.client.clone(),
                    namespace,
                    name,
                    self.forced.clone(),
                    self.stop.clone(),
                ))
            })
            .collect()
    }

    fn ipmode_watches(&self) -> Vec<JoinHandle<()>> {
        let targets = self.targets;
        self.args
            .ipmode
            .watched(targets)
            .into_iter()
            .map(|(target, service)| {
                let report = ipmode::Report {
                    skipped: self.skipped.clone(),
                    forced: self.forced.clone(),
                    notifier: self.notifier.clone(),
                    gauge: self.metrics.target_skipped.clone(),
                };
                tokio::spawn(ipmode::watch(
                    self.client.clone(),
                    service,
                    (target, target.name(targets).to_string()),
                    report,
                    self.stop.clone(),
                ))
            })
            .collect()
    }

    fn hairpin_probe(&self) -> Vec<JoinHandle<()>> {
        let (written, leader, routes) = self.probe;
        let args = &self.args.probe;
        // Both as the engine's: checked by `validate` before anything started.
        let cluster_domain =
            crate::cluster_domain::resolve(self.args.hostnames.cluster_domain.as_deref());
        let rules = self.args.answer_rules().unwrap_or_default();
        let resolv_conf = std::fs::read_to_string(crate::probe::args::RESOLV_CONF).ok();
        let settings = match args.probe.settings(resolv_conf.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("the hairpin probe is off: {e}");
                return Vec::new();
            }
        };
        let sources = match probe::sources(
            &self.args.dns,
            self.client,
            &cluster_domain,
            self.targets,
            &rules,
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("the hairpin probe is off: {e}");
                return Vec::new();
            }
        };
        let task = probe::Task {
            settings,
            interval: args.probe_interval,
            sample: args.probe_sample as usize,
            propagation: args.probe_propagation,
            sources,
            routes: routes.clone(),
            targets: self.targets.to_vec(),
            written: written.clone(),
            leader: leader.clone(),
            metrics: self.metrics.clone(),
        };
        vec![tokio::spawn(task.run(self.stop.clone()))]
    }

    fn keep_forced_open(&self) -> Vec<JoinHandle<()>> {
        let keep = self.forced.clone();
        vec![tokio::spawn(async move {
            let _keep = keep;
            std::future::pending::<()>().await;
        })]
    }
}

/// The revert watch's report for one ConfigMap: counted always, logged, and from the
/// threshold on warned about with an Event.
fn revert_reporter(
    target: &ConfigMapKey,
    metrics: Metrics,
    notifier: Notifier,
) -> impl FnMut(&revert::Revert) + Send + 'static {
    let object = configmap_object(target);
    move |r: &revert::Revert| {
        metrics.reverts.inc();
        if !r.repeated {
            tracing::info!(
                configmap = %object,
                count = r.count,
                "our Corefile block was removed or changed by someone else; restoring it"
            );
            return;
        }
        tracing::warn!(
            configmap = %object,
            count = r.count,
            restore_in_s = r.delay.as_secs(),
            "our Corefile block keeps being reverted ({} times in 10 minutes): another writer \
             (Helm, k3s, an addon manager) re-renders the Corefile; restoring with backoff. \
             Make that writer keep the block, or use --mode coredns-import",
            r.count
        );
        notifier.send(events::Notice {
            regarding: events::key_reference(&object),
            reason: events::BLOCK_REVERTED,
            action: "Restore",
            // No running count in the note: each later revert is then a repeat of this
            // message, counted up on one Event rather than a new Event each time.
            note: format!(
                "the ouroboros block in the Corefile was reverted {} or more times within 10 \
                 minutes; another writer re-renders this ConfigMap. ouroboros keeps restoring \
                 it with backoff; consider --mode coredns-import",
                revert::THRESHOLD
            ),
        });
    }
}

fn configmap_object(target: &ConfigMapKey) -> ObjectKey {
    ObjectKey {
        api_version: "v1",
        kind: "ConfigMap",
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    }
}

/// Warns once at start when a node-local-dns ConfigMap exists and --node-local-dns is off:
/// pods that resolve through its cache bypass the CoreDNS block.
async fn check_node_local_dns(client: Client, target: ConfigMapKey) {
    let (namespace, name) = (&target.namespace, &target.name);
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    match api.get_opt(name).await {
        Ok(Some(_)) => tracing::warn!(
            configmap = %format!("{namespace}/{name}"),
            "node-local-dns is installed: pods resolving through its node cache bypass the \
             CoreDNS block (its `.:53` block forwards public names straight upstream). Turn on \
             --node-local-dns (chart: controller.nodeLocalDns.enabled) to write the same \
             block there, or use --mode external-dns"
        ),
        Ok(None) => tracing::debug!(%namespace, %name, "no node-local-dns ConfigMap"),
        Err(kube::Error::Api(s)) if s.code == 403 => tracing::debug!(
            %namespace, %name,
            "cannot check for node-local-dns (no `get` on that ConfigMap); skipping the check"
        ),
        Err(e) => tracing::debug!(%namespace, %name, error = %e, "node-local-dns check failed"),
    }
}

/// The engine's reports turned into logs, metrics, Events and readiness.
struct ControllerHooks {
    mode: &'static str,
    metrics: Metrics,
    status: Arc<Mutex<Status>>,
    notifier: Notifier,
    reported: events::Reported,
    conflicts_reported: events::Reported,
    /// The named targets, for the names in conflict logs and Events.
    targets: Vec<TargetRule>,
    /// Each target's picked answer, for its metric.
    routes: Routes,
    applied_tx: watch::Sender<Option<revert::Written>>,
    /// The hostnames last written, with when, for the probe.
    written_tx: watch::Sender<Option<Arc<probe::Written>>>,
    reload_warned: bool,
    /// The Corefile's ConfigMap (coredns mode), for Events about its server blocks.
    target: Option<ObjectKey>,
    /// (host, server block or rewrite rule) pairs already warned about.
    shadows_warned: BTreeSet<(String, String)>,
    /// The message of the last failure that was given an Event (one per distinct failure).
    last_notice: Option<String>,
    /// A write has succeeded since the start: a 403 after one is most likely an API server
    /// that has just restarted and not yet loaded its RBAC objects.
    wrote: bool,
    /// (object, note) of the kept external-dns objects already reported, so each gets one log
    /// line and one Event while it stays kept for the same reason.
    kept_reported: BTreeSet<(String, String)>,
    /// The removal guard's settings, for its messages.
    guard: Policy,
    /// Where a held write's Event goes: the Corefile's ConfigMap, else the controller's Pod.
    guard_object: k8s_openapi::api::core::v1::ObjectReference,
    /// `Desired::unfiltered_classes` last warned about: warned again only when they change.
    classes_warned: Vec<String>,
}

/// The message of a write held by the removal guard: the same for the same removal, so that
/// seeing it again counts up one Event.
fn removal_note(removed: usize, last: usize, p: &Policy) -> String {
    format!(
        "a write would remove {removed} of the {last} hostnames written last (more than {}% \
         and at least {}): held, and the last write kept, until the same hostnames have been \
         seen for {} (--removal-guard-hold). If the removal is meant, wait, or restart the \
         controller with --removal-guard-hold=0s to write it at once; if not, check what \
         changed in the sources (IngressClasses, filters, Gateway-API CRDs, RBAC)",
        p.share * 100.0,
        p.min,
        humantime::format_duration(p.hold)
    )
}

/// The controller's own Pod (`$HOSTNAME` in its namespace), for Events about no object of the
/// cluster's.
fn own_pod() -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(crate::dns::args::own_namespace()),
        name: Some(std::env::var("HOSTNAME").unwrap_or_else(|_| "ouroboros-controller".into())),
        ..Default::default()
    }
}

impl ControllerHooks {
    fn new(
        args: &ControllerArgs,
        mode: &'static str,
        (metrics, notifier): (Metrics, Notifier),
        status: Arc<Mutex<Status>>,
        (targets, routes): (Vec<TargetRule>, Routes),
        (applied_tx, written_tx): (
            watch::Sender<Option<revert::Written>>,
            watch::Sender<Option<Arc<probe::Written>>>,
        ),
    ) -> Self {
        let target = (args.dns.shared.mode.spec().edits_corefile())
            .then(|| configmap_object(&args.dns.coredns.target()));
        Self {
            classes_warned: Vec::new(),
            guard: args.removal_guard.policy(),
            guard_object: target
                .as_ref()
                .map(events::key_reference)
                .unwrap_or_else(own_pod),
            mode,
            metrics,
            status,
            notifier,
            reported: events::Reported::default(),
            conflicts_reported: events::Reported::default(),
            targets,
            routes,
            applied_tx,
            written_tx,
            reload_warned: false,
            target,
            shadows_warned: BTreeSet::new(),
            last_notice: None,
            wrote: false,
            kept_reported: BTreeSet::new(),
        }
    }

    /// Warns once (a log line and an Event on the Corefile's ConfigMap) for each hairpinned
    /// name another server block or a foreign `rewrite` rule takes, and once for a missing
    /// `reload`.
    fn report_findings(&mut self, f: &Findings) {
        for t in f.taken() {
            if !self
                .shadows_warned
                .insert((t.host.to_string(), t.by.to_string()))
            {
                continue;
            }
            tracing::warn!(mode = self.mode, hostname = %t.host, by = %t.by, "{}", t.note);
            if let Some(o) = &self.target {
                self.notifier.send(events::Notice {
                    regarding: events::key_reference(o),
                    reason: if t.rewrite {
                        events::HOSTNAME_REWRITTEN
                    } else {
                        events::HOSTNAME_SHADOWED
                    },
                    action: "Edit",
                    note: t.note,
                });
            }
        }
        if !f.has_reload && !self.reload_warned {
            tracing::warn!(
                mode = self.mode,
                "the Corefile's root server block has no `reload` plugin: CoreDNS picks up \
                 the change only after a restart (kubectl -n kube-system rollout restart \
                 deployment coredns), or add `reload` to the Corefile"
            );
            self.reload_warned = true;
        }
    }
}

impl sync::Hooks for ControllerHooks {
    fn desired(&mut self, d: &Desired, leader: bool) {
        self.metrics.desired(d, &self.targets);
        self.metrics.answers(&self.routes, &self.targets);
        tracing::debug!(
            hosts = d.hosts.len(),
            rejected = d.rejected.len(),
            excluded = d.excluded.len(),
            leader,
            "computed the desired hostnames"
        );
        if !leader {
            return;
        }
        if d.unfiltered_classes != self.classes_warned {
            if !d.unfiltered_classes.is_empty() {
                tracing::warn!(
                    classes = d.unfiltered_classes.join(","),
                    "{}",
                    hostnames::model::unfiltered_classes_message(&d.unfiltered_classes)
                );
            }
            self.classes_warned.clone_from(&d.unfiltered_classes);
        }
        for r in self.reported.fresh(&d.rejected, events::rejection_key) {
            tracing::warn!(
                object = %r.object,
                hostname = %LogName(&r.raw),
                reason = r.reason.as_str(),
                "hostname not hairpinned: {}",
                r.reason.explain()
            );
            self.notifier.send(events::rejected_notice(r));
        }
        let lost = self
            .conflicts_reported
            .fresh(&d.conflicts, events::conflict_key);
        for c in &lost {
            tracing::warn!(
                hostname = %c.host,
                object = %c.loser,
                proxy_target = c.loser_target.name(&self.targets),
                winner = %c.winner,
                winner_target = c.winner_target.name(&self.targets),
                "hostname claimed by two targets; the winner's target answers for it"
            );
        }
        for n in events::conflict_notices(&lost, &self.targets) {
            self.notifier.send(n);
        }
    }

    fn unchanged(&mut self, hosts: &BTreeSet<Hostname>) {
        self.metrics.sync(self.mode, "skipped");
        tracing::debug!(
            hosts = hosts.len(),
            "desired hostnames unchanged; nothing to write"
        );
    }

    fn applied(&mut self, plan: &crate::dns::write::plan::Plan, a: Applied) {
        let hosts = &plan.hosts;
        let result = match a.outcome {
            Outcome::Written => "written",
            Outcome::Unchanged => "unchanged",
            Outcome::DryRun => "dry_run",
        };
        self.metrics.sync(self.mode, result);
        self.metrics.conflicts.inc_by(u64::from(a.conflicts));
        self.metrics.succeeded();
        self.status.lock().expect("status lock").last = Some(Ok(()));
        self.last_notice = None;
        self.wrote |= a.outcome != Outcome::DryRun;
        // A successful sync deleted whatever it had kept.
        self.metrics.kept_objects.set(0);
        self.kept_reported.clear();
        // The diff of a large Corefile is megabytes: built only when it is logged.
        let logged = a.outcome == Outcome::DryRun || tracing::enabled!(tracing::Level::DEBUG);
        if let Some(change) = a.change.as_ref().filter(|_| logged) {
            let diff = diff_lines(
                change.before.as_deref().unwrap_or(""),
                change.after.as_deref().unwrap_or(""),
            );
            if a.outcome == Outcome::DryRun {
                tracing::info!(mode = self.mode, "dry run: would write:\n{diff}");
            } else {
                tracing::debug!(mode = self.mode, "wrote:\n{diff}");
            }
        }
        match a.outcome {
            Outcome::Written => {
                tracing::info!(
                    mode = self.mode,
                    hosts = hosts.len(),
                    conflicts = a.conflicts,
                    "synced"
                )
            }
            _ => tracing::debug!(mode = self.mode, hosts = hosts.len(), result, "synced"),
        }
        if let Some(f) = &a.findings {
            self.report_findings(f);
        }
        if a.outcome != Outcome::DryRun {
            let prev = self.written_tx.borrow().clone();
            let next = probe::Written::next(
                prev.as_deref(),
                plan.clone(),
                a.outcome == Outcome::Written,
                tokio::time::Instant::now(),
            );
            self.written_tx.send_replace(Some(Arc::new(next)));
            let texts = a.texts;
            self.applied_tx
                .send_replace(a.rules.map(|rules| revert::Written { rules, texts }));
        }
    }

    fn failed(&mut self, e: &SinkError, retry_in: Duration) {
        self.metrics.sync(self.mode, e.reason.as_str());
        self.metrics.kept_objects.set(e.kept.len() as i64);
        self.status.lock().expect("status lock").last = Some(Err(e.message.clone()));
        self.applied_tx.send_replace(None);
        let object = e.object.as_ref().map(ToString::to_string);
        let retry_in_s = (!e.is_permanent()).then_some(retry_in.as_secs());
        // Failures the operator must fix, and failures that keep an old external-dns object,
        // are said once per distinct message (an Event on the object where there is one); the
        // log line repeats only at debug level.
        let notice = match e.reason {
            Reason::Unparseable => Some((events::COREFILE_UNPARSEABLE, "Edit")),
            Reason::TooLarge => Some((events::BLOCK_TOO_LARGE, "Write")),
            Reason::ReloadTooLarge => Some((events::BLOCK_RELOAD_TOO_LARGE, "Write")),
            Reason::NoClusterIp | Reason::NotFound
                if e.object.as_ref().is_some_and(|o| o.kind == "Service") =>
            {
                Some((events::PROXY_ADDRESS_MISSING, "Resolve"))
            }
            Reason::Forbidden => Some((events::WRITE_FORBIDDEN, "Write")),
            _ => None,
        };
        let fresh = self.last_notice.as_deref() != Some(e.message.as_str());
        // Refused what was allowed before: said as the restart it most likely is (a warning;
        // the grant it names comes after "if it persists").
        let restarted = e.reason == Reason::Forbidden && self.wrote;
        match notice {
            Some((reason, action)) if fresh => {
                let note = if restarted {
                    let note = Cause::Forbidden.hint_after_success(&e.message);
                    tracing::warn!(mode = self.mode, object, retry_in_s, "{note}");
                    note
                } else {
                    tracing::error!(mode = self.mode, object, retry_in_s, "{}", e.message);
                    e.message.clone()
                };
                if let Some(o) = &e.object {
                    self.notifier.send(events::Notice {
                        regarding: events::key_reference(o),
                        reason,
                        action,
                        note,
                    });
                }
                self.last_notice = Some(e.message.clone());
            }
            None if !e.kept.is_empty() && fresh => {
                tracing::warn!(
                    mode = self.mode,
                    object,
                    reason = e.reason.as_str(),
                    retry_in_s,
                    "sync failed: {}",
                    e.message
                );
                self.last_notice = Some(e.message.clone());
            }
            Some(_) => tracing::debug!(mode = self.mode, object, "{}", e.message),
            None if !e.kept.is_empty() => {
                tracing::debug!(mode = self.mode, object, retry_in_s, "{}", e.message)
            }
            None => tracing::warn!(
                mode = self.mode,
                object,
                reason = e.reason.as_str(),
                retry_in_s = retry_in.as_secs(),
                "sync failed: {}",
                e.message
            ),
        }
        let now: BTreeSet<(String, String)> = e
            .kept
            .iter()
            .map(|k| (k.object.to_string(), k.note.clone()))
            .collect();
        for k in e.kept.iter() {
            if self
                .kept_reported
                .contains(&(k.object.to_string(), k.note.clone()))
            {
                continue;
            }
            tracing::warn!(mode = self.mode, object = %k.object, "{}", k.note);
            self.notifier.send(events::Notice {
                regarding: events::key_reference(&k.object),
                reason: events::RECORD_KEPT,
                action: "Replace",
                note: format!("{}. The write failed: {}", k.note, e.message),
            });
        }
        self.kept_reported = now;
    }

    fn abandoned(&mut self) {
        tracing::info!(
            mode = self.mode,
            "lost the lease during a write; abandoned it"
        );
    }

    fn leader(&mut self, leader: bool) {
        self.metrics.leader.set(i64::from(leader));
        let mut s = self.status.lock().expect("status lock");
        s.leader = leader;
        s.last = None;
        s.held = None;
        self.metrics.removal_held.set(0);
    }

    fn guarded(&mut self, verdict: &Verdict) {
        let (removed, last) = match *verdict {
            Verdict::Apply => {
                self.metrics.removal_held.set(0);
                self.status.lock().expect("status lock").held = None;
                return;
            }
            Verdict::Release { removed, last } => {
                if self
                    .status
                    .lock()
                    .expect("status lock")
                    .held
                    .take()
                    .is_some()
                {
                    self.metrics.removal_held.set(0);
                    tracing::info!(
                        mode = self.mode,
                        removed,
                        last,
                        "the held hostname set stayed the same for --removal-guard-hold; \
                         writing it"
                    );
                }
                return;
            }
            Verdict::Hold {
                removed,
                last,
                fresh: false,
                ..
            } => {
                tracing::debug!(mode = self.mode, removed, last, "write still held");
                return;
            }
            Verdict::Hold { removed, last, .. } => (removed, last),
        };
        self.metrics.removal_held.set(removed as i64);
        self.metrics.removal_holds.inc();
        let note = removal_note(removed, last, &self.guard);
        tracing::warn!(mode = self.mode, removed, last, "{note}");
        self.status.lock().expect("status lock").held = Some(format!(
            "a write that removes {removed} of {last} hostnames is held"
        ));
        self.notifier.send(events::Notice {
            regarding: self.guard_object.clone(),
            reason: events::REMOVAL_HELD,
            action: "Write",
            note,
        });
    }
}

/// A compact line diff for logs: the common head and tail are dropped, the rest shown as
/// `-`/`+` lines. Linear, so a Corefile with thousands of rewrite lines is cheap.
pub fn diff_lines(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = String::new();
    for l in &a[head..a.len() - tail] {
        out.push('-');
        out.push_str(l);
        out.push('\n');
    }
    for l in &b[head..b.len() - tail] {
        out.push('+');
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> ControllerArgs {
        crate::flags::parse_args(argv).unwrap()
    }

    #[test]
    fn diff_shows_only_the_changed_lines() {
        for (a, b, want) in [
            ("x\ny\nz\n", "x\ny\nz\n", ""),
            ("x\nz\n", "x\ny\nz\n", "+y\n"),
            ("x\ny\nz\n", "x\nz\n", "-y\n"),
            ("x\ny\nz\n", "x\nY\nz\n", "-y\n+Y\n"),
            ("", "a\n", "+a\n"),
            ("a\na\n", "a\n", "-a\n"),
        ] {
            assert_eq!(diff_lines(a, b), want, "{a:?} -> {b:?}");
        }
    }

    #[test]
    fn readiness() {
        let st = |leader, last: Option<Result<(), String>>| Status {
            leader,
            last,
            held: None,
        };
        assert!(ready(false, &st(false, None))
            .unwrap_err()
            .starts_with("syncing"));
        assert_eq!(ready(true, &st(false, None)), Ok(()), "standby");
        assert!(ready(true, &st(true, None)).is_err());
        assert_eq!(ready(true, &st(true, Some(Ok(())))), Ok(()));
        let e = ready(true, &st(true, Some(Err("403".into())))).unwrap_err();
        assert!(e.starts_with("write-failed: 403"), "{e}");
        let held = Status {
            held: Some("a write that removes 12 of 20 hostnames is held".into()),
            ..st(true, Some(Ok(())))
        };
        assert_eq!(
            ready(true, &held),
            Err("removal-held: a write that removes 12 of 20 hostnames is held".into())
        );
        assert_eq!(
            ready(
                true,
                &Status {
                    leader: false,
                    ..held
                }
            ),
            Ok(()),
            "standby"
        );
    }

    #[test]
    fn removal_note_says_what_and_what_to_do() {
        assert_eq!(
            removal_note(12, 20, &Policy::DEFAULT),
            "a write would remove 12 of the 20 hostnames written last (more than 50% and at \
             least 10): held, and the last write kept, until the same hostnames have been seen \
             for 5m (--removal-guard-hold). If the removal is meant, wait, or restart the \
             controller with --removal-guard-hold=0s to write it at once; if not, check what \
             changed in the sources (IngressClasses, filters, Gateway-API CRDs, RBAC)"
        );
    }

    #[test]
    fn flags() {
        let t = parse(&[]);
        assert!(t.election.leader_elect);
        assert_eq!(t.debounce, Duration::from_secs(1));
        assert_eq!(t.resync, Duration::from_secs(600));
        assert_eq!(t.election.lease_name, "ouroboros-controller");
        assert_eq!(
            t.dns.shared.node_local_dns.node_local_dns_configmap,
            "node-local-dns"
        );
        let t = parse(&["--leader-elect=false", "--debounce", "250ms"]);
        assert!(!t.election.leader_elect);
        assert_eq!(t.debounce, Duration::from_millis(250));
        let t = parse(&["--mode", "etc-hosts"]);
        assert!(!t.elects(), "etc-hosts never uses a lease");
        let t = parse(&["--dry-run"]);
        assert!(!t.elects());
        assert!(crate::flags::parse_args::<ControllerArgs>(&["--leader-elect=maybe"]).is_err());
    }
}
