//! The external-dns mode and its write path: one object per hostname for an external-dns
//! deployment to publish, either `DNSEndpoint`s (external-dns `--source=crd`) or annotated headless Services
//! (`--source=service`). The objects are the ones `ouroboros render external-dns` prints
//! (`dns::external::endpoints`); a Service carries the same names, labels and records as
//! annotations.
//!
//! Each sync:
//! 1. Resolve the record targets (`--external-dns-proxy-ip`, else the proxy Service's ClusterIPs).
//! 2. List this instance's objects (label selector `app.kubernetes.io/managed-by=ouroboros,
//!    ouroboros.io/instance=<instance>`).
//! 3. Only if a desired object is not among them: list the namespace's object names (metadata
//!    only) to find objects with a desired name that are not ours. Those are never touched: an
//!    error names each, and the other hostnames still sync.
//! 4. Server-side apply (field manager `ouroboros`, force) each desired object that is new or
//!    differs from the listed one (spec, our labels and annotations); equal ones are skipped, so
//!    the same state is never written twice.
//!    Up to 8 writes are in flight at once.
//! 5. Delete the objects that are to go (ours no longer desired, such as one under a name an
//!    earlier naming scheme gave, and with `--external-dns-adopt` the reference tool's), each
//!    only once every object of ours publishing one of its names is confirmed: written in step
//!    4, or listed already holding the desired state ([`replace::deletions`]). So a name is
//!    never left without an object publishing it: when our write for it fails (5xx, 409, RBAC)
//!    the old object stays, the error lists it ([`SinkError::kept`]) and a later sync deletes
//!    it. Deletes carry the listed `uid` and `resourceVersion` as preconditions (so an object
//!    changed since the list is left for the next sync).
//!
//! API calls (namespaced, `<ns>` = --external-dns-namespace; keep equal to `controller::rbac`):
//! `list` dnsendpoints (or services); `patch` them, and `create` for new ones (server-side apply
//! of an absent object creates it); `delete` them; `get` the proxy Service (without
//! --external-dns-proxy-ip).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use futures::StreamExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    Preconditions,
};
use kube::{Api, Client};
use serde_json::{json, Value};

use anyhow::Context;
use clap::{ArgAction, Args, ValueEnum};

use super::build::{proxy_ips, Build};
use super::render::{Placed, ProxyIpArg, RenderMode, LOG_TARGET};
use super::{DnsArgs, DnsMode, Grant, ProxySource};
use crate::dns::args::{own_namespace, SharedArgs};
use crate::dns::external::{self, DnsEndpoint, DnsEndpointSpec, Options};
use crate::dns::write::apply::{Applied, Change, Outcome, FIELD_MANAGER};
use crate::dns::write::error::{Kept, KeptObjects, ObjectKey, Reason, SinkError};
use crate::dns::write::plan::Plan;
use crate::dns::write::proxy_ips::{route_each, set_named, ProxyIps};
use crate::dns::write::replace::{self, Ours, Publishes, Verdict};
use crate::dns::write::sink::{AnySink, Sink};
use crate::dns::Mode;
use crate::flags::{parse_answer_ip, UsageError};
use crate::hostname::Hostname;
use crate::kube_client::describe;

/// What the objects are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    DnsEndpoint,
    Service,
}

/// The external-dns annotation prefixes: `external-dns.kubernetes.io/` since external-dns
/// v0.22, `external-dns.alpha.kubernetes.io/` before. Services carry both, so any version reads
/// them (a newer one prefers its own prefix when both are present), unless
/// `--external-dns-annotation-prefix` names the one prefix an external-dns instance reads.
pub const ANNOTATION_PREFIXES: [&str; 2] = [
    "external-dns.kubernetes.io/",
    "external-dns.alpha.kubernetes.io/",
];

impl Output {
    fn resource(self) -> ApiResource {
        match self {
            Output::DnsEndpoint => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("externaldns.k8s.io", "v1alpha1", external::KIND),
                "dnsendpoints",
            ),
            Output::Service => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Service"),
                "services",
            ),
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Output::DnsEndpoint => external::KIND,
            Output::Service => "Service",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Output::DnsEndpoint => external::API_VERSION,
            Output::Service => "v1",
        }
    }

    /// The chart's `controller.externalDns.output` value for this output, for RBAC hints.
    fn chart_value(self) -> &'static str {
        match self {
            Output::DnsEndpoint => "dnsendpoint",
            Output::Service => "service",
        }
    }

    /// `dnsendpoints (group externaldns.k8s.io)` / `services (core group)`, for RBAC hints.
    fn rbac_resource(self) -> &'static str {
        match self {
            Output::DnsEndpoint => "dnsendpoints (apiGroup externaldns.k8s.io)",
            Output::Service => "services (core apiGroup \"\")",
        }
    }
}

/// Everything but the targets, as the flags give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub namespace: String,
    pub instance: String,
    pub ttl: u32,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    /// The Services' annotation prefix (`--external-dns-annotation-prefix`); `None`: both of
    /// [`ANNOTATION_PREFIXES`].
    pub annotation_prefix: Option<String>,
    /// Take over the objects lexfrei/ouroboros wrote for this instance (`--external-dns-adopt`).
    pub adopt: bool,
}

impl Settings {
    /// The prefixes of the Services' external-dns annotations.
    pub fn prefixes(&self) -> Vec<&str> {
        match &self.annotation_prefix {
            Some(p) => vec![p.as_str()],
            None => ANNOTATION_PREFIXES.to_vec(),
        }
    }

    fn options(&self, ips: &[IpAddr]) -> Result<Options, String> {
        Options::new(
            &self.namespace,
            &self.instance,
            self.ttl,
            ips,
            &self.labels,
            &self.annotations,
        )
    }

    /// Checks everything except the targets (they may only be known at sync time).
    pub fn validate(&self, ips: &[IpAddr]) -> Result<(), String> {
        const PLACEHOLDER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
        let ips = if ips.is_empty() {
            &[PLACEHOLDER][..]
        } else {
            ips
        };
        self.options(ips).map(drop)
    }
}

/// The desired objects for `hosts`, by name, as server-side apply bodies; Services carry their
/// records as annotations under each of `prefixes`.
pub fn desired(
    output: Output,
    hosts: &BTreeSet<Hostname>,
    opts: &Options,
    prefixes: &[&str],
) -> BTreeMap<String, Value> {
    // A Service name must be a DNS-1035 label (letter-led), a DNSEndpoint's only a DNS-1123 one.
    let name_of = match output {
        Output::DnsEndpoint => external::object_name,
        Output::Service => external::service_name,
    };
    external::endpoints_named(hosts, opts, name_of)
        .into_iter()
        .map(|ep| {
            let name = ep.metadata.name.clone().unwrap_or_default();
            let body = match output {
                Output::DnsEndpoint => serde_json::to_value(&ep).unwrap_or(Value::Null),
                Output::Service => service_for(&ep, prefixes),
            };
            (name, body)
        })
        .collect()
}

/// A headless Service without selector (so no endpoints of its own), whose annotations give
/// external-dns the hostname, the targets (all families: it makes A and AAAA records from
/// them) and the TTL, under each of `prefixes`.
pub fn service_for(ep: &DnsEndpoint, prefixes: &[&str]) -> Value {
    let host = ep
        .spec
        .endpoints
        .first()
        .map(|e| e.dns_name.clone())
        .unwrap_or_default();
    let targets: Vec<&str> = ep
        .spec
        .endpoints
        .iter()
        .flat_map(|e| e.targets.iter().map(String::as_str))
        .collect();
    let ttl = ep.spec.endpoints.first().map(|e| e.record_ttl).unwrap_or(0);
    let mut annotations = ep.metadata.annotations.clone().unwrap_or_default();
    for p in prefixes {
        annotations.insert(format!("{p}hostname"), host.clone());
        annotations.insert(format!("{p}target"), targets.join(","));
        annotations.insert(format!("{p}ttl"), ttl.to_string());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ep.metadata.name,
            "namespace": ep.metadata.namespace,
            "labels": ep.metadata.labels,
            "annotations": annotations,
        },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "None",
        }
    })
}

/// Whether the live object already holds the desired state: the same spec (as far as we set
/// it), our labels and annotations with our values, and no label or annotation left over that
/// our earlier applies set and the desired state no longer has.
pub fn up_to_date(output: Output, desired: &Value, live: &DynamicObject) -> bool {
    let has_all = |want: &Value, got: Option<&BTreeMap<String, String>>| {
        want.as_object().is_none_or(|w| {
            w.iter()
                .all(|(k, v)| got.and_then(|g| g.get(k)).map(String::as_str) == v.as_str())
        })
    };
    let meta = &desired["metadata"];
    if !has_all(&meta["labels"], live.metadata.labels.as_ref())
        || !has_all(&meta["annotations"], live.metadata.annotations.as_ref())
    {
        return false;
    }
    for field in ["labels", "annotations"] {
        let want = meta[field].as_object();
        let stale = applied_keys(live, field)
            .into_iter()
            .any(|k| want.is_none_or(|w| !w.contains_key(&k)));
        if stale {
            return false;
        }
    }
    match output {
        Output::DnsEndpoint => {
            let live_spec = serde_json::from_value::<DnsEndpointSpec>(live.data["spec"].clone());
            let want_spec = serde_json::from_value::<DnsEndpointSpec>(desired["spec"].clone());
            matches!((live_spec, want_spec), (Ok(a), Ok(b)) if a == b)
        }
        // Only the fields we set: a selector someone adds is theirs (the target annotation
        // still decides the records), and re-applying would not remove it anyway.
        Output::Service => {
            let spec = &live.data["spec"];
            spec["clusterIP"] == "None" && spec["type"].as_str().is_none_or(|t| t == "ClusterIP")
        }
    }
}

/// The label or annotation keys our server-side applies own, from `managedFields`.
fn applied_keys(live: &DynamicObject, field: &str) -> Vec<String> {
    let Some(entries) = live.metadata.managed_fields.as_ref() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply")
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| {
            f.0.get("f:metadata")?
                .get(format!("f:{field}"))?
                .as_object()
        })
        .flat_map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(String::from)
        })
        .collect()
}

/// Whether `labels` hold our managed-by label and `instance_label`=`instance`: ours with
/// [`external::INSTANCE_LABEL`], lexfrei/ouroboros's for this instance with
/// [`external::REFERENCE_INSTANCE_LABEL`].
fn is_owned(
    labels: Option<&BTreeMap<String, String>>,
    instance_label: &str,
    instance: &str,
) -> bool {
    labels.is_some_and(|l| {
        l.get(external::MANAGED_BY_LABEL).map(String::as_str) == Some(external::MANAGED_BY)
            && l.get(instance_label).map(String::as_str) == Some(instance)
    })
}

/// The external-dns [`Sink`].
pub struct ExternalWriter {
    api: Api<DynamicObject>,
    output: Output,
    settings: Settings,
    /// One per proxy target, the default target's first (see [`Plan`]).
    ips: Vec<ProxyIps>,
    dry_run: bool,
    /// Writes in flight at once (applies first, then deletes).
    concurrency: usize,
}

/// Default writes in flight: enough to make a first sync of thousands of names take seconds,
/// few enough not to crowd the API server.
pub const DEFAULT_CONCURRENCY: usize = 8;

impl ExternalWriter {
    /// Fails (for a usage error) when the settings are invalid.
    pub fn new(
        client: Client,
        output: Output,
        settings: Settings,
        ips: ProxyIps,
    ) -> Result<Self, String> {
        let flag_ips = match &ips {
            ProxyIps::Static(v) => v.clone(),
            ProxyIps::Service { .. } | ProxyIps::Routed { .. } | ProxyIps::Unavailable(_) => {
                Vec::new()
            }
        };
        settings.validate(&flag_ips)?;
        Ok(Self {
            api: Api::namespaced_with(client, &settings.namespace, &output.resource()),
            output,
            settings,
            ips: vec![ips],
            dry_run: false,
            concurrency: DEFAULT_CONCURRENCY,
        })
    }

    /// The named proxy targets' addresses ([`set_named`]).
    pub fn targets(mut self, ips: Vec<ProxyIps>) -> Self {
        set_named(&mut self.ips, ips);
        self
    }

    /// Each target's addresses passed through `f` ([`route_each`]).
    pub fn routed(mut self, f: impl Fn(ProxyIps, usize) -> ProxyIps) -> Self {
        route_each(&mut self.ips, f);
        self
    }

    /// Writes in flight at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    pub fn output(&self) -> Output {
        self.output
    }

    /// Makes this instance's objects be exactly one per hostname in `hosts`.
    pub async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        self.apply_plan(&Plan::new(hosts.clone())).await
    }

    /// [`apply`](Self::apply) with each name's records on its proxy target's addresses; a
    /// target's addresses are resolved only when it has names.
    pub async fn apply_plan(&self, plan: &Plan) -> Result<Applied, SinkError> {
        let mut want = BTreeMap::new();
        for (hosts, ips) in plan.groups(self.ips.len())?.iter().zip(&self.ips) {
            if hosts.is_empty() {
                continue;
            }
            let ips = ips.resolve().await?;
            let opts = self.settings.options(&ips).map_err(|e| {
                SinkError::new(Reason::Invalid, None, format!("external-dns records: {e}"))
            })?;
            want.append(&mut desired(
                self.output,
                hosts,
                &opts,
                &self.settings.prefixes(),
            ));
        }
        self.sync(want).await
    }

    /// Deletes all of this instance's objects (for `ouroboros cleanup`). Without the
    /// DNSEndpoint CRD there is nothing to delete.
    pub async fn cleanup(&self) -> Result<Applied, SinkError> {
        match self.sync(BTreeMap::new()).await {
            Err(e) if e.reason == Reason::CrdMissing => {
                tracing::info!("the DNSEndpoint CRD is not installed: no DNSEndpoints to delete");
                Ok(Applied {
                    rules: None,
                    texts: Vec::new(),
                    outcome: Outcome::Unchanged,
                    findings: None,
                    conflicts: 0,
                    change: None,
                })
            }
            other => other,
        }
    }

    fn host_of(&self, body: &Value) -> String {
        let prefix = self.settings.annotation_prefix.as_deref();
        host_of(body, prefix.unwrap_or(ANNOTATION_PREFIXES[0]))
    }

    fn key(&self, name: &str) -> ObjectKey {
        ObjectKey {
            api_version: self.output.api_version(),
            kind: self.output.kind(),
            namespace: self.settings.namespace.clone(),
            name: name.to_string(),
        }
    }

    fn api_error(&self, verb: &str, name: Option<&str>, e: kube::Error) -> SinkError {
        let ns = &self.settings.namespace;
        let kind = self.output.kind();
        let what = match name {
            Some(n) => format!("{kind} {ns}/{n}"),
            None => format!("{kind}s in {ns}"),
        };
        let object = name.map(|n| self.key(n));
        match e {
            kube::Error::Api(s) if s.code == 403 => {
                // The server names the verb it refused; without that, every verb this call
                // can need (an apply of an absent object needs `create` too).
                let needed = match forbidden_verb(&s.message) {
                    Some(v) => v,
                    None if verb == "apply" => "patch` and `create",
                    None => verb,
                };
                let resource = self.output.rbac_resource();
                let output = self.output.chart_value();
                SinkError::new(
                    Reason::Forbidden,
                    object,
                    format!(
                        "{verb} {what}: forbidden ({}); grant the controller's ServiceAccount \
                         `{needed}` on {resource} in namespace {ns}: the chart's Role \
                         <fullname>-controller-external-dns has it with \
                         controller.mode=external-dns, controller.externalDns.output={output} and \
                         controller.externalDns.namespace={ns} (`ouroboros cleanup` needs `list` \
                         and `delete`: the <fullname>-cleanup Role, with \
                         controller.cleanupOnUninstall=true)",
                        s.message
                    ),
                )
            }
            kube::Error::Api(s) if s.code == 404 && self.output == Output::DnsEndpoint => {
                SinkError::new(
                    Reason::CrdMissing,
                    None,
                    format!(
                        "{verb} {what}: the DNSEndpoint resource does not exist ({}); install \
                         external-dns's DNSEndpoint CRD (dnsendpoints.externaldns.k8s.io), or use \
                         --external-dns-output service",
                        s.message
                    ),
                )
            }
            kube::Error::Api(s) if s.code == 409 => SinkError::new(
                Reason::Conflict,
                object,
                format!("{verb} {what}: conflict ({}); will retry", s.message),
            ),
            e => SinkError::new(
                Reason::Api,
                object,
                format!("{verb} {what}: {}", describe(&e)),
            ),
        }
    }

    /// Lists the objects labelled `instance_label`=this instance (and our managed-by label), by
    /// name. The selector is the server's; the check is ours.
    async fn list_owned(
        &self,
        selector: &str,
        instance_label: &str,
    ) -> Result<BTreeMap<String, DynamicObject>, SinkError> {
        let instance = &self.settings.instance;
        let listed = self
            .api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| self.api_error("list", None, e))?;
        Ok(listed
            .items
            .into_iter()
            .filter(|o| is_owned(o.metadata.labels.as_ref(), instance_label, instance))
            .filter_map(|o| Some((o.metadata.name.clone()?, o)))
            .collect())
    }

    async fn sync(&self, want: BTreeMap<String, Value>) -> Result<Applied, SinkError> {
        let instance = &self.settings.instance;
        let ours = self
            .list_owned(&external::selector(instance), external::INSTANCE_LABEL)
            .await?;
        // lexfrei/ouroboros's objects for this instance, taken over with --external-dns-adopt:
        // one with a name we want is rewritten in place (ours from then on), the others are
        // deleted like our own stale objects, once ours for their names are written.
        let adopted = if self.settings.adopt {
            self.list_owned(
                &external::reference_selector(instance),
                external::REFERENCE_INSTANCE_LABEL,
            )
            .await?
        } else {
            BTreeMap::new()
        };
        let known = |n: &String| ours.contains_key(n) || adopted.contains_key(n);

        let (foreign, mut errors) = self.foreign_objects(&want, known).await?;

        let to_apply: Vec<(&String, &Value)> = want
            .iter()
            .filter(|(n, _)| !foreign.contains(*n))
            .filter(|(n, v)| {
                adopted.contains_key(*n)
                    || ours
                        .get(*n)
                        .is_none_or(|live| !up_to_date(self.output, v, live))
            })
            .collect();
        let stale: BTreeMap<&String, &DynamicObject> = ours
            .iter()
            .chain(&adopted)
            .filter(|(n, _)| !want.contains_key(*n))
            .collect();
        let before: BTreeSet<&String> = ours.keys().chain(adopted.keys()).collect();
        let change = (!to_apply.is_empty() || !stale.is_empty()).then(|| Change {
            before: Some(summary(before.into_iter())),
            after: Some(summary(want.keys().filter(|n| !foreign.contains(*n)))),
        });
        if !adopted.is_empty() {
            tracing::info!(
                kind = self.output.kind(),
                namespace = %self.settings.namespace,
                instance = %instance,
                rewritten = adopted.keys().filter(|n| want.contains_key(*n)).count(),
                to_delete = adopted.keys().filter(|n| !want.contains_key(*n)).count(),
                dry_run = self.dry_run,
                "taking over the external-dns records lexfrei/ouroboros wrote for this instance \
                 (--external-dns-adopt)"
            );
        }

        let (outcome, kept) = if change.is_none() {
            (Outcome::Unchanged, Vec::new())
        } else if self.dry_run {
            (Outcome::DryRun, Vec::new())
        } else {
            let (failed, kept) = self
                .write(&want, &to_apply, (&adopted, &foreign), &stale)
                .await;
            errors.extend(failed);
            (Outcome::Written, kept)
        };
        if let Some(e) = combine(errors) {
            return Err(with_kept(e, kept));
        }
        Ok(Applied {
            rules: None,
            texts: Vec::new(),
            outcome,
            findings: None,
            conflicts: 0,
            change,
        })
    }

    /// Objects with a name we want that are not ours nor adopted: each left untouched, its
    /// name not published, and an error saying so. Listed only when some name is not known.
    async fn foreign_objects(
        &self,
        want: &BTreeMap<String, Value>,
        known: impl Fn(&String) -> bool,
    ) -> Result<(BTreeSet<String>, Vec<SinkError>), SinkError> {
        let instance = &self.settings.instance;
        let mut errors: Vec<SinkError> = Vec::new();
        let mut foreign = BTreeSet::new();
        if !want.keys().any(|n| !known(n)) {
            return Ok((foreign, errors));
        }
        let all = self
            .api
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| self.api_error("list", None, e))?;
        for o in all.items {
            let Some(name) = o.metadata.name.clone() else {
                continue;
            };
            if want.contains_key(&name) && !known(&name) {
                let host = self.host_of(&want[&name]);
                errors.push(SinkError::new(
                    Reason::ForeignObject,
                    Some(self.key(&name)),
                    format!(
                        "{} {}/{name} already exists without the labels {}={} and {}={instance}: \
                         it is left untouched and {host} is not published; delete it, or label \
                         it to hand it over to this instance",
                        self.output.kind(),
                        self.settings.namespace,
                        external::MANAGED_BY_LABEL,
                        external::MANAGED_BY,
                        external::INSTANCE_LABEL,
                    ),
                ));
                foreign.insert(name);
            }
        }
        Ok((foreign, errors))
    }

    /// Writes `to_apply` (server-side apply; an adopted object is rewritten in place), then
    /// deletes each `stale` object whose names are all published by confirmed objects of ours;
    /// the others are kept. Returns the failures and the kept objects.
    async fn write(
        &self,
        want: &BTreeMap<String, Value>,
        to_apply: &[(&String, &Value)],
        (adopted, foreign): (&BTreeMap<String, DynamicObject>, &BTreeSet<String>),
        stale: &BTreeMap<&String, &DynamicObject>,
    ) -> (Vec<SinkError>, Vec<Kept>) {
        let mut errors = Vec::new();
        let mut kept = Vec::new();
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        // Futures built up front (not through a stream closure), so the whole future
        // stays `Send` for the controller's spawned sync task.
        let applies: Vec<_> = to_apply
            .iter()
            .map(|(name, body)| self.apply_one(&pp, name, body, adopted.contains_key(*name)))
            .collect();
        let mut written = BTreeSet::new();
        for (name, result) in self.run_all(applies).await {
            match result {
                Ok(()) => {
                    written.insert(name);
                }
                Err((applied, e)) => {
                    if applied {
                        written.insert(name);
                    }
                    errors.push(e);
                }
            }
        }
        // A desired object is confirmed when it needed no write or its write went
        // through; an old object goes only once those publishing its names are.
        let to_write: BTreeSet<&str> = to_apply.iter().map(|(n, _)| n.as_str()).collect();
        let confirmed =
            |n: &str| !foreign.contains(n) && (!to_write.contains(n) || written.contains(n));
        let ours_now: BTreeMap<String, Ours> = want
            .iter()
            .map(|(n, body)| {
                let o = Ours {
                    records: match self.publishes_body(body) {
                        Publishes::Records(r) => r,
                        Publishes::Unknown => BTreeSet::new(),
                    },
                    confirmed: confirmed(n),
                };
                (n.clone(), o)
            })
            .collect();
        let old: BTreeMap<String, Publishes> = stale
            .iter()
            .map(|(n, o)| ((*n).clone(), self.publishes_live(o)))
            .collect();
        let mut deletes = Vec::new();
        for (name, verdict) in replace::deletions(&ours_now, &old) {
            match verdict {
                Verdict::Delete => deletes.push(self.delete_one(stale[&name])),
                Verdict::Keep { waiting_for } => {
                    let k = self.kept(&name, &old[&name], &waiting_for);
                    tracing::debug!(object = %k.object, "{}", k.note);
                    kept.push(k);
                }
            }
        }
        errors.extend(
            self.run_all(deletes)
                .await
                .into_iter()
                .filter_map(Result::err),
        );
        (errors, kept)
    }

    /// What a desired body publishes.
    fn publishes_body(&self, body: &Value) -> Publishes {
        match self.output {
            Output::DnsEndpoint => replace::endpoint_records(body),
            Output::Service => replace::service_records(body, &self.settings.prefixes()),
        }
    }

    /// What a listed object publishes: a Service's names under any prefix external-dns may
    /// read (the reference tool's, ours, and `--external-dns-annotation-prefix`).
    fn publishes_live(&self, o: &DynamicObject) -> Publishes {
        match self.output {
            Output::DnsEndpoint => replace::endpoint_records(&o.data),
            Output::Service => {
                let mut prefixes = ANNOTATION_PREFIXES.to_vec();
                if let Some(p) = self.settings.annotation_prefix.as_deref() {
                    prefixes.push(p);
                }
                let body = json!({"metadata": {"annotations": o.metadata.annotations}});
                replace::service_records(&body, &prefixes)
            }
        }
    }

    /// Why the old object `name` stays: what it publishes and which of ours it waits for.
    fn kept(&self, name: &str, publishes: &Publishes, waiting_for: &[String]) -> Kept {
        let (kind, ns) = (self.output.kind(), &self.settings.namespace);
        let what = match publishes.names() {
            Some(names) => names.into_iter().collect::<Vec<_>>().join(", "),
            None => "names that could not be read".into(),
        };
        let shown: Vec<String> = waiting_for
            .iter()
            .take(5)
            .map(|w| format!("{kind} {ns}/{w}"))
            .collect();
        let more = waiting_for.len().saturating_sub(5);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        Kept {
            object: self.key(name),
            note: format!(
                "{kind} {ns}/{name} still publishes {what}; it is kept until ours ({}{more}) \
                 is written, and deleted by the first sync after that",
                shown.join(", ")
            ),
        }
    }
}

impl ExternalWriter {
    /// Runs `futs` with at most `concurrency` in flight; returns their results.
    async fn run_all<F, T>(&self, futs: Vec<F>) -> Vec<T>
    where
        F: std::future::Future<Output = T>,
    {
        futures::stream::iter(futs)
            .buffer_unordered(self.concurrency)
            .collect()
            .await
    }

    /// Applies `body`; for an `adopted` object, then removes lexfrei/ouroboros's instance label,
    /// with which that tool's uninstall hook would delete what is now ours. The error says
    /// whether the apply itself went through (then the object publishes our records).
    async fn apply_one<'n>(
        &self,
        pp: &PatchParams,
        name: &'n str,
        body: &Value,
        adopted: bool,
    ) -> (&'n str, Result<(), (bool, SinkError)>) {
        if let Err(e) = self.api.patch(name, pp, &Patch::Apply(body)).await {
            return (name, Err((false, self.api_error("apply", Some(name), e))));
        }
        tracing::info!(
            kind = self.output.kind(),
            namespace = %self.settings.namespace,
            name,
            hostname = %self.host_of(body),
            "applied external-dns record"
        );
        if adopted {
            if let Err(e) = self.drop_reference_label(name).await {
                return (name, Err((true, e)));
            }
        }
        (name, Ok(()))
    }

    /// Removes lexfrei/ouroboros's instance label from an object we have just applied (a JSON
    /// merge patch: the label is not ours under server-side apply, so an apply cannot drop it).
    async fn drop_reference_label(&self, name: &str) -> Result<(), SinkError> {
        let patch = json!({"metadata": {"labels": {external::REFERENCE_INSTANCE_LABEL: null}}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.api
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map_err(|e| self.api_error("patch", Some(name), e))?;
        tracing::info!(
            kind = self.output.kind(),
            namespace = %self.settings.namespace,
            name,
            label = external::REFERENCE_INSTANCE_LABEL,
            "took over external-dns record: removed lexfrei/ouroboros's instance label"
        );
        Ok(())
    }

    async fn delete_one(&self, obj: &DynamicObject) -> Result<(), SinkError> {
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: obj.metadata.uid.clone(),
                resource_version: obj.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &dp).await {
            Ok(_) => {
                tracing::info!(
                    kind = self.output.kind(),
                    namespace = %self.settings.namespace,
                    name,
                    "deleted external-dns record no longer wanted"
                );
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(SinkError::new(
                Reason::Conflict,
                Some(self.key(name)),
                format!(
                    "delete {} {}/{name}: it changed since it was listed ({}); will retry",
                    self.output.kind(),
                    self.settings.namespace,
                    s.message
                ),
            )),
            Err(e) => Err(self.api_error("delete", Some(name), e)),
        }
    }
}

/// The hostname a desired body publishes (a DNSEndpoint's `dnsName`, a Service's `<prefix>hostname`
/// annotation).
fn host_of(body: &Value, prefix: &str) -> String {
    body["spec"]["endpoints"][0]["dnsName"]
        .as_str()
        .or_else(|| body["metadata"]["annotations"][format!("{prefix}hostname")].as_str())
        .unwrap_or_default()
        .to_string()
}

fn summary<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(|n| format!("{n}\n")).collect()
}

/// The verb an API server's 403 message says was refused (`... cannot create resource
/// "dnsendpoints" ...`), so the hint names the one permission missing: a server-side apply
/// needs `patch`, and `create` as well when the object is absent.
pub fn forbidden_verb(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once(" cannot ")?;
    let (verb, rest) = rest.split_once(' ')?;
    let plain = !verb.is_empty() && verb.chars().all(|c| c.is_ascii_lowercase());
    (plain && rest.starts_with("resource ")).then_some(verb)
}

/// One error for several, every message (up to five). A failure another attempt may get past
/// comes first, so its reason decides: the sync is retried while any write can still pass,
/// and waits for a change only when every failure needs one ([`SinkError::is_permanent`]).
fn combine(mut errors: Vec<SinkError>) -> Option<SinkError> {
    // Stable: within each group, the order the writes finished in.
    errors.sort_by_key(SinkError::is_permanent);
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        n => {
            let mut message = format!("{n} external-dns objects failed: ");
            let shown: Vec<&str> = errors.iter().take(5).map(|e| e.message.as_str()).collect();
            message.push_str(&shown.join("; "));
            if n > 5 {
                message.push_str(&format!("; and {} more", n - 5));
            }
            let first = errors.swap_remove(0);
            Some(SinkError::new(first.reason, first.object, message))
        }
    }
}

/// `e` with the objects kept because their names are not yet published elsewhere (the first
/// five named in its message).
fn with_kept(mut e: SinkError, kept: Vec<Kept>) -> SinkError {
    if !kept.is_empty() {
        let names: Vec<String> = kept.iter().take(5).map(|k| k.object.to_string()).collect();
        let more = kept.len().saturating_sub(5);
        e.message.push_str(&format!(
            "; kept until ours are written, so their names stay published: {}{}",
            names.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    e.kept = Box::new(KeptObjects(kept));
    e
}

/// What external-dns mode writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExternalDnsOutput {
    /// `externaldns.k8s.io/v1alpha1` DNSEndpoint objects (external-dns `--source=crd`, hence
    /// the alias `crd`).
    #[value(alias = "crd")]
    Dnsendpoint,
    /// Annotated headless Services (external-dns `--source=service`).
    Service,
}

/// external-dns's own flags: where its objects go, what they answer with, what each carries.
#[derive(Args, Clone, Debug)]
#[group(skip)]
pub struct Flags {
    /// external-dns: namespace of the objects written [default: this pod's namespace, else
    /// `ouroboros`].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_NAMESPACE",
        value_name = "NS"
    )]
    pub external_dns_namespace: Option<String>,

    /// external-dns: record targets (repeatable; comma-separated in the environment variable)
    /// [default: the proxy Service's ClusterIPs, A and AAAA for dual-stack].
    #[arg(
        long = "external-dns-proxy-ip",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = parse_answer_ip
    )]
    pub external_dns_proxy_ips: Vec<IpAddr>,

    /// external-dns: the Service whose ClusterIPs are the record targets, in
    /// --proxy-service-namespace [default: --proxy-service-name].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_PROXY_SERVICE",
        value_name = "NAME"
    )]
    pub external_dns_proxy_service: Option<String>,

    /// external-dns: write DNSEndpoint objects (`dnsendpoint`, for external-dns
    /// `--source=crd`) or annotated headless Services (`service`, for `--source=service`).
    #[arg(long, env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_OUTPUT", value_enum, default_value_t = ExternalDnsOutput::Dnsendpoint)]
    pub external_dns_output: ExternalDnsOutput,

    /// external-dns, `--external-dns-output service`: the one annotation prefix the Services'
    /// records are written under, ending in `/`. The `--annotation-prefix` of the external-dns
    /// instance that should publish them (split-horizon: other instances ignore them)
    /// [default: both external-dns.kubernetes.io/ and external-dns.alpha.kubernetes.io/, which
    /// every external-dns version reads].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ANNOTATION_PREFIX",
        value_name = "PREFIX",
        value_parser = external::parse_annotation_prefix
    )]
    pub external_dns_annotation_prefix: Option<String>,

    /// external-dns: take over the DNSEndpoints (or Services) that lexfrei/ouroboros wrote for
    /// this --instance (labels app.kubernetes.io/managed-by=ouroboros and
    /// ouroboros.lexfrei.tech/instance=INSTANCE): each is deleted once ours publishing its names
    /// is written (or, under a name we write, rewritten and relabelled), so no name goes
    /// unpublished, even while a write fails, and that tool's uninstall no longer deletes it.
    /// Other instances' objects are never touched. `cleanup` with it also deletes them.
    #[arg(
        long = "external-dns-adopt",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ADOPT",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub external_dns_adopt: bool,

    #[command(flatten)]
    pub records: RecordArgs,
}

/// What every external-dns record carries: flags of `controller` and `cleanup` and of
/// `render external-dns` (same names and variables, so `render` shows what the controller writes).
#[derive(Args, Clone, Debug)]
pub struct RecordArgs {
    /// external-dns: TTL of every record, in seconds [1, 86400].
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_RECORD_TTL",
        value_name = "SECONDS",
        default_value_t = external::DEFAULT_TTL,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(external::MAX_TTL))
    )]
    pub external_dns_record_ttl: u32,

    /// external-dns: label key=value added to every object (repeatable; comma-separated in the
    /// environment variable), e.g. for external-dns `--label-filter`. Reserved:
    /// app.kubernetes.io/managed-by and ouroboros.io/* keys.
    #[arg(
        long = "external-dns-label",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_LABEL",
        value_name = "KEY=VALUE",
        value_delimiter = ',',
        value_parser = external::parse_key_value
    )]
    pub external_dns_labels: Vec<(String, String)>,

    /// external-dns: annotation key=value added to every object (repeatable; one per line in
    /// the environment variable, since values may hold commas). Reserved: ouroboros.io/* keys.
    #[arg(
        long = "external-dns-annotation",
        env = "OUROBOROS_CONTROLLER_EXTERNAL_DNS_ANNOTATION",
        value_name = "KEY=VALUE",
        value_delimiter = '\n',
        value_parser = external::parse_key_value
    )]
    pub external_dns_annotations: Vec<(String, String)>,

    /// Instance name: the `ouroboros.io/instance` label on what external-dns mode writes, so
    /// two installations never delete each other's records.
    #[arg(long, env = "OUROBOROS_INSTANCE", value_name = "NAME", default_value = external::DEFAULT_INSTANCE)]
    pub instance: String,
}

impl Flags {
    /// --external-dns-namespace, else this pod's namespace, else `ouroboros`.
    pub fn namespace(&self) -> String {
        self.namespace_or(&own_namespace())
    }

    /// --external-dns-namespace, else `default` (the controller's own namespace).
    pub fn namespace_or(&self, default: &str) -> String {
        self.external_dns_namespace
            .clone()
            .unwrap_or_else(|| default.to_string())
    }

    /// The Service whose ClusterIPs are the record targets (namespace, name): in
    /// --proxy-service-namespace, --external-dns-proxy-service else --proxy-service-name.
    pub fn proxy_service(&self, shared: &SharedArgs) -> (String, String) {
        (
            shared.proxy_service_namespace(),
            self.external_dns_proxy_service
                .clone()
                .unwrap_or_else(|| shared.proxy_service_name.clone()),
        )
    }
}

/// `render external-dns`'s own flags: the proxy's addresses, the objects' namespace and what
/// every record carries (the controller's flags, so `render` shows what the controller writes).
#[derive(Args, Clone, Debug)]
pub struct Render {
    #[command(flatten)]
    pub proxy: ProxyIpArg,

    /// Namespace of the DNSEndpoint objects.
    #[arg(
        long,
        env = "OUROBOROS_RENDER_NAMESPACE",
        value_name = "NS",
        default_value = "ouroboros"
    )]
    pub namespace: String,

    #[command(flatten)]
    pub records: RecordArgs,
}

impl Render {
    /// The objects' settings with `ips` as record targets; bad flag values are usage errors.
    fn options(&self, ips: &[IpAddr]) -> anyhow::Result<Options> {
        Options::new(
            &self.namespace,
            &self.records.instance,
            self.records.external_dns_record_ttl,
            ips,
            &self.records.external_dns_labels,
            &self.records.external_dns_annotations,
        )
        .map_err(UsageError::err)
    }
}

impl RenderMode for Render {
    const ABOUT: &'static str =
        "external-dns DNSEndpoint objects (multi-document YAML), one per hostname";

    /// The flags, before the manifests are read, as without targets (the addresses once there
    /// are names for them).
    fn check(&self) -> anyhow::Result<()> {
        if !self.proxy.proxy_ips.is_empty() {
            self.options(&self.proxy.proxy_ips)?;
        }
        Ok(())
    }

    fn render(&self, _edited: &str, placed: &Placed) -> anyhow::Result<String> {
        let mut objects = Vec::new();
        let groups = placed.with_ips(&self.proxy.proxy_ips)?;
        for (hosts, ips) in groups.iter().filter(|(hosts, _)| !hosts.is_empty()) {
            objects.extend(external::endpoints(hosts, &self.options(ips)?));
        }
        if groups.len() > 1 {
            // In host order whatever the targets, as one set lists them.
            objects.sort_by(|x, y| {
                let host = |o: &external::DnsEndpoint| {
                    o.spec.endpoints.first().map(|e| e.dns_name.clone())
                };
                host(x).cmp(&host(y))
            });
        }
        let text = external::to_yaml(&objects).context("serialising DNSEndpoints")?;
        tracing::info!(
            target: LOG_TARGET,
            objects = objects.len(),
            "rendered DNSEndpoint objects"
        );
        Ok(text)
    }
}

pub struct ExternalDns;

/// The CRD of `--external-dns-output dnsendpoint`.
const DNSENDPOINT_CRD: &str = "dnsendpoints.externaldns.k8s.io";

impl DnsMode for ExternalDns {
    fn crd(&self, dns: &DnsArgs) -> Option<&'static str> {
        match dns.external_dns.external_dns_output {
            ExternalDnsOutput::Dnsendpoint => Some(DNSENDPOINT_CRD),
            ExternalDnsOutput::Service => None,
        }
    }

    /// --external-dns-proxy-ip, else the Service --external-dns-proxy-service names.
    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        ProxySource {
            service: dns.external_dns.proxy_service(&dns.shared),
            ips: dns.external_dns.external_dns_proxy_ips.clone(),
            flag: "--external-dns-proxy-ip",
        }
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        Ok(AnySink::new(
            external_writer(dns, at.client.clone())?
                .targets(at.target_ips(dns))
                .routed(|ips, i| at.route_at(ips, i)),
        ))
    }

    // list: this instance's objects (and, before creating, the namespace's names); patch +
    // create: server-side apply (of an absent object creates it); delete: leftovers. See
    // the module's header.
    fn write_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant> {
        let why = match dns.external_dns.external_dns_output {
            ExternalDnsOutput::Dnsendpoint => {
                "write DNSEndpoints and delete this instance's leftovers"
            }
            ExternalDnsOutput::Service => {
                "write annotated headless Services and delete this instance's leftovers"
            }
        };
        vec![grant(
            dns,
            namespace,
            &["list", "create", "patch", "delete"],
            why,
        )]
    }

    fn removal_grants(&self, dns: &DnsArgs, namespace: &str) -> Vec<Grant> {
        vec![grant(
            dns,
            namespace,
            &["list", "delete"],
            "delete this instance's objects",
        )]
    }
}

/// `verbs` on any object of what the mode writes, in --external-dns-namespace (else
/// `namespace`).
fn grant(
    dns: &DnsArgs,
    namespace: &str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Grant {
    let (api_group, resource) = match dns.external_dns.external_dns_output {
        ExternalDnsOutput::Dnsendpoint => ("externaldns.k8s.io", "dnsendpoints"),
        ExternalDnsOutput::Service => ("", "services"),
    };
    Grant {
        namespace: dns.external_dns.namespace_or(namespace),
        api_group,
        resource,
        names: Vec::new(),
        verbs,
        why,
    }
}

/// The external-dns writer; invalid labels, annotations or targets are usage errors.
pub fn external_writer(dns: &DnsArgs, client: kube::Client) -> Result<ExternalWriter, UsageError> {
    let ips = proxy_ips(&ExternalDns.proxy(dns), Some(client.clone()));
    let output = match dns.external_dns.external_dns_output {
        ExternalDnsOutput::Dnsendpoint => Output::DnsEndpoint,
        ExternalDnsOutput::Service => Output::Service,
    };
    let settings = Settings {
        namespace: dns.external_dns.namespace(),
        instance: dns.external_dns.records.instance.clone(),
        ttl: dns.external_dns.records.external_dns_record_ttl,
        labels: dns.external_dns.records.external_dns_labels.clone(),
        annotations: dns.external_dns.records.external_dns_annotations.clone(),
        annotation_prefix: dns.external_dns.external_dns_annotation_prefix.clone(),
        adopt: dns.external_dns.external_dns_adopt,
    };
    let w = ExternalWriter::new(client, output, settings, ips)
        .map_err(|e| UsageError(format!("external-dns flags: {e}")))?;
    Ok(w.dry_run(dns.shared.dry_run))
}

impl Sink for ExternalWriter {
    fn mode(&self) -> &'static str {
        Mode::ExternalDns.name()
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        ExternalWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        ExternalWriter::cleanup(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostname::HostPolicy;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn host(s: &str) -> Hostname {
        HostPolicy::new("cluster.local", &[], &[]).check(s).unwrap()
    }

    #[test]
    fn external_dns_output_takes_external_dns_own_name_for_dnsendpoints() {
        for (value, want) in [
            ("dnsendpoint", Some(ExternalDnsOutput::Dnsendpoint)),
            ("crd", Some(ExternalDnsOutput::Dnsendpoint)),
            ("service", Some(ExternalDnsOutput::Service)),
            ("ingress", None),
        ] {
            let got = crate::flags::parse_args::<DnsArgs>(&["--external-dns-output", value]).ok();
            assert_eq!(
                got.map(|d| d.external_dns.external_dns_output),
                want,
                "{value}"
            );
        }
    }

    fn opts() -> Options {
        let ips: Vec<IpAddr> = vec!["10.96.0.10".parse().unwrap(), "fd00::a".parse().unwrap()];
        Options::new(
            "ouroboros",
            "blue",
            60,
            &ips,
            &[("team".into(), "net".into())],
            &[],
        )
        .unwrap()
    }

    fn live(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn service_bodies() {
        let d = desired(
            Output::Service,
            &BTreeSet::from([host("*.example.com")]),
            &opts(),
            &ANNOTATION_PREFIXES,
        );
        let (name, svc) = d.iter().next().unwrap();
        assert!(name.starts_with("wildcard-example-com-"));
        assert_eq!(svc["metadata"]["name"], name.as_str());
        assert_eq!(
            svc["spec"],
            json!({"type": "ClusterIP", "clusterIP": "None"})
        );
        let a = &svc["metadata"]["annotations"];
        for p in ANNOTATION_PREFIXES {
            assert_eq!(a[format!("{p}hostname")], "*.example.com");
            assert_eq!(a[format!("{p}target")], "10.96.0.10,fd00::a");
            assert_eq!(a[format!("{p}ttl")], "60");
        }
        assert_eq!(svc["metadata"]["labels"]["team"], "net");
        assert_eq!(svc["metadata"]["labels"][external::INSTANCE_LABEL], "blue");
        assert_eq!(host_of(svc, ANNOTATION_PREFIXES[0]), "*.example.com");

        // One prefix (--external-dns-annotation-prefix): only its annotations.
        let d = desired(
            Output::Service,
            &BTreeSet::from([host("*.example.com")]),
            &opts(),
            &["internal-dns/"],
        );
        let svc = d.values().next().unwrap();
        let keys: Vec<&String> = svc["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(
            keys,
            [
                "internal-dns/hostname",
                "internal-dns/target",
                "internal-dns/ttl"
            ]
        );
        assert_eq!(host_of(svc, "internal-dns/"), "*.example.com");
    }

    #[test]
    fn up_to_date_table() {
        let d = desired(
            Output::DnsEndpoint,
            &BTreeSet::from([host("www.example.com")]),
            &opts(),
            &ANNOTATION_PREFIXES,
        );
        let want = d.values().next().unwrap();
        let base = want.clone();
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            live(v)
        };
        assert!(up_to_date(Output::DnsEndpoint, want, &with(&|_| {})));
        // Extra fields the server or others add do not count.
        assert!(up_to_date(
            Output::DnsEndpoint,
            want,
            &with(&|v| {
                v["metadata"]["labels"]["other"] = json!("x");
                v["metadata"]["resourceVersion"] = json!("9");
                v["status"] = json!({"observedGeneration": 1});
            })
        ));
        for change in [
            &(|v: &mut Value| v["spec"]["endpoints"][0]["targets"] = json!(["10.0.0.1"]))
                as &dyn Fn(&mut Value),
            &|v| v["spec"]["endpoints"][0]["recordTTL"] = json!(300),
            &|v| {
                v["spec"]["endpoints"].as_array_mut().unwrap().pop();
            },
            &|v| v["metadata"]["labels"]["team"] = json!("other"),
            &|v| {
                v["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("team");
            },
        ] {
            assert!(!up_to_date(Output::DnsEndpoint, want, &with(change)));
        }
        // A label our earlier apply set and the desired state dropped: apply again to remove it.
        let mut stale = with(&|v| v["metadata"]["labels"]["old"] = json!("1"));
        stale.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("ouroboros".into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(
                json!({"f:metadata": {"f:labels": {"f:old": {}, "f:team": {}}}}),
            )),
            ..ManagedFieldsEntry::default()
        }]);
        assert!(!up_to_date(Output::DnsEndpoint, want, &stale));
        // The same label owned by someone else is theirs to keep.
        stale.metadata.managed_fields.as_mut().unwrap()[0].manager = Some("kubectl".into());
        assert!(up_to_date(Output::DnsEndpoint, want, &stale));

        let s = desired(
            Output::Service,
            &BTreeSet::from([host("www.example.com")]),
            &opts(),
            &ANNOTATION_PREFIXES,
        );
        let want = s.values().next().unwrap();
        let mut server = want.clone();
        server["spec"] = json!({
            "type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
            "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"
        });
        assert!(up_to_date(Output::Service, want, &live(server.clone())));
        server["spec"]["selector"] = json!({"app": "x"});
        assert!(up_to_date(Output::Service, want, &live(server.clone())));
        server["spec"]["type"] = json!("NodePort");
        assert!(!up_to_date(Output::Service, want, &live(server.clone())));
        server["spec"]["type"] = json!("ClusterIP");
        server["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/target"] =
            json!("1.2.3.4");
        assert!(!up_to_date(Output::Service, want, &live(server)));
    }

    #[test]
    fn forbidden_verb_table() {
        for (message, want) in [
            (
                "dnsendpoints.externaldns.k8s.io \"www-example-com-83c9f4f4d6e3c9e9\" is forbidden: \
                 User \"system:serviceaccount:ouroboros:ouroboros\" cannot create resource \
                 \"dnsendpoints\" in API group \"externaldns.k8s.io\" in the namespace \"ouroboros\"",
                Some("create"),
            ),
            (
                "services is forbidden: User \"u\" cannot list resource \"services\" in API group \
                 \"\" in the namespace \"dns\"",
                Some("list"),
            ),
            (
                "services \"x\" is forbidden: User \"u\" cannot delete resource \"services\"",
                Some("delete"),
            ),
            // Not the authorizer's sentence: no guess.
            ("cannot patch resource \"dnsendpoints\"", None),
            ("forbidden: cannot list", None),
            ("admission webhook \"x\" denied the request", None),
            ("User \"u\" cannot Create resource \"services\"", None),
        ] {
            assert_eq!(forbidden_verb(message), want, "{message}");
        }
    }

    #[test]
    fn combine_puts_a_retryable_failure_first() {
        let e = |reason, m: &str| SinkError::new(reason, None, m);
        let c = combine(vec![e(Reason::TooLarge, "a"), e(Reason::Api, "b")]).unwrap();
        assert_eq!(c.reason, Reason::Api);
        assert!(!c.is_permanent());
        assert_eq!(c.message, "2 external-dns objects failed: b; a");
        let c = combine(vec![e(Reason::TooLarge, "a"), e(Reason::TooLarge, "b")]).unwrap();
        assert!(c.is_permanent());
        assert_eq!(c.message, "2 external-dns objects failed: a; b");
        // RBAC refusals are retried (an API server that has just started refuses until it
        // has loaded its RBAC objects): in the order they finished, the first one's reason.
        let c = combine(vec![e(Reason::Forbidden, "a"), e(Reason::Api, "b")]).unwrap();
        assert_eq!(c.reason, Reason::Forbidden);
        assert!(!c.is_permanent());
        assert_eq!(c.message, "2 external-dns objects failed: a; b");
        assert!(combine(Vec::new()).is_none());
    }

    #[test]
    fn settings_validation() {
        let s = Settings {
            namespace: "ouroboros".into(),
            instance: "blue".into(),
            ttl: 60,
            labels: vec![],
            annotations: vec![],
            annotation_prefix: None,
            adopt: false,
        };
        assert!(s.validate(&[]).is_ok());
        assert!(s.validate(&["0.0.0.0".parse().unwrap()]).is_err());
        let bad = Settings {
            labels: vec![(external::INSTANCE_LABEL.into(), "x".into())],
            ..s.clone()
        };
        assert!(bad.validate(&[]).unwrap_err().contains("reserved"));
        let bad = Settings {
            namespace: "Bad".into(),
            ..s
        };
        assert!(bad.validate(&[]).unwrap_err().contains("namespace"));
    }
}
