//! Each target's answer (relay, direct or skip) as the controller keeps it: set once from
//! `answer=` (`--answer`), and for `auto` from the header verdict of the one configuration
//! object named for its ingress controller, which is read at start-up (so the first write
//! already answers as picked) and then watched by name. A changed pick makes the engine write
//! again: the new answers reach DNS in one write, as any other change.
//!
//! API calls per `auto` target with `ingress-controller-config=`: `get`, then `list`/`watch`
//! with the field selector `metadata.name=<name>` on that object's resource in its namespace
//! (RBAC by resourceName).

use std::pin::pin;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::dns::write::routes::Routes;
use crate::header_verdict::AnswerPick;
use crate::header_verdict::{choose, verdict, ConfigRef, Facts, Verdict};
use crate::kube_client::{describe, Cause, Repeats};
use crate::target::{AnswerRule, TargetRule};

/// The API of `config`'s resource in its namespace (doctor reads the object through it too).
pub fn api(client: &Client, config: &ConfigRef) -> Api<DynamicObject> {
    let r = config.resource;
    let ar = ApiResource {
        group: r.group.into(),
        version: r.version.into(),
        api_version: if r.group.is_empty() {
            r.version.into()
        } else {
            format!("{}/{}", r.group, r.version)
        },
        kind: r.kind.into(),
        plural: r.plural.into(),
    };
    Api::namespaced_with(client.clone(), &config.namespace, &ar)
}

/// The verdict from the object as read (`None`: deleted or absent).
fn judge(config: &ConfigRef, object: Option<&DynamicObject>) -> Verdict {
    let value = object.and_then(|o| serde_json::to_value(o).ok());
    verdict(config, value.as_ref())
}

/// Records `rule`'s pick for `verdict` in `routes`; whether it changed. Logged when it did.
fn pick(rule: &AnswerRule, name: &str, verdict: &Verdict, routes: &Routes) -> bool {
    // ipMode Proxy is applied beside the pick (the ipmode watch), for `auto` targets only.
    let facts = Facts {
        verdict,
        ipmode_proxy: false,
    };
    let (route, why) = choose(rule.answer, &facts);
    let changed = routes.set(rule.target, route, why.clone());
    if changed {
        tracing::info!(
            proxy_target = name,
            answer = route.as_str(),
            header = verdict.header.as_str(),
            how = %verdict.how,
            "answer picked: {why}"
        );
    }
    changed
}

/// Sets every target's first pick, reading each `auto` target's configuration object once, and
/// starts a watch on each of those objects. `names`: the named targets, for logs.
pub async fn start(
    client: &Client,
    rules: &[AnswerRule],
    names: &[TargetRule],
    routes: &Routes,
    (forced, stop): (&watch::Sender<u64>, &CancellationToken),
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for rule in rules {
        let name = rule.target.name(names).to_string();
        let config = match (&rule.config, rule.answer) {
            (Some(c), AnswerPick::Auto) => c.clone(),
            _ => {
                pick(rule, &name, &first_verdict(rule), routes);
                continue;
            }
        };
        let verdict = match api(client, &config).get_opt(&config.name).await {
            Ok(o) => judge(&config, o.as_ref()),
            Err(e) => {
                let hint = hint(&config, Cause::of(&e));
                tracing::warn!(
                    proxy_target = %name,
                    config = %config.describe(),
                    error = %describe(&e),
                    "reading the ingress controller's configuration failed: {hint}; relaying \
                     until its watch reads it"
                );
                unread(&config, &hint)
            }
        };
        pick(rule, &name, &verdict, routes);
        tasks.push(tokio::spawn(follow(
            client.clone(),
            (rule.clone(), name),
            config,
            (routes.clone(), forced.clone()),
            stop.clone(),
        )));
    }
    tasks
}

/// The verdict of a target whose pick reads nothing.
fn first_verdict(rule: &AnswerRule) -> Verdict {
    match rule.fixed() {
        Some(_) => Verdict {
            header: crate::header_verdict::Header::Unknown,
            how: format!("answer={} is set; nothing read", rule.answer.as_str()),
        },
        None => Verdict::not_configured(),
    }
}

/// The verdict of an object that could not be read (why: `hint`'s words).
fn unread(config: &ConfigRef, hint: &str) -> Verdict {
    Verdict {
        header: crate::header_verdict::Header::Unknown,
        how: format!("{} could not be read: {hint}", config.describe()),
    }
}

/// What to do about a failed read or watch of `config`. A 404 here is never a missing object
/// (`get_opt` reads that as `None`, and a list by name answers an empty list): the API server
/// does not serve the resource at all, which a real one answers for a CRD that is not
/// installed (with a plain `404 page not found`, not a Status). Only the CRD kinds get one:
/// ConfigMaps and workloads are always served.
fn hint(config: &ConfigRef, cause: Cause) -> String {
    let r = config.resource;
    match cause {
        Cause::NotFound => format!(
            "the API server does not serve {}.{} {} (404): install {}'s CRDs, or correct \
             ingress-controller-kind",
            r.plural,
            r.group,
            r.version,
            config.kind.as_str()
        ),
        other => other.hint(&grant(config)),
    }
}

fn grant(config: &ConfigRef) -> String {
    format!(
        "grant the controller's ServiceAccount `get`, `list` and `watch` on {} (resourceNames: \
         [{}]) in {}",
        config.resource.plural, config.name, config.namespace
    )
}

/// Watches `config` until `stop`; re-picks at each change and makes the engine write when the
/// pick changed.
async fn follow(
    client: Client,
    (rule, name): (AnswerRule, String),
    config: ConfigRef,
    (routes, forced): (Routes, watch::Sender<u64>),
    stop: CancellationToken,
) {
    let api = api(&client, &config);
    let wc = watcher::Config::default().fields(&format!("metadata.name={}", config.name));
    let mut events = pin!(watcher::watcher(api, wc).default_backoff());
    let mut failures = Repeats::default();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.next() => e,
        };
        let verdict = match event {
            None => return,
            Some(Ok(Event::Apply(o) | Event::InitApply(o))) => judge(&config, Some(&o)),
            Some(Ok(Event::Delete(_))) => judge(&config, None),
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                // The watcher retries with capped backoff; logged once per doubling.
                let cause = Cause::of_watch(&e);
                if let Some(failures) = failures.failed(cause) {
                    tracing::warn!(
                        proxy_target = %name,
                        config = %config.describe(),
                        error = %e,
                        failures,
                        "watching the ingress controller's configuration failed: {}; the answer \
                         stays as picked, retrying with backoff",
                        hint(&config, cause)
                    );
                }
                continue;
            }
        };
        failures.reset();
        if pick(&rule, &name, &verdict, &routes) {
            forced.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// The targets left out now: those picked `skip`, and the `auto` ones whose load balancer
/// reports ipMode Proxy (`ipmode`).
pub fn skipped(
    routes: &Routes,
    rules: &[AnswerRule],
    ipmode: &std::collections::BTreeSet<crate::target::Target>,
) -> std::collections::BTreeSet<crate::target::Target> {
    let mut out = routes.skipped();
    out.extend(
        rules
            .iter()
            .filter(|r| r.answer == AnswerPick::Auto)
            .filter_map(|r| ipmode.contains(&r.target).then_some(r.target)),
    );
    out
}

/// Whether any target may be answered directly (and so its ingress controller Service read).
pub fn may_go_direct(rule: &AnswerRule) -> bool {
    rule.controller_service.is_some()
        && (rule.answer == AnswerPick::Direct
            || (rule.answer == AnswerPick::Auto && rule.config.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header_verdict::{ControllerKind, Header, Route};
    use crate::target::Target;

    #[test]
    fn a_404_says_the_resource_is_not_served_and_a_403_what_to_grant() {
        let ctp = ConfigRef::parse(ControllerKind::EnvoyGateway, "eg/proxy-protocol").unwrap();
        let cm = ConfigRef::parse(ControllerKind::IngressNginx, "ingress-nginx/c").unwrap();
        let cases = [
            (
                &ctp,
                Cause::NotFound,
                "ClientTrafficPolicy eg/proxy-protocol could not be read: the API server does \
                 not serve clienttrafficpolicies.gateway.envoyproxy.io v1alpha1 (404): install \
                 envoy-gateway's CRDs, or correct ingress-controller-kind",
            ),
            (
                &cm,
                Cause::Forbidden,
                "ConfigMap ingress-nginx/c could not be read: forbidden (403); grant the \
                 controller's ServiceAccount `get`, `list` and `watch` on configmaps \
                 (resourceNames: [c]) in ingress-nginx",
            ),
        ];
        for (config, cause, want) in cases {
            let v = unread(config, &hint(config, cause));
            assert_eq!(v.header, Header::Unknown);
            assert_eq!(v.how, want, "{cause:?}");
        }
    }

    #[test]
    fn skipped_takes_ipmode_only_for_auto_targets() {
        let rule = |target, answer| AnswerRule {
            target,
            answer,
            config: None,
            controller_service: None,
            direct_ips: Vec::new(),
        };
        let rules = [
            rule(Target::Default, AnswerPick::Auto),
            rule(Target::Named(0), AnswerPick::Relay),
            rule(Target::Named(1), AnswerPick::Skip),
        ];
        let routes = Routes::default();
        routes.set(Target::Named(1), Route::Skip, "set".into());
        let ipmode = [Target::Default, Target::Named(0)].into();
        assert_eq!(
            skipped(&routes, &rules, &ipmode),
            [Target::Default, Target::Named(1)].into(),
            "relay set by hand stays relayed under ipMode Proxy"
        );
    }
}
