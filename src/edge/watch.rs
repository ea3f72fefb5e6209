//! Following a Service's EndpointSlices (and, for numeric ports, the Service itself) with
//! kube-runtime watchers, feeding [`super::backends`] and the balancers.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::backends::{self, PortRef};
use super::balance::Balancer;
use crate::flags::NamespacedName;
use crate::kube_client::{Cause, Repeats};

/// The label the EndpointSlice controller puts on a Service's slices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Objects of one watch by namespace/name, following the watcher's relist protocol: objects seen
/// between `Init` and `InitDone` replace the whole set at `InitDone`.
#[derive(Debug)]
pub struct Objects<K> {
    current: BTreeMap<String, K>,
    pending: Option<BTreeMap<String, K>>,
    synced: bool,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Objects {
            current: BTreeMap::new(),
            pending: None,
            synced: false,
        }
    }
}

/// An object's key in [`Objects`]: `namespace/name`, or the name of a cluster-scoped one.
pub fn key<K: kube::Resource>(o: &K) -> String {
    match o.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

impl<K: kube::Resource> Objects<K> {
    /// Applies one event; true when the current set may have changed.
    pub fn apply(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Init => {
                self.pending = Some(BTreeMap::new());
                false
            }
            Event::InitApply(o) => {
                self.pending
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&o), o);
                false
            }
            Event::InitDone => {
                self.current = self.pending.take().unwrap_or_default();
                self.synced = true;
                true
            }
            Event::Apply(o) => {
                self.current.insert(key(&o), o);
                true
            }
            Event::Delete(o) => {
                self.current.remove(&key(&o));
                true
            }
        }
    }

    /// The first full list has arrived.
    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn values(&self) -> impl Iterator<Item = &K> {
        self.current.values()
    }

    /// The object of key `namespace/name`.
    pub fn get(&self, key: &str) -> Option<&K> {
        self.current.get(key)
    }
}

/// The backend set of one listener from the watched state; `Err` says why it is empty.
pub fn desired(
    slices: &Objects<EndpointSlice>,
    service: Option<&Objects<Service>>,
    port: &PortRef,
) -> Result<Vec<std::net::SocketAddr>, String> {
    let ports: Option<Vec<ServicePort>> = service.and_then(|s| {
        s.synced().then(|| {
            s.values()
                .next()
                .and_then(|svc| svc.spec.as_ref()?.ports.clone())
                .unwrap_or_default()
        })
    });
    let name = backends::port_name(port, ports.as_deref())?;
    let list: Vec<EndpointSlice> = slices.values().cloned().collect();
    Ok(backends::backends(&list, &name))
}

type Events<K> = Pin<Box<dyn Stream<Item = Result<Event<K>, watcher::Error>> + Send>>;

/// Watches until `stop`, updating every balancer whenever its backend set changes. Watch
/// errors are logged and retried with kube-runtime's default backoff; the last known set
/// stays in force meanwhile.
pub async fn follow(
    client: Client,
    svc: NamespacedName,
    targets: Vec<(PortRef, Arc<Balancer>)>,
    stop: CancellationToken,
) {
    let slices_api: Api<EndpointSlice> = Api::namespaced(client.clone(), &svc.namespace);
    let selector = format!("{SERVICE_NAME_LABEL}={}", svc.name);
    let mut slice_events: Events<EndpointSlice> = Box::pin(
        watcher::watcher(slices_api, watcher::Config::default().labels(&selector))
            .default_backoff(),
    );
    let need_service = targets.iter().any(|(p, _)| matches!(p, PortRef::Number(_)));
    let mut service_events: Option<Events<Service>> = need_service.then(|| {
        let api: Api<Service> = Api::namespaced(client.clone(), &svc.namespace);
        let fields = format!("metadata.name={}", svc.name);
        Box::pin(
            watcher::watcher(api, watcher::Config::default().fields(&fields)).default_backoff(),
        ) as Events<Service>
    });
    let mut slices = Objects::<EndpointSlice>::default();
    let mut service = need_service.then(Objects::<Service>::default);
    let mut last_error: Vec<Option<String>> = vec![None; targets.len()];
    // Failures repeating every retry are logged once per doubling.
    let (mut slice_failures, mut service_failures) = (Repeats::default(), Repeats::default());
    tracing::info!(namespace = %svc.namespace, service = %svc.name, label_selector = %selector, "watching EndpointSlices");
    loop {
        let next_service = async {
            match service_events.as_mut() {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        let changed = tokio::select! {
            _ = stop.cancelled() => return,
            ev = slice_events.next() => match ev {
                Some(Ok(e)) => {
                    slice_failures.reset();
                    slices.apply(e)
                }
                Some(Err(e)) => {
                    let cause = Cause::of_watch(&e);
                    if let Some(failures) = slice_failures.failed(cause) {
                        let hint = cause.hint("grant `list` and `watch` on endpointslices.discovery.k8s.io");
                        tracing::warn!(namespace = %svc.namespace, service = %svc.name, error = %e, failures, "watching EndpointSlices failed: {hint}; retrying (the last known backends stay in use)");
                    }
                    false
                }
                None => return,
            },
            ev = next_service => match ev {
                Some(Ok(e)) => {
                    service_failures.reset();
                    service.as_mut().is_some_and(|s| s.apply(e))
                }
                Some(Err(e)) => {
                    let cause = Cause::of_watch(&e);
                    if let Some(failures) = service_failures.failed(cause) {
                        let hint = cause.hint("grant `list` and `watch` on services");
                        tracing::warn!(namespace = %svc.namespace, service = %svc.name, error = %e, failures, "watching the Service failed: {hint}; retrying");
                    }
                    false
                }
                None => return,
            },
        };
        if !changed || !slices.synced() {
            continue;
        }
        for (i, (port, balancer)) in targets.iter().enumerate() {
            match desired(&slices, service.as_ref(), port) {
                Ok(set) => {
                    last_error[i] = None;
                    balancer.set_backends(&set);
                }
                Err(e) => {
                    if service.as_ref().is_some_and(|s| !s.synced()) {
                        continue; // the Service list has not arrived yet
                    }
                    if last_error[i].as_ref() != Some(&e) {
                        tracing::warn!(listener = balancer.listener(), namespace = %svc.namespace, service = %svc.name, error = %e, "cannot resolve the listener's Service port; no backends");
                        last_error[i] = Some(e);
                    }
                    balancer.set_backends(&[]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(name: &str, ip: &str, port: i32) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec![ip.into()],
                ..Default::default()
            }],
            ports: Some(vec![EndpointPort {
                name: Some("websecure".into()),
                port: Some(port),
                ..Default::default()
            }]),
        }
    }

    fn set(v: &[&str]) -> Vec<std::net::SocketAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn relist_replaces_and_events_update() {
        let mut s = Objects::<EndpointSlice>::default();
        let web = PortRef::Name("websecure".into());
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(slice("a", "10.0.0.1", 8443))));
        assert!(!s.synced());
        assert!(s.apply(Event::InitDone));
        assert_eq!(desired(&s, None, &web), Ok(set(&["10.0.0.1:8443"])));
        assert!(s.apply(Event::Apply(slice("b", "10.0.0.2", 8443))));
        assert!(s.apply(Event::Apply(slice("a", "10.0.0.3", 8443))));
        assert_eq!(
            desired(&s, None, &web),
            Ok(set(&["10.0.0.2:8443", "10.0.0.3:8443"]))
        );
        assert!(s.apply(Event::Delete(slice("b", "", 0))));
        assert_eq!(desired(&s, None, &web), Ok(set(&["10.0.0.3:8443"])));
        // A relist (after a watch error) drops what it no longer lists, at InitDone only.
        s.apply(Event::Init);
        s.apply(Event::InitApply(slice("c", "10.0.0.4", 9443)));
        assert_eq!(desired(&s, None, &web), Ok(set(&["10.0.0.3:8443"])));
        s.apply(Event::InitDone);
        assert_eq!(desired(&s, None, &web), Ok(set(&["10.0.0.4:9443"])));
    }

    #[test]
    fn numeric_ports_go_through_the_service() {
        let mut slices = Objects::<EndpointSlice>::default();
        slices.apply(Event::InitDone);
        slices.apply(Event::Apply(slice("a", "10.0.0.1", 8443)));
        let mut svc = Objects::<Service>::default();
        let n443 = PortRef::Number(443);
        assert!(desired(&slices, Some(&svc), &n443).is_err_and(|e| e.contains("not known yet")));
        svc.apply(Event::Init);
        svc.apply(Event::InitApply(Service {
            metadata: ObjectMeta {
                name: Some("traefik".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    name: Some("websecure".into()),
                    port: 443,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }));
        svc.apply(Event::InitDone);
        assert_eq!(
            desired(&slices, Some(&svc), &n443),
            Ok(set(&["10.0.0.1:8443"]))
        );
        assert!(desired(&slices, Some(&svc), &PortRef::Number(80))
            .is_err_and(|e| e.contains("no TCP port 80")));
        // The Service deleted: listed, but no ports.
        svc.apply(Event::Delete(Service {
            metadata: ObjectMeta {
                name: Some("traefik".into()),
                ..Default::default()
            },
            ..Default::default()
        }));
        assert!(desired(&slices, Some(&svc), &n443).is_err_and(|e| e.contains("it has: none")));
    }
}
