//! Which hostnames to hairpin: the desired host set computed from Ingress and Gateway-API objects,
//! with the class filters and the hostname policy applied. Pure: the live controller feeds it
//! from its watch caches, `render` from manifest files.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hostname::{HostPolicy, Hostname, Rejection};

/// Legacy class annotation, still honoured by ingress controllers when `spec.ingressClassName`
/// is unset.
pub const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// Marks the IngressClass that classless Ingresses belong to.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// API group of Gateway-API objects; a `parentRef` without a group means this one.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// Namespace of a manifest without `metadata.namespace`, as `kubectl apply` without a context
/// namespace would place it.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The kinds that contribute hostnames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Ingress,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ingress => "Ingress",
            Kind::Gateway => "Gateway",
            Kind::HttpRoute => "HTTPRoute",
            Kind::GrpcRoute => "GRPCRoute",
            Kind::TlsRoute => "TLSRoute",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    fn new(kind: Kind, meta: &ObjectMeta) -> Self {
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
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excluded {
    pub object: ObjectRef,
    pub why: Exclusion,
}

/// The objects to read. References, so the controller can pass its cache entries and `render`
/// its parsed manifests without copying.
#[derive(Clone, Debug, Default)]
pub struct Sources<'a> {
    pub ingresses: Vec<&'a Ingress>,
    pub ingress_classes: Vec<&'a IngressClass>,
    pub gateways: Vec<&'a Gateway>,
    pub http_routes: Vec<&'a HttpRoute>,
    pub grpc_routes: Vec<&'a GrpcRoute>,
    pub tls_routes: Vec<&'a TlsRoute>,
}

/// Which objects count. `None` filters mean all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    pub gateway_api: bool,
    pub ingress_class: Option<String>,
    pub gateway_class: Option<String>,
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
}

/// Builds a [`Desired`]: accepted names are gathered in a list and sorted once at the end,
/// which costs far less than inserting each into two trees (10k names: one sort instead of
/// 20k tree inserts with string compares along pointer chains).
#[derive(Default)]
struct Collector {
    out: Desired,
    accepted: Vec<(Hostname, ObjectRef)>,
}

impl Collector {
    fn add<'s>(
        &mut self,
        policy: &HostPolicy,
        object: ObjectRef,
        names: impl IntoIterator<Item = &'s String>,
    ) {
        // The last name takes `object` itself: most objects have one name, so most need no copy.
        let mut names = names.into_iter().peekable();
        let mut object = Some(object);
        while let Some(raw) = names.next() {
            let this = match names.peek() {
                Some(_) => object.clone(),
                None => object.take(),
            };
            let Some(this) = this else { return };
            match policy.check(raw) {
                Ok(host) => self.accepted.push((host, this)),
                Err(reason) => self.out.rejected.push(Rejected {
                    object: this,
                    raw: raw.clone(),
                    reason,
                }),
            }
        }
    }

    fn exclude(&mut self, object: ObjectRef, why: Exclusion) {
        self.out.excluded.push(Excluded { object, why });
    }

    fn finish(self) -> Desired {
        let Collector {
            mut out,
            mut accepted,
        } = self;
        accepted.sort_unstable();
        let mut origins: Vec<(Hostname, BTreeSet<ObjectRef>)> = Vec::new();
        for (host, object) in accepted {
            match origins.last_mut() {
                Some((h, objects)) if *h == host => {
                    objects.insert(object);
                }
                _ => origins.push((host, BTreeSet::from([object]))),
            }
        }
        // Both from sorted input: built in bulk, without searching.
        out.hosts = origins.iter().map(|(h, _)| h.clone()).collect();
        out.origins = origins.into_iter().collect();
        out
    }
}

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
}

fn deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// The IngressClass that classless Ingresses belong to: the one annotated as default, if exactly
/// one (several defaults are ambiguous, so none is assumed).
pub fn default_ingress_class<'a>(classes: &[&'a IngressClass]) -> Option<&'a str> {
    let defaults: BTreeSet<&str> = classes
        .iter()
        .filter(|c| !deleting(&c.metadata))
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .filter_map(|c| non_empty(c.metadata.name.as_deref()))
        .collect();
    match defaults.len() {
        1 => defaults.into_iter().next(),
        _ => None,
    }
}

/// An Ingress's class: `spec.ingressClassName`, else the legacy annotation, else the default class.
pub fn ingress_class<'a>(ingress: &'a Ingress, default_class: Option<&'a str>) -> Option<&'a str> {
    non_empty(
        ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref()),
    )
    .or_else(|| {
        non_empty(
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INGRESS_CLASS_ANNOTATION))
                .map(String::as_str),
        )
    })
    .or(default_class)
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
        if deleting(&ing.metadata) {
            out.exclude(object, Exclusion::Deleting);
            continue;
        }
        if let Some(want) = ingress_filter {
            let class = ingress_class(ing, default_class);
            if class != Some(want) {
                out.exclude(object, Exclusion::IngressClass(class.map(str::to_string)));
                continue;
            }
        }
        let names = ing
            .spec
            .iter()
            .flat_map(|s| s.tls.iter().flatten())
            .flat_map(|t| t.hosts.iter().flatten());
        out.add(policy, object, names);
    }

    if !filters.gateway_api {
        return out.finish();
    }
    let gateway_filter = non_empty(filters.gateway_class.as_deref());

    // (namespace, name) of the Gateways that survive deletion and the class filter.
    let mut surviving = BTreeSet::new();
    for gw in &sources.gateways {
        let object = ObjectRef::new(Kind::Gateway, &gw.metadata);
        if deleting(&gw.metadata) {
            out.exclude(object, Exclusion::Deleting);
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
                if deleting(&route.metadata) {
                    out.exclude(object, Exclusion::Deleting);
                    continue;
                }
                if gateway_filter.is_some() {
                    let route_ns = namespace(&route.metadata);
                    let ok = route.spec.parent_refs.iter().flatten().any(|p| {
                        attached(
                            p.group.as_deref(),
                            p.kind.as_deref(),
                            p.namespace.as_deref(),
                            &p.name,
                            route_ns,
                            &surviving,
                        )
                    });
                    if !ok {
                        out.exclude(object, Exclusion::NotAttached);
                        continue;
                    }
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

/// Source filters and hostname policy flags. The same flags and environment variables serve
/// `controller` and `render`, so `render` shows exactly what the controller would pick.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct HostnameArgs {
    /// Also read Gateway-API objects: Gateway listener hostnames (any protocol) and HTTPRoute,
    /// GRPCRoute and TLSRoute hostnames.
    #[arg(long, env = "OUROBOROS_CONTROLLER_GATEWAY_API")]
    pub gateway_api: bool,

    /// Only Ingresses of this class: `spec.ingressClassName`, else the `kubernetes.io/ingress.class`
    /// annotation, else the IngressClass annotated `ingressclass.kubernetes.io/is-default-class:
    /// "true"`. Ingresses whose class stays unknown are dropped. Empty: all Ingresses.
    #[arg(long, env = "OUROBOROS_CONTROLLER_INGRESS_CLASS", value_name = "CLASS")]
    pub ingress_class: Option<String>,

    /// Only Gateways with this `spec.gatewayClassName`, and routes whose `parentRefs` name one of
    /// them (namespace defaults to the route's own). Needs --gateway-api. Empty: all.
    #[arg(long, env = "OUROBOROS_CONTROLLER_GATEWAY_CLASS", value_name = "CLASS")]
    pub gateway_class: Option<String>,

    /// Cluster DNS domain; names inside it are never hairpinned. Default: detected from the
    /// `svc.<domain>` search entry in /etc/resolv.conf, else `cluster.local`.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_CLUSTER_DOMAIN",
        value_name = "DOMAIN"
    )]
    pub cluster_domain: Option<String>,

    /// Only hairpin names equal to or under this suffix (repeatable; comma-separated in the
    /// environment variable). Default: any name that passes the other checks.
    #[arg(
        long = "allow-domain",
        env = "OUROBOROS_CONTROLLER_ALLOW_DOMAIN",
        value_name = "SUFFIX",
        value_delimiter = ','
    )]
    pub allow_domains: Vec<String>,

    /// Never hairpin names equal to or under this suffix (repeatable; comma-separated in the
    /// environment variable). Wins over --allow-domain.
    #[arg(
        long = "deny-domain",
        env = "OUROBOROS_CONTROLLER_DENY_DOMAIN",
        value_name = "SUFFIX",
        value_delimiter = ','
    )]
    pub deny_domains: Vec<String>,
}

impl HostnameArgs {
    /// --ingress-class, unless blank (blank: every Ingress).
    pub fn ingress_class_filter(&self) -> Option<&str> {
        non_empty(self.ingress_class.as_deref())
    }

    /// The filters, or a usage message for a combination that makes no sense.
    pub fn filters(&self) -> Result<Filters, String> {
        let ingress_class = self.ingress_class_filter().map(str::to_string);
        let gateway_class = non_empty(self.gateway_class.as_deref()).map(str::to_string);
        if gateway_class.is_some() && !self.gateway_api {
            return Err(
                "--gateway-class filters Gateway-API objects, which are only read with --gateway-api"
                    .into(),
            );
        }
        Ok(Filters {
            gateway_api: self.gateway_api,
            ingress_class,
            gateway_class,
        })
    }

    /// Checks the domain flags; `cluster_domain` is the resolved one (see `cluster_domain::resolve`).
    pub fn policy(&self, cluster_domain: &str) -> Result<HostPolicy, String> {
        let flags = std::iter::once(("--cluster-domain", cluster_domain))
            .chain(
                self.allow_domains
                    .iter()
                    .map(|d| ("--allow-domain", d.as_str())),
            )
            .chain(
                self.deny_domains
                    .iter()
                    .map(|d| ("--deny-domain", d.as_str())),
            );
        for (flag, value) in flags {
            if !valid_suffix(value) {
                return Err(format!(
                    "{flag} {value:?} is not a DNS suffix (labels of a-z, 0-9 and inner '-', separated by dots)"
                ));
            }
        }
        Ok(HostPolicy::new(
            cluster_domain,
            &self.allow_domains,
            &self.deny_domains,
        ))
    }
}

/// A DNS suffix as the flags take it: `example.com`, `.example.com`, `*.example.com`, `com.`
fn valid_suffix(s: &str) -> bool {
    let s = s.trim().trim_end_matches('.');
    let s = s.strip_prefix("*.").unwrap_or(s).trim_start_matches('.');
    crate::dns_name::is_hostname(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn policy() -> HostPolicy {
        HostPolicy::new("cluster.local", &[], &[])
    }

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("test object")
    }

    fn meta(ns: Option<&str>, name: &str, annotations: &[(&str, &str)], deleting: bool) -> Value {
        let mut m = json!({ "name": name });
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        if !annotations.is_empty() {
            let a: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            m["annotations"] = Value::Object(a);
        }
        if deleting {
            m["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        m
    }

    fn ingress(name: &str, class: Option<&str>, annotation: Option<&str>, tls: &[&str]) -> Ingress {
        let ann: Vec<(&str, &str)> = annotation
            .map(|a| vec![(INGRESS_CLASS_ANNOTATION, a)])
            .unwrap_or_default();
        let mut spec = json!({ "tls": [{ "hosts": tls, "secretName": "cert" }] });
        if let Some(c) = class {
            spec["ingressClassName"] = json!(c);
        }
        from(json!({ "metadata": meta(Some("web"), name, &ann, false), "spec": spec }))
    }

    fn class(name: &str, default: Option<&str>, deleting: bool) -> IngressClass {
        let ann: Vec<(&str, &str)> = default
            .map(|d| vec![(DEFAULT_CLASS_ANNOTATION, d)])
            .unwrap_or_default();
        from(
            json!({ "metadata": meta(None, name, &ann, deleting), "spec": { "controller": "k8s.io/ingress-nginx" } }),
        )
    }

    fn gateway(ns: &str, name: &str, class: &str, hosts: &[&str], deleting: bool) -> Gateway {
        let listeners: Vec<Value> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| json!({ "name": format!("l{i}"), "port": 443, "protocol": "HTTPS", "hostname": h }))
            .chain(std::iter::once(
                json!({ "name": "plain", "port": 80, "protocol": "HTTP" }),
            ))
            .collect();
        from(json!({
            "metadata": meta(Some(ns), name, &[], deleting),
            "spec": { "gatewayClassName": class, "listeners": listeners },
        }))
    }

    fn http_route(ns: &str, name: &str, parents: Value, hosts: &[&str]) -> HttpRoute {
        from(json!({
            "metadata": meta(Some(ns), name, &[], false),
            "spec": { "parentRefs": parents, "hostnames": hosts },
        }))
    }

    fn hosts(d: &Desired) -> Vec<&str> {
        d.hosts.iter().map(Hostname::as_str).collect()
    }

    #[test]
    fn ingress_reads_tls_hosts_only() {
        let ing: Ingress = from(json!({
            "metadata": { "name": "shop", "namespace": "web" },
            "spec": {
                "rules": [{ "host": "plain.example.com" }, { "host": "Shop.Example.com" }],
                "tls": [
                    { "hosts": ["Shop.Example.com", "*.cdn.example.com"] },
                    { "secretName": "no-hosts" },
                    { "hosts": ["shop.example.com."] },
                ],
            },
        }));
        let no_spec: Ingress = from(json!({ "metadata": { "name": "empty" } }));
        let sources = Sources {
            ingresses: vec![&ing, &no_spec],
            ..Default::default()
        };
        let d = desired(&sources, &Filters::default(), &policy());
        assert_eq!(hosts(&d), ["*.cdn.example.com", "shop.example.com"]);
        assert!(d.rejected.is_empty() && d.excluded.is_empty());
        let origin = &d.origins[&policy().check("shop.example.com").unwrap()];
        assert_eq!(
            origin.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["Ingress web/shop"]
        );
    }

    #[test]
    fn rejections_name_object_raw_name_and_reason() {
        let ing = ingress(
            "evil",
            None,
            None,
            &[
                "ok.example.com",
                "kubernetes.default.svc.cluster.local",
                "x.example.com\n}\nrewrite name a b",
                "10.0.0.1",
                "a..b.example.com",
            ],
        );
        let d = desired(
            &Sources {
                ingresses: vec![&ing],
                ..Default::default()
            },
            &Filters::default(),
            &policy(),
        );
        assert_eq!(hosts(&d), ["ok.example.com"]);
        let got: Vec<(String, &str, Rejection)> = d
            .rejected
            .iter()
            .map(|r| (r.object.to_string(), r.raw.as_str(), r.reason))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Ingress web/evil".to_string(),
                    "kubernetes.default.svc.cluster.local",
                    Rejection::ClusterDomain
                ),
                (
                    "Ingress web/evil".to_string(),
                    "x.example.com\n}\nrewrite name a b",
                    Rejection::InvalidCharacter
                ),
                (
                    "Ingress web/evil".to_string(),
                    "10.0.0.1",
                    Rejection::IpLiteral
                ),
                (
                    "Ingress web/evil".to_string(),
                    "a..b.example.com",
                    Rejection::BadLabel
                ),
            ]
        );
    }

    #[test]
    fn deleting_objects_are_ignored() {
        let mut ing = ingress("gone", None, None, &["gone.example.com"]);
        ing.metadata.deletion_timestamp = Some(from(json!("2026-01-01T00:00:00Z")));
        let gw = gateway("gw", "gone", "c", &["gw-gone.example.com"], true);
        let route = http_route("web", "r", json!([]), &["route.example.com"]);
        let mut route_gone = route.clone();
        route_gone.metadata.name = Some("r-gone".into());
        route_gone.metadata.deletion_timestamp = Some(from(json!("2026-01-01T00:00:00Z")));
        let d = desired(
            &Sources {
                ingresses: vec![&ing],
                gateways: vec![&gw],
                http_routes: vec![&route, &route_gone],
                ..Default::default()
            },
            &Filters {
                gateway_api: true,
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(hosts(&d), ["route.example.com"]);
        let why: Vec<String> = d
            .excluded
            .iter()
            .map(|e| format!("{}: {}", e.object, e.why))
            .collect();
        assert_eq!(
            why,
            [
                "Ingress web/gone: being deleted",
                "Gateway gw/gone: being deleted",
                "HTTPRoute web/r-gone: being deleted",
            ]
        );
    }

    #[test]
    fn ingress_class_resolution_and_filter() {
        // (spec.ingressClassName, annotation, IngressClasses (name, default annotation, deleting),
        //  resolved class)
        type Classes<'a> = &'a [(&'a str, Option<&'a str>, bool)];
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            Classes<'a>,
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (Some("a"), None, &[], Some("a")),
            (Some("a"), Some("b"), &[], Some("a")),
            (
                Some("a"),
                Some("b"),
                &[("d", Some("true"), false)],
                Some("a"),
            ),
            (None, Some("b"), &[("d", Some("true"), false)], Some("b")),
            (Some(""), Some("b"), &[], Some("b")),
            (Some(" "), None, &[], None),
            (None, Some(""), &[("d", Some("true"), false)], Some("d")),
            (None, None, &[("d", Some("true"), false)], Some("d")),
            (None, None, &[("d", Some(" true "), false)], None),
            (None, None, &[("d", Some("false"), false)], None),
            (None, None, &[("d", Some("True"), false)], None),
            (None, None, &[("d", None, false)], None),
            (None, None, &[], None),
            (None, None, &[("d", Some("true"), true)], None),
            (
                None,
                None,
                &[("d", Some("true"), false), ("e", Some("true"), false)],
                None,
            ),
            (
                None,
                None,
                &[("d", Some("true"), false), ("d", Some("true"), false)],
                Some("d"),
            ),
            (
                None,
                None,
                &[("d", Some("true"), false), ("e", Some("true"), true)],
                Some("d"),
            ),
            (
                None,
                None,
                &[("d", Some("true"), false), ("e", Some("false"), false)],
                Some("d"),
            ),
        ];
        for (i, (spec, annotation, classes, want)) in cases.iter().enumerate() {
            let ing = ingress("i", *spec, *annotation, &["i.example.com"]);
            let classes: Vec<IngressClass> = classes
                .iter()
                .map(|(n, d, del)| class(n, *d, *del))
                .collect();
            let class_refs: Vec<&IngressClass> = classes.iter().collect();
            let default = default_ingress_class(&class_refs);
            assert_eq!(ingress_class(&ing, default), *want, "case {i}");

            // The filter keeps exactly the Ingresses whose resolved class it names.
            for filter in [None, Some(""), Some("a"), Some("b"), Some("d"), Some("x")] {
                let d = desired(
                    &Sources {
                        ingresses: vec![&ing],
                        ingress_classes: class_refs.clone(),
                        ..Default::default()
                    },
                    &Filters {
                        ingress_class: filter.map(str::to_string),
                        ..Default::default()
                    },
                    &policy(),
                );
                let kept = match filter {
                    None | Some("") => true,
                    Some(f) => *want == Some(f),
                };
                assert_eq!(
                    d.hosts.len(),
                    usize::from(kept),
                    "case {i} filter {filter:?}"
                );
                if kept {
                    assert!(d.excluded.is_empty(), "case {i} filter {filter:?}");
                } else {
                    assert_eq!(
                        d.excluded,
                        [Excluded {
                            object: ObjectRef {
                                kind: Kind::Ingress,
                                namespace: "web".into(),
                                name: "i".into()
                            },
                            why: Exclusion::IngressClass(want.map(str::to_string)),
                        }],
                        "case {i} filter {filter:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn gateway_api_needs_the_flag() {
        let gw = gateway("gw", "g", "c", &["gw.example.com"], false);
        let route = http_route("web", "r", json!([]), &["route.example.com"]);
        let sources = Sources {
            gateways: vec![&gw],
            http_routes: vec![&route],
            ..Default::default()
        };
        let off = desired(&sources, &Filters::default(), &policy());
        assert!(off.hosts.is_empty() && off.excluded.is_empty());
        let on = desired(
            &sources,
            &Filters {
                gateway_api: true,
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(hosts(&on), ["gw.example.com", "route.example.com"]);
    }

    #[test]
    fn every_route_kind_contributes() {
        let grpc: GrpcRoute = from(json!({
            "metadata": { "name": "g", "namespace": "web" },
            "spec": { "hostnames": ["grpc.example.com"] },
        }));
        let tls: TlsRoute = from(json!({
            "metadata": { "name": "t", "namespace": "web" },
            "spec": { "hostnames": ["*.tls.example.com"], "rules": [] },
        }));
        let http = http_route("web", "h", json!([]), &["http.example.com"]);
        let no_hosts: HttpRoute = from(json!({ "metadata": { "name": "n" }, "spec": {} }));
        let d = desired(
            &Sources {
                http_routes: vec![&http, &no_hosts],
                grpc_routes: vec![&grpc],
                tls_routes: vec![&tls],
                ..Default::default()
            },
            &Filters {
                gateway_api: true,
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(
            hosts(&d),
            ["*.tls.example.com", "grpc.example.com", "http.example.com"]
        );
        let kinds: BTreeSet<Kind> = d.origins.values().flatten().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            BTreeSet::from([Kind::HttpRoute, Kind::GrpcRoute, Kind::TlsRoute])
        );
    }

    #[test]
    fn gateway_class_filter_and_parent_refs() {
        // Gateways: gw/public (class "pp", kept), gw/internal (class "other"), gw/dying (class
        // "pp", being deleted), and web/local (class "pp") in the routes' own namespace.
        let public = gateway("gw", "public", "pp", &["public.example.com"], false);
        let internal = gateway("gw", "internal", "other", &["internal.example.com"], false);
        let dying = gateway("gw", "dying", "pp", &["dying.example.com"], true);
        let local = gateway("web", "local", "pp", &[], false);
        let gateways = vec![&public, &internal, &dying, &local];

        // (parentRefs, attached to a surviving Gateway of class "pp")
        let cases: Vec<(Value, bool)> = vec![
            (json!([{ "name": "public", "namespace": "gw" }]), true),
            (
                json!([{ "name": "public", "namespace": "gw", "kind": "Gateway" }]),
                true,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "group": GATEWAY_GROUP, "kind": "Gateway" }]),
                true,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "sectionName": "l0", "port": 443 }]),
                true,
            ),
            // Namespace defaults to the route's own ("web"): no web/public.
            (json!([{ "name": "public" }]), false),
            (json!([{ "name": "local" }]), true),
            (json!([{ "name": "local", "namespace": "" }]), true),
            (json!([{ "name": "local", "namespace": "gw" }]), false),
            // Wrong class, being deleted, or no such Gateway.
            (json!([{ "name": "internal", "namespace": "gw" }]), false),
            (json!([{ "name": "dying", "namespace": "gw" }]), false),
            (json!([{ "name": "nope", "namespace": "gw" }]), false),
            // Not a Gateway: another kind or group (the empty group is the core API group).
            (
                json!([{ "name": "public", "namespace": "gw", "kind": "Service" }]),
                false,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "kind": "ListenerSet" }]),
                false,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "group": "" }]),
                false,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "group": "example.com" }]),
                false,
            ),
            (
                json!([{ "name": "public", "namespace": "gw", "kind": "gateway" }]),
                false,
            ),
            // Any one good parentRef is enough.
            (
                json!([{ "name": "internal", "namespace": "gw" }, { "name": "public", "namespace": "gw" }]),
                true,
            ),
            (json!([]), false),
            (Value::Null, false),
        ];
        for (i, (parents, want)) in cases.into_iter().enumerate() {
            let route = http_route("web", "r", parents.clone(), &["route.example.com"]);
            let sources = Sources {
                gateways: gateways.clone(),
                http_routes: vec![&route],
                ..Default::default()
            };
            let filtered = desired(
                &sources,
                &Filters {
                    gateway_api: true,
                    gateway_class: Some("pp".into()),
                    ..Default::default()
                },
                &policy(),
            );
            let route_host = policy().check("route.example.com").unwrap();
            assert_eq!(
                filtered.hosts.contains(&route_host),
                want,
                "case {i}: {parents}"
            );
            assert!(filtered
                .hosts
                .contains(&policy().check("public.example.com").unwrap()));
            assert!(!filtered
                .hosts
                .contains(&policy().check("internal.example.com").unwrap()));
            assert!(!filtered
                .hosts
                .contains(&policy().check("dying.example.com").unwrap()));
            let not_attached = filtered
                .excluded
                .iter()
                .any(|e| e.object.kind == Kind::HttpRoute && e.why == Exclusion::NotAttached);
            assert_eq!(not_attached, !want, "case {i}");

            // Without the class filter every route counts, attached or not.
            let open = desired(
                &sources,
                &Filters {
                    gateway_api: true,
                    ..Default::default()
                },
                &policy(),
            );
            assert_eq!(
                hosts(&open),
                [
                    "internal.example.com",
                    "public.example.com",
                    "route.example.com"
                ],
                "case {i}"
            );
        }
    }

    #[test]
    fn missing_namespace_means_default() {
        let gw: Gateway = from(json!({
            "metadata": { "name": "g" },
            "spec": { "gatewayClassName": "pp", "listeners": [] },
        }));
        let route = http_route("default", "r", json!([{ "name": "g" }]), &["r.example.com"]);
        let mut route_no_ns = route.clone();
        route_no_ns.metadata.namespace = None;
        route_no_ns.spec.hostnames = Some(vec!["r2.example.com".into()]);
        let d = desired(
            &Sources {
                gateways: vec![&gw],
                http_routes: vec![&route, &route_no_ns],
                ..Default::default()
            },
            &Filters {
                gateway_api: true,
                gateway_class: Some("pp".into()),
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(hosts(&d), ["r.example.com", "r2.example.com"]);
    }

    #[test]
    fn same_name_from_several_objects() {
        let a = ingress("a", None, None, &["shared.example.com"]);
        let b = ingress("b", None, None, &["SHARED.example.com."]);
        let gw = gateway("gw", "g", "c", &["shared.example.com"], false);
        let d = desired(
            &Sources {
                ingresses: vec![&a, &b],
                gateways: vec![&gw],
                ..Default::default()
            },
            &Filters {
                gateway_api: true,
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(hosts(&d), ["shared.example.com"]);
        let origins: Vec<String> = d
            .origins
            .values()
            .flatten()
            .map(ToString::to_string)
            .collect();
        assert_eq!(origins, ["Ingress web/a", "Ingress web/b", "Gateway gw/g"]);
    }

    #[test]
    fn args_to_filters_and_policy() {
        let args = HostnameArgs {
            gateway_class: Some("pp".into()),
            ..Default::default()
        };
        assert!(args.filters().unwrap_err().contains("--gateway-api"));
        let args = HostnameArgs {
            gateway_api: true,
            ingress_class: Some(" ".into()),
            gateway_class: Some("pp".into()),
            allow_domains: vec!["*.example.com".into(), ".example.org.".into()],
            deny_domains: vec!["secret.example.com".into()],
            ..Default::default()
        };
        assert_eq!(
            args.filters().unwrap(),
            Filters {
                gateway_api: true,
                ingress_class: None,
                gateway_class: Some("pp".into()),
            }
        );
        let p = args.policy("corp.internal").unwrap();
        assert!(p.check("a.example.org").is_ok());
        assert_eq!(p.check("a.secret.example.com"), Err(Rejection::Denied));
        assert_eq!(p.check("a.example.net"), Err(Rejection::NotAllowed));
        for (bad, flag) in [
            (
                HostnameArgs {
                    allow_domains: vec!["exa mple.com".into()],
                    ..Default::default()
                },
                "--allow-domain",
            ),
            (
                HostnameArgs {
                    deny_domains: vec!["".into()],
                    ..Default::default()
                },
                "--deny-domain",
            ),
        ] {
            assert!(bad.policy("cluster.local").unwrap_err().contains(flag));
        }
        assert!(HostnameArgs::default()
            .policy("bad domain")
            .unwrap_err()
            .contains("--cluster-domain"));
    }
}
