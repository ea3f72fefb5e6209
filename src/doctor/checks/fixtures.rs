//! Test fixtures the check modules' tests share: ConfigMaps, hostnames, answers, a 403.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::inputs::ApiFailure;
use crate::dns::answer::Answer;
use crate::hostname::Hostname;

pub(super) fn cm(data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": "c"}, "data": data})).unwrap()
}

pub(super) fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = crate::hostname::HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

pub(super) fn proxy() -> Answer {
    Answer::Template(crate::dns::answer::ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap())
}

pub(super) const PLAIN: &str =
    ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";

/// What the block should hold for `hosts` answered with `answer` (`None` when either is
/// unknown), as the checks take it.
pub(super) fn expect<'a>(
    hosts: Option<&'a BTreeSet<Hostname>>,
    answer: Option<&'a Answer>,
) -> Option<super::coredns::Expected<'a>> {
    Some(super::coredns::Expected::one(hosts?, answer?))
}

pub(super) fn rewrite() -> Answer {
    Answer::Rewrite(crate::dns::ProxyFqdn::parse(crate::dns::DEFAULT_PROXY_FQDN).unwrap())
}

pub(super) fn forbidden(resource: &str, name: &str) -> ApiFailure {
    ApiFailure {
        verb: "get",
        resource: resource.into(),
        namespace: Some("kube-system".into()),
        name: Some(name.into()),
        code: Some(403),
        timed_out: false,
        message: "forbidden".into(),
    }
}
