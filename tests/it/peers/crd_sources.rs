//! Traefik's, Contour's and Istio's CRDs, as their projects publish them (`.ci/peers/build.sh`
//! fetches them from the Go module proxy), installed into the real API server while the
//! controller runs with the chart's RBAC: objects written as those projects' docs write them
//! are read, and their names land in the real ConfigMap.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::cluster;
use super::controller_modes::{
    answers, assert_no_refusal, configmap_text, runtime, ImportRun, IMPORT_KEY,
};
use super::{binary, wait_for, Process};

/// The three CRD sets, or `None` (skipped with the reason) when one was not fetched.
fn crd_sets() -> Option<[PathBuf; 3]> {
    Some([
        binary("crds/traefik")?,
        binary("crds/contour")?,
        binary("crds/istio")?,
    ])
}

/// One object of each kind in `apps`, as the projects' docs write them.
fn objects(apps: &str) -> [serde_json::Value; 4] {
    [
        json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
            "metadata": {"name": "blog", "namespace": apps},
            "spec": {
                "entryPoints": ["websecure"],
                "routes": [
                    {"match": "Host(`blog.crd.example.com`) && PathPrefix(`/bar`)",
                     "kind": "Rule", "priority": 12,
                     "services": [{"name": "whoami", "port": 80}]},
                    {"match": "HostRegexp(`^.+\\.regexp\\.crd\\.example\\.com$`)",
                     "kind": "Rule", "services": [{"name": "whoami", "port": 80}]},
                ],
                "tls": {"secretName": "supersecret"},
            },
        }),
        json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRouteTCP",
            "metadata": {"name": "pg", "namespace": apps},
            "spec": {
                "entryPoints": ["footcp"],
                "routes": [{"match": "HostSNI(`pg.crd.example.com`)",
                            "services": [{"name": "whoamitcp", "port": 8080}]}],
                "tls": {"passthrough": true},
            },
        }),
        json!({
            "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
            "metadata": {"name": "basic", "namespace": apps},
            "spec": {
                "virtualhost": {"fqdn": "docs.crd.example.com"},
                "routes": [{"conditions": [{"prefix": "/"}],
                            "services": [{"name": "s1", "port": 80}]}],
            },
        }),
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
            "metadata": {"name": "my-gateway", "namespace": apps},
            "spec": {
                "selector": {"app": "my-gateway-controller"},
                "servers": [
                    {"port": {"number": 443, "name": "https-443", "protocol": "HTTPS"},
                     "hosts": ["uk.crd.example.com", "ns1/eu.crd.example.com"],
                     "tls": {"mode": "SIMPLE", "credentialName": "bookinfo-secret"}},
                    {"port": {"number": 80, "name": "http", "protocol": "HTTP"},
                     "hosts": ["*/*.istio.crd.example.com"]},
                ],
            },
        }),
    ]
}

#[test]
fn traefik_contour_and_istio_objects_are_read_once_their_crds_are_installed() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let Some(crds) = crd_sets() else {
        return;
    };
    let rt = runtime();
    let run = ImportRun::start(
        cluster,
        &rt,
        "modes-crd",
        "coredns-custom-crd",
        &[
            "controller.traefikIngressRoutes=true".into(),
            "controller.contourHttpProxies=true".into(),
            "controller.istioGateways=true".into(),
        ],
        "shop.crd.example.com",
    );
    let (dns, apps, configmap) = (&run.dns, &run.apps, &run.configmap);
    let mut controller = run.controller;

    // Installed while it runs, then one object of each kind as the projects' docs write them.
    rt.block_on(async {
        for set in &crds {
            cluster.install_crds(set).await;
        }
        for doc in objects(apps) {
            cluster.apply_yaml(&doc.to_string()).await;
        }
    });
    let want = [
        "blog.crd.example.com",
        "pg.crd.example.com",
        "docs.crd.example.com",
        "uk.crd.example.com",
        "eu.crd.example.com",
        "www.istio.crd.example.com",
    ];
    let text = wait_for(
        "writing the IngressRoute's, IngressRouteTCP's, HTTPProxy's and Gateway's names",
        &mut controller,
        Duration::from_secs(120),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, dns, configmap, IMPORT_KEY).await?;
                want.iter().all(|h| answers(&text, h)).then_some(text)
            })
        },
    );
    assert!(answers(&text, "shop.crd.example.com"), "{text}");
    // The regular expression is reported, not guessed.
    assert!(!answers(&text, "a.regexp.crd.example.com"), "{text}");
    let log = controller.log_text();
    assert!(log.contains("HostRegexp"), "{log}");
    assert_no_refusal(&controller);
}

/// The CRDs of `file` (a project's published set) named in `names`, each changed by `edit`,
/// written as one multi-document file into `dir` (for `Cluster::install_crds`).
fn crds_from(
    file: &Path,
    names: &[&str],
    edit: impl Fn(&mut serde_json::Value),
    dir: &Path,
    out: &str,
) {
    use serde::Deserialize;
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let mut v = serde_json::Value::deserialize(doc).unwrap();
        if names.iter().any(|n| v["metadata"]["name"] == *n) {
            edit(&mut v);
            docs.push(v.to_string());
        }
    }
    assert_eq!(docs.len(), names.len(), "{names:?} in {}", file.display());
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(out), docs.join("\n---\n")).unwrap();
}

/// Istio's Gateway as Istio before 1.22 serves it (v1beta1 and v1alpha3, no v1), Traefik's
/// IngressRoute and IngressRouteTCP in Traefik 2's group `traefik.containo.us`: each made from
/// the CRD the project publishes today, into `dir`.
fn older_crds(istio: &Path, traefik: &Path, dir: &Path) {
    crds_from(
        &istio.join("customresourcedefinitions.gen.yaml"),
        &["gateways.networking.istio.io"],
        |crd| {
            for v in crd["spec"]["versions"].as_array_mut().unwrap() {
                let name = v["name"].as_str().unwrap().to_string();
                v["served"] = json!(name != "v1");
                v["storage"] = json!(name == "v1beta1");
            }
        },
        dir,
        "istio-gateway.yaml",
    );
    crds_from(
        &traefik.join("kubernetes-crd-definition-v1.yaml"),
        &["ingressroutes.traefik.io", "ingressroutetcps.traefik.io"],
        |crd| {
            let plural = crd["spec"]["names"]["plural"].as_str().unwrap().to_string();
            crd["spec"]["group"] = json!("traefik.containo.us");
            crd["metadata"]["name"] = json!(format!("{plural}.traefik.containo.us"));
        },
        dir,
        "traefik-containo-us.yaml",
    );
}

/// The host counts of the controller's writes, in order (its `synced` lines, JSON as the
/// chart sets `--log-format`).
fn written_host_counts(controller: &Process) -> Vec<u64> {
    controller
        .json_lines(0)
        .iter()
        .filter(|v| v["message"] == "synced")
        .filter_map(|v| v["hosts"].as_u64())
        .collect()
}

/// A cluster on Istio before 1.22 (Gateway at v1beta1 and v1alpha3 only) and Traefik 2 (its
/// kinds in `traefik.containo.us` only), with the chart's RBAC: the controller finds where each
/// kind is served and writes their hosts. Then Istio is upgraded (its CRD serves v1): the
/// watch moves to v1 and no write drops a host on the way. Then Traefik 3's CRDs arrive with
/// the objects moved to `traefik.io` (as Traefik's migration has users do): the watches move
/// there and read them.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario: the older places, the Istio upgrade, the Traefik one"
)]
fn crd_kinds_are_read_where_served_and_move_when_upgraded() {
    let Some([traefik_crds, _, istio_crds]) = crd_sets() else {
        return;
    };
    // Its own control plane: the CRDs are cluster-wide, and the shared one's tests install
    // the current ones.
    let Some(cluster) = cluster::private("crd-places") else {
        return;
    };
    let rt = runtime();
    let dir = crate::support::temp_dir("crd-places");
    let older = dir.path().join("older");
    older_crds(&istio_crds, &traefik_crds, &older);
    rt.block_on(cluster.install_crds(&older));
    let run = ImportRun::start_with(
        &cluster,
        &rt,
        ("places", "coredns-custom-places"),
        &[
            "controller.traefikIngressRoutes=true".into(),
            "controller.istioGateways=true".into(),
            "controller.sourceDiscoveryInterval=1s".into(),
        ],
        &[],
        "shop.places.example.com",
    );
    let (dns, apps, configmap) = (&run.dns, &run.apps, &run.configmap);
    let mut controller = run.controller;
    let log_path = controller.log.clone();
    let at = |version: &str, traefik_group: &str| {
        objects(apps)
            .into_iter()
            .filter(|o| o["kind"] != "HTTPProxy")
            .map(|mut o| {
                let kind = o["kind"].as_str().unwrap().to_string();
                o["apiVersion"] = json!(if kind == "Gateway" {
                    format!("networking.istio.io/{version}")
                } else {
                    format!("{traefik_group}/v1alpha1")
                });
                o
            })
            .collect::<Vec<_>>()
    };
    rt.block_on(async {
        for doc in at("v1beta1", "traefik.containo.us") {
            cluster.apply_yaml(&doc.to_string()).await;
        }
    });
    let written = |want: &[&str], controller: &mut Process, what: &str| {
        wait_for(what, controller, Duration::from_secs(120), || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, dns, configmap, IMPORT_KEY).await?;
                want.iter().all(|h| answers(&text, h)).then_some(text)
            })
        })
    };
    let ours = [
        "shop.places.example.com",
        "blog.crd.example.com",
        "pg.crd.example.com",
        "uk.crd.example.com",
        "eu.crd.example.com",
        "www.istio.crd.example.com",
    ];
    written(
        &ours,
        &mut controller,
        "writing the names read at networking.istio.io/v1beta1 and traefik.containo.us",
    );
    let log = controller.log_text();
    for said in [
        "reading it at networking.istio.io/v1beta1",
        "reading it at traefik.containo.us/v1alpha1",
    ] {
        assert!(log.contains(said), "{said}:\n{log}");
    }
    let before = written_host_counts(&controller);
    let full = *before.last().expect("a write");

    // Istio upgraded: its CRD as published (v1 served, and stored).
    let current = dir.path().join("istio-current");
    crds_from(
        &istio_crds.join("customresourcedefinitions.gen.yaml"),
        &["gateways.networking.istio.io"],
        |_| {},
        &current,
        "istio-gateway.yaml",
    );
    rt.block_on(cluster.install_crds(&current));
    wait_for(
        "moving the Istio Gateway watch to v1",
        &mut controller,
        Duration::from_secs(60),
        || said(&log_path, "is served at networking.istio.io/v1 now"),
    );
    // A Gateway written at v1 now arrives through the moved watch.
    rt.block_on(
        cluster.apply_yaml(
            &json!({
                "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
                "metadata": {"name": "after", "namespace": apps},
                "spec": {"servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"},
                                      "hosts": ["after.istio.crd.example.com"]}]},
            })
            .to_string(),
        ),
    );
    let mut with_after = ours.to_vec();
    with_after.push("after.istio.crd.example.com");
    written(
        &with_after,
        &mut controller,
        "writing the Gateway added at v1",
    );
    let counts = written_host_counts(&controller);
    assert!(
        counts[before.len() - 1..].iter().all(|&n| n >= full),
        "a write dropped hosts during the move: {counts:?} (all {full} before it)"
    );

    // Traefik 3: its CRDs, and the objects moved to traefik.io.
    rt.block_on(async {
        cluster.install_crds(&traefik_crds).await;
        for doc in at("v1", "traefik.io") {
            if doc["kind"] != "Gateway" {
                cluster.apply_yaml(&doc.to_string()).await;
            }
        }
    });
    wait_for(
        "moving the Traefik watches to traefik.io",
        &mut controller,
        Duration::from_secs(60),
        || said(&log_path, "is served at traefik.io/v1alpha1 now"),
    );
    written(
        &with_after,
        &mut controller,
        "writing the IngressRoutes read at traefik.io",
    );
    assert_no_refusal(&controller);
}

/// Whether the log at `path` says `what` yet.
fn said(path: &Path, what: &str) -> Option<()> {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    log.contains(what).then_some(())
}
