//! `ouroboros render`: what the controller would write, computed offline from manifest files by
//! the same pure code. The result goes to stdout, warnings to stderr; on any error nothing is
//! printed to stdout. Its subcommands are the mode table's (`dns::mode::for_each_mode!`): each
//! mode's `Render` (its flags, what it reads, which pure renderer it calls), with the manifests
//! and hostname flags every mode takes (`Input`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::controller::args::Selection;
use crate::controller::hostnames::{
    self, args::HostnameArgs, kinds::Kind, kinds::OptIn, kinds::ReadWhen,
};
use crate::dns::mode::render::{Placed, RenderMode};
use crate::dns::write::plan::Plan;
use crate::flags::UsageError;
use crate::header_verdict::{choose, AnswerPick, Facts, Header, Route, Verdict};
use crate::hostname::LogName;
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

/// `Target`, one subcommand per row of the mode table, named as the `--mode` value, and its
/// dispatch.
macro_rules! render_targets {
    ($($module:ident, $variant:ident, $value:tt, $help:tt;)*) => {
        #[derive(Subcommand, Debug)]
        pub enum Target {
            $(
                #[command(
                    name = $value,
                    about = <crate::dns::mode::$module::Render as RenderMode>::ABOUT,
                    long_about = None
                )]
                $variant(Box<Rendered<crate::dns::mode::$module::Render>>),
            )*
        }

        impl Target {
            fn render(&self) -> anyhow::Result<String> {
                match self {
                    $(Target::$variant(a) => a.render(),)*
                }
            }
        }
    };
}

crate::dns::mode::for_each_mode!(render_targets);

// What every subcommand takes, after its mode's own flags: the filter/policy flags and the
// manifests. (A line comment: a doc comment here would become every subcommand's help.)
#[derive(Args, Debug, Clone)]
pub struct Input {
    #[command(flatten)]
    pub hostnames: HostnameArgs,

    /// Print each hairpinned name with its proxy target and answer (`relay`, `direct` or
    /// `skip`), one per line, tab-separated, instead of the configuration; the file the mode
    /// edits is not read.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(), default_missing_value = "true",
        action = clap::ArgAction::Set)]
    pub list: bool,

    /// Manifest files, directories, or `-` for stdin.
    #[arg(value_name = "MANIFEST")]
    pub manifests: Vec<PathBuf>,
}

// A mode's subcommand: its own flags, then `Input`. (No doc comment, as for `Input`.)
#[derive(Args, Debug, Clone)]
pub struct Rendered<R: RenderMode> {
    #[command(flatten)]
    pub mode: R,

    #[command(flatten)]
    pub input: Input,
}

impl<R: RenderMode> Rendered<R> {
    /// Every mode the same way: its check, the file it edits, the manifests, its renderer.
    fn render(&self) -> anyhow::Result<String> {
        self.mode.check()?;
        let edits = self.mode.edits();
        if self.input.list {
            one_stdin(&self.input, None)?;
            return Ok(list(&select_hosts(&self.input)?));
        }
        one_stdin(&self.input, edits.as_ref().map(|(file, _)| *file))?;
        let edited = match edits {
            Some((file, what)) => read_input(file, what)?,
            None => String::new(),
        };
        let placed = select_hosts(&self.input)?;
        self.mode.render(&edited, &placed)
    }
}

/// Runs synchronously: nothing here needs a runtime.
pub fn run(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let output = args.target.render()?;
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

/// Refuses `-` (stdin) for more than one of the manifests and `edited` (the Corefile or hosts
/// file the mode reads).
fn one_stdin(input: &Input, edited: Option<&Path>) -> anyhow::Result<()> {
    let stdin_uses = input
        .manifests
        .iter()
        .map(PathBuf::as_path)
        .chain(edited)
        .filter(|p| p.as_os_str() == "-")
        .count();
    if stdin_uses > 1 {
        return Err(UsageError::err(
            "`-` (stdin) can be given only once across MANIFEST and the --corefile/--hosts-file flags",
        ));
    }
    Ok(())
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
    for note in notes(&manifests, &filters, &desired) {
        note.log();
    }
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

/// `--list`: each name, its target and its answer, tab-separated, sorted by name.
fn list(placed: &Placed) -> String {
    let mut out = String::new();
    for h in &placed.plan.hosts {
        let target = placed
            .plan
            .placed
            .get(h)
            .copied()
            .unwrap_or(target::Target::Default);
        let route = placed
            .answers
            .iter()
            .find(|(rule, _)| rule.target == target)
            .map_or("relay", |(_, route)| route.as_str());
        out.push_str(&format!("{h}\t{}\t{route}\n", target.name(&placed.targets)));
    }
    out
}

/// What render says on stderr about what it read: how many objects of each kind, how many gave
/// a hostname, and for those left out by a flag's default, the flag that reads them.
#[derive(Debug, PartialEq, Eq)]
enum Note {
    /// Objects of a source kind read, and those that gave at least one hostname.
    Read {
        kind: Kind,
        read: usize,
        used: usize,
    },
    /// Objects of the opt-in kinds of one flag, read from the manifests but not used without
    /// it: how many of each kind.
    NotOptedIn {
        flag: &'static str,
        kinds: Vec<(Kind, usize)>,
    },
    /// Hosts only in the `spec.rules` of Ingresses (not in their `spec.tls`), which
    /// `--ingress-hosts tls` does not read: how many, and the Ingresses (`namespace/name`).
    RuleHosts {
        hosts: usize,
        ingresses: Vec<String>,
    },
    /// `Desired::unfiltered_classes`: several Ingress classes, all to the default proxy.
    Classes { classes: Vec<String> },
    /// Objects left out whole by a filter (`Exclusion`), by reason.
    Excluded { why: String, objects: usize },
}

impl Note {
    fn log(&self) {
        match self {
            Note::Read { kind, read, used } => tracing::info!(
                kind = %kind,
                read,
                used,
                "read {read} {kind}: {used} gave hostnames"
            ),
            Note::NotOptedIn { flag, kinds } => {
                let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
                let list = list.join(", ");
                tracing::info!(
                    objects = list,
                    flag,
                    "read {list} but used none: add {flag} to hairpin their hostnames"
                );
            }
            Note::RuleHosts { hosts, ingresses } => tracing::info!(
                hosts,
                ingresses = ingresses.join(","),
                flag = "--ingress-hosts all",
                "{hosts} hosts only in the spec.rules of {} Ingress, which --ingress-hosts tls \
                 (the default) does not read: add --ingress-hosts all to hairpin them \
                 (plain-HTTP names, such as cert-manager's HTTP-01 solver's)",
                ingresses.len()
            ),
            Note::Classes { classes } => tracing::info!(
                classes = classes.join(","),
                "{}",
                hostnames::model::unfiltered_classes_message(classes)
            ),
            Note::Excluded { why, objects } => {
                tracing::info!(objects, why, "{objects} objects left out: {why}")
            }
        }
    }
}

/// The notes, pure: from the objects read, the filters and the selection's result.
fn notes(
    objects: &hostnames::kinds::Objects,
    filters: &hostnames::model::Filters,
    desired: &hostnames::model::Desired,
) -> Vec<Note> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut used: BTreeMap<Kind, BTreeSet<&hostnames::model::ObjectRef>> = BTreeMap::new();
    for o in desired.origins.values().flatten() {
        used.entry(o.kind).or_default().insert(o);
    }
    let mut out = Vec::new();
    let mut not_opted_in: BTreeMap<OptIn, Vec<(Kind, usize)>> = BTreeMap::new();
    for kind in Kind::ALL {
        let read = objects.count(kind);
        if read == 0 {
            continue;
        }
        match kind.read_when() {
            // IngressClasses name no host: read to place Ingresses, not counted.
            ReadWhen::IngressClassFilter => {}
            ReadWhen::OptIn(o) if !filters.opt_ins.has(o) => {
                not_opted_in.entry(o).or_default().push((kind, read));
            }
            _ => out.push(Note::Read {
                kind,
                read,
                used: used.get(&kind).map_or(0, BTreeSet::len),
            }),
        }
    }
    out.extend(not_opted_in.into_iter().map(|(o, kinds)| Note::NotOptedIn {
        flag: o.flag(),
        kinds,
    }));
    if filters.ingress_hosts == hostnames::model::IngressHosts::Tls {
        let excluded: BTreeSet<_> = desired.excluded.iter().map(|e| &e.object).collect();
        let (mut hosts, mut ingresses) = (0, Vec::new());
        for i in &objects.ingresses {
            let Some(spec) = &i.spec else { continue };
            let name = hostnames::model::ObjectRef::new(Kind::Ingress, &i.metadata);
            if excluded.contains(&name) {
                continue;
            }
            let tls: BTreeSet<&str> = (spec.tls.iter().flatten())
                .flat_map(|t| t.hosts.iter().flatten().map(String::as_str))
                .collect();
            let rules: BTreeSet<&str> = (spec.rules.iter().flatten())
                .filter_map(|r| r.host.as_deref())
                .filter(|h| !tls.contains(h))
                .collect();
            if !rules.is_empty() {
                hosts += rules.len();
                ingresses.push(format!("{}/{}", name.namespace, name.name));
            }
        }
        if hosts > 0 {
            out.push(Note::RuleHosts { hosts, ingresses });
        }
    }
    if !desired.unfiltered_classes.is_empty() {
        out.push(Note::Classes {
            classes: desired.unfiltered_classes.clone(),
        });
    }
    let mut excluded: BTreeMap<String, usize> = BTreeMap::new();
    for e in &desired.excluded {
        *excluded.entry(e.why.to_string()).or_default() += 1;
    }
    out.extend(
        excluded
            .into_iter()
            .map(|(why, objects)| Note::Excluded { why, objects }),
    );
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::Mode;
    use clap::{CommandFactory, Parser, ValueEnum};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        render: RenderArgs,
    }

    /// What render says it read and used, from manifests: per kind, the opt-in kinds with the
    /// flag that reads them, rule hosts `--ingress-hosts tls` leaves out, filtered objects.
    #[test]
    fn notes_say_what_was_read_and_what_would_use_the_rest() {
        use crate::controller::hostnames::model::{Filters, IngressHosts};
        use crate::hostname::HostPolicy;
        use crate::manifests::documents::Format;
        const INGRESS: &str = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: a, namespace: n}\n\
            spec:\n  tls: [{hosts: [a.example.com]}]\n  rules: [{host: a.example.com}, {host: plain.example.com}]\n";
        const SOLVER: &str =
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: s, namespace: n}\n\
            spec:\n  rules: [{host: acme.example.com}]\n";
        const OTHER: &str =
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: t, namespace: n}\n\
            spec:\n  ingressClassName: traefik\n  tls: [{hosts: [t.example.com]}]\n";
        const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\n\
            spec:\n  gatewayClassName: eg\n  listeners: [{name: h, port: 443, protocol: HTTPS, hostname: g.example.com}]\n";
        let all = Filters {
            ingress_hosts: IngressHosts::All,
            ..Filters::default()
        };
        let gateway_api = Filters {
            opt_ins: hostnames::kinds::OptIns::GATEWAY_API,
            ..Filters::default()
        };
        let nginx = Filters {
            ingress_class: Some("nginx".into()),
            ..Filters::default()
        };
        let read = |kind, read, used| Note::Read { kind, read, used };
        for (docs, filters, want) in [
            (
                vec![INGRESS, SOLVER, GATEWAY],
                Filters::default(),
                vec![
                    read(Kind::Ingress, 2, 1),
                    Note::NotOptedIn {
                        flag: "--gateway-api",
                        kinds: vec![(Kind::Gateway, 1)],
                    },
                    Note::RuleHosts {
                        hosts: 2,
                        ingresses: vec!["n/a".into(), "n/s".into()],
                    },
                ],
            ),
            (vec![INGRESS, SOLVER], all, vec![read(Kind::Ingress, 2, 2)]),
            (
                vec![INGRESS, OTHER],
                Filters::default(),
                vec![
                    read(Kind::Ingress, 2, 2),
                    Note::RuleHosts {
                        hosts: 1,
                        ingresses: vec!["n/a".into()],
                    },
                    Note::Classes {
                        classes: vec!["(none)".into(), "traefik".into()],
                    },
                ],
            ),
            (vec![GATEWAY], gateway_api, vec![read(Kind::Gateway, 1, 1)]),
            (
                vec![INGRESS],
                nginx,
                vec![
                    read(Kind::Ingress, 1, 0),
                    Note::Excluded {
                        why:
                            "no ingress class (and no single default IngressClass) under the filter"
                                .into(),
                        objects: 1,
                    },
                ],
            ),
        ] {
            let mut m = Manifests::default();
            for d in &docs {
                m.add_text(d, Format::Yaml).unwrap();
            }
            let policy = HostPolicy::new("cluster.local", &[], &[]);
            let desired = hostnames::desired(&m.sources(), &filters, &policy);
            assert_eq!(notes(&m, &filters, &desired), want, "{docs:?}");
        }
    }

    /// One subcommand per mode of the table, named as its `--mode` value, in the table's order,
    /// with its mode's help line; etc-hosts also answers to `hosts`.
    #[test]
    fn subcommands_are_the_mode_table() {
        let cmd = Cli::command();
        let subs: Vec<(&str, String)> = cmd
            .get_subcommands()
            .map(|c| (c.get_name(), c.get_about().unwrap().to_string()))
            .collect();
        let names: Vec<&str> = subs.iter().map(|(n, _)| *n).collect();
        let modes: Vec<&str> = Mode::value_variants().iter().map(|m| m.name()).collect();
        assert_eq!(names, modes);
        let about = |name: &str| subs.iter().find(|(n, _)| *n == name).unwrap().1.clone();
        use crate::dns::mode::{coredns, coredns_import, etc_hosts, external_dns};
        assert_eq!(about("coredns"), coredns::Render::ABOUT);
        assert_eq!(about("coredns-import"), coredns_import::Render::ABOUT);
        assert_eq!(about("etc-hosts"), etc_hosts::Render::ABOUT);
        assert_eq!(about("external-dns"), external_dns::Render::ABOUT);
        let hosts = cmd.find_subcommand("hosts").unwrap();
        assert_eq!(hosts.get_name(), "etc-hosts");
    }
}
