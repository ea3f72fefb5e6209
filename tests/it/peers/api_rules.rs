//! What the product predicts the API server refuses, asked of the real one: each prediction is a
//! pure function the controller uses to never send a write that would be refused, so each must
//! agree with the server on both sides of its boundary. Writes are dry runs (nothing is stored),
//! made as the admin, so only validation answers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

use super::cluster;
use ouroboros::dns::external::{check_key, check_label_value, service_name};
use ouroboros::dns::write::apply::data_size;
use ouroboros::dns::MAX_CONFIGMAP_DATA;
use ouroboros::dns_name::is_dns1035_label;
use ouroboros::hostname::HostPolicy;

const NAMESPACE: &str = "api-rules";

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// Whether the server accepts `cm` (dry run); any refusal other than validation's 422 fails.
async fn accepts_configmap(client: &Client, cm: &ConfigMap) -> bool {
    match Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .create(&dry_run(), cm)
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 422 => false,
        Err(e) => panic!("creating ConfigMap {:?}: {e}", cm.metadata.name),
    }
}

async fn accepts_service(client: &Client, name: &str) -> bool {
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"type": "ClusterIP", "clusterIP": "None", "ports": [{"port": 443}]},
    }))
    .unwrap();
    match Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(&dry_run(), &svc)
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 422 => false,
        Err(e) => panic!("creating Service {name:?}: {e}"),
    }
}

/// Keys and value sizes of a ConfigMap's `data` or `binaryData`.
type Sizes<'a> = [(&'a str, usize)];

fn configmap(name: &str, data: &Sizes, binary: &Sizes) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, n)| (k.to_string(), "x".repeat(*n)))
                .collect(),
        ),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .iter()
                .map(|(k, n)| (k.to_string(), ByteString(vec![7u8; *n])))
                .collect::<BTreeMap<_, _>>()
        }),
        ..ConfigMap::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn configmap_size_limit_is_where_the_server_puts_it() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    runtime().block_on(async {
        cluster.ensure_namespace(NAMESPACE).await;
        let client = cluster.admin().await;
        let max = MAX_CONFIGMAP_DATA;
        // Keys are not counted, values of data and binaryData are: both sides of the limit.
        let cases: Vec<(&str, Vec<_>, Vec<_>)> = vec![
            ("one-key-at-limit", vec![("Corefile", max)], vec![]),
            ("one-key-over", vec![("Corefile", max + 1)], vec![]),
            (
                "two-keys-at-limit",
                vec![
                    ("Corefile", max - 100),
                    ("a-long-key-name-that-is-not-counted", 100),
                ],
                vec![],
            ),
            (
                "two-keys-over",
                vec![("Corefile", max - 100), ("b", 101)],
                vec![],
            ),
            (
                "binary-at-limit",
                vec![("Corefile", max - 10)],
                vec![("blob", 10)],
            ),
            (
                "binary-over",
                vec![("Corefile", max - 10)],
                vec![("blob", 11)],
            ),
            ("well-under", vec![("Corefile", 1000)], vec![]),
        ];
        for (name, data, binary) in cases {
            let cm = configmap(name, &data, &binary);
            let predicted_ok = data_size(&cm) <= max;
            let server_ok = accepts_configmap(&client, &cm).await;
            assert_eq!(
                predicted_ok,
                server_ok,
                "{name}: our size check and the API server disagree (data_size {})",
                data_size(&cm)
            );
        }
    });
}

#[test]
fn service_names_we_make_are_names_the_server_takes() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let policy = HostPolicy::new("cluster.local", &[], &[]);
    runtime().block_on(async {
        cluster.ensure_namespace(NAMESPACE).await;
        let client = cluster.admin().await;
        // The rule itself, on both sides.
        for raw in [
            "a",
            "abc-def",
            "1abc",
            "-a",
            "a-",
            "a.b",
            "A",
            &"a".repeat(63),
            &"a".repeat(64),
            "a_b",
        ] {
            assert_eq!(
                is_dns1035_label(raw),
                accepts_service(&client, raw).await,
                "{raw:?}: our DNS-1035 check and the API server disagree"
            );
        }
        // Names made from hostnames that start with a digit, are long, or are wildcards.
        let long = format!("{}.{}.example.com", "a".repeat(63), "b".repeat(63));
        for host in [
            "1password.example.com",
            "0.example.org",
            "*.apps.example.com",
            "shop.example.com",
            &long,
            "9-lives.co.uk",
        ] {
            let host = policy
                .check(host)
                .unwrap_or_else(|r| panic!("{host}: {r:?}"));
            let name = service_name("ouroboros", &host);
            assert!(
                accepts_service(&client, &name).await,
                "{host:?} -> Service name {name:?} refused"
            );
        }
    });
}

#[test]
fn label_keys_and_values_we_accept_are_the_ones_the_server_takes() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    runtime().block_on(async {
        cluster.ensure_namespace(NAMESPACE).await;
        let client = cluster.admin().await;
        let long_value = "v".repeat(63);
        let too_long_value = "v".repeat(64);
        let long_prefix = format!("{}/k", "p".repeat(254));
        let keys = [
            "app",
            "example.com/team",
            "Example.com/x",
            "a/b/c",
            "/x",
            "x/",
            "-a",
            "a_b.c-d",
            &long_prefix,
            "k8s.io/Name",
        ];
        for key in keys {
            let mut cm = configmap(
                &format!("key-{}", keys.iter().position(|k| *k == key).unwrap()),
                &[("k", 1)],
                &[],
            );
            cm.metadata.labels = Some([(key.to_string(), "v".to_string())].into());
            assert_eq!(
                check_key(key).is_ok(),
                accepts_configmap(&client, &cm).await,
                "label key {key:?}: our check and the API server disagree"
            );
        }
        let values = [
            "",
            "v",
            "V.1_x-y",
            "-v",
            "v-",
            "a b",
            long_value.as_str(),
            too_long_value.as_str(),
        ];
        for (i, value) in values.iter().enumerate() {
            let mut cm = configmap(&format!("value-{i}"), &[("k", 1)], &[]);
            cm.metadata.labels = Some([("k".to_string(), value.to_string())].into());
            assert_eq!(
                check_label_value(value).is_ok(),
                accepts_configmap(&client, &cm).await,
                "label value {value:?}: our check and the API server disagree"
            );
        }
    });
}

/// The Events the controller sends, as the real server keeps them: two messages on one object
/// with the same reason are two Events, each with its own note, and a repeat of the first counts
/// up its series (the server accepts the patch, and keeps the note).
#[test]
fn each_event_message_is_kept_by_the_server() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;
    use ouroboros::controller::events::{self, Notice};
    let Some(cluster) = cluster::shared() else {
        return;
    };
    runtime().block_on(async {
        cluster.ensure_namespace(NAMESPACE).await;
        let client = cluster.admin().await;
        // A fresh object name each run, so Events of earlier runs are not counted.
        let object = format!("shop-{}", std::process::id());
        let notice = |note: &str| Notice {
            regarding: ObjectReference {
                api_version: Some("networking.k8s.io/v1".into()),
                kind: Some("Ingress".into()),
                namespace: Some(NAMESPACE.into()),
                name: Some(object.clone()),
                ..ObjectReference::default()
            },
            reason: events::HOSTNAME_CONFLICT,
            action: "Hairpin",
            note: note.into(),
        };
        let (notifier, task) = events::spawn(client.clone(), "ouroboros-0".into());
        for note in [
            "a.example.com goes to x",
            "b.example.com goes to y",
            "a.example.com goes to x",
        ] {
            notifier.send(notice(note));
        }
        drop(notifier);
        task.await.unwrap();

        let api: Api<Event> = Api::namespaced(client, NAMESPACE);
        let selector = format!("regarding.name={object}");
        let listed = api
            .list(&ListParams::default().fields(&selector))
            .await
            .expect("list Events by regarding.name");
        let mut kept: Vec<(String, Option<i32>)> = listed
            .items
            .iter()
            .map(|e| (e.note.clone().unwrap(), e.series.as_ref().map(|s| s.count)))
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            [
                ("a.example.com goes to x".to_string(), Some(2)),
                ("b.example.com goes to y".to_string(), None),
            ],
            "{listed:#?}"
        );
    });
}
