//! Each target's answer (`answer`): its ingress controller, whether that controller requires,
//! takes optionally or refuses the PROXY header and how that is known, the answer picked and
//! why. The verdict and the pick are the controller's own functions
//! ([`verdict`], [`choose`]), so
//! doctor shows what the controller decides, not a second opinion.
//!
//! doctor reads the named configuration object whatever the answer (with its own credentials;
//! the controller reads it only for `auto`), so a pick set by hand that breaks the names is
//! caught: `relay` to a controller that refuses the header, `direct` to one that requires it.
//! For `ingress-controller-kind=probe` it knocks on the ingress controller Service itself; run
//! outside the cluster it usually cannot reach the ClusterIP, which is said (a warning, not a
//! failure: the controller's own verdict is in its log).

use serde_json::Value;

use super::inputs::Got;
use crate::doctor::report::Check;
use crate::header_verdict::{
    choose, verdict, AnswerPick, Facts, Header, HeaderSource, Route, Verdict,
};
use crate::target::AnswerRule;

const ID: &str = "answer";

/// What doctor found out for a target's header verdict.
#[derive(Clone, Copy, Debug)]
pub enum Found<'a> {
    /// Its configuration object as read.
    Object(&'a Got<Value>),
    /// The verdict of doctor's own knocks on its ingress controller Service (`probe`).
    Knocked(&'a Verdict),
}

/// The header verdict of `rule`'s header source as `found` (`None`: none named).
pub fn answer_verdict(rule: &AnswerRule, found: Option<Found<'_>>) -> Verdict {
    match (&rule.config, found) {
        (Some(HeaderSource::Object(config)), Some(Found::Object(Ok(object)))) => {
            verdict(config, object.as_ref())
        }
        (Some(HeaderSource::Object(config)), Some(Found::Object(Err(e)))) => Verdict {
            header: Header::Unknown,
            how: format!("{} could not be read: {e}", config.describe()),
        },
        (Some(HeaderSource::Probe), Some(Found::Knocked(v))) => v.clone(),
        _ => Verdict {
            header: Header::Unknown,
            how: format!("not read: {}", Verdict::not_configured().how),
        },
    }
}

/// The `answer` check of one target: `read` is what doctor found out for its header source
/// (`None`: none named), `ipmode_proxy` whether its load balancer reports ipMode Proxy on
/// every address with skipping on. Returns the route picked too.
pub fn answer(rule: &AnswerRule, read: Option<Found<'_>>, ipmode_proxy: bool) -> (Check, Route) {
    let v = answer_verdict(rule, read);
    let facts = Facts {
        verdict: &v,
        ipmode_proxy,
    };
    let (route, why) = choose(rule.answer, &facts);
    let summary = match rule.answer {
        AnswerPick::Auto => format!("{} (answer=auto): {why}", route.as_str()),
        _ => format!("{}: {why}", route.as_str()),
    };
    let controller = match &rule.config {
        Some(HeaderSource::Object(c)) => {
            format!("ingress controller: {}, {}", c.kind.as_str(), c.describe())
        }
        Some(HeaderSource::Probe) => {
            "ingress controller: probe (knocked on its Service, without and with a PROXY header)"
                .into()
        }
        None => "ingress controller: not named".into(),
    };
    let mut evidence = vec![
        controller,
        format!("header: {}: {}", v.header.as_str(), v.how),
    ];
    if let Some((ns, name)) = &rule.controller_service {
        evidence.push(format!("ingress controller Service: {ns}/{name}"));
    }
    if !rule.direct_ips.is_empty() {
        let ips: Vec<String> = rule.direct_ips.iter().map(|ip| ip.to_string()).collect();
        evidence.push(format!("direct-ip: {}", ips.join(", ")));
    }
    if ipmode_proxy {
        evidence.push("its load balancer reports ipMode Proxy on every address".into());
    }
    let check = match (route, v.header) {
        (Route::Relay, Header::Refused) => Check::fail(ID, summary).action(
            "the proxy sends the PROXY header to an ingress controller that does not expect it, \
             so in-cluster requests to these names fail: set answer=direct (or auto), or \
             enable the PROXY protocol on the ingress controller",
        ),
        (Route::Direct, Header::Required) => Check::fail(ID, summary).action(
            "the ingress controller requires the PROXY header, so in-cluster connections \
             without it are refused: set answer=relay (or auto)",
        ),
        (_, Header::Unknown)
            if rule.answer == AnswerPick::Auto && rule.config == Some(HeaderSource::Probe) =>
        {
            Check::warn(ID, summary).action(
                "doctor's own knocks on the ingress controller Service got no verdict (run \
                 outside the cluster, its ClusterIP is usually out of reach; a NetworkPolicy \
                 may also keep it out): this is not the controller's verdict, which it logs as \
                 `answer picked` with `header` and `how` (kubectl logs on the controller); run \
                 doctor in the cluster to knock from there",
            )
        }
        (_, Header::Unknown) if rule.answer == AnswerPick::Auto && rule.config.is_some() => {
            let action = match read {
                Some(Found::Object(Err(e))) => e.action(),
                _ => "check that ingress-controller-config= (--ingress-controller-config) \
                      names the object that holds the setting (docs/targets.md)"
                    .into(),
            };
            Check::warn(ID, summary).action(action)
        }
        _ => Check::ok(ID, summary),
    };
    (check.evidence_all(evidence), route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::inputs::ApiFailure;
    use crate::doctor::report::Status;
    use crate::header_verdict::{ConfigRef, ControllerKind};
    use crate::target::Target;
    use serde_json::json;

    fn rule(answer: AnswerPick, config: Option<(ControllerKind, &str)>) -> AnswerRule {
        AnswerRule {
            target: Target::Default,
            answer,
            config: config.map(|(k, c)| HeaderSource::Object(ConfigRef::parse(k, c).unwrap())),
            controller_service: Some(("ingress-nginx".into(), "ingress-nginx-controller".into())),
            direct_ips: Vec::new(),
        }
    }

    fn nginx(flag: Option<&str>) -> Got<Value> {
        let data = match flag {
            Some(v) => json!({"use-proxy-protocol": v}),
            None => json!({}),
        };
        Ok(Some(json!({"kind": "ConfigMap", "data": data})))
    }

    const NGINX: Option<(ControllerKind, &str)> = Some((
        ControllerKind::IngressNginx,
        "ingress-nginx/ingress-nginx-controller",
    ));

    type Case<'a> = (
        AnswerRule,
        Option<Found<'a>>,
        bool,
        Status,
        Route,
        &'static str,
    );

    fn assert_cases(cases: Vec<Case<'_>>) {
        for (i, (rule, read, ipmode, status, route, summary)) in cases.into_iter().enumerate() {
            let (c, r) = answer(&rule, read, ipmode);
            assert_eq!(
                (c.status, r, c.summary.as_str()),
                (status, route, summary),
                "case {i}: {c:?}"
            );
        }
    }

    #[test]
    fn picks_and_verdicts() {
        let traefik = Ok(Some(json!({"spec": {"template": {"spec": {"containers": [
            {"args": ["--entryPoints.websecure.proxyProtocol.trustedIPs=10.0.0.0/8"]}]}}}})));
        let forbidden: Got<Value> = Err(ApiFailure {
            verb: "get",
            resource: "configmaps".into(),
            namespace: Some("ingress-nginx".into()),
            name: Some("ingress-nginx-controller".into()),
            code: Some(403),
            timed_out: false,
            message: "forbidden".into(),
        });
        let true_ = nginx(Some("true"));
        let false_ = nginx(Some("false"));
        let missing: Got<Value> = Ok(None);
        let cases: Vec<Case<'_>> = vec![
            (
                rule(AnswerPick::Relay, None),
                None,
                false,
                Status::Ok,
                Route::Relay,
                "relay: answer=relay is set",
            ),
            (
                rule(AnswerPick::Auto, None),
                None,
                false,
                Status::Ok,
                Route::Relay,
                "relay (answer=auto): whether the ingress controller takes the header is \
                 unknown: through the proxy, as before",
            ),
            (
                rule(AnswerPick::Auto, NGINX),
                Some(Found::Object(&true_)),
                false,
                Status::Ok,
                Route::Relay,
                "relay (answer=auto): the ingress controller requires the PROXY header (v1 or \
                 v2): through the proxy",
            ),
            (
                rule(AnswerPick::Auto, NGINX),
                Some(Found::Object(&false_)),
                false,
                Status::Ok,
                Route::Direct,
                "direct (answer=auto): the ingress controller does not expect the header: no \
                 relay hop",
            ),
            (
                rule(
                    AnswerPick::Auto,
                    Some((ControllerKind::Traefik, "traefik/traefik")),
                ),
                Some(Found::Object(&traefik)),
                false,
                Status::Ok,
                Route::Direct,
                "direct (answer=auto): the ingress controller takes connections without the \
                 header: no relay hop",
            ),
            (
                rule(AnswerPick::Auto, NGINX),
                Some(Found::Object(&missing)),
                false,
                Status::Warn,
                Route::Relay,
                "relay (answer=auto): whether the ingress controller takes the header is \
                 unknown: through the proxy, as before",
            ),
            (
                rule(AnswerPick::Auto, NGINX),
                Some(Found::Object(&forbidden)),
                false,
                Status::Warn,
                Route::Relay,
                "relay (answer=auto): whether the ingress controller takes the header is \
                 unknown: through the proxy, as before",
            ),
            (
                rule(AnswerPick::Auto, NGINX),
                Some(Found::Object(&true_)),
                true,
                Status::Ok,
                Route::Skip,
                "skip (answer=auto): its load balancer reports ipMode Proxy: in-cluster \
                 clients get the header from it",
            ),
        ];
        assert_cases(cases);
    }

    #[test]
    fn picks_set_by_hand_that_break_the_names_fail() {
        let true_ = nginx(Some("true"));
        let false_ = nginx(Some("false"));
        let cases: Vec<Case<'_>> = vec![
            // Set by hand: ipMode Proxy does not skip, and a pick that breaks the names fails.
            (
                rule(AnswerPick::Relay, NGINX),
                Some(Found::Object(&false_)),
                true,
                Status::Fail,
                Route::Relay,
                "relay: answer=relay is set",
            ),
            (
                rule(AnswerPick::Direct, NGINX),
                Some(Found::Object(&true_)),
                false,
                Status::Fail,
                Route::Direct,
                "direct: answer=direct is set",
            ),
            (
                rule(AnswerPick::Relay, NGINX),
                Some(Found::Object(&true_)),
                false,
                Status::Ok,
                Route::Relay,
                "relay: answer=relay is set",
            ),
            (
                rule(AnswerPick::Skip, NGINX),
                Some(Found::Object(&false_)),
                false,
                Status::Ok,
                Route::Skip,
                "skip: answer=skip is set",
            ),
        ];
        assert_cases(cases);
    }

    #[test]
    fn probe_shows_doctors_own_knock_and_warns_when_it_got_none() {
        let mut probe = rule(AnswerPick::Auto, None);
        probe.config = Some(HeaderSource::Probe);
        let required = Verdict {
            header: Header::Required,
            how: "Service ingress-nginx/ingress-nginx-controller: probed 10.96.0.80:443".into(),
        };
        let (c, r) = answer(&probe, Some(Found::Knocked(&required)), false);
        assert_eq!((c.status, r), (Status::Ok, Route::Relay), "{c:?}");
        assert_eq!(
            c.evidence[..2],
            [
                "ingress controller: probe (knocked on its Service, without and with a PROXY \
                 header)",
                "header: required: Service ingress-nginx/ingress-nginx-controller: probed \
                 10.96.0.80:443",
            ]
        );
        let unreached = Verdict {
            header: Header::Unknown,
            how: "probed 10.96.0.80:443 (TLS ClientHello): no answer in time".into(),
        };
        let (c, r) = answer(&probe, Some(Found::Knocked(&unreached)), false);
        assert_eq!((c.status, r), (Status::Warn, Route::Relay), "{c:?}");
        let action = c.action.unwrap();
        assert!(
            action.contains("out of reach") && action.contains("`answer picked`"),
            "{action}"
        );
    }

    #[test]
    fn evidence_says_how_the_verdict_is_known() {
        let (c, _) = answer(&rule(AnswerPick::Auto, None), None, false);
        assert_eq!(
            c.evidence,
            [
                "ingress controller: not named",
                "header: unknown: not read: no ingress controller configuration named \
                 (ingress-controller-kind= and ingress-controller-config=)",
                "ingress controller Service: ingress-nginx/ingress-nginx-controller",
            ]
        );
        let (c, _) = answer(
            &rule(AnswerPick::Auto, NGINX),
            Some(Found::Object(&nginx(None))),
            false,
        );
        assert_eq!(
            c.evidence[..2],
            [
                "ingress controller: ingress-nginx, ConfigMap \
                 ingress-nginx/ingress-nginx-controller",
                "header: refused: ConfigMap ingress-nginx/ingress-nginx-controller: no \
                 use-proxy-protocol (default false)",
            ]
        );
        let (c, _) = answer(
            &rule(AnswerPick::Auto, NGINX),
            Some(Found::Object(&Ok(None))),
            false,
        );
        assert_eq!(
            c.evidence[1],
            "header: unknown: ConfigMap ingress-nginx/ingress-nginx-controller not found"
        );
        assert!(c.action.unwrap().contains("ingress-controller-config="));
    }
}
