//! The source kinds, listed once: what each one is on the API (group, version, resource), when
//! the controller reads it, and the owned ([`Objects`]) and borrowed ([`Sources`]) containers
//! every reader fills (`render` from manifest files, `doctor` from list calls). The watches
//! (`controller::sources`), RBAC rules (`controller::rbac`), CRD checks, manifest recognition
//! and the counts `render` logs all iterate [`Kind::ALL`]. A new kind is a row here, plus the
//! hostname rules that read it (`hostnames::compute`), the watch cache's projection
//! (`controller::projection`) and store (`controller::sources`), and the chart's RBAC:
//! docs/architecture.md lists them.

use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde::de::DeserializeOwned;

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
}

/// When a kind is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadWhen {
    Always,
    /// With `--ingress-class`, `--ingress-class-controller` or a `--target` mapping by class
    /// or controller (to find the default class and each class's `spec.controller`).
    IngressClassFilter,
    /// With `--gateway-api`; the kind is a CRD that may be absent.
    GatewayApi,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Ingress,
        Kind::IngressClass,
        Kind::Gateway,
        Kind::HttpRoute,
        Kind::GrpcRoute,
        Kind::TlsRoute,
    ];

    pub fn as_str(self) -> &'static str {
        self.row().0
    }

    /// The API group.
    pub fn group(self) -> &'static str {
        self.row().1
    }

    /// The resource (plural) name, as RBAC rules and URLs spell it.
    pub fn plural(self) -> &'static str {
        self.row().2
    }

    pub fn read_when(self) -> ReadWhen {
        self.row().3
    }

    /// Why the controller reads it (the RBAC rule's reason).
    pub fn purpose(self) -> &'static str {
        match self.read_when() {
            ReadWhen::Always => "read Ingress TLS hosts",
            ReadWhen::IngressClassFilter => {
                "find the default IngressClass and who serves each class (spec.controller) for \
                 --ingress-class and the IngressClass mappings"
            }
            ReadWhen::GatewayApi => "read Gateway-API hostnames",
        }
    }

    /// `kind`, `group`, `plural`, when read: the table.
    fn row(self) -> (&'static str, &'static str, &'static str, ReadWhen) {
        use ReadWhen::*;
        const NET: &str = "networking.k8s.io";
        const GW: &str = GATEWAY_GROUP;
        match self {
            Kind::Ingress => ("Ingress", NET, "ingresses", Always),
            Kind::IngressClass => ("IngressClass", NET, "ingressclasses", IngressClassFilter),
            Kind::Gateway => ("Gateway", GW, "gateways", GatewayApi),
            Kind::HttpRoute => ("HTTPRoute", GW, "httproutes", GatewayApi),
            Kind::GrpcRoute => ("GRPCRoute", GW, "grpcroutes", GatewayApi),
            Kind::TlsRoute => ("TLSRoute", GW, "tlsroutes", GatewayApi),
        }
    }

    /// The `apiVersion` the controller reads and Events name (`group/v1`).
    pub fn api_version(self) -> String {
        format!("{}/v1", self.group())
    }

    /// `plural.group`: the CRD's name for the Gateway-API kinds, and the resource name
    /// `doctor` lists.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Ingress => "ingresses.networking.k8s.io",
            Kind::IngressClass => "ingressclasses.networking.k8s.io",
            Kind::Gateway => "gateways.gateway.networking.k8s.io",
            Kind::HttpRoute => "httproutes.gateway.networking.k8s.io",
            Kind::GrpcRoute => "grpcroutes.gateway.networking.k8s.io",
            Kind::TlsRoute => "tlsroutes.gateway.networking.k8s.io",
        }
    }

    /// Whether objects of this kind are Gateway-API routes (attached to Gateways by
    /// `parentRefs`, read through [`Route`]).
    pub fn is_route(self) -> bool {
        self.read_when() == ReadWhen::GatewayApi && self != Kind::Gateway
    }

    /// Whether a configuration reads this kind.
    pub fn is_read(self, gateway_api: bool, ingress_class_filter: bool) -> bool {
        match self.read_when() {
            ReadWhen::Always => true,
            ReadWhen::IngressClassFilter => ingress_class_filter,
            ReadWhen::GatewayApi => gateway_api,
        }
    }

    /// The kind an object's API group and kind name denote (any version).
    pub fn of(group: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.group() == group && k.as_str() == kind)
    }
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
/// six-arm match.
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
        let read = |g, c| {
            Kind::ALL
                .into_iter()
                .filter(|k| k.is_read(g, c))
                .map(Kind::as_str)
                .collect::<Vec<_>>()
        };
        assert_eq!(read(false, false), ["Ingress"]);
        assert_eq!(read(false, true), ["Ingress", "IngressClass"]);
        assert_eq!(
            read(true, false),
            ["Ingress", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute"]
        );
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
        let counts: Vec<usize> = Kind::ALL.into_iter().map(|k| o.count(k)).collect();
        assert_eq!(counts, [1, 0, 0, 1, 0, 0]);
        let mut all = Objects::default();
        all.append(&mut o);
        assert_eq!(all.sources().ingresses.len(), 1);
        assert_eq!(all.sources().http_routes.len(), 1);
        assert_eq!(o.count(Kind::Ingress), 0);
    }
}
