//! coredns and coredns-import modes with template answers: watching the proxy Service, so the
//! block follows its ClusterIPs within seconds when the Service is recreated (a reinstall
//! allocates new ones) or becomes dual-stack, instead of at the next resync. The sink reads the
//! addresses itself at each write; this only makes the engine write again, whatever its change
//! detection says.
//!
//! API call: `list`/`watch` on `services` with the field selector `metadata.name=<name>`, which
//! RBAC authorises by resourceName.

use std::net::IpAddr;
use std::pin::pin;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::dns::write::proxy_ips::cluster_ips;
use crate::kube_client::{Cause, Repeats};

/// What a Service event means for the block: its addresses (`None`: gone or without a
/// ClusterIP).
fn addresses(svc: Option<&Service>) -> Option<Vec<IpAddr>> {
    svc.and_then(|s| cluster_ips(s).ok())
}

/// Watches Service `namespace/name` until `stop`; bumps `forced` each time its addresses differ
/// from the ones seen before (not for the first event: the first sync reads them anyway).
pub async fn watch(
    client: Client,
    namespace: String,
    name: String,
    forced: watch::Sender<u64>,
    stop: CancellationToken,
) {
    let service = format!("{namespace}/{name}");
    let watched = Watched {
        client,
        namespace,
        name,
        what: "the proxy Service",
        alternative: "or pass --proxy-ip",
    };
    follow(
        watched,
        addresses,
        |before, now| {
            if let Some(before) = before {
                tracing::info!(
                    service = %service,
                    before = ?before,
                    now = ?now,
                    "the proxy Service's ClusterIPs changed; rewriting the DNS block"
                );
                forced.send_modify(|n| *n = n.wrapping_add(1));
            }
        },
        stop,
    )
    .await;
}

/// A Service to watch: which, what it is (for logs) and the flag that makes the watch
/// unnecessary (for the RBAC hint).
pub struct Watched {
    pub client: Client,
    pub namespace: String,
    pub name: String,
    pub what: &'static str,
    pub alternative: &'static str,
}

/// Watches the Service until `stop`, and calls `changed(before, now)` with `view` of it (`None`:
/// deleted) each time that view differs from the last one (`before` is `None` for the first).
/// The one Service watch of the controller: the proxy Services' addresses and the ingress
/// controllers' load-balancer `ipMode`s.
pub async fn follow<T: PartialEq>(
    watched: Watched,
    view: fn(Option<&Service>) -> T,
    mut changed: impl FnMut(Option<&T>, &T),
    stop: CancellationToken,
) {
    let Watched {
        client,
        namespace,
        name,
        what,
        alternative,
    } = watched;
    let api: Api<Service> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = pin!(watcher::watcher(api, config).default_backoff());
    let mut seen: Option<T> = None;
    let mut failures = Repeats::default();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.next() => e,
        };
        let now = match event {
            None => return,
            Some(Ok(Event::Apply(svc) | Event::InitApply(svc))) => view(Some(&svc)),
            Some(Ok(Event::Delete(_))) => view(None),
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                // The watcher retries with capped backoff; a repeating failure is logged once
                // per doubling.
                let cause = Cause::of_watch(&e);
                let service = format!("{namespace}/{name}");
                if cause == Cause::Expired {
                    // Routine: the watcher lists again.
                    tracing::info!(%service, error = %e, "cannot resume watching {what}: {}", cause.hint(""));
                } else if let Some(failures) = failures.failed(cause) {
                    let grant = format!(
                        "grant the controller's ServiceAccount `list` and `watch` on services \
                         (resourceNames: [{name}]) in {namespace}, {alternative}"
                    );
                    // Seen before: the rights were there (a 403 now is likely a starting server's).
                    let hint = if seen.is_some() {
                        cause.hint_after_success(&grant)
                    } else {
                        cause.hint(&grant)
                    };
                    tracing::warn!(
                        %service,
                        error = %e,
                        failures,
                        "watching {what} failed: {hint}; retrying with backoff"
                    );
                }
                continue;
            }
        };
        failures.reset();
        if seen.as_ref() != Some(&now) {
            changed(seen.as_ref(), &now);
            seen = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    #[test]
    fn addresses_of_events() {
        let svc = |ips: &[&str]| Service {
            spec: Some(ServiceSpec {
                cluster_ips: Some(ips.iter().map(|s| s.to_string()).collect()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            addresses(Some(&svc(&["10.0.0.1"]))),
            Some(vec![ip("10.0.0.1")])
        );
        assert_eq!(
            addresses(Some(&svc(&["fd00::1", "10.0.0.1"]))),
            Some(vec![ip("10.0.0.1"), ip("fd00::1")])
        );
        assert_eq!(addresses(Some(&svc(&["None"]))), None);
        assert_eq!(addresses(None), None);
    }
}
