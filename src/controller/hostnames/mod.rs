//! Which hostnames to hairpin: the desired host set computed from Ingress and Gateway-API objects,
//! with the class filters and the hostname policy applied. Pure: the live controller feeds it
//! from its watch caches, `render` from manifest files.
//!
//! [`desired`] is here, with the Gateway attachment rule and the metadata helpers it shares:
//!
//! | module | owns |
//! | --- | --- |
//! | `kinds` | the source kinds listed once ([`Kind`]: group, resource, when read) and the owned [`Objects`](kinds::Objects) |
//! | `model` | what goes in and out: [`Sources`], [`Filters`], [`Desired`] and its records |
//! | `collect` | the builder that gathers accepted names and sorts them once |
//! | `class` | which IngressClass an Ingress belongs to (its own, the annotation, the default) |
//! | `args` | the flags ([`HostnameArgs`](args::HostnameArgs)) that become the filters and the hostname policy |
//! | `targets` | `--target` parsed into [`TargetRule`]s, which rule takes an object, conflict priorities |
//! | `traefik`, `contour`, `istio` | those projects' kinds as far as their hosts go, and how their hosts are read (Traefik's `match` rules) |

pub mod args;
pub mod class;
mod collect;
pub mod contour;
pub mod istio;
pub mod kinds;
pub mod model;
pub mod targets;
pub mod traefik;

use class::{class_controller, default_ingress_class, ingress_class};
use kinds::{Kind, Route, Sources};
use model::{Desired, Exclusion, Filters, IngressHosts, ObjectRef, OPT_OUT_ANNOTATION};

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hostname::{HostPolicy, Rejection};
use crate::target::{Target, TargetRule};
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

/// `names` in their order, each at its first place. A set, not a search of the list so far:
/// the names are tenant input, and an object of 100,000 names would otherwise cost 10^10
/// comparisons.
fn first_of_each(names: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// (namespace, name) of Gateways, with the target each one's hostnames go to.
type Gateways<'a> = BTreeMap<(&'a str, &'a str), Target>;

/// The target of the Gateway `(namespace, name)` in `gateways` a route `parentRef` names.
fn attached(
    group: Option<&str>,
    kind: Option<&str>,
    ref_namespace: Option<&str>,
    name: &str,
    route_namespace: &str,
    gateways: &Gateways<'_>,
) -> Option<Target> {
    if group.unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP || kind.unwrap_or("Gateway") != "Gateway" {
        return None;
    }
    gateways
        .get(&(non_empty(ref_namespace).unwrap_or(route_namespace), name))
        .copied()
}

/// The desired host set, each host with its target.
///
/// An object mapped to a named target (`--target`: by IngressClass, by Gateway, by
/// GatewayClass; a route by the first Gateway it is attached to) goes there whatever
/// `--ingress-class`/`--gateway-class` say: those filter what the default target takes.
pub fn desired(sources: &Sources<'_>, filters: &Filters, policy: &HostPolicy) -> Desired {
    compute(sources, filters, policy, true)
}

/// [`desired`] without [`Desired::origins`] (left empty): what the sync engine computes on
/// every change, where the set of objects behind each host (a tree node per host, 30,000 for
/// 10,000 Ingresses) would be built only to be dropped.
pub fn desired_without_origins(
    sources: &Sources<'_>,
    filters: &Filters,
    policy: &HostPolicy,
) -> Desired {
    compute(sources, filters, policy, false)
}

fn compute(
    sources: &Sources<'_>,
    filters: &Filters,
    policy: &HostPolicy,
    origins: bool,
) -> Desired {
    let mut out = Collector::new(origins);
    let names = Names {
        filters,
        policy,
        rules: &filters.targets,
    };
    let classes = names.ingresses(sources, &mut out);
    if filters.opt_ins.gateway_api {
        let gateways = names.gateways(sources, &mut out);
        names.routes(&sources.http_routes, &gateways, &mut out);
        names.routes(&sources.grpc_routes, &gateways, &mut out);
        names.routes(&sources.tls_routes, &gateways, &mut out);
    }
    if filters.opt_ins.traefik_ingressroutes {
        names.classless(&sources.ingress_routes, &sources.ingress_classes, &mut out);
        names.classless(
            &sources.ingress_route_tcps,
            &sources.ingress_classes,
            &mut out,
        );
    }
    if filters.opt_ins.contour_httpproxies {
        names.classless(&sources.http_proxies, &sources.ingress_classes, &mut out);
    }
    if filters.opt_ins.istio_gateways {
        names.classless(&sources.istio_gateways, &sources.ingress_classes, &mut out);
    }
    let mut desired = out.finish();
    if !filters.reads_ingress_classes() && classes.len() > 1 {
        desired.unfiltered_classes = classes
            .into_iter()
            .map(|c| c.unwrap_or(model::NO_CLASS).to_string())
            .collect();
    }
    desired
}

/// A kind with neither a class nor a parent (Traefik's, Contour's and Istio's): its names go to
/// the default target, as a Gateway-API route attached to no Gateway's do.
trait Classless: kinds::SourceObject {
    /// Its names, and the parts of it that name hosts in a way not read (text, why).
    fn names(&self) -> (Vec<String>, Vec<(String, Rejection)>);

    /// The ingress class it names, which a `--target` mapping by class (or by the class's
    /// controller) follows as it does for an Ingress: Traefik's kinds only.
    fn class(&self) -> Option<&str> {
        None
    }
}

/// The legacy class annotation of an object (Traefik selects its CRD objects by it).
fn annotated_class(meta: &ObjectMeta) -> Option<&str> {
    non_empty(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(class::INGRESS_CLASS_ANNOTATION))
            .map(String::as_str),
    )
}

impl Classless for traefik::IngressRoute {
    fn names(&self) -> (Vec<String>, Vec<(String, Rejection)>) {
        let h = self.spec.hosts();
        (h.names, h.unread)
    }

    fn class(&self) -> Option<&str> {
        annotated_class(&self.metadata)
    }
}

impl Classless for traefik::IngressRouteTcp {
    fn names(&self) -> (Vec<String>, Vec<(String, Rejection)>) {
        let h = self.spec.hosts();
        (h.names, h.unread)
    }

    fn class(&self) -> Option<&str> {
        annotated_class(&self.metadata)
    }
}

impl Classless for contour::HttpProxy {
    fn names(&self) -> (Vec<String>, Vec<(String, Rejection)>) {
        (self.spec.hosts(), Vec::new())
    }
}

impl Classless for istio::IstioGateway {
    fn names(&self) -> (Vec<String>, Vec<(String, Rejection)>) {
        (self.spec.hosts(), Vec::new())
    }
}

/// What decides where an object's names go: the filters, the hostname policy, the targets.
struct Names<'f> {
    filters: &'f Filters,
    policy: &'f HostPolicy,
    rules: &'f [TargetRule],
}

/// The Gateways routes attach to: (namespace, name) of those that survive deletion and the
/// class filter, each with its target, and of those opted out (a route attached only to them
/// is out too: its traffic enters through them).
struct Attachable<'a> {
    surviving: Gateways<'a>,
    opted: Gateways<'a>,
}

impl Names<'_> {
    /// Each Ingress's TLS hosts (and rule hosts with --ingress-hosts all), to the target of
    /// its class's controller or name; returns the classes of the Ingresses that named hosts.
    fn ingresses<'s>(
        &self,
        sources: &'s Sources<'_>,
        out: &mut Collector,
    ) -> std::collections::BTreeSet<Option<&'s str>> {
        let filters = self.filters;
        let mut classes = std::collections::BTreeSet::new();
        let default_class = default_ingress_class(&sources.ingress_classes);
        for ing in &sources.ingresses {
            let object = ObjectRef::new(Kind::Ingress, &ing.metadata);
            if let Some(why) = skipped(&ing.metadata, filters) {
                out.exclude(object, why);
                continue;
            }
            let class = ingress_class(ing, default_class);
            let controller = class.and_then(|c| class_controller(&sources.ingress_classes, c));
            let Some(target) = targets::for_ingress(filters, class, controller) else {
                out.exclude(object, Exclusion::IngressClass(class.map(str::to_string)));
                continue;
            };
            let target = (target, targets::priority(&ing.metadata));
            let spec = ing.spec.as_ref();
            let tls = spec
                .into_iter()
                .flat_map(|s| s.tls.iter().flatten())
                .flat_map(|t| t.hosts.iter().flatten());
            let rule_hosts = spec
                .filter(|_| filters.ingress_hosts == IngressHosts::All)
                .into_iter()
                .flat_map(|s| s.rules.iter().flatten())
                .filter_map(|r| r.host.as_ref());
            let mut hosts = tls.chain(rule_hosts).peekable();
            if hosts.peek().is_some() {
                classes.insert(class);
            }
            out.add(self.policy, object, target, hosts);
        }
        classes
    }

    /// Each Gateway's listener hostnames, to its target; returns the Gateways routes may
    /// attach to.
    fn gateways<'s>(&self, sources: &'s Sources<'_>, out: &mut Collector) -> Attachable<'s> {
        let filters = self.filters;
        let gateway_filter = non_empty(filters.gateway_class.as_deref());
        let mut surviving = Gateways::new();
        let mut opted = Gateways::new();
        for gw in &sources.gateways {
            let object = ObjectRef::new(Kind::Gateway, &gw.metadata);
            if let Some(why) = skipped(&gw.metadata, filters) {
                if why == Exclusion::OptedOut {
                    if let Some(name) = gw.metadata.name.as_deref() {
                        opted.insert((namespace(&gw.metadata), name), Target::Default);
                    }
                }
                out.exclude(object, why);
                continue;
            }
            let (ns, name) = (
                namespace(&gw.metadata),
                gw.metadata.name.as_deref().unwrap_or_default(),
            );
            let class = gw.spec.gateway_class_name.as_str();
            let target = targets::for_gateway(self.rules, ns, name, class);
            if let (None, Some(want)) = (target, gateway_filter) {
                if class != want {
                    out.exclude(object, Exclusion::GatewayClass(class.to_string()));
                    continue;
                }
            }
            let target = target.unwrap_or(Target::Default);
            if !name.is_empty() {
                surviving.insert((ns, name), target);
            }
            let names = gw.spec.listeners.iter().filter_map(|l| l.hostname.as_ref());
            out.add(
                self.policy,
                object,
                (target, targets::priority(&gw.metadata)),
                names,
            );
        }
        Attachable { surviving, opted }
    }

    /// Each route's hostnames, to the target of the first Gateway it is attached to.
    fn routes<R: Route>(&self, routes: &[&R], gateways: &Attachable<'_>, out: &mut Collector) {
        let gateway_filter = non_empty(self.filters.gateway_class.as_deref());
        for route in routes {
            let meta = route.meta();
            let object = ObjectRef::new(R::KIND, meta);
            if let Some(why) = skipped(meta, self.filters) {
                out.exclude(object, why);
                continue;
            }
            let route_ns = namespace(meta);
            let to = |gateways: &Gateways<'_>| {
                route
                    .parents()
                    .find_map(|(g, k, ns, name)| attached(g, k, ns, name, route_ns, gateways))
            };
            let target = to(&gateways.surviving);
            if target.is_none() && !gateways.opted.is_empty() && to(&gateways.opted).is_some() {
                out.exclude(object, Exclusion::OptedOut);
                continue;
            }
            if target.is_none() && gateway_filter.is_some() {
                out.exclude(object, Exclusion::NotAttached);
                continue;
            }
            let target = (target.unwrap_or(Target::Default), targets::priority(meta));
            out.add(self.policy, object, target, route.hostnames());
        }
    }

    /// Each object's names, to the default target (or, for a class it names, to the target
    /// an Ingress of that class goes to); what it names in a way not read is reported as
    /// rejected.
    fn classless<C: Classless>(
        &self,
        objects: &[&C],
        classes: &[&IngressClass],
        out: &mut Collector,
    ) {
        for o in objects {
            let meta = o.meta();
            let object = ObjectRef::new(C::KIND, meta);
            if let Some(why) = skipped(meta, self.filters) {
                out.exclude(object, why);
                continue;
            }
            let (names, unread) = o.names();
            for (raw, reason) in unread {
                out.reject(object.clone(), raw, reason);
            }
            let target = o.class().map_or(Target::Default, |c| {
                targets::for_annotated_route(self.filters, c, class_controller(classes, c))
            });
            let target = (target, targets::priority(meta));
            out.add(self.policy, object, target, &names);
        }
    }
}

#[cfg(test)]
mod tests;
