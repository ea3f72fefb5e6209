//! The chart's monitoring objects (charts/ouroboros): the PrometheusRule (`prometheusRule.*`),
//! checked with promtool (`check rules`, and `test rules` against
//! charts/ouroboros/tests/prometheusrule-tests.yaml) and field by field; the Grafana dashboard
//! ConfigMap (`grafanaDashboard.*`) and its JSON; and every metric name their queries use, which
//! must be one the built binary exports: read from the `/metrics` of `proxy`, `edge` and
//! `controller` (against the fake API) after driving traffic through them. Needs Helm,
//! kubernetes-validate and promtool in .ci/bin (`.ci/tools.sh` installs them).

use crate::chart::{chart_dir, docs, kind, run, tool, validate, NAMESPACE, RELEASE};
use crate::common;
use crate::kube_mock::{self, list, Answer};
use crate::support::{free_port, temp_dir, Proxy, DEADLINE, V4};

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The values that turn the monitoring objects on: the ServiceMonitor (whose job the rules select
/// by default), the PrometheusRule and the dashboard ConfigMap.
const MONITORING: &[&str] = &[
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
];
/// What the rules select with MONITORING (namespace and the ServiceMonitor's job).
const SELECTOR: &str = r#"namespace="ouroboros",job="ouroboros-metrics""#;
/// Series Prometheus writes itself for every scrape target: the only names the rules may use
/// that the binary does not export.
const SCRAPE_SERIES: &[&str] = &["up"];
/// The rules promtool's unit tests read (the name `rule_files` gives in the tests file).
const RULES_FILE: &str = "ouroboros-rules.yaml";
/// Every alert the chart defines, in the order it renders them.
const ALERTS: &[&str] = &[
    "OuroborosProxyNotReady",
    "OuroborosProxyDown",
    "OuroborosTargetDown",
    "OuroborosControllerDown",
    "OuroborosControllerNotSyncing",
    "OuroborosWritesFailing",
    "OuroborosBlockReverted",
    "OuroborosHostnameConflicts",
    "OuroborosWatchRestarts",
    "OuroborosHairpinProbeFailing",
    "OuroborosRemovalHeld",
    "OuroborosBlockTooLarge",
];
/// The alerts about the controller, absent when the controller Deployment is not rendered: the
/// ones after the proxy's and the scrape alert.
const CONTROLLER_ALERTS: &[&str] = ALERTS.split_at(3).1;

/// `helm template` (Helm 4, or `helm3`) of the chart with `--set` values: the YAML, or Helm's
/// error.
fn template_with(helm: &str, sets: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool(helm));
    cmd.args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let (ok, out, err) = run(&mut cmd, None);
    if ok {
        Ok(out)
    } else {
        Err(err)
    }
}

fn template(sets: &[&str]) -> Result<String, String> {
    template_with("helm", sets)
}

fn render(sets: &[&str]) -> Vec<Value> {
    docs(&template(sets).unwrap_or_else(|e| panic!("helm template {sets:?} failed: {e}")))
}

fn of_kind<'a>(objs: &'a [Value], k: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| kind(o) == k).collect()
}

/// The one object of kind `k` in a render.
fn only<'a>(objs: &'a [Value], k: &str) -> &'a Value {
    let found = of_kind(objs, k);
    assert_eq!(found.len(), 1, "one {k} rendered");
    found[0]
}

/// The PrometheusRule's rules (every group's).
fn rules(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("a group's rules"))
        .collect()
}

fn alert_names(objs: &[Value]) -> Vec<String> {
    of_kind(objs, "PrometheusRule")
        .iter()
        .flat_map(|r| rules(r))
        .map(|r| r["alert"].as_str().expect("an alert name").to_string())
        .collect()
}

fn alert<'a>(objs: &'a [Value], name: &str) -> &'a Value {
    rules(only(objs, "PrometheusRule"))
        .into_iter()
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("alert {name} rendered"))
}

fn string_map(v: &Value, what: &str) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap_or_else(|| panic!("{what} is a map: {v}"))
        .iter()
        .map(|(k, v)| {
            let s = v
                .as_str()
                .unwrap_or_else(|| panic!("{what}.{k} is a string: {v}"));
            (k.clone(), s.to_string())
        })
        .collect()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// A Prometheus duration (`30s`, `5m`, `1h30m`, `0`).
fn is_prometheus_duration(s: &str) -> bool {
    regex::Regex::new(r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$")
        .unwrap()
        .is_match(s)
}

// --- PromQL ------------------------------------------------------------------------------------

/// Index just past the string literal (`"…"`, `'…'` or `` `…` ``) that starts at `i`.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        j += if b[j] == b'\\' && quote != b'`' { 2 } else { 1 };
    }
    assert!(j < b.len(), "unterminated string in PromQL");
    j + 1
}

/// Index just past the bracket that closes the one at `i` (strings inside are skipped).
fn skip_group(b: &[u8], i: usize) -> usize {
    let (open, close) = (
        b[i],
        match b[i] {
            b'(' => b')',
            b'[' => b']',
            b'{' => b'}',
            c => panic!("not a bracket: {}", c as char),
        },
    );
    let mut depth = 0;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => {
                j = skip_string(b, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    panic!("unbalanced {} in PromQL", open as char)
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The vector selectors of a PromQL expression: each metric name with its label matchers as
/// written (empty without braces). Skipped: strings, label matchers, ranges and subqueries
/// (`[…]`), the label lists of `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`,
/// functions (a name followed by `(`), aggregation operators and other keywords, numbers and
/// durations, and Grafana variables (`$name`, `${name}`).
fn selectors(expr: &str) -> Vec<(String, String)> {
    const GROUPING: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "inf",
        "nan",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let b = expr.as_bytes();
    let next_non_space = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, b'"' | b'\'' | b'`') {
            i = skip_string(b, i);
        } else if c == b'{' || c == b'[' {
            i = skip_group(b, i);
        } else if c == b'$' {
            i += 1;
            if b.get(i) == Some(&b'{') {
                i = skip_group(b, i);
            } else {
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || c == b'.' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let next = next_non_space(i);
            let opens = |bracket: u8| b.get(next) == Some(&bracket);
            if GROUPING.contains(&word) {
                if opens(b'(') {
                    i = skip_group(b, next);
                }
            } else if opens(b'(') || KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                // A function or an aggregation: its arguments are read on.
            } else if opens(b'{') {
                let end = skip_group(b, next);
                out.push((word.to_string(), expr[next + 1..end - 1].to_string()));
                i = end;
            } else {
                out.push((word.to_string(), String::new()));
            }
        } else {
            i += 1;
        }
    }
    out
}

fn metric_names(expr: &str) -> BTreeSet<String> {
    selectors(expr).into_iter().map(|(n, _)| n).collect()
}

#[test]
fn promql_selectors_are_the_metric_names_and_nothing_else() {
    let expr = r#"sum by (listener, cause) (rate(a_total{namespace=~"$namespace", cause!="x{y}"}[$__rate_interval]))
        / on(namespace) group_left(pod) max without (le) (b:recorded offset 5m) > bool 0.5
        and absent(up{job='a'}) unless histogram_quantile(0.99, sum by (le) (rate(c_bucket[5m:1m])))
        or count_values("v", d) * Inf + e_sum / e_count @ start() or topk(3, f)"#;
    let got = selectors(expr);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "a_total",
            "b:recorded",
            "up",
            "c_bucket",
            "d",
            "e_sum",
            "e_count",
            "f"
        ]
    );
    assert_eq!(got[0].1, r#"namespace=~"$namespace", cause!="x{y}""#);
    assert_eq!(got[2].1, "job='a'");
    assert_eq!(got[1].1, "");
    // A misspelled name is a name like any other: the callers compare it with the export.
    assert_eq!(
        metric_names("rate(ouroboros_proxy_conections_accepted_total[5m])"),
        BTreeSet::from(["ouroboros_proxy_conections_accepted_total".to_string()])
    );
}

// --- what the binary exports -------------------------------------------------------------------

/// The sample names the metric families of one `/metrics` text give (OpenMetrics, as
/// prometheus-client writes it), from each `# TYPE NAME TYPE` line: a counter's samples are
/// `NAME_total`, a histogram's `NAME_bucket`, `NAME_count` and `NAME_sum`, a gauge's `NAME`.
/// Checks that every family has its `# HELP` and that every sample in the text is one of them.
fn exported_samples(text: &str) -> BTreeSet<String> {
    let mut help = BTreeSet::new();
    let mut typed = BTreeSet::new();
    let mut samples = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help.insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("# TYPE NAME TYPE");
            typed.insert(name.to_string());
            let suffixes: &[&str] = match ty {
                "counter" => &["_total"],
                "gauge" | "unknown" => &[""],
                "histogram" => &["_bucket", "_count", "_sum"],
                "summary" => &["", "_count", "_sum"],
                "info" => &["_info"],
                other => panic!("metric type {other} of {name} is not handled here"),
            };
            samples.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        }
    }
    assert_eq!(help, typed, "every family has # HELP and # TYPE");
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(
            samples.contains(name),
            "sample {name} belongs to no # TYPE family: {line}"
        );
    }
    samples
}

#[test]
fn exported_samples_follow_the_family_types() {
    let text = "# HELP a_x X.\n# TYPE a_x counter\na_x_total{l=\"1\"} 2\n\
                # HELP a_d D.\n# TYPE a_d histogram\n# UNIT a_d seconds\n\
                a_d_bucket{le=\"1\"} 1\na_d_sum 0.5\na_d_count 1\n\
                # HELP a_g G.\n# TYPE a_g gauge\na_g 1\n# EOF\n";
    let got = exported_samples(text);
    let want = ["a_d_bucket", "a_d_count", "a_d_sum", "a_g", "a_x_total"];
    assert_eq!(got, want.iter().map(|s| s.to_string()).collect());
}

/// The values of every sample of `name` whose labels contain `needle`.
fn samples(text: &str, name: &str, needle: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect()
}

/// `ouroboros SUB` with its admin listener on 127.0.0.1:0 and JSON logs, without the caller's
/// OUROBOROS_*, KUBECONFIG, RUST_LOG and KUBERNETES_SERVICE_HOST (`common::command`).
fn ouroboros(sub: &str, args: &[&str]) -> Proxy {
    let mut cmd = common::command(sub);
    cmd.args(["--log-format", "json", "--listen-health", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Proxy::spawn(cmd)
}

/// `/metrics` once `done` holds for it (polled until DEADLINE).
fn metrics_when(p: &Proxy, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, text) = p.admin("/metrics");
        assert_eq!(status, 200, "{what}: /metrics: {text}");
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: timed out; /metrics:\n{text}\nlogs: {:#?}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP server standing in for the ingress controller or an edge backend: reads what a
/// connection sends, answers `pong` and closes it. Stops when dropped.
struct Upstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind((V4, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 4096];
                if matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                    let _ = conn.write_all(b"pong");
                }
            }
        });
        Upstream {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One client connection through a relay: sends `ping`, half-closes, returns the answer.
fn exchange(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting {addr}: {e}"));
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(b"ping").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("reading through {addr}: {e}"));
    answer
}

/// `/metrics` of `proxy` after one connection relayed to an upstream.
fn proxy_metrics() -> String {
    let upstream = Upstream::start();
    let port = upstream.addr.port();
    let p = Proxy::relaying("127.0.0.1:0", V4, (port, port), &["--shutdown-delay", "0"]);
    assert_eq!(exchange(p.http.expect("the http listener")), "pong");
    metrics_when(&p, "proxy", |t| {
        samples(t, "ouroboros_proxy_connections_closed_total", "done")
            .iter()
            .sum::<f64>()
            >= 1.0
    })
}

/// `/metrics` of `edge` with a static set of a live and a dead backend, after connections
/// that met both (the dead one's failed dials are retried on the live one).
fn edge_metrics() -> String {
    let upstream = Upstream::start();
    let live = upstream.addr.to_string();
    let dead = format!("127.0.0.1:{}", free_port(V4));
    let p = ouroboros(
        "edge",
        &[
            "--backend",
            &dead,
            "--backend",
            &live,
            "--listen",
            "127.0.0.1:0",
            "--shutdown-delay",
            "0",
        ],
    );
    let logs = p.logs();
    let addr: SocketAddr = logs
        .iter()
        .find(|v| v["message"] == "listening" && v["listener"] == "127.0.0.1:0")
        .and_then(|v| v["addr"].as_str()?.parse().ok())
        .unwrap_or_else(|| panic!("edge's listener address in its logs: {logs:#?}"));
    const CONNECTIONS: usize = 4;
    for _ in 0..CONNECTIONS {
        assert_eq!(exchange(addr), "pong");
    }
    metrics_when(&p, "edge", |t| {
        samples(t, "ouroboros_edge_connections_closed_total", "done")
            .iter()
            .sum::<f64>()
            >= CONNECTIONS as f64
            && samples(t, "ouroboros_edge_backend_failures_total", &dead)
                .iter()
                .sum::<f64>()
                >= 1.0
    })
}

const COREFILE: &str = ".:53 {\n    errors\n    health\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

fn configmap(rv: u64, corefile: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "coredns", "namespace": "kube-system",
            "uid": "6c8b0e0a-5b1e-4c1e-9f4e-2f7c3a9d1b20",
            "resourceVersion": rv.to_string()
        },
        "data": {"Corefile": corefile}
    })
}

/// A fake cluster for `controller` in coredns mode: one Ingress, the CoreDNS ConfigMap (read,
/// listed, written), Events accepted, watches held open, anything else 404.
fn fake_cluster() -> (kube_mock::HttpApi, kube_mock::Routed) {
    let state = Arc::new(Mutex::new((1u64, COREFILE.to_string())));
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "web", "resourceVersion": "10"},
        "spec": {
            "tls": [{"hosts": ["app.example.com"], "secretName": "app-tls"}],
            "rules": [{"host": "app.example.com"}]
        }
    });
    kube_mock::http(move |s| {
        if s.is_watch() {
            return Answer::Hold;
        }
        let mut st = state.lock().unwrap();
        match (s.method.as_str(), s.path()) {
            ("GET", "/apis/networking.k8s.io/v1/ingresses") => Answer::Json(
                200,
                list(
                    "networking.k8s.io/v1",
                    "IngressList",
                    "10",
                    vec![ingress.clone()],
                ),
            ),
            ("GET", "/apis/networking.k8s.io/v1/ingressclasses") => Answer::Json(
                200,
                list("networking.k8s.io/v1", "IngressClassList", "10", vec![]),
            ),
            ("GET", "/api/v1/namespaces/kube-system/configmaps")
                if s.uri.contains("metadata.name%3Dcoredns") =>
            {
                Answer::Json(
                    200,
                    list(
                        "v1",
                        "ConfigMapList",
                        &st.0.to_string(),
                        vec![configmap(st.0, &st.1)],
                    ),
                )
            }
            ("GET", "/api/v1/namespaces/kube-system/configmaps/coredns") => {
                Answer::Json(200, configmap(st.0, &st.1))
            }
            ("PUT", "/api/v1/namespaces/kube-system/configmaps/coredns") => {
                let body = s.body.clone().expect("a PUT body");
                st.0 += 1;
                st.1 = body["data"]["Corefile"].as_str().unwrap_or("").to_string();
                Answer::Json(200, configmap(st.0, &st.1))
            }
            ("POST" | "PATCH", p) if p.starts_with("/apis/events.k8s.io/") => {
                Answer::Json(201, s.body.clone().unwrap_or(json!({})))
            }
            _ => Answer::Json(404, kube_mock::not_found("object", s.path()).1),
        }
    })
}

/// `/metrics` of `controller` (coredns mode, no leader election) after its first write.
fn controller_metrics() -> String {
    let (api, _seen) = fake_cluster();
    let dir = temp_dir("monitoring-kubeconfig");
    let kubeconfig = api.kubeconfig(dir.path()).display().to_string();
    let p = ouroboros(
        "controller",
        &[
            "--kubeconfig",
            &kubeconfig,
            "--leader-elect=false",
            "--mode",
            "coredns",
            "--proxy-ip",
            "10.96.0.10",
            "--debounce",
            "50ms",
            // The probe's families are exported from its start; a server is given so that it
            // starts whatever this host's resolv.conf says (no round runs before the scrape).
            "--probe-dns-server",
            "127.0.0.1",
        ],
    );
    metrics_when(&p, "controller's first write", |t| {
        samples(t, "ouroboros_controller_syncs_total", "result=\"written\"")
            .iter()
            .sum::<f64>()
            >= 1.0
    })
}

/// Every sample name `proxy`, `edge` and `controller` export, each subcommand's under its own
/// prefix.
fn exported() -> &'static BTreeSet<String> {
    static E: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let mut all = BTreeSet::new();
        for (sub, text) in [
            ("proxy", proxy_metrics()),
            ("edge", edge_metrics()),
            ("controller", controller_metrics()),
        ] {
            let names = exported_samples(&text);
            assert!(names.len() >= 5, "{sub} exports {names:?}");
            let prefix = format!("ouroboros_{sub}_");
            for n in &names {
                assert!(n.starts_with(&prefix), "{sub} exports {n}");
            }
            all.extend(names);
        }
        all
    })
}

// --- the PrometheusRule ------------------------------------------------------------------------

/// The rendered rules with MONITORING, as promtool reads them: the PrometheusRule's spec.
fn rule_spec(objs: &[Value]) -> Value {
    only(objs, "PrometheusRule")["spec"].clone()
}

#[test]
fn prometheus_rule_passes_promtool_check_and_its_unit_tests() {
    let promtool = tool("promtool");
    let objs = render(MONITORING);
    let spec = rule_spec(&objs);
    let dir = temp_dir("prometheusrule");

    // check rules: the whole rule, annotations included (their templates are parsed).
    let full = dir.path().join("rules-full.yaml");
    std::fs::write(&full, serde_json::to_string_pretty(&spec).unwrap()).unwrap();
    let (ok, out, err) = run(
        Command::new(&promtool).args(["check", "rules"]).arg(&full),
        None,
    );
    assert!(ok, "promtool check rules:\n{out}\n{err}");
    let n = rules(only(&objs, "PrometheusRule")).len();
    assert!(
        out.contains(&format!("SUCCESS: {n} rules found")),
        "promtool check rules:\n{out}"
    );

    // test rules: the committed unit tests, next to the rules without `description`s.
    let mut short = spec.clone();
    for g in short["groups"].as_array_mut().unwrap() {
        for r in g["rules"].as_array_mut().unwrap() {
            let a = r["annotations"].as_object_mut().unwrap();
            assert!(a.remove("description").is_some(), "{r}: a description");
            assert!(a.contains_key("summary"), "{r}: a summary");
        }
    }
    std::fs::write(
        dir.path().join(RULES_FILE),
        serde_json::to_string_pretty(&short).unwrap(),
    )
    .unwrap();
    let tests_path = chart_dir().join("tests/prometheusrule-tests.yaml");
    let tests_text = std::fs::read_to_string(&tests_path).unwrap();
    std::fs::write(dir.path().join("prometheusrule-tests.yaml"), &tests_text).unwrap();
    let (ok, out, err) = run(
        Command::new(&promtool)
            .args(["test", "rules", "prometheusrule-tests.yaml"])
            .current_dir(dir.path()),
        None,
    );
    assert!(ok, "promtool test rules:\n{out}\n{err}");
    assert!(
        out.contains("SUCCESS"),
        "promtool test rules:\n{out}\n{err}"
    );

    // Every alert has a case that fires and one that does not; no case names another alert.
    let tests: Value = yaml_serde::from_str(&tests_text).unwrap();
    assert_eq!(tests["rule_files"], json!([RULES_FILE]), "{tests_path:?}");
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for case in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let exp = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if exp > 0 {
                fires.insert(name);
            } else {
                silent.insert(name);
            }
        }
    }
    let alerts: BTreeSet<String> = alert_names(&objs).into_iter().collect();
    assert_eq!(
        alerts,
        ALERTS.iter().map(|a| a.to_string()).collect(),
        "the alerts"
    );
    assert_eq!(fires, alerts, "a case where each alert fires");
    assert_eq!(silent, alerts, "a case where each alert stays silent");
}

#[test]
fn prometheus_rule_object_shape() {
    let objs = render(&[
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "prometheusRule.labels.release=kube-prometheus-stack",
        "prometheusRule.alertLabels.team=net",
    ]);
    let pr = only(&objs, "PrometheusRule");
    assert_eq!(pr["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        keys(pr),
        BTreeSet::from(["apiVersion", "kind", "metadata", "spec"])
    );
    assert_eq!(pr["metadata"]["name"], "ouroboros");
    assert_eq!(pr["metadata"]["namespace"], NAMESPACE);
    let labels = string_map(&pr["metadata"]["labels"], "metadata.labels");
    assert_eq!(labels["release"], "kube-prometheus-stack");
    assert_eq!(labels["app.kubernetes.io/instance"], RELEASE);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(keys(&pr["spec"]), BTreeSet::from(["groups"]));
    let groups = pr["spec"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    for g in groups {
        assert_eq!(keys(g), BTreeSet::from(["name", "rules"]), "{g}");
        assert!(g["name"].as_str().is_some_and(|n| !n.is_empty()));
    }
    let mut seen = BTreeSet::new();
    for r in rules(pr) {
        let name = r["alert"].as_str().expect("alert rules only");
        assert!(seen.insert(name), "alert {name} twice");
        assert!(name.starts_with("Ouroboros"), "{name}");
        assert_eq!(
            keys(r),
            BTreeSet::from(["alert", "expr", "for", "labels", "annotations"]),
            "{name}"
        );
        let expr = r["expr"].as_str().expect("expr is a string");
        assert!(!expr.trim().is_empty(), "{name}");
        let for_ = r["for"].as_str().expect("for is a string");
        assert!(is_prometheus_duration(for_), "{name}: for {for_}");
        let l = string_map(&r["labels"], "labels");
        assert!(
            ["warning", "critical"].contains(&l["severity"].as_str()),
            "{name}"
        );
        assert_eq!(l["team"], "net", "{name}: alertLabels");
        let a = string_map(&r["annotations"], "annotations");
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            ["description", "summary"],
            "{name}"
        );
        let d = &a["description"];
        assert!(
            d.contains("kubectl") && d.len() > 200,
            "{name}: the description says what to check, with the command: {d}"
        );
        // Every selector is this release's.
        for (metric, matchers) in selectors(expr) {
            assert!(
                matchers.starts_with(SELECTOR),
                "{name}: {metric}{{{matchers}}} does not select {SELECTOR}"
            );
        }
    }
    assert_eq!(alert_names(&objs), ALERTS, "the alerts, in order");
    // The annotations name this release's objects.
    let d = alert(&objs, "OuroborosControllerNotSyncing")["annotations"]["description"]
        .as_str()
        .unwrap();
    assert!(
        d.contains("kubectl -n ouroboros logs deploy/ouroboros-controller"),
        "{d}"
    );
    assert!(d.contains("get lease ouroboros-controller"), "{d}");
    let d = alert(&objs, "OuroborosWritesFailing")["annotations"]["description"]
        .as_str()
        .unwrap();
    assert!(d.contains("-n kube-system configmap coredns"), "{d}");

    let yaml = template(&[
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
    ])
    .unwrap();
    validate("monitoring on", &yaml);
}

#[test]
fn prometheus_rule_values_select_tune_and_drop_alerts() {
    // Off by default.
    let defaults = render(&[]);
    assert!(of_kind(&defaults, "PrometheusRule").is_empty());

    // Without the ServiceMonitor the rules select the namespace only; a selector replaces it.
    for (sets, want) in [
        (
            &["prometheusRule.enabled=true"][..],
            r#"namespace="ouroboros""#,
        ),
        (
            &[
                "prometheusRule.enabled=true",
                "serviceMonitor.enabled=true",
                r#"prometheusRule.selector=cluster="eu"\,namespace="edge""#,
            ][..],
            r#"cluster="eu",namespace="edge""#,
        ),
    ] {
        let objs = render(sets);
        for r in rules(only(&objs, "PrometheusRule")) {
            for (metric, matchers) in selectors(r["expr"].as_str().unwrap()) {
                let first = matchers.split(",result").next().unwrap();
                assert_eq!(first, want, "{sets:?}: {metric}{{{matchers}}}");
            }
        }
    }

    // Thresholds, windows, `for` and severity.
    let objs = render(&[
        "prometheusRule.enabled=true",
        "prometheusRule.alerts.controllerNotSyncing.maxAgeSeconds=900",
        "prometheusRule.alerts.blockReverted.threshold=5",
        "prometheusRule.alerts.blockReverted.window=1h",
        "prometheusRule.alerts.blockTooLarge.window=45m",
        "prometheusRule.alerts.proxyNotReady.for=2m",
        "prometheusRule.alerts.proxyNotReady.severity=page",
    ]);
    let expr = |a: &str| alert(&objs, a)["expr"].as_str().unwrap().to_string();
    assert!(expr("OuroborosControllerNotSyncing").contains("> 900"));
    let reverted = expr("OuroborosBlockReverted");
    assert!(
        reverted.contains("[1h]") && reverted.contains(">= 5"),
        "{reverted}"
    );
    let too_large = expr("OuroborosBlockTooLarge");
    assert!(
        too_large.contains("[45m]") && too_large.contains("offset 45m"),
        "{too_large}"
    );
    let ready = alert(&objs, "OuroborosProxyNotReady");
    assert_eq!(ready["for"], "2m");
    assert_eq!(ready["labels"]["severity"], "page");

    // One alert off; the others stay.
    for a in ALERTS {
        let key = a.strip_prefix("Ouroboros").unwrap();
        let key = key[..1].to_ascii_lowercase() + &key[1..];
        let objs = render(&[
            "prometheusRule.enabled=true",
            &format!("prometheusRule.alerts.{key}.enabled=false"),
        ]);
        let got = alert_names(&objs);
        let want: Vec<&str> = ALERTS.iter().copied().filter(|x| x != a).collect();
        assert_eq!(got, want, "{key}.enabled=false");
    }

    // Only the alerts the configuration can raise.
    for (sets, absent) in [
        (
            &["controller.mode=external-dns"][..],
            &["OuroborosBlockReverted", "OuroborosBlockTooLarge"][..],
        ),
        (
            &["controller.mode=coredns-import"][..],
            &["OuroborosBlockReverted"][..],
        ),
        (
            &[
                "controller.mode=coredns-import",
                "controller.nodeLocalDns.enabled=true",
            ][..],
            &[][..],
        ),
        (
            &["controller.dryRun=true"][..],
            &["OuroborosBlockReverted"][..],
        ),
        (
            &["controller.enabled=false", "etcHosts.enabled=true"][..],
            CONTROLLER_ALERTS,
        ),
        // The etc-hosts DaemonSet replaces the controller Deployment when no mode is set.
        (&["etcHosts.enabled=true"][..], CONTROLLER_ALERTS),
        (
            &["proxy.enabled=false", "controller.proxyIps={10.0.0.9}"][..],
            &["OuroborosProxyNotReady", "OuroborosProxyDown"][..],
        ),
    ] {
        let mut all = vec!["prometheusRule.enabled=true"];
        all.extend_from_slice(sets);
        let got = alert_names(&render(&all));
        let want: Vec<&str> = ALERTS
            .iter()
            .copied()
            .filter(|a| !absent.contains(a))
            .collect();
        assert_eq!(got, want, "{sets:?}");
    }
}

// --- the Grafana dashboard ---------------------------------------------------------------------

fn dashboard_text() -> String {
    std::fs::read_to_string(chart_dir().join("dashboards/ouroboros.json")).unwrap()
}

fn dashboard() -> Value {
    serde_json::from_str(&dashboard_text()).expect("dashboards/ouroboros.json is JSON")
}

/// (panel title, refId, expression) of every query of every panel.
fn dashboard_queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap().to_string(),
                t["refId"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// The series selector of each query variable (`label_values(SELECTOR, LABEL)`).
fn variable_selectors(d: &Value) -> Vec<String> {
    d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable {}: {q} is label_values(…)", v["name"]));
            let (selector, _label) = inner
                .rsplit_once(',')
                .expect("label_values(SELECTOR, LABEL)");
            selector.trim().to_string()
        })
        .collect()
}

#[test]
fn dashboard_configmap_for_the_grafana_sidecar() {
    let defaults = render(&[]);
    assert!(of_kind(&defaults, "ConfigMap")
        .iter()
        .all(|c| c["data"]["ouroboros.json"].is_null()));

    let objs = render(&["grafanaDashboard.enabled=true"]);
    let cm = only(&objs, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "ouroboros-dashboard");
    assert_eq!(cm["metadata"]["namespace"], NAMESPACE);
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert!(cm["metadata"]["annotations"].is_null());
    assert_eq!(keys(&cm["data"]), BTreeSet::from(["ouroboros.json"]));
    assert_eq!(
        cm["data"]["ouroboros.json"].as_str().unwrap(),
        dashboard_text().trim_end(),
        "the file, unchanged"
    );

    let yaml = template(&[
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.label=my_dashboards",
        "grafanaDashboard.labelValue=yes",
        "grafanaDashboard.labels.team=net",
        "grafanaDashboard.annotations.grafana_folder=Networking",
    ])
    .unwrap();
    let objs = docs(&yaml);
    let cm = only(&objs, "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    let labels = string_map(&cm["metadata"]["labels"], "labels");
    assert_eq!(labels["my_dashboards"], "yes");
    assert_eq!(labels["team"], "net");
    assert!(!labels.contains_key("grafana_dashboard"));
    assert_eq!(
        string_map(&cm["metadata"]["annotations"], "annotations"),
        BTreeMap::from([("grafana_folder".to_string(), "Networking".to_string())])
    );
    validate("dashboard ConfigMap elsewhere", &yaml);
}

#[test]
fn dashboard_json_shape() {
    let d = dashboard();
    assert_eq!(d["uid"], "ouroboros");
    assert_eq!(d["title"], "ouroboros");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let vars = d["templating"]["list"].as_array().unwrap();
    let ds = vars
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    assert!(vars.iter().any(|v| v["name"] == "namespace"));

    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(String, [u64; 4])> = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("a title").to_string();
        assert!(
            ids.insert(p["id"].as_u64().expect("an id")),
            "{title}: id twice"
        );
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().expect("gridPos"));
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {g}");
        for (other, [ox, oy, ow, oh]) in &boxes {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((title.clone(), [x, y, w, h]));
        if p["type"] == "row" {
            continue;
        }
        assert!(
            ["timeseries", "stat"].contains(&p["type"].as_str().unwrap()),
            "{title}"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(
            p["description"].as_str().is_some_and(|s| !s.is_empty()),
            "{title}"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().unwrap()),
                "{title}: refId twice"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().expect("expr");
            let found = selectors(expr);
            assert!(!found.is_empty(), "{title}: {expr}");
            for (metric, matchers) in found {
                assert!(
                    matchers.starts_with(r#"namespace=~"$namespace""#),
                    "{title}: {metric}{{{matchers}}} does not filter by $namespace"
                );
            }
        }
    }
    assert!(boxes.len() >= 20, "{} panels", boxes.len());
}

/// Every dashboard query parses: promtool checks them as recording rules, with Grafana's
/// variables replaced.
#[test]
fn dashboard_queries_are_valid_promql() {
    let d = dashboard();
    let rules: Vec<Value> = dashboard_queries(&d)
        .iter()
        .enumerate()
        .map(|(i, (_, refid, expr))| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$namespace", ".*");
            assert!(!expr.contains('$'), "an unknown variable in {expr}");
            json!({"record": format!("ouroboros_dashboard:query_{i}_{refid}"), "expr": expr})
        })
        .chain(variable_selectors(&d).into_iter().enumerate().map(
            |(i, s)| json!({"record": format!("ouroboros_dashboard:variable_{i}"), "expr": s}),
        ))
        .collect();
    let n = rules.len();
    let dir = temp_dir("dashboard-promql");
    let path = dir.path().join("dashboard.yaml");
    let file = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&path, file.to_string()).unwrap();
    let (ok, out, err) = run(
        Command::new(tool("promtool"))
            .args(["check", "rules"])
            .arg(&path),
        None,
    );
    assert!(
        ok,
        "promtool check rules (dashboard queries):\n{out}\n{err}"
    );
    assert!(out.contains(&format!("SUCCESS: {n} rules found")), "{out}");
}

// --- metric names ------------------------------------------------------------------------------

#[test]
fn dashboard_and_alerts_query_only_what_the_binary_exports() {
    let exported = exported();
    let d = dashboard();
    let mut used = BTreeSet::new();
    for (title, refid, expr) in dashboard_queries(&d) {
        for name in metric_names(&expr) {
            assert!(
                exported.contains(&name),
                "dashboard panel {title:?} query {refid} uses {name}, which the binary does not \
                 export; it exports:\n{exported:#?}"
            );
            used.insert(name);
        }
    }
    for s in variable_selectors(&d) {
        for name in metric_names(&s) {
            assert!(exported.contains(&name), "dashboard variable uses {name}");
        }
    }
    let objs = render(MONITORING);
    for r in rules(only(&objs, "PrometheusRule")) {
        let a = r["alert"].as_str().unwrap();
        let names = metric_names(r["expr"].as_str().unwrap());
        assert!(!names.is_empty(), "{a}");
        for name in names {
            assert!(
                exported.contains(&name) || SCRAPE_SERIES.contains(&name.as_str()),
                "alert {a} uses {name}, which the binary does not export; it exports:\n\
                 {exported:#?}"
            );
        }
    }
    // The dashboard has panels for each subcommand.
    for sub in ["proxy", "edge", "controller"] {
        let prefix = format!("ouroboros_{sub}_");
        assert!(
            used.iter().filter(|n| n.starts_with(&prefix)).count() >= 5,
            "{sub}: {used:?}"
        );
    }
}

// --- chart plumbing ----------------------------------------------------------------------------

#[test]
fn lint_and_helm_3_with_monitoring_on() {
    for helm in ["helm", "helm3"] {
        let mut cmd = Command::new(tool(helm));
        cmd.args(["lint", "--strict"]).arg(chart_dir());
        for s in MONITORING {
            cmd.args(["--set", s]);
        }
        let (ok, out, err) = run(&mut cmd, None);
        assert!(ok, "{helm} lint --strict:\n{out}\n{err}");
        assert!(out.contains("0 chart(s) failed"), "{helm}: {out}");
    }
    let four = render(MONITORING);
    let three = docs(&template_with("helm3", MONITORING).unwrap());
    assert!(three == four, "Helm 3 renders other objects");
}

#[test]
fn schema_rejects_bad_monitoring_values() {
    for (set, complaint) in [
        ("prometheusRule.typo=1", "typo"),
        ("prometheusRule.alerts.proxyDown.for=5 minutes", "for"),
        ("prometheusRule.alerts.nope.enabled=false", "nope"),
        (
            "prometheusRule.alerts.controllerNotSyncing.maxAgeSeconds=0",
            "maxAgeSeconds",
        ),
        ("prometheusRule.alerts.blockReverted.window=10", "window"),
        ("prometheusRule.selector={a}", "selector"),
        ("grafanaDashboard.typo=1", "typo"),
        ("grafanaDashboard.enabled=yes", "enabled"),
    ] {
        let err = template(&[set]).expect_err(set);
        assert!(
            err.contains("schema") && err.contains(complaint),
            "--set {set}: {err}"
        );
    }
}

#[test]
fn packaged_chart_has_the_dashboard_and_not_the_rule_tests() {
    let dir = temp_dir("chart-package");
    let mut cmd = Command::new(tool("helm"));
    cmd.arg("package")
        .arg(chart_dir())
        .arg("-d")
        .arg(dir.path());
    let (ok, out, err) = run(&mut cmd, None);
    assert!(ok, "helm package:\n{out}\n{err}");
    let tgz = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .expect("a .tgz");
    let (ok, listing, err) = run(Command::new("tar").arg("-tzf").arg(&tgz), None);
    assert!(ok, "tar -tzf: {err}");
    let files: BTreeSet<&str> = listing.lines().collect();
    for want in [
        "ouroboros/dashboards/ouroboros.json",
        "ouroboros/templates/prometheusrule.yaml",
        "ouroboros/templates/grafana-dashboard.yaml",
    ] {
        assert!(files.contains(want), "{want} packaged: {files:#?}");
    }
    assert!(
        !files.iter().any(|f| f.starts_with("ouroboros/tests/")),
        "the promtool tests are not packaged: {files:#?}"
    );
}

/// With `proxies`, one OuroborosProxyDown per proxy, each selecting its own pods by name, so a
/// proxy that is down is seen while another is up.
#[test]
fn proxy_down_per_proxy() {
    let mut sets = MONITORING.to_vec();
    sets.extend([
        "proxies[0].name=traefik",
        "proxies[0].ingressClasses={traefik}",
        "proxies[0].target.host=traefik.traefik.svc.cluster.local",
    ]);
    let objs = render(&sets);
    let down: Vec<&Value> = rules(only(&objs, "PrometheusRule"))
        .into_iter()
        .filter(|r| r["alert"] == "OuroborosProxyDown")
        .collect();
    let got: Vec<(&str, &str)> = down
        .iter()
        .map(|r| {
            (
                r["labels"]["proxy"].as_str().unwrap(),
                r["expr"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "ouroboros-proxy",
                r#"absent(ouroboros_proxy_ready{namespace="ouroboros",job="ouroboros-metrics",pod=~"ouroboros-proxy-[a-z0-9]+-[a-z0-9]+"} == 1)"#
            ),
            (
                "ouroboros-proxy-traefik",
                r#"absent(ouroboros_proxy_ready{namespace="ouroboros",job="ouroboros-metrics",pod=~"ouroboros-proxy-traefik-[a-z0-9]+-[a-z0-9]+"} == 1)"#
            ),
        ]
    );
    // Each pattern (anchored, as PromQL's are) takes its own Deployment's pods only.
    let pattern = |e: &str| {
        let p = e
            .split("pod=~\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        regex::Regex::new(&format!("^{p}$")).unwrap()
    };
    let (main, traefik) = (pattern(got[0].1), pattern(got[1].1));
    for (pod, m, t) in [
        ("ouroboros-proxy-7d9f8b6c5-x2b4k", true, false),
        ("ouroboros-proxy-traefik-5c8d7f9b4-q7w2e", false, true),
    ] {
        assert_eq!((main.is_match(pod), traefik.is_match(pod)), (m, t), "{pod}");
    }
    // And promtool takes them.
    let dir = temp_dir("proxydown");
    let file = dir.path().join("rules.yaml");
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&rule_spec(&objs)).unwrap(),
    )
    .unwrap();
    let (ok, out, err) = run(
        Command::new(tool("promtool"))
            .args(["check", "rules"])
            .arg(&file),
        None,
    );
    assert!(ok, "promtool check rules:\n{out}\n{err}");
}
