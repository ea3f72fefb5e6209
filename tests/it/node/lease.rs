//! Two controller replicas on the real node: the Lease holder's pod deleted, the other takes
//! over within the lease duration, and the ConfigMap is not written again (its content is
//! already right, so the new holder's first sync changes nothing).

use std::time::{Duration, Instant};

use super::hairpin::{coredns_configmap, corefile, restricted_namespace, Flavor, Setup};
use super::PodSync;

/// The Lease's holder and its duration in seconds (both absent once a holder released it).
fn lease(node: &super::Node) -> (String, Option<u64>) {
    let out = node.kubectl_ok(&[
        "get",
        "lease",
        "-n",
        "ouroboros",
        "ouroboros-controller",
        "-o",
        "json",
    ]);
    let lease: serde_json::Value = serde_json::from_str(&out).unwrap();
    (
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        lease["spec"]["leaseDurationSeconds"].as_u64(),
    )
}

fn configmap_version(node: &super::Node) -> String {
    coredns_configmap(node, "{.metadata.resourceVersion}")
}

#[test]
fn the_other_replica_takes_the_lease_when_the_leaders_pod_is_deleted_and_writes_nothing_twice() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    restricted_namespace(node);
    // Debug logs of the lease machinery: what a failed takeover shows.
    setup.helm(&[
        "install",
        "--set",
        "controller.replicas=2",
        "--set",
        "logLevel=info\\,ouroboros::controller::lease=debug\\,kube_lease_manager=debug",
    ]);
    setup.wait_fixed(Duration::from_secs(240));
    let written = corefile(node);
    let version = configmap_version(node);
    let (leader, duration) = lease(node);
    let duration = duration.expect("the holder's Lease has a duration");
    let pods = node.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        "ouroboros",
        "-l",
        "app.kubernetes.io/component=controller",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    let pods: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(pods.len(), 2, "two controller pods: {pods:?}");
    let leader_pod = pods
        .iter()
        .find(|p| leader.starts_with(*p))
        .unwrap_or_else(|| panic!("the Lease holder {leader:?} is none of {pods:?}"));
    let standby = pods.iter().find(|p| *p != leader_pod).unwrap();

    let deleted = Instant::now();
    node.kubectl_ok(&[
        "delete",
        "pod",
        "-n",
        "ouroboros",
        leader_pod,
        "--wait=false",
    ]);
    // The standby, or the pod the ReplicaSet starts in the deleted one's place (it campaigns
    // at once, while the standby looks every few seconds): either is a takeover.
    let holder = loop {
        let (holder, _) = lease(node);
        if !holder.is_empty() && !holder.starts_with(leader_pod) {
            break holder;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(duration + 15),
            "the Lease still names {holder:?} {:?} after the leader's pod was deleted (lease \
             duration {duration} s)\n{}",
            deleted.elapsed(),
            node.diagnose()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let took = deleted.elapsed();
    let who = if holder.starts_with(standby) {
        "the standby"
    } else {
        "the replacement pod"
    };
    eprintln!("node: {who} holds the Lease {took:.1?} after the delete");
    assert!(
        took <= Duration::from_secs(duration),
        "takeover in {took:?}, over the lease duration {duration} s"
    );
    // The new holder syncs (debounce, then the write it would make): nothing to change.
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(corefile(node), written, "the block is the same");
    assert_eq!(
        configmap_version(node),
        version,
        "the ConfigMap was written again by the new holder"
    );
    setup.wait_fixed(Duration::from_secs(30));
    setup.helm(&["uninstall"]);
    assert_eq!(
        corefile(node),
        setup.corefile,
        "the Corefile after uninstall"
    );
}
