//! Kubernetes objects from manifest files for `render`: YAML or JSON files (several documents
//! each), directories read recursively, or `-` for stdin. `List` objects are unwrapped; kinds that
//! carry no hostnames are skipped.
//!
//! - `files`: the MANIFEST arguments (files, directories, stdin), parsed on all cores;
//! - `documents`: one text split into its documents ([`Format`]); pure;
//! - `objects`: each document sorted into the typed objects the host selection reads; pure;
//! - `error`: what failed, where, and what to do.
//!
//! YAML goes through one parser, `yaml_serde` (the YAML organization's maintained continuation
//! of the deprecated `serde_yaml`, with the same messages and positions), and then the same
//! `Value` path as JSON. One complete path replaced a hand-written fast reader and a slim model
//! kept only for speed: `render` over 10,000 hostnames stays under half a second
//! (`bench/render/README.md`), and one YAML path is easier to trust than three.
//!
//! [`Manifests::from_text`] and [`Manifests::from_bytes`] read text without touching the file
//! system, for tests and fuzzing.

pub mod documents;
pub mod error;
mod files;
mod objects;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::controller::hostnames::kinds::Objects;

use documents::Format;
use error::Error;

/// The objects read so far, by kind (through `Deref`: `manifests.ingresses`), and what was
/// read to get them.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub objects: Objects,
    /// Objects of other kinds (or none), skipped.
    pub skipped: usize,
    /// Files read (stdin counts as one).
    pub files: usize,
}

impl std::ops::Deref for Manifests {
    type Target = Objects;
    fn deref(&self) -> &Objects {
        &self.objects
    }
}

impl std::ops::DerefMut for Manifests {
    fn deref_mut(&mut self) -> &mut Objects {
        &mut self.objects
    }
}

impl Manifests {
    /// Reads every MANIFEST argument in order: a file, a directory or `-` for stdin. Fails on the
    /// first input (in argument order) that cannot be read, naming it.
    pub fn read(args: &[PathBuf]) -> Result<Self, Error> {
        files::read(args)
    }

    /// The objects in one manifest text (no I/O besides warnings logged for objects of API
    /// versions not read). `files` stays 0.
    pub fn from_text(text: &str, format: Format) -> Result<Self, Error> {
        let mut m = Self::default();
        m.add_text(text, format)?;
        Ok(m)
    }

    /// [`Self::from_text`] for bytes, which must be UTF-8 (the fuzzing entry point).
    pub fn from_bytes(bytes: &[u8], format: Format) -> Result<Self, Error> {
        let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8 {
            input: None,
            offset: e.valid_up_to(),
        })?;
        Self::from_text(text, format)
    }

    /// Adds every object in `text` (pure: no I/O besides warnings): all of them, or none and the
    /// first document that cannot be read.
    pub fn add_text(&mut self, text: &str, format: Format) -> Result<(), Error> {
        let batch = documents::read(text, format)?;
        for unread in &batch.unread {
            unread.warn();
        }
        self.append(batch.objects);
        Ok(())
    }

    fn append(&mut self, mut other: Self) {
        self.objects.append(&mut other.objects);
        self.skipped += other.skipped;
        self.files += other.files;
    }
}
