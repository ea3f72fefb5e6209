//! external-dns `DNSEndpoint` objects for the hairpinned names: one object per hostname, with an
//! A record listing the proxy's IPv4 addresses and an AAAA record listing its IPv6 ones. An
//! external-dns deployment running with `--source=crd` publishes them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::dns_name::{
    is_dns1035_label, is_label as is_dns1123_label, is_subdomain as is_dns1123_subdomain,
    LABEL_SYNTAX,
};
use crate::hostname::Hostname;

pub const API_VERSION: &str = "externaldns.k8s.io/v1alpha1";
pub const KIND: &str = "DNSEndpoint";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "ouroboros";
pub const INSTANCE_LABEL: &str = "ouroboros.io/instance";
/// The instance label lexfrei/ouroboros puts on its DNSEndpoints and Services (with the same
/// managed-by label as ours). `--external-dns-adopt` takes over the objects that carry it with
/// this instance's name.
pub const REFERENCE_INSTANCE_LABEL: &str = "ouroboros.lexfrei.tech/instance";
pub const DEFAULT_INSTANCE: &str = "ouroboros";
pub const DEFAULT_TTL: u32 = 60;
pub const MAX_TTL: u32 = 86_400;
/// Keys under this prefix belong to ouroboros and cannot be set by the user.
const RESERVED_PREFIX: &str = "ouroboros.io/";

/// `externaldns.k8s.io/v1alpha1` `DNSEndpoint`, the fields ouroboros writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsEndpoint {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: DnsEndpointSpec,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsEndpointSpec {
    pub endpoints: Vec<Endpoint>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub dns_name: String,
    pub record_type: String,
    pub targets: Vec<String>,
    #[serde(rename = "recordTTL")]
    pub record_ttl: i64,
}

/// Everything except the host set, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    namespace: String,
    instance: String,
    ttl: u32,
    ipv4: Vec<String>,
    ipv6: Vec<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl Options {
    /// Checks the namespace, instance, TTL, proxy IPs and the user's labels and annotations.
    pub fn new(
        namespace: &str,
        instance: &str,
        ttl: u32,
        proxy_ips: &[IpAddr],
        labels: &[(String, String)],
        annotations: &[(String, String)],
    ) -> Result<Self, String> {
        if !is_dns1123_label(namespace) {
            return Err(format!(
                "namespace {namespace:?} is not a valid namespace name ({LABEL_SYNTAX})"
            ));
        }
        check_label_value(instance).map_err(|e| format!("instance {instance:?}: {e}"))?;
        if instance.is_empty() {
            return Err("the instance name must not be empty".into());
        }
        if !(1..=MAX_TTL).contains(&ttl) {
            return Err(format!(
                "record TTL {ttl} is outside [1, {MAX_TTL}] seconds"
            ));
        }
        if proxy_ips.is_empty() {
            return Err("at least one proxy IP is needed for the records' targets".into());
        }
        // IPv4-mapped IPv6 addresses are IPv4 for DNS purposes.
        let ips: BTreeSet<IpAddr> = proxy_ips.iter().map(IpAddr::to_canonical).collect();
        let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = ips.into_iter().partition(IpAddr::is_ipv4);
        if let Some(ip) = v4.iter().chain(&v6).find(|ip| ip.is_unspecified()) {
            return Err(format!("proxy IP {ip} is not a usable record target"));
        }
        Ok(Self {
            namespace: namespace.to_string(),
            instance: instance.to_string(),
            ttl,
            ipv4: v4.iter().map(ToString::to_string).collect(),
            ipv6: v6.iter().map(ToString::to_string).collect(),
            labels: user_map("label", labels)?,
            annotations: user_map("annotation", annotations)?,
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

fn user_map(what: &str, pairs: &[(String, String)]) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        check_key(k).map_err(|e| format!("{what} key {k:?}: {e}"))?;
        if k == MANAGED_BY_LABEL || k.starts_with(RESERVED_PREFIX) {
            return Err(format!(
                "{what} key {k:?} is reserved: ouroboros sets {MANAGED_BY_LABEL} and the {RESERVED_PREFIX} keys itself"
            ));
        }
        if what == "label" {
            check_label_value(v).map_err(|e| format!("label {k}={v:?}: {e}"))?;
        }
        if map.insert(k.clone(), v.clone()).is_some() {
            return Err(format!("{what} key {k:?} is given more than once"));
        }
    }
    Ok(map)
}

/// The label selector that finds this instance's objects (for listing leftovers to delete).
pub fn selector(instance: &str) -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{INSTANCE_LABEL}={instance}")
}

/// The label selector that finds the objects lexfrei/ouroboros wrote for `instance`.
pub fn reference_selector(instance: &str) -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY},{REFERENCE_INSTANCE_LABEL}={instance}")
}

/// Object names are at most this long: a DNS-1123 label for `DNSEndpoint`s, a DNS-1035 label
/// for Services.
const NAME_MAX: usize = 63;
/// Hex digits of the hash that ends every object name.
const HASH_HEX: usize = 16;
/// Put before a Service name whose readable part does not start with a letter (`1password.x`,
/// `0.x`): a Service name must be a DNS-1035 label, which starts with a letter.
pub const SERVICE_NAME_MARKER: &str = "h-";

/// The object name for a hostname: a readable part of the name plus 16 hex digits of SHA-256 over
/// the instance and the full name, as one DNS-1123 label. The hash keeps distinct names apart
/// where the readable part cannot (`a-b.x` / `a.b-x`, `*.x`, truncated long names); a
/// cryptographic hash means a tenant cannot craft a name that lands on another tenant's object.
pub fn object_name(instance: &str, host: &Hostname) -> String {
    let (readable, hash) = name_parts(instance, host);
    join_name("", &readable, &hash)
}

/// The Service name for a hostname (`--external-dns-output service`): a DNS-1035 label of at most
/// 63 characters. It is [`object_name`] wherever that already starts with a letter, so Services
/// written before this rule keep their names and an upgrade renames nothing; the others (names
/// starting with a digit, which the API server refuses for Services, so none of them exist) get
/// [`SERVICE_NAME_MARKER`] in front and a readable part shortened to make room. The hash is the
/// same as in [`object_name`], so names stay distinct: the marker only changes the readable part,
/// which never kept names apart on its own.
pub fn service_name(instance: &str, host: &Hostname) -> String {
    let (readable, hash) = name_parts(instance, host);
    let prefix = if readable.starts_with(|c: char| c.is_ascii_lowercase()) {
        ""
    } else {
        SERVICE_NAME_MARKER
    };
    let name = join_name(prefix, &readable, &hash);
    debug_assert!(is_dns1035_label(&name), "{host:?} -> {name}");
    name
}

/// The whole readable part (dots as '-', `*.` as `wildcard-`) and the hash of an object name.
fn name_parts(instance: &str, host: &Hostname) -> (String, String) {
    let digest = Sha256::new()
        .chain_update(instance.as_bytes())
        .chain_update([0u8])
        .chain_update(host.as_str().as_bytes())
        .finalize();
    let hash: String = digest
        .iter()
        .take(HASH_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let readable = match host.as_str().strip_prefix("*.") {
        Some(base) => format!("wildcard-{base}"),
        None => host.as_str().to_string(),
    }
    .replace('.', "-");
    (readable, hash)
}

/// `prefix`, the readable part cut to what fits in [`NAME_MAX`], '-' and the hash. A cut never
/// leaves a '-' before the separator, and the readable part (a hostname's first label, which
/// starts alphanumeric) never becomes empty.
fn join_name(prefix: &str, readable: &str, hash: &str) -> String {
    let room = NAME_MAX - prefix.len() - HASH_HEX - 1;
    let readable = readable[..readable.len().min(room)].trim_end_matches('-');
    format!("{prefix}{readable}-{hash}")
}

/// One `DNSEndpoint` per host, in host order.
pub fn endpoints(hosts: &BTreeSet<Hostname>, opts: &Options) -> Vec<DnsEndpoint> {
    endpoints_named(hosts, opts, object_name)
}

/// [`endpoints`] with each object named by `name` (instance, host): [`service_name`] for the
/// Service output, whose names have a stricter syntax than a `DNSEndpoint`'s. The objects' names
/// are where both outputs take them from, so the name an object is written under, listed under
/// and deleted under is always the same one.
pub fn endpoints_named(
    hosts: &BTreeSet<Hostname>,
    opts: &Options,
    name: fn(&str, &Hostname) -> String,
) -> Vec<DnsEndpoint> {
    let mut labels = opts.labels.clone();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels.insert(INSTANCE_LABEL.into(), opts.instance.clone());
    let annotations = (!opts.annotations.is_empty()).then(|| opts.annotations.clone());
    hosts
        .iter()
        .map(|host| {
            let records = [("A", &opts.ipv4), ("AAAA", &opts.ipv6)];
            let endpoints = records
                .into_iter()
                .filter(|(_, targets)| !targets.is_empty())
                .map(|(record_type, targets)| Endpoint {
                    dns_name: host.as_str().to_string(),
                    record_type: record_type.into(),
                    targets: targets.clone(),
                    record_ttl: i64::from(opts.ttl),
                })
                .collect();
            DnsEndpoint {
                api_version: API_VERSION.into(),
                kind: KIND.into(),
                metadata: ObjectMeta {
                    name: Some(name(&opts.instance, host)),
                    namespace: Some(opts.namespace.clone()),
                    labels: Some(labels.clone()),
                    annotations: annotations.clone(),
                    ..Default::default()
                },
                spec: DnsEndpointSpec { endpoints },
            }
        })
        .collect()
}

/// Multi-document YAML, one document per object (what `kubectl apply -f` takes). Empty for none.
pub fn to_yaml(objects: &[DnsEndpoint]) -> Result<String, yaml_serde::Error> {
    let mut out = String::new();
    for obj in objects {
        out.push_str("---\n");
        out.push_str(&yaml_serde::to_string(obj)?);
    }
    Ok(out)
}

/// `key=value` as the `--external-dns-label`/`--external-dns-annotation` flags take it.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let Some((k, v)) = s.split_once('=') else {
        return Err(format!("{s:?} is not key=value"));
    };
    check_key(k)?;
    Ok((k.to_string(), v.to_string()))
}

/// `--external-dns-annotation-prefix`: the prefix of an annotation key (a DNS subdomain and `/`,
/// as external-dns `--annotation-prefix` takes it), so that `<prefix>hostname` is a valid key.
pub fn parse_annotation_prefix(s: &str) -> Result<String, String> {
    if !s.ends_with('/') {
        return Err(format!(
            "{s:?} must end with '/', like external-dns's --annotation-prefix (e.g. internal-dns/)"
        ));
    }
    check_key(&format!("{s}hostname"))?;
    Ok(s.to_string())
}

/// Kubernetes label/annotation key: optional DNS-1123 subdomain prefix and `/`, then a name of at
/// most 63 characters.
pub fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns1123_subdomain(p) {
            return Err(format!(
                "prefix {p:?} is not a DNS subdomain (lowercase a-z, 0-9, '-' and '.', at most 253 characters)"
            ));
        }
    }
    if name.is_empty() {
        return Err("the key's name part is empty".into());
    }
    if !is_qualified_name_part(name) {
        return Err(format!(
            "name {name:?} must be at most 63 characters of A-Z, a-z, 0-9, '-', '_' and '.', starting and ending alphanumeric"
        ));
    }
    Ok(())
}

/// Kubernetes label value: empty, or a name of at most 63 characters.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_qualified_name_part(v) {
        Ok(())
    } else {
        Err(
            "a label value must be at most 63 characters of A-Z, a-z, 0-9, '-', '_' and '.', starting and ending alphanumeric"
                .into(),
        )
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostname::HostPolicy;

    fn host(s: &str) -> Hostname {
        HostPolicy::new("cluster.local", &[], &[]).check(s).unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn opts(ip_list: &[&str]) -> Options {
        Options::new(
            "ouroboros",
            DEFAULT_INSTANCE,
            DEFAULT_TTL,
            &ips(ip_list),
            &[],
            &[],
        )
        .unwrap()
    }

    #[test]
    fn object_names_are_readable_labels() {
        let long = format!("{}.example.com", "a".repeat(63));
        for (h, prefix) in [
            ("www.example.com", "www-example-com-"),
            ("*.example.com", "wildcard-example-com-"),
            ("a-b.example.com", "a-b-example-com-"),
            (long.as_str(), &"a".repeat(46)[..]),
            // Truncation never leaves a '-' before the hash separator.
            (
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrs.x-y.example",
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrs-",
            ),
            (
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst.example.com",
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst-",
            ),
        ] {
            let name = object_name(DEFAULT_INSTANCE, &host(h));
            assert!(name.starts_with(prefix), "{h} -> {name}");
            assert!(is_dns1123_label(&name), "{h} -> {name}");
            assert!(!name.contains("--") || h.contains("--"), "{h} -> {name}");
            assert_eq!(
                name,
                object_name(DEFAULT_INSTANCE, &host(h)),
                "deterministic"
            );
        }
        // Pinned (sha256("ouroboros\0www.example.com")): a change here renames every object
        // in running clusters.
        assert_eq!(
            object_name(DEFAULT_INSTANCE, &host("WWW.example.com.")),
            "www-example-com-83c9f4f4d6e3c9e9"
        );
        assert_ne!(
            object_name("a", &host("www.example.com")),
            object_name("b", &host("www.example.com"))
        );
    }

    #[test]
    fn object_names_do_not_collide() {
        // Names whose readable parts coincide, wildcard/non-wildcard pairs, and long names that
        // share the truncated prefix, plus many generated ones.
        let mut names: Vec<String> = vec![
            "a-b.example.com".into(),
            "a.b-example.com".into(),
            "a.b.example.com".into(),
            "*.example.com".into(),
            "wildcard.example.com".into(),
            "wildcard-example.com".into(),
            "*.wildcard.example.com".into(),
        ];
        let stem = "x".repeat(60);
        for i in 0..2000 {
            names.push(format!("{stem}.{i}.example.com"));
            names.push(format!("h{i}.example.com"));
            names.push(format!("*.h{i}.example.com"));
            names.push(format!("h-{i}.example.com"));
            names.push(format!("h.{i}.example.com"));
        }
        let hosts: BTreeSet<Hostname> = names.iter().map(|n| host(n)).collect();
        assert_eq!(hosts.len(), names.len());
        let objects: BTreeSet<String> = hosts
            .iter()
            .map(|h| object_name(DEFAULT_INSTANCE, h))
            .collect();
        assert_eq!(objects.len(), hosts.len());
        assert!(objects.iter().all(|n| is_dns1123_label(n)));
    }

    #[test]
    fn dns1035_labels() {
        for (s, ok) in [
            ("a", true),
            ("www-example-com-83c9f4f4d6e3c9e9", true),
            ("h-1password-example-com-9e2fe40f336f8937", true),
            ("xn--bcher-kva", true),
            (&"a".repeat(63), true),
            (&"a".repeat(64), false),
            ("", false),
            ("1password-example-com-9e2fe40f336f8937", false),
            ("0", false),
            ("-a", false),
            ("a-", false),
            ("A", false),
            ("a.b", false),
            ("a_b", false),
        ] {
            assert_eq!(is_dns1035_label(s), ok, "{s:?}");
        }
    }

    #[test]
    fn service_names_are_dns1035_labels() {
        let long = format!("{0}.{0}.{0}.{1}.com", "a".repeat(63), "b".repeat(57));
        let long_digit = format!(
            "{0}.{1}.{1}.{2}.com",
            "1".repeat(63),
            "a".repeat(63),
            "b".repeat(57)
        );
        let label63 = format!("9{}.example.com", "x".repeat(62));
        // The cut for the marker's room falls on the '-' that was the dot after the first label.
        let cut_at_dash = format!("1{}.x-y.example", "b".repeat(42));
        // Pinned: a change here renames Services in running clusters.
        let table: [(&str, &str); 16] = [
            // Digit-led: the marker in front, the same hash as the DNSEndpoint name.
            (
                "1password.example.com",
                "h-1password-example-com-9e2fe40f336f8937",
            ),
            ("0.example.com", "h-0-example-com-f1be45cc05834bd4"),
            (
                &label63,
                "h-9xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-fc20772e3dc1ee5f",
            ),
            (
                &long_digit,
                "h-11111111111111111111111111111111111111111111-1ef1743aba97b6b2",
            ),
            (
                &cut_at_dash,
                "h-1bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-abac697eca0970e8",
            ),
            ("1-2.example.com", "h-1-2-example-com-d56665747ba0703b"),
            ("1.2.example.com", "h-1-2-example-com-c5c86a43ad7e2fbb"),
            ("12.example.com", "h-12-example-com-707f3ab4ea8130c9"),
            // Already valid: the name from before this rule, so nothing is renamed.
            ("www.example.com", "www-example-com-83c9f4f4d6e3c9e9"),
            (
                "xn--bcher-kva.example.com",
                "xn--bcher-kva-example-com-78126b091f4e86c1",
            ),
            ("xn--80ak6aa92e.com", "xn--80ak6aa92e-com-cf85c6219b2274f4"),
            (
                "*.apps.example.com",
                "wildcard-apps-example-com-0a569736015e03f6",
            ),
            ("*.1.example.com", "wildcard-1-example-com-6479e1c81c39f899"),
            (
                &long,
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-5282f7aa86db12a6",
            ),
            ("a-b.example.com", "a-b-example-com-b60d040b5f1ac780"),
            ("api.example.com", "api-example-com-6870ca982f5c3007"),
        ];
        assert_eq!(long.len(), 253);
        assert_eq!(long_digit.len(), 253);
        let mut seen = BTreeSet::new();
        for (h, pinned) in table {
            let h = host(h);
            let old = object_name(DEFAULT_INSTANCE, &h);
            let name = service_name(DEFAULT_INSTANCE, &h);
            assert!(is_dns1035_label(&name), "{h:?} -> {name}");
            assert!(name.len() <= 63, "{h:?} -> {name}");
            assert_eq!(name, service_name(DEFAULT_INSTANCE, &h), "deterministic");
            if is_dns1035_label(&old) {
                assert_eq!(name, old, "{h:?}: a valid name is kept");
            } else {
                assert!(name.starts_with(SERVICE_NAME_MARKER), "{h:?} -> {name}");
                assert_eq!(
                    name[name.len() - 17..],
                    old[old.len() - 17..],
                    "{h:?}: same hash"
                );
            }
            assert_eq!(name, pinned, "{h:?}");
            // DNSEndpoint names are untouched by the Service rule.
            assert!(is_dns1123_label(&old), "{h:?} -> {old}");
            assert!(seen.insert(name.clone()), "{h:?} -> {name} twice");
        }
        assert_ne!(
            service_name("a", &host("1.example.com")),
            service_name("b", &host("1.example.com"))
        );
    }

    #[test]
    fn service_names_do_not_collide() {
        // Digit-led names next to the letter-led names their marked form reads like, plus many
        // generated ones.
        let mut names: Vec<String> = vec![
            "1password.example.com".into(),
            "h-1password.example.com".into(),
            "h.1password.example.com".into(),
            "0.example.com".into(),
            "h-0.example.com".into(),
            "*.0.example.com".into(),
            "wildcard-0.example.com".into(),
        ];
        let stem = "9".repeat(60);
        for i in 0..2000 {
            names.push(format!("{stem}.{i}.example.com"));
            names.push(format!("{i}.example.net"));
            names.push(format!("h-{i}.example.net"));
            names.push(format!("*.{i}.example.net"));
            names.push(format!("{i}x.example.net"));
        }
        let hosts: BTreeSet<Hostname> = names.iter().map(|n| host(n)).collect();
        assert_eq!(hosts.len(), names.len());
        let services: BTreeSet<String> = hosts
            .iter()
            .map(|h| service_name(DEFAULT_INSTANCE, h))
            .collect();
        assert_eq!(services.len(), hosts.len());
        assert!(services.iter().all(|n| is_dns1035_label(n)));
    }

    #[test]
    fn endpoints_take_the_given_names() {
        let hosts = BTreeSet::from([host("1password.example.com"), host("www.example.com")]);
        let o = opts(&["192.0.2.1"]);
        let names = |objs: Vec<DnsEndpoint>| -> Vec<String> {
            objs.into_iter().map(|e| e.metadata.name.unwrap()).collect()
        };
        assert_eq!(
            names(endpoints(&hosts, &o)),
            [
                "1password-example-com-9e2fe40f336f8937",
                "www-example-com-83c9f4f4d6e3c9e9"
            ]
        );
        assert_eq!(
            names(endpoints_named(&hosts, &o, service_name)),
            [
                "h-1password-example-com-9e2fe40f336f8937",
                "www-example-com-83c9f4f4d6e3c9e9"
            ]
        );
        let as_services = endpoints_named(&hosts, &o, service_name);
        for (a, b) in endpoints(&hosts, &o).iter().zip(&as_services) {
            assert_eq!(a.spec, b.spec);
            assert_eq!(a.metadata.labels, b.metadata.labels);
        }
    }

    #[test]
    fn records_per_family() {
        let hosts = BTreeSet::from([host("b.example.com"), host("*.a.example.com")]);
        // Sorted, deduplicated, IPv4-mapped IPv6 counted as IPv4, IPv6 in canonical form.
        let o = opts(&[
            "10.0.0.2",
            "fd00:0:0::1",
            "10.0.0.1",
            "::ffff:10.0.0.3",
            "10.0.0.1",
        ]);
        let objs = endpoints(&hosts, &o);
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].spec.endpoints[0].dns_name, "*.a.example.com");
        for obj in &objs {
            assert_eq!(obj.api_version, API_VERSION);
            assert_eq!(obj.kind, KIND);
            assert_eq!(obj.metadata.namespace.as_deref(), Some("ouroboros"));
            let got: Vec<(&str, Vec<&str>, i64)> = obj
                .spec
                .endpoints
                .iter()
                .map(|e| {
                    (
                        e.record_type.as_str(),
                        e.targets.iter().map(String::as_str).collect(),
                        e.record_ttl,
                    )
                })
                .collect();
            assert_eq!(
                got,
                [
                    ("A", vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"], 60),
                    ("AAAA", vec!["fd00::1"], 60)
                ]
            );
            let labels = obj.metadata.labels.as_ref().unwrap();
            assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
            assert_eq!(labels[INSTANCE_LABEL], DEFAULT_INSTANCE);
            assert!(obj.metadata.annotations.is_none());
        }
        let only6 = endpoints(&hosts, &opts(&["fd00::1"]));
        assert_eq!(only6[1].spec.endpoints.len(), 1);
        assert_eq!(only6[1].spec.endpoints[0].record_type, "AAAA");
        let only4 = endpoints(&hosts, &opts(&["192.0.2.1"]));
        assert_eq!(only4[1].spec.endpoints.len(), 1);
        assert_eq!(only4[1].spec.endpoints[0].record_type, "A");
        assert!(endpoints(&BTreeSet::new(), &o).is_empty());
    }

    #[test]
    fn user_labels_annotations_and_yaml() {
        let o = Options::new(
            "dns",
            "blue",
            300,
            &ips(&["192.0.2.1"]),
            &[("dns.example.com/instance".into(), "internal".into())],
            &[
                (
                    "external-dns.alpha.kubernetes.io/cloudflare-proxied".into(),
                    "false".into(),
                ),
                ("note".into(), "a, b = c\nd".into()),
            ],
        )
        .unwrap();
        let objs = endpoints(&BTreeSet::from([host("www.example.com")]), &o);
        let yaml = to_yaml(&objs).unwrap();
        assert!(
            yaml.starts_with("---\napiVersion: externaldns.k8s.io/v1alpha1\nkind: DNSEndpoint\n"),
            "{yaml}"
        );
        let back: Vec<DnsEndpoint> = yaml_serde::Deserializer::from_str(&yaml)
            .map(|d| DnsEndpoint::deserialize(d).unwrap())
            .collect();
        assert_eq!(back, objs);
        let v: serde_json::Value = serde_json::to_value(&objs[0]).unwrap();
        assert_eq!(
            v["metadata"]["labels"]["dns.example.com/instance"],
            "internal"
        );
        assert_eq!(v["metadata"]["labels"][INSTANCE_LABEL], "blue");
        assert_eq!(v["metadata"]["annotations"]["note"], "a, b = c\nd");
        assert_eq!(v["spec"]["endpoints"][0]["recordTTL"], 300);
        assert_eq!(v["spec"]["endpoints"][0]["dnsName"], "www.example.com");
        assert_eq!(v["spec"]["endpoints"][0]["recordType"], "A");
        assert_eq!(to_yaml(&[]).unwrap(), "");
        assert_eq!(
            selector("blue"),
            "app.kubernetes.io/managed-by=ouroboros,ouroboros.io/instance=blue"
        );
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a table of cases: one bad option each and the field its error names"
    )]
    fn option_errors() {
        let ip = ips(&["192.0.2.1"]);
        let kv = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        let none: Vec<(String, String)> = vec![];
        for (ns, inst, ttl, ipl, labels, ann, want) in [
            (
                "Bad_NS",
                "o",
                60,
                ip.clone(),
                none.clone(),
                none.clone(),
                "namespace",
            ),
            (
                "",
                "o",
                60,
                ip.clone(),
                none.clone(),
                none.clone(),
                "namespace",
            ),
            (
                "ns",
                "",
                60,
                ip.clone(),
                none.clone(),
                none.clone(),
                "instance",
            ),
            (
                "ns",
                "a b",
                60,
                ip.clone(),
                none.clone(),
                none.clone(),
                "instance",
            ),
            ("ns", "o", 0, ip.clone(), none.clone(), none.clone(), "TTL"),
            (
                "ns",
                "o",
                86_401,
                ip.clone(),
                none.clone(),
                none.clone(),
                "TTL",
            ),
            (
                "ns",
                "o",
                60,
                vec![],
                none.clone(),
                none.clone(),
                "proxy IP",
            ),
            (
                "ns",
                "o",
                60,
                ips(&["0.0.0.0"]),
                none.clone(),
                none.clone(),
                "0.0.0.0",
            ),
            (
                "ns",
                "o",
                60,
                ips(&["::"]),
                none.clone(),
                none.clone(),
                "::",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                kv(MANAGED_BY_LABEL, "x"),
                none.clone(),
                "reserved",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                kv(INSTANCE_LABEL, "x"),
                none.clone(),
                "reserved",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                none.clone(),
                kv("ouroboros.io/anything", "x"),
                "reserved",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                kv("team", "has space"),
                none.clone(),
                "label value",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                kv("bad key!", "x"),
                none.clone(),
                "label key",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                none.clone(),
                kv("Bad.Prefix/x", "x"),
                "prefix",
            ),
            (
                "ns",
                "o",
                60,
                ip.clone(),
                vec![("a".into(), "1".into()), ("a".into(), "2".into())],
                none.clone(),
                "more than once",
            ),
        ] {
            let err = Options::new(ns, inst, ttl, &ipl, &labels, &ann).unwrap_err();
            assert!(err.contains(want), "{ns} {inst} {ttl}: {err}");
        }
        for ttl in [1, 86_400] {
            assert!(Options::new("ns", "o", ttl, &ip, &[], &[]).is_ok());
        }
    }

    #[test]
    fn key_value_syntax() {
        for (s, ok) in [
            ("a=b", true),
            ("a=", true),
            ("a==b", true),
            ("example.com/a=b", true),
            ("a.b_c-D=v", true),
            ("k", false),
            ("=v", false),
            ("/a=v", false),
            ("example.com/=v", false),
            ("Example.com/a=v", false),
            ("-a=v", false),
            ("a-=v", false),
            ("a/b/c=v", false),
            (&format!("{}=v", "a".repeat(64)), false),
            (&format!("{}=v", "a".repeat(63)), true),
        ] {
            assert_eq!(parse_key_value(s).is_ok(), ok, "{s:?}");
        }
        assert_eq!(
            parse_key_value("a==b").unwrap(),
            ("a".to_string(), "=b".to_string())
        );
        for (v, ok) in [
            ("", true),
            ("a", true),
            ("A.b-c_d", true),
            ("-a", false),
            ("a b", false),
            ("a/b", false),
        ] {
            assert_eq!(check_label_value(v).is_ok(), ok, "{v:?}");
        }
        assert!(check_label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn annotation_prefixes() {
        for (s, ok) in [
            ("external-dns.alpha.kubernetes.io/", true),
            ("internal-dns/", true),
            ("a.b/", true),
            ("internal-dns", false),
            ("/", false),
            ("Internal/", false),
            ("a/b/", false),
            ("in ternal/", false),
        ] {
            assert_eq!(parse_annotation_prefix(s).is_ok(), ok, "{s:?}");
        }
        assert!(parse_annotation_prefix("internal-dns")
            .unwrap_err()
            .contains("must end with '/'"));
        assert_eq!(
            reference_selector("blue"),
            "app.kubernetes.io/managed-by=ouroboros,ouroboros.lexfrei.tech/instance=blue"
        );
    }
}
