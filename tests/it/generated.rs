//! Sections of documents generated from the code (the chart's RBAC matrix and values table, the
//! flag reference of docs/cli): each lies between two marker lines, and a test compares it with
//! what the code generates now, or rewrites it in place when its switch is set (never in CI:
//! .ci/run refuses to start with one set).

use std::path::Path;

/// A section of a document: where it is, what it is called in messages, its markers, and the
/// switch and command that rewrite it.
pub struct Section<'a> {
    pub path: &'a Path,
    pub what: &'a str,
    pub begin: &'a str,
    pub end: &'a str,
    /// An environment variable: set to `1`, the section is rewritten instead of compared.
    pub switch: &'a str,
    /// The test command that rewrites it (with the switch), for the failure message.
    pub rewrite: &'a str,
}

impl Section<'_> {
    /// The section, markers included, must be `generated`; with the switch set to 1 it is
    /// rewritten instead.
    pub fn check(&self, generated: &str) {
        let path = self.path.display();
        let text = std::fs::read_to_string(self.path).unwrap();
        let span = text
            .find(self.begin)
            .and_then(|b| text[b..].find(self.end).map(|e| b..b + e + self.end.len()));
        let Some(span) = span else {
            panic!(
                "{path} has no {} markers: add the lines {:?} and {:?} where it goes",
                self.what, self.begin, self.end
            );
        };
        if std::env::var(self.switch).as_deref() == Ok("1") {
            let mut updated = text.clone();
            updated.replace_range(span, generated);
            std::fs::write(self.path, updated).unwrap();
            return;
        }
        let committed = &text[span];
        assert!(
            committed == generated,
            "the {} in {path} is out of date: run `{}=1 {}` and review the diff.\n{}",
            self.what,
            self.switch,
            self.rewrite,
            diff(committed, generated)
        );
    }
}

/// The lines where two texts differ: the common first and last lines left out, the rest of
/// each marked `-` (committed) and `+` (generated), numbered from the section's first line.
pub fn diff(committed: &str, generated: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) =
        (committed.lines().collect(), generated.lines().collect());
    let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = format!("@@ line {} @@\n", head + 1);
    for l in &old[head..old.len() - tail] {
        out.push_str(&format!("- {l}\n"));
    }
    for l in &new[head..new.len() - tail] {
        out.push_str(&format!("+ {l}\n"));
    }
    out
}

/// Markdown table cell text: `|` escaped everywhere, `<` outside code spans, line breaks as
/// spaces.
pub fn cell(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.replace('|', "\\|").replace('\n', " ");
            if i % 2 == 0 {
                part.replace('<', "&lt;")
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

#[test]
fn diff_shows_only_the_lines_that_differ() {
    assert_eq!(
        diff("a\nb\nc\nd\n", "a\nB\nc\nd\n"),
        "@@ line 2 @@\n- b\n+ B\n"
    );
    assert_eq!(diff("a\nb\n", "a\nb\nc\n"), "@@ line 3 @@\n+ c\n");
    assert_eq!(diff("x\n", "x\n"), "@@ line 2 @@\n");
}

#[test]
fn cells_escape_what_markdown_tables_read() {
    assert_eq!(cell("a | b <x> `<y>`"), "a \\| b &lt;x> `<y>`");
    assert_eq!(cell("one\ntwo"), "one two");
}
