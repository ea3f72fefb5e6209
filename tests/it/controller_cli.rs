//! `ouroboros controller` as a binary: bad usage exits 64 before any cluster access, `--help`
//! lists every flag with its environment variable.

use crate::common;

use crate::common::names;

fn controller(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = common::command("controller");
    cmd.args(args);
    // No cluster to reach: a kubeconfig that does not exist.
    cmd.env("KUBECONFIG", "/nonexistent/kubeconfig");
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run ouroboros");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_usage_exits_64_naming_the_flag() {
    for (args, env, needle) in [
        (&["--gateway-class", "x"][..], &[][..], "--gateway-class"),
        (&["--leader-elect=maybe"][..], &[][..], "--leader-elect"),
        (&["--resync", "0"][..], &[][..], "--resync"),
        (&["--debounce", "5"][..], &[][..], "--debounce"),
        (&["--mode", "bind"][..], &[][..], "--mode"),
        (
            &[][..],
            &[("OUROBOROS_CONTROLLER_LEADER_ELECT", "perhaps")][..],
            "--leader-elect",
        ),
        (
            &["--allow-domain", "exa mple.com"][..],
            &[][..],
            "--allow-domain",
        ),
        (
            &["--ingress-class-controller", "ingress-nginx"][..],
            &[][..],
            "--ingress-class-controller",
        ),
        // One controller value, two targets.
        (
            &[
                "--ingress-class-controller",
                "k8s.io/ingress-nginx",
                "--target",
                "name=a,service=x,ingress-class-controller=k8s.io/ingress-nginx",
            ][..],
            &[][..],
            "--ingress-class-controller",
        ),
        (
            &[][..],
            &[(
                "OUROBOROS_CONTROLLER_TARGET",
                "name=a,service=x,ingress-class-controller=traefik.io/ingress-controller;\
                 name=b,service=y,ingress-class-controller=traefik.io/ingress-controller",
            )][..],
            "--target",
        ),
        // A rewrite answers with a name: direct-ip= alone cannot give it, and relaying
        // instead would be silent.
        (
            &[
                "--coredns-answer",
                "rewrite",
                "--answer",
                "direct",
                "--direct-ip",
                "10.0.0.1",
            ][..],
            &[][..],
            "--ingress-controller-service",
        ),
        // probe knocks on the Service: no configuration object, and the Service named.
        (
            &["--ingress-controller-kind", "probe"][..],
            &[][..],
            "--ingress-controller-kind",
        ),
        (
            &[
                "--ingress-controller-service",
                "ingress-nginx/ingress-nginx-controller",
                "--ingress-controller-kind",
                "probe",
                "--ingress-controller-config",
                "ingress-nginx/ingress-nginx-controller",
            ][..],
            &[][..],
            "--ingress-controller-config",
        ),
        (
            &[
                "--ingress-controller-kind",
                "probe",
                "--direct-ip",
                "10.0.0.1",
            ][..],
            &[][..],
            "--ingress-controller-service",
        ),
    ] {
        let (code, _, stderr) = controller(args, env);
        assert_eq!(code, 64, "{args:?} {env:?}: {stderr}");
        assert!(names(&stderr, needle), "{args:?}: {stderr}");
    }
}

#[test]
fn no_cluster_is_a_runtime_failure_with_a_hint() {
    let (code, _, stderr) = controller(&["--kubeconfig", "/nonexistent/kubeconfig"], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn help_lists_every_controller_flag_and_variable() {
    let (code, stdout, _) = controller(&["--help"], &[]);
    assert_eq!(code, 0);
    for (flag, var) in [
        ("--resync", "OUROBOROS_CONTROLLER_RESYNC"),
        ("--debounce", "OUROBOROS_CONTROLLER_DEBOUNCE"),
        ("--leader-elect", "OUROBOROS_CONTROLLER_LEADER_ELECT"),
        ("--lease-name", "OUROBOROS_CONTROLLER_LEASE_NAME"),
        ("--lease-namespace", "OUROBOROS_CONTROLLER_LEASE_NAMESPACE"),
        ("--listen-health", "OUROBOROS_CONTROLLER_LISTEN_HEALTH"),
        (
            "--node-local-dns-namespace",
            "OUROBOROS_CONTROLLER_NODE_LOCAL_DNS_NAMESPACE",
        ),
        (
            "--node-local-dns-configmap",
            "OUROBOROS_CONTROLLER_NODE_LOCAL_DNS_CONFIGMAP",
        ),
        ("--mode", "OUROBOROS_CONTROLLER_MODE"),
        ("--gateway-api", "OUROBOROS_CONTROLLER_GATEWAY_API"),
        ("--instance", "OUROBOROS_CONTROLLER_INSTANCE"),
    ] {
        assert!(names(&stdout, flag), "{flag} missing");
        assert!(names(&stdout, var), "{var} missing");
    }
}

#[test]
fn names_matches_whole_flags_only() {
    assert!(names("  --dial <ADDR>", "--dial"));
    assert!(names("--dial=x", "--dial"));
    assert!(names(
        "[env: OUROBOROS_DOCTOR_DIAL=]",
        "OUROBOROS_DOCTOR_DIAL"
    ));
    assert!(!names("  --dial-timeout <D>", "--dial"));
    assert!(!names("  --lease-namespace <NS>", "--lease-name"));
    assert!(!names(
        "[env: OUROBOROS_DOCTOR_DIAL_TIMEOUT=]",
        "OUROBOROS_DOCTOR_DIAL"
    ));
}
