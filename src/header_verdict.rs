//! PURE: whether a target's ingress controller requires, takes optionally or refuses the PROXY
//! header, read from its own configuration object as the API shows it, and the answer the
//! target gets from that ([`choose`]).
//!
//! Which object is read is never guessed: the operator names the controller's kind and the
//! object (`ingress-controller-kind=` and `ingress-controller-config=` in a `--target`,
//! `--ingress-controller-kind` and `--ingress-controller-config` for the default one), so the
//! controller reads exactly one object per target, by name, and RBAC grants exactly that.
//! Where the API does not show the setting, `ingress-controller-kind=probe` reads no object
//! ([`HeaderSource::Probe`]): the verdict then comes from knocks on the ingress controller
//! Service (`probe::header`).
//! Each kind's rule follows its project's documentation (cited in docs/targets.md). Every
//! controller here accepts v1 and v2 of the header alike (they detect the version), so a
//! verdict names no version of its own.

use serde::Serialize;
use serde_json::Value;

/// The ingress controllers whose configuration is read, and where each keeps the setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerKind {
    /// ingress-nginx: its ConfigMap's `use-proxy-protocol`.
    IngressNginx,
    /// HAProxy Kubernetes Ingress (haproxytech): its ConfigMap's `proxy-protocol`, the sources
    /// that must send the header.
    Haproxy,
    /// Traefik: its Deployment's (or DaemonSet's) `--entryPoints.NAME.proxyProtocol.*` args.
    Traefik,
    /// Contour: its Deployment's `contour serve --use-proxy-protocol`.
    Contour,
    /// Envoy Gateway: a ClientTrafficPolicy's `spec.proxyProtocol` (or the older
    /// `spec.enableProxyProtocol`).
    EnvoyGateway,
    /// NGINX Gateway Fabric: an NginxProxy's `spec.rewriteClientIP.mode: ProxyProtocol`.
    NginxGatewayFabric,
    /// Cilium's Gateway API: the `cilium-config` ConfigMap's `enable-gateway-api-proxy-protocol`.
    Cilium,
}

/// The API resource a configuration object is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

const CONFIGMAP: Resource = Resource {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
};
const DEPLOYMENT: Resource = Resource {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
};
const DAEMONSET: Resource = Resource {
    group: "apps",
    version: "v1",
    kind: "DaemonSet",
    plural: "daemonsets",
};
const CLIENT_TRAFFIC_POLICY: Resource = Resource {
    group: "gateway.envoyproxy.io",
    version: "v1alpha1",
    kind: "ClientTrafficPolicy",
    plural: "clienttrafficpolicies",
};
const NGINX_PROXY: Resource = Resource {
    group: "gateway.nginx.org",
    version: "v1alpha2",
    kind: "NginxProxy",
    plural: "nginxproxies",
};

impl ControllerKind {
    pub const ALL: [ControllerKind; 7] = [
        ControllerKind::IngressNginx,
        ControllerKind::Haproxy,
        ControllerKind::Traefik,
        ControllerKind::Contour,
        ControllerKind::EnvoyGateway,
        ControllerKind::NginxGatewayFabric,
        ControllerKind::Cilium,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::IngressNginx => "ingress-nginx",
            ControllerKind::Haproxy => "haproxy",
            ControllerKind::Traefik => "traefik",
            ControllerKind::Contour => "contour",
            ControllerKind::EnvoyGateway => "envoy-gateway",
            ControllerKind::NginxGatewayFabric => "nginx-gateway-fabric",
            ControllerKind::Cilium => "cilium",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "ingress controller kind {s:?} is not one of {}",
                    known.join(", ")
                )
            })
    }

    /// What the configuration object is read as; `daemonset` only for the kinds whose
    /// setting is in a workload's args.
    fn resource(self, daemonset: bool) -> Resource {
        match self {
            ControllerKind::IngressNginx | ControllerKind::Haproxy | ControllerKind::Cilium => {
                CONFIGMAP
            }
            ControllerKind::Traefik | ControllerKind::Contour if daemonset => DAEMONSET,
            ControllerKind::Traefik | ControllerKind::Contour => DEPLOYMENT,
            ControllerKind::EnvoyGateway => CLIENT_TRAFFIC_POLICY,
            ControllerKind::NginxGatewayFabric => NGINX_PROXY,
        }
    }
}

/// What `ingress-controller-kind=` (`--ingress-controller-kind`) names: a controller whose
/// configuration object is read, or `probe`, which reads none and knocks on the ingress
/// controller Service instead (for a controller whose setting the API does not show).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    Read(ControllerKind),
    Probe,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Read(k) => k.as_str(),
            SourceKind::Probe => "probe",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim() == "probe" {
            return Ok(SourceKind::Probe);
        }
        ControllerKind::parse(s)
            .map(SourceKind::Read)
            .map_err(|e| format!("{e}, or probe (knock on the ingress controller Service)"))
    }
}

/// Where a target's header verdict comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderSource {
    /// The kind's configuration object, read and watched by name.
    Object(ConfigRef),
    /// Two knocks on the target's ingress controller Service, bare and behind a header
    /// (`ingress-controller-kind=probe`; see `probe::header`).
    Probe,
}

impl HeaderSource {
    /// What is read or knocked on, as logs, `render` and doctor name it.
    pub fn describe(&self) -> String {
        match self {
            HeaderSource::Object(c) => c.describe(),
            HeaderSource::Probe => "its ingress controller Service (probed)".into(),
        }
    }
}

/// The one object that says whether a target's ingress controller takes the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRef {
    pub kind: ControllerKind,
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
}

impl ConfigRef {
    /// `NAMESPACE/NAME` (or `daemonset/NAMESPACE/NAME` for Traefik and Contour run as a
    /// DaemonSet) of the kind's configuration object.
    pub fn parse(kind: ControllerKind, s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split('/').collect();
        let (daemonset, ns, name) = match parts[..] {
            [ns, name] => (false, ns, name),
            ["daemonset", ns, name]
                if matches!(kind, ControllerKind::Traefik | ControllerKind::Contour) =>
            {
                (true, ns, name)
            }
            _ => {
                let form = if matches!(kind, ControllerKind::Traefik | ControllerKind::Contour) {
                    "[daemonset/]NAMESPACE/NAME"
                } else {
                    "NAMESPACE/NAME"
                };
                return Err(format!(
                    "ingress controller config {s:?} is not {form} (for {})",
                    kind.as_str()
                ));
            }
        };
        if !crate::dns_name::is_label(ns) || !crate::dns_name::is_subdomain(name) {
            return Err(format!(
                "ingress controller config {s:?}: {ns:?} is not a namespace or {name:?} not an object name"
            ));
        }
        Ok(ConfigRef {
            kind,
            resource: kind.resource(daemonset),
            namespace: ns.to_string(),
            name: name.to_string(),
        })
    }

    /// `ConfigMap ingress-nginx/ingress-nginx-controller`, as logs and doctor name it.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.resource.kind, self.namespace, self.name)
    }
}

/// What the ingress controller does with a PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Header {
    /// Needs it on every connection (from the sources it lists).
    Required,
    /// Takes connections with and without it.
    Optional,
    /// Does not parse it: a header would be read as the start of the request.
    Refused,
    /// Nothing read says.
    Unknown,
}

impl Header {
    pub fn as_str(self) -> &'static str {
        match self {
            Header::Required => "required",
            Header::Optional => "optional",
            Header::Refused => "refused",
            Header::Unknown => "unknown",
        }
    }
}

/// A header verdict and how it was reached (the field and value read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub header: Header,
    pub how: String,
}

impl Verdict {
    fn new(header: Header, how: impl Into<String>) -> Self {
        Verdict {
            header,
            how: how.into(),
        }
    }

    /// No configuration named: nothing to read.
    pub fn not_configured() -> Self {
        Verdict::new(
            Header::Unknown,
            "no ingress controller configuration named (ingress-controller-kind= and \
             ingress-controller-config=)",
        )
    }
}

/// The verdict from `config`'s object as read (`None`: it does not exist). A missing object
/// says nothing: its name may be mistyped, and guessing "no header" from it could send
/// headerless clients to a controller that needs one.
pub fn verdict(config: &ConfigRef, object: Option<&Value>) -> Verdict {
    let Some(object) = object else {
        return Verdict::new(Header::Unknown, format!("{} not found", config.describe()));
    };
    let what = config.describe();
    match config.kind {
        ControllerKind::IngressNginx => flag_key(&what, object, "use-proxy-protocol"),
        ControllerKind::Cilium => flag_key(&what, object, "enable-gateway-api-proxy-protocol"),
        ControllerKind::Haproxy => haproxy(&what, object),
        ControllerKind::Traefik => traefik(&what, object),
        ControllerKind::Contour => contour(&what, object),
        ControllerKind::EnvoyGateway => envoy_gateway(&what, object),
        ControllerKind::NginxGatewayFabric => nginx_gateway_fabric(&what, object),
    }
}

/// A ConfigMap's boolean key: "true" requires the header, "false" or absent (the default)
/// refuses it.
fn flag_key(what: &str, cm: &Value, key: &str) -> Verdict {
    match cm.pointer(&format!("/data/{key}")).and_then(Value::as_str) {
        None => Verdict::new(Header::Refused, format!("{what}: no {key} (default false)")),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "true" => Verdict::new(Header::Required, format!("{what}: {key}: \"{v}\"")),
            "false" => Verdict::new(Header::Refused, format!("{what}: {key}: \"{v}\"")),
            _ => Verdict::new(
                Header::Unknown,
                format!("{what}: {key}: \"{v}\" is not true or false"),
            ),
        },
    }
}

/// haproxytech's `proxy-protocol`: the sources (IPs, CIDRs) whose connections must carry the
/// header; other sources' must not.
fn haproxy(what: &str, cm: &Value) -> Verdict {
    match cm.pointer("/data/proxy-protocol").and_then(Value::as_str) {
        Some(v) if !v.trim().is_empty() => Verdict::new(
            Header::Required,
            format!("{what}: proxy-protocol: \"{v}\" (required from those sources: the proxy's pods must be among them)"),
        ),
        _ => Verdict::new(Header::Refused, format!("{what}: no proxy-protocol sources")),
    }
}

/// Every container's `command` and `args` of a workload's pod template.
fn container_args(workload: &Value) -> Vec<&str> {
    let containers = workload
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    containers
        .into_iter()
        .flatten()
        .flat_map(|c| {
            ["command", "args"]
                .into_iter()
                .filter_map(move |k| c.get(k).and_then(Value::as_array))
                .flatten()
        })
        .filter_map(Value::as_str)
        .collect()
}

/// Traefik: an entry point with `proxyProtocol.trustedIPs` or `proxyProtocol.insecure` takes
/// connections with or without the header. Its flags are case-insensitive. A static
/// configuration file may say more than the args: then nothing is concluded.
fn traefik(what: &str, workload: &Value) -> Verdict {
    let args = container_args(workload);
    let enabling: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| {
            let lower = a.to_ascii_lowercase();
            lower.starts_with("--entrypoints.")
                && lower.contains(".proxyprotocol.")
                && !lower.ends_with("=false")
        })
        .collect();
    if !enabling.is_empty() {
        return Verdict::new(Header::Optional, format!("{what}: {}", enabling.join(" ")));
    }
    if let Some(file) = args.iter().find(|a| {
        let lower = a.to_ascii_lowercase();
        lower.starts_with("--configfile") || lower.starts_with("--config-file")
    }) {
        return Verdict::new(
            Header::Unknown,
            format!(
                "{what}: no proxyProtocol arg, but {file}: the file's entry points are not read"
            ),
        );
    }
    Verdict::new(
        Header::Refused,
        format!("{what}: no --entryPoints.*.proxyProtocol.* arg"),
    )
}

/// Contour: `contour serve --use-proxy-protocol` puts Envoy's PROXY listener filter, which
/// requires the header, on every listener.
fn contour(what: &str, workload: &Value) -> Verdict {
    let on = container_args(workload).into_iter().find(|a| {
        let a = a.trim();
        a == "--use-proxy-protocol" || a.eq_ignore_ascii_case("--use-proxy-protocol=true")
    });
    match on {
        Some(a) => Verdict::new(Header::Required, format!("{what}: {a}")),
        None => Verdict::new(
            Header::Refused,
            format!("{what}: no --use-proxy-protocol arg"),
        ),
    }
}

/// Envoy Gateway: `spec.proxyProtocol` (optional when `optional: true`), or the older
/// `spec.enableProxyProtocol: true` (required).
fn envoy_gateway(what: &str, ctp: &Value) -> Verdict {
    if let Some(pp) = ctp.pointer("/spec/proxyProtocol").filter(|v| !v.is_null()) {
        return if pp.get("optional").and_then(Value::as_bool) == Some(true) {
            Verdict::new(
                Header::Optional,
                format!("{what}: spec.proxyProtocol.optional: true"),
            )
        } else {
            Verdict::new(
                Header::Required,
                format!("{what}: spec.proxyProtocol: {pp}"),
            )
        };
    }
    match ctp
        .pointer("/spec/enableProxyProtocol")
        .and_then(Value::as_bool)
    {
        Some(true) => Verdict::new(
            Header::Required,
            format!("{what}: spec.enableProxyProtocol: true"),
        ),
        _ => Verdict::new(
            Header::Refused,
            format!("{what}: neither spec.proxyProtocol nor spec.enableProxyProtocol"),
        ),
    }
}

/// NGINX Gateway Fabric: `spec.rewriteClientIP.mode: ProxyProtocol` makes every listener
/// `proxy_protocol`, which requires the header.
fn nginx_gateway_fabric(what: &str, np: &Value) -> Verdict {
    match np
        .pointer("/spec/rewriteClientIP/mode")
        .and_then(Value::as_str)
    {
        Some("ProxyProtocol") => Verdict::new(
            Header::Required,
            format!("{what}: spec.rewriteClientIP.mode: ProxyProtocol"),
        ),
        Some(other) => Verdict::new(
            Header::Refused,
            format!("{what}: spec.rewriteClientIP.mode: {other}"),
        ),
        None => Verdict::new(
            Header::Refused,
            format!("{what}: no spec.rewriteClientIP.mode"),
        ),
    }
}

/// What decides a target's answer besides the operator's pick.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub verdict: &'a Verdict,
    /// Every load-balancer address of its ingress controller Service reports ipMode Proxy
    /// (and skipping on that is on).
    pub ipmode_proxy: bool,
}

/// The answer a target gets, and why (for logs, Events and doctor).
pub fn choose(pick: AnswerPick, facts: &Facts<'_>) -> (Route, String) {
    let header = facts.verdict.header;
    match pick {
        AnswerPick::Relay => (Route::Relay, "answer=relay is set".into()),
        AnswerPick::Direct => (Route::Direct, "answer=direct is set".into()),
        AnswerPick::Skip => (Route::Skip, "answer=skip is set".into()),
        AnswerPick::Auto if facts.ipmode_proxy => (
            Route::Skip,
            "its load balancer reports ipMode Proxy: in-cluster clients get the header from it"
                .into(),
        ),
        AnswerPick::Auto => match header {
            Header::Required => (
                Route::Relay,
                "the ingress controller requires the PROXY header (v1 or v2): through the proxy"
                    .into(),
            ),
            Header::Optional => (
                Route::Direct,
                "the ingress controller takes connections without the header: no relay hop".into(),
            ),
            Header::Refused => (
                Route::Direct,
                "the ingress controller does not expect the header: no relay hop".into(),
            ),
            Header::Unknown => (
                Route::Relay,
                "whether the ingress controller takes the header is unknown: through the proxy, \
                 as before"
                    .into(),
            ),
        },
    }
}

/// How a target's names are answered, as the operator asks (`answer=`, `--answer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AnswerPick {
    /// Picked from what the ingress controller's configuration says (see
    /// --ingress-controller-kind): relay when it requires the PROXY header, direct when it
    /// takes it optionally or not at all, skip when its load balancer reports ipMode Proxy,
    /// relay when nothing says.
    #[default]
    Auto,
    /// Through the proxy, which adds the PROXY header (the proxy Service's ClusterIPs).
    Relay,
    /// Straight to the ingress controller, no header (its Service's ClusterIPs).
    Direct,
    /// Leave the names alone: not answered by ouroboros at all.
    Skip,
}

impl AnswerPick {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerPick::Auto => "auto",
            AnswerPick::Relay => "relay",
            AnswerPick::Direct => "direct",
            AnswerPick::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(AnswerPick::Auto),
            "relay" => Ok(AnswerPick::Relay),
            "direct" => Ok(AnswerPick::Direct),
            "skip" => Ok(AnswerPick::Skip),
            other => Err(format!(
                "answer {other:?} is not one of auto, relay, direct, skip"
            )),
        }
    }
}

/// What a target's names are answered with now: the pick made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// The proxy's addresses.
    Relay,
    /// The ingress controller Service's addresses.
    Direct,
    /// None: the names are left out.
    Skip,
}

impl Route {
    pub const ALL: [Route; 3] = [Route::Relay, Route::Direct, Route::Skip];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Relay => "relay",
            Route::Direct => "direct",
            Route::Skip => "skip",
        }
    }
}

#[cfg(test)]
mod tests;
