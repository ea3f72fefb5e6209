//! Contour's HTTPProxy (`projectcontour.io/v1`) as far as its host goes: `spec.virtualhost.fqdn`.
//! A root HTTPProxy names its host there; one included by another (a child) has no
//! `virtualhost` and names none. Pure: no I/O.
//!
//! Contour publishes no Rust types; a generated crate would bring every field of HTTPProxy for
//! the one read here, and serde skips the rest of the object as it reads this struct.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// An HTTPProxy: its virtual host's name.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HttpProxy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: HttpProxySpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct HttpProxySpec {
    pub virtualhost: Option<VirtualHost>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct VirtualHost {
    #[serde(default)]
    pub fqdn: String,
}

impl HttpProxySpec {
    /// The virtual host's name: none for an included HTTPProxy (no `virtualhost`) or an empty
    /// `fqdn`. A wildcard (`*.example.com`) is kept as the policy keeps Ingress wildcards.
    pub fn hosts(&self) -> Vec<String> {
        self.virtualhost
            .iter()
            .map(|v| v.fqdn.trim().to_string())
            .filter(|f| !f.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fqdns() {
        for (spec, want) in [
            (
                json!({"virtualhost": {"fqdn": "app.example.com", "tls": {"secretName": "s"}},
                       "routes": [{"services": [{"name": "s", "port": 80}]}]}),
                vec!["app.example.com"],
            ),
            (
                json!({"virtualhost": {"fqdn": "*.example.com"}}),
                vec!["*.example.com"],
            ),
            // Included by a root HTTPProxy: its host is the root's.
            (
                json!({"routes": [{"conditions": [{"prefix": "/blog"}], "services": [{"name": "b", "port": 80}]}]}),
                vec![],
            ),
            (json!({"virtualhost": {"fqdn": " "}}), vec![]),
            (json!({}), vec![]),
        ] {
            let s: HttpProxySpec = serde_json::from_value(spec.clone()).unwrap();
            assert_eq!(s.hosts(), want, "{spec}");
        }
    }
}
