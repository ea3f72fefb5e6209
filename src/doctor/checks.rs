//! The checks: fetched objects in, [`Check`]s out. Pure: the fetch layer (`fetch.rs`) reads the
//! cluster, these only judge what it read, so each verdict has a table test here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::report::Check;
use crate::controller::args::{ExternalDnsOutput, Mode};
use crate::controller::hostnames::Desired;
use crate::controller::rbac::{Rule, Scope};
use crate::dns::answer::{oldest_coredns, Answer, ProxyAddrs, Version};
use crate::dns::apply::ConfigMapKey;
use crate::dns::{coredns_import, corefile, BEGIN_MARKER, END_MARKER};
use crate::hostname::Hostname;

/// Evidence lists longer than this are cut, with a count of the rest.
const MAX_EVIDENCE: usize = 25;

/// A read that failed (other than 404, which the fetch layer turns into `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiFailure {
    /// The RBAC verb doctor used (`get`, `list`, `create`).
    pub verb: &'static str,
    /// `resource.group` as RBAC names it (`configmaps`, `ingresses.networking.k8s.io`).
    pub resource: String,
    /// Namespace, or None for cluster-wide.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// HTTP status, None for transport errors.
    pub code: Option<u16>,
    pub message: String,
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(n) = &self.name {
            write!(f, " {n:?}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}")?,
            None => f.write_str(" (cluster-wide)")?,
        }
        match self.code {
            Some(c) => write!(f, ": HTTP {c}: {}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

impl ApiFailure {
    /// What to do about it.
    pub fn action(&self) -> String {
        match self.code {
            Some(403) => format!(
                "doctor's own credentials may not {} {}{}: run doctor as a user that may (see \
                 docs/doctor.md for the read-only role it needs)",
                self.verb,
                self.resource,
                self.namespace
                    .as_ref()
                    .map(|ns| format!(" in namespace {ns}"))
                    .unwrap_or_default()
            ),
            Some(401) => "the credentials were rejected: refresh the kubeconfig's token".into(),
            _ => "check that the API server is reachable (kubectl get --raw /readyz) and run \
                  doctor again"
                .into(),
        }
    }

    /// A FAIL for the check that could not read what it needed.
    pub fn check(&self, id: &'static str) -> Check {
        Check::fail(id, format!("could not {} {}", self.verb, self.resource))
            .evidence(self.to_string())
            .action(self.action())
    }
}

/// A read: the object, None when it does not exist (404), or why it could not be read.
pub type Got<T> = Result<Option<T>, ApiFailure>;

fn cut(lines: Vec<String>) -> Vec<String> {
    if lines.len() <= MAX_EVIDENCE {
        return lines;
    }
    let more = lines.len() - MAX_EVIDENCE;
    let mut lines = lines;
    lines.truncate(MAX_EVIDENCE);
    lines.push(format!("... and {more} more"));
    lines
}

fn ns_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

// ---------------------------------------------------------------- ingress controller

/// The ingress controllers whose PROXY-protocol setting doctor can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerKind {
    IngressNginx,
    Traefik,
    Unknown,
}

impl ControllerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::IngressNginx => "ingress-nginx",
            ControllerKind::Traefik => "traefik",
            ControllerKind::Unknown => "unknown",
        }
    }
}

/// The label selector that auto-detection lists Services with.
pub const AUTO_DETECT_SELECTOR: &str = "app.kubernetes.io/name in (ingress-nginx,traefik)";

/// The pod template of a Deployment or DaemonSet, reduced to what the checks read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Every container's command and args, in order.
    pub args: Vec<String>,
    pub images: Vec<String>,
}

impl Workload {
    pub fn reference(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Among auto-detected Services, the ingress controller's: LoadBalancer first, then the one
/// labelled as the controller component (ingress-nginx also ships an admission Service), then
/// by namespace/name. Returns it and the names of the others.
pub fn pick_ingress_service(candidates: &[Service]) -> (Option<&Service>, Vec<String>) {
    let mut sorted: Vec<&Service> = candidates.iter().collect();
    let label = |s: &Service, k: &str| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    sorted.sort_by_key(|s| {
        let lb = s.spec.as_ref().and_then(|p| p.type_.as_deref()) == Some("LoadBalancer");
        let component = label(s, "app.kubernetes.io/component");
        let not_controller = !(component.is_empty() || component == "controller");
        (!lb, not_controller, ns_name(&s.metadata))
    });
    let first = sorted.first().copied();
    let others = sorted
        .iter()
        .skip(1)
        .map(|s| ns_name(&s.metadata))
        .collect();
    (first, others)
}

/// The Deployment or DaemonSet whose pods the Service selects.
pub fn matching_workload<'a>(svc: &Service, workloads: &'a [Workload]) -> Option<&'a Workload> {
    let selector = svc.spec.as_ref()?.selector.as_ref()?;
    if selector.is_empty() {
        return None;
    }
    workloads
        .iter()
        .find(|w| selector.iter().all(|(k, v)| w.labels.get(k) == Some(v)))
}

/// Which ingress controller a Service fronts: its labels, else its workload's images, else its
/// name.
pub fn controller_kind(svc: &Service, workload: Option<&Workload>) -> ControllerKind {
    let classify = |s: &str| {
        let s = s.to_ascii_lowercase();
        if s.contains("ingress-nginx") || s.contains("nginx-ingress") {
            Some(ControllerKind::IngressNginx)
        } else if s.contains("traefik") {
            Some(ControllerKind::Traefik)
        } else {
            None
        }
    };
    let labels = svc.metadata.labels.as_ref();
    let from_labels = ["app.kubernetes.io/name", "app"]
        .iter()
        .filter_map(|k| labels.and_then(|l| l.get(*k)))
        .find_map(|v| classify(v));
    from_labels
        .or_else(|| workload.and_then(|w| w.images.iter().find_map(|i| classify(i))))
        .or_else(|| svc.metadata.name.as_deref().and_then(classify))
        .unwrap_or(ControllerKind::Unknown)
}

pub fn ingress_service(
    flag: Option<&str>,
    got: &Got<Service>,
    others: &[String],
    kind: ControllerKind,
) -> Check {
    const ID: &str = "ingress-controller";
    let svc = match got {
        Err(e) => return e.check(ID),
        Ok(None) => {
            return match flag {
                Some(f) => Check::fail(ID, format!("Service {f} not found"))
                    .action("check --ingress-controller-service (NAMESPACE/NAME of the ingress controller's Service)"),
                None => Check::warn(ID, "no ingress-nginx or Traefik Service found")
                    .evidence(format!("listed Services with label selector {AUTO_DETECT_SELECTOR:?}"))
                    .action("pass --ingress-controller-service NAMESPACE/NAME to check the ingress controller"),
            }
        }
        Ok(Some(s)) => s,
    };
    let ty = svc
        .spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("ClusterIP");
    let how = if flag.is_some() {
        "from --ingress-controller-service"
    } else {
        "auto-detected"
    };
    let mut c = Check::ok(
        ID,
        format!(
            "Service {} ({}, type {ty}, {how})",
            ns_name(&svc.metadata),
            kind.as_str()
        ),
    );
    if !others.is_empty() {
        c = c
            .evidence(format!("also found: {}", others.join(", ")))
            .action("pass --ingress-controller-service NAMESPACE/NAME to check another one");
    }
    c
}

/// KEP-1860: with `ipMode: Proxy` kube-proxy no longer short-circuits the LoadBalancer IP, so
/// in-cluster clients go through the load balancer (and its PROXY header) like everyone else.
pub fn ip_mode(svc: Option<&Service>) -> Check {
    const ID: &str = "kep-1860-ipmode";
    let Some(svc) = svc else {
        return Check::skip(ID, "no ingress controller Service to check");
    };
    let name = ns_name(&svc.metadata);
    let ty = svc.spec.as_ref().and_then(|s| s.type_.as_deref());
    if ty != Some("LoadBalancer") {
        return Check::skip(
            ID,
            format!(
                "Service {name} is type {}, not LoadBalancer: no load-balancer IP to hairpin through",
                ty.unwrap_or("ClusterIP")
            ),
        );
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default();
    if ingress.is_empty() {
        return Check::warn(
            ID,
            format!("Service {name} has no load-balancer address yet"),
        )
        .action("wait for the cloud controller to assign one (kubectl get svc -o wide), then run doctor again");
    }
    let evidence: Vec<String> = ingress
        .iter()
        .map(|i| {
            format!(
                "{}: ipMode {}",
                i.ip.as_deref().or(i.hostname.as_deref()).unwrap_or("?"),
                i.ip_mode.as_deref().unwrap_or("unset (VIP)")
            )
        })
        .collect();
    let proxy = ingress
        .iter()
        .filter(|i| i.ip_mode.as_deref() == Some("Proxy"))
        .count();
    if proxy == 0 {
        Check::ok(
            ID,
            "ipMode is VIP: kube-proxy short-circuits the load-balancer IP, so in-cluster clients \
             skip the load balancer and its PROXY header; ouroboros is needed",
        )
        .evidence_all(evidence)
    } else if proxy == ingress.len() {
        Check::warn(
            ID,
            "ipMode is Proxy (KEP-1860): in-cluster traffic already goes through the load \
             balancer, so the hairpin path does not exist and ouroboros may be unnecessary",
        )
        .evidence_all(evidence)
        .action(
            "check that the CNI honours ipMode (if it replaces kube-proxy); if it does, \
             ouroboros can be removed",
        )
    } else {
        Check::warn(
            ID,
            "ipMode differs between the load-balancer addresses: clients of the VIP ones still \
             hairpin",
        )
        .evidence_all(evidence)
        .action("keep ouroboros until every address reports ipMode Proxy")
    }
}

/// Where ingress-nginx reads its settings: `--configmap=NS/NAME`, or None when the flag is
/// absent (built-in defaults).
pub fn nginx_configmap(workload: &Workload) -> Option<(String, String)> {
    let mut args = workload.args.iter();
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--configmap") {
            Some(rest) if rest.starts_with('=') => rest[1..].to_string(),
            Some("") => args.next().cloned().unwrap_or_default(),
            _ => continue,
        };
        let value = value.replace("$(POD_NAMESPACE)", &workload.namespace);
        return Some(match value.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (workload.namespace.clone(), value),
        });
    }
    None
}

/// Traefik entrypoints with PROXY protocol enabled by argument
/// (`--entryPoints.NAME.proxyProtocol.trustedIPs=...` or `...proxyProtocol.insecure[=true]`).
pub fn traefik_proxy_entrypoints(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for a in args {
        let Some(rest) = a
            .strip_prefix("--")
            .filter(|r| r.to_ascii_lowercase().starts_with("entrypoints."))
            .map(|r| &r["entrypoints.".len()..])
        else {
            continue;
        };
        let (key, value) = rest.split_once('=').unwrap_or((rest, "true"));
        let lower = key.to_ascii_lowercase();
        let Some((ep, setting)) = lower.split_once(".proxyprotocol.") else {
            continue;
        };
        let on = match setting {
            "trustedips" => !value.trim().is_empty(),
            "insecure" => value.eq_ignore_ascii_case("true"),
            _ => false,
        };
        if on {
            let name = &key[..ep.len()];
            out.insert(name.to_string(), format!("{setting}={value}"));
        }
    }
    out
}

const NOT_NEEDED: &str = "ouroboros is not needed for this controller, and hairpinned requests \
                          would fail there: the proxy's PROXY header is not expected";

/// Does the ingress controller expect the PROXY protocol?
pub fn proxy_protocol(
    kind: ControllerKind,
    workload: Option<&Workload>,
    nginx_cm: Option<(&(String, String), &Got<ConfigMap>)>,
) -> Check {
    const ID: &str = "proxy-protocol";
    match kind {
        ControllerKind::Unknown => Check::skip(
            ID,
            "doctor reads the PROXY-protocol setting of ingress-nginx and Traefik only",
        )
        .action("check by hand that the ingress controller accepts the PROXY protocol on the ports the proxy targets"),
        ControllerKind::IngressNginx => {
            let Some(((ns, name), got)) = nginx_cm else {
                return match workload {
                    Some(w) => Check::warn(
                        ID,
                        "ingress-nginx runs without --configmap, so use-proxy-protocol is false",
                    )
                    .evidence(w.reference())
                    .action(NOT_NEEDED),
                    None => Check::skip(ID, "the ingress-nginx workload was not found"),
                };
            };
            let cm = match got {
                Err(e) => return e.check(ID),
                Ok(None) => {
                    return Check::warn(
                        ID,
                        format!("ConfigMap {ns}/{name} not found, so use-proxy-protocol is false"),
                    )
                    .action(NOT_NEEDED)
                }
                Ok(Some(cm)) => cm,
            };
            let value = cm
                .data
                .as_ref()
                .and_then(|d| d.get("use-proxy-protocol"))
                .map(|v| v.trim().to_string());
            let evidence = format!(
                "ConfigMap {ns}/{name}: use-proxy-protocol={}",
                value.as_deref().map_or("unset".into(), |v| format!("{v:?}"))
            );
            if value.as_deref() == Some("true") {
                Check::ok(ID, "ingress-nginx expects the PROXY protocol").evidence(evidence)
            } else {
                Check::warn(ID, "ingress-nginx does not expect the PROXY protocol")
                    .evidence(evidence)
                    .action(NOT_NEEDED)
            }
        }
        ControllerKind::Traefik => {
            let Some(w) = workload else {
                return Check::skip(ID, "the Traefik workload was not found");
            };
            let eps = traefik_proxy_entrypoints(&w.args);
            if eps.is_empty() {
                Check::warn(
                    ID,
                    "Traefik has no --entryPoints.*.proxyProtocol.* argument",
                )
                .evidence(w.reference())
                .action(format!(
                    "if its static configuration file enables proxyProtocol, ignore this; \
                     otherwise {NOT_NEEDED}"
                ))
            } else {
                let mut c = Check::ok(ID, "Traefik expects the PROXY protocol")
                    .evidence(w.reference())
                    .evidence_all(
                        eps.iter()
                            .map(|(ep, s)| format!("entrypoint {ep}: proxyProtocol.{s}")),
                    );
                if eps.values().all(|s| s.starts_with("trustedips")) {
                    c = c.action(
                        "trustedIPs must include the proxy pods' addresses (the pod CIDR), or \
                         Traefik ignores their PROXY headers",
                    );
                }
                c
            }
        }
    }
}

// ---------------------------------------------------------------- hostnames

pub fn hostnames(desired: &Desired) -> Check {
    const ID: &str = "hostnames";
    let objects: BTreeSet<_> = desired.origins.values().flatten().collect();
    let summary = format!(
        "{} hostname(s) to hairpin from {} object(s)",
        desired.hosts.len(),
        objects.len()
    );
    let excluded = desired
        .excluded
        .iter()
        .map(|e| format!("{} skipped: {}", e.object, e.why));
    if desired.rejected.is_empty() {
        return Check::ok(ID, summary).evidence_all(cut(excluded.collect()));
    }
    let rejected = desired.rejected.iter().map(|r| {
        format!(
            "{}: {:?} rejected: {} ({})",
            r.object,
            r.raw,
            r.reason,
            r.reason.explain()
        )
    });
    Check::warn(
        ID,
        format!(
            "{summary}; {} name(s) rejected by policy",
            desired.rejected.len()
        ),
    )
    .evidence_all(cut(rejected.chain(excluded).collect()))
    .action(
        "fix the names on those objects, or adjust --allow-domain / --deny-domain; the \
         controller also reports them as HostnameRejected Events on the objects",
    )
}

// ---------------------------------------------------------------- CoreDNS

/// Modes that edit CoreDNS's configuration.
pub fn uses_coredns(mode: Mode) -> bool {
    matches!(mode, Mode::Coredns | Mode::CorednsImport)
}

/// The Corefile text, or the check that explains why there is none.
pub fn corefile_text<'a>(
    mode: Mode,
    target: &ConfigMapKey,
    got: &'a Got<ConfigMap>,
) -> Result<&'a str, Check> {
    const ID: &str = "coredns-configmap";
    let cm = match got {
        Err(e) => return Err(e.check(ID)),
        Ok(None) => {
            let c = format!("ConfigMap {}/{} not found", target.namespace, target.name);
            return Err(if uses_coredns(mode) {
                Check::fail(ID, c).action(
                    "check --coredns-namespace and --coredns-configmap (kubectl get configmaps \
                     -A | grep -i coredns)",
                )
            } else {
                Check::skip(ID, format!("{c}; mode {} does not use it", mode.as_str()))
            });
        }
        Ok(Some(cm)) => cm,
    };
    match cm.data.as_ref().and_then(|d| d.get(&target.key)) {
        Some(text) => Ok(text),
        None => {
            let keys: Vec<&str> = cm
                .data
                .iter()
                .flat_map(|d| d.keys().map(String::as_str))
                .collect();
            let c = Check::new(
                ID,
                if uses_coredns(mode) {
                    super::report::Status::Fail
                } else {
                    super::report::Status::Skip
                },
                format!(
                    "ConfigMap {}/{} has no key {:?}",
                    target.namespace, target.name, target.key
                ),
            )
            .evidence(format!("keys: {}", keys.join(", ")))
            .action("check --coredns-key");
            Err(c)
        }
    }
}

/// The lines between our markers (trimmed), or None when there is no block.
fn block_lines(text: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| *l == BEGIN_MARKER)?;
    let mut out = Vec::new();
    for l in lines {
        if l == END_MARKER {
            return Some(out);
        }
        if !l.is_empty() {
            out.push(l.to_string());
        }
    }
    Some(out)
}

/// Rules missing from and extra in `have`, as evidence lines.
fn rule_diff(want: &[String], have: &[String]) -> Vec<String> {
    let want_set: BTreeSet<&String> = want.iter().collect();
    let have_set: BTreeSet<&String> = have.iter().collect();
    let missing = want_set
        .difference(&have_set)
        .map(|l| format!("missing: {l}"));
    let extra = have_set
        .difference(&want_set)
        .map(|l| format!("stale: {l}"));
    cut(missing.chain(extra).collect())
}

/// The summary of the checks that judge our block when they cannot.
pub const UNKNOWN: &str = "the desired hostnames or the proxy's addresses are unknown (see the \
                           hostnames and proxy-service checks)";

/// Our block in a Corefile (`corefile`, of which `edit` is the splice for `hosts` and `answer`):
/// OK present and current, FAIL missing or stale (the rules missing and stale as evidence), WARN
/// the same rules but misplaced. `place` follows "our block" in the summary (" in ConfigMap
/// NS/NAME", or empty).
fn block_verdict(
    id: &'static str,
    place: &str,
    corefile: &str,
    edit: &corefile::Edit,
    hosts: &BTreeSet<Hostname>,
    answer: &Answer,
    action: &str,
) -> Check {
    if !edit.changed {
        return Check::ok(
            id,
            if hosts.is_empty() {
                format!("no block{place}, and no hostname to hairpin")
            } else {
                format!(
                    "our block{place} is present and current ({} hostname(s))",
                    hosts.len()
                )
            },
        );
    }
    let want = block_lines(&coredns_import::render(hosts, answer)).unwrap_or_default();
    let have = block_lines(corefile);
    let c = match &have {
        None => Check::fail(
            id,
            format!(
                "our block{place} is missing ({} hostname(s) to hairpin)",
                hosts.len()
            ),
        ),
        Some(have) if rule_diff(&want, have).is_empty() => Check::warn(
            id,
            format!(
                "our block{place} has the right rules but is misplaced or formatted differently"
            ),
        ),
        Some(_) => Check::fail(id, format!("our block{place} is stale")),
    };
    c.evidence_all(rule_diff(&want, have.as_deref().unwrap_or_default()))
        .action(action)
}

/// Findings of the Corefile: parse, root block, reload, import, our block.
/// `hosts` is None when the sources could not be listed, `answer` when the proxy's addresses
/// are unknown (the block is then not judged).
pub fn corefile_checks(
    mode: Mode,
    corefile: &str,
    hosts: Option<&BTreeSet<Hostname>>,
    answer: Option<&Answer>,
) -> (Vec<Check>, Option<corefile::Findings>) {
    let none = BTreeSet::new();
    let known = hosts.is_some() && answer.is_some();
    let hosts = hosts.unwrap_or(&none);
    let edited = match answer {
        Some(a) => corefile::splice(corefile, hosts, a),
        None => corefile::remove(corefile),
    };
    let edit = match edited {
        Ok(e) => e,
        Err(e) => {
            return (
                vec![Check::fail("coredns-corefile", "the Corefile cannot be edited")
                    .evidence(e.to_string())
                    .action(
                        "fix the Corefile (the controller reports this as a CorefileUnparseable \
                         Event and writes nothing until it parses)",
                    )],
                None,
            )
        }
    };
    let f = edit.findings.clone();
    let mut out = vec![Check::ok(
        "coredns-corefile",
        "the Corefile parses and has a root server block (.:53)",
    )];
    out.push(if f.has_reload {
        Check::ok("coredns-reload", "the root server block has `reload`")
    } else {
        Check::warn(
            "coredns-reload",
            "the root server block has no `reload`: CoreDNS picks up changes only when restarted",
        )
        .action(
            "add `reload` to the root server block, or restart CoreDNS after each change \
             (kubectl -n kube-system rollout restart deployment coredns)",
        )
    });
    out.push(match (mode, f.imports_custom_override) {
        (Mode::CorednsImport, true) | (Mode::Coredns, true) => Check::ok(
            "coredns-import",
            "the root server block imports /etc/coredns/custom/*.override",
        )
        .action(if mode == Mode::Coredns {
            "--mode coredns-import can use it and leaves the Corefile untouched"
        } else {
            "nothing to do"
        }),
        (Mode::CorednsImport, false) => Check::fail(
            "coredns-import",
            "the root server block does not import /etc/coredns/custom/*.override, so the \
             snippet is never loaded",
        )
        .action(
            "add `import /etc/coredns/custom/*.override` to the root server block and mount the \
             import ConfigMap at /etc/coredns/custom, or use --mode coredns",
        ),
        (_, false) => Check::ok(
            "coredns-import",
            "no import of /etc/coredns/custom/*.override (needed only by --mode coredns-import)",
        ),
        (_, true) => Check::ok(
            "coredns-import",
            "the root server block imports /etc/coredns/custom/*.override",
        ),
    });
    let block = match (mode, answer) {
        (Mode::Coredns, Some(a)) if known => block_verdict(
            "coredns-block",
            "",
            corefile,
            &edit,
            hosts,
            a,
            "check that the controller runs and is leader (kubectl -n NAMESPACE logs \
             deploy/ouroboros-controller) and that the rbac check passes",
        ),
        (Mode::Coredns, _) => Check::skip("coredns-block", UNKNOWN),
        _ => match block_lines(corefile) {
            Some(_) => Check::warn(
                "coredns-block",
                format!(
                    "the Corefile still holds our block, unused in mode {}",
                    mode.as_str()
                ),
            )
            .action(
                "remove it: ouroboros cleanup --mode coredns (with the same --coredns-* flags)",
            ),
            None => Check::ok("coredns-block", "the Corefile holds no block of ours"),
        },
    };
    out.push(block);
    (out, Some(f))
}

/// coredns-import: our key holds the snippet for the desired hosts.
pub fn import_snippet(
    target: &ConfigMapKey,
    got: &Got<ConfigMap>,
    hosts: &BTreeSet<Hostname>,
    answer: &Answer,
) -> Check {
    const ID: &str = "coredns-import-snippet";
    let act = "check that the controller runs and is leader, and that the rbac check passes";
    let text = match got {
        Err(e) => return e.check(ID),
        Ok(None) => {
            return Check::fail(
                ID,
                format!("ConfigMap {}/{} not found", target.namespace, target.name),
            )
            .action(act)
        }
        Ok(Some(cm)) => cm.data.as_ref().and_then(|d| d.get(&target.key)),
    };
    let want = coredns_import::render(hosts, answer);
    match text {
        None => Check::fail(ID, format!("{target} is missing")).action(act),
        Some(t) if *t == want => Check::ok(
            ID,
            format!("{target} is current ({} hostname(s))", hosts.len()),
        ),
        Some(t) => Check::fail(ID, format!("{target} is stale"))
            .evidence_all(rule_diff(
                &block_lines(&want).unwrap_or_default(),
                &block_lines(t).unwrap_or_default(),
            ))
            .action(act),
    }
}

/// How often a reason was reported, summing Event counts.
fn occurrences(events: &[Event]) -> i64 {
    events
        .iter()
        .map(|e| {
            let series = e.series.as_ref().and_then(|s| s.count).unwrap_or(0);
            i64::from(e.count.unwrap_or(0).max(series).max(1))
        })
        .sum()
}

/// Something else (an addon manager, a Helm release) rewrites the Corefile without our block.
pub fn block_reverted(
    mode: Mode,
    target: &ConfigMapKey,
    events: &Got<Vec<Event>>,
    imports: Option<bool>,
) -> Check {
    const ID: &str = "coredns-reverted";
    if mode != Mode::Coredns {
        return Check::skip(
            ID,
            format!("mode {} leaves the Corefile alone", mode.as_str()),
        );
    }
    let events = match events {
        Err(e) => return e.check(ID),
        Ok(e) => e.as_deref().unwrap_or_default(),
    };
    if events.is_empty() {
        return Check::ok(
            ID,
            format!(
                "no BlockReverted Events on ConfigMap {}/{}",
                target.namespace, target.name
            ),
        );
    }
    let n = occurrences(events);
    let last = events
        .iter()
        .filter_map(|e| e.message.as_deref())
        .next_back()
        .map(|m| format!("last: {m:?}"));
    let action = if imports == Some(true) {
        "switch to --mode coredns-import: the Corefile already imports \
         /etc/coredns/custom/*.override, so ouroboros need not edit it"
    } else {
        "find what owns the Corefile (addon manager, Helm release, managed add-on) and switch to \
         --mode coredns-import (add `import /etc/coredns/custom/*.override` through that owner), \
         or to --mode external-dns"
    };
    Check::warn(
        ID,
        format!("our block was reverted {n} time(s): something else rewrites the Corefile"),
    )
    .evidence_all(last)
    .action(action)
}

/// coredns-shadowing: hairpinned names that a server block for a more specific zone takes, so
/// that our block (in the root server block) never answers them. `corefile` is the Corefile's
/// [`corefile::Findings::shadowing`] (None when the Corefile could not be read or parsed);
/// `import` is the ConfigMap whose `*.server` keys k3s and AKS import at the Corefile's top level
/// (`import /etc/coredns/custom/*.server`), each a fragment of whole server blocks.
pub fn coredns_shadowing(
    mode: Mode,
    corefile: Option<&[corefile::Shadow]>,
    import: &ConfigMapKey,
    import_got: &Got<ConfigMap>,
    hosts: Option<&BTreeSet<Hostname>>,
    answer: Option<&Answer>,
) -> Check {
    const ID: &str = "coredns-shadowing";
    if !uses_coredns(mode) {
        return Check::skip(ID, format!("mode {} does not edit CoreDNS", mode.as_str()));
    }
    let (Some(hosts), Some(answer)) = (hosts, answer) else {
        return Check::skip(ID, UNKNOWN);
    };
    let mut shadows: Vec<(String, String)> = corefile
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s.host.clone(),
                format!("{}: server block '{}' (line {})", s.host, s.block, s.line),
            )
        })
        .collect();
    // What kept doctor from looking everywhere, and the action for it.
    let mut problems: Vec<String> = Vec::new();
    let mut problem_action = None;
    let cm = format!("ConfigMap {}/{}", import.namespace, import.name);
    let searched = match import_got {
        Err(e) => {
            problems.push(e.to_string());
            problem_action = Some(e.action());
            format!("{cm} (could not be read)")
        }
        Ok(None) => format!("{cm} (not found)"),
        Ok(Some(c)) => {
            let servers: Vec<(&String, &String)> = c
                .data
                .iter()
                .flatten()
                .filter(|(k, _)| k.ends_with(".server"))
                .collect();
            for (key, text) in &servers {
                match fragment_shadowing(text, hosts, answer) {
                    Ok(found) => shadows.extend(found.into_iter().map(|s| {
                        let line = format!(
                            "{}: server block '{}' in {cm} key {key:?} (line {})",
                            s.host, s.block, s.line
                        );
                        (s.host, line)
                    })),
                    Err(e) => {
                        problems.push(format!("{cm} key {key:?} cannot be parsed: {e}"));
                        problem_action.get_or_insert_with(|| {
                            "fix that key: CoreDNS does not load a Corefile it cannot parse"
                                .to_string()
                        });
                    }
                }
            }
            let keys: Vec<&str> = servers.iter().map(|(k, _)| k.as_str()).collect();
            if keys.is_empty() {
                format!("{cm} (no *.server key)")
            } else {
                format!("{cm} ({})", keys.join(", "))
            }
        }
    };
    if !shadows.is_empty() {
        let names: BTreeSet<&str> = shadows.iter().map(|(h, _)| h.as_str()).collect();
        return Check::warn(
            ID,
            format!(
                "{} hairpinned name(s) are taken by a server block for a more specific zone, so \
                 our block never answers them (CoreDNS routes a query to the block with the \
                 longest matching zone)",
                names.len()
            ),
        )
        .evidence_all(cut(shadows.into_iter().map(|(_, l)| l).collect()))
        .evidence_all(problems)
        .action(format!(
            "add the same ouroboros {} block to that server block (copy the lines between the \
             markers, without the marker lines, which the controller would move into the root \
             block), or remove the block",
            answer.form()
        ));
    }
    if !problems.is_empty() {
        return Check::warn(
            ID,
            "not every server block could be checked for hairpinned names it takes",
        )
        .evidence_all(problems)
        .action(problem_action.unwrap_or_default());
    }
    if corefile.is_none() {
        return Check::skip(
            ID,
            "the Corefile could not be read or parsed (see the coredns-configmap and \
             coredns-corefile checks)",
        )
        .evidence(searched);
    }
    Check::ok(
        ID,
        "no server block for a more specific zone takes a hairpinned name",
    )
    .evidence(format!("searched: the Corefile; {searched}"))
}

/// The shadowing in a `*.server` fragment. `corefile::splice` reports shadowing relative to a
/// root server block, which a fragment does not have (CoreDNS imports it beside the Corefile's
/// own `.:53`): an empty `.:53 {}` is appended so the parse has one, and the fragment's blocks
/// then shadow exactly as they do beside the real root block. Coming last, it leaves the
/// fragment's line numbers as they are.
fn fragment_shadowing(
    fragment: &str,
    hosts: &BTreeSet<Hostname>,
    answer: &Answer,
) -> Result<Vec<corefile::Shadow>, corefile::CorefileError> {
    let text = format!("{fragment}\n.:53 {{\n}}\n");
    corefile::splice(&text, hosts, answer).map(|e| e.findings.shadowing)
}

/// The CoreDNS Deployment doctor reads first; else the one labelled [`KUBE_DNS_SELECTOR`]
/// (RKE2 names it `rke2-coredns-rke2-coredns`).
pub const COREDNS_DEPLOYMENT: &str = "coredns";
pub const KUBE_DNS_SELECTOR: &str = "k8s-app=kube-dns";

/// An image reference without its digest, tag and registry path: `coredns` for
/// `registry.k8s.io/coredns/coredns:v1.11.3@sha256:…`.
fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// An image reference's tag (`v1.11.3` for `registry.k8s.io/coredns/coredns:v1.11.3@sha256:…`),
/// None when it has none (digest only, or no tag at all).
pub fn image_tag(image: &str) -> Option<&str> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split_once(':')
        .map(|(_, tag)| tag)
        .filter(|t| !t.is_empty())
}

/// The workload's CoreDNS image: the first whose name contains `coredns` (`coredns`,
/// `hardened-coredns`, `mirrored-coredns-coredns`).
pub fn coredns_image(w: &Workload) -> Option<&str> {
    w.images
        .iter()
        .map(String::as_str)
        .find(|i| image_name(i).to_ascii_lowercase().contains("coredns"))
}

/// Among Deployments, the CoreDNS one: the first running a CoreDNS image, else the first.
pub fn pick_coredns_workload(ws: &[Workload]) -> Option<&Workload> {
    ws.iter()
        .find(|w| coredns_image(w).is_some())
        .or_else(|| ws.first())
}

/// coredns-version: the CoreDNS image's version against the oldest that parses our block.
/// `deployment` is the CoreDNS Deployment in `namespace` (None when none was found).
pub fn coredns_version(
    mode: Mode,
    namespace: &str,
    deployment: &Got<Workload>,
    hosts: Option<&BTreeSet<Hostname>>,
    answer: Option<&Answer>,
) -> Check {
    const ID: &str = "coredns-version";
    if !uses_coredns(mode) {
        return Check::skip(ID, format!("mode {} does not edit CoreDNS", mode.as_str()));
    }
    let (Some(hosts), Some(answer)) = (hosts, answer) else {
        return Check::skip(ID, UNKNOWN);
    };
    let form = answer.form();
    let (need, why) = oldest_coredns(hosts, answer);
    let needs = format!("our {form} block needs CoreDNS {need} or later: {why}");
    let w = match deployment {
        Err(e) => {
            return Check::warn(
                ID,
                "could not read the CoreDNS Deployment, so its version is unknown",
            )
            .evidence(e.to_string())
            .evidence(needs)
            .action(format!(
                "check the version by hand: kubectl -n {namespace} get deploy \
                 {COREDNS_DEPLOYMENT} -o jsonpath='{{.spec.template.spec.containers[*].image}}'; \
                 {}",
                e.action()
            ))
        }
        Ok(None) => {
            return Check::warn(
                ID,
                format!(
                    "no CoreDNS Deployment in namespace {namespace} (none named \
                     {COREDNS_DEPLOYMENT}, none labelled {KUBE_DNS_SELECTOR}), so its version \
                     is unknown"
                ),
            )
            .evidence(needs)
            .action(format!(
                "check the version by hand: kubectl -n {namespace} get deployments -o wide \
                 (the IMAGES column), or check --coredns-namespace"
            ))
        }
        Ok(Some(w)) => w,
    };
    let Some(image) = coredns_image(w) else {
        return Check::warn(ID, format!("{} runs no CoreDNS image", w.reference()))
            .evidence(format!("images: {}", w.images.join(", ")))
            .evidence(needs)
            .action(format!(
            "check that the cluster DNS is CoreDNS {need} or later (kube-dns, as on GKE, reads \
             no Corefile: use --mode external-dns there)"
        ));
    };
    let evidence = format!("{}: image {image}", w.reference());
    let Some(v) = image_tag(image).and_then(Version::parse) else {
        return Check::warn(
            ID,
            format!("cannot tell the CoreDNS version from the image tag of {image}"),
        )
        .evidence(evidence)
        .evidence(needs)
        .action(format!(
            "check the version by hand: kubectl -n {} logs deploy/{} | grep -m1 CoreDNS- \
             (CoreDNS prints it when it starts)",
            w.namespace, w.name
        ));
    };
    if v >= need {
        return Check::ok(
            ID,
            format!("CoreDNS {v} parses our {form} block (needs {need} or later)"),
        )
        .evidence(evidence);
    }
    let action = match answer {
        Answer::Rewrite(_) => format!(
            "use --coredns-answer template (the default), which parses on CoreDNS {} and later, \
             or upgrade CoreDNS to {need} or later",
            template_needs(hosts)
        ),
        Answer::Template(_) => format!("upgrade CoreDNS to {need} or later"),
    };
    Check::fail(
        ID,
        format!(
            "CoreDNS {v} is too old for our {form} block (needs {need} or later): it rejects \
             the Corefile"
        ),
    )
    .evidence(evidence)
    .evidence(needs)
    .action(action)
}

/// The oldest CoreDNS that parses the template form for `hosts`.
fn template_needs(hosts: &BTreeSet<Hostname>) -> Version {
    let any = ProxyAddrs::new(&[IpAddr::V4(Ipv4Addr::UNSPECIFIED)]).expect("one address");
    oldest_coredns(hosts, &Answer::Template(any)).0
}

/// node-local-dns: with --node-local-dns on (coredns modes), its Corefile (`target`) must hold
/// the same block as CoreDNS's; off, an installed node-local-dns bypasses the block.
pub fn node_local_dns(
    mode: Mode,
    enabled: bool,
    target: &ConfigMapKey,
    got: &Got<ConfigMap>,
    hosts: Option<&BTreeSet<Hostname>>,
    answer: Option<&Answer>,
) -> Check {
    const ID: &str = "node-local-dns";
    let (ns, name) = (&target.namespace, &target.name);
    let writes = enabled && uses_coredns(mode);
    let cm = match got {
        Err(e) => return e.check(ID),
        Ok(None) if writes => {
            return Check::fail(
                ID,
                format!("ConfigMap {ns}/{name} not found, but --node-local-dns is on"),
            )
            .action(
                "point --node-local-dns-namespace and --node-local-dns-configmap at \
                 node-local-dns's ConfigMap (`node-local-dns` upstream, `nodelocaldns` on \
                 kubespray: kubectl get configmaps -A | grep -i local), or turn --node-local-dns \
                 off when node-local-dns is not installed",
            )
        }
        Ok(None) => {
            return Check::ok(
                ID,
                format!("no node-local-dns (ConfigMap {ns}/{name} not found)"),
            )
        }
        Ok(Some(cm)) => cm,
    };
    if !uses_coredns(mode) {
        return Check::ok(
            ID,
            format!(
                "node-local-dns is installed; mode {} does not depend on CoreDNS",
                mode.as_str()
            ),
        );
    }
    let text = cm.data.as_ref().and_then(|d| d.get(&target.key));
    if !enabled {
        let mut c = Check::warn(
            ID,
            format!(
                "node-local-dns is installed (ConfigMap {ns}/{name}) and --node-local-dns is off: \
                 pods resolving through it send external names upstream and never see the \
                 CoreDNS block"
            ),
        );
        if text.is_some_and(|t| block_lines(t).is_some()) {
            c = c.evidence(
                "its Corefile holds an ouroboros block, which the controller does not update \
                 while --node-local-dns is off",
            );
        }
        let turn_on = "turn on --node-local-dns (chart: controller.nodeLocalDns.enabled) so the \
                       controller writes the same template block into its `.:53` server block, \
                       or use --mode external-dns";
        return c.action(match answer {
            Some(Answer::Rewrite(_)) => {
                format!("use --coredns-answer template (the default, which it needs) and {turn_on}")
            }
            _ => turn_on.to_string(),
        });
    }
    let (Some(hosts), Some(answer)) = (hosts, answer) else {
        return Check::skip(ID, UNKNOWN);
    };
    let Some(text) = text else {
        let keys: Vec<&str> = cm
            .data
            .iter()
            .flat_map(|d| d.keys().map(String::as_str))
            .collect();
        return Check::fail(
            ID,
            format!("ConfigMap {ns}/{name} has no key {:?}", target.key),
        )
        .evidence(format!("keys: {}", keys.join(", ")))
        .action(
            "check --node-local-dns-namespace and --node-local-dns-configmap: node-local-dns \
             keeps its Corefile under the key `Corefile`",
        );
    };
    match corefile::splice(text, hosts, answer) {
        Err(e) => Check::fail(
            ID,
            format!("the Corefile in ConfigMap {ns}/{name} cannot be edited"),
        )
        .evidence(e.to_string())
        .action(
            "fix node-local-dns's Corefile (the controller writes nothing there until it parses)",
        ),
        Ok(edit) => block_verdict(
            ID,
            &format!(" in ConfigMap {ns}/{name}"),
            text,
            &edit,
            hosts,
            answer,
            &format!(
                "check that the controller runs and is leader (kubectl -n NAMESPACE logs \
                 deploy/ouroboros-controller) and may get and update ConfigMap {ns}/{name} (the \
                 rbac check)"
            ),
        ),
    }
}

// ---------------------------------------------------------------- proxy

pub fn proxy_service(namespace: &str, name: &str, got: &Got<Service>) -> Check {
    const ID: &str = "proxy-service";
    match got {
        Err(e) => e.check(ID),
        Ok(None) => Check::fail(ID, format!("Service {namespace}/{name} not found")).action(
            "install the proxy (the chart does), or point --proxy-service-name and \
             --proxy-service-namespace at it",
        ),
        Ok(Some(svc)) => {
            let spec = svc.spec.as_ref();
            let ips = spec
                .and_then(|s| s.cluster_ips.clone())
                .or_else(|| spec.and_then(|s| s.cluster_ip.clone()).map(|i| vec![i]))
                .unwrap_or_default();
            let ports: Vec<String> = spec
                .and_then(|s| s.ports.as_ref())
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")))
                .collect();
            Check::ok(ID, format!("Service {namespace}/{name} exists"))
                .evidence(format!("clusterIPs: {}", ips.join(", ")))
                .evidence(format!("ports: {}", ports.join(", ")))
        }
    }
}

pub fn proxy_endpoints(namespace: &str, name: &str, got: &Got<Vec<EndpointSlice>>) -> Check {
    const ID: &str = "proxy-endpoints";
    let slices = match got {
        Err(e) => return e.check(ID),
        Ok(s) => s.as_deref().unwrap_or_default(),
    };
    let (mut ready, mut not_ready) = (BTreeSet::new(), BTreeSet::new());
    for ep in slices.iter().flat_map(|s| &s.endpoints) {
        let c = ep.conditions.as_ref();
        let is_ready =
            c.and_then(|c| c.ready) != Some(false) && c.and_then(|c| c.terminating) != Some(true);
        for a in &ep.addresses {
            if is_ready {
                ready.insert(a.clone());
            } else {
                not_ready.insert(a.clone());
            }
        }
    }
    let mut c = if ready.is_empty() {
        Check::fail(
            ID,
            format!(
                "Service {namespace}/{name} has no ready endpoint: hairpinned names lead nowhere"
            ),
        )
        .action(format!(
            "check the proxy pods: kubectl -n {namespace} get pods,endpointslices -l \
             kubernetes.io/service-name={name}; kubectl -n {namespace} describe pods"
        ))
    } else {
        Check::ok(ID, format!("{} ready endpoint(s)", ready.len()))
    };
    c = c.evidence(format!(
        "{} EndpointSlice(s); ready: [{}]; not ready: [{}]",
        slices.len(),
        ready.into_iter().collect::<Vec<_>>().join(", "),
        not_ready.into_iter().collect::<Vec<_>>().join(", ")
    ));
    c
}

/// One TCP dial to the proxy Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    pub addr: SocketAddr,
    pub result: Result<Duration, String>,
}

/// Why the dial was not made, or its results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dials {
    Skipped(String),
    Done(Vec<Dial>),
}

pub fn proxy_answers(dials: &Dials) -> Check {
    const ID: &str = "proxy-answers";
    let dials = match dials {
        Dials::Skipped(why) => return Check::skip(ID, why.clone()),
        Dials::Done(d) => d,
    };
    if dials.is_empty() {
        return Check::skip(
            ID,
            "the proxy Service has no ClusterIP and TCP port to dial",
        );
    }
    let evidence: Vec<String> = dials
        .iter()
        .map(|d| match &d.result {
            Ok(t) => format!("{}: connected in {} ms", d.addr, t.as_millis()),
            Err(e) => format!("{}: {e}", d.addr),
        })
        .collect();
    if dials.iter().all(|d| d.result.is_ok()) {
        Check::ok(ID, "the proxy Service accepts TCP connections").evidence_all(evidence)
    } else {
        Check::fail(ID, "the proxy Service does not accept TCP connections")
            .evidence_all(evidence)
            .action("check the proxy pods' logs and the Service's ports and targetPorts")
    }
}

// ---------------------------------------------------------------- CRDs

/// The CRDs a configuration needs: (name, required). Not required: the controller runs
/// without it (a Gateway-API kind whose CRD is absent is read as empty, and picked up once the
/// CRD is installed) but reads nothing of that kind.
pub fn needed_crds(
    mode: Mode,
    output: ExternalDnsOutput,
    gateway_api: bool,
) -> Vec<(&'static str, bool)> {
    let mut v = Vec::new();
    if gateway_api {
        v.extend([
            ("gateways.gateway.networking.k8s.io", false),
            ("httproutes.gateway.networking.k8s.io", false),
            ("grpcroutes.gateway.networking.k8s.io", false),
            ("tlsroutes.gateway.networking.k8s.io", false),
        ]);
    }
    if mode == Mode::ExternalDns && output == ExternalDnsOutput::Dnsendpoint {
        v.push(("dnsendpoints.externaldns.k8s.io", true));
    }
    v
}

pub fn crds(results: &[(&'static str, bool, Got<()>)]) -> Check {
    const ID: &str = "crds";
    if results.is_empty() {
        return Check::skip(
            ID,
            "no custom resources needed (no --gateway-api, no external-dns DNSEndpoints)",
        );
    }
    let mut evidence = Vec::new();
    let (mut missing_required, mut missing_optional) = (Vec::new(), Vec::new());
    for (name, required, got) in results {
        match got {
            Err(e) => return e.check(ID),
            Ok(Some(())) => evidence.push(format!("{name}: installed")),
            Ok(None) => {
                evidence.push(format!("{name}: not installed"));
                if *required {
                    missing_required.push(*name);
                } else {
                    missing_optional.push(*name);
                }
            }
        }
    }
    if !missing_required.is_empty() {
        Check::fail(
            ID,
            format!("missing CRD(s): {}", missing_required.join(", ")),
        )
        .evidence_all(evidence)
        .action(
            "install the DNSEndpoint CRD (external-dns's crd manifest), or use \
             --external-dns-output service",
        )
    } else if !missing_optional.is_empty() {
        Check::warn(
            ID,
            format!(
                "CRD(s) not installed, so no hostnames of those kinds are read: {}",
                missing_optional.join(", ")
            ),
        )
        .evidence_all(evidence)
        .action(
            "install them if objects of those kinds are to be hairpinned (the controller picks \
             them up once installed); without Gateway API at all, drop --gateway-api",
        )
    } else {
        Check::ok(ID, "every CRD this configuration needs is installed").evidence_all(evidence)
    }
}

// ---------------------------------------------------------------- RBAC

pub fn service_account(namespace: &str, name: &str, got: &Got<ServiceAccount>) -> Check {
    const ID: &str = "controller-service-account";
    match got {
        Err(e) => e.check(ID),
        Ok(None) => Check::fail(ID, format!("ServiceAccount {namespace}/{name} not found")).action(
            "install the controller (the chart creates it), or pass \
                 --controller-service-account NAMESPACE/NAME",
        ),
        Ok(Some(_)) => Check::ok(ID, format!("ServiceAccount {namespace}/{name} exists")),
    }
}

/// One access question: may the ServiceAccount do `verb` on the rule's resource (and name)?
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question<'a> {
    pub rule: &'a Rule,
    pub verb: &'static str,
    pub name: Option<&'a str>,
}

impl Question<'_> {
    pub fn namespace(&self) -> Option<&str> {
        match &self.rule.scope {
            Scope::Cluster => None,
            Scope::Namespace(ns) => Some(ns),
        }
    }

    pub fn describe(&self) -> String {
        let r = self.rule;
        let mut s = format!("{} {}", self.verb, r.resource);
        if !r.api_group.is_empty() {
            s.push('.');
            s.push_str(r.api_group);
        }
        if let Some(n) = self.name {
            s.push_str(&format!(" {n:?}"));
        }
        match self.namespace() {
            Some(ns) => s.push_str(&format!(" in namespace {ns}")),
            None => s.push_str(" (cluster-wide)"),
        }
        s
    }
}

/// Every question for the rules: one per verb and resource name.
pub fn questions(rules: &[Rule]) -> Vec<Question<'_>> {
    let mut out = Vec::new();
    for rule in rules {
        for verb in &rule.verbs {
            if rule.resource_names.is_empty() {
                out.push(Question {
                    rule,
                    verb,
                    name: None,
                });
            }
            for n in &rule.resource_names {
                out.push(Question {
                    rule,
                    verb,
                    name: Some(n),
                });
            }
        }
    }
    out
}

/// The answers (allowed?) to the questions, for the ServiceAccount `subject`.
pub fn rbac(subject: &str, answers: &[(Question<'_>, Result<bool, ApiFailure>)]) -> Check {
    const ID: &str = "rbac";
    if let Some((_, Err(e))) = answers.iter().find(|(_, a)| a.is_err()) {
        return e.check(ID);
    }
    let denied: Vec<String> = answers
        .iter()
        .filter(|(_, a)| *a == Ok(false))
        .map(|(q, _)| format!("may not {} (for: {})", q.describe(), q.rule.why))
        .collect();
    // No totals in the summary: they follow the rule table, not the cluster.
    if denied.is_empty() {
        Check::ok(
            ID,
            format!("{subject} has every permission this configuration needs"),
        )
    } else {
        Check::fail(
            ID,
            format!(
                "{subject} lacks {} permission(s) this configuration needs",
                denied.len()
            ),
        )
        .evidence_all(cut(denied))
        .action(
            "grant them with a Role/ClusterRole bound to the ServiceAccount (the chart's RBAC \
             for the same mode and flags has them)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Status;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn lb(ingress: serde_json::Value) -> Service {
        svc(json!({
            "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx",
                         "labels": {"app.kubernetes.io/name": "ingress-nginx"}},
            "spec": {"type": "LoadBalancer", "selector": {"app": "x"}},
            "status": {"loadBalancer": {"ingress": ingress}}
        }))
    }

    #[test]
    fn ip_mode_verdicts() {
        for (ingress, want) in [
            (json!([]), Status::Warn),
            (json!([{"ip": "203.0.113.7"}]), Status::Ok),
            (json!([{"ip": "203.0.113.7", "ipMode": "VIP"}]), Status::Ok),
            (
                json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}]),
                Status::Warn,
            ),
            (
                json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}, {"ip": "203.0.113.8", "ipMode": "VIP"}]),
                Status::Warn,
            ),
        ] {
            let c = ip_mode(Some(&lb(ingress.clone())));
            assert_eq!(c.status, want, "{ingress}");
        }
        let np = svc(json!({"metadata": {"name": "t"}, "spec": {"type": "NodePort"}}));
        assert_eq!(ip_mode(Some(&np)).status, Status::Skip);
        assert_eq!(ip_mode(None).status, Status::Skip);
        let proxy = ip_mode(Some(&lb(json!([{"ip": "203.0.113.7", "ipMode": "Proxy"}]))));
        assert!(proxy.summary.contains("may be unnecessary"), "{proxy:?}");
        assert_eq!(proxy.evidence, ["203.0.113.7: ipMode Proxy"]);
    }

    #[test]
    fn picks_the_load_balancer_controller_service() {
        let s = |ns: &str, name: &str, ty: &str, component: &str| {
            svc(json!({
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"app.kubernetes.io/component": component}},
                "spec": {"type": ty}
            }))
        };
        let all = [
            s(
                "ingress-nginx",
                "ingress-nginx-controller-admission",
                "ClusterIP",
                "controller",
            ),
            s(
                "ingress-nginx",
                "ingress-nginx-controller",
                "LoadBalancer",
                "controller",
            ),
            s("kube-system", "traefik", "LoadBalancer", ""),
        ];
        let (first, others) = pick_ingress_service(&all);
        assert_eq!(
            first.unwrap().metadata.name.as_deref(),
            Some("ingress-nginx-controller")
        );
        assert_eq!(
            others,
            [
                "kube-system/traefik",
                "ingress-nginx/ingress-nginx-controller-admission"
            ]
        );
        assert_eq!(pick_ingress_service(&[]).0, None);
    }

    fn workload(args: &[&str], image: &str) -> Workload {
        Workload {
            kind: "Deployment",
            namespace: "ingress-nginx".into(),
            name: "ingress-nginx-controller".into(),
            labels: [("app".to_string(), "x".to_string())].into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            images: vec![image.into()],
        }
    }

    #[test]
    fn controller_kinds() {
        let plain = svc(
            json!({"metadata": {"name": "edge-lb", "namespace": "n"}, "spec": {"selector": {"app": "x"}}}),
        );
        let w = workload(&[], "docker.io/library/traefik:v3.1");
        assert_eq!(controller_kind(&plain, Some(&w)), ControllerKind::Traefik);
        assert_eq!(controller_kind(&plain, None), ControllerKind::Unknown);
        assert_eq!(
            controller_kind(&lb(json!([])), None),
            ControllerKind::IngressNginx
        );
        assert_eq!(
            matching_workload(&plain, std::slice::from_ref(&w)),
            Some(&w)
        );
        let other = svc(json!({"metadata": {"name": "x"}, "spec": {"selector": {"app": "y"}}}));
        assert_eq!(matching_workload(&other, std::slice::from_ref(&w)), None);
    }

    #[test]
    fn nginx_configmap_arg() {
        for (args, want) in [
            (
                vec![
                    "/nginx-ingress-controller",
                    "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller",
                ],
                Some(("ingress-nginx", "ingress-nginx-controller")),
            ),
            (vec!["--configmap", "other/cm"], Some(("other", "cm"))),
            (vec!["--configmap=cm"], Some(("ingress-nginx", "cm"))),
            (vec!["--configmap-x=a/b", "--election-id=x"], None),
        ] {
            let got = nginx_configmap(&workload(&args, "i"));
            assert_eq!(
                got,
                want.map(|(a, b)| (a.to_string(), b.to_string())),
                "{args:?}"
            );
        }
    }

    #[test]
    fn traefik_entrypoints() {
        let args: Vec<String> = [
            "--entryPoints.websecure.proxyProtocol.trustedIPs=10.42.0.0/16",
            "--entrypoints.web.proxyprotocol.insecure",
            "--entryPoints.metrics.proxyProtocol.insecure=false",
            "--entryPoints.websecure.address=:8443/tcp",
            "--providers.kubernetesingress",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = traefik_proxy_entrypoints(&args);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("web".to_string(), "insecure=true".to_string()),
                (
                    "websecure".to_string(),
                    "trustedips=10.42.0.0/16".to_string()
                ),
            ]
        );
    }

    fn cm(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": data})).unwrap()
    }

    #[test]
    fn proxy_protocol_verdicts() {
        let key = (
            "ingress-nginx".to_string(),
            "ingress-nginx-controller".to_string(),
        );
        let w = workload(&[], "registry.k8s.io/ingress-nginx/controller:v1.11.2");
        for (got, want) in [
            (
                Ok(Some(cm(json!({"use-proxy-protocol": "true"})))),
                Status::Ok,
            ),
            (
                Ok(Some(cm(json!({"use-proxy-protocol": "false"})))),
                Status::Warn,
            ),
            (Ok(Some(cm(json!({})))), Status::Warn),
            (Ok(None), Status::Warn),
            (
                Err(ApiFailure {
                    verb: "get",
                    resource: "configmaps".into(),
                    namespace: Some("ingress-nginx".into()),
                    name: Some("ingress-nginx-controller".into()),
                    code: Some(403),
                    message: "forbidden".into(),
                }),
                Status::Fail,
            ),
        ] {
            let c = proxy_protocol(ControllerKind::IngressNginx, Some(&w), Some((&key, &got)));
            assert_eq!(c.status, want, "{got:?}");
        }
        assert_eq!(
            proxy_protocol(ControllerKind::IngressNginx, Some(&w), None).status,
            Status::Warn
        );
        let mut t = workload(&["--entryPoints.web.proxyProtocol.insecure"], "traefik");
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, Some(&t), None).status,
            Status::Ok
        );
        t.args.clear();
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, Some(&t), None).status,
            Status::Warn
        );
        assert_eq!(
            proxy_protocol(ControllerKind::Traefik, None, None).status,
            Status::Skip
        );
        assert_eq!(
            proxy_protocol(ControllerKind::Unknown, None, None).status,
            Status::Skip
        );
    }

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        let p = crate::hostname::HostPolicy::new("cluster.local", &[], &[]);
        names.iter().map(|n| p.check(n).unwrap()).collect()
    }

    fn proxy() -> Answer {
        Answer::Template(
            crate::dns::answer::ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap(),
        )
    }

    const PLAIN: &str = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";

    fn status_of(checks: &[Check], id: &str) -> Status {
        checks.iter().find(|c| c.id == id).unwrap().status
    }

    #[test]
    fn corefile_verdicts() {
        let h = hosts(&["a.example.com"]);
        let empty = BTreeSet::new();
        let current = corefile::splice(PLAIN, &h, &proxy()).unwrap().text;
        let stale = corefile::splice(PLAIN, &hosts(&["old.example.com"]), &proxy())
            .unwrap()
            .text;
        let no_reload = PLAIN.replace("    reload\n", "");
        let import = PLAIN.replace(
            "reload\n",
            "reload\n    import /etc/coredns/custom/*.override\n",
        );
        // (mode, corefile, hosts, id, want)
        let cases: Vec<(Mode, &str, &BTreeSet<Hostname>, &str, Status)> = vec![
            (Mode::Coredns, &current, &h, "coredns-block", Status::Ok),
            (Mode::Coredns, PLAIN, &h, "coredns-block", Status::Fail),
            (Mode::Coredns, &stale, &h, "coredns-block", Status::Fail),
            (Mode::Coredns, PLAIN, &empty, "coredns-block", Status::Ok),
            (
                Mode::CorednsImport,
                &current,
                &h,
                "coredns-block",
                Status::Warn,
            ),
            (Mode::CorednsImport, PLAIN, &h, "coredns-block", Status::Ok),
            (Mode::Coredns, PLAIN, &h, "coredns-reload", Status::Ok),
            (
                Mode::Coredns,
                &no_reload,
                &h,
                "coredns-reload",
                Status::Warn,
            ),
            (Mode::Coredns, PLAIN, &h, "coredns-import", Status::Ok),
            (
                Mode::CorednsImport,
                PLAIN,
                &h,
                "coredns-import",
                Status::Fail,
            ),
            (
                Mode::CorednsImport,
                &import,
                &h,
                "coredns-import",
                Status::Ok,
            ),
            (Mode::Coredns, PLAIN, &h, "coredns-corefile", Status::Ok),
            (
                Mode::Coredns,
                "example.org:53 {\n forward . 1.1.1.1\n}\n",
                &h,
                "coredns-corefile",
                Status::Fail,
            ),
        ];
        for (mode, text, hosts, id, want) in cases {
            let (checks, _) = corefile_checks(mode, text, Some(hosts), Some(&proxy()));
            assert_eq!(status_of(&checks, id), want, "{mode:?} {id} {text:?}");
        }
        let (checks, _) = corefile_checks(Mode::Coredns, &stale, Some(&h), Some(&proxy()));
        let (unknown, _) = corefile_checks(Mode::Coredns, &stale, None, Some(&proxy()));
        assert_eq!(status_of(&unknown, "coredns-block"), Status::Skip);
        let block = checks.iter().find(|c| c.id == "coredns-block").unwrap();
        assert_eq!(
            block.evidence,
            [
                r"missing: match ^a\.example\.com\.$",
                r"stale: match ^old\.example\.com\.$",
            ]
        );
    }

    #[test]
    fn import_snippet_verdicts() {
        let t = ConfigMapKey::import_default();
        let h = hosts(&["a.example.com"]);
        let good = coredns_import::render(&h, &proxy());
        for (got, want) in [
            (
                Ok(Some(cm(json!({"ouroboros.override": good})))),
                Status::Ok,
            ),
            (
                Ok(Some(cm(
                    json!({"ouroboros.override": coredns_import::render(&BTreeSet::new(), &proxy())}),
                ))),
                Status::Fail,
            ),
            (Ok(Some(cm(json!({})))), Status::Fail),
            (Ok(None), Status::Fail),
        ] {
            assert_eq!(
                import_snippet(&t, &got, &h, &proxy()).status,
                want,
                "{got:?}"
            );
        }
    }

    fn event(count: Option<i32>, msg: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": "e"}, "involvedObject": {}, "count": count, "message": msg
        }))
        .unwrap()
    }

    #[test]
    fn reverted_verdicts() {
        let t = ConfigMapKey::coredns_default();
        let events = Ok(Some(vec![event(Some(4), "one"), event(None, "two")]));
        let c = block_reverted(Mode::Coredns, &t, &events, Some(true));
        assert_eq!(c.status, Status::Warn);
        assert!(c.summary.contains("5 time(s)"), "{c:?}");
        assert!(c.action.unwrap().contains("coredns-import"));
        assert_eq!(
            block_reverted(Mode::Coredns, &t, &Ok(Some(vec![])), None).status,
            Status::Ok
        );
        assert_eq!(
            block_reverted(Mode::CorednsImport, &t, &events, None).status,
            Status::Skip
        );
    }

    fn rewrite() -> Answer {
        Answer::Rewrite(crate::dns::ProxyFqdn::parse(crate::dns::DEFAULT_PROXY_FQDN).unwrap())
    }

    fn forbidden(resource: &str, name: &str) -> ApiFailure {
        ApiFailure {
            verb: "get",
            resource: resource.into(),
            namespace: Some("kube-system".into()),
            name: Some(name.into()),
            code: Some(403),
            message: "forbidden".into(),
        }
    }

    #[test]
    fn shadowing_verdicts() {
        let t = ConfigMapKey::import_default();
        let h = hosts(&["a.example.com", "*.b.example.org"]);
        let zone = "example.com:53 {\n    forward . 10.0.0.1\n}\n";
        let in_corefile = corefile::splice(&format!("{zone}{PLAIN}"), &h, &proxy())
            .unwrap()
            .findings
            .shadowing;
        let none: &[corefile::Shadow] = &[];
        let custom = |k: &str, v: &str| Ok(Some(cm(json!({k: v, "ouroboros.override": "x"}))));
        // (mode, Corefile shadows, import ConfigMap, want, first evidence line)
        type Case<'a> = (
            Mode,
            Option<&'a [corefile::Shadow]>,
            Got<ConfigMap>,
            Status,
            &'a str,
        );
        let cases: Vec<Case> =
            vec![
            (
                Mode::Coredns,
                Some(&in_corefile),
                Ok(None),
                Status::Warn,
                "a.example.com: server block 'example.com:53' (line 1)",
            ),
            (
                Mode::CorednsImport,
                Some(none),
                custom("b.server", "# org\nb.example.org {\n    forward . 10.0.0.2\n}"),
                Status::Warn,
                "*.b.example.org: server block 'b.example.org' in ConfigMap \
                 kube-system/coredns-custom key \"b.server\" (line 2)",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("other.server", "example.net:53 {\n}\nc.example.com:5353 {\n}\n"),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (other.server)",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("x.override", zone),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (no *.server key)",
            ),
            (
                Mode::Coredns,
                Some(none),
                Ok(None),
                Status::Ok,
                "searched: the Corefile; ConfigMap kube-system/coredns-custom (not found)",
            ),
            (
                Mode::Coredns,
                Some(none),
                Err(forbidden("configmaps", "coredns-custom")),
                Status::Warn,
                "get configmaps \"coredns-custom\" in namespace kube-system: HTTP 403: forbidden",
            ),
            (
                Mode::Coredns,
                Some(none),
                custom("bad.server", "example.com {\n"),
                Status::Warn,
                "ConfigMap kube-system/coredns-custom key \"bad.server\" cannot be parsed: line \
                 1: this '{' is never closed; add the missing '}' (in this block or one nested \
                 in it)",
            ),
            (
                Mode::Coredns,
                None,
                Ok(None),
                Status::Skip,
                "ConfigMap kube-system/coredns-custom (not found)",
            ),
            (Mode::ExternalDns, Some(&in_corefile), Ok(None), Status::Skip, ""),
        ];
        for (mode, shadows, got, want, first) in cases {
            let c = coredns_shadowing(mode, shadows, &t, &got, Some(&h), Some(&proxy()));
            assert_eq!(c.status, want, "{c:?}");
            let got = c.evidence.first().map_or("", String::as_str);
            assert!(got.starts_with(first), "{first:?}: {c:?}");
        }
        let c = coredns_shadowing(
            Mode::Coredns,
            Some(&in_corefile),
            &t,
            &Ok(None),
            Some(&h),
            Some(&proxy()),
        );
        assert!(c
            .action
            .unwrap()
            .starts_with("add the same ouroboros template block to that server block"));
        for (hs, a) in [(None, Some(&proxy())), (Some(&h), None)] {
            let c = coredns_shadowing(Mode::Coredns, Some(&in_corefile), &t, &Ok(None), hs, a);
            assert_eq!(c.status, Status::Skip);
        }
    }

    #[test]
    fn image_tags_and_the_coredns_container() {
        for (image, tag) in [
            ("registry.k8s.io/coredns/coredns:v1.11.3", Some("v1.11.3")),
            (
                "registry:5000/coredns/coredns:1.8.3@sha256:abc",
                Some("1.8.3"),
            ),
            ("registry:5000/coredns/coredns@sha256:abc", None),
            ("registry:5000/coredns", None),
            ("coredns:", None),
        ] {
            assert_eq!(image_tag(image), tag, "{image}");
        }
        let w = |name: &str, images: &[&str]| Workload {
            kind: "Deployment",
            namespace: "kube-system".into(),
            name: name.into(),
            labels: BTreeMap::new(),
            args: vec![],
            images: images.iter().map(|s| s.to_string()).collect(),
        };
        let rke2 = w(
            "rke2-coredns-rke2-coredns",
            &["rancher/hardened-coredns:v1.11.1-build20240305"],
        );
        assert_eq!(
            coredns_image(&rke2),
            Some("rancher/hardened-coredns:v1.11.1-build20240305")
        );
        let sidecar = w("kube-dns", &["gke.gcr.io/k8s-dns-kube-dns:1.23.0"]);
        assert_eq!(coredns_image(&sidecar), None);
        let both = [sidecar.clone(), rke2.clone()];
        assert_eq!(pick_coredns_workload(&both), Some(&rke2));
        assert_eq!(
            pick_coredns_workload(std::slice::from_ref(&sidecar)),
            Some(&sidecar)
        );
        assert_eq!(pick_coredns_workload(&[]), None);
    }

    #[test]
    fn version_verdicts() {
        let exact = hosts(&["a.example.com"]);
        let wild = hosts(&["a.example.com", "*.apps.example.com"]);
        let dep = |image: &str| -> Got<Workload> {
            Ok(Some(Workload {
                kind: "Deployment",
                namespace: "kube-system".into(),
                name: "coredns".into(),
                labels: BTreeMap::new(),
                args: vec![],
                images: vec![image.into()],
            }))
        };
        // (image, hosts, answer, want)
        let cases: Vec<(Got<Workload>, &BTreeSet<Hostname>, Answer, Status)> = vec![
            (
                dep("registry.k8s.io/coredns/coredns:v1.11.3"),
                &wild,
                rewrite(),
                Status::Ok,
            ),
            (
                dep("registry.k8s.io/coredns/coredns:v1.11.3"),
                &wild,
                proxy(),
                Status::Ok,
            ),
            (dep("coredns/coredns:1.8.4"), &wild, rewrite(), Status::Ok),
            (dep("coredns/coredns:1.8.3"), &wild, rewrite(), Status::Fail),
            (dep("coredns/coredns:1.8.3"), &exact, rewrite(), Status::Ok),
            (dep("coredns/coredns:1.8.3"), &wild, proxy(), Status::Ok),
            (dep("coredns/coredns:1.6.7"), &exact, proxy(), Status::Fail),
            (
                dep("rancher/hardened-coredns:v1.8.3-build20210223"),
                &wild,
                rewrite(),
                Status::Fail,
            ),
            (
                dep("eks/coredns:v1.11.1-eksbuild.4"),
                &wild,
                rewrite(),
                Status::Ok,
            ),
            (dep("coredns/coredns:latest"), &wild, proxy(), Status::Warn),
            (
                dep("coredns/coredns@sha256:0123"),
                &wild,
                proxy(),
                Status::Warn,
            ),
            (
                dep("gke.gcr.io/k8s-dns-kube-dns:1.23.0"),
                &wild,
                proxy(),
                Status::Warn,
            ),
            (Ok(None), &wild, proxy(), Status::Warn),
            (
                Err(forbidden("deployments.apps", "coredns")),
                &wild,
                proxy(),
                Status::Warn,
            ),
        ];
        for (got, h, a, want) in cases {
            let c = coredns_version(Mode::Coredns, "kube-system", &got, Some(h), Some(&a));
            assert_eq!(c.status, want, "{got:?} {a:?}: {c:?}");
        }
        let old = dep("coredns/coredns:1.8.3");
        let c = coredns_version(
            Mode::Coredns,
            "kube-system",
            &old,
            Some(&wild),
            Some(&rewrite()),
        );
        assert_eq!(
            c.summary,
            "CoreDNS 1.8.3 is too old for our rewrite block (needs 1.8.4 or later): it rejects \
             the Corefile"
        );
        assert_eq!(
            c.evidence[0],
            "Deployment kube-system/coredns: image coredns/coredns:1.8.3"
        );
        assert!(c.evidence[1].contains("answer auto"), "{c:?}");
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "use --coredns-answer template (the default), which parses on CoreDNS 1.7.0"
            ),
            "{c:?}"
        );
        let c = coredns_version(
            Mode::Coredns,
            "kube-system",
            &dep("coredns/coredns:1.6.7"),
            Some(&exact),
            Some(&proxy()),
        );
        assert_eq!(
            c.action.as_deref(),
            Some("upgrade CoreDNS to 1.7.0 or later")
        );
        let c = coredns_version(
            Mode::Coredns,
            "kube-system",
            &Err(forbidden("deployments.apps", "coredns")),
            Some(&wild),
            Some(&proxy()),
        );
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "check the version by hand: kubectl -n kube-system get deploy coredns -o \
                 jsonpath='{.spec.template.spec.containers[*].image}'"
            ),
            "{c:?}"
        );
        assert_eq!(
            coredns_version(
                Mode::EtcHosts,
                "kube-system",
                &old,
                Some(&wild),
                Some(&proxy())
            )
            .status,
            Status::Skip
        );
        assert_eq!(
            coredns_version(Mode::Coredns, "kube-system", &old, None, Some(&proxy())).status,
            Status::Skip
        );
        assert_eq!(
            coredns_version(Mode::Coredns, "kube-system", &old, Some(&wild), None).status,
            Status::Skip
        );
    }

    #[test]
    fn node_local_verdicts() {
        let t = ConfigMapKey::node_local_dns_default();
        let h = hosts(&["a.example.com"]);
        let nl = ".:53 {\n    bind 169.254.20.10\n    forward . 10.96.0.10\n}\n";
        let corefile = |text: &str| Ok(Some(cm(json!({ "Corefile": text }))));
        let current = corefile::splice(nl, &h, &proxy()).unwrap().text;
        let stale = corefile::splice(nl, &hosts(&["old.example.com"]), &proxy())
            .unwrap()
            .text;
        // (mode, --node-local-dns, ConfigMap, want, summary starts with)
        let cases: Vec<(Mode, bool, Got<ConfigMap>, Status, &str)> = vec![
            (
                Mode::Coredns,
                false,
                corefile(nl),
                Status::Warn,
                "node-local-dns is installed",
            ),
            (
                Mode::CorednsImport,
                false,
                corefile(nl),
                Status::Warn,
                "node-local-dns is installed",
            ),
            (
                Mode::Coredns,
                false,
                Ok(None),
                Status::Ok,
                "no node-local-dns",
            ),
            (
                Mode::ExternalDns,
                false,
                corefile(nl),
                Status::Ok,
                "node-local-dns is installed;",
            ),
            (
                Mode::ExternalDns,
                true,
                Ok(None),
                Status::Ok,
                "no node-local-dns",
            ),
            (
                Mode::Coredns,
                true,
                corefile(&current),
                Status::Ok,
                "our block in ConfigMap kube-system/node-local-dns is present and current",
            ),
            (
                Mode::CorednsImport,
                true,
                corefile(&current),
                Status::Ok,
                "our block in ConfigMap kube-system/node-local-dns is present and current",
            ),
            (
                Mode::Coredns,
                true,
                corefile(nl),
                Status::Fail,
                "our block in ConfigMap kube-system/node-local-dns is missing",
            ),
            (
                Mode::Coredns,
                true,
                corefile(&stale),
                Status::Fail,
                "our block in ConfigMap kube-system/node-local-dns is stale",
            ),
            (
                Mode::Coredns,
                true,
                corefile("cluster.local:53 {\n}\n"),
                Status::Fail,
                "the Corefile in ConfigMap kube-system/node-local-dns cannot be edited",
            ),
            (
                Mode::Coredns,
                true,
                Ok(Some(cm(json!({"Corefile.base": nl})))),
                Status::Fail,
                "ConfigMap kube-system/node-local-dns has no key \"Corefile\"",
            ),
            (
                Mode::Coredns,
                true,
                Ok(None),
                Status::Fail,
                "ConfigMap kube-system/node-local-dns not found, but --node-local-dns is on",
            ),
            (
                Mode::Coredns,
                true,
                Err(forbidden("configmaps", "node-local-dns")),
                Status::Fail,
                "could not get configmaps",
            ),
        ];
        for (mode, on, got, want, summary) in cases {
            let c = node_local_dns(mode, on, &t, &got, Some(&h), Some(&proxy()));
            assert_eq!(c.status, want, "{mode:?} {on} {c:?}");
            assert!(c.summary.starts_with(summary), "{c:?}");
        }
        // Off: the action names the option; with rewrite, the answer form it needs first.
        let c = node_local_dns(
            Mode::Coredns,
            false,
            &t,
            &corefile(&current),
            Some(&h),
            Some(&proxy()),
        );
        assert!(
            c.action.as_deref().unwrap().starts_with(
                "turn on --node-local-dns (chart: controller.nodeLocalDns.enabled) so the \
                 controller writes the same template block into its `.:53` server block"
            ),
            "{c:?}"
        );
        assert_eq!(c.evidence.len(), 1, "a leftover block is mentioned: {c:?}");
        let c = node_local_dns(
            Mode::Coredns,
            false,
            &t,
            &corefile(nl),
            Some(&h),
            Some(&rewrite()),
        );
        assert!(c
            .action
            .unwrap()
            .starts_with("use --coredns-answer template"));
        // Missing: both usual names and the flags.
        let c = node_local_dns(Mode::Coredns, true, &t, &Ok(None), Some(&h), Some(&proxy()));
        let a = c.action.unwrap();
        for want in [
            "`nodelocaldns`",
            "`node-local-dns`",
            "--node-local-dns-namespace",
            "--node-local-dns-configmap",
        ] {
            assert!(a.contains(want), "{want}: {a}");
        }
        // Stale: the rule diff, as for CoreDNS's block.
        let c = node_local_dns(
            Mode::Coredns,
            true,
            &t,
            &corefile(&stale),
            Some(&h),
            Some(&proxy()),
        );
        assert_eq!(
            c.evidence,
            [
                r"missing: match ^a\.example\.com\.$",
                r"stale: match ^old\.example\.com\.$",
            ]
        );
        for (hs, a) in [(None, Some(&proxy())), (Some(&h), None)] {
            let c = node_local_dns(Mode::Coredns, true, &t, &corefile(nl), hs, a);
            assert_eq!(c.status, Status::Skip);
        }
    }

    fn slice(eps: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": eps}),
        )
        .unwrap()
    }

    #[test]
    fn endpoint_verdicts() {
        for (eps, want) in [
            (json!([{"addresses": ["10.0.0.1"]}]), Status::Ok),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]),
                Status::Ok,
            ),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]),
                Status::Fail,
            ),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"terminating": true}}]),
                Status::Fail,
            ),
            (json!([]), Status::Fail),
        ] {
            let got = Ok(Some(vec![slice(eps.clone())]));
            assert_eq!(proxy_endpoints("o", "p", &got).status, want, "{eps}");
        }
        assert_eq!(
            proxy_endpoints("o", "p", &Ok(Some(vec![]))).status,
            Status::Fail
        );
    }

    #[test]
    fn dial_verdicts() {
        let a: SocketAddr = "10.96.0.20:8443".parse().unwrap();
        let ok = Dial {
            addr: a,
            result: Ok(Duration::from_millis(3)),
        };
        let bad = Dial {
            addr: a,
            result: Err("connection refused".into()),
        };
        assert_eq!(
            proxy_answers(&Dials::Done(vec![ok.clone()])).status,
            Status::Ok
        );
        assert_eq!(
            proxy_answers(&Dials::Done(vec![ok, bad])).status,
            Status::Fail
        );
        assert_eq!(proxy_answers(&Dials::Done(vec![])).status, Status::Skip);
        assert_eq!(
            proxy_answers(&Dials::Skipped("outside".into())).status,
            Status::Skip
        );
    }

    #[test]
    fn crd_verdicts() {
        assert!(needed_crds(Mode::Coredns, ExternalDnsOutput::Dnsendpoint, false).is_empty());
        assert_eq!(
            needed_crds(Mode::ExternalDns, ExternalDnsOutput::Dnsendpoint, false),
            [("dnsendpoints.externaldns.k8s.io", true)]
        );
        assert!(needed_crds(Mode::ExternalDns, ExternalDnsOutput::Service, false).is_empty());
        assert_eq!(
            needed_crds(Mode::Coredns, ExternalDnsOutput::Service, true).len(),
            4
        );
        assert!(needed_crds(Mode::Coredns, ExternalDnsOutput::Service, true)
            .iter()
            .all(|(_, required)| !required));
        let r = |req: bool, present: bool| vec![("x.y", req, Ok(present.then_some(())))];
        assert_eq!(crds(&r(true, true)).status, Status::Ok);
        assert_eq!(crds(&r(true, false)).status, Status::Fail);
        assert_eq!(crds(&r(false, false)).status, Status::Warn);
        assert_eq!(crds(&[]).status, Status::Skip);
    }

    #[test]
    fn rbac_questions_and_verdict() {
        let rules = vec![
            Rule {
                scope: Scope::Cluster,
                api_group: "networking.k8s.io",
                resource: "ingresses",
                resource_names: vec![],
                verbs: vec!["list", "watch"],
                why: "read",
            },
            Rule {
                scope: Scope::Namespace("kube-system".into()),
                api_group: "",
                resource: "configmaps",
                resource_names: vec!["coredns".into()],
                verbs: vec!["get"],
                why: "edit",
            },
        ];
        let qs = questions(&rules);
        let described: Vec<String> = qs.iter().map(Question::describe).collect();
        assert_eq!(
            described,
            [
                "list ingresses.networking.k8s.io (cluster-wide)",
                "watch ingresses.networking.k8s.io (cluster-wide)",
                "get configmaps \"coredns\" in namespace kube-system",
            ]
        );
        let all_ok: Vec<_> = qs.iter().cloned().map(|q| (q, Ok(true))).collect();
        assert_eq!(rbac("sa", &all_ok).status, Status::Ok);
        let mut some: Vec<_> = qs.iter().cloned().map(|q| (q, Ok(true))).collect();
        some[1].1 = Ok(false);
        let c = rbac("sa", &some);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.evidence,
            ["may not watch ingresses.networking.k8s.io (cluster-wide) (for: read)"]
        );
    }

    #[test]
    fn hostnames_verdicts() {
        use crate::controller::hostnames::{desired, Filters, Sources};
        use k8s_openapi::api::networking::v1::Ingress;
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"tls": [{"hosts": ["shop.example.com", "bad_name.example.com", "x.svc.cluster.local"]}]}
        }))
        .unwrap();
        let policy = crate::hostname::HostPolicy::new("cluster.local", &[], &[]);
        let d = desired(
            &Sources {
                ingresses: vec![&ing],
                ..Default::default()
            },
            &Filters::default(),
            &policy,
        );
        let c = hostnames(&d);
        assert_eq!(c.status, Status::Warn);
        assert_eq!(c.evidence.len(), 2);
        assert!(
            c.evidence[0].starts_with("Ingress shop/web: \"bad_name.example.com\" rejected"),
            "{c:?}"
        );
        let ok = hostnames(&desired(&Sources::default(), &Filters::default(), &policy));
        assert_eq!(ok.status, Status::Ok);
    }

    #[test]
    fn cut_keeps_count() {
        let lines: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        let c = cut(lines);
        assert_eq!(c.len(), MAX_EVIDENCE + 1);
        assert_eq!(c.last().unwrap(), "... and 5 more");
    }
}
