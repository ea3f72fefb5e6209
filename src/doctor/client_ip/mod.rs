//! `ouroboros doctor client-ip`: proves the client address survives the hairpin, end to end.
//! It deploys our `whoami` behind the ingress controller under a host the user chooses (or
//! uses an existing Ingress whose backend is one), calls the host from a caller Pod through the
//! cluster's DNS, and compares the client address the backend was told with the caller's.
//!
//! `objects` builds what it creates, `state` reads Pods, Ingresses and Nodes, `verdict` judges
//! (all pure); `call` is the caller Pod's side. This module is the edge: the API calls in a
//! fixed order, each wait bounded by `--timeout`, and the removal of everything created, also
//! when a step fails, times out or the run is interrupted.

pub mod call;
pub mod objects;
pub mod state;
pub mod verdict;

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Output;
use crate::flags::NamespacedName;
use crate::flags::UsageError;
use objects::Run;
use verdict::{Backend, Verdict};

/// The image the chart deploys by default (docs/install.md).
pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/ouroboros-hairpin/ouroboros:",
    env!("CARGO_PKG_VERSION")
);
/// Between two reads of a Pod being waited for.
const POLL: Duration = Duration::from_secs(1);

/// `doctor client-ip`: see docs/doctor.md, "The client address, end to end".
#[derive(Args, Clone, Debug)]
#[command(
    long_about = "Deploy a temporary whoami behind the ingress controller under --host \
    (or use the existing --ingress), call it from a temporary caller Pod through the cluster's \
    DNS, and report the client address the backend saw against the caller pod's: intact, the \
    load balancer's, a node's, another, or missing. Every object it creates is removed, also \
    when a step fails, times out or the run is interrupted. Exit 0 intact, 1 otherwise, 64 bad \
    flags.\n\n\
    RBAC in --namespace: create, get, delete pods; get pods/log; create, delete services; \
    create, get, delete ingresses (networking.k8s.io; with --ingress, get in its namespace). \
    Cluster-wide: list nodes (without it a node address is reported as another)."
)]
pub struct ClientIpArgs {
    /// The temporary host to create an Ingress for (one the cluster's DNS hairpins, e.g.
    /// covered by a wildcard the controller answers); with --ingress, which of its hosts to call
    /// [default: its first].
    #[arg(long, env = "OUROBOROS_DOCTOR_CLIENT_IP_HOST", value_name = "HOST")]
    pub host: Option<String>,

    /// Use this existing Ingress, NAMESPACE/NAME, instead of creating one: its backend must be
    /// `ouroboros whoami`. Only the caller Pod is created.
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_INGRESS",
        value_name = "NS/NAME",
        value_parser = crate::flags::parse_namespaced_name,
        conflicts_with = "ingress_class"
    )]
    pub ingress: Option<NamespacedName>,

    /// The ingressClassName of the temporary Ingress: the target's ingress controller
    /// [default: the cluster's default IngressClass].
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_INGRESS_CLASS",
        value_name = "CLASS"
    )]
    pub ingress_class: Option<String>,

    /// The namespace the temporary objects are created in.
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_NAMESPACE",
        value_name = "NS",
        default_value = "default"
    )]
    pub namespace: String,

    /// The ouroboros image the whoami and caller Pods run (the chart's image).
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_IMAGE",
        value_name = "IMAGE",
        default_value = DEFAULT_IMAGE
    )]
    pub image: String,

    /// How long the whole run may wait: for the whoami Pod to be ready and for the caller's
    /// answer (whole seconds, at least 1s).
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_TIMEOUT",
        value_name = "DURATION",
        default_value = "2m",
        value_parser = crate::flags::parse_duration
    )]
    pub timeout: Duration,

    /// Report format: text or json.
    #[arg(long, env = "OUROBOROS_DOCTOR_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// Kubeconfig file [default: in-cluster service account, else $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "OUROBOROS_CONTROLLER_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// How long each API call may take.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_API_TIMEOUT",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::flags::parse_duration
    )]
    pub api_timeout: Duration,

    /// The caller Pod's mode: ask http://HOST/ and print what the backend reported.
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CLIENT_IP_CALL",
        value_name = "HOST",
        hide = true
    )]
    pub call: Option<String>,
}

/// What one run does, from validated flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub run: Run,
    pub host: Option<String>,
    /// `None`: create an Ingress; else this existing one.
    pub existing: Option<NamespacedName>,
    pub class: Option<String>,
    pub timeout: Duration,
}

fn check_host(flag: &str, host: &str) -> Result<(), UsageError> {
    let ok = crate::dns_name::is_subdomain(host)
        && host.contains('.')
        && host.parse::<IpAddr>().is_err();
    if ok {
        Ok(())
    } else {
        Err(UsageError::new(format!(
            "{flag} {host:?} is not a host name an Ingress rule takes (lowercase DNS name with \
             a dot, no wildcard, no IP address)"
        )))
    }
}

impl ClientIpArgs {
    /// Checks the flags (errors exit 64) and names the run `id`.
    pub fn plan(&self, id: String) -> Result<Plan, UsageError> {
        if self.ingress.is_none() && self.host.is_none() {
            return Err(UsageError::new(
                "doctor client-ip needs --host (a temporary host to create an Ingress for) or \
                 --ingress (an existing one whose backend is ouroboros whoami)",
            ));
        }
        if let Some(h) = &self.host {
            check_host("--host", h)?;
        }
        if !crate::dns_name::is_label(&self.namespace) {
            return Err(UsageError::new(format!(
                "--namespace {:?} is not a namespace name ({})",
                self.namespace,
                crate::dns_name::LABEL_SYNTAX
            )));
        }
        if let Some(c) = &self.ingress_class {
            if !crate::dns_name::is_subdomain(c) {
                return Err(UsageError::new(format!(
                    "--ingress-class {c:?} is not an IngressClass name (a lowercase DNS name)"
                )));
            }
        }
        if self.timeout < Duration::from_secs(1) || self.timeout.subsec_nanos() != 0 {
            return Err(UsageError::new(format!(
                "--timeout {} must be whole seconds, at least 1s",
                humantime::format_duration(self.timeout)
            )));
        }
        if self.image.trim().is_empty() {
            return Err(UsageError::new("--image must not be empty"));
        }
        Ok(Plan {
            run: Run {
                id,
                namespace: self.namespace.clone(),
                image: self.image.clone(),
            },
            host: self.host.clone(),
            existing: self.ingress.clone(),
            class: self.ingress_class.clone(),
            timeout: self.timeout,
        })
    }
}

/// An object this run created, to be deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Made {
    Pod(String),
    Service(String),
    Ingress(String),
}

impl Made {
    fn kind(&self) -> &'static str {
        match self {
            Made::Pod(_) => "Pod",
            Made::Service(_) => "Service",
            Made::Ingress(_) => "Ingress",
        }
    }

    fn name(&self) -> &str {
        match self {
            Made::Pod(n) | Made::Service(n) | Made::Ingress(n) => n,
        }
    }
}

/// What the run found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub host: String,
    pub caller_pod: String,
    pub caller_ips: Vec<IpAddr>,
    pub backend: Backend,
    pub seen: Option<(IpAddr, &'static str)>,
    pub load_balancer: Vec<IpAddr>,
    pub nodes: Vec<IpAddr>,
    /// Why the node addresses are unknown, when they are.
    pub nodes_unknown: Option<String>,
    pub verdict: Verdict,
}

/// Why a run ended without a verdict.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    #[error("{0}")]
    Step(String),
    #[error("interrupted")]
    Interrupted,
}

/// The run's outcome and what its cleanup left behind (objects it could not delete, with why).
pub struct Outcome {
    pub result: Result<Found, Failed>,
    pub left: Vec<String>,
}

fn api_error(what: &str, e: &kube::Error) -> Failed {
    let hint = match e {
        kube::Error::Api(s) if s.code == 403 => {
            " (forbidden: grant the RBAC listed in `ouroboros doctor client-ip --help`)"
        }
        kube::Error::Api(s) if s.code == 409 => {
            " (already exists: a run with the same id? run again)"
        }
        _ => "",
    };
    Failed::Step(format!("{what} failed: {e}{hint}"))
}

/// Runs `plan` against the cluster behind `client`: the steps until a verdict, then the
/// removal of everything created, also when a step fails or `cancel` fires. `progress` gets
/// one line per step.
pub async fn run_plan(
    client: &Client,
    plan: &Plan,
    cancel: &CancellationToken,
    progress: &mut (dyn FnMut(String) + Send),
) -> Outcome {
    let mut made = Vec::new();
    let result = tokio::select! {
        r = steps(client, plan, &mut made, progress) => r,
        () = cancel.cancelled() => Err(Failed::Interrupted),
    };
    if let Err(e) = &result {
        progress(format!("stopped: {e}"));
    }
    let left = remove(client, &plan.run.namespace, &made, progress).await;
    Outcome { result, left }
}

/// Deletes `made`, newest first; what could not be deleted, with why. A 404 is gone already.
async fn remove(
    client: &Client,
    ns: &str,
    made: &[Made],
    progress: &mut (dyn FnMut(String) + Send),
) -> Vec<String> {
    let dp = DeleteParams::background();
    let mut left = Vec::new();
    for m in made.iter().rev() {
        let name = m.name();
        let r = match m {
            Made::Pod(_) => Api::<Pod>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(drop),
            Made::Service(_) => Api::<Service>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(drop),
            Made::Ingress(_) => Api::<Ingress>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(drop),
        };
        let what = format!("{} {ns}/{name}", m.kind());
        match r {
            Ok(()) => progress(format!("deleted {what}")),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                progress(format!("deleted {what} (gone already)"))
            }
            Err(e) => {
                progress(format!("could not delete {what}: {e}"));
                left.push(format!("{what}: {e}"));
            }
        }
    }
    left
}

/// Creates `object` (recorded in `made` before it is sent, so an interrupted create is still
/// deleted).
async fn create<K>(
    api: &Api<K>,
    made: &mut Vec<Made>,
    entry: Made,
    object: serde_json::Value,
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<K, Failed>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let what = format!(
        "{} {}/{}",
        entry.kind(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        entry.name()
    );
    let k: K = serde_json::from_value(object)
        .map_err(|e| Failed::Step(format!("building {what}: {e}")))?;
    made.push(entry);
    match api.create(&PostParams::default(), &k).await {
        Ok(k) => {
            progress(format!("created {what}"));
            Ok(k)
        }
        Err(e) => {
            // Refused: nothing to delete.
            if matches!(e, kube::Error::Api(_)) {
                made.pop();
            }
            Err(api_error(&format!("creating {what}"), &e))
        }
    }
}

/// Reads the Pod every [`POLL`] until `done` says so, or fails at `deadline` with its state.
async fn wait_pod<T>(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    deadline: tokio::time::Instant,
    timeout: Duration,
    done: impl Fn(&Pod) -> Option<T>,
) -> Result<(Pod, T), Failed> {
    loop {
        let pod = pods
            .get(name)
            .await
            .map_err(|e| api_error(&format!("reading Pod {name}"), &e))?;
        if let Some(t) = done(&pod) {
            return Ok((pod, t));
        }
        if tokio::time::Instant::now() + POLL > deadline {
            let ns = pods.namespace().unwrap_or_default();
            return Err(Failed::Step(format!(
                "Pod {ns}/{name} did not {what} within {} ({}); its events: kubectl -n {ns} \
                 describe pod {name}",
                humantime::format_duration(timeout),
                state::describe(&pod)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn steps(
    client: &Client,
    plan: &Plan,
    made: &mut Vec<Made>,
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<Found, Failed> {
    let deadline = tokio::time::Instant::now() + plan.timeout;
    let run = &plan.run;
    let ns = run.namespace.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (host, ingress_at) = match &plan.existing {
        Some(existing) => {
            let api: Api<Ingress> = Api::namespaced(client.clone(), &existing.namespace);
            let ing = api
                .get(&existing.name)
                .await
                .map_err(|e| api_error(&format!("reading Ingress {existing}"), &e))?;
            (
                pick_host(&ing, existing, plan.host.as_deref())?,
                existing.clone(),
            )
        }
        None => {
            let host = plan.host.clone().unwrap_or_default();
            create(
                &pods,
                made,
                Made::Pod(run.name()),
                run.backend_pod(),
                progress,
            )
            .await?;
            let services: Api<Service> = Api::namespaced(client.clone(), ns);
            create(
                &services,
                made,
                Made::Service(run.name()),
                run.service(),
                progress,
            )
            .await?;
            let ingresses: Api<Ingress> = Api::namespaced(client.clone(), ns);
            let ing = run.ingress(&host, plan.class.as_deref());
            create(&ingresses, made, Made::Ingress(run.name()), ing, progress).await?;
            let ready = |p: &Pod| state::ready(p).then_some(());
            wait_pod(
                &pods,
                &run.name(),
                "become ready",
                deadline,
                plan.timeout,
                ready,
            )
            .await?;
            progress(format!("Pod {ns}/{} (whoami) is ready", run.name()));
            let at = NamespacedName {
                namespace: ns.to_string(),
                name: run.name(),
            };
            (host, at)
        }
    };
    // The caller's own bound: what is left of the run's, less a margin for the Pod to start
    // and end, so that its own answer (why it got none) is read rather than a timeout here.
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let secs = caller_seconds(left);
    create(
        &pods,
        made,
        Made::Pod(run.caller()),
        run.caller_pod(&host, secs),
        progress,
    )
    .await?;
    let ended = |p: &Pod| state::ended(p).map(String::from);
    let (caller, phase) =
        wait_pod(&pods, &run.caller(), "end", deadline, plan.timeout, ended).await?;
    progress(format!("Pod {ns}/{} (caller) ended: {phase}", run.caller()));
    let logs = pods
        .logs(&run.caller(), &LogParams::default())
        .await
        .map_err(|e| api_error(&format!("reading the log of Pod {ns}/{}", run.caller()), &e))?;
    let backend = verdict::caller_output(&logs)
        .map_err(|e| Failed::Step(format!("the caller could not reach the backend: {e}")))?;
    finish(client, &ingress_at, host, (&caller, run.caller()), backend).await
}

/// The caller's time out of `left`: 5 s less for its Pod to start and end, at least 1 s.
fn caller_seconds(left: Duration) -> u64 {
    left.as_secs().saturating_sub(5).max(1)
}

/// The host to call of an existing Ingress: `wanted` when it is one of its hosts, else its
/// first.
fn pick_host(ing: &Ingress, at: &NamespacedName, wanted: Option<&str>) -> Result<String, Failed> {
    let hosts = state::ingress_hosts(ing);
    match wanted {
        Some(h) if hosts.iter().any(|x| x == h) => Ok(h.to_string()),
        Some(h) => Err(Failed::Step(format!(
            "Ingress {at} has no rule for --host {h} (its hosts: {})",
            hosts.join(", ")
        ))),
        None => hosts.into_iter().next().ok_or_else(|| {
            Failed::Step(format!(
                "Ingress {at} has no rule with a host to call (wildcards cannot be called): \
                 pass one with --host"
            ))
        }),
    }
}

/// The addresses to compare with (the Ingress's load balancer, the nodes) and the verdict.
async fn finish(
    client: &Client,
    ingress_at: &NamespacedName,
    host: String,
    (caller, caller_pod): (&Pod, String),
    backend: Backend,
) -> Result<Found, Failed> {
    let ing = Api::<Ingress>::namespaced(client.clone(), &ingress_at.namespace)
        .get(&ingress_at.name)
        .await
        .map_err(|e| api_error(&format!("reading Ingress {ingress_at}"), &e))?;
    let load_balancer = state::load_balancer_ips(&ing);
    let (nodes, nodes_unknown) = match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => (state::node_ips(&list.items), None),
        Err(e) => (Vec::new(), Some(format!("listing nodes failed: {e}"))),
    };
    let caller_ips = state::pod_ips(caller);
    let seen = verdict::seen(&backend);
    let v = verdict::verdict(seen.map(|s| s.0), &caller_ips, &load_balancer, &nodes);
    Ok(Found {
        host,
        caller_pod: caller_pod.clone(),
        caller_ips,
        backend,
        seen,
        load_balancer,
        nodes,
        nodes_unknown,
        verdict: v,
    })
}

fn list(ips: &[IpAddr]) -> String {
    crate::probe::address_list(ips, "none")
}

impl Found {
    /// The text report: what each side saw, then the verdict.
    pub fn to_text(&self, ns: &str) -> String {
        let b = &self.backend;
        let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        let seen = match self.seen {
            Some((ip, from)) => format!("{ip} (from {from})"),
            None => "none".into(),
        };
        let nodes = match &self.nodes_unknown {
            Some(why) => format!("unknown: {why}"),
            None => list(&self.nodes),
        };
        let rows = [
            (
                "caller",
                format!("{} (Pod {ns}/{})", list(&self.caller_ips), self.caller_pod),
            ),
            ("backend peer", or_none(&b.remote_addr)),
            ("X-Real-IP", or_none(&b.x_real_ip)),
            ("X-Forwarded-For", or_none(&b.x_forwarded_for)),
            ("Forwarded", or_none(&b.forwarded)),
            ("PROXY header", or_none(&b.proxy_source)),
            ("client seen", seen),
            ("load balancer", list(&self.load_balancer)),
            ("nodes", nodes),
            (
                "verdict",
                format!("{}: {}", self.verdict.as_str(), self.verdict.explain()),
            ),
        ];
        let mut out = format!("client-ip http://{}/\n", self.host);
        for (k, v) in rows {
            out.push_str(&format!("  {k:<16}{v}\n"));
        }
        out
    }

    pub fn to_json(&self, ns: &str) -> serde_json::Value {
        let b = &self.backend;
        let ips = |v: &[IpAddr]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        json!({
            "host": self.host,
            "caller": {"pod": format!("{ns}/{}", self.caller_pod), "ips": ips(&self.caller_ips)},
            "backend": {
                "remote_addr": b.remote_addr,
                "x_real_ip": b.x_real_ip,
                "x_forwarded_for": b.x_forwarded_for,
                "forwarded": b.forwarded,
                "proxy_source": b.proxy_source,
            },
            "seen": self.seen.map(|(ip, from)| json!({"address": ip.to_string(), "from": from})),
            "load_balancer": ips(&self.load_balancer),
            "nodes": ips(&self.nodes),
            "nodes_unknown": self.nodes_unknown,
            "verdict": self.verdict.as_str(),
            "explanation": self.verdict.explain(),
            "exit_code": u8::from(self.verdict != Verdict::Intact),
        })
    }
}

/// A run id from the clock and the process id.
fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    objects::run_id(&format!(
        "{}.{} {}",
        now.as_secs(),
        now.subsec_nanos(),
        std::process::id()
    ))
}

/// `ouroboros doctor client-ip`.
pub async fn run(args: ClientIpArgs) -> anyhow::Result<ExitCode> {
    if let Some(host) = &args.call {
        let (line, ok) = call::call(host, args.timeout).await;
        println!("{line}");
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let result = async {
        let plan = args.plan(new_run_id())?;
        let cancel = crate::shutdown::on_signal()?;
        let client = crate::kube_client::client(
            args.kubeconfig.as_deref(),
            args.api_timeout,
            crate::kube_client::Calls::Requests,
        )
        .await?;
        let mut progress = |line: String| eprintln!("{line}");
        let outcome = run_plan(&client, &plan, &cancel, &mut progress).await;
        let leftover = |left: &[String]| {
            format!(
                "; left behind: {}; remove with: kubectl delete pods,services,ingresses -A -l {}",
                left.join("; "),
                plan.run.selector()
            )
        };
        match outcome.result {
            Ok(found) if outcome.left.is_empty() => Ok(found),
            Ok(_) => Err(anyhow::anyhow!("cleanup failed{}", leftover(&outcome.left))),
            Err(e) if outcome.left.is_empty() => {
                Err(anyhow::anyhow!("{e}; removed what it created"))
            }
            Err(e) => Err(anyhow::anyhow!("{e}{}", leftover(&outcome.left))),
        }
    }
    .await;
    let found = match (result, args.output) {
        (Ok(found), _) => found,
        (Err(e), Output::Json) => {
            let usage = e.downcast_ref::<UsageError>().is_some();
            let code = if usage { crate::flags::EXIT_USAGE } else { 1 };
            println!("{}", super::report::json_failure(&format!("{e:#}"), code));
            return Err(e);
        }
        (Err(e), Output::Text) => return Err(e),
    };
    match args.output {
        Output::Text => print!("{}", found.to_text(&args.namespace)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&found.to_json(&args.namespace)).unwrap_or_default()
        ),
    }
    Ok(ExitCode::from(u8::from(found.verdict != Verdict::Intact)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Plan, String> {
        let mut argv = vec!["client-ip"];
        argv.extend_from_slice(extra);
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: ClientIpArgs,
        }
        let p = <P as clap::Parser>::try_parse_from(argv).map_err(|e| e.kind().to_string())?;
        p.a.plan("0a1b2c3d".into()).map_err(|e| e.to_string())
    }

    #[test]
    fn flags_make_a_plan_or_a_usage_error() {
        let p = args(&["--host", "check.example.com", "--ingress-class", "nginx"]).unwrap();
        assert_eq!(p.host.as_deref(), Some("check.example.com"));
        assert_eq!(p.class.as_deref(), Some("nginx"));
        assert_eq!(p.run.namespace, "default");
        assert_eq!(p.run.image, DEFAULT_IMAGE);
        assert_eq!(p.timeout, Duration::from_secs(120));
        let p = args(&["--ingress", "apps/whoami"]).unwrap();
        assert_eq!(p.existing.unwrap().to_string(), "apps/whoami");
        for (bad, want) in [
            (vec![], "needs --host"),
            (vec!["--host", "Check.example.com"], "is not a host name"),
            (vec!["--host", "*.example.com"], "is not a host name"),
            (vec!["--host", "10.0.0.1"], "is not a host name"),
            (vec!["--host", "localhost"], "is not a host name"),
            (
                vec!["--host", "a.example.com", "--namespace", "Bad"],
                "is not a namespace",
            ),
            (
                vec!["--host", "a.example.com", "--ingress-class", "A_B"],
                "is not an IngressClass",
            ),
            (
                vec!["--host", "a.example.com", "--timeout", "500ms"],
                "whole seconds",
            ),
            (
                vec!["--host", "a.example.com", "--timeout", "1500ms"],
                "whole seconds",
            ),
            (
                vec!["--host", "a.example.com", "--image", " "],
                "--image must not",
            ),
            // clap refuses the pair.
            (
                vec!["--ingress", "a/b", "--ingress-class", "nginx"],
                "cannot be used",
            ),
        ] {
            let e = args(&bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_caller_ends_before_the_run() {
        for (left, want) in [(120, 115), (6, 1), (5, 1), (0, 1)] {
            assert_eq!(caller_seconds(Duration::from_secs(left)), want, "{left}");
        }
    }

    #[test]
    fn an_existing_ingress_host_is_picked() {
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "w"},
            "spec": {"rules": [{"host": "*.x.example.com"}, {"host": "a.example.com"}, {"host": "b.example.com"}]}
        }))
        .unwrap();
        let at = NamespacedName {
            namespace: "apps".into(),
            name: "w".into(),
        };
        assert_eq!(pick_host(&ing, &at, None).unwrap(), "a.example.com");
        assert_eq!(
            pick_host(&ing, &at, Some("b.example.com")).unwrap(),
            "b.example.com"
        );
        let e = pick_host(&ing, &at, Some("c.example.com"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "Ingress apps/w has no rule for --host c.example.com (its hosts: a.example.com, b.example.com)");
        let empty: Ingress = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
        assert!(pick_host(&empty, &at, None)
            .unwrap_err()
            .to_string()
            .contains("pass one with --host"));
    }
}
