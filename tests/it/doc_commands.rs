//! The commands README.md and docs/*.md show, and the outputs they quote, run against the
//! binary, so a reworded error or a changed flag cannot leave them behind. Each is marked with
//! an HTML comment (parsed by tests/it/doc_markers.rs; the conventions are in docs/testing.md):
//!
//! - `<!-- doc-run: OPTIONS -->` before a fenced block: its one `ouroboros …` (or
//!   `cargo run -- …`) command runs; other lines of the block (`.ci/run`) are not run.
//! - `<!-- doc-run: OPTIONS -- ouroboros ARGS -->`: that command runs (a command the prose
//!   describes without showing it).
//! - `<!-- doc-quote: OPTIONS -- ouroboros ARGS -->`: that command runs, and the next inline
//!   code span after the marker appears verbatim in its output (runs of whitespace as one).
//! - `<!-- doc-file: NAME -->` before a fenced block: the block is the file NAME of the
//!   document's later commands.
//! - `<!-- doc-stdout -->` / `<!-- doc-stderr -->` before a fenced block: the last run's stdout,
//!   exactly; its stderr, line by line with the timestamps masked.
//! - `<!-- doc-golden: PATH -->` before a fenced block: the block is part of PATH, a golden file
//!   another test compares with the binary's output (output that needs a cluster, as doctor's).
//!
//! OPTIONS: `exit=N` (default 0), `out=TEXT` (the output contains TEXT; repeatable) and
//! `warn=TEXT` (WARN lines containing TEXT are documented output). A `doc-run` without a
//! `doc-stderr` block prints no other WARN line and no `warning:` line, nor an ERROR line
//! unless its documented exit code is not 0.
//!
//! Commands run in a temp dir holding the document's files and links to the repository's
//! `examples/` and `tests/`, with `HOME` there (no kubeconfig of the machine is read).

use std::path::Path;

use crate::common::{command, run, Output};
use crate::doc_markers::{code_span, commands, fenced_block, markers, one_line, words, Marker};
use crate::support::temp_dir;

const KINDS: &[&str] = &[
    "doc-file",
    "doc-golden",
    "doc-run",
    "doc-quote",
    "doc-stdout",
    "doc-stderr",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, docs/*.md and docs/cli/*.md (whose prose above the generated flag tables quotes
/// commands too).
fn documents() -> Vec<String> {
    let mut out = vec!["README.md".to_string()];
    for dir in ["docs", "docs/cli"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                out.push(format!(
                    "{dir}/{}",
                    p.file_name().unwrap().to_str().unwrap()
                ));
            }
        }
    }
    out.sort();
    out
}

/// What a `doc-run` or `doc-quote` marker expects.
#[derive(Debug, Default, PartialEq)]
struct Expect {
    exit: i32,
    out: Vec<String>,
    warn: Vec<String>,
}

/// A marker's options, and the command after `--` if it has one.
fn options(args: &str) -> Result<(Expect, Option<Vec<String>>), String> {
    let all = words(args)?;
    let (opts, cmd) = match all.iter().position(|w| w == "--") {
        Some(i) => (&all[..i], Some(all[i + 1..].to_vec())),
        None => (&all[..], None),
    };
    let mut e = Expect::default();
    for o in opts {
        match o.split_once('=') {
            Some(("exit", n)) => e.exit = n.parse().map_err(|_| format!("exit={n}"))?,
            Some(("out", t)) => e.out.push(one_line(t)),
            Some(("warn", t)) => e.warn.push(t.to_string()),
            _ => return Err(format!("unknown option {o:?} (exit=, out=, warn=)")),
        }
    }
    Ok((e, cmd))
}

/// The arguments after the program when `words` is a command of ours (`ouroboros ARGS` or
/// `cargo run -- ARGS`).
fn ours(words: &[String]) -> Option<&[String]> {
    match words {
        [p, rest @ ..] if p == "ouroboros" => Some(rest),
        [c, r, d, rest @ ..] if c == "cargo" && r == "run" && d == "--" => Some(rest),
        _ => None,
    }
}

/// The command a `doc-run` marker runs: the one after its `--`, else the one of ours in the
/// fenced block after it.
fn command_of(marker: &Marker, inline: Option<Vec<String>>) -> Result<Vec<String>, String> {
    if let Some(words) = inline {
        return ours(&words)
            .map(<[String]>::to_vec)
            .ok_or_else(|| format!("not a command of ours: {}", words.join(" ")));
    }
    let block = fenced_block(marker.after).ok_or("no fenced block after the marker")?;
    let mine: Vec<Vec<String>> = commands(&block)
        .iter()
        .filter_map(|w| ours(w).map(<[String]>::to_vec))
        .collect();
    match &mine[..] {
        [one] => Ok(one.clone()),
        _ => Err(format!(
            "{} commands of ours in the block (one)",
            mine.len()
        )),
    }
}

/// Runs `ouroboros ARGS` in `dir`.
fn run_in(dir: &Path, args: &[String]) -> Output {
    let mut cmd = command(&args[0]);
    cmd.args(&args[1..]).current_dir(dir).env("HOME", dir);
    run(&mut cmd, None)
}

/// The lines of `stderr` that warn: a WARN log line (text or JSON format) or a `warning:` line;
/// with `errors`, ERROR lines too (a command documented to fail prints its error at ERROR).
fn warnings(stderr: &str, errors: bool) -> Vec<&str> {
    let levels: &[&str] = if errors {
        &["WARN", "ERROR"]
    } else {
        &["WARN"]
    };
    stderr
        .lines()
        .filter(|l| {
            let text_level = l.split_whitespace().nth(1).unwrap_or_default();
            levels
                .iter()
                .any(|level| text_level == *level || l.contains(&format!(r#""level":"{level}""#)))
                || l.to_ascii_lowercase().starts_with("warning:")
        })
        .collect()
}

/// A log line with its leading timestamp replaced, so a quoted line compares with a new one.
fn masked(line: &str) -> String {
    let re = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z").unwrap();
    re.replace(line, "TIMESTAMP").into_owned()
}

/// Which output of `out` differs from a `doc-stdout` (exactly) or `doc-stderr` block (line by
/// line, timestamps masked), with what it was.
fn output_differs(stderr: bool, block: &str, out: &Output) -> Option<String> {
    if stderr {
        let got: Vec<String> = out.stderr.lines().map(masked).collect();
        let want: Vec<String> = block.lines().map(masked).collect();
        (got != want).then(|| format!("stderr ({})", out.stderr))
    } else {
        (out.stdout != block).then(|| format!("stdout ({})", out.stdout))
    }
}

/// What the markers of one document found wrong, and how many commands ran.
fn check_document(file: &str) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let mut all: Vec<(&str, Marker)> = KINDS
        .iter()
        .flat_map(|k| markers(&text, k).into_iter().map(move |m| (*k, m)))
        .collect();
    all.sort_by_key(|(_, m)| m.line);
    let dir = temp_dir("doc-commands");
    for d in ["examples", "tests"] {
        std::os::unix::fs::symlink(root().join(d), dir.path().join(d)).unwrap();
    }
    let mut errors = vec![];
    let mut ran = 0;
    // The last run, its expectations, and whether a doc-stderr block showed its stderr.
    let mut last: Option<(String, Expect, Output, bool)> = None;
    let finish = |last: Option<(String, Expect, Output, bool)>, errors: &mut Vec<String>| {
        let Some((what, expect, out, shown)) = last else {
            return;
        };
        if shown {
            return;
        }
        for w in warnings(&out.stderr, expect.exit == 0) {
            if !expect.warn.iter().any(|t| w.contains(t.as_str())) {
                errors.push(format!("{what}: a warning the document does not show: {w}"));
            }
        }
    };
    for (kind, m) in all {
        let at = format!("{file}:{}", m.line);
        let mut fail = |e: String| errors.push(format!("{at}: {kind}: {e}"));
        match kind {
            "doc-file" => match fenced_block(m.after) {
                Some(body) => std::fs::write(dir.path().join(m.args), body).unwrap(),
                None => fail("no fenced block after the marker".into()),
            },
            "doc-golden" => {
                if let Err(e) = in_golden_file(&m) {
                    fail(e);
                }
            }
            "doc-run" | "doc-quote" => {
                let parsed = options(m.args).and_then(|(e, inline)| {
                    if kind == "doc-quote" && inline.is_none() {
                        return Err("no `-- ouroboros ARGS` in the marker".into());
                    }
                    Ok((command_of(&m, inline)?, e))
                });
                let (args, expect) = match parsed {
                    Ok(p) => p,
                    Err(e) => {
                        fail(e);
                        continue;
                    }
                };
                finish(last.take(), &mut errors);
                let out = run_in(dir.path(), &args);
                ran += 1;
                let what = format!("{at}: ouroboros {}", args.join(" "));
                let both = one_line(&format!("{}\n{}", out.stdout, out.stderr));
                if out.code != expect.exit {
                    errors.push(format!(
                        "{what}: exit {} (documented: {})\n{}",
                        out.code, expect.exit, out.stderr
                    ));
                }
                for t in &expect.out {
                    if !both.contains(t.as_str()) {
                        errors.push(format!("{what}: no {t:?} in its output:\n{both}"));
                    }
                }
                if kind == "doc-quote" {
                    match code_span(m.after) {
                        Some(q) if both.contains(&q) => {}
                        Some(q) => errors.push(format!(
                            "{what}: the quoted text is not in its output\n  \
                             quoted: {q}\n  output: {both}"
                        )),
                        None => errors.push(format!("{what}: no `quote` after the marker")),
                    }
                }
                // A quote's command may warn: what it quotes often is the warning.
                let shown = kind == "doc-quote";
                last = Some((what, expect, out, shown));
            }
            "doc-stdout" | "doc-stderr" => {
                let (Some(block), Some(run)) = (fenced_block(m.after), last.as_mut()) else {
                    fail("no fenced block after it, or no doc-run before it".into());
                    continue;
                };
                let (what, _, out, shown) = run;
                *shown |= kind == "doc-stderr";
                if let Some(e) = output_differs(kind == "doc-stderr", &block, out) {
                    errors.push(format!(
                        "{at}: the {e} of {what} differs from the document's"
                    ));
                }
            }
            _ => unreachable!(),
        }
    }
    finish(last, &mut errors);
    (errors, ran)
}

/// A `doc-golden` marker's block is part of the golden file it names.
fn in_golden_file(m: &Marker) -> Result<(), String> {
    let path = m.args.trim();
    let body = fenced_block(m.after).ok_or("no fenced block after the marker")?;
    let golden = std::fs::read_to_string(root().join(path)).map_err(|e| format!("{path}: {e}"))?;
    if golden.contains(&body) {
        Ok(())
    } else {
        Err(format!("the block is not part of {path}"))
    }
}

#[test]
fn the_documented_commands_and_quoted_outputs_are_the_binarys() {
    let mut errors = vec![];
    let mut ran = 0;
    for doc in documents() {
        let (e, n) = check_document(&doc);
        errors.extend(e);
        ran += n;
    }
    assert!(
        errors.is_empty(),
        "the docs and the binary disagree (fix the document, or the binary if the document \
         says what it should do):\n\n{}",
        errors.join("\n\n")
    );
    assert!(
        ran >= 20,
        "only {ran} documented commands ran: markers lost?"
    );
}

/// README.md's "From a checkout": its first command renders the examples' Corefile with our
/// block, and prints no warning: a newcomer's first run shows nothing that looks wrong.
#[test]
fn the_quickstart_renders_the_examples_without_a_warning() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("## From a checkout")
        .expect("a From a checkout section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let marker = markers(section, "doc-run")
        .into_iter()
        .next()
        .expect("a doc-run marker in From a checkout");
    let args = command_of(&marker, None).unwrap();
    let out = run_in(root(), &args);
    assert_eq!(out.code, 0, "{}", out.stderr);

    // stdout: the examples' Corefile, our block added and nothing else changed. The command
    // gives CoreDNS 1.11.3, for which `auto` picks the view form: server blocks of their own
    // before the root block.
    let corefile = std::fs::read_to_string(root().join("examples/Corefile")).unwrap();
    let begin = "# === BEGIN ouroboros (do not edit by hand) ===\n";
    let end = "# === END ouroboros ===\n";
    let (before, rest) = out.stdout.split_once(begin).expect("our block");
    let (block, after) = rest.split_once(end).expect("our block's END marker");
    assert_eq!(format!("{before}{after}"), corefile);
    assert!(block.contains("view ouroboros {"), "{block}");
    assert!(
        block.contains(r#"answer "{{ .Name }} 30 IN A 10.96.0.10""#),
        "{block}"
    );

    // stderr: no WARN or ERROR line.
    let warned = warnings(&out.stderr, true);
    assert!(warned.is_empty(), "{warned:?}");
}

#[test]
fn marker_options_and_warning_lines_are_parsed() {
    assert_eq!(
        options("exit=64 out='a  b' warn=skipping -- ouroboros render x").unwrap(),
        (
            Expect {
                exit: 64,
                out: vec!["a b".into()],
                warn: vec!["skipping".into()],
            },
            Some(vec!["ouroboros".into(), "render".into(), "x".into()])
        )
    );
    assert_eq!(options("").unwrap(), (Expect::default(), None));
    assert!(options("exit=x").is_err() && options("stdout=x").is_err());
    let args = |s: &str| ours(&words(s).unwrap()).map(<[String]>::to_vec);
    assert_eq!(
        args("cargo run -- render x"),
        Some(vec!["render".into(), "x".into()])
    );
    assert_eq!(args("ouroboros --help"), Some(vec!["--help".into()]));
    assert_eq!(args(".ci/run"), None);
    let stderr = "2026-12-03T16:47:18.661072Z  WARN ouroboros::render: a\n\
        2026-12-03T16:47:18.662003Z  INFO ouroboros::render: WARN b\n\
        {\"level\":\"ERROR\",\"fields\":{}}\n\
        warning: c\n\
        error: d\n";
    assert_eq!(
        warnings(stderr, true),
        [
            "2026-12-03T16:47:18.661072Z  WARN ouroboros::render: a",
            "{\"level\":\"ERROR\",\"fields\":{}}",
            "warning: c",
        ]
    );
    assert_eq!(
        warnings(stderr, false),
        [
            "2026-12-03T16:47:18.661072Z  WARN ouroboros::render: a",
            "warning: c",
        ]
    );
    assert_eq!(
        masked("2026-12-03T16:47:18.661072Z  WARN x"),
        "TIMESTAMP  WARN x"
    );
}
