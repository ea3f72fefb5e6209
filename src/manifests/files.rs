//! The MANIFEST arguments: files, directories read recursively, or `-` for stdin, parsed on all
//! cores and merged in argument order.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::documents::{self, Format};
use super::error::Error;
use super::objects::Batch;
use super::Manifests;

/// One manifest source, in argument order.
enum Input {
    Stdin(Result<(String, Format), Error>),
    File(PathBuf),
    /// A path that could not be listed; reported when its turn comes.
    Failed(Error),
}

/// See [`Manifests::read`].
pub(super) fn read(args: &[PathBuf]) -> Result<Manifests, Error> {
    let mut inputs: Vec<Input> = Vec::new();
    for arg in args {
        if arg.as_os_str() == "-" {
            let mut text = String::new();
            let read = match std::io::stdin().read_to_string(&mut text) {
                Ok(_) => {
                    let format = Format::sniff(&text);
                    Ok((text, format))
                }
                Err(error) => Err(Error::Stdin { error }),
            };
            inputs.push(Input::Stdin(read));
            continue;
        }
        let files = std::fs::metadata(arg)
            .map_err(|error| Error::Path {
                path: arg.clone(),
                error,
            })
            .and_then(|meta| {
                if meta.is_dir() {
                    let mut files = Vec::new();
                    let mut seen = BTreeSet::new();
                    collect_dir(arg, &mut files, &mut seen)?;
                    if files.is_empty() {
                        tracing::warn!(
                            path = %arg.display(),
                            "no .yaml, .yml or .json file under this directory: it adds no objects"
                        );
                    }
                    Ok(files)
                } else {
                    Ok(vec![arg.clone()])
                }
            });
        match files {
            Ok(files) => inputs.extend(files.into_iter().map(Input::File)),
            Err(e) => inputs.push(Input::Failed(e)),
        }
    }
    let parsed = parse_all(&inputs);
    let mut out = Manifests::default();
    for (input, parsed) in inputs.into_iter().zip(parsed) {
        if let Input::Failed(e) | Input::Stdin(Err(e)) = input {
            return Err(e);
        }
        let batch = parsed?;
        for unread in &batch.unread {
            unread.warn();
        }
        out.append(batch.objects);
        out.files += 1;
    }
    Ok(out)
}

/// Reads and parses one input; the error names it.
fn parse_one(input: &Input) -> Result<Batch, Error> {
    let (name, text, format) = match input {
        Input::Stdin(Ok((text, format))) => ("stdin".into(), Cow::Borrowed(text.as_str()), *format),
        // Reported by the caller.
        Input::Stdin(Err(_)) | Input::Failed(_) => return Ok(Batch::default()),
        Input::File(path) => match std::fs::read_to_string(path) {
            Ok(text) => (
                path.display().to_string(),
                Cow::Owned(text),
                Format::of(path),
            ),
            Err(error) => {
                return Err(Error::File {
                    path: path.clone(),
                    error,
                })
            }
        },
    };
    if is_blank(&text) {
        tracing::warn!(input = %name, "empty (nothing but blank lines, comments and ---): it adds no objects");
    }
    documents::read(&text, format).map_err(|e| e.in_input(&name))
}

/// A manifest text without a single object: blank lines, `#` comments and `---` only.
fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---"
    })
}

/// [`parse_one`] for every input, on up to one thread per core; results in input order, so the
/// outcome (and the first error reported) does not depend on the threads.
fn parse_all(inputs: &[Input]) -> Vec<Result<Batch, Error>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(inputs.len());
    if threads <= 1 {
        return inputs.iter().map(parse_one).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<Batch, Error>>>> =
        inputs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(input) = inputs.get(i) else { break };
                let parsed = parse_one(input);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(parsed);
            });
        }
    });
    slots
        .into_iter()
        .map(|s| {
            // Every slot is filled: the workers only stop once `next` is past the end, and a
            // panic in one ends the scope with that panic before this runs.
            s.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every manifest input was parsed")
        })
        .collect()
}

fn is_manifest(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        ["yaml", "yml", "json"]
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
}

/// Files under `dir` in sorted path order; hidden entries (`.git`, editor files) are skipped and
/// a symlinked directory is read once.
pub(super) fn collect_dir(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    seen: &mut BTreeSet<PathBuf>,
) -> Result<(), Error> {
    let dir_error = |error| Error::Dir {
        path: dir.to_path_buf(),
        error,
    };
    let real = std::fs::canonicalize(dir).map_err(dir_error)?;
    if !seen.insert(real) {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(dir_error)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(dir_error)?;
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(|error| Error::File {
            path: path.clone(),
            error,
        })?;
        if meta.is_dir() {
            collect_dir(&path, files, seen)?;
        } else if meta.is_file() && is_manifest(&path) {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_blank;

    #[test]
    fn blank_texts() {
        for (text, blank) in [
            ("", true),
            ("\n\n", true),
            ("# only a comment\n---\n  \n---\n", true),
            ("apiVersion: v1\n", false),
            ("---\nkind: List\n", false),
            ("{}", false),
        ] {
            assert_eq!(is_blank(text), blank, "{text:?}");
        }
    }
}
