//! `edge --pools`: the edge as the load balancer of the Services of `type: LoadBalancer` whose
//! `spec.loadBalancerClass` is its `--load-balancer-class`. One watch of every Service; after
//! each change, one allocation pass over all of them ([`super::allocate`]), the status writes it
//! calls for ([`super::serve`]), a Warning Event on each Service that gets no address (once per
//! distinct message), and the listeners to open, handed on through a watch channel.
//!
//! API calls: `list`/`watch` on `services` (all namespaces), `patch` on `services/status`,
//! `create`/`patch` on `events` (events.k8s.io), through the publisher of
//! [`crate::controller::events`].

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::allocate::{allocate, LbService, Outcome};
use super::pool::Pool;
use super::serve::{self, Plan};
use super::watch::Objects;
use crate::controller::events::{Notice, Notifier};
use crate::kube_client::{Cause, Repeats};
use crate::proxy_protocol::Version;

/// The Event reporter of the edge.
pub const REPORTER: &str = "ouroboros-edge";
/// The Event reason of a Service whose PROXY-version annotation cannot be read.
pub const INVALID_ANNOTATION: &str = "InvalidAnnotation";

/// Longest wait before a failed status write is tried again.
const MAX_RETRY: Duration = Duration::from_secs(60);
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// What the loop serves.
#[derive(Clone, Debug)]
pub struct Config {
    pub class: String,
    pub pools: Vec<Pool>,
    /// The PROXY version of Services without the annotation.
    pub default_version: Version,
}

/// The listeners of every served Service, by `namespace/name`, after the last pass.
pub type Served = BTreeMap<String, Plan>;

/// One status write.
#[derive(Clone, Debug, PartialEq)]
struct Write {
    key: String,
    namespace: String,
    name: String,
    resource_version: Option<String>,
    patch: Value,
}

/// What one pass over the Services calls for.
#[derive(Debug, Default)]
struct Pass {
    writes: Vec<Write>,
    /// By Service key: the Event of a Service that gets no address, or is not served.
    problems: BTreeMap<String, Notice>,
    served: Served,
}

/// Allocates over every Service and decides the writes, the Events and the listeners.
fn pass(services: &Objects<Service>, config: &Config) -> Pass {
    let read: Vec<LbService> = services
        .values()
        .map(|s| LbService::from_service(s, &config.class))
        .collect();
    let mut out = Pass::default();
    for d in allocate(&config.pools, &read) {
        let key = format!("{}/{}", d.namespace, d.name);
        let Some(svc) = services.get(&key) else {
            continue;
        };
        let addresses = match d.outcome {
            Outcome::Assigned(addresses) => {
                match serve::plan(svc, &addresses, config.default_version) {
                    Ok(plan) => {
                        out.served.insert(key.clone(), plan);
                        addresses
                    }
                    Err(note) => {
                        let notice = Notice {
                            regarding: serve::reference(svc),
                            reason: INVALID_ANNOTATION,
                            action: "Serve",
                            note,
                        };
                        out.problems.insert(key.clone(), notice);
                        Vec::new()
                    }
                }
            }
            Outcome::Unassigned(reason) => {
                let notice = Notice {
                    regarding: serve::reference(svc),
                    reason: reason.event_reason(),
                    action: "AllocateAddress",
                    note: reason.to_string(),
                };
                out.problems.insert(key.clone(), notice);
                Vec::new()
            }
            Outcome::Released => Vec::new(),
        };
        if let Some(patch) = serve::patch(svc, &addresses) {
            out.writes.push(Write {
                key,
                namespace: d.namespace,
                name: d.name,
                resource_version: svc.metadata.resource_version.clone(),
                patch,
            });
        }
    }
    out
}

/// State kept between passes.
#[derive(Default)]
struct Memory {
    /// The note last published per Service, so each distinct message is one Event.
    reported: BTreeMap<String, String>,
    /// Writes done, or refused as invalid (422), by Service: not sent again until the Service
    /// changes (its resourceVersion) or the write does. A pass that runs before the watch has
    /// brought our own write back (another Service changed meanwhile) so sends nothing, rather
    /// than the same write again to be refused with 409.
    settled: BTreeMap<String, (Option<String>, Value)>,
    failures: Repeats,
    retry: Option<Duration>,
}

impl Memory {
    fn publish(&mut self, pass: &Pass, notifier: &Notifier) {
        for (key, notice) in &pass.problems {
            if self.reported.get(key) != Some(&notice.note) {
                tracing::warn!(service = %key, reason = notice.reason, note = %notice.note, "Service not served");
                notifier.send(notice.clone());
            }
        }
        self.reported = (pass.problems.iter())
            .map(|(k, n)| (k.clone(), n.note.clone()))
            .collect();
    }

    /// Sends the pass's writes; true when one failed in a way worth trying again.
    async fn write(&mut self, client: &Client, writes: Vec<Write>) -> bool {
        let mut retry = false;
        self.settled
            .retain(|k, _| writes.iter().any(|w| &w.key == k));
        for w in writes {
            let attempt = (w.resource_version.clone(), w.patch.clone());
            if self.settled.get(&w.key) == Some(&attempt) {
                continue;
            }
            let api: Api<Service> = Api::namespaced(client.clone(), &w.namespace);
            match api
                .patch_status(&w.name, &PatchParams::default(), &Patch::Merge(&w.patch))
                .await
            {
                Ok(_) => {
                    self.failures.reset();
                    self.settled.insert(w.key.clone(), attempt);
                    tracing::info!(service = %w.key, status = %w.patch["status"], "wrote the load-balancer status");
                }
                // Changed since it was read: the watch brings the new version, and the next
                // pass decides again from it.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::debug!(service = %w.key, "the Service changed since it was read; deciding again");
                    retry = true;
                }
                // Gone: its addresses are free at the next pass.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Api(s)) if s.code == 422 => {
                    tracing::error!(service = %w.key, patch = %w.patch, error = %s.message,
                        "the API server refused the load-balancer status as invalid; not sent \
                         again until the Service changes (please report this)");
                    self.settled.insert(w.key, attempt);
                }
                Err(e) => {
                    let cause = Cause::of(&e);
                    if let Some(failures) = self.failures.failed(cause) {
                        let hint = cause.hint("grant `patch` on services/status");
                        tracing::warn!(service = %w.key, error = %crate::kube_client::describe(&e), failures,
                            "writing the load-balancer status failed: {hint}; retrying");
                    }
                    retry = true;
                }
            }
        }
        retry
    }
}

/// Serves the Services of `config.class` until `stop`: publishes what to listen on into
/// `served` after every pass (`None` until the first list of Services has arrived). Only while
/// `leader` is true are the status written and the Events sent: every edge listens, one
/// writes. The allocation is a function of the Services (their written status first), so a
/// standby listens where the leader writes.
pub async fn run(
    client: Client,
    config: Config,
    (notifier, mut leader): (Notifier, watch::Receiver<bool>),
    served: watch::Sender<Option<Served>>,
    stop: CancellationToken,
) {
    let api: Api<Service> = Api::all(client.clone());
    let mut events = Box::pin(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut services = Objects::<Service>::default();
    let mut memory = Memory::default();
    let mut watch_failures = Repeats::default();
    let mut election = true;
    tracing::info!(class = %config.class, pools = config.pools.len(), "serving LoadBalancer Services");
    loop {
        let retry_in = memory.retry;
        let changed = tokio::select! {
            _ = stop.cancelled() => return,
            // Gaining the Lease writes what is due at once; losing it forgets what was sent.
            r = leader.changed(), if election => {
                // The election's task ended (only at shutdown): its last word stands.
                election = r.is_ok();
                memory = Memory::default();
                true
            }
            _ = async {
                match retry_in {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => true,
            ev = events.next() => match ev {
                Some(Ok(e)) => {
                    watch_failures.reset();
                    services.apply(e)
                }
                Some(Err(e)) => {
                    let cause = Cause::of_watch(&e);
                    if let Some(failures) = watch_failures.failed(cause) {
                        let hint = cause.hint("grant `list` and `watch` on services in every namespace");
                        tracing::warn!(error = %e, failures, "watching Services failed: {hint}; retrying (addresses and listeners stay as they are)");
                    }
                    false
                }
                None => return,
            },
        };
        if !changed || !services.synced() {
            continue;
        }
        let pass = pass(&services, &config);
        served.send_replace(Some(pass.served.clone()));
        if !*leader.borrow_and_update() {
            continue;
        }
        memory.publish(&pass, &notifier);
        let failed = memory.write(&client, pass.writes).await;
        memory.retry = match (failed, memory.retry) {
            (false, _) => None,
            (true, None) => Some(FIRST_RETRY),
            (true, Some(d)) => Some((d * 2).min(MAX_RETRY)),
        };
    }
}
