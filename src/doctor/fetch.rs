//! The thin read layer: one function per kind of call, each turning 404 into `None` and any
//! other failure into an [`ApiFailure`] naming the verb and resource doctor needed. Transient
//! failures (5xx, 429, transport) are retried with backoff.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::checks::{
    coredns_version::pick_coredns_workload, coredns_version::KUBE_DNS_SELECTOR, inputs::ApiFailure,
    inputs::Got, inputs::Workload, permissions::Question,
};
use crate::controller::hostnames::kinds::{Place, Served, SourceObject};
use crate::controller::placement::resource_at;
use crate::controller::projection::{Project, Projected};
use crate::dns::answer_form::COREDNS_DEPLOYMENT;
use crate::kube_client::Cause;

const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// Worth another attempt: a server error, throttling, or a failed connection, but not a call
/// that already waited out `--api-timeout` (three of them would keep doctor silent 3 times as
/// long for the same answer).
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        kube::Error::SerdeError(_) => false,
        other => Cause::of(other) != Cause::Timeout,
    }
}

async fn retrying<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < ATTEMPTS && transient(&e) => {
                tracing::debug!(error = %e, attempt, "API call failed, retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Where a call went, for its [`ApiFailure`].
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub verb: &'static str,
    /// `resource` or `resource.group`.
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Target<'_> {
    fn failure(&self, e: kube::Error) -> ApiFailure {
        let (code, message) = match &e {
            // The real server's plain 404 ends with a line break.
            kube::Error::Api(s) => (Some(s.code), s.message.trim_end().to_string()),
            other => (None, other.to_string()),
        };
        ApiFailure {
            verb: self.verb,
            resource: self.resource.to_string(),
            namespace: self.namespace.map(str::to_string),
            name: self.name.map(str::to_string),
            code,
            timed_out: Cause::of(&e) == Cause::Timeout,
            message,
        }
    }
}

fn found<T>(t: &Target<'_>, r: Result<T, kube::Error>) -> Got<T> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(t.failure(e)),
    }
}

/// As [`found`], for a GET of one object of a kind that may be a CRD's: a 404 that is not the
/// object's own `NotFound` is a failure, not a missing object. The real API server answers a
/// resource it does not serve (its CRD not installed) with a plain `404 page not found`, no
/// Status, which kube reads with another reason.
fn object_found<T>(t: &Target<'_>, r: Result<T, kube::Error>) -> Got<T> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 && s.reason != "NotFound" => {
            Err(t.failure(kube::Error::Api(s)))
        }
        other => found(t, other),
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = ()>,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// GET one namespaced object.
pub async fn get<K>(client: &Client, resource: &str, namespace: &str, name: &str) -> Got<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let t = Target {
        verb: "get",
        resource,
        namespace: Some(namespace),
        name: Some(name),
    };
    let a: Api<K> = Api::namespaced(client.clone(), namespace);
    found(&t, retrying(|| a.get(name)).await)
}

/// GET an ingress controller's configuration object (any resource), as JSON.
pub async fn get_config(client: &Client, config: &crate::header_verdict::ConfigRef) -> Got<Value> {
    let r = config.resource;
    let resource = if r.group.is_empty() {
        r.plural.to_string()
    } else {
        format!("{}.{}", r.plural, r.group)
    };
    let t = Target {
        verb: "get",
        resource: &resource,
        namespace: Some(&config.namespace),
        name: Some(&config.name),
    };
    let a = crate::controller::answers::api(client, config);
    let got = object_found(&t, retrying(|| a.get(&config.name)).await)?;
    Ok(got.and_then(|o| serde_json::to_value(o).ok()))
}

/// GET one cluster-scoped object; only whether it exists.
pub async fn exists_cluster<K>(client: &Client, resource: &str, name: &str) -> Got<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>,
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let t = Target {
        verb: "get",
        resource,
        namespace: None,
        name: Some(name),
    };
    let a: Api<K> = Api::all(client.clone());
    found(&t, retrying(|| a.get(name)).await).map(|o| o.map(|_| ()))
}

/// LIST namespaced objects in one namespace (None: all namespaces). 404 (the kind's CRD is
/// absent) reads as None.
pub async fn list<K>(
    client: &Client,
    resource: &str,
    namespace: Option<&str>,
    params: &ListParams,
) -> Got<Vec<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let t = Target {
        verb: "list",
        resource,
        namespace,
        name: None,
    };
    let a: Api<K> = api(client, namespace);
    found(&t, retrying(|| a.list(params)).await).map(|o| o.map(|l| l.items))
}

/// LIST every object of a source kind, cluster-wide, at `place` (where the cluster serves it),
/// read as the controller's watch reads it (its projection). 404 (the kind's CRD is absent)
/// reads as None. An object that does not read is left out, as the controller leaves it out,
/// and logged.
pub async fn list_source<K>(client: &Client, place: Place) -> Got<Vec<K>>
where
    K: SourceObject + Project + std::fmt::Debug,
{
    let resource = format!("{}.{}", K::KIND.plural(), place.group);
    let t = Target {
        verb: "list",
        resource: &resource,
        namespace: None,
        name: None,
    };
    let a: Api<Projected<K>> = Api::all_with(client.clone(), &resource_at(K::KIND, place));
    let lp = ListParams::default();
    let got = found(&t, retrying(|| a.list(&lp)).await)?;
    Ok(got.map(|l| {
        l.items
            .into_iter()
            .filter_map(|Projected(o)| {
                o.map_err(|bad| {
                    tracing::warn!(
                        kind = %K::KIND,
                        object = %format!(
                            "{}/{}",
                            bad.metadata.namespace.as_deref().unwrap_or_default(),
                            bad.metadata.name.as_deref().unwrap_or_default()
                        ),
                        error = %bad.error,
                        "cannot read this object; the controller leaves it out too"
                    );
                })
                .ok()
            })
            .collect()
    }))
}

/// The resources the cluster serves in each of the group versions `asked` (their discovery
/// documents, `GET /apis/{group}/{version}`); a group version not served (404) lists none.
pub async fn served(client: &Client, asked: &[Place]) -> Got<Served> {
    let mut served = Served::default();
    for &place in asked {
        let path = format!("/apis/{place}");
        let t = Target {
            verb: "get",
            resource: &path,
            namespace: None,
            name: None,
        };
        let api_version = place.api_version();
        let got = found(
            &t,
            retrying(|| client.list_api_group_resources(&api_version)).await,
        )?;
        if let Some(document) = got {
            served.add(place, &document);
        }
    }
    Ok(Some(served))
}

fn workload(
    kind: &'static str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    template: &PodTemplateSpec,
) -> Workload {
    let containers = template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    Workload {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        labels: template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
        args: containers
            .iter()
            .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
            .cloned()
            .collect(),
        images: containers.iter().filter_map(|c| c.image.clone()).collect(),
        memory_limits: containers
            .iter()
            .filter_map(|c| {
                let limit = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
                Some((c.image.clone()?, limit.0.clone()))
            })
            .collect(),
    }
}

/// The Deployments and DaemonSets of a namespace, reduced to their pod templates.
pub async fn workloads(client: &Client, namespace: &str) -> Got<Vec<Workload>> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    let lp = ListParams::default();
    let deployments: Vec<Deployment> = list(client, "deployments.apps", Some(namespace), &lp)
        .await?
        .unwrap_or_default();
    let daemonsets: Vec<DaemonSet> = list(client, "daemonsets.apps", Some(namespace), &lp)
        .await?
        .unwrap_or_default();
    let mut out = deployment_workloads(&deployments);
    out.extend(daemonsets.iter().filter_map(|d| {
        Some(workload(
            "DaemonSet",
            &d.metadata,
            &d.spec.as_ref()?.template,
        ))
    }));
    Ok(Some(out))
}

/// The CoreDNS Deployment of `namespace`, reduced to its pod template: the one named
/// [`COREDNS_DEPLOYMENT`], else (404) among those labelled [`KUBE_DNS_SELECTOR`] the one
/// running a CoreDNS image. None when there is neither.
pub async fn coredns_deployment(client: &Client, namespace: &str) -> Got<Workload> {
    use k8s_openapi::api::apps::v1::Deployment;
    const R: &str = "deployments.apps";
    let named: Option<Deployment> = get(client, R, namespace, COREDNS_DEPLOYMENT).await?;
    let found = match named {
        Some(d) => vec![d],
        None => {
            let lp = ListParams::default().labels(KUBE_DNS_SELECTOR);
            list(client, R, Some(namespace), &lp)
                .await?
                .unwrap_or_default()
        }
    };
    Ok(pick_coredns_workload(&deployment_workloads(&found)).cloned())
}

fn deployment_workloads(deployments: &[k8s_openapi::api::apps::v1::Deployment]) -> Vec<Workload> {
    deployments
        .iter()
        .filter_map(|d| {
            Some(workload(
                "Deployment",
                &d.metadata,
                &d.spec.as_ref()?.template,
            ))
        })
        .collect()
}

/// The subject a ServiceAccount authenticates as, with the groups RBAC bindings may name.
pub fn service_account_subject(namespace: &str, name: &str) -> (String, Vec<String>) {
    (
        format!("system:serviceaccount:{namespace}:{name}"),
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
    )
}

/// Asks the API server whether `user` may do what `q` asks (SubjectAccessReview).
pub async fn may(
    client: &Client,
    user: &str,
    groups: &[String],
    q: &Question<'_>,
) -> Result<bool, ApiFailure> {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(groups.to_vec()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(q.rule.api_group.to_string()),
                resource: Some(q.rule.resource.to_string()),
                verb: Some(q.verb.to_string()),
                namespace: q.namespace().map(str::to_string),
                name: q.name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let t = Target {
        verb: "create",
        resource: "subjectaccessreviews.authorization.k8s.io",
        namespace: None,
        name: None,
    };
    let a: Api<SubjectAccessReview> = Api::all(client.clone());
    let pp = PostParams::default();
    let r = retrying(|| a.create(&pp, &sar))
        .await
        .map_err(|e| t.failure(e))?;
    Ok(r.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", reason)
                .with_code(404)
                .boxed(),
        )
    }

    #[test]
    fn a_404_of_a_resource_not_served_is_a_failure_and_a_missing_object_is_none() {
        let t = Target {
            verb: "get",
            resource: "clienttrafficpolicies.gateway.envoyproxy.io",
            namespace: Some("eg"),
            name: Some("proxy-protocol"),
        };
        assert!(matches!(
            object_found::<()>(&t, Err(status("NotFound"))),
            Ok(None)
        ));
        // What kube makes of the real server's `404 page not found`.
        let failure = object_found::<()>(&t, Err(status("Failed to parse error data")))
            .expect_err("not served");
        assert_eq!(failure.code, Some(404));
        assert_eq!(
            failure.action(),
            "the API server does not serve clienttrafficpolicies.gateway.envoyproxy.io (is its \
             CRD installed?): install it, or correct the kind named"
        );
    }
}
