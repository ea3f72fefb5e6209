//! The external-dns write path against a mock Kubernetes API (kube-rs's mock-service pattern):
//! each scenario asserts the exact requests (method, path and query, headers that matter, body)
//! and that nothing else was sent.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kube::Client;
use serde_json::{json, Value};

use crate::kube_mock;
use crate::kube_mock::{calls, echo, reply, serve, status, Seen};

use ouroboros::dns::external::{self, Options};
use ouroboros::dns::mode::external_dns::{
    desired, ExternalWriter, Output, Settings, ANNOTATION_PREFIXES,
};
use ouroboros::dns::write::apply::Outcome;
use ouroboros::dns::write::proxy_ips::ProxyIps;
use ouroboros::hostname::{HostPolicy, Hostname};

const DE: &str = "/apis/externaldns.k8s.io/v1alpha1/namespaces/ouroboros/dnsendpoints";
const SVC: &str = "/api/v1/namespaces/ouroboros/services";
const SELECTOR: &str =
    "labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.io%2Finstance%3Douroboros";
const PROXY: &str = "/api/v1/namespaces/ouroboros/services/ouroboros-proxy";

fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

fn host(n: &str) -> Hostname {
    hosts(&[n]).into_iter().next().unwrap()
}

fn name(n: &str) -> String {
    external::object_name(external::DEFAULT_INSTANCE, &host(n))
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn settings(instance: &str) -> Settings {
    Settings {
        namespace: "ouroboros".into(),
        instance: instance.into(),
        ttl: 60,
        labels: vec![],
        annotations: vec![],
        annotation_prefix: None,
        adopt: false,
    }
}

fn writer(client: Client, output: Output, ip_list: &[&str]) -> ExternalWriter {
    let ips = ProxyIps::new(
        Some(client.clone()),
        &ips(ip_list),
        "ouroboros",
        "ouroboros-proxy",
        "--external-dns-proxy-ip",
    );
    ExternalWriter::new(client, output, settings(external::DEFAULT_INSTANCE), ips).unwrap()
}

fn list_of(kind: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": if kind == "DNSEndpointList" { external::API_VERSION } else { "v1" },
        "kind": kind,
        "metadata": {"resourceVersion": "500"},
        "items": items
    })
}

fn metadata_list(items: Vec<Value>) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|o| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]}))
        .collect();
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "500"},
        "items": items
    })
}

/// An object as the server lists it: the desired body plus server fields.
fn served(mut body: Value, rv: &str, uid: &str) -> Value {
    body["metadata"]["resourceVersion"] = json!(rv);
    body["metadata"]["uid"] = json!(uid);
    body["metadata"]["generation"] = json!(1);
    body["metadata"]["managedFields"] = json!([{
        "manager": "ouroboros", "operation": "Apply", "apiVersion": body["apiVersion"],
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {
            "f:app.kubernetes.io/managed-by": {}, "f:ouroboros.io/instance": {}
        }}, "f:spec": {"f:endpoints": {}}}
    }]);
    body
}

fn want(output: Output, names: &[&str], ip_list: &[&str]) -> Vec<(String, Value)> {
    let opts = Options::new(
        "ouroboros",
        external::DEFAULT_INSTANCE,
        60,
        &ips(ip_list),
        &[],
        &[],
    )
    .unwrap();
    desired(output, &hosts(names), &opts, &ANNOTATION_PREFIXES)
        .into_iter()
        .collect()
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200})
}

fn patch_uri(base: &str, n: &str) -> String {
    format!("{base}/{n}?&force=true&fieldManager=ouroboros")
}

/// The calls with each run of writes (PATCH or DELETE) sorted: writes run concurrently, so
/// their order is not fixed.
fn calls_sorted(seen: &[Seen]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut run: Vec<(String, String)> = Vec::new();
    for (m, u) in calls(seen) {
        let c = (m.to_string(), u.to_string());
        if m == "PATCH" || m == "DELETE" {
            if run.last().is_some_and(|l| l.0 != m) {
                run.sort();
                out.append(&mut run);
            }
            run.push(c);
        } else {
            run.sort();
            out.append(&mut run);
            out.push(c);
        }
    }
    run.sort();
    out.append(&mut run);
    out
}

fn owned(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn find<'a>(seen: &'a [Seen], method: &str, uri: &str) -> &'a Seen {
    seen.iter()
        .find(|s| s.method == method && s.uri == uri)
        .unwrap_or_else(|| panic!("no {method} {uri}"))
}

fn assert_apply(seen: &Seen, body: &Value) {
    assert_eq!(seen.method, "PATCH");
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(seen.body.as_ref(), Some(body));
}

#[tokio::test]
async fn first_apply_then_nothing_to_do() {
    let names = ["www.example.com", "*.apps.example.com"];
    let w8 = want(Output::DnsEndpoint, &names, &["10.96.0.10", "fd00::a"]);
    let listed: Vec<Value> = w8
        .iter()
        .enumerate()
        .map(|(i, (_, b))| served(b.clone(), &format!("60{i}"), &format!("uid-{i}")))
        .collect();
    let (client, task) = serve(vec![
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(200, metadata_list(vec![])),
        echo("601"),
        echo("602"),
        reply(200, list_of("DNSEndpointList", listed)),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["fd00::a", "10.96.0.10"]);
    let set = hosts(&names);
    let first = w.apply(&set).await.unwrap();
    assert_eq!(first.outcome, Outcome::Written);
    let c = first.change.unwrap();
    assert_eq!(c.before.as_deref(), Some(""));
    assert_eq!(c.after.unwrap(), format!("{}\n{}\n", w8[0].0, w8[1].0));
    let second = w.apply(&set).await.unwrap();
    assert_eq!(second.outcome, Outcome::Unchanged);
    assert_eq!(second.change, None);
    drop(w);

    let seen = task.await.unwrap();
    let list_uri = format!("{DE}?&{SELECTOR}");
    let meta_uri = format!("{DE}?");
    let p0 = patch_uri(DE, &w8[0].0);
    let p1 = patch_uri(DE, &w8[1].0);
    assert_eq!(
        calls_sorted(&seen),
        owned(&[
            ("GET", list_uri.as_str()),
            ("GET", meta_uri.as_str()),
            ("PATCH", p0.as_str()),
            ("PATCH", p1.as_str()),
            ("GET", list_uri.as_str()),
        ])
    );
    assert!(seen[1]
        .accept
        .as_deref()
        .unwrap()
        .contains("as=PartialObjectMetadataList"));
    assert_apply(find(&seen, "PATCH", &p0), &w8[0].1);
    assert_apply(find(&seen, "PATCH", &p1), &w8[1].1);
    // The body in full for one object: what external-dns reads.
    assert_eq!(w8[1].0, name("www.example.com"));
    assert_eq!(
        find(&seen, "PATCH", &p1).body.as_ref().unwrap(),
        &json!({
            "apiVersion": "externaldns.k8s.io/v1alpha1",
            "kind": "DNSEndpoint",
            "metadata": {
                "name": "www-example-com-83c9f4f4d6e3c9e9",
                "namespace": "ouroboros",
                "labels": {
                    "app.kubernetes.io/managed-by": "ouroboros",
                    "ouroboros.io/instance": "ouroboros"
                }
            },
            "spec": {"endpoints": [
                {"dnsName": "www.example.com", "recordType": "A", "targets": ["10.96.0.10"], "recordTTL": 60},
                {"dnsName": "www.example.com", "recordType": "AAAA", "targets": ["fd00::a"], "recordTTL": 60}
            ]}
        })
    );
}

#[tokio::test]
async fn changed_records_are_applied_again_and_orphans_deleted() {
    let now = want(Output::DnsEndpoint, &["www.example.com"], &["10.96.0.10"]);
    let before = want(
        Output::DnsEndpoint,
        &["www.example.com", "old.example.com"],
        &["10.96.0.99"],
    );
    let old = before
        .iter()
        .find(|(n, _)| *n == name("old.example.com"))
        .unwrap();
    let www = before
        .iter()
        .find(|(n, _)| *n == name("www.example.com"))
        .unwrap();
    let (client, task) = serve(vec![
        reply(
            200,
            list_of(
                "DNSEndpointList",
                vec![
                    served(old.1.clone(), "700", "uid-old"),
                    served(www.1.clone(), "701", "uid-www"),
                ],
            ),
        ),
        echo("702"),
        reply(200, success()),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["10.96.0.10"]);
    let a = w.apply(&hosts(&["www.example.com"])).await.unwrap();
    assert_eq!(a.outcome, Outcome::Written);
    drop(w);
    let seen = task.await.unwrap();
    let list_uri = format!("{DE}?&{SELECTOR}");
    let p = patch_uri(DE, &now[0].0);
    let d = format!("{DE}/{}?", name("old.example.com"));
    // No metadata list: every desired object is already ours.
    assert_eq!(
        calls(&seen),
        [
            ("GET", list_uri.as_str()),
            ("PATCH", p.as_str()),
            ("DELETE", d.as_str())
        ]
    );
    assert_apply(&seen[1], &now[0].1);
    assert_eq!(
        seen[2].body.as_ref().unwrap()["preconditions"],
        json!({"resourceVersion": "700", "uid": "uid-old"})
    );
}

#[tokio::test]
async fn objects_without_our_labels_are_never_touched() {
    let w8 = want(
        Output::DnsEndpoint,
        &["www.example.com", "taken.example.com"],
        &["10.96.0.10"],
    );
    let taken = w8
        .iter()
        .find(|(n, _)| *n == name("taken.example.com"))
        .unwrap();
    let www = w8
        .iter()
        .find(|(n, _)| *n == name("www.example.com"))
        .unwrap();
    // Someone's hand-made object that happens to have the name we want.
    let mut theirs = taken.1.clone();
    theirs["metadata"]["labels"] = json!({"team": "dns"});
    // Another release's object, which the server should not list for our selector; if it
    // does, it is still not ours.
    let mut green = want(Output::DnsEndpoint, &["green.example.com"], &["10.0.0.1"])
        .remove(0)
        .1;
    green["metadata"]["name"] = json!("green-example-com-0123456789abcdef");
    green["metadata"]["labels"]["ouroboros.io/instance"] = json!("green");
    let (client, task) = serve(vec![
        reply(
            200,
            list_of("DNSEndpointList", vec![served(green.clone(), "1", "uid-g")]),
        ),
        reply(
            200,
            metadata_list(vec![
                served(theirs, "5", "uid-t"),
                served(green, "1", "uid-g"),
            ]),
        ),
        echo("801"),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["10.96.0.10"]);
    let e = w
        .apply(&hosts(&["www.example.com", "taken.example.com"]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "foreign_object");
    let obj = e.object.unwrap();
    assert_eq!(
        (obj.kind, obj.namespace.as_str(), obj.name.as_str()),
        ("DNSEndpoint", "ouroboros", taken.0.as_str())
    );
    assert!(
        e.message
            .contains(&format!("DNSEndpoint ouroboros/{}", taken.0))
            && e.message.contains("taken.example.com is not published")
            && e.message.contains("ouroboros.io/instance=ouroboros"),
        "{}",
        e.message
    );
    drop(w);
    let seen = task.await.unwrap();
    let list_uri = format!("{DE}?&{SELECTOR}");
    let meta_uri = format!("{DE}?");
    let p = patch_uri(DE, &www.0);
    // www is still written; the foreign object and the other release's object are not touched.
    assert_eq!(
        calls(&seen),
        [
            ("GET", list_uri.as_str()),
            ("GET", meta_uri.as_str()),
            ("PATCH", p.as_str())
        ]
    );
    assert_apply(&seen[2], &www.1);
}

#[tokio::test]
async fn other_instances_are_scoped_out_and_cleanup_deletes_only_ours() {
    // Instance "blue": its selector, its names.
    let blue_sel =
        "labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.io%2Finstance%3Dblue";
    let opts = Options::new("ouroboros", "blue", 60, &ips(&["10.0.0.1"]), &[], &[]).unwrap();
    let mine: Vec<(String, Value)> = desired(
        Output::DnsEndpoint,
        &hosts(&["a.example.com", "b.example.com"]),
        &opts,
        &ANNOTATION_PREFIXES,
    )
    .into_iter()
    .collect();
    let mut default_instance = mine[0].1.clone();
    default_instance["metadata"]["name"] = json!("a-example-com-ffffffffffffffff");
    default_instance["metadata"]["labels"]["ouroboros.io/instance"] = json!("ouroboros");
    let (client, task) = serve(vec![
        reply(
            200,
            list_of(
                "DNSEndpointList",
                vec![
                    served(mine[0].1.clone(), "10", "uid-a"),
                    served(default_instance, "11", "uid-x"),
                    served(mine[1].1.clone(), "12", "uid-b"),
                ],
            ),
        ),
        reply(200, success()),
        reply(404, status(404, "NotFound", "already gone")),
    ]);
    let ipsrc = ProxyIps::Static(ips(&["10.0.0.1"]));
    let w = ExternalWriter::new(client, Output::DnsEndpoint, settings("blue"), ipsrc).unwrap();
    let c = w.cleanup().await.unwrap();
    assert_eq!(c.outcome, Outcome::Written);
    drop(w);
    let seen = task.await.unwrap();
    let list_uri = format!("{DE}?&{blue_sel}");
    let d0 = format!("{DE}/{}?", mine[0].0);
    let d1 = format!("{DE}/{}?", mine[1].0);
    assert_eq!(
        calls_sorted(&seen),
        owned(&[
            ("GET", list_uri.as_str()),
            ("DELETE", d0.as_str()),
            ("DELETE", d1.as_str())
        ])
    );
    assert_eq!(
        find(&seen, "DELETE", &d0).body.as_ref().unwrap()["preconditions"],
        json!({"resourceVersion": "10", "uid": "uid-a"})
    );
    assert_eq!(
        find(&seen, "DELETE", &d1).body.as_ref().unwrap()["preconditions"],
        json!({"resourceVersion": "12", "uid": "uid-b"})
    );
}

#[tokio::test]
async fn cleanup_with_nothing_left_and_without_the_crd() {
    let (client, task) = serve(vec![
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["10.0.0.1"]);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    drop(w);
    assert_eq!(task.await.unwrap().len(), 2);
}

#[tokio::test]
async fn missing_crd_and_forbidden_are_explained() {
    let (client, task) = serve(vec![
        reply(
            404,
            status(404, "NotFound", "the server could not find the requested resource"),
        ),
        reply(
            403,
            status(
                403,
                "Forbidden",
                "dnsendpoints.externaldns.k8s.io is forbidden: User \"system:serviceaccount:ouroboros:ouroboros\" cannot list resource \"dnsendpoints\"",
            ),
        ),
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(200, metadata_list(vec![])),
        reply(
            403,
            status(403, "Forbidden", "cannot patch resource \"dnsendpoints\""),
        ),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["10.0.0.1"]);
    let set = hosts(&["www.example.com"]);
    let e = w.apply(&set).await.unwrap_err();
    assert_eq!(e.reason, "crd_missing");
    assert!(
        e.message
            .contains("install external-dns's DNSEndpoint CRD (dnsendpoints.externaldns.k8s.io)"),
        "{}",
        e.message
    );
    let e = w.apply(&set).await.unwrap_err();
    assert_eq!(e.reason, "forbidden");
    assert!(
        e.message.starts_with("list DNSEndpoints in ouroboros: forbidden (")
            && e.message.contains(
                "grant the controller's ServiceAccount `list` on dnsendpoints (apiGroup externaldns.k8s.io) in namespace ouroboros"
            ),
        "{}",
        e.message
    );
    let e = w.apply(&set).await.unwrap_err();
    assert_eq!(e.reason, "forbidden");
    assert!(
        e.message.contains(&format!(
            "apply DNSEndpoint ouroboros/{}: forbidden",
            name("www.example.com")
        )) && e.message.contains("`patch` and `create` on dnsendpoints"),
        "{}",
        e.message
    );
    assert_eq!(e.object.unwrap().name, name("www.example.com"));
    drop(w);
    assert_eq!(task.await.unwrap().len(), 5);
}

#[tokio::test]
async fn service_output_with_dual_stack_cluster_ips() {
    let names = ["www.example.com"];
    let w8 = want(Output::Service, &names, &["10.96.0.10", "fd00:10:96::a"]);
    let proxy = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ouroboros-proxy", "namespace": "ouroboros"},
        "spec": {"clusterIP": "fd00:10:96::a", "clusterIPs": ["fd00:10:96::a", "10.96.0.10"],
                 "ipFamilyPolicy": "PreferDualStack"}
    });
    let mut live = served(w8[0].1.clone(), "900", "uid-s");
    live["spec"] = json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                          "ipFamilies": ["IPv6", "IPv4"], "sessionAffinity": "None"});
    let (client, task) = serve(vec![
        reply(200, proxy.clone()),
        reply(200, list_of("ServiceList", vec![])),
        reply(200, metadata_list(vec![])),
        echo("900"),
        reply(200, proxy),
        reply(200, list_of("ServiceList", vec![live])),
    ]);
    let w = writer(client, Output::Service, &[]);
    let set = hosts(&names);
    assert_eq!(w.apply(&set).await.unwrap().outcome, Outcome::Written);
    assert_eq!(w.apply(&set).await.unwrap().outcome, Outcome::Unchanged);
    drop(w);
    let seen = task.await.unwrap();
    let list_uri = format!("{SVC}?&{SELECTOR}");
    let meta_uri = format!("{SVC}?");
    let p = patch_uri(SVC, &w8[0].0);
    assert_eq!(
        calls(&seen),
        [
            ("GET", PROXY),
            ("GET", list_uri.as_str()),
            ("GET", meta_uri.as_str()),
            ("PATCH", p.as_str()),
            ("GET", PROXY),
            ("GET", list_uri.as_str()),
        ]
    );
    assert_apply(&seen[3], &w8[0].1);
    let body = seen[3].body.as_ref().unwrap();
    assert_eq!(
        body["spec"],
        json!({"type": "ClusterIP", "clusterIP": "None"})
    );
    let a = &body["metadata"]["annotations"];
    assert_eq!(
        a["external-dns.alpha.kubernetes.io/hostname"],
        "www.example.com"
    );
    assert_eq!(a["external-dns.kubernetes.io/hostname"], "www.example.com");
    assert_eq!(
        a["external-dns.alpha.kubernetes.io/target"],
        "10.96.0.10,fd00:10:96::a"
    );
    assert_eq!(a["external-dns.kubernetes.io/ttl"], "60");
    assert_eq!(
        body["metadata"]["labels"]["ouroboros.io/instance"],
        "ouroboros"
    );
    assert!(w8[0].0.len() <= 63);
}

#[tokio::test]
async fn single_stack_cluster_ip_gives_a_records_only() {
    let proxy = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ouroboros-proxy", "namespace": "ouroboros"},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"]}
    });
    let (client, task) = serve(vec![
        reply(200, proxy),
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(200, metadata_list(vec![])),
        echo("1"),
    ]);
    let w = writer(client, Output::DnsEndpoint, &[]);
    w.apply(&hosts(&["www.example.com"])).await.unwrap();
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].uri, PROXY);
    assert_eq!(
        seen[3].body.as_ref().unwrap()["spec"]["endpoints"],
        json!([{"dnsName": "www.example.com", "recordType": "A", "targets": ["10.96.0.10"], "recordTTL": 60}])
    );
}

#[tokio::test]
async fn dry_run_only_reads() {
    let (client, task) = serve(vec![
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(200, metadata_list(vec![])),
    ]);
    let w = writer(client, Output::DnsEndpoint, &["10.0.0.1"]).dry_run(true);
    let a = w.apply(&hosts(&["www.example.com"])).await.unwrap();
    assert_eq!(a.outcome, Outcome::DryRun);
    assert_eq!(
        a.change.unwrap().after.unwrap(),
        format!("{}\n", name("www.example.com"))
    );
    drop(w);
    let seen = task.await.unwrap();
    assert!(seen.iter().all(|s| s.method == "GET"), "{:?}", calls(&seen));
    assert_eq!(seen.len(), 2);
}

#[tokio::test]
async fn invalid_settings_are_refused_up_front() {
    let (client, task) = serve(vec![]);
    let bad = Settings {
        labels: vec![("app.kubernetes.io/managed-by".into(), "me".into())],
        ..settings("blue")
    };
    let e = ExternalWriter::new(
        client,
        Output::DnsEndpoint,
        bad,
        ProxyIps::Static(ips(&["10.0.0.1"])),
    )
    .err()
    .unwrap();
    assert!(e.contains("reserved"), "{e}");
    assert!(task.await.unwrap().is_empty(), "no API call");
}

/// Many names at once (writes run concurrently): every one is applied, and one refused write
/// does not stop the others; the sync reports it after the rest.
#[tokio::test]
async fn many_names_one_refused_the_rest_still_written() {
    let names: Vec<String> = (0..40).map(|i| format!("h{i}.example.com")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let w8 = want(Output::DnsEndpoint, &refs, &["10.0.0.1"]);
    let refused = name("h7.example.com");
    let mut replies = vec![
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(200, metadata_list(vec![])),
    ];
    for _ in 0..names.len() {
        let refused = refused.clone();
        replies.push(Box::new(move |seen: &Seen| -> (u16, Value) {
            if seen.uri.contains(&refused) {
                (
                    500,
                    status(500, "InternalError", "etcdserver: request timed out"),
                )
            } else {
                let mut v = seen.body.clone().unwrap();
                v["metadata"]["resourceVersion"] = json!("2");
                (200, v)
            }
        }) as kube_mock::Reply);
    }
    let (client, task) = serve(replies);
    let w = writer(client, Output::DnsEndpoint, &["10.0.0.1"]);
    let e = w.apply(&hosts(&refs)).await.unwrap_err();
    assert_eq!(e.reason, "api");
    assert_eq!(e.object.unwrap().name, refused);
    assert!(
        e.message
            .contains(&format!("apply DNSEndpoint ouroboros/{refused}: HTTP 500")),
        "{}",
        e.message
    );
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(seen.len(), 2 + names.len());
    let patched: BTreeSet<String> = seen[2..]
        .iter()
        .map(|s| {
            assert_eq!(s.method, "PATCH");
            s.body.as_ref().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let wanted: BTreeSet<String> = w8.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(patched, wanted);
}

#[test]
fn service_names_are_dns1035_labels_and_dnsendpoint_names_unchanged() {
    let names = ["1password.example.com", "0.example.com", "www.example.com"];
    let services = want(Output::Service, &names, &["192.0.2.1"]);
    let endpoints = want(Output::DnsEndpoint, &names, &["192.0.2.1"]);
    let got: Vec<&str> = services.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        got,
        [
            "h-0-example-com-f1be45cc05834bd4",
            "h-1password-example-com-9e2fe40f336f8937",
            "www-example-com-83c9f4f4d6e3c9e9",
        ]
    );
    for (n, body) in &services {
        assert_eq!(body["metadata"]["name"], n.as_str());
        assert!(n.len() <= 63 && n.starts_with(|c: char| c.is_ascii_lowercase()));
    }
    let got: Vec<&str> = endpoints.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        got,
        [
            name("0.example.com"),
            name("1password.example.com"),
            name("www.example.com")
        ]
    );
}

/// An object lexfrei/ouroboros wrote: its name scheme, its instance label, our managed-by label.
fn reference_object(name: &str, host: &str, instance: &str, rv: &str) -> Value {
    json!({
        "apiVersion": external::API_VERSION,
        "kind": external::KIND,
        "metadata": {
            "name": name, "namespace": "ouroboros", "resourceVersion": rv, "uid": format!("uid-{name}"),
            "labels": {
                "app.kubernetes.io/managed-by": "ouroboros",
                "ouroboros.lexfrei.tech/instance": instance
            },
            "annotations": {"ouroboros.lexfrei.tech/source": "ingress/shop/web"}
        },
        "spec": {"endpoints": [
            {"dnsName": host, "recordType": "A", "targets": ["10.96.0.99"], "recordTTL": 60}
        ]}
    })
}

/// Answers an apply with its body and a merge patch with `merged` (writes run concurrently, so
/// which PATCH comes when is not fixed).
fn write_reply(merged: &Value) -> kube_mock::Reply {
    let merged = merged.clone();
    Box::new(move |seen| {
        if seen.content_type.as_deref() == Some("application/merge-patch+json") {
            (200, merged)
        } else {
            (200, seen.body.clone().unwrap())
        }
    })
}

fn adopting_writer(client: Client, output: Output, prefix: Option<&str>) -> ExternalWriter {
    let s = Settings {
        adopt: true,
        annotation_prefix: prefix.map(String::from),
        ..settings(external::DEFAULT_INSTANCE)
    };
    let ips = ProxyIps::Static(ips(&["10.96.0.10"]));
    ExternalWriter::new(client, output, s, ips).unwrap()
}

#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario whose steps depend on each other; to be split into steps (issue #29)"
)]
#[tokio::test]
async fn adopt_takes_over_the_reference_tools_records_of_this_instance_only() {
    let w8 = want(
        Output::DnsEndpoint,
        &["www.example.com", "same.example.com"],
        &["10.96.0.10"],
    );
    let www = &w8
        .iter()
        .find(|(n, _)| *n == name("www.example.com"))
        .unwrap();
    let same = &w8
        .iter()
        .find(|(n, _)| *n == name("same.example.com"))
        .unwrap();
    // Theirs for www (their name scheme), for a name we no longer publish, under the very name
    // we write for same.example.com, and another instance's (which the server should not list
    // for the selector; if it does, it is still not taken).
    let theirs_www = reference_object(
        "ouroboros-www-example-com-a",
        "www.example.com",
        "ouroboros",
        "40",
    );
    let theirs_old = reference_object(
        "ouroboros-old-example-com-a",
        "old.example.com",
        "ouroboros",
        "41",
    );
    let theirs_same = reference_object(&same.0, "same.example.com", "ouroboros", "42");
    let green = reference_object(
        "ouroboros-green-example-com-a",
        "green.example.com",
        "green",
        "43",
    );
    let (client, task) = serve(vec![
        reply(200, list_of("DNSEndpointList", vec![])),
        reply(
            200,
            list_of(
                "DNSEndpointList",
                vec![theirs_www, theirs_old, theirs_same.clone(), green],
            ),
        ),
        reply(200, metadata_list(vec![theirs_same.clone()])),
        write_reply(&same.1),
        write_reply(&same.1),
        write_reply(&same.1),
        reply(200, success()),
        reply(200, success()),
    ]);
    let w = adopting_writer(client, Output::DnsEndpoint, None);
    let a = w
        .apply(&hosts(&["www.example.com", "same.example.com"]))
        .await
        .unwrap();
    assert_eq!(a.outcome, Outcome::Written);
    let before = a.change.unwrap().before.unwrap();
    assert!(before.contains("ouroboros-old-example-com-a\n"), "{before}");
    drop(w);
    let seen = task.await.unwrap();

    let ours_list = format!("{DE}?&{SELECTOR}");
    let ref_list = format!(
        "{DE}?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Douroboros%2Couroboros.lexfrei.tech%2Finstance%3Douroboros"
    );
    let meta_uri = format!("{DE}?");
    let p_www = patch_uri(DE, &www.0);
    let p_same = patch_uri(DE, &same.0);
    let relabel = format!("{DE}/{}?&fieldManager=ouroboros", same.0);
    let d_www = format!("{DE}/ouroboros-www-example-com-a?");
    let d_old = format!("{DE}/ouroboros-old-example-com-a?");
    assert_eq!(
        calls_sorted(&seen),
        owned(&[
            ("GET", ours_list.as_str()),
            ("GET", ref_list.as_str()),
            ("GET", meta_uri.as_str()),
            ("PATCH", relabel.as_str()),
            ("PATCH", p_same.as_str()),
            ("PATCH", p_www.as_str()),
            ("DELETE", d_old.as_str()),
            ("DELETE", d_www.as_str()),
        ])
    );
    assert_apply(find(&seen, "PATCH", &p_www), &www.1);
    assert_apply(find(&seen, "PATCH", &p_same), &same.1);
    // Ours from now on: the apply set our labels, the merge patch drops theirs (their uninstall
    // hook deletes by it).
    let r = find(&seen, "PATCH", &relabel);
    assert_eq!(
        r.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        r.body.as_ref().unwrap(),
        &json!({"metadata": {"labels": {"ouroboros.lexfrei.tech/instance": null}}})
    );
    // Each relabel follows its own apply; deletes come after every apply.
    let pos = |m: &str, u: &str| {
        seen.iter()
            .position(|s| s.method == m && s.uri == u)
            .unwrap()
    };
    assert!(pos("PATCH", &p_same) < pos("PATCH", &relabel));
    assert!(pos("PATCH", &p_www) < pos("DELETE", &d_www));
    assert_eq!(
        find(&seen, "DELETE", &d_www).body.as_ref().unwrap()["preconditions"],
        json!({"resourceVersion": "40", "uid": "uid-ouroboros-www-example-com-a"})
    );
    assert!(
        !seen.iter().any(|s| s.uri.contains("green")),
        "another instance's object was touched"
    );
}

#[tokio::test]
async fn adopt_with_services_and_one_annotation_prefix() {
    let opts = Options::new(
        "ouroboros",
        external::DEFAULT_INSTANCE,
        60,
        &ips(&["10.96.0.10"]),
        &[],
        &[],
    )
    .unwrap();
    let (svc_name, body) = desired(
        Output::Service,
        &hosts(&["www.example.com"]),
        &opts,
        &["internal-dns/"],
    )
    .into_iter()
    .next()
    .unwrap();
    let mut theirs = reference_object(
        "ouroboros-www-example-com",
        "www.example.com",
        "ouroboros",
        "7",
    );
    theirs["apiVersion"] = json!("v1");
    theirs["kind"] = json!("Service");
    theirs["spec"] = json!({"type": "ClusterIP", "clusterIP": "None"});
    let (client, task) = serve(vec![
        reply(200, list_of("ServiceList", vec![])),
        reply(200, list_of("ServiceList", vec![theirs])),
        reply(200, metadata_list(vec![])),
        echo("8"),
        reply(200, success()),
    ]);
    let w = adopting_writer(client, Output::Service, Some("internal-dns/"));
    w.apply(&hosts(&["www.example.com"])).await.unwrap();
    drop(w);
    let seen = task.await.unwrap();
    let p = patch_uri(SVC, &svc_name);
    assert_apply(find(&seen, "PATCH", &p), &body);
    assert_eq!(
        body["metadata"]["annotations"],
        json!({
            "internal-dns/hostname": "www.example.com",
            "internal-dns/target": "10.96.0.10",
            "internal-dns/ttl": "60"
        })
    );
    find(
        &seen,
        "DELETE",
        &format!("{SVC}/ouroboros-www-example-com?"),
    );
    assert_eq!(seen.len(), 5);
}
