//! Tests of [`desired`](super::desired): every source kind, the class filters, Gateway
//! attachment, deletions, rejections and origins, on objects built from JSON.

use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{json, Value};
use std::collections::BTreeSet;

use super::class::{DEFAULT_CLASS_ANNOTATION, INGRESS_CLASS_ANNOTATION};
use super::kinds::OptIns;
use super::model::Excluded;
use super::targets::{parse_target, PRIORITY_ANNOTATION};
use super::*;
use crate::hostname::{Hostname, Rejection};

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
            opt_ins: OptIns::GATEWAY_API,
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

        assert_class_filter(i, &ing, &class_refs, *want);
    }
}

/// The --ingress-class filter keeps exactly the Ingresses whose resolved class (`want`) it
/// names, and says why it left the others out.
fn assert_class_filter(i: usize, ing: &Ingress, class_refs: &[&IngressClass], want: Option<&str>) {
    for filter in [None, Some(""), Some("a"), Some("b"), Some("d"), Some("x")] {
        let d = desired(
            &Sources {
                ingresses: vec![ing],
                ingress_classes: class_refs.to_vec(),
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
            Some(f) => want == Some(f),
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

/// Without a class filter, the classes of the Ingresses that name hosts are listed when there
/// are several (render, the controller and doctor say so); one class, a filter, or a class
/// whose Ingresses name no host list none.
#[test]
fn several_unfiltered_classes_are_listed() {
    let a = ingress("a", Some("nginx"), None, &["a.example.com"]);
    let b = ingress("b", None, Some("traefik"), &["b.example.com"]);
    let c = ingress("c", None, None, &["c.example.com"]);
    let empty = ingress("e", Some("haproxy"), None, &[]);
    let by_class = Filters {
        ingress_class: Some("nginx".into()),
        ..Default::default()
    };
    for (ingresses, filters, want) in [
        (
            vec![&a, &b, &c],
            Filters::default(),
            vec!["(none)", "nginx", "traefik"],
        ),
        (vec![&a, &empty], Filters::default(), vec![]),
        (vec![&c, &c], Filters::default(), vec![]),
        (vec![&a, &b], by_class, vec![]),
    ] {
        let d = desired(
            &Sources {
                ingresses,
                ..Default::default()
            },
            &filters,
            &policy(),
        );
        assert_eq!(d.unfiltered_classes, want, "{filters:?}");
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
            opt_ins: OptIns::GATEWAY_API,
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
            opt_ins: OptIns::GATEWAY_API,
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
#[allow(
    clippy::too_many_lines,
    reason = "a table of parentRefs, each with whether it attaches the route"
)]
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
                opt_ins: OptIns::GATEWAY_API,
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
                opt_ins: OptIns::GATEWAY_API,
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
            opt_ins: OptIns::GATEWAY_API,
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
            opt_ins: OptIns::GATEWAY_API,
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

/// The sync engine's variant: the same result without the origins it never reads.
#[test]
fn without_origins_is_the_same_set() {
    let a = ingress("a", None, None, &["shared.example.com", "a.example.com"]);
    let b = ingress(
        "b",
        None,
        None,
        &["SHARED.example.com.", "bad_name.example.com"],
    );
    let gw = gateway(
        "gw",
        "g",
        "c",
        &["shared.example.com", "g.example.com"],
        false,
    );
    let sources = Sources {
        ingresses: vec![&a, &b],
        gateways: vec![&gw],
        ..Default::default()
    };
    let filters = Filters {
        opt_ins: OptIns::GATEWAY_API,
        ..Default::default()
    };
    let full = desired(&sources, &filters, &policy());
    let lean = desired_without_origins(&sources, &filters, &policy());
    assert!(lean.origins.is_empty());
    assert_eq!(full.origins.len(), 3);
    assert_eq!(
        Desired {
            origins: Default::default(),
            ..full
        },
        lean
    );
}

fn annotate<T: kube::Resource>(mut o: T, key: &str, value: &str) -> T {
    o.meta_mut()
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    o
}

fn in_namespace<T: kube::Resource>(mut o: T, ns: &str) -> T {
    o.meta_mut().namespace = Some(ns.into());
    o
}

fn excluded(d: &Desired) -> Vec<String> {
    d.excluded
        .iter()
        .map(|e| format!("{}: {}", e.object, e.why))
        .collect()
}

#[test]
fn opt_out_annotation_on_ingress_gateway_and_route() {
    let out = annotate(
        ingress("out", None, None, &["out.example.com"]),
        OPT_OUT_ANNOTATION,
        " False ",
    );
    let kept = annotate(
        ingress("kept", None, None, &["kept.example.com"]),
        OPT_OUT_ANNOTATION,
        "true",
    );
    let gw_out = annotate(
        gateway("gw", "internal", "c", &["gw-internal.example.com"], false),
        OPT_OUT_ANNOTATION,
        "false",
    );
    let gw = gateway("gw", "public", "c", &["gw-public.example.com"], false);
    let parent = |name: &str| json!({ "name": name, "namespace": "gw" });
    // Attached only to the opted-out Gateway: out with it.
    let only_internal = http_route(
        "web",
        "only-internal",
        json!([parent("internal")]),
        &["internal.example.com"],
    );
    // Also attached to a Gateway that counts: kept.
    let both = http_route(
        "web",
        "both",
        json!([parent("internal"), parent("public")]),
        &["both.example.com"],
    );
    let route_out = annotate(
        http_route(
            "web",
            "r-out",
            json!([parent("public")]),
            &["r-out.example.com"],
        ),
        OPT_OUT_ANNOTATION,
        "false",
    );
    let d = desired(
        &Sources {
            ingresses: vec![&out, &kept],
            gateways: vec![&gw_out, &gw],
            http_routes: vec![&only_internal, &both, &route_out],
            ..Default::default()
        },
        &Filters {
            opt_ins: OptIns::GATEWAY_API,
            ..Default::default()
        },
        &policy(),
    );
    assert_eq!(
        hosts(&d),
        [
            "both.example.com",
            "gw-public.example.com",
            "kept.example.com"
        ]
    );
    assert_eq!(
        excluded(&d),
        [
            "Ingress web/out: opted out with ouroboros.io/hairpin: \"false\"",
            "Gateway gw/internal: opted out with ouroboros.io/hairpin: \"false\"",
            "HTTPRoute web/only-internal: opted out with ouroboros.io/hairpin: \"false\"",
            "HTTPRoute web/r-out: opted out with ouroboros.io/hairpin: \"false\"",
        ]
    );
}

#[test]
fn namespace_include_and_exclude() {
    let a = in_namespace(ingress("a", None, None, &["a.example.com"]), "shop");
    let b = in_namespace(ingress("b", None, None, &["b.example.com"]), "blog");
    let c = in_namespace(ingress("c", None, None, &["c.example.com"]), "staging");
    let gw = gateway("shop", "gw", "c", &["gw.example.com"], false);
    let route = http_route("staging", "r", json!([]), &["r.example.com"]);
    let sources = Sources {
        ingresses: vec![&a, &b, &c],
        gateways: vec![&gw],
        http_routes: vec![&route],
        ..Default::default()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    for (include, exclude, want) in [
        (
            vec![],
            vec![],
            vec![
                "a.example.com",
                "b.example.com",
                "c.example.com",
                "gw.example.com",
                "r.example.com",
            ],
        ),
        (
            vec!["shop"],
            vec![],
            vec!["a.example.com", "gw.example.com"],
        ),
        (
            vec![],
            vec!["staging"],
            vec!["a.example.com", "b.example.com", "gw.example.com"],
        ),
        // Exclude wins.
        (
            vec!["shop", "staging"],
            vec!["staging"],
            vec!["a.example.com", "gw.example.com"],
        ),
    ] {
        let d = desired(
            &sources,
            &Filters {
                opt_ins: OptIns::GATEWAY_API,
                include_namespaces: set(&include),
                exclude_namespaces: set(&exclude),
                ..Default::default()
            },
            &policy(),
        );
        assert_eq!(hosts(&d), want, "include {include:?} exclude {exclude:?}");
        assert!(d.excluded.iter().all(|e| e.why == Exclusion::Namespace));
    }
}

#[test]
fn ingress_hosts_tls_or_all() {
    let ing: Ingress = from(json!({
        "metadata": { "name": "shop", "namespace": "web" },
        "spec": {
            "rules": [{ "host": "plain.example.com" }, { "host": "shop.example.com" }, {}],
            "tls": [{ "hosts": ["shop.example.com"] }],
        },
    }));
    let sources = Sources {
        ingresses: vec![&ing],
        ..Default::default()
    };
    for (fields, want) in [
        (IngressHosts::Tls, vec!["shop.example.com"]),
        (
            IngressHosts::All,
            vec!["plain.example.com", "shop.example.com"],
        ),
    ] {
        let filters = Filters {
            ingress_hosts: fields,
            ..Default::default()
        };
        assert_eq!(hosts(&desired(&sources, &filters, &policy())), want);
    }
}

fn targets(specs: &[&str]) -> Vec<TargetRule> {
    specs.iter().map(|s| parse_target(s).unwrap()).collect()
}

/// Each target's hosts as `target: host host ...`, in target order.
fn by_target(d: &Desired, rules: &[TargetRule]) -> Vec<String> {
    d.by_target()
        .into_iter()
        .map(|(t, hs)| {
            let hs: Vec<&str> = hs.iter().map(Hostname::as_str).collect();
            format!("{}: {}", t.name(rules), hs.join(" "))
        })
        .collect()
}

#[test]
fn classes_and_gateways_go_to_their_targets() {
    let rules = targets(&[
        "name=traefik,service=proxy-traefik,ingress-class=traefik,gateway-class=traefik",
        "name=eg,service=proxy-eg,gateway=infra/public",
    ]);
    let nginx = ingress("shop", Some("nginx"), None, &["shop.example.com"]);
    let traefik = ingress("blog", Some("traefik"), None, &["blog.example.com"]);
    let classless = ingress("old", None, None, &["old.example.com"]);
    let public = gateway("infra", "public", "cilium", &["*.apps.example.com"], false);
    let tgw = gateway("infra", "t", "traefik", &["t.example.com"], false);
    let other = gateway("infra", "other", "cilium", &["other.example.com"], false);
    let parent = |name: &str| json!({ "name": name, "namespace": "infra" });
    let r1 = http_route("web", "r1", json!([parent("public")]), &["r1.example.com"]);
    let r2 = http_route(
        "web",
        "r2",
        json!([parent("t"), parent("public")]),
        &["r2.example.com"],
    );
    let r3 = http_route("web", "r3", json!([]), &["r3.example.com"]);
    let sources = Sources {
        ingresses: vec![&nginx, &traefik, &classless],
        gateways: vec![&public, &tgw, &other],
        http_routes: vec![&r1, &r2, &r3],
        ..Default::default()
    };
    let filters = Filters {
        opt_ins: OptIns::GATEWAY_API,
        targets: rules.clone(),
        ..Default::default()
    };
    let d = desired(&sources, &filters, &policy());
    assert_eq!(
        by_target(&d, &rules),
        [
            "traefik: blog.example.com r2.example.com t.example.com",
            "eg: *.apps.example.com r1.example.com",
            "default: old.example.com other.example.com r3.example.com shop.example.com",
        ]
    );
    assert!(d.conflicts.is_empty());

    // The class filters only narrow the default target: mapped classes still count.
    let d = desired(
        &sources,
        &Filters {
            ingress_class: Some("nginx".into()),
            gateway_class: Some("none".into()),
            ..filters.clone()
        },
        &policy(),
    );
    assert_eq!(
        by_target(&d, &rules),
        [
            "traefik: blog.example.com r2.example.com t.example.com",
            "eg: *.apps.example.com r1.example.com",
            "default: shop.example.com",
        ]
    );
    // Without targets nothing is placed: the single-target result is unchanged.
    let d = desired(
        &sources,
        &Filters {
            targets: vec![],
            ..filters
        },
        &policy(),
    );
    assert!(d.placed.is_empty() && d.conflicts.is_empty());
    assert_eq!(d.hosts.len(), 9);
}

#[test]
fn a_host_claimed_by_two_targets_has_one_winner() {
    let rules = targets(&["name=traefik,service=proxy-traefik,ingress-class=traefik"]);
    let filters = Filters {
        targets: rules.clone(),
        ..Default::default()
    };
    let conflicts = |d: &Desired| -> Vec<String> {
        d.conflicts
            .iter()
            .map(|c| {
                format!(
                    "{}: {} ({}) beats {} ({})",
                    c.host,
                    c.winner,
                    c.winner_target.name(&rules),
                    c.loser,
                    c.loser_target.name(&rules)
                )
            })
            .collect()
    };
    let old = ingress(
        "shop-nginx",
        Some("nginx"),
        None,
        &["shop.example.com", "a.example.com"],
    );
    let new = ingress("shop-traefik", Some("traefik"), None, &["shop.example.com"]);
    // Equal priority: the named target wins over the default one.
    let d = desired(
        &Sources {
            ingresses: vec![&old, &new],
            ..Default::default()
        },
        &filters,
        &policy(),
    );
    assert_eq!(
        by_target(&d, &rules),
        ["traefik: shop.example.com", "default: a.example.com"]
    );
    assert_eq!(
        conflicts(&d),
        ["shop.example.com: Ingress web/shop-traefik (traefik) beats Ingress web/shop-nginx (default)"]
    );
    let shop = policy().check("shop.example.com").unwrap();
    assert_eq!(
        d.origins[&shop]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["Ingress web/shop-traefik"]
    );
    // A higher priority annotation wins, in either input order.
    let old_first = annotate(old.clone(), PRIORITY_ANNOTATION, "10");
    for order in [vec![&old_first, &new], vec![&new, &old_first]] {
        let d = desired(
            &Sources {
                ingresses: order,
                ..Default::default()
            },
            &filters,
            &policy(),
        );
        assert_eq!(
            by_target(&d, &rules),
            ["default: a.example.com shop.example.com"]
        );
        assert_eq!(
            conflicts(&d),
            ["shop.example.com: Ingress web/shop-nginx (default) beats Ingress web/shop-traefik (traefik)"]
        );
    }
    // Two objects of the same target are not a conflict.
    let twin = ingress("shop-2", Some("traefik"), None, &["shop.example.com"]);
    let d = desired(
        &Sources {
            ingresses: vec![&new, &twin],
            ..Default::default()
        },
        &filters,
        &policy(),
    );
    assert!(d.conflicts.is_empty());
    assert_eq!(d.origins[&shop].len(), 2);
}

fn served_by(name: &str, controller: &str, default: bool) -> IngressClass {
    let mut c = class(name, default.then_some("true"), false);
    c.spec.as_mut().unwrap().controller = Some(controller.into());
    c
}

/// Traefik serving `ingressClassName: nginx`: the IngressClass's `spec.controller` picks the
/// target, for an Ingress naming the class and for one without a class (the default class's
/// controller); when the class goes back to ingress-nginx its Ingresses follow.
#[test]
fn the_ingress_class_controller_picks_the_target() {
    let rules = targets(&[
        "name=nginx,service=proxy-nginx,ingress-class=nginx",
        "name=traefik,service=proxy-traefik,ingress-class=traefik,\
         ingress-class-controller=traefik.io/ingress-controller",
    ]);
    let shop = ingress("shop", Some("nginx"), None, &["shop.example.com"]);
    let old = ingress("old", None, None, &["old.example.com"]);
    let legacy = ingress("legacy", None, Some("nginx"), &["legacy.example.com"]);
    let filters = Filters {
        targets: rules.clone(),
        ..Default::default()
    };
    assert!(filters.reads_ingress_classes());
    let place = |classes: &[&IngressClass]| {
        let sources = Sources {
            ingresses: vec![&shop, &old, &legacy],
            ingress_classes: classes.to_vec(),
            ..Default::default()
        };
        by_target(&desired(&sources, &filters, &policy()), &rules)
    };
    let by_traefik = served_by("nginx", "traefik.io/ingress-controller", true);
    assert_eq!(
        place(&[&by_traefik]),
        ["traefik: legacy.example.com old.example.com shop.example.com"]
    );
    let by_nginx = served_by("nginx", "k8s.io/ingress-nginx", true);
    assert_eq!(
        place(&[&by_nginx]),
        ["nginx: legacy.example.com old.example.com shop.example.com"]
    );
    // No IngressClass object: the name decides, and the classless Ingress has no class.
    assert_eq!(
        place(&[]),
        [
            "nginx: legacy.example.com shop.example.com",
            "default: old.example.com"
        ]
    );
}

/// Traefik's, Contour's and Istio's kinds: read only with their flag, their names to the
/// default target (none has a class), the opt-out annotation honoured as on an Ingress, a rule naming hosts by a pattern reported, and a hostile name stopped by the policy.
#[test]
fn traefik_contour_and_istio_kinds() {
    use super::contour::HttpProxy;
    use super::istio::IstioGateway;
    use super::traefik::{IngressRoute, IngressRouteTcp};
    let route: IngressRoute = from(json!({
        "metadata": meta(Some("web"), "shop", &[], false),
        "spec": {"entryPoints": ["websecure"], "routes": [
            {"match": "Host(`shop.example.com`) && PathPrefix(`/`)", "kind": "Rule",
             "services": [{"name": "shop", "port": 80}]},
            {"match": "HostRegexp(`^.+\\.example\\.org$`)", "kind": "Rule",
             "services": [{"name": "any", "port": 80}]},
            {"match": "Host(`evil.example.com\n}`)"}
        ]}
    }));
    let tcp: IngressRouteTcp = from(json!({"metadata": meta(Some("db"), "pg", &[], false),
        "spec": {"routes": [{"match": "HostSNI(`pg.example.com`)"}, {"match": "HostSNI(`*`)"}]}}));
    let proxy: HttpProxy = from(json!({"metadata": meta(Some("blog"), "root", &[], false),
        "spec": {"virtualhost": {"fqdn": "blog.example.com"}, "includes": [{"name": "child"}]}}));
    // Included by the root: no virtualhost, no name.
    let child: HttpProxy = from(json!({"metadata": meta(Some("blog"), "child", &[], false),
        "spec": {"routes": [{"services": [{"name": "b", "port": 80}]}]}}));
    let gw: IstioGateway = from(json!({
        "metadata": meta(Some("istio-system"), "public", &[], false),
        "spec": {"selector": {"istio": "ingressgateway"}, "servers": [
            {"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
             "hosts": ["prod/app.example.com", "*/api.example.com", "*"]}
        ]}
    }));
    let opted: IstioGateway = from(json!({
        "metadata": meta(Some("istio-system"), "private", &[(OPT_OUT_ANNOTATION, "false")], false),
        "spec": {"servers": [{"hosts": ["private.example.com"]}]}
    }));
    let sources = Sources {
        ingress_routes: vec![&route],
        ingress_route_tcps: vec![&tcp],
        http_proxies: vec![&proxy, &child],
        istio_gateways: vec![&gw, &opted],
        ..Default::default()
    };
    let d = desired(&sources, &Filters::default(), &policy());
    assert!(
        d.hosts.is_empty() && d.rejected.is_empty() && d.excluded.is_empty(),
        "no flag"
    );
    let all = Filters {
        opt_ins: OptIns {
            gateway_api: false,
            ..OptIns::EVERY
        },
        ..Default::default()
    };
    let d = desired(&sources, &all, &policy());
    assert_eq!(
        hosts(&d),
        [
            "api.example.com",
            "app.example.com",
            "blog.example.com",
            "pg.example.com",
            "shop.example.com"
        ]
    );
    assert!(d.placed.is_empty(), "every name to the default target");
    let rejected: Vec<String> = d
        .rejected
        .iter()
        .map(|r| format!("{}: {:?} {}", r.object, r.raw, r.reason))
        .collect();
    assert_eq!(
        rejected,
        [
            "IngressRoute web/shop: \"HostRegexp(`^.+\\\\.example\\\\.org$`)\" pattern",
            "IngressRoute web/shop: \"evil.example.com\\n}\" invalid-character",
            "Gateway.networking.istio.io istio-system/public: \"*\" bad-wildcard",
        ]
    );
    assert_eq!(
        excluded(&d),
        ["Gateway.networking.istio.io istio-system/private: opted out with ouroboros.io/hairpin: \"false\""]
    );
    // Each flag alone reads its kinds only.
    let alone = |set: fn(&mut Filters)| {
        let mut f = Filters::default();
        set(&mut f);
        hosts(&desired(&sources, &f, &policy()))
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        alone(|f| f.opt_ins.traefik_ingressroutes = true),
        ["pg.example.com", "shop.example.com"]
    );
    assert_eq!(
        alone(|f| f.opt_ins.contour_httpproxies = true),
        ["blog.example.com"]
    );
    assert_eq!(
        alone(|f| f.opt_ins.istio_gateways = true),
        ["api.example.com", "app.example.com"]
    );
}

/// The priority annotation on an HTTPProxy settles a name claimed by an Ingress of another
/// target: the HTTPProxy (priority 5) keeps blog.example.com for the default target.
#[test]
fn a_classless_kinds_priority_annotation_counts() {
    use super::contour::HttpProxy;
    let proxy: HttpProxy = from(json!({
        "metadata": meta(Some("blog"), "root", &[(PRIORITY_ANNOTATION, "5")], false),
        "spec": {"virtualhost": {"fqdn": "blog.example.com"}}
    }));
    let rules = targets(&["name=nginx,service=proxy-nginx,ingress-class=nginx"]);
    let ing = ingress("blog", Some("nginx"), None, &["blog.example.com"]);
    let sources = Sources {
        ingresses: vec![&ing],
        http_proxies: vec![&proxy],
        ..Default::default()
    };
    let d = desired(
        &sources,
        &Filters {
            opt_ins: OptIns {
                contour_httpproxies: true,
                ..OptIns::default()
            },
            targets: rules.clone(),
            ..Default::default()
        },
        &policy(),
    );
    assert_eq!(by_target(&d, &rules), ["default: blog.example.com"]);
    assert_eq!(d.conflicts.len(), 1);
    assert_eq!(d.conflicts[0].winner.to_string(), "HTTPProxy blog/root");
}

/// A Traefik IngressRoute's `kubernetes.io/ingress.class` annotation (Traefik's CRD provider
/// selects by it) takes it to the target an Ingress of that class goes to: by class name, or by
/// the controller its IngressClass names. Without the annotation, or naming a class no target
/// maps, it goes to the default target; `--ingress-class` leaves none of them out.
#[test]
fn an_ingressroutes_class_annotation_picks_its_target() {
    use super::traefik::{IngressRoute, IngressRouteTcp};
    let annotated = |name: &str, class: Option<&str>, host: &str| -> IngressRoute {
        let annotations: Vec<(&str, &str)> = class
            .map(|c| (INGRESS_CLASS_ANNOTATION, c))
            .into_iter()
            .collect();
        from(json!({
            "metadata": meta(Some("web"), name, &annotations, false),
            "spec": {"routes": [{"match": format!("Host(`{host}`)")}]}
        }))
    };
    let v2 = annotated("v2", Some("traefik-v2"), "v2.example.com");
    let by_controller = annotated("ctl", Some("edge"), "edge.example.com");
    let other = annotated("other", Some("haproxy"), "other.example.com");
    let plain = annotated("plain", None, "plain.example.com");
    let tcp: IngressRouteTcp = from(json!({
        "metadata": meta(Some("db"), "pg", &[(INGRESS_CLASS_ANNOTATION, "traefik-v2")], false),
        "spec": {"routes": [{"match": "HostSNI(`pg.example.com`)"}]}
    }));
    let edge = served_by("edge", "traefik.io/ingress-controller", false);
    let rules = targets(&[
        "name=old,service=proxy-old,ingress-class=traefik-v2",
        "name=new,service=proxy-new,ingress-class-controller=traefik.io/ingress-controller",
    ]);
    let sources = Sources {
        ingress_classes: vec![&edge],
        ingress_routes: vec![&v2, &by_controller, &other, &plain],
        ingress_route_tcps: vec![&tcp],
        ..Default::default()
    };
    let filters = Filters {
        opt_ins: OptIns {
            traefik_ingressroutes: true,
            ..OptIns::default()
        },
        ingress_class: Some("nginx".into()),
        targets: rules.clone(),
        ..Default::default()
    };
    let d = desired(&sources, &filters, &policy());
    assert_eq!(
        by_target(&d, &rules),
        [
            "old: pg.example.com v2.example.com",
            "new: edge.example.com",
            "default: other.example.com plain.example.com",
        ]
    );
    assert!(d.excluded.is_empty(), "{:?}", excluded(&d));
}
