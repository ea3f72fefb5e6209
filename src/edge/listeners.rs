//! `edge --pools`: the listeners of the served Services, kept equal to what each allocation pass
//! publishes ([`super::load_balancer::Served`]). Per Service: one listener per address and TCP
//! port (IP_FREEBIND, so an address still on its way to this host does not fail the bind), one
//! balancer per Service port shared by the addresses of both families, fed from the Service's
//! EndpointSlices by [`super::watch::follow`], and the PROXY version the Service asks for.
//!
//! A Service whose plan changes (addresses, ports, version) is closed and opened again:
//! connections already relayed run on, new ones wait in the kernel backlog for the moment the
//! listener is rebound. A bind that fails (the port in use on this host, by another program or
//! by an edge still shutting down) is logged and told to the Service's owner as a
//! `ListenFailed` Event, and the Service is opened again after a backoff that doubles up to a
//! minute (each attempt logged, so once per step).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::backends::PortRef;
use super::balance::metrics::BackendMetrics;
use super::balance::pick::Algorithm;
use super::balance::Balancer;
use super::load_balancer::Served;
use super::serve::Plan;
use crate::accept::Lifecycle;
use crate::controller::events::{Notice, Notifier};
use crate::flags::NamespacedName;
use crate::relay::metrics::RelayMetrics;
use crate::relay::mode::Relaying;
use crate::relay::Route;

/// The Event reason of a listener that could not be opened.
pub const LISTEN_FAILED: &str = "ListenFailed";

/// What every listener is built with.
pub struct Settings {
    pub client: Client,
    pub lifecycle: Arc<Lifecycle>,
    pub notifier: Notifier,
    pub relaying: Relaying,
    pub relay_metrics: RelayMetrics,
    pub backend_metrics: BackendMetrics,
    pub balance: Algorithm,
    pub dial_timeout: Duration,
    pub eject_backoff: Duration,
    pub idle_timeout: Option<Duration>,
    /// Active health checks of the backends; zero: none.
    pub health_interval: Duration,
}

/// Longest wait before listeners that failed to bind are tried again.
const MAX_RETRY: Duration = Duration::from_secs(60);
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// One served Service: its plan, and what stops its listeners, watch and checks.
struct Running {
    plan: Plan,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
    /// Listeners of the plan that could not be opened.
    failed: usize,
}

impl Running {
    /// Stops it and waits until its listening sockets are closed, so the same address and port
    /// can be bound again at once.
    async fn close(mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

/// A listener's name in logs and metric labels, leaked once per distinct name: Routes and
/// metric families take `&'static str`, and a Service's listeners come back under the same
/// names when its plan changes.
fn interned(name: String) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(name.as_str()) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Opens what `plan` asks for Service `key` (`namespace/name`).
fn start(s: &Settings, key: &str, plan: &Plan) -> Running {
    let stop = s.lifecycle.listener_stop();
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let mut balancers: BTreeMap<String, Arc<Balancer>> = BTreeMap::new();
    let mut listeners = Vec::new();
    let mut failed = 0;
    for l in &plan.listeners {
        let balancer = balancers
            .entry(l.port_name.clone())
            .or_insert_with(|| {
                let port = if l.port_name.is_empty() {
                    "(unnamed)"
                } else {
                    &l.port_name
                };
                Arc::new(Balancer::new(
                    interned(format!("{key} port {port}")),
                    format!("{key} port {port}"),
                    s.balance,
                    s.dial_timeout,
                    s.eject_backoff,
                    s.backend_metrics.clone(),
                ))
            })
            .clone();
        let listener = match crate::listen::bind_freebind(l.addr) {
            Ok(listener) => listener,
            Err(e) => {
                let note = format!(
                    "cannot listen on {}: {e}; is another process on this host using the port?",
                    l.addr
                );
                tracing::warn!(service = %key, addr = %l.addr, error = %e, "cannot listen on a load-balancer address");
                s.notifier.send(Notice {
                    regarding: plan.regarding.clone(),
                    reason: LISTEN_FAILED,
                    action: "Listen",
                    note,
                });
                failed += 1;
                continue;
            }
        };
        let route_name = interned(format!("{key} {}", l.addr));
        tracing::info!(service = %key, addr = %l.addr, port = %l.port_name, proxy_protocol = plan.version.as_str(), "listening");
        listeners.push((
            listener,
            Arc::new(Route {
                name: route_name,
                upstream: balancer,
                version: plan.version,
                header_port: None,
                idle_timeout: s.idle_timeout,
                relaying: s.relaying.clone(),
                metrics: s.relay_metrics.listener(route_name),
            }),
        ));
    }
    let server = match s.lifecycle.serve_until(listeners, stop.clone()) {
        Ok(server) => Some(server),
        Err(e) => {
            tracing::error!(service = %key, error = %e, "cannot accept on the Service's listeners");
            None
        }
    };
    let targets: Vec<(PortRef, Arc<Balancer>)> = (balancers.iter())
        .map(|(n, b)| (PortRef::Name(n.clone()), b.clone()))
        .collect();
    let service = NamespacedName {
        namespace: namespace.into(),
        name: name.into(),
    };
    tokio::spawn(super::watch::follow(
        s.client.clone(),
        service,
        targets,
        stop.clone(),
    ));
    if !s.health_interval.is_zero() {
        super::spawn_health_checks(
            s.health_interval,
            plan.version,
            balancers.into_values().collect(),
            stop.clone(),
        );
    }
    Running {
        plan: plan.clone(),
        stop,
        server,
        failed,
    }
}

/// Keeps the listeners equal to the last published plans until `stop`, then closes them all.
pub async fn follow(
    settings: Settings,
    mut served: watch::Receiver<Option<Served>>,
    stop: CancellationToken,
) {
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut retry = FIRST_RETRY;
    loop {
        let failing = running.values().any(|r| r.failed > 0);
        let retrying = tokio::select! {
            _ = stop.cancelled() => break,
            r = served.changed() => if r.is_err() { break } else { false },
            _ = tokio::time::sleep(retry), if failing => true,
        };
        let want: Served = served.borrow_and_update().clone().unwrap_or_default();
        let stale: Vec<String> = (running.iter())
            .filter(|(k, r)| want.get(*k) != Some(&r.plan) || (retrying && r.failed > 0))
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(r) = running.remove(&key) {
                tracing::info!(service = %key, "closing the Service's listeners");
                r.close().await;
            }
        }
        for (key, plan) in &want {
            if !running.contains_key(key) {
                let r = start(&settings, key, plan);
                running.insert(key.clone(), r);
            }
        }
        retry = match (retrying, running.values().any(|r| r.failed > 0)) {
            (_, false) => FIRST_RETRY,
            (true, true) => (retry * 2).min(MAX_RETRY),
            (false, true) => retry,
        };
    }
    for (_, r) in running {
        r.close().await;
    }
}
