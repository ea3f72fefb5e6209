//! What can go wrong reading manifests: which input (file, directory, stdin), which document in
//! it, which object, what is wrong and what to do.
//!
//! Every message tells the whole story on one line, the cause included, and the types expose no
//! `source()` chain: `{}` and anyhow's `{:#}` (how `render` prints errors) then both print each
//! part exactly once. The causes stay reachable as fields.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why manifests could not be read; nothing is returned with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot read manifests from stdin: {error}")]
    Stdin { error: io::Error },
    #[error(
        "{}: cannot read manifest path: {error} (give a file, a directory or - for stdin)",
        .path.display()
    )]
    Path { path: PathBuf, error: io::Error },
    #[error("{}: cannot list directory: {error}", .path.display())]
    Dir { path: PathBuf, error: io::Error },
    #[error("{}: cannot read: {error}", .path.display())]
    File { path: PathBuf, error: io::Error },
    #[error(
        "{}manifest text is not UTF-8 (invalid byte at offset {offset}); save it as UTF-8",
        Prefix(.input)
    )]
    NotUtf8 {
        input: Option<String>,
        offset: usize,
    },
    /// A document (1-based, in the order of the text) that cannot be read.
    #[error("{}document {document}: {problem}", Prefix(.input))]
    Document {
        /// The file, or `stdin`; `None` for text handed over directly.
        input: Option<String>,
        document: usize,
        problem: DocumentError,
    },
}

impl Error {
    /// The same error, naming the input it came from.
    pub(super) fn in_input(mut self, name: &str) -> Self {
        if let Error::Document { input, .. } | Error::NotUtf8 { input, .. } = &mut self {
            *input = Some(name.to_string());
        }
        self
    }
}

/// What is wrong inside one document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The YAML parser's message ends with the line and column.
    #[error(
        "not valid YAML (fix the syntax at the line given{}): {error}",
        duplicate_hint(error)
    )]
    Yaml { error: yaml_serde::Error },
    #[error("not valid JSON (fix the syntax at the line given): {error}")]
    Json { error: serde_json::Error },
    /// An item of a `List` (1-based).
    #[error("{list} item {item}: {problem}")]
    ListItem {
        list: String,
        item: usize,
        problem: Box<DocumentError>,
    },
    /// An object of a kind `render` reads whose fields do not fit that kind (`name` is
    /// `namespace/name`, or the name alone).
    #[error(
        "{kind} {name:?} is not a valid {kind} (correct it, or leave it out of the manifests): \
         {error}"
    )]
    InvalidObject {
        kind: String,
        name: String,
        error: serde_json::Error,
    },
}

/// `"{input}: "`, or nothing for text without a name.
struct Prefix<'a>(&'a Option<String>);

impl fmt::Display for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(input) => write!(f, "{input}: "),
            None => Ok(()),
        }
    }
}

/// A key given twice is most often two files concatenated without `---` between them.
fn duplicate_hint(error: &yaml_serde::Error) -> &'static str {
    if error.to_string().contains("duplicate entry") {
        "; a key given twice in one mapping: are two documents missing `---` between them?"
    } else {
        ""
    }
}
