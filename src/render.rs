//! `ouroboros render`: what the controller would write, computed offline from manifest files by
//! the same pure code. The result goes to stdout, warnings to stderr; on any error nothing is
//! printed to stdout.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::controller::args::Selection;
use crate::controller::hostnames::{
    self, args::HostnameArgs, kinds::Kind, kinds::OptIn, kinds::ReadWhen,
};
use crate::dns::answer::{groups, Answer, ProxyAddrs, Rules};
use crate::dns::args::{AnswerForm, RecordArgs};
use crate::dns::etc_hosts::HostsGroup;
use crate::dns::mode::coredns_import::VIEW_NEEDS_COREFILE;
use crate::dns::write::plan::Plan;
use crate::dns::{self, external, ProxyFqdn};
use crate::dns::{MAX_CONFIGMAP_DATA, TOO_LARGE_WAYS_OUT};
use crate::flags::{parse_answer_ip, UsageError};
use crate::header_verdict::{choose, AnswerPick, Facts, Header, Route, Verdict};
use crate::hostname::{Hostname, LogName};
use crate::manifests::Manifests;
use crate::target::{self, AnswerRule, TargetRule};

/// `render --help`: the long description (the subcommand's doc comment in cli.rs is the short one).
pub const LONG_ABOUT: &str =
    "Print the DNS configuration the controller would write for the hostnames in \
        the given manifests, without a cluster.\n\n\
        MANIFEST is a YAML or JSON file (several documents allowed), a directory (read \
        recursively: *.yaml, *.yml, *.json, in sorted order, hidden entries skipped) or `-` for \
        stdin; `kind: List` is unwrapped and kinds without hostnames are ignored. With no \
        MANIFEST the host set is empty (so `render coredns` removes the ouroboros block). \
        Objects without a namespace count as in `default`.\n\n\
        The result goes to stdout, warnings (rejected hostnames, Corefile findings) to stderr. \
        If the Corefile or hosts file cannot be parsed, the error names the file and line, \
        nothing is printed to stdout and the exit code is 1 (64 for bad flags).";

#[derive(Args, Debug)]
pub struct RenderArgs {
    #[command(subcommand)]
    pub target: Target,
}

#[derive(Subcommand, Debug)]
pub enum Target {
    /// A Corefile with the ouroboros block spliced in: the A/AAAA template pair in its root
    /// server block (the same text suits node-local-dns's Corefile), or with `--coredns-answer
    /// view` server blocks before it.
    Coredns(Box<CorednsArgs>),
    /// The block alone, for a Corefile with `import /etc/coredns/custom/*.override`.
    CorednsImport(Box<CorednsImportArgs>),
    /// A hosts file with the ouroboros block of `IP host` lines.
    #[command(alias = "hosts")]
    EtcHosts(Box<EtcHostsArgs>),
    /// external-dns DNSEndpoint objects (multi-document YAML), one per hostname.
    ExternalDns(Box<ExternalDnsArgs>),
}

/// What every target takes: the filter/policy flags and the manifests.
#[derive(Args, Debug, Clone)]
pub struct Input {
    #[command(flatten)]
    pub hostnames: HostnameArgs,

    /// Manifest files, directories, or `-` for stdin.
    #[arg(value_name = "MANIFEST")]
    pub manifests: Vec<PathBuf>,
}

/// How `render coredns` and `render coredns-import` answer: the controller's flags.
#[derive(Args, Debug, Clone)]
pub struct AnswerArgs {
    /// `template` (A/AAAA answers with --proxy-ip, every other query type left public), `view`
    /// (the same answers from server blocks of their own, for thousands of names; coredns only,
    /// CoreDNS 1.10+) or `rewrite` (`rewrite name` lines to --proxy-fqdn; wildcards need
    /// CoreDNS 1.8.4+).
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_ANSWER", value_enum, default_value_t = AnswerForm::Template)]
    pub coredns_answer: AnswerForm,

    /// template: the proxy Service's ClusterIPs (repeatable, IPv4 and IPv6; comma-separated in
    /// the environment variable): `kubectl -n ouroboros get service ouroboros-proxy -o
    /// jsonpath='{.spec.clusterIPs}'`. Required unless the host set is empty.
    #[arg(
        long = "proxy-ip",
        env = "OUROBOROS_CONTROLLER_PROXY_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = parse_answer_ip
    )]
    pub proxy_ips: Vec<IpAddr>,

    /// rewrite: the proxy Service's fully qualified name, with the trailing dot.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_PROXY_FQDN",
        value_name = "FQDN",
        default_value = dns::DEFAULT_PROXY_FQDN,
        value_parser = ProxyFqdn::parse
    )]
    pub proxy_fqdn: ProxyFqdn,

    /// Print the result even when it is larger than the 1 MiB a ConfigMap's data may hold
    /// (which the API server refuses): a warning instead of an error (exit 1, nothing printed).
    #[arg(
        long,
        env = "OUROBOROS_RENDER_ALLOW_OVERSIZE",
        value_name = "BOOL",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub allow_oversize: bool,
}

impl AnswerArgs {
    /// Refuses (or with --allow-oversize, warns about) a `what` that no ConfigMap can hold.
    fn fits_configmap(&self, text: &str, what: &str) -> anyhow::Result<()> {
        let bytes = text.len();
        if bytes <= MAX_CONFIGMAP_DATA {
            return Ok(());
        }
        let message = format!(
            "the rendered {what} is {bytes} bytes, over the {MAX_CONFIGMAP_DATA} bytes a \
             ConfigMap's data may hold, so the API server would refuse it. Ways out: \
             {TOO_LARGE_WAYS_OUT}"
        );
        if self.allow_oversize {
            tracing::warn!(bytes, limit = MAX_CONFIGMAP_DATA, "{message}");
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{message}. Nothing was printed (--allow-oversize prints it anyway)"
        ))
    }

    /// The answer for a non-empty host set; a missing --proxy-ip is a usage error (exit 64).
    fn answer(&self, hosts: &BTreeSet<Hostname>) -> anyhow::Result<Answer> {
        match self.coredns_answer {
            AnswerForm::Rewrite => Ok(Answer::Rewrite(self.proxy_fqdn.clone())),
            form => match ProxyAddrs::new(&self.proxy_ips).and_then(|a| form.with_addrs(a)) {
                Some(a) => Ok(a),
                // Nothing is rendered for an empty set, so any answer will do.
                None if hosts.is_empty() => Ok(Answer::Rewrite(self.proxy_fqdn.clone())),
                None => Err(UsageError::err(
                    "--proxy-ip is required with --coredns-answer template (the default) or view: \
                     pass the proxy Service's ClusterIPs (kubectl -n ouroboros get service \
                     ouroboros-proxy -o jsonpath='{.spec.clusterIPs}'), or use \
                     --coredns-answer rewrite",
                )),
            },
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct ProxyIpArg {
    /// The proxy Service's IP address (repeatable, IPv4 and IPv6; comma-separated in the
    /// environment variable). Needed once there are hostnames for the default target: with no
    /// manifest (removing the block) there is nothing to answer.
    #[arg(
        long = "proxy-ip",
        env = "OUROBOROS_CONTROLLER_PROXY_IP",
        value_name = "IP",
        value_delimiter = ',',
        value_parser = parse_answer_ip
    )]
    pub proxy_ips: Vec<IpAddr>,
}

#[derive(Args, Debug, Clone)]
pub struct CorednsArgs {
    /// The Corefile to edit (e.g. `kubectl -n kube-system get configmap coredns -o
    /// jsonpath='{.data.Corefile}'`), or `-` for stdin.
    #[arg(long, env = "OUROBOROS_RENDER_COREFILE", value_name = "FILE")]
    pub corefile: PathBuf,
    #[command(flatten)]
    pub proxy: AnswerArgs,
    #[command(flatten)]
    pub input: Input,
}

#[derive(Args, Debug, Clone)]
pub struct CorednsImportArgs {
    #[command(flatten)]
    pub proxy: AnswerArgs,
    #[command(flatten)]
    pub input: Input,
}

#[derive(Args, Debug, Clone)]
pub struct EtcHostsArgs {
    /// The hosts file to edit, or `-` for stdin.
    #[arg(long, env = "OUROBOROS_RENDER_HOSTS_FILE", value_name = "FILE")]
    pub hosts_file: PathBuf,
    #[command(flatten)]
    pub proxy: ProxyIpArg,
    #[command(flatten)]
    pub input: Input,
}

#[derive(Args, Debug, Clone)]
pub struct ExternalDnsArgs {
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

    #[command(flatten)]
    pub input: Input,
}

/// Runs synchronously: nothing here needs a runtime.
pub fn run(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let output = match args.target {
        Target::Coredns(a) => {
            let (text, placed) = edited_and_hosts(&a.input, &a.corefile, "Corefile")?;
            let hosts = &placed.plan.hosts;
            let rules = placed.rules(&a.proxy)?;
            let edit = dns::corefile::splice_groups(&text, &groups(&rules)).map_err(|e| {
                anyhow::anyhow!("{}: {e} (nothing was printed)", a.corefile.display())
            })?;
            for t in edit.findings.taken() {
                tracing::warn!(
                    corefile = %a.corefile.display(),
                    hostname = %t.host,
                    by = %t.by,
                    line = t.line,
                    "{}",
                    t.note
                );
            }
            if !hosts.is_empty() && !edit.findings.has_reload {
                tracing::warn!(
                    corefile = %a.corefile.display(),
                    "the root server block has no `reload` plugin: CoreDNS reads its Corefile only at start, so restart CoreDNS after applying this (or add `reload`)"
                );
            }
            if edit.findings.view_as_pair {
                tracing::warn!(
                    corefile = %a.corefile.display(),
                    "this is node-local-dns's Corefile (no `kubernetes` plugin, a link-local `bind`): its node-cache has no `view` plugin and would not start with one, so the names are answered with the template pair in its root block instead of --coredns-answer view"
                );
            }
            if edit.findings.imports_custom_override {
                tracing::warn!(
                    corefile = %a.corefile.display(),
                    "the Corefile imports /etc/coredns/custom/*.override: consider `ouroboros render coredns-import` and put the snippet into the coredns-custom ConfigMap instead of editing the Corefile"
                );
            }
            a.proxy.fits_configmap(&edit.text, "Corefile")?;
            tracing::info!(
                hosts = hosts.len(),
                changed = edit.changed,
                bytes = edit.text.len(),
                "rendered the Corefile"
            );
            edit.text
        }
        Target::CorednsImport(a) => {
            if a.proxy.coredns_answer == AnswerForm::View {
                return Err(UsageError::err(VIEW_NEEDS_COREFILE));
            }
            let placed = desired_hosts(&a.input)?;
            let text = dns::coredns_import::render_groups(&groups(&placed.rules(&a.proxy)?));
            a.proxy.fits_configmap(&text, "import snippet")?;
            tracing::info!(
                hosts = placed.plan.hosts.len(),
                "rendered the CoreDNS import snippet"
            );
            text
        }
        Target::EtcHosts(a) => {
            let (text, placed) = edited_and_hosts(&a.input, &a.hosts_file, "hosts file")?;
            let hosts = &placed.plan.hosts;
            let with_ips = placed.with_ips(&a.proxy.proxy_ips)?;
            let groups: Vec<HostsGroup<'_>> = with_ips
                .iter()
                .map(|(hosts, ips)| HostsGroup { hosts, ips })
                .collect();
            let edit = dns::etc_hosts::splice_groups(&text, &groups).map_err(|e| {
                anyhow::anyhow!("{}: {e} (nothing was printed)", a.hosts_file.display())
            })?;
            for host in &edit.skipped_wildcards {
                tracing::warn!(
                    hostname = %host,
                    "skipping a wildcard: hosts files cannot express wildcards; use the coredns or external-dns mode for it"
                );
            }
            // The names as written: wildcards were skipped above.
            tracing::info!(
                hosts = hosts.len() - edit.skipped_wildcards.len(),
                changed = edit.changed,
                "rendered the hosts file"
            );
            edit.text
        }
        Target::ExternalDns(a) => {
            let options = |ips: &[IpAddr]| {
                external::Options::new(
                    &a.namespace,
                    &a.records.instance,
                    a.records.external_dns_record_ttl,
                    ips,
                    &a.records.external_dns_labels,
                    &a.records.external_dns_annotations,
                )
                .map_err(UsageError::err)
            };
            // Checked before reading the manifests, as without targets (the addresses once
            // there are names for them).
            if !a.proxy.proxy_ips.is_empty() {
                options(&a.proxy.proxy_ips)?;
            }
            let placed = desired_hosts(&a.input)?;
            let mut objects = Vec::new();
            let groups = placed.with_ips(&a.proxy.proxy_ips)?;
            for (hosts, ips) in groups.iter().filter(|(hosts, _)| !hosts.is_empty()) {
                objects.extend(external::endpoints(hosts, &options(ips)?));
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
            tracing::info!(objects = objects.len(), "rendered DNSEndpoint objects");
            text
        }
    };
    tracing::debug!(
        total_us = started.elapsed().as_micros() as u64,
        "timings: render before writing"
    );
    let mut out = std::io::stdout().lock();
    out.write_all(output.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// Refuses `-` (stdin) for more than one of the manifests and `other_inputs` (the Corefile or
/// hosts file the target reads).
fn one_stdin(input: &Input, other_inputs: &[&Path]) -> anyhow::Result<()> {
    let stdin_uses = input
        .manifests
        .iter()
        .map(PathBuf::as_path)
        .chain(other_inputs.iter().copied())
        .filter(|p| p.as_os_str() == "-")
        .count();
    if stdin_uses > 1 {
        return Err(UsageError::err(
            "`-` (stdin) can be given only once across MANIFEST and the --corefile/--hosts-file flags",
        ));
    }
    Ok(())
}

/// The file a target edits (the Corefile or hosts file, `what`) and the host set: the file is
/// read first, so one that cannot be read fails before any warning about the manifests' names.
fn edited_and_hosts(input: &Input, file: &Path, what: &str) -> anyhow::Result<(String, Placed)> {
    one_stdin(input, &[file])?;
    let text = read_input(file, what)?;
    Ok((text, select_hosts(input)?))
}

/// The host set of a target that edits no file.
fn desired_hosts(input: &Input) -> anyhow::Result<Placed> {
    one_stdin(input, &[])?;
    select_hosts(input)
}

/// Reads the manifests and computes the host set, logging every rejected name (stdin checked
/// by the caller).
fn select_hosts(input: &Input) -> anyhow::Result<Placed> {
    let Selection {
        filters,
        policy,
        cluster_domain,
    } = Selection::of(&input.hostnames)?;
    let started = Instant::now();
    let manifests = Manifests::read(&input.manifests)?;
    let read = started.elapsed();
    let desired = hostnames::desired(&manifests.sources(), &filters, &policy);
    if desired.hosts.is_empty() {
        // What the output is then used for removes what the controller wrote: say so.
        tracing::warn!(
            manifests = input.manifests.len(),
            files = manifests.files,
            "no hostname selected from the manifests: the output holds no ouroboros block (no \
             objects for external-dns), so applying it removes the hairpin for every name"
        );
    }
    tracing::debug!(
        read_us = read.as_micros() as u64,
        select_us = (started.elapsed() - read).as_micros() as u64,
        hosts = desired.hosts.len(),
        "timings: reading manifests, selecting hostnames"
    );
    for r in &desired.rejected {
        tracing::warn!(
            kind = %r.object.kind,
            namespace = %r.object.namespace,
            name = %r.object.name,
            hostname = %LogName(&r.raw),
            reason = %r.reason,
            "skipping a hostname: {}",
            r.reason.explain()
        );
    }
    for e in &desired.excluded {
        tracing::debug!(
            kind = %e.object.kind,
            namespace = %e.object.namespace,
            name = %e.object.name,
            why = %e.why,
            "object skipped"
        );
    }
    tracing::debug!(
        files = manifests.files,
        ingresses = manifests.ingresses.len(),
        gateways = manifests.gateways.len(),
        routes = Kind::ALL
            .into_iter()
            .filter(|k| k.is_route())
            .map(|k| manifests.count(k))
            .sum::<usize>(),
        // Traefik, Contour and Istio objects: the opt-in kinds outside the Gateway API.
        other_sources = Kind::ALL
            .into_iter()
            .filter(|k| k.is_crd() && k.read_when() != ReadWhen::OptIn(OptIn::GatewayApi))
            .map(|k| manifests.count(k))
            .sum::<usize>(),
        other_objects = manifests.skipped,
        cluster_domain = policy.cluster_domain(),
        "manifests read"
    );
    // Logged here rather than through the controller's line so that it names this module.
    for c in &desired.conflicts {
        tracing::warn!(
            hostname = %c.host,
            object = %c.loser,
            proxy_target = c.loser_target.name(&filters.targets),
            winner = %c.winner,
            winner_target = c.winner_target.name(&filters.targets),
            "hostname claimed by two targets in the manifests; the winner's target answers for it"
        );
    }
    let mut desired = desired;
    let plan = Plan {
        hosts: std::mem::take(&mut desired.hosts),
        placed: std::mem::take(&mut desired.placed),
    };
    // `render` is a one-shot process: freeing every parsed object and origin one by one costs
    // about as much as selecting them (tens of milliseconds at 10k objects), and the process
    // exits right after printing, so their memory is left to the OS.
    std::mem::forget(manifests);
    std::mem::forget(desired);
    let answers = routes(&input.hostnames, &plan, &filters.targets)?;
    Ok(Placed {
        plan,
        targets: filters.targets,
        answers,
        cluster_domain,
    })
}

/// Each target's answer settings and its route, in the writers' order. The picks set by hand
/// are rendered as they are; `auto` reads the cluster in the controller, which render cannot,
/// so it renders `relay` (what `auto` picks when nothing says otherwise) and says so on stderr
/// for each target with names whose pick depends on the cluster.
fn routes(
    hostnames: &HostnameArgs,
    plan: &Plan,
    targets: &[TargetRule],
) -> anyhow::Result<Vec<(AnswerRule, Route)>> {
    let rules = hostnames.answer_settings(None).map_err(UsageError::err)?;
    let names = plan.groups(rules.len())?;
    let not_read = Verdict {
        header: Header::Unknown,
        how: "render reads no cluster".into(),
    };
    let facts = Facts {
        verdict: &not_read,
        ipmode_proxy: false,
    };
    let mut out = Vec::new();
    for (rule, hosts) in rules.into_iter().zip(names) {
        let (route, _) = choose(rule.answer, &facts);
        let name = rule.target.name(targets);
        let mut reads = Vec::new();
        if let Some(c) = &rule.config {
            reads.push(format!("whether {} takes the PROXY header", c.describe()));
        }
        if let (Some((ns, svc)), target::Target::Named(_)) = (&rule.controller_service, rule.target)
        {
            reads.push(format!("the ipMode of Service {ns}/{svc}"));
        }
        if rule.answer == AnswerPick::Auto && !reads.is_empty() && !hosts.is_empty() {
            tracing::warn!(
                proxy_target = name,
                answer = route.as_str(),
                hostnames = hosts.len(),
                "target {name}: answer=auto depends on {}, which render cannot read: rendered \
                 relay (through the proxy); set answer=relay, direct or skip to render another \
                 pick",
                reads.join(" and ")
            );
        }
        if route == Route::Skip && !hosts.is_empty() {
            tracing::info!(
                proxy_target = name,
                hostnames = hosts.len(),
                "target {name}: answer=skip: its names are left out"
            );
        }
        out.push((rule, route));
    }
    Ok(out)
}

/// One target's names and its proxy's addresses.
type NamesOn<'a> = (Cow<'a, BTreeSet<Hostname>>, &'a [IpAddr]);
/// A target's rule (`None`: the default target), its names, and its answer settings and route.
type TargetNames<'a> = (
    Option<&'a TargetRule>,
    Cow<'a, BTreeSet<Hostname>>,
    (&'a AnswerRule, Route),
);

/// The names to render, which proxy target each goes to, and the targets.
struct Placed {
    plan: Plan,
    targets: Vec<TargetRule>,
    /// Each target's answer settings and route (the default target's first).
    answers: Vec<(AnswerRule, Route)>,
    cluster_domain: String,
}

impl Placed {
    /// Each target's names: the default target's always, a named target's only when it has
    /// any (with its rule); the names of a target answered `skip` are left out.
    fn groups(&self) -> anyhow::Result<Vec<TargetNames<'_>>> {
        let groups = self.plan.groups(1 + self.targets.len())?;
        Ok(self
            .answers
            .iter()
            .zip(groups)
            .map(|((a, route), hosts)| {
                let hosts = match route {
                    Route::Skip => Cow::Owned(BTreeSet::new()),
                    Route::Relay | Route::Direct => hosts,
                };
                (a.target.rule(&self.targets), hosts, (a, *route))
            })
            .filter(|(t, hosts, _)| t.is_none() || !hosts.is_empty())
            .collect())
    }

    /// Each target's names with its addresses: its proxy's (`--proxy-ip` for the default
    /// target, `proxy-ip=` for a named one) or, answered `direct`, its ingress controller's
    /// (`--direct-ip`, `direct-ip=`); targets without names left out.
    fn with_ips<'a>(&'a self, default: &'a [IpAddr]) -> anyhow::Result<Vec<NamesOn<'a>>> {
        self.groups()?
            .into_iter()
            .map(|(t, hosts, (a, route))| {
                let ips = match t {
                    _ if route == Route::Direct => direct_ips(a, t, hosts.len())?,
                    None if default.is_empty() && !hosts.is_empty() => {
                        return Err(UsageError::err(format!(
                            "--proxy-ip is required for {} hostname(s): pass the proxy \
                             Service's ClusterIPs (kubectl -n ouroboros get service \
                             ouroboros-proxy -o jsonpath='{{.spec.clusterIPs}}')",
                            hosts.len()
                        )))
                    }
                    None => default,
                    Some(t) => proxy_ips(t, hosts.len())?,
                };
                Ok((hosts, ips))
            })
            .collect()
    }

    /// The CoreDNS rules: the default target's answer from the flags, a named target's from its
    /// `proxy-ip=` (template) or its Service's name (rewrite).
    fn rules(&self, proxy: &AnswerArgs) -> anyhow::Result<Rules> {
        let mut rules = Rules::new();
        for (t, hosts, (a, route)) in self.groups()? {
            let answer = match t {
                _ if route == Route::Direct => self.direct_answer(proxy, a, t, hosts.len())?,
                None => proxy.answer(&hosts)?,
                Some(t) => match proxy.coredns_answer {
                    form @ (AnswerForm::Template | AnswerForm::View) => {
                        ProxyAddrs::new(proxy_ips(t, hosts.len())?)
                            .and_then(|a| form.with_addrs(a))
                            .ok_or_else(|| no_proxy_ip(t, hosts.len()))?
                    }
                    AnswerForm::Rewrite => {
                        let (Some(ns), name) = &t.service else {
                            return Err(UsageError::err(format!(
                                "--target {}: render needs service=NAMESPACE/NAME for the \
                                 rewrite target",
                                t.name
                            )));
                        };
                        Answer::Rewrite(
                            ProxyFqdn::for_service(name, ns, &self.cluster_domain)
                                .map_err(UsageError::err)?,
                        )
                    }
                },
            };
            rules.push((hosts.into_owned(), answer));
        }
        Ok(rules)
    }
}

impl Placed {
    /// The CoreDNS answer of a target answered `direct`: its `direct-ip=` (`--direct-ip`), or in
    /// the rewrite form its ingress controller Service's name (`ingress-controller=`).
    fn direct_answer(
        &self,
        proxy: &AnswerArgs,
        a: &AnswerRule,
        t: Option<&TargetRule>,
        names: usize,
    ) -> anyhow::Result<Answer> {
        match proxy.coredns_answer {
            form @ (AnswerForm::Template | AnswerForm::View) => {
                let ips = direct_ips(a, t, names)?;
                Ok(ProxyAddrs::new(ips)
                    .and_then(|addrs| form.with_addrs(addrs))
                    .ok_or_else(|| no_direct_ip(t, names))?)
            }
            AnswerForm::Rewrite => {
                let (Some(t), Some((ns, name))) = (t, &a.controller_service) else {
                    return Err(UsageError::err(
                        "--answer direct with --coredns-answer rewrite: render cannot name the \
                         default target's ingress controller Service; render it with \
                         --coredns-answer template and --direct-ip",
                    ));
                };
                let fqdn = ProxyFqdn::for_service(name, ns, &self.cluster_domain).map_err(|e| {
                    UsageError::new(format!("--target {}: ingress-controller=: {e}", t.name))
                })?;
                Ok(Answer::Rewrite(fqdn))
            }
        }
    }
}

/// The direct answer's addresses (`--direct-ip` for the default target, `direct-ip=` for a
/// named one), which render needs in place of reading the ingress controller Service.
fn direct_ips<'a>(
    a: &'a AnswerRule,
    t: Option<&TargetRule>,
    names: usize,
) -> anyhow::Result<&'a [IpAddr]> {
    if a.direct_ips.is_empty() && names > 0 {
        return Err(no_direct_ip(t, names));
    }
    Ok(&a.direct_ips)
}

fn no_direct_ip(t: Option<&TargetRule>, names: usize) -> anyhow::Error {
    UsageError::err(match t {
        None => format!(
            "--answer direct: {names} hostname(s) are answered with the ingress controller \
             Service's ClusterIPs, which render cannot read: pass them as --direct-ip IP"
        ),
        Some(t) => format!(
            "--target {}: answer=direct: {names} hostname(s) are answered with the ingress \
             controller Service's ClusterIPs, which render cannot read: pass them as \
             direct-ip=IP",
            t.name
        ),
    })
}

/// A named target's `proxy-ip=` addresses, which render needs in place of reading its Service.
fn proxy_ips(t: &TargetRule, names: usize) -> anyhow::Result<&[IpAddr]> {
    if t.proxy_ips.is_empty() {
        return Err(no_proxy_ip(t, names));
    }
    Ok(&t.proxy_ips)
}

fn no_proxy_ip(t: &TargetRule, names: usize) -> anyhow::Error {
    UsageError::err(format!(
        "--target {} has {names} hostname(s) but no proxy-ip=: render cannot read its Service, \
         so give its ClusterIPs as proxy-ip=IP",
        t.name
    ))
}

fn read_input(path: &Path, what: &str) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .with_context(|| format!("reading the {what} from stdin"))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the {what}", path.display()))
}
