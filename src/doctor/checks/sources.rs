//! The sources: how many hostnames the watched objects yield, which were skipped, and which
//! names the hostname policy rejected. Separate: the only check on `controller::hostnames`'s
//! output, judged the same whatever the DNS mode.

use std::collections::BTreeSet;

use super::cut;
use crate::controller::hostnames::model::{unfiltered_classes_message, Desired};
use crate::doctor::report::Check;

///
/// `left_out` are the targets whose names the controller leaves out because their ingress
/// controller's load balancer reports `ipMode: Proxy` (KEP-1860), with how many names each had;
/// `desired` no longer holds those names.
pub fn hostnames(desired: &Desired, left_out: &[(String, usize)]) -> Check {
    const ID: &str = "hostnames";
    let objects: BTreeSet<_> = desired.origins.values().flatten().collect();
    let mut summary = format!(
        "{} hostname(s) to hairpin from {} object(s)",
        desired.hosts.len(),
        objects.len()
    );
    let skipped: usize = left_out.iter().map(|(_, n)| n).sum();
    if skipped > 0 {
        summary.push_str(&format!(
            "; {skipped} left out: their load balancer reports ipMode Proxy"
        ));
    }
    let left_out = left_out.iter().map(|(target, n)| {
        format!(
            "target {target}: {n} name(s) left out, as the controller does: its ingress \
             controller's load balancer reports ipMode Proxy on every address (kep-1860-ipmode)"
        )
    });
    let excluded = desired
        .excluded
        .iter()
        .map(|e| format!("{} skipped: {}", e.object, e.why))
        .chain(left_out);
    if desired.rejected.is_empty() && desired.unfiltered_classes.is_empty() {
        return Check::ok(ID, summary).evidence_all(cut(excluded.collect()));
    }
    let rejected = desired.rejected.iter().map(|r| {
        format!(
            "{}: {:?} rejected: {} ({})",
            r.object,
            r.raw,
            r.reason,
            r.reason.explain()
        )
    });
    let mut actions = Vec::new();
    if !desired.rejected.is_empty() {
        summary.push_str(&format!(
            "; {} name(s) rejected by policy",
            desired.rejected.len()
        ));
        actions.push(
            "fix the names on those objects, or adjust --allow-domain / --deny-domain; the \
             controller also reports them as HostnameRejected Events on the objects"
                .to_string(),
        );
    }
    // Several classes to one ingress controller: a name it does not serve would break.
    if !desired.unfiltered_classes.is_empty() {
        summary.push_str(&format!(
            "; Ingresses of {} classes all go to the default proxy",
            desired.unfiltered_classes.len()
        ));
        actions.push(unfiltered_classes_message(&desired.unfiltered_classes));
    }
    Check::warn(ID, summary)
        .evidence_all(cut(rejected.chain(excluded).collect()))
        .action(actions.join("; and "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Status;
    use serde_json::json;

    #[test]
    fn hostnames_verdicts() {
        use crate::controller::hostnames::{desired, kinds::Sources, model::Filters};
        use k8s_openapi::api::networking::v1::Ingress;
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"tls": [{"hosts": ["shop.example.com", "bad_name.example.com", "x.svc.cluster.local"]}]}
        }))
        .unwrap();
        let policy = crate::hostname::HostPolicy::new("cluster.local", &[], &[]);
        let d = desired(
            &Sources {
                ingresses: vec![&ing],
                ..Default::default()
            },
            &Filters::default(),
            &policy,
        );
        let c = hostnames(&d, &[]);
        assert_eq!(c.status, Status::Warn);
        assert_eq!(c.evidence.len(), 2);
        assert!(
            c.evidence[0].starts_with("Ingress shop/web: \"bad_name.example.com\" rejected"),
            "{c:?}"
        );
        // Ingresses of two classes and no class filter: all to one proxy, a warning.
        let other: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "t", "namespace": "shop"},
            "spec": {"ingressClassName": "traefik", "tls": [{"hosts": ["t.example.com"]}]}
        }))
        .unwrap();
        let sources = Sources {
            ingresses: vec![&ing, &other],
            ..Default::default()
        };
        let c = hostnames(&desired(&sources, &Filters::default(), &policy), &[]);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.summary
                .ends_with("; Ingresses of 2 classes all go to the default proxy"),
            "{c:?}"
        );
        assert!(
            c.action
                .as_deref()
                .unwrap_or_default()
                .contains("(none), traefik"),
            "{c:?}"
        );
        let filtered = Filters {
            ingress_class: Some("traefik".into()),
            ..Filters::default()
        };
        let c = hostnames(&desired(&sources, &filtered, &policy), &[]);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let ok = hostnames(
            &desired(&Sources::default(), &Filters::default(), &policy),
            &[],
        );
        assert_eq!(ok.status, Status::Ok);
        let skipped = hostnames(
            &desired(&Sources::default(), &Filters::default(), &policy),
            &[("default".into(), 3)],
        );
        assert_eq!(skipped.status, Status::Ok);
        assert!(
            skipped
                .summary
                .ends_with("; 3 left out: their load balancer reports ipMode Proxy"),
            "{skipped:?}"
        );
        assert!(
            skipped.evidence[0].starts_with("target default: 3 name(s) left out"),
            "{skipped:?}"
        );
    }
}
