//! `ouroboros doctor`: checks a live cluster for the ways client IPs get lost or the hairpin
//! path breaks, and prints one verdict per check (OK / WARN / FAIL / SKIP) with its evidence and
//! what to do. Exit 1 when any check fails.
//!
//! `checks` judges (pure, table-tested), `fetch` reads (thin, retried), `report` renders; this
//! module runs them in a fixed order so the API calls are always the same sequence.

pub mod checks;
pub mod client_ip;
pub mod fetch;
pub mod probe;
pub mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::Client;

use crate::controller::args::{ElectionArgs, Selection};
use crate::controller::hostnames::{
    self, args::HostnameArgs, kinds::places_of, kinds::Kind, kinds::Objects, kinds::Served,
    kinds::SourceObject,
};
use crate::controller::rbac::{self, Needs};
use crate::dns::answer::{Answer, ProxyAddrs};
use crate::dns::answer_form::{AnswerForm, Picked};
use crate::dns::mode::DnsArgs;
use crate::dns::write::proxy_ips::cluster_ips;
use crate::dns::write::routes::Routes;
use crate::dns::Mode;
use crate::flags::{NamespacedName, UsageError};
use crate::header_verdict::{AnswerPick, Header, HeaderSource, Route, Verdict};
use crate::target::{Target, TargetRule};
use checks::{ingress::ControllerKind, inputs::Got, proxy::Dial, proxy::Dials};
use report::{Check, Report};

/// Report format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Whether to open a TCP connection to the proxy Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DialMode {
    /// Only when running inside a cluster (KUBERNETES_SERVICE_HOST is set): ClusterIPs are
    /// not reachable from elsewhere.
    Auto,
    /// Also from outside the cluster (a host that routes to ClusterIPs).
    Always,
    /// Not at all (the check is skipped).
    Never,
}

pub const DEFAULT_CONTROLLER_SERVICE_ACCOUNT: &str = "ouroboros-controller";

// The shared flags describe the controller's view; two defaults differ here. Doctor writes
// nothing: --dry-run and --etc-hosts (the node's file a DaemonSet writes) are accepted, so the
// controller's flags can be passed as they are, but not offered in --help.
#[derive(Args, Clone, Debug)]
#[command(
    mut_arg("dry_run", |a| a.hide(true)),
    mut_arg("etc_hosts", |a| a.hide(true)),
    mut_arg("leader_elect", |a| a.help(
        "Whether the controller runs with leader election (decides the Lease permissions checked)"
    )),
    mut_arg("lease_namespace", |a| a.help(
        "The controller's Lease namespace [default: the ServiceAccount's namespace]"
    ))
)]
pub struct DoctorArgs {
    /// Report format: text or json.
    #[arg(long, env = "OUROBOROS_DOCTOR_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// The ingress controller's Service, NAMESPACE/NAME [default: auto-detect ingress-nginx and
    /// Traefik Services by their app.kubernetes.io/name label, LoadBalancer first].
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_INGRESS_CONTROLLER_SERVICE",
        value_name = "NS/NAME",
        value_parser = crate::flags::parse_service_name
    )]
    pub ingress_controller_service: Option<NamespacedName>,

    /// The controller's ServiceAccount whose permissions are checked, NAMESPACE/NAME [default:
    /// PROXY_SERVICE_NAMESPACE/ouroboros-controller].
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_CONTROLLER_SERVICE_ACCOUNT",
        value_name = "NS/NAME",
        value_parser = crate::flags::parse_namespaced_name
    )]
    pub controller_service_account: Option<NamespacedName>,

    /// Dial the proxy Service's ClusterIPs: auto (only inside a cluster), always or never.
    #[arg(long, env = "OUROBOROS_DOCTOR_DIAL", value_enum, default_value_t = DialMode::Auto)]
    pub dial: DialMode,

    /// Timeout of each dial.
    #[arg(
        long,
        env = "OUROBOROS_DOCTOR_DIAL_TIMEOUT",
        value_name = "DURATION",
        default_value = "3s",
        value_parser = crate::flags::parse_duration
    )]
    pub dial_timeout: Duration,

    /// As the controller's flag: leave out the names of a target whose ingress controller
    /// Service (`--ingress-controller-service`, a `--target`'s `ingress-controller=`) reports
    /// `ipMode: Proxy` on every load-balancer address, so the block is judged against what the
    /// controller writes.
    #[arg(
        long = "skip-proxy-ipmode",
        env = "OUROBOROS_CONTROLLER_SKIP_PROXY_IPMODE",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub skip_proxy_ipmode: bool,

    /// Run only the hairpin probe, for this one name, and print each step (DNS server asked,
    /// answer, expected answer, connection, reply, verdict); exit 1 when it fails. Run it in a
    /// pod: the cluster DNS and ClusterIPs are reached from there.
    #[arg(long, env = "OUROBOROS_DOCTOR_PROBE", value_name = "HOST")]
    pub probe: Option<String>,

    /// The probe's settings (with --probe).
    #[command(flatten)]
    pub probe_args: crate::probe::args::ProbeArgs,

    /// The controller's leader election flags.
    #[command(flatten)]
    pub election: ElectionArgs,

    /// The controller's DNS target: mode, CoreDNS, proxy and node-local-dns flags.
    #[command(flatten)]
    pub dns: DnsArgs,

    #[command(flatten)]
    pub hostnames: HostnameArgs,

    #[command(subcommand)]
    pub command: Option<DoctorCommand>,
}

/// Doctor's own subcommands (without one, doctor runs its checks).
#[derive(clap::Subcommand, Clone, Debug)]
pub enum DoctorCommand {
    /// Verify the client address end to end: a temporary whoami behind the ingress controller, called from a caller Pod through the public name; exit 0 when the backend saw the caller's address.
    ClientIp(client_ip::ClientIpArgs),
}

impl DoctorArgs {
    fn service_account(&self) -> NamespacedName {
        self.controller_service_account
            .clone()
            .unwrap_or_else(|| NamespacedName {
                namespace: self.dns.shared.proxy_service_namespace(),
                name: DEFAULT_CONTROLLER_SERVICE_ACCOUNT.into(),
            })
    }

    /// What the controller with these flags needs (for the RBAC check), its namespace being
    /// the ServiceAccount's.
    pub fn needs(&self) -> Needs {
        self.needs_given(self.default_controller_service())
    }

    /// [`Self::needs`] as if doctor had no --ingress-controller-service: what is left when the
    /// controller runs without it.
    pub fn needs_without_ingress_controller_service(&self) -> Needs {
        self.needs_given(None)
    }

    fn needs_given(&self, ingress_controller_service: Option<(String, String)>) -> Needs {
        // The controller with these flags watches --ingress-controller-service (ipMode), lists
        // it for direct answers and reads each `auto` target's configuration object: all of
        // that is checked, so the Service must be passed on as the controller gets it.
        let ipmode = crate::controller::args::IpModeArgs {
            ingress_controller_service,
            skip_proxy_ipmode: self.skip_proxy_ipmode,
        };
        Needs::for_controller(
            &self.dns,
            &self.hostnames,
            &self.election,
            &ipmode,
            &self.service_account().namespace,
        )
    }
}

impl DoctorArgs {
    /// --ingress-controller-service as the controller takes it.
    pub fn default_controller_service(&self) -> Option<(String, String)> {
        self.ingress_controller_service
            .as_ref()
            .map(|s| (s.namespace.clone(), s.name.clone()))
    }

    /// Every target's answer settings, as the controller with these flags keeps them.
    pub fn answer_rules(&self) -> Result<Vec<crate::target::AnswerRule>, UsageError> {
        self.hostnames
            .answer_rules(self.default_controller_service())
            .map_err(UsageError)
    }
}

/// The flag-derived inputs of the checks.
pub struct Validated {
    pub filters: hostnames::model::Filters,
    pub policy: crate::hostname::HostPolicy,
    pub fqdn: crate::dns::ProxyFqdn,
    pub cluster_domain: String,
}

impl DoctorArgs {
    /// Checks the flag combinations; errors are `UsageError`s (exit 64).
    pub fn validate(&self) -> Result<Validated, UsageError> {
        let s = Selection::of(&self.hostnames)?;
        crate::dns::mode::check(&self.dns)?; // combinations the controller refuses, e.g. --node-local-dns with rewrite
                                             // The answers the controller refuses (e.g. `direct` without an ingress controller
                                             // Service), refused here too: the permission check would otherwise miss their reads.
        self.answer_rules()?;
        Ok(Validated {
            fqdn: self
                .dns
                .shared
                .proxy_fqdn(&s.cluster_domain)
                .map_err(UsageError)?,
            filters: s.filters,
            policy: s.policy,
            cluster_domain: s.cluster_domain,
        })
    }
}

/// What the cluster serves of the source kinds this configuration reads that are CRDs: the
/// discovery documents of each of their places, read once for the hostnames (where each kind
/// is listed) and the `crds` check.
async fn served_sources(client: &Client, args: &HostnameArgs) -> Got<Served> {
    fetch::served(client, &places_of(&checks::crd::crd_kinds(args.opt_ins()))).await
}

/// The objects the hostnames come from: each kind this configuration reads, listed where the
/// cluster serves it (`served`: the first of its places served, as the controller reads it).
async fn sources(
    client: &Client,
    args: &HostnameArgs,
    ingress_class: bool,
    served: &Got<Served>,
) -> Got<Objects> {
    let read: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| k.is_read(args.opt_ins(), ingress_class))
        .collect();
    let served = served.clone()?.unwrap_or_default();
    let mut o = Objects::default();
    for kind in read {
        let place = kind
            .served_place(&served)
            .unwrap_or_else(|| kind.preferred());
        hostnames::kinds::by_kind!(kind, T => {
            *T::list_mut(&mut o) =
                fetch::list_source::<T>(client, place).await?.unwrap_or_default();
        });
    }
    Ok(Some(o))
}

/// TCP targets of a Service: each ClusterIP with each TCP port.
fn dial_targets(svc: &Service) -> Vec<SocketAddr> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let ips: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| u16::try_from(p.port).ok());
    let ports: Vec<u16> = ports.collect();
    ips.iter()
        .flat_map(|ip| ports.iter().map(move |p| SocketAddr::new(*ip, *p)))
        .collect()
}

async fn dial(targets: Vec<SocketAddr>, timeout: Duration) -> Vec<Dial> {
    let mut out = Vec::new();
    for addr in targets {
        let start = Instant::now();
        let result = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await
        {
            Ok(Ok(_)) => Ok(start.elapsed()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            )),
        };
        out.push(Dial { addr, result });
    }
    out
}

/// Runs every check against the cluster behind `client`, in a fixed order.
/// Flag errors are `UsageError`s.
pub async fn diagnose(client: &Client, args: &DoctorArgs) -> anyhow::Result<Report> {
    let mode = args.dns.shared.mode;
    let Validated {
        filters,
        policy,
        fqdn,
        cluster_domain,
    } = args.validate()?;
    let mut out: Vec<Check> = Vec::new();
    // The CoreDNS Deployment, read once: its image's version is what `--coredns-answer auto`
    // picks the form from, and what the coredns-version check judges.
    let deployment = match crate::dns::mode::coredns::reads_coredns_version(&args.dns) {
        true => Some(fetch::coredns_deployment(client, &args.dns.coredns.coredns_namespace).await),
        false => None,
    };
    let unread = Ok(None);
    let picked = checks::coredns_version::answer_pick(
        (
            args.dns.shared.coredns_answer,
            args.dns.shared.coredns_version,
        ),
        mode,
        &args.dns.coredns.coredns_namespace,
        deployment.as_ref().unwrap_or(&unread),
    );
    // From here on the flags say the form the controller writes, never `auto`.
    let mut resolved = args.clone();
    resolved.dns.shared.coredns_answer = picked.form;
    let args = &resolved;
    let d = &args.dns;

    // 1. The ingress controller: its Service, KEP-1860, PROXY protocol; then each target's
    // answer, picked as the controller picks it.
    let controllers = ingress_section(client, args, &filters, &mut out).await?;
    let picks = answers_section(client, args, &controllers, &cluster_domain, &mut out).await?;
    let rules = args.answer_rules()?;
    let skipped = crate::controller::answers::skipped(&picks.routes, &rules, &controllers.proxied);

    // 2. The hostnames the controller would hairpin.
    let needs = args.needs();
    let served = served_sources(client, &args.hostnames).await;
    let (check, desired) = hostnames_section(
        client,
        args,
        &needs,
        (&filters, &policy),
        (&skipped, &served),
    )
    .await;
    out.push(check);
    let hosts = desired.as_ref().map(|d| &d.hosts);

    // The proxy Service: its ClusterIPs are the template answers (checked in 5).
    let (p_ns, p_name) = (
        d.shared.proxy_service_namespace(),
        d.shared.proxy_service_name.clone(),
    );
    let proxy: Got<Service> = fetch::get(client, "services", &p_ns, &p_name).await;

    // With --target, each named target's names are answered by its own proxy, as the
    // controller writes them (default target first, then --target order).
    // Each --target's proxy Service, read once (its ClusterIPs answer for its names; checked
    // in 5).
    let proxies = &filters.targets;
    let target_services = d.shared.target_services(proxies);
    let mut target_svcs: Vec<Got<Service>> = Vec::new();
    for (ns, name) in &target_services {
        target_svcs.push(fetch::get(client, "services", ns, name).await);
    }
    let targets = Targets {
        proxies,
        services: &target_services,
        got: &target_svcs,
        routes: &picks.routes,
        directs: &picks.directs,
    };
    let under = |routes| {
        let targets = Targets { routes, ..targets };
        answers_under(
            d,
            (&fqdn, &proxy),
            desired.as_ref(),
            &targets,
            &cluster_domain,
        )
    };
    // What our block holds under doctor's picks and, when a probe target's pick is open, under
    // the controller's other possible pick.
    let answers = under(&picks.routes);
    let open = picks.open_as_direct();
    let other = open.as_ref().map(under);
    // 3. CoreDNS. The checks of our block need both the hostnames and the answers.
    let candidates: Vec<_> = match expected(hosts, &answers) {
        None => Vec::new(),
        Some(e) => std::iter::once(e)
            .chain(other.as_ref().and_then(|o| expected(hosts, o)))
            .collect(),
    };
    let (checks, known, block_in) =
        coredns_section(client, d, &candidates, (deployment, &picked)).await;
    out.extend(checks);

    // 4. node-local-dns.
    let nl = d.shared.node_local_dns.target();
    let got: Got<ConfigMap> = fetch::get(client, "configmaps", &nl.namespace, &nl.name).await;
    out.push(checks::node_local_dns::node_local_dns(
        mode,
        d.shared.node_local_dns.enabled,
        &nl,
        &got,
        known,
    ));

    // 5. The proxy: Service, ready endpoints, answers.
    let default = (p_ns.as_str(), p_name.as_str(), &proxy);
    out.extend(proxy_section(client, args, default, &filters.targets, &targets).await);
    out.extend(checks::proxy::orphaned_block(block_in.as_ref(), default));

    // 6. CRDs for the mode.
    out.push(crds_check(client, args, &served).await);
    // 7. The controller's ServiceAccount and its permissions.
    out.extend(permission_checks(client, args, &needs).await);

    Ok(Report::new(mode.name(), out))
}

/// Section 2: the hostnames the controller would hairpin, less the targets it leaves out
/// (`skipped`); the check and the hostnames when the sources could be read.
async fn hostnames_section(
    client: &Client,
    args: &DoctorArgs,
    needs: &Needs,
    (filters, policy): (&hostnames::model::Filters, &crate::hostname::HostPolicy),
    (skipped, served): (&BTreeSet<Target>, &Got<Served>),
) -> (Check, Option<hostnames::model::Desired>) {
    let owned = sources(client, &args.hostnames, needs.ingress_class_filter, served).await;
    match &owned {
        Err(e) => (e.check("hostnames"), None),
        Ok(o) => {
            let o = o.as_ref().expect("sources always returns Some");
            let mut desired = hostnames::desired(&o.sources(), filters, policy);
            let left_out: Vec<(String, usize)> = desired
                .by_target()
                .into_iter()
                .filter(|(t, _)| skipped.contains(t))
                .map(|(t, hosts)| (t.name(&filters.targets).to_string(), hosts.len()))
                .collect();
            desired.skip_targets(skipped);
            (
                checks::sources::hostnames(&desired, &left_out),
                Some(desired),
            )
        }
    }
}

/// The default target's answer and, with --target, every target's rules, as the controller
/// writes them under `targets.routes`; `None` where they cannot be known.
fn answers_under(
    d: &DnsArgs,
    (fqdn, proxy): (&crate::dns::ProxyFqdn, &Got<Service>),
    desired: Option<&hostnames::model::Desired>,
    targets: &Targets<'_>,
    cluster_domain: &str,
) -> (Option<Answer>, Option<crate::dns::answer::Rules>) {
    let answer = match targets.routes.get(Target::Default) {
        Route::Direct => targets.directs.get(&Target::Default).cloned(),
        _ => default_answer(d, fqdn, proxy),
    };
    if targets.proxies.is_empty() {
        return (answer, None);
    }
    // With --target, only every target's rules say what the block holds.
    match (desired, &answer) {
        (Some(desired), Some(default)) => {
            match target_rules(d, desired, default, targets, cluster_domain) {
                Some(rules) => (answer, Some(rules)),
                None => (None, None),
            }
        }
        _ => (None, None),
    }
}

/// What our block should hold for `hosts` with `answers` (from [`answers_under`]), when both
/// are known.
fn expected<'a>(
    hosts: Option<&'a BTreeSet<crate::hostname::Hostname>>,
    (answer, per_target): &'a (Option<Answer>, Option<crate::dns::answer::Rules>),
) -> Option<checks::coredns::Expected<'a>> {
    match (hosts?, answer, per_target) {
        (h, _, Some(rules)) => Some(checks::coredns::Expected::per_target(h, rules)),
        (h, Some(a), None) => Some(checks::coredns::Expected::one(h, a)),
        _ => None,
    }
}

/// The default target's answer as the controller writes it: the proxy's name in the rewrite
/// form, else --proxy-ip, else the proxy Service's ClusterIPs (`None` when unknown).
fn default_answer(
    d: &DnsArgs,
    fqdn: &crate::dns::ProxyFqdn,
    proxy: &Got<Service>,
) -> Option<Answer> {
    match d.shared.coredns_answer {
        AnswerForm::Rewrite => Some(Answer::Rewrite(fqdn.clone())),
        form if !d.shared.proxy_ips.is_empty() => {
            ProxyAddrs::new(&d.shared.proxy_ips).and_then(|a| form.with_addrs(a))
        }
        form => proxy
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|s| cluster_ips(s).ok())
            .and_then(|ips| ProxyAddrs::new(&ips))
            .and_then(|a| form.with_addrs(a)),
    }
}

/// Section 5: the proxies, the default one's and each --target's: Service, ready endpoints, and
/// (the default one's) whether its ClusterIPs answer.
async fn proxy_section(
    client: &Client,
    args: &DoctorArgs,
    (p_ns, p_name, proxy): (&str, &str, &Got<Service>),
    rules: &[TargetRule],
    targets: &Targets<'_>,
) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(checks::proxy::proxy_service(p_ns, p_name, proxy));
    let proxy_obj = proxy.as_ref().ok().and_then(Option::as_ref);
    if proxy_obj.is_some() {
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={p_name}"));
        let slices: Got<Vec<EndpointSlice>> =
            fetch::list(client, "endpointslices.discovery.k8s.io", Some(p_ns), &lp).await;
        out.push(checks::proxy::proxy_endpoints(p_ns, p_name, &slices));
    } else {
        out.push(Check::skip("proxy-endpoints", "no proxy Service"));
    }
    // Each --target's proxy: its Service and its ready endpoints, likewise.
    for ((t, (ns, name)), got) in rules.iter().zip(targets.services).zip(targets.got) {
        out.push(checks::proxy::proxy_service(ns, name, got).for_target(&t.name));
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
        let endpoints = match got {
            Ok(Some(_)) => {
                let slices: Got<Vec<EndpointSlice>> =
                    fetch::list(client, "endpointslices.discovery.k8s.io", Some(ns), &lp).await;
                checks::proxy::proxy_endpoints(ns, name, &slices)
            }
            _ => Check::skip("proxy-endpoints", "no proxy Service"),
        };
        out.push(endpoints.for_target(&t.name));
    }
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let dials = match (proxy_obj, args.dial) {
        (None, _) => Dials::Skipped("no proxy Service".into()),
        (_, DialMode::Never) => Dials::Skipped("--dial never".into()),
        (Some(_), DialMode::Auto) if !in_cluster => Dials::Skipped(
            "not running inside the cluster, where ClusterIPs are reachable (run doctor in a \
             pod, or pass --dial always when this host routes to ClusterIPs)"
                .into(),
        ),
        (Some(s), _) => Dials::Done(dial(dial_targets(s), args.dial_timeout).await),
    };
    out.push(checks::proxy::proxy_answers(&dials));
    out
}

/// The ingress controller Services the controller is named (read in section 1), by target, and
/// the targets whose Service reports ipMode Proxy on every address (with skipping on).
#[derive(Default)]
struct Controllers {
    services: BTreeMap<Target, Service>,
    proxied: BTreeSet<Target>,
}

/// Section 1: the ingress controllers' checks, the default one's and each --target's, pushed to
/// `out`; returns the Services read and which report ipMode Proxy (KEP-1860). Fails when the
/// API server cannot be reached at all.
async fn ingress_section(
    client: &Client,
    args: &DoctorArgs,
    filters: &hostnames::model::Filters,
    out: &mut Vec<Check>,
) -> anyhow::Result<Controllers> {
    let flag = args.ingress_controller_service.as_ref();
    let (first, unreachable, default_svc) =
        ingress_checks(client, flag, "--ingress-controller-service").await;
    // The first call tells whether the API server is reachable at all: a report of a dozen
    // identical transport failures would help nobody.
    if let Some(e) = unreachable {
        use crate::kube_client::Cause;
        let cause = if e.timed_out {
            Cause::Timeout
        } else {
            Cause::Unreachable
        };
        anyhow::bail!("{} ({e})", cause.hint(""));
    }
    out.extend(first);
    // The controller watches (and answers directly with) only the Services it is named, so an
    // auto-detected one does not count.
    let mut found = Controllers::default();
    let mut named_service = |target: Target, svc: Option<Service>| {
        if args.skip_proxy_ipmode && crate::controller::ipmode::proxied(svc.as_ref()) {
            found.proxied.insert(target);
        }
        if let Some(svc) = svc {
            found.services.insert(target, svc);
        }
    };
    if flag.is_some() {
        named_service(Target::Default, default_svc);
    }
    // Each --target's ingress controller (`ingress-controller=`), the same checks.
    let named = Target::all(filters.targets.len())
        .filter_map(|target| Some((target, target.rule(&filters.targets)?)));
    for (target, t) in named {
        if let Some((namespace, name)) = &t.ingress_controller {
            let ns_name = NamespacedName {
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let by = format!("ingress-controller= of --target {}", t.name);
            let (checks, _, svc) = ingress_checks(client, Some(&ns_name), &by).await;
            out.extend(checks.into_iter().map(|c| c.for_target(&t.name)));
            named_service(target, svc);
        }
    }
    Ok(found)
}

/// Each target's pick as doctor finds it.
struct Picks {
    routes: Routes,
    /// The answer the controller writes for the targets picked `direct`, and for the `open`
    /// ones, where it can be known.
    directs: BTreeMap<Target, Answer>,
    /// The `auto` targets of `ingress-controller-kind=probe` whose pick doctor could not find
    /// out (its own knocks got no verdict, so it says `relay`): the controller, knocking from
    /// its pod, may have picked `direct`.
    open: BTreeSet<Target>,
}

impl Picks {
    /// The picks with every `open` target `direct`; `None` when none is open.
    fn open_as_direct(&self) -> Option<Routes> {
        if self.open.is_empty() {
            return None;
        }
        let routes = Routes::default();
        for (target, (route, why)) in self.routes.snapshot() {
            let route = if self.open.contains(&target) {
                Route::Direct
            } else {
                route
            };
            routes.set(target, route, why);
        }
        Some(routes)
    }
}

/// Each target's `answer` check, pushed to `out`: its configuration object read (when named),
/// the verdict and the pick made by the controller's own functions. Returns the picks and, for
/// the targets picked `direct` (or open to it), the answer the controller writes for them (the
/// ingress controller Service's ClusterIPs, its `direct-ip=`, or its name in the rewrite form)
/// when it can be known.
async fn answers_section(
    client: &Client,
    args: &DoctorArgs,
    controllers: &Controllers,
    cluster_domain: &str,
    out: &mut Vec<Check>,
) -> Result<Picks, UsageError> {
    let names = &args.hostnames.targets;
    let routes = Routes::default();
    let mut directs = BTreeMap::new();
    let mut open = BTreeSet::new();
    for rule in args.answer_rules()? {
        let read = match &rule.config {
            Some(HeaderSource::Object(c)) => Some(Ok(fetch::get_config(client, c).await)),
            Some(HeaderSource::Probe) => Some(Err(knock_service(&rule, controllers).await)),
            None => None,
        };
        let found = read.as_ref().map(|r| match r {
            Ok(object) => checks::answer::Found::Object(object),
            Err(verdict) => checks::answer::Found::Knocked(verdict),
        });
        let ipmode = controllers.proxied.contains(&rule.target);
        let (check, route) = checks::answer::answer(&rule, found, ipmode);
        out.push(match rule.target {
            Target::Default => check,
            t => check.for_target(t.name(names)),
        });
        routes.set(rule.target, route, String::new());
        let unknown = matches!(&read, Some(Err(v)) if v.header == Header::Unknown);
        let is_open = unknown && rule.answer == AnswerPick::Auto && !ipmode;
        if route == Route::Direct || is_open {
            let svc = controllers.services.get(&rule.target);
            if let Some(a) = direct_answer(&args.dns, &rule, svc, cluster_domain) {
                directs.insert(rule.target, a);
                if is_open {
                    open.insert(rule.target);
                }
            }
        }
    }
    Ok(Picks {
        routes,
        directs,
        open,
    })
}

/// doctor's own knocks on a `probe` target's ingress controller Service, as read for the
/// `ingress-controller` checks (Unknown, saying so, when it was not read).
async fn knock_service(rule: &crate::target::AnswerRule, controllers: &Controllers) -> Verdict {
    let Some((ns, name)) = &rule.controller_service else {
        return Verdict {
            header: Header::Unknown,
            how: "no ingress controller Service named to knock on".into(),
        };
    };
    match controllers.services.get(&rule.target) {
        Some(svc) => {
            crate::probe::service_header_verdict(
                &format!("{ns}/{name}"),
                Some(svc),
                crate::probe::header::SERVICE_KNOCK_TIMEOUT,
            )
            .await
        }
        None => Verdict {
            header: Header::Unknown,
            how: format!("Service {ns}/{name} could not be read (see the ingress-controller checks): nothing knocked on"),
        },
    }
}

/// The answer the controller writes for a target picked `direct`: `direct-ip=` (else the
/// ingress controller Service's ClusterIPs) in the template and view forms, the Service's name
/// in the rewrite form; `None` when that cannot be known.
fn direct_answer(
    d: &DnsArgs,
    rule: &crate::target::AnswerRule,
    svc: Option<&Service>,
    cluster_domain: &str,
) -> Option<Answer> {
    match d.shared.coredns_answer {
        AnswerForm::Rewrite => {
            let (ns, name) = rule.controller_service.as_ref()?;
            crate::dns::ProxyFqdn::for_service(name, ns, cluster_domain)
                .ok()
                .map(Answer::Rewrite)
        }
        form if !rule.direct_ips.is_empty() => form.with_addrs(ProxyAddrs::new(&rule.direct_ips)?),
        form => form.with_addrs(ProxyAddrs::new(&cluster_ips(svc?).ok()?)?),
    }
}

/// Section 3: CoreDNS, the Corefile (our block, shadowing server blocks), the import ConfigMap,
/// reverts and the version. `candidates`: what our block should hold, when that can be known
/// (more than one when a target's pick is open: see [`checks::coredns::held`]). Returns the
/// checks, the candidate they judged by, and where our block is when the Corefile has one.
async fn coredns_section<'c, 'a>(
    client: &Client,
    d: &DnsArgs,
    candidates: &'c [checks::coredns::Expected<'a>],
    (deployment, picked): (Option<Got<checks::inputs::Workload>>, &Picked),
) -> (
    Vec<Check>,
    Option<&'c checks::coredns::Expected<'a>>,
    Option<crate::dns::ConfigMapKey>,
) {
    let mode = d.shared.mode;
    let mut out = Vec::new();
    let mut known = candidates.first();
    let mut block_in = None;
    if mode.spec().edits_coredns() {
        let target = d.coredns.target();
        let got: Got<ConfigMap> =
            fetch::get(client, "configmaps", &target.namespace, &target.name).await;
        let mut imports = None;
        let mut shadows = None;
        let mut rewritten = None;
        let mut corefile = None;
        match checks::coredns::corefile_text(mode, &target, &got) {
            Err(c) => out.push(c),
            Ok(text) => {
                corefile = Some(text.to_string());
                if checks::coredns::block_lines(text).is_some() {
                    block_in = Some(target.clone());
                }
                out.push(Check::ok("coredns-configmap", format!("{target} exists")));
                if mode == Mode::Coredns {
                    known = checks::coredns::held(mode, text, candidates);
                }
                let (cs, findings) = checks::coredns::corefile_checks(mode, text, known);
                imports = findings.as_ref().map(|f| f.imports_custom_override);
                (shadows, rewritten) = findings.map(|f| (f.shadowing, f.rewritten)).unzip();
                out.extend(cs);
            }
        }
        // The import ConfigMap: the snippet's in coredns-import mode, and in both modes the
        // `*.server` fragments k3s and AKS import beside the root block. Read once.
        let it = d.coredns_import.target();
        let mut import_cm: Option<Got<ConfigMap>> = None;
        if mode == Mode::CorednsImport {
            let got: Got<ConfigMap> =
                fetch::get(client, "configmaps", &it.namespace, &it.name).await;
            let snippet = got
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .and_then(|cm| cm.data.as_ref()?.get(&it.key));
            if let Some(text) = snippet {
                known = checks::coredns::held(mode, text, candidates);
            }
            out.push(match known {
                Some(want) => checks::coredns::import_snippet(&it, &got, want),
                None => Check::skip("coredns-import-snippet", checks::coredns::UNKNOWN),
            });
            import_cm = Some(got);
        } else {
            let lp = ListParams::default().fields(&format!(
                "involvedObject.kind=ConfigMap,involvedObject.name={},reason=BlockReverted",
                target.name
            ));
            let events: Got<Vec<Event>> =
                fetch::list(client, "events", Some(&target.namespace), &lp).await;
            out.push(checks::coredns::block_reverted(
                mode, &target, &events, imports,
            ));
        }
        // Nothing more is read when the checks would skip.
        let import_cm = match (import_cm, known) {
            (Some(got), _) => got,
            (None, Some(_)) => fetch::get(client, "configmaps", &it.namespace, &it.name).await,
            (None, None) => Ok(None),
        };
        out.push(checks::shadowing::coredns_shadowing(
            mode,
            shadows.as_deref(),
            &it,
            &import_cm,
            known,
        ));
        out.push(checks::shadowing::coredns_rewrites(
            mode,
            rewritten.as_deref(),
        ));
        // Read once: already for `auto`'s pick, else only when the checks would not skip.
        let deployment = match (deployment, known) {
            (Some(got), _) => got,
            (None, Some(_)) => {
                fetch::coredns_deployment(client, &d.coredns.coredns_namespace).await
            }
            (None, None) => Ok(None),
        };
        out.push(checks::coredns_version::coredns_version(
            mode,
            &d.coredns.coredns_namespace,
            &deployment,
            known,
            picked,
        ));
        out.push(checks::coredns_version::reload_memory(
            mode,
            corefile.as_deref(),
            known,
            &deployment,
        ));
    } else {
        out.extend(checks::coredns::skip_unless_coredns("coredns", mode));
    }
    (out, known, block_in)
}

/// Section 6: the CRDs the mode and the sources need; a source kind's found where the cluster
/// serves it (any of its places), from the discovery documents the controller reads.
async fn crds_check(client: &Client, args: &DoctorArgs, served: &Got<Served>) -> Check {
    let mut crds = Vec::new();
    let kinds = checks::crd::crd_kinds(args.hostnames.opt_ins());
    if !kinds.is_empty() {
        match served.clone() {
            Ok(served) => {
                let served = served.unwrap_or_default();
                for k in kinds {
                    let found = checks::crd::where_served(k, &served);
                    crds.push((k.resource(), false, Ok(found)));
                }
            }
            Err(e) => crds.push((kinds[0].resource(), false, Err(e))),
        }
    }
    if let Some(name) = args.dns.shared.mode.spec().crd(&args.dns) {
        let got = fetch::exists_cluster::<CustomResourceDefinition>(
            client,
            "customresourcedefinitions.apiextensions.k8s.io",
            name,
        )
        .await;
        crds.push((name, true, got.map(|o| o.map(|()| "installed".to_string()))));
    }
    checks::crd::crds(&crds)
}

/// Section 7: the controller's ServiceAccount, and whether it may do what the flags need.
async fn permission_checks(client: &Client, args: &DoctorArgs, needs: &Needs) -> Vec<Check> {
    let sa = args.service_account();
    let got: Got<ServiceAccount> =
        fetch::get(client, "serviceaccounts", &sa.namespace, &sa.name).await;
    let account = checks::permissions::service_account(&sa.namespace, &sa.name, &got);
    let rules = rbac::required(needs);
    // What doctor's own --ingress-controller-service adds to the rules (see `rbac`'s doc);
    // nothing when the other flags need that Service (a controller with them cannot run
    // without it, so lacking its rules is a FAIL).
    let optional =
        args.ingress_controller_service.is_some() && args.hostnames.answer_rules(None).is_ok();
    let without_flag = rbac::required(&args.needs_without_ingress_controller_service());
    let without: BTreeSet<String> = checks::permissions::questions(&without_flag)
        .iter()
        .map(|q| q.describe())
        .collect();
    let only_given: BTreeSet<String> = checks::permissions::questions(&rules)
        .iter()
        .map(|q| q.describe())
        .filter(|d| optional && !without.contains(d))
        .collect();
    let (user, groups) = fetch::service_account_subject(&sa.namespace, &sa.name);
    let mut answers = Vec::new();
    for q in checks::permissions::questions(&rules) {
        let a = fetch::may(client, &user, &groups, &q).await;
        let failed = a.is_err();
        answers.push((q, a));
        if failed {
            break; // one failure explains them all (usually doctor may not create reviews)
        }
    }
    vec![
        account,
        checks::permissions::rbac(&format!("ServiceAccount {sa}"), &answers, &only_given),
    ]
}

/// `ouroboros doctor`.
pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    if let Some(DoctorCommand::ClientIp(c)) = args.command {
        return client_ip::run(c).await;
    }
    if let Some(host) = &args.probe {
        args.validate()?;
        let resolv_conf = std::fs::read_to_string(crate::probe::args::RESOLV_CONF).ok();
        let settings = args.probe_args.settings(resolv_conf.as_deref())?;
        let client = crate::kube_client::client(
            args.dns.shared.kubeconfig.as_deref(),
            args.dns.shared.api_timeout,
            crate::kube_client::Calls::Requests,
        )
        .await?;
        return probe::run(&client, &args, host, &settings).await;
    }
    let report = async {
        args.validate()?; // bad flags exit 64 before any cluster access
        let client = crate::kube_client::client(
            args.dns.shared.kubeconfig.as_deref(),
            args.dns.shared.api_timeout,
            crate::kube_client::Calls::Requests,
        )
        .await?;
        diagnose(&client, &args).await
    }
    .await;
    let report = match (report, args.output) {
        (Ok(report), _) => report,
        // A script reading `--output json` gets JSON however doctor ends; the error is also
        // logged and sets the exit code (64 bad flags, 1 otherwise).
        (Err(e), Output::Json) => {
            let usage = e.downcast_ref::<UsageError>().is_some();
            let code = if usage { crate::flags::EXIT_USAGE } else { 1 };
            println!("{}", report::json_failure(&format!("{e:#}"), code));
            return Err(e);
        }
        (Err(e), Output::Text) => return Err(e),
    };
    let text = match args.output {
        Output::Text => report.to_text(),
        Output::Json => report.to_json(),
    };
    print!("{text}");
    Ok(ExitCode::from(report.exit_code()))
}

/// The ingress controller checks: its Service (`flag`, else auto-detected), KEP-1860 `ipMode`,
/// whether it expects the PROXY protocol; the API server's transport failure instead when it
/// could not be reached at all; and the Service itself when it was read. `given_by` is the flag
/// that names `flag` (for the summary and the action).
async fn ingress_checks(
    client: &Client,
    flag: Option<&NamespacedName>,
    given_by: &str,
) -> (
    Vec<Check>,
    Option<checks::inputs::ApiFailure>,
    Option<Service>,
) {
    let (svc, others): (Got<Service>, Vec<String>) = match flag {
        Some(t) => (
            fetch::get(client, "services", &t.namespace, &t.name).await,
            Vec::new(),
        ),
        None => {
            let lp = ListParams::default().labels(checks::ingress::AUTO_DETECT_SELECTOR);
            match fetch::list::<Service>(client, "services", None, &lp).await {
                Err(e) => (Err(e), Vec::new()),
                Ok(list) => {
                    let list = list.unwrap_or_default();
                    let (first, others) = checks::ingress::pick_ingress_service(&list);
                    (Ok(first.cloned()), others)
                }
            }
        }
    };
    // A transport failure (no status code): the API server is unreachable.
    if let Err(e) = &svc {
        if e.code.is_none() {
            return (Vec::new(), Some(e.clone()), None);
        }
    }
    let mut out = Vec::new();
    let svc_obj = svc.as_ref().ok().and_then(Option::as_ref);
    let workloads = match svc_obj.and_then(|s| s.metadata.namespace.as_deref()) {
        Some(ns) => fetch::workloads(client, ns).await,
        None => Ok(None),
    };
    let workload = match (&workloads, svc_obj) {
        (Ok(Some(ws)), Some(s)) => checks::ingress::matching_workload(s, ws),
        _ => None,
    };
    let kind = svc_obj
        .map(|s| checks::ingress::controller_kind(s, workload))
        .unwrap_or(ControllerKind::Unknown);
    let named = flag.map(|f| f.to_string());
    out.push(checks::ingress::ingress_service(
        named.as_deref().map(|f| (f, given_by)),
        &svc,
        &others,
        kind,
    ));
    out.push(checks::ingress::ip_mode(svc_obj));
    out.push(match (&workloads, kind) {
        (Err(e), ControllerKind::IngressNginx | ControllerKind::Traefik) => {
            e.check("proxy-protocol")
        }
        (_, ControllerKind::IngressNginx) => {
            let cm_ref = match (workload, svc_obj) {
                (Some(w), _) => checks::ingress::nginx_configmap(w),
                // No workload found: the chart's default, named like the Service.
                (None, Some(s)) => Some((
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default(),
                )),
                (None, None) => None,
            };
            match cm_ref {
                Some(r) => {
                    let got: Got<ConfigMap> = fetch::get(client, "configmaps", &r.0, &r.1).await;
                    checks::ingress::proxy_protocol(kind, workload, Some((&r, &got)))
                }
                None => checks::ingress::proxy_protocol(kind, workload, None),
            }
        }
        _ => checks::ingress::proxy_protocol(kind, workload, None),
    });
    let svc = svc_obj.cloned();
    (out, None, svc)
}

/// The named targets as doctor sees them: their proxies (flags), Services (namespace, name) and
/// what reading each Service gave.
struct Targets<'a> {
    proxies: &'a [TargetRule],
    services: &'a [(String, String)],
    got: &'a [Got<Service>],
    /// Each target's pick, as the `answer` checks made it.
    routes: &'a Routes,
    /// The direct answers of the targets picked `direct`, where they can be known.
    directs: &'a BTreeMap<Target, Answer>,
}

/// The rules the controller writes with --target: the default target's names with `default`,
/// each named target's with its proxy's answer (its `proxy-ip=`, else its Service's ClusterIPs;
/// in the rewrite form its Service's name). `None` when a target's answer cannot be known.
fn target_rules(
    d: &DnsArgs,
    desired: &hostnames::model::Desired,
    default: &Answer,
    targets: &Targets<'_>,
    cluster_domain: &str,
) -> Option<crate::dns::answer::Rules> {
    let mut by_target: Vec<_> = desired.by_target().into_iter().collect();
    // The order the controller writes them in: the default target's first.
    by_target.sort_by_key(|(t, _)| t.position());
    let mut rules = Vec::new();
    for (target, hosts) in by_target {
        let answer = match target {
            Target::Default => default.clone(),
            Target::Named(_) if targets.routes.get(target) == Route::Direct => {
                targets.directs.get(&target)?.clone()
            }
            Target::Named(i) => {
                let i = usize::from(i);
                let (ns, name) = &targets.services[i];
                match d.shared.coredns_answer {
                    AnswerForm::Rewrite => Answer::Rewrite(
                        crate::dns::ProxyFqdn::for_service(name, ns, cluster_domain).ok()?,
                    ),
                    form if !targets.proxies[i].proxy_ips.is_empty() => {
                        form.with_addrs(ProxyAddrs::new(&targets.proxies[i].proxy_ips)?)?
                    }
                    form => {
                        let svc = targets.got[i].as_ref().ok()?.as_ref()?;
                        form.with_addrs(ProxyAddrs::new(&cluster_ips(svc).ok()?)?)?
                    }
                }
            }
        };
        rules.push((hosts, answer));
    }
    Some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> DoctorArgs {
        let mut argv = vec!["--proxy-service-namespace", "ouroboros"];
        argv.extend_from_slice(extra);
        crate::flags::parse_args(&argv).unwrap()
    }

    #[test]
    fn needs_follow_the_flags() {
        let n = parse(&[]).needs();
        assert!(n.leader_elect);
        assert_eq!(n.namespace, "ouroboros");
        // The template answers are the proxy Service's ClusterIPs.
        assert_eq!(
            n.proxy_service,
            Some(("ouroboros".into(), "ouroboros-proxy".into()))
        );
        let n = parse(&["--proxy-ip", "10.0.0.1"]).needs();
        assert_eq!(n.proxy_service, None);
        let n = parse(&["--leader-elect=false", "--ingress-class", "nginx"]).needs();
        assert!(!n.leader_elect && n.ingress_class_filter);
        let n = parse(&[
            "--controller-service-account",
            "ctl/sa",
            "--mode",
            "external-dns",
            "--external-dns-proxy-service",
            "p2",
        ])
        .needs();
        assert_eq!(n.namespace, "ctl");
        // The objects are written in the ServiceAccount's namespace.
        assert_eq!(n.writes[0].namespace, "ctl");
        assert_eq!(n.proxy_service, Some(("ouroboros".into(), "p2".into())));
        let n = parse(&["--mode", "etc-hosts", "--proxy-ip", "10.0.0.1"]).needs();
        assert_eq!(n.proxy_service, None);
        // The Lease namespace flag wins over the ServiceAccount's.
        let n = parse(&[
            "--controller-service-account",
            "ctl/sa",
            "--lease-namespace",
            "l",
            "--mode",
            "external-dns",
        ])
        .needs();
        assert_eq!(
            (n.namespace.as_str(), n.writes[0].namespace.as_str()),
            ("l", "ctl")
        );
        assert!(parse(&["--gateway-class", "x"]).validate().is_err());
        // What the controller refuses, doctor refuses too (exit 64).
        let Err(e) = parse(&["--node-local-dns", "--coredns-answer", "rewrite"]).validate() else {
            panic!("--node-local-dns with rewrite validated");
        };
        // A `UsageError` by its type; the message names the refused pair.
        assert!(
            e.to_string()
                .contains("--node-local-dns needs --coredns-answer template"),
            "{e}"
        );
        assert!(parse(&["--node-local-dns"]).validate().is_ok());
    }

    #[test]
    fn needs_take_the_answer_reads() {
        // auto with a configuration object: that one object, and the ingress controller
        // Service (watched for ipMode, listed for a direct answer).
        let n = parse(&[
            "--ingress-controller-service",
            "ingress-nginx/ingress-nginx-controller",
            "--ingress-controller-kind",
            "ingress-nginx",
            "--ingress-controller-config",
            "ingress-nginx/nginx-config",
            "--target",
            "name=eg,service=p-eg,gateway-class=eg,ingress-controller=envoy-gateway-system/envoy,\
             ingress-controller-kind=envoy-gateway,ingress-controller-config=envoy-gateway-system/ctp",
        ])
        .needs();
        let configs: Vec<String> = n.controller_configs.iter().map(|c| c.describe()).collect();
        assert_eq!(
            configs,
            [
                "ConfigMap ingress-nginx/nginx-config",
                "ClientTrafficPolicy envoy-gateway-system/ctp"
            ]
        );
        assert_eq!(
            n.ingress_controller_services,
            [
                ("envoy-gateway-system".into(), "envoy".into()),
                ("ingress-nginx".into(), "ingress-nginx-controller".into())
            ]
        );
        // direct set by hand with the Service: listed by name even with ipMode skipping off.
        let n = parse(&[
            "--ingress-controller-service",
            "ingress-nginx/ingress-nginx-controller",
            "--answer",
            "direct",
            "--skip-proxy-ipmode=false",
        ])
        .needs();
        assert_eq!(
            n.ingress_controller_services,
            [("ingress-nginx".into(), "ingress-nginx-controller".into())]
        );
        assert!(
            n.controller_configs.is_empty(),
            "direct reads no configuration"
        );
        // What the controller refuses, doctor refuses: the reads could not be known.
        let Err(e) = parse(&["--answer", "direct"]).validate() else {
            panic!("--answer direct without a Service validated");
        };
        assert!(
            e.to_string().contains("--ingress-controller-service"),
            "{e}"
        );
    }

    #[test]
    fn dial_targets_are_cluster_ips_times_tcp_ports() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00::20"],
                     "ports": [{"port": 8080}, {"port": 8443, "protocol": "TCP"},
                               {"port": 53, "protocol": "UDP"}]}
        }))
        .unwrap();
        let got: Vec<String> = dial_targets(&svc).iter().map(|a| a.to_string()).collect();
        assert_eq!(
            got,
            [
                "10.96.0.20:8080",
                "10.96.0.20:8443",
                "[fd00::20]:8080",
                "[fd00::20]:8443"
            ]
        );
        let headless: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
        }))
        .unwrap();
        assert!(dial_targets(&headless).is_empty());
    }
}
