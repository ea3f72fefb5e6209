//! The checks: fetched objects in, [`Check`](super::report::Check)s out. Pure: the fetch layer
//! (`fetch.rs`) reads the cluster, these only judge what it read, so each verdict has a table
//! test beside it.
//!
//! One module per thing the checks are about, each the one path to its checks
//! (`doctor::checks::ingress::ip_mode`); this one holds the evidence helpers they share.
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

pub mod answer;
pub mod coredns;
pub mod coredns_version;
pub mod crd;
#[cfg(test)]
mod fixtures;
pub mod ingress;
pub mod inputs;
pub mod node_local_dns;
pub mod permissions;
pub mod proxy;
pub mod shadowing;
pub mod sources;

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
