//! `ouroboros proxy`: accepts TCP on an http and an https listener, prepends a PROXY-protocol
//! header carrying the real client address and relays to the ingress controller, whose name is
//! re-resolved on every dial.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::accept::Lifecycle;
use crate::admin::ReadyCheck;
use crate::flags::{parse_duration, UsageError};
use crate::listen::ListenAddr;
use crate::proxy_protocol::Version;
use crate::relay::lifecycle::ReadyState;
use crate::relay::metrics::RelayMetrics;
use crate::relay::mode::Mode;
use crate::relay::upstream::{DnsTarget, Upstream};
use crate::relay::{self, Route};

/// Default upstream: the ingress-nginx controller Service.
pub const DEFAULT_TARGET_HOST: &str = "ingress-nginx-controller.ingress-nginx.svc.cluster.local";

/// How long a resolution of the target serves new connections. Short enough to follow a moved
/// target at once for practical purposes (and dropped whenever no address answers), long
/// enough that a burst of connections does not cost a DNS query each.
const DNS_CACHE: Duration = Duration::from_secs(1);

use crate::flags::Listen;

/// An IP literal (IPv6 optionally in brackets) or a DNS name.
fn parse_target_host(s: &str) -> Result<String, String> {
    let s = s.trim();
    let unbracketed = s
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(s);
    if unbracketed.parse::<std::net::IpAddr>().is_ok() {
        return Ok(unbracketed.to_string());
    }
    let name = s.strip_suffix('.').unwrap_or(s);
    if crate::dns_name::is_hostname(name, true) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!(
            "{s:?} is neither an IP address nor a DNS name (e.g. ingress-nginx-controller.ingress-nginx.svc.cluster.local)"
        ))
    }
}

/// A Kubernetes object name usable in a DNS label (RFC 1123).
fn parse_dns_label(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a valid Service or namespace name (lowercase letters, digits and '-', at most 63)"
        ))
    }
}

#[derive(clap::Args, Debug, Clone)]
#[command(
    about = "Accept TCP, prepend a PROXY-protocol header with the real client address, relay to the ingress controller",
    long_about = "Accepts TCP on an http and an https listener, writes a PROXY-protocol header \
        (v1 or v2) carrying the client's address and the port it dialled, then relays the \
        connection to the ingress controller. The target name is resolved on every connection. \
        Serves /healthz, /readyz and /metrics on --listen-health."
)]
pub struct ProxyArgs {
    /// Listener for plain HTTP traffic: `:PORT` (all interfaces, IPv6 and IPv4), `HOST:PORT`
    /// or `[IPv6]:PORT`; empty disables it.
    #[arg(long, env = "OUROBOROS_PROXY_LISTEN_HTTP", default_value = ":8080", value_parser = Listen::parse, value_name = "ADDR")]
    pub listen_http: Listen,

    /// Listener for TLS traffic (relayed as is, never decrypted); same forms as --listen-http;
    /// empty disables it.
    #[arg(long, env = "OUROBOROS_PROXY_LISTEN_HTTPS", default_value = ":8443", value_parser = Listen::parse, value_name = "ADDR")]
    pub listen_https: Listen,

    /// Listener for /healthz, /readyz and /metrics; empty disables it.
    #[arg(long, env = "OUROBOROS_PROXY_LISTEN_HEALTH", default_value = ":8081", value_parser = Listen::parse, value_name = "ADDR")]
    pub listen_health: Listen,

    /// Upstream host (DNS name or IP), resolved (A and AAAA) on every connection.
    #[arg(long, env = "OUROBOROS_PROXY_TARGET_HOST", default_value = DEFAULT_TARGET_HOST, value_parser = parse_target_host, conflicts_with = "target_service_name", value_name = "HOST")]
    pub target_host: String,

    /// Upstream Service name; with --target-service-namespace it replaces --target-host by
    /// NAME.NAMESPACE.svc.CLUSTER_DOMAIN.
    #[arg(long, env = "OUROBOROS_PROXY_TARGET_SERVICE_NAME", value_parser = parse_dns_label, requires = "target_service_namespace", value_name = "NAME")]
    pub target_service_name: Option<String>,

    /// Namespace of --target-service-name.
    #[arg(long, env = "OUROBOROS_PROXY_TARGET_SERVICE_NAMESPACE", value_parser = parse_dns_label, requires = "target_service_name", value_name = "NAMESPACE")]
    pub target_service_namespace: Option<String>,

    /// Cluster DNS domain used with --target-service-name (default: the `svc.<domain>` entry of
    /// /etc/resolv.conf's search line, else cluster.local).
    #[arg(long, env = "OUROBOROS_PROXY_CLUSTER_DOMAIN", value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,

    /// Upstream port for connections accepted on --listen-http.
    #[arg(long, env = "OUROBOROS_PROXY_TARGET_HTTP_PORT", default_value_t = 80, value_parser = clap::value_parser!(u16).range(1..), value_name = "PORT")]
    pub target_http_port: u16,

    /// Upstream port for connections accepted on --listen-https.
    #[arg(long, env = "OUROBOROS_PROXY_TARGET_HTTPS_PORT", default_value_t = 443, value_parser = clap::value_parser!(u16).range(1..), value_name = "PORT")]
    pub target_https_port: u16,

    /// Destination port written in the header for --listen-http connections: the port clients
    /// dialled on the proxy's Service (ingress controllers derive X-Forwarded-Port from it).
    #[arg(long, env = "OUROBOROS_PROXY_HEADER_HTTP_PORT", default_value_t = 80, value_parser = clap::value_parser!(u16).range(1..), value_name = "PORT")]
    pub header_http_port: u16,

    /// Destination port written in the header for --listen-https connections.
    #[arg(long, env = "OUROBOROS_PROXY_HEADER_HTTPS_PORT", default_value_t = 443, value_parser = clap::value_parser!(u16).range(1..), value_name = "PORT")]
    pub header_https_port: u16,

    /// PROXY-protocol version to send: v1 (text) or v2 (binary). Must match what the ingress
    /// controller expects.
    #[arg(long, env = "OUROBOROS_PROXY_PROXY_PROTOCOL", value_enum, default_value_t = Version::V1)]
    pub proxy_protocol: Version,

    /// Time allowed to resolve the target and connect to one of its addresses.
    #[arg(long, env = "OUROBOROS_PROXY_DIAL_TIMEOUT", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub dial_timeout: Duration,

    /// Time /readyz allows for dialling the target of each listener that is on (http, https).
    #[arg(long, env = "OUROBOROS_PROXY_READY_TIMEOUT", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub ready_timeout: Duration,

    /// After SIGTERM, keep accepting for this long (with /readyz failing) so endpoint removal
    /// propagates before clients are refused. SIGINT (Ctrl-C in a terminal) skips it.
    #[arg(long, env = "OUROBOROS_PROXY_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,

    /// After accepting stopped, how long in-flight connections may run before they are cut.
    #[arg(long, env = "OUROBOROS_PROXY_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Duration,

    /// Close a connection after no traffic either way for this long; 0 disables.
    #[arg(long, env = "OUROBOROS_PROXY_IDLE_TIMEOUT", default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Duration,

    /// How bytes are copied between the sockets: `auto` (read/write for requests and replies,
    /// switching a direction to splice(2) while it streams and back after a short read),
    /// `userspace` (always read/write through a pooled buffer) or `splice` (always Linux
    /// splice(2) through a pooled pipe; the bytes stay in the kernel) or `sockmap` (the kernel
    /// moves the bytes between the sockets, a BPF program redirecting through a socket map:
    /// only in a build with the cargo feature `kernel-relay`, not the default one or the
    /// release image; needs CAP_BPF and CAP_NET_ADMIN and Linux 5.10+, else logs why once and
    /// runs `auto`).
    #[arg(long, env = "OUROBOROS_PROXY_COPY_MODE", default_value = "auto", value_parser = Mode::parser(), value_name = "MODE")]
    pub copy_mode: Mode,

    /// Connections relayed at once (both listeners together); past it new connections wait in
    /// the kernel's listen backlog. 0 = unlimited.
    #[arg(
        long,
        env = "OUROBOROS_PROXY_MAX_CONNECTIONS",
        default_value_t = 65536,
        value_name = "N"
    )]
    pub max_connections: usize,
    /// Event loops that relay connections, each a thread with the single-threaded scheduler
    /// accepting on the same sockets; a connection stays on the loop that accepted it. 1 = one
    /// thread (about 30,000 keep-alive requests/s or 1 GB/s per loop, measured; the best tail
    /// latency on a node shared with other work); 0 = one per CPU this process may use (its
    /// affinity and its CPU limit, rounded up, count); N = N.
    #[arg(
        long,
        env = "OUROBOROS_PROXY_THREADS",
        default_value_t = 1,
        value_name = "N"
    )]
    pub threads: usize,
    /// Before a relay thread sleeps, watch for new events for a while: spends CPU to spare the
    /// peers the cost of waking it (on VMs without guest halt polling, that wake-up is an
    /// interrupt the sending CPU pays for). `auto`: a window of up to 50us that grows while the
    /// thread's sleeps are short and shrinks to nothing when they are long (an idle relay does
    /// not spin), off under a CPU limit; a duration (at most 1ms) spins that long before every
    /// sleep; 0 = off.
    #[arg(long, env = "OUROBOROS_PROXY_BUSY_POLL", default_value = "auto", value_parser = crate::runtime::parse_busy_poll, value_name = "auto|DURATION")]
    pub busy_poll: crate::runtime::BusyPoll,
}

/// Checked settings derived from the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen_http: Option<ListenAddr>,
    pub listen_https: Option<ListenAddr>,
    pub listen_health: Option<ListenAddr>,
    pub target_host: String,
}

impl Config {
    /// Flag combinations clap cannot check; errors name the flag.
    pub fn from_args(args: &ProxyArgs) -> Result<Config, String> {
        if args.listen_http.0.is_none() && args.listen_https.0.is_none() {
            return Err(
                "--listen-http and --listen-https are both empty: set at least one".to_string(),
            );
        }
        for (flag, d) in [
            ("--dial-timeout", args.dial_timeout),
            ("--ready-timeout", args.ready_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be greater than 0"));
            }
        }
        let target_host = match (&args.target_service_name, &args.target_service_namespace) {
            (Some(name), Some(ns)) => {
                let domain = crate::cluster_domain::resolve(args.cluster_domain.as_deref());
                // Fully qualified (trailing dot): the resolver skips the search list, which
                // with Kubernetes' ndots:5 would cost three failed queries per lookup.
                format!("{name}.{ns}.svc.{domain}.")
            }
            _ => args.target_host.clone(),
        };
        Ok(Config {
            listen_http: args.listen_http.0.clone(),
            listen_https: args.listen_https.0.clone(),
            listen_health: args.listen_health.0.clone(),
            target_host,
        })
    }
}

/// Readiness: every target (http, and https unless disabled) answers and no shutdown is under
/// way. Logs changes only.
struct Readiness {
    targets: Vec<(&'static str, DnsTarget)>,
    version: Version,
    timeout: Duration,
    state: ReadyState,
}

impl Readiness {
    async fn check(&self) -> Result<(), String> {
        if self.state.shutting_down() {
            return Err("shutting-down: the proxy received a termination signal".into());
        }
        let probes = self.targets.iter().map(|(name, t)| async move {
            // The target's own deadline bounds the dial; this one also bounds the header write.
            let probe = tokio::time::timeout(self.timeout, relay::probe(t, self.version));
            let result = probe.await.unwrap_or_else(|_| {
                Err(crate::relay::upstream::DialError {
                    cause: crate::relay::upstream::Cause::Timeout,
                    target: t.describe().to_string(),
                    detail: format!("no answer within {:?}", self.timeout),
                })
            });
            result.map_err(|e| {
                (
                    e.cause,
                    format!("{}: {name} target {}: {}", e.cause, e.target, e.detail),
                )
            })
        });
        let results = futures::future::join_all(probes).await;
        if self.state.shutting_down() {
            // A signal arrived while probing: shutdown wins, and is not a readiness change.
            return Err("shutting-down: the proxy received a termination signal".into());
        }
        let failures: Vec<_> = results.into_iter().filter_map(Result::err).collect();
        let key: Vec<String> = failures.iter().map(|(c, _)| c.to_string()).collect();
        let reason = failures
            .iter()
            .map(|(_, r)| r.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let ready = key.is_empty();
        let names: Vec<&str> = self.targets.iter().map(|(name, _)| *name).collect();
        let answering = match names.as_slice() {
            [one] => format!("ready: the {one} target answers"),
            _ => format!("ready: the {} targets answer", names.join(" and ")),
        };
        self.state.record(
            key.join(","),
            ready,
            &answering,
            "not ready: a target does not answer",
            &reason,
        );
        if ready {
            Ok(())
        } else {
            Err(reason)
        }
    }
}

/// Runs the proxy on this (single-threaded) runtime and `loops` (see `crate::runtime`).
pub async fn run(args: ProxyArgs, loops: crate::runtime::Loops) -> anyhow::Result<ExitCode> {
    let cfg = Config::from_args(&args).map_err(UsageError::err)?;
    let signal = crate::shutdown::on_signal()?;
    let lifecycle = Lifecycle::new(args.max_connections).with_loops(loops);
    let relaying = relay::mode::relaying(args.copy_mode, args.max_connections);

    let mut registry = Registry::default();
    let sub = registry.sub_registry_with_prefix("ouroboros_proxy");
    let relay_metrics = RelayMetrics::register(sub);
    let ready_state = ReadyState::register(
        sub,
        "1 when /readyz last found every target answering, else 0",
    );

    let idle = (!args.idle_timeout.is_zero()).then_some(args.idle_timeout);

    let wanted = [
        (
            "http",
            "--listen-http",
            &cfg.listen_http,
            args.target_http_port,
            args.header_http_port,
        ),
        (
            "https",
            "--listen-https",
            &cfg.listen_https,
            args.target_https_port,
            args.header_https_port,
        ),
    ];
    let mut targets = Vec::new();
    let mut listeners = Vec::new();
    for (name, flag, addr, target_port, header_port) in wanted {
        let Some(addr) = addr else { continue };
        let listener = crate::listen::bind(addr).await.map_err(|e| {
            anyhow::anyhow!("binding {flag} {addr}: {e}; is the port free and allowed?")
        })?;
        let local = listener.local_addr()?;
        let target = DnsTarget::new(cfg.target_host.clone(), target_port, args.dial_timeout)
            .with_cache(DNS_CACHE);
        tracing::info!(listener = name, addr = %local, upstream = %target.describe(), proxy_protocol = args.proxy_protocol.as_str(), header_port, "listening");
        targets.push((
            name,
            DnsTarget::new(cfg.target_host.clone(), target_port, args.ready_timeout),
        ));
        let route = Arc::new(Route {
            name,
            upstream: target,
            version: args.proxy_protocol,
            header_port: Some(header_port),
            idle_timeout: idle,
            relaying: relaying.clone(),
            metrics: relay_metrics.listener(name),
        });
        listeners.push((listener, route));
    }
    let server = lifecycle.serve(listeners)?;

    let readiness = Arc::new(Readiness {
        targets,
        version: args.proxy_protocol,
        timeout: args.ready_timeout,
        state: ready_state,
    });
    let r = readiness.clone();
    let check: ReadyCheck = Arc::new(move || {
        let r = r.clone();
        Box::pin(async move { r.check().await })
    });
    lifecycle
        .run_until_signal(
            server,
            signal,
            cfg.listen_health.as_ref(),
            registry,
            &readiness.state,
            check,
            args.shutdown_delay,
            args.shutdown_grace,
        )
        .await?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<ProxyArgs, String> {
        crate::flags::parse_args(argv).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_the_reference_tool() {
        let a = parse(&[]).unwrap();
        let c = Config::from_args(&a).unwrap();
        assert_eq!(c.listen_http, Some(ListenAddr::Any(8080)));
        assert_eq!(c.listen_https, Some(ListenAddr::Any(8443)));
        assert_eq!(c.listen_health, Some(ListenAddr::Any(8081)));
        assert_eq!(c.target_host, DEFAULT_TARGET_HOST);
        assert_eq!((a.target_http_port, a.target_https_port), (80, 443));
        assert_eq!((a.header_http_port, a.header_https_port), (80, 443));
        assert_eq!(a.proxy_protocol, Version::V1);
        assert_eq!(a.dial_timeout, Duration::from_secs(5));
        assert_eq!(a.ready_timeout, Duration::from_secs(2));
        assert_eq!(a.shutdown_delay, Duration::from_secs(5));
        assert_eq!(a.shutdown_grace, Duration::from_secs(30));
        assert_eq!(a.idle_timeout, Duration::from_secs(3600));
        assert_eq!(a.max_connections, 65536);
        assert_eq!(a.threads, 1);
        assert_eq!(a.busy_poll, crate::runtime::BusyPoll::Auto);
    }

    #[test]
    fn flag_combinations() {
        for (argv, want) in [
            (
                &["--listen-http", "", "--listen-https", ""][..],
                Err("--listen-http and --listen-https"),
            ),
            (&["--listen-http", ""][..], Ok(DEFAULT_TARGET_HOST)),
            (&["--dial-timeout", "0"][..], Err("--dial-timeout")),
            (&["--ready-timeout", "0"][..], Err("--ready-timeout")),
            (
                &[
                    "--target-service-name",
                    "ingress",
                    "--target-service-namespace",
                    "infra",
                    "--cluster-domain",
                    "corp.local.",
                ][..],
                Ok("ingress.infra.svc.corp.local."),
            ),
            (&["--target-host", "[::1]"][..], Ok("::1")),
            (
                &["--target-host", "Ingress.Example."][..],
                Ok("ingress.example."),
            ),
        ] {
            let a = parse(argv).unwrap();
            let got = Config::from_args(&a).map(|c| c.target_host);
            crate::table::expect(&got, &want, argv);
        }
    }

    #[test]
    fn clap_rejects_bad_values_naming_the_flag() {
        for (argv, flag) in [
            (&["--proxy-protocol", "v3"][..], "--proxy-protocol"),
            (&["--listen-http", "8080"][..], "--listen-http"),
            (&["--target-http-port", "0"][..], "--target-http-port"),
            (&["--header-https-port", "70000"][..], "--header-https-port"),
            (&["--dial-timeout", "5"][..], "--dial-timeout"),
            (&["--target-host", "bad host"][..], "--target-host"),
            (
                &["--target-service-name", "x"][..],
                "--target-service-namespace",
            ),
            (
                &[
                    "--target-service-name",
                    "x",
                    "--target-service-namespace",
                    "y",
                    "--target-host",
                    "z",
                ][..],
                "--target-host",
            ),
            (
                &[
                    "--target-service-name",
                    "Bad_Name",
                    "--target-service-namespace",
                    "y",
                ][..],
                "--target-service-name",
            ),
        ] {
            let err = parse(argv).unwrap_err();
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }
}
