//! The checks: fetched objects in, [`Check`](super::report::Check)s out. Pure: the fetch layer
//! (`fetch.rs`) reads the cluster, these only judge what it read, so each verdict has a table
//! test beside it.
//!
//! One module per thing the checks are about; this one re-exports them all, so
//! `doctor::checks::NAME` is the path for every check, and holds the evidence helpers they share.
//!
//! | module | judges |
//! | --- | --- |
//! | `inputs` | (no checks) what the fetch layer hands in: `Got`, `ApiFailure`, `Workload` |
//! | `ingress` | the ingress controller: its Service, KEP-1860 `ipMode`, whether it expects PROXY |
//! | `answer` | each target's answer: header verdict, pick and why (the controller's functions) |
//! | `sources` | the hostnames the sources yield, and the ones policy rejects |
//! | `coredns` | the Corefile, our block in it, the import snippet, reverts |
//! | `shadowing` | server blocks for more specific zones that take hairpinned names |
//! | `coredns_version` | the CoreDNS image's version against what our block needs |
//! | `node_local_dns` | node-local-dns's Corefile, or its bypassing our block |
//! | `proxy` | the proxy Service, its endpoints, and whether it accepts connections |
//! | `crd` | the CRDs the configuration needs |
//! | `permissions` | the controller's ServiceAccount and its RBAC |

mod answer;
mod coredns;
mod coredns_version;
mod crd;
#[cfg(test)]
mod fixtures;
mod ingress;
mod inputs;
mod node_local_dns;
mod permissions;
mod proxy;
mod shadowing;
mod sources;

pub use answer::{answer, answer_verdict};
pub use coredns::{
    block_reverted, corefile_checks, corefile_text, import_snippet, Expected, UNKNOWN,
};
pub use coredns_version::{
    coredns_image, coredns_version, image_tag, pick_coredns_workload, COREDNS_DEPLOYMENT,
    KUBE_DNS_SELECTOR,
};
pub use crd::{crds, needed_crds};
pub use ingress::{
    controller_kind, ingress_service, ip_mode, matching_workload, nginx_configmap,
    pick_ingress_service, proxy_protocol, traefik_proxy_entrypoints, ControllerKind,
    AUTO_DETECT_SELECTOR,
};
pub use inputs::{ApiFailure, Got, Workload};
pub use node_local_dns::node_local_dns;
pub use permissions::{questions, rbac, service_account, Question};
pub use proxy::{proxy_answers, proxy_endpoints, proxy_service, Dial, Dials};
pub use shadowing::{coredns_rewrites, coredns_shadowing};
pub use sources::hostnames;

/// Evidence lists longer than this are cut, with a count of the rest.
const MAX_EVIDENCE: usize = 25;

fn cut(lines: Vec<String>) -> Vec<String> {
    if lines.len() <= MAX_EVIDENCE {
        return lines;
    }
    let more = lines.len() - MAX_EVIDENCE;
    let mut lines = lines;
    lines.truncate(MAX_EVIDENCE);
    lines.push(format!("... and {more} more"));
    lines
}

fn ns_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_count() {
        let lines: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        let c = cut(lines);
        assert_eq!(c.len(), MAX_EVIDENCE + 1);
        assert_eq!(c.last().unwrap(), "... and 5 more");
    }
}
