//! The marked block shared by the Corefile and hosts-file editors: finding it, removing it and
//! writing it so that removal is the exact inverse of insertion.
//!
//! A block is a run of whole lines from the BEGIN marker line to the END marker line. Removing it
//! deletes exactly those lines; when the END line is the last line of the text and has no line
//! ending, the line ending before the BEGIN line goes too, so a text without a final newline keeps
//! having none (that is how the writer appends to such a text).

use super::{BEGIN_MARKER, END_MARKER};

/// Where an existing block sits in a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// Start of the BEGIN line.
    pub start: usize,
    /// Just past the END line's line ending (or the end of the text).
    pub end: usize,
    /// Where removal starts: `start`, or earlier by the line ending before the BEGIN line when
    /// the END line ends the text without a line ending.
    pub removal_start: usize,
    /// The END line has a line ending.
    pub trailing_eol: bool,
    /// The BEGIN line's own line ending.
    pub begin_eol: &'static str,
    /// Length of the BEGIN line's leading whitespace.
    pub indent_len: usize,
    /// 1-based line numbers of the markers.
    pub begin_line: usize,
    pub end_line: usize,
}

impl Span {
    pub fn indent<'a>(&self, text: &'a str) -> &'a str {
        &text[self.start..self.start + self.indent_len]
    }
}

/// A marker problem, with the 1-based line to point at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MarkerError {
    pub line: usize,
    pub reason: String,
}

struct Marker {
    line: usize,
    start: usize,
    next: usize,
    has_eol: bool,
    eol: &'static str,
    indent_len: usize,
}

/// Finds the one well-formed block, if any. `what` names the file in messages.
pub(crate) fn find(text: &str, what: &str) -> Result<Option<Span>, MarkerError> {
    let mut begins: Vec<Marker> = Vec::new();
    let mut ends: Vec<Marker> = Vec::new();
    let mut start = 0;
    let mut line = 1;
    while start < text.len() {
        let (content_end, next, has_eol) = match text[start..].find('\n') {
            Some(i) => (start + i, start + i + 1, true),
            None => (text.len(), text.len(), false),
        };
        let content = &text[start..content_end];
        let trimmed = content.trim();
        let is_begin = trimmed == BEGIN_MARKER;
        if is_begin || trimmed == END_MARKER {
            let marker = Marker {
                line,
                start,
                next,
                has_eol,
                eol: if content.ends_with('\r') {
                    "\r\n"
                } else {
                    "\n"
                },
                indent_len: content.len() - content.trim_start().len(),
            };
            if is_begin {
                begins.push(marker);
            } else {
                ends.push(marker);
            }
        }
        start = next;
        line += 1;
    }
    let lines = |ms: &[Marker]| {
        ms.iter()
            .map(|m| m.line.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if begins.len() > 1 || ends.len() > 1 {
        let second = begins.get(1).or(ends.get(1)).map_or(1, |m| m.line);
        return Err(MarkerError {
            line: second,
            reason: format!(
                "the {what} has more than one ouroboros block (BEGIN markers on lines [{}], END \
                 markers on lines [{}]); delete all but one block, or all of them, and run again",
                lines(&begins),
                lines(&ends)
            ),
        });
    }
    match (begins.pop(), ends.pop()) {
        (None, None) => Ok(None),
        (Some(b), None) => Err(MarkerError {
            line: b.line,
            reason: format!(
                "the ouroboros BEGIN marker on line {} has no END marker ({END_MARKER:?}); \
                 restore the END line after the block or delete the partial block",
                b.line
            ),
        }),
        (None, Some(e)) => Err(MarkerError {
            line: e.line,
            reason: format!(
                "the ouroboros END marker on line {} has no BEGIN marker ({BEGIN_MARKER:?}); \
                 restore the BEGIN line before the block or delete the partial block",
                e.line
            ),
        }),
        (Some(b), Some(e)) if e.line < b.line => Err(MarkerError {
            line: e.line,
            reason: format!(
                "the ouroboros END marker on line {} comes before the BEGIN marker on line {}; \
                 put the block back in order or delete both markers and the lines between",
                e.line, b.line
            ),
        }),
        (Some(b), Some(e)) => {
            let mut removal_start = b.start;
            if !e.has_eol && b.start > 0 {
                // b.start is a line start, so the byte before it is '\n'.
                removal_start -= 1;
                if b.eol == "\r\n" && text[..removal_start].ends_with('\r') {
                    removal_start -= 1;
                }
            }
            Ok(Some(Span {
                start: b.start,
                end: e.next,
                removal_start,
                trailing_eol: e.has_eol,
                begin_eol: b.eol,
                indent_len: b.indent_len,
                begin_line: b.line,
                end_line: e.line,
            }))
        }
    }
}

/// The text without the block.
pub(crate) fn remove(text: &str, span: &Span) -> String {
    let mut out = String::with_capacity(text.len() - (span.end - span.removal_start));
    out.push_str(&text[..span.removal_start]);
    out.push_str(&text[span.end..]);
    out
}

/// The line ending to write: the first one in the text outside the block, else the block's own,
/// else LF. `base` is the text with the block removed.
pub(crate) fn eol(base: &str, span: Option<&Span>) -> &'static str {
    match base.find('\n') {
        Some(i) if base[..i].ends_with('\r') => "\r\n",
        Some(_) => "\n",
        None => span.map_or("\n", |s| s.begin_eol),
    }
}

/// 1-based line number of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    1 + text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// Start of the line holding `offset`.
pub(crate) fn line_start(text: &str, offset: usize) -> usize {
    text[..offset].rfind('\n').map_or(0, |i| i + 1)
}

/// Writes a block line by line into one growing buffer (linear in the number of lines).
pub(crate) struct Writer<'a> {
    out: String,
    indent: &'a str,
    eol: &'a str,
}

impl<'a> Writer<'a> {
    /// Starts with `prefix` (the pieces of text before the block) and the BEGIN line.
    pub fn new(prefix: &[&str], indent: &'a str, eol: &'a str, capacity: usize) -> Self {
        let mut out =
            String::with_capacity(prefix.iter().map(|p| p.len()).sum::<usize>() + capacity);
        for p in prefix {
            out.push_str(p);
        }
        let mut w = Self { out, indent, eol };
        w.line(&[BEGIN_MARKER]);
        w
    }

    pub fn line(&mut self, parts: &[&str]) {
        self.out.push_str(self.indent);
        for p in parts {
            self.out.push_str(p);
        }
        self.out.push_str(self.eol);
    }

    /// Writes the END line (with a line ending if `trailing_eol`) and then `suffix`.
    pub fn finish(mut self, trailing_eol: bool, suffix: &str) -> String {
        self.out.push_str(self.indent);
        self.out.push_str(END_MARKER);
        if trailing_eol {
            self.out.push_str(self.eol);
        }
        self.out.push_str(suffix);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(eol: &str) -> String {
        format!("{BEGIN_MARKER}{eol}x{eol}{END_MARKER}")
    }

    #[test]
    fn finds_and_removes() {
        let t = format!("a\n  {}\nb\n", block("\n"));
        let s = find(&t, "file").unwrap().unwrap();
        assert_eq!((s.begin_line, s.end_line), (2, 4));
        assert_eq!(s.indent(&t), "  ");
        assert!(s.trailing_eol);
        assert_eq!(remove(&t, &s), "a\nb\n");
        assert_eq!(find("a\nb", "file"), Ok(None));
    }

    #[test]
    fn block_at_end_without_newline_takes_the_newline_before_it() {
        for eol in ["\n", "\r\n"] {
            let t = format!("a{eol}{}", block(eol));
            let s = find(&t, "file").unwrap().unwrap();
            assert!(!s.trailing_eol);
            assert_eq!(remove(&t, &s), "a");
        }
        // A lone CR before an LF block stays.
        let t = format!("a\r\n{}", block("\n"));
        let s = find(&t, "file").unwrap().unwrap();
        assert_eq!(remove(&t, &s), "a\r");
        let t = block("\n");
        let s = find(&t, "file").unwrap().unwrap();
        assert_eq!(remove(&t, &s), "");
    }

    #[test]
    fn marker_errors_name_lines() {
        let b = format!("x\n{BEGIN_MARKER}\ny\n");
        assert_eq!(find(&b, "Corefile").unwrap_err().line, 2);
        let e = format!("{END_MARKER}\n");
        assert_eq!(find(&e, "Corefile").unwrap_err().line, 1);
        let rev = format!("{END_MARKER}\n{BEGIN_MARKER}\n");
        let err = find(&rev, "Corefile").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.reason.contains("before"), "{}", err.reason);
        let two = format!("{0}\n{1}\n{0}\n{1}\n", BEGIN_MARKER, END_MARKER);
        let err = find(&two, "Corefile").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.reason.contains("[1, 3]"), "{}", err.reason);
    }

    #[test]
    fn eol_prefers_text_outside_the_block() {
        assert_eq!(eol("a\r\nb\n", None), "\r\n");
        assert_eq!(eol("a\nb\r\n", None), "\n");
        assert_eq!(eol("", None), "\n");
        let t = block("\r\n");
        let s = find(&t, "f").unwrap().unwrap();
        assert_eq!(eol("", Some(&s)), "\r\n");
    }

    #[test]
    fn lines() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 4), 3);
        assert_eq!(line_start("a\nbc", 3), 2);
        assert_eq!(line_start("abc", 2), 0);
    }
}
