//! `ouroboros render coredns | coredns-import | etc-hosts` end to end: the built binary on the
//! shipped examples and manifest fixtures, with Corefiles and hosts files written to a temp dir.

use crate::common;

use crate::common::*;

/// Most tests here check placement, line endings and hostile input, which read most plainly in
/// the one-line-per-host rewrite form; the default template form has tests of its own
/// (`template_*`). The environment variable leaves a test's own `--coredns-answer` in charge.
fn render(args: &[&str]) -> Output {
    render_env(args, None, &[])
}

fn render_env(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut env = env.to_vec();
    if !env
        .iter()
        .any(|(k, _)| *k == "OUROBOROS_RENDER_COREDNS_ANSWER")
    {
        env.push(("OUROBOROS_RENDER_COREDNS_ANSWER", "rewrite"));
    }
    common::render_env(args, stdin, &env)
}

const PROXY: &str = "ouroboros-proxy.ouroboros.svc.cluster.local.";
const BEGIN: &str = "# === BEGIN ouroboros (do not edit by hand) ===";
const END: &str = "# === END ouroboros ===";

/// A temp dir (tempfile's, removed on drop) to write Corefiles and hosts files into.
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new(tag: &str) -> Self {
        let prefix = format!("ouroboros-render-{tag}-");
        Self(tempfile::Builder::new().prefix(&prefix).tempdir().unwrap())
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn example_corefile() -> (String, String) {
    let path = format!("{}/Corefile", examples());
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The lines between the markers (exclusive), and the text with the whole block removed.
fn split_block(text: &str) -> (Vec<String>, String) {
    let mut inside = false;
    let mut block = Vec::new();
    let mut rest = String::new();
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t == BEGIN {
            inside = true;
        } else if t == END {
            inside = false;
        } else if inside {
            block.push(t.to_string());
        } else {
            rest.push_str(line);
        }
    }
    assert!(!inside, "unterminated block in {text}");
    (block, rest)
}

#[test]
fn quickstart_corefile_from_examples() {
    let (path, input) = example_corefile();
    // The examples plus the tenant's Ingress with three hostile names added.
    let tenant = fixture("tenant.yaml");
    let out = render(&["coredns", "--corefile", &path, &examples(), &tenant]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (block, rest) = split_block(&out.stdout);
    // Everything outside the block is the input, byte for byte.
    assert_eq!(rest, input);
    let exact: Vec<&str> = block
        .iter()
        .filter(|l| !l.contains(" regex "))
        .map(String::as_str)
        .collect();
    let want: Vec<String> = [
        "api.example.com",
        "shop.example.com",
        "team.example.com",
        "wiki.corp.example.com",
        "www.example.com",
    ]
    .iter()
    .map(|h| format!("rewrite name {h} {PROXY}"))
    .collect();
    assert_eq!(exact, want);
    let wildcard: Vec<&String> = block.iter().filter(|l| l.contains(" regex ")).collect();
    assert_eq!(wildcard.len(), 1, "{block:?}");
    assert!(
        wildcard[0].contains(r"apps\.example\.com"),
        "{}",
        wildcard[0]
    );
    for line in &block {
        for fragment in HOSTILE_FRAGMENTS {
            assert!(!line.contains(fragment), "{fragment:?} in {line:?}");
        }
    }
    // The block sits inside the root server block, before its closing brace.
    assert!(
        out.stdout.ends_with(&format!("    {END}\n}}\n")),
        "{}",
        out.stdout
    );
    // The tenant's names were rejected with warnings; kubeadm's Corefile has `reload`.
    assert_eq!(out.stderr.matches("WARN").count(), 3, "{}", out.stderr);
    assert!(!out.stderr.contains("reload"), "{}", out.stderr);
}

#[test]
fn corefile_round_trip_and_idempotence() {
    let (path, input) = example_corefile();
    let tmp = TempDir::new("roundtrip");
    let with_block = ok(render(&[
        "coredns",
        "--corefile",
        &path,
        &fixture("ingresses.yaml"),
    ]));
    assert_ne!(with_block, input);
    let edited = tmp.file("Corefile", &with_block);
    // Same input again: unchanged.
    let again = ok(render(&[
        "coredns",
        "--corefile",
        &edited,
        &fixture("ingresses.yaml"),
    ]));
    assert_eq!(again, with_block);
    // No manifests: the block is removed and the original text restored exactly.
    assert_eq!(ok(render(&["coredns", "--corefile", &edited])), input);
    assert_eq!(ok(render(&["coredns", "--corefile", &path])), input);
    // A different set replaces the block.
    let other = ok(render(&[
        "coredns",
        "--corefile",
        &edited,
        &fixture("list.yaml"),
    ]));
    let (block, rest) = split_block(&other);
    assert_eq!(rest, input);
    assert_eq!(
        block,
        [
            format!("rewrite name list-one.example.com {PROXY}"),
            format!("rewrite name list-two.example.com {PROXY}"),
        ]
    );
}

#[test]
fn corefile_from_stdin_crlf_and_custom_proxy() {
    let input = ".:53 {\r\n\terrors\r\n\tforward . /etc/resolv.conf\r\n\treload\r\n}\r\n";
    let out = ok(render_env(
        &[
            "coredns",
            "--corefile",
            "-",
            "--proxy-fqdn",
            "hairpin.edge.svc.corp.internal.",
            &fixture("list.yaml"),
        ],
        Some(input),
        &[],
    ));
    assert_eq!(
        out,
        format!(
            ".:53 {{\r\n\terrors\r\n\tforward . /etc/resolv.conf\r\n\treload\r\n\t{BEGIN}\r\n\
             \trewrite name list-one.example.com hairpin.edge.svc.corp.internal.\r\n\
             \trewrite name list-two.example.com hairpin.edge.svc.corp.internal.\r\n\
             \t{END}\r\n}}\r\n"
        )
    );
    // Its variable sets it too.
    let out = ok(render_env(
        &["coredns", "--corefile", "-", &fixture("list.yaml")],
        Some(input),
        &[("OUROBOROS_RENDER_PROXY_FQDN", "p.ns.svc.cluster.local.")],
    ));
    assert!(out.contains("rewrite name list-one.example.com p.ns.svc.cluster.local.\r\n"));
    let stderr = fails(
        render_env(
            &[
                "coredns",
                "--corefile",
                "-",
                "--proxy-fqdn",
                "no-trailing-dot.svc",
            ],
            Some(input),
            &[],
        ),
        64,
    );
    assert!(stderr.contains("must end with a dot"), "{stderr}");
    // stdin cannot feed both the Corefile and the manifests.
    fails(
        render_env(&["coredns", "--corefile", "-", "-"], Some(input), &[]),
        64,
    );
}

#[test]
fn unparseable_corefile_fails_naming_file_and_line() {
    let tmp = TempDir::new("bad-corefile");
    for (name, text, line) in [
        (
            "unclosed.Corefile",
            ".:53 {\n    errors\n    cache 30 {\n}\n",
            "line ",
        ),
        (
            "begin-without-end.Corefile",
            &format!(
                ".:53 {{\n    errors\n    {BEGIN}\n    rewrite name a.example.com {PROXY}\n}}\n"
            ),
            "line 3",
        ),
        ("empty.Corefile", "", "line 1"),
        (
            "no-root.Corefile",
            "example.org:53 {\n    whoami\n}\n",
            "line 1",
        ),
    ] {
        let path = tmp.file(name, text);
        let stderr = fails(
            render(&["coredns", "--corefile", &path, &fixture("ingresses.yaml")]),
            1,
        );
        assert!(stderr.contains(&path), "{name}: {stderr}");
        assert!(stderr.contains(line), "{name}: {line:?} not in {stderr}");
        // Also with no manifests (the removal path parses the file too).
        fails(render(&["coredns", "--corefile", &path]), 1);
    }
    let stderr = fails(
        render(&["coredns", "--corefile", "/nonexistent/Corefile"]),
        1,
    );
    assert!(stderr.contains("/nonexistent/Corefile"), "{stderr}");
    // --corefile is required.
    let stderr = fails(render(&["coredns", &fixture("ingresses.yaml")]), 64);
    assert!(stderr.contains("--corefile"), "{stderr}");
}

#[test]
fn corefile_findings_are_warned() {
    let tmp = TempDir::new("findings");
    let no_reload = tmp.file("no-reload", ".:53 {\n    forward . /etc/resolv.conf\n}\n");
    let out = render(&["coredns", "--corefile", &no_reload, &fixture("list.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("WARN")
            && out.stderr.contains("reload")
            && out.stderr.contains("restart"),
        "{}",
        out.stderr
    );
    let imports = tmp.file(
        "imports",
        ".:53 {\n    forward . /etc/resolv.conf\n    reload\n    import /etc/coredns/custom/*.override\n}\n",
    );
    let out = render(&["coredns", "--corefile", &imports, &fixture("list.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("coredns-import"), "{}", out.stderr);
    assert!(!out.stderr.contains("restart"), "{}", out.stderr);
    // hairpin-proxy's leftover line takes a listed name; one for another name does not warn.
    let leftover = tmp.file(
        "leftover",
        ".:53 {\n    rewrite name LISTED hairpin-proxy.hairpin-proxy.svc.cluster.local\n    \
         rewrite name unlisted.example.net x.svc.cluster.local\n    forward . /etc/resolv.conf\n    \
         reload\n}\n"
            .replace("LISTED", "list-one.example.com")
            .as_str(),
    );
    let out = render(&["coredns", "--corefile", &leftover, &fixture("list.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let warned: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("`rewrite` rule outside the ouroboros block"))
        .collect();
    assert_eq!(warned.len(), 1, "{}", out.stderr);
    assert!(
        warned[0].contains("list-one.example.com") && warned[0].contains("line=2"),
        "{}",
        out.stderr
    );
}

#[test]
fn hostile_names_never_reach_a_corefile_or_hosts_file() {
    let (path, input) = example_corefile();
    let out = render(&["coredns", "--corefile", &path, &fixture("hostile.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (block, rest) = split_block(&out.stdout);
    assert_eq!(rest, input);
    assert_eq!(block, [format!("rewrite name fine.example.com {PROXY}")]);

    let snippet = ok(render(&["coredns-import", &fixture("hostile.yaml")]));
    assert_eq!(
        snippet,
        format!("{BEGIN}\nrewrite name fine.example.com {PROXY}\n{END}\n")
    );

    let tmp = TempDir::new("hostile-hosts");
    let hosts = tmp.file("hosts", "127.0.0.1 localhost\n");
    let out = ok(render(&[
        "etc-hosts",
        "--hosts-file",
        &hosts,
        "--proxy-ip",
        "10.96.0.50",
        &fixture("hostile.yaml"),
    ]));
    assert_eq!(
        out,
        format!("127.0.0.1 localhost\n{BEGIN}\n10.96.0.50 fine.example.com\n{END}\n")
    );
}

#[test]
fn coredns_import_snippet() {
    let out = ok(render(&["coredns-import", &fixture("list.yaml")]));
    assert_eq!(
        out,
        format!(
            "{BEGIN}\nrewrite name list-one.example.com {PROXY}\nrewrite name list-two.example.com {PROXY}\n{END}\n"
        )
    );
    let out = ok(render(&["coredns-import", &fixture("ingresses.yaml")]));
    let (block, _) = split_block(&out);
    assert_eq!(block.len(), 4);
    assert!(block[0].contains(r"wild\.example\.com") && block[0].contains("regex"));
    // No manifests: the markers only, so the ConfigMap key can stay.
    assert_eq!(ok(render(&["coredns-import"])), format!("{BEGIN}\n{END}\n"));
}

#[test]
fn hosts_file_block() {
    let tmp = TempDir::new("hosts");
    let input = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n";
    let hosts = tmp.file("hosts", input);
    let out = render_env(
        &[
            "etc-hosts",
            "--hosts-file",
            &hosts,
            "--proxy-ip",
            "10.96.0.50",
            "--proxy-ip",
            "fd00::50",
            &fixture("ingresses.yaml"),
        ],
        None,
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut want = String::from(input);
    want.push_str(BEGIN);
    want.push('\n');
    for h in ["a.example.com", "b.example.com", "c.example.com"] {
        want.push_str(&format!("10.96.0.50 {h}\nfd00::50 {h}\n"));
    }
    want.push_str(END);
    want.push('\n');
    assert_eq!(out.stdout, want);
    // The wildcard cannot be expressed: a warning, never a line.
    assert!(
        out.stderr.contains("WARN") && out.stderr.contains("*.wild.example.com"),
        "{}",
        out.stderr
    );
    // The summary counts the names written (3), not the wildcard left out.
    assert!(
        out.stderr.contains("rendered the hosts file hosts=3 "),
        "{}",
        out.stderr
    );
    // Round trip: same set unchanged, empty set restores the input.
    let edited = tmp.file("edited", &out.stdout);
    let ips = "--proxy-ip=10.96.0.50,fd00::50";
    assert_eq!(
        ok(render(&[
            "etc-hosts",
            "--hosts-file",
            &edited,
            ips,
            &fixture("ingresses.yaml")
        ])),
        out.stdout
    );
    assert_eq!(
        ok(render(&["etc-hosts", "--hosts-file", &edited, ips])),
        input
    );
    // `hosts` is accepted for `etc-hosts`.
    assert_eq!(ok(render(&["hosts", "--hosts-file", &edited, ips])), input);
    // Proxy IPs from the controller's variable.
    let env_out = ok(render_env(
        &["etc-hosts", "--hosts-file", &hosts, &fixture("list.yaml")],
        None,
        &[("OUROBOROS_RENDER_PROXY_IP", "192.0.2.9")],
    ));
    assert!(
        env_out.contains("192.0.2.9 list-one.example.com\n"),
        "{env_out}"
    );
}

#[test]
fn unparseable_hosts_file_fails_naming_file_and_line() {
    let tmp = TempDir::new("bad-hosts");
    let bad = tmp.file(
        "hosts",
        &format!("127.0.0.1 localhost\n{BEGIN}\n10.0.0.1 www.example.com\n"),
    );
    let stderr = fails(
        render(&[
            "etc-hosts",
            "--hosts-file",
            &bad,
            "--proxy-ip=10.96.0.50",
            &fixture("list.yaml"),
        ]),
        1,
    );
    assert!(
        stderr.contains(&bad) && stderr.contains("line 2"),
        "{stderr}"
    );
    let stderr = fails(
        render(&[
            "etc-hosts",
            "--hosts-file",
            "/nonexistent/hosts",
            "--proxy-ip=10.96.0.50",
        ]),
        1,
    );
    assert!(stderr.contains("/nonexistent/hosts"), "{stderr}");
    // --proxy-ip is required once there are names to answer, in etc-hosts and external-dns
    // alike; removing the block (no manifest) needs none, and clap's usage line does not
    // claim otherwise.
    let good = tmp.file("good", "127.0.0.1 localhost\n");
    let list = fixture("list.yaml");
    for args in [
        vec!["etc-hosts", "--hosts-file", &good, &list],
        vec!["external-dns", &list],
    ] {
        let stderr = fails(render(&args), 64);
        assert!(
            stderr.contains("--proxy-ip is required for 2 hostname(s)"),
            "{stderr}"
        );
    }
    let out = render(&["etc-hosts", "--hosts-file", &good]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "127.0.0.1 localhost\n"),
        "{}",
        out.stderr
    );
    let out = render(&["external-dns", "--bogus"]);
    assert!(
        !out.stderr.contains("--proxy-ip <IP>") && out.stderr.contains("Usage:"),
        "{}",
        out.stderr
    );
}

/// The default form from the command line: the template pair with the given ClusterIPs, one
/// regex that takes exactly the accepted hosts, and a usage error without an address.
#[test]
fn template_block_from_examples() {
    let (path, input) = example_corefile();
    let env = [("OUROBOROS_RENDER_COREDNS_ANSWER", "template")];
    let out = render_env(
        &[
            "coredns",
            "--corefile",
            &path,
            "--proxy-ip",
            "10.96.0.10,fd00::10",
            &examples(),
        ],
        None,
        &env,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (block, rest) = split_block(&out.stdout);
    assert_eq!(rest, input);
    let heads: Vec<&String> = block
        .iter()
        .filter(|l| l.starts_with("template "))
        .collect();
    assert_eq!(heads.len(), 2, "{block:?}");
    assert!(
        heads[0].starts_with("template IN A example.com"),
        "{block:?}"
    );
    assert!(block.contains(&r#"answer "{{ .Name }} 30 IN A 10.96.0.10""#.to_string()));
    assert!(block.contains(&r#"answer "{{ .Name }} 30 IN AAAA fd00::10""#.to_string()));
    let pattern = block
        .iter()
        .find_map(|l| l.strip_prefix("match "))
        .expect("a match line");
    let re = regex::Regex::new(pattern).unwrap();
    for host in [
        "api.example.com.",
        "shop.example.com.",
        "team.example.com.",
        "wiki.corp.example.com.",
        "www.example.com.",
        "any.apps.example.com.",
    ] {
        assert!(re.is_match(host), "{host} against {pattern}");
    }
    for other in [
        "example.com.",
        "a.b.apps.example.com.",
        "_acme-challenge.shop.example.com.",
    ] {
        assert!(!re.is_match(other), "{other} against {pattern}");
    }

    let stderr = fails(
        render_env(&["coredns", "--corefile", &path, &examples()], None, &env),
        64,
    );
    assert!(stderr.contains("--proxy-ip is required"), "{stderr}");
    // An empty host set needs no address: the block is only removed.
    assert_eq!(
        ok(render_env(&["coredns", "--corefile", &path], None, &env)),
        input
    );
}

/// JSON logs carry a rejected hostname as the object's own bytes: the JSON encoder escapes
/// them (a newline cannot forge a log line), so they are neither escaped nor quoted a second
/// time as text logs do.
#[test]
fn json_logs_give_rejected_hostnames_as_they_are() {
    let out = common::run(
        common::command("--log-format")
            .args([
                "json",
                "render",
                "coredns-import",
                "--coredns-answer",
                "rewrite",
            ])
            .arg(fixture("hostile.yaml")),
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let names: Vec<String> = out
        .stderr
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| v["hostname"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names.len(), 21, "{}", out.stderr);
    for shown in [
        "brace.example.com}",
        "under_score.example.com",
        "*.com",
        "space inside.example.com",
        "\"quoted.example.com\"",
        "newline.example.com\nrewrite name evil.example.com attacker.example.net.",
        "nul\0byte.example.com",
    ] {
        assert!(names.iter().any(|n| n == shown), "{shown:?}: {names:?}");
    }
}
