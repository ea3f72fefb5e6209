//! The chart against the binary and its docs: the flags it passes, the README, the values table.

use super::*;

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
    "<!-- rbac-matrix: generated by tests/it/chart/ from controller::rbac; do not edit -->\n";
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
    "<!-- values-table: generated by tests/it/chart/ from values.yaml; do not edit -->\n";
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
