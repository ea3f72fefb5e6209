//! The coredns and coredns-import write paths against a mock Kubernetes API (kube-rs's
//! mock-service pattern): every request the code makes is recorded and checked for method, exact
//! path and query, and body; anything beyond the scripted replies fails the test.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use kube::Client;

use crate::kube_mock::{calls, conflict, echo, reply, serve, status};
use serde_json::{json, Value};

use ouroboros::dns::answer::{Answer, ProxyAddrs};
use ouroboros::dns::write::apply::{
    fingerprint, ApplyError, CorefileWriter, ImportWriter, Outcome, Retry,
};
use ouroboros::dns::ConfigMapKey;
use ouroboros::dns::{coredns_import, corefile, BEGIN_MARKER};
use ouroboros::hostname::{HostPolicy, Hostname};

const COREDNS_PATH: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
const COREDNS_PUT: &str =
    "/api/v1/namespaces/kube-system/configmaps/coredns?&fieldManager=ouroboros";
const CUSTOM_PATH: &str = "/api/v1/namespaces/kube-system/configmaps/coredns-custom";
const CUSTOM_PUT: &str =
    "/api/v1/namespaces/kube-system/configmaps/coredns-custom?&fieldManager=ouroboros";
const CUSTOM_DELETE: &str = "/api/v1/namespaces/kube-system/configmaps/coredns-custom?";
const CONFIGMAPS_POST: &str = "/api/v1/namespaces/kube-system/configmaps?&fieldManager=ouroboros";
const KEY: &str = "ouroboros.override";

fn corefile_fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corefiles")
        .join(name);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

/// The answer the writers render: the template pair for an IPv4-only proxy.
fn proxy() -> Answer {
    Answer::Template(ProxyAddrs::new(&["10.96.0.53".parse().unwrap()]).unwrap())
}

/// A ConfigMap as the API server returns it (with managedFields, which we must not send back).
fn configmap(name: &str, rv: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "uid": "8d5c1f4e-2f0a-4a52-9a57-3f1e0c6b7a11",
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-30T08:12:44Z",
            "labels": labels,
            "managedFields": [{
                "manager": "kubeadm",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-30T08:12:44Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:Corefile": {}}}
            }]
        },
        "data": data
    })
}

fn coredns_cm(rv: &str, corefile: &str) -> Value {
    configmap("coredns", rv, json!({}), json!({ "Corefile": corefile }))
}

fn coredns_writer(client: Client) -> CorefileWriter {
    CorefileWriter::new(client, ConfigMapKey::coredns_default(), Retry::default())
}

fn import_writer(client: Client) -> ImportWriter {
    ImportWriter::new(client, ConfigMapKey::import_default(), Retry::default())
}

#[tokio::test]
async fn coredns_first_sync_writes_once_second_only_reads() {
    let original = corefile_fixture("kubeadm.Corefile");
    let want = hosts(&["app.example.com", "*.example.org"]);
    let spliced = corefile::splice(&original, &want, &proxy()).unwrap().text;
    let (client, task) = serve(vec![
        reply(200, coredns_cm("1234", &original)),
        echo("1235"),
        reply(200, coredns_cm("1235", &spliced)),
    ]);
    let w = coredns_writer(client);

    let first = w.apply(&want, &proxy()).await.unwrap();
    assert_eq!(first.outcome, Outcome::Written);
    assert_eq!(first.conflicts, 0);
    let f = first.findings.unwrap();
    assert!(f.has_reload && !f.imports_custom_override);

    let change = first.change.unwrap();
    assert_eq!(change.before.as_deref(), Some(original.as_str()));
    assert_eq!(change.after.as_deref(), Some(spliced.as_str()));
    // The revert watch knows our write's echo by these.
    let key = ConfigMapKey::coredns_default();
    assert_eq!(first.texts, [(key.clone(), fingerprint(&spliced))]);

    let second = w.apply(&want, &proxy()).await.unwrap();
    assert_eq!(second.outcome, Outcome::Unchanged);
    assert_eq!(second.change, None);
    assert_eq!(second.texts, [(key, fingerprint(&spliced))], "as read");
    drop(w);

    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", COREDNS_PATH),
            ("PUT", COREDNS_PUT),
            ("GET", COREDNS_PATH)
        ]
    );
    assert!(seen[0].body.is_none());
    let put = seen[1].body.as_ref().unwrap();
    assert_eq!(put["metadata"]["resourceVersion"], "1234");
    assert_eq!(put["metadata"]["name"], "coredns");
    assert_eq!(put["metadata"]["namespace"], "kube-system");
    assert!(put["metadata"].get("managedFields").is_none(), "{put}");
    assert_eq!(put["data"], json!({ "Corefile": spliced }));
    let text = put["data"]["Corefile"].as_str().unwrap();
    assert!(text.contains(BEGIN_MARKER));
    assert!(text.contains("    template IN A example.com example.org {\n"));
    assert!(text.contains(r"match ^(?:[a-z0-9-]+\.example\.org|app\.example\.com)\.$"));
    assert!(text.contains(r#"answer "{{ .Name }} 30 IN A 10.96.0.53""#));
}

#[tokio::test(start_paused = true)]
async fn coredns_conflict_is_retried_from_the_get() {
    let original = corefile_fixture("kubeadm.Corefile");
    // Between our read and write, someone else edits the Corefile outside our block.
    let theirs = original.replace("cache 30", "cache 60");
    let want = hosts(&["app.example.com"]);
    let (client, task) = serve(vec![
        reply(200, coredns_cm("1234", &original)),
        conflict(),
        reply(200, coredns_cm("1240", &theirs)),
        echo("1241"),
    ]);
    let w = coredns_writer(client);
    let start = tokio::time::Instant::now();
    let applied = w.apply(&want, &proxy()).await.unwrap();
    assert_eq!(applied.outcome, Outcome::Written);
    assert_eq!(applied.conflicts, 1);
    assert!(start.elapsed() >= Retry::default().backoff, "no backoff");
    drop(w);

    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", COREDNS_PATH),
            ("PUT", COREDNS_PUT),
            ("GET", COREDNS_PATH),
            ("PUT", COREDNS_PUT)
        ]
    );
    assert_eq!(
        seen[1].body.as_ref().unwrap()["metadata"]["resourceVersion"],
        "1234"
    );
    let retry = seen[3].body.as_ref().unwrap();
    assert_eq!(retry["metadata"]["resourceVersion"], "1240");
    let text = retry["data"]["Corefile"].as_str().unwrap();
    assert_eq!(
        text,
        corefile::splice(&theirs, &want, &proxy()).unwrap().text
    );
    assert!(
        text.contains("cache 60"),
        "the other writer's change was lost"
    );
}

#[tokio::test(start_paused = true)]
async fn coredns_conflicts_are_bounded() {
    let original = corefile_fixture("kubeadm.Corefile");
    let mut replies = Vec::new();
    for i in 0..5 {
        replies.push(reply(200, coredns_cm(&format!("{}", 100 + i), &original)));
        replies.push(conflict());
    }
    let (client, task) = serve(replies);
    let w = coredns_writer(client);
    let start = tokio::time::Instant::now();
    let err = w
        .apply(&hosts(&["app.example.com"]), &proxy())
        .await
        .unwrap_err();
    // 100 + 200 + 400 + 800 ms between the five attempts.
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
    assert!(
        matches!(err, ApplyError::Conflicts { attempts: 5, .. }),
        "{err:?}"
    );
    assert_eq!(err.reason(), "conflict");
    let msg = err.to_string();
    assert!(
        msg.contains("kube-system/coredns") && msg.contains("5 attempts"),
        "{msg}"
    );
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(seen.len(), 10);
    for pair in seen.chunks(2) {
        assert_eq!(calls(pair), [("GET", COREDNS_PATH), ("PUT", COREDNS_PUT)]);
    }
}

#[tokio::test]
async fn coredns_unparseable_corefile_is_never_written() {
    let bad = corefile_fixture("bad/two-blocks.Corefile");
    let (client, task) = serve(vec![reply(200, coredns_cm("77", &bad))]);
    let w = coredns_writer(client);
    let err = w
        .apply(&hosts(&["app.example.com"]), &proxy())
        .await
        .unwrap_err();
    drop(w);
    let ApplyError::Unparseable { target, line, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*target, ConfigMapKey::coredns_default());
    // The second BEGIN marker.
    assert_eq!(*line, 6);
    assert_eq!(err.reason(), "unparseable");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "ConfigMap kube-system/coredns key \"Corefile\": cannot edit the Corefile, line 6: "
        ),
        "{msg}"
    );
    assert!(msg.contains("nothing was written"), "{msg}");
    assert_eq!(calls(&task.await.unwrap()), [("GET", COREDNS_PATH)]);
}

#[tokio::test]
async fn coredns_forbidden_names_verb_resource_and_role() {
    let original = corefile_fixture("kubeadm.Corefile");
    let (client, task) = serve(vec![
        reply(200, coredns_cm("1234", &original)),
        reply(
            403,
            status(
                403,
                "Forbidden",
                "configmaps \"coredns\" is forbidden: User \
                 \"system:serviceaccount:ouroboros:ouroboros\" cannot update resource \
                 \"configmaps\" in API group \"\" in the namespace \"kube-system\"",
            ),
        ),
    ]);
    let w = coredns_writer(client);
    let err = w
        .apply(&hosts(&["app.example.com"]), &proxy())
        .await
        .unwrap_err();
    drop(w);
    assert_eq!(err.reason(), "forbidden");
    let msg = err.to_string();
    assert!(
        msg.starts_with("update configmaps/coredns in kube-system: forbidden (configmaps \"coredns\" is forbidden: User"),
        "{msg}"
    );
    assert!(
        msg.ends_with(
            "grant the controller's ServiceAccount `update` on configmaps (resourceNames: \
             [coredns]) in namespace kube-system (the chart's coredns-mode Role does)"
        ),
        "{msg}"
    );
    // A 403 is not a conflict: no retry.
    assert_eq!(
        calls(&task.await.unwrap()),
        [("GET", COREDNS_PATH), ("PUT", COREDNS_PUT)]
    );
}

#[tokio::test]
async fn coredns_forbidden_get() {
    let (client, task) = serve(vec![reply(
        403,
        status(403, "Forbidden", "configmaps \"coredns\" is forbidden"),
    )]);
    let w = coredns_writer(client);
    let msg = w
        .apply(&hosts(&["a.example.com"]), &proxy())
        .await
        .unwrap_err()
        .to_string();
    drop(w);
    assert!(
        msg.starts_with("get configmaps/coredns in kube-system: forbidden"),
        "{msg}"
    );
    assert!(
        msg.contains("`get` on configmaps (resourceNames: [coredns])"),
        "{msg}"
    );
    assert_eq!(calls(&task.await.unwrap()), [("GET", COREDNS_PATH)]);
}

#[tokio::test]
async fn coredns_missing_configmap_or_key() {
    let (client, task) = serve(vec![
        reply(
            404,
            status(404, "NotFound", "configmaps \"coredns\" not found"),
        ),
        reply(
            200,
            configmap("coredns", "5", json!({}), json!({ "Corefile.bak": "x" })),
        ),
    ]);
    let w = coredns_writer(client);
    let h = hosts(&["a.example.com"]);

    let err = w.apply(&h, &proxy()).await.unwrap_err();
    assert_eq!(err.reason(), "not_found");
    let msg = err.to_string();
    assert!(
        msg.starts_with("ConfigMap kube-system/coredns not found: check --coredns-namespace and --coredns-configmap"),
        "{msg}"
    );

    let err = w.apply(&h, &proxy()).await.unwrap_err();
    assert_eq!(err.reason(), "key_missing");
    assert_eq!(
        err.to_string(),
        "ConfigMap kube-system/coredns has no key \"Corefile\" (it has: Corefile.bak): check --coredns-key"
    );
    drop(w);
    assert_eq!(
        calls(&task.await.unwrap()),
        [("GET", COREDNS_PATH), ("GET", COREDNS_PATH)]
    );
}

#[tokio::test]
async fn coredns_cleanup_removes_the_block_and_then_reads_only() {
    let with_block = corefile_fixture("stale-block.Corefile");
    let without = corefile::splice(&with_block, &BTreeSet::new(), &proxy())
        .unwrap()
        .text;
    assert!(!without.contains(BEGIN_MARKER));
    let (client, task) = serve(vec![
        reply(200, coredns_cm("900", &with_block)),
        echo("901"),
        reply(200, coredns_cm("901", &without)),
    ]);
    let w = coredns_writer(client);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Written);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", COREDNS_PATH),
            ("PUT", COREDNS_PUT),
            ("GET", COREDNS_PATH)
        ]
    );
    let put = seen[1].body.as_ref().unwrap();
    assert_eq!(put["metadata"]["resourceVersion"], "900");
    assert_eq!(put["data"]["Corefile"], json!(without));
}

#[tokio::test]
async fn coredns_reports_missing_reload_and_other_keys_survive() {
    let original = corefile_fixture("no-reload.Corefile");
    let cm = configmap(
        "coredns",
        "3",
        json!({ "eks.amazonaws.com/component": "coredns", "k8s-app": "kube-dns" }),
        json!({ "Corefile": original, "NodeHosts": "10.0.0.1 node-a\n" }),
    );
    let (client, task) = serve(vec![reply(200, cm), echo("4")]);
    let w = coredns_writer(client);
    let applied = w.apply(&hosts(&["a.example.com"]), &proxy()).await.unwrap();
    drop(w);
    assert!(!applied.findings.unwrap().has_reload);
    let seen = task.await.unwrap();
    let put = seen[1].body.as_ref().unwrap();
    assert_eq!(put["data"]["NodeHosts"], "10.0.0.1 node-a\n");
    assert_eq!(put["metadata"]["labels"]["k8s-app"], "kube-dns");
    assert_eq!(
        put["metadata"]["uid"],
        "8d5c1f4e-2f0a-4a52-9a57-3f1e0c6b7a11"
    );
}

#[tokio::test]
async fn import_creates_the_configmap_when_absent_then_reads_only() {
    let want = hosts(&["app.example.com", "*.example.org"]);
    let snippet = coredns_import::render(&want, &proxy());
    let (client, task) = serve(vec![
        reply(
            404,
            status(404, "NotFound", "configmaps \"coredns-custom\" not found"),
        ),
        echo("10"),
        reply(
            200,
            configmap(
                "coredns-custom",
                "10",
                json!({ "app.kubernetes.io/managed-by": "ouroboros" }),
                json!({ KEY: snippet }),
            ),
        ),
    ]);
    let w = import_writer(client);
    let first = w.apply(&want, &proxy()).await.unwrap();
    assert_eq!(first.outcome, Outcome::Written);
    assert_eq!(first.findings, None);
    assert_eq!(
        w.apply(&want, &proxy()).await.unwrap().outcome,
        Outcome::Unchanged
    );
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", CUSTOM_PATH),
            ("POST", CONFIGMAPS_POST),
            ("GET", CUSTOM_PATH)
        ]
    );
    assert_eq!(
        seen[1].body.as_ref().unwrap(),
        &json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "coredns-custom",
                "namespace": "kube-system",
                "labels": { "app.kubernetes.io/managed-by": "ouroboros" }
            },
            "data": { KEY: snippet }
        })
    );
}

#[tokio::test]
async fn import_updates_only_our_key() {
    let want = hosts(&["app.example.com"]);
    let theirs = json!({
        "log.override": "log\n",
        "example.server": "example.io:53 {\n    forward . 10.0.0.53\n}\n",
        KEY: "# === BEGIN ouroboros (do not edit by hand) ===\nrewrite name old.example.com x.\n# === END ouroboros ===\n"
    });
    let (client, task) = serve(vec![
        reply(
            200,
            configmap("coredns-custom", "55", json!({}), theirs.clone()),
        ),
        echo("56"),
    ]);
    let w = import_writer(client);
    assert_eq!(
        w.apply(&want, &proxy()).await.unwrap().outcome,
        Outcome::Written
    );
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(calls(&seen), [("GET", CUSTOM_PATH), ("PUT", CUSTOM_PUT)]);
    let put = seen[1].body.as_ref().unwrap();
    assert_eq!(put["metadata"]["resourceVersion"], "55");
    assert!(put["metadata"].get("managedFields").is_none());
    // Not ours: no label added.
    assert_eq!(put["metadata"]["labels"], json!({}));
    let mut expected = theirs;
    expected[KEY] = json!(coredns_import::render(&want, &proxy()));
    assert_eq!(put["data"], expected);
}

#[tokio::test(start_paused = true)]
async fn import_create_race_is_retried_from_the_get() {
    let want = hosts(&["app.example.com"]);
    let (client, task) = serve(vec![
        reply(404, status(404, "NotFound", "not found")),
        reply(
            409,
            status(
                409,
                "AlreadyExists",
                "configmaps \"coredns-custom\" already exists",
            ),
        ),
        reply(
            200,
            configmap(
                "coredns-custom",
                "7",
                json!({}),
                json!({ "other.override": "log\n" }),
            ),
        ),
        echo("8"),
    ]);
    let w = import_writer(client);
    let applied = w.apply(&want, &proxy()).await.unwrap();
    assert_eq!((applied.outcome, applied.conflicts), (Outcome::Written, 1));
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", CUSTOM_PATH),
            ("POST", CONFIGMAPS_POST),
            ("GET", CUSTOM_PATH),
            ("PUT", CUSTOM_PUT)
        ]
    );
    let put = seen[3].body.as_ref().unwrap();
    assert_eq!(put["data"]["other.override"], "log\n");
    assert_eq!(put["metadata"]["resourceVersion"], "7");
}

#[tokio::test]
async fn import_cleanup_removes_only_our_key() {
    let (client, task) = serve(vec![
        reply(
            200,
            configmap(
                "coredns-custom",
                "20",
                json!({}),
                json!({ "log.override": "log\n", KEY: "# === BEGIN ouroboros (do not edit by hand) ===\n# === END ouroboros ===\n" }),
            ),
        ),
        echo("21"),
        reply(
            200,
            configmap(
                "coredns-custom",
                "21",
                json!({}),
                json!({ "log.override": "log\n" }),
            ),
        ),
    ]);
    let w = import_writer(client);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Written);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", CUSTOM_PATH),
            ("PUT", CUSTOM_PUT),
            ("GET", CUSTOM_PATH)
        ]
    );
    let put = seen[1].body.as_ref().unwrap();
    assert_eq!(put["data"], json!({ "log.override": "log\n" }));
    assert_eq!(put["metadata"]["resourceVersion"], "20");
}

#[tokio::test]
async fn import_cleanup_deletes_a_configmap_we_created_once_empty() {
    let (client, task) = serve(vec![
        reply(
            200,
            configmap(
                "coredns-custom",
                "30",
                json!({ "app.kubernetes.io/managed-by": "ouroboros" }),
                json!({ KEY: "x" }),
            ),
        ),
        reply(
            200,
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": "coredns-custom",
                    "kind": "configmaps",
                    "uid": "8d5c1f4e-2f0a-4a52-9a57-3f1e0c6b7a11"
                }
            }),
        ),
        reply(404, status(404, "NotFound", "not found")),
    ]);
    let w = import_writer(client);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Written);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", CUSTOM_PATH),
            ("DELETE", CUSTOM_DELETE),
            ("GET", CUSTOM_PATH)
        ]
    );
    let body = seen[1].body.as_ref().unwrap();
    assert_eq!(
        body["preconditions"],
        json!({ "resourceVersion": "30", "uid": "8d5c1f4e-2f0a-4a52-9a57-3f1e0c6b7a11" })
    );
}

#[tokio::test]
async fn import_forbidden_create_names_the_unrestricted_resource() {
    let (client, task) = serve(vec![
        reply(404, status(404, "NotFound", "not found")),
        reply(
            403,
            status(403, "Forbidden", "cannot create resource \"configmaps\""),
        ),
    ]);
    let w = import_writer(client);
    let msg = w
        .apply(&hosts(&["a.example.com"]), &proxy())
        .await
        .unwrap_err()
        .to_string();
    drop(w);
    assert!(
        msg.starts_with("create configmaps/coredns-custom in kube-system: forbidden"),
        "{msg}"
    );
    assert!(
        msg.ends_with(
            "grant the controller's ServiceAccount `create` on configmaps in namespace \
             kube-system (the chart's coredns-import-mode Role does)"
        ),
        "{msg}"
    );
    assert_eq!(
        calls(&task.await.unwrap()),
        [("GET", CUSTOM_PATH), ("POST", CONFIGMAPS_POST)]
    );
}

#[tokio::test]
async fn coredns_dry_run_reads_and_reports_the_change_only() {
    let original = corefile_fixture("k3s.Corefile");
    let want = hosts(&["app.example.com"]);
    let (client, task) = serve(vec![reply(200, coredns_cm("42", &original))]);
    let w = coredns_writer(client).dry_run(true);
    let applied = w.apply(&want, &proxy()).await.unwrap();
    drop(w);
    assert_eq!(applied.outcome, Outcome::DryRun);
    let change = applied.change.unwrap();
    assert_eq!(change.before.as_deref(), Some(original.as_str()));
    assert_eq!(
        change.after,
        Some(corefile::splice(&original, &want, &proxy()).unwrap().text)
    );
    assert_eq!(calls(&task.await.unwrap()), [("GET", COREDNS_PATH)]);
}

#[tokio::test]
async fn import_dry_run_never_creates() {
    let want = hosts(&["app.example.com"]);
    let (client, task) = serve(vec![reply(404, status(404, "NotFound", "not found"))]);
    let w = import_writer(client).dry_run(true);
    let applied = w.apply(&want, &proxy()).await.unwrap();
    drop(w);
    assert_eq!(applied.outcome, Outcome::DryRun);
    let change = applied.change.unwrap();
    assert_eq!(change.before, None);
    assert_eq!(change.after, Some(coredns_import::render(&want, &proxy())));
    assert_eq!(calls(&task.await.unwrap()), [("GET", CUSTOM_PATH)]);
}

#[tokio::test]
async fn server_error_names_the_call_and_is_not_retried_here() {
    let original = corefile_fixture("kubeadm.Corefile");
    let (client, task) = serve(vec![
        reply(200, coredns_cm("1", &original)),
        reply(
            500,
            status(500, "InternalError", "etcdserver: request timed out"),
        ),
    ]);
    let w = coredns_writer(client);
    let err = w
        .apply(&hosts(&["a.example.com"]), &proxy())
        .await
        .unwrap_err();
    drop(w);
    assert_eq!(err.reason(), "api");
    assert_eq!(*err.target(), ConfigMapKey::coredns_default());
    let msg = err.to_string();
    assert_eq!(
        msg,
        "update ConfigMap kube-system/coredns: HTTP 500 InternalError: etcdserver: request timed out"
    );
    assert_eq!(
        calls(&task.await.unwrap()),
        [("GET", COREDNS_PATH), ("PUT", COREDNS_PUT)]
    );
}

#[tokio::test(start_paused = true)]
async fn import_cleanup_delete_precondition_conflict_is_retried() {
    let ours = |rv: &str, data: Value| {
        configmap(
            "coredns-custom",
            rv,
            json!({ "app.kubernetes.io/managed-by": "ouroboros" }),
            data,
        )
    };
    let (client, task) = serve(vec![
        reply(200, ours("30", json!({ KEY: "x" }))),
        reply(
            409,
            status(409, "Conflict", "Precondition failed: ResourceVersion in precondition: 30, ResourceVersion in object meta: 31"),
        ),
        // Someone added a key meanwhile: now it must be kept, so an update instead of a delete.
        reply(200, ours("31", json!({ KEY: "x", "theirs.override": "log\n" }))),
        echo("32"),
    ]);
    let w = import_writer(client);
    let applied = w.cleanup().await.unwrap();
    drop(w);
    assert_eq!((applied.outcome, applied.conflicts), (Outcome::Written, 1));
    let seen = task.await.unwrap();
    assert_eq!(
        calls(&seen),
        [
            ("GET", CUSTOM_PATH),
            ("DELETE", CUSTOM_DELETE),
            ("GET", CUSTOM_PATH),
            ("PUT", CUSTOM_PUT)
        ]
    );
    let put = seen[3].body.as_ref().unwrap();
    assert_eq!(put["data"], json!({ "theirs.override": "log\n" }));
    assert_eq!(put["metadata"]["resourceVersion"], "31");
}

#[tokio::test]
async fn configured_namespace_name_and_key_are_used() {
    let original = corefile_fixture("rke2.Corefile");
    let mut cm = coredns_cm("8", "");
    cm["metadata"]["name"] = json!("rke2-coredns-rke2-coredns");
    cm["metadata"]["namespace"] = json!("dns-system");
    cm["data"] = json!({ "Corefile.main": original });
    let (client, task) = serve(vec![reply(200, cm), echo("9")]);
    let target = ConfigMapKey::new("dns-system", "rke2-coredns-rke2-coredns", "Corefile.main");
    let w = CorefileWriter::new(client, target.clone(), Retry::default());
    assert_eq!(*w.target(), target);
    let want = hosts(&["a.example.com"]);
    assert_eq!(
        w.apply(&want, &proxy()).await.unwrap().outcome,
        Outcome::Written
    );
    drop(w);
    let seen = task.await.unwrap();
    let path = "/api/v1/namespaces/dns-system/configmaps/rke2-coredns-rke2-coredns";
    assert_eq!(
        calls(&seen),
        [
            ("GET", path),
            ("PUT", &*format!("{path}?&fieldManager=ouroboros"))
        ]
    );
    assert_eq!(
        seen[1].body.as_ref().unwrap()["data"],
        json!({ "Corefile.main": corefile::splice(&original, &want, &proxy()).unwrap().text })
    );
}

/// A set whose block would push the ConfigMap over the API server's 1 MiB is refused before any
/// write: one GET, no PUT, a `too_large` error that names the ways out.
#[tokio::test]
async fn coredns_over_budget_is_never_sent() {
    let original = corefile_fixture("kubeadm.Corefile");
    let (client, task) = serve(vec![reply(200, coredns_cm("1234", &original))]);
    let w = coredns_writer(client);
    // Hash-like labels share almost nothing, so 60,000 of them cannot be compressed to fit.
    let names: Vec<String> = (0..60_000u64)
        .map(|i| {
            format!(
                "h{:016x}.example.com",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            )
        })
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let err = w.apply(&hosts(&refs), &proxy()).await.unwrap_err();
    drop(w);
    assert_eq!(err.reason(), "too_large");
    let msg = err.to_string();
    for part in [
        "1048576",
        "coredns-import",
        "external-dns",
        "nothing was written",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert_eq!(calls(&task.await.unwrap()), [("GET", COREDNS_PATH)]);
}
