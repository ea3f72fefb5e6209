//! Time-to-hairpin on the real node, with the kubelet's and CoreDNS's default settings: from
//! `kubectl apply` of a new Ingress to the client pod's first successful request through our
//! proxy, and to the moment every CoreDNS replica answers the name with the proxy. A benchmark,
//! not a test (`#[ignore]`): `bench/node/run.sh` runs it and records the samples.
//!
//! The controller's share is its debounce (1 s); the rest is the kubelet projecting the
//! ConfigMap into each CoreDNS pod (on the pod's next periodic sync, `syncFrequency`, 1 minute
//! by default, plus the kubelet's ConfigMap cache) and CoreDNS's `reload` poll (30 s, plus up to
//! 15 s of jitter).

use std::time::{Duration, Instant};

use super::hairpin::{
    client_curl, coredns_pod_ips, proxy_cluster_ip, replica_answers, restricted_namespace, Flavor,
    Setup,
};
use super::Node;
use super::PodSync;

/// `curl http://HOST/` from the client pod: nginx's answer, through our proxy once it works.
fn client_http(node: &Node, host: &str) -> Option<String> {
    client_curl(node, &["--max-time", "2", &format!("http://{host}/")]).ok()
}

fn samples() -> usize {
    std::env::var("OUROBOROS_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// `OUROBOROS_BENCH_TUNED=1`: the settings that shorten it, a kubelet `syncFrequency` of 10 s
/// and CoreDNS's `reload 5s 2s`, instead of the defaults.
fn tuned() -> bool {
    std::env::var("OUROBOROS_BENCH_TUNED").is_ok_and(|v| v == "1")
}

#[test]
#[ignore = "a benchmark: bench/node/run.sh"]
fn time_to_hairpin() {
    let (sync, reload) = if tuned() {
        (PodSync::Fast, Some("reload 5s 2s"))
    } else {
        (PodSync::Default, None)
    };
    let Some(setup) = Setup::start_with_reload(Flavor::Kubeadm, sync, reload) else {
        return;
    };
    println!(
        "settings: kubelet {sync:?} sync, CoreDNS {}",
        reload.unwrap_or("reload (30s, jitter 15s)")
    );
    let node = &setup.node;
    restricted_namespace(node);
    setup.helm(&["install"]);
    setup.wait_fixed(Duration::from_secs(240));
    let want = format!("A {}", proxy_cluster_ip(node));
    let pods = coredns_pod_ips(node);
    println!("sample\thost\tfirst_success_s\tevery_replica_s");
    for i in 1..=samples() {
        let host = format!("s{i}-{}.example.com", std::process::id());
        node.apply(
            &serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": format!("s{i}"), "namespace": "app"},
                "spec": {"ingressClassName": "nginx", "tls": [{"hosts": [host]}],
                  "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]}})
            .to_string(),
        );
        let applied = Instant::now();
        let mut first = None;
        let mut replicas: Vec<Option<Duration>> = vec![None; pods.len()];
        while first.is_none() || replicas.iter().any(Option::is_none) {
            assert!(
                applied.elapsed() < Duration::from_secs(300),
                "{host}: not hairpinned after 300 s\n{}",
                node.diagnose()
            );
            for (pod, seen) in pods.iter().zip(replicas.iter_mut()) {
                if seen.is_none() && replica_answers(node, pod, &host).contains(&want) {
                    *seen = Some(applied.elapsed());
                }
            }
            if first.is_none() {
                if let Some(body) = client_http(node, &host) {
                    assert!(
                        body.starts_with(&format!("client={} ", setup.client_ip)),
                        "{body}"
                    );
                    first = Some(applied.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let every = replicas.iter().flatten().max().unwrap();
        println!(
            "{i}\t{host}\t{:.1}\t{:.1}",
            first.unwrap().as_secs_f64(),
            every.as_secs_f64()
        );
    }
}
