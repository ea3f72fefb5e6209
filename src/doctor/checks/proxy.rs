//! The proxy: its Service exists, has ready endpoints, and accepts TCP connections (the dials
//! themselves are made by the caller, and only inside a cluster). Separate: these judge where the
//! hairpinned names lead, whatever the DNS mode.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::inputs::Got;
use crate::dns::ConfigMapKey;
use crate::doctor::report::Check;

pub fn proxy_service(namespace: &str, name: &str, got: &Got<Service>) -> Check {
    const ID: &str = "proxy-service";
    match got {
        Err(e) => e.check(ID),
        Ok(None) => Check::fail(ID, format!("Service {namespace}/{name} not found")).action(
            "install the proxy (the chart does), or point --proxy-service-name and \
             --proxy-service-namespace at it",
        ),
        Ok(Some(svc)) => {
            let spec = svc.spec.as_ref();
            let ips = spec
                .and_then(|s| s.cluster_ips.clone())
                .or_else(|| spec.and_then(|s| s.cluster_ip.clone()).map(|i| vec![i]))
                .unwrap_or_default();
            let ports: Vec<String> = spec
                .and_then(|s| s.ports.as_ref())
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")))
                .collect();
            Check::ok(ID, format!("Service {namespace}/{name} exists"))
                .evidence(format!("clusterIPs: {}", ips.join(", ")))
                .evidence(format!("ports: {}", ports.join(", ")))
        }
    }
}

/// Our block still in the Corefile at `block_in` while the proxy Service it answers with is
/// gone: what removing ouroboros without its uninstall hook leaves (`kubectl delete namespace`,
/// `helm uninstall --no-hooks`, a GitOps prune). Every pod's request to a hairpinned name then
/// fails. `None` unless both hold.
pub fn orphaned_block(
    block_in: Option<&ConfigMapKey>,
    (namespace, name, got): (&str, &str, &Got<Service>),
) -> Option<Check> {
    let target = block_in?;
    if !matches!(got, Ok(None)) {
        return None;
    }
    Some(
        Check::fail(
            "orphaned-block",
            format!(
                "our block in {target} answers the hairpinned names with the proxy Service \
                 {namespace}/{name}, which does not exist: every pod's request to those names fails"
            ),
        )
        .action(format!(
            "if ouroboros was removed without its uninstall hook, remove the block: {}; else \
             install the proxy again",
            cleanup_command(target)
        )),
    )
}

/// The one command that removes our block from `target`'s Corefile.
pub fn cleanup_command(target: &ConfigMapKey) -> String {
    format!(
        "ouroboros cleanup --mode coredns --coredns-namespace {} --coredns-configmap {} \
         --coredns-key {}",
        target.namespace, target.name, target.key
    )
}

pub fn proxy_endpoints(namespace: &str, name: &str, got: &Got<Vec<EndpointSlice>>) -> Check {
    const ID: &str = "proxy-endpoints";
    let slices = match got {
        Err(e) => return e.check(ID),
        Ok(s) => s.as_deref().unwrap_or_default(),
    };
    let (mut ready, mut not_ready) = (BTreeSet::new(), BTreeSet::new());
    for ep in slices.iter().flat_map(|s| &s.endpoints) {
        let c = ep.conditions.as_ref();
        let is_ready =
            c.and_then(|c| c.ready) != Some(false) && c.and_then(|c| c.terminating) != Some(true);
        for a in &ep.addresses {
            if is_ready {
                ready.insert(a.clone());
            } else {
                not_ready.insert(a.clone());
            }
        }
    }
    let mut c = if ready.is_empty() {
        Check::fail(
            ID,
            format!(
                "Service {namespace}/{name} has no ready endpoint: hairpinned names lead nowhere"
            ),
        )
        .action(format!(
            "check the proxy pods: kubectl -n {namespace} get pods,endpointslices -l \
             kubernetes.io/service-name={name}; kubectl -n {namespace} describe pods"
        ))
    } else {
        Check::ok(ID, format!("{} ready endpoint(s)", ready.len()))
    };
    c = c.evidence(format!(
        "{} EndpointSlice(s); ready: [{}]; not ready: [{}]",
        slices.len(),
        ready.into_iter().collect::<Vec<_>>().join(", "),
        not_ready.into_iter().collect::<Vec<_>>().join(", ")
    ));
    c
}

/// One TCP dial to the proxy Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dial {
    pub addr: SocketAddr,
    pub result: Result<Duration, String>,
}

/// Why the dial was not made, or its results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dials {
    Skipped(String),
    Done(Vec<Dial>),
}

pub fn proxy_answers(dials: &Dials) -> Check {
    const ID: &str = "proxy-answers";
    let dials = match dials {
        Dials::Skipped(why) => return Check::skip(ID, why.clone()),
        Dials::Done(d) => d,
    };
    if dials.is_empty() {
        return Check::skip(
            ID,
            "the proxy Service has no ClusterIP and TCP port to dial",
        );
    }
    let evidence: Vec<String> = dials
        .iter()
        .map(|d| match &d.result {
            Ok(t) => format!("{}: connected in {} ms", d.addr, t.as_millis()),
            Err(e) => format!("{}: {e}", d.addr),
        })
        .collect();
    if dials.iter().all(|d| d.result.is_ok()) {
        Check::ok(ID, "the proxy Service accepts TCP connections").evidence_all(evidence)
    } else {
        Check::fail(ID, "the proxy Service does not accept TCP connections")
            .evidence_all(evidence)
            .action("check the proxy pods' logs and the Service's ports and targetPorts")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::report::Status;
    use serde_json::json;

    fn slice(eps: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": eps}),
        )
        .unwrap()
    }

    #[test]
    fn endpoint_verdicts() {
        for (eps, want) in [
            (json!([{"addresses": ["10.0.0.1"]}]), Status::Ok),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]),
                Status::Ok,
            ),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]),
                Status::Fail,
            ),
            (
                json!([{"addresses": ["10.0.0.1"], "conditions": {"terminating": true}}]),
                Status::Fail,
            ),
            (json!([]), Status::Fail),
        ] {
            let got = Ok(Some(vec![slice(eps.clone())]));
            assert_eq!(proxy_endpoints("o", "p", &got).status, want, "{eps}");
        }
        assert_eq!(
            proxy_endpoints("o", "p", &Ok(Some(vec![]))).status,
            Status::Fail
        );
    }

    #[test]
    fn dial_verdicts() {
        let a: SocketAddr = "10.96.0.20:8443".parse().unwrap();
        let ok = Dial {
            addr: a,
            result: Ok(Duration::from_millis(3)),
        };
        let bad = Dial {
            addr: a,
            result: Err("connection refused".into()),
        };
        assert_eq!(
            proxy_answers(&Dials::Done(vec![ok.clone()])).status,
            Status::Ok
        );
        assert_eq!(
            proxy_answers(&Dials::Done(vec![ok, bad])).status,
            Status::Fail
        );
        assert_eq!(proxy_answers(&Dials::Done(vec![])).status, Status::Skip);
        assert_eq!(
            proxy_answers(&Dials::Skipped("outside".into())).status,
            Status::Skip
        );
    }

    #[test]
    fn an_orphaned_block_is_a_block_with_no_proxy_service() {
        let target = ConfigMapKey::new("dns", "coredns-main", "Core");
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let cases = [
            (Some(&target), Ok(None), Some(Status::Fail)),
            (Some(&target), Ok(Some(svc.clone())), None),
            (None, Ok(None), None),
            (None, Ok(Some(svc)), None),
        ];
        for (block, got, want) in cases {
            let check = orphaned_block(block, ("o", "p", &got));
            assert_eq!(check.as_ref().map(|c| c.status), want, "{block:?} {got:?}");
        }
        let check = orphaned_block(Some(&target), ("o", "p", &Ok(None))).unwrap();
        assert!(
            check.summary.contains("dns/coredns-main"),
            "{}",
            check.summary
        );
        assert!(check.summary.contains("o/p"), "{}", check.summary);
        let action = check.action.unwrap();
        assert!(action.contains(&cleanup_command(&target)), "{action}");
    }

    /// The command doctor prints is one `cleanup` takes, naming the ConfigMap and key found.
    #[test]
    fn the_printed_cleanup_command_parses() {
        use clap::{Args, FromArgMatches};
        let target = ConfigMapKey::new("dns", "coredns-main", "Core");
        let line = cleanup_command(&target);
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let cmd = crate::cleanup::CleanupArgs::augment_args(clap::Command::new("cleanup"));
        let matches = cmd
            .try_get_matches_from(words)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let args = crate::cleanup::CleanupArgs::from_arg_matches(&matches).unwrap();
        assert_eq!(args.dns.coredns.target(), target);
        assert_eq!(args.dns.shared.mode, crate::dns::Mode::Coredns);
    }
}
