//! Relay metrics. Registered under a prefix chosen by the subcommand (`ouroboros_proxy_`, ...),
//! labelled by listener; per-listener handles are resolved once so the hot path only touches
//! atomics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use super::copy::Counters;
use super::upstream::Cause;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub listener: String,
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub listener: String,
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub listener: String,
    pub result: String,
}

/// The metric families, shared by every listener of one subcommand.
#[derive(Clone)]
pub struct RelayMetrics {
    accepted: Family<ListenerLabel, Counter>,
    active: Family<ListenerLabel, Gauge>,
    failed: Family<CauseLabels, Counter>,
    closed: Family<ResultLabels, Counter>,
    bytes: Family<DirectionLabels, Counter>,
    spliced: Family<DirectionLabels, Counter>,
    #[cfg(feature = "kernel-relay")]
    kernel: Family<ListenerLabel, Counter>,
    #[cfg(feature = "kernel-relay")]
    kernel_held: Family<ListenerLabel, Counter>,
    accept_errors: Family<ListenerLabel, Counter>,
    dial_seconds: Family<ListenerLabel, Histogram>,
    duration_seconds: Family<ListenerLabel, Histogram>,
}

/// Closing results, the values of the `result` label.
pub const RESULTS: [&str; 3] = ["done", "idle-timeout", "error"];

impl RelayMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = RelayMetrics {
            accepted: Family::default(),
            active: Family::default(),
            failed: Family::default(),
            closed: Family::default(),
            bytes: Family::default(),
            spliced: Family::default(),
            #[cfg(feature = "kernel-relay")]
            kernel: Family::default(),
            #[cfg(feature = "kernel-relay")]
            kernel_held: Family::default(),
            accept_errors: Family::default(),
            // 0.5 ms .. ~16 s
            dial_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            // 1 ms .. ~4.5 h
            duration_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 13))
            }),
        };
        registry.register(
            "connections_accepted",
            "Client connections accepted",
            m.accepted.clone(),
        );
        registry.register(
            "connections_active",
            "Client connections currently open",
            m.active.clone(),
        );
        registry.register(
            "connections_failed",
            "Client connections closed because the upstream could not be reached, by cause",
            m.failed.clone(),
        );
        registry.register(
            "connections_closed",
            "Relayed connections closed, by result (done, idle-timeout, error)",
            m.closed.clone(),
        );
        registry.register_with_unit(
            "transferred",
            "Bytes relayed, by direction (to_upstream, to_client)",
            Unit::Bytes,
            m.bytes.clone(),
        );
        registry.register_with_unit(
            "spliced",
            "The part of transferred_bytes_total moved with splice(2), never copied through the \
             process (--copy-mode auto while a direction streams, or splice)",
            Unit::Bytes,
            m.spliced.clone(),
        );
        // The kernel relay's own series exist only in a build that has it.
        #[cfg(feature = "kernel-relay")]
        {
            registry.register(
                "kernel_relayed_connections",
                "Connections whose bytes the kernel moved (--copy-mode sockmap); their bytes join \
                 transferred_bytes_total when they close. Others in that mode were copied in the \
                 process: a side had already closed at the handover, or the socket map was full",
                m.kernel.clone(),
            );
            registry.register(
                "kernel_held_directions",
                "Directions of kernel-relayed connections handed back to the process because their \
                 reader lagged more than 8 MiB behind (the kernel has no flow control of its own)",
                m.kernel_held.clone(),
            );
        }
        registry.register(
            "accept_errors",
            "accept(2) failures (e.g. EMFILE); the listener backs off and retries",
            m.accept_errors.clone(),
        );
        registry.register_with_unit(
            "dial_duration",
            "Time to resolve and connect to the upstream (successful dials)",
            Unit::Seconds,
            m.dial_seconds.clone(),
        );
        registry.register_with_unit(
            "connection_duration",
            "Lifetime of relayed connections",
            Unit::Seconds,
            m.duration_seconds.clone(),
        );
        m
    }

    /// Handles for one listener; also makes its series appear (at zero) before traffic.
    pub fn listener(&self, name: &str) -> ListenerMetrics {
        let l = ListenerLabel {
            listener: name.to_string(),
        };
        let dir = |d: &str| DirectionLabels {
            listener: name.to_string(),
            direction: d.to_string(),
        };
        for cause in Cause::ALL {
            let _ = self.failed.get_or_create(&CauseLabels {
                listener: name.to_string(),
                cause: cause.as_str().to_string(),
            });
        }
        let closed = RESULTS.map(|r| {
            let labels = ResultLabels {
                listener: name.to_string(),
                result: r.to_string(),
            };
            self.closed.get_or_create(&labels).clone()
        });
        // One statement per handle: a family's read guard must be gone before the next
        // get_or_create on the same family may need its write lock.
        let accepted = self.accepted.get_or_create(&l).clone();
        let active = self.active.get_or_create(&l).clone();
        let to_upstream = self.bytes.get_or_create(&dir("to_upstream")).clone();
        let to_client = self.bytes.get_or_create(&dir("to_client")).clone();
        let spliced_to_upstream = self.spliced.get_or_create(&dir("to_upstream")).clone();
        let spliced_to_client = self.spliced.get_or_create(&dir("to_client")).clone();
        let bytes = Counters {
            to_upstream,
            to_client,
            spliced_to_upstream,
            spliced_to_client,
            #[cfg(feature = "kernel-relay")]
            kernel: self.kernel.get_or_create(&l).clone(),
            #[cfg(feature = "kernel-relay")]
            kernel_held: self.kernel_held.get_or_create(&l).clone(),
        };
        let accept_errors = self.accept_errors.get_or_create(&l).clone();
        let dial_seconds = self.dial_seconds.get_or_create(&l).clone();
        let duration_seconds = self.duration_seconds.get_or_create(&l).clone();
        ListenerMetrics {
            name: name.to_string(),
            accepted,
            active,
            bytes,
            accept_errors,
            dial_seconds,
            duration_seconds,
            closed,
            failed: self.failed.clone(),
        }
    }
}

/// One listener's metric handles.
#[derive(Clone)]
pub struct ListenerMetrics {
    pub name: String,
    pub accepted: Counter,
    pub active: Gauge,
    /// Bytes relayed each way, and the spliced part of them.
    pub bytes: Counters,
    pub accept_errors: Counter,
    pub dial_seconds: Histogram,
    pub duration_seconds: Histogram,
    /// Indexed like [`RESULTS`].
    pub closed: [Counter; 3],
    failed: Family<CauseLabels, Counter>,
}

impl ListenerMetrics {
    pub fn failed(&self, cause: Cause) {
        self.failed
            .get_or_create(&CauseLabels {
                listener: self.name.clone(),
                cause: cause.as_str().to_string(),
            })
            .inc();
    }
}
