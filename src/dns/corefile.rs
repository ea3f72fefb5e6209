//! Our marked block inside the Corefile's root server block: the rules of [`super::answer`].
//!
//! The Corefile is read the way CoreDNS's lexer reads it: tokens split on whitespace, `#` starts a
//! comment anywhere outside quotes, a `"` at the start of a token opens a quoted token (which may
//! span lines and escapes `\"`), and only a bare `{` or `}` token opens or closes a block, so
//! braces in comments, quotes or words such as `{$ENV}` do not count.
//!
//! The block goes into the root block (`.:53`, `.`) because that is where public names are
//! resolved; [`Findings::shadowing`] lists the server blocks for more specific zones that would
//! take a hairpinned name's queries away from it (CoreDNS routes a query to the server block with
//! the longest matching zone).

use std::borrow::Cow;
use std::collections::BTreeSet;

use super::answer::{self, Answer, Group, Listen};
use super::block::{self, Writer};
use super::rewrite_rule::NameRule;
use crate::hostname::Hostname;

/// What the Corefile tells us beyond the edit (for warnings and `doctor`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// The root server block has the `reload` plugin (otherwise CoreDNS needs a restart).
    pub has_reload: bool,
    /// The root server block already has `import /etc/coredns/custom/*.override` (or the relative
    /// `import custom/*.override` that AKS writes next to `/etc/coredns/Corefile`).
    pub imports_custom_override: bool,
    /// Hairpinned names whose queries another server block takes: one for a more specific zone
    /// on the root block's port (a user's `example.com:53 { … }`). CoreDNS routes each query to
    /// the block with the longest matching zone, so our block never sees these names.
    pub shadowing: Vec<Shadow>,
    /// Hairpinned names that a `rewrite` rule outside our block takes, in every form but
    /// `view` (whose blocks the root block's plugins never see): see [`super::rewrite_rule`].
    pub rewritten: Vec<Rewritten>,
    /// The `view` form was asked for, but the Corefile is node-local-dns's (no `kubernetes`
    /// plugin, a `bind` to its link-local address or placeholder), whose node-cache has no `view` plugin and would refuse to start
    /// ("no action found for directive 'view'"): the template pair was written instead.
    pub view_as_pair: bool,
}

/// A hairpinned name that another part of the Corefile takes from our block: a more specific
/// server block or a foreign `rewrite` rule, with the sentence that says so and what to do, for
/// `render`'s warning and the controller's log line and Event alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken<'a> {
    pub host: &'a str,
    /// The server block's keys, or the rewrite rule, as written.
    pub by: &'a str,
    pub line: usize,
    /// A rewrite rule (else a server block).
    pub rewrite: bool,
    pub note: String,
}

impl Findings {
    /// Every hairpinned name another part of the Corefile takes ([`Findings::shadowing`], then
    /// [`Findings::rewritten`]).
    pub fn taken(&self) -> impl Iterator<Item = Taken<'_>> {
        let shadowed = self.shadowing.iter().map(|s| Taken {
            host: &s.host,
            by: &s.block,
            line: s.line,
            rewrite: false,
            note: format!(
                "hostname {} is not hairpinned: the Corefile's server block '{}' (line {}) is \
                 more specific for it, so CoreDNS sends its queries there and never to the root \
                 block that holds the ouroboros block. Add the same ouroboros block to that \
                 server block, or remove it",
                s.host, s.block, s.line
            ),
        });
        let rewritten = self.rewritten.iter().map(|r| Taken {
            host: &r.host,
            by: &r.rule,
            line: r.line,
            rewrite: true,
            note: format!(
                "hostname {} is not hairpinned: a `rewrite` rule outside the ouroboros block, \
                 'rewrite {}' (line {}), takes its queries before the block can answer them. \
                 Remove that rule (another tool's, such as hairpin-proxy's?)",
                r.host, r.rule, r.line
            ),
        });
        shadowed.chain(rewritten)
    }
}

/// A hairpinned name that a `rewrite` rule outside our block takes (see [`Findings::rewritten`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewritten {
    pub host: String,
    /// The rule as written, after `rewrite` (and `continue`/`stop`), and its line in the input.
    pub rule: String,
    pub line: usize,
}

/// A hairpinned name that a more specific server block takes (see [`Findings::shadowing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadow {
    pub host: String,
    /// The server block's keys as written, and its line in the input.
    pub block: String,
    pub line: usize,
}

/// The result of a splice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub text: String,
    /// `text` differs from the input.
    pub changed: bool,
    pub findings: Findings,
}

/// Why a Corefile cannot be edited. `line` is 1-based where the problem was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct CorefileError {
    pub line: usize,
    pub reason: String,
}

/// The import paths that pull `*.override` snippets from the `coredns-custom` mount.
const CUSTOM_OVERRIDE_IMPORTS: [&str; 3] = [
    "/etc/coredns/custom/*.override",
    "custom/*.override",
    "./custom/*.override",
];

/// Replaces (or inserts, or with an empty set removes) our block. Text outside the markers is
/// preserved byte for byte.
///
/// An existing block directly inside a root server block stays where it is; one anywhere else
/// (another server block, a nested block, top level) is moved to the end of the root block.
pub fn splice(
    corefile: &str,
    hosts: &BTreeSet<Hostname>,
    answer: &Answer,
) -> Result<Edit, CorefileError> {
    splice_groups(corefile, &[Group { hosts, answer }])
}

/// [`splice`] with one group of rules per proxy target.
pub fn splice_groups(corefile: &str, groups: &[Group<'_>]) -> Result<Edit, CorefileError> {
    edit(corefile, groups, true)
}

/// [`splice_groups`] for a CoreDNS without the `view` plugin (node-local-dns): the `view` form
/// is written as the template pair with the same addresses, inside the root block.
pub fn splice_plugins(corefile: &str, groups: &[Group<'_>]) -> Result<Edit, CorefileError> {
    edit(corefile, groups, false)
}

/// Removes our block, if any (the splice of no names, which needs no answer).
pub fn remove(corefile: &str) -> Result<Edit, CorefileError> {
    edit(corefile, &[], false)
}

fn edit(corefile: &str, groups: &[Group<'_>], views: bool) -> Result<Edit, CorefileError> {
    if corefile.is_empty() {
        return Err(CorefileError {
            line: 1,
            reason: "the Corefile is empty; pass the whole Corefile (the 'Corefile' key of the \
                     kube-system/coredns ConfigMap)"
                .into(),
        });
    }
    let span = block::find(corefile, "Corefile").map_err(|e| CorefileError {
        line: e.line,
        reason: e.reason,
    })?;
    let base: Cow<str> = match &span {
        Some(s) => Cow::Owned(block::remove(corefile, s)),
        None => Cow::Borrowed(corefile),
    };
    // Offsets in `base` map back to the input for error lines.
    let line_in_input = |off: usize| match &span {
        Some(s) if off >= s.removal_start => {
            block::line_of(corefile, off + (s.end - s.removal_start))
        }
        _ => block::line_of(corefile, off),
    };
    let parsed =
        parse(&base, span.map(|s| s.removal_start)).map_err(|(off, reason)| CorefileError {
            line: line_in_input(off),
            reason,
        })?;

    // The `view` form is server blocks of its own, before the root block; every other form is
    // plugin lines inside it.
    let views = views
        && groups.iter().any(|g| !g.hosts.is_empty())
        && groups
            .iter()
            .all(|g| g.hosts.is_empty() || matches!(g.answer, Answer::View(_)));
    let view_as_pair = views && is_node_local_dns(&parsed.blocks);
    let views = views && !view_as_pair;
    // The root block holding the existing block keeps it; otherwise the first root block. An
    // existing `view` form at the top level stays where it is.
    let in_place = match parsed.at_p {
        Some(At::Depth(1, Some(i))) if !views && parsed.blocks[i].root => Some(i),
        _ => None,
    };
    let top_in_place = views && matches!(parsed.at_p, Some(At::Depth(0, _)));
    let Some(root_idx) = in_place.or_else(|| parsed.blocks.iter().position(|b| b.root)) else {
        return Err(no_root_error(&parsed.blocks, &line_in_input));
    };
    let root = &parsed.blocks[root_idx];
    // Every name of the block, for the shadowing check (one group: its set as it is).
    let hosts = all_hosts(groups);
    let hosts = hosts.as_ref();
    let findings = Findings {
        has_reload: root.has_reload,
        imports_custom_override: root.imports_override,
        view_as_pair,
        shadowing: shadowing(&parsed.blocks, root, hosts, &line_in_input),
        rewritten: if views {
            Vec::new()
        } else {
            // Our own rewrite rules: the first matching rule wins, so only a rule before ours
            // takes a name (ours go where the block was, or last in the root block).
            let ours = groups
                .iter()
                .any(|g| matches!(g.answer, Answer::Rewrite(_)))
                .then_some(match (in_place, &span) {
                    (Some(_), Some(s)) => s.removal_start,
                    _ => root.close,
                });
            rewritten(root, ours, hosts, &line_in_input)
        },
    };

    let text = if views {
        view_text(corefile, &base, span.as_ref(), root, top_in_place, groups)
    } else if !hosts.is_empty() {
        let eol = block::eol(&base, span.as_ref());
        let indent = plugin_indent(corefile, &base, span.as_ref(), root, in_place);
        match (in_place, span) {
            (Some(_), Some(s)) => write(
                &corefile[..s.start],
                &corefile[s.end..],
                &indent,
                eol,
                groups,
            ),
            _ => {
                if !root.close_line_first {
                    return Err(CorefileError {
                        line: line_in_input(root.close),
                        reason: format!(
                            "the closing '}}' of the root server block '{}' shares its line with \
                             other text; CoreDNS expects it on its own line, so move it there",
                            root.keys
                        ),
                    });
                }
                let at = block::line_start(&base, root.close);
                write(&base[..at], &base[at..], &indent, eol, groups)
            }
        }
    } else {
        base.into_owned()
    };
    Ok(Edit {
        changed: text != corefile,
        text,
        findings,
    })
}

/// Every name of the block: one group's set as it is, several groups' joined.
fn all_hosts<'g>(groups: &[Group<'g>]) -> Cow<'g, BTreeSet<Hostname>> {
    match groups {
        [] => Cow::Owned(BTreeSet::new()),
        [one] => Cow::Borrowed(one.hosts),
        _ => Cow::Owned(
            groups
                .iter()
                .flat_map(|g| g.hosts.iter().cloned())
                .collect(),
        ),
    }
}

/// The Corefile with the `view` form: server blocks of its own, listening as the root block
/// does, before it (or where the existing block stands at the top level, `top_in_place`).
/// `base` is the Corefile without our block, `span` where it was.
fn view_text(
    corefile: &str,
    base: &str,
    span: Option<&block::Span>,
    root: &ServerBlock,
    top_in_place: bool,
    groups: &[Group<'_>],
) -> String {
    let eol = block::eol(base, span);
    let indent = root
        .first_directive
        .map_or("    ", |off| &base[block::line_start(base, off)..off]);
    let listen = Listen {
        ports: root
            .zones
            .iter()
            .filter(|(zone, _)| zone == ".")
            .map(|(_, port)| port.as_str())
            .collect(),
        copied: root.copied.iter().map(|&(a, b)| &base[a..b]).collect(),
    };
    let (prefix, suffix) = match (top_in_place, span) {
        (true, Some(s)) => (&corefile[..s.start], &corefile[s.end..]),
        _ => base.split_at(block::line_start(base, root.keys_start)),
    };
    let mut w = Writer::new(
        &[prefix],
        "",
        eol,
        answer::size_hint(groups) + suffix.len() + 128,
    );
    answer::write_views(&mut w, groups, &listen, unit_indent(indent));
    w.finish(true, suffix)
}

/// The indent of our plugin lines in the root block: its first directive's, else the existing
/// block's (kept in place), else the closing brace's plus four spaces.
fn plugin_indent<'a>(
    corefile: &'a str,
    base: &'a str,
    span: Option<&block::Span>,
    root: &ServerBlock,
    in_place: Option<usize>,
) -> Cow<'a, str> {
    match (root.first_directive, in_place, span) {
        (Some(off), _, _) => Cow::Borrowed(&base[block::line_start(base, off)..off]),
        (None, Some(_), Some(s)) => Cow::Borrowed(s.indent(corefile)),
        _ => {
            let ls = block::line_start(base, root.close);
            Cow::Owned(format!("{}    ", &base[ls..root.close]))
        }
    }
}

fn write(prefix: &str, suffix: &str, indent: &str, eol: &str, groups: &[Group<'_>]) -> String {
    let mut w = Writer::new(
        &[prefix],
        indent,
        eol,
        answer::size_hint(groups) + suffix.len() + 128,
    );
    answer::write(&mut w, groups, unit_indent(indent));
    w.finish(true, suffix)
}

/// One level of indentation in the style of `indent`: a tab where the Corefile uses tabs.
pub(crate) fn unit_indent(indent: &str) -> &'static str {
    if indent.contains('\t') {
        "\t"
    } else {
        "    "
    }
}

/// The hairpinned names that a server block on the root block's port with a more specific zone
/// takes (a wildcard counts when the zone holds its base).
fn shadowing(
    blocks: &[ServerBlock],
    root: &ServerBlock,
    hosts: &BTreeSet<Hostname>,
    line_in_input: &dyn Fn(usize) -> usize,
) -> Vec<Shadow> {
    let ports: Vec<&str> = root.zones.iter().map(|(_, p)| p.as_str()).collect();
    let mut out = Vec::new();
    for b in blocks.iter().filter(|b| !b.root) {
        for (zone, port) in &b.zones {
            if zone == "." || !ports.contains(&port.as_str()) {
                continue;
            }
            for h in hosts {
                let name = h.base();
                let inside = name == zone
                    || (name.len() > zone.len()
                        && name.ends_with(zone.as_str())
                        && name.as_bytes()[name.len() - zone.len() - 1] == b'.');
                if inside {
                    out.push(Shadow {
                        host: h.to_string(),
                        block: b.keys.clone(),
                        line: line_in_input(b.open),
                    });
                }
            }
        }
    }
    out
}

/// The hairpinned names the root block's own `rewrite` name rules take (`base` is without our
/// block, so our rewrite form's rules are not among them). With `template`, every rule does:
/// CoreDNS runs `rewrite` before `template` whatever the order of lines. With our own `rewrite`
/// rules at offset `ours`, only the rules before them do.
fn rewritten(
    root: &ServerBlock,
    ours: Option<usize>,
    hosts: &BTreeSet<Hostname>,
    line_in_input: &dyn Fn(usize) -> usize,
) -> Vec<Rewritten> {
    let mut out = Vec::new();
    let before_ours = |at: usize| ours.is_none_or(|o| at < o);
    for (at, rule) in root.rewrites.iter().filter(|(at, _)| before_ours(*at)) {
        for h in hosts {
            let host = h.to_string();
            if rule.matches(&host) {
                out.push(Rewritten {
                    host,
                    rule: rule.text.clone(),
                    line: line_in_input(*at),
                });
            }
        }
    }
    out
}

/// A server block key's zone (lower-case, no trailing dot; `.` for the root) and port, for
/// plain DNS (`dns://` or no scheme); `None` for other transports (`tls://`, `https://`, …),
/// which listen elsewhere.
fn key_zone(key: &str) -> Option<(String, String)> {
    let key = key.trim_end_matches(',').to_ascii_lowercase();
    let rest = key.strip_prefix("dns://").unwrap_or(&key);
    if rest.contains("://") || rest.is_empty() {
        return None;
    }
    let (zone, port) = match rest.rsplit_once(':') {
        Some((z, p)) => (z, p),
        None => (rest, "53"),
    };
    let zone = match zone.trim_end_matches('.') {
        "" => ".",
        z => z,
    };
    Some((zone.to_string(), port.to_string()))
}

fn no_root_error(blocks: &[ServerBlock], line_in_input: &dyn Fn(usize) -> usize) -> CorefileError {
    let found = if blocks.is_empty() {
        "it has no server blocks at all".to_string()
    } else {
        let list: Vec<String> = blocks
            .iter()
            .map(|b| format!("{} (line {})", b.keys, line_in_input(b.open)))
            .collect();
        format!("its server blocks are {}", list.join(", "))
    };
    CorefileError {
        line: 1,
        reason: format!(
            "no root server block ('.:53 {{', '. {{' or 'dns://.:53 {{') to add the ouroboros block \
             to; {found}. Add the root block, or use coredns-import or external-dns mode"
        ),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Open,
    Close,
    Word,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    start: usize,
    end: usize,
    kind: Kind,
    quoted: bool,
    /// No other token before it on its line.
    line_first: bool,
}

impl Tok {
    fn text<'a>(&self, s: &'a str) -> &'a str {
        if self.quoted {
            &s[self.start + 1..self.end - 1]
        } else {
            &s[self.start..self.end]
        }
    }
}

/// Splits a Corefile into tokens; an error carries the offending offset.
fn tokenize(s: &str) -> Result<Vec<Tok>, (usize, String)> {
    let bytes = s.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line_first = true;
    while i < s.len() {
        let c = s[i..].chars().next().unwrap_or(' ');
        if c == '\n' {
            line_first = true;
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if c == '#' {
            i = s[i..].find('\n').map_or(s.len(), |j| i + j);
            continue;
        }
        let start = i;
        let (end, quoted) = if c == '"' {
            let mut j = i + 1;
            let mut escaped = false;
            loop {
                match bytes.get(j) {
                    None => {
                        return Err((
                            start,
                            "this quoted string is never closed; add the missing '\"'".into(),
                        ))
                    }
                    Some(_) if escaped => escaped = false,
                    Some(b'\\') => escaped = true,
                    Some(b'"') => break,
                    Some(_) => {}
                }
                j += 1;
            }
            (j + 1, true)
        } else {
            let mut j = i;
            for ch in s[i..].chars() {
                if ch.is_whitespace() || ch == '#' {
                    break;
                }
                j += ch.len_utf8();
            }
            (j, false)
        };
        let kind = match (quoted, &s[start..end]) {
            (false, "{") => Kind::Open,
            (false, "}") => Kind::Close,
            _ => Kind::Word,
        };
        toks.push(Tok {
            start,
            end,
            kind,
            quoted,
            line_first,
        });
        line_first = false;
        i = end;
    }
    Ok(toks)
}

#[derive(Clone, Debug)]
struct ServerBlock {
    root: bool,
    /// The keys as written, for messages.
    keys: String,
    open: usize,
    close: usize,
    close_line_first: bool,
    /// Offset of the first directive that starts its own line.
    first_directive: Option<usize>,
    has_reload: bool,
    imports_override: bool,
    /// It loads the `kubernetes` plugin.
    kubernetes: bool,
    /// A `bind` to a link-local address (169.254.0.0/16) or to node-local-dns's
    /// `__PILLAR__LOCAL__DNS__` placeholder: where node-local-dns listens.
    binds_link_local: bool,
    /// Zone and port of each plain-DNS key.
    zones: Vec<(String, String)>,
    /// Offset of the first key.
    keys_start: usize,
    /// The one-line `bind`, `prometheus` and `cache` directives (start and end offsets), which
    /// the `view` form's blocks copy to listen, report and cache as this block does (without
    /// `cache`, every hairpinned query would run the template where the pair's answers are
    /// served from the root block's cache: bench/coredns measured 1.9x CPU a warm hit).
    copied: Vec<(usize, usize)>,
    /// The `name` rules of its `rewrite` directives, each with its offset.
    rewrites: Vec<(usize, NameRule)>,
}

impl ServerBlock {
    /// A server block opened by the `{` at `open`, with the keys before it.
    fn open(s: &str, keys: &[Tok], open: &Tok) -> ServerBlock {
        let texts: Vec<&str> = keys.iter().map(|k| k.text(s)).collect();
        ServerBlock {
            root: texts.iter().any(|k| is_root_key(k)),
            keys: if texts.is_empty() {
                "a block without keys".into()
            } else {
                texts.join(" ")
            },
            open: open.start,
            close: open.start,
            close_line_first: false,
            first_directive: None,
            has_reload: false,
            imports_override: false,
            kubernetes: false,
            binds_link_local: false,
            zones: texts.iter().filter_map(|k| key_zone(k)).collect(),
            keys_start: keys.first().map_or(open.start, |k| k.start),
            copied: Vec::new(),
            rewrites: Vec::new(),
        }
    }

    /// Notes what the directive starting a line at token `k` (directly in this block) tells:
    /// `reload`, `kubernetes`, a one-line `bind` or `prometheus` to copy (and where `bind`
    /// listens), an import of the override files.
    fn directive(&mut self, s: &str, toks: &[Tok], k: usize) {
        let t = &toks[k];
        self.first_directive.get_or_insert(t.start);
        let args = || toks[k + 1..].iter().take_while(|a| !a.line_first);
        match t.text(s) {
            "reload" => self.has_reload = true,
            "kubernetes" => self.kubernetes = true,
            "bind" | "prometheus" | "cache" => {
                if t.text(s) == "bind" {
                    self.binds_link_local |= args().any(|a| {
                        let a = a.text(s);
                        a.starts_with("169.254.") || a == "__PILLAR__LOCAL__DNS__"
                    });
                }
                let mut end = Some(t.end);
                for a in args() {
                    end = match (end, a.kind) {
                        (Some(_), Kind::Word) => Some(a.end),
                        _ => None,
                    };
                }
                // One with a block of options (`prometheus { … }`, `cache 30 { … }`) is not
                // copied: its options may name zones or plugins of this block.
                if let Some(end) = end {
                    self.copied.push((t.start, end));
                }
            }
            "rewrite" => self.rewrites.extend(rewrite_rules(s, toks, k)),
            "import" => {
                if let Some(arg) = toks.get(k + 1) {
                    if arg.kind == Kind::Word
                        && !arg.line_first
                        && CUSTOM_OVERRIDE_IMPORTS.contains(&arg.text(s))
                    {
                        self.imports_override = true;
                    }
                }
            }
            _ => {}
        }
    }
}

/// node-local-dns's Corefile, as the kubernetes addon's ConfigMap and kubespray write it: no
/// server block loads the `kubernetes` plugin (node-cache has none; it forwards cluster names
/// to the cluster DNS), and one binds node-local-dns's link-local address or its placeholder.
fn is_node_local_dns(blocks: &[ServerBlock]) -> bool {
    blocks.iter().all(|b| !b.kubernetes) && blocks.iter().any(|b| b.binds_link_local)
}

/// The `name` rules of the `rewrite` directive at token `k`, each with its offset: the one-line
/// form `rewrite [continue|stop] name ...`, or each `name ...` line of the block form
/// `rewrite [continue|stop] { ... }`.
fn rewrite_rules(s: &str, toks: &[Tok], k: usize) -> Vec<(usize, NameRule)> {
    let line: Vec<&Tok> = toks[k + 1..].iter().take_while(|t| !t.line_first).collect();
    let words = |ts: &[&Tok]| -> Vec<&str> { ts.iter().map(|t| t.text(s)).collect() };
    let Some(open) = line.iter().position(|t| t.kind == Kind::Open) else {
        return NameRule::parse(&words(&line))
            .map(|r| (toks[k].start, r))
            .into_iter()
            .collect();
    };
    let mut rules = Vec::new();
    let mut current: Vec<&Tok> = Vec::new();
    let mut depth = 0usize;
    for t in &toks[k + 1 + open + 1..] {
        match t.kind {
            Kind::Close if depth == 0 => break,
            Kind::Close => depth -= 1,
            Kind::Open => depth += 1,
            Kind::Word if depth == 0 => {
                if t.line_first && !current.is_empty() {
                    rules.extend(NameRule::parse(&words(&current)).map(|r| (current[0].start, r)));
                    current.clear();
                }
                current.push(t);
            }
            Kind::Word => {}
        }
    }
    if !current.is_empty() {
        rules.extend(NameRule::parse(&words(&current)).map(|r| (current[0].start, r)));
    }
    rules
}

/// Nesting at the probed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Depth and the server block it is in.
    Depth(usize, Option<usize>),
    /// Inside a token (a quoted string spanning lines).
    InToken,
}

struct Parsed {
    blocks: Vec<ServerBlock>,
    at_p: Option<At>,
}

fn is_root_key(key: &str) -> bool {
    let key = key.trim_end_matches(',').to_ascii_lowercase();
    let zone = key.strip_prefix("dns://").unwrap_or(&key);
    if zone.contains("://") {
        return false;
    }
    zone == "."
        || zone
            .strip_prefix(".:")
            .is_some_and(|port| !port.is_empty() && !port.contains(':'))
}

fn parse(s: &str, probe: Option<usize>) -> Result<Parsed, (usize, String)> {
    let toks = tokenize(s)?;
    let mut blocks: Vec<ServerBlock> = Vec::new();
    let mut pending: Vec<Tok> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut cur: Option<usize> = None;
    let mut at_p = None;
    for (k, t) in toks.iter().enumerate() {
        if let Some(p) = probe {
            if at_p.is_none() && t.end > p {
                at_p = Some(if t.start < p {
                    At::InToken
                } else {
                    At::Depth(stack.len(), cur)
                });
            }
        }
        match t.kind {
            Kind::Open => {
                if stack.is_empty() {
                    blocks.push(ServerBlock::open(s, &pending, t));
                    cur = Some(blocks.len() - 1);
                    pending.clear();
                }
                stack.push(t.start);
            }
            Kind::Close => {
                if stack.pop().is_none() {
                    return Err((
                        t.start,
                        "this '}' has no matching '{'; remove it or add the missing '{'".into(),
                    ));
                }
                if stack.is_empty() {
                    if let Some(b) = cur.take().map(|i| &mut blocks[i]) {
                        b.close = t.start;
                        b.close_line_first = t.line_first;
                    }
                }
            }
            Kind::Word => {
                if stack.is_empty() {
                    let continued = pending.last().is_some_and(|p| p.text(s).ends_with(','));
                    if t.line_first && !continued {
                        pending.clear();
                    }
                    pending.push(*t);
                } else if stack.len() == 1 && t.line_first {
                    if let Some(b) = cur.map(|i| &mut blocks[i]) {
                        b.directive(s, &toks, k);
                    }
                }
            }
        }
    }
    if let Some(&open) = stack.last() {
        let mut message =
            "this '{' is never closed; add the missing '}' (in this block or one nested in it)"
                .to_string();
        // CoreDNS reads a brace only as a token of its own: `}}` or `1.1.1.1}` is one word, and
        // the block it was meant to close stays open.
        if let Some(glued) = toks.iter().find(|t| {
            t.start > open && matches!(t.kind, Kind::Word) && !t.quoted && t.text(s).contains('}')
        }) {
            message = format!(
                "{message}; '{}' on line {} is one word to CoreDNS, not a closing brace: put \
                 each '}}' apart, separated by a space or a new line",
                glued.text(s),
                crate::dns::block::line_of(s, glued.start)
            );
        }
        return Err((open, message));
    }
    if probe.is_some() && at_p.is_none() {
        at_p = Some(At::Depth(0, None));
    }
    Ok(Parsed { blocks, at_p })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::ProxyAddrs;
    use crate::dns::{ProxyFqdn, BEGIN_MARKER, DEFAULT_PROXY_FQDN, END_MARKER};
    use crate::hostname::HostPolicy;

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        names.iter().map(|n| p.check(n).unwrap()).collect()
    }

    /// The splicing tests use the one-line-per-host rewrite form, which shows placement
    /// plainly; the template form has its own tests below and in `answer`.
    fn proxy() -> Answer {
        Answer::Rewrite(ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap())
    }

    fn splice_ok(text: &str, names: &[&str]) -> Edit {
        splice(text, &hosts(names), &proxy()).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn err(text: &str) -> CorefileError {
        splice(text, &hosts(&["a.example.com"]), &proxy()).unwrap_err()
    }

    const KUBEADM: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

    #[test]
    fn inserts_before_the_root_closing_brace() {
        let e = splice_ok(KUBEADM, &["b.example.com", "a.example.com"]);
        let want = format!(
            ".:53 {{\n    errors\n    health {{\n       lameduck 5s\n    }}\n    ready\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n    {BEGIN_MARKER}\n    rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n    rewrite name b.example.com {DEFAULT_PROXY_FQDN}\n    {END_MARKER}\n}}\n"
        );
        assert_eq!(e.text, want);
        assert!(e.changed);
        assert_eq!(
            e.findings,
            Findings {
                has_reload: true,
                imports_custom_override: false,
                shadowing: Vec::new(),
                rewritten: Vec::new(),
                view_as_pair: false,
            }
        );
        let again = splice_ok(&e.text, &["a.example.com", "b.example.com"]);
        assert_eq!(again.text, e.text);
        assert!(!again.changed);
        let removed = splice_ok(&e.text, &[]);
        assert_eq!(removed.text, KUBEADM);
        assert!(removed.changed);
        assert!(!splice_ok(KUBEADM, &[]).changed);
    }

    fn view(ips: &[&str]) -> Answer {
        let ips: Vec<std::net::IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
        Answer::View(ProxyAddrs::new(&ips).unwrap())
    }

    #[test]
    fn view_blocks_go_before_the_root_block_and_stay_where_they_are() {
        let corefile = format!("# cluster DNS\n{KUBEADM}");
        let names = hosts(&["a.example.com"]);
        let e = splice(&corefile, &names, &view(&["10.0.0.1"])).unwrap();
        let block = format!(
            "{BEGIN_MARKER}\ncom:53 {{\n    cache 30\n    view ouroboros {{\n        expr type() in ['A','AAAA'] && name() in ['a.example.com.']\n    }}\n    template IN A {{\n        answer \"{{{{ .Name }}}} 30 IN A 10.0.0.1\"\n    }}\n    template IN AAAA\n}}\n{END_MARKER}\n"
        );
        assert_eq!(e.text, format!("# cluster DNS\n{block}{KUBEADM}"));
        assert!(e.findings.has_reload);
        // Idempotent; a block moved elsewhere at the top level stays there; removal restores.
        assert!(
            !splice(&e.text, &names, &view(&["10.0.0.1"]))
                .unwrap()
                .changed
        );
        let moved = format!("# cluster DNS\n{KUBEADM}{block}");
        let again = splice(&moved, &names, &view(&["10.0.0.1"])).unwrap();
        assert_eq!(
            (again.text.as_str(), again.changed),
            (moved.as_str(), false)
        );
        assert_eq!(remove(&e.text).unwrap().text, corefile);
        // From the template pair inside the root block to the view form and back.
        let template = Answer::Template(ProxyAddrs::new(&["10.0.0.1".parse().unwrap()]).unwrap());
        let inside = splice(&corefile, &names, &template).unwrap().text;
        assert_eq!(
            splice(&inside, &names, &view(&["10.0.0.1"])).unwrap().text,
            e.text
        );
        assert_eq!(splice(&e.text, &names, &template).unwrap().text, inside);
    }

    /// node-cache (node-local-dns) compiles no `view` plugin in and refuses to start on one:
    /// its Corefile gets the template pair when the view form is asked for, and says so.
    #[test]
    fn a_node_local_dns_corefile_gets_the_pair_for_the_view_form() {
        let fixture = |name: &str| {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corefiles/");
            std::fs::read_to_string(format!("{dir}{name}")).unwrap()
        };
        let addon = fixture("node-local-dns.Corefile");
        let kubespray = fixture("nodelocaldns-kubespray.Corefile");
        let cluster = KUBEADM.replace(
            "ready",
            "ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }",
        );
        let link_local_with_kubernetes =
            cluster.replace("errors", "errors\n    bind 169.254.20.10");
        // (Corefile, written as the pair)
        let cases: &[(&str, &str, bool)] = &[
            ("the addon's ConfigMap (placeholders)", &addon, true),
            ("kubespray's (169.254.25.10)", &kubespray, true),
            ("kubeadm's CoreDNS", &cluster, false),
            (
                "kubernetes plugin and a link-local bind",
                &link_local_with_kubernetes,
                false,
            ),
            (
                "no kubernetes plugin, no link-local bind",
                ". {\n\tbind 10.0.0.10\n\tforward . 1.1.1.1\n}\n",
                false,
            ),
        ];
        let names = hosts(&["a.example.com"]);
        for (what, corefile, pair) in cases {
            let e = splice(corefile, &names, &view(&["10.0.0.1"])).unwrap();
            assert_eq!(e.findings.view_as_pair, *pair, "{what}");
            assert_eq!(e.text.contains("view ouroboros"), !pair, "{what}");
            if *pair {
                let plugins = splice_plugins(
                    corefile,
                    &[Group {
                        hosts: &names,
                        answer: &view(&["10.0.0.1"]),
                    }],
                );
                assert_eq!(e.text, plugins.unwrap().text, "{what}");
            }
        }
    }

    #[test]
    fn view_blocks_listen_and_report_as_the_root_block() {
        // A `cache` or `prometheus` with a block of options is not copied.
        let corefile = "dns://.:5353 {\n\tbind 10.0.0.10 lo\n\tprometheus :9153\n\tlog {\n\t\tclass error\n\t}\n\tcache 30\n\tforward . /etc/resolv.conf\n}\n";
        let e = splice(corefile, &hosts(&["a.example.org"]), &view(&["10.0.0.1"])).unwrap();
        assert!(
            e.text.starts_with(&format!(
                "{BEGIN_MARKER}\norg:5353 {{\n\tbind 10.0.0.10 lo\n\tprometheus :9153\n\tcache 30\n\tview ouroboros {{\n"
            )),
            "{}",
            e.text
        );
        let options = corefile.replace("cache 30", "cache 30 {\n\t\tdisable denial\n\t}");
        let e = splice(&options, &hosts(&["a.example.org"]), &view(&["10.0.0.1"])).unwrap();
        assert!(
            e.text.starts_with(&format!(
                "{BEGIN_MARKER}\norg:5353 {{\n\tbind 10.0.0.10 lo\n\tprometheus :9153\n\tview ouroboros {{\n"
            )),
            "{}",
            e.text
        );
        assert!(
            e.text.ends_with(&format!("{END_MARKER}\n{options}")),
            "{}",
            e.text
        );
    }

    #[test]
    fn wildcard_rule() {
        let e = splice_ok(". {\n\tforward . 1.1.1.1\n}", &["*.apps.example.com"]);
        assert_eq!(
            e.text,
            format!(
                ". {{\n\tforward . 1.1.1.1\n\t{BEGIN_MARKER}\n\trewrite name regex ^[a-z0-9-]+\\.apps\\.example\\.com\\.$ {DEFAULT_PROXY_FQDN} answer auto\n\t{END_MARKER}\n}}"
            )
        );
    }

    #[test]
    fn template_pair_nests_one_level_in_the_corefile_style() {
        let ips: Vec<std::net::IpAddr> = vec!["10.96.0.5".parse().unwrap()];
        let answer = Answer::Template(ProxyAddrs::new(&ips).unwrap());
        for (text, unit) in [(KUBEADM, "    "), (". {\n\tforward . 1.1.1.1\n}\n", "\t")] {
            let e = splice(text, &hosts(&["a.example.com"]), &answer).unwrap();
            let indent = if unit == "\t" { "\t" } else { "    " };
            let want = format!(
                "{indent}{BEGIN_MARKER}\n{indent}template IN A example.com {{\n{indent}{unit}match \
                 ^a\\.example\\.com\\.$\n{indent}{unit}answer \"{{{{ .Name }}}} 30 IN A \
                 10.96.0.5\"\n{indent}{unit}fallthrough\n{indent}}}\n{indent}template IN AAAA \
                 example.com {{\n{indent}{unit}match ^a\\.example\\.com\\.$\n{indent}{unit}\
                 fallthrough\n{indent}}}\n{indent}{END_MARKER}\n}}\n"
            );
            assert!(e.text.ends_with(&want), "{}", e.text);
            // Our own nested braces do not disturb the next parse: idempotent and removable.
            let again = splice(&e.text, &hosts(&["a.example.com"]), &answer).unwrap();
            assert!(!again.changed);
            assert_eq!(
                splice(&e.text, &BTreeSet::new(), &answer).unwrap().text,
                text
            );
        }
    }

    #[test]
    fn more_specific_server_blocks_shadow_hosts() {
        let t = "example.com:53 {\n    forward . 10.0.0.1\n}\nshop.example.org {\n}\nexample.net:5353 {\n}\ntls://example.io {\n}\n.:53 {\n    forward . /etc/resolv.conf\n}\n";
        let f = splice(
            t,
            &hosts(&[
                "a.example.com",
                "example.com",
                "*.shop.example.org",
                "x.example.org",
                "a.example.net",
                "a.example.io",
            ]),
            &proxy(),
        )
        .unwrap()
        .findings;
        let got: Vec<(&str, &str, usize)> = f
            .shadowing
            .iter()
            .map(|s| (s.host.as_str(), s.block.as_str(), s.line))
            .collect();
        assert_eq!(
            got,
            [
                ("a.example.com", "example.com:53", 1),
                ("example.com", "example.com:53", 1),
                ("*.shop.example.org", "shop.example.org", 4),
            ]
        );
        for (key, want) in [
            ("example.com:53", Some(("example.com", "53"))),
            ("DNS://Example.com.:1053", Some(("example.com", "1053"))),
            (".", Some((".", "53"))),
            (".:53,", Some((".", "53"))),
            ("tls://example.com", None),
        ] {
            let got = key_zone(key);
            assert_eq!(
                got.as_ref().map(|(z, p)| (z.as_str(), p.as_str())),
                want,
                "{key}"
            );
        }
    }

    #[test]
    fn rewrite_rules_outside_the_block_that_take_hairpinned_names() {
        // hairpin-proxy's line, a block-form rule, and a rule for another domain.
        let t = "\
.:53 {
    rewrite name www.example.com hairpin-proxy.hairpin-proxy.svc.cluster.local
    rewrite stop {
        name suffix .shop.example.com .svc.cluster.local
        answer name (.*)\\.svc\\.cluster\\.local {1}.shop.example.com
    }
    rewrite name exact other.example.org x.svc.cluster.local
    forward . /etc/resolv.conf
}
";
        let names = hosts(&["www.example.com", "a.shop.example.com", "api.example.com"]);
        let found = |answer: &Answer, text: &str| -> Vec<(String, String, usize)> {
            splice(text, &names, answer)
                .unwrap()
                .findings
                .rewritten
                .into_iter()
                .map(|r| (r.host, r.rule, r.line))
                .collect()
        };
        let ips: Vec<std::net::IpAddr> = vec!["10.0.0.1".parse().unwrap()];
        let template = Answer::Template(ProxyAddrs::new(&ips).unwrap());
        let want = vec![
            (
                "www.example.com".to_string(),
                "name www.example.com hairpin-proxy.hairpin-proxy.svc.cluster.local".to_string(),
                2,
            ),
            (
                "a.shop.example.com".to_string(),
                "name suffix .shop.example.com .svc.cluster.local".to_string(),
                4,
            ),
        ];
        assert_eq!(found(&template, t), want);
        let findings = splice(t, &names, &template).unwrap().findings;
        let notes: Vec<(bool, String)> = findings.taken().map(|t| (t.rewrite, t.note)).collect();
        assert_eq!(notes.len(), 2);
        assert!(
            notes.iter().all(|(rewrite, note)| *rewrite
                && note.contains("`rewrite` rule outside the ouroboros block")),
            "{notes:?}"
        );
        // Our rewrite rules go last in the root block: the rules before them still win.
        assert_eq!(found(&proxy(), t), want);
        // In place, ours come before a rule written after the block: that one never matches.
        let with_ours = splice(t, &names, &proxy()).unwrap().text;
        let end = with_ours.find(END_MARKER).unwrap();
        let eol = end + with_ours[end..].find('\n').unwrap() + 1;
        let after = format!(
            "{}    rewrite name api.example.com y.svc.cluster.local\n{}",
            &with_ours[..eol],
            &with_ours[eol..]
        );
        assert_eq!(found(&proxy(), &after), want);
        assert!(found(&template, &after)
            .iter()
            .any(|(h, _, _)| h == "api.example.com"));
        // The view form's blocks never pass through the root block's plugins.
        assert_eq!(found(&view(&["10.0.0.1"]), t), vec![]);
    }

    #[test]
    fn tokens_follow_the_corefile_lexer() {
        let words = |s: &str| -> Vec<(String, Kind, bool)> {
            tokenize(s)
                .unwrap()
                .iter()
                .map(|t| (t.text(s).to_string(), t.kind, t.line_first))
                .collect()
        };
        let w = |t: &str, k: Kind, first: bool| (t.to_string(), k, first);
        assert_eq!(
            words("a{ b#c }\n\"x \\\" {\" y\"z\n}"),
            vec![
                w("a{", Kind::Word, true),
                w("b", Kind::Word, false),
                w("x \\\" {", Kind::Word, true),
                w("y\"z", Kind::Word, false),
                w("}", Kind::Close, true),
            ]
        );
        // A quoted string spanning lines is one token; NBSP separates tokens as in CoreDNS.
        assert_eq!(
            words("log \"a\n}\" {\u{a0}}"),
            vec![
                w("log", Kind::Word, true),
                w("a\n}", Kind::Word, false),
                w("{", Kind::Open, false),
                w("}", Kind::Close, false),
            ]
        );
        assert_eq!(words("\"{\" \"}\"")[0].1, Kind::Word);
        assert!(tokenize("\"a\\\"").is_err());
    }

    #[test]
    fn root_keys() {
        for k in [".", ".:53", ".:5353", "dns://.:53", "DNS://.", ".:53,"] {
            assert!(is_root_key(k), "{k}");
        }
        for k in [
            "example.org",
            "cluster.local:53",
            "tls://.:853",
            ".:",
            "..",
            ":53",
            "(snip)",
        ] {
            assert!(!is_root_key(k), "{k}");
        }
    }

    #[test]
    fn braces_in_comments_quotes_and_words_do_not_count() {
        let t = ".:53 { # not a block {\n    log . \"{remote} }\"\n    template IN A x {$ENV}\n    forward . 1.1.1.1 # }\n}\n";
        let e = splice_ok(t, &["a.example.com"]);
        assert!(
            e.text.ends_with(&format!("    {END_MARKER}\n}}\n")),
            "{}",
            e.text
        );
        assert_eq!(splice_ok(&e.text, &[]).text, t);
    }

    #[test]
    fn crlf_and_no_final_newline() {
        let t = ".:53 {\r\n    forward . 1.1.1.1\r\n}";
        let e = splice_ok(t, &["a.example.com"]);
        assert_eq!(
            e.text,
            format!(".:53 {{\r\n    forward . 1.1.1.1\r\n    {BEGIN_MARKER}\r\n    rewrite name a.example.com {DEFAULT_PROXY_FQDN}\r\n    {END_MARKER}\r\n}}")
        );
        assert_eq!(splice_ok(&e.text, &[]).text, t);
    }

    #[test]
    fn picks_the_root_block_after_zone_blocks() {
        let t = "example.org:53 {\n  forward . 10.0.0.1\n}\n\n.:53 {\n  errors\n}\nfoo.bar {\n  whoami\n}\n";
        let e = splice_ok(t, &["a.example.com"]);
        assert_eq!(
            e.text,
            format!("example.org:53 {{\n  forward . 10.0.0.1\n}}\n\n.:53 {{\n  errors\n  {BEGIN_MARKER}\n  rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n  {END_MARKER}\n}}\nfoo.bar {{\n  whoami\n}}\n")
        );
        assert!(!e.findings.has_reload);
    }

    #[test]
    fn existing_block_is_replaced_in_place() {
        let t = format!(
            ".:53 {{\n    errors\n{BEGIN_MARKER}\nrewrite name old.example.com x.\n# hand edit\n{END_MARKER}\n    reload\n}}\n"
        );
        let e = splice_ok(&t, &["new.example.com"]);
        assert_eq!(
            e.text,
            format!(".:53 {{\n    errors\n    {BEGIN_MARKER}\n    rewrite name new.example.com {DEFAULT_PROXY_FQDN}\n    {END_MARKER}\n    reload\n}}\n")
        );
        assert_eq!(
            splice_ok(&t, &[]).text,
            ".:53 {\n    errors\n    reload\n}\n"
        );
    }

    #[test]
    fn block_outside_the_root_block_moves_into_it() {
        let t = format!(
            "example.org {{\n    {BEGIN_MARKER}\n    rewrite name a.example.com x.\n    {END_MARKER}\n}}\n.:53 {{\n    reload\n}}\n"
        );
        let e = splice_ok(&t, &["a.example.com"]);
        assert_eq!(
            e.text,
            format!("example.org {{\n}}\n.:53 {{\n    reload\n    {BEGIN_MARKER}\n    rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n    {END_MARKER}\n}}\n")
        );
        // Nested inside a plugin block of the root block: moved too.
        let t =
            format!(".:53 {{\n    hosts {{\n    {BEGIN_MARKER}\n    {END_MARKER}\n    }}\n}}\n");
        let e = splice_ok(&t, &["a.example.com"]);
        assert_eq!(
            e.text,
            format!(".:53 {{\n    hosts {{\n    }}\n    {BEGIN_MARKER}\n    rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n    {END_MARKER}\n}}\n")
        );
    }

    #[test]
    fn empty_root_block_gets_default_indent() {
        let e = splice_ok(".:53 {\n}\n", &["a.example.com"]);
        assert_eq!(
            e.text,
            format!(".:53 {{\n    {BEGIN_MARKER}\n    rewrite name a.example.com {DEFAULT_PROXY_FQDN}\n    {END_MARKER}\n}}\n")
        );
        assert_eq!(splice_ok(&e.text, &["a.example.com"]).text, e.text);
    }

    #[test]
    fn findings() {
        let t = ".:53 {\n    hosts /etc/coredns/NodeHosts {\n      reload 15s\n    }\n    import /etc/coredns/custom/*.override\n}\nimport /etc/coredns/custom/*.server\n";
        let f = splice_ok(t, &[]).findings;
        assert!(!f.has_reload, "nested reload does not count");
        assert!(f.imports_custom_override);
        let f = splice_ok(".:53 {\n    import custom/*.override\n    reload\n}\n", &[]).findings;
        assert!(f.has_reload && f.imports_custom_override);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(err("").line, 1);
        let e = err(".:53 {\n    errors\n");
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("never closed"), "{e}");
        assert!(!e.reason.contains("one word"), "{e}");
        // Braces glued together or to a word are one word to CoreDNS ("Unknown directive '}}'").
        for (text, glued) in [
            (".:53 {\n    errors\n}}\n", "'}}' on line 3"),
            (".:53 {\n    forward . 1.1.1.1}\n", "'1.1.1.1}' on line 2"),
        ] {
            let e = err(text);
            assert_eq!(e.line, 1);
            assert!(
                e.reason.contains(glued) && e.reason.contains("one word to CoreDNS"),
                "{e}"
            );
        }
        let e = err(".:53 {\n}\n}\n");
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("no matching"), "{e}");
        let e = err("example.org {\n    whoami\n}\n");
        assert!(e.reason.contains("no root server block"), "{e}");
        assert!(e.reason.contains("example.org (line 1)"), "{e}");
        let e = err("# only a comment\n");
        assert!(e.reason.contains("no root server block"), "{e}");
        let e = err(".:53 {\n    log \"unterminated\n}\n");
        assert_eq!(e.line, 2);
        let e = err(". { }\n");
        assert!(e.reason.contains("own line"), "{e}");
        let e = err(&format!(".:53 {{\n{BEGIN_MARKER}\n}}\n"));
        assert_eq!(e.line, 2);
        let e = err(&format!(
            ".:53 {{\n{BEGIN_MARKER}\n{END_MARKER}\n{BEGIN_MARKER}\n{END_MARKER}\n}}\n"
        ));
        assert_eq!(e.line, 4);
        // Line numbers after a removed block refer to the input.
        let e = err(&format!(
            ".:53 {{\n{BEGIN_MARKER}\n{{\n{END_MARKER}\n}}\n}}\n"
        ));
        assert_eq!(e.line, 6);
    }
}
