//! coredns-shadowing: server blocks for a more specific zone (in the Corefile or in the `*.server`
//! fragments k3s and AKS import) that take hairpinned names, so our block never answers them.
//! Separate from `coredns`: it reads a second ConfigMap and parses its fragments.
//! coredns-rewrites: other tools' `rewrite` rules in the root block that take them first.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;

use super::coredns::Expected;
use super::{coredns::UNKNOWN, cut, inputs::Got};
use crate::dns::corefile;
use crate::dns::ConfigMapKey;
use crate::dns::Mode;
use crate::doctor::report::Check;

/// coredns-shadowing: hairpinned names that a server block for a more specific zone takes, so
/// that our block (in the root server block) never answers them. `corefile` is the Corefile's
/// [`corefile::Findings::shadowing`] (None when the Corefile could not be read or parsed);
/// `import` is the ConfigMap whose `*.server` keys k3s and AKS import at the Corefile's top level
/// (`import /etc/coredns/custom/*.server`), each a fragment of whole server blocks.
pub fn coredns_shadowing(
    mode: Mode,
    corefile: Option<&[corefile::Shadow]>,
    import: &ConfigMapKey,
    import_got: &Got<ConfigMap>,
    want: Option<&Expected<'_>>,
) -> Check {
    const ID: &str = "coredns-shadowing";
    if let Some(skip) = super::coredns::skip_unless_coredns(ID, mode) {
        return skip;
    }
    let Some(want) = want else {
        return Check::skip(ID, UNKNOWN);
    };
    let mut shadows: Vec<(String, String)> = corefile
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s.host.clone(),
                format!("{}: server block '{}' (line {})", s.host, s.block, s.line),
            )
        })
        .collect();
    let Fragments {
        shadows: found,
        problems,
        problem_action,
        searched,
    } = fragments(import, import_got, want);
    shadows.extend(found);
    if !shadows.is_empty() {
        let names: BTreeSet<&str> = shadows.iter().map(|(h, _)| h.as_str()).collect();
        return Check::warn(
            ID,
            format!(
                "{} hairpinned name(s) are taken by a server block for a more specific zone, so \
                 our block never answers them (CoreDNS routes a query to the block with the \
                 longest matching zone)",
                names.len()
            ),
        )
        .evidence_all(cut(shadows.into_iter().map(|(_, l)| l).collect()))
        .evidence_all(problems)
        .action(format!(
            "add the same ouroboros {} block to that server block (copy the lines between the \
             markers, without the marker lines, which the controller would move into the root \
             block), or remove the block",
            want.form()
        ));
    }
    if !problems.is_empty() {
        return Check::warn(
            ID,
            "not every server block could be checked for hairpinned names it takes",
        )
        .evidence_all(problems)
        .action(problem_action.unwrap_or_default());
    }
    if corefile.is_none() {
        return Check::skip(
            ID,
            "the Corefile could not be read or parsed (see the coredns-configmap and \
             coredns-corefile checks)",
        )
        .evidence(searched);
    }
    Check::ok(
        ID,
        "no server block for a more specific zone takes a hairpinned name",
    )
    .evidence(format!("searched: the Corefile; {searched}"))
}

/// coredns-rewrites: hairpinned names that a `rewrite` rule outside our block takes before our
/// answer (hairpin-proxy's `rewrite name HOST its-service` lines, left behind). `found` is the
/// Corefile's [`corefile::Findings::rewritten`] (None when the Corefile could not be read or
/// parsed, or the desired hostnames are unknown).
pub fn coredns_rewrites(mode: Mode, found: Option<&[corefile::Rewritten]>) -> Check {
    const ID: &str = "coredns-rewrites";
    if let Some(skip) = super::coredns::skip_unless_coredns(ID, mode) {
        return skip;
    }
    let Some(found) = found else {
        return Check::skip(ID, UNKNOWN);
    };
    if found.is_empty() {
        return Check::ok(
            ID,
            "no `rewrite` rule outside the ouroboros block takes a hairpinned name",
        );
    }
    let names: BTreeSet<&str> = found.iter().map(|r| r.host.as_str()).collect();
    Check::warn(
        ID,
        format!(
            "{} hairpinned name(s) are taken by a `rewrite` rule outside the ouroboros block, \
             which changes their queries before the block can answer them",
            names.len()
        ),
    )
    .evidence_all(cut(found
        .iter()
        .map(|r| format!("{}: rewrite {} (line {})", r.host, r.rule, r.line))
        .collect()))
    .action(
        "remove those rules from the Corefile (another tool's, such as hairpin-proxy's, left \
         behind; `kubectl -n kube-system edit configmap coredns`)",
    )
}

/// The shadowing in a `*.server` fragment. `corefile::splice` reports shadowing relative to a
/// root server block, which a fragment does not have (CoreDNS imports it beside the Corefile's
/// own `.:53`): an empty `.:53 {}` is appended so the parse has one, and the fragment's blocks
/// then shadow exactly as they do beside the real root block. Coming last, it leaves the
/// fragment's line numbers as they are.
fn fragment_shadowing(
    fragment: &str,
    want: &Expected<'_>,
) -> Result<Vec<corefile::Shadow>, corefile::CorefileError> {
    let text = format!("{fragment}\n.:53 {{\n}}\n");
    corefile::splice_groups(&text, &want.groups).map(|e| e.findings.shadowing)
}

/// What the `*.server` fragments of the import ConfigMap gave: the names their blocks take
/// (host, evidence line), what kept doctor from reading them all and the action for it, and
/// what was searched.
struct Fragments {
    shadows: Vec<(String, String)>,
    problems: Vec<String>,
    problem_action: Option<String>,
    searched: String,
}

fn fragments(import: &ConfigMapKey, import_got: &Got<ConfigMap>, want: &Expected<'_>) -> Fragments {
    let mut shadows: Vec<(String, String)> = Vec::new();
    // What kept doctor from looking everywhere, and the action for it.
    let mut problems: Vec<String> = Vec::new();
    let mut problem_action = None;
    let cm = format!("ConfigMap {}/{}", import.namespace, import.name);
    let searched = match import_got {
        Err(e) => {
            problems.push(e.to_string());
            problem_action = Some(e.action());
            format!("{cm} (could not be read)")
        }
        Ok(None) => format!("{cm} (not found)"),
        Ok(Some(c)) => {
            let servers: Vec<(&String, &String)> = c
                .data
                .iter()
                .flatten()
                .filter(|(k, _)| k.ends_with(".server"))
                .collect();
            for (key, text) in &servers {
                match fragment_shadowing(text, want) {
                    Ok(found) => shadows.extend(found.into_iter().map(|s| {
                        let line = format!(
                            "{}: server block '{}' in {cm} key {key:?} (line {})",
                            s.host, s.block, s.line
                        );
                        (s.host, line)
                    })),
                    Err(e) => {
                        problems.push(format!("{cm} key {key:?} cannot be parsed: {e}"));
                        problem_action.get_or_insert_with(|| {
                            "fix that key: CoreDNS does not load a Corefile it cannot parse"
                                .to_string()
                        });
                    }
                }
            }
            let keys: Vec<&str> = servers.iter().map(|(k, _)| k.as_str()).collect();
            if keys.is_empty() {
                format!("{cm} (no *.server key)")
            } else {
                format!("{cm} ({})", keys.join(", "))
            }
        }
    };
    Fragments {
        shadows,
        problems,
        problem_action,
        searched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::fixtures::{cm, expect, forbidden, hosts, proxy, PLAIN};
    use crate::doctor::report::Status;
    use serde_json::json;

    #[test]
    fn rewrite_verdicts() {
        let h = hosts(&["www.example.com", "api.example.com"]);
        let left = PLAIN.replacen(
            "{\n",
            "{\n    rewrite name www.example.com hairpin-proxy.hairpin-proxy.svc.cluster.local\n",
            1,
        );
        let found = corefile::splice(&left, &h, &proxy())
            .unwrap()
            .findings
            .rewritten;
        let c = coredns_rewrites(Mode::Coredns, Some(&found));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.summary.starts_with("1 hairpinned name(s)"),
            "{}",
            c.summary
        );
        assert_eq!(
            c.evidence,
            ["www.example.com: rewrite name www.example.com \
              hairpin-proxy.hairpin-proxy.svc.cluster.local (line 2)"]
        );
        let clean = corefile::splice(PLAIN, &h, &proxy())
            .unwrap()
            .findings
            .rewritten;
        let cases = [
            (Mode::Coredns, Some(clean.as_slice()), Status::Ok),
            (Mode::Coredns, None, Status::Skip),
            (Mode::EtcHosts, Some(found.as_slice()), Status::Skip),
        ];
        for (mode, found, want) in cases {
            assert_eq!(coredns_rewrites(mode, found).status, want, "{mode:?}");
        }
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases: mode, Corefile and import ConfigMap, and the verdict"
    )]
    fn shadowing_verdicts() {
        let t = ConfigMapKey::import_default();
        let h = hosts(&["a.example.com", "*.b.example.org"]);
        let zone = "example.com:53 {\n    forward . 10.0.0.1\n}\n";
        let in_corefile = corefile::splice(&format!("{zone}{PLAIN}"), &h, &proxy())
            .unwrap()
            .findings
            .shadowing;
        let none: &[corefile::Shadow] = &[];
        let custom = |k: &str, v: &str| Ok(Some(cm(json!({k: v, "ouroboros.override": "x"}))));
        // (mode, Corefile shadows, import ConfigMap, want, first evidence line)
        type Case<'a> = (
            Mode,
            Option<&'a [corefile::Shadow]>,
            Got<ConfigMap>,
            Status,
            &'a str,
        );
        let cases: Vec<Case> =
            vec![
            (
                Mode::Coredns,
                Some(&in_corefile),
                Ok(None),
                Status::Warn,
                "a.example.com: server block 'example.com:53' (line 1)",
            ),
            (
                Mode::CorednsImport,
                Some(none),
                custom("b.server", "# org\nb.example.org {\n    forward . 10.0.0.2\n}"),
                Status::Warn,
                "*.b.example.org: server block 'b.example.org' in ConfigMap \
                 kube-system/coredns-custom key \"b.server\" (line 2)",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("other.server", "example.net:53 {\n}\nc.example.com:5353 {\n}\n"),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (other.server)",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("x.override", zone),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (no *.server key)",
            ),
            (
                Mode::Coredns,
                Some(none),
                Ok(None),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (not found)",
            ),
            (
                Mode::Coredns,
                Some(none),
                Err(forbidden("configmaps", "coredns-custom")),
                Status::Warn,
                "get configmaps \"coredns-custom\" in namespace kube-system: HTTP 403: forbidden",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("bad.server", "example.com {\n"),
                Status::Warn,
                "ConfigMap kube-system/coredns-custom key \"bad.server\" cannot be parsed: line \
                 1: this '{' is never closed; add the missing '}' (in this block or one nested \
                 in it)",
            ),
            (
                Mode::Coredns,
                None,
                Ok(None),
                Status::Skip,
                "ConfigMap kube-system/coredns-custom (not found)",
            ),
            (Mode::ExternalDns, Some(&in_corefile), Ok(None), Status::Skip, ""),
        ];
        for (mode, shadows, got, want, first) in cases {
            let c = coredns_shadowing(
                mode,
                shadows,
                &t,
                &got,
                expect(Some(&h), Some(&proxy())).as_ref(),
            );
            assert_eq!(c.status, want, "{c:?}");
            let got = c.evidence.first().map_or("", String::as_str);
            assert!(got.starts_with(first), "{first:?}: {c:?}");
        }
        let c = coredns_shadowing(
            Mode::Coredns,
            Some(&in_corefile),
            &t,
            &Ok(None),
            expect(Some(&h), Some(&proxy())).as_ref(),
        );
        assert!(c
            .action
            .unwrap()
            .starts_with("add the same ouroboros template block to that server block"));
        for (hs, a) in [(None, Some(&proxy())), (Some(&h), None)] {
            let c = coredns_shadowing(
                Mode::Coredns,
                Some(&in_corefile),
                &t,
                &Ok(None),
                expect(hs, a).as_ref(),
            );
            assert_eq!(c.status, Status::Skip);
        }
    }
}
