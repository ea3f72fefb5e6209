//! `ouroboros cleanup` end to end with the built binary: etc-hosts on a temp file (no API), and
//! external-dns against a scripted plain-HTTP API reached through a kubeconfig.

use std::process::Output;

use serde_json::{json, Value};

use crate::common;
use crate::kube_mock;
use crate::kube_mock::{http_script, reply, Reply};
use crate::support::temp_dir;

use ouroboros::dns::{BEGIN_MARKER, END_MARKER};

fn cleanup(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::command("cleanup");
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running ouroboros cleanup")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const BASE: &str = "127.0.0.1 localhost\n::1 localhost\n";

#[test]
fn etc_hosts_block_removed_then_nothing_to_do() {
    let dir = temp_dir("cleanup-hosts");
    let path = dir.path().join("hosts");
    let with_block = format!(
        "{BASE}{BEGIN_MARKER}\n10.43.0.5 www.example.com\nfd00::5 www.example.com\n{END_MARKER}\n"
    );
    std::fs::write(&path, &with_block).unwrap();
    let p = path.display().to_string();

    let o = cleanup(&["--mode", "etc-hosts", "--etc-hosts", &p], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), BASE);
    let log = stderr(&o);
    assert!(
        log.contains("removed what ouroboros wrote") && log.contains("10.43.0.5 www.example.com"),
        "{log}"
    );

    // Again: nothing to remove, still success; flags from the environment work the same.
    let o = cleanup(
        &[],
        &[
            ("OUROBOROS_CLEANUP_MODE", "etc-hosts"),
            ("OUROBOROS_CLEANUP_ETC_HOSTS", &p),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to remove"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), BASE);

    // Dry run reports and keeps the block.
    std::fs::write(&path, &with_block).unwrap();
    let o = cleanup(
        &["--mode", "etc-hosts", "--etc-hosts", &p, "--dry-run"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("dry run"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), with_block);
}

#[test]
fn etc_hosts_failures_exit_1_and_bad_usage_64() {
    let dir = temp_dir("cleanup-hosts-bad");
    let path = dir.path().join("hosts");
    let bad = format!(
        "{BEGIN_MARKER}\n{END_MARKER}\n127.0.0.1 localhost\n{BEGIN_MARKER}\n{END_MARKER}\n"
    );
    std::fs::write(&path, &bad).unwrap();
    let p = path.display().to_string();
    let o = cleanup(&["--mode", "etc-hosts", "--etc-hosts", &p], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let log = stderr(&o);
    assert!(
        log.contains(&p) && log.contains("line 4") && log.contains("after 1 attempt"),
        "{log}"
    );
    // No retry and so no backoff wait: each retry is logged before its wait.
    assert!(
        !log.contains("cleanup failed; retrying"),
        "a permanent error is not retried: {log}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), bad);

    let missing = dir.path().join("nope").display().to_string();
    let o = cleanup(&["--mode", "etc-hosts", "--etc-hosts", &missing], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--etc-hosts"), "{}", stderr(&o));

    for args in [
        &["--mode", "etc-hosts", "--attempts", "0"][..],
        &["--mode", "nope"][..],
        &["--mode", "etc-hosts", "--proxy-ip", "not-an-ip"][..],
    ] {
        let o = cleanup(args, &[]);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
    }
}

/// The fake API over plain HTTP answering `replies` in order (500 past the script), and the
/// kubeconfig that points the binary at it.
fn scripted_api(
    dir: &std::path::Path,
    replies: Vec<(u16, Value)>,
) -> (kube_mock::HttpApi, kube_mock::Routed, String) {
    let replies: Vec<Reply> = replies.into_iter().map(|(c, v)| reply(c, v)).collect();
    let (api, seen) = http_script(replies);
    let kc = api.kubeconfig(dir).display().to_string();
    (api, seen, kc)
}

/// (method, target, body) of every request the API saw.
fn recorded(api: &kube_mock::Routed) -> Vec<(String, String, Option<Value>)> {
    let seen = api.seen.lock().unwrap();
    seen.iter()
        .map(|s| (s.method.clone(), s.uri.clone(), s.body.clone()))
        .collect()
}

fn endpoint(name: &str, instance: &str, rv: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "dns", "uid": format!("uid-{name}"),
                     "resourceVersion": rv,
                     "labels": {"app.kubernetes.io/managed-by": "ouroboros",
                                "ouroboros.io/instance": instance}},
        "spec": {"endpoints": [{"dnsName": "x.example.com", "recordType": "A",
                                "targets": ["10.0.0.1"], "recordTTL": 60}]}
    })
}

#[test]
fn external_dns_deletes_this_instances_objects_with_retries() {
    let dir = temp_dir("cleanup-ext");
    let success =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    let (_api, seen, kc) = scripted_api(
        dir.path(),
        vec![
            // A transient failure first: retried after the backoff. (kube's client retries 503
            // and 429 on its own; a 500 reaches us.)
            (
                500,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                   "reason": "InternalError", "message": "etcdserver: request timed out"}),
            ),
            (
                200,
                json!({"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpointList",
                   "metadata": {"resourceVersion": "9"},
                   "items": [endpoint("a-1", "blue", "5"), endpoint("b-2", "blue", "6")]}),
            ),
            (200, success.clone()),
            (200, success),
        ],
    );
    let o = cleanup(
        &[
            "--mode",
            "external-dns",
            "--kubeconfig",
            &kc,
            "--external-dns-namespace",
            "dns",
            "--instance",
            "blue",
        ],
        &[],
    );
    let log = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("cleanup failed; retrying"), "{log}");
    assert!(log.contains("a-1") && log.contains("b-2"), "{log}");
    let seen = recorded(&seen);
    let list = "/apis/externaldns.k8s.io/v1alpha1/namespaces/dns/dnsendpoints?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.io%2Finstance%3Dblue";
    let mut got: Vec<(&str, &str)> = seen
        .iter()
        .map(|(m, t, _)| (m.as_str(), t.as_str()))
        .collect();
    // The deletes run concurrently.
    got[2..].sort();
    assert_eq!(
        got,
        [
            ("GET", list),
            ("GET", list),
            (
                "DELETE",
                "/apis/externaldns.k8s.io/v1alpha1/namespaces/dns/dnsendpoints/a-1?"
            ),
            (
                "DELETE",
                "/apis/externaldns.k8s.io/v1alpha1/namespaces/dns/dnsendpoints/b-2?"
            ),
        ]
    );
    let a1 = seen.iter().find(|(_, t, _)| t.ends_with("/a-1?")).unwrap();
    assert_eq!(
        a1.2.as_ref().unwrap()["preconditions"],
        json!({"resourceVersion": "5", "uid": "uid-a-1"})
    );
}

#[test]
fn external_dns_forbidden_gives_up_with_the_rbac_hint() {
    let dir = temp_dir("cleanup-ext-403");
    let forbidden = (
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
               "reason": "Forbidden",
               "message": "dnsendpoints.externaldns.k8s.io is forbidden: cannot list"}),
    );
    // A missing grant does not come by itself: three attempts (the first two may meet an
    // authorizer that has not seen the hook's new Role yet), however many are allowed.
    let (_api, seen, kc) = scripted_api(
        dir.path(),
        vec![
            forbidden.clone(),
            forbidden.clone(),
            forbidden.clone(),
            forbidden,
        ],
    );
    let o = cleanup(
        &[
            "--mode",
            "external-dns",
            "--kubeconfig",
            &kc,
            "--external-dns-namespace",
            "dns",
            "--attempts",
            "5",
        ],
        &[],
    );
    let log = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(
        log.contains("failed after 3 attempt(s)")
            && log
                .contains("`list` on dnsendpoints (apiGroup externaldns.k8s.io) in namespace dns")
            && log.contains("the <fullname>-cleanup Role"),
        "{log}"
    );
    assert_eq!(log.matches("retrying").count(), 2, "{log}");
    assert_eq!(recorded(&seen).len(), 3);
}

#[test]
fn coredns_block_removed_through_the_api() {
    let dir = temp_dir("cleanup-coredns");
    let plain = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";
    let with_block = format!(
        ".:53 {{\n    errors\n    {BEGIN_MARKER}\n    rewrite name exact www.example.com ouroboros-proxy.ouroboros.svc.cluster.local.\n    {END_MARKER}\n    forward . /etc/resolv.conf\n    reload\n}}\n"
    );
    let cm = |rv: &str, corefile: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "coredns", "namespace": "kube-system", "resourceVersion": rv},
               "data": {"Corefile": corefile}})
    };
    let (_api, seen, kc) = scripted_api(
        dir.path(),
        vec![(200, cm("41", &with_block)), (200, cm("42", plain))],
    );
    let o = cleanup(&["--mode", "coredns", "--kubeconfig", &kc], &[]);
    let log = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let seen = recorded(&seen);
    let got: Vec<(&str, &str)> = seen
        .iter()
        .map(|(m, t, _)| (m.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("GET", "/api/v1/namespaces/kube-system/configmaps/coredns"),
            (
                "PUT",
                "/api/v1/namespaces/kube-system/configmaps/coredns?&fieldManager=ouroboros"
            ),
        ]
    );
    let put = seen[1].2.as_ref().unwrap();
    assert_eq!(put["data"]["Corefile"], plain);
    assert_eq!(put["metadata"]["resourceVersion"], "41");
    assert!(log.contains("rewrite name exact www.example.com"), "{log}");
}

/// With `--lease-name`, the controller's Lease goes after the block; one already gone (404) is
/// success, and the Lease is asked for by name alone (what the hook's Role grants).
#[test]
fn the_controllers_lease_is_deleted_after_the_block_and_404_is_fine() {
    let dir = temp_dir("cleanup-lease");
    let plain = ".:53 {\n    forward . /etc/resolv.conf\n    reload\n}\n";
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns", "namespace": "kube-system",
                                 "resourceVersion": "7"},
                    "data": {"Corefile": plain}});
    let deleted = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200});
    let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                      "reason": "NotFound",
                      "message": "leases.coordination.k8s.io \"ouroboros-controller\" not found"});
    let args = |kc: &str| -> Vec<String> {
        [
            "--mode",
            "coredns",
            "--kubeconfig",
            kc,
            "--lease-name",
            "ouroboros-controller",
            "--lease-namespace",
            "ouroboros",
        ]
        .map(String::from)
        .to_vec()
    };
    let lease = "/apis/coordination.k8s.io/v1/namespaces/ouroboros/leases/ouroboros-controller?";
    for (reply, said) in [
        (deleted, "deleted the controller's Lease"),
        (gone, "already gone"),
    ] {
        let code = reply["code"].as_u64().unwrap() as u16;
        let (_api, seen, kc) = scripted_api(dir.path(), vec![(200, cm.clone()), (code, reply)]);
        let a = args(&kc);
        let o = cleanup(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        let log = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{log}");
        assert!(log.contains(said), "{log}");
        let got: Vec<(String, String)> = recorded(&seen)
            .into_iter()
            .map(|(m, t, _)| (m, t))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "GET".to_string(),
                    "/api/v1/namespaces/kube-system/configmaps/coredns".to_string()
                ),
                ("DELETE".to_string(), lease.to_string()),
            ],
            "{log}"
        );
    }
    // Refused three times (a new Role may lag; more is a missing grant): exit 1, what to grant.
    let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                           "reason": "Forbidden", "message": "leases is forbidden"});
    let (_api, seen, kc) = scripted_api(
        dir.path(),
        vec![
            (200, cm),
            (403, forbidden.clone()),
            (403, forbidden.clone()),
            (403, forbidden),
        ],
    );
    let a = args(&kc);
    let o = cleanup(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let log = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(
        log.contains("cannot delete the controller's Lease ouroboros/ouroboros-controller")
            && log.contains("grant `delete` on leases"),
        "{log}"
    );
    assert_eq!(recorded(&seen).len(), 4);
    // Either flag alone is a usage error.
    let o = cleanup(&["--mode", "coredns", "--lease-name", "x"], &[]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
}
