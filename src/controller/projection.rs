//! What the watch caches keep of each source object: a projection, read straight from the
//! API's JSON. Each kind has a view type that declares only the fields the hostname rules read
//! (name, namespace, uid, resourceVersion, deletionTimestamp, the four annotations below, and
//! per kind the class and host fields), so serde skips everything else as it reads: the
//! `managedFields`, kubectl's last-applied-configuration (a copy of the whole object), labels,
//! `http` paths, `secretName`s and status are never allocated. The view is then turned into the
//! kind's typed object with only those fields set, which is what `hostnames::desired` (shared
//! with `render` and `doctor`) takes.
//!
//! [`Projected`] is the watch's item type: the error boundary of kube's `DeserializeGuard`
//! (one object that does not read is reported and left out, not the whole list), without its
//! cost: `DeserializeGuard` buffers every object into a `serde_value::Value`, clones that
//! buffer and then reads the whole typed object from it, so a list page of 500 Ingresses
//! briefly held each object three times over, managed fields and all. Here the metadata is read
//! straight into [`MetaView`] (the API server validates it, so it reads), and only the `spec`
//! is buffered (as a `serde_json::Value`, from any deserializer: a watch event whose `object`
//! precedes its `type` reaches us through serde's own buffer) and then read into the kind's
//! spec view, which is where a field of the wrong type shows up. Pure: no I/O.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use gateway_api::apis::standard::gateways::{Gateway, GatewaySpec};
use gateway_api::apis::standard::grpcroutes::{GrpcRoute, GrpcRouteParentRefs, GrpcRouteSpec};
use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteParentRefs, HttpRouteSpec};
use gateway_api::apis::standard::tlsroutes::{TlsRoute, TlsRouteParentRefs, TlsRouteSpec};
use k8s_openapi::api::networking::v1::{
    Ingress, IngressClass, IngressClassSpec, IngressRule, IngressSpec, IngressTLS,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::error_boundary::InvalidObject;
use kube::core::ApiResource;
use kube::Resource;
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::hostnames::contour::{HttpProxy, HttpProxySpec};
use super::hostnames::istio::{IstioGateway, IstioGatewaySpec};
use super::hostnames::traefik::{IngressRoute, IngressRouteTcp, RoutesSpec};
use super::hostnames::{
    class::DEFAULT_CLASS_ANNOTATION, class::INGRESS_CLASS_ANNOTATION, model::IngressHosts,
    model::OPT_OUT_ANNOTATION, targets::PRIORITY_ANNOTATION,
};

/// The annotations the hostname rules read; every other annotation is skipped unread.
pub const READ_ANNOTATIONS: [&str; 4] = [
    OPT_OUT_ANNOTATION,
    PRIORITY_ANNOTATION,
    INGRESS_CLASS_ANNOTATION,
    DEFAULT_CLASS_ANNOTATION,
];

/// A kind the watch caches hold as a projection.
pub trait Project: Resource + Sized {
    /// The spec's fields read, as they come from the API (read from `null` when the object
    /// has no spec).
    type Spec: DeserializeOwned;
    /// The typed object with only the read fields set.
    fn project(metadata: ObjectMeta, spec: Self::Spec) -> Self;
    /// Drops what this configuration never reads (after the projection, which cannot see the
    /// flags): by default nothing.
    fn narrow(&mut self, _ingress_hosts: IngressHosts) {}
}

/// The metadata fields read.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MetaView {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "read_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

impl From<MetaView> for ObjectMeta {
    fn from(m: MetaView) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            deletion_timestamp: m.deletion_timestamp,
            annotations: m.annotations,
            ..ObjectMeta::default()
        }
    }
}

/// Only [`READ_ANNOTATIONS`]: the values of the others (the last-applied-configuration above
/// all) are skipped without being copied. `None` when none of them is present.
fn read_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if READ_ANNOTATIONS.contains(&key.as_str()) {
                    kept.insert(key, map.next_value::<String>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok((!kept.is_empty()).then_some(kept))
        }
    }
    d.deserialize_option(Annotations)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpecView {
    ingress_class_name: Option<String>,
    tls: Option<Vec<IngressTlsView>>,
    rules: Option<Vec<IngressRuleView>>,
}

#[derive(Deserialize)]
pub struct IngressTlsView {
    hosts: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub struct IngressRuleView {
    host: Option<String>,
}

impl Project for Ingress {
    type Spec = Option<IngressSpecView>;
    fn project(metadata: ObjectMeta, spec: Self::Spec) -> Self {
        Ingress {
            metadata,
            spec: spec.map(|s| IngressSpec {
                ingress_class_name: s.ingress_class_name,
                tls: s.tls.map(|tls| {
                    tls.into_iter()
                        .map(|t| IngressTLS {
                            hosts: t.hosts,
                            secret_name: None,
                        })
                        .collect()
                }),
                rules: s.rules.map(|rules| {
                    rules
                        .into_iter()
                        .map(|r| IngressRule {
                            host: r.host,
                            http: None,
                        })
                        .collect()
                }),
                default_backend: None,
            }),
            status: None,
        }
    }

    /// The rules' hosts count only with `--ingress-hosts all`.
    fn narrow(&mut self, ingress_hosts: IngressHosts) {
        if ingress_hosts == IngressHosts::Tls {
            if let Some(s) = self.spec.as_mut() {
                s.rules = None;
            }
        }
    }
}

/// An IngressClass's `spec.controller` (who serves the class, for `ingress-class-controller=`);
/// its `parameters` are skipped unread.
#[derive(Deserialize)]
pub struct IngressClassSpecView {
    controller: Option<String>,
}

impl Project for IngressClass {
    type Spec = Option<IngressClassSpecView>;
    fn project(metadata: ObjectMeta, spec: Option<IngressClassSpecView>) -> Self {
        IngressClass {
            metadata,
            spec: spec
                .and_then(|s| s.controller)
                .map(|controller| IngressClassSpec {
                    controller: Some(controller),
                    parameters: None,
                }),
        }
    }
}

impl Project for Gateway {
    type Spec = GatewaySpec;
    fn project(metadata: ObjectMeta, spec: GatewaySpec) -> Self {
        Gateway {
            metadata,
            spec,
            status: None,
        }
    }
}

/// A route's spec without its rules (never read; most of a route).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpecView<P> {
    hostnames: Option<Vec<String>>,
    parent_refs: Option<Vec<P>>,
}

impl Project for HttpRoute {
    type Spec = RouteSpecView<HttpRouteParentRefs>;
    fn project(metadata: ObjectMeta, spec: Self::Spec) -> Self {
        HttpRoute {
            metadata,
            spec: HttpRouteSpec {
                hostnames: spec.hostnames,
                parent_refs: spec.parent_refs,
                rules: None,
            },
            status: None,
        }
    }
}

impl Project for GrpcRoute {
    type Spec = RouteSpecView<GrpcRouteParentRefs>;
    fn project(metadata: ObjectMeta, spec: Self::Spec) -> Self {
        GrpcRoute {
            metadata,
            spec: GrpcRouteSpec {
                hostnames: spec.hostnames,
                parent_refs: spec.parent_refs,
                rules: None,
            },
            status: None,
        }
    }
}

/// TLSRoute's `hostnames`: required since v1alpha3, optional in v1alpha2 (read as none).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRouteSpecView {
    #[serde(default)]
    hostnames: Vec<String>,
    parent_refs: Option<Vec<TlsRouteParentRefs>>,
}

impl Project for TlsRoute {
    type Spec = TlsRouteSpecView;
    fn project(metadata: ObjectMeta, spec: TlsRouteSpecView) -> Self {
        TlsRoute {
            metadata,
            spec: TlsRouteSpec {
                hostnames: spec.hostnames,
                parent_refs: spec.parent_refs,
                rules: Vec::new(),
            },
            status: None,
        }
    }
}

/// Traefik's, Contour's and Istio's kinds are already structs of the read fields alone: their
/// spec is read as it is (an absent spec as the empty one).
macro_rules! project_as_read {
    ($($ty:ty => $spec:ty;)*) => {$(
        impl Project for $ty {
            type Spec = Option<$spec>;
            fn project(metadata: ObjectMeta, spec: Self::Spec) -> Self {
                Self {
                    metadata,
                    spec: spec.unwrap_or_default(),
                }
            }
        }
    )*};
}

project_as_read! {
    IngressRoute => RoutesSpec;
    IngressRouteTcp => RoutesSpec;
    HttpProxy => HttpProxySpec;
    IstioGateway => IstioGatewaySpec;
}

/// A watched object as projected, or why it could not be read (with its metadata, for the
/// report).
#[derive(Debug, Clone)]
pub struct Projected<K>(pub Result<K, InvalidObject>);

/// An object as read: the metadata fields read, and the spec buffered for the kind's view.
/// Every other top-level field (status above all) is skipped.
#[derive(Deserialize)]
struct Parts {
    #[serde(default)]
    metadata: MetaView,
    #[serde(default)]
    spec: serde_json::Value,
}

impl<'de, K: Project> Deserialize<'de> for Projected<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Parts { metadata, spec } = Parts::deserialize(d)?;
        let metadata = ObjectMeta::from(metadata);
        Ok(Projected(match serde_json::from_value::<K::Spec>(spec) {
            Ok(spec) => Ok(K::project(metadata, spec)),
            Err(e) => Err(InvalidObject {
                error: format!("spec: {e}"),
                metadata,
            }),
        }))
    }
}

/// Read at whichever place the cluster serves the kind ([`ApiResource`]: its group, version,
/// kind and plural), not at the typed kind's own: the fields read are the same at each.
impl<K: Resource> Resource for Projected<K> {
    type DynamicType = ApiResource;
    type Scope = K::Scope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.as_ref().map_or_else(|e| &e.metadata, K::meta)
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0
            .as_mut()
            .map_or_else(|e| &mut e.metadata, K::meta_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

    fn read<K: Project>(v: serde_json::Value) -> Projected<K> {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    #[test]
    fn an_ingress_keeps_only_what_is_read() {
        let mut ing: Ingress = read(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "a", "namespace": "web", "uid": "u-1", "resourceVersion": "7",
                "generation": 3, "creationTimestamp": "2026-11-30T08:12:44Z",
                "deletionTimestamp": "2026-12-01T00:00:00Z",
                "annotations": {
                    LAST_APPLIED: "{\"big\": true}",
                    "kubernetes.io/ingress.class": "nginx",
                    "ouroboros.io/hairpin": "false",
                    "ouroboros.io/priority": "5",
                    "cert-manager.io/cluster-issuer": "letsencrypt"
                },
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "labels": {"app": "a"},
                "finalizers": ["x"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "y"}]
            },
            "spec": {
                "ingressClassName": "nginx",
                "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
                "tls": [{"hosts": ["a.example.com", "b.example.com"], "secretName": "a-tls"}],
                "rules": [{"host": "a.example.com", "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}
                }]}}]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}
        }))
        .0
        .unwrap();
        assert_eq!(
            serde_json::to_value(&ing).unwrap(),
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {
                    "name": "a", "namespace": "web", "uid": "u-1", "resourceVersion": "7",
                    "deletionTimestamp": "2026-12-01T00:00:00Z",
                    "annotations": {
                        "kubernetes.io/ingress.class": "nginx",
                        "ouroboros.io/hairpin": "false",
                        "ouroboros.io/priority": "5"
                    }
                },
                "spec": {
                    "ingressClassName": "nginx",
                    "tls": [{"hosts": ["a.example.com", "b.example.com"]}],
                    "rules": [{"host": "a.example.com"}]
                }
            })
        );
        ing.narrow(IngressHosts::All);
        assert!(ing.spec.as_ref().unwrap().rules.is_some());
        ing.narrow(IngressHosts::Tls);
        assert_eq!(
            ing.spec.unwrap().rules,
            None,
            "TLS hosts only: rules unread"
        );
    }

    /// A watch event reaches the item through serde's buffer when `object` precedes `type`
    /// (the API server sends `type` first; a proxy may not): both orders read.
    #[test]
    fn watch_events_read_in_either_field_order() {
        use kube::api::WatchEvent;
        let object = json!({
            "metadata": {"name": "a", "resourceVersion": "3", "managedFields": [{"manager": "m"}]},
            "spec": {"tls": [{"hosts": ["a.example.com"]}]}
        });
        for text in [
            format!(r#"{{"type": "MODIFIED", "object": {object}}}"#),
            format!(r#"{{"object": {object}, "type": "MODIFIED"}}"#),
        ] {
            let e: WatchEvent<Projected<Ingress>> = serde_json::from_str(&text).unwrap();
            let WatchEvent::Modified(Projected(Ok(ing))) = e else {
                panic!("{text}");
            };
            assert_eq!(ing.metadata.resource_version.as_deref(), Some("3"));
            assert_eq!(ing.metadata.managed_fields, None);
            let tls = ing.spec.unwrap().tls.unwrap();
            assert_eq!(tls[0].hosts.as_deref().unwrap(), ["a.example.com"]);
        }
    }

    #[test]
    fn no_read_annotation_means_none() {
        for annotations in [json!(null), json!({}), json!({LAST_APPLIED: "{}"})] {
            let ing: Ingress = read(json!({
                "metadata": {"name": "a", "annotations": annotations}
            }))
            .0
            .unwrap();
            assert_eq!(ing.metadata.annotations, None, "{annotations}");
            assert_eq!(ing.spec, None);
        }
    }

    #[test]
    fn a_field_read_of_the_wrong_type_is_an_unreadable_object_with_its_metadata() {
        let bad = read::<Ingress>(json!({
            "metadata": {"name": "b", "namespace": "web", "resourceVersion": "9",
                         "managedFields": [{"manager": "m"}]},
            "spec": {"tls": "not-a-list"}
        }))
        .0
        .unwrap_err();
        assert!(bad.error.contains("invalid type"), "{}", bad.error);
        assert_eq!(bad.metadata.name.as_deref(), Some("b"));
        assert_eq!(bad.metadata.namespace.as_deref(), Some("web"));
        assert_eq!(bad.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(bad.metadata.managed_fields, None);
        // A field never read may be anything.
        let ok = read::<Ingress>(json!({
            "metadata": {"name": "c", "labels": "not-a-map"},
            "spec": {"defaultBackend": 1, "tls": [{"hosts": ["c.example.com"], "secretName": 2}]},
            "status": "odd"
        }))
        .0
        .unwrap();
        assert_eq!(
            ok.spec.unwrap().tls.unwrap()[0].hosts.as_deref(),
            Some(&["c.example.com".to_string()][..])
        );
    }

    #[test]
    fn routes_and_gateways_keep_hostnames_and_parents_only() {
        let route: HttpRoute = read(json!({
            "metadata": {"name": "r", "namespace": "web", "labels": {"a": "b"}},
            "spec": {
                "hostnames": ["r.example.com"],
                "parentRefs": [{"name": "gw", "namespace": "infra"}],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
            },
            "status": {"parents": []}
        }))
        .0
        .unwrap();
        assert_eq!(
            serde_json::to_value(&route.spec).unwrap(),
            json!({"hostnames": ["r.example.com"], "parentRefs": [{"name": "gw", "namespace": "infra"}]})
        );
        assert!(route.status.is_none());
        let tls: TlsRoute = read(json!({
            "metadata": {"name": "t"},
            "spec": {"hostnames": ["t.example.com"], "rules": [{"backendRefs": [{"name": "x", "port": 443}]}]}
        }))
        .0
        .unwrap();
        assert_eq!(tls.spec.hostnames, ["t.example.com"]);
        assert!(tls.spec.rules.is_empty());
        // v1alpha2 (still served by older installs) has no required hostnames: none read.
        let old = read::<TlsRoute>(json!({"metadata": {"name": "t"}, "spec": {}}));
        assert!(old.0.unwrap().spec.hostnames.is_empty());
        assert!(
            read::<TlsRoute>(json!({"metadata": {"name": "t"}, "spec": {"hostnames": "x"}}))
                .0
                .is_err()
        );
        let gw: Gateway = read(json!({
            "metadata": {"name": "g", "annotations": {"ouroboros.io/priority": "1", "x": "y"}},
            "spec": {"gatewayClassName": "eg", "listeners": [
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "g.example.com"}
            ]},
            "status": {"conditions": []}
        }))
        .0
        .unwrap();
        assert_eq!(gw.spec.gateway_class_name, "eg");
        assert_eq!(
            gw.spec.listeners[0].hostname.as_deref(),
            Some("g.example.com")
        );
        assert_eq!(
            gw.metadata.annotations,
            Some([("ouroboros.io/priority".to_string(), "1".to_string())].into())
        );
        let class: IngressClass = read(json!({
            "metadata": {"name": "nginx", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "spec": {
                "controller": "k8s.io/ingress-nginx",
                "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters",
                               "name": "external-lb"}
            }
        }))
        .0
        .unwrap();
        // spec.controller says who serves the class (ingress-class-controller=); the
        // parameters are never read.
        assert_eq!(
            class.spec,
            Some(IngressClassSpec {
                controller: Some("k8s.io/ingress-nginx".into()),
                parameters: None,
            })
        );
        let bare: IngressClass = read(json!({"metadata": {"name": "bare"}})).0.unwrap();
        assert_eq!(bare.spec, None);
        assert_eq!(
            class.metadata.annotations,
            Some([(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())].into())
        );
    }

    /// The CRD kinds without published types read through the same projection: the read
    /// fields kept, an absent spec read as empty, a field of the wrong type an unreadable
    /// object.
    #[test]
    fn crd_kinds_keep_their_host_fields() {
        let r: IngressRoute = read(json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
            "metadata": {"name": "shop", "namespace": "web",
                         "annotations": {LAST_APPLIED: "{}", OPT_OUT_ANNOTATION: "false"}},
            "spec": {"entryPoints": ["websecure"], "tls": {"secretName": "c"},
                     "routes": [{"match": "Host(`shop.example.com`)", "kind": "Rule",
                                 "middlewares": [{"name": "m"}]}]}
        }))
        .0
        .unwrap();
        assert_eq!(r.spec.hosts().names, ["shop.example.com"]);
        assert_eq!(
            r.metadata.annotations,
            Some([(OPT_OUT_ANNOTATION.to_string(), "false".to_string())].into())
        );
        let bare: HttpProxy = read(json!({"metadata": {"name": "child"}})).0.unwrap();
        assert!(bare.spec.hosts().is_empty());
        let gw: IstioGateway = read(json!({
            "metadata": {"name": "public", "namespace": "istio-system"},
            "spec": {"servers": [{"port": {"number": 443}, "hosts": ["./app.example.com"]}]}
        }))
        .0
        .unwrap();
        assert_eq!(gw.spec.hosts(), ["app.example.com"]);
        let bad = read::<IngressRouteTcp>(json!({
            "metadata": {"name": "pg", "namespace": "db"},
            "spec": {"routes": [{"match": 5}]}
        }));
        let e = bad.0.unwrap_err();
        assert!(e.error.contains("spec"), "{}", e.error);
        assert_eq!(e.metadata.name.as_deref(), Some("pg"));
    }
}
