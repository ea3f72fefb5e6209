//! A fast reader for the plain block-style YAML that `kubectl get -o yaml`, Helm and most
//! hand-written manifests use: block mappings and sequences indented with spaces, single-line
//! plain and quoted scalars, single-line flow sequences and mappings of scalars, comments, and
//! block scalars (`|`, `>`) whose text is not needed. It keeps only the parts of each document
//! that the host selection reads (see [`Level`]) and checks the syntax of the rest.
//!
//! Anything outside that subset (anchors, aliases, tags, multi-line flow or quoted scalars, tabs,
//! directives, plain scalars that may be numbers or booleans where a string is read...) makes it
//! give up on the whole file with `Err(Unsupported)`; the caller then reads the file with the
//! complete YAML parser. It never accepts a text the complete parser rejects, and where it
//! accepts, it yields the same values.

use std::borrow::Cow;

/// The text is outside the supported subset (or invalid): use the complete parser.
#[derive(Debug, PartialEq, Eq)]
pub struct Unsupported;

type R<T> = Result<T, Unsupported>;

/// One value, as far as it was kept.
#[derive(Clone, Debug, PartialEq)]
pub enum Node<'a> {
    /// `null`, `~` or nothing.
    Null,
    /// A scalar that resolves to a string.
    Str(Cow<'a, str>),
    /// A plain scalar that may resolve to a number or a boolean (`80`, `true`, `-1`, `.5`).
    Plain(&'a str),
    /// A block scalar (`|`, `>`): a string, text not kept.
    Block,
    Seq(Vec<Node<'a>>),
    Map(Vec<(Cow<'a, str>, Node<'a>)>),
    /// Checked but not kept (the selection does not read it).
    Skipped,
}

/// Where in a manifest a value sits, which decides what is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// A document or a `List` item: apiVersion, kind, metadata, spec, items.
    Root,
    /// metadata: name, namespace, annotations, deletionTimestamp.
    Meta,
    /// spec: the fields that carry hostnames, classes and parent references.
    Spec,
    /// items: a sequence of [`Level::Root`] objects.
    Items,
    /// Everything below.
    All,
    /// Nothing below.
    Skip,
}

impl Level {
    fn child(self, key: &str) -> Level {
        match self {
            Level::Root => match key {
                "apiVersion" | "kind" => Level::All,
                "metadata" => Level::Meta,
                "spec" => Level::Spec,
                "items" => Level::Items,
                _ => Level::Skip,
            },
            Level::Meta => match key {
                "name" | "namespace" | "annotations" | "deletionTimestamp" => Level::All,
                _ => Level::Skip,
            },
            Level::Spec => match key {
                "ingressClassName" | "tls" | "gatewayClassName" | "listeners" | "hostnames"
                | "parentRefs" => Level::All,
                _ => Level::Skip,
            },
            Level::Items | Level::Skip => Level::Skip,
            Level::All => Level::All,
        }
    }

    fn item(self) -> Level {
        match self {
            Level::Items => Level::Root,
            Level::All => Level::All,
            _ => Level::Skip,
        }
    }
}

/// Calls `each` with the root node of every document that has content, in order.
pub fn documents<'a>(text: &'a str, mut each: impl FnMut(Node<'a>) -> R<()>) -> R<()> {
    check_characters(text)?;
    let mut p = Parser {
        text,
        pos: 0,
        peeked: None,
    };
    // An optional `---` before the first document.
    p.document_start();
    loop {
        match p.peek()? {
            None => {}
            Some(line) => {
                if line.indent != 0 {
                    // Indented top-level content is valid YAML but unusual: leave it.
                    return Err(Unsupported);
                }
                let root = p.node(0, Level::Root)?;
                if p.peek()?.is_some() {
                    return Err(Unsupported);
                }
                if root != Node::Null {
                    each(root)?;
                }
            }
        }
        if !p.document_start() {
            return Ok(());
        }
    }
}

/// Characters YAML forbids or treats specially (control characters, other line breaks, BOMs,
/// tabs, lone carriage returns): their handling is left to the complete parser.
fn check_characters(text: &str) -> R<()> {
    let b = text.as_bytes();
    // Most text is printable ASCII and line feeds: test 64 bytes at a time (a branch-free test
    // the compiler vectorises) and look closer only at blocks with anything else.
    const BLOCK: usize = 64;
    for (n, block) in b.chunks(BLOCK).enumerate() {
        let odd = block.iter().fold(false, |acc, &c| {
            acc | ((c < 0x20) & (c != b'\n')) | (c >= 0x7f)
        });
        if odd {
            check_from(b, n * BLOCK, (n * BLOCK + block.len()).min(b.len()))?;
        }
    }
    Ok(())
}

/// The byte-by-byte check of `b[start..end]` (multi-byte sequences may read past `end`).
fn check_from(b: &[u8], start: usize, end: usize) -> R<()> {
    let mut i = start;
    while i < end {
        match b[i] {
            b'\n' | 0x20..=0x7e => {}
            b'\r' if b.get(i + 1) == Some(&b'\n') => {}
            0x00..=0x1f | 0x7f => return Err(Unsupported),
            // C1 controls and NEL (U+0080..U+009F)
            0xc2 if matches!(b.get(i + 1), Some(0x80..=0x9f)) => return Err(Unsupported),
            // U+2028, U+2029 (line breaks to libyaml)
            0xe2 if b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)) => {
                return Err(Unsupported)
            }
            // U+FEFF (BOM), U+FFFE, U+FFFF
            0xef if (b.get(i + 1) == Some(&0xbb) && b.get(i + 2) == Some(&0xbf))
                || (b.get(i + 1) == Some(&0xbf) && matches!(b.get(i + 2), Some(0xbe | 0xbf))) =>
            {
                return Err(Unsupported)
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// A line with content: its indentation and the text after it (without the line break and
/// trailing spaces). A line may be entered part-way, after a `- ` sequence indicator.
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    indent: usize,
    body: &'a str,
}

struct Parser<'a> {
    text: &'a str,
    /// Start of the next unread line.
    pos: usize,
    /// The current line (or what is left of it), not consumed yet.
    peeked: Option<Line<'a>>,
}

impl<'a> Parser<'a> {
    /// The raw next line from `pos` (without its line break), and where the one after starts.
    fn raw_line(&self) -> Option<(&'a str, usize)> {
        if self.pos >= self.text.len() {
            return None;
        }
        let rest = &self.text[self.pos..];
        // Lines are short: a plain loop beats a memchr call's setup.
        let (line, next) = match rest.bytes().position(|b| b == b'\n') {
            Some(n) => (&rest[..n], self.pos + n + 1),
            None => (rest, self.text.len()),
        };
        Some((line.strip_suffix('\r').unwrap_or(line), next))
    }

    /// Skips blank and comment lines; at a `---` line (or the end) the document ends.
    fn peek(&mut self) -> R<Option<Line<'a>>> {
        if let Some(l) = self.peeked {
            return Ok(Some(l));
        }
        while let Some((line, next)) = self.raw_line() {
            if is_marker(line, "---") {
                return Ok(None);
            }
            if line.starts_with('%') || is_marker(line, "...") {
                return Err(Unsupported);
            }
            let body = line.trim_start_matches(' ');
            self.pos = next;
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            let l = Line {
                indent: line.len() - body.len(),
                body: body.trim_end_matches(' '),
            };
            self.peeked = Some(l);
            return Ok(Some(l));
        }
        Ok(None)
    }

    fn consume(&mut self) {
        self.peeked = None;
    }

    /// At a `---` line: consumes it, true. At the end: false. (Content after `---` on the
    /// same line, other than a comment, is left to the complete parser via `peek`.)
    fn document_start(&mut self) -> bool {
        match self.raw_line() {
            Some((line, next)) if is_marker(line, "---") => {
                let rest = line[3..].trim_start_matches(' ');
                if rest.is_empty() || rest.starts_with('#') {
                    self.pos = next;
                } else {
                    // Inline content: make `peek` see it as an indented line, which is refused.
                    self.pos = next;
                    self.peeked = Some(Line {
                        indent: 4,
                        body: rest,
                    });
                }
                true
            }
            _ => false,
        }
    }

    /// A block node whose lines are indented at least `min`. With nothing there: null.
    fn node(&mut self, min: usize, level: Level) -> R<Node<'a>> {
        let Some(line) = self.peek()? else {
            return Ok(Node::Null);
        };
        if line.indent < min {
            return Ok(Node::Null);
        }
        if is_entry(line.body) {
            return self.seq(line.indent, level);
        }
        if split_key(line.body)?.is_some() {
            return self.map(line.indent, level);
        }
        // A scalar on a line of its own: it must end there (no multi-line plain scalars).
        self.consume();
        let v = inline_value(line.body, level)?;
        if matches!(v, Inline::BlockScalar) {
            return Err(Unsupported);
        }
        if self.peek()?.is_some_and(|l| l.indent >= min) {
            return Err(Unsupported);
        }
        Ok(v.into_node())
    }

    fn seq(&mut self, indent: usize, level: Level) -> R<Node<'a>> {
        let keep = level != Level::Skip;
        let mut items = Vec::new();
        while let Some(line) = self.peek()? {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(Unsupported);
            }
            if !is_entry(line.body) {
                // The parent mapping's next key (a sequence may sit at its key's indentation).
                break;
            }
            self.consume();
            let rest = &line.body[1..];
            let content = rest.trim_start_matches(' ');
            let item = if content.is_empty() || content.starts_with('#') {
                self.node(indent + 1, level.item())?
            } else {
                // Enter the rest of the line as a line of its own at its column.
                let col = indent + 1 + (rest.len() - content.len());
                self.peeked = Some(Line {
                    indent: col,
                    body: content,
                });
                if is_entry(content) || split_key(content)?.is_some() {
                    self.node(col, level.item())?
                } else {
                    self.consume();
                    let v = self.inline(content, indent, level.item())?;
                    if self.peek()?.is_some_and(|l| l.indent > indent) {
                        return Err(Unsupported);
                    }
                    v
                }
            };
            if keep {
                items.push(item);
            }
        }
        Ok(if keep {
            Node::Seq(items)
        } else {
            Node::Skipped
        })
    }

    fn map(&mut self, indent: usize, level: Level) -> R<Node<'a>> {
        let keep = level != Level::Skip;
        let mut entries: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
        while let Some(line) = self.peek()? {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(Unsupported);
            }
            let Some((key, value)) = split_key(line.body)? else {
                return Err(Unsupported);
            };
            self.consume();
            let child = level.child(&key);
            let node = if value.is_empty() || value.starts_with('#') {
                // The value is on the following lines: more indented, or a sequence at the
                // key's own indentation.
                match self.peek()? {
                    Some(l) if l.indent == indent && is_entry(l.body) => self.seq(indent, child)?,
                    Some(l) if l.indent > indent => self.node(indent + 1, child)?,
                    _ => Node::Null,
                }
            } else {
                let v = self.inline(value, indent, child)?;
                if self.peek()?.is_some_and(|l| l.indent > indent) {
                    return Err(Unsupported);
                }
                v
            };
            // Duplicates of a kept key are an error to the typed reader; others are ignored.
            if keep && child != Level::Skip {
                if entries.iter().any(|(k, _)| *k == key) {
                    return Err(Unsupported);
                }
                entries.push((key, node));
            }
        }
        Ok(if keep {
            Node::Map(entries)
        } else {
            Node::Skipped
        })
    }

    /// A value written after `key: ` or `- `; `parent` is the indentation a block scalar's
    /// lines must exceed.
    fn inline(&mut self, text: &'a str, parent: usize, level: Level) -> R<Node<'a>> {
        match inline_value(text, level)? {
            Inline::BlockScalar => {
                self.skip_block_scalar(parent)?;
                Ok(if level == Level::Skip {
                    Node::Skipped
                } else {
                    Node::Block
                })
            }
            v => Ok(v.into_node()),
        }
    }

    /// Skips the lines of a block scalar: blank lines and lines indented more than `parent`,
    /// all at least as indented as the first non-blank one.
    fn skip_block_scalar(&mut self, parent: usize) -> R<()> {
        let mut content_indent = None;
        let mut max_blank = 0;
        while let Some((line, next)) = self.raw_line() {
            let body = line.trim_start_matches(' ');
            let indent = line.len() - body.len();
            if body.is_empty() {
                max_blank = max_blank.max(indent);
                self.pos = next;
                continue;
            }
            if indent <= parent {
                break;
            }
            match content_indent {
                None => {
                    if max_blank > indent {
                        return Err(Unsupported);
                    }
                    content_indent = Some(indent);
                }
                Some(c) if indent < c => return Err(Unsupported),
                Some(_) => {}
            }
            self.pos = next;
        }
        Ok(())
    }
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.starts_with(marker) && matches!(line.as_bytes().get(3), None | Some(b' ' | b'\t' | b'\r'))
}

/// `- ...` or a lone `-`: a block sequence entry.
fn is_entry(body: &str) -> bool {
    let b = body.as_bytes();
    b.first() == Some(&b'-') && matches!(b.get(1), None | Some(b' '))
}

/// `key: value` (value possibly empty, or a comment): `Some((key, value))`; a line that is not
/// a mapping entry: `None`.
fn split_key(body: &str) -> R<Option<(Cow<'_, str>, &str)>> {
    let b = body.as_bytes();
    match b.first() {
        Some(b'"') | Some(b'\'') => {
            let (key, used) = quoted(body)?;
            let rest = &body[used..];
            match rest.strip_prefix(':') {
                Some(v) if v.is_empty() || v.starts_with(' ') => {
                    check_key(&key, true)?;
                    Ok(Some((key, v.trim_start_matches(' '))))
                }
                // A quoted scalar alone on its line.
                _ if rest.trim_start_matches(' ').is_empty()
                    || rest.trim_start_matches(' ').starts_with('#') =>
                {
                    Ok(None)
                }
                _ => Err(Unsupported),
            }
        }
        Some(b'[' | b'{') => Ok(None),
        _ => {
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b':' if matches!(b.get(i + 1), None | Some(b' ')) => {
                        let key = &body[..i];
                        check_key(key, false)?;
                        return Ok(Some((
                            Cow::Borrowed(key),
                            body[i + 1..].trim_start_matches(' '),
                        )));
                    }
                    // A comment: no key before it.
                    b'#' if i > 0 && b[i - 1] == b' ' => return Ok(None),
                    _ => {}
                }
                i += 1;
            }
            Ok(None)
        }
    }
}

/// Plain keys are taken as written (`apiVersion`, `app.kubernetes.io/name`, `.`, `80`): serde
/// reads every key as its text. Keys starting with an indicator, or with spaces before the
/// colon, are left to the complete parser.
fn check_key(key: &str, quoted: bool) -> R<()> {
    if quoted {
        return Ok(());
    }
    if key.is_empty() || key.ends_with(' ') || starts_with_indicator(key) {
        return Err(Unsupported);
    }
    Ok(())
}

fn starts_with_indicator(s: &str) -> bool {
    matches!(
        s.as_bytes().first(),
        Some(
            b'-' | b'?'
                | b':'
                | b','
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'#'
                | b'&'
                | b'*'
                | b'!'
                | b'|'
                | b'>'
                | b'\''
                | b'"'
                | b'%'
                | b'@'
                | b'`'
        )
    )
}

/// A plain scalar that the YAML core schema might resolve to something other than a string
/// (or that is close enough to one to leave to the complete parser).
fn ambiguous(s: &str) -> bool {
    match s.as_bytes().first() {
        None => true,
        Some(b'0'..=b'9' | b'+' | b'-' | b'.' | b'~') => true,
        Some(_) => {
            s.len() <= 5
                && ["true", "false", "null", "yes", "no", "on", "off", "y", "n"]
                    .iter()
                    .any(|w| s.eq_ignore_ascii_case(w))
        }
    }
}

fn is_null(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

enum Inline<'a> {
    Node(Node<'a>),
    BlockScalar,
}

impl<'a> Inline<'a> {
    fn into_node(self) -> Node<'a> {
        match self {
            Inline::Node(n) => n,
            Inline::BlockScalar => Node::Block,
        }
    }
}

/// A value on one line: a scalar, a flow collection, or a block scalar header.
fn inline_value(text: &str, level: Level) -> R<Inline<'_>> {
    let keep = level != Level::Skip;
    let b = text.as_bytes();
    match b[0] {
        b'|' | b'>' => {
            // Header: an optional chomping indicator, then an optional comment (an
            // indentation indicator is left to the complete parser).
            let h = &text[1..];
            let h = h.strip_prefix(['-', '+']).unwrap_or(h);
            let after = h.trim_start_matches(' ');
            if after.is_empty() || (after.starts_with('#') && after.len() < h.len()) {
                Ok(Inline::BlockScalar)
            } else {
                Err(Unsupported)
            }
        }
        b'"' | b'\'' => {
            let (s, used) = quoted(text)?;
            end_of_value(&text[used..])?;
            Ok(Inline::Node(if keep {
                Node::Str(s)
            } else {
                Node::Skipped
            }))
        }
        b'[' | b'{' => {
            let (node, used) = flow(text, keep)?;
            end_of_value(&text[used..])?;
            Ok(Inline::Node(node))
        }
        _ => {
            if starts_with_indicator(text) {
                // `-x`, `?x`, `:x` are plain scalars; everything else here is not supported.
                let c = b[0];
                let next = b.get(1).copied();
                if !(matches!(c, b'-' | b'?' | b':') && next.is_some_and(|n| n != b' ')) {
                    return Err(Unsupported);
                }
            }
            let s = plain(text)?;
            Ok(Inline::Node(if !keep { Node::Skipped } else { scalar(s) }))
        }
    }
}

/// A plain scalar's value in block context: up to a comment; no `: ` (a nested mapping on the
/// same line is an error), no trailing `:`.
fn plain(text: &str) -> R<&str> {
    let b = text.as_bytes();
    let mut end = b.len();
    for i in 0..b.len() {
        match b[i] {
            b'#' if i > 0 && b[i - 1] == b' ' => {
                end = i;
                break;
            }
            b':' if matches!(b.get(i + 1), None | Some(b' ')) => return Err(Unsupported),
            _ => {}
        }
    }
    Ok(text[..end].trim_end_matches(' '))
}

fn scalar(s: &str) -> Node<'_> {
    if is_null(s) {
        Node::Null
    } else if ambiguous(s) {
        Node::Plain(s)
    } else {
        Node::Str(Cow::Borrowed(s))
    }
}

/// After a quoted scalar or a flow collection: nothing, or a comment.
fn end_of_value(rest: &str) -> R<()> {
    let t = rest.trim_start_matches(' ');
    if t.is_empty() || (t.starts_with('#') && t.len() < rest.len()) {
        Ok(())
    } else {
        Err(Unsupported)
    }
}

/// A single- or double-quoted scalar at the start of `text`, closed on the same line: its value
/// and the bytes it used.
fn quoted(text: &str) -> R<(Cow<'_, str>, usize)> {
    let b = text.as_bytes();
    let q = b[0];
    let mut i = 1;
    let mut owned: Option<String> = None;
    let mut start = 1;
    while i < b.len() {
        let c = b[i];
        if c == q {
            if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                let s = owned.get_or_insert_with(String::new);
                s.push_str(&text[start..=i]);
                i += 2;
                start = i;
                continue;
            }
            let value = match owned {
                None => Cow::Borrowed(&text[1..i]),
                Some(mut s) => {
                    s.push_str(&text[start..i]);
                    Cow::Owned(s)
                }
            };
            return Ok((value, i + 1));
        }
        if q == b'"' && c == b'\\' {
            let esc = match b.get(i + 1) {
                Some(b'\\') => '\\',
                Some(b'"') => '"',
                Some(b'/') => '/',
                Some(b'n') => '\n',
                Some(b't') => '\t',
                _ => return Err(Unsupported),
            };
            let s = owned.get_or_insert_with(String::new);
            s.push_str(&text[start..i]);
            s.push(esc);
            i += 2;
            start = i;
            continue;
        }
        i += 1;
    }
    // Not closed on this line: a multi-line scalar (or an error).
    Err(Unsupported)
}

/// A flow sequence (`[a, "b"]`) or mapping (`{name: x, ports: [1]}`) on one line: the node and
/// the bytes used. Empty entries, trailing commas, implicit pairs and multi-line collections are
/// left to the complete parser.
fn flow(text: &str, keep: bool) -> R<(Node<'_>, usize)> {
    flow_at(text, keep, 0)
}

fn flow_at(text: &str, keep: bool, depth: usize) -> R<(Node<'_>, usize)> {
    if depth > 16 {
        return Err(Unsupported);
    }
    let b = text.as_bytes();
    let (open, close) = (b[0], if b[0] == b'[' { b']' } else { b'}' });
    let mut i = 1;
    let mut seq = Vec::new();
    let mut map: Vec<(Cow<'_, str>, Node<'_>)> = Vec::new();
    let skip_spaces = |i: &mut usize| {
        while *i < b.len() && b[*i] == b' ' {
            *i += 1;
        }
    };
    let done = |seq, map, i: usize| {
        let node = match (keep, open) {
            (false, _) => Node::Skipped,
            (true, b'[') => Node::Seq(seq),
            (true, _) => Node::Map(map),
        };
        Ok((node, i + 1))
    };
    skip_spaces(&mut i);
    if b.get(i) == Some(&close) {
        return done(seq, map, i);
    }
    loop {
        skip_spaces(&mut i);
        if open == b'{' {
            // key: value
            let (key, used) = flow_scalar(&text[i..])?;
            i += used;
            skip_spaces(&mut i);
            if b.get(i) != Some(&b':') || !matches!(b.get(i + 1), Some(b' ')) {
                return Err(Unsupported);
            }
            i += 1;
            skip_spaces(&mut i);
            let key = match key {
                FlowScalar::Quoted(k) => k,
                FlowScalar::Plain(k) => Cow::Borrowed(k),
            };
            let (value, used) = flow_item(&text[i..], keep, depth)?;
            i += used;
            if keep {
                if map.iter().any(|(k, _)| *k == key) {
                    return Err(Unsupported);
                }
                map.push((key, value));
            }
        } else {
            let (item, used) = flow_item(&text[i..], keep, depth)?;
            i += used;
            if keep {
                seq.push(item);
            }
        }
        skip_spaces(&mut i);
        match b.get(i) {
            Some(b',') => {
                i += 1;
                skip_spaces(&mut i);
                if matches!(b.get(i), Some(b']' | b'}' | b',') | None) {
                    // A trailing comma or an empty entry: leave it to the complete parser.
                    return Err(Unsupported);
                }
            }
            Some(&c) if c == close => return done(seq, map, i),
            _ => return Err(Unsupported),
        }
    }
}

/// One entry of a flow collection: a nested collection or a scalar.
fn flow_item(text: &str, keep: bool, depth: usize) -> R<(Node<'_>, usize)> {
    match text.as_bytes().first() {
        Some(b'[' | b'{') => flow_at(text, keep, depth + 1),
        _ => {
            let (v, used) = flow_scalar(text)?;
            Ok((if keep { v.into_node() } else { Node::Skipped }, used))
        }
    }
}

enum FlowScalar<'a> {
    Quoted(Cow<'a, str>),
    Plain(&'a str),
}

impl<'a> FlowScalar<'a> {
    fn into_node(self) -> Node<'a> {
        match self {
            FlowScalar::Quoted(s) => Node::Str(s),
            FlowScalar::Plain(s) => scalar(s),
        }
    }
}

/// A scalar inside a flow collection: quoted, or plain up to `,` `]` `}` or `: `.
fn flow_scalar(text: &str) -> R<(FlowScalar<'_>, usize)> {
    let b = text.as_bytes();
    match b.first() {
        Some(b'"' | b'\'') => {
            let (s, used) = quoted(text)?;
            Ok((FlowScalar::Quoted(s), used))
        }
        None => Err(Unsupported),
        Some(_) if starts_with_indicator(text) => Err(Unsupported),
        Some(_) => {
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b',' | b']' | b'}' | b'[' | b'{' => break,
                    b':' if matches!(b.get(i + 1), None | Some(b' ' | b',' | b']' | b'}')) => break,
                    b'#' if i > 0 && b[i - 1] == b' ' => return Err(Unsupported),
                    _ => {}
                }
                i += 1;
            }
            if matches!(b.get(i), Some(b'[' | b'{')) {
                return Err(Unsupported);
            }
            let s = text[..i].trim_end_matches(' ');
            // `[http://x]`: YAML parsers have disagreed on colons in flow scalars.
            if s.is_empty() || s.contains(':') {
                return Err(Unsupported);
            }
            Ok((FlowScalar::Plain(s), i))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> R<Vec<Node<'_>>> {
        let mut out = Vec::new();
        documents(text, |n| {
            out.push(n);
            Ok(())
        })?;
        Ok(out)
    }

    fn s(v: &str) -> Node<'_> {
        Node::Str(Cow::Borrowed(v))
    }

    fn map<'a>(entries: Vec<(&'a str, Node<'a>)>) -> Node<'a> {
        Node::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Cow::Borrowed(k), v))
                .collect(),
        )
    }

    #[test]
    fn keeps_what_the_selection_reads() {
        let text = "# leading comment\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress # c\nmetadata:\n  name: web\n  labels:\n    app: web\n  annotations:\n    kubernetes.io/ingress.class: 'nginx'\n    long: |\n      {\"a\": 1}\n\n      more\nspec:\n  rules:\n  - host: x.example.com\n    http: {paths: []}\n  tls:\n  - hosts:\n    - \"a.example.com\"\n    - b.example.com\n    secretName: s\n  - hosts: [c.example.com, 'd.example.com']\n---\n# empty\n---\nkind: Other\n";
        let got = docs(text).unwrap();
        assert_eq!(
            got,
            vec![
                map(vec![
                    ("apiVersion", s("networking.k8s.io/v1")),
                    ("kind", s("Ingress")),
                    (
                        "metadata",
                        map(vec![
                            ("name", s("web")),
                            (
                                "annotations",
                                map(vec![
                                    ("kubernetes.io/ingress.class", s("nginx")),
                                    ("long", Node::Block),
                                ])
                            ),
                        ])
                    ),
                    (
                        "spec",
                        map(vec![(
                            "tls",
                            Node::Seq(vec![
                                map(vec![
                                    (
                                        "hosts",
                                        Node::Seq(vec![s("a.example.com"), s("b.example.com")])
                                    ),
                                    ("secretName", s("s")),
                                ]),
                                map(vec![(
                                    "hosts",
                                    Node::Seq(vec![s("c.example.com"), s("d.example.com")])
                                )]),
                            ])
                        )])
                    ),
                ]),
                map(vec![("kind", s("Other"))]),
            ]
        );
    }

    #[test]
    fn scalars_resolve_like_the_core_schema() {
        let text = "spec:\n  listeners:\n  - name: a\n    port: 443\n    x: ~\n    q:\n    z: \"it's\"\n    w: 'it''s'\n    v: \"a\\\"b\"\n    t: true\n    u: -x\n";
        let got = docs(text).unwrap();
        let Node::Map(root) = &got[0] else { panic!() };
        let Node::Map(spec) = &root[0].1 else {
            panic!()
        };
        let Node::Seq(items) = &spec[0].1 else {
            panic!()
        };
        assert_eq!(
            items[0],
            map(vec![
                ("name", s("a")),
                ("port", Node::Plain("443")),
                ("x", Node::Null),
                ("q", Node::Null),
                ("z", s("it's")),
                ("w", Node::Str(Cow::Owned("it's".into()))),
                ("v", Node::Str(Cow::Owned("a\"b".into()))),
                ("t", Node::Plain("true")),
                ("u", Node::Plain("-x")),
            ])
        );
    }

    #[test]
    fn compact_and_nested_sequences() {
        let text = "spec:\n  listeners:\n    -   name: a\n        port: 1\n    -\n      name: b\n  hostnames:\n  - - x\n    - w\n  - z\n";
        let got = docs(text).unwrap();
        assert_eq!(
            got[0],
            map(vec![(
                "spec",
                map(vec![
                    (
                        "listeners",
                        Node::Seq(vec![
                            map(vec![("name", s("a")), ("port", Node::Plain("1"))]),
                            map(vec![("name", s("b"))]),
                        ])
                    ),
                    (
                        "hostnames",
                        Node::Seq(vec![Node::Seq(vec![s("x"), s("w")]), s("z")])
                    ),
                ])
            )])
        );
    }

    /// Valid YAML outside the subset, and invalid YAML: both refused.
    #[test]
    fn refuses_what_it_does_not_cover() {
        for text in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: \"multi\n  line\"\n",
            "a: plain\n  continued\n",
            "a: [1,\n  2]\n",
            "a:\n\t- b\n",
            "%YAML 1.2\n---\na: 1\n",
            "--- a\n",
            "a: 1\n...\n",
            "? a\n: b\n",
            "a: b: c\n",
            "a:\n  b: 1\n c: 2\n",
            "a:\n  - 1\n  b: 2\n",
            "a: [unclosed\n",
            "a: 'unclosed\n",
            "a: \"\\u0041\"\n",
            "kind: a\nkind: b\n",
            "  a: 1\n",
            "a: |2\n   x\n",
            "a: |\n    x\n  y\n",
            "a: x\u{85}\n",
            "\u{feff}a: 1\n",
            "a: [b,]\n",
            "a: {b: [c,]}\n",
            "a: [http://x]\n",
            "spec: {hostnames: [c], hostnames: d}\n",
            "a: - b\n",
            "- x: 1\n  -y: 2\n",
            "a: b\r c\n",
        ] {
            assert_eq!(docs(text), Err(Unsupported), "{text:?}");
        }
    }

    #[test]
    fn skipped_parts_are_still_checked() {
        // `rules` is not kept, but its syntax must be valid.
        assert!(
            docs("kind: Ingress\nspec:\n  rules:\n  - host: a\n    http:\n      paths: []\n")
                .is_ok()
        );
        assert_eq!(
            docs("kind: Ingress\nspec:\n  rules:\n  - host: [a\n"),
            Err(Unsupported)
        );
        assert_eq!(
            docs("kind: Ingress\nstatus:\n  x: y: z\n"),
            Err(Unsupported)
        );
    }

    #[test]
    fn characters_are_checked_across_blocks() {
        // Multi-byte characters placed at every offset around the 64-byte blocks.
        for pad in 50..80 {
            let at = |c: &str| format!("a: {}{c}\n", "x".repeat(pad));
            assert!(check_characters(&at("\u{e9}")).is_ok(), "{pad}");
            assert!(check_characters(&at("\u{2027}")).is_ok(), "{pad}");
            for bad in ["\u{85}", "\u{2028}", "\u{feff}", "\u{1}", "\rx", "\t"] {
                assert_eq!(
                    check_characters(&at(bad)),
                    Err(Unsupported),
                    "{pad} {bad:?}"
                );
            }
        }
        assert!(check_characters("a: b\r\n").is_ok());
    }

    #[test]
    fn crlf_and_comments() {
        let got = docs("kind: A\r\n# c\r\nmetadata:\r\n  name: nm # trailing\r\n").unwrap();
        assert_eq!(
            got[0],
            map(vec![
                ("kind", s("A")),
                ("metadata", map(vec![("name", s("nm"))])),
            ])
        );
    }
}
