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

mod docs;
mod image;
mod pods;
mod proxies;
mod reference_values;
use pods::proxy_deployments;
use proxies::{flag_values, object_keys, split_targets};
use reference_values::{
    has, reference_renders, reference_values, REFERENCE_CASES, REFERENCE_FULLNAME, REFERENCE_ON,
};
