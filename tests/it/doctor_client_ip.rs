//! `doctor client-ip` against the scripted mock API: the exact requests in order, the verdicts,
//! and the removal of what it created when a step is refused, times out or is interrupted.

use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::kube_mock::{calls, echo, reply, serve, status, Reply};
use ouroboros::doctor::client_ip::objects::Run;
use ouroboros::doctor::client_ip::verdict::Verdict;
use ouroboros::doctor::client_ip::{run_plan, Failed, Outcome, Plan};

const NS: &str = "/api/v1/namespaces/default";
const POD: &str = "ouroboros-client-ip-0a1b2c3d";
const CALLER: &str = "ouroboros-client-ip-0a1b2c3d-caller";

fn plan(timeout_secs: u64) -> Plan {
    Plan {
        run: Run {
            id: "0a1b2c3d".into(),
            namespace: "default".into(),
            image: "ghcr.io/ouroboros-hairpin/ouroboros:0.1.0".into(),
        },
        host: Some("check.example.com".into()),
        existing: None,
        class: Some("nginx".into()),
        timeout: Duration::from_secs(timeout_secs),
    }
}

fn pod(name: &str, status: Value) -> Reply {
    let v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"containers": []},
        "status": status});
    reply(200, v)
}

fn ready() -> Value {
    json!({"phase": "Running", "podIP": "10.244.0.5",
           "conditions": [{"type": "Ready", "status": "True"}]})
}

fn whoami(headers: &[(&str, &str)]) -> Value {
    json!({"whoami": {
        "remote_addr": "10.244.0.3:41234", "proxy": null,
        "request": {"headers": headers.iter()
            .map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>()}}})
}

fn ingress() -> Reply {
    reply(
        200,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": POD, "namespace": "default"},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
    )
}

fn nodes() -> Reply {
    reply(
        200,
        json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [
        {"metadata": {"name": "n1"}, "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.11"}]}}]}),
    )
}

fn deleted() -> Reply {
    reply(
        200,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    )
}

/// The whole script of a run that reaches a verdict, the caller having printed `log`.
fn full_run(log: Value) -> Vec<Reply> {
    vec![
        echo("1"), // create the whoami Pod
        echo("2"), // create the Service
        echo("3"), // create the Ingress
        pod(POD, json!({"phase": "Pending"})),
        pod(POD, ready()),
        echo("4"), // create the caller Pod
        pod(
            CALLER,
            json!({"phase": "Succeeded", "podIP": "10.244.1.7",
                           "podIPs": [{"ip": "10.244.1.7"}]}),
        ),
        reply(200, log),
        ingress(),
        nodes(),
        deleted(),
        deleted(),
        deleted(),
        deleted(),
    ]
}

async fn go(
    replies: Vec<Reply>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> (Outcome, Vec<String>, Vec<(String, String)>) {
    let (client, task) = serve(replies);
    let mut lines = Vec::new();
    let outcome = run_plan(&client, plan, cancel, &mut |l| lines.push(l)).await;
    drop(client);
    let seen = task.await.unwrap();
    let c = calls(&seen)
        .into_iter()
        .map(|(m, u)| (m.to_string(), u.to_string()))
        .collect();
    (outcome, lines, c)
}

fn deletes(names: &[(&str, &str)]) -> Vec<(String, String)> {
    names
        .iter()
        .map(|(path, name)| ("DELETE".to_string(), format!("{path}/{name}?")))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_run_makes_these_requests_in_order_and_removes_what_it_made() {
    let log = whoami(&[
        ("X-Real-IP", "10.244.1.7"),
        ("X-Forwarded-For", "10.244.1.7"),
    ]);
    let (outcome, lines, calls) = go(full_run(log), &plan(60), &CancellationToken::new()).await;
    let found = outcome.result.unwrap();
    assert!(outcome.left.is_empty());
    assert_eq!(found.verdict, Verdict::Intact);
    let ing = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    let mut want: Vec<(String, String)> = [
        ("POST", format!("{NS}/pods?")),
        ("POST", format!("{NS}/services?")),
        ("POST", format!("{ing}?")),
        ("GET", format!("{NS}/pods/{POD}")),
        ("GET", format!("{NS}/pods/{POD}")),
        ("POST", format!("{NS}/pods?")),
        ("GET", format!("{NS}/pods/{CALLER}")),
        ("GET", format!("{NS}/pods/{CALLER}/log?")),
        ("GET", format!("{ing}/{POD}")),
        ("GET", "/api/v1/nodes?".to_string()),
    ]
    .into_iter()
    .map(|(m, u)| (m.to_string(), u))
    .collect();
    let pods = format!("{NS}/pods");
    let svcs = format!("{NS}/services");
    want.extend(deletes(&[
        (&pods, CALLER),
        (ing, POD),
        (&svcs, POD),
        (&pods, POD),
    ]));
    assert_eq!(calls, want);
    assert_eq!(
        lines,
        [
            format!("created Pod default/{POD}"),
            format!("created Service default/{POD}"),
            format!("created Ingress default/{POD}"),
            format!("Pod default/{POD} (whoami) is ready"),
            format!("created Pod default/{CALLER}"),
            format!("Pod default/{CALLER} (caller) ended: Succeeded"),
            format!("deleted Pod default/{CALLER}"),
            format!("deleted Ingress default/{POD}"),
            format!("deleted Service default/{POD}"),
            format!("deleted Pod default/{POD}"),
        ]
    );
    let text = found.to_text("default");
    assert!(
        text.contains("  client seen     10.244.1.7 (from X-Real-IP)\n"),
        "{text}"
    );
    assert!(
        text.ends_with("  verdict         intact: the backend saw the caller pod's address\n"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_address_gets_its_verdict() {
    for (headers, want) in [
        (vec![("X-Forwarded-For", "10.244.1.7")], Verdict::Intact),
        (vec![("X-Real-IP", "203.0.113.10")], Verdict::LoadBalancer),
        (vec![("X-Real-IP", "192.168.1.11")], Verdict::Node),
        (vec![("X-Real-IP", "10.244.0.9")], Verdict::Other),
        (vec![("User-Agent", "x")], Verdict::Missing),
    ] {
        let (outcome, _, _) = go(
            full_run(whoami(&headers)),
            &plan(60),
            &CancellationToken::new(),
        )
        .await;
        let found = outcome.result.unwrap();
        assert_eq!(found.verdict, want, "{headers:?}");
        let j = found.to_json("default");
        assert_eq!(j["exit_code"], u8::from(want != Verdict::Intact), "{j}");
        assert_eq!(j["caller"]["ips"], json!(["10.244.1.7"]));
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_ingress_still_removes_the_pod_and_service() {
    let forbidden = status(
        403,
        "Forbidden",
        "ingresses.networking.k8s.io is forbidden: User \"u\" cannot create resource \"ingresses\"",
    );
    let (outcome, lines, calls) = go(
        vec![
            echo("1"),
            echo("2"),
            reply(403, forbidden),
            deleted(),
            deleted(),
        ],
        &plan(60),
        &CancellationToken::new(),
    )
    .await;
    let Err(Failed::Step(e)) = outcome.result else {
        panic!("a refused create ended otherwise");
    };
    assert!(
        e.starts_with(&format!("creating Ingress default/{POD} failed: ")),
        "{e}"
    );
    assert!(
        e.ends_with("(forbidden: grant the RBAC listed in `ouroboros doctor client-ip --help`)"),
        "{e}"
    );
    assert!(outcome.left.is_empty());
    // The refused Ingress is not deleted: it was never made.
    let tail: Vec<_> = calls[3..].to_vec();
    let (pods, svcs) = (format!("{NS}/pods"), format!("{NS}/services"));
    assert_eq!(tail, deletes(&[(&svcs, POD), (&pods, POD)]));
    assert_eq!(lines.last().unwrap(), &format!("deleted Pod default/{POD}"));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_names_the_pod_and_removes_everything() {
    // Pending on every read of a 3 s run: read at 0, 1, 2 and 3 s (the deadline).
    let mut replies = vec![echo("1"), echo("2"), echo("3")];
    for _ in 0..4 {
        replies.push(pod(POD, json!({"phase": "Pending"})));
    }
    // Deleted newest first: the Ingress, the Service (404: gone already, nothing left), the Pod.
    replies.extend([
        deleted(),
        reply(404, status(404, "NotFound", "gone")),
        deleted(),
    ]);
    let (outcome, lines, calls) = go(replies, &plan(3), &CancellationToken::new()).await;
    let Err(Failed::Step(e)) = outcome.result else {
        panic!("a timeout ended otherwise");
    };
    assert_eq!(
        e,
        format!(
            "Pod default/{POD} did not become ready within 3s (phase Pending, not scheduled to \
             a node); its events: kubectl -n default describe pod {POD}"
        )
    );
    assert!(outcome.left.is_empty());
    assert_eq!(calls.iter().filter(|c| c.0 == "DELETE").count(), 3);
    assert!(
        lines.contains(&format!("deleted Service default/{POD} (gone already)")),
        "{lines:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_run_removes_what_it_made() {
    let mut replies = vec![echo("1"), echo("2"), echo("3")];
    for _ in 0..5 {
        replies.push(pod(POD, json!({"phase": "Pending"})));
    }
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        c.cancel();
    });
    // The script's replies after the waits are the deletes (each 200).
    let (client, task) = serve({
        let mut r = replies;
        // Reads at 0, 1, 2 s; the interruption at 2.5 s; then three deletes.
        r.truncate(6);
        r.extend([deleted(), deleted(), deleted()]);
        r
    });
    let mut lines = Vec::new();
    let outcome = run_plan(&client, &plan(60), &cancel, &mut |l| lines.push(l)).await;
    drop(client);
    let seen = task.await.unwrap();
    assert!(matches!(outcome.result, Err(Failed::Interrupted)));
    assert!(outcome.left.is_empty(), "{:?}", outcome.left);
    let got: Vec<(String, String)> = calls(&seen)
        .into_iter()
        .filter(|(m, _)| *m == "DELETE")
        .map(|(m, u)| (m.to_string(), u.to_string()))
        .collect();
    let ing = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    let (pods, svcs) = (format!("{NS}/pods"), format!("{NS}/services"));
    assert_eq!(got, deletes(&[(ing, POD), (&svcs, POD), (&pods, POD)]));
    assert!(
        lines.contains(&"stopped: interrupted".to_string()),
        "{lines:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_could_not_reach_the_backend_is_an_error_and_cleaned_up() {
    let mut r = full_run(
        json!({"call_error": "http://check.example.com/ within 57s: answered 404 Not Found"}),
    );
    // No Ingress or node reads after a failed call: straight to the deletes.
    r.drain(8..10);
    let (outcome, _, calls) = go(r, &plan(60), &CancellationToken::new()).await;
    let Err(Failed::Step(e)) = outcome.result else {
        panic!("a failed call ended otherwise");
    };
    assert_eq!(
        e,
        "the caller could not reach the backend: http://check.example.com/ within 57s: answered 404 Not Found"
    );
    assert_eq!(calls.iter().filter(|c| c.0 == "DELETE").count(), 4);
    assert!(outcome.left.is_empty());
}

/// Prints each verdict's report (`cargo test --test it doctor_client_ip::print -- --ignored
/// --nocapture`): the examples in docs/doctor.md.
#[tokio::test(start_paused = true)]
#[ignore]
async fn print_each_verdict() {
    for headers in [
        vec![
            ("X-Real-IP", "10.244.1.7"),
            ("X-Forwarded-For", "10.244.1.7"),
        ],
        vec![
            ("X-Real-IP", "203.0.113.10"),
            ("X-Forwarded-For", "203.0.113.10"),
        ],
        vec![
            ("X-Real-IP", "192.168.1.11"),
            ("X-Forwarded-For", "192.168.1.11"),
        ],
        vec![("User-Agent", "x")],
    ] {
        let (outcome, _, _) = go(
            full_run(whoami(&headers)),
            &plan(60),
            &CancellationToken::new(),
        )
        .await;
        println!("{}", outcome.result.unwrap().to_text("default"));
    }
}

/// The binary against the mock API over HTTP: a whoami Pod that never becomes ready, a handler
/// answering creates with what was sent and deletes with success.
fn pending_cluster() -> (crate::kube_mock::HttpApi, crate::kube_mock::Routed) {
    use crate::kube_mock::{http, Answer};
    http(|s| match s.method.as_str() {
        "POST" => {
            let mut v = s.body.clone().unwrap();
            v["metadata"]["resourceVersion"] = json!("1");
            Answer::Json(201, v)
        }
        "GET" => Answer::Json(
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"containers": []}, "status": {"phase": "Pending"}}),
        ),
        "DELETE" => Answer::Json(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        _ => Answer::Json(500, status(500, "InternalError", "unexpected")),
    })
}

/// Ctrl-C while waiting: the binary removes what it created, says so and exits 1.
#[test]
fn sigint_removes_what_the_binary_created() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (api, routed) = pending_cluster();
    let mut child = crate::common::command("doctor")
        .args([
            "client-ip",
            "--host",
            "check.example.com",
            "--timeout",
            "60s",
            "--kubeconfig",
        ])
        .arg(api.kubeconfig(dir.path()))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("created Ingress") {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "ended early: {seen}");
        seen.push_str(&line);
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{seen}{rest}");
    assert!(
        rest.lines()
            .any(|l| l == "error: interrupted; removed what it created"),
        "{seen}{rest}"
    );
    let deletes = routed.matching("DELETE", "/");
    let kinds: Vec<&str> = deletes
        .iter()
        .map(|(u, _)| u.split('/').nth_back(1).unwrap())
        .collect();
    assert_eq!(kinds, ["ingresses", "services", "pods"], "{deletes:?}");
}

/// `--output json` keeps stdout JSON when the run ends without a verdict, and bad flags exit 64
/// before any API call.
#[test]
fn json_on_failure_and_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (api, routed) = pending_cluster();
    let out = crate::common::command("doctor")
        .args([
            "client-ip",
            "--host",
            "check.example.com",
            "--timeout",
            "1s",
            "--output",
            "json",
        ])
        .arg("--kubeconfig")
        .arg(api.kubeconfig(dir.path()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 1);
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("did not become ready within 1s") && e.ends_with("; removed what it created"),
        "{e}"
    );
    assert_eq!(routed.count("DELETE", "/"), 3);
    let before = routed.calls().len();
    let out = crate::common::command("doctor")
        .args([
            "client-ip",
            "--host",
            "Bad_Host",
            "--output",
            "json",
            "--kubeconfig",
        ])
        .arg(api.kubeconfig(dir.path()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 64);
    assert_eq!(routed.calls().len(), before, "a usage error made API calls");
}
