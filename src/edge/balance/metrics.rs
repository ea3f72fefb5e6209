//! The per-backend metric families (connections, active, failures by cause, bytes, ejections,
//! set size) and each backend's handles into them. Separate: label plumbing, no balancing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::relay::upstream::Cause;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    listener: String,
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendCauseLabels {
    listener: String,
    backend: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendDirectionLabels {
    listener: String,
    backend: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ListenerLabels {
    pub(super) listener: String,
}

/// Per-backend metric families. A backend's series disappear when it leaves the set.
#[derive(Clone, Default)]
pub struct BackendMetrics {
    connections: Family<BackendLabels, Counter>,
    active: Family<BackendLabels, Gauge>,
    failures: Family<BackendCauseLabels, Counter>,
    bytes: Family<BackendDirectionLabels, Counter>,
    ejections: Family<BackendLabels, Counter>,
    pub(super) backends: Family<ListenerLabels, Gauge>,
}

impl BackendMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = BackendMetrics::default();
        registry.register(
            "backend_connections",
            "Connections relayed to a backend (successful dials)",
            m.connections.clone(),
        );
        registry.register(
            "backend_connections_active",
            "Connections currently open to a backend",
            m.active.clone(),
        );
        registry.register(
            "backend_failures",
            "Failed dials of a backend, by cause; the client was retried on another backend",
            m.failures.clone(),
        );
        registry.register_with_unit(
            "backend_transferred",
            "Bytes relayed through a backend, by direction, counted when a connection closes",
            Unit::Bytes,
            m.bytes.clone(),
        );
        registry.register(
            "backend_ejections",
            "Times a backend was ejected after a failed dial or health check",
            m.ejections.clone(),
        );
        registry.register(
            "backends",
            "Backends in the listener's current set",
            m.backends.clone(),
        );
        m
    }

    fn labels(listener: &str, backend: &str) -> BackendLabels {
        BackendLabels {
            listener: listener.to_string(),
            backend: backend.to_string(),
        }
    }

    fn direction(listener: &str, backend: &str, d: &str) -> BackendDirectionLabels {
        BackendDirectionLabels {
            listener: listener.to_string(),
            backend: backend.to_string(),
            direction: d.to_string(),
        }
    }

    pub(super) fn handles(&self, listener: &str, backend: &str) -> Handles {
        let l = Self::labels(listener, backend);
        let connections = self.connections.get_or_create(&l).clone();
        let active = self.active.get_or_create(&l).clone();
        let ejections = self.ejections.get_or_create(&l).clone();
        let to_upstream = self
            .bytes
            .get_or_create(&Self::direction(listener, backend, "to_upstream"))
            .clone();
        let to_client = self
            .bytes
            .get_or_create(&Self::direction(listener, backend, "to_client"))
            .clone();
        Handles {
            connections,
            active,
            ejections,
            to_upstream,
            to_client,
        }
    }

    pub(super) fn failed(&self, listener: &str, backend: &str, cause: Cause) {
        self.failures
            .get_or_create(&BackendCauseLabels {
                listener: listener.to_string(),
                backend: backend.to_string(),
                cause: cause.as_str().to_string(),
            })
            .inc();
    }

    pub(super) fn forget(&self, listener: &str, backend: &str) {
        let l = Self::labels(listener, backend);
        self.connections.remove(&l);
        self.active.remove(&l);
        self.ejections.remove(&l);
        for d in ["to_upstream", "to_client"] {
            self.bytes.remove(&Self::direction(listener, backend, d));
        }
        for cause in Cause::ALL {
            self.failures.remove(&BackendCauseLabels {
                listener: listener.to_string(),
                backend: backend.to_string(),
                cause: cause.as_str().to_string(),
            });
        }
    }
}

#[derive(Debug)]
pub(super) struct Handles {
    pub(super) connections: Counter,
    pub(super) active: Gauge,
    pub(super) ejections: Counter,
    pub(super) to_upstream: Counter,
    pub(super) to_client: Counter,
}
