//! The controller's other modes and the chart's other paths against the real API server, each
//! installed as `controller.rs` installs the default one (every object of `helm template`
//! applied, the controller and `ouroboros cleanup` run with the chart's own arguments and their
//! ServiceAccounts' tokens, so the chart's RBAC is all they may do): external-dns mode with
//! both outputs against the real DNSEndpoint CRD, `cleanup` restoring a Corefile byte for byte,
//! two replicas on one Lease, and Gateway-API CRDs installed while the controller runs.
//!
//! The control plane is shared by every test of the binary, in parallel: each test has its own
//! release (so its own ClusterRole, ServiceAccounts and Lease), namespaces and ConfigMap, and
//! reads only its own application namespace (`controller.includeNamespaces`), so another test's
//! Ingresses never reach its controller.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::Client;
use regex::Regex;
use serde::Deserialize;
use serde_json::{json, Value};

use super::cluster::{self, Cluster};
use super::coredns::corefile_fixture;
use super::{binary, spawn, wait_for, Process};
use crate::chart::{chart_dir, tool};
use crate::support::{free_port, temp_dir, V4};

/// The begin marker of our Corefile block.
pub(super) const BEGIN: &str = "# === BEGIN ouroboros";

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One `helm template` of the chart: release `release` in namespace `release`, whose objects
/// are all named `<release>-ouroboros-...`.
pub(super) struct Install {
    release: String,
    /// Every document, the hooks' too (`cleanupOnUninstall`'s ServiceAccount, Role and Job).
    yaml: String,
}

impl Install {
    pub(super) fn render(release: &str, sets: &[String]) -> Install {
        let mut cmd = Command::new(tool("helm"));
        cmd.args(["template", release])
            .arg(chart_dir())
            .args(["--namespace", release]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        Install {
            release: release.to_string(),
            yaml: crate::common::ok(crate::common::run(&mut cmd, None)),
        }
    }

    /// A coredns-mode release whose CoreDNS ConfigMap `configmap` (and node-local-dns's) is in
    /// `<release>-dns` and which reads only `<release>-apps`, with `extra` values.
    pub(super) fn with_own_coredns(release: &str, configmap: &str, extra: &[String]) -> Install {
        let (dns, apps) = (format!("{release}-dns"), format!("{release}-apps"));
        let mut sets = extra.to_vec();
        sets.extend([
            format!("controller.coredns.namespace={dns}"),
            format!("controller.coredns.configmap={configmap}"),
            format!("controller.nodeLocalDns.namespace={dns}"),
            format!("controller.includeNamespaces={{{apps}}}"),
        ]);
        Install::render(release, &sets)
    }

    pub(super) fn fullname(&self) -> String {
        format!("{}-ouroboros", self.release)
    }

    /// A kubeconfig of the edge's ServiceAccount (`<fullname>-edge`), written into `dir`: the
    /// chart's edge RBAC is all the edge may do.
    pub(super) async fn edge_kubeconfig(&self, cluster: &Cluster, dir: &Path) -> PathBuf {
        let account = format!("{}-edge", self.fullname());
        cluster
            .service_account_kubeconfig(&self.release, &account, dir)
            .await
    }

    /// The arguments of the first container of the `kind` named `name` (after the subcommand).
    pub(super) fn args(&self, kind: &str, name: &str) -> Vec<String> {
        for doc in yaml_serde::Deserializer::from_str(&self.yaml) {
            let v = Value::deserialize(doc).unwrap();
            if v["kind"] == kind && v["metadata"]["name"] == name {
                let args = &v["spec"]["template"]["spec"]["containers"][0]["args"];
                let args: Vec<String> = serde_json::from_value(args.clone()).unwrap();
                return args[1..].to_vec();
            }
        }
        panic!("no {kind} {name} in the chart:\n{}", self.yaml);
    }

    /// The rendered object of `kind` named `name`.
    pub(super) fn object(&self, kind: &str, name: &str) -> Value {
        for doc in yaml_serde::Deserializer::from_str(&self.yaml) {
            let v = Value::deserialize(doc).unwrap();
            if v["kind"] == kind && v["metadata"]["name"] == name {
                return v;
            }
        }
        panic!("no {kind} {name} in the chart:\n{}", self.yaml);
    }

    pub(super) fn controller_args(&self) -> Vec<String> {
        self.args("Deployment", &format!("{}-controller", self.fullname()))
    }

    fn cleanup_args(&self) -> Vec<String> {
        self.args("Job", &format!("{}-cleanup", self.fullname()))
    }

    /// The objects `helm upgrade` applies: all but the uninstall hook's Job, which Helm
    /// leaves alone (its template is immutable).
    pub(super) fn upgrade_yaml(&self) -> String {
        let docs: Vec<&str> = self
            .yaml
            .split("\n---")
            .filter(|doc| !doc.contains("\nkind: Job\n"))
            .collect();
        docs.join("\n---")
    }

    /// The uninstall hook's command, run with `kubeconfig` (its ServiceAccount's), without its
    /// `--drain` (two minutes of waiting for CoreDNS pods, which tests/it/node has). Its
    /// `--stop-controller` scales the chart's controller Deployment, which has no pods here:
    /// the controller of these tests is a process, stopped before.
    fn cleanup(&self, kubeconfig: &Path) -> crate::common::Output {
        let args = self.cleanup_args();
        assert!(
            args.iter().any(|a| a.starts_with("--stop-controller=")),
            "the uninstall hook stops the controller: {args:?}"
        );
        let mut cmd = crate::common::command("cleanup");
        cmd.args(args.iter().filter(|a| !a.starts_with("--drain=")))
            .arg("--kubeconfig")
            .arg(kubeconfig);
        crate::common::run(&mut cmd, None)
    }

    /// A kubeconfig of the uninstall hook's ServiceAccount (bound to the hook's Role only).
    async fn cleanup_kubeconfig(&self, cluster: &Cluster, dir: &Path) -> PathBuf {
        cluster
            .service_account_kubeconfig(&self.release, &format!("{}-cleanup", self.fullname()), dir)
            .await
    }

    /// Creates the release namespace and applies every object (the server validates each).
    pub(super) async fn apply(&self, cluster: &Cluster) {
        cluster.ensure_namespace(&self.release).await;
        cluster.apply_yaml(&self.yaml).await;
    }

    /// The proxy Service's ClusterIP, allocated by the real server.
    pub(super) async fn proxy_ip(&self, cluster: &Cluster) -> String {
        Api::<Service>::namespaced(cluster.admin().await, &self.release)
            .get(&format!("{}-proxy", self.fullname()))
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap()
    }
}

/// The controller with `args` as ServiceAccount `<fullname>-controller`, its Lease identity
/// starting with `replica` (the pod name, `HOSTNAME`, in a cluster), health on a free port.
pub(super) async fn run_controller(
    cluster: &Cluster,
    install: &Install,
    args: &[String],
    dir: &Path,
    replica: &str,
) -> (Process, SocketAddr) {
    let kubeconfig = cluster
        .service_account_kubeconfig(
            &install.release,
            &format!("{}-controller", install.fullname()),
            dir,
        )
        .await;
    let health: SocketAddr = (V4, free_port(V4)).into();
    let mut cmd = crate::common::command("controller");
    for a in args {
        if a.starts_with("--listen-health=") {
            cmd.arg(format!("--listen-health={health}"));
        } else {
            cmd.arg(a);
        }
    }
    cmd.arg("--kubeconfig").arg(&kubeconfig);
    cmd.env("HOSTNAME", replica);
    let log = dir.join(format!("controller-{replica}.log"));
    (spawn(&format!("controller {replica}"), cmd, &log), health)
}

/// The key of the coredns-import snippet.
pub(super) const IMPORT_KEY: &str = "ouroboros.override";

/// A coredns-import release `release` with `extra` values, reading only `<release>-apps` and
/// writing its snippet into ConfigMap `configmap` of `<release>-dns`, with an Ingress `shop`
/// of `host` in the apps namespace; its controller started and waited for until it has
/// written `host`.
pub(super) struct ImportRun {
    pub dns: String,
    pub apps: String,
    pub configmap: String,
    pub controller: Process,
    /// The controller's kubeconfig and log, removed when the run is dropped.
    _dir: tempfile::TempDir,
}

impl ImportRun {
    pub(super) fn start(
        cluster: &Cluster,
        rt: &tokio::runtime::Runtime,
        release: &str,
        configmap: &str,
        extra: &[String],
        host: &str,
    ) -> ImportRun {
        Self::start_with(cluster, rt, (release, configmap), extra, &[], host)
    }

    /// As [`start`](Self::start), the controller also given `flags` (after the chart's).
    pub(super) fn start_with(
        cluster: &Cluster,
        rt: &tokio::runtime::Runtime,
        (release, configmap): (&str, &str),
        extra: &[String],
        flags: &[&str],
        host: &str,
    ) -> ImportRun {
        let dns = format!("{release}-dns");
        let apps = format!("{release}-apps");
        let mut sets = vec![
            "controller.mode=coredns-import".to_string(),
            format!("controller.corednsImport.namespace={dns}"),
            format!("controller.corednsImport.configmap={configmap}"),
            format!("controller.includeNamespaces={{{apps}}}"),
        ];
        sets.extend_from_slice(extra);
        let install = Install::render(release, &sets);
        let dir = temp_dir(release);
        let mut controller = rt.block_on(async {
            cluster.ensure_namespace(&dns).await;
            install.apply(cluster).await;
            cluster.ensure_namespace(&apps).await;
            ingress(cluster, &apps, "shop", &[host]).await;
            let mut args = install.controller_args();
            args.extend(flags.iter().map(|f| f.to_string()));
            run_controller(cluster, &install, &args, dir.path(), "a")
                .await
                .0
        });
        // Whatever else is missing (CRDs), the Ingress's name is written.
        wait_for(
            "writing the Ingress's name",
            &mut controller,
            Duration::from_secs(60),
            || {
                rt.block_on(async {
                    let client = cluster.admin().await;
                    let text = configmap_text(&client, &dns, configmap, IMPORT_KEY).await?;
                    answers(&text, host).then_some(())
                })
            },
        );
        ImportRun {
            dns,
            apps,
            configmap: configmap.to_string(),
            controller,
            _dir: dir,
        }
    }
}

/// Server-side applies an Ingress `name` in `namespace` with `hosts` as its TLS hosts.
pub(super) async fn ingress(cluster: &Cluster, namespace: &str, name: &str, hosts: &[&str]) {
    cluster
        .apply_yaml(
            &json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "tls": [{"hosts": hosts, "secretName": format!("{name}-tls")}],
                    "rules": [{"host": hosts[0], "http": {"paths": [{
                        "path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "web", "port": {"number": 80}}}
                    }]}}],
                },
            })
            .to_string(),
        )
        .await;
}

async fn delete_ingress(cluster: &Cluster, namespace: &str, name: &str) {
    Api::<k8s_openapi::api::networking::v1::Ingress>::namespaced(cluster.admin().await, namespace)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Nothing the API server refused and nothing logged as an error. A refusal is found by the
/// word, which both the server's Status ("... is forbidden: User ...") and our hint
/// ("forbidden (403)") carry: a bare "403" also matches ports and timestamps.
pub(super) fn assert_no_refusal(process: &Process) {
    for line in process.log_text().lines() {
        assert!(
            !line.to_ascii_lowercase().contains("forbidden"),
            "{} refused by RBAC: {line}",
            process.name
        );
        assert!(
            !line.contains("\"level\":\"ERROR\""),
            "{}: {line}",
            process.name
        );
    }
}

/// The Corefile (or snippet) under `key` of ConfigMap `namespace/name`, if any.
pub(super) async fn configmap_text(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()?
        .data?
        .remove(key)
}

/// Whether the template block in `text` answers `host`: one of its `match` patterns matches
/// the query name as CoreDNS's template plugin sees it (with the final dot). The patterns merge
/// names into one alternation, so a plain substring search would not find them.
pub(super) fn answers(text: &str, host: &str) -> bool {
    let query = format!("{host}.");
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("match "))
        .flat_map(str::split_whitespace)
        .any(|p| Regex::new(p).unwrap().is_match(&query))
}

/// Whether a template of `corefile` answering with `ip` (an A template for IPv4, AAAA for
/// IPv6) matches `host`.
pub(super) fn answered_with(corefile: &str, ip: &str, host: &str) -> bool {
    let rtype = if ip.contains(':') { "AAAA" } else { "A" };
    let answer = format!("answer \"{{{{ .Name }}}} 30 IN {rtype} {ip}\"");
    corefile
        .split(&format!("template IN {rtype} "))
        .skip(1)
        .any(|pair| {
            let lines: Vec<&str> = pair.lines().take_while(|l| l.trim() != "}").collect();
            lines.iter().any(|l| l.trim() == answer)
                && lines.iter().any(|l| {
                    l.trim()
                        .strip_prefix("match ")
                        .is_some_and(|re| Regex::new(re).unwrap().is_match(&format!("{host}.")))
                })
        })
}

/// Every write of key `key` of ConfigMap `namespace/name` from just before `change` runs: its
/// texts, in order, watched from the resourceVersion read first, so none is missed. Watched
/// until 5 s (five times the chart's 1 s debounce) after the first write for which `done`
/// holds, for a second write that must not come, or for 60 s when none does.
pub(super) async fn writes_during(
    client: &Client,
    (namespace, name, key): (&str, &str, &str),
    change: impl std::future::Future<Output = ()>,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let rv = api
        .get(name)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api.watch(&wp, &rv).await.unwrap().boxed();
    change.await;
    let mut writes = Vec::new();
    let mut settling = false;
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let event = match tokio::time::timeout_at(deadline, events.try_next()).await {
            Err(_) => break,
            Ok(e) => e.unwrap(),
        };
        let Some(WatchEvent::Modified(cm)) = event else {
            continue;
        };
        let text = cm.data.unwrap_or_default().remove(key).unwrap_or_default();
        if !settling && done(&text) {
            settling = true;
            deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        }
        writes.push(text);
    }
    writes
}

// ---------------------------------------------------------------------------------------------
// external-dns mode

/// The objects of instance `instance` the controller wrote in `namespace`, by the hostname
/// they publish.
async fn external_objects(
    client: &Client,
    namespace: &str,
    resource: &ApiResource,
    instance: &str,
) -> BTreeMap<String, DynamicObject> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let list = api
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/managed-by=ouroboros,ouroboros.io/instance={instance}"
        )))
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|o| {
            let host = match o.data["spec"]["endpoints"][0]["dnsName"].as_str() {
                Some(h) => h.to_string(),
                None => o
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("external-dns.kubernetes.io/hostname"))
                    .cloned()
                    .unwrap_or_default(),
            };
            (host, o)
        })
        .collect()
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
fn external_dns_mode(output: &str) {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let crds = if output == "dnsendpoint" {
        let Some(crds) = binary("crds/external-dns") else {
            return;
        };
        Some(crds)
    } else {
        None
    };
    let release = format!("xdns-{output}");
    let apps = format!("{release}-apps");
    let install = Install::render(
        &release,
        &[
            "controller.mode=external-dns".into(),
            format!("controller.externalDns.output={output}"),
            format!("controller.includeNamespaces={{{apps}}}"),
        ],
    );
    let dir = temp_dir(&format!("controller-{release}"));
    let rt = runtime();
    let resource = if output == "dnsendpoint" {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("externaldns.k8s.io", "v1alpha1", "DNSEndpoint"),
            "dnsendpoints",
        )
    } else {
        ApiResource::erase::<Service>(&())
    };
    let hosts = ["www.xdns.example.com", "*.apps.xdns.example.com"];
    let (proxy_ip, mut controller) = rt.block_on(async {
        if let Some(crds) = &crds {
            cluster.install_crds(crds).await;
        }
        install.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        ingress(cluster, &apps, "shop", &hosts).await;
        let proxy_ip = install.proxy_ip(cluster).await;
        let (controller, _) = run_controller(
            cluster,
            &install,
            &install.controller_args(),
            dir.path(),
            "a",
        )
        .await;
        (proxy_ip, controller)
    });

    // One object per hostname, accepted by the real server (its CRD schema or the Service
    // validation) and read back with what external-dns publishes.
    let objects = wait_for(
        "writing the external-dns objects",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let objects = external_objects(&client, &release, &resource, &release).await;
                (objects.len() == hosts.len()).then_some(objects)
            })
        },
    );
    for host in hosts {
        let obj = objects
            .get(host)
            .unwrap_or_else(|| panic!("no object for {host}: {objects:#?}"));
        if output == "dnsendpoint" {
            // The whole spec as read back: a field the CRD's schema pruned would be missing.
            assert_eq!(
                obj.data["spec"],
                json!({"endpoints": [{
                    "dnsName": host, "recordType": "A", "targets": [proxy_ip], "recordTTL": 60,
                }]}),
                "{host}"
            );
        } else {
            let annotations = obj.metadata.annotations.clone().unwrap_or_default();
            for prefix in [
                "external-dns.kubernetes.io/",
                "external-dns.alpha.kubernetes.io/",
            ] {
                assert_eq!(
                    annotations.get(&format!("{prefix}hostname")),
                    Some(&host.to_string()),
                    "{annotations:?}"
                );
                assert_eq!(
                    annotations.get(&format!("{prefix}target")),
                    Some(&proxy_ip),
                    "{annotations:?}"
                );
                assert_eq!(
                    annotations.get(&format!("{prefix}ttl")).map(String::as_str),
                    Some("60")
                );
            }
            // Headless, so the server allocated no ClusterIP and kube-proxy programs nothing.
            assert_eq!(obj.data["spec"]["clusterIP"], "None", "{host}");
            assert_eq!(obj.data["spec"]["type"], "ClusterIP", "{host}");
        }
    }

    // Another name: one more object, and the two already there, read back from the server as
    // it stored them (defaulted, pruned to the schema), compare equal to what is wanted, so
    // they are not written again.
    rt.block_on(ingress(cluster, &apps, "more", &["more.xdns.example.com"]));
    wait_for(
        "writing the third object",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let objects = external_objects(&client, &release, &resource, &release).await;
                objects.contains_key("more.xdns.example.com").then_some(())
            })
        },
    );
    let applied = |host: &str| {
        controller
            .log_text()
            .lines()
            .filter(|l| {
                l.contains("applied external-dns record")
                    && l.contains(&format!("\"hostname\":\"{host}\""))
            })
            .count()
    };
    for host in hosts {
        assert_eq!(applied(host), 1, "{host}:\n{}", controller.log_text());
    }
    assert_eq!(applied("more.xdns.example.com"), 1);

    // The Ingresses go: so do the objects.
    rt.block_on(delete_ingress(cluster, &apps, "more"));
    rt.block_on(delete_ingress(cluster, &apps, "shop"));
    wait_for(
        "deleting the external-dns objects",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                external_objects(&client, &release, &resource, &release)
                    .await
                    .is_empty()
                    .then_some(())
            })
        },
    );
    // The chart's own proxy Service, in the same namespace, is not ours to delete.
    rt.block_on(install.proxy_ip(cluster));
    assert_no_refusal(&controller);
}

#[test]
fn external_dns_mode_writes_dnsendpoints_the_real_crd_accepts() {
    external_dns_mode("dnsendpoint");
}

#[test]
fn external_dns_mode_writes_headless_services_the_real_server_accepts() {
    external_dns_mode("service");
}

/// The mass removal guard in external-dns mode, with the chart's RBAC: an Ingress losing 3 of
/// its 4 names (the guard set to 3 names, 20 s) keeps the 4 objects, with a RemovalHeld Event
/// and a /readyz cause, until the same set has been seen for 20 s; then 3 are deleted.
#[test]
fn external_dns_mass_removal_is_held_then_written() {
    use k8s_openapi::api::events::v1::Event;
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let release = "xdns-guard".to_string();
    let apps = format!("{release}-apps");
    let install = Install::render(
        &release,
        &[
            "controller.mode=external-dns".into(),
            "controller.externalDns.output=service".into(),
            format!("controller.includeNamespaces={{{apps}}}"),
            "controller.removalGuard.min=3".into(),
            "controller.removalGuard.hold=20s".into(),
        ],
    );
    let dir = temp_dir(&format!("controller-{release}"));
    let rt = runtime();
    let resource = ApiResource::erase::<Service>(&());
    let all = [
        "a.guard.example.com",
        "b.guard.example.com",
        "c.guard.example.com",
        "d.guard.example.com",
    ];
    let (mut controller, health) = rt.block_on(async {
        install.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        // Outside a pod the controller's own namespace (where its Pod's Events go) is
        // `ouroboros`.
        cluster.ensure_namespace("ouroboros").await;
        ingress(cluster, &apps, "shop", &all).await;
        run_controller(
            cluster,
            &install,
            &install.controller_args(),
            dir.path(),
            "guard-0",
        )
        .await
    });
    let count = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            let client = cluster.admin().await;
            external_objects(&client, &release, &resource, &release)
                .await
                .len()
        })
    };
    wait_for(
        "writing 4 objects",
        &mut controller,
        Duration::from_secs(60),
        || (count(&rt) == 4).then_some(()),
    );

    rt.block_on(ingress(cluster, &apps, "shop", &all[..1]));
    let held_at = std::time::Instant::now();
    wait_for(
        "holding the removal",
        &mut controller,
        Duration::from_secs(15),
        || {
            let (code, body) = crate::support::http_get(health, "/readyz");
            (code == 503 && body.starts_with("removal-held: a write that removes 3 of 4 hostnames"))
                .then_some(())
        },
    );
    assert_eq!(count(&rt), 4, "the last write is kept while held");
    let note = rt.block_on(async {
        let events: Api<Event> = Api::namespaced(cluster.admin().await, "ouroboros");
        let listed = events
            .list(&ListParams::default().fields("reason=RemovalHeld"))
            .await
            .unwrap();
        listed.items.into_iter().find_map(|e| {
            (e.regarding.as_ref()?.name.as_deref() == Some("guard-0")).then_some(e.note?)
        })
    });
    let note = note.expect("a RemovalHeld Event on the controller's Pod");
    assert!(
        note.starts_with("a write would remove 3 of the 4 hostnames"),
        "{note}"
    );
    wait_for(
        "writing the held set",
        &mut controller,
        Duration::from_secs(60),
        || (count(&rt) == 1).then_some(()),
    );
    assert!(
        held_at.elapsed() >= Duration::from_secs(15),
        "released only after the hold: {:?}",
        held_at.elapsed()
    );
    let (code, _) = crate::support::http_get(health, "/readyz");
    assert_eq!(code, 200);
    assert_no_refusal(&controller);
}

// ---------------------------------------------------------------------------------------------
// cleanup

/// The parts of a ConfigMap a user owns.
fn user_view(cm: &ConfigMap) -> Value {
    json!({
        "data": cm.data,
        "binaryData": cm.binary_data,
        "labels": cm.metadata.labels,
        "annotations": cm.metadata.annotations,
    })
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[test]
fn cleanup_with_the_charts_hook_rbac_restores_the_corefile_byte_for_byte() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let release = "modes-cleanup";
    let dns = format!("{release}-dns");
    let apps = format!("{release}-apps");
    let install = Install::with_own_coredns(release, "coredns-cleanup", &[]);
    let dir = temp_dir("controller-cleanup");
    let rt = runtime();
    // CRLF line ends, a label, an annotation and a second key: what a byte-level editor could
    // lose, all compared after the cleanup.
    let corefile = std::fs::read_to_string(corefile_fixture("crlf.Corefile")).unwrap();
    assert!(corefile.contains("\r\n"));
    let before = rt.block_on(async {
        cluster.ensure_namespace(&dns).await;
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "coredns-cleanup", "namespace": dns,
                        "labels": {"k8s-app": "kube-dns"},
                        "annotations": {"example.com/owner": "platform"},
                    },
                    "data": {"Corefile": corefile, "extra.server": "example.org:53 {\n    whoami\n}\n"},
                })
                .to_string(),
            )
            .await;
        install.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        ingress(cluster, &apps, "shop", &["shop.cleanup.example.com"]).await;
        Api::<ConfigMap>::namespaced(cluster.admin().await, &dns)
            .get("coredns-cleanup")
            .await
            .unwrap()
    });

    let mut controller = rt
        .block_on(run_controller(
            cluster,
            &install,
            &install.controller_args(),
            dir.path(),
            "a",
        ))
        .0;
    let written = wait_for(
        "writing the block",
        &mut controller,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns, "coredns-cleanup", "Corefile").await?;
                text.contains(BEGIN).then_some(text)
            })
        },
    );
    assert!(answers(&written, "shop.cleanup.example.com"), "{written}");
    assert_no_refusal(&controller);
    // Uninstalled: the hook scales the controller's Deployment to zero and waits until its
    // pods are gone and its Lease released; this controller is a process, so it stops here.
    drop(controller);

    // The hook's command, as its own ServiceAccount (bound to the hook's Role only).
    let kubeconfig = rt.block_on(install.cleanup_kubeconfig(cluster, dir.path()));
    let out = install.cleanup(&kubeconfig);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = rt.block_on(async {
        Api::<ConfigMap>::namespaced(cluster.admin().await, &dns)
            .get("coredns-cleanup")
            .await
            .unwrap()
    });
    assert_eq!(user_view(&after), user_view(&before));
    assert_eq!(
        after.data.as_ref().unwrap()["Corefile"].as_bytes(),
        corefile.as_bytes()
    );

    // Run again (a retried hook): nothing to remove, and no write at all.
    let out = install.cleanup(&kubeconfig);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("nothing to remove"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    let again = rt.block_on(async {
        Api::<ConfigMap>::namespaced(cluster.admin().await, &dns)
            .get("coredns-cleanup")
            .await
            .unwrap()
    });
    assert_eq!(
        again.metadata.resource_version,
        after.metadata.resource_version
    );
}

// ---------------------------------------------------------------------------------------------
// two replicas

/// The Lease's holder, if any.
pub(super) async fn lease_holder(client: &Client, namespace: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

pub(super) const ACQUIRED: &str = "acquired the lease";
pub(super) const WROTE: &str = "wrote DNS configuration";

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[test]
fn two_replicas_on_one_lease_one_writes_and_the_other_takes_over() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let release = "modes-ha";
    let dns = format!("{release}-dns");
    let apps = format!("{release}-apps");
    let install =
        Install::with_own_coredns(release, "coredns-ha", &["controller.replicas=2".into()]);
    let lease = format!("{}-controller", install.fullname());
    let args = install.controller_args();
    assert!(args.contains(&format!("--lease-name={lease}")), "{args:?}");
    let dir = temp_dir("controller-ha");
    let rt = runtime();
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    let (mut a, b) = rt.block_on(async {
        cluster.ensure_namespace(&dns).await;
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns-ha", "namespace": dns},
                    "data": {"Corefile": kubeadm},
                })
                .to_string(),
            )
            .await;
        install.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        ingress(cluster, &apps, "one", &["one.ha.example.com"]).await;
        // Two pods of one Deployment: same arguments, same ServiceAccount.
        let a = run_controller(cluster, &install, &args, dir.path(), "replica-a")
            .await
            .0;
        let b = run_controller(cluster, &install, &args, dir.path(), "replica-b")
            .await
            .0;
        (a, b)
    });
    let holder = wait_for("taking the lease", &mut a, Duration::from_secs(60), || {
        rt.block_on(async {
            let client = cluster.admin().await;
            lease_holder(&client, release, &lease).await
        })
    });
    let (mut leader, mut standby) = if holder.starts_with("replica-a-") {
        (a, b)
    } else {
        assert!(holder.starts_with("replica-b-"), "holder {holder}");
        (b, a)
    };
    wait_for(
        "writing the block",
        &mut leader,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns, "coredns-ha", "Corefile").await?;
                answers(&text, "one.ha.example.com").then_some(())
            })
        },
    );
    // A change while both run: the leader writes it, the standby only watches.
    rt.block_on(ingress(cluster, &apps, "two", &["two.ha.example.com"]));
    wait_for(
        "writing the change",
        &mut leader,
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns, "coredns-ha", "Corefile").await?;
                answers(&text, "two.ha.example.com").then_some(())
            })
        },
    );
    assert!(standby.running(), "{}", standby.tail());
    let leader_log = leader.log_text();
    assert!(leader_log.contains(ACQUIRED), "{leader_log}");
    assert!(leader_log.contains(WROTE), "{leader_log}");
    let standby_log = standby.log_text();
    assert!(!standby_log.contains(ACQUIRED), "{standby_log}");
    assert!(!standby_log.contains(WROTE), "{standby_log}");
    assert_eq!(
        rt.block_on(async { lease_holder(&cluster.admin().await, release, &lease).await }),
        Some(holder.clone())
    );
    assert_no_refusal(&leader);
    assert_no_refusal(&standby);

    // The leader dies without releasing (SIGKILL, as a node failure): the standby takes the
    // Lease once it expires and writes the next change.
    drop(leader);
    rt.block_on(ingress(cluster, &apps, "three", &["three.ha.example.com"]));
    wait_for(
        "taking over and writing the change",
        &mut standby,
        Duration::from_secs(90),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns, "coredns-ha", "Corefile").await?;
                answers(&text, "three.ha.example.com").then_some(())
            })
        },
    );
    let new_holder = rt
        .block_on(async { lease_holder(&cluster.admin().await, release, &lease).await })
        .unwrap();
    assert_ne!(new_holder, holder);
    assert!(
        new_holder.starts_with(&standby.name["controller ".len()..]),
        "{new_holder} is not {}",
        standby.name
    );
    let standby_log = standby.log_text();
    assert!(standby_log.contains(ACQUIRED), "{standby_log}");
    assert!(standby_log.contains(WROTE), "{standby_log}");
    assert_no_refusal(&standby);
}

// ---------------------------------------------------------------------------------------------
// Gateway API

fn gateway_crds() -> Option<PathBuf> {
    binary("crds/gateway-api-standard")
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[test]
fn gateway_api_crds_installed_while_the_controller_runs_are_picked_up() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let Some(crds) = gateway_crds() else {
        return;
    };
    let rt = runtime();
    let run = ImportRun::start(
        cluster,
        &rt,
        "modes-gw",
        "coredns-custom-gw",
        &["controller.gatewayApi=true".into()],
        "shop.gw.example.com",
    );
    let (apps, dns) = (run.apps.clone(), run.dns.clone());
    let mut controller = run.controller;
    let key = IMPORT_KEY;
    // Several retries of the missing kinds' lists (the backoff starts under a second): each
    // kind is reported once, not once per retry.
    std::thread::sleep(Duration::from_secs(8));
    let missing = |log: &str, resource: &str| {
        log.lines()
            .filter(|l| {
                l.contains(&format!(
                    "gateway.networking.k8s.io/{resource} is not served"
                ))
            })
            .count()
    };
    let log = controller.log_text();
    for resource in ["gateways", "httproutes", "grpcroutes", "tlsroutes"] {
        assert_eq!(missing(&log, resource), 1, "{resource}:\n{log}");
    }
    // The real server's 404 for a group it does not serve is plain text, not a Status: kube's
    // client warned about each one, every retry, before our filter dropped those warnings.
    assert!(!log.contains("\"target\":\"kube_client"), "{log}");

    // Installed while it runs: a route's hostnames are hairpinned.
    rt.block_on(async {
        cluster.install_crds(&crds).await;
        for doc in [
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": "modes-gw"},
                "spec": {"controllerName": "example.com/gateway-controller"},
            }),
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "edge", "namespace": apps},
                "spec": {"gatewayClassName": "modes-gw", "listeners": [{
                    "name": "https", "protocol": "HTTPS", "port": 443,
                    "hostname": "*.gateway.gw.example.com",
                    "tls": {"certificateRefs": [{"name": "edge-tls"}]},
                }]},
            }),
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "store", "namespace": apps},
                "spec": {
                    "parentRefs": [{"name": "edge"}],
                    "hostnames": ["store.gw.example.com"],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
                },
            }),
        ] {
            cluster.apply_yaml(&doc.to_string()).await;
        }
    });
    let text = wait_for(
        "writing the route's and the Gateway's names",
        &mut controller,
        Duration::from_secs(90),
        || {
            rt.block_on(async {
                let client = cluster.admin().await;
                let text = configmap_text(&client, &dns, "coredns-custom-gw", key).await?;
                (answers(&text, "store.gw.example.com")
                    && answers(&text, "www.gateway.gw.example.com"))
                .then_some(text)
            })
        },
    );
    assert!(answers(&text, "shop.gw.example.com"), "{text}");
    let log = controller.log_text();
    assert!(log.contains("the CRD is installed now"), "{log}");
    for resource in ["gateways", "httproutes", "grpcroutes", "tlsroutes"] {
        assert_eq!(missing(&log, resource), 1, "{resource}:\n{log}");
    }
    assert_no_refusal(&controller);
}

// ---------------------------------------------------------------------------------------------
// the view form

/// An operator moves a running install from the template pair to the view form: the controller
/// takes its block out of the root block and writes the per-TLD server blocks before it, real
/// CoreDNS answers the same from both, and `cleanup` then restores the Corefile byte for byte.
#[test]
fn switching_to_the_view_form_moves_the_block_and_cleanup_still_restores_the_corefile() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let Some(coredns) = binary("coredns") else {
        return;
    };
    let Some(scene) = super::coredns::Scene::new("controller-view-coredns") else {
        return;
    };
    let release = "modes-view";
    let dns = format!("{release}-dns");
    let apps = format!("{release}-apps");
    let install = |form: &str| {
        Install::with_own_coredns(
            release,
            "coredns-view",
            &[format!("controller.corednsAnswer={form}")],
        )
    };
    let dir = temp_dir("controller-view");
    let rt = runtime();
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    let template = install("template");
    let proxy_ip = rt.block_on(async {
        cluster.ensure_namespace(&dns).await;
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "coredns-view", "namespace": dns},
                    "data": {"Corefile": kubeadm},
                })
                .to_string(),
            )
            .await;
        template.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        ingress(
            cluster,
            &apps,
            "shop",
            &["shop.view.example.com", "*.apps.view.example.org"],
        )
        .await;
        template.proxy_ip(cluster).await
    });

    let forms = Forms {
        cluster,
        rt: &rt,
        scene: &scene,
        coredns: &coredns,
        dir: dir.path(),
        dns: &dns,
        proxy_ip: &proxy_ip,
    };
    let run = |install: &Install, form: &str, marker: &str| forms.run(install, form, marker);
    let pair = run(&template, "template", "template IN A");
    let root = pair.find(".:53 {").expect("kubeadm's root block");
    assert!(
        pair.find(BEGIN).unwrap() > root,
        "the pair sits in the root block:\n{pair}"
    );

    let view = install("view");
    rt.block_on(cluster.apply_yaml(&view.upgrade_yaml()));
    let views = run(&view, "view", "view ouroboros");
    let root = views.find(".:53 {").expect("kubeadm's root block");
    assert!(
        views.find(BEGIN).unwrap() < root,
        "the server blocks precede the root block:\n{views}"
    );
    assert!(
        !views[root..].contains("ouroboros"),
        "nothing left in the root block:\n{views}"
    );

    // Uninstalled: the hook's command, as its own ServiceAccount, restores kubeadm's Corefile.
    let kubeconfig = rt.block_on(view.cleanup_kubeconfig(cluster, dir.path()));
    let out = view.cleanup(&kubeconfig);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = rt.block_on(async {
        configmap_text(&cluster.admin().await, &dns, "coredns-view", "Corefile").await
    });
    assert_eq!(after.as_deref(), Some(kubeadm.as_str()));
}

/// What the view-form test loads each form's block into.
struct Forms<'a> {
    cluster: &'a Cluster,
    rt: &'a tokio::runtime::Runtime,
    scene: &'a super::coredns::Scene,
    coredns: &'a Path,
    dir: &'a Path,
    dns: &'a str,
    proxy_ip: &'a str,
}

impl Forms<'_> {
    /// Runs the controller of `install` until the block holding `marker` is in the real
    /// ConfigMap, then loads that Corefile into real CoreDNS: the hairpinned names answer the
    /// proxy (A) and NODATA (AAAA: the proxy Service is IPv4-only). Returns the Corefile.
    fn run(&self, install: &Install, form: &str, marker: &str) -> String {
        let (mut controller, _) = self.rt.block_on(run_controller(
            self.cluster,
            install,
            &install.controller_args(),
            self.dir,
            form,
        ));
        let written = wait_for(
            &format!("writing the {form} block"),
            &mut controller,
            Duration::from_secs(60),
            || {
                self.rt.block_on(async {
                    let client = self.cluster.admin().await;
                    let text =
                        configmap_text(&client, self.dns, "coredns-view", "Corefile").await?;
                    text.contains(marker).then_some(text)
                })
            },
        );
        assert_eq!(written.matches(BEGIN).count(), 1, "one block:\n{written}");
        assert_no_refusal(&controller);
        let server = self.scene.coredns(self.coredns, form, &written);
        for name in ["shop.view.example.com.", "x.apps.view.example.org."] {
            let a = server.ask(name, simple_dns::TYPE::A, false);
            assert_eq!(
                a.answers,
                vec![format!("A {}", self.proxy_ip)],
                "{form}: {name}"
            );
            let aaaa = server.ask(name, simple_dns::TYPE::AAAA, true);
            assert_eq!(
                (aaaa.rcode, aaaa.answers.len()),
                (simple_dns::RCODE::NoError, 0),
                "{form}: {name} AAAA"
            );
        }
        written
    }
}
