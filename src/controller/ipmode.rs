//! KEP-1860 awareness: a target whose ingress controller Service reports `ipMode: Proxy` on every
//! load-balancer address needs no hairpin. kube-proxy then no longer short-circuits the load
//! balancer's IP, so in-cluster clients go through the load balancer and get its PROXY header
//! like everyone else. While that holds, the target's names are left out of what is written
//! (on by default, `--skip-proxy-ipmode=false` turns it off). Each change is logged, given an
//! Event on the Service and shown by `ouroboros_controller_target_skipped{target}`.
//!
//! API calls: `list`/`watch` on `services` with the field selector `metadata.name=<name>` in
//! the Service's namespace (RBAC by resourceName), through [`proxy_watch::follow`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::Client;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::events::{self, Notifier};
use super::metrics::TargetLabel;
use super::proxy_watch::{self, Watched};
use crate::target::Target;

/// Whether every load-balancer address of the Service reports `ipMode: Proxy` (a LoadBalancer
/// Service with at least one address). Anything else, a deleted Service included, keeps the
/// hairpin: leaving names out wrongly would send clients past the proxy.
pub fn proxied(svc: Option<&Service>) -> bool {
    let Some(svc) = svc else { return false };
    if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        return false;
    }
    let ingress = load_balancer_ingress(svc);
    !ingress.is_empty()
        && ingress
            .iter()
            .all(|i| i.ip_mode.as_deref() == Some("Proxy"))
}

/// The Service's load-balancer addresses (`status.loadBalancer.ingress`), none when unset.
pub fn load_balancer_ingress(svc: &Service) -> &[LoadBalancerIngress] {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default()
}

/// The targets whose names are left out now.
#[derive(Clone, Debug, Default)]
pub struct Skipped(Arc<Mutex<BTreeSet<Target>>>);

impl Skipped {
    pub fn get(&self) -> BTreeSet<Target> {
        self.0.lock().expect("skipped lock").clone()
    }

    fn set(&self, target: Target, on: bool) {
        let mut s = self.0.lock().expect("skipped lock");
        if on {
            s.insert(target);
        } else {
            s.remove(&target);
        }
    }
}

/// What one watch reports to.
pub struct Report {
    pub skipped: Skipped,
    pub forced: watch::Sender<u64>,
    pub notifier: Notifier,
    pub gauge: Family<TargetLabel, Gauge>,
}

/// Watches target `which`'s (named `target`) ingress controller Service until `stop`: leaves the
/// target's names out while [`proxied`] holds, and makes the engine write again at each change.
pub async fn watch(
    client: Client,
    (namespace, name): (String, String),
    (which, target): (Target, String),
    report: Report,
    stop: CancellationToken,
) {
    let service = format!("{namespace}/{name}");
    let gauge = report
        .gauge
        .get_or_create(&TargetLabel {
            target: target.clone(),
        })
        .clone();
    gauge.set(0);
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(namespace.clone()),
        name: Some(name.clone()),
        ..Default::default()
    };
    let watched = Watched {
        client,
        namespace,
        name,
        what: "the ingress controller Service",
        alternative: "or pass --skip-proxy-ipmode=false",
    };
    let changed = |before: Option<&bool>, now: &bool| {
        // Nothing to say about a first view that keeps the hairpin.
        if before.is_none() && !now {
            return;
        }
        report.skipped.set(which, *now);
        gauge.set(i64::from(*now));
        let (reason, note) = if *now {
            tracing::info!(
                %target,
                service = %service,
                "every load-balancer address of the ingress controller reports ipMode Proxy: \
                 in-cluster clients reach the load balancer, so this target's names are left out"
            );
            let note = format!(
                "every load-balancer address reports ipMode: Proxy (KEP-1860), so in-cluster \
                 clients of target {target} go through the load balancer and ouroboros leaves \
                 its names out (--skip-proxy-ipmode=false keeps them)"
            );
            (events::HAIRPIN_SKIPPED, note)
        } else {
            tracing::info!(
                %target,
                service = %service,
                "the ingress controller's load balancer no longer reports ipMode Proxy on every \
                 address: this target's names are hairpinned again"
            );
            let note = format!(
                "not every load-balancer address reports ipMode: Proxy any more: ouroboros \
                 hairpins the names of target {target} again"
            );
            (events::HAIRPIN_RESTORED, note)
        };
        report.notifier.send(events::Notice {
            regarding: regarding.clone(),
            reason,
            action: "Hairpin",
            note,
        });
        report.forced.send_modify(|n| *n = n.wrapping_add(1));
    };
    proxy_watch::follow(watched, proxied, changed, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proxied_only_when_every_address_says_proxy() {
        let svc = |ty: &str, ingress: serde_json::Value| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": "traefik", "namespace": "traefik"},
                "spec": {"type": ty},
                "status": {"loadBalancer": {"ingress": ingress}}
            }))
            .unwrap()
        };
        let proxy = json!({"ip": "203.0.113.7", "ipMode": "Proxy"});
        let vip = json!({"ip": "203.0.113.8", "ipMode": "VIP"});
        let unset = json!({"ip": "203.0.113.9"});
        for (s, want) in [
            (svc("LoadBalancer", json!([proxy])), true),
            (svc("LoadBalancer", json!([proxy, proxy])), true),
            (svc("LoadBalancer", json!([proxy, vip])), false),
            (svc("LoadBalancer", json!([unset])), false),
            (svc("LoadBalancer", json!([])), false),
            (svc("NodePort", json!([proxy])), false),
        ] {
            assert_eq!(proxied(Some(&s)), want, "{s:?}");
        }
        assert!(!proxied(None), "a deleted Service keeps the hairpin");
    }
}
