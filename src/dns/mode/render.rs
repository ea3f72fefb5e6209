//! What `render` hands a mode and asks of it: [`RenderMode`], which each mode's `Render` (its
//! `render` subcommand's own flags) implements; [`Placed`], the names read from the manifests
//! and placed on their targets, which `crate::render` computes; and the flags several modes'
//! subcommands share ([`AnswerArgs`], [`ProxyIpArg`]). Text in, text out: `crate::render` reads
//! the files and prints the result.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use clap::Args;

use crate::dns::answer::Version;
use crate::dns::answer::{Answer, ProxyAddrs, Rules};
use crate::dns::answer_form::{parse_version, pick, AnswerForm, Known, Picked};
use crate::dns::write::plan::Plan;
use crate::dns::{self, ProxyFqdn};
use crate::dns::{MAX_CONFIGMAP_DATA, TOO_LARGE_WAYS_OUT};
use crate::flags::{parse_answer_ip, UsageError};
use crate::header_verdict::Route;
use crate::hostname::Hostname;
use crate::target::{AnswerRule, TargetRule};

/// The log target of what `render` says, wherever the mode's code is: every line names
/// `render`'s module, as it did before the modes held their renderers, so docs that quote the
/// lines and filters that name it (`--log-level ouroboros::render=debug`) stay true.
pub const LOG_TARGET: &str = "ouroboros::render";

/// A mode's `render` subcommand: its own flags (the struct), what it reads beside the manifests
/// and what it prints. `crate::render` runs every mode the same way: `check`, then reads the
/// file `edits` names, then the manifests, then `render`.
pub trait RenderMode: Args {
    /// The subcommand's one-line help (as `render --help` lists it).
    const ABOUT: &'static str;

    /// Refuses the flag combinations it cannot render, before anything is read; errors are
    /// `UsageError`s (exit 64).
    fn check(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// The file it edits (`-` for stdin) and what it is, for messages; read before the
    /// manifests, so one that cannot be read fails before any warning about their names.
    fn edits(&self) -> Option<(&Path, &'static str)> {
        None
    }

    /// The output: `edited` is the text of the file `edits` names (empty when it names none),
    /// `placed` the names to render on their targets. Calls the mode's pure renderer in `dns`.
    fn render(&self, edited: &str, placed: &Placed) -> anyhow::Result<String>;
}

/// How `render coredns` and `render coredns-import` answer: the controller's flags.
#[derive(Args, Debug, Clone)]
pub struct AnswerArgs {
    /// `auto` (`view` with --coredns-version 1.10 or later in `render coredns`, else
    /// `template`, with a warning when the version is not given), `template` (A/AAAA answers
    /// with --proxy-ip, every other query type left public), `view` (the same answers from
    /// server blocks of their own, for thousands of names; coredns only, CoreDNS 1.10+) or
    /// `rewrite` (`rewrite name` lines to --proxy-fqdn; wildcards need CoreDNS 1.8.4+).
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_ANSWER", value_enum, default_value_t = AnswerForm::Auto)]
    pub coredns_answer: AnswerForm,

    /// auto: the cluster's CoreDNS version (e.g. 1.11.3: `kubectl -n kube-system get deploy
    /// coredns -o jsonpath='{..image}'`), which render cannot read; without it `auto` writes
    /// the template pair.
    #[arg(long, env = "OUROBOROS_CONTROLLER_COREDNS_VERSION", value_name = "VERSION", value_parser = parse_version)]
    pub coredns_version: Option<Version>,

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
    pub fn fits_configmap(&self, text: &str, what: &str) -> anyhow::Result<()> {
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
            tracing::warn!(target: LOG_TARGET, bytes, limit = MAX_CONFIGMAP_DATA, "{message}");
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{message}. Nothing was printed (--allow-oversize prints it anyway)"
        ))
    }

    /// The form to render in, and why: `--coredns-answer`, or what `auto` picks from
    /// --coredns-version (render reads no cluster). `snippet`: the coredns-import snippet.
    pub fn picked(&self, snippet: bool) -> Picked {
        let known = match self.coredns_version {
            Some(v) => Known::Flag(v),
            None => {
                Known::Unknown("render reads no cluster and --coredns-version is not given".into())
            }
        };
        pick(self.coredns_answer, &known, snippet)
    }

    /// These flags with `auto` replaced by its pick, which is logged (a warning when the
    /// version is unknown) when there are `hosts` to render: the first line `render` prints.
    pub fn resolved(&self, snippet: bool, hosts: usize) -> AnswerArgs {
        let picked = self.picked(snippet);
        if hosts > 0 {
            let form = picked.form.as_str();
            if picked.warns() {
                tracing::warn!(target: LOG_TARGET, form, basis = picked.basis.as_str(), "{}", picked.reason);
            } else {
                tracing::info!(target: LOG_TARGET, form, basis = picked.basis.as_str(), "answer form {form}: {}", picked.reason);
            }
        }
        AnswerArgs {
            coredns_answer: picked.form,
            ..self.clone()
        }
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

/// One target's names and its proxy's addresses.
pub type NamesOn<'a> = (Cow<'a, BTreeSet<Hostname>>, &'a [IpAddr]);
/// A target's rule (`None`: the default target), its names, and its answer settings and route.
type TargetNames<'a> = (
    Option<&'a TargetRule>,
    Cow<'a, BTreeSet<Hostname>>,
    (&'a AnswerRule, Route),
);

/// The names to render, which proxy target each goes to, and the targets.
pub struct Placed {
    pub plan: Plan,
    pub targets: Vec<TargetRule>,
    /// Each target's answer settings and route (the default target's first).
    pub answers: Vec<(AnswerRule, Route)>,
    pub cluster_domain: String,
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
    pub fn with_ips<'a>(&'a self, default: &'a [IpAddr]) -> anyhow::Result<Vec<NamesOn<'a>>> {
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
    pub fn rules(&self, proxy: &AnswerArgs) -> anyhow::Result<Rules> {
        let mut rules = Rules::new();
        for (t, hosts, (a, route)) in self.groups()? {
            let answer = match t {
                _ if route == Route::Direct => self.direct_answer(proxy, a, t, hosts.len())?,
                None => proxy.answer(&hosts)?,
                Some(t) => match proxy.coredns_answer {
                    form @ (AnswerForm::Auto | AnswerForm::Template | AnswerForm::View) => {
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
            form @ (AnswerForm::Auto | AnswerForm::Template | AnswerForm::View) => {
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
