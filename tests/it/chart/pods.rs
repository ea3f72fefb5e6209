//! The chart's pods: security contexts, probes, resources, placement.

use super::*;

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
pub(super) fn proxy_deployments(objs: &[Value]) -> Vec<&Value> {
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
fn cleanup_hook_runs_before_uninstall_with_the_controllers_dns_flags() {
    for (case, objs, _) in renders() {
        let Some(job) = find(objs, "Job", "ouroboros-cleanup") else {
            continue;
        };
        let ann = &job["metadata"]["annotations"];
        // Before Helm deletes the proxy: it serves until CoreDNS has dropped the block.
        assert_eq!(ann["helm.sh/hook"], "pre-delete", "{case}");
        let pod = &job["spec"]["template"]["spec"];
        let args = container_args(pod);
        let controller = controller_args(objs);
        // Its own: stop the controller first, drain after the removal.
        let deployment = objs
            .iter()
            .find(|o| {
                kind(o) == "Deployment"
                    && o["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"
            })
            .unwrap_or_else(|| panic!("{case}: the controller Deployment"));
        let own = [
            format!(
                "--stop-controller={}/{}",
                super::NAMESPACE,
                name(deployment)
            ),
            "--drain=2m".to_string(),
        ];
        for a in &own {
            assert!(args.contains(a), "{case}: the hook passes {a}: {args:?}");
        }
        for a in args[1..].iter().filter(|a| !own.contains(a)) {
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
            assert_eq!(a["helm.sh/hook"], "pre-delete", "{case}: {}", kind(o));
            let w: i64 = a["helm.sh/hook-weight"].as_str().unwrap().parse().unwrap();
            assert!(w < job_weight, "{case}: {} before the Job", kind(o));
        }
    }
    // No hook without the controller or when disabled.
    let objs = rendered(&["controller.cleanupOnUninstall=false"]);
    assert!(find(objs, "Job", "ouroboros-cleanup").is_none());
    // No drain: no --drain flag (the binary's default, 0).
    let objs = rendered(&["controller.cleanupDrain=0"]);
    let job = find(objs, "Job", "ouroboros-cleanup").expect("the hook");
    let args = container_args(&job["spec"]["template"]["spec"]);
    assert!(!args.iter().any(|a| a.starts_with("--drain")), "{args:?}");
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
