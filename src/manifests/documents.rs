//! One manifest text split into its documents (`---`-separated YAML, or a stream of JSON
//! values), each handed to the typed model in `super::objects`. Pure: no I/O.

use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::{DocumentError, Error};
use super::objects::Batch;

/// How to parse a text: JSON by extension, YAML otherwise (JSON read as YAML works too, but the
/// JSON parser gives exact positions and is faster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// For stdin: JSON if the text starts like JSON (`kubectl get -o json`), else YAML.
    pub fn sniff(text: &str) -> Self {
        match text.trim_start().as_bytes().first() {
            Some(b'{') => Format::Json,
            _ => Format::Yaml,
        }
    }

    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// Every object in `text`, or the first document that cannot be read (the error names no input;
/// the caller adds it).
pub(super) fn read(text: &str, format: Format) -> Result<Batch, Error> {
    let mut batch = Batch::default();
    let at = |document: usize| {
        move |problem| Error::Document {
            input: None,
            document: document + 1,
            problem,
        }
    };
    match format {
        Format::Json => {
            let stream = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
            for (i, doc) in stream.enumerate() {
                let doc = doc.map_err(|error| at(i)(DocumentError::Json { error }))?;
                batch.add_json(doc, None).map_err(at(i))?;
            }
        }
        Format::Yaml => {
            // Through a JSON `Value`, as `kubectl` turns YAML into JSON before the API server
            // reads it: the same objects are valid or invalid here as there. By way of a YAML
            // `Value`, which refuses a key given twice in one mapping (as kubectl does): two
            // files concatenated without `---` would otherwise keep the second's `spec` and
            // lose the first's hosts without a word.
            for (i, doc) in yaml_serde::Deserializer::from_str(text).enumerate() {
                let doc = yaml_serde::Value::deserialize(doc)
                    .and_then(yaml_serde::from_value::<Value>)
                    .map_err(|error| at(i)(DocumentError::Yaml { error }))?;
                batch.add_value(doc).map_err(at(i))?;
            }
        }
    }
    Ok(batch)
}
