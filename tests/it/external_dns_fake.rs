//! A stateful fake of the API server's external-dns objects (DNSEndpoints and Services in the
//! namespace `ouroboros`), for the tests that replace objects publishing names (adoption,
//! renamed objects, cleanup). It keeps the objects and answers what the external-dns writer sends
//! as kube-apiserver does: label-selected and metadata-only lists, server-side apply (creating an
//! absent object needs `create` as well as `patch`), merge patch, delete with preconditions. It
//! refuses the verbs a Role lacks with the authorizer's 403 message, injects scripted faults,
//! and after every request it serves it checks the invariant: a desired record that has been
//! published by some object (the reference tool's or ours) is published after every request.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde_json::{json, Value};

use crate::kube_mock::{status, Seen};

pub const NS: &str = "ouroboros";
pub const DE: &str = "/apis/externaldns.k8s.io/v1alpha1/namespaces/ouroboros/dnsendpoints";
pub const SVC: &str = "/api/v1/namespaces/ouroboros/services";
/// The annotation prefixes external-dns reads (v0.22 and later, and earlier).
const PREFIXES: [&str; 2] = [
    "external-dns.kubernetes.io/",
    "external-dns.alpha.kubernetes.io/",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    DnsEndpoint,
    Service,
}

impl Kind {
    pub fn base(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => DE,
            Kind::Service => SVC,
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => "externaldns.k8s.io/v1alpha1",
            Kind::Service => "v1",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => "DNSEndpoint",
            Kind::Service => "Service",
        }
    }

    /// `dnsendpoints.externaldns.k8s.io`, `services`: as the authorizer names the resource.
    fn qualified(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => "dnsendpoints.externaldns.k8s.io",
            Kind::Service => "services",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => "dnsendpoints",
            Kind::Service => "services",
        }
    }

    fn group(self) -> &'static str {
        match self {
            Kind::DnsEndpoint => "externaldns.k8s.io",
            Kind::Service => "",
        }
    }
}

/// A scripted failure: the next `times` requests with `method` on the object `name` (`""`: the
/// collection, i.e. lists) are answered `code`.
pub struct Fault {
    pub method: &'static str,
    pub name: String,
    pub code: u16,
    pub times: u32,
}

impl Fault {
    pub fn new(method: &'static str, name: &str, code: u16, times: u32) -> Self {
        Fault {
            method,
            name: name.to_string(),
            code,
            times,
        }
    }
}

/// Runs before a request is served (its index among the requests, the request, the objects):
/// someone else writing meanwhile.
pub type Before = Box<dyn FnMut(usize, &Seen, &mut Objects) + Send>;

pub type Objects = BTreeMap<(Kind, String), Value>;

/// One request as served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub method: String,
    pub uri: String,
    pub code: u16,
}

pub struct Fake {
    pub objects: Objects,
    rv: u64,
    /// Verbs the Role does not grant (`list`, `create`, `patch`, `delete`).
    pub denied: BTreeSet<&'static str>,
    pub faults: Vec<Fault>,
    pub before: Option<Before>,
    /// The records the writer is asked to publish: (name, type).
    pub desired: BTreeSet<(String, String)>,
    /// The kinds an external-dns reads (whose objects count as publishing).
    pub read_by_external_dns: BTreeSet<Kind>,
    /// Desired records seen published so far: each must stay published.
    required: BTreeSet<(String, String)>,
    pub violations: Vec<String>,
    pub served: Vec<Served>,
}

impl Fake {
    pub fn new(objects: Vec<Value>, read: &[Kind]) -> Self {
        let objects = objects
            .into_iter()
            .map(|o| {
                let kind = if o["kind"] == "Service" {
                    Kind::Service
                } else {
                    Kind::DnsEndpoint
                };
                let name = o["metadata"]["name"].as_str().unwrap().to_string();
                ((kind, name), o)
            })
            .collect();
        Fake {
            objects,
            rv: 1000,
            denied: BTreeSet::new(),
            faults: Vec::new(),
            before: None,
            desired: BTreeSet::new(),
            read_by_external_dns: read.iter().copied().collect(),
            required: BTreeSet::new(),
            violations: Vec::new(),
            served: Vec::new(),
        }
    }

    /// Sets the records the writer is asked to publish and checks the state before any request.
    pub fn desire(&mut self, records: &[(&str, &str)]) {
        self.desired = records
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        self.check("before the first request");
    }

    /// Serves one request and checks the invariant after it.
    pub fn handle(&mut self, s: &Seen) -> (u16, Value) {
        let index = self.served.len();
        if let Some(mut before) = self.before.take() {
            before(index, s, &mut self.objects);
            self.before = Some(before);
        }
        let (code, v) = self.serve(s);
        self.served.push(Served {
            method: s.method.clone(),
            uri: s.uri.clone(),
            code,
        });
        self.check(&format!(
            "after request {index}: {} {} -> {code}",
            s.method, s.uri
        ));
        (code, v)
    }

    /// The records the objects external-dns reads publish now.
    pub fn published(&self) -> BTreeSet<(String, String)> {
        self.objects
            .iter()
            .filter(|((k, _), _)| self.read_by_external_dns.contains(k))
            .flat_map(|((k, _), o)| records(*k, o))
            .collect()
    }

    /// Which object names of `kind` exist.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        self.objects
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n.clone())
            .collect()
    }

    fn check(&mut self, when: &str) {
        let published = self.published();
        for r in &self.required {
            if !published.contains(r) {
                self.violations.push(format!(
                    "{when}: {} {} is no longer published (objects: {:?})",
                    r.0,
                    r.1,
                    self.objects.keys().collect::<Vec<_>>()
                ));
            }
        }
        let now: BTreeSet<(String, String)> =
            self.desired.intersection(&published).cloned().collect();
        self.required.extend(now);
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn serve(&mut self, s: &Seen) -> (u16, Value) {
        let path = s.path();
        let (kind, rest) = if let Some(r) = path.strip_prefix(DE) {
            (Kind::DnsEndpoint, r)
        } else if let Some(r) = path.strip_prefix(SVC) {
            (Kind::Service, r)
        } else {
            return (404, status(404, "NotFound", "not served by this fake"));
        };
        let name = rest.trim_start_matches('/').to_string();
        let verb = match (s.method.as_str(), name.is_empty()) {
            ("GET", true) => "list",
            ("GET", false) => "get",
            ("PATCH", _) => "patch",
            ("DELETE", _) => "delete",
            (m, _) => panic!("unexpected {m} {}", s.uri),
        };
        if let Some(f) = self
            .faults
            .iter_mut()
            .find(|f| f.method == s.method && f.name == name && f.times > 0)
        {
            f.times -= 1;
            return fault(kind, &name, f.code);
        }
        if self.denied.contains(verb) {
            return forbidden(kind, &name, verb);
        }
        let key = (kind, name.clone());
        match verb {
            "list" => (200, self.list(kind, s)),
            "get" => match self.objects.get(&key) {
                Some(o) => (200, o.clone()),
                None => not_found(kind, &name),
            },
            "patch" if s.content_type.as_deref() == Some("application/apply-patch+yaml") => {
                let body = s.body.clone().expect("an apply without a body");
                if !self.objects.contains_key(&key) && self.denied.contains("create") {
                    // An apply that creates is authorized as a create too.
                    return forbidden(kind, &name, "create");
                }
                let rv = self.next_rv();
                let o = apply(kind, self.objects.get(&key), &body, &name, &rv);
                self.objects.insert(key, o.clone());
                (200, o)
            }
            "patch" => {
                let Some(o) = self.objects.get_mut(&key) else {
                    return not_found(kind, &name);
                };
                merge(o, s.body.as_ref().expect("a merge patch without a body"));
                self.rv += 1;
                o["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                (200, o.clone())
            }
            "delete" => {
                let Some(o) = self.objects.get(&key) else {
                    return not_found(kind, &name);
                };
                let pre = s
                    .body
                    .as_ref()
                    .map_or(Value::Null, |b| b["preconditions"].clone());
                for field in ["uid", "resourceVersion"] {
                    if !pre[field].is_null() && pre[field] != o["metadata"][field] {
                        return (
                            409,
                            status(
                                409,
                                "Conflict",
                                &format!(
                                    "Operation cannot be fulfilled on {} \"{name}\": Precondition \
                                     failed: {field} in precondition: {}, {field} in object meta: {}",
                                    kind.qualified(),
                                    pre[field],
                                    o["metadata"][field]
                                ),
                            ),
                        );
                    }
                }
                self.objects.remove(&key);
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Success", "code": 200}),
                )
            }
            _ => unreachable!(),
        }
    }

    fn list(&self, kind: Kind, s: &Seen) -> Value {
        let query = s.uri.split_once('?').map(|(_, q)| q).unwrap_or("");
        let selector: Vec<(String, String)> = query
            .split('&')
            .filter_map(|p| p.strip_prefix("labelSelector="))
            .flat_map(|sel| {
                decode(sel)
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v selectors only");
                        (k.to_string(), v.to_string())
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, o)| o)
            .filter(|o| {
                selector
                    .iter()
                    .all(|(k, v)| o["metadata"]["labels"][k].as_str() == Some(v))
            })
            .cloned()
            .collect();
        let rv = self.rv.to_string();
        if s.accept
            .as_deref()
            .is_some_and(|a| a.contains("PartialObjectMetadataList"))
        {
            let items: Vec<Value> = items
                .into_iter()
                .map(|o| {
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                           "metadata": o["metadata"]})
                })
                .collect();
            return json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                          "metadata": {"resourceVersion": rv}, "items": items});
        }
        json!({"apiVersion": kind.api_version(), "kind": format!("{}List", kind.kind()),
               "metadata": {"resourceVersion": rv}, "items": items})
    }
}

/// The records an object publishes as external-dns reads it: a DNSEndpoint's endpoints with
/// targets; a Service's `hostname` names with A for IPv4 and AAAA for IPv6 `target`s.
pub fn records(kind: Kind, o: &Value) -> Vec<(String, String)> {
    match kind {
        Kind::DnsEndpoint => o["spec"]["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["targets"].as_array().is_some_and(|t| !t.is_empty()))
            .map(|e| {
                (
                    e["dnsName"].as_str().unwrap().to_string(),
                    e["recordType"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
        Kind::Service => {
            let a = &o["metadata"]["annotations"];
            let mut out = Vec::new();
            for p in PREFIXES {
                let (Some(hosts), Some(targets)) = (
                    a[format!("{p}hostname")].as_str(),
                    a[format!("{p}target")].as_str(),
                ) else {
                    continue;
                };
                for h in hosts.split(',') {
                    for t in targets.split(',') {
                        let ip: IpAddr = t.trim().parse().unwrap();
                        let rtype = if ip.is_ipv4() { "A" } else { "AAAA" };
                        out.push((h.trim().to_string(), rtype.to_string()));
                    }
                }
            }
            out
        }
    }
}

/// Server-side apply by the field manager `ouroboros` with force: creates the object, or sets
/// what the body sets, drops the labels and annotations its earlier applies set that the body
/// no longer has, and keeps everyone else's.
fn apply(kind: Kind, live: Option<&Value>, body: &Value, name: &str, rv: &str) -> Value {
    let mut o = match live {
        Some(l) => l.clone(),
        None => json!({
            "apiVersion": kind.api_version(), "kind": kind.kind(),
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}-{rv}")}
        }),
    };
    let owned_before = applied_keys(&o);
    for field in ["labels", "annotations"] {
        let want = body["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut map = o["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for k in owned_before.get(field).into_iter().flatten() {
            if !want.contains_key(k) {
                map.remove(k);
            }
        }
        map.extend(want);
        o["metadata"][field] = Value::Object(map);
    }
    match kind {
        // An atomic list: the apply replaces it.
        Kind::DnsEndpoint => o["spec"] = body["spec"].clone(),
        Kind::Service => {
            for (k, v) in body["spec"].as_object().into_iter().flatten() {
                o["spec"][k] = v.clone();
            }
        }
    }
    let fields = |field: &str| -> Value {
        let keys = body["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        keys.keys()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect::<serde_json::Map<String, Value>>()
            .into()
    };
    let entry = json!({
        "manager": "ouroboros", "operation": "Apply", "apiVersion": kind.api_version(),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": fields("labels"), "f:annotations": fields("annotations")}}
    });
    let mut managed: Vec<Value> = o["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| !(m["manager"] == "ouroboros" && m["operation"] == "Apply"))
        .collect();
    managed.push(entry);
    o["metadata"]["managedFields"] = Value::Array(managed);
    o["metadata"]["resourceVersion"] = json!(rv);
    o
}

/// The label and annotation keys our earlier applies set.
fn applied_keys(o: &Value) -> BTreeMap<&'static str, Vec<String>> {
    let mut out = BTreeMap::new();
    for m in o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if m["manager"] != "ouroboros" || m["operation"] != "Apply" {
            continue;
        }
        for field in ["labels", "annotations"] {
            let keys = m["fieldsV1"]["f:metadata"][format!("f:{field}")]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix("f:").map(String::from));
            out.entry(field).or_insert_with(Vec::new).extend(keys);
        }
    }
    out
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The authorizer's refusal, word for word as kube-apiserver writes it.
pub fn forbidden(kind: Kind, name: &str, verb: &str) -> (u16, Value) {
    let object = if name.is_empty() {
        kind.qualified().to_string()
    } else {
        format!("{} \"{name}\"", kind.qualified())
    };
    (
        403,
        status(
            403,
            "Forbidden",
            &format!(
                "{object} is forbidden: User \"system:serviceaccount:ouroboros:ouroboros\" cannot \
                 {verb} resource \"{}\" in API group \"{}\" in the namespace \"{NS}\"",
                kind.plural(),
                kind.group()
            ),
        ),
    )
}

fn not_found(kind: Kind, name: &str) -> (u16, Value) {
    (
        404,
        status(
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", kind.qualified()),
        ),
    )
}

fn fault(kind: Kind, name: &str, code: u16) -> (u16, Value) {
    match code {
        409 => (
            409,
            status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been \
                     modified; please apply your changes to the latest version and try again",
                    kind.qualified()
                ),
            ),
        ),
        403 => forbidden(kind, name, "patch"),
        c => (
            c,
            status(c, "InternalError", "etcdserver: request timed out"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_and_selector_decoding() {
        let mut o = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        merge(
            &mut o,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
        );
        assert_eq!(o, json!({"metadata": {"labels": {"b": "2", "c": "3"}}}));
        assert_eq!(
            decode("app.kubernetes.io%2Fmanaged-by%3Douroboros%2Cx%3Dy"),
            "app.kubernetes.io/managed-by=ouroboros,x=y"
        );
    }

    /// The check itself: deleting the only object that publishes a desired record is caught.
    #[test]
    fn a_withdrawn_record_is_a_violation() {
        let www = json!({
            "apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
            "metadata": {"name": "www", "namespace": NS, "uid": "u", "resourceVersion": "1"},
            "spec": {"endpoints": [{"dnsName": "www.example.com", "recordType": "A", "targets": ["10.0.0.1"]}]}
        });
        let mut f = Fake::new(vec![www], &[Kind::DnsEndpoint]);
        f.desire(&[("www.example.com", "A"), ("www.example.com", "AAAA")]);
        assert!(f.violations.is_empty());
        let delete = Seen {
            method: "DELETE".into(),
            uri: format!("{DE}/www?"),
            body: None,
            content_type: None,
            accept: None,
        };
        assert_eq!(f.handle(&delete).0, 200);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert!(
            f.violations[0].starts_with("after request 0: DELETE")
                && f.violations[0].contains("www.example.com A is no longer published"),
            "{:?}",
            f.violations
        );
    }

    #[test]
    fn apply_keeps_other_owners_labels_and_drops_our_old_ones() {
        let body =
            |labels: Value| json!({"metadata": {"labels": labels}, "spec": {"endpoints": []}});
        let theirs =
            json!({"kind": "DNSEndpoint", "metadata": {"name": "x", "labels": {"theirs": "1"}}});
        let o = apply(
            Kind::DnsEndpoint,
            Some(&theirs),
            &body(json!({"a": "1", "b": "2"})),
            "x",
            "5",
        );
        assert_eq!(
            o["metadata"]["labels"],
            json!({"theirs": "1", "a": "1", "b": "2"})
        );
        let o = apply(
            Kind::DnsEndpoint,
            Some(&o),
            &body(json!({"a": "1"})),
            "x",
            "6",
        );
        assert_eq!(o["metadata"]["labels"], json!({"theirs": "1", "a": "1"}));
        assert_eq!(o["metadata"]["resourceVersion"], "6");
    }
}
