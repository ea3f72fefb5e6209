//! The typed source model: one parsed document (a JSON `Value`, or the raw JSON text) sorted into
//! the typed objects the host selection reads, `List`s unwrapped, other kinds counted as skipped.
//!
//! Objects are checked the way the API server and `kubectl` check them, after YAML became JSON:
//! a plain YAML scalar that reads as a number or a boolean (`port: 80`, `flag: true`) is one in
//! a string field too, and the object is reported invalid, as `kubectl apply` would.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::DocumentError;
use super::Manifests;
use crate::controller::hostnames::kinds::Kind;

/// The objects of one text, and the objects of API versions not read, to warn about in input
/// order once the whole text was read (files are parsed on several threads).
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub objects: Manifests,
    pub unread: Vec<Unread>,
}

/// An Ingress or Gateway-API object of an API version this program does not read.
#[derive(Debug)]
pub(super) struct Unread {
    api_version: String,
    kind: String,
    name: String,
}

impl Unread {
    pub(super) fn warn(&self) {
        tracing::warn!(
            api_version = self.api_version,
            kind = self.kind,
            name = self.name,
            "skipping an object of an API version ouroboros does not read; convert it to networking.k8s.io/v1 (Ingress), gateway.networking.k8s.io/v1, traefik.io/v1alpha1, projectcontour.io/v1 or networking.istio.io/v1"
        );
    }
}

impl Batch {
    /// A JSON document: the typed structs are parsed straight from the text, without building a
    /// `Value` tree first (several times faster on `kubectl get -o json` dumps). Anything this
    /// cannot take (other API versions, fields to fix up, errors) goes through
    /// [`Self::add_value`], which also produces the error messages. `list_kind` is the
    /// (apiVersion, kind) a typed list gives its items.
    pub(super) fn add_json(
        &mut self,
        raw: &RawValue,
        list_kind: Option<(&str, &str)>,
    ) -> Result<(), DocumentError> {
        #[derive(Deserialize)]
        struct Probe<'a> {
            #[serde(rename = "apiVersion", borrow)]
            api_version: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            items: Option<Vec<&'a RawValue>>,
        }
        let slow = |this: &mut Self| -> Result<(), DocumentError> {
            let mut doc: Value =
                serde_json::from_str(raw.get()).map_err(|error| DocumentError::Json { error })?;
            if let (Some((api_version, kind)), Some(obj)) = (list_kind, doc.as_object_mut()) {
                obj.entry("apiVersion")
                    .or_insert_with(|| Value::String(api_version.to_string()));
                obj.entry("kind")
                    .or_insert_with(|| Value::String(kind.to_string()));
            }
            this.add_value(doc)
        };
        let Ok(probe) = serde_json::from_str::<Probe>(raw.get()) else {
            return slow(self);
        };
        let (api_version, kind) = match (&probe.api_version, &probe.kind, list_kind) {
            (Some(a), Some(k), _) => (a.as_ref(), k.as_ref()),
            (None, None, Some((a, k))) => (a, k),
            _ => return slow(self),
        };
        if let (Some(item_kind), Some(items)) = (kind.strip_suffix("List"), &probe.items) {
            let inherited = (!item_kind.is_empty()).then_some((api_version, item_kind));
            for (i, item) in items.iter().enumerate() {
                self.add_json(item, inherited)
                    .map_err(|problem| DocumentError::ListItem {
                        list: kind.to_string(),
                        item: i + 1,
                        problem: Box::new(problem),
                    })?;
            }
            return Ok(());
        }
        // Only the first place's objects take the fast path: the others may lack fields the
        // typed structs require (a TLSRoute before v1 may have no hostnames).
        let direct = Kind::at(api_version, kind).filter(|k| k.api_version() == api_version);
        let Some(direct) = direct else {
            return slow(self);
        };
        let parsed = self.objects.push_json(direct, raw.get());
        // A typed parse that fails is retried through the tolerant path (status dropped,
        // fix-ups applied), which reports the error if there really is one.
        match parsed {
            Ok(()) => Ok(()),
            Err(_) => slow(self),
        }
    }

    /// Sorts one object (or the items of a list) into its kind.
    pub(super) fn add_value(&mut self, mut doc: Value) -> Result<(), DocumentError> {
        let (api_version, kind) = match (&doc["apiVersion"], &doc["kind"]) {
            (Value::String(a), Value::String(k)) => (a.clone(), k.clone()),
            // Empty documents and YAML that is not a Kubernetes object.
            _ => {
                if !doc.is_null() {
                    self.objects.skipped += 1;
                }
                return Ok(());
            }
        };
        if let Some(item_kind) = kind.strip_suffix("List") {
            if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
                for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                    // Typed lists (`IngressList`) from the API omit each item's apiVersion/kind.
                    if let Some(obj) = item.as_object_mut() {
                        if !item_kind.is_empty() {
                            obj.entry("apiVersion")
                                .or_insert_with(|| Value::String(api_version.clone()));
                            obj.entry("kind")
                                .or_insert_with(|| Value::String(item_kind.to_string()));
                        }
                    }
                    self.add_value(item)
                        .map_err(|problem| DocumentError::ListItem {
                            list: kind.clone(),
                            item: i + 1,
                            problem: Box::new(problem),
                        })?;
                }
                return Ok(());
            }
        }
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        // Only spec and metadata matter; status and managedFields only cost time and can
        // carry values newer or older than the typed structs know.
        if let Some(obj) = doc.as_object_mut() {
            obj.remove("status");
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
        let known = Kind::of(group, &kind);
        let read = Kind::at(&api_version, &kind);
        if let Some(k) = read {
            if k == Kind::TlsRoute {
                // Before v1, TLSRoute's hostnames and rules were optional.
                if let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("hostnames")
                        .or_insert_with(|| Value::Array(vec![]));
                    spec.entry("rules").or_insert_with(|| Value::Array(vec![]));
                }
            }
            return push_typed(&mut self.objects, k, doc, &kind);
        }
        let hostname_kind = known.is_some_and(|k| k != Kind::IngressClass);
        if hostname_kind || (group == "extensions" && kind == "Ingress") {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            self.unread.push(Unread {
                name: name.to_string(),
                api_version,
                kind,
            });
        }
        self.objects.skipped += 1;
        Ok(())
    }
}

/// Adds `doc` as an object of `kind`; `kind_name` as the document spelled it, for the message.
fn push_typed(
    objects: &mut Manifests,
    kind: Kind,
    doc: Value,
    kind_name: &str,
) -> Result<(), DocumentError> {
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    let ns = doc["metadata"]["namespace"].as_str().unwrap_or("");
    // Named before the object is consumed, for the message.
    let name = if ns.is_empty() {
        name
    } else {
        format!("{ns}/{name}")
    };
    objects
        .push_value(kind, doc)
        .map_err(|error| DocumentError::InvalidObject {
            kind: kind_name.to_string(),
            name,
            error,
        })
}
