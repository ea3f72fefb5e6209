//! The Helm chart (charts/ouroboros) and deploy/quickstart.yaml: lint, render for every mode and
//! a matrix of values, validate every render against the Kubernetes schemas, and check the
//! rendered objects against the binary itself: RBAC equal to `controller::rbac`, flags that the
//! real CLI accepts, hardened pods, probes. Needs Helm and kubernetes-validate in .ci/bin
//! (`.ci/tools.sh` installs them).

use crate::common;
use crate::generated::{cell, Section};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use clap::Parser;
use serde::Deserialize;
use serde_json::Value;

use ouroboros::cleanup::CleanupArgs;
use ouroboros::controller::hostnames::targets::parse_target;
use ouroboros::controller::rbac::workloads::{self, EdgeNeeds};
use ouroboros::controller::rbac::{self, Needs, Rule, Scope};
use ouroboros::controller::ControllerArgs;
use ouroboros::dns::Mode;

pub(crate) const RELEASE: &str = "ouroboros";
pub(crate) const NAMESPACE: &str = "ouroboros";
/// Kubernetes version the renders are validated against (kubernetes-validate's schemas).
pub(crate) const KUBERNETES_VERSION: &str = "1.35.0";
/// Custom resources kubernetes-validate has no schema for; checked field by field below.
pub(crate) const CUSTOM_KINDS: &[&str] = &["ServiceMonitor", "PrometheusRule"];

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn chart_dir() -> PathBuf {
    root().join("charts/ouroboros")
}

pub(crate) fn tool(name: &str) -> PathBuf {
    let p = root().join(".ci/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run .ci/tools.sh (it installs Helm, kubernetes-validate and promtool)",
        p.display()
    );
    p
}

pub(crate) fn run(cmd: &mut Command, stdin: Option<&str>) -> (bool, String, String) {
    let out = common::run(cmd, stdin);
    (out.code == 0, out.stdout, out.stderr)
}

/// `--values` files, then `--set` values on a Helm command: `string:` for `--set-string`,
/// `json:` for `--set-json`, `values:` for a values file of the repository.
fn values_args(cmd: &mut Command, files: &[&Path], sets: &[&str]) {
    for f in files {
        cmd.arg("--values").arg(f);
    }
    for s in sets {
        if let Some(f) = s.strip_prefix("values:") {
            cmd.arg("--values").arg(root().join(f));
        } else if let Some(s) = s.strip_prefix("string:") {
            cmd.args(["--set-string", s]);
        } else if let Some(s) = s.strip_prefix("json:") {
            cmd.args(["--set-json", s]);
        } else {
            cmd.args(["--set", s]);
        }
    }
}

/// `helm template` (`helm` names the binary of .ci/bin: `helm`, or `helm3` for Helm 3) of the
/// chart with its hooks, values files and `--set` values: the YAML, or Helm's error.
fn template_files(helm: &str, files: &[&Path], sets: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool(helm));
    cmd.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE]);
    values_args(&mut cmd, files, sets);
    let (ok, out, err) = run(&mut cmd, None);
    if ok {
        // A documented value that makes Helm warn (a table merged over a scalar default, a
        // deprecated key) is a bug: every successful render is checked.
        assert!(
            !err.to_ascii_lowercase().contains("warning"),
            "{helm} template with {files:?} {sets:?} warns:\n{err}"
        );
        Ok(out)
    } else {
        Err(err)
    }
}

/// `helm template` with `--set` values: the YAML, or Helm's error (for values it must refuse).
fn template(sets: &[&str]) -> Result<String, String> {
    template_files("helm", &[], sets)
}

/// One render: Helm's YAML and its objects.
struct Render {
    yaml: String,
    objs: Vec<Value>,
}

/// What a test run computes once per key and keeps: a render, or a NOTES text, shared by every
/// test that asks for the same values (each Helm run costs a few hundred milliseconds). Tests
/// asking for different keys do not wait on each other.
fn once<T: Send + Sync + 'static>(
    cache: &'static Mutex<BTreeMap<String, &'static OnceLock<T>>>,
    key: String,
    make: impl FnOnce() -> T,
) -> &'static T {
    let cell: &'static OnceLock<T> = cache
        .lock()
        .unwrap()
        .entry(key)
        .or_insert_with(|| Box::leak(Box::default()));
    cell.get_or_init(make)
}

/// The render of the chart with `helm`, `files` and `sets`, which must succeed.
fn render_with(helm: &str, files: &[&Path], sets: &[&str]) -> &'static Render {
    static CACHE: Mutex<BTreeMap<String, &'static OnceLock<Render>>> = Mutex::new(BTreeMap::new());
    once(&CACHE, format!("{helm} {files:?} {sets:?}"), || {
        let yaml = template_files(helm, files, sets)
            .unwrap_or_else(|e| panic!("{helm} template {files:?} {sets:?} failed: {e}"));
        Render {
            objs: docs(&yaml),
            yaml,
        }
    })
}

/// The render with `--set` values (prefixes as in `values_args`).
fn render(sets: &[&str]) -> &'static Render {
    render_with("helm", &[], sets)
}

/// The objects of that render.
fn rendered(sets: &[&str]) -> &'static [Value] {
    &render(sets).objs
}

/// The render of the chart's defaults.
fn defaults() -> &'static [Value] {
    rendered(&[])
}

/// NOTES.txt as `helm install --dry-run=client` prints it. Helm 4 only: Helm 3 wants a cluster
/// even for a client-side dry run.
fn notes(files: &[&Path], sets: &[&str]) -> &'static str {
    static CACHE: Mutex<BTreeMap<String, &'static OnceLock<String>>> = Mutex::new(BTreeMap::new());
    let text: &'static String = once(&CACHE, format!("{files:?} {sets:?}"), || {
        let mut cmd = Command::new(tool("helm"));
        cmd.args(["install", RELEASE]).arg(chart_dir()).args([
            "--namespace",
            NAMESPACE,
            "--dry-run=client",
        ]);
        values_args(&mut cmd, files, sets);
        let (ok, out, err) = run(&mut cmd, None);
        assert!(ok, "helm install --dry-run {files:?} {sets:?}: {err}");
        match out.split_once("\nNOTES:\n") {
            Some((_, notes)) => notes.to_string(),
            None => panic!("no NOTES in:\n{out}"),
        }
    });
    text
}

pub(crate) fn docs(yaml: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Two ingress controllers (a `values:` entry of a case): ingress-nginx on the main proxy,
/// Traefik on an entry of `proxies`.
const TWO_PROXIES: &str = "values:tests/fixtures/chart/two-proxies.yaml";
/// The name of the cases rendering TWO_PROXIES begins so.
const TWO_PROXIES_CASE: &str = "two ingress controllers";

/// The values matrix: every mode and the options that change what is rendered (prefixes as in
/// `values_args`).
/// Each target answered its own way (a `values:` entry of a case).
const ANSWERS: &str = "values:tests/fixtures/chart/answers.yaml";
/// The name of the case rendering ANSWERS.
const ANSWERS_CASE: &str = "answers per target";
const CASES: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    (ANSWERS_CASE, &[ANSWERS]),
    (
        "coredns, custom names, Gateway API, class filter, 2 replicas",
        &[
            "controller.coredns.namespace=dns",
            "controller.coredns.configmap=corefile",
            "controller.coredns.key=Main",
            "controller.nodeLocalDns.namespace=nl",
            "controller.nodeLocalDns.configmap=nlc",
            "controller.gatewayApi=true",
            "controller.ingressClass=nginx",
            "controller.gatewayClass=eg",
            "controller.replicas=2",
            "controller.leaseName=my-lease",
            "controller.corednsAnswer=rewrite",
            "controller.proxyFqdn=p.example.svc.cluster.local.",
        ],
    ),
    (
        "coredns, Traefik, Contour and Istio sources",
        &[
            "controller.traefikIngressRoutes=true",
            "controller.contourHttpProxies=true",
            "controller.istioGateways=true",
        ],
    ),
    (
        "etc-hosts alone, Traefik sources only",
        &["etcHosts.enabled=true", "controller.traefikIngressRoutes=true"],
    ),
    (
        "coredns, view answers, node-local-dns",
        &[
            "controller.corednsAnswer=view",
            "controller.nodeLocalDns.enabled=true",
        ],
    ),
    (
        "coredns, auto answers with the CoreDNS version given",
        &["controller.corednsVersion=v1.11.3"],
    ),
    (
        "coredns, node-local-dns (kubespray's name)",
        &[
            "controller.nodeLocalDns.enabled=true",
            "controller.nodeLocalDns.configmap=nodelocaldns",
        ],
    ),
    (
        "coredns-import, node-local-dns in its own namespace, fixed proxy IPs",
        &[
            "controller.mode=coredns-import",
            "controller.nodeLocalDns.enabled=true",
            "controller.nodeLocalDns.namespace=nl",
            "controller.proxyIps={10.0.0.9,fd00::9}",
        ],
    ),
    (
        "coredns, filters, dry run, cluster domain, no cleanup",
        &[
            "controller.allowDomains={example.com,example.org}",
            "controller.denyDomains={internal.example.com}",
            "controller.ingressHosts=all",
            "controller.includeNamespaces={shop,web}",
            "controller.excludeNamespaces={web}",
            "controller.dryRun=true",
            "clusterDomain=k8s.example",
            "controller.cleanupOnUninstall=false",
            "controller.resync=5m",
            "controller.debounce=500ms",
            "logFormat=text",
            "logLevel=debug",
        ],
    ),
    (
        "coredns-import",
        &[
            "controller.mode=coredns-import",
            "controller.corednsImport.namespace=dns",
            "controller.corednsImport.configmap=custom",
            "controller.corednsImport.key=hairpin.override",
        ],
    ),
    (
        "coredns-import without leader election",
        &["controller.mode=coredns-import", "controller.leaderElect=false"],
    ),
    ("external-dns", &["controller.mode=external-dns"]),
    (
        "external-dns: Services, own namespace, fixed IPs, labels",
        &[
            "controller.mode=external-dns",
            "controller.externalDns.output=service",
            "controller.externalDns.namespace=dns-records",
            "controller.externalDns.proxyIps={10.0.0.1,fd00::1}",
            "controller.externalDns.recordTtl=300",
            "controller.externalDns.labels.team=net",
            "string:controller.externalDns.annotations.external-dns\\.alpha\\.kubernetes\\.io/cloudflare-proxied=false",
            "controller.instance=blue",
            "controller.gatewayApi=true",
        ],
    ),
    (
        "external-dns: one annotation prefix, adopting the reference tool's records",
        &[
            "controller.mode=external-dns",
            "controller.externalDns.output=service",
            "controller.externalDns.annotationPrefix=internal-dns/",
            "controller.externalDns.adoptReferenceRecords=true",
        ],
    ),
    (
        "external-dns: another proxy Service",
        &[
            "controller.mode=external-dns",
            "controller.externalDns.proxyService=edge-proxy",
        ],
    ),
    (
        "etc-hosts alongside coredns (controller.mode set)",
        &[
            "etcHosts.enabled=true",
            "controller.mode=coredns",
            "controller.ingressClass=nginx",
        ],
    ),
    (
        "etc-hosts instead of the controller (controller.mode empty)",
        &["etcHosts.enabled=true"],
    ),
    (
        "etc-hosts alone, fixed IPs, no cleanup on stop",
        &[
            "controller.enabled=false",
            "etcHosts.enabled=true",
            "etcHosts.proxyIps={10.96.0.10}",
            "etcHosts.cleanupOnStop=false",
            "etcHosts.hostPath=/etc/hosts.d/hosts",
        ],
    ),
    (
        "edge, named ports",
        &["edge.enabled=true", "edge.balance=source-hash"],
    ),
    (
        "edge as the load balancer of a class",
        &[
            "edge.enabled=true",
            "edge.loadBalancer.enabled=true",
            "edge.loadBalancer.class=example.com/lb",
            "edge.loadBalancer.pools[0].name=public",
            "edge.loadBalancer.pools[0].addresses={192.0.2.0/28,2001:db8::/124}",
            "edge.loadBalancer.pools[0].namespaces={web}",
            "edge.loadBalancer.pools[0].serviceSelector.matchLabels.edge=public",
        ],
    ),
    (
        "edge as the load balancer of a layer-2 pool, no leader election",
        &[
            "edge.enabled=true",
            "edge.loadBalancer.enabled=true",
            "edge.loadBalancer.leaderElect=false",
            "edge.loadBalancer.pools[0].name=routed",
            "edge.loadBalancer.pools[0].addresses={192.0.2.0/28}",
            "edge.loadBalancer.pools[1].name=lan",
            "edge.loadBalancer.pools[1].addresses={198.51.100.0/28}",
            "edge.loadBalancer.pools[1].l2.interface=eth0",
        ],
    ),
    (
        EDGE_DEPLOYMENT_CASE,
        &[
            "edge.enabled=true",
            "edge.kind=Deployment",
            "edge.replicas=3",
            "edge.nodeSelector.role=edge",
            "edge.loadBalancer.enabled=true",
            "edge.loadBalancer.pools[0].name=lan",
            "edge.loadBalancer.pools[0].addresses={198.51.100.0/28}",
            "edge.loadBalancer.pools[0].l2.interface=eth0",
        ],
    ),
    (
        "edge as the load balancer of a layer-2 pool, kernel relay",
        &[
            "edge.enabled=true",
            "edge.copyMode=sockmap",
            "edge.loadBalancer.enabled=true",
            "edge.loadBalancer.pools[0].name=lan",
            "edge.loadBalancer.pools[0].addresses={198.51.100.0/28}",
            "edge.loadBalancer.pools[0].l2.interface=eth0",
        ],
    ),
    (
        "edge, numbered ports, dual-stack listeners",
        &[
            "edge.enabled=true",
            "edge.service=traefik/traefik",
            "edge.listen={[::]:443=443,0.0.0.0:443=443,:80=web}",
            "edge.proxyProtocol=v2",
            "edge.healthInterval=5s",
            "edge.copyMode=splice",
            "edge.threads=1",
            "edge.busyPoll=50us",
        ],
    ),
    (
        "proxy: dual-stack, one replica, target Service, NetworkPolicy, ServiceMonitor",
        &[
            "proxy.replicas=1",
            "proxy.service.ipFamilyPolicy=PreferDualStack",
            "proxy.service.ipFamilies={IPv6,IPv4}",
            "proxy.target.serviceName=traefik",
            "proxy.target.serviceNamespace=traefik",
            "proxy.proxyProtocol=v2",
            "proxy.shutdownDelaySeconds=10",
            "proxy.shutdownGraceSeconds=60",
            "networkPolicy.enabled=true",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
            "serviceMonitor.enabled=true",
        ],
    ),
    (
        "two ingress controllers: ingress-nginx on the main proxy, traefik on proxies",
        &[TWO_PROXIES],
    ),
    (
        "two ingress controllers, external-dns with the etc-hosts DaemonSet",
        &[
            TWO_PROXIES,
            "controller.mode=external-dns",
            "etcHosts.enabled=true",
        ],
    ),
    (
        "two ingress controllers, ipMode not watched, with the etc-hosts DaemonSet",
        &[
            TWO_PROXIES,
            "controller.skipProxyIpMode=false",
            "etcHosts.enabled=true",
            "controller.mode=coredns",
        ],
    ),
    (
        "two ingress controllers told apart by their IngressClasses' spec.controller",
        &[
            "controller.ingressClassControllers={k8s.io/ingress-nginx}",
            "proxies[0].name=traefik",
            "proxies[0].target.serviceName=traefik",
            "proxies[0].target.serviceNamespace=traefik",
            "proxies[0].ingressClassControllers={traefik.io/ingress-controller}",
        ],
    ),
    (
        "two ingress controllers, the entry and edge in sockmap mode",
        &[
            TWO_PROXIES,
            "proxies[0].copyMode=sockmap",
            "edge.enabled=true",
            "edge.copyMode=sockmap",
        ],
    ),
];

/// A case of a table and its render: (name, objects, YAML).
type Rendered = (&'static str, &'static [Value], &'static str);

/// The cases of a table rendered with `files`.
fn render_cases(
    helm: &str,
    files: &[&Path],
    cases: &'static [(&'static str, &[&str])],
) -> Vec<Rendered> {
    let render = |cases: &'static [(&'static str, &[&str])]| -> Vec<Rendered> {
        cases
            .iter()
            .map(|&(name, sets)| {
                let r = render_with(helm, files, sets);
                (name, &r.objs[..], &r.yaml[..])
            })
            .collect()
    };
    // Two Helm runs at a time (a table's first test would otherwise render it alone while the
    // others wait): one per core of the CI machine.
    let (first, second) = cases.split_at(cases.len() / 2);
    std::thread::scope(|s| {
        let second = s.spawn(|| render(second));
        let mut all = render(first);
        all.extend(second.join().expect("a render failed"));
        all
    })
}

/// Every case of the values matrix rendered.
fn renders() -> Vec<Rendered> {
    render_cases("helm", &[], CASES)
}

pub(crate) fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or("")
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

fn find<'a>(objs: &'a [Value], k: &str, n: &str) -> Option<&'a Value> {
    objs.iter().find(|o| kind(o) == k && name(o) == n)
}

/// The render of the first case whose name begins with `prefix`.
fn case(prefix: &str) -> &'static [Value] {
    let (_, sets) = CASES
        .iter()
        .find(|(c, _)| c.starts_with(prefix))
        .unwrap_or_else(|| panic!("no case {prefix:?}"));
    rendered(sets)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Pod templates of the workloads: (workload kind/name, pod spec).
fn pods(objs: &[Value]) -> Vec<(String, &Value)> {
    objs.iter()
        .filter(|o| matches!(kind(o), "Deployment" | "DaemonSet" | "Job"))
        .map(|o| {
            (
                format!("{}/{}", kind(o), name(o)),
                &o["spec"]["template"]["spec"],
            )
        })
        .collect()
}

/// Every ouroboros invocation in the render: (where, argv after the binary).
fn invocations(objs: &[Value]) -> Vec<(String, Vec<String>)> {
    let mut out = vec![];
    for (w, pod) in pods(objs) {
        for c in pod["containers"].as_array().unwrap() {
            let cname = c["name"].as_str().unwrap();
            out.push((format!("{w} container {cname}"), strings(&c["args"])));
            let pre = &c["lifecycle"]["preStop"]["exec"]["command"];
            if !pre.is_null() {
                let cmd = strings(pre);
                assert_eq!(
                    cmd[0], "/usr/local/bin/ouroboros",
                    "{w}: preStop runs the binary where the Containerfile puts it"
                );
                out.push((format!("{w} preStop of {cname}"), cmd[1..].to_vec()));
            }
        }
    }
    out
}

// --- flags -------------------------------------------------------------------------------------

/// The flags of the controller and the etc-hosts DaemonSet, parsed with the controller's own
/// arguments (`ControllerArgs`), plus the global log flags.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct ControllerFlags {
    #[command(flatten)]
    controller: ControllerArgs,
    #[arg(long)]
    log_format: Option<String>,
    #[arg(long)]
    log_level: Option<String>,
}

/// The uninstall hook's and the preStop hook's flags, parsed with `cleanup`'s own arguments.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct CleanupFlags {
    #[command(flatten)]
    cleanup: CleanupArgs,
    #[arg(long)]
    log_format: Option<String>,
    #[arg(long)]
    log_level: Option<String>,
}

/// What `rbac::required` says the controller needs with exactly these flags, running in the
/// release namespace.
fn controller_needs(args: &[String]) -> Needs {
    assert_eq!(args[0], "controller");
    let f = common::parse_without_env::<ControllerFlags, _, _>(&args[1..])
        .unwrap_or_else(|e| panic!("controller flags {args:?}: {e}"));
    let c = &f.controller;
    Needs::for_controller(&c.dns, &c.hostnames, &c.election, &c.ipmode, NAMESPACE)
}

fn cleanup_needs(args: &[String]) -> Needs {
    assert_eq!(args[0], "cleanup");
    let f = common::parse_without_env::<CleanupFlags, _, _>(&args[1..])
        .unwrap_or_else(|e| panic!("cleanup flags {args:?}: {e}"));
    f.cleanup.needs(NAMESPACE)
}

/// Whether the rendered edge pools (if any) have a layer-2 pool.
fn edge_l2(objs: &[Value]) -> bool {
    (objs.iter())
        .filter(|o| kind(o) == "ConfigMap" && name(o).ends_with("-edge-pools"))
        .filter_map(|cm| cm["data"]["pools.yaml"].as_str())
        .flat_map(|y| ouroboros::edge::pool::parse_pools(y).unwrap_or_else(|e| panic!("{e}")))
        .any(|p| p.l2.is_some())
}

/// What the edge with `args` needs; `objs`, the rendered chart, holds the pools it reads.
fn edge_needs(args: &[String], objs: &[Value]) -> EdgeNeeds {
    assert_eq!(args[0], "edge");
    if !flag_values(args, "--pools").is_empty() {
        let elect = flag_values(args, "--leader-elect") != ["false"];
        let one = |f| flag_values(args, f)[0].to_string();
        let lease = elect.then(|| (one("--lease-namespace"), one("--lease-name")));
        let l2_leases = edge_l2(objs).then(|| one("--lease-namespace"));
        return EdgeNeeds::LoadBalancer { lease, l2_leases };
    }
    let service = flag_values(args, "--service");
    let (ns, svc) = service[0].split_once('/').unwrap();
    EdgeNeeds::Service {
        namespace: ns.into(),
        service: svc.into(),
        numbered_port: flag_values(args, "--listen")
            .iter()
            .any(|l| l.rsplit_once('=').unwrap().1.parse::<u16>().is_ok()),
    }
}

// --- RBAC --------------------------------------------------------------------------------------

/// One permission: scope, API group, resource, object name (None: any), verb.
type Atom = (Scope, String, String, Option<String>, String);

/// Every permission of one rule: each API group, resource, name (none: any) and verb.
fn insert_atoms(
    out: &mut BTreeSet<Atom>,
    scope: &Scope,
    groups: &[String],
    resources: &[String],
    names: &[String],
    verbs: &[String],
) {
    let names: Vec<Option<String>> = if names.is_empty() {
        vec![None]
    } else {
        names.iter().cloned().map(Some).collect()
    };
    for g in groups {
        for res in resources {
            for n in &names {
                for v in verbs {
                    out.insert((scope.clone(), g.clone(), res.clone(), n.clone(), v.clone()));
                }
            }
        }
    }
}

fn atoms(rules: &[Rule]) -> BTreeSet<Atom> {
    let mut out = BTreeSet::new();
    for r in rules {
        let verbs: Vec<String> = r.verbs.iter().map(|v| v.to_string()).collect();
        insert_atoms(
            &mut out,
            &r.scope,
            &[r.api_group.to_string()],
            &[r.resource.to_string()],
            &r.resource_names,
            &verbs,
        );
    }
    out
}

/// Everything the rendered RBAC grants one ServiceAccount of the release namespace.
fn granted(objs: &[Value], sa: &str) -> BTreeSet<Atom> {
    let mut out = BTreeSet::new();
    for b in objs
        .iter()
        .filter(|o| matches!(kind(o), "RoleBinding" | "ClusterRoleBinding"))
    {
        let bound = b["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NAMESPACE
        });
        if !bound {
            continue;
        }
        let (role_kind, scope, role_ns) = if kind(b) == "ClusterRoleBinding" {
            ("ClusterRole", Scope::Cluster, None)
        } else {
            let ns = b["metadata"]["namespace"].as_str().unwrap().to_string();
            let rk = b["roleRef"]["kind"].as_str().unwrap();
            let scope = Scope::Namespace(ns.clone());
            (
                if rk == "Role" { "Role" } else { "ClusterRole" },
                scope,
                Some(ns),
            )
        };
        let rname = b["roleRef"]["name"].as_str().unwrap();
        let role = objs
            .iter()
            .find(|o| {
                kind(o) == role_kind
                    && name(o) == rname
                    && role_ns.as_deref().is_none_or(|ns| {
                        role_kind == "ClusterRole" || o["metadata"]["namespace"] == ns
                    })
            })
            .unwrap_or_else(|| {
                panic!(
                    "{} {} refers to a missing {role_kind} {rname}",
                    kind(b),
                    name(b)
                )
            });
        for r in role["rules"].as_array().unwrap() {
            let [groups, resources, names, verbs] =
                ["apiGroups", "resources", "resourceNames", "verbs"].map(|k| strings(&r[k]));
            insert_atoms(&mut out, &scope, &groups, &resources, &names, &verbs);
        }
    }
    out
}

fn pod_named<'a>(objs: &'a [Value], k: &str, n: &str) -> Option<&'a Value> {
    find(objs, k, n).map(|o| &o["spec"]["template"]["spec"])
}

fn container_args(pod: &Value) -> Vec<String> {
    strings(&pod["containers"][0]["args"])
}

/// The arguments of the controller Deployment of a render of release `ouroboros`.
fn controller_args(objs: &[Value]) -> Vec<String> {
    container_args(pod_named(objs, "Deployment", "ouroboros-controller").unwrap())
}

/// The RBAC of every pod of one render (object names `<fullname>-...`) equals what the binary
/// needs with the flags the pod gets; the number of pods checked.
fn assert_rbac(case: &str, objs: &[Value], fullname: &str) -> usize {
    let mut checked = 0;
    for (k, n, want) in [
        ("Deployment", format!("{fullname}-controller"), "controller"),
        ("DaemonSet", format!("{fullname}-etc-hosts"), "etc-hosts"),
    ] {
        let Some(pod) = pod_named(objs, k, &n) else {
            continue;
        };
        let sa = pod["serviceAccountName"].as_str().unwrap();
        let needs = controller_needs(&container_args(pod));
        if want == "etc-hosts" {
            assert_eq!(needs.mode, Mode::EtcHosts, "{case}");
            assert!(!needs.leader_elect, "{case}: etc-hosts takes no lease");
        }
        let expected = atoms(&rbac::required(&needs));
        let got = granted(objs, sa);
        assert_eq!(
            got,
            expected,
            "{case}: {k} {n} (ServiceAccount {sa})\n  granted, not needed: {:?}\n  needed, not granted: {:?}",
            got.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&got).collect::<Vec<_>>()
        );
        checked += 1;
    }
    let edge = format!("{fullname}-edge");
    let edge_pod =
        pod_named(objs, "DaemonSet", &edge).or_else(|| pod_named(objs, "Deployment", &edge));
    if let Some(pod) = edge_pod {
        let sa = pod["serviceAccountName"].as_str().unwrap();
        let expected = atoms(&workloads::edge_required(&edge_needs(
            &container_args(pod),
            objs,
        )));
        assert_eq!(granted(objs, sa), expected, "{case}: edge");
        checked += 1;
    }
    if let Some(pod) = pod_named(objs, "Job", &format!("{fullname}-cleanup")) {
        let sa = pod["serviceAccountName"].as_str().unwrap();
        let expected = atoms(&workloads::cleanup_required(&cleanup_needs(
            &container_args(pod),
        )));
        assert!(!expected.is_empty(), "{case}: cleanup needs some rule");
        assert_eq!(granted(objs, sa), expected, "{case}: cleanup hook");
        checked += 1;
    }
    // The proxy has none.
    assert!(
        granted(objs, &format!("{fullname}-proxy")).is_empty(),
        "{case}"
    );
    // No binding to an account that no pod uses.
    for b in objs.iter().filter(|o| kind(o).ends_with("Binding")) {
        for s in b["subjects"].as_array().unwrap() {
            let sa = s["name"].as_str().unwrap();
            let used = pods(objs)
                .iter()
                .any(|(_, p)| p["serviceAccountName"] == sa);
            assert!(used, "{case}: {} binds {sa}, which no pod uses", name(b));
        }
    }
    checked
}

#[test]
fn rbac_of_every_pod_equals_what_the_binary_needs() {
    let mut checked = 0;
    for (case, objs, _) in renders() {
        checked += assert_rbac(case, objs, "ouroboros");
    }
    assert!(checked >= 20, "only {checked} pods checked");
    let mut checked = 0;
    for (case, objs, _) in reference_renders() {
        checked += assert_rbac(case, objs, REFERENCE_FULLNAME);
    }
    assert!(
        checked >= 10,
        "reference values: only {checked} pods checked"
    );
}

/// coredns mode reads the Deployment `coredns` (its memory limit for the reload guard, and for
/// `--coredns-answer auto` its version): `get` on that one Deployment, in the CoreDNS Role, and
/// nothing on Deployments in coredns-import mode; a given version is passed as the flag.
#[test]
fn coredns_mode_gets_the_coredns_deployment_only() {
    let deployment_rules = |objs: &[Value]| -> Vec<Value> {
        objs.iter()
            .filter(|o| kind(o) == "Role" || kind(o) == "ClusterRole")
            .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
            .filter(|r| strings(&r["resources"]).contains(&"deployments".to_string()))
            .collect()
    };
    let role = find(defaults(), "Role", "ouroboros-controller-coredns").expect("the CoreDNS Role");
    assert_eq!(role["metadata"]["namespace"], "kube-system");
    let get_coredns = vec![serde_json::json!({
        "apiGroups": ["apps"], "resources": ["deployments"],
        "resourceNames": ["coredns"], "verbs": ["get"],
    })];
    for sets in [
        &[][..],
        &["controller.corednsVersion=v1.11.3"],
        &["controller.corednsAnswer=template"],
    ] {
        assert_eq!(deployment_rules(rendered(sets)), get_coredns, "{sets:?}");
    }
    assert_eq!(
        deployment_rules(rendered(&["controller.mode=coredns-import"])),
        Vec::<Value>::new()
    );
    let args = |objs: &[Value]| -> Vec<String> {
        let c = find(objs, "Deployment", "ouroboros-controller").expect("the controller");
        strings(&c["spec"]["template"]["spec"]["containers"][0]["args"])
    };
    let given = args(rendered(&["controller.corednsVersion=v1.11.3"]));
    assert!(
        given.contains(&"--coredns-version=v1.11.3".to_string()),
        "{given:?}"
    );
    assert!(
        given.contains(&"--coredns-answer=auto".to_string()),
        "{given:?}"
    );
    assert!(!args(defaults())
        .iter()
        .any(|a| a.starts_with("--coredns-version")));
}

#[test]
fn rbac_only_for_the_selected_mode() {
    let objs = defaults();
    let text = serde_json::to_string(objs).unwrap();
    for absent in [
        "dnsendpoints",
        "coredns-custom",
        "endpointslices",
        "hostPath",
    ] {
        assert!(!text.contains(absent), "coredns defaults mention {absent}");
    }
    // external-dns mode has nothing in kube-system.
    let objs = rendered(&["controller.mode=external-dns"]);
    for o in objs {
        assert_ne!(
            o["metadata"]["namespace"],
            "kube-system",
            "external-dns mode renders {} {} in kube-system",
            kind(o),
            name(o)
        );
    }
}

// --- rendering and validation ------------------------------------------------------------------

#[test]
fn lint_strict_with_helm_4_and_3() {
    let fixture = reference_values();
    for helm in ["helm", "helm3"] {
        for (files, sets) in [
            (&[][..], &[][..]),
            (
                &[],
                &["controller.mode=external-dns", "etcHosts.enabled=true"],
            ),
            (
                &[],
                &[
                    "edge.enabled=true",
                    "networkPolicy.enabled=true",
                    "serviceMonitor.enabled=true",
                ],
            ),
            (&[], &[TWO_PROXIES, "etcHosts.enabled=true"]),
            (&[fixture.as_path()], REFERENCE_ON),
        ] {
            let mut cmd = Command::new(tool(helm));
            cmd.args(["lint", "--strict"]).arg(chart_dir());
            values_args(&mut cmd, files, sets);
            let (ok, out, err) = run(&mut cmd, None);
            assert!(ok, "{helm} lint --strict {files:?} {sets:?}:\n{out}\n{err}");
            assert!(out.contains("0 chart(s) failed"), "{helm}: {out}");
        }
    }
}

/// Helm 3 renders the same objects as Helm 4 for every case, and its schema check rejects the
/// same typo.
#[test]
fn helm_3_renders_what_helm_4_renders() {
    let fixture = reference_values();
    for (files, cases) in [(&[][..], CASES), (&[fixture.as_path()], REFERENCE_CASES)] {
        let helm4 = render_cases("helm", files, cases);
        for ((case, helm3, _), (_, helm4, _)) in
            render_cases("helm3", files, cases).iter().zip(helm4)
        {
            assert!(*helm3 == helm4, "{case}: Helm 3 renders other objects");
        }
    }
    let err = template_files("helm3", &[], &["controller.mdoe=x"]).unwrap_err();
    assert!(err.contains("mdoe"), "{err}");
}

pub(crate) fn validate(what: &str, yaml: &str) {
    let mut cmd = Command::new(tool("kubernetes-validate"));
    cmd.args(["--strict", "--kubernetes-version", KUBERNETES_VERSION, "-"]);
    let (ok, out, err) = run(&mut cmd, Some(yaml));
    assert!(
        ok,
        "{what}: kubernetes-validate --strict failed:\n{out}\n{err}"
    );
    for line in out.lines().chain(err.lines()) {
        assert!(
            !line.contains("ERROR"),
            "{what}: kubernetes-validate: {line}"
        );
        if line.contains("WARN") {
            assert!(
                CUSTOM_KINDS
                    .iter()
                    .any(|k| line.contains(&format!("kind {k} "))),
                "{what}: kubernetes-validate warned: {line}"
            );
        }
    }
    let passed = out.lines().filter(|l| l.contains(" passed for ")).count();
    let objects = docs(yaml)
        .iter()
        .filter(|o| !CUSTOM_KINDS.contains(&kind(o)))
        .count();
    assert_eq!(passed, objects, "{what}: every object validated\n{out}");
}

#[test]
fn every_render_validates_against_the_kubernetes_schemas() {
    for (case, _, yaml) in renders().into_iter().chain(reference_renders()) {
        validate(case, yaml);
    }
    let quickstart = std::fs::read_to_string(root().join("deploy/quickstart.yaml")).unwrap();
    validate("deploy/quickstart.yaml", &quickstart);
}

#[test]
fn quickstart_is_the_chart_rendered_with_defaults() {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("deploy/render.sh"))
        .arg("--stdout")
        .env("HELM", tool("helm"));
    let (ok, out, err) = run(&mut cmd, None);
    assert!(ok, "deploy/render.sh --stdout: {err}");
    let committed = std::fs::read_to_string(root().join("deploy/quickstart.yaml")).unwrap();
    assert!(
        committed == out,
        "deploy/quickstart.yaml drifted from the chart: run deploy/render.sh and commit it"
    );
    let objs = docs(&committed);
    assert!(
        objs.iter()
            .all(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null()),
        "no Helm hook in plain manifests"
    );
    for (k, n) in [
        ("Namespace", "ouroboros"),
        ("Deployment", "ouroboros-controller"),
        ("Deployment", "ouroboros-proxy"),
        ("Service", "ouroboros-proxy"),
    ] {
        assert!(find(&objs, k, n).is_some(), "quickstart has {k} {n}");
    }
}

/// How Helm refuses values: its schema check naming the key, or a template's own message with
/// these words (and no word of the schema's).
#[derive(Debug)]
enum Refusal {
    Schema(&'static str),
    Message(&'static [&'static str]),
}
use Refusal::{Message, Schema};

fn assert_refused(sets: &[&str], refusal: &Refusal) {
    let err = template(sets).expect_err(&format!("{sets:?} renders"));
    match refusal {
        Schema(complaint) => assert!(
            err.contains("schema") && err.contains(complaint),
            "{sets:?}: {err}"
        ),
        Message(words) => {
            for w in *words {
                assert!(err.contains(w), "{sets:?}: {err}");
            }
            assert!(
                !err.contains("schema"),
                "{sets:?}: a template's message, not the schema's: {err}"
            );
        }
    }
}

/// Typos and bad values the schema refuses.
const EDGE_DEPLOYMENT_CASE: &str = "edge as a Deployment of three pods with a layer-2 pool";

/// `edge.kind=Deployment`: the DaemonSet's pod as a Deployment of `edge.replicas` pods, one per
/// node (they bind the same host ports), rolled without a surge for the same reason.
#[test]
fn the_edge_as_a_deployment_runs_the_daemonsets_pod_one_per_node() {
    let sets = CASES
        .iter()
        .find(|c| c.0 == EDGE_DEPLOYMENT_CASE)
        .unwrap()
        .1;
    let objs = rendered(sets);
    let as_daemonset: Vec<&str> = sets
        .iter()
        .copied()
        .filter(|s| !s.starts_with("edge.kind=") && !s.starts_with("edge.replicas="))
        .collect();
    let ds = rendered(&as_daemonset);
    assert!(find(objs, "DaemonSet", "ouroboros-edge").is_none());
    let dep = find(objs, "Deployment", "ouroboros-edge").unwrap();
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0);
    let mut pod = dep["spec"]["template"]["spec"].clone();
    let term =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        term["labelSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    pod.as_object_mut().unwrap().remove("affinity");
    assert_eq!(&pod, pod_named(ds, "DaemonSet", "ouroboros-edge").unwrap());
}

const TYPOS: &[(&[&str], Refusal)] = &[
    (&["edge.kind=Daemonset"], Schema("kind")),
    (&["controller.mdoe=external-dns"], Schema("mdoe")),
    (&["proxy.replica=3"], Schema("replica")),
    (&["typo=1"], Schema("typo")),
    // The binary's name for the mode the chart runs as a DaemonSet points to its key.
    (
        &["controller.mode=etc-hosts"],
        Message(&[
            "controller.mode=etc-hosts",
            "set etcHosts.enabled=true instead",
        ]),
    ),
    (&["controller.resync=10"], Schema("resync")),
    (&["controller.resync=ten minutes"], Schema("resync")),
    (
        &["proxy.service.ipFamilyPolicy=DualStack"],
        Schema("ipFamilyPolicy"),
    ),
    (&["edge.listen={443}"], Schema("listen")),
    (
        &["controller.externalDns.proxyIps={not-an-ip}"],
        Schema("proxyIps"),
    ),
    (
        &["controller.proxyFqdn=no-trailing-dot.example"],
        Schema("proxyFqdn"),
    ),
    (&["etcHosts.hostPath=etc/hosts"], Schema("hostPath")),
    (&["proxy.busyPoll=2ms"], Schema("busyPoll")),
    (&["edge.busyPoll=1001us"], Schema("busyPoll")),
    (&["edge.busyPoll=50"], Schema("busyPoll")),
    // The reference chart's keys are accepted, their typos are not.
    (&["externalDns.recordTtl=60"], Schema("recordTtl")),
    (&["externalDns.output=dnsendpoint"], Schema("output")),
    (&["controller.gatewayApi.enable=true"], Schema("enable")),
    (&["etcHosts.hostPath2=/etc/hosts"], Schema("hostPath2")),
    (
        &["podDisruptionBudget.maxUnavaliable=1"],
        Schema("maxUnavaliable"),
    ),
    (&["networkPolicy.ingress.form={}"], Schema("form")),
    (&["proxy.shutdownGrace=500ms"], Schema("shutdownGrace")),
    (&["controller.cleanupHookImage.tags=1"], Schema("tags")),
    (&["podSecurityContext.runAsUsr=1"], Schema("runAsUsr")),
    (
        &["securityContext.readOnlyRootFileSystem=true"],
        Schema("readOnlyRootFileSystem"),
    ),
    (&["serviceAccount.annotation.a=b"], Schema("annotation")),
    // An entry of proxies is as strict as proxy.*.
    (&["proxies[0].nmae=traefik"], Schema("nmae")),
    (&["proxies[0].name=Traefik"], Schema("name")),
    (&["proxies[0].gateways={public}"], Schema("gateways")),
    (&["proxies[0].service.tpye=LoadBalancer"], Schema("tpye")),
    (
        &["proxies[0].target.namespace=traefik"],
        Schema("namespace"),
    ),
    (&["proxy.copyMode=bpf"], Schema("copyMode")),
    (&["proxies[0].copyMode=kernel"], Schema("copyMode")),
    (&["edge.copyMode=ebpf"], Schema("copyMode")),
    (
        &["edge.enabled=true", "edge.service=nonamespace"],
        Schema("edge/service"),
    ),
    (
        &[
            "edge.loadBalancer.pools[0].name=p",
            "edge.loadBalancer.pools[0].adresses={192.0.2.0/28}",
        ],
        Schema("adresses"),
    ),
    (
        &["edge.loadBalancer.proxyProtocol=v3"],
        Schema("proxyProtocol"),
    ),
    (
        &["edge.enabled=true", "edge.loadBalancer.enabled=true"],
        Message(&["edge.loadBalancer.pools"]),
    ),
    // An IngressClass controller value is DOMAIN/PATH, and goes to one proxy.
    (
        &["controller.ingressClassControllers={nginx}"],
        Schema("ingressClassControllers"),
    ),
    (
        &[
            "proxies[0].name=traefik",
            "proxies[0].target.host=traefik.traefik",
            "proxies[0].ingressClassControllers={traefik}",
        ],
        Schema("ingressClassControllers"),
    ),
    (
        &[
            "controller.ingressClassControllers={k8s.io/ingress-nginx}",
            "proxies[0].name=traefik",
            "proxies[0].target.host=traefik.traefik",
            "proxies[0].ingressClassControllers={k8s.io/ingress-nginx}",
        ],
        Message(&[
            "controller.ingressClassControllers and proxies[0] (traefik) both take \
             ingress-class-controller=k8s.io/ingress-nginx",
        ]),
    ),
];

/// IngressClass controller values reach the controller as flags its parser reads, with the
/// IngressClasses readable: the main proxy's as --ingress-class-controller, an entry's in its
/// --target.
#[test]
fn ingress_class_controllers_become_flags_and_read_ingressclasses() {
    let objs = case("two ingress controllers told apart");
    let (targets, args) = split_targets(controller_args(objs));
    assert_eq!(
        targets,
        ["--target=name=traefik,service=ouroboros/ouroboros-proxy-traefik,\
          ingress-class-controller=traefik.io/ingress-controller,ingress-controller=traefik/traefik"]
    );
    let rule = parse_target(targets[0].strip_prefix("--target=").unwrap()).unwrap();
    assert_eq!(
        rule.ingress_class_controllers,
        BTreeSet::from(["traefik.io/ingress-controller".into()])
    );
    assert!(rule.ingress_classes.is_empty());
    assert_eq!(
        flag_values(&args, "--ingress-class-controller"),
        ["k8s.io/ingress-nginx"]
    );
    let read = |objs: &[Value]| {
        granted(objs, "ouroboros-controller").contains(&(
            Scope::Cluster,
            "networking.k8s.io".into(),
            "ingressclasses".into(),
            None,
            "watch".into(),
        ))
    };
    assert!(read(objs));
    assert!(!read(defaults()), "nothing maps IngressClasses by default");
    // Either value alone needs them.
    assert!(read(rendered(&[
        "controller.ingressClassControllers={k8s.io/ingress-nginx}"
    ])));
    assert!(read(rendered(&[
        "proxies[0].name=traefik",
        "proxies[0].target.host=traefik.traefik",
        "proxies[0].ingressClassControllers={traefik.io/ingress-controller}",
    ])));
}

/// The load-balancer edge reads the pools the chart renders, and is given the rights of
/// `--pools` rather than those of `--service`.
#[test]
fn the_load_balancer_edge_reads_the_rendered_pools() {
    let objs = rendered(
        CASES
            .iter()
            .find(|c| c.0 == "edge as the load balancer of a class")
            .unwrap()
            .1,
    );
    let pod = pod_named(objs, "DaemonSet", "ouroboros-edge").unwrap();
    let args = container_args(pod);
    assert_eq!(
        flag_values(&args, "--pools"),
        ["/etc/ouroboros/edge/pools.yaml"]
    );
    assert_eq!(
        flag_values(&args, "--load-balancer-class"),
        ["example.com/lb"]
    );
    assert_eq!(flag_values(&args, "--proxy-protocol"), ["v2"]);
    assert!(
        flag_values(&args, "--service").is_empty() && flag_values(&args, "--listen").is_empty()
    );
    let cm = objs
        .iter()
        .find(|o| kind(o) == "ConfigMap" && name(o) == "ouroboros-edge-pools")
        .unwrap();
    let pools = ouroboros::edge::pool::parse_pools(cm["data"]["pools.yaml"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].name, "public");
    assert_eq!(pools[0].ranges.len(), 2);
    assert!(pools[0].namespaces.contains("web"));
    assert_eq!(
        pools[0].match_labels.get("edge").map(String::as_str),
        Some("public")
    );
    let mount = &pod["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["mountPath"], "/etc/ouroboros/edge");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "ouroboros-edge-pools"
    );
    assert_eq!(
        workloads::edge_required(&edge_needs(&args, objs)),
        workloads::edge_required(&EdgeNeeds::LoadBalancer {
            lease: Some(("ouroboros".into(), "ouroboros-edge".into())),
            l2_leases: None,
        })
    );
}

#[test]
fn schema_rejects_typos_and_bad_values() {
    for (sets, refusal) in TYPOS {
        assert_refused(sets, refusal);
    }
}

// --- pods ----------------------------------------------------------------------------------------

#[test]
fn pods_are_hardened() {
    let mut checked = 0;
    for (case, objs, _) in renders() {
        for (w, pod) in pods(objs) {
            let what = format!("{case}: {w}");
            assert_pod_hardened(&what, &w, pod);
            for c in pod["containers"].as_array().unwrap() {
                assert_container_hardened(&what, &w, c, edge_l2(objs));
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
}

/// The pod of workload `w` (kind/name): its own settings and volumes.
fn assert_pod_hardened(what: &str, w: &str, pod: &Value) {
    let root_exception = w.ends_with("-etc-hosts") || w.ends_with("-edge");
    // The pod keeps its user; a proxy container in sockmap mode runs as root (below).
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"],
        Value::Bool(!root_exception),
        "{what}"
    );
    assert!(
        pod["hostPID"].is_null() && pod["hostIPC"].is_null(),
        "{what}"
    );
    // Service links would inject OUROBOROS_PROXY_* variables (from the Service
    // `ouroboros-proxy`) into the flags' environment namespace.
    assert_eq!(pod["enableServiceLinks"], false, "{what}");
    assert_eq!(
        pod["hostNetwork"].as_bool().unwrap_or(false),
        w.ends_with("-edge"),
        "{what}: only edge is on the host network"
    );
    // The only host path is the etc-hosts file.
    for v in pod["volumes"].as_array().into_iter().flatten() {
        if !v["hostPath"].is_null() {
            assert!(w.ends_with("-etc-hosts"), "{what} mounts a host path");
            assert_eq!(v["hostPath"]["type"], "File", "{what}");
        }
    }
}

/// A container of workload `w`: read-only, unprivileged, no capability but the ones it needs,
/// with requests and a memory limit. `l2`: the edge announces addresses (a layer-2 pool).
fn assert_container_hardened(what: &str, w: &str, c: &Value, l2: bool) {
    let root_exception = w.ends_with("-etc-hosts") || w.ends_with("-edge");
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["privileged"], false, "{what}");
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{what}");
    let added = strings(&sc["capabilities"]["add"]);
    // The kernel relay's capabilities, only where the container runs it.
    let sockmap = has(&strings(&c["args"]), "--copy-mode=sockmap");
    let relay: &[&str] = if sockmap { &["BPF", "NET_ADMIN"] } else { &[] };
    if w.ends_with("-edge") {
        // Layer 2: NET_ADMIN puts addresses on the interface, NET_RAW sends ARP and NA.
        let announce: &[&str] = match (l2, sockmap) {
            (false, _) => &[],
            (true, false) => &["NET_ADMIN", "NET_RAW"],
            (true, true) => &["NET_RAW"],
        };
        let want: Vec<&str> = ["NET_BIND_SERVICE"]
            .into_iter()
            .chain(relay.iter().copied())
            .chain(announce.iter().copied())
            .collect();
        assert_eq!(added, want, "{what}");
    } else {
        assert_eq!(added, relay, "{what} adds {added:?}");
    }
    if sockmap && !root_exception {
        assert_eq!(
            (&sc["runAsUser"], &sc["runAsNonRoot"]),
            (&0.into(), &false.into()),
            "{what}: added capabilities reach only root's effective set"
        );
    } else {
        assert!(
            sc["runAsUser"].is_null() && sc["runAsNonRoot"].is_null(),
            "{what}: the pod's user"
        );
    }
    assert!(
        !c["resources"]["requests"].is_null() && !c["resources"]["limits"]["memory"].is_null(),
        "{what}: requests and a memory limit"
    );
}

/// `--copy-mode sockmap` loads a BPF program and socket maps: the chart grants CAP_BPF and
/// CAP_NET_ADMIN to the containers that run it and to no other, the proxy's as root (added
/// capabilities never reach a non-root process's effective set) and edge's on top of its
/// NET_BIND_SERVICE. Each render here differs from the same values without sockmap in those
/// containers' --copy-mode and securityContext alone.
#[test]
fn sockmap_grants_bpf_and_net_admin_to_its_own_containers_only() {
    // The defaults add no capability anywhere.
    for (w, pod) in pods(defaults()) {
        for c in pod["containers"].as_array().unwrap() {
            let caps = &c["securityContext"]["capabilities"];
            assert!(caps["add"].is_null(), "defaults: {w} adds {}", caps["add"]);
            assert_eq!(strings(&caps["drop"]), ["ALL"], "defaults: {w}");
        }
    }
    for (sets, base_sets, expected) in SOCKMAP_SCENARIOS {
        let what = format!("{sets:?}");
        let with = render(sets);
        validate(&what, &with.yaml);
        let (with, base) = (&with.objs, rendered(base_sets));
        assert_eq!(object_keys(with), object_keys(base), "{what}: same objects");
        let changed: BTreeSet<(&str, &str)> = with
            .iter()
            .filter(|o| find(base, kind(o), name(o)) != Some(*o))
            .map(|o| (kind(o), name(o)))
            .collect();
        assert_eq!(
            changed,
            expected.iter().copied().collect(),
            "{what}: only the workloads in sockmap mode change"
        );
        for &(k, n) in *expected {
            let what = format!("{what}: {k} {n}");
            assert_sockmap_changes(&what, find(base, k, n).unwrap(), find(with, k, n).unwrap());
        }
    }

    // securityContext keys still replace the chart's last, as values.yaml says.
    let objs = rendered(&["proxy.copyMode=sockmap", "securityContext.runAsUser=1000"]);
    let sc = &pod_named(objs, "Deployment", "ouroboros-proxy").unwrap()["containers"][0]
        ["securityContext"];
    assert_eq!(sc["runAsUser"], 1000);
    assert_eq!(strings(&sc["capabilities"]["add"]), ["BPF", "NET_ADMIN"]);
}

/// Values with sockmap somewhere, the same values without it, and the workloads that differ.
type SockmapScenario = (
    &'static [&'static str],
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);
const EDGE: (&str, &str) = ("DaemonSet", "ouroboros-edge");
const MAIN_PROXY: (&str, &str) = ("Deployment", "ouroboros-proxy");
const ENTRY_PROXY: (&str, &str) = ("Deployment", "ouroboros-proxy-traefik");
const SOCKMAP_SCENARIOS: &[SockmapScenario] = &[
    (&["proxy.copyMode=sockmap"], &[], &[MAIN_PROXY]),
    (
        &["edge.enabled=true", "edge.copyMode=sockmap"],
        &["edge.enabled=true"],
        &[EDGE],
    ),
    // An entry of proxies opts in alone...
    (
        &[TWO_PROXIES, "proxies[0].copyMode=sockmap"],
        &[TWO_PROXIES],
        &[ENTRY_PROXY],
    ),
    // ... takes proxy.copyMode unless it sets its own ...
    (
        &[TWO_PROXIES, "proxy.copyMode=sockmap"],
        &[TWO_PROXIES],
        &[MAIN_PROXY, ENTRY_PROXY],
    ),
    // ... and can keep out of it.
    (
        &[
            TWO_PROXIES,
            "proxy.copyMode=sockmap",
            "proxies[0].copyMode=splice",
        ],
        &[TWO_PROXIES, "proxies[0].copyMode=splice"],
        &[MAIN_PROXY],
    ),
];

/// A workload in sockmap mode (`now`) differs from itself without it (`was`) in its container's
/// --copy-mode and securityContext alone: CAP_BPF and CAP_NET_ADMIN, as root for a proxy, on top
/// of NET_BIND_SERVICE for edge.
fn assert_sockmap_changes(what: &str, was: &Value, now: &Value) {
    let mut now = now.clone();
    let c = &mut now["spec"]["template"]["spec"]["containers"][0];
    let was_c = &was["spec"]["template"]["spec"]["containers"][0];
    // The arguments differ in --copy-mode alone.
    let (args, was_args) = (strings(&c["args"]), strings(&was_c["args"]));
    let split = |a: &[String]| -> (Vec<String>, Vec<String>) {
        a.iter()
            .cloned()
            .partition(|x| x.starts_with("--copy-mode="))
    };
    let ((mode, others), (was_mode, was_others)) = (split(&args), split(&was_args));
    assert_eq!(mode, ["--copy-mode=sockmap"], "{what}");
    assert_ne!(was_mode, mode, "{what}");
    assert_eq!(others, was_others, "{what}");
    let sc = c["securityContext"].take();
    if kind(was) == "DaemonSet" {
        let mut want = was_c["securityContext"].clone();
        want["capabilities"]["add"] = serde_json::json!(["NET_BIND_SERVICE", "BPF", "NET_ADMIN"]);
        assert_eq!(sc, want, "{what}");
        assert_eq!(
            now["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 0,
            "{what}: edge already runs as root"
        );
    } else {
        let proxy_root = serde_json::json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "privileged": false,
            "runAsUser": 0,
            "runAsNonRoot": false,
            "capabilities": {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN"]},
        });
        assert_eq!(sc, proxy_root, "{what}");
    }
    // Put back what sockmap changes: the rest is as without it.
    let c = &mut now["spec"]["template"]["spec"]["containers"][0];
    c["securityContext"] = was_c["securityContext"].clone();
    c["args"] = was_c["args"].clone();
    assert_eq!(&now, was, "{what}: nothing else changes");
}

/// The proxy Deployments of a render (pods running `ouroboros proxy`): the main one and one per
/// entry of `proxies`.
fn proxy_deployments(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
        .filter(|o| {
            kind(o) == "Deployment"
                && container_args(&o["spec"]["template"]["spec"]).first()
                    == Some(&"proxy".to_string())
        })
        .collect()
}

#[test]
fn proxy_has_no_token_and_drains_before_it_is_killed() {
    let mut extra = 0;
    for (case, objs, _) in renders() {
        let sa = find(objs, "ServiceAccount", "ouroboros-proxy").expect("proxy SA");
        assert_eq!(sa["automountServiceAccountToken"], false, "{case}");
        assert!(
            find(objs, "Deployment", "ouroboros-proxy").is_some(),
            "{case}"
        );
        // The main proxy and every entry of proxies alike, each with its own Service and PDB.
        for deployment in proxy_deployments(objs) {
            let n = name(deployment);
            extra += usize::from(n != "ouroboros-proxy");
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(pod["automountServiceAccountToken"], false, "{case}: {n}");
            assert_eq!(pod["serviceAccountName"], "ouroboros-proxy", "{case}: {n}");
            assert!(pod["volumes"].is_null(), "{case}: {n} mounts nothing");

            let args = container_args(pod);
            let secs = |flag: &str| -> u64 {
                let v = *flag_values(&args, flag)
                    .first()
                    .unwrap_or_else(|| panic!("{case}: {n} has {flag}"));
                ouroboros::flags::parse_duration(v).unwrap().as_secs()
            };
            let shutdown = secs("--shutdown-delay") + secs("--shutdown-grace");
            let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
            assert!(
                grace > shutdown,
                "{case}: {n}: terminationGracePeriodSeconds {grace} <= shutdown delay + grace {shutdown}"
            );

            let replicas = deployment["spec"]["replicas"].as_u64().unwrap();
            let pdb = find(objs, "PodDisruptionBudget", n);
            assert_eq!(
                pdb.is_some(),
                replicas >= 2,
                "{case}: {n}: PDB iff replicas >= 2"
            );
            let selector = &deployment["spec"]["selector"]["matchLabels"];
            if let Some(pdb) = pdb {
                assert_eq!(
                    &pdb["spec"]["selector"]["matchLabels"], selector,
                    "{case}: {n}"
                );
            }
            if replicas >= 2 {
                let spread = &pod["topologySpreadConstraints"][0];
                assert_eq!(
                    spread["topologyKey"], "kubernetes.io/hostname",
                    "{case}: {n}"
                );
                assert_eq!(
                    &spread["labelSelector"]["matchLabels"], selector,
                    "{case}: {n}"
                );
            }
            let svc = find(objs, "Service", n).unwrap_or_else(|| panic!("{case}: Service {n}"));
            assert_eq!(svc["spec"]["type"], "ClusterIP", "{case}: {n}");
            assert_eq!(&svc["spec"]["selector"], selector, "{case}: {n}");
        }
    }
    assert!(extra >= 2, "entries of proxies checked: {extra}");
    let objs = case("proxy: dual-stack");
    let svc = find(objs, "Service", "ouroboros-proxy").unwrap();
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert_eq!(strings(&svc["spec"]["ipFamilies"]), ["IPv6", "IPv4"]);
}

#[test]
fn controller_pdb_only_from_two_replicas() {
    for (case, objs, _) in renders() {
        let Some(d) = find(objs, "Deployment", "ouroboros-controller") else {
            continue;
        };
        let replicas = d["spec"]["replicas"].as_u64().unwrap();
        assert_eq!(
            find(objs, "PodDisruptionBudget", "ouroboros-controller").is_some(),
            replicas >= 2,
            "{case}"
        );
    }
}

#[test]
fn probes_hit_the_admin_listener() {
    let mut checked = 0;
    for (case, objs, _) in renders() {
        for (w, pod) in pods(objs) {
            if w.starts_with("Job/") {
                continue;
            }
            let c = &pod["containers"][0];
            let args = strings(&c["args"]);
            let listen = args
                .iter()
                .find_map(|a| a.strip_prefix("--listen-health=:"))
                .unwrap_or_else(|| panic!("{case}: {w} sets --listen-health"));
            let admin = c["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "admin")
                .unwrap_or_else(|| panic!("{case}: {w} names its admin port"));
            assert_eq!(admin["containerPort"].to_string(), listen, "{case}: {w}");
            for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
                assert_eq!(c[probe]["httpGet"]["path"], path, "{case}: {w} {probe}");
                assert_eq!(c[probe]["httpGet"]["port"], "admin", "{case}: {w} {probe}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked}");
}

#[test]
fn etc_hosts_daemonset_gets_the_deployments_filters_and_a_single_file_mount() {
    let objs = case("etc-hosts alongside");
    let case = "etc-hosts alongside";
    let deploy = controller_args(objs);
    let pod = pod_named(objs, "DaemonSet", "ouroboros-etc-hosts").unwrap();
    let ds = container_args(pod);
    let shared = |a: &&String| {
        [
            "--gateway-api",
            "--ingress-class",
            "--gateway-class",
            "--cluster-domain",
            "--allow-domain",
            "--deny-domain",
            "--resync",
            "--debounce",
            "--log-",
        ]
        .iter()
        .any(|f| a.starts_with(f))
    };
    let want: Vec<_> = deploy.iter().filter(shared).collect();
    let got: Vec<_> = ds.iter().filter(shared).collect();
    assert!(
        want.iter().any(|a| a.starts_with("--ingress-class")),
        "{case}"
    );
    assert_eq!(
        got, want,
        "{case}: the DaemonSet filters as the Deployment does"
    );
    assert!(ds.contains(&"--leader-elect=false".to_string()));
    assert!(ds.contains(&"--etc-hosts=/host/etc/hosts".to_string()));
    let c = &pod["containers"][0];
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/host/etc/hosts");
    assert_eq!(pod["volumes"][0]["hostPath"]["path"], "/etc/hosts");
    assert_eq!(pod["volumes"][0]["hostPath"]["type"], "File");
    // preStop cleanup uses the same DNS-target flags, so it removes the same block.
    let pre = strings(&c["lifecycle"]["preStop"]["exec"]["command"]);
    assert_eq!(pre[1], "cleanup");
    for a in &pre[2..] {
        assert!(ds.contains(a), "preStop flag {a} is the DaemonSet's");
    }
}

#[test]
fn cleanup_hook_runs_after_uninstall_with_the_controllers_dns_flags() {
    for (case, objs, _) in renders() {
        let Some(job) = find(objs, "Job", "ouroboros-cleanup") else {
            continue;
        };
        let ann = &job["metadata"]["annotations"];
        assert_eq!(ann["helm.sh/hook"], "post-delete", "{case}");
        let pod = &job["spec"]["template"]["spec"];
        let args = container_args(pod);
        let controller = controller_args(objs);
        for a in &args[1..] {
            assert!(
                controller.contains(a),
                "{case}: cleanup flag {a} is the controller's"
            );
        }
        // The hook's RBAC exists before the Job runs.
        let job_weight: i64 = ann["helm.sh/hook-weight"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        for o in objs
            .iter()
            .filter(|o| name(o) == "ouroboros-cleanup" && kind(o) != "Job")
        {
            let a = &o["metadata"]["annotations"];
            assert_eq!(a["helm.sh/hook"], "post-delete", "{case}: {}", kind(o));
            let w: i64 = a["helm.sh/hook-weight"].as_str().unwrap().parse().unwrap();
            assert!(w < job_weight, "{case}: {} before the Job", kind(o));
        }
    }
    // No hook without the controller or when disabled.
    let objs = rendered(&["controller.cleanupOnUninstall=false"]);
    assert!(find(objs, "Job", "ouroboros-cleanup").is_none());
}

#[test]
fn network_policy_and_service_monitor() {
    let objs = case("proxy: dual-stack");
    let case = "proxy: dual-stack";
    let np = find(objs, "NetworkPolicy", "ouroboros-proxy").expect("NetworkPolicy");
    let proxy = find(objs, "Deployment", "ouroboros-proxy").unwrap();
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"], proxy["spec"]["selector"]["matchLabels"],
        "{case}"
    );
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress", "Egress"]);
    let egress_ports: BTreeSet<String> = np["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            e["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].to_string())
        })
        .collect();
    assert_eq!(
        egress_ports,
        BTreeSet::from(["443".into(), "53".into(), "80".into()])
    );

    let sm = find(objs, "ServiceMonitor", "ouroboros").expect("ServiceMonitor");
    let svc = find(objs, "Service", "ouroboros-metrics").expect("metrics Service");
    let labels = &svc["metadata"]["labels"];
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "ServiceMonitor selects the metrics Service");
    }
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "admin");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    // The metrics Service selects the proxy and controller pods.
    let sel = svc["spec"]["selector"].as_object().unwrap();
    for n in ["ouroboros-proxy", "ouroboros-controller"] {
        let pl = &find(objs, "Deployment", n).unwrap()["spec"]["template"]["metadata"]["labels"];
        for (k, v) in sel {
            assert_eq!(&pl[k], v, "{n} is scraped");
        }
    }
    // Off by default.
    let defaults = defaults();
    assert!(defaults
        .iter()
        .all(|o| !matches!(kind(o), "NetworkPolicy" | "ServiceMonitor" | "DaemonSet")));
}

/// The controller's hairpin probe connects through the proxy like a client: a NetworkPolicy
/// that lets only some namespaces in lets the controller's pods in too while the probe is on,
/// and not when it is off or when every pod may connect anyway.
#[test]
fn the_network_policy_lets_the_probe_in() {
    let restricted = "networkPolicy.from[0].namespaceSelector.matchLabels.team=web";
    let controller = find(defaults(), "Deployment", "ouroboros-controller").unwrap();
    let controller_labels = &controller["spec"]["selector"]["matchLabels"];
    for (sets, probe_peer) in [
        (&["networkPolicy.enabled=true", restricted][..], true),
        (
            &[
                "networkPolicy.enabled=true",
                restricted,
                "controller.probe.interval=0s",
            ][..],
            false,
        ),
        (&["networkPolicy.enabled=true"][..], false),
    ] {
        let np = find(rendered(sets), "NetworkPolicy", "ouroboros-proxy").expect("NetworkPolicy");
        let from = np["spec"]["ingress"][0]["from"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let has = from
            .iter()
            .any(|peer| &peer["podSelector"]["matchLabels"] == controller_labels);
        assert_eq!(has, probe_peer, "{sets:?}: {from:?}");
        if sets.contains(&restricted) {
            assert_eq!(from[0]["namespaceSelector"]["matchLabels"]["team"], "web");
        } else {
            assert!(from.iter().all(|p| p["podSelector"].is_null()), "{from:?}");
        }
    }
}

#[test]
fn chart_version_matches_the_crate() {
    let chart = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = yaml_serde::from_str(&chart).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    assert!(chart["dependencies"].is_null(), "no chart dependencies");
    // The default image is values.yaml's repository at the crate's version.
    let values: Value =
        yaml_serde::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    let repository = values["image"]["repository"].as_str().unwrap();
    let objs = defaults();
    let pod = pod_named(objs, "Deployment", "ouroboros-proxy").unwrap();
    assert_eq!(
        pod["containers"][0]["image"],
        format!("{repository}:{}", env!("CARGO_PKG_VERSION"))
    );
}

// --- several ingress controllers (proxies) ------------------------------------------------------

/// The flag the controller and the etc-hosts DaemonSet get for the Traefik entry of TWO_PROXIES
/// (the cleanup hooks get none): its ingress controller is a Service, watched for its ipMode.
const TRAEFIK_TARGET: &str =
    "--target=name=traefik,service=ouroboros/ouroboros-proxy-traefik,ingress-class=traefik,gateway-class=traefik,ingress-controller=traefik/traefik";
/// The flag they get for the main proxy of TWO_PROXIES, whose target is ingress-nginx's Service.
const NGINX_IPMODE: &str = "--ingress-controller-service=ingress-nginx/ingress-nginx-controller";

/// (kind, name) of every object of a render.
fn object_keys(objs: &[Value]) -> BTreeSet<(String, String)> {
    objs.iter()
        .map(|o| (kind(o).to_string(), name(o).to_string()))
        .collect()
}

/// The `--target` flags of an argument list, and the rest.
fn split_targets(args: Vec<String>) -> (Vec<String>, Vec<String>) {
    args.into_iter().partition(|a| a.starts_with("--target="))
}

/// TWO_PROXIES renders exactly these objects; without its entry of proxies, the same but the
/// entry's four and the Role and RoleBinding watching its ingress controller's Service, and only
/// the controller's arguments (its --target) and RBAC differ.
#[test]
fn two_proxies_render_the_entrys_objects_and_nothing_else_changes() {
    let with = case(TWO_PROXIES_CASE);
    let expected: BTreeSet<(String, String)> = [
        ("ClusterRole", "ouroboros-controller"),
        ("ClusterRoleBinding", "ouroboros-controller"),
        ("Deployment", "ouroboros-controller"),
        ("Deployment", "ouroboros-proxy"),
        ("Deployment", "ouroboros-proxy-traefik"),
        ("Job", "ouroboros-cleanup"),
        ("NetworkPolicy", "ouroboros-proxy"),
        ("NetworkPolicy", "ouroboros-proxy-traefik"),
        ("PodDisruptionBudget", "ouroboros-proxy"),
        ("PodDisruptionBudget", "ouroboros-proxy-traefik"),
        ("Role", "ouroboros-cleanup"),
        // The controller's Lease, in the release namespace (the hook's other Role is in
        // kube-system).
        ("Role", "ouroboros-cleanup-lease"),
        ("Role", "ouroboros-controller-coredns"),
        ("Role", "ouroboros-controller-ipmode-ingress-nginx"),
        ("Role", "ouroboros-controller-ipmode-traefik"),
        ("Role", "ouroboros-controller-leader-election"),
        ("Role", "ouroboros-controller-node-local-dns"),
        ("Role", "ouroboros-controller-proxy-service"),
        ("RoleBinding", "ouroboros-cleanup"),
        ("RoleBinding", "ouroboros-cleanup-lease"),
        ("RoleBinding", "ouroboros-controller-coredns"),
        ("RoleBinding", "ouroboros-controller-ipmode-ingress-nginx"),
        ("RoleBinding", "ouroboros-controller-ipmode-traefik"),
        ("RoleBinding", "ouroboros-controller-leader-election"),
        ("RoleBinding", "ouroboros-controller-node-local-dns"),
        ("RoleBinding", "ouroboros-controller-proxy-service"),
        ("Service", "ouroboros-metrics"),
        ("Service", "ouroboros-proxy"),
        ("Service", "ouroboros-proxy-traefik"),
        ("ServiceAccount", "ouroboros-cleanup"),
        ("ServiceAccount", "ouroboros-controller"),
        ("ServiceAccount", "ouroboros-proxy"),
        ("ServiceMonitor", "ouroboros"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(object_keys(with), expected, "{TWO_PROXIES}");
    assert_eq!(with.len(), expected.len(), "{TWO_PROXIES}: no object twice");

    let without = rendered(&[TWO_PROXIES, "json:proxies=[]"]);
    let added: BTreeSet<_> = object_keys(with)
        .difference(&object_keys(without))
        .cloned()
        .collect();
    let entry: BTreeSet<_> = [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ]
    .iter()
    .map(|k| (k.to_string(), "ouroboros-proxy-traefik".to_string()))
    .chain(["Role", "RoleBinding"].iter().map(|k| {
        (
            k.to_string(),
            "ouroboros-controller-ipmode-traefik".to_string(),
        )
    }))
    .collect();
    assert_eq!(added, entry);
    assert_eq!(object_keys(without).len() + entry.len(), with.len());
    let changed: BTreeSet<_> = without
        .iter()
        .filter(|o| find(with, kind(o), name(o)) != Some(*o))
        .map(|o| (kind(o), name(o)))
        .collect();
    assert_eq!(
        changed,
        BTreeSet::from([
            ("ClusterRole", "ouroboros-controller"),
            ("Deployment", "ouroboros-controller"),
            ("Role", "ouroboros-controller-proxy-service"),
        ]),
        "only the controller's flags and RBAC change"
    );
    let (k, n) = ("Deployment", "ouroboros-controller");
    let (targets, rest) = split_targets(container_args(pod_named(with, k, n).unwrap()));
    assert_eq!(targets, [TRAEFIK_TARGET], "{k} {n}");
    assert_eq!(
        rest,
        container_args(pod_named(without, k, n).unwrap()),
        "{k} {n}: only --target is added"
    );

    let text = notes(&[], &[TWO_PROXIES]);
    for line in [
        "traefik (ingress-class=traefik, gateway-class=traefik), forwarding to traefik.traefik",
        "rollout status deployment/ouroboros-proxy-traefik",
        "get service ouroboros-proxy-traefik",
    ] {
        assert!(text.contains(line), "NOTES lacks {line:?}:\n{text}");
    }
    let plain = notes(&[], &[]);
    assert!(!plain.contains("(proxies)"), "{plain}");
}

/// Does a `matchLabels` map select pods labelled `labels`? (Empty selects nothing here.)
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
}

/// Every selector of a proxy's objects (its Deployment, Service, PodDisruptionBudget,
/// NetworkPolicy, spread constraint) selects that proxy's pods and no other pod of the render;
/// the metrics Service selects them all.
#[test]
fn each_proxys_selectors_select_its_own_pods_only() {
    let mut entries = 0;
    for (case, objs, _) in renders() {
        let workloads: Vec<(String, &Value)> = objs
            .iter()
            .filter(|o| matches!(kind(o), "Deployment" | "DaemonSet" | "Job"))
            .map(|o| {
                (
                    format!("{}/{}", kind(o), name(o)),
                    &o["spec"]["template"]["metadata"]["labels"],
                )
            })
            .collect();
        for d in proxy_deployments(objs) {
            let n = name(d);
            let pod = &d["spec"]["template"];
            let mut selectors = vec![
                ("Deployment", &d["spec"]["selector"]["matchLabels"]),
                (
                    "Service",
                    &find(objs, "Service", n).unwrap()["spec"]["selector"],
                ),
            ];
            if let Some(spread) = pod["spec"]["topologySpreadConstraints"].get(0) {
                selectors.push(("spread", &spread["labelSelector"]["matchLabels"]));
            }
            if let Some(pdb) = find(objs, "PodDisruptionBudget", n) {
                selectors.push((
                    "PodDisruptionBudget",
                    &pdb["spec"]["selector"]["matchLabels"],
                ));
            }
            if let Some(np) = find(objs, "NetworkPolicy", n) {
                selectors.push(("NetworkPolicy", &np["spec"]["podSelector"]["matchLabels"]));
            }
            for (what, sel) in selectors {
                let selected: Vec<&str> = workloads
                    .iter()
                    .filter(|(_, labels)| selects(sel, labels))
                    .map(|(w, _)| w.as_str())
                    .collect();
                assert_eq!(
                    selected,
                    [format!("Deployment/{n}")],
                    "{case}: the {what} selector of {n}"
                );
            }
            if n != "ouroboros-proxy" {
                let entry = n.strip_prefix("ouroboros-proxy-").unwrap();
                assert_eq!(
                    pod["metadata"]["labels"]["ouroboros.io/proxy"], entry,
                    "{case}"
                );
                assert_eq!(
                    d["metadata"]["labels"]["ouroboros.io/proxy"], entry,
                    "{case}"
                );
                entries += 1;
            }
            if let Some(metrics) = find(objs, "Service", "ouroboros-metrics") {
                assert!(
                    selects(&metrics["spec"]["selector"], &pod["metadata"]["labels"]),
                    "{case}: the ServiceMonitor's Service scrapes {n}"
                );
            }
        }
    }
    assert!(entries >= 2, "{entries}");
    let objs = case(TWO_PROXIES_CASE);
    assert!(find(objs, "ServiceMonitor", "ouroboros").is_some());
    assert_eq!(proxy_deployments(objs).len(), 2);
}

#[test]
fn controller_and_etc_hosts_get_one_target_per_entry() {
    let mut seen = BTreeSet::new();
    for prefix in [TWO_PROXIES_CASE, "two ingress controllers, external-dns"] {
        for (w, args) in invocations(case(prefix)) {
            let (targets, _) = split_targets(args.clone());
            match args[0].as_str() {
                "controller" => {
                    assert_eq!(targets, [TRAEFIK_TARGET], "{prefix}: {w}");
                    assert!(has(&args, NGINX_IPMODE), "{prefix}: {w}: {args:?}");
                    seen.insert(w);
                }
                // Removing what was written needs no target and watches no ingress controller.
                _ => {
                    assert!(targets.is_empty(), "{prefix}: {w}: {targets:?}");
                    assert!(
                        !args.iter().any(|a| a.contains("ingress-controller")),
                        "{prefix}: {w}: {args:?}"
                    );
                }
            }
        }
    }
    for w in [
        "Deployment/ouroboros-controller container controller",
        "DaemonSet/ouroboros-etc-hosts container etc-hosts",
    ] {
        assert!(seen.contains(w), "{w} gets --target: {seen:?}");
    }
    // The binary's own parser reads what the chart means.
    let rule = parse_target(TRAEFIK_TARGET.strip_prefix("--target=").unwrap()).unwrap();
    assert_eq!(rule.name, "traefik");
    assert_eq!(
        rule.service,
        (Some(NAMESPACE.into()), "ouroboros-proxy-traefik".into())
    );
    assert_eq!(rule.ingress_classes, BTreeSet::from(["traefik".into()]));
    assert_eq!(rule.gateway_classes, BTreeSet::from(["traefik".into()]));
    assert!(rule.gateways.is_empty());
    assert_eq!(
        rule.ingress_controller,
        Some(("traefik".into(), "traefik".into()))
    );

    // Two entries, in their order, with every kind of mapping.
    let objs = rendered(&[
        "controller.gatewayApi=true",
        "proxies[0].name=public",
        "proxies[0].target.host=traefik.traefik",
        "proxies[0].ingressClasses={traefik,traefik-public}",
        "proxies[1].name=gw",
        "proxies[1].target.serviceName=envoy",
        "proxies[1].target.serviceNamespace=envoy-gateway-system",
        "proxies[1].gatewayClasses={eg}",
        "proxies[1].gateways={infra/public,infra/internal.example}",
    ]);
    let (targets, _) = split_targets(controller_args(objs));
    assert_eq!(
        targets,
        [
            "--target=name=public,service=ouroboros/ouroboros-proxy-public,ingress-class=traefik,ingress-class=traefik-public",
            "--target=name=gw,service=ouroboros/ouroboros-proxy-gw,gateway-class=eg,gateway=infra/public,gateway=infra/internal.example,ingress-controller=envoy-gateway-system/envoy",
        ],
        "a host target is not watched, a Service target is"
    );
    let gw = parse_target(targets[1].strip_prefix("--target=").unwrap()).unwrap();
    assert_eq!(
        gw.gateways,
        BTreeSet::from([
            ("infra".into(), "public".into()),
            ("infra".into(), "internal.example".into())
        ])
    );
    assert_eq!(gw.gateway_classes, BTreeSet::from(["eg".into()]));
    assert!(gw.ingress_classes.is_empty());
    for n in ["ouroboros-proxy-public", "ouroboros-proxy-gw"] {
        assert!(find(objs, "Service", n).is_some(), "{n}");
    }
}

/// A permission on one Service of the release namespace.
fn on_service(service: &str, verb: &str) -> Atom {
    on_service_in(NAMESPACE, service, verb)
}

/// A permission on one Service of a namespace.
fn on_service_in(ns: &str, service: &str, verb: &str) -> Atom {
    (
        Scope::Namespace(ns.into()),
        String::new(),
        "services".into(),
        Some(service.into()),
        verb.into(),
    )
}

/// The chart's side of the RBAC (its equality with `rbac::required` is
/// rbac_of_every_pod_equals_what_the_binary_needs): every proxy Service whose addresses answer
/// is readable, with the verbs of the mode.
#[test]
fn rbac_reads_every_proxy_service_that_answers() {
    let both = ["ouroboros-proxy", "ouroboros-proxy-traefik"];
    let got = granted(case(TWO_PROXIES_CASE), "ouroboros-controller");
    for n in both {
        for v in ["get", "list", "watch"] {
            assert!(got.contains(&on_service(n, v)), "coredns: {v} {n}");
        }
    }
    // An Ingress without a class goes where the default IngressClass says.
    assert!(got.contains(&(
        Scope::Cluster,
        "networking.k8s.io".into(),
        "ingressclasses".into(),
        None,
        "watch".into()
    )));
    let objs = case("two ingress controllers, external-dns");
    for sa in ["ouroboros-controller", "ouroboros-etc-hosts"] {
        let got = granted(objs, sa);
        for n in both {
            assert!(got.contains(&on_service(n, "get")), "{sa}: get {n}");
            assert!(!got.contains(&on_service(n, "watch")), "{sa}: watch {n}");
        }
    }
    // Addresses given for the main proxy are its own: the entry's Service is still read.
    let objs = rendered(&[TWO_PROXIES, "controller.proxyIps={10.0.0.1}"]);
    let got = granted(objs, "ouroboros-controller");
    assert!(got.contains(&on_service("ouroboros-proxy-traefik", "watch")));
    assert!(!got.contains(&on_service("ouroboros-proxy", "get")));
    // rewrite answers name the Services, reading none (the ingress controllers' Services, in
    // their own namespaces, are still watched for their ipMode).
    let objs = rendered(&[TWO_PROXIES, "controller.corednsAnswer=rewrite"]);
    let got = granted(objs, "ouroboros-controller");
    assert!(
        got.iter()
            .all(|a| a.2 != "services" || a.0 != Scope::Namespace(NAMESPACE.into())),
        "{got:?}"
    );
}

/// The ingress controller Service a proxy Deployment forwards to, if its target is a Service.
fn proxy_target_service(deployment: &Value) -> Option<(String, String)> {
    let args = container_args(&deployment["spec"]["template"]["spec"]);
    let value = |flag: &str| Some(flag_values(&args, flag).first()?.to_string());
    Some((
        value("--target-service-namespace")?,
        value("--target-service-name")?,
    ))
}

/// The values of every `flag=value` argument of `args`.
fn flag_values<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
    args.iter()
        .filter_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
        .collect()
}

/// Roles (and their RoleBindings) watching ingress controller Services for their ipMode.
fn ipmode_roles(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
        .filter(|o| matches!(kind(o), "Role" | "RoleBinding") && name(o).contains("-ipmode-"))
        .collect()
}

/// In every render, each pod running the controller watches exactly the ingress controller
/// Services the proxies forward to (the main proxy's as --ingress-controller-service, an
/// entry's as ingress-controller= in its --target), unless controller.skipProxyIpMode=false; a
/// host target is not watched, removing (cleanup) watches nothing; one Role per namespace of
/// those Services grants it (what exactly: rbac_of_every_pod_equals_what_the_binary_needs).
#[test]
fn ipmode_watch_follows_each_proxys_service_target() {
    let mut watching = BTreeSet::new();
    let mut not_watching = BTreeSet::new();
    let all = renders().into_iter().map(|r| (r, "ouroboros")).chain(
        reference_renders()
            .into_iter()
            .map(|r| (r, REFERENCE_FULLNAME)),
    );
    for ((case, objs, _), fullname) in all {
        let mut watched: BTreeSet<(String, String)> = BTreeSet::new();
        for (w, args) in invocations(objs) {
            if args[0] != "controller" {
                assert!(
                    !args
                        .iter()
                        .any(|a| a.contains("ingress-controller") || a.contains("ipmode")),
                    "{case}: {w}: {args:?}"
                );
                continue;
            }
            let services = watched_by(&format!("{case}: {w}"), objs, fullname, &args);
            if services.is_empty() {
                not_watching.insert(case);
            } else {
                watching.insert(case);
            }
            watched.extend(services);
        }
        assert_one_ipmode_role_per_namespace(case, objs, &watched);
    }
    for c in [
        "proxy: dual-stack",
        TWO_PROXIES_CASE,
        "two ingress controllers, external-dns",
        "reference values, controller and proxy on",
    ] {
        assert!(
            watching.iter().any(|w| w.starts_with(c)),
            "{c}: no watch in {watching:?}"
        );
    }
    for c in [
        "defaults",
        "two ingress controllers, ipMode not watched",
        "reference values, a target host",
    ] {
        assert!(
            not_watching.iter().any(|w| w.starts_with(c))
                && !watching.iter().any(|w| w.starts_with(c)),
            "{c}: watches"
        );
    }
}

/// The ingress controller Services that a controller invocation (`args`) watches, as the binary
/// reads them: the main proxy's (--ingress-controller-service) and each entry's (its --target),
/// where that proxy's target is a Service and --skip-proxy-ipmode is not false.
fn watched_by(
    what: &str,
    objs: &[Value],
    fullname: &str,
    args: &[String],
) -> Vec<(String, String)> {
    let skip = flag_values(args, "--skip-proxy-ipmode");
    let on = skip.is_empty();
    assert!(on || skip == ["false"], "{what}: {skip:?}");
    let main = find(objs, "Deployment", &format!("{fullname}-proxy"))
        .and_then(proxy_target_service)
        .filter(|_| on)
        .map(|(ns, n)| format!("{ns}/{n}"));
    assert_eq!(
        flag_values(args, "--ingress-controller-service"),
        Vec::from_iter(main.as_deref()),
        "{what}"
    );
    for t in flag_values(args, "--target") {
        let rule = parse_target(t).unwrap();
        let d = find(
            objs,
            "Deployment",
            &format!("{fullname}-proxy-{}", rule.name),
        )
        .unwrap_or_else(|| panic!("{what}: no proxy of --target={t}"));
        assert_eq!(
            rule.ingress_controller,
            proxy_target_service(d).filter(|_| on),
            "{what}: --target={t}"
        );
    }
    // The binary reads the same Services to watch.
    controller_needs(args).ingress_controller_services
}

/// One Role and one RoleBinding per namespace of the `watched` Services, named apart and within
/// 63 characters.
fn assert_one_ipmode_role_per_namespace(
    case: &str,
    objs: &[Value],
    watched: &BTreeSet<(String, String)>,
) {
    let roles = ipmode_roles(objs);
    let namespaces: BTreeSet<&str> = watched.iter().map(|(ns, _)| ns.as_str()).collect();
    let mut names = BTreeSet::new();
    for k in ["Role", "RoleBinding"] {
        let of_kind: Vec<_> = roles.iter().filter(|o| kind(o) == k).collect();
        let in_ns: BTreeSet<&str> = of_kind
            .iter()
            .map(|o| o["metadata"]["namespace"].as_str().unwrap())
            .collect();
        assert_eq!(in_ns, namespaces, "{case}: {k}s");
        assert_eq!(of_kind.len(), namespaces.len(), "{case}: {k}s");
        for o in of_kind {
            assert!(name(o).len() <= 63, "{case}: {k} {}", name(o));
            names.insert((k, name(o)));
        }
    }
    assert_eq!(names.len(), roles.len(), "{case}: names taken twice");
}

/// The two ingress controllers of TWO_PROXIES are each watched by every pod running the
/// controller, with list and watch on their Service alone; controller.skipProxyIpMode=false
/// watches neither and renders the same objects but those Roles.
#[test]
fn ipmode_rbac_of_two_ingress_controllers() {
    for (prefix, accounts) in [
        (TWO_PROXIES_CASE, &["ouroboros-controller"][..]),
        (
            "two ingress controllers, external-dns",
            &["ouroboros-controller", "ouroboros-etc-hosts"],
        ),
    ] {
        assert_ipmode_grants(prefix, accounts);
    }
    assert_skip_proxy_ipmode_drops_the_watch_alone();
}

/// Each of `accounts` may list and watch the Service of both ingress controllers of the case,
/// and nothing else in their namespaces; each namespace has one RoleBinding, of the controller.
fn assert_ipmode_grants(prefix: &str, accounts: &[&str]) {
    let controllers = [
        ("ingress-nginx", "ingress-nginx-controller"),
        ("traefik", "traefik"),
    ];
    let objs = case(prefix);
    for sa in accounts {
        let got = granted(objs, sa);
        for (ns, service) in controllers {
            let in_ns: BTreeSet<_> = got
                .iter()
                .filter(|a| a.0 == Scope::Namespace(ns.into()))
                .cloned()
                .collect();
            assert_eq!(
                in_ns,
                BTreeSet::from([
                    on_service_in(ns, service, "list"),
                    on_service_in(ns, service, "watch")
                ]),
                "{prefix}: {sa} in {ns}"
            );
        }
    }
    for (ns, _) in controllers {
        let binding = objs
            .iter()
            .find(|o| kind(o) == "RoleBinding" && o["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("{prefix}: no RoleBinding in {ns}"));
        assert_eq!(
            binding["metadata"]["labels"]["app.kubernetes.io/component"], "controller",
            "{prefix}"
        );
        let subjects: Vec<&str> = binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(subjects, accounts, "{prefix}: {ns}");
    }
}

/// controller.skipProxyIpMode=false watches neither ingress controller and renders the same
/// objects but those Roles, with the same flags but the watch.
fn assert_skip_proxy_ipmode_drops_the_watch_alone() {
    let off = case("two ingress controllers, ipMode not watched");
    let on = rendered(&[
        TWO_PROXIES,
        "etcHosts.enabled=true",
        "controller.mode=coredns",
    ]);
    assert_eq!(ipmode_roles(on).len(), 4);
    assert!(ipmode_roles(off).is_empty());
    let mut expected = object_keys(on);
    for o in ipmode_roles(on) {
        expected.remove(&(kind(o).to_string(), name(o).to_string()));
    }
    assert_eq!(object_keys(off), expected);
    for (k, n) in [
        ("Deployment", "ouroboros-controller"),
        ("DaemonSet", "ouroboros-etc-hosts"),
    ] {
        let args = container_args(pod_named(off, k, n).unwrap());
        assert!(has(&args, "--skip-proxy-ipmode=false"), "{k} {n}: {args:?}");
        assert!(
            !args.iter().any(|a| a.contains("ingress-controller")),
            "{args:?}"
        );
        assert!(controller_needs(&args)
            .ingress_controller_services
            .is_empty());
        let (targets, rest) = split_targets(args);
        let (on_targets, on_rest) = split_targets(container_args(pod_named(on, k, n).unwrap()));
        assert_eq!(
            targets,
            [TRAEFIK_TARGET
                .strip_suffix(",ingress-controller=traefik/traefik")
                .unwrap()]
        );
        assert_eq!(on_targets, [TRAEFIK_TARGET]);
        let added: Vec<_> = rest.iter().filter(|a| !on_rest.contains(a)).collect();
        let removed: Vec<_> = on_rest.iter().filter(|a| !rest.contains(a)).collect();
        assert_eq!(added, ["--skip-proxy-ipmode=false"], "{k} {n}");
        assert_eq!(removed, [NGINX_IPMODE], "{k} {n}");
    }
    for o in off {
        let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
        assert!(
            !["ingress-nginx", "traefik"].contains(&ns),
            "{} {}",
            kind(o),
            name(o)
        );
    }
}

/// Several watched Services: one Role per namespace with every name in it once, named within 63
/// characters even for the longest fullname and namespaces, each granting what the binary
/// needs.
#[test]
fn ipmode_roles_are_one_per_namespace_and_fit_in_63_characters() {
    let fullname = "a".repeat(50);
    let (ns1, ns2) = (
        format!("{}-1", "n".repeat(61)),
        format!("{}-2", "n".repeat(61)),
    );
    let sets: Vec<String> = [
        format!("fullnameOverride={fullname}"),
        "proxy.target.serviceName=nginx".into(),
        format!("proxy.target.serviceNamespace={ns1}"),
        // The main proxy's ingress controller again, and another in its namespace.
        "proxies[0].name=same".into(),
        "proxies[0].ingressClasses={same}".into(),
        "proxies[0].target.serviceName=nginx".into(),
        format!("proxies[0].target.serviceNamespace={ns1}"),
        "proxies[1].name=other".into(),
        "proxies[1].ingressClasses={other}".into(),
        "proxies[1].target.serviceName=other".into(),
        format!("proxies[1].target.serviceNamespace={ns1}"),
        "proxies[2].name=far".into(),
        "proxies[2].ingressClasses={far}".into(),
        "proxies[2].target.serviceName=far".into(),
        format!("proxies[2].target.serviceNamespace={ns2}"),
        "proxies[3].name=host".into(),
        "proxies[3].ingressClasses={host}".into(),
        "proxies[3].target.host=host.example".into(),
        "etcHosts.enabled=true".into(),
        "controller.mode=coredns".into(),
    ]
    .into();
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let Render { yaml, objs } = render(&sets);
    validate("ipMode Roles of long names", yaml);
    assert_eq!(
        assert_rbac("ipMode Roles of long names", objs, &fullname),
        3
    );
    let roles: Vec<_> = ipmode_roles(objs)
        .into_iter()
        .filter(|o| kind(o) == "Role")
        .collect();
    let mut got: Vec<(&str, Vec<String>)> = roles
        .iter()
        .map(|r| {
            assert!(name(r).len() <= 63, "{}", name(r));
            assert!(
                name(r).starts_with(&format!("{}-ipmode-", &fullname[..46])),
                "{}",
                name(r)
            );
            (
                r["metadata"]["namespace"].as_str().unwrap(),
                strings(&r["rules"][0]["resourceNames"]),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (ns1.as_str(), vec!["nginx".to_string(), "other".into()]),
            (ns2.as_str(), vec!["far".to_string()]),
        ]
    );
    assert_ne!(name(roles[0]), name(roles[1]));
}

/// An entry of proxies takes every proxy.* setting it does not set, and only its own.
#[test]
fn an_entry_takes_the_proxy_settings_it_does_not_set() {
    let objs = case(TWO_PROXIES_CASE);
    let main = find(objs, "Deployment", "ouroboros-proxy").unwrap();
    let entry = find(objs, "Deployment", "ouroboros-proxy-traefik").unwrap();
    let (mp, ep) = (
        &main["spec"]["template"]["spec"],
        &entry["spec"]["template"]["spec"],
    );
    assert_eq!(
        (&main["spec"]["replicas"], &entry["spec"]["replicas"]),
        (&2.into(), &3.into())
    );
    let (ma, ea) = (container_args(mp), container_args(ep));
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|x| !b.contains(x)).cloned().collect()
    };
    assert_eq!(
        only(&ea, &ma),
        [
            "--target-service-name=traefik",
            "--target-service-namespace=traefik",
            "--proxy-protocol=v2"
        ],
        "the entry's target and PROXY version, proxy's ports, timeouts and relay"
    );
    assert_eq!(only(&ma, &ea).len(), 3, "{ma:?}");
    let (mc, ec) = (&mp["containers"][0], &ep["containers"][0]);
    assert_eq!(
        ec["resources"]["requests"],
        serde_json::json!({"cpu": "100m", "memory": "48Mi"})
    );
    assert_eq!(ec["resources"]["limits"], mc["resources"]["limits"]);
    for k in [
        "image",
        "securityContext",
        "livenessProbe",
        "readinessProbe",
        "ports",
    ] {
        assert_eq!(ec[k], mc[k], "{k}");
    }
    for k in [
        "nodeSelector",
        "securityContext",
        "terminationGracePeriodSeconds",
        "serviceAccountName",
    ] {
        assert_eq!(ep[k], mp[k], "{k}");
    }
    assert_eq!(ep["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_entry_network_policy(objs);
    assert_entry_overrides();
}

/// The NetworkPolicy of TWO_PROXIES' entry: its own ingress controller, the rest shared.
fn assert_entry_network_policy(objs: &[Value]) {
    let (mn, en) = (
        &find(objs, "NetworkPolicy", "ouroboros-proxy").unwrap()["spec"],
        &find(objs, "NetworkPolicy", "ouroboros-proxy-traefik").unwrap()["spec"],
    );
    let to = &en["egress"][0];
    assert_eq!(
        to["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "traefik"
    );
    assert_eq!(
        to["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "traefik"
    );
    let ports: Vec<&Value> = to["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["port"])
        .collect();
    assert_eq!(ports, [8000, 8443]);
    assert_eq!(
        mn["egress"][0]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "ingress-nginx"
    );
    assert_eq!(en["egress"][1], mn["egress"][1], "DNS");
    assert_eq!(en["ingress"], mn["ingress"]);
}

/// Service, PodDisruptionBudget and placement set on an entry, a host target over proxy's
/// Service target.
fn assert_entry_overrides() {
    let sets = [
        "controller.gatewayApi=true",
        "proxy.target.serviceName=ingress-nginx-controller",
        "proxy.target.serviceNamespace=ingress-nginx",
        "proxy.podDisruptionBudget.maxUnavailable=2",
        "proxy.tolerations[0].key=main",
        "proxy.tolerations[0].operator=Exists",
        "proxies[0].name=edge",
        "proxies[0].gateways={infra/public}",
        "proxies[0].target.host=traefik.example",
        "proxies[0].target.httpsPort=8443",
        "proxies[0].service.type=LoadBalancer",
        "proxies[0].service.annotations.lb=internal",
        "proxies[0].podDisruptionBudget.minAvailable=1",
        "proxies[0].tolerations[0].operator=Exists",
    ];
    let Render { yaml, objs } = render(&sets);
    validate(
        "an entry overriding Service, PodDisruptionBudget and placement",
        yaml,
    );
    let svc = |n: &str| &find(objs, "Service", n).unwrap()["spec"];
    assert_eq!(svc("ouroboros-proxy-edge")["type"], "LoadBalancer");
    assert_eq!(svc("ouroboros-proxy")["type"], "ClusterIP");
    let meta = |n: &str| &find(objs, "Service", n).unwrap()["metadata"];
    assert_eq!(
        meta("ouroboros-proxy-edge")["annotations"]["lb"],
        "internal"
    );
    assert!(meta("ouroboros-proxy")["annotations"].is_null());
    let pdb = |n: &str| &find(objs, "PodDisruptionBudget", n).unwrap()["spec"];
    assert_eq!(pdb("ouroboros-proxy-edge")["minAvailable"], 1);
    assert!(pdb("ouroboros-proxy-edge")["maxUnavailable"].is_null());
    assert_eq!(pdb("ouroboros-proxy")["maxUnavailable"], 2);
    let pod = |n: &str| pod_named(objs, "Deployment", n).unwrap();
    assert_eq!(
        pod("ouroboros-proxy-edge")["tolerations"],
        serde_json::json!([{"operator": "Exists"}])
    );
    assert_eq!(pod("ouroboros-proxy")["tolerations"][0]["key"], "main");
    let args = container_args(pod("ouroboros-proxy-edge"));
    for a in [
        "--target-host=traefik.example",
        "--target-http-port=80",
        "--target-https-port=8443",
    ] {
        assert!(has(&args, a), "{a}: {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--target-service")),
        "{args:?}"
    );
}

/// With `proxies` empty (the default) nothing of it shows: no --target, no entry objects, the
/// main proxy's objects as they were (the other tests check those unchanged).
#[test]
fn without_proxies_no_target_and_no_entry_objects() {
    let defaults = defaults();
    let empty = rendered(&["json:proxies=[]"]);
    assert!(empty == defaults, "proxies: [] renders the defaults");
    let mut checked = 0;
    for (case, objs, _) in renders()
        .into_iter()
        .chain(reference_renders())
        .filter(|(c, _, _)| !c.starts_with(TWO_PROXIES_CASE) && !c.starts_with(ANSWERS_CASE))
    {
        for (w, args) in invocations(objs) {
            assert!(
                !args.iter().any(|a| a.starts_with("--target=")),
                "{case}: {w}"
            );
        }
        assert!(proxy_deployments(objs).len() <= 1, "{case}");
        for o in objs {
            assert!(
                o["metadata"]["labels"]["ouroboros.io/proxy"].is_null(),
                "{case}: {} {}",
                kind(o),
                name(o)
            );
            if kind(o) == "Role" && name(o).ends_with("-proxy-service") {
                let names = strings(&o["rules"][0]["resourceNames"]);
                assert_eq!(names.len(), 1, "{case}: {names:?}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
}

// --- flags the chart passes exist in the binary ------------------------------------------------

/// The long flags `ouroboros SUB --help` lists (the built binary, no OUROBOROS_* environment).
fn help_flags(sub: &str) -> Result<BTreeSet<String>, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.args([sub, "--help"]);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OUROBOROS_") {
            cmd.env_remove(k);
        }
    }
    let (ok, out, err) = run(&mut cmd, None);
    if !ok {
        return Err(err);
    }
    Ok(out
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-")
                .and_then(|r| r.split_once(", ").map(|(_, r)| r))
                .unwrap_or(l);
            let flag = l.strip_prefix("--")?;
            let end = flag
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(flag.len());
            Some(flag[..end].to_string())
        })
        .collect())
}

/// The binary's own command line accepts `args`. A build without the kernel relay refuses
/// `--copy-mode=sockmap`, which the chart renders when asked (the release image has no relay
/// either): there the refusal must name the missing feature, and the rest of the arguments still
/// parse.
fn assert_parses(what: &str, args: &[String]) {
    let parse = |args: &[String]| {
        let argv = std::iter::once("ouroboros".to_string()).chain(args.iter().cloned());
        common::parse_without_env::<ouroboros::cli::Cli, _, _>(argv).map(drop)
    };
    match parse(args) {
        Ok(()) => {}
        Err(e)
            if cfg!(not(feature = "kernel-relay"))
                && has(args, "--copy-mode=sockmap")
                && e.to_string().contains(ouroboros::relay::mode::NOT_BUILT) =>
        {
            let auto: Vec<String> = args
                .iter()
                .map(|a| match a.as_str() {
                    "--copy-mode=sockmap" => "--copy-mode=auto".to_string(),
                    _ => a.clone(),
                })
                .collect();
            if let Err(e) = parse(&auto) {
                panic!("{what}: the binary rejects {auto:?}:\n{e}");
            }
        }
        Err(e) => panic!("{what}: the binary rejects {args:?}:\n{e}"),
    }
}

/// Every invocation of `sub` in every render: its flags exist in `--help`, and the whole
/// argument list parses with the binary's own command line (so the values are valid too).
fn chart_flags_exist(sub: &str) {
    let flags = help_flags(sub).unwrap_or_else(|e| panic!("ouroboros {sub} --help failed: {e}"));
    assert!(
        flags.contains("help") && flags.len() > 3,
        "{sub}: {flags:?}"
    );
    let mut seen = 0;
    let mut used = BTreeSet::new();
    for (case, objs, _) in renders().into_iter().chain(reference_renders()) {
        for (w, args) in invocations(objs) {
            if args.first().map(String::as_str) != Some(sub) {
                continue;
            }
            for a in &args[1..] {
                let f = a
                    .strip_prefix("--")
                    .unwrap_or_else(|| panic!("{case}: {w}: {a} is not a --flag"));
                let f = f.split_once('=').map_or(f, |(f, _)| f);
                assert!(
                    flags.contains(f),
                    "{case}: {w} passes --{f}, which `ouroboros {sub} --help` does not list"
                );
                used.insert(f.to_string());
            }
            assert_parses(&format!("{case}: {w}"), &args);
            seen += 1;
        }
    }
    assert!(seen > 0, "no {sub} invocation rendered");
    assert!(used.len() > 3, "{sub}: {used:?}");
}

#[test]
fn chart_flags_exist_proxy() {
    chart_flags_exist("proxy");
}

#[test]
fn chart_flags_exist_edge() {
    chart_flags_exist("edge");
}

#[test]
fn chart_flags_exist_controller() {
    chart_flags_exist("controller");
}

#[test]
fn chart_flags_exist_cleanup() {
    chart_flags_exist("cleanup");
}

/// Until `controller` exists, at least its flags that the crate already defines (DnsArgs,
/// HostnameArgs) parse with the crate's own types: done for every invocation by
/// `controller_needs`/`cleanup_needs`; this makes sure every render was covered.
#[test]
fn controller_and_cleanup_args_parse_with_the_shared_flag_groups() {
    let mut n = 0;
    for (_, objs, _) in renders() {
        for (_, args) in invocations(objs) {
            match args[0].as_str() {
                "controller" => {
                    controller_needs(&args);
                }
                "cleanup" => {
                    cleanup_needs(&args);
                }
                _ => continue,
            }
            n += 1;
        }
    }
    assert!(n >= 20, "{n}");
    // And the flag → RBAC mapping reads the flags it should.
    let out = rendered(&[
        "controller.mode=external-dns",
        "controller.externalDns.proxyIps={10.0.0.1}",
    ]);
    let needs = controller_needs(&controller_args(out));
    assert_eq!(needs.proxy_service, None);
    let written: Vec<_> = needs.writes.iter().map(|g| g.resource).collect();
    assert_eq!(written, ["dnsendpoints"]);
}

// --- README ------------------------------------------------------------------------------------

const MATRIX_BEGIN: &str =
    "<!-- rbac-matrix: generated by tests/it/chart.rs from controller::rbac; do not edit -->\n";
const MATRIX_END: &str = "<!-- rbac-matrix end -->";

fn matrix_rows(out: &mut String, mode: &str, who: &str, rules: &[Rule]) {
    for r in rules {
        let scope = match &r.scope {
            Scope::Cluster => "cluster".to_string(),
            Scope::Namespace(ns) => format!("`{ns}`"),
        };
        let group = if r.api_group.is_empty() {
            "core".to_string()
        } else {
            format!("`{}`", r.api_group)
        };
        let names = if r.resource_names.is_empty() {
            "any".to_string()
        } else {
            r.resource_names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| {mode} | {who} | {scope} | {group} | {} | {names} | {} | {} |\n",
            r.resource,
            r.verbs.join(", "),
            r.why
        ));
    }
}

/// The RBAC matrix in docs/install.md is `rbac::required` (and the cleanup and edge rules) for the
/// chart's default values in each mode, release `ouroboros` in namespace `ouroboros`.
#[test]
fn readme_rbac_matrix_is_generated_from_the_rules() {
    let mut table = String::from(MATRIX_BEGIN);
    table.push_str("| Mode | Pod | Scope | API group | Resource | Names | Verbs | Why |\n");
    table.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (mode, sets) in [
        ("coredns", &["controller.mode=coredns"][..]),
        ("coredns-import", &["controller.mode=coredns-import"]),
        ("external-dns", &["controller.mode=external-dns"]),
        (
            "etc-hosts",
            &["controller.enabled=false", "etcHosts.enabled=true"],
        ),
    ] {
        let objs = rendered(sets);
        let (k, n) = if mode == "etc-hosts" {
            ("DaemonSet", "ouroboros-etc-hosts")
        } else {
            ("Deployment", "ouroboros-controller")
        };
        let needs = controller_needs(&container_args(pod_named(objs, k, n).unwrap()));
        matrix_rows(&mut table, mode, "controller", &rbac::required(&needs));
        if let Some(pod) = pod_named(objs, "Job", "ouroboros-cleanup") {
            let rules = workloads::cleanup_required(&cleanup_needs(&container_args(pod)));
            matrix_rows(&mut table, mode, "uninstall hook", &rules);
        }
    }
    let objs = rendered(&["edge.enabled=true"]);
    let pod = pod_named(objs, "DaemonSet", "ouroboros-edge").unwrap();
    matrix_rows(
        &mut table,
        "edge (`edge.enabled`)",
        "edge",
        &workloads::edge_required(&edge_needs(&container_args(pod), objs)),
    );
    matrix_rows(
        &mut table,
        "edge (`edge.loadBalancer.enabled`)",
        "edge",
        &workloads::edge_required(&EdgeNeeds::LoadBalancer {
            lease: Some(("ouroboros".into(), "ouroboros-edge".into())),
            l2_leases: None,
        }),
    );
    table.push_str(MATRIX_END);
    Section {
        path: &root().join("docs/install.md"),
        what: "RBAC matrix",
        begin: MATRIX_BEGIN,
        end: MATRIX_END,
        switch: "BLESS",
        rewrite: "cargo test --test it chart::readme",
    }
    .check(&table);
}

// --- values table of the chart README ------------------------------------------------------------

const VALUES_BEGIN: &str =
    "<!-- values-table: generated by tests/it/chart.rs from values.yaml; do not edit -->\n";
const VALUES_END: &str = "<!-- values-table end -->";

/// A comment after a value on its line (` # ...` outside quotes), if any.
fn inline_comment(value: &str) -> Option<&str> {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in value.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return Some(value[i + 1..].trim()),
            _ => {}
        }
        prev = c;
    }
    None
}

/// The documentation of every key of values.yaml by dotted path: the `#` lines directly above
/// it (no blank line between), then a comment on its own line.
fn values_comments(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut parents: Vec<(usize, String)> = vec![];
    let mut above: Vec<&str> = vec![];
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(c) = trimmed.strip_prefix('#') {
            above.push(c.trim());
            continue;
        }
        let key = trimmed.split_once(':').filter(|(k, rest)| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
                && (rest.is_empty() || rest.starts_with(' '))
        });
        // Blank lines, list items and flow continuations end a comment without a key.
        let Some((key, rest)) = key else {
            above.clear();
            continue;
        };
        while parents.last().is_some_and(|(i, _)| *i >= indent) {
            parents.pop();
        }
        let path: Vec<&str> = parents
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect();
        let mut doc = above.join(" ");
        if let Some(c) = inline_comment(rest) {
            doc = format!("{doc} {c}").trim().to_string();
        }
        out.insert(path.join("."), doc);
        parents.push((indent, key.to_string()));
        above.clear();
    }
    out
}

/// One row per leaf of values.yaml: a key whose schema has no `properties` of its own, or whose
/// value is not a mapping. Keys without documentation are collected in `undocumented`.
fn values_rows(
    prefix: &str,
    values: &yaml_serde::Mapping,
    schema: &Value,
    comments: &BTreeMap<String, String>,
    rows: &mut String,
    undocumented: &mut Vec<String>,
) {
    for (k, v) in values {
        let k = k.as_str().expect("values.yaml keys are strings");
        let path = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        let node = &schema["properties"][k];
        assert!(
            !node.is_null(),
            "values.yaml key {path} is not in values.schema.json"
        );
        if let (Some(m), true) = (v.as_mapping(), node.get("properties").is_some()) {
            if !m.is_empty() {
                values_rows(&path, m, node, comments, rows, undocumented);
                continue;
            }
        }
        let ty = match v {
            // Unset by default: the type the schema allows besides null.
            yaml_serde::Value::Null => node["anyOf"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .filter_map(|t| t["type"].as_str())
                        .find(|t| *t != "null")
                })
                .unwrap_or("null"),
            yaml_serde::Value::Bool(_) => "boolean",
            yaml_serde::Value::Number(n) if n.is_f64() => "number",
            yaml_serde::Value::Number(_) => "integer",
            yaml_serde::Value::String(_) => "string",
            yaml_serde::Value::Sequence(_) => "list",
            _ => "object",
        };
        let default = serde_json::to_string(&serde_json::to_value(v).unwrap()).unwrap();
        let doc = comments.get(&path).map(String::as_str).unwrap_or("");
        if doc.is_empty() {
            undocumented.push(path.clone());
        }
        rows.push_str(&format!(
            "| `{path}` | {ty} | {} | {} |\n",
            cell(&format!("`{default}`")),
            cell(doc)
        ));
    }
}

/// The values table in charts/ouroboros/README.md: every leaf key of values.yaml with its
/// type, default and the comment above it, in the file's order.
#[test]
fn readme_values_table_is_generated_from_values_yaml() {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    let values: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let comments = values_comments(&text);
    let mut table = String::from(VALUES_BEGIN);
    table.push_str("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n");
    let mut undocumented = vec![];
    values_rows(
        "",
        values.as_mapping().unwrap(),
        &schema,
        &comments,
        &mut table,
        &mut undocumented,
    );
    assert!(
        undocumented.is_empty(),
        "values.yaml keys without a comment above them: {undocumented:?}"
    );
    assert!(table.lines().count() > 100, "{table}");
    table.push_str(VALUES_END);
    Section {
        path: &chart_dir().join("README.md"),
        what: "values table",
        begin: VALUES_BEGIN,
        end: VALUES_END,
        switch: "BLESS",
        rewrite: "cargo test --test it chart::readme",
    }
    .check(&table);
}

#[test]
fn values_comments_are_read_from_the_lines_above_each_key() {
    let c = values_comments(
        "# file comment\n\n# A section.\na:\n  # One\n  # two.\n  b: 1 # inline\n  c: \"x # y\"\n\n  # loose\n\n  d: []\n  e:\n    - f: 1\n  # after a list\n  g: {h: 1}\n",
    );
    assert_eq!(c["a"], "A section.");
    assert_eq!(c["a.b"], "One two. inline");
    assert_eq!(c["a.c"], "");
    assert_eq!(c["a.d"], "");
    assert_eq!(c["a.e"], "");
    assert_eq!(c["a.g"], "after a list");
    assert!(!c.contains_key("a.e.f") && !c.contains_key("f"));
}

// --- values written for the reference chart ------------------------------------------------------

/// Every key of the reference tool's chart values (lexfrei/ouroboros), set to a realistic value
/// other than its default.
const FIXTURE: &str = "tests/fixtures/chart/reference-values.yaml";
/// Its fullnameOverride.
const REFERENCE_FULLNAME: &str = "hairpin-fix";
/// The fixture turns the controller and the proxy off; most of its keys show on them.
const REFERENCE_ON: &[&str] = &["controller.enabled=true", "proxy.enabled=true"];

fn reference_values() -> PathBuf {
    root().join(FIXTURE)
}

/// The fixture as is, then with the controller and proxy on, and variations of that.
const REFERENCE_CASES: &[(&str, &[&str])] = &[
    ("reference values", &[]),
    ("reference values, controller and proxy on", REFERENCE_ON),
    (
        "reference values, coredns mode",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "controller.mode=coredns",
        ],
    ),
    (
        "reference values, coredns-import mode",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "controller.mode=coredns-import",
        ],
    ),
    (
        "reference values, a target host",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "proxy.target.host=traefik.traefik.svc.cozy.local",
        ],
    ),
    (
        "reference values, maxUnavailable",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "podDisruptionBudget.minAvailable=null",
            "podDisruptionBudget.maxUnavailable=2",
        ],
    ),
    (
        "reference values, PodDisruptionBudget off",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "podDisruptionBudget.enabled=false",
        ],
    ),
];

fn reference_renders() -> Vec<Rendered> {
    render_cases("helm", &[&reference_values()], REFERENCE_CASES)
}

fn reference(case: &str) -> &'static [Value] {
    let (_, sets) = REFERENCE_CASES
        .iter()
        .find(|(c, _)| *c == case)
        .unwrap_or_else(|| panic!("no case {case:?}"));
    &render_with("helm", &[&reference_values()], sets).objs
}

/// What NOTES.txt says about a key of the reference chart.
#[derive(Clone, Copy, Debug)]
enum Note {
    /// "`old` is deprecated: use `new`".
    Renamed(&'static str),
    /// "`old` is ignored: why".
    Ignored,
    /// Nothing: this chart has the key under the same name.
    Same,
}

/// One key of the reference chart: its note, and a check that it has its effect.
type KeyCheck = (&'static str, Note, Box<dyn Fn()>);

fn args(objs: &[Value], k: &str, suffix: &str) -> Vec<String> {
    let n = format!("{REFERENCE_FULLNAME}-{suffix}");
    container_args(pod_named(objs, k, &n).unwrap_or_else(|| panic!("no {k} {n}")))
}

fn pod<'a>(objs: &'a [Value], k: &str, suffix: &str) -> &'a Value {
    let n = format!("{REFERENCE_FULLNAME}-{suffix}");
    pod_named(objs, k, &n).unwrap_or_else(|| panic!("no {k} {n}"))
}

fn obj<'a>(objs: &'a [Value], k: &str, suffix: &str) -> Option<&'a Value> {
    find(objs, k, &format!("{REFERENCE_FULLNAME}-{suffix}"))
}

fn has(args: &[String], a: &str) -> bool {
    args.iter().any(|x| x == a)
}

/// The value at a dotted path (a number indexes a list).
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[k],
    })
}

/// The fixture's value at a dotted path, as JSON.
fn fixture_value(path: &str) -> Value {
    let v: Value =
        yaml_serde::from_str(&std::fs::read_to_string(reference_values()).unwrap()).unwrap();
    at(&v, path).clone()
}

fn ref_off() -> &'static [Value] {
    reference("reference values")
}
fn ref_on() -> &'static [Value] {
    reference("reference values, controller and proxy on")
}
fn ref_ctl() -> Vec<String> {
    args(ref_on(), "Deployment", "controller")
}
fn ref_ds() -> Vec<String> {
    args(ref_off(), "DaemonSet", "etc-hosts")
}
fn ref_px() -> Vec<String> {
    args(ref_on(), "Deployment", "proxy")
}
fn ref_ctl_pod() -> &'static Value {
    pod(ref_on(), "Deployment", "controller")
}
fn ref_px_pod() -> &'static Value {
    pod(ref_on(), "Deployment", "proxy")
}
fn ref_ds_pod() -> &'static Value {
    pod(ref_off(), "DaemonSet", "etc-hosts")
}

/// The container whose arguments `args` gives is passed `arg`.
fn passes(args: fn() -> Vec<String>, arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        let a = args();
        assert!(has(&a, arg), "{arg} missing: {a:?}");
    })
}

/// The containers of the controller, the etc-hosts DaemonSet and the proxy are all passed `arg`.
fn all_pass(arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        for a in [ref_ctl(), ref_ds(), ref_px()] {
            assert!(has(&a, arg), "{a:?}");
        }
    })
}

/// The controller of the reference case `case` is passed `arg`.
fn controller_passes_in(case: &'static str, arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        let a = args(reference(case), "Deployment", "controller");
        assert!(has(&a, arg), "{case}: {a:?}");
    })
}

/// No uninstall hook in that case.
fn no_hook(case: &'static str) -> Box<dyn Fn()> {
    Box::new(move || assert!(obj(reference(case), "Job", "cleanup").is_none(), "{case}"))
}

/// A pod field the reference chart passed through verbatim.
fn same(key: &'static str, pod: fn() -> &'static Value, field: &'static str) -> Box<dyn Fn()> {
    Box::new(move || assert_eq!(at(pod(), field), &fixture_value(key), "{key}"))
}

/// The object `k` `<fullname>-suffix` of the fixture with the controller and proxy on has
/// `want` at `path`.
fn on_is(k: &'static str, suffix: &'static str, path: &'static str, want: Value) -> Box<dyn Fn()> {
    Box::new(move || {
        let o = obj(ref_on(), k, suffix).unwrap_or_else(|| panic!("no {k} {suffix}"));
        assert_eq!(at(o, path), &want, "{k} {suffix}: {path}");
    })
}

/// The pod-level keys the controller and proxy Deployments share, checked the same way for both.
fn pod_checks(component: &'static str, pod: fn() -> &'static Value) -> Vec<KeyCheck> {
    // Keys live for the whole test run: leaked once per component.
    let key = |k: &str| -> &'static str { Box::leak(format!("{component}.{k}").into_boxed_str()) };
    let annotations = key("podAnnotations");
    let mut checks: Vec<KeyCheck> = vec![
        (
            key("resources"),
            Note::Same,
            same(key("resources"), pod, "containers.0.resources"),
        ),
        (
            annotations,
            Note::Same,
            on_is(
                "Deployment",
                component,
                "spec.template.metadata.annotations",
                fixture_value(annotations),
            ),
        ),
        (
            key("podLabels"),
            Note::Same,
            on_is(
                "Deployment",
                component,
                "spec.template.metadata.labels.team",
                "platform".into(),
            ),
        ),
    ];
    for field in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
    ] {
        let k = key(field);
        checks.push((k, Note::Same, same(k, pod, field)));
    }
    checks
}

/// Every key of the reference chart's values with its check: one table per part of the chart.
fn key_checks() -> Vec<KeyCheck> {
    [
        image_and_name_keys(),
        controller_keys(),
        proxy_keys(),
        external_dns_keys(),
        etc_hosts_and_account_keys(),
        disruption_and_network_keys(),
        pod_checks("controller", ref_ctl_pod),
        pod_checks("proxy", ref_px_pod),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn image_and_name_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "image.repository",
            Same,
            Box::new(|| {
                let image = ref_ctl_pod()["containers"][0]["image"].as_str().unwrap();
                assert!(
                    image.starts_with("registry.example/mirror/ouroboros:"),
                    "{image}"
                );
            }),
        ),
        (
            "image.tag",
            Same,
            Box::new(|| {
                let image = ref_px_pod()["containers"][0]["image"].as_str().unwrap();
                assert!(image.ends_with(":0.1.0-mirror.1"), "{image}");
            }),
        ),
        (
            "image.pullPolicy",
            Same,
            Box::new(|| {
                assert_eq!(ref_ds_pod()["containers"][0]["imagePullPolicy"], "Always");
            }),
        ),
        (
            "imagePullSecrets",
            Same,
            same("imagePullSecrets", ref_px_pod, "imagePullSecrets"),
        ),
        (
            "nameOverride",
            Same,
            Box::new(|| {
                let ds = obj(ref_off(), "DaemonSet", "etc-hosts").unwrap();
                assert_eq!(
                    ds["metadata"]["labels"]["app.kubernetes.io/name"],
                    "hairpin"
                );
            }),
        ),
        (
            "fullnameOverride",
            Same,
            Box::new(|| assert!(obj(ref_on(), "Service", "proxy").is_some())),
        ),
        (
            "controller.cleanupHookImage",
            Ignored,
            Box::new(|| {
                let text = serde_json::to_string(ref_on()).unwrap();
                assert!(!text.contains("kubectl"), "no kubectl image is rendered");
            }),
        ),
        (
            "externalDns.cleanupHookImage",
            Ignored,
            Box::new(|| {
                let text =
                    serde_json::to_string(reference("reference values, coredns mode")).unwrap();
                assert!(!text.contains("kubectl"), "no kubectl image is rendered");
            }),
        ),
        (
            "terminationGracePeriodSeconds",
            Ignored,
            Box::new(|| assert!(ref_ctl_pod()["terminationGracePeriodSeconds"].is_null())),
        ),
    ]
}

fn controller_keys() -> Vec<KeyCheck> {
    use Note::*;
    const COREDNS: &str = "reference values, coredns mode";
    const IMPORT: &str = "reference values, coredns-import mode";
    vec![
        (
            "controller.enabled",
            Same,
            Box::new(|| {
                assert!(obj(ref_off(), "Deployment", "controller").is_none());
                assert!(obj(ref_on(), "Deployment", "controller").is_some());
            }),
        ),
        (
            "controller.replicaCount",
            Renamed("controller.replicas"),
            on_is("Deployment", "controller", "spec.replicas", 2.into()),
        ),
        (
            "controller.clusterDomain",
            Renamed("clusterDomain"),
            all_pass("--cluster-domain=cozy.local"),
        ),
        (
            "controller.mode",
            Same,
            passes(ref_ctl, "--mode=external-dns"),
        ),
        (
            "controller.gatewayApi.enabled",
            Renamed("controller.gatewayApi"),
            Box::new(|| {
                assert!(has(&ref_ctl(), "--gateway-api") && has(&ref_ds(), "--gateway-api"))
            }),
        ),
        (
            "controller.ingressClass",
            Same,
            passes(ref_ctl, "--ingress-class=nginx-public"),
        ),
        (
            "controller.gatewayClass",
            Same,
            passes(ref_ctl, "--gateway-class=envoy-public"),
        ),
        (
            "controller.coredns.namespace",
            Same,
            controller_passes_in(COREDNS, "--coredns-namespace=dns-system"),
        ),
        (
            "controller.coredns.configmap",
            Same,
            controller_passes_in(COREDNS, "--coredns-configmap=coredns-main"),
        ),
        (
            "controller.coredns.key",
            Same,
            controller_passes_in(COREDNS, "--coredns-key=Corefile.main"),
        ),
        (
            "controller.coredns.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook(COREDNS),
        ),
        (
            "controller.corednsImport.namespace",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-namespace=dns-system"),
        ),
        (
            "controller.corednsImport.configmap",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-configmap=coredns-extra"),
        ),
        (
            "controller.corednsImport.key",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-key=hairpin.override"),
        ),
        (
            "controller.corednsImport.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook(IMPORT),
        ),
        ("controller.resync", Same, passes(ref_ctl, "--resync=1m")),
        (
            "controller.logLevel",
            Renamed("logLevel"),
            all_pass("--log-level=debug"),
        ),
    ]
}

fn proxy_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "proxy.enabled",
            Same,
            Box::new(|| {
                assert!(
                    obj(ref_off(), "Deployment", "proxy").is_none()
                        && obj(ref_off(), "Service", "proxy").is_none()
                );
                assert!(obj(ref_on(), "Deployment", "proxy").is_some());
            }),
        ),
        (
            "proxy.replicaCount",
            Renamed("proxy.replicas"),
            on_is("Deployment", "proxy", "spec.replicas", 3.into()),
        ),
        (
            "proxy.service.type",
            Same,
            on_is("Service", "proxy", "spec.type", "NodePort".into()),
        ),
        (
            "proxy.service.annotations",
            Same,
            on_is(
                "Service",
                "proxy",
                "metadata.annotations",
                fixture_value("proxy.service.annotations"),
            ),
        ),
        (
            "proxy.target.host",
            Same,
            Box::new(|| {
                // Empty in the fixture: the Service below. Set, it wins, as in the reference chart.
                let host = reference("reference values, a target host");
                let a = args(host, "Deployment", "proxy");
                assert!(
                    has(&a, "--target-host=traefik.traefik.svc.cozy.local"),
                    "{a:?}"
                );
                assert!(
                    !a.iter().any(|x| x.starts_with("--target-service")),
                    "{a:?}"
                );
                // A host target is not watched for its ipMode.
                let c = args(host, "Deployment", "controller");
                assert!(!c.iter().any(|x| x.contains("ingress-controller")), "{c:?}");
            }),
        ),
        (
            "proxy.target.serviceName",
            Same,
            passes(ref_px, "--target-service-name=traefik"),
        ),
        (
            "proxy.target.namespace",
            Renamed("proxy.target.serviceNamespace"),
            Box::new(|| {
                assert!(has(&ref_px(), "--target-service-namespace=traefik"));
                // The Service it makes the target is watched for its ipMode.
                assert!(has(
                    &ref_ctl(),
                    "--ingress-controller-service=traefik/traefik"
                ));
                let role = obj(ref_on(), "Role", "controller-ipmode-traefik").unwrap();
                assert_eq!(role["metadata"]["namespace"], "traefik");
            }),
        ),
        (
            "proxy.target.httpPort",
            Same,
            passes(ref_px, "--target-http-port=8000"),
        ),
        (
            "proxy.target.httpsPort",
            Same,
            passes(ref_px, "--target-https-port=8443"),
        ),
        (
            "proxy.dialTimeout",
            Same,
            passes(ref_px, "--dial-timeout=3s"),
        ),
        (
            "proxy.readyTimeout",
            Same,
            passes(ref_px, "--ready-timeout=1s"),
        ),
        (
            "proxy.shutdownGrace",
            Renamed("proxy.shutdownGraceSeconds"),
            Box::new(|| {
                assert!(has(&ref_px(), "--shutdown-grace=75s"), "1m15s");
                assert_eq!(ref_px_pod()["terminationGracePeriodSeconds"], 5 + 75 + 5);
            }),
        ),
    ]
}

fn external_dns_keys() -> Vec<KeyCheck> {
    use Note::*;
    let renamed = |old: &'static str, arg: &'static str| -> KeyCheck {
        let new = old.strip_prefix("externalDns.").unwrap();
        let new: &'static str = Box::leak(format!("controller.externalDns.{new}").into_boxed_str());
        (old, Renamed(new), passes(ref_ctl, arg))
    };
    vec![
        (
            "externalDns.namespace",
            Renamed("controller.externalDns.namespace"),
            Box::new(|| {
                assert!(has(&ref_ctl(), "--external-dns-namespace=dns-records"));
                let role = obj(ref_on(), "Role", "controller-external-dns").unwrap();
                assert_eq!(role["metadata"]["namespace"], "dns-records");
            }),
        ),
        (
            "externalDns.recordTTL",
            Renamed("controller.externalDns.recordTtl"),
            passes(ref_ctl, "--external-dns-record-ttl=300"),
        ),
        (
            "externalDns.proxyIP",
            Renamed("controller.externalDns.proxyIps"),
            passes(ref_ctl, "--external-dns-proxy-ip=10.96.100.10"),
        ),
        renamed("externalDns.output", "--external-dns-output=service"),
        renamed(
            "externalDns.annotationPrefix",
            "--external-dns-annotation-prefix=internal-dns.example.com/",
        ),
        renamed(
            "externalDns.proxyService",
            "--external-dns-proxy-service=shared-hairpin-proxy",
        ),
        renamed(
            "externalDns.annotations",
            "--external-dns-annotation=external-dns.alpha.kubernetes.io/cloudflare-proxied=false",
        ),
        renamed(
            "externalDns.labels",
            "--external-dns-label=external-dns-instance=internal-dns",
        ),
        (
            "externalDns.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook("reference values, controller and proxy on"),
        ),
    ]
}

fn etc_hosts_and_account_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "etcHosts.enabled",
            Same,
            Box::new(|| assert!(obj(ref_off(), "DaemonSet", "etc-hosts").is_some())),
        ),
        (
            "etcHosts.hostsPath",
            Renamed("etcHosts.hostPath"),
            Box::new(|| {
                assert_eq!(
                    ref_ds_pod()["volumes"][0]["hostPath"]["path"],
                    "/var/lib/hosts/hosts"
                );
            }),
        ),
        (
            "etcHosts.proxyIP",
            Renamed("etcHosts.proxyIps"),
            passes(ref_ds, "--proxy-ip=10.96.100.10"),
        ),
        (
            "etcHosts.resources",
            Same,
            same("etcHosts.resources", ref_ds_pod, "containers.0.resources"),
        ),
        (
            "etcHosts.tolerations",
            Same,
            same("etcHosts.tolerations", ref_ds_pod, "tolerations"),
        ),
        (
            "serviceAccount.annotations",
            Same,
            Box::new(|| {
                let sas: Vec<_> = ref_on()
                    .iter()
                    .filter(|o| kind(o) == "ServiceAccount")
                    .collect();
                assert!(sas.len() >= 3, "{sas:?}");
                let key = "iam.gke.io/gcp-service-account";
                for sa in sas {
                    assert_eq!(
                        sa["metadata"]["annotations"][key],
                        fixture_value("serviceAccount.annotations")[key],
                        "{}",
                        name(sa)
                    );
                }
            }),
        ),
        (
            "serviceAccount.name",
            Same,
            Box::new(|| {
                assert_eq!(ref_ctl_pod()["serviceAccountName"], "hairpin-controller");
                assert!(find(ref_on(), "ServiceAccount", "hairpin-controller").is_some());
            }),
        ),
        (
            "podSecurityContext",
            Same,
            Box::new(|| {
                for p in [ref_ctl_pod(), ref_px_pod()] {
                    assert_eq!(p["securityContext"]["runAsUser"], 10001);
                    assert_eq!(p["securityContext"]["runAsGroup"], 10001);
                }
            }),
        ),
        (
            "securityContext",
            Same,
            Box::new(|| {
                for p in [ref_ctl_pod(), ref_px_pod()] {
                    let sc = &p["containers"][0]["securityContext"];
                    assert_eq!(sc["runAsNonRoot"], true);
                    assert_eq!(sc["readOnlyRootFilesystem"], true);
                }
            }),
        ),
    ]
}

fn disruption_and_network_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "podDisruptionBudget.enabled",
            Renamed("proxy.podDisruptionBudget.enabled"),
            Box::new(|| {
                assert!(obj(ref_on(), "PodDisruptionBudget", "proxy").is_some());
                let off = reference("reference values, PodDisruptionBudget off");
                assert!(obj(off, "PodDisruptionBudget", "proxy").is_none());
            }),
        ),
        (
            "podDisruptionBudget.minAvailable",
            Renamed("proxy.podDisruptionBudget.minAvailable"),
            Box::new(|| {
                let spec = &obj(ref_on(), "PodDisruptionBudget", "proxy").unwrap()["spec"];
                assert_eq!(spec["minAvailable"], "50%");
                assert!(spec["maxUnavailable"].is_null());
            }),
        ),
        (
            "podDisruptionBudget.maxUnavailable",
            Renamed("proxy.podDisruptionBudget.maxUnavailable"),
            Box::new(|| {
                let r = reference("reference values, maxUnavailable");
                let spec = &obj(r, "PodDisruptionBudget", "proxy").unwrap()["spec"];
                assert_eq!(spec["maxUnavailable"], 2);
                assert!(spec["minAvailable"].is_null());
            }),
        ),
        (
            "networkPolicy.enabled",
            Same,
            Box::new(|| assert!(obj(ref_on(), "NetworkPolicy", "proxy").is_some())),
        ),
        (
            "networkPolicy.ingress.from",
            Renamed("networkPolicy.from"),
            Box::new(|| {
                let np = obj(ref_on(), "NetworkPolicy", "proxy").unwrap();
                let from = at(np, "spec.ingress.0.from").as_array().unwrap();
                let theirs = fixture_value("networkPolicy.ingress.from");
                let theirs = theirs.as_array().unwrap();
                assert_eq!(&from[..theirs.len()], &theirs[..], "their peers, verbatim");
                // Then the controller's pods, for its hairpin probe (on by default).
                let [probe] = &from[theirs.len()..] else {
                    panic!("{from:?}")
                };
                let component = &probe["podSelector"]["matchLabels"]["app.kubernetes.io/component"];
                assert_eq!(component, "controller");
            }),
        ),
    ]
}

/// The fixture's keys: every leaf lies under exactly one checked key, every checked key is in it.
fn fixture_keys(v: &Value, prefix: &str, checked: &BTreeSet<&str>, out: &mut Vec<String>) {
    if checked.contains(prefix) {
        out.push(prefix.to_string());
        return;
    }
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                fixture_keys(v, &p, checked, out);
            }
        }
        _ => panic!("{FIXTURE}: {prefix} is checked by no entry of key_checks"),
    }
}

/// Names the key whose check failed: the checks' own messages name what they looked at.
struct KeyContext(&'static str);

impl Drop for KeyContext {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("(checking the reference chart's key {})", self.0);
        }
    }
}

/// A values file written for the reference chart installs: with Helm 4 and 3 alike (see
/// helm_3_renders_what_helm_4_renders), valid for Kubernetes (every_render_validates...), with
/// the RBAC the flags need (rbac_of_every_pod...); here, every key has its effect and NOTES
/// names each old key.
#[test]
fn reference_chart_values_install_and_every_key_has_its_effect() {
    let checks = key_checks();
    let keys: BTreeSet<&str> = checks.iter().map(|(k, _, _)| *k).collect();
    assert_eq!(keys.len(), checks.len(), "a key checked twice");
    let fixture: Value =
        yaml_serde::from_str(&std::fs::read_to_string(reference_values()).unwrap()).unwrap();
    let mut found = vec![];
    fixture_keys(&fixture, "", &keys, &mut found);
    let found: BTreeSet<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, keys, "{FIXTURE} and key_checks cover the same keys");

    let notes_on = notes(&[&reference_values()], REFERENCE_ON);
    let notes_max = notes(
        &[&reference_values()],
        &[
            "podDisruptionBudget.minAvailable=null",
            "podDisruptionBudget.maxUnavailable=2",
        ],
    );
    let mut renamed = 0;
    for (key, note, check) in &checks {
        let _context = KeyContext(key);
        check();
        // null in the fixture: its line shows where it is set.
        let notes = if *key == "podDisruptionBudget.maxUnavailable" {
            &notes_max
        } else {
            &notes_on
        };
        match note {
            Note::Renamed(new) => {
                let line = format!("`{key}` is deprecated: use `{new}`");
                assert!(notes.contains(&line), "NOTES lacks {line:?}:\n{notes}");
                renamed += 1;
            }
            Note::Ignored => {
                let line = format!("`{key}` is ignored: ");
                assert!(notes.contains(&line), "NOTES lacks {line:?}:\n{notes}");
            }
            Note::Same => {
                assert!(
                    !notes.contains(&format!("`{key}`")),
                    "NOTES names {key}:\n{notes}"
                );
            }
        }
    }
    assert_eq!(
        notes_on.matches(" is deprecated: use ").count(),
        renamed - 1,
        "one line per old key in the values (maxUnavailable is null there):\n{notes_on}"
    );
    assert!(renamed >= 20, "{renamed}");
    // The default values print no such line.
    let plain = notes(&[], &[]);
    assert!(
        !plain.contains("deprecated") && !plain.contains("reference tool's chart"),
        "{plain}"
    );
}

/// The defaults in "ouroboros.aliases" (_helpers.tpl) are values.yaml's, and every old key is
/// in the schema: a new key at its default does not count as set against its old key.
#[test]
fn alias_table_agrees_with_values_and_schema() {
    let helpers = std::fs::read_to_string(chart_dir().join("templates/_helpers.tpl")).unwrap();
    let start = helpers
        .find("{{- define \"ouroboros.aliases\" -}}\n")
        .unwrap();
    let body = &helpers[start..];
    let body = &body[body.find('\n').unwrap() + 1..body.find("{{- end -}}").unwrap()];
    let aliases: Vec<Value> = yaml_serde::from_str(body).unwrap();
    assert!(aliases.len() >= 20, "{body}");
    let values: Value =
        yaml_serde::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let at = |v: &Value, path: &str| path.split('.').fold(v.clone(), |v, k| v[k].clone());
    let in_schema = |path: &str| {
        path.split('.')
            .try_fold(&schema, |s, k| s["properties"].get(k))
            .is_some()
    };
    let mut defaults = vec![];
    for a in &aliases {
        let (old, new) = (a["old"].as_str().unwrap(), a["new"].as_str().unwrap());
        let default = at(&values, new);
        assert!(!default.is_null(), "{new} is not in values.yaml");
        assert_eq!(a["default"], default, "default of {new}");
        assert!(in_schema(old), "{old} is not in values.schema.json");
        assert!(
            at(&values, old).is_null(),
            "{old} must not be in values.yaml"
        );
        defaults.push(format!(
            "json:{new}={}",
            serde_json::to_string(&default).unwrap()
        ));
    }
    // Every new key set to its default does not count as set against the fixture's old keys.
    let sets: Vec<&str> = REFERENCE_ON
        .iter()
        .copied()
        .chain(defaults.iter().map(String::as_str))
        .collect();
    let out = template_files("helm", &[&reference_values()], &sets);
    let out = out.unwrap_or_else(|e| panic!("new keys at their defaults, old keys set: {e}"));
    assert!(docs(&out) == ref_on(), "and the old keys win");
    // The reference chart's target default, whose host counts as unset.
    let host = at(&values, "proxy.target.host");
    assert!(
        helpers.contains(&format!("(ne $t.host {host})")),
        "_helpers.tpl compares proxy.target.host with its default {host}"
    );
    // proxy.yaml compares maxUnavailable with its default.
    let proxy = std::fs::read_to_string(chart_dir().join("templates/proxy.yaml")).unwrap();
    let max = at(&values, "proxy.podDisruptionBudget.maxUnavailable");
    assert!(proxy.contains(&format!("(ne (toJson $pdb.maxUnavailable) \"{max}\")")));
}

/// Each template's copy of .Values gets the old keys mapped before anything reads it.
#[test]
fn every_template_maps_the_reference_keys_first() {
    let mut n = 0;
    for e in std::fs::read_dir(chart_dir().join("templates")).unwrap() {
        let path = e.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if file.starts_with('_') {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.trim_start();
        // Leading template comments.
        while let Some(r) = rest.strip_prefix("{{- /*") {
            rest = r[r.find("*/}}").unwrap() + 4..].trim_start();
        }
        assert!(
            rest.starts_with("{{- include \"ouroboros.compat\" . "),
            "templates/{file} must begin with {{{{- include \"ouroboros.compat\" . }}}}"
        );
        n += 1;
    }
    assert!(n >= 10, "{n}");
}

#[test]
fn etc_hosts_alone_replaces_the_controller_unless_a_mode_is_set() {
    let alone = rendered(&["etcHosts.enabled=true"]);
    assert!(find(alone, "DaemonSet", "ouroboros-etc-hosts").is_some());
    assert!(find(alone, "Deployment", "ouroboros-controller").is_none());
    assert!(find(alone, "Job", "ouroboros-cleanup").is_none());
    for o in alone {
        assert_ne!(
            o["metadata"]["namespace"],
            "kube-system",
            "{} {}",
            kind(o),
            name(o)
        );
    }
    let text = notes(&[], &["etcHosts.enabled=true"]);
    assert!(
        text.contains("instead of the controller Deployment"),
        "{text}"
    );

    for mode in ["coredns", "coredns-import", "external-dns"] {
        let both = rendered(&["etcHosts.enabled=true", &format!("controller.mode={mode}")]);
        assert!(
            find(both, "DaemonSet", "ouroboros-etc-hosts").is_some(),
            "{mode}"
        );
        let args = controller_args(both);
        assert!(args.contains(&format!("--mode={mode}")), "{mode}: {args:?}");
    }
    let text = notes(&[], &["etcHosts.enabled=true", "controller.mode=coredns"]);
    assert!(
        text.contains("runs alongside it because controller.mode is set"),
        "{text}"
    );
    // Without etcHosts, an empty mode is coredns.
    let defaults = defaults();
    let args = controller_args(defaults);
    assert!(args.contains(&"--mode=coredns".to_string()), "{args:?}");
}

/// Values that conflict or cannot work: each refused with a message of a template.
const CONFLICTS: &[(&[&str], Refusal)] = &[
    (
        &["controller.replicas=2", "controller.leaderElect=false"],
        Message(&["leaderElect"]),
    ),
    (
        &["proxy.target.serviceName=traefik"],
        Message(&["serviceNamespace"]),
    ),
    (
        &[
            "controller.mode=coredns-import",
            "controller.corednsAnswer=view",
        ],
        Message(&["controller.mode=coredns"]),
    ),
    // An old key of the reference chart and its new key set to different values.
    (
        &["controller.replicaCount=3", "controller.replicas=2"],
        Message(&["controller.replicaCount", "controller.replicas"]),
    ),
    (
        &[
            "etcHosts.enabled=true",
            "etcHosts.proxyIP=10.0.0.1",
            "etcHosts.proxyIps={10.0.0.2}",
        ],
        Message(&["etcHosts.proxyIP", "etcHosts.proxyIps"]),
    ),
    (
        &[
            "externalDns.output=crd",
            "controller.externalDns.output=service",
        ],
        Message(&["externalDns.output", "controller.externalDns.output"]),
    ),
    (
        &["proxy.shutdownGrace=45s", "proxy.shutdownGraceSeconds=20"],
        Message(&["proxy.shutdownGrace", "proxy.shutdownGraceSeconds"]),
    ),
    (
        &["controller.logLevel=debug", "logLevel=warn"],
        Message(&["controller.logLevel", "logLevel"]),
    ),
    (
        &[
            "proxy.podDisruptionBudget.minAvailable=1",
            "proxy.podDisruptionBudget.maxUnavailable=2",
        ],
        Message(&["minAvailable", "maxUnavailable"]),
    ),
    // No proxy, and no address for the names.
    (
        &["proxy.enabled=false"],
        Message(&["proxy.enabled=false", "controller.proxyIps"]),
    ),
    (
        &[
            "proxy.enabled=false",
            "controller.mode=external-dns",
            "etcHosts.enabled=true",
        ],
        Message(&["controller.externalDns.proxyIps", "etcHosts.proxyIps"]),
    ),
    (&["proxy.target.host="], Message(&["proxy.target.host"])),
    // Reported at the values check, which Helm renders first, not at some other template.
    (
        &["image.repository=ghcr.io/lexfrei/ouroboros"],
        Message(&[
            "templates/values-check.yaml",
            "image.repository",
            "reference",
        ]),
    ),
    // Each half of a target Service names the other half, not the host already set.
    (
        &["proxy.target.serviceName=traefik"],
        Message(&["proxy.target.serviceName needs proxy.target.serviceNamespace"]),
    ),
    (
        &["proxy.target.serviceNamespace=traefik"],
        Message(&["proxy.target.serviceNamespace needs proxy.target.serviceName"]),
    ),
    // Entries of proxies (with a target and the Gateway API on, unless said).
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=default",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["proxies[0].name is default", "the main proxy"]),
    ),
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].ingressClasses={traefik}",
            "proxies[1].name=traefik",
            "proxies[1].target.host=traefik-internal.traefik",
            "proxies[1].ingressClasses={traefik-internal}",
        ],
        Message(&["proxies[1].name traefik", "proxies[0]", "a name of its own"]),
    ),
    (
        &[GATEWAY_API, ENTRY_HOST, "proxies[0].name=traefik"],
        Message(&["proxies[0] (traefik) takes no hostnames", "ingressClasses"]),
    ),
    (
        // 48 characters: a valid label, but ouroboros-proxy-<name> is 64.
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik-public-internet-facing-load-balancer-one",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["too long", "63", "at most 47 characters"]),
    ),
    (
        // Without the Gateway API.
        &[
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].gatewayClasses={traefik}",
        ],
        Message(&["proxies[0] (traefik)", "controller.gatewayApi"]),
    ),
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].ingressClasses={traefik}",
            "proxies[1].name=other",
            "proxies[1].target.host=other.example",
            "proxies[1].ingressClasses={traefik}",
        ],
        Message(&[
            "proxies[0] (traefik) and proxies[1] (other)",
            "ingress-class=traefik",
        ]),
    ),
    (
        &[
            "proxies[0].name=traefik",
            "proxies[0].target.serviceName=traefik",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["proxies[0].target.serviceNamespace"]),
    ),
];
const GATEWAY_API: &str = "controller.gatewayApi=true";
const ENTRY_HOST: &str = "proxies[0].target.host=traefik.traefik";

#[test]
fn conflicting_or_unusable_values_fail_with_a_message() {
    for (sets, refusal) in CONFLICTS {
        assert_refused(sets, refusal);
    }
    // The old key alone, or both set to the same value, render.
    for sets in [
        &["controller.replicaCount=3"][..],
        &["controller.replicaCount=3", "controller.replicas=3"],
        &[
            "externalDns.output=crd",
            "controller.externalDns.output=dnsendpoint",
        ],
        &[
            "controller.clusterDomain=cozy.local.",
            "clusterDomain=cozy.local",
        ],
    ] {
        rendered(sets);
    }
    let objs = rendered(&["controller.replicaCount=3"]);
    assert_eq!(
        find(objs, "Deployment", "ouroboros-controller").unwrap()["spec"]["replicas"],
        3
    );
}

// --- image ---------------------------------------------------------------------------------------

/// The Containerfile builds the locked release binary, puts it where the chart's preStop hook
/// runs it, runs as the user the pods run as, and keeps the build directory out of the context.
#[test]
fn containerfile_matches_the_chart() {
    let cf = std::fs::read_to_string(root().join("Containerfile")).unwrap();
    let lines: Vec<&str> = cf
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(
        cf.contains("cargo build --release --locked"),
        "locked release build"
    );
    let froms: Vec<_> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "multi-stage: {froms:?}");
    assert!(froms[0].contains("rust:1-slim-bookworm"), "{froms:?}");
    assert!(
        lines.contains(&"COPY --from=build /out/ouroboros /usr/local/bin/ouroboros"),
        "the binary where the chart's preStop runs it"
    );
    assert!(lines.contains(&r#"ENTRYPOINT ["/usr/local/bin/ouroboros"]"#));
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    assert_eq!(user, "65532:65532", "the pods' runAsUser/runAsGroup");
    assert!(
        cf.contains("objcopy --strip-debug"),
        "the image's binary without its debug information"
    );
    // deploy/image.sh builds the same image without an engine (tests/it/node checks its result).
    let image_sh = std::fs::read_to_string(root().join("deploy/image.sh")).unwrap();
    for same in [
        "objcopy --strip-debug",
        "/usr/local/bin/ouroboros",
        "--user 65532:65532",
        "--entrypoint /usr/local/bin/ouroboros",
    ] {
        assert!(image_sh.contains(same), "deploy/image.sh lacks {same}");
    }
    let objs = defaults();
    let pod = pod_named(objs, "Deployment", "ouroboros-proxy").unwrap();
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l == "/target"),
        ".dockerignore keeps target/ out"
    );
}

/// `proxy.answer`, `proxies[].answer` and the ingress controller's configuration object become
/// the controller's flags; each object gets a Role granting get/list/watch on it alone.
#[test]
fn answers_become_flags_and_least_privilege_roles() {
    let objs = case(ANSWERS_CASE);
    let args = controller_args(objs);
    let want = [
        "--ingress-controller-service=ingress-nginx/ingress-nginx-controller",
        "--ingress-controller-kind=ingress-nginx",
        "--ingress-controller-config=ingress-nginx/ingress-nginx-controller",
        "--target=name=traefik,service=ouroboros/ouroboros-proxy-traefik,ingress-class=traefik,\
         ingress-controller=traefik/traefik,ingress-controller-kind=traefik,\
         ingress-controller-config=daemonset/traefik/traefik",
        "--target=name=cilium,service=ouroboros/ouroboros-proxy-cilium,gateway-class=cilium,\
         ingress-controller=gateways/cilium-gateway-main,ingress-controller-kind=cilium,\
         ingress-controller-config=kube-system/cilium-config",
        "--target=name=probed,service=ouroboros/ouroboros-proxy-probed,ingress-class=probed,\
         ingress-controller=haproxy-controller/haproxy-kubernetes-ingress,\
         ingress-controller-kind=probe",
        "--target=name=plain,service=ouroboros/ouroboros-proxy-plain,ingress-class=plain,\
         ingress-controller=plain/plain,answer=direct",
        "--target=name=outside,service=ouroboros/ouroboros-proxy-outside,\
         ingress-class=outside,answer=skip",
    ];
    for w in want {
        assert!(args.iter().any(|a| a == w), "{w} not in {args:#?}");
    }
    // One Role per namespace of those objects, each rule one object by name.
    let rules = |ns: &str| {
        let role = objs
            .iter()
            .find(|o| {
                kind(o) == "Role"
                    && o["metadata"]["namespace"] == ns
                    && name(o).starts_with("ouroboros-controller-answer-")
            })
            .unwrap_or_else(|| panic!("no answer Role in {ns}"));
        role["rules"].clone()
    };
    assert_eq!(
        rules("kube-system"),
        serde_json::json!([{"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["cilium-config"], "verbs": ["get", "list", "watch"]}])
    );
    assert_eq!(
        rules("traefik"),
        serde_json::json!([{"apiGroups": ["apps"], "resources": ["daemonsets"],
            "resourceNames": ["traefik"], "verbs": ["get", "list", "watch"]}])
    );
    // probe: the ingress controller Service it knocks on, read by name.
    assert_eq!(
        rules("haproxy-controller"),
        serde_json::json!([{"apiGroups": [""], "resources": ["services"],
            "resourceNames": ["haproxy-kubernetes-ingress"], "verbs": ["get", "list", "watch"]}])
    );
    // Nothing for a target that reads no configuration.
    assert!(!objs.iter().any(|o| kind(o) == "Role"
        && o["metadata"]["namespace"] == "plain"
        && name(o).contains("answer")));
    // The defaults read none.
    assert!(!defaults().iter().any(|o| name(o).contains("-answer-")));
}

/// Answer settings the controller would refuse stop the render with what to do.
#[test]
fn answer_settings_the_controller_refuses_fail_to_render() {
    for (sets, want) in [
        (
            &["proxy.answer=direct"][..],
            "proxy.answer direct may answer with the ingress controller Service's ClusterIPs: \
             set proxy.target.serviceName and serviceNamespace",
        ),
        (
            &["proxy.ingressControllerKind=traefik"],
            "proxy.ingressControllerKind and proxy.ingressControllerConfig go together",
        ),
        (
            &[
                "proxy.target.serviceName=s",
                "proxy.target.serviceNamespace=n",
                "proxy.ingressControllerKind=ingress-nginx",
                "proxy.ingressControllerConfig=daemonset/a/b",
            ],
            "proxy.ingressControllerConfig daemonset/a/b is not NAMESPACE/NAME",
        ),
        (
            &[
                "proxy.target.serviceName=s",
                "proxy.target.serviceNamespace=n",
                "proxy.ingressControllerKind=probe",
                "proxy.ingressControllerConfig=n/c",
            ],
            "proxy.ingressControllerKind probe knocks on the ingress controller Service and \
             reads no configuration object: drop proxy.ingressControllerConfig (n/c)",
        ),
        (
            &["proxy.ingressControllerKind=probe"],
            "proxy.ingressControllerKind probe knocks on the ingress controller Service: set \
             proxy.target.serviceName and serviceNamespace",
        ),
    ] {
        let mut cmd = Command::new(tool("helm"));
        cmd.args(["template", RELEASE]).arg(chart_dir());
        values_args(&mut cmd, &[], sets);
        let (ok, _, err) = run(&mut cmd, None);
        assert!(!ok && err.contains(want), "{sets:?}: {err}");
    }
}

/// The chart has a define in templates/_modes.tpl for every mode of the binary's table, and
/// takes as `controller.mode` (values.schema.json) every mode the controller Deployment runs,
/// then the one that runs on each node, the etc-hosts DaemonSet (`etcHosts.enabled`), which the
/// schema takes only for the templates to refuse it with a message naming that key (TYPOS).
/// A mode added to the table fails here until the chart has it.
#[test]
fn every_mode_of_the_table_has_its_define_and_its_controller_mode_value() {
    use clap::ValueEnum;
    let modes_tpl = std::fs::read_to_string(chart_dir().join("templates/_modes.tpl")).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let enum_values: Vec<&str> = schema["properties"]["controller"]["properties"]["mode"]["enum"]
        .as_array()
        .expect("controller.mode has an enum")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut want = vec![""];
    let mut per_node = vec![];
    for mode in Mode::value_variants() {
        let define = format!("{{{{- define \"ouroboros.mode.{}\" -}}}}", mode.name());
        assert!(
            modes_tpl.contains(&define),
            "templates/_modes.tpl has no {define}"
        );
        if mode.spec().runs_per_node() {
            per_node.push(mode.name());
        } else {
            want.push(mode.name());
        }
    }
    want.extend(per_node);
    assert_eq!(enum_values, want, "values.schema.json controller.mode");
}

/// The uninstall hook deletes the controller's Lease (the one the controller holds, by its
/// flags) when leader election is on, and asks for no Lease without it; its RBAC is checked
/// against these flags by `rbac_of_every_pod_equals_what_the_binary_needs`.
#[test]
fn the_uninstall_hook_deletes_the_controllers_lease() {
    for (sets, mode) in [
        (&[][..], "coredns"),
        (&["controller.mode=external-dns"][..], "external-dns"),
        (&["controller.leaderElect=false"][..], "no lease"),
    ] {
        let objs = rendered(sets);
        let controller =
            container_args(pod_named(objs, "Deployment", "ouroboros-controller").unwrap());
        let hook = container_args(pod_named(objs, "Job", "ouroboros-cleanup").unwrap());
        for flag in ["--lease-name", "--lease-namespace"] {
            assert_eq!(
                flag_values(&hook, flag),
                flag_values(&controller, flag),
                "{mode}: {flag}"
            );
        }
        let elect = mode != "no lease";
        assert_eq!(
            flag_values(&hook, "--lease-name").len(),
            usize::from(elect),
            "{mode}"
        );
    }
}
