//! Kubernetes objects from manifest files for `render`: YAML or JSON files (several documents
//! each), directories read recursively, or `-` for stdin. `List` objects are unwrapped; kinds that
//! carry no hostnames are skipped.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Context};
use gateway_api::apis::standard::gateways::Gateway;
use gateway_api::apis::standard::grpcroutes::GrpcRoute;
use gateway_api::apis::standard::httproutes::HttpRoute;
use gateway_api::apis::standard::tlsroutes::TlsRoute;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::controller::hostnames::{Sources, GATEWAY_GROUP};

mod fast_yaml;

/// Gateway-API versions whose Gateway/route fields that matter here match v1.
const GATEWAY_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha2"];

/// The objects read so far, by kind.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub ingresses: Vec<Ingress>,
    pub ingress_classes: Vec<IngressClass>,
    pub gateways: Vec<Gateway>,
    pub http_routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<GrpcRoute>,
    pub tls_routes: Vec<TlsRoute>,
    /// Objects of other kinds (or none), skipped.
    pub skipped: usize,
    /// Files read (stdin counts as one).
    pub files: usize,
}

impl Manifests {
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            ingresses: self.ingresses.iter().collect(),
            ingress_classes: self.ingress_classes.iter().collect(),
            gateways: self.gateways.iter().collect(),
            http_routes: self.http_routes.iter().collect(),
            grpc_routes: self.grpc_routes.iter().collect(),
            tls_routes: self.tls_routes.iter().collect(),
        }
    }

    /// Reads every MANIFEST argument in order: a file, a directory or `-` for stdin.
    ///
    /// Files are read and parsed by the fast path on all cores; the results (and any error,
    /// the first in argument order) are then taken in order, so the outcome does not depend on
    /// the threads.
    pub fn read(args: &[PathBuf]) -> anyhow::Result<Self> {
        let mut inputs: Vec<Input> = Vec::new();
        for arg in args {
            if arg.as_os_str() == "-" {
                let mut text = String::new();
                let read = std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading manifests from stdin")
                    .map(|_| {
                        let format = Format::sniff(&text);
                        (text, format)
                    });
                inputs.push(Input::Stdin(read));
                continue;
            }
            let files = std::fs::metadata(arg)
                .with_context(|| format!("{}: cannot read manifest path", arg.display()))
                .and_then(|meta| {
                    if meta.is_dir() {
                        let mut files = Vec::new();
                        let mut seen = BTreeSet::new();
                        collect_dir(arg, &mut files, &mut seen)?;
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
        let mut out = Self::default();
        for (input, parsed) in inputs.into_iter().zip(parsed) {
            let (name, parsed) = match (input, parsed) {
                (Input::Failed(e), _) => return Err(e),
                (Input::Stdin(Err(e)), _) => return Err(e),
                (Input::Stdin(Ok(_)), p) => ("stdin".to_string(), p),
                (Input::File(path), p) => (path.display().to_string(), p),
            };
            out.files += 1;
            match parsed {
                Parsed::Fast(fast, warnings) => out.append_fast(fast, warnings),
                Parsed::Full(text, format) => out.add_text_full(&text, format).context(name)?,
                Parsed::Failed(e) => return Err(e),
                Parsed::Nothing => {}
            }
        }
        Ok(out)
    }

    /// Adds every object in `text` (pure: no I/O).
    pub fn add_text(&mut self, text: &str, format: Format) -> anyhow::Result<()> {
        if let Some((fast, warnings)) = Self::read_slim(text, format) {
            self.append_fast(fast, warnings);
            return Ok(());
        }
        self.add_text_full(text, format)
    }

    fn append_fast(&mut self, fast: Self, warnings: slim::Warnings) {
        for (api_version, kind, name) in warnings {
            warn_unread(&api_version, &kind, name.as_deref().unwrap_or_default());
        }
        self.append(fast);
    }

    /// The fast path over a whole file (see [`slim`]); `None` if the full path must read it.
    fn read_slim(text: &str, format: Format) -> Option<(Self, slim::Warnings)> {
        let mut out = Self::default();
        let mut warnings = Vec::new();
        match format {
            Format::Json => {
                let stream =
                    serde_json::Deserializer::from_str(text).into_iter::<Option<slim::Doc>>();
                for doc in stream {
                    if let Some(doc) = doc.ok()? {
                        slim::add(&mut out, &mut warnings, doc, None).ok()?;
                    }
                }
            }
            Format::Yaml => {
                return Self::read_fast_yaml(text).or_else(|| Self::read_serde_yaml(text));
            }
        }
        Some((out, warnings))
    }

    /// The fast path through serde_yaml, for YAML the fast reader leaves.
    fn read_serde_yaml(text: &str) -> Option<(Self, slim::Warnings)> {
        let mut out = Self::default();
        let mut warnings = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(text) {
            if let Some(doc) = Option::<slim::Doc>::deserialize(doc).ok()? {
                slim::add(&mut out, &mut warnings, doc, None).ok()?;
            }
        }
        Some((out, warnings))
    }

    /// The fastest path, for the common plain block-style YAML (see [`fast_yaml`]); `None` if
    /// the file needs a complete YAML parser.
    fn read_fast_yaml(text: &str) -> Option<(Self, slim::Warnings)> {
        let mut out = Self::default();
        let mut warnings = Vec::new();
        fast_yaml::documents(text, |node| {
            let doc = slim::doc_from(node).map_err(|()| fast_yaml::Unsupported)?;
            slim::add(&mut out, &mut warnings, doc, None).map_err(|()| fast_yaml::Unsupported)
        })
        .ok()?;
        Some((out, warnings))
    }

    fn append(&mut self, mut other: Self) {
        self.ingresses.append(&mut other.ingresses);
        self.ingress_classes.append(&mut other.ingress_classes);
        self.gateways.append(&mut other.gateways);
        self.http_routes.append(&mut other.http_routes);
        self.grpc_routes.append(&mut other.grpc_routes);
        self.tls_routes.append(&mut other.tls_routes);
        self.skipped += other.skipped;
        self.files += other.files;
    }

    /// The full path: every document becomes a `Value` and then a typed object, with fix-ups
    /// and error messages naming the document, line and object.
    fn add_text_full(&mut self, text: &str, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => {
                let stream = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
                for (i, doc) in stream.enumerate() {
                    let doc = doc.map_err(|e| anyhow!("document {}: {e}", i + 1))?;
                    self.add_json(doc, None)
                        .with_context(|| format!("document {}", i + 1))?;
                }
            }
            Format::Yaml => {
                for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
                    let doc = Value::deserialize(doc)
                        .map_err(|e| anyhow!("document {}: {}", i + 1, yaml_error(&e)))?;
                    self.add_value(doc)
                        .with_context(|| format!("document {}", i + 1))?;
                }
            }
        }
        Ok(())
    }

    /// JSON fast path: the typed structs are parsed straight from the text, without building a
    /// `Value` tree first (several times faster on `kubectl get -o json` dumps). Anything the fast
    /// path cannot take (other API versions, fields to fix up) goes through [`Self::add_value`],
    /// which also produces the error messages. `list_kind` is the (apiVersion, kind) a typed list
    /// gives its items.
    fn add_json(&mut self, raw: &RawValue, list_kind: Option<(&str, &str)>) -> anyhow::Result<()> {
        #[derive(Deserialize)]
        struct Probe<'a> {
            #[serde(rename = "apiVersion", borrow)]
            api_version: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            items: Option<Vec<&'a RawValue>>,
        }
        let slow = |this: &mut Self| -> anyhow::Result<()> {
            let mut doc: Value = serde_json::from_str(raw.get())?;
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
                    .with_context(|| format!("{kind} item {}", i + 1))?;
            }
            return Ok(());
        }
        let text = raw.get();
        let parsed = match (api_version, kind) {
            ("networking.k8s.io/v1", "Ingress") => {
                serde_json::from_str(text).map(|mut o: Ingress| {
                    o.metadata.managed_fields = None;
                    self.ingresses.push(o)
                })
            }
            ("networking.k8s.io/v1", "IngressClass") => {
                serde_json::from_str(text).map(|mut o: IngressClass| {
                    o.metadata.managed_fields = None;
                    self.ingress_classes.push(o)
                })
            }
            ("gateway.networking.k8s.io/v1", "Gateway") => {
                serde_json::from_str(text).map(|mut o: Gateway| {
                    o.metadata.managed_fields = None;
                    self.gateways.push(o)
                })
            }
            ("gateway.networking.k8s.io/v1", "HTTPRoute") => {
                serde_json::from_str(text).map(|mut o: HttpRoute| {
                    o.metadata.managed_fields = None;
                    self.http_routes.push(o)
                })
            }
            ("gateway.networking.k8s.io/v1", "GRPCRoute") => {
                serde_json::from_str(text).map(|mut o: GrpcRoute| {
                    o.metadata.managed_fields = None;
                    self.grpc_routes.push(o)
                })
            }
            ("gateway.networking.k8s.io/v1", "TLSRoute") => {
                serde_json::from_str(text).map(|mut o: TlsRoute| {
                    o.metadata.managed_fields = None;
                    self.tls_routes.push(o)
                })
            }
            _ => return slow(self),
        };
        // A typed parse that fails is retried through the tolerant path (status dropped,
        // fix-ups applied), which reports the error if there really is one.
        match parsed {
            Ok(()) => Ok(()),
            Err(_) => slow(self),
        }
    }

    /// Sorts one object (or the items of a list) into its kind.
    fn add_value(&mut self, mut doc: Value) -> anyhow::Result<()> {
        let (api_version, kind) = match (&doc["apiVersion"], &doc["kind"]) {
            (Value::String(a), Value::String(k)) => (a.clone(), k.clone()),
            // Empty documents and YAML that is not a Kubernetes object.
            _ => {
                if !doc.is_null() {
                    self.skipped += 1;
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
                        .with_context(|| format!("{kind} item {}", i + 1))?;
                }
                return Ok(());
            }
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        // Only spec and metadata matter; status and managedFields only cost time and can
        // carry values newer or older than the typed structs know.
        if let Some(obj) = doc.as_object_mut() {
            obj.remove("status");
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
        match (group, kind.as_str()) {
            ("networking.k8s.io", "Ingress") if version == "v1" => {
                self.ingresses.push(typed(doc, &kind)?)
            }
            ("networking.k8s.io", "IngressClass") if version == "v1" => {
                self.ingress_classes.push(typed(doc, &kind)?)
            }
            (GATEWAY_GROUP, "Gateway" | "HTTPRoute" | "GRPCRoute" | "TLSRoute")
                if GATEWAY_VERSIONS.contains(&version) =>
            {
                match kind.as_str() {
                    "Gateway" => self.gateways.push(typed(doc, &kind)?),
                    "HTTPRoute" => self.http_routes.push(typed(doc, &kind)?),
                    "GRPCRoute" => self.grpc_routes.push(typed(doc, &kind)?),
                    _ => {
                        // Before v1, TLSRoute's hostnames and rules were optional.
                        if let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.entry("hostnames")
                                .or_insert_with(|| Value::Array(vec![]));
                            spec.entry("rules").or_insert_with(|| Value::Array(vec![]));
                        }
                        self.tls_routes.push(typed(doc, &kind)?)
                    }
                }
            }
            ("networking.k8s.io" | "extensions", "Ingress")
            | (GATEWAY_GROUP, "Gateway" | "HTTPRoute" | "GRPCRoute" | "TLSRoute") => {
                warn_unread(
                    &api_version,
                    &kind,
                    doc["metadata"]["name"].as_str().unwrap_or_default(),
                );
                self.skipped += 1;
            }
            _ => self.skipped += 1,
        }
        Ok(())
    }
}

/// One manifest source, in argument order.
enum Input {
    Stdin(anyhow::Result<(String, Format)>),
    File(PathBuf),
    /// A path that could not be listed; reported when its turn comes.
    Failed(anyhow::Error),
}

enum Parsed {
    /// Taken by the fast path.
    Fast(Manifests, slim::Warnings),
    /// For the full path (on the calling thread, in order).
    Full(String, Format),
    Failed(anyhow::Error),
    /// Nothing to parse (the input already failed).
    Nothing,
}

fn parse_one(input: &Input) -> Parsed {
    let (text, format) = match input {
        Input::Stdin(Ok((text, format))) => (Cow::Borrowed(text.as_str()), *format),
        Input::Stdin(Err(_)) | Input::Failed(_) => return Parsed::Nothing,
        Input::File(path) => match std::fs::read_to_string(path) {
            Ok(text) => (Cow::Owned(text), Format::of(path)),
            Err(e) => {
                return Parsed::Failed(
                    anyhow::Error::new(e).context(format!("{}: cannot read", path.display())),
                )
            }
        },
    };
    match Manifests::read_slim(&text, format) {
        Some((fast, warnings)) => Parsed::Fast(fast, warnings),
        None => Parsed::Full(text.into_owned(), format),
    }
}

/// [`parse_one`] for every input, on up to one thread per core; results in input order.
fn parse_all(inputs: &[Input]) -> Vec<Parsed> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(inputs.len());
    if threads <= 1 {
        return inputs.iter().map(parse_one).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Parsed>>> = inputs.iter().map(|_| Mutex::new(None)).collect();
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
            s.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Parsed::Failed(anyhow!("a manifest file was not parsed")))
        })
        .collect()
}

fn warn_unread(api_version: &str, kind: &str, name: &str) {
    tracing::warn!(
        api_version,
        kind,
        name,
        "skipping an object of an API version ouroboros does not read; convert it to networking.k8s.io/v1 (Ingress) or gateway.networking.k8s.io/v1"
    );
}

fn typed<T: DeserializeOwned>(doc: Value, kind: &str) -> anyhow::Result<T> {
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    let ns = doc["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    serde_json::from_value(doc).map_err(|e| {
        let who = if ns.is_empty() {
            name
        } else {
            format!("{ns}/{name}")
        };
        anyhow!("{kind} {who:?} is not a valid {kind}: {e}")
    })
}

fn yaml_error(e: &serde_yaml::Error) -> String {
    // serde_yaml's message already ends with "at line L column C" when it has a location.
    e.to_string()
}

/// How to parse a file: JSON by extension, YAML otherwise (JSON read as YAML works too, but the
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

fn is_manifest(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        ["yaml", "yml", "json"]
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
}

/// Files under `dir` in sorted path order; hidden entries (`.git`, editor files) are skipped and
/// a symlinked directory is read once.
fn collect_dir(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    seen: &mut BTreeSet<PathBuf>,
) -> anyhow::Result<()> {
    let real = std::fs::canonicalize(dir)
        .with_context(|| format!("{}: cannot resolve directory", dir.display()))?;
    if !seen.insert(real) {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list directory", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: cannot list directory", dir.display()))?;
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        let meta =
            std::fs::metadata(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        if meta.is_dir() {
            collect_dir(&path, files, seen)?;
        } else if meta.is_file() && is_manifest(&path) {
            files.push(path);
        }
    }
    Ok(())
}

/// The fast path: each document is deserialized once into [`Slim`], which keeps only the fields
/// the host selection reads and skips everything else (rules, status, managedFields, labels)
/// without building it, and the typed objects are then assembled from those fields. A file the
/// fast path cannot take whole (non-mapping documents, missing required fields, type mismatches)
/// is read again by the full path, which applies the fix-ups and produces the error messages.
mod slim {
    use std::collections::BTreeMap;

    use gateway_api::apis::standard::gateways::{Gateway, GatewayListeners, GatewaySpec};
    use gateway_api::apis::standard::grpcroutes::{GrpcRoute, GrpcRouteParentRefs, GrpcRouteSpec};
    use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteParentRefs, HttpRouteSpec};
    use gateway_api::apis::standard::tlsroutes::{TlsRoute, TlsRouteParentRefs, TlsRouteSpec};
    use k8s_openapi::api::networking::v1::{Ingress, IngressClass, IngressSpec, IngressTLS};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde::Deserialize;

    use super::fast_yaml::Node;
    use super::{Manifests, GATEWAY_GROUP, GATEWAY_VERSIONS};
    use crate::controller::hostnames::{DEFAULT_CLASS_ANNOTATION, INGRESS_CLASS_ANNOTATION};

    #[derive(Deserialize)]
    pub(super) struct Doc {
        #[serde(rename = "apiVersion")]
        api_version: Option<String>,
        kind: Option<String>,
        #[serde(default)]
        metadata: Meta,
        spec: Option<Spec>,
        items: Option<Vec<Doc>>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        annotations: Option<BTreeMap<String, String>>,
        deletion_timestamp: Option<Time>,
    }

    /// The union of the spec fields of every kind read.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        ingress_class_name: Option<String>,
        tls: Option<Tls>,
        gateway_class_name: Option<String>,
        listeners: Option<Vec<Listener>>,
        hostnames: Option<Vec<String>>,
        parent_refs: Option<Vec<ParentRef>>,
    }

    /// Ingress `spec.tls` (a list) or Gateway `spec.tls` (an object, not read here).
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tls {
        Ingress(Vec<IngressTls>),
        Other(serde::de::IgnoredAny),
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct IngressTls {
        hosts: Option<Vec<String>>,
        secret_name: Option<String>,
    }

    #[derive(Deserialize)]
    struct Listener {
        name: String,
        port: i32,
        protocol: String,
        hostname: Option<String>,
    }

    #[derive(Deserialize)]
    struct ParentRef {
        group: Option<String>,
        kind: Option<String>,
        namespace: Option<String>,
        name: String,
    }

    /// [`fast_yaml`](super::fast_yaml)'s tree as a [`Doc`], with the outcome deserializing the
    /// same text into `Doc` has; `Err(())` where that needs the serde path to decide.
    /// Annotations written as block scalars are left out unless the selection reads them.
    pub(super) fn doc_from(node: Node<'_>) -> Result<Doc, ()> {
        let Node::Map(entries) = node else {
            return Err(());
        };
        let mut doc = Doc {
            api_version: None,
            kind: None,
            metadata: Meta::default(),
            spec: None,
            items: None,
        };
        for (key, value) in entries {
            match &*key {
                "apiVersion" => doc.api_version = opt_string(value)?,
                "kind" => doc.kind = opt_string(value)?,
                "metadata" => doc.metadata = meta_from(value)?,
                "spec" => {
                    doc.spec = match value {
                        Node::Null => None,
                        v => Some(spec_from(v)?),
                    }
                }
                "items" => {
                    doc.items = match value {
                        Node::Null => None,
                        Node::Seq(items) => {
                            Some(items.into_iter().map(doc_from).collect::<Result<_, _>>()?)
                        }
                        _ => return Err(()),
                    }
                }
                _ => {}
            }
        }
        Ok(doc)
    }

    /// An `Option<String>` field: serde_yaml gives a plain scalar's text whatever it looks like
    /// (`80`, `10m`, `true`), and null for `~`, `null` or nothing.
    fn opt_string(node: Node<'_>) -> Result<Option<String>, ()> {
        match node {
            Node::Null => Ok(None),
            Node::Str(s) => Ok(Some(s.into_owned())),
            Node::Plain(s) => Ok(Some(s.to_string())),
            _ => Err(()),
        }
    }

    /// The same inside Ingress `spec.tls`, which is read through an untagged enum: there a
    /// plain `80` is a number and makes the whole `tls` something else, so such values are
    /// left to the serde path.
    fn opt_string_typed(node: Node<'_>) -> Result<Option<String>, ()> {
        match node {
            Node::Plain(_) => Err(()),
            n => opt_string(n),
        }
    }

    fn opt_strings_typed(node: Node<'_>) -> Result<Option<Vec<String>>, ()> {
        match node {
            Node::Null => Ok(None),
            Node::Seq(items) => Ok(Some(
                items
                    .into_iter()
                    .map(|i| opt_string_typed(i)?.ok_or(()))
                    .collect::<Result<_, _>>()?,
            )),
            _ => Err(()),
        }
    }

    fn string(node: Node<'_>) -> Result<String, ()> {
        opt_string(node)?.ok_or(())
    }

    fn opt_strings(node: Node<'_>) -> Result<Option<Vec<String>>, ()> {
        match node {
            Node::Null => Ok(None),
            Node::Seq(items) => Ok(Some(
                items.into_iter().map(string).collect::<Result<_, _>>()?,
            )),
            _ => Err(()),
        }
    }

    fn opt_maps(node: Node<'_>) -> Result<Option<Vec<Entries<'_>>>, ()> {
        match node {
            Node::Null => Ok(None),
            Node::Seq(items) => Ok(Some(
                items
                    .into_iter()
                    .map(|i| match i {
                        Node::Map(e) => Ok(e),
                        _ => Err(()),
                    })
                    .collect::<Result<_, _>>()?,
            )),
            _ => Err(()),
        }
    }

    type Entries<'a> = Vec<(std::borrow::Cow<'a, str>, Node<'a>)>;

    fn meta_from(node: Node<'_>) -> Result<Meta, ()> {
        let Node::Map(entries) = node else {
            return Err(());
        };
        let mut meta = Meta::default();
        for (key, value) in entries {
            match &*key {
                "name" => meta.name = opt_string(value)?,
                "namespace" => meta.namespace = opt_string(value)?,
                "annotations" => {
                    meta.annotations = match value {
                        Node::Null => None,
                        Node::Map(entries) => {
                            let mut annotations = BTreeMap::new();
                            for (k, v) in entries {
                                match v {
                                    Node::Str(v) => {
                                        annotations.insert(k.into_owned(), v.into_owned());
                                    }
                                    Node::Plain(v) => {
                                        annotations.insert(k.into_owned(), v.to_string());
                                    }
                                    // A string whose text was not kept (often
                                    // last-applied-configuration): fine unless read.
                                    Node::Block
                                        if k != INGRESS_CLASS_ANNOTATION
                                            && k != DEFAULT_CLASS_ANNOTATION => {}
                                    _ => return Err(()),
                                }
                            }
                            Some(annotations)
                        }
                        _ => return Err(()),
                    }
                }
                "deletionTimestamp" => {
                    meta.deletion_timestamp = match opt_string(value)? {
                        None => None,
                        Some(t) => Some(
                            serde_json::from_value(serde_json::Value::String(t)).map_err(|_| ())?,
                        ),
                    }
                }
                _ => {}
            }
        }
        Ok(meta)
    }

    fn spec_from(node: Node<'_>) -> Result<Spec, ()> {
        let Node::Map(entries) = node else {
            return Err(());
        };
        let mut spec = Spec {
            ingress_class_name: None,
            tls: None,
            gateway_class_name: None,
            listeners: None,
            hostnames: None,
            parent_refs: None,
        };
        for (key, value) in entries {
            match &*key {
                "ingressClassName" => spec.ingress_class_name = opt_string(value)?,
                "gatewayClassName" => spec.gateway_class_name = opt_string(value)?,
                "hostnames" => spec.hostnames = opt_strings(value)?,
                "tls" => {
                    spec.tls = match value {
                        Node::Null => None,
                        v @ Node::Seq(_) => Some(Tls::Ingress(
                            opt_maps(v)?
                                .unwrap_or_default()
                                .into_iter()
                                .map(|entries| {
                                    let mut t = IngressTls {
                                        hosts: None,
                                        secret_name: None,
                                    };
                                    for (k, v) in entries {
                                        match &*k {
                                            "hosts" => t.hosts = opt_strings_typed(v)?,
                                            "secretName" => t.secret_name = opt_string_typed(v)?,
                                            _ => {}
                                        }
                                    }
                                    Ok(t)
                                })
                                .collect::<Result<_, ()>>()?,
                        )),
                        // Gateway's `spec.tls` is a mapping, not read.
                        _ => Some(Tls::Other(serde::de::IgnoredAny)),
                    }
                }
                "listeners" => {
                    spec.listeners = opt_maps(value)?
                        .map(|ls| {
                            ls.into_iter()
                                .map(|entries| {
                                    let (mut name, mut port, mut protocol, mut hostname) =
                                        (None, None, None, None);
                                    for (k, v) in entries {
                                        match &*k {
                                            "name" => name = Some(string(v)?),
                                            "port" => port = Some(int(v)?),
                                            "protocol" => protocol = Some(string(v)?),
                                            "hostname" => hostname = opt_string(v)?,
                                            _ => {}
                                        }
                                    }
                                    Ok(Listener {
                                        name: name.ok_or(())?,
                                        port: port.ok_or(())?,
                                        protocol: protocol.ok_or(())?,
                                        hostname,
                                    })
                                })
                                .collect::<Result<_, ()>>()
                        })
                        .transpose()?
                }
                "parentRefs" => {
                    spec.parent_refs = opt_maps(value)?
                        .map(|refs| {
                            refs.into_iter()
                                .map(|entries| {
                                    let mut p = ParentRef {
                                        group: None,
                                        kind: None,
                                        namespace: None,
                                        name: String::new(),
                                    };
                                    let mut name = None;
                                    for (k, v) in entries {
                                        match &*k {
                                            "group" => p.group = opt_string(v)?,
                                            "kind" => p.kind = opt_string(v)?,
                                            "namespace" => p.namespace = opt_string(v)?,
                                            "name" => name = Some(string(v)?),
                                            _ => {}
                                        }
                                    }
                                    p.name = name.ok_or(())?;
                                    Ok(p)
                                })
                                .collect::<Result<_, ()>>()
                        })
                        .transpose()?
                }
                _ => {}
            }
        }
        Ok(spec)
    }

    /// A port: plain decimal digits only (other spellings are left to the serde path).
    fn int(node: Node<'_>) -> Result<i32, ()> {
        match node {
            Node::Plain(s)
                if !s.is_empty()
                    && s.len() <= 9
                    && s.bytes().all(|b| b.is_ascii_digit())
                    && !(s.len() > 1 && s.starts_with('0')) =>
            {
                s.parse().map_err(|_| ())
            }
            _ => Err(()),
        }
    }

    /// Objects of an API version not read, warned about once the whole file is accepted.
    pub(super) type Warnings = Vec<(String, String, Option<String>)>;

    impl Meta {
        fn typed(self) -> ObjectMeta {
            ObjectMeta {
                name: self.name,
                namespace: self.namespace,
                annotations: self.annotations,
                deletion_timestamp: self.deletion_timestamp,
                ..ObjectMeta::default()
            }
        }
    }

    macro_rules! parent_refs {
        ($refs:expr, $ty:ident) => {
            $refs.map(|refs| {
                refs.into_iter()
                    .map(|p| $ty {
                        group: p.group,
                        kind: p.kind,
                        namespace: p.namespace,
                        name: p.name,
                        ..$ty::default()
                    })
                    .collect()
            })
        };
    }

    /// Adds one document (or a list's items). `Err(())`: the full path must read the file.
    pub(super) fn add(
        out: &mut Manifests,
        warnings: &mut Warnings,
        doc: Doc,
        inherited: Option<(&str, &str)>,
    ) -> Result<(), ()> {
        let Doc {
            api_version,
            kind,
            metadata,
            spec,
            items,
        } = doc;
        let (api_version, kind) = match (api_version, kind, inherited) {
            (Some(a), Some(k), _) => (a, k),
            (a, k, Some((ia, ik))) => (
                a.unwrap_or_else(|| ia.to_string()),
                k.unwrap_or_else(|| ik.to_string()),
            ),
            _ => {
                out.skipped += 1;
                return Ok(());
            }
        };
        if let (Some(item_kind), Some(items)) = (kind.strip_suffix("List"), items) {
            let inherited = (!item_kind.is_empty()).then_some((api_version.as_str(), item_kind));
            for item in items {
                add(out, warnings, item, inherited)?;
            }
            return Ok(());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let gateway_version = GATEWAY_VERSIONS.contains(&version);
        match (group, kind.as_str()) {
            ("networking.k8s.io", "Ingress") if version == "v1" => {
                let spec = match spec {
                    Some(s) => {
                        let tls = match s.tls {
                            Some(Tls::Ingress(tls)) => Some(
                                tls.into_iter()
                                    .map(|t| IngressTLS {
                                        hosts: t.hosts,
                                        secret_name: t.secret_name,
                                    })
                                    .collect(),
                            ),
                            Some(Tls::Other(_)) => return Err(()),
                            None => None,
                        };
                        Some(IngressSpec {
                            ingress_class_name: s.ingress_class_name,
                            tls,
                            ..IngressSpec::default()
                        })
                    }
                    None => None,
                };
                out.ingresses.push(Ingress {
                    metadata: metadata.typed(),
                    spec,
                    status: None,
                });
            }
            ("networking.k8s.io", "IngressClass") if version == "v1" => {
                out.ingress_classes.push(IngressClass {
                    metadata: metadata.typed(),
                    spec: None,
                });
            }
            (GATEWAY_GROUP, "Gateway") if gateway_version => {
                let s = spec.ok_or(())?;
                let listeners = s
                    .listeners
                    .ok_or(())?
                    .into_iter()
                    .map(|l| GatewayListeners {
                        name: l.name,
                        port: l.port,
                        protocol: l.protocol,
                        hostname: l.hostname,
                        ..GatewayListeners::default()
                    })
                    .collect();
                let spec = GatewaySpec {
                    gateway_class_name: s.gateway_class_name.ok_or(())?,
                    listeners,
                    ..GatewaySpec::default()
                };
                let mut gw = Gateway::new("", spec);
                gw.metadata = metadata.typed();
                out.gateways.push(gw);
            }
            (GATEWAY_GROUP, "HTTPRoute") if gateway_version => {
                let s = spec.ok_or(())?;
                let spec = HttpRouteSpec {
                    hostnames: s.hostnames,
                    parent_refs: parent_refs!(s.parent_refs, HttpRouteParentRefs),
                    ..HttpRouteSpec::default()
                };
                let mut r = HttpRoute::new("", spec);
                r.metadata = metadata.typed();
                out.http_routes.push(r);
            }
            (GATEWAY_GROUP, "GRPCRoute") if gateway_version => {
                let s = spec.ok_or(())?;
                let spec = GrpcRouteSpec {
                    hostnames: s.hostnames,
                    parent_refs: parent_refs!(s.parent_refs, GrpcRouteParentRefs),
                    ..GrpcRouteSpec::default()
                };
                let mut r = GrpcRoute::new("", spec);
                r.metadata = metadata.typed();
                out.grpc_routes.push(r);
            }
            (GATEWAY_GROUP, "TLSRoute") if gateway_version => {
                let s = spec.ok_or(())?;
                let spec = TlsRouteSpec {
                    hostnames: s.hostnames.unwrap_or_default(),
                    parent_refs: parent_refs!(s.parent_refs, TlsRouteParentRefs),
                    ..TlsRouteSpec::default()
                };
                let mut r = TlsRoute::new("", spec);
                r.metadata = metadata.typed();
                out.tls_routes.push(r);
            }
            ("networking.k8s.io" | "extensions", "Ingress")
            | (GATEWAY_GROUP, "Gateway" | "HTTPRoute" | "GRPCRoute" | "TLSRoute") => {
                warnings.push((api_version.clone(), kind.clone(), metadata.name));
                out.skipped += 1;
            }
            _ => out.skipped += 1,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, format: Format) -> anyhow::Result<Manifests> {
        let mut m = Manifests::default();
        m.add_text(text, format)?;
        Ok(m)
    }

    const INGRESS: &str = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  tls:
  - hosts: [shop.example.com]
";

    #[test]
    fn yaml_documents_and_kinds() {
        let text = format!(
            "---\n# only a comment\n---\n{INGRESS}---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n---\n\
             replicaCount: 3\n---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: nginx}}\nspec: {{}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g}}\nspec:\n  gatewayClassName: c\n  listeners:\n  - {{name: l, port: 443, protocol: HTTPS, hostname: g.example.com}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1beta1\nkind: HTTPRoute\nmetadata: {{name: h}}\nspec: {{hostnames: [h.example.com]}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {{name: r}}\nspec: {{}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {{name: t}}\nspec: {{parentRefs: [{{name: g}}]}}\n---\n\
             apiVersion: networking.k8s.io/v1beta1\nkind: Ingress\nmetadata: {{name: old}}\nspec: {{}}\n"
        );
        let m = parse(&text, Format::Yaml).unwrap();
        assert_eq!(m.ingresses.len(), 1);
        assert_eq!(m.ingresses[0].metadata.name.as_deref(), Some("web"));
        assert_eq!(m.ingress_classes.len(), 1);
        assert_eq!(m.gateways.len(), 1);
        assert_eq!(m.http_routes.len(), 1);
        assert_eq!(m.grpc_routes.len(), 1);
        assert_eq!(m.tls_routes.len(), 1);
        assert!(m.tls_routes[0].spec.hostnames.is_empty());
        // Service, the values file and the v1beta1 Ingress.
        assert_eq!(m.skipped, 3);
    }

    #[test]
    fn lists_are_unwrapped() {
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "a"},
             "spec": {"tls": [{"hosts": ["a.example.com"]}]}, "status": {"loadBalancer": {}}},
            {"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "items": [
                {"metadata": {"name": "nested", "managedFields": [{"manager": "kubectl"}]}}]}
        ]}
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "metadata": {}, "items": [
            {"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}]}"#;
        let m = parse(list, Format::Json).unwrap();
        let names: Vec<_> = m
            .ingresses
            .iter()
            .map(|i| i.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "nested", "b", "c"]);
        assert!(m.ingresses[1].metadata.managed_fields.is_none());
        // A list with no items is just empty.
        let m = parse("apiVersion: v1\nkind: List\nitems: []\n", Format::Yaml).unwrap();
        assert!(m.ingresses.is_empty() && m.skipped == 0);
    }

    #[test]
    fn errors_name_document_and_line() {
        for (text, format, want) in [
            (
                format!("{INGRESS}---\napiVersion: v1\nkind: [unclosed\n"),
                Format::Yaml,
                vec!["document 2", "line 11"],
            ),
            (
                "{\"apiVersion\": \"v1\",\n \"kind\": }".to_string(),
                Format::Json,
                vec!["document 1", "line 2"],
            ),
            (
                format!("{INGRESS}---\n{}", INGRESS.replace("[shop.example.com]", "7")),
                Format::Yaml,
                vec!["document 2", "Ingress \"shop/web\" is not a valid Ingress"],
            ),
            (
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: gateway.networking.k8s.io/v1\n  kind: Gateway\n  metadata: {name: g}\n  spec: {}\n".to_string(),
                Format::Yaml,
                vec!["document 1", "List item 1", "Gateway \"g\""],
            ),
        ] {
            let err = format!("{:#}", parse(&text, format).unwrap_err());
            for w in want {
                assert!(err.contains(w), "{err:?} lacks {w:?}");
            }
        }
    }

    #[test]
    fn json_fast_path_falls_back() {
        // v1alpha2 TLSRoute without hostnames/rules and a status the typed struct would reject:
        // both need the tolerant path.
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
             "metadata": {"name": "t"}, "spec": {}},
            {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
             "metadata": {"name": "g"}, "spec": {"gatewayClassName": "c", "listeners": []},
             "status": {"conditions": "not-a-list"}},
            {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": "h"}, "spec": {"hostnames": ["h.example.com"]}}
        ]}"#;
        let m = parse(text, Format::Json).unwrap();
        assert_eq!(m.tls_routes.len(), 1);
        assert_eq!(m.gateways.len(), 1);
        assert_eq!(m.http_routes.len(), 1);
        let bad = r#"{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "x", "namespace": "n"}, "spec": {"tls": "nope"}}"#;
        let err = format!("{:#}", parse(bad, Format::Json).unwrap_err());
        assert!(
            err.contains("document 1") && err.contains("Ingress \"n/x\" is not a valid Ingress"),
            "{err}"
        );
    }

    /// The slim fast path selects exactly what the full path selects, on every shipped
    /// manifest, with and without filters.
    #[test]
    fn fast_path_matches_full_path() {
        use crate::controller::hostnames::{desired, Filters};
        use crate::hostname::HostPolicy;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut seen = BTreeSet::new();
        collect_dir(&root.join("examples"), &mut files, &mut seen).unwrap();
        collect_dir(
            &root.join("tests/fixtures/manifests"),
            &mut files,
            &mut seen,
        )
        .unwrap();
        let policy = HostPolicy::new("cluster.local", &[], &[]);
        let filters = [
            Filters::default(),
            Filters {
                gateway_api: true,
                ..Filters::default()
            },
            Filters {
                gateway_api: true,
                ingress_class: Some("nginx".into()),
                gateway_class: Some("eg".into()),
            },
        ];
        let mut fast_files = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let format = Format::of(&file);
            let mut full = Manifests::default();
            let full_result = full.add_text_full(&text, format);
            let Some((fast, _)) = Manifests::read_slim(&text, format) else {
                continue;
            };
            fast_files += 1;
            assert!(
                full_result.is_ok(),
                "{}: only the fast path took it",
                file.display()
            );
            assert_eq!(fast.skipped, full.skipped, "{}", file.display());
            for f in &filters {
                let (a, b) = (
                    desired(&fast.sources(), f, &policy),
                    desired(&full.sources(), f, &policy),
                );
                assert_eq!(a, b, "{} {f:?}", file.display());
            }
        }
        assert!(fast_files >= 8, "{fast_files}");
    }

    /// What the selection sees of `m`, for comparing readers: objects by kind and name,
    /// the count of skipped objects, and the host sets under several filters.
    fn outcome(m: &Manifests) -> String {
        use crate::controller::hostnames::{desired, Filters};
        use crate::hostname::HostPolicy;
        let policy = HostPolicy::new("cluster.local", &[], &[]);
        use crate::controller::hostnames::{DEFAULT_CLASS_ANNOTATION, INGRESS_CLASS_ANNOTATION};
        // The fast reader leaves out annotations written as block scalars unless read.
        let read = |o: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let a = o.annotations.as_ref();
            (
                o.name.clone(),
                o.namespace.clone(),
                o.deletion_timestamp.clone(),
                a.and_then(|a| a.get(INGRESS_CLASS_ANNOTATION)).cloned(),
                a.and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION)).cloned(),
            )
        };
        let mut out = format!(
            "ingresses {:?}\nclasses {:?}\ngateways {:?}\nroutes {:?} {:?} {:?}\nskipped {}\n",
            m.ingresses
                .iter()
                .map(|o| (read(&o.metadata), &o.spec))
                .collect::<Vec<_>>(),
            m.ingress_classes
                .iter()
                .map(|o| read(&o.metadata))
                .collect::<Vec<_>>(),
            m.gateways
                .iter()
                .map(|o| (read(&o.metadata), &o.spec))
                .collect::<Vec<_>>(),
            m.http_routes
                .iter()
                .map(|o| (read(&o.metadata), &o.spec))
                .collect::<Vec<_>>(),
            m.grpc_routes
                .iter()
                .map(|o| (read(&o.metadata), &o.spec))
                .collect::<Vec<_>>(),
            m.tls_routes
                .iter()
                .map(|o| (read(&o.metadata), &o.spec))
                .collect::<Vec<_>>(),
            m.skipped,
        );
        for f in [
            Filters::default(),
            Filters {
                gateway_api: true,
                ..Filters::default()
            },
            Filters {
                gateway_api: true,
                ingress_class: Some("nginx".into()),
                gateway_class: Some("eg".into()),
            },
        ] {
            out += &format!("{f:?} => {:?}\n", desired(&m.sources(), &f, &policy));
        }
        out
    }

    /// The reader before the fast YAML reader: serde_yaml into the slim structs, else the full
    /// path.
    fn previous_reader(text: &str) -> anyhow::Result<(Manifests, slim::Warnings)> {
        if let Some(read) = Manifests::read_serde_yaml(text) {
            return Ok(read);
        }
        let mut m = Manifests::default();
        m.add_text_full(text, Format::Yaml)?;
        Ok((m, Vec::new()))
    }

    /// Wherever the fast YAML reader accepts a text, the result is the one the previous readers
    /// give (a text they reject, it must not accept); checked on every shipped YAML manifest
    /// and on variations of the shapes it reads.
    #[test]
    fn fast_yaml_reader_matches_previous_readers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut seen = BTreeSet::new();
        for dir in ["examples", "tests/fixtures/manifests", "tests/fixtures"] {
            collect_dir(&root.join(dir), &mut files, &mut seen).unwrap();
        }
        let mut texts: Vec<(String, String)> = files
            .iter()
            .filter(|f| Format::of(f) == Format::Yaml)
            .map(|f| (f.display().to_string(), std::fs::read_to_string(f).unwrap()))
            .collect();
        let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n  namespace: shop\n  annotations:\n    kubernetes.io/ingress.class: nginx\n    kubectl.kubernetes.io/last-applied-configuration: |\n      {\"kind\":\"Ingress\"}\n  labels: {app: web, tier: [a, b]}\nspec:\n  tls:\n  - hosts:\n    - shop.example.com\n    - '*.shop.example.com'\n    secretName: tls\n  rules:\n  - host: shop.example.com\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend: {service: {name: web, port: {number: 80}}}\nstatus:\n  loadBalancer: {}\n";
        let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: eg\n  listeners:\n  - name: https\n    port: 443\n    protocol: HTTPS\n    hostname: \"gw.example.com\"\n    tls: {mode: Terminate}\n";
        let route = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\n  namespace: web\nspec:\n  parentRefs:\n  - name: gw\n    namespace: infra\n  hostnames: [route.example.com, \"Route2.Example.com.\"]\n";
        let variations = [
            ingress.to_string(),
            format!("---\n{ingress}---\n{gateway}---\n{route}...\n"),
            format!("{ingress}---\n# only a comment\n---\n{gateway}---\n{route}"),
            format!("apiVersion: v1\nkind: List\nitems:\n{}", {
                let mut items = String::new();
                for doc in [ingress, gateway, route] {
                    for (i, line) in doc.lines().enumerate() {
                        items += if i == 0 { "- " } else { "  " };
                        items += line;
                        items += "\n";
                    }
                }
                items
            }),
            ingress.replace("  namespace: shop\n", ""),
            ingress.replace("ingressClassName", "x").replace("kubernetes.io/ingress.class: nginx", "kubernetes.io/ingress.class: |\n      nginx"),
            ingress.replace("secretName: tls", "secretName: 7"),
            ingress.replace("- shop.example.com", "- 10.0.0.1"),
            ingress.replace("- shop.example.com", "- \"bad name\"\n    - null"),
            ingress.replace("  name: web\n", "  name: web\n  deletionTimestamp: \"2024-01-01T00:00:00Z\"\n"),
            ingress.replace("  name: web\n", "  name: web\n  deletionTimestamp: \"not a time\"\n"),
            ingress.replace("  name: web\n", "  name:\n"),
            ingress.replace("metadata:\n", "metadata: {}\nx:\n"),
            ingress.replace("  tls:\n", "  tls: {a: b}\n  x:\n"),
            ingress.replace("spec:\n", "spec: null\nx:\n"),
            ingress.replace("networking.k8s.io/v1", "networking.k8s.io/v1beta1"),
            gateway.replace("    port: 443\n", "    port: \"443\"\n"),
            gateway.replace("    port: 443\n", ""),
            gateway.replace("  gatewayClassName: eg\n", ""),
            gateway.replace("gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1beta1"),
            route.replace("  - name: gw\n", "  - group: x\n"),
            route.replace("HTTPRoute", "TLSRoute"),
            route.replace("HTTPRoute", "GRPCRoute"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n".into(),
            "replicaCount: 3\nimage: {tag: latest}\n".into(),
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: nginx\n  annotations:\n    ingressclass.kubernetes.io/is-default-class: \"true\"\nspec: {controller: k8s.io/ingress-nginx}\n".into(),
            "kind: Ingress\napiVersion: networking.k8s.io/v1\nmetadata: {name: a}\nspec: {tls: [{hosts: [a.example.com]}]}\nkind: Ingress\n".into(),
            ingress.replace("ssl-redirect", "x").replace("  labels:", "    proxy-body-size: 10m\n    replicas: 3\n    flag: true\n  labels:"),
            ingress.replace("kubernetes.io/ingress.class: nginx", "kubernetes.io/ingress.class: 1nginx"),
            ingress.replace("  name: web\n", "  name: 0123\n"),
            ingress.replace("  name: web\n", "  name: web\n  annotations2: {a: ~}\n"),
            ingress.replace("  name: web\n", "  name: web\n  deletionTimestamp: 2024-01-01T00:00:00Z\n"),
            route.replace("route.example.com,", "1.example.com, 10.0.0.1, true,"),
            gateway.replace("\"gw.example.com\"", "2gw.example.com"),
            route.replace("  - name: gw\n", "  - name: 7\n"),
        ];
        for (i, v) in variations.into_iter().enumerate() {
            texts.push((format!("variation {i}"), v));
        }
        let mut accepted = 0;
        for (name, text) in &texts {
            let Some((fast, fast_warnings)) = Manifests::read_fast_yaml(text) else {
                continue;
            };
            accepted += 1;
            let (before, before_warnings) = match previous_reader(text) {
                Ok(r) => r,
                Err(e) => {
                    panic!("{name}: the fast reader accepted what the others reject: {e:#}\n{text}")
                }
            };
            assert_eq!(outcome(&fast), outcome(&before), "{name}\n{text}");
            if !before_warnings.is_empty() {
                assert_eq!(fast_warnings, before_warnings, "{name}");
            }
        }
        assert!(accepted >= texts.len() / 2, "{accepted} of {}", texts.len());
    }

    /// The shapes `kubectl get -o yaml`, Helm and the render benchmark write are taken by the
    /// fast reader (not handed on to serde_yaml), and read as the previous readers read them.
    #[test]
    fn fast_yaml_reader_takes_common_shapes() {
        let bench = "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: app-0\n  namespace: team-0\n  labels:\n    app.kubernetes.io/name: app-0\nspec:\n  ingressClassName: nginx\n  tls:\n    - hosts:\n        - app-0.team-0.example.com\n      secretName: app-0-tls\n  rules:\n    - host: app-0.team-0.example.com\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service:\n                name: app-0\n                port:\n                  number: 8080\n";
        let kubectl = r#"apiVersion: v1
items:
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"annotations":{},"name":"web","namespace":"shop"}}
      nginx.ingress.kubernetes.io/ssl-redirect: "true"
    creationTimestamp: "2024-05-01T10:00:00Z"
    generation: 1
    managedFields:
    - apiVersion: networking.k8s.io/v1
      fieldsType: FieldsV1
      fieldsV1:
        f:metadata:
          f:annotations:
            .: {}
            f:kubectl.kubernetes.io/last-applied-configuration: {}
        f:spec:
          f:tls: {}
      manager: kubectl-client-side-apply
      operation: Update
      time: "2024-05-01T10:00:00Z"
    name: web
    namespace: shop
    resourceVersion: "12345"
    uid: 0b6f9c1e-1111-2222-3333-444455556666
  spec:
    ingressClassName: nginx
    rules:
    - host: shop.example.com
      http:
        paths:
        - backend:
            service:
              name: web
              port:
                number: 80
          path: /
          pathType: Prefix
    tls:
    - hosts:
      - shop.example.com
      - '*.shop.example.com'
      secretName: shop-tls
  status:
    loadBalancer:
      ingress:
      - ip: 192.0.2.1
kind: List
metadata:
  resourceVersion: ""
"#;
        for (name, text) in [("bench", bench), ("kubectl", kubectl)] {
            let (fast, _) = Manifests::read_fast_yaml(text)
                .unwrap_or_else(|| panic!("{name}: not taken by the fast reader"));
            let (before, _) = previous_reader(text).unwrap();
            assert_eq!(fast.ingresses.len(), 1, "{name}");
            assert_eq!(outcome(&fast), outcome(&before), "{name}");
        }
    }

    mod fast_yaml_props {
        use super::*;
        use proptest::prelude::*;

        /// Values that probe the fast reader's edges: quoting, escapes, types, comments,
        /// indicators, flow collections, block scalars, nothing.
        const SCALARS: &[&str] = &[
            "a.example.com",
            "'q.example.com'",
            "\"d.example.com\"",
            "\"*.w.example.com\"",
            "*.alias.example.com",
            "10m",
            "80",
            "0x1F",
            "true",
            "null",
            "~",
            "",
            "-x",
            "- x",
            "a: b",
            "a #c",
            "a#b",
            "[a.example.com, \"b.example.com\"]",
            "[]",
            "{}",
            "{a: b}",
            "[a, [b]]",
            "[a,]",
            "|",
            "|-",
            ">",
            "\"\\u0041\"",
            "\"a\\\"b\"",
            "'it''s'",
            "'unclosed",
            "&anchor x",
            "!!str x",
            "\"tab\\tx\"",
            "x:",
            "?x",
        ];

        /// Values every slot takes, so that many generated texts reach the comparison.
        const PLAIN: &[&str] = &[
            "a.example.com",
            "b.example.com",
            "'q.example.com'",
            "\"d.example.com\"",
            "\"*.w.example.com\"",
            "a #c",
        ];

        fn document() -> impl Strategy<Value = String> {
            let s = || {
                prop_oneof![
                    3 => prop::sample::select(PLAIN),
                    1 => prop::sample::select(SCALARS),
                ]
            };
            (s(), s(), s(), s(), s(), s(), s()).prop_map(document_from)
        }

        #[allow(clippy::type_complexity)]
        fn document_from(
            (name, ann, h1, h2, class, rule, route): (&str, &str, &str, &str, &str, &str, &str),
        ) -> String {
            let block = if ann.starts_with(['|', '>']) {
                "\n      block line"
            } else {
                ""
            };
            format!(
                        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  annotations:\n    kubernetes.io/ingress.class: {class}\n    other: {ann}{block}\nspec:\n  tls:\n  - hosts:\n    - {h1}\n    - {h2}\n    secretName: s\n  rules:\n  - host: {rule}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r}}\nspec:\n  hostnames:\n  - {route}\n"
                    )
        }

        /// Line-level damage: indentation off by one, lines dropped, doubled or split by a
        /// comment or a document marker, CRLF.
        fn mutate(text: &str, edits: &[(usize, u8)]) -> String {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for &(at, kind) in edits {
                if lines.is_empty() {
                    break;
                }
                let i = at % lines.len();
                match kind % 7 {
                    0 => lines[i].insert(0, ' '),
                    1 => {
                        if lines[i].starts_with(' ') {
                            lines[i].remove(0);
                        }
                    }
                    2 => {
                        lines.remove(i);
                    }
                    3 => {
                        let l = lines[i].clone();
                        lines.insert(i, l);
                    }
                    4 => lines.insert(i, "# comment".into()),
                    5 => lines.insert(i, "---".into()),
                    _ => lines[i].push('\r'),
                }
            }
            lines.join("\n") + "\n"
        }

        #[test]
        fn generator_base_is_accepted() {
            let v = "a.example.com";
            let doc = document_from((v, v, v, v, v, v, v));
            assert!(Manifests::read_fast_yaml(&doc).is_some(), "{doc}");
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            /// Wherever the fast reader accepts, the previous readers accept too and read the
            /// same objects and hosts.
            #[test]
            fn fast_reader_never_disagrees(
                doc in document(),
                edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            ) {
                let text = mutate(&doc, &edits);
                if let Some((fast, _)) = Manifests::read_fast_yaml(&text) {
                    let before = previous_reader(&text);
                    prop_assert!(before.is_ok(), "accepted what the others reject: {:?}\n{}", before.err(), text);
                    let (before, _) = before.unwrap();
                    prop_assert_eq!(outcome(&fast), outcome(&before), "{}", text);
                }
            }
        }
    }

    #[test]
    fn formats() {
        for (text, want) in [
            ("{\"kind\": \"List\"}", Format::Json),
            ("\n  {}", Format::Json),
            ("apiVersion: v1\n", Format::Yaml),
            ("---\n{}", Format::Yaml),
            ("", Format::Yaml),
        ] {
            assert_eq!(Format::sniff(text), want, "{text:?}");
        }
        for (path, want) in [
            ("a.json", Format::Json),
            ("a.JSON", Format::Json),
            ("a.yaml", Format::Yaml),
            ("a.yml", Format::Yaml),
            ("a", Format::Yaml),
        ] {
            assert_eq!(Format::of(Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn reads_directories_recursively_in_order() {
        let dir = std::env::temp_dir().join(format!("ouroboros-manifests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b/nested")).unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        let ing = |name: &str| INGRESS.replace("name: web", &format!("name: {name}"));
        std::fs::write(dir.join("z.yaml"), ing("z")).unwrap();
        std::fs::write(dir.join("a.yml"), ing("a")).unwrap();
        std::fs::write(
            dir.join("b/nested/c.json"),
            serde_json::to_string(&serde_yaml::from_str::<Value>(&ing("c")).unwrap()).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("b/readme.md"), "not: [a manifest").unwrap();
        std::fs::write(dir.join(".git/x.yaml"), "bad: [").unwrap();
        std::fs::write(dir.join(".hidden.yaml"), "bad: [").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&dir, dir.join("b/loop")).unwrap();
        let m = Manifests::read(std::slice::from_ref(&dir)).unwrap();
        let names: Vec<_> = m
            .ingresses
            .iter()
            .map(|i| i.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "c", "z"]);
        assert_eq!(m.files, 3);
        // An explicit file is read whatever its name; errors name the file.
        std::fs::write(dir.join("bad.txt"), "a: [").unwrap();
        let err = format!("{:#}", Manifests::read(&[dir.join("bad.txt")]).unwrap_err());
        assert!(
            err.contains("bad.txt") && err.contains("document 1"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            Manifests::read(&[dir.join("missing.yaml")]).unwrap_err()
        );
        assert!(err.contains("missing.yaml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
