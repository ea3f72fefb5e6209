//! The markers that make a document's commands and quoted outputs tests: an HTML comment
//! `<!-- NAME: ARGS -->` (invisible when the Markdown is rendered) before the fenced block or
//! inline code span it is about. One parser for every marker kind: `image-cli`
//! (tests/it/image_cli_doc.rs) and the `doc-*` markers (tests/it/doc_commands.rs).

/// One marker: where it is, its arguments, and the document text after it.
pub struct Marker<'a> {
    /// 1-based line of the marker in its document.
    pub line: usize,
    /// What follows `NAME:` (or nothing), trimmed.
    pub args: &'a str,
    /// The document after the marker's `-->`.
    pub after: &'a str,
}

/// The markers named `name` in `text`, in order (`<!-- name -->` or `<!-- name: ARGS -->`).
pub fn markers<'a>(text: &'a str, name: &str) -> Vec<Marker<'a>> {
    let open = format!("<!-- {name}");
    let mut out = vec![];
    let mut from = 0;
    while let Some(at) = text[from..].find(&open).map(|i| from + i) {
        let rest = &text[at + open.len()..];
        let end = rest
            .find("-->")
            .unwrap_or_else(|| panic!("line {}: an unclosed `{open}` marker", line_of(text, at)));
        let inner = &rest[..end];
        from = at + open.len() + end + 3;
        // A marker in backticks is shown, not meant (docs/testing.md lists them).
        if text[..at].ends_with('`') {
            continue;
        }
        // `<!-- doc-run` must not also match `<!-- doc-runner`.
        let args = match inner.strip_prefix(':') {
            Some(args) => args.trim(),
            None if inner.trim().is_empty() => "",
            None => continue,
        };
        out.push(Marker {
            line: line_of(text, at),
            args,
            after: &text[from..],
        });
    }
    out
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The content of the first fenced block in `text` (without its fences), or None.
pub fn fenced_block(text: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("```"));
    let fence = lines.next()?;
    // A fence indented in a list item: its lines lose as much indentation as the fence has,
    // as Markdown renders them.
    let indent = fence.len() - fence.trim_start().len();
    let body: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with("```"))
        .collect();
    Some(
        body.iter()
            .map(|l| {
                let cut = l.len() - l.trim_start().len();
                format!("{}\n", &l[cut.min(indent)..])
            })
            .collect(),
    )
}

/// The first inline code span in `text` (single backticks, possibly over several lines), its
/// runs of whitespace as one space.
pub fn code_span(text: &str) -> Option<String> {
    let start = text.find('`')? + 1;
    let len = text[start..].find('`')?;
    Some(one_line(&text[start..start + len]))
}

/// `text` with each run of whitespace (line breaks included) as one space, trimmed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The commands of a shell block: continuation lines (`\` at the end) joined, comments and
/// blank lines dropped, each command split into words as the shell would (quotes removed).
/// Shell features a test cannot reproduce without a shell (variables, pipes, redirections,
/// command lists) are refused with a message naming the command.
pub fn commands(block: &str) -> Vec<Vec<String>> {
    block
        .replace("\\\n", " ")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| words(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// One command line as its words: `'…'` and `"…"` quote (and are removed), `#` at the start of
/// a word begins a comment.
pub fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => out.extend(word.take()),
            '#' if word.is_none() => break,
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('$') if c == '"' => return Err("a variable in a command".into()),
                        Some(x) => w.push(x),
                        None => return Err(format!("an unclosed {c}")),
                    }
                }
            }
            '$' | '|' | '>' | '<' | ';' | '&' | '`' | '\\' => {
                return Err(format!(
                    "`{c}` needs a shell, which these commands do not run in"
                ))
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    Ok(out)
}

#[test]
fn markers_are_found_with_their_arguments_and_what_follows() {
    let doc = "a\n<!-- doc-run: exit=64 -->\n```sh\nouroboros x\n```\n\
        <!-- doc-runner: no --> `<!-- doc-run: shown -->`\nsee <!-- doc-run --> `the\n  quote` and `more`\n";
    let found = markers(doc, "doc-run");
    assert_eq!(found.len(), 2);
    assert_eq!((found[0].line, found[0].args), (2, "exit=64"));
    assert_eq!(
        fenced_block(found[0].after).as_deref(),
        Some("ouroboros x\n")
    );
    assert_eq!((found[1].line, found[1].args), (7, ""));
    assert_eq!(code_span(found[1].after).as_deref(), Some("the quote"));
    assert_eq!(fenced_block(found[1].after), None);
}

#[test]
fn commands_are_split_as_the_shell_would() {
    let block = "# a comment\nouroboros render coredns \\\n  --target 'name=a,x=y' \"b c\" - # note\n\ncargo run -- x\n";
    assert_eq!(
        commands(block),
        [
            vec![
                "ouroboros",
                "render",
                "coredns",
                "--target",
                "name=a,x=y",
                "b c",
                "-"
            ],
            vec!["cargo", "run", "--", "x"],
        ]
    );
    for bad in ["a $X", "a \"$X\"", "a | b", "a > f", "a && b", "a 'open"] {
        assert!(words(bad).is_err(), "{bad}");
    }
}

#[test]
fn an_indented_fence_loses_its_indentation() {
    assert_eq!(
        fenced_block("1. step\n\n   ```sh\n   a\n     b\n\n   ```\n").as_deref(),
        Some("a\n  b\n\n")
    );
}
