//! The Corefile and our block in it: whether the ConfigMap and key exist, whether the Corefile
//! parses, reloads and imports, whether our block (or the coredns-import snippet) is present and
//! current, and whether something keeps reverting it. The block verdict is shared with
//! `node_local_dns`, which judges the same block in another Corefile.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Event};

use super::{cut, inputs::Got};
use crate::dns::answer::{self, Answer, Group, Rules};
use crate::dns::ConfigMapKey;
use crate::dns::Mode;
use crate::dns::{
    coredns_import, corefile, BEGIN_MARKER, END_MARKER, MAX_CONFIGMAP_DATA, TOO_LARGE_WAYS_OUT,
};
use crate::doctor::report::Check;
use crate::hostname::Hostname;

/// The Corefile text, or the check that explains why there is none.
pub fn corefile_text<'a>(
    mode: Mode,
    target: &ConfigMapKey,
    got: &'a Got<ConfigMap>,
) -> Result<&'a str, Check> {
    const ID: &str = "coredns-configmap";
    let cm = match got {
        Err(e) => return Err(e.check(ID)),
        Ok(None) => {
            let c = format!("ConfigMap {}/{} not found", target.namespace, target.name);
            return Err(if mode.spec().edits_coredns() {
                Check::fail(ID, c).action(
                    "check --coredns-namespace and --coredns-configmap (kubectl get configmaps \
                     -A | grep -i coredns)",
                )
            } else {
                Check::skip(ID, format!("{c}; mode {} does not use it", mode.name()))
            });
        }
        Ok(Some(cm)) => cm,
    };
    match cm.data.as_ref().and_then(|d| d.get(&target.key)) {
        Some(text) => Ok(text),
        None => {
            let keys: Vec<&str> = cm
                .data
                .iter()
                .flat_map(|d| d.keys().map(String::as_str))
                .collect();
            let c = Check::new(
                ID,
                if mode.spec().edits_coredns() {
                    crate::doctor::report::Status::Fail
                } else {
                    crate::doctor::report::Status::Skip
                },
                format!(
                    "ConfigMap {}/{} has no key {:?}",
                    target.namespace, target.name, target.key
                ),
            )
            .evidence(format!("keys: {}", keys.join(", ")))
            .action("check --coredns-key");
            Err(c)
        }
    }
}

/// The lines between our markers (trimmed), or None when there is no block.
pub(crate) fn block_lines(text: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| *l == BEGIN_MARKER)?;
    let mut out = Vec::new();
    for l in lines {
        if l == END_MARKER {
            return Some(out);
        }
        if !l.is_empty() {
            out.push(l.to_string());
        }
    }
    Some(out)
}

/// Rules missing from and extra in `have`, as evidence lines.
fn rule_diff(want: &[String], have: &[String]) -> Vec<String> {
    let want_set: BTreeSet<&String> = want.iter().collect();
    let have_set: BTreeSet<&String> = have.iter().collect();
    let missing = want_set
        .difference(&have_set)
        .map(|l| format!("missing: {}", shorten(l)));
    let extra = have_set
        .difference(&want_set)
        .map(|l| format!("stale: {}", shorten(l)));
    cut(missing.chain(extra).collect())
}

/// What our block should hold: every hairpinned name, and the rules for each proxy target's
/// names (one group without `--target`).
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    pub hosts: &'a BTreeSet<Hostname>,
    pub groups: Vec<Group<'a>>,
}

impl<'a> Expected<'a> {
    /// Every name answered one way.
    pub fn one(hosts: &'a BTreeSet<Hostname>, answer: &'a Answer) -> Self {
        Expected {
            hosts,
            groups: vec![Group { hosts, answer }],
        }
    }

    /// The names of `hosts`, answered per target as `rules` say.
    pub fn per_target(hosts: &'a BTreeSet<Hostname>, rules: &'a Rules) -> Self {
        Expected {
            hosts,
            groups: answer::groups(rules),
        }
    }

    /// The answer form (`--coredns-answer`: the same for every target).
    pub fn form(&self) -> &'static str {
        self.groups.first().map_or("template", |g| g.answer.form())
    }
}

/// The summary of the checks that judge our block when they cannot.
pub const UNKNOWN: &str = "the desired hostnames or the proxy's addresses are unknown (see the \
                           hostnames and proxy-service checks)";

/// Our block in a Corefile (`corefile`, of which `edit` is the splice for `hosts` and `answer`):
/// OK present and current, FAIL missing or stale (the rules missing and stale as evidence), WARN
/// the same rules but misplaced. `place` follows "our block" in the summary (" in ConfigMap
/// NS/NAME", or empty).
/// A rule line as evidence: the `view` form's name lists run to hundreds of kilobytes on one line.
fn shorten(line: &str) -> String {
    const KEEP: usize = 160;
    match line.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{}… ({} bytes)", &line[..cut], line.len()),
        None => line.to_string(),
    }
}

pub(super) fn block_verdict(
    id: &'static str,
    place: &str,
    corefile: &str,
    edit: &corefile::Edit,
    want: &Expected<'_>,
    action: &str,
) -> Check {
    let hosts = want.hosts;
    if !edit.changed {
        return Check::ok(
            id,
            if hosts.is_empty() {
                format!("no block{place}, and no hostname to hairpin")
            } else {
                format!(
                    "our block{place} is present and current ({} hostname(s))",
                    hosts.len()
                )
            },
        );
    }
    // The block as the edit writes it, in the form the Corefile takes (`view` blocks or lines).
    let want = block_lines(&edit.text).unwrap_or_default();
    let have = block_lines(corefile);
    let c = match &have {
        None => Check::fail(
            id,
            format!(
                "our block{place} is missing ({} hostname(s) to hairpin)",
                hosts.len()
            ),
        ),
        Some(have) if rule_diff(&want, have).is_empty() => Check::warn(
            id,
            format!(
                "our block{place} has the right rules but is misplaced or formatted differently"
            ),
        ),
        Some(_) => Check::fail(id, format!("our block{place} is stale")),
    };
    c.evidence_all(rule_diff(&want, have.as_deref().unwrap_or_default()))
        .action(action)
}

/// Findings of the Corefile: parse, root block, reload, import, our block.
/// `hosts` is None when the sources could not be listed, `answer` when the proxy's addresses
/// are unknown (the block is then not judged).
pub fn corefile_checks(
    mode: Mode,
    corefile: &str,
    want: Option<&Expected<'_>>,
) -> (Vec<Check>, Option<corefile::Findings>) {
    let edited = match want {
        Some(w) => corefile::splice_groups(corefile, &w.groups),
        None => corefile::remove(corefile),
    };
    let edit = match edited {
        Ok(e) => e,
        Err(e) => {
            return (
                vec![Check::fail("coredns-corefile", "the Corefile cannot be edited")
                    .evidence(e.to_string())
                    .action(
                        "fix the Corefile (the controller reports this as a CorefileUnparseable \
                         Event and writes nothing until it parses)",
                    )],
                None,
            )
        }
    };
    let f = edit.findings.clone();
    let mut out = vec![Check::ok(
        "coredns-corefile",
        "the Corefile parses and has a root server block (.:53)",
    )];
    out.push(if f.has_reload {
        Check::ok("coredns-reload", "the root server block has `reload`")
    } else {
        Check::warn(
            "coredns-reload",
            "the root server block has no `reload`: CoreDNS picks up changes only when restarted",
        )
        .action(
            "add `reload` to the root server block, or restart CoreDNS after each change \
             (kubectl -n kube-system rollout restart deployment coredns)",
        )
    });
    out.push(match (mode, f.imports_custom_override) {
        (Mode::CorednsImport, true) | (Mode::Coredns, true) => Check::ok(
            "coredns-import",
            "the root server block imports /etc/coredns/custom/*.override",
        )
        .action(if mode == Mode::Coredns {
            "--mode coredns-import can use it and leaves the Corefile untouched"
        } else {
            "nothing to do"
        }),
        (Mode::CorednsImport, false) => Check::fail(
            "coredns-import",
            "the root server block does not import /etc/coredns/custom/*.override, so the \
             snippet is never loaded",
        )
        .action(
            "add `import /etc/coredns/custom/*.override` to the root server block and mount the \
             import ConfigMap at /etc/coredns/custom, or use --mode coredns",
        ),
        (_, false) => Check::ok(
            "coredns-import",
            "no import of /etc/coredns/custom/*.override (needed only by --mode coredns-import)",
        ),
        (_, true) => Check::ok(
            "coredns-import",
            "the root server block imports /etc/coredns/custom/*.override",
        ),
    });
    let block = match (mode, want) {
        (Mode::Coredns, Some(w)) if edit.changed && edit.text.len() > MAX_CONFIGMAP_DATA => {
            Check::fail(
                "coredns-block",
                format!(
                    "the block for {} hostname(s) would make the Corefile {} bytes, over the {} \
                     bytes a ConfigMap holds: the controller keeps the block it wrote last \
                     (BlockTooLarge Event) and writes the new set once it fits",
                    w.hosts.len(),
                    edit.text.len(),
                    MAX_CONFIGMAP_DATA
                ),
            )
            .action(format!("ways out: {TOO_LARGE_WAYS_OUT}"))
        }
        (Mode::Coredns, Some(w)) => block_verdict(
            "coredns-block",
            "",
            corefile,
            &edit,
            w,
            "check that the controller runs and is leader (kubectl -n NAMESPACE logs \
             deploy/ouroboros-controller) and that the rbac check passes",
        ),
        (Mode::Coredns, _) => Check::skip("coredns-block", UNKNOWN),
        _ => match block_lines(corefile) {
            Some(_) => Check::warn(
                "coredns-block",
                format!(
                    "the Corefile still holds our block, unused in mode {}",
                    mode.name()
                ),
            )
            .action(
                "remove it: ouroboros cleanup --mode coredns (with the same --coredns-* flags)",
            ),
            None => Check::ok("coredns-block", "the Corefile holds no block of ours"),
        },
    };
    out.push(block);
    (out, Some(f))
}

/// Which of `candidates` our block is judged against: the one `text` already holds (`text`:
/// the Corefile in coredns mode, the import snippet in coredns-import mode), else the first.
/// There is more than one when a `probe` target's pick is one doctor could not find out (its
/// own knocks got no verdict): the controller, knocking from its pod, may have picked either,
/// and the block is right under either.
pub fn held<'c, 'a>(
    mode: Mode,
    text: &str,
    candidates: &'c [Expected<'a>],
) -> Option<&'c Expected<'a>> {
    if candidates.len() < 2 {
        return candidates.first();
    }
    let holds = |w: &Expected<'_>| match mode {
        Mode::CorednsImport => text == coredns_import::render_groups(&w.groups),
        _ => corefile::splice_groups(text, &w.groups).is_ok_and(|e| !e.changed),
    };
    candidates.iter().find(|w| holds(w)).or(candidates.first())
}

/// coredns-import: our key holds the snippet for the desired hosts.
pub fn import_snippet(target: &ConfigMapKey, got: &Got<ConfigMap>, want: &Expected<'_>) -> Check {
    const ID: &str = "coredns-import-snippet";
    let hosts = want.hosts;
    let act = "check that the controller runs and is leader, and that the rbac check passes";
    let text = match got {
        Err(e) => return e.check(ID),
        Ok(None) => {
            return Check::fail(
                ID,
                format!("ConfigMap {}/{} not found", target.namespace, target.name),
            )
            .action(act)
        }
        Ok(Some(cm)) => cm.data.as_ref().and_then(|d| d.get(&target.key)),
    };
    let want = coredns_import::render_groups(&want.groups);
    match text {
        None => Check::fail(ID, format!("{target} is missing")).action(act),
        Some(t) if *t == want => Check::ok(
            ID,
            format!("{target} is current ({} hostname(s))", hosts.len()),
        ),
        Some(t) => Check::fail(ID, format!("{target} is stale"))
            .evidence_all(rule_diff(
                &block_lines(&want).unwrap_or_default(),
                &block_lines(t).unwrap_or_default(),
            ))
            .action(act),
    }
}

/// How often a reason was reported, summing Event counts.
fn occurrences(events: &[Event]) -> i64 {
    events
        .iter()
        .map(|e| {
            let series = e.series.as_ref().and_then(|s| s.count).unwrap_or(0);
            i64::from(e.count.unwrap_or(0).max(series).max(1))
        })
        .sum()
}

/// Something else (an addon manager, a Helm release) rewrites the Corefile without our block.
pub fn block_reverted(
    mode: Mode,
    target: &ConfigMapKey,
    events: &Got<Vec<Event>>,
    imports: Option<bool>,
) -> Check {
    const ID: &str = "coredns-reverted";
    if mode != Mode::Coredns {
        return Check::skip(
            ID,
            format!("mode {} leaves the Corefile alone", mode.name()),
        );
    }
    let events = match events {
        Err(e) => return e.check(ID),
        Ok(e) => e.as_deref().unwrap_or_default(),
    };
    if events.is_empty() {
        return Check::ok(
            ID,
            format!(
                "no BlockReverted Events on ConfigMap {}/{}",
                target.namespace, target.name
            ),
        );
    }
    let n = occurrences(events);
    let last = events
        .iter()
        .filter_map(|e| e.message.as_deref())
        .next_back()
        .map(|m| format!("last: {m:?}"));
    let action = if imports == Some(true) {
        "switch to --mode coredns-import: the Corefile already imports \
         /etc/coredns/custom/*.override, so ouroboros need not edit it"
    } else {
        "find what owns the Corefile (addon manager, Helm release, managed add-on) and switch to \
         --mode coredns-import (add `import /etc/coredns/custom/*.override` through that owner), \
         or to --mode external-dns"
    };
    Check::warn(
        ID,
        format!("our block was reverted {n} time(s): something else rewrites the Corefile"),
    )
    .evidence_all(last)
    .action(action)
}

/// A CoreDNS check skipped in a mode that does not edit CoreDNS; `None` in one that does.
pub fn skip_unless_coredns(id: &'static str, mode: Mode) -> Option<Check> {
    (!mode.spec().edits_coredns())
        .then(|| Check::skip(id, format!("mode {} does not edit CoreDNS", mode.name())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::ProxyAddrs;
    use crate::doctor::checks::fixtures::{cm, expect, hosts, proxy, PLAIN};
    use crate::doctor::report::Status;
    use serde_json::json;

    fn status_of(checks: &[Check], id: &str) -> Status {
        checks.iter().find(|c| c.id == id).unwrap().status
    }

    #[test]
    fn the_candidate_held_is_the_one_judged() {
        let h = hosts(&["a.example.com"]);
        let direct = Answer::Template(ProxyAddrs::new(&["10.96.7.7".parse().unwrap()]).unwrap());
        let relay = proxy();
        let both = [Expected::one(&h, &relay), Expected::one(&h, &direct)];
        let corefile_with = |a: &Answer| corefile::splice(PLAIN, &h, a).unwrap().text;
        let snippet_with = |e: &Expected<'_>| coredns_import::render_groups(&e.groups);
        // (mode, text, candidates, the answer of the one judged)
        let cases: Vec<(Mode, String, &[Expected<'_>], Option<&Answer>)> = vec![
            (Mode::Coredns, corefile_with(&direct), &both, Some(&direct)),
            (Mode::Coredns, corefile_with(&relay), &both, Some(&relay)),
            // Neither held (a stale block): judged by doctor's own pick, the first.
            (Mode::Coredns, PLAIN.into(), &both, Some(&relay)),
            (
                Mode::Coredns,
                corefile_with(&direct),
                &both[..1],
                Some(&relay),
            ),
            (Mode::Coredns, corefile_with(&direct), &[], None),
            (
                Mode::CorednsImport,
                snippet_with(&both[1]),
                &both,
                Some(&direct),
            ),
            (Mode::CorednsImport, String::new(), &both, Some(&relay)),
        ];
        for (mode, text, candidates, want) in cases {
            let got = held(mode, &text, candidates).map(|e| e.groups[0].answer);
            assert_eq!(got, want, "{mode:?} {text}");
        }
    }

    #[test]
    fn corefile_verdicts() {
        let h = hosts(&["a.example.com"]);
        let empty = BTreeSet::new();
        let current = corefile::splice(PLAIN, &h, &proxy()).unwrap().text;
        let stale = corefile::splice(PLAIN, &hosts(&["old.example.com"]), &proxy())
            .unwrap()
            .text;
        let no_reload = PLAIN.replace("    reload\n", "");
        let import = PLAIN.replace(
            "reload\n",
            "reload\n    import /etc/coredns/custom/*.override\n",
        );
        // (mode, corefile, hosts, id, want)
        let cases: Vec<(Mode, &str, &BTreeSet<Hostname>, &str, Status)> = vec![
            (Mode::Coredns, &current, &h, "coredns-block", Status::Ok),
            (Mode::Coredns, PLAIN, &h, "coredns-block", Status::Fail),
            (Mode::Coredns, &stale, &h, "coredns-block", Status::Fail),
            (Mode::Coredns, PLAIN, &empty, "coredns-block", Status::Ok),
            (
                Mode::CorednsImport,
                &current,
                &h,
                "coredns-block",
                Status::Warn,
            ),
            (Mode::CorednsImport, PLAIN, &h, "coredns-block", Status::Ok),
            (Mode::Coredns, PLAIN, &h, "coredns-reload", Status::Ok),
            (
                Mode::Coredns,
                &no_reload,
                &h,
                "coredns-reload",
                Status::Warn,
            ),
            (Mode::Coredns, PLAIN, &h, "coredns-import", Status::Ok),
            (
                Mode::CorednsImport,
                PLAIN,
                &h,
                "coredns-import",
                Status::Fail,
            ),
            (
                Mode::CorednsImport,
                &import,
                &h,
                "coredns-import",
                Status::Ok,
            ),
            (Mode::Coredns, PLAIN, &h, "coredns-corefile", Status::Ok),
            (
                Mode::Coredns,
                "example.org:53 {\n forward . 1.1.1.1\n}\n",
                &h,
                "coredns-corefile",
                Status::Fail,
            ),
        ];
        for (mode, text, hosts, id, want) in cases {
            let (checks, _) =
                corefile_checks(mode, text, expect(Some(hosts), Some(&proxy())).as_ref());
            assert_eq!(status_of(&checks, id), want, "{mode:?} {id} {text:?}");
        }
        let (checks, _) = corefile_checks(
            Mode::Coredns,
            &stale,
            expect(Some(&h), Some(&proxy())).as_ref(),
        );
        let (unknown, _) =
            corefile_checks(Mode::Coredns, &stale, expect(None, Some(&proxy())).as_ref());
        assert_eq!(status_of(&unknown, "coredns-block"), Status::Skip);
        let block = checks.iter().find(|c| c.id == "coredns-block").unwrap();
        assert_eq!(
            block.evidence,
            [
                r"missing: match ^a\.example\.com\.$",
                r"stale: match ^old\.example\.com\.$",
            ]
        );
    }

    /// The `view` form is judged as written (server blocks before the root block), and a stale
    /// set's one long line is cut short in the evidence.
    #[test]
    fn view_form_verdicts() {
        let view = Answer::View(ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap());
        let h = hosts(&["a.example.com"]);
        let current = corefile::splice(PLAIN, &h, &view).unwrap().text;
        let many: Vec<String> = (0..100).map(|i| format!("n{i}.example.com")).collect();
        let many = hosts(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let stale = corefile::splice(PLAIN, &many, &view).unwrap().text;
        let want = expect(Some(&h), Some(&view));
        let (checks, _) = corefile_checks(Mode::Coredns, &current, want.as_ref());
        assert_eq!(status_of(&checks, "coredns-block"), Status::Ok);
        let (checks, _) = corefile_checks(Mode::Coredns, &stale, want.as_ref());
        let block = checks.iter().find(|c| c.id == "coredns-block").unwrap();
        assert_eq!(block.status, Status::Fail);
        assert_eq!(
            block.evidence,
            [
                "missing: expr type() in ['A','AAAA'] && name() in ['a.example.com.']",
                "stale: expr type() in ['A','AAAA'] && name() in ['n0.example.com.','n1.example.com.',\
                 'n10.example.com.','n11.example.com.','n12.example.com.','n13.example.com.',\
                 'n14.e… (1932 bytes)",
            ]
        );
    }

    /// A set too large for the ConfigMap is said as such, with the ways out, not as a stale
    /// block.
    #[test]
    fn a_block_over_the_configmap_limit_is_named() {
        let names: Vec<String> = (0..40_000)
            .map(|i| format!("n{i}.example{i}.com"))
            .collect();
        let many = hosts(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let (checks, _) = corefile_checks(
            Mode::Coredns,
            PLAIN,
            expect(Some(&many), Some(&proxy())).as_ref(),
        );
        let block = checks.iter().find(|c| c.id == "coredns-block").unwrap();
        assert_eq!(block.status, Status::Fail);
        assert!(
            block.summary.contains("40000 hostname(s)"),
            "{}",
            block.summary
        );
        assert!(
            block
                .action
                .as_deref()
                .unwrap_or("")
                .contains("--coredns-answer view"),
            "{block:?}"
        );
    }

    #[test]
    fn import_snippet_verdicts() {
        let t = ConfigMapKey::import_default();
        let h = hosts(&["a.example.com"]);
        let good = coredns_import::render(&h, &proxy());
        for (got, want) in [
            (
                Ok(Some(cm(json!({"ouroboros.override": good})))),
                Status::Ok,
            ),
            (
                Ok(Some(cm(
                    json!({"ouroboros.override": coredns_import::render(&BTreeSet::new(), &proxy())}),
                ))),
                Status::Fail,
            ),
            (Ok(Some(cm(json!({})))), Status::Fail),
            (Ok(None), Status::Fail),
        ] {
            assert_eq!(
                import_snippet(&t, &got, &Expected::one(&h, &proxy())).status,
                want,
                "{got:?}"
            );
        }
    }

    fn event(count: Option<i32>, msg: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": "e"}, "involvedObject": {}, "count": count, "message": msg
        }))
        .unwrap()
    }

    #[test]
    fn reverted_verdicts() {
        let t = ConfigMapKey::coredns_default();
        let events = Ok(Some(vec![event(Some(4), "one"), event(None, "two")]));
        let c = block_reverted(Mode::Coredns, &t, &events, Some(true));
        assert_eq!(c.status, Status::Warn);
        assert!(c.summary.contains("5 time(s)"), "{c:?}");
        assert!(c.action.unwrap().contains("coredns-import"));
        assert_eq!(
            block_reverted(Mode::Coredns, &t, &Ok(Some(vec![])), None).status,
            Status::Ok
        );
        assert_eq!(
            block_reverted(Mode::CorednsImport, &t, &events, None).status,
            Status::Skip
        );
    }
}
