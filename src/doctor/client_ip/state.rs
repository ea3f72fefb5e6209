//! PURE: what `doctor client-ip` reads from the objects it watches: whether a Pod is ready or
//! done, its state in words (for a timeout's message), and the addresses the verdict compares.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::Ingress;

/// Whether the Pod's `Ready` condition is `True`.
pub fn ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.0 == "True")
}

/// The phase of a Pod that has ended (`Succeeded` or `Failed`).
pub fn ended(pod: &Pod) -> Option<&str> {
    let phase = pod.status.as_ref()?.phase.as_deref()?;
    matches!(phase, "Succeeded" | "Failed").then_some(phase)
}

fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<(&'a str, Option<&'a str>, Option<&'a str>)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind)?;
    Some((c.status.as_str(), c.reason.as_deref(), c.message.as_deref()))
}

/// The Pod's state in words: its phase, whether it was scheduled, and why its containers wait.
pub fn describe(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("unknown");
    let mut out = format!("phase {phase}");
    match condition(pod, "PodScheduled") {
        None if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none() =>
        {
            out.push_str(", not scheduled to a node");
        }
        Some(("False", reason, message)) => {
            out.push_str(&format!(
                ", not scheduled ({}{})",
                reason.unwrap_or("no reason given"),
                message.map(|m| format!(": {m}")).unwrap_or_default()
            ));
        }
        _ => {}
    }
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            Some(format!(
                "container {} waiting: {}{}",
                c.name,
                w.reason.as_deref().unwrap_or("no reason given"),
                w.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ))
        });
    for w in waiting {
        out.push_str(", ");
        out.push_str(&w);
    }
    out
}

/// The Pod's addresses (`status.podIPs`, else `status.podIP`).
pub fn pod_ips(pod: &Pod) -> Vec<IpAddr> {
    let Some(s) = pod.status.as_ref() else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = s
        .pod_ips
        .iter()
        .flatten()
        .filter_map(|p| p.ip.parse().ok())
        .collect();
    if ips.is_empty() {
        ips.extend(s.pod_ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok()));
    }
    ips
}

/// Every node's InternalIP and ExternalIP.
pub fn node_ips(nodes: &[Node]) -> Vec<IpAddr> {
    nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// The load-balancer addresses the Ingress reports (`status.loadBalancer.ingress[].ip`).
pub fn load_balancer_ips(ingress: &Ingress) -> Vec<IpAddr> {
    ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// The hosts of an Ingress's rules, in order (wildcards left out: they cannot be called).
pub fn ingress_hosts(ingress: &Ingress) -> Vec<String> {
    ingress
        .spec
        .as_ref()
        .and_then(|s| s.rules.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|r| r.host.clone())
        .filter(|h| !h.starts_with("*."))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": status}),
        )
        .unwrap()
    }

    #[test]
    fn readiness_and_end() {
        for (status, is_ready, end) in [
            (json!({}), false, None),
            (json!({"phase": "Pending"}), false, None),
            (
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
                false,
                None,
            ),
            (
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                true,
                None,
            ),
            (json!({"phase": "Succeeded"}), false, Some("Succeeded")),
            (json!({"phase": "Failed"}), false, Some("Failed")),
        ] {
            let p = pod(status.clone());
            assert_eq!((ready(&p), ended(&p)), (is_ready, end), "{status}");
        }
    }

    #[test]
    fn states_in_words() {
        for (status, want) in [
            (json!({"phase": "Pending"}), "phase Pending, not scheduled to a node"),
            (
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
                "phase Pending, not scheduled (Unschedulable: 0/3 nodes are available)",
            ),
            (
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "whoami", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
                    "message": "Back-off pulling image"}}}]}),
                "phase Pending, container whoami waiting: ImagePullBackOff (Back-off pulling image)",
            ),
            (json!({}), "phase unknown, not scheduled to a node"),
        ] {
            assert_eq!(describe(&pod(status.clone())), want, "{status}");
        }
    }

    #[test]
    fn addresses() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let p = pod(
            json!({"podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00::7"}]}),
        );
        assert_eq!(pod_ips(&p), [ip("10.244.1.7"), ip("fd00::7")]);
        assert_eq!(
            pod_ips(&pod(json!({"podIP": "10.244.1.8"}))),
            [ip("10.244.1.8")]
        );
        assert!(pod_ips(&pod(json!({}))).is_empty());
        let nodes: Vec<Node> = serde_json::from_value(json!([
            {"metadata": {"name": "a"}, "status": {"addresses": [
                {"type": "InternalIP", "address": "192.168.1.11"},
                {"type": "Hostname", "address": "a"},
                {"type": "ExternalIP", "address": "198.51.100.11"}]}},
            {"metadata": {"name": "b"}}
        ]))
        .unwrap();
        assert_eq!(node_ips(&nodes), [ip("192.168.1.11"), ip("198.51.100.11")]);
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "i"},
            "spec": {"rules": [{"host": "*.apps.example.com"}, {"host": "a.example.com"}, {}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}, {"hostname": "lb.example.com"}]}}
        }))
        .unwrap();
        assert_eq!(load_balancer_ips(&ing), [ip("203.0.113.10")]);
        assert_eq!(ingress_hosts(&ing), ["a.example.com"]);
    }
}
