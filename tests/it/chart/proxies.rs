//! Several ingress controllers: `proxies[]` and the objects each entry renders.

use super::*;

// --- several ingress controllers (proxies) ------------------------------------------------------

/// The flag the controller and the etc-hosts DaemonSet get for the Traefik entry of TWO_PROXIES
/// (the cleanup hooks get none): its ingress controller is a Service, watched for its ipMode.
const TRAEFIK_TARGET: &str =
    "--target=name=traefik,service=ouroboros/ouroboros-proxy-traefik,ingress-class=traefik,gateway-class=traefik,ingress-controller=traefik/traefik";
/// The flag they get for the main proxy of TWO_PROXIES, whose target is ingress-nginx's Service.
const NGINX_IPMODE: &str = "--ingress-controller-service=ingress-nginx/ingress-nginx-controller";

/// (kind, name) of every object of a render.
pub(super) fn object_keys(objs: &[Value]) -> BTreeSet<(String, String)> {
    objs.iter()
        .map(|o| (kind(o).to_string(), name(o).to_string()))
        .collect()
}

/// The `--target` flags of an argument list, and the rest.
pub(super) fn split_targets(args: Vec<String>) -> (Vec<String>, Vec<String>) {
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
        // The controller's scale and Lease, in the release namespace (the hook's other Role is
        // in kube-system).
        ("Role", "ouroboros-cleanup-controller"),
        ("Role", "ouroboros-controller-coredns"),
        ("Role", "ouroboros-controller-ipmode-ingress-nginx"),
        ("Role", "ouroboros-controller-ipmode-traefik"),
        ("Role", "ouroboros-controller-leader-election"),
        ("Role", "ouroboros-controller-node-local-dns"),
        ("Role", "ouroboros-controller-proxy-service"),
        ("RoleBinding", "ouroboros-cleanup"),
        ("RoleBinding", "ouroboros-cleanup-controller"),
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
pub(super) fn flag_values<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
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
