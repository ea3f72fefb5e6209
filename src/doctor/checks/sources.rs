//! The sources: how many hostnames the watched objects yield, which were skipped, and which
//! names the hostname policy rejected. Separate: the only check on `controller::hostnames`'s
//! output, judged the same whatever the DNS mode.

use std::collections::BTreeSet;

use super::cut;
use crate::controller::hostnames::model::Desired;
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
    if desired.rejected.is_empty() {
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
    Check::warn(
        ID,
        format!(
            "{summary}; {} name(s) rejected by policy",
            desired.rejected.len()
        ),
    )
    .evidence_all(cut(rejected.chain(excluded).collect()))
    .action(
        "fix the names on those objects, or adjust --allow-domain / --deny-domain; the \
         controller also reports them as HostnameRejected Events on the objects",
    )
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
