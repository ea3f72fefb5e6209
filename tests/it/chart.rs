//! The Helm chart (charts/ouroboros) and deploy/quickstart.yaml: lint, render for every mode and
//! a matrix of values, validate every render against the Kubernetes schemas, and check the
//! rendered objects against the binary itself: RBAC equal to `controller::rbac`, flags that the
//! real CLI accepts, hardened pods, probes. Needs Helm and kubernetes-validate in .ci/bin
//! (`.ci/tools.sh` installs them).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use serde::Deserialize;
use serde_json::Value;

use ouroboros::controller::args::{DnsArgs, ExternalDnsOutput, Mode};
use ouroboros::controller::rbac::{self, EdgeNeeds, Needs, Rule, Scope};
use ouroboros::controller::ControllerArgs;

const RELEASE: &str = "ouroboros";
const NAMESPACE: &str = "ouroboros";
/// Kubernetes version the renders are validated against (kubernetes-validate's schemas).
const KUBERNETES_VERSION: &str = "1.35.0";
/// Custom resources kubernetes-validate has no schema for; checked field by field below.
const CUSTOM_KINDS: &[&str] = &["ServiceMonitor"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart_dir() -> PathBuf {
    root().join("charts/ouroboros")
}

fn tool(name: &str) -> PathBuf {
    let p = root().join(".ci/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run .ci/tools.sh (it installs Helm and kubernetes-validate)",
        p.display()
    );
    p
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> (bool, String, String) {
    let out = common::run(cmd, stdin);
    (out.code == 0, out.stdout, out.stderr)
}

/// `helm template` of the chart with `--set` values: the YAML, or Helm's error.
fn template(sets: &[&str], hooks: bool) -> Result<String, String> {
    template_with("helm", sets, hooks)
}

/// The same with another Helm binary of .ci/bin (`helm3`).
fn template_with(helm: &str, sets: &[&str], hooks: bool) -> Result<String, String> {
    let mut cmd = Command::new(tool(helm));
    cmd.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE]);
    if !hooks {
        cmd.arg("--no-hooks");
    }
    for s in sets {
        match s.strip_prefix("string:") {
            Some(s) => cmd.args(["--set-string", s]),
            None => cmd.args(["--set", s]),
        };
    }
    let (ok, out, err) = run(&mut cmd, None);
    if ok {
        Ok(out)
    } else {
        Err(err)
    }
}

fn docs(yaml: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The values matrix: every mode and the options that change what is rendered (`string:`
/// sets a string with `--set-string`).
const CASES: &[(&str, &[&str])] = &[
    ("defaults", &[]),
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
        "external-dns: another proxy Service",
        &[
            "controller.mode=external-dns",
            "controller.externalDns.proxyService=edge-proxy",
        ],
    ),
    (
        "etc-hosts alongside coredns",
        &["etcHosts.enabled=true", "controller.ingressClass=nginx"],
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
];

/// Every case rendered once (with hooks), shared by the tests.
fn renders() -> &'static [(String, Vec<Value>, String)] {
    static R: std::sync::OnceLock<Vec<(String, Vec<Value>, String)>> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        CASES
            .iter()
            .map(|(name, sets)| {
                let yaml = template(sets, true)
                    .unwrap_or_else(|e| panic!("case {name:?}: helm template failed: {e}"));
                (name.to_string(), docs(&yaml), yaml)
            })
            .collect()
    })
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or("")
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

fn find<'a>(objs: &'a [Value], k: &str, n: &str) -> Option<&'a Value> {
    objs.iter().find(|o| kind(o) == k && name(o) == n)
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

#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct CleanupFlags {
    #[command(flatten)]
    dns: DnsArgs,
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
    Needs::for_controller(&c.dns, &c.hostnames, &c.election, NAMESPACE)
}

fn cleanup_needs(args: &[String]) -> Needs {
    assert_eq!(args[0], "cleanup");
    let f = common::parse_without_env::<CleanupFlags, _, _>(&args[1..])
        .unwrap_or_else(|e| panic!("cleanup flags {args:?}: {e}"));
    Needs::for_cleanup(&f.dns, NAMESPACE)
}

fn edge_needs(args: &[String]) -> EdgeNeeds {
    assert_eq!(args[0], "edge");
    let value = |flag: &str| -> Vec<&str> {
        args.iter()
            .filter_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
            .collect()
    };
    let service = value("--service");
    let (ns, svc) = service[0].split_once('/').unwrap();
    EdgeNeeds {
        namespace: ns.into(),
        service: svc.into(),
        numbered_port: value("--listen")
            .iter()
            .any(|l| l.rsplit_once('=').unwrap().1.parse::<u16>().is_ok()),
    }
}

// --- RBAC --------------------------------------------------------------------------------------

/// One permission: scope, API group, resource, object name (None: any), verb.
type Atom = (Scope, String, String, Option<String>, String);

fn atoms(rules: &[Rule]) -> BTreeSet<Atom> {
    let mut out = BTreeSet::new();
    for r in rules {
        let names: Vec<Option<String>> = if r.resource_names.is_empty() {
            vec![None]
        } else {
            r.resource_names.iter().cloned().map(Some).collect()
        };
        for n in &names {
            for v in &r.verbs {
                out.insert((
                    r.scope.clone(),
                    r.api_group.to_string(),
                    r.resource.to_string(),
                    n.clone(),
                    v.to_string(),
                ));
            }
        }
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
            let names = strings(&r["resourceNames"]);
            let names: Vec<Option<String>> = if names.is_empty() {
                vec![None]
            } else {
                names.into_iter().map(Some).collect()
            };
            for g in strings(&r["apiGroups"]) {
                for res in strings(&r["resources"]) {
                    for n in &names {
                        for v in strings(&r["verbs"]) {
                            out.insert((scope.clone(), g.clone(), res.clone(), n.clone(), v));
                        }
                    }
                }
            }
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

#[test]
fn rbac_of_every_pod_equals_what_the_binary_needs() {
    let mut checked = 0;
    for (case, objs, _) in renders() {
        let mut service_accounts = BTreeSet::new();
        for (k, n, want) in [
            ("Deployment", "ouroboros-controller", "controller"),
            ("DaemonSet", "ouroboros-etc-hosts", "etc-hosts"),
        ] {
            let Some(pod) = pod_named(objs, k, n) else {
                continue;
            };
            let sa = pod["serviceAccountName"].as_str().unwrap();
            service_accounts.insert(sa.to_string());
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
        if let Some(pod) = pod_named(objs, "DaemonSet", "ouroboros-edge") {
            let sa = pod["serviceAccountName"].as_str().unwrap();
            let expected = atoms(&rbac::edge_required(&edge_needs(&container_args(pod))));
            assert_eq!(granted(objs, sa), expected, "{case}: edge");
            checked += 1;
        }
        if let Some(pod) = pod_named(objs, "Job", "ouroboros-cleanup") {
            let sa = pod["serviceAccountName"].as_str().unwrap();
            let expected = atoms(&rbac::cleanup_required(&cleanup_needs(&container_args(
                pod,
            ))));
            assert!(!expected.is_empty(), "{case}: cleanup needs some rule");
            assert_eq!(granted(objs, sa), expected, "{case}: cleanup hook");
            checked += 1;
        }
        // The proxy has none.
        assert!(granted(objs, "ouroboros-proxy").is_empty(), "{case}");
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
    }
    assert!(checked >= 20, "only {checked} pods checked");
}

#[test]
fn rbac_only_for_the_selected_mode() {
    let (_, objs, _) = &renders()[0];
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
    let objs = docs(&template(&["controller.mode=external-dns"], true).unwrap());
    for o in &objs {
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
    for helm in ["helm", "helm3"] {
        for sets in [
            &[][..],
            &["controller.mode=external-dns", "etcHosts.enabled=true"],
            &[
                "edge.enabled=true",
                "networkPolicy.enabled=true",
                "serviceMonitor.enabled=true",
            ],
        ] {
            let mut cmd = Command::new(tool(helm));
            cmd.args(["lint", "--strict"]).arg(chart_dir());
            for s in sets {
                cmd.args(["--set", s]);
            }
            let (ok, out, err) = run(&mut cmd, None);
            assert!(ok, "{helm} lint --strict {sets:?}:\n{out}\n{err}");
            assert!(out.contains("0 chart(s) failed"), "{helm}: {out}");
        }
    }
}

/// Helm 3 renders the same objects as Helm 4 for every case, and its schema check rejects the
/// same typo.
#[test]
fn helm_3_renders_what_helm_4_renders() {
    for ((case, objs, _), (_, sets)) in renders().iter().zip(CASES) {
        let yaml = template_with("helm3", sets, true)
            .unwrap_or_else(|e| panic!("{case}: helm3 template failed: {e}"));
        assert!(docs(&yaml) == *objs, "{case}: Helm 3 renders other objects");
    }
    let err = template_with("helm3", &["controller.mdoe=x"], true).unwrap_err();
    assert!(err.contains("mdoe"), "{err}");
}

fn validate(what: &str, yaml: &str) {
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
    for (case, _, yaml) in renders() {
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

#[test]
fn schema_rejects_typos_and_bad_values() {
    for (set, complaint) in [
        ("controller.mdoe=external-dns", "mdoe"),
        ("proxy.replica=3", "replica"),
        ("typo=1", "typo"),
        ("controller.mode=etc-hosts", "mode"),
        ("controller.resync=10", "resync"),
        ("controller.resync=ten minutes", "resync"),
        ("proxy.service.ipFamilyPolicy=DualStack", "ipFamilyPolicy"),
        ("edge.listen={443}", "listen"),
        ("controller.externalDns.proxyIps={not-an-ip}", "proxyIps"),
        ("controller.proxyFqdn=no-trailing-dot.example", "proxyFqdn"),
        ("etcHosts.hostPath=etc/hosts", "hostPath"),
        ("proxy.busyPoll=2ms", "busyPoll"),
        ("edge.busyPoll=1001us", "busyPoll"),
        ("edge.busyPoll=50", "busyPoll"),
    ] {
        let err = template(&[set], true).expect_err(set);
        assert!(
            err.contains("schema") && err.contains(complaint),
            "--set {set}: {err}"
        );
    }
    let err = template(
        &["controller.replicas=2", "controller.leaderElect=false"],
        true,
    )
    .expect_err("replicas without a lease");
    assert!(err.contains("leaderElect"), "{err}");
    let err = template(&["proxy.target.serviceName=traefik"], true).unwrap_err();
    assert!(err.contains("serviceNamespace"), "{err}");
    let err = template(&["edge.enabled=true", "edge.service=nonamespace"], true).unwrap_err();
    assert!(err.contains("edge/service"), "{err}");
}

// --- pods ----------------------------------------------------------------------------------------

#[test]
fn pods_are_hardened() {
    let mut checked = 0;
    for (case, objs, _) in renders() {
        for (w, pod) in pods(objs) {
            let root_exception = w.ends_with("-etc-hosts") || w.ends_with("-edge");
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{case}: {w}"
            );
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"],
                Value::Bool(!root_exception),
                "{case}: {w}"
            );
            assert!(
                pod["hostPID"].is_null() && pod["hostIPC"].is_null(),
                "{case}: {w}"
            );
            // Service links would inject OUROBOROS_PROXY_* variables (from the Service
            // `ouroboros-proxy`) into the flags' environment namespace.
            assert_eq!(pod["enableServiceLinks"], false, "{case}: {w}");
            assert_eq!(
                pod["hostNetwork"].as_bool().unwrap_or(false),
                w.ends_with("-edge"),
                "{case}: {w}: only edge is on the host network"
            );
            for c in pod["containers"].as_array().unwrap() {
                let sc = &c["securityContext"];
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{case}: {w}");
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{case}: {w}");
                assert_eq!(sc["privileged"], false, "{case}: {w}");
                assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{case}: {w}");
                let added = strings(&sc["capabilities"]["add"]);
                if w.ends_with("-edge") {
                    assert_eq!(added, ["NET_BIND_SERVICE"], "{case}: {w}");
                } else {
                    assert!(added.is_empty(), "{case}: {w} adds {added:?}");
                }
                assert!(
                    !c["resources"]["requests"].is_null()
                        && !c["resources"]["limits"]["memory"].is_null(),
                    "{case}: {w}: requests and a memory limit"
                );
            }
            // The only host path is the etc-hosts file.
            for v in pod["volumes"].as_array().into_iter().flatten() {
                if !v["hostPath"].is_null() {
                    assert!(w.ends_with("-etc-hosts"), "{case}: {w} mounts a host path");
                    assert_eq!(v["hostPath"]["type"], "File", "{case}: {w}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
}

#[test]
fn proxy_has_no_token_and_drains_before_it_is_killed() {
    for (case, objs, _) in renders() {
        let sa = find(objs, "ServiceAccount", "ouroboros-proxy").expect("proxy SA");
        assert_eq!(sa["automountServiceAccountToken"], false, "{case}");
        let pod = pod_named(objs, "Deployment", "ouroboros-proxy").unwrap();
        assert_eq!(pod["automountServiceAccountToken"], false, "{case}");
        assert_eq!(pod["serviceAccountName"], "ouroboros-proxy", "{case}");
        assert!(pod["volumes"].is_null(), "{case}: proxy mounts nothing");

        let args = container_args(pod);
        let secs = |flag: &str| -> u64 {
            let v = args
                .iter()
                .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{case}: proxy has {flag}"));
            ouroboros::cli::parse_duration(v).unwrap().as_secs()
        };
        let shutdown = secs("--shutdown-delay") + secs("--shutdown-grace");
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(
            grace > shutdown,
            "{case}: terminationGracePeriodSeconds {grace} <= shutdown delay + grace {shutdown}"
        );

        let deployment = find(objs, "Deployment", "ouroboros-proxy").unwrap();
        let replicas = deployment["spec"]["replicas"].as_u64().unwrap();
        let pdb = find(objs, "PodDisruptionBudget", "ouroboros-proxy");
        assert_eq!(
            pdb.is_some(),
            replicas >= 2,
            "{case}: proxy PDB iff replicas >= 2"
        );
        if replicas >= 2 {
            let spread = &pod["topologySpreadConstraints"][0];
            assert_eq!(spread["topologyKey"], "kubernetes.io/hostname", "{case}");
            assert_eq!(
                spread["labelSelector"]["matchLabels"],
                deployment["spec"]["selector"]["matchLabels"],
                "{case}"
            );
        }
        let svc = find(objs, "Service", "ouroboros-proxy").unwrap();
        assert_eq!(svc["spec"]["type"], "ClusterIP", "{case}");
        assert_eq!(
            svc["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"],
            "{case}"
        );
    }
    let (_, objs, _) = renders()
        .iter()
        .find(|(c, _, _)| c.starts_with("proxy: dual-stack"))
        .unwrap();
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
    let (case, objs, _) = renders()
        .iter()
        .find(|(c, _, _)| c.starts_with("etc-hosts alongside"))
        .unwrap();
    let deploy = container_args(pod_named(objs, "Deployment", "ouroboros-controller").unwrap());
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
        let controller =
            container_args(pod_named(objs, "Deployment", "ouroboros-controller").unwrap());
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
    let objs = docs(&template(&["controller.cleanupOnUninstall=false"], true).unwrap());
    assert!(find(&objs, "Job", "ouroboros-cleanup").is_none());
}

#[test]
fn network_policy_and_service_monitor() {
    let (case, objs, _) = renders()
        .iter()
        .find(|(c, _, _)| c.starts_with("proxy: dual-stack"))
        .unwrap();
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
    let (_, defaults, _) = &renders()[0];
    assert!(defaults
        .iter()
        .all(|o| !matches!(kind(o), "NetworkPolicy" | "ServiceMonitor" | "DaemonSet")));
}

#[test]
fn chart_version_matches_the_crate() {
    let chart = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = yaml_serde::from_str(&chart).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    assert!(chart["dependencies"].is_null(), "no chart dependencies");
    let (_, objs, _) = &renders()[0];
    let pod = pod_named(objs, "Deployment", "ouroboros-proxy").unwrap();
    assert_eq!(
        pod["containers"][0]["image"],
        format!("ouroboros:{}", env!("CARGO_PKG_VERSION"))
    );
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
    for (case, objs, _) in renders() {
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
            let argv = std::iter::once("ouroboros".to_string()).chain(args.iter().cloned());
            if let Err(e) = common::parse_without_env::<ouroboros::cli::Cli, _, _>(argv) {
                panic!("{case}: {w}: the binary rejects {args:?}:\n{e}");
            }
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
    let out = docs(
        &template(
            &[
                "controller.mode=external-dns",
                "controller.externalDns.proxyIps={10.0.0.1}",
            ],
            true,
        )
        .unwrap(),
    );
    let needs = controller_needs(&container_args(
        pod_named(&out, "Deployment", "ouroboros-controller").unwrap(),
    ));
    assert_eq!(needs.proxy_service, None);
    assert_eq!(needs.external_dns_output, ExternalDnsOutput::Dnsendpoint);
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
        let objs = docs(&template(sets, true).unwrap());
        let (k, n) = if mode == "etc-hosts" {
            ("DaemonSet", "ouroboros-etc-hosts")
        } else {
            ("Deployment", "ouroboros-controller")
        };
        let needs = controller_needs(&container_args(pod_named(&objs, k, n).unwrap()));
        matrix_rows(&mut table, mode, "controller", &rbac::required(&needs));
        if let Some(pod) = pod_named(&objs, "Job", "ouroboros-cleanup") {
            let rules = rbac::cleanup_required(&cleanup_needs(&container_args(pod)));
            matrix_rows(&mut table, mode, "uninstall hook", &rules);
        }
    }
    let objs = docs(&template(&["edge.enabled=true"], true).unwrap());
    let pod = pod_named(&objs, "DaemonSet", "ouroboros-edge").unwrap();
    matrix_rows(
        &mut table,
        "edge (`edge.enabled`)",
        "edge",
        &rbac::edge_required(&edge_needs(&container_args(pod))),
    );
    table.push_str(MATRIX_END);

    let path = root().join("docs/install.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let span = readme.find(MATRIX_BEGIN).and_then(|b| {
        readme[b..]
            .find(MATRIX_END)
            .map(|e| b..b + e + MATRIX_END.len())
    });
    // BLESS=1 cargo test --test it chart::readme: rewrite the table in place.
    if std::env::var("BLESS").as_deref() == Ok("1") {
        let span = span.expect("docs/install.md has the rbac-matrix markers");
        let mut updated = readme.clone();
        updated.replace_range(span, &table);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    let found = readme.find(MATRIX_BEGIN).and_then(|b| {
        readme[b..]
            .find(MATRIX_END)
            .map(|e| &readme[b..b + e + MATRIX_END.len()])
    });
    assert!(
        found == Some(table.as_str()),
        "docs/install.md's RBAC matrix is not the one the rules give: run `BLESS=1 cargo test --test it chart::readme`, or replace it (markers included) with:\n\n{table}\n"
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
    let (_, objs, _) = &renders()[0];
    let pod = pod_named(objs, "Deployment", "ouroboros-proxy").unwrap();
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l == "/target"),
        ".dockerignore keeps target/ out"
    );
}
