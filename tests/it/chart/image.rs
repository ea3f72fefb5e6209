//! The image the chart runs: the Containerfile and deploy/image.sh.

use super::*;

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
