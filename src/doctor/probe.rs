//! `doctor --probe HOST`: the controller's hairpin probe for one name, each step printed. The
//! name's target comes from the sources (as the controller places it); the answers it may get
//! are those its `answer=` allows (for `auto`, the proxy's or the ingress controller's, as the
//! controller may pick either).
//!
//! API calls: the sources' `list`s, and the reads of the expected addresses (`get` on the proxy
//! Services, `list` by name on the ingress controller Services).

use std::process::ExitCode;

use k8s_openapi::api::core::v1::Service;
use kube::Client;

use super::{served_sources, sources, DoctorArgs, Validated};
use crate::controller::probe::{probe_name, Source};
use crate::flags::UsageError;
use crate::header_verdict::AnswerPick;
use crate::hostname::Hostname;
use crate::probe::verdict::{Candidate, Expected, Verdict};
use crate::probe::{Outcome, Settings};
use crate::target::{Target, TargetRule};

/// The hairpinned name that covers `host`: itself, else the wildcard one level up.
fn covering<'a>(
    host: &str,
    hosts: &'a std::collections::BTreeSet<Hostname>,
) -> Option<&'a Hostname> {
    let wildcard = host.split_once('.').map(|(_, rest)| format!("*.{rest}"));
    hosts.iter().find(|h| h.as_str() == host).or_else(|| {
        hosts
            .iter()
            .find(|h| Some(h.as_str()) == wildcard.as_deref())
    })
}

/// What `answer` allows as the DNS answer, from the target's proxy (`relay`) and its ingress
/// controller Service (`direct`, when it has one).
fn allowed(
    answer: AnswerPick,
    relay: Vec<std::net::IpAddr>,
    direct: Option<Vec<std::net::IpAddr>>,
) -> Expected {
    let proxy = Candidate {
        what: "the proxy".into(),
        ips: relay,
    };
    let controller = direct.map(|ips| Candidate {
        what: "the ingress controller Service".into(),
        ips,
    });
    match (answer, controller) {
        (AnswerPick::Skip, _) => Expected::Unchecked,
        (AnswerPick::Direct, Some(c)) => Expected::OneOf(vec![c]),
        (AnswerPick::Auto, Some(c)) => Expected::OneOf(vec![proxy, c]),
        _ => Expected::OneOf(vec![proxy]),
    }
}

/// Runs the probe for `host` and prints it; exit 1 when it fails.
pub async fn run(
    client: &Client,
    args: &DoctorArgs,
    host: &str,
    settings: &Settings,
) -> anyhow::Result<ExitCode> {
    let (text, verdict) = report(client, args, host, settings).await?;
    print!("{text}");
    Ok(if verdict.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The probe of `host`: the printed report and the verdict.
pub async fn report(
    client: &Client,
    args: &DoctorArgs,
    host: &str,
    settings: &Settings,
) -> anyhow::Result<(String, Verdict)> {
    let Validated {
        filters,
        policy,
        cluster_domain,
        ..
    } = args.validate()?;
    let checked = policy
        .check(host)
        .map_err(|r| UsageError::new(format!("--probe {host:?}: {}", r.explain())))?;
    let rules = args.answer_rules()?;
    let needs = args.needs();
    let served = served_sources(client, &args.hostnames).await;
    let objects = sources(client, &args.hostnames, needs.ingress_class_filter, &served)
        .await
        .map_err(|e| anyhow::anyhow!("listing the sources failed: {e}; {}", e.action()))?
        .unwrap_or_default();
    let desired = crate::controller::hostnames::desired(&objects.sources(), &filters, &policy);
    let targets: &[TargetRule] = &filters.targets;
    let mut lines = vec![format!("probe {host}")];
    let expected = match covering(checked.as_str(), &desired.hosts) {
        None => {
            lines.push(format!(
                "  target    none: {host} is not among the names the controller hairpins; \
                 the DNS answer is not checked"
            ));
            Expected::Unchecked
        }
        Some(name) if left_out(args, client, (targets, &rules), desired.target_of(name)).await => {
            let target = desired.target_of(name);
            lines.push(format!(
                "  target    {} (hairpinned as {name}) is left out: its ingress controller's \
                 load balancer reports ipMode: Proxy, so kube-proxy does not short-circuit the \
                 name and the controller does not answer it; the DNS answer is not checked",
                target.name(targets)
            ));
            Expected::Unchecked
        }
        Some(name) => {
            let target = desired.target_of(name);
            let rule = rules.iter().find(|r| r.target == target);
            let answer = rule.map_or(AnswerPick::Relay, |r| r.answer);
            lines.push(format!(
                "  target    {} (hairpinned as {name}, answer={})",
                target.name(targets),
                answer.as_str()
            ));
            expected_for(
                args,
                client,
                (&cluster_domain, targets, &rules),
                target,
                answer,
                settings,
            )
            .await?
        }
    };
    let name = probe_name(&checked);
    let outcome = crate::probe::probe(&name, &expected, settings).await;
    Ok((text(&mut lines, &outcome), outcome.verdict))
}

/// Whether the controller leaves `target`'s names out (KEP-1860): an `auto` target whose
/// ingress controller Service, named by flag (an auto-detected one is not watched), reports
/// `ipMode: Proxy` on every load-balancer address, with `--skip-proxy-ipmode` on. A Service
/// that cannot be read does not leave it out (the controller would not either).
async fn left_out(
    args: &DoctorArgs,
    client: &Client,
    (targets, rules): (&[TargetRule], &[crate::target::AnswerRule]),
    target: Target,
) -> bool {
    let auto = rules
        .iter()
        .find(|r| r.target == target)
        .is_none_or(|r| r.answer == AnswerPick::Auto);
    let service = match target.rule(targets) {
        None => args
            .ingress_controller_service
            .as_ref()
            .map(|s| (s.namespace.clone(), s.name.clone())),
        Some(t) => t.ingress_controller.clone(),
    };
    let Some((namespace, name)) = service.filter(|_| auto && args.skip_proxy_ipmode) else {
        return false;
    };
    let svc: super::checks::inputs::Got<Service> =
        super::fetch::get(client, "services", &namespace, &name).await;
    crate::controller::ipmode::proxied(svc.ok().flatten().as_ref())
}

async fn expected_for(
    args: &DoctorArgs,
    client: &Client,
    (cluster_domain, targets, rules): (&str, &[TargetRule], &[crate::target::AnswerRule]),
    target: Target,
    answer: AnswerPick,
    settings: &Settings,
) -> anyhow::Result<Expected> {
    if answer == AnswerPick::Skip {
        return Ok(Expected::Unchecked);
    }
    let sources =
        crate::controller::probe::sources(&args.dns, client, cluster_domain, targets, rules)
            .map_err(UsageError)?;
    let source: &Source = sources
        .get(target.position())
        .ok_or_else(|| anyhow::anyhow!("no answer source for target {}", target.name(targets)))?;
    let (relay, direct) = source
        .addresses(answer != AnswerPick::Relay, settings)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the expected addresses of {host}'s target are unknown: {e}",
                host = target.name(targets)
            )
        })?;
    Ok(allowed(answer, relay, direct))
}

/// The report: one line per step, then the verdict (and what to do when it failed).
fn text(lines: &mut Vec<String>, outcome: &Outcome) -> String {
    for s in &outcome.steps {
        let mark = match s.verdict {
            None | Some(Verdict::Ok) => String::new(),
            Some(v) => format!(" [{}]", v.as_str()),
        };
        lines.push(format!("  {:<9} {}{mark}", s.name, s.text));
    }
    let v = outcome.verdict;
    if v.is_ok() {
        lines.push("  verdict   ok".into());
    } else {
        lines.push(format!("  verdict   {}: {}", v.as_str(), v.hint()));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Step;

    fn host(s: &str) -> Hostname {
        crate::hostname::HostPolicy::new("cluster.local", &[], &[])
            .check(s)
            .unwrap()
    }

    #[test]
    fn covering_name_is_the_host_or_its_wildcard() {
        let hosts = [host("app.example.com"), host("*.apps.example.com")].into();
        for (asked, want) in [
            ("app.example.com", Some("app.example.com")),
            ("x.apps.example.com", Some("*.apps.example.com")),
            ("a.x.apps.example.com", None),
            ("other.example.com", None),
        ] {
            assert_eq!(
                covering(asked, &hosts).map(Hostname::as_str),
                want,
                "{asked}"
            );
        }
    }

    #[test]
    fn answers_allowed_by_the_pick() {
        let ip = |s: &str| vec![s.parse().unwrap()];
        let (p, c) = ("the proxy", "the ingress controller Service");
        for (answer, direct, want) in [
            (AnswerPick::Relay, Some(ip("10.0.0.80")), vec![p]),
            (AnswerPick::Auto, None, vec![p]),
            (AnswerPick::Auto, Some(ip("10.0.0.80")), vec![p, c]),
            (AnswerPick::Direct, Some(ip("10.0.0.80")), vec![c]),
            (AnswerPick::Direct, None, vec![p]),
            (AnswerPick::Skip, Some(ip("10.0.0.80")), vec![]),
        ] {
            let got = match allowed(answer, ip("10.0.0.20"), direct) {
                Expected::OneOf(c) => c.iter().map(|c| c.what.clone()).collect(),
                Expected::Unchecked => Vec::new(),
            };
            assert_eq!(got, want, "{answer:?}");
        }
    }

    #[test]
    fn report_lines() {
        let outcome = Outcome {
            verdict: Verdict::Reset,
            steps: vec![
                Step {
                    name: "expected",
                    text: "10.0.0.20 (the proxy)".into(),
                    verdict: None,
                },
                Step {
                    name: "connect",
                    text: "10.0.0.20:443, TLS ClientHello for a.example.com: closed".into(),
                    verdict: Some(Verdict::Reset),
                },
            ],
            failure: Some("closed".into()),
        };
        let t = text(&mut vec!["probe a.example.com".into()], &outcome);
        assert_eq!(
            t,
            format!(
                "probe a.example.com\n  expected  10.0.0.20 (the proxy)\n  connect   \
                 10.0.0.20:443, TLS ClientHello for a.example.com: closed [reset]\n  verdict   \
                 reset: {}\n",
                Verdict::Reset.hint()
            )
        );
    }
}
