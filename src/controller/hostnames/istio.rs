//! Istio's Gateway (`networking.istio.io/v1`) as far as its hosts go: `spec.servers[].hosts`.
//! Each host may carry a namespace prefix (`prod/app.example.com`, `*/app.example.com`,
//! `./app.example.com`), which says which namespaces' VirtualServices may bind to it, not which
//! name it serves: the prefix is dropped. A wildcard (`*.example.com`) is kept as Ingress
//! wildcards are; a bare `*` (every host) is left to the hostname policy, which rejects it.
//! Pure: no I/O.
//!
//! Istio's own Rust types are not published for these CRDs; a generated crate would bring every
//! field of Gateway for the one read here, and serde skips the rest as it reads this struct.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::first_of_each;

/// An Istio Gateway (not the Gateway API's): its servers' hosts.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IstioGateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: IstioGatewaySpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct IstioGatewaySpec {
    #[serde(default)]
    pub servers: Vec<Server>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Server {
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// A server host without its namespace prefix (`ns/`, `*/`, `./`).
pub fn server_host(host: &str) -> &str {
    host.split_once('/').map_or(host, |(_, h)| h).trim()
}

impl IstioGatewaySpec {
    /// Every server's hosts, prefixes dropped, each once.
    pub fn hosts(&self) -> Vec<String> {
        first_of_each(
            self.servers
                .iter()
                .flat_map(|s| &s.hosts)
                .map(|h| server_host(h).to_string())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_hosts() {
        for (host, want) in [
            ("app.example.com", "app.example.com"),
            ("prod/app.example.com", "app.example.com"),
            ("*/app.example.com", "app.example.com"),
            ("./app.example.com", "app.example.com"),
            ("./*.example.com", "*.example.com"),
            ("*", "*"),
            ("./*", "*"),
            // Whatever follows the first `/` goes to the hostname policy, which rejects a `/`.
            ("a/b/c.example.com", "b/c.example.com"),
        ] {
            assert_eq!(server_host(host), want, "{host}");
        }
    }

    #[test]
    fn a_gateways_servers_together() {
        let s: IstioGatewaySpec = serde_json::from_value(json!({
            "selector": {"istio": "ingressgateway"},
            "servers": [
                {"port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                 "hosts": ["prod/app.example.com", "*/api.example.com"],
                 "tls": {"mode": "SIMPLE", "credentialName": "cert"}},
                {"port": {"number": 80, "name": "http", "protocol": "HTTP"},
                 "hosts": ["app.example.com"]}
            ]
        }))
        .unwrap();
        assert_eq!(s.hosts(), ["app.example.com", "api.example.com"]);
    }
}
