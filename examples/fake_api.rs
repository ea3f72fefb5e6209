//! The controller benchmark's fake API server and driver (run by `bench/controller/run.sh`).
//!
//! Serves, over plain HTTP (`test_api::http`, the suite's one fake API), N Ingresses with 3
//! TLS hosts each and the fields a real cluster gives them (labels, annotations with kubectl's
//! last-applied-configuration, managedFields, rules with http paths, a load-balancer status),
//! paginated by `limit`/`continue` as the API server does; holds watches open; serves the
//! CoreDNS ConfigMap and stores what is PUT into it (refusing data over 1 MiB with a 422, as the
//! API server does), and echoes it on the ConfigMap's watch.
//!
//! The controller runs as its own process, started by run.sh, which writes its PID into
//! `DIR/controller.pid`; this program samples that process's `/proc/PID/status` (VmRSS,
//! VmHWM), so every memory figure is the controller's alone. Phases, timed here from what the
//! server sees:
//! 1. sync: from the last list page served to the first Corefile write (PUT; in a mode whose
//!    write is refused before it is sent, to the sink's read of the ConfigMap), then RSS after
//!    the sync has settled and the peak (VmHWM);
//! 2. no change: a resync period passes and the Ingress watch is ended with 410 Gone (a full
//!    relist of the same objects): no PUT may follow;
//! 3. churn: each round changes one TLS host of 1 % of the Ingresses (MODIFIED events on the
//!    watch), waits for the write, and reports RSS.
//!
//! Host names are `diverse` by default (a hash-like label per Ingress, as real names differ);
//! `--names counted` gives `app-1.example.com` ... `app-9999.example.com`, which the CoreDNS
//! template's regex folds into a few hundred bytes.
//!
//! Usage: fake_api DIR [--ingresses N] [--rounds R] [--round-ms MS] [--resync-s S]
//! [--names diverse|counted]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../tests/it/kube_mock.rs"]
mod kube_mock;
use kube_mock::{list, status, Answer, Routed};

const COREFILE: &str = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";
const INGRESSES: &str = "/apis/networking.k8s.io/v1/ingresses";
const COREDNS: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps?";
/// The API server's limit on a ConfigMap's data.
const MAX_DATA: usize = 1 << 20;

/// A name part that differs from one Ingress to the next as real names do, so the CoreDNS
/// template's regex cannot fold them the way it folds `app-1` ... `app-9999`.
fn word(i: usize) -> String {
    let h = (i as u64 ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    format!("{:x}", (h >> 24) & 0xff_ffff_ffff)
}

/// Whether host names differ as real ones do ([`word`]) or only by a counter (`app-17`).
static DIVERSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// One Ingress as a cluster would serve it. `gen` renames its third host (churn).
fn ingress(i: usize, gen: u32, rv: u64) -> Value {
    let (name, ns) = (format!("app-{i}"), format!("team-{}", i % 50));
    let base = if DIVERSE.load(std::sync::atomic::Ordering::Relaxed) {
        format!("{}.{ns}.example.com", word(i))
    } else {
        format!("app-{i}.example.com")
    };
    let hosts = [
        base.clone(),
        format!("www.{base}"),
        if gen == 0 {
            format!("api.{base}")
        } else {
            format!("api-{gen}.{base}")
        },
    ];
    let labels = json!({
        "app.kubernetes.io/name": name, "app.kubernetes.io/instance": format!("{name}-prod"),
        "app.kubernetes.io/part-of": ns, "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": "web-4.2.1"
    });
    let paths = |svc: &str| {
        json!({"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": svc, "port": {"name": "http"}}}},
            {"path": "/api", "pathType": "Prefix",
             "backend": {"service": {"name": format!("{svc}-api"), "port": {"number": 8080}}}}
        ]})
    };
    let spec = json!({
        "ingressClassName": "nginx",
        "tls": [{"hosts": hosts, "secretName": format!("{name}-tls")}],
        "rules": hosts.iter().map(|h| json!({"host": h, "http": paths(&name)})).collect::<Vec<_>>()
    });
    let mut annotations = json!({
        "cert-manager.io/cluster-issuer": "letsencrypt-prod",
        "nginx.ingress.kubernetes.io/proxy-body-size": "16m",
        "nginx.ingress.kubernetes.io/ssl-redirect": "true",
        "meta.helm.sh/release-name": format!("{name}-prod"),
        "meta.helm.sh/release-namespace": ns
    });
    // kubectl keeps the whole applied object in this annotation.
    let applied = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
        "spec": spec
    });
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json!(applied.to_string());
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name, "namespace": ns,
            "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"),
            "resourceVersion": rv.to_string(),
            "generation": 1 + gen,
            "creationTimestamp": "2026-11-30T08:12:44Z",
            "labels": labels,
            "annotations": annotations,
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update",
                 "apiVersion": "networking.k8s.io/v1", "time": "2026-11-30T08:12:44Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {
                    "f:metadata": {"f:annotations": {".": {}, "f:cert-manager.io/cluster-issuer": {},
                        "f:kubectl.kubernetes.io/last-applied-configuration": {},
                        "f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {},
                        "f:nginx.ingress.kubernetes.io/proxy-body-size": {},
                        "f:nginx.ingress.kubernetes.io/ssl-redirect": {}},
                        "f:labels": {".": {}, "f:app.kubernetes.io/instance": {},
                        "f:app.kubernetes.io/managed-by": {}, "f:app.kubernetes.io/name": {},
                        "f:app.kubernetes.io/part-of": {}, "f:helm.sh/chart": {}}},
                    "f:spec": {"f:ingressClassName": {}, "f:rules": {}, "f:tls": {}}}},
                {"manager": "nginx-ingress-controller", "operation": "Update",
                 "apiVersion": "networking.k8s.io/v1", "time": "2026-11-30T08:13:02Z",
                 "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:loadBalancer": {"f:ingress": {}}}}}
            ]
        },
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    })
}

fn query<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    let q = uri.split_once('?')?.1;
    q.split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// What the server has seen, for the driver.
#[derive(Default)]
struct State {
    n: usize,
    /// Per Ingress: its churn generation and resourceVersion.
    gens: Vec<(u32, u64)>,
    rv: u64,
    corefile: String,
    corefile_rv: u64,
    last_page: Option<Instant>,
    pages: usize,
    puts: usize,
    refused: usize,
    first_put: Option<Instant>,
    /// GETs of the coredns ConfigMap: each sync that reaches the sink reads it first.
    gets: usize,
    first_get_after_list: Option<Instant>,
    put_bytes: usize,
    unknown: Vec<String>,
}

impl State {
    fn configmap(&self) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system",
                         "uid": "c0de0000-0000-4000-8000-000000000001",
                         "resourceVersion": self.corefile_rv.to_string()},
            "data": {"Corefile": self.corefile}
        })
    }
}

fn handle(st: &Mutex<State>, routed: &OnceLock<Routed>, s: &kube_mock::Seen) -> Answer {
    let (m, u) = (s.method.as_str(), s.uri.as_str());
    if s.is_watch() {
        return Answer::Hold;
    }
    let mut st = st.lock().unwrap();
    match (m, s.path()) {
        ("GET", INGRESSES) => {
            // Paginated like the API server: `limit` per page, the offset as continue token.
            let n = st.n;
            let limit: usize = query(u, "limit").and_then(|v| v.parse().ok()).unwrap_or(n);
            let from: usize = query(u, "continue")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let to = (from + limit).min(n);
            let items = (from..to)
                .map(|i| ingress(i, st.gens[i].0, st.gens[i].1))
                .collect();
            let mut page = list(
                "networking.k8s.io/v1",
                "IngressList",
                &st.rv.to_string(),
                items,
            );
            st.pages += 1;
            if to < n {
                page["metadata"]["continue"] = json!(to.to_string());
            } else {
                st.last_page = Some(Instant::now());
            }
            Answer::Json(200, page)
        }
        ("GET", "/api/v1/namespaces/kube-system/configmaps") if u.starts_with(CONFIGMAPS) => {
            let cm = st.configmap();
            Answer::Json(
                200,
                list("v1", "ConfigMapList", &st.corefile_rv.to_string(), vec![cm]),
            )
        }
        ("GET", COREDNS) => {
            st.gets += 1;
            if st.first_get_after_list.is_none() && st.last_page.is_some() {
                st.first_get_after_list = Some(Instant::now());
            }
            Answer::Json(200, st.configmap())
        }
        ("PUT", COREDNS) => {
            let body = s.body.clone().expect("a PUT has a body");
            let text = body["data"]["Corefile"].as_str().unwrap_or_default();
            if text.len() > MAX_DATA {
                st.refused += 1;
                return Answer::Json(
                    422,
                    status(
                        422,
                        "Invalid",
                        "ConfigMap \"coredns\" is invalid: []: Too long: must have at most \
                         1048576 bytes",
                    ),
                );
            }
            st.puts += 1;
            if st.first_put.is_none() {
                st.first_put = Some(Instant::now());
                st.put_bytes = text.len();
            }
            st.corefile = text.to_string();
            st.corefile_rv += 1;
            let cm = st.configmap();
            // The ConfigMap's watchers (the controller's revert watch) see the write.
            if let Some(r) = routed.get() {
                r.release(
                    "configmaps?",
                    &[json!({"type": "MODIFIED", "object": cm.clone()})],
                );
            }
            Answer::Json(200, cm)
        }
        ("POST", p) if p.ends_with("/events") => {
            Answer::Json(201, s.body.clone().unwrap_or_default())
        }
        ("PATCH", p) if p.contains("/events/") => {
            Answer::Json(200, s.body.clone().unwrap_or_default())
        }
        _ => {
            st.unknown.push(format!("{m} {u}"));
            Answer::Json(404, status(404, "NotFound", "not found"))
        }
    }
}

/// (VmRSS, VmHWM) of `pid` in KiB.
fn mem(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |f: &str| {
        s.lines()
            .find(|l| l.starts_with(f))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark script: its phases in order, each reading the last one's numbers; to be split into phases (issue #29)"
)]
fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: fake_api DIR [--ingresses N]"));
    let (mut n, mut rounds, mut round_ms, mut resync_s) = (10_000usize, 30usize, 2500u64, 5u64);
    while let Some(a) = args.next() {
        let v = args.next().expect("a value");
        if a == "--names" {
            let diverse = match v.as_str() {
                "diverse" => true,
                "counted" => false,
                _ => anyhow::bail!("--names diverse|counted"),
            };
            DIVERSE.store(diverse, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        let v: u64 = v.parse()?;
        match a.as_str() {
            "--ingresses" => n = v as usize,
            "--rounds" => rounds = v as usize,
            "--round-ms" => round_ms = v,
            "--resync-s" => resync_s = v,
            _ => anyhow::bail!("unknown flag {a}"),
        }
    }
    let st = Arc::new(Mutex::new(State {
        n,
        gens: (0..n).map(|i| (0, 1000 + i as u64)).collect(),
        rv: 1000 + n as u64,
        corefile: COREFILE.to_string(),
        corefile_rv: 1,
        ..State::default()
    }));
    let cell: Arc<OnceLock<Routed>> = Arc::default();
    let (api, routed) = {
        let (st, cell) = (st.clone(), cell.clone());
        kube_mock::http(move |s| handle(&st, &cell, s))
    };
    let _ = cell.set(routed.clone());
    api.kubeconfig(&dir);
    std::fs::write(dir.join("ready"), "")?;

    // run.sh starts the controller now and writes its PID.
    let pid_file = dir.join("controller.pid");
    assert!(
        wait_until(60, || pid_file.exists()),
        "no controller.pid within 60 s"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();

    // 1. The first sync.
    let synced = wait_until(120, || {
        let s = st.lock().unwrap();
        s.first_put.is_some()
            || (s.first_get_after_list.is_some() && s.refused == 0 && {
                // A write refused before it is sent: only the read is seen.
                s.last_page
                    .is_some_and(|t| t.elapsed() > Duration::from_secs(10))
            })
    });
    anyhow::ensure!(
        synced && alive(),
        "the controller did not sync within 120 s"
    );
    // Settle: the write's response handled, the revert watch updated.
    std::thread::sleep(Duration::from_millis(1500));
    let (rss_sync, hwm_sync) = mem(pid);
    let (first_write, sink_read, put_bytes, pages) = {
        let s = st.lock().unwrap();
        let last = s.last_page.expect("listed");
        let ms = |t: Option<Instant>| t.map(|t| t.duration_since(last).as_secs_f64() * 1000.0);
        (
            ms(s.first_put),
            ms(s.first_get_after_list),
            s.put_bytes,
            s.pages,
        )
    };

    // 2. No change: a resync, then a relist of the same objects (410 on the watch).
    let (puts0, gets0) = {
        let s = st.lock().unwrap();
        (s.puts, s.gets)
    };
    std::thread::sleep(Duration::from_secs(resync_s + 1));
    let released = routed.release(
        "ingresses?",
        &[json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")})],
    );
    anyhow::ensure!(released == 1, "no held Ingress watch to end ({released})");
    let pages_before = pages;
    assert!(
        wait_until(60, || st.lock().unwrap().pages >= pages_before * 2),
        "no relist"
    );
    std::thread::sleep(Duration::from_secs(3));
    let (resync_puts, resync_gets) = {
        let s = st.lock().unwrap();
        (s.puts - puts0, s.gets - gets0)
    };
    let (rss_relist, hwm_relist) = mem(pid);

    // 3. Churn: 1 % of the Ingresses per round.
    let per_round = (n / 100).max(1);
    let mut churn = Vec::new();
    for r in 0..rounds {
        let events: Vec<Value> = {
            let mut s = st.lock().unwrap();
            (0..per_round)
                .map(|k| {
                    let i = (r * per_round + k * 97) % n;
                    s.rv += 1;
                    let rv = s.rv;
                    s.gens[i].0 += 1;
                    s.gens[i].1 = rv;
                    json!({"type": "MODIFIED", "object": ingress(i, s.gens[i].0, rv)})
                })
                .collect()
        };
        let (puts, gets) = {
            let s = st.lock().unwrap();
            (s.puts, s.gets)
        };
        assert!(
            wait_until(10, || routed.release("ingresses?", &events) == 1),
            "no held Ingress watch in round {r}"
        );
        // Written (or, refused before sending, read by the sink) within the round.
        let end = Instant::now() + Duration::from_millis(round_ms);
        let wrote = wait_until(round_ms / 1000 + 10, || {
            let s = st.lock().unwrap();
            s.puts > puts || s.gets > gets
        });
        let now = Instant::now();
        if now < end {
            std::thread::sleep(end - now);
        }
        let (rss, hwm) = mem(pid);
        churn.push((rss, hwm, wrote));
    }
    anyhow::ensure!(alive(), "the controller exited");

    let s = st.lock().unwrap();
    println!(
        "ingresses: {n} ({} TLS hosts), list pages served: {pages}",
        n * 3
    );
    match first_write {
        Some(ms) => println!(
            "last list page -> first Corefile write (PUT): {ms:.0} ms ({put_bytes} bytes Corefile)"
        ),
        None => println!("no PUT: the write was refused before it was sent"),
    }
    if let Some(ms) = sink_read {
        println!("last list page -> the sink's read of the ConfigMap: {ms:.0} ms");
    }
    println!(
        "after sync: RSS {} MiB, peak (VmHWM) {} MiB",
        mib(rss_sync),
        mib(hwm_sync)
    );
    println!(
        "no-change resync + relist: {resync_puts} PUTs ({resync_gets} reads of the ConfigMap); \
         after: RSS {} MiB, VmHWM {} MiB",
        mib(rss_relist),
        mib(hwm_relist)
    );
    let rss: Vec<String> = churn.iter().map(|c| mib(c.0)).collect();
    println!(
        "churn: {rounds} rounds of {per_round} Ingresses, {round_ms} ms apart; writes or sink \
         reads in {} of them",
        churn.iter().filter(|c| c.2).count()
    );
    println!("churn RSS per round (MiB): {}", rss.join(" "));
    if let Some(last) = churn.last() {
        println!(
            "churn end: RSS {} MiB, VmHWM {} MiB, PUTs {} (refused by size: {})",
            mib(last.0),
            mib(last.1),
            s.puts,
            s.refused
        );
    }
    if !s.unknown.is_empty() {
        let mut u = s.unknown.clone();
        u.sort();
        u.dedup();
        println!("unanswered requests (404): {u:?}");
    }
    Ok(())
}
