//! Which hostnames to hairpin: the desired host set computed from Ingress and Gateway-API objects,
//! with the class filters and the hostname policy applied. Pure: the live controller feeds it
//! from its watch caches, `render` from manifest files.
//!
//! [`desired`] is here, with the Gateway attachment rule and the metadata helpers it shares:
//!
//! | module | owns |
//! | --- | --- |
//! | `kinds` | the source kinds listed once ([`Kind`]: group, resource, when read) and the owned [`Objects`] |
//! | `model` | what goes in and out: [`Sources`], [`Filters`], [`Desired`] and its records |
//! | `collect` | the builder that gathers accepted names and sorts them once |
//! | `class` | which IngressClass an Ingress belongs to (its own, the annotation, the default) |
//! | `args` | the flags ([`HostnameArgs`]) that become the filters and the hostname policy |

mod args;
mod class;
mod collect;
mod kinds;
mod model;

pub use args::HostnameArgs;
pub use class::{
    default_ingress_class, ingress_class, DEFAULT_CLASS_ANNOTATION, INGRESS_CLASS_ANNOTATION,
};
pub(crate) use kinds::by_kind;
pub use kinds::{Kind, Objects, ReadWhen, SourceObject};
pub use model::{
    Desired, Excluded, Exclusion, Filters, IngressHosts, ObjectRef, Rejected, Sources,
    OPT_OUT_ANNOTATION,
};

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hostname::HostPolicy;
use collect::Collector;

/// API group of Gateway-API objects; a `parentRef` without a group means this one.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// Namespace of a manifest without `metadata.namespace`, as `kubectl apply` without a context
/// namespace would place it.
pub const DEFAULT_NAMESPACE: &str = "default";

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
}

fn deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// `ouroboros.io/hairpin: "false"` (any case, surrounding blanks ignored).
fn opted_out(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(OPT_OUT_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
}

/// Why an object is skipped before its class or attachment is looked at: being deleted, its
/// namespace, its opt-out annotation.
fn skipped(meta: &ObjectMeta, filters: &Filters) -> Option<Exclusion> {
    let ns = namespace(meta);
    if deleting(meta) {
        Some(Exclusion::Deleting)
    } else if filters.exclude_namespaces.contains(ns)
        || (!filters.include_namespaces.is_empty() && !filters.include_namespaces.contains(ns))
    {
        Some(Exclusion::Namespace)
    } else if opted_out(meta) {
        Some(Exclusion::OptedOut)
    } else {
        None
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Whether a route `parentRef` names the Gateway `(namespace, name)` in `gateways`.
fn attached(
    group: Option<&str>,
    kind: Option<&str>,
    ref_namespace: Option<&str>,
    name: &str,
    route_namespace: &str,
    gateways: &BTreeSet<(&str, &str)>,
) -> bool {
    group.unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && kind.unwrap_or("Gateway") == "Gateway"
        && gateways.contains(&(non_empty(ref_namespace).unwrap_or(route_namespace), name))
}

/// The desired host set.
pub fn desired(sources: &Sources<'_>, filters: &Filters, policy: &HostPolicy) -> Desired {
    let mut out = Collector::default();
    let ingress_filter = non_empty(filters.ingress_class.as_deref());
    let default_class = default_ingress_class(&sources.ingress_classes);

    for ing in &sources.ingresses {
        let object = ObjectRef::new(Kind::Ingress, &ing.metadata);
        if let Some(why) = skipped(&ing.metadata, filters) {
            out.exclude(object, why);
            continue;
        }
        if let Some(want) = ingress_filter {
            let class = ingress_class(ing, default_class);
            if class != Some(want) {
                out.exclude(object, Exclusion::IngressClass(class.map(str::to_string)));
                continue;
            }
        }
        let spec = ing.spec.as_ref();
        let tls = spec
            .into_iter()
            .flat_map(|s| s.tls.iter().flatten())
            .flat_map(|t| t.hosts.iter().flatten());
        let rules = spec
            .filter(|_| filters.ingress_hosts == IngressHosts::All)
            .into_iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|r| r.host.as_ref());
        out.add(policy, object, tls.chain(rules));
    }

    if !filters.gateway_api {
        return out.finish();
    }
    let gateway_filter = non_empty(filters.gateway_class.as_deref());

    // (namespace, name) of the Gateways that survive deletion and the class filter, and of
    // those opted out (a route attached only to them is out too: its traffic enters through
    // them).
    let mut surviving = BTreeSet::new();
    let mut opted = BTreeSet::new();
    for gw in &sources.gateways {
        let object = ObjectRef::new(Kind::Gateway, &gw.metadata);
        if let Some(why) = skipped(&gw.metadata, filters) {
            if why == Exclusion::OptedOut {
                if let Some(name) = gw.metadata.name.as_deref() {
                    opted.insert((namespace(&gw.metadata), name));
                }
            }
            out.exclude(object, why);
            continue;
        }
        if let Some(want) = gateway_filter {
            if gw.spec.gateway_class_name != want {
                out.exclude(
                    object,
                    Exclusion::GatewayClass(gw.spec.gateway_class_name.clone()),
                );
                continue;
            }
        }
        if let Some(name) = gw.metadata.name.as_deref() {
            surviving.insert((namespace(&gw.metadata), name));
        }
        let names = gw.spec.listeners.iter().filter_map(|l| l.hostname.as_ref());
        out.add(policy, object, names);
    }

    // One pass per route kind; the generated parentRef types differ only by name.
    macro_rules! routes {
        ($list:expr, $kind:expr, |$spec:ident| $hostnames:expr) => {
            for route in &$list {
                let object = ObjectRef::new($kind, &route.metadata);
                if let Some(why) = skipped(&route.metadata, filters) {
                    out.exclude(object, why);
                    continue;
                }
                let route_ns = namespace(&route.metadata);
                let parents = || {
                    route.spec.parent_refs.iter().flatten().map(|p| {
                        (
                            p.group.as_deref(),
                            p.kind.as_deref(),
                            p.namespace.as_deref(),
                            &p.name,
                        )
                    })
                };
                let to = |gateways: &BTreeSet<(&str, &str)>| {
                    parents().any(|(g, k, ns, name)| attached(g, k, ns, name, route_ns, gateways))
                };
                if !opted.is_empty() && to(&opted) && !to(&surviving) {
                    out.exclude(object, Exclusion::OptedOut);
                    continue;
                }
                if gateway_filter.is_some() && !to(&surviving) {
                    out.exclude(object, Exclusion::NotAttached);
                    continue;
                }
                let $spec = &route.spec;
                out.add(policy, object, $hostnames);
            }
        };
    }
    routes!(sources.http_routes, Kind::HttpRoute, |s| s
        .hostnames
        .iter()
        .flatten());
    routes!(sources.grpc_routes, Kind::GrpcRoute, |s| s
        .hostnames
        .iter()
        .flatten());
    routes!(sources.tls_routes, Kind::TlsRoute, |s| s.hostnames.iter());
    out.finish()
}

#[cfg(test)]
mod tests;
