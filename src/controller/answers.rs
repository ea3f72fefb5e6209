//! Each target's answer (relay, direct or skip) as the controller keeps it: set once from
//! `answer=` (`--answer`), and for `auto` from the header verdict of its ingress controller:
//! the one configuration object named for it, read at start-up (so the first write already
//! answers as picked) and then watched by name; or, with `ingress-controller-kind=probe`,
//! knocks on its Service (`probe::service_header_verdict`) at start-up (bounded by
//! [`FIRST_PROBE`], so a dead Service cannot hold the first write), again when the Service's
//! ClusterIP or ports change and every `--resync`. A changed pick makes the engine write
//! again: the new answers reach DNS in one write, as any other change; a verdict that keeps
//! the pick writes nothing.
//!
//! API calls per `auto` target: `get`, then `list`/`watch` with the field selector
//! `metadata.name=<name>`, on the configuration object's resource in its namespace, or on
//! the ingress controller Service for `probe` (RBAC by resourceName).

use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::dns::write::routes::Routes;
use crate::header_verdict::AnswerPick;
use crate::header_verdict::{choose, verdict, ConfigRef, Facts, Header, HeaderSource, Verdict};
use crate::kube_client::{describe, Cause, Repeats};
use crate::probe::header::{service_knock, ServiceKnock};
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

/// The longest the start-up read and knock of a `probe` target's Service may hold the first
/// write: past it the verdict is Unknown (relay) until the Service's watch or the next
/// `--resync` knocks again.
pub const FIRST_PROBE: Duration = Duration::from_secs(5);

/// Sets every target's first pick, reading each `auto` target's configuration object (or
/// knocking on its Service) once, and starts a watch on each of those objects. `names`: the
/// named targets, for logs; `resync`: how often a `probe` target's Service is knocked on again.
pub async fn start(
    client: &Client,
    rules: &[AnswerRule],
    names: &[TargetRule],
    routes: &Routes,
    (forced, stop, resync): (&watch::Sender<u64>, &CancellationToken, Duration),
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for rule in rules {
        let name = rule.target.name(names).to_string();
        let ends = (routes.clone(), forced.clone());
        match (&rule.config, &rule.controller_service, rule.answer) {
            (Some(HeaderSource::Object(config)), _, AnswerPick::Auto) => {
                pick(
                    rule,
                    &name,
                    &read_config(client, &name, config).await,
                    routes,
                );
                tasks.push(tokio::spawn(follow(
                    client.clone(),
                    (rule.clone(), name),
                    config.clone(),
                    ends,
                    stop.clone(),
                )));
            }
            // `check_answer` refuses `probe` without the Service at start-up.
            (Some(HeaderSource::Probe), Some(service), AnswerPick::Auto) => {
                let svc = Api::<Service>::namespaced(client.clone(), &service.0);
                let first = tokio::time::timeout(FIRST_PROBE, async {
                    let read = read_service(&svc, &name, service).await;
                    let v = probe_verdict(service, read.as_ref().and_then(Option::as_ref)).await;
                    (read, v)
                })
                .await;
                let (read, verdict) = first.unwrap_or_else(|_| {
                    let how = format!(
                        "Service {}/{}: no verdict within {} at start-up; knocked on again \
                         when it changes and every --resync",
                        service.0,
                        service.1,
                        humantime::format_duration(FIRST_PROBE)
                    );
                    (
                        None,
                        Verdict {
                            header: Header::Unknown,
                            how,
                        },
                    )
                });
                pick(rule, &name, &verdict, routes);
                let known = read.map(|svc| Known::of(svc.as_ref()));
                tasks.push(tokio::spawn(follow_probe(
                    (svc, service.1.clone()),
                    (rule.clone(), name),
                    (known, verdict.header),
                    ends,
                    (resync, stop.clone()),
                )));
            }
            _ => {
                pick(rule, &name, &first_verdict(rule), routes);
            }
        }
    }
    tasks
}

/// `config`'s verdict as read at start-up (a failed read is logged, and is Unknown).
async fn read_config(client: &Client, name: &str, config: &ConfigRef) -> Verdict {
    match api(client, config).get_opt(&config.name).await {
        Ok(o) => judge(config, o.as_ref()),
        Err(e) => {
            let hint = hint(config, Cause::of(&e));
            tracing::warn!(
                proxy_target = %name,
                config = %config.describe(),
                error = %describe(&e),
                "reading the ingress controller's configuration failed: {hint}; relaying until \
                 its watch reads it"
            );
            unread(config, &hint)
        }
    }
}

/// The ingress controller Service `service` as read (`Some(None)`: it does not exist; `None`:
/// the read failed, which is logged).
async fn read_service(
    api: &Api<Service>,
    name: &str,
    (ns, svc): &(String, String),
) -> Option<Option<Service>> {
    match api.get_opt(svc).await {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!(
                proxy_target = %name,
                service = %format!("{ns}/{svc}"),
                error = %describe(&e),
                "reading the ingress controller Service to probe it failed: {}; relaying until \
                 its watch reads it",
                Cause::of(&e).hint(&grant("services", svc, ns))
            );
            None
        }
    }
}

/// The verdict of knocking on `service` as read (`None`: absent).
async fn probe_verdict((ns, name): &(String, String), svc: Option<&Service>) -> Verdict {
    crate::probe::service_header_verdict(
        &format!("{ns}/{name}"),
        svc,
        crate::probe::header::SERVICE_KNOCK_TIMEOUT,
    )
    .await
}

/// What of a `probe` target's Service decides where it is knocked on: a change to anything
/// else (its status, labels) knocks on nothing.
#[derive(Clone, Debug)]
struct Known {
    svc: Option<Service>,
    knock: Option<Result<ServiceKnock, String>>,
}

impl Known {
    fn of(svc: Option<&Service>) -> Self {
        Known {
            svc: svc.cloned(),
            knock: svc.map(service_knock),
        }
    }
}

/// Watches a `probe` target's Service (`api` and its name) until `stop`, and knocks on it again
/// when where it is knocked on changes, and every `resync`; re-picks and makes the engine
/// write when the pick changed. `known`: the Service as read at start-up (`None`: not read),
/// `header` the verdict then.
async fn follow_probe(
    (api, svc_name): (Api<Service>, String),
    (rule, name): (AnswerRule, String),
    (mut known, mut header): (Option<Known>, Header),
    (routes, forced): (Routes, watch::Sender<u64>),
    (resync, stop): (Duration, CancellationToken),
) {
    let ns = api.namespace().unwrap_or_default().to_string();
    let service = (ns.clone(), svc_name.clone());
    let wc = watcher::Config::default().fields(&format!("metadata.name={svc_name}"));
    let mut events = pin!(watcher::watcher(api, wc).default_backoff());
    let resync = resync.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = Repeats::default();
    loop {
        let (now, resynced) = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => match &known {
                Some(k) => (k.clone(), true),
                None => continue,
            },
            e = events.next() => match e {
                None => return,
                Some(Ok(Event::Apply(o) | Event::InitApply(o))) => (Known::of(Some(&o)), false),
                Some(Ok(Event::Delete(_))) => (Known::of(None), false),
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    let grant = grant("services", &svc_name, &ns);
                    let object = format!("Service {ns}/{svc_name}");
                    watch_failed(&mut failures, &e, &name, &object, |c| c.hint(&grant));
                    continue;
                }
            },
        };
        if !resynced {
            failures.reset();
            // Not where it is knocked on: nothing to ask again (the watch's first list, too).
            if known.as_ref().is_some_and(|k| k.knock == now.knock) {
                known = Some(now);
                continue;
            }
        }
        let verdict = probe_verdict(&service, now.svc.as_ref()).await;
        known = Some(now);
        let changed = pick(&rule, &name, &verdict, &routes);
        if changed {
            forced.send_modify(|n| *n = n.wrapping_add(1));
        } else if verdict.header != header {
            tracing::info!(
                proxy_target = %name,
                header = verdict.header.as_str(),
                how = %verdict.how,
                "the ingress controller's header verdict changed; the answer stays"
            );
        }
        header = verdict.header;
    }
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
        other => other.hint(&grant(r.plural, &config.name, &config.namespace)),
    }
}

fn grant(plural: &str, name: &str, namespace: &str) -> String {
    format!(
        "grant the controller's ServiceAccount `get`, `list` and `watch` on {plural} \
         (resourceNames: [{name}]) in {namespace}"
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
                let object = config.describe();
                watch_failed(&mut failures, &e, &name, &object, |c| hint(&config, c));
                continue;
            }
        };
        failures.reset();
        if pick(&rule, &name, &verdict, &routes) {
            forced.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Logs a failed watch of `object` for the target `name`, with what to do about its cause
/// (`hint`), once per doubling of `failures`: the watcher retries with capped backoff, and the
/// answer stays as picked meanwhile.
fn watch_failed(
    failures: &mut Repeats,
    e: &watcher::Error,
    name: &str,
    object: &str,
    hint: impl Fn(Cause) -> String,
) {
    let cause = Cause::of_watch(e);
    if let Some(failures) = failures.failed(cause) {
        tracing::warn!(
            proxy_target = %name,
            object = %object,
            error = %e,
            failures,
            "watching the ingress controller's {object} failed: {}; the answer stays as picked, \
             retrying with backoff",
            hint(cause)
        );
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
