//! `answer=` against the real API server, with the chart's RBAC for the values used: the
//! default target names ingress-nginx's ConfigMap (`use-proxy-protocol: "true"`: relayed), a
//! named target Envoy Gateway's ClientTrafficPolicy (`proxyProtocol: {optional: true}`, on the
//! real CRD: answered with its Service's ClusterIPs) and a third is `answer=skip` (left out).
//! The ConfigMap flipped to `"false"` moves the default target's names to ingress-nginx's
//! Service in one write of the real CoreDNS ConfigMap; deleted, they go back through the proxy
//! (nothing says, so relay), in one write again.
//!
//! The controller reads each object with the ServiceAccount the chart binds to the chart's
//! per-object Roles, so a grant the chart lacked would be refused by the server: the Envoy
//! target would stay relayed, a flip would never be seen, and the log would hold the refusal.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DeleteParams};
use kube::Client;
use serde_json::{json, Value};

use super::cluster::{self, Cluster};
use super::controller_modes::{
    answered_with, answers, assert_no_refusal, run_controller, runtime, writes_during, Install,
    BEGIN,
};
use super::coredns::corefile_fixture;
use super::{binary, Process};
use crate::support::temp_dir;

const RELEASE: &str = "ans";
const COREFILE: &str = "coredns-ans";
/// Where ingress-nginx and Envoy Gateway run, each with its Service and configuration object.
const NGINX_NS: &str = "ans-nginx";
const NGINX: &str = "ingress-nginx-controller";
const ENVOY_NS: &str = "ans-eg";
const ENVOY: &str = "envoy-ans-eg";
const POLICY: &str = "proxy-protocol";

const SHOP: &str = "shop.ans.example.com";
const DOCS: &str = "docs.ans.example.com";
const WIKI: &str = "wiki.ans.example.com";

/// ingress-nginx's ConfigMap as its users write it (the Helm chart's `controller.config`).
fn nginx_configmap(use_proxy_protocol: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NGINX, "namespace": NGINX_NS},
        "data": {"use-proxy-protocol": use_proxy_protocol, "use-forwarded-headers": "true"},
    })
}

/// Envoy Gateway's ClientTrafficPolicy as its proxy-protocol task writes it.
fn client_traffic_policy() -> Value {
    json!({
        "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
        "metadata": {"name": POLICY, "namespace": ENVOY_NS},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "eg"}],
            "proxyProtocol": {"optional": true},
        },
    })
}

/// An ingress controller's Service, dual-stack, so a direct answer has both families.
fn controller_service(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "ipFamilyPolicy": "RequireDualStack",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
        },
    })
}

/// An Ingress of class `class` for `host`, with TLS (whose hosts are what is hairpinned).
fn classed_ingress(apps: &str, name: &str, class: &str, host: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": apps},
        "spec": {
            "ingressClassName": class,
            "tls": [{"hosts": [host], "secretName": format!("{name}-tls")}],
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}
            }]}}],
        },
    })
}

async fn cluster_ips(cluster: &Cluster, namespace: &str, name: &str) -> Vec<String> {
    let spec = Api::<Service>::namespaced(cluster.admin().await, namespace)
        .get(name)
        .await
        .unwrap()
        .spec
        .unwrap();
    spec.cluster_ips.unwrap()
}

/// Whether every address of `ips` answers `host` in `corefile`.
fn answered_by_all(corefile: &str, ips: &[String], host: &str) -> bool {
    ips.iter().all(|ip| answered_with(corefile, ip, host))
}

/// The addresses the block is checked against.
struct Addresses {
    proxy: Vec<String>,
    envoy_proxy: Vec<String>,
    internal_proxy: Vec<String>,
    nginx: Vec<String>,
    envoy: Vec<String>,
}

impl Addresses {
    /// The Envoy target answered with its Service's addresses and never its proxy's; the skip
    /// target's name absent and its proxy's addresses nowhere.
    fn assert_envoy_direct_and_wiki_left_out(&self, corefile: &str) {
        assert!(answered_by_all(corefile, &self.envoy, DOCS), "{corefile}");
        for ip in self.envoy_proxy.iter().chain(&self.internal_proxy) {
            assert!(!corefile.contains(ip.as_str()), "{ip} in {corefile}");
        }
        assert!(!answers(corefile, WIKI), "{corefile}");
    }

    fn shop_relayed(&self, corefile: &str) -> bool {
        answered_by_all(corefile, &self.proxy, SHOP)
            && !self.nginx.iter().any(|ip| corefile.contains(ip.as_str()))
    }

    fn shop_direct(&self, corefile: &str) -> bool {
        answered_by_all(corefile, &self.nginx, SHOP)
            && !self.proxy.iter().any(|ip| corefile.contains(ip.as_str()))
    }
}

/// The chart with the three targets: its flags and its per-object Roles.
fn install() -> Install {
    Install::with_own_coredns(
        RELEASE,
        COREFILE,
        &[
            format!("proxy.target.serviceName={NGINX}"),
            format!("proxy.target.serviceNamespace={NGINX_NS}"),
            "proxy.ingressControllerKind=ingress-nginx".into(),
            format!("proxy.ingressControllerConfig={NGINX_NS}/{NGINX}"),
            "proxies[0].name=envoy".into(),
            "proxies[0].ingressClasses={eg}".into(),
            format!("proxies[0].target.serviceName={ENVOY}"),
            format!("proxies[0].target.serviceNamespace={ENVOY_NS}"),
            "proxies[0].ingressControllerKind=envoy-gateway".into(),
            format!("proxies[0].ingressControllerConfig={ENVOY_NS}/{POLICY}"),
            "proxies[1].name=internal".into(),
            "proxies[1].ingressClasses={internal}".into(),
            format!("proxies[1].target.host=internal.{RELEASE}-apps"),
            "proxies[1].answer=skip".into(),
        ],
    )
}

/// The three targets installed with the chart's values and RBAC, and the controller started.
struct Run {
    addresses: Addresses,
    controller: Process,
    /// The controller's first write of the CoreDNS ConfigMap: the only one until 5 s after it.
    first: String,
    client: Client,
    /// The controller's arguments that `doctor` takes too.
    doctor_args: Vec<String>,
    /// The controller's kubeconfig and log, removed when the run is dropped.
    _dir: tempfile::TempDir,
}

/// The ConfigMap the controller writes, and its key.
const WRITTEN: (&str, &str, &str) = ("ans-dns", COREFILE, "Corefile");

impl Run {
    /// With `crds` (Envoy Gateway's), the CRD and the ClientTrafficPolicy are there before the
    /// controller starts; without, neither is.
    fn start(cluster: &Cluster, rt: &tokio::runtime::Runtime, crds: Option<&Path>) -> Run {
        let (dns, apps) = (format!("{RELEASE}-dns"), format!("{RELEASE}-apps"));
        assert_eq!(dns, WRITTEN.0);
        let install = install();
        let args = install.controller_args();
        assert!(
            args.contains(&format!("--ingress-controller-config={NGINX_NS}/{NGINX}")),
            "{args:?}"
        );
        let fullname = install.fullname();
        let dir = temp_dir("answers");
        let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
        let client = rt.block_on(cluster.admin());

        let addresses = rt.block_on(async {
            for ns in [&dns, &apps, &NGINX_NS.to_string(), &ENVOY_NS.to_string()] {
                cluster.ensure_namespace(ns).await;
            }
            if let Some(crds) = crds {
                cluster.install_crds(crds).await;
                cluster
                    .apply_yaml(&client_traffic_policy().to_string())
                    .await;
            }
            let docs = [
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": COREFILE, "namespace": dns},
                    "data": {"Corefile": kubeadm},
                }),
                nginx_configmap("true"),
                controller_service(NGINX_NS, NGINX),
                controller_service(ENVOY_NS, ENVOY),
                classed_ingress(&apps, "shop", "nginx", SHOP),
                classed_ingress(&apps, "docs", "eg", DOCS),
                classed_ingress(&apps, "wiki", "internal", WIKI),
            ];
            for doc in docs {
                cluster.apply_yaml(&doc.to_string()).await;
            }
            // The chart's objects, its per-object Roles among them.
            install.apply(cluster).await;
            let proxy = |suffix: &str| format!("{fullname}-proxy{suffix}");
            Addresses {
                proxy: cluster_ips(cluster, RELEASE, &proxy("")).await,
                envoy_proxy: cluster_ips(cluster, RELEASE, &proxy("-envoy")).await,
                internal_proxy: cluster_ips(cluster, RELEASE, &proxy("-internal")).await,
                nginx: cluster_ips(cluster, NGINX_NS, NGINX).await,
                envoy: cluster_ips(cluster, ENVOY_NS, ENVOY).await,
            }
        });
        assert_eq!(
            addresses.nginx.len(),
            2,
            "dual-stack: {:?}",
            addresses.nginx
        );

        let mut controller = None;
        let mut first = rt.block_on(writes_during(
            &client,
            WRITTEN,
            async {
                let started = run_controller(cluster, &install, &args, dir.path(), "a").await;
                controller = Some(started.0);
            },
            |text| text.contains(BEGIN) && answers(text, SHOP) && answers(text, DOCS),
        ));
        let doctor_args = args
            .into_iter()
            .filter(|a| {
                let flags = [
                    "--mode",
                    "--proxy-service",
                    "--coredns-",
                    "--node-local-dns",
                ];
                let more = ["--ingress-controller", "--target", "--include-namespace"];
                flags.iter().chain(&more).any(|f| a.starts_with(f))
            })
            .collect();
        let controller = controller.unwrap();
        assert_eq!(
            first.len(),
            1,
            "one first write: {first:#?}\n{}",
            controller.tail()
        );
        Run {
            addresses,
            controller,
            first: first.remove(0),
            client,
            doctor_args,
            _dir: dir,
        }
    }
}

#[test]
fn auto_answers_from_ingress_nginx_and_envoy_gateway_objects_and_a_flip_is_one_write() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let Some(crds) = binary("crds/envoy-gateway") else {
        return;
    };
    let rt = runtime();
    let mut run = Run::start(cluster, &rt, Some(&crds));
    // Both objects are read before the first write, which is the only one.
    assert!(run.addresses.shop_relayed(&run.first), "{}", run.first);
    run.addresses
        .assert_envoy_direct_and_wiki_left_out(&run.first);

    // use-proxy-protocol "false": ingress-nginx refuses the header, so direct, in one write.
    let flipped = rt.block_on(writes_during(
        &run.client,
        WRITTEN,
        cluster.apply_yaml(&nginx_configmap("false").to_string()),
        |text| run.addresses.shop_direct(text),
    ));
    assert_eq!(flipped.len(), 1, "one write moves the names: {flipped:#?}");
    assert!(run.addresses.shop_direct(&flipped[0]), "{}", flipped[0]);
    run.addresses
        .assert_envoy_direct_and_wiki_left_out(&flipped[0]);

    // Deleted: nothing says whether the header is needed, so back through the proxy.
    let deleted = rt.block_on(writes_during(
        &run.client,
        WRITTEN,
        async {
            Api::<ConfigMap>::namespaced(run.client.clone(), NGINX_NS)
                .delete(NGINX, &DeleteParams::default())
                .await
                .unwrap();
        },
        |text| run.addresses.shop_relayed(text),
    ));
    assert_eq!(
        deleted.len(),
        1,
        "one write moves the names back: {deleted:#?}"
    );
    assert!(run.addresses.shop_relayed(&deleted[0]), "{}", deleted[0]);
    run.addresses
        .assert_envoy_direct_and_wiki_left_out(&deleted[0]);

    // Each pick logged with what was read.
    let log = run.controller.log_text();
    for says in [
        "use-proxy-protocol: \\\"true\\\"",
        "use-proxy-protocol: \\\"false\\\"",
        &format!("ConfigMap {NGINX_NS}/{NGINX} not found"),
        "spec.proxyProtocol.optional: true",
    ] {
        assert!(log.contains(says), "{says} not in\n{log}");
    }
    assert!(run.controller.running(), "{}", run.controller.tail());
    assert_no_refusal(&run.controller);
}

/// Envoy Gateway installed after the controller started: while its CRD is missing nothing says
/// whether the header is needed (relayed, and the watch retries); the CRD and the policy
/// installed, the Envoy target goes direct in one write. A control plane of its own: the shared
/// one has the CRD from the test above.
#[test]
fn a_client_traffic_policy_whose_crd_comes_later_is_read_when_it_comes_in_one_write() {
    let Some(crds) = binary("crds/envoy-gateway") else {
        return;
    };
    let Some(cluster) = cluster::private("answers-late-crd") else {
        return;
    };
    let rt = runtime();
    let mut run = Run::start(&cluster, &rt, None);
    assert!(
        answered_by_all(&run.first, &run.addresses.envoy_proxy, DOCS),
        "{}",
        run.first
    );
    assert!(run.addresses.shop_relayed(&run.first), "{}", run.first);
    // doctor, as the admin, says the same of the Envoy target.
    let out = crate::common::run(
        crate::common::command("doctor")
            .args(&run.doctor_args)
            .args(["--leader-elect=false", "--output", "json", "--kubeconfig"])
            .arg(cluster.admin_kubeconfig()),
        None,
    );
    let report: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", out.stdout, out.stderr));
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "answer" && c["target"] == "envoy")
        .unwrap_or_else(|| panic!("no answer check of envoy: {report:#}"))
        .clone();
    assert_eq!(check["status"], "WARN", "{check:#}");
    assert!(
        check["action"].as_str().unwrap().starts_with(
            "the API server does not serve clienttrafficpolicies.gateway.envoyproxy.io (is its \
             CRD installed?)"
        ),
        "{check:#}"
    );

    let installed = rt.block_on(writes_during(
        &run.client,
        WRITTEN,
        async {
            cluster.install_crds(&crds).await;
            cluster
                .apply_yaml(&client_traffic_policy().to_string())
                .await;
        },
        |text| answered_by_all(text, &run.addresses.envoy, DOCS),
    ));
    assert_eq!(
        installed.len(),
        1,
        "one write moves the Envoy names: {installed:#?}\n{}",
        run.controller.tail()
    );
    run.addresses
        .assert_envoy_direct_and_wiki_left_out(&installed[0]);
    assert!(
        run.addresses.shop_relayed(&installed[0]),
        "{}",
        installed[0]
    );
    assert!(run.controller.running(), "{}", run.controller.tail());
    assert_no_refusal(&run.controller);
    // The real server answers a resource it does not serve with a plain 404 (no Status): said
    // as what it is, with what to do, not as a missing object.
    let not_served = "the API server does not serve clienttrafficpolicies.gateway.envoyproxy.io \
                      v1alpha1 (404): install envoy-gateway's CRDs";
    let log = run.controller.log_text();
    for message in [
        "reading the ingress controller's configuration failed",
        "watching the ingress controller's ClientTrafficPolicy ans-eg/proxy-protocol failed",
        "answer picked: whether the ingress controller takes the header is unknown",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(message) && l.contains(not_served)),
            "{message}: {not_served} not in\n{log}"
        );
    }
}
