//! The Kubernetes write path for the coredns and coredns-import modes: the only place that
//! writes these ConfigMaps. Each call reads the live object, runs the pure editor on it and
//! writes only when the text changed, guarded by the `resourceVersion` it read (optimistic
//! concurrency). A 409 Conflict starts again from the read, a bounded number of times.
//!
//! A write the API server would refuse for its size (a ConfigMap's data over 1 MiB) is never
//! sent: it fails with [`ApplyError::TooLarge`] before the PUT.
//!
//! API calls (this list is the RBAC matrix in the docs; keep them equal):
//! - coredns, and node-local-dns when opted in: `get`, `update` on `configmaps/<name>` in its
//!   namespace.
//! - coredns-import: `get`, `update` on `configmaps/<name>`, `create` on `configmaps` in its
//!   namespace (only when the ConfigMap is absent), `delete` on `configmaps/<name>` (cleanup only,
//!   only when we created it and our key was its last one).

use crate::kube_client::describe;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Client};

use super::error::Reason;
use crate::dns::answer::{Answer, Group, Rules};
use crate::dns::answer_form::AnswerForm;
use crate::dns::coredns_import;
use crate::dns::corefile::{self, Findings};
use crate::dns::reload_memory;
use crate::dns::write::form::MemoryLimit;
use crate::dns::ConfigMapKey;
use crate::dns::{MAX_CONFIGMAP_DATA, TOO_LARGE_WAYS_OUT};
use crate::hostname::Hostname;

/// The field manager recorded for our writes (`metadata.managedFields`).
pub const FIELD_MANAGER: &str = "ouroboros";

/// Label put on a ConfigMap we create; cleanup deletes only ConfigMaps that carry it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "ouroboros";

/// Which target a write belongs to (names the chart's Role and the flags in errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Coredns,
    CorednsImport,
    /// The node-local-dns Corefile, written beside either mode when opted in.
    NodeLocalDns,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Coredns => "coredns",
            Mode::CorednsImport => "coredns-import",
            Mode::NodeLocalDns => "node-local-dns",
        }
    }

    /// The flags that name this target's ConfigMap.
    fn configmap_flags(self) -> &'static str {
        match self {
            Mode::Coredns => "--coredns-namespace and --coredns-configmap",
            Mode::CorednsImport => "--coredns-import-namespace and --coredns-import-configmap",
            Mode::NodeLocalDns => {
                "--node-local-dns-namespace and --node-local-dns-configmap (`node-local-dns` \
                 upstream, `nodelocaldns` on kubespray)"
            }
        }
    }

    /// The flag that names the data key.
    fn key_flag(self) -> &'static str {
        match self {
            Mode::Coredns => "--coredns-key",
            Mode::CorednsImport => "--coredns-import-key",
            Mode::NodeLocalDns => "that node-local-dns's Corefile key is `Corefile`",
        }
    }

    /// The chart's Role that grants this target's verbs.
    fn role(self) -> &'static str {
        match self {
            Mode::Coredns => "the chart's coredns-mode Role",
            Mode::CorednsImport => "the chart's coredns-import-mode Role",
            Mode::NodeLocalDns => {
                "the chart's node-local-dns Role (controller.nodeLocalDns.enabled)"
            }
        }
    }
}

/// How often and how patiently a 409 Conflict is retried from the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Total attempts (read + write), at least 1.
    pub attempts: u32,
    /// Delay after the first conflict; doubles after each further one, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 5,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// What a call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The object already held the desired state: only a read was made.
    Unchanged,
    /// The desired state was written (updated, or for the import mode created or deleted).
    Written,
    /// Dry run: a write was needed and skipped (see `Applied::change`).
    DryRun,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub outcome: Outcome,
    /// What the Corefile says about `reload` and imports (coredns mode only).
    pub findings: Option<Findings>,
    /// The names and answers the rules were rendered from (the CoreDNS modes), for drift
    /// checks.
    pub rules: Option<Rules>,
    /// 409 Conflicts met (and retried) on the way, for the write-conflict metric.
    pub conflicts: u32,
    /// The key's text before and after (`None`: absent), unless `Unchanged`; for logging a diff.
    pub change: Option<Change>,
    /// The [`fingerprint`] of each target key's text as this call left it (written, or read and
    /// found holding the set), so that a watch on the ConfigMap can tell the echo of our own
    /// write without rendering the block again.
    pub texts: Vec<(ConfigMapKey, u64)>,
}

/// A text's fingerprint (SipHash with fixed keys: the same in every process). A 64-bit hash
/// rather than a copy, because a large cluster's Corefile is megabytes.
pub fn fingerprint(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub before: Option<String>,
    pub after: Option<String>,
}

/// An API verb, for error messages and RBAC hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Update,
    Create,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Update => "update",
            Verb::Create => "create",
            Verb::Delete => "delete",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The Corefile cannot be parsed; nothing was written.
    #[error(
        "{target}: cannot edit the Corefile, line {line}: {reason}; nothing was written \
         (fix the Corefile, then ouroboros retries on its own)"
    )]
    Unparseable {
        target: ConfigMapKey,
        line: usize,
        reason: String,
    },
    #[error(
        "ConfigMap {}/{} not found: check {} (the ConfigMap holding the Corefile: `kubectl get \
         configmaps -n {} | grep -i dns`)",
        .target.namespace, .target.name, .mode.configmap_flags(), .target.namespace
    )]
    CorefileConfigMapMissing { mode: Mode, target: ConfigMapKey },
    #[error(
        "ConfigMap {}/{} has no key {:?} (it has: {}): check {}",
        .target.namespace, .target.name, .target.key, list_or_none(.present), .mode.key_flag()
    )]
    KeyMissing {
        mode: Mode,
        target: ConfigMapKey,
        present: Vec<String>,
    },
    /// The write would exceed the API server's ConfigMap size limit; it was not sent.
    #[error(
        "{target}: the {} block for {hosts} hostnames would make the ConfigMap's data {bytes} \
         bytes, over the API server's limit of {} bytes; nothing was written (the block \
         written last stays) and this set will not be retried. Ways out: {}",
        .mode.as_str(), MAX_CONFIGMAP_DATA, TOO_LARGE_WAYS_OUT
    )]
    TooLarge {
        mode: Mode,
        target: ConfigMapKey,
        hosts: usize,
        bytes: usize,
    },
    /// A reload of the new Corefile is predicted to exceed CoreDNS's memory limit; it was not
    /// sent.
    #[error(
        "{target}: {why}: CoreDNS would be OOM-killed reloading it, so nothing was written (the \
         block written last stays). Ways out: raise the memory limit of the CoreDNS Deployment's \
         container, hairpin fewer names (--ingress-class, --allow-domain), or use \
         --coredns-answer view (auto picks it on CoreDNS 1.10 and later), whose reload costs a \
         sixth of the pair's"
    )]
    ReloadTooLarge {
        target: ConfigMapKey,
        why: crate::dns::reload_memory::TooLarge,
    },
    #[error(
        "{} configmaps/{} in {}: forbidden ({message}); grant the controller's ServiceAccount \
         `{}` on {} in namespace {} ({} does)",
        .verb.as_str(), .target.name, .target.namespace, .verb.as_str(),
        rbac_resource(*.verb, &.target.name), .target.namespace, .mode.role()
    )]
    Forbidden {
        mode: Mode,
        verb: Verb,
        target: ConfigMapKey,
        message: String,
    },
    #[error(
        "{target}: still conflicting after {attempts} attempts (409: someone else keeps writing \
         it); will retry"
    )]
    Conflicts { target: ConfigMapKey, attempts: u32 },
    #[error(
        "{} ConfigMap {}/{}: {}",
        .verb.as_str(), .target.namespace, .target.name, describe(.error)
    )]
    Api {
        verb: Verb,
        target: ConfigMapKey,
        /// Printed in the message and deliberately not a `#[source]`: an error chain would
        /// print it a second time.
        error: Box<kube::Error>,
    },
}

impl ApplyError {
    pub fn reason(&self) -> Reason {
        match self {
            ApplyError::Unparseable { .. } => Reason::Unparseable,
            ApplyError::CorefileConfigMapMissing { .. } => Reason::NotFound,
            ApplyError::KeyMissing { .. } => Reason::KeyMissing,
            ApplyError::TooLarge { .. } => Reason::TooLarge,
            ApplyError::ReloadTooLarge { .. } => Reason::ReloadTooLarge,
            ApplyError::Forbidden { .. } => Reason::Forbidden,
            ApplyError::Conflicts { .. } => Reason::Conflict,
            ApplyError::Api { .. } => Reason::Api,
        }
    }

    /// The ConfigMap the error is about (for an Event on it).
    pub fn target(&self) -> &ConfigMapKey {
        match self {
            ApplyError::Unparseable { target, .. }
            | ApplyError::CorefileConfigMapMissing { target, .. }
            | ApplyError::KeyMissing { target, .. }
            | ApplyError::TooLarge { target, .. }
            | ApplyError::ReloadTooLarge { target, .. }
            | ApplyError::Forbidden { target, .. }
            | ApplyError::Conflicts { target, .. }
            | ApplyError::Api { target, .. } => target,
        }
    }
}

/// How many names `groups` hold.
fn names(groups: &[Group<'_>]) -> usize {
    groups.iter().map(|g| g.hosts.len()).sum()
}

fn list_or_none(keys: &[String]) -> String {
    if keys.is_empty() {
        "no keys".into()
    } else {
        keys.join(", ")
    }
}

fn rbac_resource(verb: Verb, name: &str) -> String {
    match verb {
        // RBAC cannot restrict create by resourceNames.
        Verb::Create => "configmaps".into(),
        _ => format!("configmaps (resourceNames: [{name}])"),
    }
}

/// A writer for one ConfigMap key. `M` is the mode, which decides what `apply` puts there:
/// [`CorefileWriter`] or [`ImportWriter`].
pub struct Writer<M> {
    api: Api<ConfigMap>,
    target: ConfigMapKey,
    mode: Mode,
    retry: Retry,
    dry_run: bool,
    /// The CoreDNS container's memory limit a reload of the written Corefile must fit (the
    /// coredns mode's writer; `None` for the others).
    limit: Option<MemoryLimit>,
    kind: PhantomData<M>,
}

/// The coredns mode: our block in the Corefile key of the CoreDNS ConfigMap.
pub type CorefileWriter = Writer<CorednsMode>;

/// The coredns-import mode: the snippet under our key of the import ConfigMap (for a Corefile
/// with `import /etc/coredns/custom/*.override`). Other keys are never touched.
pub type ImportWriter = Writer<ImportMode>;

/// Marks a [`CorefileWriter`].
pub enum CorednsMode {}

/// Marks an [`ImportWriter`].
pub enum ImportMode {}

impl<M> Writer<M> {
    fn build(client: Client, target: ConfigMapKey, mode: Mode, retry: Retry) -> Self {
        Self {
            api: Api::namespaced(client, &target.namespace),
            target,
            mode,
            retry,
            dry_run: false,
            limit: None,
            kind: PhantomData,
        }
    }

    /// Read and compute, never write (`Outcome::DryRun` with the change).
    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    pub fn target(&self) -> &ConfigMapKey {
        &self.target
    }
}

impl CorefileWriter {
    /// The coredns mode's writer for the CoreDNS Corefile.
    pub fn new(client: Client, target: ConfigMapKey, retry: Retry) -> Self {
        Self::build(client, target, Mode::Coredns, retry)
    }

    /// The same block in node-local-dns's Corefile (its root `.:53` block).
    pub fn node_local_dns(client: Client, target: ConfigMapKey, retry: Retry) -> Self {
        Self::build(client, target, Mode::NodeLocalDns, retry)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Refuses a Corefile whose reload is predicted to exceed the memory limit `limit` holds.
    pub fn reload_limit(mut self, limit: MemoryLimit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Makes the block hold exactly `hosts` answered with `answer` (an empty set removes it).
    pub async fn apply(
        &self,
        hosts: &BTreeSet<Hostname>,
        answer: &Answer,
    ) -> Result<Applied, ApplyError> {
        self.apply_groups(&[Group { hosts, answer }]).await
    }

    /// [`apply`](Self::apply) with one group of rules per proxy target.
    pub async fn apply_groups(&self, groups: &[Group<'_>]) -> Result<Applied, ApplyError> {
        // node-local-dns has no `view` plugin: the view form goes in as the template pair.
        let splice = match self.mode {
            Mode::NodeLocalDns => corefile::splice_plugins,
            _ => corefile::splice_groups,
        };
        // The pair's patterns cost a reload most: any group in it counts the whole as the pair.
        let form = match groups.iter().all(|g| matches!(g.answer, Answer::View(_))) {
            true => AnswerForm::View,
            false => AnswerForm::Template,
        };
        self.edit(names(groups), form, |text| splice(text, groups))
            .await
    }

    /// Removes our block (for `ouroboros cleanup`).
    pub async fn cleanup(&self) -> Result<Applied, ApplyError> {
        self.edit(0, AnswerForm::View, corefile::remove).await
    }

    async fn edit<E>(&self, hosts: usize, form: AnswerForm, edit: E) -> Result<Applied, ApplyError>
    where
        E: Fn(&str) -> Result<corefile::Edit, corefile::CorefileError>,
    {
        let (t, mode) = (&self.target, self.mode);
        converge(&self.api, t, mode, self.retry, self.dry_run, |cm| {
            let cm = cm.ok_or_else(|| ApplyError::CorefileConfigMapMissing {
                mode,
                target: t.clone(),
            })?;
            let Some(text) = cm.data.as_ref().and_then(|d| d.get(&t.key)) else {
                return Err(ApplyError::KeyMissing {
                    mode,
                    target: t.clone(),
                    present: data_keys(&cm),
                });
            };
            let edit = edit(text).map_err(|e| ApplyError::Unparseable {
                target: t.clone(),
                line: e.line,
                reason: e.reason,
            })?;
            let findings = Some(edit.findings);
            if !edit.changed {
                return Ok((Step::Unchanged, findings));
            }
            let change = Change {
                before: Some(text.clone()),
                after: Some(edit.text.clone()),
            };
            let mut cm = cm;
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert(t.key.clone(), edit.text);
            check_size(&cm, mode, t, hosts)?;
            let limit = self.limit.as_ref().and_then(MemoryLimit::get);
            check_reload(form, &change, limit, t)?;
            Ok((Step::Write(Box::new(Op::Replace(cm)), change), findings))
        })
        .await
    }
}

impl ImportWriter {
    /// The coredns-import mode's writer for our key of the imported ConfigMap.
    pub fn new(client: Client, target: ConfigMapKey, retry: Retry) -> Self {
        Self::build(client, target, Mode::CorednsImport, retry)
    }

    /// Makes our key hold the snippet for `hosts` answered with `answer`, creating the
    /// ConfigMap if absent. An empty set keeps the key with the marker lines only (CoreDNS
    /// imports nothing from it).
    pub async fn apply(
        &self,
        hosts: &BTreeSet<Hostname>,
        answer: &Answer,
    ) -> Result<Applied, ApplyError> {
        self.apply_groups(&[Group { hosts, answer }]).await
    }

    /// [`apply`](Self::apply) with one group of rules per proxy target.
    pub async fn apply_groups(&self, groups: &[Group<'_>]) -> Result<Applied, ApplyError> {
        let snippet = coredns_import::render_groups(groups);
        self.set(Some(snippet), names(groups)).await
    }

    /// Removes our key (for `ouroboros cleanup`); deletes the ConfigMap only when we created it
    /// (our managed-by label) and nothing else is left in it.
    pub async fn cleanup(&self) -> Result<Applied, ApplyError> {
        self.set(None, 0).await
    }

    async fn set(&self, snippet: Option<String>, hosts: usize) -> Result<Applied, ApplyError> {
        let t = &self.target;
        let mode = self.mode;
        converge(&self.api, t, mode, self.retry, self.dry_run, |cm| {
            let current = cm
                .as_ref()
                .and_then(|cm| cm.data.as_ref())
                .and_then(|d| d.get(&t.key));
            if current == snippet.as_ref() {
                return Ok((Step::Unchanged, None));
            }
            let change = Change {
                before: current.cloned(),
                after: snippet.clone(),
            };
            let op = match (cm, &snippet) {
                (None, Some(s)) => {
                    let cm = self.new_configmap(s);
                    check_size(&cm, mode, t, hosts)?;
                    Op::Create(cm)
                }
                (None, None) => return Ok((Step::Unchanged, None)),
                (Some(mut cm), Some(s)) => {
                    cm.data
                        .get_or_insert_with(BTreeMap::new)
                        .insert(t.key.clone(), s.clone());
                    check_size(&cm, mode, t, hosts)?;
                    Op::Replace(cm)
                }
                (Some(mut cm), None) => {
                    if let Some(d) = cm.data.as_mut() {
                        d.remove(&t.key);
                    }
                    if created_by_us(&cm) && data_keys(&cm).is_empty() {
                        Op::Delete(cm)
                    } else {
                        Op::Replace(cm)
                    }
                }
            };
            Ok((Step::Write(Box::new(op), change), None))
        })
        .await
    }

    fn new_configmap(&self, snippet: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.target.name.clone()),
                namespace: Some(self.target.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_string(),
                    MANAGED_BY_VALUE.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                self.target.key.clone(),
                snippet.to_string(),
            )])),
            ..ConfigMap::default()
        }
    }
}

/// What one attempt decided from what it read.
enum Step {
    Unchanged,
    Write(Box<Op>, Change),
}

enum Op {
    /// PUT the object as read, so its `resourceVersion` guards the write.
    Replace(ConfigMap),
    Create(ConfigMap),
    /// DELETE with the read `resourceVersion` and uid as preconditions.
    Delete(ConfigMap),
}

/// Read, decide (`plan`, pure), write if needed; on a 409 start again from the read, at most
/// `retry.attempts` times, backing off between conflicts.
async fn converge<P>(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
    retry: Retry,
    dry_run: bool,
    plan: P,
) -> Result<Applied, ApplyError>
where
    P: Fn(Option<ConfigMap>) -> Result<(Step, Option<Findings>), ApplyError>,
{
    let attempts = retry.attempts.max(1);
    let mut delay = retry.backoff;
    let mut conflicts = 0;
    loop {
        let current = get(api, target, mode).await?;
        let read = current
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get(&target.key))
            .map(|text| fingerprint(text));
        let (step, findings) = plan(current)?;
        let applied = |outcome, change: Option<Change>, text: Option<u64>| Applied {
            rules: None,
            outcome,
            findings,
            conflicts,
            texts: text.map(|t| (target.clone(), t)).into_iter().collect(),
            change,
        };
        let (op, change) = match step {
            Step::Unchanged => return Ok(applied(Outcome::Unchanged, None, read)),
            Step::Write(_, change) if dry_run => {
                return Ok(applied(Outcome::DryRun, Some(change), None));
            }
            Step::Write(op, change) => (op, change),
        };
        match execute(api, target, mode, *op).await {
            Ok(()) => {
                tracing::info!(
                    configmap = %format!("{}/{}", target.namespace, target.name),
                    key = %target.key,
                    mode = mode.as_str(),
                    "wrote DNS configuration"
                );
                let written = change.after.as_deref().map(fingerprint);
                return Ok(applied(Outcome::Written, Some(change), written));
            }
            Err(ApplyError::Api { error, .. }) if is_conflict(&error) => {
                conflicts += 1;
                if conflicts >= attempts {
                    return Err(ApplyError::Conflicts {
                        target: target.clone(),
                        attempts,
                    });
                }
                tracing::info!(
                    configmap = %format!("{}/{}", target.namespace, target.name),
                    conflicts,
                    delay_ms = delay.as_millis() as u64,
                    "write conflict (the ConfigMap changed since it was read); reading it again"
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(retry.max_backoff);
            }
            Err(e) => return Err(e),
        }
    }
}

async fn execute(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
    op: Op,
) -> Result<(), ApplyError> {
    match op {
        Op::Replace(cm) => replace(api, target, mode, cm).await,
        Op::Create(cm) => create(api, target, mode, cm).await,
        Op::Delete(cm) => delete(api, target, mode, &cm).await,
    }
}

fn created_by_us(cm: &ConfigMap) -> bool {
    cm.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == MANAGED_BY_VALUE)
}

/// What the API server counts against [`MAX_CONFIGMAP_DATA`]: the values of `data` and the
/// decoded values of `binaryData`.
pub fn data_size(cm: &ConfigMap) -> usize {
    let data: usize = cm
        .data
        .iter()
        .flat_map(|d| d.values())
        .map(String::len)
        .sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flat_map(|d| d.values())
        .map(|b| b.0.len())
        .sum();
    data + binary
}

/// Refuses a ConfigMap the API server would refuse for its size.
fn check_size(
    cm: &ConfigMap,
    mode: Mode,
    target: &ConfigMapKey,
    hosts: usize,
) -> Result<(), ApplyError> {
    let bytes = data_size(cm);
    if bytes > MAX_CONFIGMAP_DATA {
        return Err(ApplyError::TooLarge {
            mode,
            target: target.clone(),
            hosts,
            bytes,
        });
    }
    Ok(())
}

/// Refuses a Corefile whose reload is predicted to exceed `limit`, unless it is no larger than
/// the one CoreDNS runs (`before`): keeping a larger block would not help.
fn check_reload(
    form: AnswerForm,
    change: &Change,
    limit: Option<u64>,
    target: &ConfigMapKey,
) -> Result<(), ApplyError> {
    let before = change.before.as_deref().unwrap_or("");
    let after = change.after.as_deref().unwrap_or("");
    match reload_memory::fits(form, after.len(), limit) {
        Err(why) if after.len() > before.len() => Err(ApplyError::ReloadTooLarge {
            target: target.clone(),
            why,
        }),
        _ => Ok(()),
    }
}

fn data_keys(cm: &ConfigMap) -> Vec<String> {
    let data = cm.data.iter().flat_map(|d| d.keys());
    let binary = cm.binary_data.iter().flat_map(|d| d.keys());
    data.chain(binary).cloned().collect()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn api_error(mode: Mode, verb: Verb, target: &ConfigMapKey, e: kube::Error) -> ApplyError {
    match e {
        kube::Error::Api(s) if s.code == 403 => ApplyError::Forbidden {
            mode,
            verb,
            target: target.clone(),
            message: s.message,
        },
        source => ApplyError::Api {
            verb,
            target: target.clone(),
            error: Box::new(source),
        },
    }
}

async fn get(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
) -> Result<Option<ConfigMap>, ApplyError> {
    api.get_opt(&target.name)
        .await
        .map_err(|e| api_error(mode, Verb::Get, target, e))
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.into()),
    }
}

/// PUT the object as read (so its `resourceVersion` guards the write) with its new data.
async fn replace(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
    mut cm: ConfigMap,
) -> Result<(), ApplyError> {
    // Left out, the server keeps and updates them; sending them back adds nothing.
    cm.metadata.managed_fields = None;
    api.replace(&target.name, &post_params(), &cm)
        .await
        .map(drop)
        .map_err(|e| api_error(mode, Verb::Update, target, e))
}

async fn create(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
    cm: ConfigMap,
) -> Result<(), ApplyError> {
    // A 409 AlreadyExists (created by someone else since our read) is retried from the read.
    api.create(&post_params(), &cm)
        .await
        .map(drop)
        .map_err(|e| api_error(mode, Verb::Create, target, e))
}

async fn delete(
    api: &Api<ConfigMap>,
    target: &ConfigMapKey,
    mode: Mode,
    cm: &ConfigMap,
) -> Result<(), ApplyError> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: cm.metadata.resource_version.clone(),
            uid: cm.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&target.name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_error(mode, Verb::Delete, target, e)),
    }
}
