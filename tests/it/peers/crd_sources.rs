//! Traefik's, Contour's and Istio's CRDs, as their projects publish them (`.ci/peers/build.sh`
//! fetches them from the Go module proxy), installed into the real API server while the
//! controller runs with the chart's RBAC: objects written as those projects' docs write them
//! are read, and their names land in the real ConfigMap.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::cluster;
use super::controller_modes::{
    answers, assert_no_refusal, configmap_text, runtime, ImportRun, IMPORT_KEY,
};
use super::{binary, wait_for};

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
