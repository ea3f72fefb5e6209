//! Benchmark of the controller's first sync at scale: a mock API serves a list of N Ingresses
//! (3 TLS hosts each, default 10,000; paginated by the watcher's `limit` as the API server
//! does) and a stock Corefile; the controller runs in-process
//! (`controller::run_with`, coredns mode, no lease). Prints the time from the Ingress list
//! being answered to the first write of the Corefile, and the process RSS after that sync.
//! Run by `bench/controller/run.sh` (release build).
//!
//! Usage: controller_bench [N]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

#[path = "../tests/it/kube_mock.rs"]
mod kube_mock;
use kube_mock::{list, route, status, Answer};

use ouroboros::controller::{run_with, ControllerArgs};

const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

#[derive(Parser)]
struct T {
    #[command(flatten)]
    c: ControllerArgs,
}

fn ingress(i: usize) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": format!("app-{i}"),
            "namespace": format!("team-{}", i % 50),
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "generation": 1,
            "creationTimestamp": "2026-11-30T08:12:44Z",
            "labels": {"app.kubernetes.io/name": format!("app-{i}"), "team": format!("team-{}", i % 50)},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"Ingress\",\"metadata\":{},\"spec\":{}}",
                "cert-manager.io/cluster-issuer": "letsencrypt"
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "networking.k8s.io/v1", "time": "2026-11-30T08:12:44Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:ingressClassName": {}, "f:rules": {}, "f:tls": {}}}
            }]
        },
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{
                "hosts": [
                    format!("app-{i}.example.com"),
                    format!("www.app-{i}.example.com"),
                    format!("api.app-{i}.example.com")
                ],
                "secretName": format!("app-{i}-tls")
            }],
            "rules": [{
                "host": format!("app-{i}.example.com"),
                "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": format!("app-{i}"), "port": {"number": 80}}}}]}
            }]
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    })
}

fn query<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    let q = uri.split_once('?')?.1;
    q.split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Times {
    list_started: Option<Instant>,
    list_answered: Option<Instant>,
    first_put: Option<Instant>,
    put_bytes: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000);
    let rss_start = rss_kib("VmRSS:");

    let times = Arc::new(Mutex::new(Times::default()));
    let t = times.clone();
    let (client, _api) = route(move |s| {
        let (m, u) = (s.method.as_str(), s.uri.as_str());
        if u.contains("watch=true") {
            return Answer::Hold;
        }
        match m {
            "GET" if u.starts_with("/apis/networking.k8s.io/v1/ingresses?") => {
                // Paginated like the API server: `limit` per page, the offset as continue token.
                let limit: usize = query(u, "limit").and_then(|v| v.parse().ok()).unwrap_or(n);
                let from: usize = query(u, "continue")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let to = (from + limit).min(n);
                if from == 0 {
                    t.lock().unwrap().list_started = Some(Instant::now());
                }
                let items: Vec<Value> = (from..to).map(ingress).collect();
                let mut page = list("networking.k8s.io/v1", "IngressList", "5000", items);
                if to < n {
                    page["metadata"]["continue"] = json!(to.to_string());
                } else {
                    t.lock().unwrap().list_answered = Some(Instant::now());
                }
                Answer::Json(200, page)
            }
            "GET" if u.starts_with("/api/v1/namespaces/kube-system/configmaps?") => {
                Answer::Json(200, list("v1", "ConfigMapList", "1", vec![]))
            }
            "GET" if u == "/api/v1/namespaces/kube-system/configmaps/coredns" => Answer::Json(
                200,
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns", "namespace": "kube-system", "resourceVersion": "1"},
                    "data": {"Corefile": COREFILE}
                }),
            ),
            "PUT" => {
                let mut t = t.lock().unwrap();
                if t.first_put.is_none() {
                    t.first_put = Some(Instant::now());
                    t.put_bytes = s.body.as_ref().map(|b| b.to_string().len()).unwrap_or(0);
                }
                Answer::Json(200, s.body.clone().unwrap())
            }
            _ => Answer::Json(404, status(404, "NotFound", "not found")),
        }
    });

    let args = T::try_parse_from([
        "bench",
        "--leader-elect=false",
        "--cluster-domain",
        "cluster.local",
        // The template answers' address, so the run needs no proxy Service.
        "--proxy-ip",
        "10.96.0.53",
        "--listen-health",
        "",
    ])?
    .c;
    let stop = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(run_with(client, args, stop.clone()));
    let deadline = started + Duration::from_secs(120);
    loop {
        if times.lock().unwrap().first_put.is_some() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Let the write's response be handled, then measure the settled process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_kib("VmRSS:");
    let hwm = rss_kib("VmHWM:");
    stop.cancel();
    task.await??;

    let t = times.lock().unwrap();
    let (Some(start), Some(list), Some(put)) = (t.list_started, t.list_answered, t.first_put)
    else {
        anyhow::bail!("no write within 120 s");
    };
    let ms = put.duration_since(list).as_secs_f64() * 1000.0;
    println!("ingresses: {n} ({} hostnames)", n * 3);
    println!(
        "first list page requested -> first write: {:.0} ms",
        put.duration_since(start).as_secs_f64() * 1000.0
    );
    println!(
        "last list page answered -> first write: {ms:.0} ms (target < 2000 ms: {})",
        if ms < 2000.0 { "met" } else { "MISSED" }
    );
    println!(
        "RSS after sync: {:.1} MiB (target < 64 MiB: {}); peak {:.1} MiB; at start {:.1} MiB",
        rss_after as f64 / 1024.0,
        if rss_after < 64 * 1024 {
            "met"
        } else {
            "MISSED"
        },
        hwm as f64 / 1024.0,
        rss_start as f64 / 1024.0
    );
    println!("Corefile write: {} KiB", t.put_bytes / 1024);
    Ok(())
}
