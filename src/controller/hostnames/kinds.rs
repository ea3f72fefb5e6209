//! The source kinds, listed once: what each one is on the API (the places it may be served at,
//! each a group and version, in order of preference; its resource), when the controller reads it, and the owned ([`Objects`]) and borrowed ([`Sources`]) containers
//! every reader fills (`render` from manifest files, `doctor` from list calls). The watches
//! (`controller::sources`), RBAC rules (`controller::rbac`), CRD checks, manifest recognition
//! and the counts `render` logs all iterate [`Kind::ALL`]. A new kind is a row here, plus the
//! hostname rules that read it (`hostnames::compute`), the watch cache's projection
//! (`controller::projection`) and store (`controller::sources`), and the chart's RBAC:
//! docs/architecture.md lists them.
//!
//! Traefik's, Contour's and Istio's kinds have no Rust types published; each is a small struct
//! of the fields read (in `traefik`, `contour`, `istio`), made a `kube::Resource` here from its
//! row (`crd_resource!`), so the watches, `doctor`'s lists and `render`'s reader treat them
//! like the typed kinds.

use std::collections::BTreeSet;

use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;

use serde::de::DeserializeOwned;

use super::contour::HttpProxy;
use super::istio::IstioGateway;
use super::traefik::{IngressRoute, IngressRouteTcp};
use super::GATEWAY_GROUP;

/// The kinds the controller reads. All but `IngressClass` contribute hostnames; that one
/// only decides which Ingresses a class filter keeps and which target takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Ingress,
    IngressClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    /// Traefik's `IngressRoute` (`traefik.io`).
    TraefikIngressRoute,
    /// Traefik's `IngressRouteTCP`.
    TraefikIngressRouteTcp,
    /// Contour's `HTTPProxy` (`projectcontour.io`).
    ContourHttpProxy,
    /// Istio's `Gateway` (`networking.istio.io`), not the Gateway API's.
    IstioGateway,
}

/// When a kind is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadWhen {
    Always,
    /// With `--ingress-class`, `--ingress-class-controller` or a `--target` mapping by class
    /// or controller (to find the default class and each class's `spec.controller`).
    IngressClassFilter,
    /// With the flag of this opt-in; the kind is a CRD that may be absent.
    OptIn(OptIn),
}

/// The CRD sources read only when asked for, one flag each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OptIn {
    /// `--gateway-api`: Gateway, HTTPRoute, GRPCRoute, TLSRoute.
    GatewayApi,
    /// `--traefik-ingressroutes`: IngressRoute and IngressRouteTCP.
    TraefikIngressRoutes,
    /// `--contour-httpproxies`: HTTPProxy.
    ContourHttpProxies,
    /// `--istio-gateways`: Istio's Gateway.
    IstioGateways,
}

impl OptIn {
    pub const ALL: [OptIn; 4] = [
        OptIn::GatewayApi,
        OptIn::TraefikIngressRoutes,
        OptIn::ContourHttpProxies,
        OptIn::IstioGateways,
    ];

    /// The flag that turns it on.
    pub fn flag(self) -> &'static str {
        match self {
            OptIn::GatewayApi => "--gateway-api",
            OptIn::TraefikIngressRoutes => "--traefik-ingressroutes",
            OptIn::ContourHttpProxies => "--contour-httpproxies",
            OptIn::IstioGateways => "--istio-gateways",
        }
    }
}

/// Which opt-in sources a configuration reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptIns {
    pub gateway_api: bool,
    pub traefik_ingressroutes: bool,
    pub contour_httpproxies: bool,
    pub istio_gateways: bool,
}

impl OptIns {
    /// The Gateway API alone (`--gateway-api`).
    pub const GATEWAY_API: OptIns = OptIns {
        gateway_api: true,
        traefik_ingressroutes: false,
        contour_httpproxies: false,
        istio_gateways: false,
    };
    /// Every one of them (tests, fuzzing).
    pub const EVERY: OptIns = OptIns {
        gateway_api: true,
        traefik_ingressroutes: true,
        contour_httpproxies: true,
        istio_gateways: true,
    };

    pub fn has(self, o: OptIn) -> bool {
        match o {
            OptIn::GatewayApi => self.gateway_api,
            OptIn::TraefikIngressRoutes => self.traefik_ingressroutes,
            OptIn::ContourHttpProxies => self.contour_httpproxies,
            OptIn::IstioGateways => self.istio_gateways,
        }
    }
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Ingress,
        Kind::IngressClass,
        Kind::Gateway,
        Kind::HttpRoute,
        Kind::GrpcRoute,
        Kind::TlsRoute,
        Kind::TraefikIngressRoute,
        Kind::TraefikIngressRouteTcp,
        Kind::ContourHttpProxy,
        Kind::IstioGateway,
    ];

    pub fn as_str(self) -> &'static str {
        self.row().0
    }

    /// The API group of its first place (the one read when the cluster serves it).
    pub fn group(self) -> &'static str {
        self.preferred().group
    }

    /// The version of its first place.
    pub fn version(self) -> &'static str {
        self.preferred().version
    }

    /// Where the kind may be served, most preferred first: the controller reads the first one
    /// the cluster serves ([`served_place`](Self::served_place)), and `render` reads objects of
    /// any of them. The fields read are the same at each.
    pub fn places(self) -> &'static [Place] {
        self.row().1
    }

    /// Its first place: read when the cluster serves none yet (a missing CRD reads as empty).
    pub fn preferred(self) -> Place {
        self.places()[0]
    }

    /// The resource (plural) name, as RBAC rules and URLs spell it.
    pub fn plural(self) -> &'static str {
        self.row().2
    }

    pub fn read_when(self) -> ReadWhen {
        self.row().3
    }

    /// Whether the kind is a CRD that may be absent (read as empty until it is installed).
    pub fn is_crd(self) -> bool {
        matches!(self.read_when(), ReadWhen::OptIn(_))
    }

    /// Why the controller reads it (the RBAC rule's reason).
    pub fn purpose(self) -> &'static str {
        match self.read_when() {
            ReadWhen::Always => "read Ingress TLS hosts",
            ReadWhen::IngressClassFilter => {
                "find the default IngressClass and who serves each class (spec.controller) for \
                 --ingress-class and the IngressClass mappings"
            }
            ReadWhen::OptIn(OptIn::GatewayApi) => "read Gateway-API hostnames",
            ReadWhen::OptIn(OptIn::TraefikIngressRoutes) => {
                "read Traefik IngressRoute and IngressRouteTCP hosts (--traefik-ingressroutes)"
            }
            ReadWhen::OptIn(OptIn::ContourHttpProxies) => {
                "read Contour HTTPProxy fqdns (--contour-httpproxies)"
            }
            ReadWhen::OptIn(OptIn::IstioGateways) => {
                "read Istio Gateway server hosts (--istio-gateways)"
            }
        }
    }

    /// `kind`, places, `plural`, when read: the table.
    fn row(self) -> (&'static str, &'static [Place], &'static str, ReadWhen) {
        use self::OptIn::{ContourHttpProxies, GatewayApi, IstioGateways, TraefikIngressRoutes};
        use ReadWhen::{Always, IngressClassFilter, OptIn};
        const NET: &[Place] = &[Place::new("networking.k8s.io", "v1")];
        // v1 since Gateway API 1.0 (GRPCRoute 1.1, TLSRoute 1.5); older installs serve
        // v1beta1 (Gateway, HTTPRoute) or v1alpha2 (every route; TLSRoute v1alpha3 in 1.3
        // and 1.4). Hostnames and parentRefs read the same in each.
        const GW: &[Place] = &[
            Place::new(GATEWAY_GROUP, "v1"),
            Place::new(GATEWAY_GROUP, "v1beta1"),
            Place::new(GATEWAY_GROUP, "v1alpha2"),
        ];
        const TLS: &[Place] = &[
            Place::new(GATEWAY_GROUP, "v1"),
            Place::new(GATEWAY_GROUP, "v1alpha3"),
            Place::new(GATEWAY_GROUP, "v1alpha2"),
        ];
        // Traefik v3 (and v2 from 2.10) serve these in `traefik.io`; v2 before 2.10 only in
        // `traefik.containo.us`, which v3 dropped. Same version, same fields.
        const TRAEFIK: &[Place] = &[
            Place::new("traefik.io", "v1alpha1"),
            Place::new("traefik.containo.us", "v1alpha1"),
        ];
        const CONTOUR: &[Place] = &[Place::new("projectcontour.io", "v1")];
        // `v1` since Istio 1.22; older releases serve `v1beta1` and `v1alpha3`, with the same
        // `servers[].hosts`.
        const ISTIO: &[Place] = &[
            Place::new("networking.istio.io", "v1"),
            Place::new("networking.istio.io", "v1beta1"),
            Place::new("networking.istio.io", "v1alpha3"),
        ];
        match self {
            Kind::Ingress => ("Ingress", NET, "ingresses", Always),
            Kind::IngressClass => ("IngressClass", NET, "ingressclasses", IngressClassFilter),
            Kind::Gateway => ("Gateway", GW, "gateways", OptIn(GatewayApi)),
            Kind::HttpRoute => ("HTTPRoute", GW, "httproutes", OptIn(GatewayApi)),
            Kind::GrpcRoute => ("GRPCRoute", GW, "grpcroutes", OptIn(GatewayApi)),
            Kind::TlsRoute => ("TLSRoute", TLS, "tlsroutes", OptIn(GatewayApi)),
            Kind::TraefikIngressRoute => (
                "IngressRoute",
                TRAEFIK,
                "ingressroutes",
                OptIn(TraefikIngressRoutes),
            ),
            Kind::TraefikIngressRouteTcp => (
                "IngressRouteTCP",
                TRAEFIK,
                "ingressroutetcps",
                OptIn(TraefikIngressRoutes),
            ),
            Kind::ContourHttpProxy => (
                "HTTPProxy",
                CONTOUR,
                "httpproxies",
                OptIn(ContourHttpProxies),
            ),
            Kind::IstioGateway => ("Gateway", ISTIO, "gateways", OptIn(IstioGateways)),
        }
    }

    /// The `apiVersion` of its first place (`group/version`).
    pub fn api_version(self) -> String {
        self.preferred().api_version()
    }

    /// `plural.group` of its first place: the CRD's name for the Gateway-API kinds, and the
    /// resource name `doctor` names.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Ingress => "ingresses.networking.k8s.io",
            Kind::IngressClass => "ingressclasses.networking.k8s.io",
            Kind::Gateway => "gateways.gateway.networking.k8s.io",
            Kind::HttpRoute => "httproutes.gateway.networking.k8s.io",
            Kind::GrpcRoute => "grpcroutes.gateway.networking.k8s.io",
            Kind::TlsRoute => "tlsroutes.gateway.networking.k8s.io",
            Kind::TraefikIngressRoute => "ingressroutes.traefik.io",
            Kind::TraefikIngressRouteTcp => "ingressroutetcps.traefik.io",
            Kind::ContourHttpProxy => "httpproxies.projectcontour.io",
            Kind::IstioGateway => "gateways.networking.istio.io",
        }
    }

    /// Whether objects of this kind are Gateway-API routes (attached to Gateways by
    /// `parentRefs`, read through [`Route`]).
    pub fn is_route(self) -> bool {
        self.read_when() == ReadWhen::OptIn(OptIn::GatewayApi) && self != Kind::Gateway
    }

    /// Whether a configuration reads this kind.
    pub fn is_read(self, opt_ins: OptIns, ingress_class_filter: bool) -> bool {
        match self.read_when() {
            ReadWhen::Always => true,
            ReadWhen::IngressClassFilter => ingress_class_filter,
            ReadWhen::OptIn(o) => opt_ins.has(o),
        }
    }

    /// The kind an object's API group and kind name denote (any of its places' groups, any
    /// version).
    pub fn of(group: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind && k.places().iter().any(|p| p.group == group))
    }

    /// The kind an object's `apiVersion` (`group/version`) and kind name denote, when that is
    /// one of the kind's places (what `render` reads).
    pub fn at(api_version: &str, kind: &str) -> Option<Kind> {
        let (group, version) = api_version.rsplit_once('/')?;
        Kind::of(group, kind).filter(|k| {
            k.places()
                .iter()
                .any(|p| p.group == group && p.version == version)
        })
    }

    /// The first of its places that `served` lists it at (`None`: the cluster serves it at
    /// none of them, e.g. its CRD is not installed).
    pub fn served_place(self, served: &Served) -> Option<Place> {
        self.places()
            .iter()
            .copied()
            .find(|p| served.has(p.group, p.version, self.plural()))
    }
}

/// One place a kind may be served at: an API group and version (the resource name is the
/// kind's, the same at each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub group: &'static str,
    pub version: &'static str,
}

impl Place {
    pub const fn new(group: &'static str, version: &'static str) -> Place {
        Place { group, version }
    }

    /// `group/version`, as an object's `apiVersion` and an Event's `regarding` spell it.
    pub fn api_version(self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.group, self.version)
    }
}

/// The resources a cluster serves, as its discovery documents list them: (group, version,
/// resource plural) for each group version asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served(BTreeSet<(String, String, String)>);

impl Served {
    /// Notes that `group/version` serves `plural`.
    pub fn insert(&mut self, group: &str, version: &str, plural: &str) {
        self.0
            .insert((group.to_string(), version.to_string(), plural.to_string()));
    }

    /// Notes what `place`'s discovery document (`GET /apis/{group}/{version}`) lists.
    pub fn add(&mut self, place: Place, document: &APIResourceList) {
        for r in &document.resources {
            self.insert(place.group, place.version, &r.name);
        }
    }

    pub fn has(&self, group: &str, version: &str, plural: &str) -> bool {
        self.0
            .contains(&(group.to_string(), version.to_string(), plural.to_string()))
    }
}

/// The group versions whose discovery documents say where `kinds` are read: each of their
/// places once, for the kinds with more than one (a kind with one place is read there).
pub fn group_versions(kinds: &[Kind]) -> Vec<Place> {
    let several: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| k.places().len() > 1)
        .collect();
    places_of(&several)
}

/// Every place of `kinds`, each once, in table order.
pub fn places_of(kinds: &[Kind]) -> Vec<Place> {
    let mut out: Vec<Place> = Vec::new();
    for p in kinds.iter().flat_map(|k| k.places()) {
        if !out.contains(p) {
            out.push(*p);
        }
    }
    out
}

/// The source objects, owned, by kind (`Objects::sources` borrows them, in `model`).
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub ingresses: Vec<Ingress>,
    pub ingress_classes: Vec<IngressClass>,
    pub gateways: Vec<Gateway>,
    pub http_routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<GrpcRoute>,
    pub tls_routes: Vec<TlsRoute>,
    pub ingress_routes: Vec<IngressRoute>,
    pub ingress_route_tcps: Vec<IngressRouteTcp>,
    pub http_proxies: Vec<HttpProxy>,
    pub istio_gateways: Vec<IstioGateway>,
}

/// The objects to read, by kind, borrowed: so the controller can pass its cache entries and
/// `render` its parsed manifests without copying. The same fields as [`Objects`].
#[derive(Clone, Debug, Default)]
pub struct Sources<'a> {
    pub ingresses: Vec<&'a Ingress>,
    pub ingress_classes: Vec<&'a IngressClass>,
    pub gateways: Vec<&'a Gateway>,
    pub http_routes: Vec<&'a HttpRoute>,
    pub grpc_routes: Vec<&'a GrpcRoute>,
    pub tls_routes: Vec<&'a TlsRoute>,
    pub ingress_routes: Vec<&'a IngressRoute>,
    pub ingress_route_tcps: Vec<&'a IngressRouteTcp>,
    pub http_proxies: Vec<&'a HttpProxy>,
    pub istio_gateways: Vec<&'a IstioGateway>,
}

/// A typed source object: its kind and its lists in [`Objects`] and [`Sources`].
pub trait SourceObject:
    kube::Resource<DynamicType = ()> + DeserializeOwned + Clone + Sized
{
    const KIND: Kind;
    fn list(objects: &Objects) -> &Vec<Self>;
    fn list_mut(objects: &mut Objects) -> &mut Vec<Self>;
    fn borrowed<'s, 'a>(sources: &'s Sources<'a>) -> &'s Vec<&'a Self>;
    fn borrowed_mut<'s, 'a>(sources: &'s mut Sources<'a>) -> &'s mut Vec<&'a Self>;
}

macro_rules! source_object {
    ($($ty:ty => $kind:ident, $field:ident;)*) => {$(
        impl SourceObject for $ty {
            const KIND: Kind = Kind::$kind;
            fn list(objects: &Objects) -> &Vec<Self> {
                &objects.$field
            }
            fn list_mut(objects: &mut Objects) -> &mut Vec<Self> {
                &mut objects.$field
            }
            fn borrowed<'s, 'a>(sources: &'s Sources<'a>) -> &'s Vec<&'a Self> {
                &sources.$field
            }
            fn borrowed_mut<'s, 'a>(sources: &'s mut Sources<'a>) -> &'s mut Vec<&'a Self> {
                &mut sources.$field
            }
        }
    )*};
}

source_object! {
    Ingress => Ingress, ingresses;
    IngressClass => IngressClass, ingress_classes;
    Gateway => Gateway, gateways;
    HttpRoute => HttpRoute, http_routes;
    GrpcRoute => GrpcRoute, grpc_routes;
    TlsRoute => TlsRoute, tls_routes;
    IngressRoute => TraefikIngressRoute, ingress_routes;
    IngressRouteTcp => TraefikIngressRouteTcp, ingress_route_tcps;
    HttpProxy => ContourHttpProxy, http_proxies;
    IstioGateway => IstioGateway, istio_gateways;
}

/// `kube::Resource` for a struct of the fields read of a kind without published Rust types,
/// from its row of the table (one place says its group, version and plural). Namespaced, as
/// each of these CRDs is.
macro_rules! crd_resource {
    ($($ty:ty => $kind:ident;)*) => {$(
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                Kind::$kind.as_str().into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                Kind::$kind.group().into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                Kind::$kind.version().into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                Kind::$kind.plural().into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    )*};
}

crd_resource! {
    IngressRoute => TraefikIngressRoute;
    IngressRouteTcp => TraefikIngressRouteTcp;
    HttpProxy => ContourHttpProxy;
    IstioGateway => IstioGateway;
}

/// A Gateway-API route kind as the attachment rule reads it: its `parentRefs` (group, kind,
/// namespace, name) and its hostnames. The generated types differ only by name, so one row
/// each below.
pub trait Route: SourceObject {
    fn parents(&self) -> impl Iterator<Item = (Option<&str>, Option<&str>, Option<&str>, &str)>;
    fn hostnames(&self) -> impl Iterator<Item = &String>;
}

macro_rules! route {
    ($($ty:ty => |$spec:ident| $hostnames:expr;)*) => {$(
        impl Route for $ty {
            fn parents(
                &self,
            ) -> impl Iterator<Item = (Option<&str>, Option<&str>, Option<&str>, &str)> {
                self.spec.parent_refs.iter().flatten().map(|p| {
                    (
                        p.group.as_deref(),
                        p.kind.as_deref(),
                        p.namespace.as_deref(),
                        p.name.as_str(),
                    )
                })
            }
            fn hostnames(&self) -> impl Iterator<Item = &String> {
                let $spec = &self.spec;
                $hostnames
            }
        }
    )*};
}

route! {
    HttpRoute => |s| s.hostnames.iter().flatten();
    GrpcRoute => |s| s.hostnames.iter().flatten();
    TlsRoute => |s| s.hostnames.iter();
}

/// Runs `$body` with the type alias `$t` set to the Rust type of the runtime kind `$kind`: the
/// one place a [`Kind`] value meets its type, so callers write one generic body instead of a
/// match with an arm per kind.
macro_rules! by_kind {
    ($kind:expr, $t:ident => $body:expr) => {{
        use $crate::controller::hostnames::kinds::Kind as K;
        match $kind {
            K::Ingress => {
                type $t = k8s_openapi::api::networking::v1::Ingress;
                $body
            }
            K::IngressClass => {
                type $t = k8s_openapi::api::networking::v1::IngressClass;
                $body
            }
            K::Gateway => {
                type $t = gateway_api::apis::standard::gateways::Gateway;
                $body
            }
            K::HttpRoute => {
                type $t = gateway_api::apis::standard::httproutes::HttpRoute;
                $body
            }
            K::GrpcRoute => {
                type $t = gateway_api::apis::standard::grpcroutes::GrpcRoute;
                $body
            }
            K::TlsRoute => {
                type $t = gateway_api::apis::standard::tlsroutes::TlsRoute;
                $body
            }
            K::TraefikIngressRoute => {
                type $t = $crate::controller::hostnames::traefik::IngressRoute;
                $body
            }
            K::TraefikIngressRouteTcp => {
                type $t = $crate::controller::hostnames::traefik::IngressRouteTcp;
                $body
            }
            K::ContourHttpProxy => {
                type $t = $crate::controller::hostnames::contour::HttpProxy;
                $body
            }
            K::IstioGateway => {
                type $t = $crate::controller::hostnames::istio::IstioGateway;
                $body
            }
        }
    }};
}
pub(crate) use by_kind;

impl Objects {
    /// Borrowed, as [`desired`](super::desired) takes them.
    pub fn sources(&self) -> Sources<'_> {
        let mut s = Sources::default();
        for kind in Kind::ALL {
            by_kind!(kind, T => *T::borrowed_mut(&mut s) = T::list(self).iter().collect());
        }
        s
    }

    pub fn append(&mut self, other: &mut Objects) {
        for kind in Kind::ALL {
            by_kind!(kind, T => T::list_mut(self).append(T::list_mut(other)));
        }
    }

    /// How many objects of `kind` there are.
    pub fn count(&self, kind: Kind) -> usize {
        by_kind!(kind, T => T::list(self).len())
    }

    /// Adds one object, without its `managedFields` (never read, often most of the object).
    pub fn push<T: SourceObject>(&mut self, mut object: T) {
        object.meta_mut().managed_fields = None;
        T::list_mut(self).push(object);
    }

    /// Adds one object of `kind` from its JSON text.
    pub fn push_json(&mut self, kind: Kind, text: &str) -> serde_json::Result<()> {
        by_kind!(kind, T => {
            self.push::<T>(serde_json::from_str(text)?);
            Ok(())
        })
    }

    /// Adds one object of `kind` from a JSON value.
    pub fn push_value(&mut self, kind: Kind, value: serde_json::Value) -> serde_json::Result<()> {
        by_kind!(kind, T => {
            self.push::<T>(serde_json::from_value(value)?);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        for (kind, name, resource, api_version) in [
            (
                Kind::Ingress,
                "Ingress",
                "ingresses.networking.k8s.io",
                "networking.k8s.io/v1",
            ),
            (
                Kind::IngressClass,
                "IngressClass",
                "ingressclasses.networking.k8s.io",
                "networking.k8s.io/v1",
            ),
            (
                Kind::HttpRoute,
                "HTTPRoute",
                "httproutes.gateway.networking.k8s.io",
                "gateway.networking.k8s.io/v1",
            ),
            (
                Kind::TlsRoute,
                "TLSRoute",
                "tlsroutes.gateway.networking.k8s.io",
                "gateway.networking.k8s.io/v1",
            ),
        ] {
            assert_eq!(kind.as_str(), name);
            assert_eq!(kind.resource(), resource);
            assert_eq!(kind.api_version(), api_version);
            assert_eq!(Kind::of(kind.group(), name), Some(kind));
        }
        assert_eq!(Kind::of("extensions", "Ingress"), None);
        for kind in Kind::ALL {
            assert_eq!(
                kind.resource(),
                format!("{}.{}", kind.plural(), kind.group())
            );
        }
        let read = |o, c| {
            Kind::ALL
                .into_iter()
                .filter(|k| k.is_read(o, c))
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
        };
        let none = OptIns::default();
        assert_eq!(read(none, false), ["Ingress"]);
        assert_eq!(read(none, true), ["Ingress", "IngressClass"]);
        let only = |o: OptIn| {
            let mut v = OptIns::default();
            for x in OptIn::ALL {
                assert!(!v.has(x));
            }
            match o {
                OptIn::GatewayApi => v.gateway_api = true,
                OptIn::TraefikIngressRoutes => v.traefik_ingressroutes = true,
                OptIn::ContourHttpProxies => v.contour_httpproxies = true,
                OptIn::IstioGateways => v.istio_gateways = true,
            }
            assert!(v.has(o));
            v
        };
        assert_eq!(
            read(only(OptIn::GatewayApi), false),
            ["Ingress", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute"]
        );
        assert_eq!(
            read(only(OptIn::TraefikIngressRoutes), false),
            ["Ingress", "IngressRoute", "IngressRouteTCP"]
        );
        assert_eq!(
            read(only(OptIn::ContourHttpProxies), false),
            ["Ingress", "HTTPProxy"]
        );
        // Named apart from the Gateway API's Gateway.
        assert_eq!(
            read(only(OptIn::IstioGateways), false),
            ["Ingress", "Gateway.networking.istio.io"]
        );
        assert_eq!(read(OptIns::EVERY, true).len(), Kind::ALL.len());
        for (kind, api_version) in [
            (Kind::TraefikIngressRoute, "traefik.io/v1alpha1"),
            (Kind::TraefikIngressRouteTcp, "traefik.io/v1alpha1"),
            (Kind::ContourHttpProxy, "projectcontour.io/v1"),
            (Kind::IstioGateway, "networking.istio.io/v1"),
        ] {
            assert_eq!(kind.api_version(), api_version);
            assert!(kind.is_crd() && !kind.is_route());
            assert_eq!(Kind::at(api_version, kind.as_str()), Some(kind));
            assert_eq!(Kind::of(kind.group(), kind.as_str()), Some(kind));
            // The Resource made from the row says the same.
            by_kind!(kind, T => {
                assert_eq!(<T as kube::Resource>::api_version(&()), api_version);
                assert_eq!(<T as kube::Resource>::plural(&()), kind.plural());
            });
        }
    }

    /// The place read is the first the cluster serves, whatever else it serves; none served,
    /// none chosen.
    #[test]
    fn the_first_place_served_is_read() {
        let served = |list: &[(&str, &str, &str)]| {
            let mut s = Served::default();
            for (g, v, r) in list {
                s.insert(g, v, r);
            }
            s
        };
        const ISTIO: &str = "networking.istio.io";
        const OLD_TRAEFIK: &str = "traefik.containo.us";
        for (kind, cluster, want) in [
            // Istio 1.22 and later serve all three; v1 is read.
            (
                Kind::IstioGateway,
                vec![
                    (ISTIO, "v1alpha3", "gateways"),
                    (ISTIO, "v1beta1", "gateways"),
                    (ISTIO, "v1", "gateways"),
                ],
                Some((ISTIO, "v1")),
            ),
            // Istio 1.20: no v1.
            (
                Kind::IstioGateway,
                vec![
                    (ISTIO, "v1alpha3", "gateways"),
                    (ISTIO, "v1beta1", "gateways"),
                ],
                Some((ISTIO, "v1beta1")),
            ),
            (
                Kind::IstioGateway,
                vec![(ISTIO, "v1alpha3", "gateways")],
                Some((ISTIO, "v1alpha3")),
            ),
            // The group version is served (other Istio kinds), but not this resource in it.
            (
                Kind::IstioGateway,
                vec![
                    (ISTIO, "v1", "virtualservices"),
                    (ISTIO, "v1", "gateways/status"),
                    (ISTIO, "v1beta1", "gateways"),
                ],
                Some((ISTIO, "v1beta1")),
            ),
            // The Gateway API's Gateway is another kind of the same plural.
            (
                Kind::IstioGateway,
                vec![(GATEWAY_GROUP, "v1", "gateways")],
                None,
            ),
            (Kind::IstioGateway, vec![], None),
            // Traefik v2 before 2.10, and during the move to v3 (both groups).
            (
                Kind::TraefikIngressRoute,
                vec![(OLD_TRAEFIK, "v1alpha1", "ingressroutes")],
                Some((OLD_TRAEFIK, "v1alpha1")),
            ),
            (
                Kind::TraefikIngressRoute,
                vec![
                    (OLD_TRAEFIK, "v1alpha1", "ingressroutes"),
                    ("traefik.io", "v1alpha1", "ingressroutes"),
                ],
                Some(("traefik.io", "v1alpha1")),
            ),
            (
                Kind::TraefikIngressRouteTcp,
                vec![(OLD_TRAEFIK, "v1alpha1", "ingressroutes")],
                None,
            ),
            (
                Kind::HttpRoute,
                vec![(GATEWAY_GROUP, "v1beta1", "httproutes")],
                Some((GATEWAY_GROUP, "v1beta1")),
            ),
            (
                Kind::TlsRoute,
                vec![
                    (GATEWAY_GROUP, "v1alpha2", "tlsroutes"),
                    (GATEWAY_GROUP, "v1alpha3", "tlsroutes"),
                ],
                Some((GATEWAY_GROUP, "v1alpha3")),
            ),
            // Not one of its places.
            (
                Kind::ContourHttpProxy,
                vec![("projectcontour.io", "v1beta1", "httpproxies")],
                None,
            ),
        ] {
            let got = kind.served_place(&served(&cluster));
            assert_eq!(
                got.map(|p| (p.group, p.version)),
                want,
                "{kind} in {cluster:?}"
            );
        }
    }

    #[test]
    fn objects_are_known_at_each_place() {
        for (api_version, kind, want) in [
            (
                "traefik.containo.us/v1alpha1",
                "IngressRoute",
                Some(Kind::TraefikIngressRoute),
            ),
            (
                "traefik.io/v1alpha1",
                "IngressRouteTCP",
                Some(Kind::TraefikIngressRouteTcp),
            ),
            ("traefik.io/v1alpha2", "IngressRoute", None),
            (
                "networking.istio.io/v1alpha3",
                "Gateway",
                Some(Kind::IstioGateway),
            ),
            (
                "gateway.networking.k8s.io/v1beta1",
                "Gateway",
                Some(Kind::Gateway),
            ),
            (
                "gateway.networking.k8s.io/v1alpha3",
                "TLSRoute",
                Some(Kind::TlsRoute),
            ),
            ("gateway.networking.k8s.io/v1alpha3", "HTTPRoute", None),
            ("networking.k8s.io/v1beta1", "Ingress", None),
            ("v1", "Ingress", None),
        ] {
            assert_eq!(Kind::at(api_version, kind), want, "{api_version} {kind}");
        }
        assert_eq!(
            group_versions(&[
                Kind::Ingress,
                Kind::TraefikIngressRoute,
                Kind::TraefikIngressRouteTcp
            ]),
            [
                Place::new("traefik.io", "v1alpha1"),
                Place::new("traefik.containo.us", "v1alpha1")
            ]
        );
        assert_eq!(group_versions(&[Kind::Gateway, Kind::TlsRoute]).len(), 4);
        assert!(group_versions(&[Kind::Ingress, Kind::ContourHttpProxy]).is_empty());
    }

    #[test]
    fn objects_by_kind() {
        let mut o = Objects::default();
        o.push_json(
            Kind::Ingress,
            r#"{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"a"}}"#,
        )
        .unwrap();
        o.push_value(
            Kind::HttpRoute,
            serde_json::json!({"metadata": {"name": "r"}, "spec": {}}),
        )
        .unwrap();
        assert!(o
            .push_value(Kind::Gateway, serde_json::json!({"spec": 1}))
            .is_err());
        o.push_value(
            Kind::TraefikIngressRoute,
            serde_json::json!({"metadata": {"name": "t"}, "spec": {"routes": [{"match": "Host(`a.example.com`)"}]}}),
        )
        .unwrap();
        let counts: Vec<usize> = Kind::ALL.into_iter().map(|k| o.count(k)).collect();
        assert_eq!(counts, [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]);
        let mut all = Objects::default();
        all.append(&mut o);
        assert_eq!(all.sources().ingresses.len(), 1);
        assert_eq!(all.sources().http_routes.len(), 1);
        assert_eq!(o.count(Kind::Ingress), 0);
    }
}
