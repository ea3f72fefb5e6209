//! Table and golden tests for the DNS editors over real-world Corefiles and hosts files.
//!
//! Inputs live in `tests/fixtures/{corefiles,hosts}/`, expected outputs in `tests/fixtures/golden/`.
//! `UPDATE_GOLDEN=1 cargo test --test it editors::` rewrites the golden files instead of comparing
//! (review the diff before committing).

use crate::golden_file;

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::support::block_lines;
use ouroboros::dns::answer::{Answer, ProxyAddrs};
use ouroboros::dns::{
    coredns_import, corefile, etc_hosts, ProxyFqdn, BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER,
};
use ouroboros::hostname::{HostPolicy, Hostname, Rejection};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Sorted files directly in `dir` with the extension `ext`.
fn inputs(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no *.{ext} fixtures in {}", dir.display());
    v
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Compares `actual` with the golden file, or writes it when UPDATE_GOLDEN=1.
fn golden(rel: &str, actual: &str) {
    golden_file::check(&fixtures().join("golden").join(rel), actual);
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

fn host_set(names: &[&str]) -> BTreeSet<Hostname> {
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    names
        .iter()
        .map(|n| policy.check(n).unwrap_or_else(|r| panic!("{n}: {r}")))
        .collect()
}

/// The host set every golden output is rendered with.
fn sample_hosts() -> BTreeSet<Hostname> {
    host_set(&[
        "www.example.com",
        "API.example.com.",
        "*.apps.example.org",
        "shop.example.net",
    ])
}

/// The default answer every golden output is rendered with: a dual-stack proxy.
fn proxy() -> Answer {
    Answer::Template(ProxyAddrs::new(&proxy_ips()).unwrap())
}

fn ipv4_only() -> Answer {
    Answer::Template(ProxyAddrs::new(&["10.43.0.53".parse().unwrap()]).unwrap())
}

fn rewrite() -> Answer {
    Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap())
}

fn proxy_ips() -> Vec<IpAddr> {
    vec![
        "fd00:10:43::53".parse().unwrap(),
        "10.43.0.53".parse().unwrap(),
    ]
}

/// The text with every line from a BEGIN marker line to the next END marker line dropped: an
/// independent, line-based view of "everything outside the markers".
fn outside(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t == BEGIN_MARKER {
            inside = true;
        }
        if !inside {
            out.push_str(line);
        }
        if t == END_MARKER {
            inside = false;
        }
    }
    out
}

#[test]
fn corefile_golden_outputs() {
    let hosts = sample_hosts();
    for path in inputs(&fixtures().join("corefiles"), "Corefile") {
        let name = stem(&path);
        let input = read(&path);
        let edit =
            corefile::splice(&input, &hosts, &proxy()).unwrap_or_else(|e| panic!("{name}: {e}"));
        golden(&format!("coredns/{name}.Corefile"), &edit.text);
        assert!(edit.changed, "{name}");

        // Outside the markers nothing moved, our rules are exactly the expected ones.
        assert_eq!(outside(&edit.text), outside(&input), "{name}");
        assert_eq!(
            block_lines(&edit.text),
            coredns_import::render(&hosts, &proxy())
                .lines()
                .map(str::trim)
                .filter(|l| *l != BEGIN_MARKER && *l != END_MARKER)
                .collect::<Vec<_>>(),
            "{name}"
        );
        assert_eq!(edit.text.matches(BEGIN_MARKER).count(), 1, "{name}");

        // Idempotent, and the empty set restores the input without the block.
        let again = corefile::splice(&edit.text, &hosts, &proxy()).unwrap();
        assert_eq!(again.text, edit.text, "{name}: second run");
        assert!(!again.changed, "{name}");
        let removed = corefile::splice(&edit.text, &BTreeSet::new(), &proxy()).unwrap();
        let stripped = corefile::splice(&input, &BTreeSet::new(), &proxy()).unwrap();
        assert_eq!(removed.text, stripped.text, "{name}: removal");
        assert_eq!(removed.text, outside(&input), "{name}: removal");
        if !input.contains(BEGIN_MARKER) {
            assert_eq!(
                removed.text, input,
                "{name}: insert + remove is the identity"
            );
            assert!(!stripped.changed, "{name}");
        }
        // The file's own line endings, and its (missing) final newline.
        assert_eq!(
            edit.text.contains("\r\n"),
            input.contains("\r\n"),
            "{name}: line endings"
        );
        assert_eq!(edit.text.ends_with('\n'), input.ends_with('\n'), "{name}");
    }
}

/// Each distribution's Corefile × host set × proxy family, and the opt-in rewrite form: the
/// goldens under `coredns/matrix/` are what a reviewer reads to see the block on each.
#[test]
fn corefile_distro_matrix() {
    let exact = host_set(&["www.example.com", "example.com", "shop.example.net"]);
    let wildcard = host_set(&["*.apps.example.org", "*.example.com"]);
    let mixed = sample_hosts();
    for distro in [
        "kubeadm",
        "k3s",
        "rke2",
        "eks",
        "aks",
        "microk8s",
        "node-local-dns",
        "nodelocaldns-kubespray",
    ] {
        let input = read(&fixtures().join(format!("corefiles/{distro}.Corefile")));
        for (variant, hosts, answer) in [
            ("exact", &exact, ipv4_only()),
            ("wildcard", &wildcard, ipv4_only()),
            ("ipv4-only", &mixed, ipv4_only()),
            ("dual-stack", &mixed, proxy()),
            ("rewrite", &mixed, rewrite()),
        ] {
            if distro.contains("local") && variant == "rewrite" {
                continue; // refused: node-local-dns has no kubernetes plugin to resolve it
            }
            let edit = corefile::splice(&input, hosts, &answer)
                .unwrap_or_else(|e| panic!("{distro} {variant}: {e}"));
            golden(
                &format!("coredns/matrix/{distro}.{variant}.Corefile"),
                &edit.text,
            );
            assert_eq!(outside(&edit.text), outside(&input), "{distro} {variant}");
            let again = corefile::splice(&edit.text, hosts, &answer).unwrap();
            assert!(!again.changed, "{distro} {variant}");
            assert_eq!(corefile::remove(&edit.text).unwrap().text, outside(&input));
        }
    }
}

/// A block written by the reference tool or an earlier version (same markers, `rewrite name`
/// lines) is replaced by the template pair in one edit, in place.
#[test]
fn takes_over_a_reference_tool_block() {
    let input = read(&fixtures().join("corefiles/reference-tool-block.Corefile"));
    assert!(block_lines(&input)
        .iter()
        .any(|l| l.starts_with("rewrite name ")));
    let edit = corefile::splice(&input, &sample_hosts(), &proxy()).unwrap();
    assert!(edit.changed);
    let block = block_lines(&edit.text);
    assert!(block.iter().all(|l| !l.starts_with("rewrite")), "{block:?}");
    assert_eq!(
        block
            .iter()
            .filter(|l| l.starts_with("template IN "))
            .count(),
        2
    );
    assert_eq!(outside(&edit.text), outside(&input));
    assert_eq!(edit.text.matches(BEGIN_MARKER).count(), 1);
}

#[test]
fn corefile_findings() {
    // (fixture, has reload, imports the coredns-custom *.override files)
    for (name, reload, import) in [
        ("kubeadm", true, false),
        ("k3s", true, true),
        ("rke2", true, false),
        ("eks", true, false),
        ("aks", true, true),
        ("microk8s", true, false),
        ("zones-before-root", true, false),
        ("comments-and-quotes", true, false),
        ("crlf", true, false),
        ("tabs-no-final-newline", true, false),
        ("no-reload", false, false),
        ("stale-block", true, false),
        ("crlf-stale-block-at-end", true, false),
        ("user-rewrites", true, false),
        ("reference-tool-block", true, false),
        ("dns-scheme-port", true, false),
        ("empty-root", false, false),
        ("node-local-dns", true, false),
        ("nodelocaldns-kubespray", true, false),
    ] {
        let input = read(&fixtures().join(format!("corefiles/{name}.Corefile")));
        let f = corefile::splice(&input, &sample_hosts(), &proxy())
            .unwrap()
            .findings;
        assert_eq!(
            (f.has_reload, f.imports_custom_override),
            (reload, import),
            "{name}"
        );
    }
    // Every fixture is in the table above.
    assert_eq!(inputs(&fixtures().join("corefiles"), "Corefile").len(), 19);
}

#[test]
fn corefile_errors() {
    for path in inputs(&fixtures().join("corefiles/bad"), "Corefile") {
        let name = stem(&path);
        let input = read(&path);
        for hosts in [sample_hosts(), BTreeSet::new()] {
            match corefile::splice(&input, &hosts, &proxy()) {
                Ok(e) if hosts.is_empty() && name == "closing-brace-shares-line" => {
                    // Nothing to insert, so the brace position does not matter.
                    assert_eq!(e.text, input);
                }
                Ok(e) => panic!("{name}: accepted:\n{}", e.text),
                Err(e) if !hosts.is_empty() => {
                    golden(&format!("coredns/bad/{name}.err"), &format!("{e}\n"))
                }
                Err(_) => {}
            }
        }
    }
}

#[test]
fn coredns_import_golden() {
    let snippet = coredns_import::render(&sample_hosts(), &proxy());
    golden("coredns-import/sample.override", &snippet);
    golden(
        "coredns-import/empty.override",
        &coredns_import::render(&BTreeSet::new(), &proxy()),
    );
    // The snippet is the Corefile block, one level of indentation less.
    let edit = corefile::splice(".:53 {\n}\n", &sample_hosts(), &proxy()).unwrap();
    let block: String = edit
        .text
        .lines()
        .skip(1)
        .take_while(|l| *l != "}")
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap()))
        .collect();
    assert_eq!(snippet, block);
}

#[test]
fn etc_hosts_golden_outputs() {
    let hosts = sample_hosts();
    for path in inputs(&fixtures().join("hosts"), "hosts") {
        let name = stem(&path);
        let input = read(&path);
        let edit = etc_hosts::splice(&input, &hosts, &proxy_ips())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        golden(&format!("etc-hosts/{name}.hosts"), &edit.text);
        assert_eq!(
            edit.skipped_wildcards,
            host_set(&["*.apps.example.org"])
                .into_iter()
                .collect::<Vec<_>>()
        );
        assert_eq!(
            block_lines(&edit.text),
            [
                "10.43.0.53 api.example.com",
                "fd00:10:43::53 api.example.com",
                "10.43.0.53 shop.example.net",
                "fd00:10:43::53 shop.example.net",
                "10.43.0.53 www.example.com",
                "fd00:10:43::53 www.example.com",
            ],
            "{name}"
        );
        let again = etc_hosts::splice(&edit.text, &hosts, &proxy_ips()).unwrap();
        assert_eq!(again.text, edit.text, "{name}: second run");
        let removed = etc_hosts::splice(&edit.text, &BTreeSet::new(), &[]).unwrap();
        let stripped = etc_hosts::splice(&input, &BTreeSet::new(), &[]).unwrap();
        assert_eq!(removed.text, stripped.text, "{name}: removal");
        if !input.contains(BEGIN_MARKER) {
            assert_eq!(
                removed.text, input,
                "{name}: insert + remove is the identity"
            );
        }
        assert_eq!(
            edit.text.ends_with('\n'),
            input.is_empty() || input.ends_with('\n'),
            "{name}: final newline"
        );
    }
}

#[test]
fn etc_hosts_errors() {
    for path in inputs(&fixtures().join("hosts/bad"), "hosts") {
        let name = stem(&path);
        let input = read(&path);
        let e = etc_hosts::splice(&input, &sample_hosts(), &proxy_ips()).unwrap_err();
        golden(&format!("etc-hosts/bad/{name}.err"), &format!("{e}\n"));
        assert!(etc_hosts::splice(&input, &BTreeSet::new(), &[]).is_err());
    }
}

/// Names a tenant can put in an Ingress or Gateway: none of them may reach any output.
/// The template block's regex for `good.example.com` and `*.wild.example.com`.
const GOOD_MATCH: &str = r"match ^(?:[a-z0-9-]+\.wil|goo)d\.example\.com\.$";

#[allow(
    clippy::too_many_lines,
    reason = "a table of hostile names, each run through every output"
)]
#[test]
fn hostile_names_never_reach_an_output() {
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    // (name, text that must not appear in any output, why the policy refuses it)
    let hostile: &[(&str, &str, Rejection)] = &[
        (
            "evil.example.com\nrewrite name a.b c.d",
            "rewrite name a.b c.d",
            Rejection::InvalidCharacter,
        ),
        (
            "evil.example.com\r\n}\n. {\n",
            "evil.example.com\r",
            Rejection::InvalidCharacter,
        ),
        (
            "x.example.com }",
            "x.example.com }",
            Rejection::InvalidCharacter,
        ),
        (
            "{.example.com",
            "{.example.com",
            Rejection::InvalidCharacter,
        ),
        (
            "\"quoted\".example.com",
            "\"quoted\"",
            Rejection::InvalidCharacter,
        ),
        ("sp ace.example.com", "sp ace", Rejection::InvalidCharacter),
        ("tab\t.example.com", "tab\t", Rejection::InvalidCharacter),
        ("10.0.0.1", "10.0.0.1 ", Rejection::IpLiteral),
        ("::1", "::1 ", Rejection::InvalidCharacter),
        ("fd00::53", "fd00::53 ", Rejection::InvalidCharacter),
        (
            "kubernetes.default.svc.cluster.local",
            "kubernetes.default",
            Rejection::ClusterDomain,
        ),
        ("*.svc.cluster.local", "*.svc", Rejection::ClusterDomain),
        ("foo..example.com", "foo..example", Rejection::BadLabel),
        ("..", "..", Rejection::BadLabel),
        (
            "a.example.com # ",
            "a.example.com #",
            Rejection::InvalidCharacter,
        ),
        (
            "x.example.com\n# === END ouroboros ===\nrewrite name y z.",
            "rewrite name y",
            Rejection::InvalidCharacter,
        ),
        ("a.example.com\u{0}", "\u{0}", Rejection::InvalidCharacter),
        ("*.*.example.com", "*.*", Rejection::BadWildcard),
        ("ex\u{e4}mple.com", "\u{e4}", Rejection::InvalidCharacter),
        ("localhost", "localhost", Rejection::SingleLabel),
        ("x.in-addr.arpa", "in-addr.arpa", Rejection::InternalZone),
        ("regex.example.com$ x.", "$ x.", Rejection::InvalidCharacter),
    ];
    let good = ["good.example.com", "*.wild.example.com"];
    for (raw, _, why) in hostile {
        assert_eq!(policy.check(raw).err(), Some(*why), "{raw:?}");
    }
    // What a controller sees: tenants' names, good and hostile, interleaved. The editors get
    // whatever the policy lets through from that list.
    let mut mixed: Vec<&str> = hostile.iter().map(|(raw, _, _)| *raw).collect();
    for (i, g) in good.iter().enumerate() {
        mixed.insert(i * mixed.len() / good.len(), g);
    }
    let hosts: BTreeSet<Hostname> = mixed
        .iter()
        .filter_map(|raw| policy.check(raw).ok())
        .collect();
    let accepted: BTreeSet<String> = hosts.iter().map(|h| h.to_string()).collect();
    assert_eq!(
        accepted,
        good.iter().map(|g| g.to_string()).collect::<BTreeSet<_>>()
    );

    let mut outputs = Vec::new();
    for answer in [proxy(), rewrite()] {
        for path in inputs(&fixtures().join("corefiles"), "Corefile") {
            let input = read(&path);
            let out = corefile::splice(&input, &hosts, &answer).unwrap().text;
            // Only our block is new text; the rest is the fixture's own.
            assert_eq!(outside(&out), outside(&input));
            outputs.push(block_lines(&out).join("\n"));
        }
        outputs.push(coredns_import::render(&hosts, &answer));
    }
    outputs.push(
        block_lines(
            &etc_hosts::splice("127.0.0.1 localhost\n", &hosts, &proxy_ips())
                .unwrap()
                .text,
        )
        .join("\n"),
    );
    for out in &outputs {
        assert!(out.contains("good") || out.contains(GOOD_MATCH), "{out}");
        assert!(out.matches(END_MARKER).count() <= 1, "{out}");
        for (raw, payload, _) in hostile {
            assert!(!out.contains(payload), "{raw:?}: {payload:?} in\n{out}");
        }
        // Every rule line has exactly the shape we write.
        for line in out.lines().map(str::trim) {
            let words: Vec<&str> = line.split(' ').collect();
            let ok = line == BEGIN_MARKER
                || line == END_MARKER
                || line.is_empty()
                || words == ["rewrite", "name", "good.example.com", DEFAULT_PROXY_FQDN]
                || words
                    == [
                        "rewrite",
                        "name",
                        "regex",
                        "^[a-z0-9-]+\\.wild\\.example\\.com\\.$",
                        DEFAULT_PROXY_FQDN,
                        "answer",
                        "auto",
                    ]
                || words == ["10.43.0.53", "good.example.com"]
                || line == "template IN A example.com {"
                || line == "template IN AAAA example.com {"
                || line == GOOD_MATCH
                || line == r#"answer "{{ .Name }} 30 IN A 10.43.0.53""#
                || line == r#"answer "{{ .Name }} 30 IN AAAA fd00:10:43::53""#
                || line == "fallthrough"
                || line == "}"
                || words == ["fd00:10:43::53", "good.example.com"];
            assert!(ok, "unexpected line {line:?}");
        }
    }
}

/// 10,000 Ingresses × 3 TLS hosts with realistic names (per-app subdomains, team zones, preview
/// environments with hash-like labels, a few wildcards): the block, twice over in A and AAAA,
/// fits a kubeadm Corefile in one ConfigMap (the API server's 1 MiB), and every pattern is one
/// CoreDNS 1.14 accepts.
#[test]
fn thirty_thousand_hosts_fit_in_one_configmap() {
    const WORDS: [&str; 12] = [
        "shop", "api", "checkout", "billing", "auth", "search", "media", "docs", "status", "admin",
        "grafana", "cart",
    ];
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    let mut hosts = BTreeSet::new();
    for i in 0..10_000u64 {
        let app = format!("{}-{i}", WORDS[(i % 12) as usize]);
        let team = format!("team-{}", i % 50);
        let hash = format!(
            "{:06x}",
            (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) & 0xff_ffff
        );
        let names = [
            format!("{app}.example.com"),
            format!("www.{app}.{team}.example.net"),
            if i % 100 == 0 {
                format!("*.{team}.apps.example.org")
            } else {
                format!("pr-{i}-{hash}.preview.example.io")
            },
        ];
        for n in names {
            hosts.insert(policy.check(&n).unwrap());
        }
    }
    assert!(hosts.len() >= 29_900, "{}", hosts.len());
    let input = read(&fixtures().join("corefiles/kubeadm.Corefile"));
    let edit = corefile::splice(&input, &hosts, &proxy()).unwrap();
    let bytes = edit.text.len();
    eprintln!("{} hosts: Corefile of {bytes} bytes", hosts.len());
    assert!(bytes <= ouroboros::dns::MAX_CONFIGMAP_DATA, "{bytes}");
    for line in edit
        .text
        .lines()
        .filter(|l| l.trim_start().starts_with("match "))
    {
        for pattern in line.split_whitespace().skip(1) {
            assert!(pattern.len() <= 10_000, "{}", pattern.len());
        }
    }
}

/// node-local-dns's own Corefiles (the upstream ConfigMap with its `__PILLAR__` tokens, and
/// kubespray's rendered one): the block goes into `.:53`, the only block that sends public names
/// upstream, and every token and byte outside the markers stays.
#[test]
fn node_local_dns_corefiles_get_the_block_in_their_root_block() {
    for name in ["node-local-dns", "nodelocaldns-kubespray"] {
        let input = read(&fixtures().join(format!("corefiles/{name}.Corefile")));
        let edit = corefile::splice(&input, &sample_hosts(), &ipv4_only()).unwrap();
        assert_eq!(outside(&edit.text), outside(&input), "{name}");
        assert_eq!(
            edit.text.matches("__PILLAR__").count(),
            input.matches("__PILLAR__").count(),
            "{name}"
        );
        let root = edit.text.rfind(".:53 {").unwrap();
        assert!(edit.text.find(BEGIN_MARKER).unwrap() > root, "{name}");
        assert!(edit.findings.shadowing.is_empty(), "{name}");
        assert_eq!(corefile::remove(&edit.text).unwrap().text, input, "{name}");
    }
}
