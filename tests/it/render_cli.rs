//! `ouroboros render` end to end: the built binary on manifest fixtures. The external-dns target
//! is used to observe the host set (its output is parsed and asserted); the CoreDNS and hosts-file
//! targets are covered in render_cli_editors.rs.

use crate::common::*;
use crate::support::temp_dir;

const IP: &str = "--proxy-ip=10.96.0.50";

fn names(args: &[&str]) -> std::collections::BTreeSet<String> {
    let mut all = vec!["external-dns", IP];
    all.extend_from_slice(args);
    dns_names(&ok(render(&all)))
}

#[test]
fn dns_endpoints_are_complete_objects() {
    let out = ok(render(&[
        "external-dns",
        "--proxy-ip",
        "10.96.0.50",
        "--proxy-ip=fd00::50,10.96.0.51",
        "--namespace",
        "dns",
        "--instance",
        "blue",
        "--external-dns-record-ttl",
        "300",
        "--external-dns-label",
        "dns.example.com/filter=internal",
        "--external-dns-annotation",
        "external-dns.alpha.kubernetes.io/cloudflare-proxied=false",
        &fixture("ingresses.yaml"),
    ]));
    let objs = endpoints(&out);
    let names: Vec<&str> = objs
        .iter()
        .map(|o| o["spec"]["endpoints"][0]["dnsName"].as_str().unwrap())
        .collect();
    // One object per hostname, sorted; the wildcard stays a wildcard.
    assert_eq!(
        names,
        [
            "*.wild.example.com",
            "a.example.com",
            "b.example.com",
            "c.example.com"
        ]
    );
    let mut object_names = std::collections::BTreeSet::new();
    for o in &objs {
        assert_eq!(o["apiVersion"], "externaldns.k8s.io/v1alpha1");
        assert_eq!(o["kind"], "DNSEndpoint");
        assert_eq!(o["metadata"]["namespace"], "dns");
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(
            name.len() <= 63
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{name}"
        );
        object_names.insert(name.to_string());
        let labels = &o["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "ouroboros");
        assert_eq!(labels["ouroboros.io/instance"], "blue");
        assert_eq!(labels["dns.example.com/filter"], "internal");
        assert_eq!(
            o["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/cloudflare-proxied"],
            "false"
        );
        let eps = o["spec"]["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0]["recordType"], "A");
        assert_eq!(
            eps[0]["targets"],
            serde_json::json!(["10.96.0.50", "10.96.0.51"])
        );
        assert_eq!(eps[0]["recordTTL"], 300);
        assert_eq!(eps[1]["recordType"], "AAAA");
        assert_eq!(eps[1]["targets"], serde_json::json!(["fd00::50"]));
        assert_eq!(eps[0]["dnsName"], eps[1]["dnsName"]);
    }
    assert_eq!(object_names.len(), objs.len());
    assert!(objs[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("wildcard-wild-example-com-"));
}

/// An error caused by a variable names the variable, not a flag the user never typed.
#[test]
fn errors_from_the_environment_name_the_variable() {
    let f = fixture("ingresses.yaml");
    let stderr = fails(
        render_env(
            &["etc-hosts", &f],
            None,
            &[("OUROBOROS_CONTROLLER_PROXY_IP", "0.0.0.0")],
        ),
        64,
    );
    assert!(
        stderr.contains("for OUROBOROS_CONTROLLER_PROXY_IP (the variable of '--proxy-ip <IP>')"),
        "{stderr}"
    );
    // Typed on the command line, the flag is named as usual.
    let stderr = fails(render(&["etc-hosts", "--proxy-ip=0.0.0.0", &f]), 64);
    assert!(stderr.contains("for '--proxy-ip <IP>'"), "{stderr}");
    // A combination refused after parsing lists what the environment set.
    let stderr = fails(
        render_env(
            &["coredns-import", "--proxy-ip=10.0.0.1", &f],
            None,
            &[("OUROBOROS_CONTROLLER_COREDNS_ANSWER", "view")],
        ),
        64,
    );
    assert!(
        stderr.contains("OUROBOROS_CONTROLLER_COREDNS_ANSWER (--coredns-answer)"),
        "{stderr}"
    );
    // The remedy is in render's words: it has subcommands, no --mode.
    assert!(
        stderr.contains("use `render coredns` or --coredns-answer template")
            && !stderr.contains("--mode"),
        "{stderr}"
    );
}

#[test]
fn defaults_and_env() {
    let out = ok(render_env(
        &["external-dns", &fixture("ingresses.yaml")],
        None,
        &[("OUROBOROS_RENDER_PROXY_IP", "192.0.2.1,2001:db8::1")],
    ));
    let objs = endpoints(&out);
    assert_eq!(objs.len(), 4);
    for o in &objs {
        assert_eq!(o["metadata"]["namespace"], "ouroboros");
        assert_eq!(
            o["metadata"]["labels"]["ouroboros.io/instance"],
            "ouroboros"
        );
        assert!(o["metadata"].get("annotations").is_none());
        assert_eq!(o["spec"]["endpoints"][0]["recordTTL"], 60);
        assert_eq!(
            o["spec"]["endpoints"][0]["targets"],
            serde_json::json!(["192.0.2.1"])
        );
        assert_eq!(
            o["spec"]["endpoints"][1]["targets"],
            serde_json::json!(["2001:db8::1"])
        );
    }
    // A flag overrides its variable.
    let out = ok(render_env(
        &[
            "external-dns",
            "--external-dns-record-ttl=5",
            &fixture("ingresses.yaml"),
        ],
        None,
        &[
            ("OUROBOROS_RENDER_PROXY_IP", "192.0.2.1"),
            ("OUROBOROS_RENDER_EXTERNAL_DNS_RECORD_TTL", "86400"),
            ("OUROBOROS_RENDER_EXTERNAL_DNS_LABEL", "a=1,b=2"),
            (
                "OUROBOROS_RENDER_EXTERNAL_DNS_ANNOTATION",
                "note=x, y\nother=z",
            ),
        ],
    ));
    let o = &endpoints(&out)[0];
    assert_eq!(o["spec"]["endpoints"][0]["recordTTL"], 5);
    assert_eq!(o["metadata"]["labels"]["a"], "1");
    assert_eq!(o["metadata"]["labels"]["b"], "2");
    assert_eq!(o["metadata"]["annotations"]["note"], "x, y");
    assert_eq!(o["metadata"]["annotations"]["other"], "z");
}

/// The variables render read before each command had its own (the controller's) are still
/// read, each named once in a warning with its new name; the new name wins over the old.
#[test]
fn old_variable_names_are_read_and_warned_once() {
    let f = fixture("ingresses.yaml");
    let out = render_env(
        &["external-dns", &f],
        None,
        &[
            ("OUROBOROS_CONTROLLER_PROXY_IP", "192.0.2.1"),
            ("OUROBOROS_CONTROLLER_EXTERNAL_DNS_RECORD_TTL", "86400"),
        ],
    );
    let o = &endpoints(&out.stdout)[0];
    assert_eq!(
        o["spec"]["endpoints"][0]["targets"],
        serde_json::json!(["192.0.2.1"])
    );
    assert_eq!(o["spec"]["endpoints"][0]["recordTTL"], 86400);
    for (old, new) in [
        ("OUROBOROS_CONTROLLER_PROXY_IP", "OUROBOROS_RENDER_PROXY_IP"),
        (
            "OUROBOROS_CONTROLLER_EXTERNAL_DNS_RECORD_TTL",
            "OUROBOROS_RENDER_EXTERNAL_DNS_RECORD_TTL",
        ),
    ] {
        let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains(old)).collect();
        assert_eq!(lines.len(), 1, "{}", out.stderr);
        assert!(
            lines[0].contains("WARN") && lines[0].contains(new),
            "{}",
            out.stderr
        );
    }
    let out = render_env(
        &["external-dns", &f],
        None,
        &[
            ("OUROBOROS_CONTROLLER_PROXY_IP", "192.0.2.1"),
            ("OUROBOROS_RENDER_PROXY_IP", "192.0.2.2"),
        ],
    );
    let o = &endpoints(&out.stdout)[0];
    assert_eq!(
        o["spec"]["endpoints"][0]["targets"],
        serde_json::json!(["192.0.2.2"])
    );
    assert!(out.stderr.contains("unset the old one"), "{}", out.stderr);
}

#[test]
fn no_manifests_means_no_hosts() {
    let out = render(&["external-dns", IP]);
    assert!(
        out.stderr.contains("no hostname selected"),
        "{}",
        out.stderr
    );
    assert_eq!(ok(out), "");
    // An empty input and a directory without manifests are named: the output then removes
    // the block, which a typo in a path should not do silently.
    let empty = temp_dir("render-empty");
    let out = render_env(
        &[
            "etc-hosts",
            IP,
            "--hosts-file",
            "/dev/null",
            "-",
            &empty.path().display().to_string(),
        ],
        Some("# nothing here\n---\n"),
        &[],
    );
    for want in [
        "input=stdin",
        "empty (nothing but blank lines",
        "no .yaml, .yml or .json file under this directory",
        "removes the hairpin for every name",
    ] {
        assert!(out.stderr.contains(want), "{want:?} not in {}", out.stderr);
    }
    assert_eq!(ok(out), "");
}

#[test]
fn reads_stdin() {
    let yaml = std::fs::read_to_string(fixtures().join("ingresses.yaml")).unwrap();
    let out = ok(render_env(&["external-dns", IP, "-"], Some(&yaml), &[]));
    assert_eq!(
        dns_names(&out),
        set(&[
            "*.wild.example.com",
            "a.example.com",
            "b.example.com",
            "c.example.com"
        ])
    );
    // JSON on stdin too.
    let json = std::fs::read_to_string(fixtures().join("ingress-list.json")).unwrap();
    let out = ok(render_env(&["external-dns", IP, "-"], Some(&json), &[]));
    assert_eq!(dns_names(&out).len(), 3);
    // Stdin mixed with files.
    let out = ok(render_env(
        &["external-dns", IP, "-", &fixture("list.yaml")],
        Some(&yaml),
        &[],
    ));
    assert_eq!(dns_names(&out).len(), 6);
}

#[test]
fn directories_are_read_recursively() {
    assert_eq!(
        names(&[&fixture("tree")]),
        set(&[
            "tree-one.example.com",
            "tree-three.example.com",
            "tree-two.example.com"
        ])
    );
}

#[test]
fn lists_and_json() {
    assert_eq!(
        names(&[&fixture("list.yaml")]),
        set(&["list-one.example.com", "list-two.example.com"])
    );
    assert_eq!(
        names(&[&fixture("ingress-list.json")]),
        set(&[
            "json-one.example.com",
            "json-three.example.com",
            "json-two.example.com"
        ])
    );
}

#[test]
fn hostile_names_never_reach_stdout() {
    let out = render(&["external-dns", IP, &fixture("hostile.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(dns_names(&out.stdout), set(&["fine.example.com"]));
    for fragment in HOSTILE_FRAGMENTS {
        assert!(
            !out.stdout.contains(fragment),
            "{fragment:?} reached stdout:\n{}",
            out.stdout
        );
    }
    // Each rejection is a warning naming the object, the escaped name and the reason.
    let warnings: Vec<&str> = out.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 21, "{}", out.stderr);
    for w in &warnings {
        assert!(
            w.contains("kind=Ingress namespace=tenant name=hostile"),
            "{w}"
        );
        assert!(w.contains("reason="), "{w}");
    }
    // Escaped: the newline in the name is shown as \n, never as a line break.
    assert!(out.stderr.contains(
        r#"hostname="newline.example.com\nrewrite name evil.example.com attacker.example.net.""#
    ));
    assert!(!out.stderr.lines().any(|l| l.starts_with("rewrite")));
    for reason in [
        "invalid-character",
        "ip-literal",
        "cluster-domain",
        "bad-label",
        "internal-zone",
        "single-label",
        "bad-wildcard",
        "wildcard-tld",
        "empty",
    ] {
        assert!(out.stderr.contains(&format!("reason={reason}")), "{reason}");
    }
}

#[test]
fn bad_manifests_fail_without_output() {
    for (file, want) in [
        (
            "bad/syntax.yaml",
            vec!["syntax.yaml", "document 2", "line 11"],
        ),
        (
            "bad/syntax.json",
            vec!["syntax.json", "document 1", "line 4"],
        ),
        (
            "bad/type.yaml",
            vec!["type.yaml", "document 1", "Ingress \"web/wrong-type\""],
        ),
        ("does-not-exist.yaml", vec!["does-not-exist.yaml"]),
    ] {
        let stderr = fails(render(&["external-dns", IP, &fixture(file)]), 1);
        // One plain `error:` line, as a usage error's, not an escaped log record.
        assert!(stderr.starts_with("error: "), "{file}: {stderr}");
        for w in want {
            assert!(stderr.contains(w), "{file}: {w:?} not in {stderr}");
        }
    }
    // A bad file anywhere fails the whole run, even after good input.
    let stderr = fails(
        render(&[
            "external-dns",
            IP,
            &fixture("ingresses.yaml"),
            &fixture("bad"),
        ]),
        1,
    );
    assert!(stderr.contains("syntax.json"), "{stderr}");
}

#[test]
fn ingress_class_filter() {
    let all = set(&[
        "*.wild.example.com",
        "a.example.com",
        "b.example.com",
        "c.example.com",
    ]);
    assert_eq!(names(&[&fixture("ingresses.yaml")]), all);
    // spec.ingressClassName, or the default IngressClass for the classless one.
    assert_eq!(
        names(&["--ingress-class", "nginx", &fixture("ingresses.yaml")]),
        set(&["*.wild.example.com", "a.example.com", "c.example.com"])
    );
    // The legacy annotation.
    assert_eq!(
        names(&["--ingress-class=traefik", &fixture("ingresses.yaml")]),
        set(&["b.example.com"])
    );
    assert_eq!(
        names(&["--ingress-class=none-such", &fixture("ingresses.yaml")]),
        set(&[])
    );
    // Same through the controller's variable; empty means all.
    let env = |v: &str| {
        dns_names(&ok(render_env(
            &["external-dns", IP, &fixture("ingresses.yaml")],
            None,
            &[("OUROBOROS_CONTROLLER_INGRESS_CLASS", v)],
        )))
    };
    assert_eq!(env("traefik"), set(&["b.example.com"]));
    assert_eq!(env(""), all);
    // Without the IngressClass objects, the classless Ingress has no class and is dropped.
    let only_ingresses: String = std::fs::read_to_string(fixtures().join("ingresses.yaml"))
        .unwrap()
        .split("\n---\n")
        .filter(|d| !d.contains("kind: IngressClass"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    let out = ok(render_env(
        &["external-dns", IP, "--ingress-class", "nginx", "-"],
        Some(&only_ingresses),
        &[],
    ));
    assert_eq!(
        dns_names(&out),
        set(&["*.wild.example.com", "a.example.com"])
    );
}

#[test]
fn gateway_api_and_class_filter() {
    let gw = fixture("gateway.yaml");
    // Off by default.
    assert_eq!(names(&[&gw]), set(&[]));
    let all = set(&[
        "*.gw.example.com",
        "grpc-route.example.com",
        "http-route.example.com",
        "on-other.example.com",
        "other-gw.example.com",
        "plain.gw-listener.example.com",
        "tls-route.example.com",
        "wrong-namespace.example.com",
    ]);
    assert_eq!(names(&["--gateway-api", &gw]), all);
    assert_eq!(
        names(&["--gateway-api", "--gateway-class", "eg", &gw]),
        set(&[
            "*.gw.example.com",
            "grpc-route.example.com",
            "http-route.example.com",
            "plain.gw-listener.example.com",
            "tls-route.example.com",
        ])
    );
    assert_eq!(
        names(&["--gateway-api", "--gateway-class", "other-class", &gw]),
        set(&["on-other.example.com", "other-gw.example.com"])
    );
    // The boolean variable.
    let env = |v: &str| {
        dns_names(&ok(render_env(
            &["external-dns", IP, &gw],
            None,
            &[("OUROBOROS_CONTROLLER_GATEWAY_API", v)],
        )))
    };
    assert_eq!(env("true"), all);
    assert_eq!(env("false"), set(&[]));
    // A class filter without --gateway-api is a usage error.
    let stderr = fails(
        render(&["external-dns", IP, "--gateway-class", "eg", &gw]),
        64,
    );
    assert!(stderr.contains("--gateway-api"), "{stderr}");
}

#[test]
fn allow_deny_and_cluster_domain() {
    let f = fixture("ingresses.yaml");
    assert_eq!(
        names(&[
            "--allow-domain",
            "wild.example.com",
            "--allow-domain=c.example.com",
            &f
        ]),
        set(&["*.wild.example.com", "c.example.com"])
    );
    assert_eq!(
        names(&[
            "--deny-domain",
            "a.example.com",
            "--deny-domain",
            "wild.example.com",
            &f
        ]),
        set(&["b.example.com", "c.example.com"])
    );
    let env_out = ok(render_env(
        &["external-dns", IP, &f],
        None,
        &[
            ("OUROBOROS_CONTROLLER_ALLOW_DOMAIN", "example.com"),
            (
                "OUROBOROS_CONTROLLER_DENY_DOMAIN",
                "a.example.com,b.example.com",
            ),
        ],
    ));
    assert_eq!(
        dns_names(&env_out),
        set(&["*.wild.example.com", "c.example.com"])
    );
    // A cluster domain of example.com rejects them all, with warnings.
    let out = render(&["external-dns", IP, "--cluster-domain", "example.com", &f]);
    assert_eq!(
        dns_names(&ok(render(&[
            "external-dns",
            IP,
            "--cluster-domain",
            "example.com",
            &f
        ]))),
        set(&[])
    );
    assert!(
        out.stderr.contains("reason=cluster-domain"),
        "{}",
        out.stderr
    );
    let stderr = fails(
        render(&["external-dns", IP, "--allow-domain", "bad domain", &f]),
        64,
    );
    assert!(stderr.contains("--allow-domain"), "{stderr}");
}

#[test]
fn usage_errors() {
    let f = fixture("ingresses.yaml");
    for (args, want) in [
        (vec!["external-dns", &f], "--proxy-ip"),
        (
            vec!["external-dns", "--proxy-ip", "not-an-ip", &f],
            "not-an-ip",
        ),
        (
            vec!["external-dns", IP, "--external-dns-record-ttl", "0", &f],
            "0",
        ),
        (
            vec!["external-dns", IP, "--external-dns-record-ttl", "86401", &f],
            "86401",
        ),
        (
            vec![
                "external-dns",
                IP,
                "--external-dns-label",
                "app.kubernetes.io/managed-by=me",
                &f,
            ],
            "reserved",
        ),
        (
            vec![
                "external-dns",
                IP,
                "--external-dns-label",
                "ouroboros.io/instance=x",
                &f,
            ],
            "reserved",
        ),
        (
            vec!["external-dns", IP, "--external-dns-label", "novalue", &f],
            "key=value",
        ),
        (
            vec![
                "external-dns",
                IP,
                "--external-dns-label",
                "k=bad value",
                &f,
            ],
            "label",
        ),
        (
            vec![
                "external-dns",
                IP,
                "--external-dns-annotation",
                "Bad Key=v",
                &f,
            ],
            "Bad Key",
        ),
        (
            vec!["external-dns", IP, "--namespace", "Not_A_Namespace", &f],
            "namespace",
        ),
        (
            vec!["external-dns", IP, "--instance", "two words", &f],
            "instance",
        ),
        (vec!["external-dns", "--proxy-ip", "0.0.0.0", &f], "0.0.0.0"),
        // The unspecified address answers no pod, in every mode and every place an IP is given.
        (vec!["etc-hosts", "--proxy-ip", "::", &f], "unspecified"),
        (
            vec![
                "coredns",
                "--corefile",
                "/dev/null",
                "--proxy-ip",
                "0.0.0.0",
                &f,
            ],
            "unspecified",
        ),
        (
            vec![
                "coredns",
                "--corefile",
                "/dev/null",
                IP,
                "--target",
                "name=a,service=x,proxy-ip=0.0.0.0",
                &f,
            ],
            "unspecified",
        ),
        (vec!["external-dns", IP, "-", "-"], "stdin"),
        (vec!["nonsense"], "nonsense"),
    ] {
        let stderr = fails(render(&args), 64);
        assert!(stderr.contains(want), "{args:?}: {want:?} not in {stderr}");
    }
}

/// render says on stderr what it read and what it used, per kind, and names the flag that
/// would use the rest: the README's first command reads the Gateway-API objects of `examples/`
/// and, without --gateway-api, uses none of them.
#[test]
fn render_says_what_it_read_and_what_it_used() {
    let e = examples();
    let out = render(&[
        "coredns",
        "--corefile",
        "examples/Corefile",
        "--coredns-version",
        "1.11.3",
        IP,
        &e,
    ]);
    let stderr = &out.stderr;
    assert_eq!(out.code, 0, "{stderr}");
    assert!(
        stderr.contains("read 5 Ingress: 5 gave hostnames"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "read 2 Gateway, 2 HTTPRoute, 1 GRPCRoute, 1 TLSRoute but used none: add --gateway-api"
        ),
        "{stderr}"
    );
    // Without a class filter every class goes to the default proxy: said, with the classes.
    assert!(
        stderr.contains("Ingresses of 2 classes (internal, nginx) all go to the default proxy"),
        "{stderr}"
    );
    // Info lines, not warnings: nothing is wrong.
    assert_eq!(stderr.matches("WARN").count(), 0, "{stderr}");
    let out = render(&[
        "coredns",
        "--corefile",
        "examples/Corefile",
        IP,
        "--ingress-class",
        "nginx",
        &e,
    ]);
    assert!(!out.stderr.contains("classes ("), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("1 objects left out: ingress class \"internal\" is filtered out"),
        "{}",
        out.stderr
    );
    let out = render(&[
        "coredns",
        "--corefile",
        "examples/Corefile",
        IP,
        "--gateway-api",
        &e,
    ]);
    assert!(out.stderr.contains("read 2 Gateway: "), "{}", out.stderr);
    assert!(!out.stderr.contains("add --gateway-api"), "{}", out.stderr);
}

/// An Ingress whose hosts are only in `spec.rules` (cert-manager's HTTP-01 solver) gets the
/// reason and the flag, not just "no hostname selected".
#[test]
fn an_ingress_with_rule_hosts_only_names_ingress_hosts_all() {
    let solver = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: solver\n  \
        namespace: team\nspec:\n  rules:\n  - host: acme.example.com\n";
    let out = render_env(&["external-dns", IP, "-"], Some(solver), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("1 hosts only in the spec.rules of 1 Ingress")
            && out.stderr.contains("add --ingress-hosts all")
            && out.stderr.contains("team/solver"),
        "{}",
        out.stderr
    );
    let out = render_env(
        &["external-dns", IP, "--ingress-hosts", "all", "-"],
        Some(solver),
        &[],
    );
    assert!(
        !out.stderr.contains("--ingress-hosts all"),
        "{}",
        out.stderr
    );
    assert_eq!(dns_names(&ok(out)), set(&["acme.example.com"]));
}

/// `--list`: each hairpinned name with its target and answer, without reading the Corefile.
#[test]
fn list_prints_each_name_with_its_target_and_answer() {
    let e = examples();
    let out = ok(render(&[
        "coredns",
        "--corefile",
        "/nonexistent",
        IP,
        "--list",
        &e,
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert!(lines.contains(&"api.example.com\tdefault\trelay"), "{out}");
    assert!(
        lines.contains(&"*.apps.example.com\tdefault\trelay"),
        "{out}"
    );
    let out = ok(render(&[
        "etc-hosts",
        "--hosts-file",
        "/nonexistent",
        IP,
        "--target",
        "name=gw,service=ns/gw,gateway-class=eg,proxy-ip=10.96.0.60,answer=skip",
        "--gateway-api",
        "--list",
        &e,
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 12, "{out}");
    assert!(lines.iter().any(|l| l.ends_with("\tgw\tskip")), "{out}");
}

#[test]
fn examples_render() {
    // The shipped examples: the tenant's hostile names are rejected, the rest come through.
    let out = render(&["external-dns", IP, "--gateway-api", &examples()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        dns_names(&out.stdout),
        set(&[
            "*.apps.example.com",
            "*.gw.example.com",
            "api.example.com",
            "db.example.com",
            "docs.example.com",
            "experiments.example.com",
            "grpc.example.com",
            "lab.example.com",
            "shop.example.com",
            "team.example.com",
            "wiki.corp.example.com",
            "www.example.com",
        ])
    );
    assert_eq!(out.stderr.matches("WARN").count(), 0, "{}", out.stderr);
    assert_eq!(
        names(&[
            "--ingress-class=nginx",
            "--gateway-api",
            "--gateway-class=eg",
            &examples()
        ]),
        set(&[
            "*.apps.example.com",
            "*.gw.example.com",
            "api.example.com",
            "db.example.com",
            "docs.example.com",
            "grpc.example.com",
            "shop.example.com",
            "team.example.com",
            "www.example.com",
        ])
    );
}

/// Each hostname's record targets, from the DNSEndpoints on stdout.
fn targets_by_name(stdout: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    endpoints(stdout)
        .iter()
        .flat_map(|o| o["spec"]["endpoints"].as_array().unwrap().clone())
        .map(|e| {
            let ips = e["targets"].as_array().unwrap();
            (
                e["dnsName"].as_str().unwrap().to_string(),
                ips.iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

const TRAEFIK: &str =
    "name=traefik,service=proxy-traefik,ingress-class=traefik,proxy-ip=10.96.0.60";

#[test]
fn targets_answer_with_their_own_proxy() {
    // external-dns: traefik's Ingress (legacy annotation) on its proxy, the rest on the default.
    let external = ok(render(&[
        "external-dns",
        IP,
        "--target",
        TRAEFIK,
        &fixture("ingresses.yaml"),
    ]));
    let by = targets_by_name(&external);
    let on = |ip: &str| vec![ip.to_string()];
    assert_eq!(by["b.example.com"], on("10.96.0.60"));
    for h in ["a.example.com", "c.example.com", "*.wild.example.com"] {
        assert_eq!(by[h], on("10.96.0.50"), "{h}");
    }
    // Host order whatever the targets.
    let names: Vec<String> = endpoints(&external)
        .iter()
        .map(|o| {
            o["spec"]["endpoints"][0]["dnsName"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");

    // coredns: one template pair per target, each with its own answer; exact names first, so
    // that no target's wildcard takes another target's name.
    let corefile = fixtures().join("../corefiles/kubeadm.Corefile");
    let out = ok(render(&[
        "coredns",
        "--corefile",
        corefile.to_str().unwrap(),
        IP,
        "--target",
        TRAEFIK,
        &fixture("ingresses.yaml"),
    ]));
    let pairs: Vec<&str> = out.split("template IN A ").skip(1).collect();
    // Exact names first (the default target's, then traefik's), then the wildcard: no
    // target's wildcard takes another target's name.
    assert_eq!(pairs.len(), 3, "{out}");
    assert!(
        pairs[0].contains("IN A 10.96.0.50")
            && pairs[0].contains(r"^[ac]\.example\.com\.$")
            && !pairs[0].contains("wild"),
        "{out}"
    );
    assert!(
        pairs[1].contains("IN A 10.96.0.60") && pairs[1].contains("^b\\.example\\.com\\.$"),
        "{out}"
    );
    assert!(
        pairs[2].contains("IN A 10.96.0.50") && pairs[2].contains("wild"),
        "{out}"
    );
    assert!(
        !pairs[0].contains("^b\\.") && !pairs[2].contains("^b\\."),
        "b.example.com only in traefik's pair: {out}"
    );

    // The same through the variable, `;`-separated.
    let env = ok(render_env(
        &["external-dns", IP, &fixture("ingresses.yaml")],
        None,
        &[(
            "OUROBOROS_CONTROLLER_TARGETS",
            &format!("{TRAEFIK};name=none,service=p,ingress-class=none-such"),
        )],
    ));
    assert_eq!(targets_by_name(&env), by);
}

#[test]
fn a_host_claimed_by_two_targets_goes_to_one() {
    let manifests = |priority: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: old\n  \
             namespace: shop\n  annotations: {{ouroboros.io/priority: \"{priority}\"}}\nspec:\n  \
             ingressClassName: nginx\n  tls: [{{hosts: [shop.example.com]}}]\n---\n\
             apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: new\n  \
             namespace: shop\nspec:\n  ingressClassName: traefik\n  tls: [{{hosts: [shop.example.com]}}]\n"
        )
    };
    let run = |priority: &str| {
        render_env(
            &["external-dns", IP, "--target", TRAEFIK, "-"],
            Some(&manifests(priority)),
            &[],
        )
    };
    // Equal priority: the named target wins over the default proxy, and the loser is named.
    let out = run("0");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        targets_by_name(&out.stdout)["shop.example.com"],
        ["10.96.0.60"]
    );
    assert!(
        out.stderr.contains("hostname claimed by two targets")
            && out.stderr.contains("Ingress shop/old")
            && out.stderr.contains("Ingress shop/new"),
        "{}",
        out.stderr
    );
    // As JSON: one `target` key (the module, render's own), the target's name under its own key.
    let out = render_env(
        &[
            "external-dns",
            IP,
            "--target",
            TRAEFIK,
            "--log-format",
            "json",
            "-",
        ],
        Some(&manifests("0")),
        &[],
    );
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("claimed by two targets"))
        .unwrap_or_else(|| panic!("no conflict line: {}", out.stderr));
    assert_eq!(line.matches("\"target\":").count(), 1, "{line}");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["target"], "ouroboros::render", "{line}");
    assert_eq!(v["proxy_target"], "default", "{line}");
    assert_eq!(v["winner_target"], "traefik", "{line}");
    // The priority annotation decides first.
    let out = run("5");
    assert_eq!(
        targets_by_name(&ok(out))["shop.example.com"],
        ["10.96.0.50"]
    );
}

#[test]
fn target_usage_errors() {
    for (args, want) in [
        (
            &["--target", "name=traefik,service=p,ingress-class=traefik"][..],
            "--target traefik has 1 hostname(s) but no proxy-ip=",
        ),
        (
            &["--target", "name=default,service=p,ingress-class=x"],
            "--proxy-service-name",
        ),
        (
            &["--target", "name=t,service=p,gateway-class=eg"],
            "--gateway-api",
        ),
        (
            &[
                "--target",
                "name=a,service=p,ingress-class=x",
                "--target",
                "name=b,service=q,ingress-class=x",
            ],
            "ingress-class=x is taken by both --target a and --target b",
        ),
    ] {
        let manifests = fixture("ingresses.yaml");
        let mut all = vec!["external-dns", IP];
        all.extend_from_slice(args);
        all.push(&manifests);
        let err = fails(render(&all), 64);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `answer=` per target: `direct` answers with `direct-ip=` (`--direct-ip`), `skip` leaves the
/// names out, `auto` renders `relay` and says on stderr when the controller's pick would read
/// the cluster.
#[test]
fn each_target_is_answered_as_its_answer_says() {
    let manifests = fixture("ingresses.yaml");
    let t = |extra: &str| format!("{TRAEFIK},{extra}");
    let import = |args: &[&str]| {
        let mut all = vec!["coredns-import", IP];
        all.extend_from_slice(args);
        all.push(&manifests);
        render(&all)
    };
    let pair = |pattern: &str, ip: &str| {
        format!(
            "template IN A example.com {{\n    match {pattern}\n    answer \"{{{{ .Name }}}} 30 IN A \
             {ip}\"\n    fallthrough\n}}\ntemplate IN AAAA example.com {{\n    match {pattern}\n    \
             fallthrough\n}}\n"
        )
    };
    let block = |pairs: &[String]| {
        format!(
            "# === BEGIN ouroboros (do not edit by hand) ===\n{}# === END ouroboros ===\n",
            pairs.concat()
        )
    };
    let (ac, b, wild) = (
        r"^[ac]\.example\.com\.$",
        r"^b\.example\.com\.$",
        r"^[a-z0-9-]+\.wild\.example\.com\.$",
    );

    // direct: traefik's name with its ingress controller's address, no proxy hop.
    let out = import(&["--target", &t("answer=direct,direct-ip=10.96.7.1")]);
    assert_eq!(
        ok(out),
        block(&[
            pair(ac, "10.96.0.50"),
            pair(b, "10.96.7.1"),
            pair(wild, "10.96.0.50")
        ])
    );
    // skip: traefik's name is left out; the rest as before.
    let out = import(&["--target", &t("answer=skip")]);
    assert!(out
        .stderr
        .contains("target traefik: answer=skip: its names are left out"));
    assert_eq!(
        ok(out),
        block(&[pair(
            r"^(?:[a-z0-9-]+\.wild|[ac])\.example\.com\.$",
            "10.96.0.50"
        )])
    );
    // auto with a configuration to read: relay, and stderr says what was assumed.
    let auto = t(
        "ingress-controller=traefik/traefik,ingress-controller-kind=traefik,\
         ingress-controller-config=traefik/traefik",
    );
    let out = import(&["--target", &auto]);
    assert!(
        out.stderr.contains(
            "target traefik: answer=auto depends on whether Deployment traefik/traefik takes \
             the PROXY header and the ipMode of Service traefik/traefik, which render cannot \
             read: rendered relay (through the proxy)"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(
        ok(out),
        block(&[
            pair(ac, "10.96.0.50"),
            pair(b, "10.96.0.60"),
            pair(wild, "10.96.0.50")
        ])
    );
    // auto with nothing to read is relay for certain: nothing to say.
    let out = import(&["--target", TRAEFIK]);
    assert!(!out.stderr.contains("answer=auto"), "{}", out.stderr);
    // rewrite: a direct target's names are rewritten to its ingress controller Service.
    let out = render(&[
        "coredns-import",
        "--coredns-answer",
        "rewrite",
        "--target",
        &t("answer=direct,ingress-controller=traefik/traefik"),
        &manifests,
    ]);
    assert!(ok(out).contains("rewrite name b.example.com traefik.traefik.svc.cluster.local.\n"),);
}

/// `direct` in a hosts file and in DNSEndpoints, `skip` in DNSEndpoints, and `direct` without
/// its addresses.
#[test]
fn direct_and_skip_in_hosts_files_and_records() {
    let manifests = fixture("ingresses.yaml");
    let t = |extra: &str| format!("{TRAEFIK},{extra}");
    let import = |args: &[&str]| {
        let mut all = vec!["coredns-import", IP];
        all.extend_from_slice(args);
        all.push(&manifests);
        render(&all)
    };
    // The default target direct (--answer, --direct-ip), in a hosts file: exactly.
    let dir = temp_dir("render-answer");
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let out = render(&[
        "etc-hosts",
        "--hosts-file",
        hosts.to_str().unwrap(),
        IP,
        "--answer",
        "direct",
        "--direct-ip",
        "10.96.7.9",
        "--target",
        TRAEFIK,
        &manifests,
    ]);
    assert_eq!(
        ok(out),
        "127.0.0.1 localhost\n# === BEGIN ouroboros (do not edit by hand) ===\n10.96.7.9 \
         a.example.com\n10.96.7.9 c.example.com\n10.96.0.60 b.example.com\n# === END ouroboros \
         ===\n"
    );
    // external-dns: a direct target's records point at its ingress controller; a skipped one
    // has none.
    let by = targets_by_name(&ok(render(&[
        "external-dns",
        IP,
        "--target",
        &t("answer=direct,direct-ip=10.96.7.1"),
        &manifests,
    ])));
    assert_eq!(by["b.example.com"], ["10.96.7.1"]);
    assert_eq!(by["a.example.com"], ["10.96.0.50"]);
    let names = dns_names(&ok(render(&[
        "external-dns",
        IP,
        "--answer",
        "skip",
        "--target",
        TRAEFIK,
        &manifests,
    ])));
    assert_eq!(names, set(&["b.example.com"]));

    // direct without its addresses: a usage error naming the flag, nothing printed.
    for (args, want) in [
        (
            vec!["--answer", "direct"],
            "--answer direct: 4 hostname(s) are answered with the ingress controller \
             Service's ClusterIPs, which render cannot read: pass them as --direct-ip IP",
        ),
        (
            vec!["--target", "X"],
            "--target traefik: answer=direct: 1 hostname(s) are answered with the ingress \
             controller Service's ClusterIPs, which render cannot read: pass them as \
             direct-ip=IP",
        ),
    ] {
        let named = t("answer=direct,ingress-controller=traefik/traefik");
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "X" { named.as_str() } else { a })
            .collect();
        let err = fails(import(&args), 64);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
