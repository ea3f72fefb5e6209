//! The other DNS modes through the chart's values, on the real node: coredns-import on k3s's
//! CoreDNS layout (and an upgrade to it from coredns that leaves no stale block), etc-hosts (the
//! DaemonSet writes the node's own hosts file), external-dns (DNSEndpoint objects).

use std::time::Duration;

use super::hairpin::{corefile, proxy_cluster_ip, restricted_namespace, Flavor, Setup, HOST};
use super::{eventually, Node, PodSync};

/// The value of `key` in ConfigMap `kube-system/name`, or "" when the ConfigMap or key is absent.
fn configmap_key(node: &Node, name: &str, key: &str) -> String {
    let out = node.kubectl(&[
        "get",
        "configmap",
        "-n",
        "kube-system",
        name,
        "-o",
        &format!("jsonpath={{.data.{}}}", key.replace('.', "\\.")),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn coredns_import_on_k3s_and_the_upgrade_from_coredns_leave_no_stale_block() {
    let Some(setup) = Setup::start(Flavor::K3s, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    restricted_namespace(node);
    setup.helm(&["install"]);
    setup.wait_fixed(Duration::from_secs(240));
    assert_ne!(
        corefile(node),
        setup.corefile,
        "coredns mode edits the Corefile"
    );

    // The switch: the Corefile returns to k3s's own, byte for byte, and the snippet is written
    // to the coredns-custom ConfigMap k3s's CoreDNS imports.
    setup.helm(&[
        "upgrade",
        "--reuse-values",
        "--set",
        "controller.mode=coredns-import",
    ]);
    eventually(
        node,
        "the Corefile back to k3s's",
        Duration::from_secs(60),
        || corefile(node) == setup.corefile,
    );
    // (The snippet names the host as a regular expression, its dots escaped.)
    eventually(
        node,
        "the import snippet written",
        Duration::from_secs(60),
        || configmap_key(node, "coredns-custom", "ouroboros.override").contains("example"),
    );
    setup.wait_fixed(Duration::from_secs(240));

    setup.helm(&["uninstall"]);
    assert_eq!(
        corefile(node),
        setup.corefile,
        "the Corefile after uninstall"
    );
    assert_eq!(
        configmap_key(node, "coredns-custom", "ouroboros.override"),
        "",
        "the snippet after uninstall"
    );
    setup.assert_nothing_left();
}

#[test]
fn etc_hosts_daemonset_writes_the_nodes_own_hosts_file_and_not_the_machines() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    let machine_hosts = std::fs::read("/etc/hosts").unwrap();
    let node_hosts = node.dir.join("hosts");
    // The etc-hosts pods run as root with the node's file mounted: the exception to
    // `restricted` (docs/install.md, Security), so the namespace is not labelled here.
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ouroboros"}})
        .to_string(),
    );
    setup.helm(&["install", "--set", "etcHosts.enabled=true"]);
    let proxy_ip = proxy_cluster_ip(node);
    eventually(
        node,
        "the node's hosts file has the name",
        Duration::from_secs(60),
        || {
            let hosts = std::fs::read_to_string(&node_hosts).unwrap_or_default();
            hosts
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [proxy_ip.as_str(), HOST])
        },
    );
    assert!(
        std::fs::read_to_string(&node_hosts)
            .unwrap()
            .starts_with(super::HOSTS),
        "the node's own lines are kept"
    );
    assert_eq!(
        std::fs::read("/etc/hosts").unwrap(),
        machine_hosts,
        "the machine's /etc/hosts is untouched"
    );
    assert_eq!(
        corefile(node),
        setup.corefile,
        "etc-hosts alone leaves CoreDNS alone"
    );

    setup.helm(&["uninstall"]);
    eventually(
        node,
        "the node's hosts file restored",
        Duration::from_secs(60),
        || std::fs::read_to_string(&node_hosts).unwrap_or_default() == super::HOSTS,
    );
    setup.assert_nothing_left();
}

#[test]
fn external_dns_mode_publishes_dnsendpoints_with_the_real_crd() {
    let Some(crds) = crate::peers::binary("crds/external-dns") else {
        return;
    };
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    for f in std::fs::read_dir(&crds).unwrap() {
        let path = f.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            node.kubectl_ok(&["apply", "--server-side", "-f", &path.display().to_string()]);
        }
    }
    node.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/dnsendpoints.externaldns.k8s.io",
        "--timeout=60s",
    ]);
    restricted_namespace(node);
    setup.helm(&["install", "--set", "controller.mode=external-dns"]);
    let proxy_ip = proxy_cluster_ip(node);
    eventually(
        node,
        "a DNSEndpoint for the name",
        Duration::from_secs(60),
        || {
            let out = node.kubectl(&["get", "dnsendpoints", "-A", "-o", "json"]);
            let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            list["items"].as_array().is_some_and(|items| {
                items
                    .iter()
                    .flat_map(|i| {
                        i["spec"]["endpoints"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .any(|e| {
                        e["dnsName"] == HOST
                            && e["targets"]
                                .as_array()
                                .is_some_and(|t| t.iter().any(|t| t == proxy_ip.as_str()))
                    })
            })
        },
    );
    assert_eq!(
        corefile(node),
        setup.corefile,
        "external-dns mode leaves CoreDNS alone"
    );
    setup.helm(&["uninstall"]);
    eventually(node, "no DNSEndpoint left", Duration::from_secs(60), || {
        node.kubectl_ok(&["get", "dnsendpoints", "-A", "-o", "name"])
            .trim()
            .is_empty()
    });
    setup.assert_nothing_left();
}
