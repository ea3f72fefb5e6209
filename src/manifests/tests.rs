use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::files::collect_dir;
use super::*;

fn parse(text: &str, format: Format) -> Result<Manifests, Error> {
    Manifests::from_text(text, format)
}

const INGRESS: &str = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  tls:
  - hosts: [shop.example.com]
";

#[test]
fn yaml_documents_and_kinds() {
    let text = format!(
        "---\n# only a comment\n---\n{INGRESS}---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n---\n\
         replicaCount: 3\n---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: nginx}}\nspec: {{}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g}}\nspec:\n  gatewayClassName: c\n  listeners:\n  - {{name: l, port: 443, protocol: HTTPS, hostname: g.example.com}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1beta1\nkind: HTTPRoute\nmetadata: {{name: h}}\nspec: {{hostnames: [h.example.com]}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {{name: r}}\nspec: {{}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {{name: t}}\nspec: {{parentRefs: [{{name: g}}]}}\n---\n\
         apiVersion: networking.k8s.io/v1beta1\nkind: Ingress\nmetadata: {{name: old}}\nspec: {{}}\n"
    );
    let m = parse(&text, Format::Yaml).unwrap();
    assert_eq!(m.ingresses.len(), 1);
    assert_eq!(m.ingresses[0].metadata.name.as_deref(), Some("web"));
    assert_eq!(m.ingress_classes.len(), 1);
    assert_eq!(m.gateways.len(), 1);
    assert_eq!(m.http_routes.len(), 1);
    assert_eq!(m.grpc_routes.len(), 1);
    assert_eq!(m.tls_routes.len(), 1);
    assert!(m.tls_routes[0].spec.hostnames.is_empty());
    // Service, the values file and the v1beta1 Ingress.
    assert_eq!(m.skipped, 3);
}

/// Traefik's, Contour's and Istio's kinds in the versions their projects serve, in YAML and
/// as JSON (the direct path): Traefik's older group too; an Istio version never served is
/// skipped.
#[test]
fn crd_source_kinds() {
    let yaml = "apiVersion: traefik.io/v1alpha1\nkind: IngressRoute\nmetadata: {name: r, namespace: web}\n\
                spec:\n  routes:\n  - match: Host(`r.example.com`)\n    kind: Rule\n---\n\
                apiVersion: traefik.io/v1alpha1\nkind: IngressRouteTCP\nmetadata: {name: t}\nspec: {routes: [{match: 'HostSNI(`t.example.com`)'}]}\n---\n\
                apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: p}\nspec: {virtualhost: {fqdn: p.example.com}}\n---\n\
                apiVersion: networking.istio.io/v1beta1\nkind: Gateway\nmetadata: {name: i}\nspec: {servers: [{hosts: [ns/i.example.com]}]}\n---\n\
                apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: j}\nspec: {servers: [{hosts: ['*/j.example.com']}]}\n---\n\
                apiVersion: traefik.containo.us/v1alpha1\nkind: IngressRoute\nmetadata: {name: old}\nspec: {routes: [{match: Host(`old.example.com`)}]}\n---\n\
                apiVersion: networking.istio.io/v2\nkind: Gateway\nmetadata: {name: new}\nspec: {}\n";
    let m = parse(yaml, Format::Yaml).unwrap();
    assert_eq!(m.ingress_routes.len(), 2);
    assert_eq!(m.ingress_routes[0].spec.hosts().names, ["r.example.com"]);
    assert_eq!(m.ingress_routes[1].spec.hosts().names, ["old.example.com"]);
    assert_eq!(m.ingress_route_tcps.len(), 1);
    assert_eq!(m.http_proxies.len(), 1);
    assert_eq!(m.istio_gateways.len(), 2);
    assert!(
        m.gateways.is_empty(),
        "Istio's Gateway is not the Gateway API's"
    );
    assert_eq!(m.skipped, 1);
    let json = r#"{"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
        "metadata": {"name": "r"}, "spec": {"routes": [{"match": "Host(`r.example.com`)"}]}}"#;
    let m = parse(json, Format::Json).unwrap();
    assert_eq!(m.ingress_routes.len(), 1);
    let old = json.replace("traefik.io", "traefik.containo.us");
    let m = parse(&old, Format::Json).unwrap();
    assert_eq!(m.ingress_routes[0].spec.hosts().names, ["r.example.com"]);
    let bad = r#"{"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "p"}, "spec": {"virtualhost": {"fqdn": 7}}}"#;
    let e = parse(bad, Format::Json).unwrap_err();
    assert!(format!("{e:#}").contains("HTTPProxy"), "{e:#}");
}

#[test]
fn lists_are_unwrapped() {
    let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "a"},
         "spec": {"tls": [{"hosts": ["a.example.com"]}]}, "status": {"loadBalancer": {}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "items": [
            {"metadata": {"name": "nested", "managedFields": [{"manager": "kubectl"}]}}]}
    ]}
    {"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "metadata": {}, "items": [
        {"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}]}"#;
    let m = parse(list, Format::Json).unwrap();
    let names: Vec<_> = m
        .ingresses
        .iter()
        .map(|i| i.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "nested", "b", "c"]);
    assert!(m.ingresses[1].metadata.managed_fields.is_none());
    // A list with no items is just empty.
    let m = parse("apiVersion: v1\nkind: List\nitems: []\n", Format::Yaml).unwrap();
    assert!(m.ingresses.is_empty() && m.skipped == 0);
}

#[test]
fn errors_name_document_and_line() {
    for (text, format, want) in [
        (
            format!("{INGRESS}---\napiVersion: v1\nkind: [unclosed\n"),
            Format::Yaml,
            vec!["document 2", "line 11"],
        ),
        (
            "{\"apiVersion\": \"v1\",\n \"kind\": }".to_string(),
            Format::Json,
            vec!["document 1", "line 2"],
        ),
        (
            format!("{INGRESS}---\n{}", INGRESS.replace("[shop.example.com]", "7")),
            Format::Yaml,
            vec!["document 2", "Ingress \"shop/web\" is not a valid Ingress"],
        ),
        // Two files concatenated without `---`: the second's keys repeat the first's, which
        // would silently drop the first object's hosts.
        (
            format!("{INGRESS}{INGRESS}"),
            Format::Yaml,
            vec!["document 1", "duplicate entry with key \"apiVersion\"", "line", "missing `---`"],
        ),
        (
            INGRESS.replace("  namespace: shop\n", "  namespace: shop\n  namespace: other\n"),
            Format::Yaml,
            vec!["document 1", "duplicate entry with key \"namespace\""],
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: gateway.networking.k8s.io/v1\n  kind: Gateway\n  metadata: {name: g}\n  spec: {}\n".to_string(),
            Format::Yaml,
            vec!["document 1", "List item 1", "Gateway \"g\""],
        ),
    ] {
        let err = format!("{:#}", parse(&text, format).unwrap_err());
        for w in want {
            assert!(err.contains(w), "{err:?} lacks {w:?}");
        }
    }
}

#[test]
fn json_fast_path_falls_back() {
    // v1alpha2 TLSRoute without hostnames/rules and a status the typed struct would reject:
    // both need the tolerant path.
    let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
         "metadata": {"name": "t"}, "spec": {}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
         "metadata": {"name": "g"}, "spec": {"gatewayClassName": "c", "listeners": []},
         "status": {"conditions": "not-a-list"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "h"}, "spec": {"hostnames": ["h.example.com"]}}
    ]}"#;
    let m = parse(text, Format::Json).unwrap();
    assert_eq!(m.tls_routes.len(), 1);
    assert_eq!(m.gateways.len(), 1);
    assert_eq!(m.http_routes.len(), 1);
    let bad = r#"{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "x", "namespace": "n"}, "spec": {"tls": "nope"}}"#;
    let err = format!("{:#}", parse(bad, Format::Json).unwrap_err());
    assert!(
        err.contains("document 1") && err.contains("Ingress \"n/x\" is not a valid Ingress"),
        "{err}"
    );
}

#[test]
fn formats() {
    for (text, want) in [
        ("{\"kind\": \"List\"}", Format::Json),
        ("\n  {}", Format::Json),
        ("apiVersion: v1\n", Format::Yaml),
        ("---\n{}", Format::Yaml),
        ("", Format::Yaml),
    ] {
        assert_eq!(Format::sniff(text), want, "{text:?}");
    }
    for (path, want) in [
        ("a.json", Format::Json),
        ("a.JSON", Format::Json),
        ("a.yaml", Format::Yaml),
        ("a.yml", Format::Yaml),
        ("a", Format::Yaml),
    ] {
        assert_eq!(Format::of(Path::new(path)), want, "{path}");
    }
}

#[test]
fn reads_directories_recursively_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir_all(dir.join("b/nested")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let ing = |name: &str| INGRESS.replace("name: web", &format!("name: {name}"));
    std::fs::write(dir.join("z.yaml"), ing("z")).unwrap();
    std::fs::write(dir.join("a.yml"), ing("a")).unwrap();
    std::fs::write(
        dir.join("b/nested/c.json"),
        serde_json::to_string(&yaml_serde::from_str::<Value>(&ing("c")).unwrap()).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("b/readme.md"), "not: [a manifest").unwrap();
    std::fs::write(dir.join(".git/x.yaml"), "bad: [").unwrap();
    std::fs::write(dir.join(".hidden.yaml"), "bad: [").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&dir, dir.join("b/loop")).unwrap();
    let m = Manifests::read(std::slice::from_ref(&dir)).unwrap();
    let names: Vec<_> = m
        .ingresses
        .iter()
        .map(|i| i.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "c", "z"]);
    assert_eq!(m.files, 3);
    // An explicit file is read whatever its name; errors name the file.
    std::fs::write(dir.join("bad.txt"), "a: [").unwrap();
    let err = format!("{:#}", Manifests::read(&[dir.join("bad.txt")]).unwrap_err());
    assert!(
        err.contains("bad.txt") && err.contains("document 1"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        Manifests::read(&[dir.join("missing.yaml")]).unwrap_err()
    );
    assert!(err.contains("missing.yaml"), "{err}");
}

/// Every shipped manifest and fixture reads (the `bad/` fixtures fail, naming the document).
#[test]
fn shipped_manifests_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut seen = BTreeSet::new();
    for dir in ["examples", "tests/fixtures/manifests"] {
        collect_dir(&root.join(dir), &mut files, &mut seen).unwrap();
    }
    assert!(files.len() >= 8, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let read = Manifests::from_text(&text, Format::of(&file));
        if file.components().any(|c| c.as_os_str() == "bad") {
            let err = read.unwrap_err().to_string();
            assert!(err.contains("document "), "{}: {err}", file.display());
        } else {
            read.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}

/// Each message says what is wrong and what to do, once, also through anyhow's `{:#}` (how
/// `render` prints it).
#[test]
fn errors_say_what_to_do() {
    for (text, format, want) in [
        ("a: [", Format::Yaml, "document 1: not valid YAML (fix the syntax at the line given): "),
        ("{", Format::Json, "document 1: not valid JSON (fix the syntax at the line given): "),
        (
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: w}\nspec: {tls: x}\n",
            Format::Yaml,
            "document 1: Ingress \"w\" is not a valid Ingress (correct it, or leave it out of the manifests): invalid type",
        ),
    ] {
        let err = parse(text, format).unwrap_err();
        let plain = err.to_string();
        assert!(plain.starts_with(want), "{plain}");
        assert_eq!(format!("{:#}", anyhow::Error::new(err)), plain);
    }
    let err = Manifests::read(&["/nonexistent/m.yaml".into()]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/m.yaml: cannot read manifest path: "),
        "{err}"
    );
}

/// Bytes are read without the file system; text that is not UTF-8 is a typed error.
#[test]
fn from_bytes() {
    let m = Manifests::from_bytes(INGRESS.as_bytes(), Format::Yaml).unwrap();
    assert_eq!(m.ingresses.len(), 1);
    let err = Manifests::from_bytes(b"kind: \xff", Format::Yaml).unwrap_err();
    assert!(matches!(err, Error::NotUtf8 { offset: 6, .. }), "{err:?}");
}

/// A text with a bad document adds nothing, not the documents before it.
#[test]
fn add_text_is_all_or_nothing() {
    let mut m = Manifests::default();
    let text = format!("{INGRESS}---\nkind: [\n");
    assert!(m.add_text(&text, Format::Yaml).is_err());
    assert!(m.ingresses.is_empty() && m.skipped == 0);
}

/// YAML is read as `kubectl` reads it (as JSON): a plain scalar that is a number or a boolean
/// stays one, so in a string field the object is invalid; quoted, it is a string.
#[test]
fn plain_scalars_keep_their_yaml_type() {
    let with = |value: &str| {
        INGRESS.replace(
            "  namespace: shop\n",
            &format!("  namespace: shop\n  annotations: {{replicas: {value}}}\n"),
        )
    };
    let m = parse(&with("\"3\""), Format::Yaml).unwrap();
    let annotations = m.ingresses[0].metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["replicas"], "3");
    for value in ["3", "true"] {
        let err = parse(&with(value), Format::Yaml).unwrap_err().to_string();
        assert!(err.contains("is not a valid Ingress"), "{err}");
    }
}
