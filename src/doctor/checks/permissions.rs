//! The controller's permissions: its ServiceAccount exists, and the RBAC rules it needs (from
//! `controller::rbac`) as access questions and the verdict on their answers.

use k8s_openapi::api::core::v1::ServiceAccount;

use super::{cut, inputs::ApiFailure, inputs::Got};
use crate::controller::rbac::{Rule, Scope};
use crate::doctor::report::Check;

pub fn service_account(namespace: &str, name: &str, got: &Got<ServiceAccount>) -> Check {
    const ID: &str = "controller-service-account";
    match got {
        Err(e) => e.check(ID),
        Ok(None) => Check::fail(ID, format!("ServiceAccount {namespace}/{name} not found")).action(
            "install the controller (the chart creates it), or pass \
                 --controller-service-account NAMESPACE/NAME",
        ),
        Ok(Some(_)) => Check::ok(ID, format!("ServiceAccount {namespace}/{name} exists")),
    }
}

/// One access question: may the ServiceAccount do `verb` on the rule's resource (and name)?
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question<'a> {
    pub rule: &'a Rule,
    pub verb: &'static str,
    pub name: Option<&'a str>,
}

impl Question<'_> {
    pub fn namespace(&self) -> Option<&str> {
        match &self.rule.scope {
            Scope::Cluster => None,
            Scope::Namespace(ns) => Some(ns),
        }
    }

    pub fn describe(&self) -> String {
        let r = self.rule;
        let mut s = format!("{} {}", self.verb, r.resource);
        if !r.api_group.is_empty() {
            s.push('.');
            s.push_str(r.api_group);
        }
        if let Some(n) = self.name {
            s.push_str(&format!(" {n:?}"));
        }
        match self.namespace() {
            Some(ns) => s.push_str(&format!(" in namespace {ns}")),
            None => s.push_str(" (cluster-wide)"),
        }
        s
    }
}

/// Every question for the rules: one per verb and resource name.
pub fn questions(rules: &[Rule]) -> Vec<Question<'_>> {
    let mut out = Vec::new();
    for rule in rules {
        for verb in &rule.verbs {
            if rule.resource_names.is_empty() {
                out.push(Question {
                    rule,
                    verb,
                    name: None,
                });
            }
            for n in &rule.resource_names {
                out.push(Question {
                    rule,
                    verb,
                    name: Some(n),
                });
            }
        }
    }
    out
}

/// The answers (allowed?) to the questions, for the ServiceAccount `subject`. `only_given`:
/// the questions (as [`Question::describe`]s them) that only doctor's own
/// `--ingress-controller-service` adds. Doctor's section 1 suggests that flag to check an
/// ingress controller, but a controller runs with it only when told to (the chart only for a
/// proxy whose ingress controller Service it names), so lacking those alone is a WARN that says
/// when they matter, not a FAIL.
pub fn rbac(
    subject: &str,
    answers: &[(Question<'_>, Result<bool, ApiFailure>)],
    only_given: &std::collections::BTreeSet<String>,
) -> Check {
    const ID: &str = "rbac";
    if let Some((_, Err(e))) = answers.iter().find(|(_, a)| a.is_err()) {
        return e.check(ID);
    }
    let denied_questions: Vec<&Question<'_>> = answers
        .iter()
        .filter(|(_, a)| *a == Ok(false))
        .map(|(q, _)| q)
        .collect();
    let denied: Vec<String> = denied_questions
        .iter()
        .map(|q| format!("may not {} (for: {})", q.describe(), q.rule.why))
        .collect();
    let only_flag = !denied_questions.is_empty()
        && denied_questions
            .iter()
            .all(|q| only_given.contains(&q.describe()));
    if only_flag {
        return Check::warn(
            ID,
            format!(
                "{subject} lacks {} permission(s) needed only by a controller run with \
                 --ingress-controller-service",
                denied.len()
            ),
        )
        .evidence_all(cut(denied))
        .action(
            "if the controller runs with --ingress-controller-service, grant them (the chart \
             does for a proxy whose ingress controller Service it names); if not, they are not \
             needed: doctor checked the Service you named without them",
        );
    }
    // No totals in the summary: they follow the rule table, not the cluster.
    if denied.is_empty() {
        Check::ok(
            ID,
            format!("{subject} has every permission this configuration needs"),
        )
    } else {
        Check::fail(
            ID,
            format!(
                "{subject} lacks {} permission(s) this configuration needs",
                denied.len()
            ),
        )
        .evidence_all(cut(denied))
        .action(
            "grant them with a Role/ClusterRole bound to the ServiceAccount (the chart's RBAC \
             for the same mode and flags has them)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Status;

    #[test]
    fn rbac_questions_and_verdict() {
        let rules = vec![
            Rule {
                scope: Scope::Cluster,
                api_group: "networking.k8s.io",
                resource: "ingresses",
                resource_names: vec![],
                verbs: vec!["list", "watch"],
                why: "read",
            },
            Rule {
                scope: Scope::Namespace("kube-system".into()),
                api_group: "",
                resource: "configmaps",
                resource_names: vec!["coredns".into()],
                verbs: vec!["get"],
                why: "edit",
            },
        ];
        let qs = questions(&rules);
        let described: Vec<String> = qs.iter().map(Question::describe).collect();
        assert_eq!(
            described,
            [
                "list ingresses.networking.k8s.io (cluster-wide)",
                "watch ingresses.networking.k8s.io (cluster-wide)",
                "get configmaps \"coredns\" in namespace kube-system",
            ]
        );
        let none = std::collections::BTreeSet::new();
        let all_ok: Vec<_> = qs.iter().cloned().map(|q| (q, Ok(true))).collect();
        assert_eq!(rbac("sa", &all_ok, &none).status, Status::Ok);
        let mut some: Vec<_> = qs.iter().cloned().map(|q| (q, Ok(true))).collect();
        some[1].1 = Ok(false);
        let c = rbac("sa", &some, &none);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.evidence,
            ["may not watch ingresses.networking.k8s.io (cluster-wide) (for: read)"]
        );
        // Denied only what doctor's --ingress-controller-service adds: a WARN saying when it
        // matters; denied anything else too: a FAIL listing both.
        let flag_only: std::collections::BTreeSet<String> =
            ["get configmaps \"coredns\" in namespace kube-system".to_string()].into();
        let mut only: Vec<_> = qs.iter().cloned().map(|q| (q, Ok(true))).collect();
        only[2].1 = Ok(false);
        // (denied answers, questions only the flag adds, status, evidence lines)
        for (answers, given, want, lines) in [
            (&only, &flag_only, Status::Warn, 1),
            (&only, &none, Status::Fail, 1),
            (&all_ok, &flag_only, Status::Ok, 0),
        ] {
            let c = rbac("sa", answers, given);
            assert_eq!(c.status, want, "{:?}", c.evidence);
            assert_eq!(c.evidence.len(), lines, "{:?}", c.evidence);
        }
        let mut both = only.clone();
        both[1].1 = Ok(false);
        let c = rbac("sa", &both, &flag_only);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.evidence.len(), 2, "{:?}", c.evidence);
        let c = rbac("sa", &only, &flag_only);
        assert!(
            c.summary.contains("--ingress-controller-service"),
            "{}",
            c.summary
        );
    }
}
