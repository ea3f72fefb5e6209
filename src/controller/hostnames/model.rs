//! The data [`desired`](super::desired) takes and returns: the source objects ([`Sources`](super::kinds::Sources)),
//! the filters ([`Filters`]), and the result ([`Desired`]) with the records that name an object
//! ([`ObjectRef`]), a rejected name ([`Rejected`]) or a skipped object ([`Excluded`]). Separate:
//! the controller, `render` and `doctor` all read these, none needs the computation's insides.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::kinds::{Kind, OptIns};
use super::namespace;
use crate::dns::write::plan::Plan;
use crate::hostname::{Hostname, Rejection};
use crate::target::{Target, TargetRule};

/// The kind's name; `name.group` when a kind before it in the table has the same name (Istio's
/// Gateway after the Gateway API's), so warnings and `doctor` say which.
impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = Kind::ALL
            .iter()
            .take_while(|k| *k != self)
            .any(|k| k.as_str() == self.as_str());
        if shared {
            write!(f, "{}.{}", self.as_str(), self.group())
        } else {
            f.write_str(self.as_str())
        }
    }
}

/// Names one source object in warnings, Events and `doctor` output.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, meta: &ObjectMeta) -> Self {
        Self {
            kind,
            namespace: namespace(meta).to_string(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A raw name that failed the policy. The caller logs it escaped (`{:?}`): it is tenant input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub object: ObjectRef,
    pub raw: String,
    pub reason: Rejection,
}

/// Why a whole object contributed nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exclusion {
    /// `metadata.deletionTimestamp` is set.
    Deleting,
    /// The Ingress's class (None: unknown) is not the `--ingress-class` filter.
    IngressClass(Option<String>),
    /// The Gateway's class is not the `--gateway-class` filter.
    GatewayClass(String),
    /// Under `--gateway-class`, the route has no parentRef to a surviving Gateway.
    NotAttached,
    /// The object carries `ouroboros.io/hairpin: "false"` (for a route: or every Gateway it
    /// names does).
    OptedOut,
    /// Its namespace is not in `--include-namespace` or is in `--exclude-namespace`.
    Namespace,
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::Deleting => f.write_str("being deleted"),
            Exclusion::IngressClass(Some(c)) => write!(f, "ingress class {c:?} is filtered out"),
            Exclusion::IngressClass(None) => f.write_str(
                "no ingress class (and no single default IngressClass) under the filter",
            ),
            Exclusion::GatewayClass(c) => write!(f, "gateway class {c:?} is filtered out"),
            Exclusion::NotAttached => {
                f.write_str("no parentRef to a Gateway of the filtered gateway class")
            }
            Exclusion::OptedOut => write!(f, "opted out with {OPT_OUT_ANNOTATION}: \"false\""),
            Exclusion::Namespace => {
                f.write_str("namespace left out by --include-namespace/--exclude-namespace")
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excluded {
    pub object: ObjectRef,
    pub why: Exclusion,
}

/// The annotation that leaves an Ingress, Gateway or route out when `"false"`.
pub const OPT_OUT_ANNOTATION: &str = "ouroboros.io/hairpin";

/// Which objects count. `None` filters mean all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    /// The opt-in source kinds read (`--gateway-api`, `--traefik-ingressroutes`,
    /// `--contour-httpproxies`, `--istio-gateways`).
    pub opt_ins: OptIns,
    pub ingress_class: Option<String>,
    /// The default target's IngressClass `spec.controller` values (`--ingress-class-controller`).
    pub ingress_class_controllers: BTreeSet<String>,
    pub gateway_class: Option<String>,
    /// Only objects in these namespaces (empty: every namespace).
    pub include_namespaces: BTreeSet<String>,
    /// Never objects in these namespaces (wins over `include_namespaces`).
    pub exclude_namespaces: BTreeSet<String>,
    pub ingress_hosts: IngressHosts,
    /// Named targets (`--target`), in flag order; what none takes goes to the default target.
    pub targets: Vec<TargetRule>,
}

impl Filters {
    /// The opt-in sources read.
    /// Whether an Ingress's class matters: under --ingress-class or --ingress-class-controller,
    /// or a --target mapping by class or controller (the default-class rule and
    /// `spec.controller` then need the IngressClasses).
    pub fn reads_ingress_classes(&self) -> bool {
        self.ingress_class.is_some()
            || !self.ingress_class_controllers.is_empty()
            || self
                .targets
                .iter()
                .any(|t| !t.ingress_classes.is_empty() || !t.ingress_class_controllers.is_empty())
    }
}

/// Which Ingress fields name the hosts to hairpin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum IngressHosts {
    /// `spec.tls[].hosts`: the names served over TLS, whose clients the PROXY protocol is for.
    #[default]
    Tls,
    /// Also `spec.rules[].host`: plain-HTTP names too (cert-manager's HTTP-01 self-check
    /// requests its challenge over port 80 before the certificate exists).
    All,
}

/// The result: the validated host set, where each name came from, and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub hosts: BTreeSet<Hostname>,
    /// The objects that contributed each host (for `doctor` and debug logs).
    pub origins: BTreeMap<Hostname, BTreeSet<ObjectRef>>,
    /// Names that failed the policy, in input order.
    pub rejected: Vec<Rejected>,
    /// Objects skipped whole by a filter or because they are being deleted, in input order.
    pub excluded: Vec<Excluded>,
    /// The hosts that go to a named target (every other host goes to the default one): empty
    /// without `--target`, so a single-target set costs nothing more.
    pub placed: BTreeMap<Hostname, Target>,
    /// Objects that lost a hostname to an object of another target, by host.
    pub conflicts: Vec<Conflict>,
    /// Without a class filter or a target by class ([`Filters::reads_ingress_classes`]): the
    /// classes of the Ingresses that named hosts, when there are several ([`NO_CLASS`] for
    /// an Ingress without one). They all go to the default target's one ingress controller,
    /// which may not serve them all: `render`, the controller and `doctor` say so.
    pub unfiltered_classes: Vec<String>,
}

/// How [`Desired::unfiltered_classes`] names an Ingress without a class.
pub const NO_CLASS: &str = "(none)";

/// What `render`, the controller and `doctor` say of [`Desired::unfiltered_classes`], in the
/// same words.
pub fn unfiltered_classes_message(classes: &[String]) -> String {
    format!(
        "Ingresses of {} classes ({}) all go to the default proxy: if another ingress \
         controller serves some of them, set --ingress-class, --ingress-class-controller or a \
         --target per class (chart: controller.ingressClass, controller.ingressClassControllers, \
         proxies[])",
        classes.len(),
        classes.join(", ")
    )
}

/// A hostname claimed by objects of two targets: `winner`'s target answers for it; `loser`
/// contributes nothing for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub host: Hostname,
    pub winner: ObjectRef,
    pub winner_target: Target,
    pub loser: ObjectRef,
    pub loser_target: Target,
}

impl Desired {
    /// Leaves out the hosts of these targets: their load balancers reach in-cluster clients
    /// themselves.
    pub fn skip_targets(&mut self, skipped: &BTreeSet<Target>) {
        if skipped.is_empty() {
            return;
        }
        let placed = &self.placed;
        let keep = |h: &Hostname| {
            let target = placed.get(h).copied().unwrap_or(Target::Default);
            !skipped.contains(&target)
        };
        self.hosts.retain(|h| keep(h));
        self.origins.retain(|h, _| keep(h));
        self.placed.retain(|_, t| !skipped.contains(t));
    }

    /// What a sink writes: the hosts, each named target's with its target.
    pub fn into_plan(self) -> Plan {
        Plan {
            hosts: self.hosts,
            placed: self.placed,
        }
    }

    /// Where `host` goes.
    pub fn target_of(&self, host: &Hostname) -> Target {
        self.placed.get(host).copied().unwrap_or(Target::Default)
    }

    /// The hosts per target, the default target's included when it has any.
    pub fn by_target(&self) -> BTreeMap<Target, BTreeSet<Hostname>> {
        let mut out: BTreeMap<Target, BTreeSet<Hostname>> = BTreeMap::new();
        for h in &self.hosts {
            out.entry(self.target_of(h)).or_default().insert(h.clone());
        }
        out
    }
}
