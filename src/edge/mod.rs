//! `ouroboros edge`: a PROXY-protocol TCP load balancer for edge hosts. Each `--listen BIND=PORT`
//! relays to the ready endpoints of a Service port (from its EndpointSlices) or to a static
//! `--backend` set, balanced per connection, with passive (and optional active) health. With
//! `--pools`, it is instead the load balancer of the Services of its `loadBalancerClass`
//! (`load_balancer`): addresses from the pools, `ipMode: Proxy` in their status, a listener
//! per address and port.

pub mod allocate;
pub mod backends;
pub mod balance;
pub mod l2;
pub mod listeners;
pub mod load_balancer;
pub mod pool;
pub mod serve;
pub mod watch;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::accept::Lifecycle;
use crate::admin::ReadyCheck;
use crate::controller::lease::Leadership;
use crate::flags::{parse_duration, NamespacedName, UsageError};
use crate::listen::ListenAddr;
use crate::proxy_protocol::Version;
use crate::relay::lifecycle::ReadyState;
use crate::relay::metrics::RelayMetrics;
use crate::relay::mode::Mode;
use crate::relay::{self, Route};
use backends::PortRef;
use balance::metrics::BackendMetrics;
use balance::pick::Algorithm;
use balance::Balancer;

/// One `--listen BIND[=PORT]` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenSpec {
    /// As written, used as the listener's name in logs and metrics.
    pub spec: String,
    pub bind: ListenAddr,
    pub port: Option<PortRef>,
}

fn parse_listen_spec(s: &str) -> Result<ListenSpec, String> {
    let s = s.trim();
    let (bind, port) = match s.split_once('=') {
        Some((b, p)) => (b, Some(PortRef::parse(p.trim())?)),
        None => (s, None),
    };
    let bind = crate::listen::parse_listen(bind)?
        .ok_or_else(|| format!("{s:?}: the address before '=' is empty"))?;
    Ok(ListenSpec {
        spec: s.to_string(),
        bind,
        port,
    })
}

/// One `--backend` value: an address with a port, or a bare IP that takes each listener's
/// numeric PORT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticBackend {
    Addr(SocketAddr),
    Ip(IpAddr),
}

fn parse_backend(s: &str) -> Result<StaticBackend, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        if a.port() == 0 {
            return Err(format!("{s:?}: port 0 cannot be dialled"));
        }
        return Ok(StaticBackend::Addr(a));
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<IpAddr>().map(StaticBackend::Ip).map_err(|_| {
        format!("{s:?} is not a backend address (expected IP:PORT, [IPv6]:PORT or a bare IP that takes the listener's PORT)")
    })
}

// Where backends come from: exactly one of --service, --backend and --pools, and a missing one
// names them all (a `required_unless_present` on one would name only that one).
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("backends").required(true).multiple(false)))]
#[command(
    about = "Load-balance TCP over a Service's ready endpoints (or static backends), with a PROXY-protocol header",
    long_about = "Accepts TCP on every --listen address and relays each connection to one \
        backend, writing a PROXY-protocol header (v1 or v2) with the client's address first. \
        Backends are the ready endpoints of a Service port, followed live from its \
        EndpointSlices (--service), or a static --backend list. A backend that refuses or times \
        out is ejected for a growing backoff and the connection is retried on another one \
        before any byte is sent. Serves /healthz, /readyz and /metrics on --listen-health.\n\n\
        With --pools instead, edge is the load balancer of every Service of `type: \
        LoadBalancer` and class --load-balancer-class: it gives each one addresses from the \
        pools, writes them into its status with `ipMode: Proxy`, and listens on each address \
        and Service port, relaying to that port's ready endpoints (docs/edge.md)."
)]
pub struct EdgeArgs {
    /// Service whose EndpointSlices give the backends, as NAMESPACE/NAME (the slices labelled
    /// kubernetes.io/service-name=NAME). Exactly one of --service, --backend and --pools.
    #[arg(long, env = "OUROBOROS_EDGE_SERVICE", value_parser = crate::flags::parse_service_name, value_name = "NAMESPACE/NAME", group = "backends")]
    pub service: Option<NamespacedName>,

    /// Listener and the Service port it forwards to, as BIND=PORT (repeatable): BIND is
    /// `[::]:443` (IPv6 only), `0.0.0.0:80`, `:443` (one dual-stack socket) or `HOST:PORT`, so
    /// `[::]:443` and `0.0.0.0:443` can be given together; PORT a Service port name
    /// (`websecure`) or number (`443`, the Service's port, not the target port). With --backend,
    /// PORT is optional and must be a number: the port for bare-IP backends.
    #[arg(long, env = "OUROBOROS_EDGE_LISTEN", value_parser = parse_listen_spec, value_name = "BIND=PORT", required_unless_present = "pools", conflicts_with = "pools", value_delimiter = ',')]
    pub listen: Vec<ListenSpec>,

    /// Static backend instead of --service (repeatable): `IP:PORT`, `[IPv6]:PORT`, or a bare IP
    /// dialled at each listener's PORT.
    #[arg(long, env = "OUROBOROS_EDGE_BACKEND", value_parser = parse_backend, value_name = "ADDR", value_delimiter = ',', group = "backends")]
    pub backend: Vec<StaticBackend>,

    /// Be the load balancer of Services of `type: LoadBalancer` and class
    /// --load-balancer-class, with addresses from the pools in this YAML file (docs/edge.md; in
    /// the chart, a ConfigMap mounted as the file). Read at start: restart to apply a change.
    /// Addresses must be routed to this host, or be in a pool with `l2`, whose addresses one
    /// elected edge each puts on its interface and announces (ARP/NA; capabilities NET_ADMIN
    /// and NET_RAW). No --listen: listeners follow the Services.
    #[arg(
        long,
        env = "OUROBOROS_EDGE_POOLS",
        value_name = "FILE",
        group = "backends"
    )]
    pub pools: Option<std::path::PathBuf>,

    /// The `spec.loadBalancerClass` of the Services served with --pools; Services of another
    /// class, or of none (the cluster's default load balancer), are left alone.
    #[arg(long, env = "OUROBOROS_EDGE_LOAD_BALANCER_CLASS", value_name = "CLASS", default_value = allocate::DEFAULT_CLASS)]
    pub load_balancer_class: String,

    /// With --pools: only the holder of a Lease writes the Services' load-balancer status and
    /// their Events, so edges on several nodes do not each write and report the same thing;
    /// every edge listens on the addresses all the same (`--leader-elect=false` to turn off).
    #[arg(
        long,
        env = "OUROBOROS_EDGE_LEADER_ELECT",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_elect: bool,

    /// Name of the edge's Lease (with --pools and --leader-elect), and the prefix of the Leases
    /// that elect the holder of each address of a layer-2 pool (`NAME-192-0-2-10`).
    #[arg(
        long,
        env = "OUROBOROS_EDGE_LEASE_NAME",
        value_name = "NAME",
        default_value = "ouroboros-edge"
    )]
    pub lease_name: String,

    /// Namespace of the edge's Leases (its own and the per-address ones) [default: this pod's
    /// namespace, else `ouroboros`].
    #[arg(long, env = "OUROBOROS_EDGE_LEASE_NAMESPACE", value_name = "NS")]
    pub lease_namespace: Option<String>,

    /// Kubeconfig file for running outside the cluster [default: in-cluster service account,
    /// else $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "OUROBOROS_EDGE_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// How long to wait for the API server to connect (TCP and TLS); then the call fails with
    /// a hint that says so.
    #[arg(
        long,
        env = "OUROBOROS_EDGE_API_TIMEOUT",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::flags::parse_duration
    )]
    pub api_timeout: Duration,

    /// Balancing algorithm: round-robin, least-conn (fewest open connections) or source-hash
    /// (Maglev consistent hashing of the client IP).
    #[arg(long, env = "OUROBOROS_EDGE_BALANCE", value_enum, default_value_t = Algorithm::RoundRobin)]
    pub balance: Algorithm,

    /// PROXY-protocol version to send: v1 (text) or v2 (binary). Must match what the backends
    /// expect. With --pools, the version of Services without the annotation
    /// `ouroboros.io/proxy-protocol: v1|v2`. [default: v1; with --pools, v2]
    #[arg(long, env = "OUROBOROS_EDGE_PROXY_PROTOCOL", value_enum)]
    pub proxy_protocol: Option<Version>,

    /// Time allowed to connect to one backend before it counts as failed and the next one is
    /// tried.
    #[arg(long, env = "OUROBOROS_EDGE_DIAL_TIMEOUT", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub dial_timeout: Duration,

    /// Interval of active TCP health checks of every backend (connect, send a LOCAL header,
    /// close); a failure ejects, a success reinstates. 0 = passive health only.
    #[arg(long, env = "OUROBOROS_EDGE_HEALTH_INTERVAL", default_value = "0", value_parser = parse_duration, value_name = "DURATION")]
    pub health_interval: Duration,

    /// Ejection after a backend's first failure; doubles with each consecutive failure, up to
    /// 60s (or this value if larger).
    #[arg(long, env = "OUROBOROS_EDGE_EJECT_BACKOFF", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub eject_backoff: Duration,

    /// Listener for /healthz, /readyz and /metrics; empty disables it.
    #[arg(long, env = "OUROBOROS_EDGE_LISTEN_HEALTH", default_value = ":8081", value_parser = crate::flags::Listen::parse, value_name = "ADDR")]
    pub listen_health: crate::flags::Listen,

    /// After SIGTERM, keep accepting for this long (with /readyz failing) so load balancers in
    /// front stop sending before clients are refused. SIGINT (Ctrl-C in a terminal) skips it.
    #[arg(long, env = "OUROBOROS_EDGE_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,

    /// After accepting stopped, how long in-flight connections may run before they are cut.
    #[arg(long, env = "OUROBOROS_EDGE_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Duration,

    /// Close a connection after no traffic either way for this long; 0 disables.
    #[arg(long, env = "OUROBOROS_EDGE_IDLE_TIMEOUT", default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Duration,

    /// How bytes are copied: `auto` (buffer for small messages, splice(2) while a direction
    /// streams), `userspace` (pooled buffer), `splice` (Linux splice(2)) or `sockmap` (the kernel
    /// moves the bytes: only in a build with the cargo feature `kernel-relay`; CAP_BPF and
    /// CAP_NET_ADMIN, Linux 5.10+), as for `proxy`.
    #[arg(long, env = "OUROBOROS_EDGE_COPY_MODE", default_value = "auto", value_parser = Mode::parser(), value_name = "MODE")]
    pub copy_mode: Mode,

    /// Connections relayed at once (all listeners together); past it new connections wait in
    /// the kernel's listen backlog. 0 = unlimited.
    #[arg(
        long,
        env = "OUROBOROS_EDGE_MAX_CONNECTIONS",
        default_value_t = 65536,
        value_name = "N"
    )]
    pub max_connections: usize,
    /// Event loops that relay connections, as for `proxy`, but 0 (one per CPU this process may
    /// use) by default: an edge host carries all inbound traffic. 1 = one thread.
    #[arg(
        long,
        env = "OUROBOROS_EDGE_THREADS",
        default_value_t = 0,
        value_name = "N"
    )]
    pub threads: usize,
    /// Before a relay thread sleeps, watch for new events for a while: as for `proxy` (`auto`,
    /// a duration of at most 1ms, or 0 = off).
    #[arg(long, env = "OUROBOROS_EDGE_BUSY_POLL", default_value = "auto", value_parser = crate::runtime::parse_busy_poll, value_name = "auto|DURATION")]
    pub busy_poll: crate::runtime::BusyPoll,
}

impl EdgeArgs {
    /// The PROXY version in force: `--proxy-protocol`, else v2 with --pools (a new mode, where
    /// the binary header is the better default) and v1 otherwise (what it always was).
    pub fn proxy_protocol(&self) -> Version {
        self.proxy_protocol.unwrap_or(if self.pools.is_some() {
            Version::V2
        } else {
            Version::V1
        })
    }
}

/// Where the backends come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Per listener (in `--listen` order), the fixed backend set.
    Static(Vec<Vec<SocketAddr>>),
    Service(NamespacedName),
    /// `--pools FILE`: the load balancer of a class.
    LoadBalancer(std::path::PathBuf),
}

/// Flag combinations clap cannot check; errors name the flag.
pub fn source(args: &EdgeArgs) -> Result<Source, String> {
    let mut seen = std::collections::HashSet::new();
    for l in &args.listen {
        if !seen.insert(l.bind.to_string()) {
            return Err(format!(
                "--listen {}: the address {} is given twice",
                l.spec, l.bind
            ));
        }
    }
    if args.dial_timeout.is_zero() {
        return Err("--dial-timeout must be greater than 0".into());
    }
    if args.eject_backoff.is_zero() {
        return Err("--eject-backoff must be greater than 0".into());
    }
    if let Some(pools) = &args.pools {
        if args.load_balancer_class.trim().is_empty() {
            return Err("--load-balancer-class must not be empty".into());
        }
        // Also the prefix of the per-address Leases of layer-2 pools, which add 40 characters.
        if !crate::dns_name::is_subdomain(&args.lease_name)
            || args.lease_name.len() > l2::MAX_PREFIX
        {
            return Err(format!(
                "--lease-name {:?}: expected a DNS subdomain name (lowercase letters, digits, '-', '.') of at most {} characters",
                args.lease_name,
                l2::MAX_PREFIX
            ));
        }
        return Ok(Source::LoadBalancer(pools.clone()));
    }
    // Checked here: clap does not apply `requires` to a flag with a default value.
    if args.load_balancer_class != allocate::DEFAULT_CLASS {
        return Err(
            "--load-balancer-class is for --pools; without it, edge serves no class".into(),
        );
    }
    if let Some(svc) = &args.service {
        if let Some(l) = args.listen.iter().find(|l| l.port.is_none()) {
            return Err(format!(
                "--listen {}: with --service, name the Service port to forward to as BIND=PORT (e.g. {}=websecure)",
                l.spec, l.bind
            ));
        }
        return Ok(Source::Service(svc.clone()));
    }
    let mut sets = Vec::new();
    for l in &args.listen {
        let port = match &l.port {
            None => None,
            Some(PortRef::Number(n)) => Some(*n),
            Some(PortRef::Name(n)) => {
                return Err(format!(
                "--listen {}: port name {n:?} needs --service; with --backend, PORT is a number",
                l.spec
            ))
            }
        };
        let mut set = Vec::new();
        for b in &args.backend {
            set.push(match (b, port) {
                (StaticBackend::Addr(a), _) => *a,
                (StaticBackend::Ip(ip), Some(p)) => SocketAddr::new(*ip, p),
                (StaticBackend::Ip(ip), None) => {
                    return Err(format!(
                        "--backend {ip} has no port and --listen {} gives none: write {}=PORT or IP:PORT",
                        l.spec, l.bind
                    ))
                }
            });
        }
        set.sort();
        set.dedup();
        sets.push(set);
    }
    Ok(Source::Static(sets))
}

/// Readiness: every listener has at least one backend not ejected, and no shutdown is under
/// way. Logs changes only.
struct Readiness {
    balancers: Vec<Arc<Balancer>>,
    state: ReadyState,
}

impl Readiness {
    fn check(&self) -> Result<(), String> {
        if self.state.shutting_down() {
            return Err("shutting-down: the edge received a termination signal".into());
        }
        let down: Vec<String> = self
            .balancers
            .iter()
            .filter_map(|b| {
                let (up, total) = b.health_counts();
                (up == 0).then(|| match total {
                    0 => format!("listener {}: no backends", b.listener()),
                    n => format!("listener {}: all {n} backends ejected", b.listener()),
                })
            })
            .collect();
        let ready = down.is_empty();
        let reason = format!("no-backend: {}", down.join("; "));
        self.state.record(
            ready.to_string(),
            ready,
            "ready: every listener has a healthy backend",
            "not ready",
            &reason,
        );
        if ready {
            Ok(())
        } else {
            Err(reason)
        }
    }
}

/// Follows the Service's endpoints into each listener's balancer (the listeners with a port).
async fn follow_service(
    args: &EdgeArgs,
    svc: &NamespacedName,
    balancers: &[Arc<Balancer>],
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let client = crate::kube_client::client(
        args.kubeconfig.as_deref(),
        args.api_timeout,
        crate::kube_client::Calls::Watches,
    )
    .await?;
    let targets = args
        .listen
        .iter()
        .zip(balancers)
        .filter_map(|(l, b)| Some((l.port.clone()?, b.clone())))
        .collect();
    tokio::spawn(watch::follow(client, svc.clone(), targets, stop.clone()));
    Ok(())
}

/// Checks every backend of every balancer each `every`, until `stop`.
fn spawn_health_checks(
    every: Duration,
    version: Version,
    balancers: Vec<Arc<Balancer>>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            futures::future::join_all(balancers.iter().map(|b| b.check_all(version))).await;
        }
    });
}

/// Runs the balancer on this (single-threaded) runtime and `loops` (see `crate::runtime`).
pub async fn run(args: EdgeArgs, loops: crate::runtime::Loops) -> anyhow::Result<ExitCode> {
    let source = source(&args).map_err(UsageError::err)?;
    if let Source::LoadBalancer(path) = &source {
        return run_load_balancer(&args, path, loops).await;
    }
    let signal = crate::shutdown::on_signal()?;
    let lifecycle = Lifecycle::new(args.max_connections).with_loops(loops);
    let relaying = relay::mode::relaying(args.copy_mode, args.max_connections);

    let mut registry = Registry::default();
    let sub = registry.sub_registry_with_prefix("ouroboros_edge");
    let relay_metrics = RelayMetrics::register(sub);
    let backend_metrics = BackendMetrics::register(sub);
    let ready_state = ReadyState::register(
        sub,
        "1 when /readyz last found a healthy backend for every listener, else 0",
    );

    let idle = (!args.idle_timeout.is_zero()).then_some(args.idle_timeout);

    let mut balancers = Vec::new();
    let mut listeners = Vec::new();
    for (i, l) in args.listen.iter().enumerate() {
        let listener = crate::listen::bind_v6only(&l.bind).await.map_err(|e| {
            anyhow::anyhow!(
                "binding --listen {}: {e}; is the port free and allowed?",
                l.spec
            )
        })?;
        let local = listener.local_addr()?;
        // Metric labels and logs name the listener as given; leaked once per listener.
        let name: &'static str = Box::leak(l.spec.clone().into_boxed_str());
        let label = match (&source, &l.port) {
            (Source::Service(s), Some(p)) => format!("{}/{} port {p}", s.namespace, s.name),
            _ => "static backends".to_string(),
        };
        let balancer = Arc::new(Balancer::new(
            name,
            label,
            args.balance,
            args.dial_timeout,
            args.eject_backoff,
            backend_metrics.clone(),
        ));
        if let Source::Static(sets) = &source {
            balancer.set_backends(&sets[i]);
        }
        tracing::info!(listener = name, addr = %local, upstream = %crate::relay::upstream::Upstream::describe(&*balancer), balance = args.balance.as_str(), proxy_protocol = args.proxy_protocol().as_str(), "listening");
        balancers.push(balancer.clone());
        listeners.push((
            listener,
            Arc::new(Route {
                name,
                upstream: balancer,
                version: args.proxy_protocol(),
                header_port: None,
                idle_timeout: idle,
                relaying: relaying.clone(),
                metrics: relay_metrics.listener(name),
            }),
        ));
    }

    let background = CancellationToken::new();
    if let Source::Service(svc) = &source {
        follow_service(&args, svc, &balancers, &background).await?;
    }
    if !args.health_interval.is_zero() {
        spawn_health_checks(
            args.health_interval,
            args.proxy_protocol(),
            balancers.clone(),
            background.clone(),
        );
    }

    let server = lifecycle.serve(listeners)?;

    let readiness = Arc::new(Readiness {
        balancers,
        state: ready_state,
    });
    let r = readiness.clone();
    let check: ReadyCheck = Arc::new(move || {
        let r = r.clone();
        Box::pin(async move { r.check() })
    });
    lifecycle
        .run_until_signal(
            server,
            signal,
            args.listen_health.0.as_ref(),
            registry,
            &readiness.state,
            check,
            args.shutdown_delay,
            args.shutdown_grace,
        )
        .await?;
    background.cancel();
    Ok(ExitCode::SUCCESS)
}

/// Reads and checks the `--pools` file; the error names the file.
fn read_pools(path: &std::path::Path) -> anyhow::Result<Vec<pool::Pool>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::err(format!(
            "--pools {}: {e}; give the path of the pools file",
            path.display()
        ))
    })?;
    pool::parse_pools(&text)
        .map_err(|e| UsageError::err(format!("--pools {}: {e}", path.display())))
}

/// `/readyz` of `edge --pools`: ready once the Services have been listed (and served).
fn listed_check(
    state: Arc<ReadyState>,
    watched: tokio::sync::watch::Receiver<Option<load_balancer::Served>>,
) -> ReadyCheck {
    Arc::new(move || {
        let (s, listed) = (state.clone(), watched.borrow().is_some());
        Box::pin(async move {
            if s.shutting_down() {
                return Err("shutting-down: the edge received a termination signal".into());
            }
            let reason = "not-listed: the Services have not been listed yet";
            s.record(
                listed.to_string(),
                listed,
                "ready: Services listed and served",
                "not ready",
                reason,
            );
            if listed {
                Ok(())
            } else {
                Err(reason.into())
            }
        })
    })
}

/// The namespace of the edge's Leases: `--lease-namespace`, else this pod's.
fn lease_namespace(args: &EdgeArgs) -> String {
    (args.lease_namespace.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(crate::dns::args::own_namespace)
}

/// Who writes the load-balancer status: the Lease holder with --leader-elect, else this edge.
fn leadership(
    args: &EdgeArgs,
    client: &kube::Client,
    identity: String,
    stop: &CancellationToken,
) -> Leadership {
    if !args.leader_elect {
        return Leadership::always();
    }
    let namespace = lease_namespace(args);
    tracing::info!(lease = %format!("{namespace}/{}", args.lease_name), %identity,
        "only the Lease holder writes the load-balancer status");
    Leadership::elect(
        client.clone(),
        namespace,
        args.lease_name.clone(),
        identity,
        stop.clone(),
    )
}

/// With layer-2 pools (`pools`, none: nothing to do), the task that elects a holder of each of
/// their addresses until `stop` (`l2`).
fn spawn_announcer(
    args: &EdgeArgs,
    (client, identity): (&kube::Client, String),
    pools: &[pool::Pool],
    watched: tokio::sync::watch::Receiver<Option<load_balancer::Served>>,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if pools.is_empty() {
        return None;
    }
    let settings = l2::Settings {
        client: client.clone(),
        namespace: lease_namespace(args),
        prefix: args.lease_name.clone(),
        identity,
        host: Arc::new(l2::link::System),
    };
    tracing::info!(pools = pools.len(), namespace = %settings.namespace,
        "announcing the addresses of layer-2 pools, one Lease per address");
    Some(tokio::spawn(l2::follow(
        settings,
        pools.to_vec(),
        watched,
        stop,
    )))
}

/// `edge --pools`: serves the Services of the class (see `load_balancer`) until a signal.
async fn run_load_balancer(
    args: &EdgeArgs,
    path: &std::path::Path,
    loops: crate::runtime::Loops,
) -> anyhow::Result<ExitCode> {
    let pools = read_pools(path)?;
    let signal = crate::shutdown::on_signal()?;
    let lifecycle = Arc::new(Lifecycle::new(args.max_connections).with_loops(loops));
    let mut registry = Registry::default();
    let sub = registry.sub_registry_with_prefix("ouroboros_edge");
    let relay_metrics = RelayMetrics::register(sub);
    let backend_metrics = BackendMetrics::register(sub);
    let ready_state = ReadyState::register(
        sub,
        "1 when /readyz last found the Services listed and served, else 0",
    );
    let client = crate::kube_client::client(
        args.kubeconfig.as_deref(),
        args.api_timeout,
        crate::kube_client::Calls::Watches,
    )
    .await?;
    let identity = crate::controller::lease::identity();
    let (notifier, events_task) = crate::controller::events::spawn_as(
        client.clone(),
        load_balancer::REPORTER,
        "the edge's ServiceAccount",
        identity.clone(),
    );
    let lease_stop = CancellationToken::new();
    let leadership = leadership(args, &client, identity.clone(), &lease_stop);
    let pools_l2: Vec<pool::Pool> = pools.iter().filter(|p| p.l2.is_some()).cloned().collect();
    let config = load_balancer::Config {
        class: args.load_balancer_class.clone(),
        pools,
        default_version: args.proxy_protocol(),
    };
    let (served, watched) = tokio::sync::watch::channel(None);
    let background = CancellationToken::new();
    let settings = listeners::Settings {
        client: client.clone(),
        lifecycle: lifecycle.clone(),
        notifier: notifier.clone(),
        relaying: relay::mode::relaying(args.copy_mode, args.max_connections),
        relay_metrics,
        backend_metrics,
        balance: args.balance,
        dial_timeout: args.dial_timeout,
        eject_backoff: args.eject_backoff,
        idle_timeout: (!args.idle_timeout.is_zero()).then_some(args.idle_timeout),
        health_interval: args.health_interval,
    };
    let listening = tokio::spawn(listeners::follow(
        settings,
        watched.clone(),
        background.clone(),
    ));
    let balancer = tokio::spawn(load_balancer::run(
        client.clone(),
        config,
        (notifier, leadership.rx.clone()),
        served,
        background.clone(),
    ));
    // Addresses are given up when accepting stops (after --shutdown-delay), so another edge
    // takes them over while the connections here finish.
    let announcing = spawn_announcer(
        args,
        (&client, identity),
        &pools_l2,
        watched.clone(),
        lifecycle.listener_stop(),
    );
    let server = lifecycle.serve::<Route<Arc<Balancer>>>(Vec::new())?;
    let state = Arc::new(ready_state);
    let check = listed_check(state.clone(), watched);
    lifecycle
        .run_until_signal(
            server,
            signal,
            args.listen_health.0.as_ref(),
            registry,
            &state,
            check,
            args.shutdown_delay,
            args.shutdown_grace,
        )
        .await?;
    background.cancel();
    if let Some(announcing) = announcing {
        let _ = announcing.await;
    }
    let _ = balancer.await;
    let _ = listening.await;
    lease_stop.cancel();
    leadership.finish(std::time::Duration::from_secs(5)).await;
    // The loop and the listeners held the last notifiers: the publisher finishes what is queued, then ends.
    let _ = events_task.await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<EdgeArgs, String> {
        crate::flags::parse_args(argv).map_err(|e| e.to_string())
    }

    fn addrs(v: &[&str]) -> Vec<SocketAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn defaults() {
        let a = parse(&["--backend", "10.0.0.1:80", "--listen", ":80"]).unwrap();
        assert_eq!(a.balance, Algorithm::RoundRobin);
        assert_eq!(a.proxy_protocol(), Version::V1);
        assert_eq!(a.load_balancer_class, "ouroboros.io/edge");
        let lb = parse(&["--pools", "/etc/pools.yaml"]).unwrap();
        assert_eq!(lb.proxy_protocol(), Version::V2);
        assert_eq!(
            source(&lb),
            Ok(Source::LoadBalancer("/etc/pools.yaml".into()))
        );
        assert_eq!(a.dial_timeout, Duration::from_secs(2));
        assert_eq!(a.health_interval, Duration::ZERO);
        assert_eq!(a.eject_backoff, Duration::from_secs(1));
        assert_eq!(a.listen_health.0, Some(ListenAddr::Any(8081)));
        assert_eq!(a.shutdown_delay, Duration::from_secs(5));
        assert_eq!(a.shutdown_grace, Duration::from_secs(30));
        assert_eq!(a.idle_timeout, Duration::from_secs(3600));
        assert_eq!(a.max_connections, 65536);
        assert_eq!(a.threads, 0);
        assert_eq!(a.busy_poll, crate::runtime::BusyPoll::Auto);
    }

    #[test]
    fn listen_specs_and_backends_parse() {
        let l = parse_listen_spec("[::]:443=websecure").unwrap();
        assert_eq!(l.bind, ListenAddr::Ip("[::]:443".parse().unwrap()));
        assert_eq!(l.port, Some(PortRef::Name("websecure".into())));
        assert_eq!(l.spec, "[::]:443=websecure");
        let l = parse_listen_spec("0.0.0.0:80=80").unwrap();
        assert_eq!(l.port, Some(PortRef::Number(80)));
        assert_eq!(parse_listen_spec(":8443").unwrap().port, None);
        for bad in [
            "=web",
            "443=web",
            "[::]:443=",
            "[::]:443=Web",
            "0.0.0.0:80=0",
        ] {
            assert!(parse_listen_spec(bad).is_err(), "{bad:?}");
        }
        for (input, want) in [
            (
                "10.0.0.1:8443",
                Some(StaticBackend::Addr("10.0.0.1:8443".parse().unwrap())),
            ),
            (
                "[fd00::1]:443",
                Some(StaticBackend::Addr("[fd00::1]:443".parse().unwrap())),
            ),
            (
                "10.0.0.1",
                Some(StaticBackend::Ip("10.0.0.1".parse().unwrap())),
            ),
            (
                "fd00::1",
                Some(StaticBackend::Ip("fd00::1".parse().unwrap())),
            ),
            (
                "[fd00::1]",
                Some(StaticBackend::Ip("fd00::1".parse().unwrap())),
            ),
            ("10.0.0.1:0", None),
            ("ingress:443", None),
            ("", None),
        ] {
            assert_eq!(parse_backend(input).ok(), want, "{input:?}");
        }
    }

    #[test]
    fn sources_from_flag_combinations() {
        for (argv, want) in [
            (
                &[
                    "--backend",
                    "10.0.0.2:81",
                    "--backend",
                    "10.0.0.1:81",
                    "--listen",
                    ":80",
                ][..],
                Ok(Source::Static(vec![addrs(&["10.0.0.1:81", "10.0.0.2:81"])])),
            ),
            (
                // Bare IPs take each listener's port; IP:PORT backends keep theirs.
                &[
                    "--backend",
                    "10.0.0.1",
                    "--backend",
                    "10.0.0.9:9000",
                    "--listen",
                    "[::]:443=443",
                    "--listen",
                    "0.0.0.0:80=80",
                ][..],
                Ok(Source::Static(vec![
                    addrs(&["10.0.0.1:443", "10.0.0.9:9000"]),
                    addrs(&["10.0.0.1:80", "10.0.0.9:9000"]),
                ])),
            ),
            (
                &["--backend", "10.0.0.1", "--listen", ":80"][..],
                Err("--backend 10.0.0.1 has no port"),
            ),
            (
                &["--backend", "10.0.0.1:80", "--listen", ":80=web"][..],
                Err("needs --service"),
            ),
            (
                &["--service", "ns/svc", "--listen", ":80"][..],
                Err("name the Service port"),
            ),
            (
                &[
                    "--service",
                    "ns/svc",
                    "--listen",
                    "[::]:443=websecure",
                    "--listen",
                    "0.0.0.0:443=websecure",
                ][..],
                Ok(Source::Service(NamespacedName {
                    namespace: "ns".into(),
                    name: "svc".into(),
                })),
            ),
            (
                &[
                    "--service",
                    "ns/svc",
                    "--listen",
                    ":80=web",
                    "--listen",
                    ":80=web",
                ][..],
                Err("given twice"),
            ),
            (
                &[
                    "--backend",
                    "10.0.0.1:80",
                    "--listen",
                    ":80",
                    "--dial-timeout",
                    "0",
                ][..],
                Err("--dial-timeout"),
            ),
            (
                &[
                    "--backend",
                    "10.0.0.1:80",
                    "--listen",
                    ":80",
                    "--eject-backoff",
                    "0",
                ][..],
                Err("--eject-backoff"),
            ),
        ] {
            let a = parse(argv).unwrap();
            crate::table::expect(&source(&a), &want, argv);
        }
    }

    #[test]
    fn load_balancer_flags() {
        for (argv, want) in [
            (
                &["--pools", "p.yaml"][..],
                Ok(Source::LoadBalancer("p.yaml".into())),
            ),
            (
                &[
                    "--backend",
                    "10.0.0.1:80",
                    "--listen",
                    ":80",
                    "--load-balancer-class",
                    "x.io/lb",
                ][..],
                Err("--load-balancer-class is for --pools"),
            ),
            (
                &["--pools", "p.yaml", "--load-balancer-class", " "][..],
                Err("must not be empty"),
            ),
            (
                &["--pools", "p.yaml", "--lease-name", "Edge"][..],
                Err("--lease-name \"Edge\": expected a DNS subdomain name"),
            ),
            (
                &["--pools", "p.yaml", "--lease-name", &"a".repeat(214)][..],
                Err("of at most 213 characters"),
            ),
        ] {
            let a = parse(argv).unwrap();
            crate::table::expect(&source(&a), &want, argv);
        }
    }

    #[test]
    fn clap_rejects_bad_combinations_naming_the_flag() {
        for (argv, flag) in [
            // Neither backend source: the error names both.
            (&["--listen", ":80"][..], "--service"),
            (&["--listen", ":80"][..], "--backend"),
            (&["--service", "ns/svc"][..], "--listen"),
            (
                &[
                    "--service",
                    "ns/svc",
                    "--backend",
                    "10.0.0.1:1",
                    "--listen",
                    ":1=1",
                ][..],
                "--backend",
            ),
            (&["--backend", "x", "--listen", ":1"][..], "--backend"),
            (&["--listen", ":80"][..], "--pools"),
            (&["--pools", "p.yaml", "--listen", ":80"][..], "--listen"),
            (
                &["--pools", "p.yaml", "--service", "ns/svc"][..],
                "--service",
            ),
            (
                &[
                    "--backend",
                    "10.0.0.1:1",
                    "--listen",
                    ":1",
                    "--balance",
                    "random",
                ][..],
                "--balance",
            ),
            (
                &["--backend", "10.0.0.1:1", "--listen", "1"][..],
                "--listen",
            ),
        ] {
            let err = parse(argv).unwrap_err();
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }
}
