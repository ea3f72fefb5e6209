//! The DNS configuration that points hairpinned names at the proxy. The modules here are PURE
//! renderers and editors: the CoreDNS Corefile block (`answer`: the A/AAAA `template` pair, or
//! the opt-in `rewrite` lines; `name_regex`: its zones and patterns), the CoreDNS import snippet,
//! the hosts-file block and external-dns DNSEndpoint objects. Text in, text out (or a typed
//! error); no I/O (a unit test checks their imports). `write` holds the write paths that run
//! them on live targets, `args` the DNS-target flags every mode shares, and `mode` one module
//! per DNS mode (what it reads, how it writes and removes, the RBAC it needs, its own flags and
//! `render` subcommand), listed in one table (`mode::for_each_mode!`), from which `Mode` is
//! generated here.

pub mod answer;
pub mod answer_form;
pub mod args;
mod block;
pub mod coredns_import;
pub mod corefile;
pub mod etc_hosts;
pub mod external;
pub mod mode;
mod name_regex;
pub mod reload_memory;
pub mod rewrite_rule;
pub mod write;

use std::fmt;

use clap::ValueEnum;

/// Generates `Mode` and `MODE_HELP` from the mode table's rows (`for_each_mode!` in
/// `dns::mode`). Here, in the pure `dns`, rather than beside the modes: the rows hand over only
/// names and help text, so the flags (`dns::args`) and the pure checks (doctor's) name a mode
/// without importing a writer.
macro_rules! mode_enum {
    ($($module:ident, $variant:ident, $value:tt, $help:tt;)*) => {
        /// Where the hairpinned names are published: the key of the mode table, `Mode::spec` in
        /// `dns::mode`, which holds each mode's facts and behaviour.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
        pub enum Mode {
            $(
                #[doc = $help]
                #[value(name = $value)]
                $variant,
            )*
        }

        impl Mode {
            /// The `--mode` value, as logs, metric labels and `doctor` name the mode.
            pub fn name(self) -> &'static str {
                match self {
                    $(Mode::$variant => $value,)*
                }
            }
        }

        /// The help of `--mode`: every value, in the table's order (no final period, as clap leaves
        /// none after a one-line doc comment). Worded for every command that takes it: the
        /// controller writes there, cleanup removes from there, doctor checks there.
        pub const MODE_HELP: &str = concat!("Where the names are published: ", or_list!($($value),*));
    };
}

/// `"a, b or c"` of string literals.
macro_rules! or_list {
    ($only:tt) => { $only };
    ($a:tt, $b:tt) => { concat!($a, " or ", $b) };
    ($a:tt, $($rest:tt),+) => { concat!($a, ", ", or_list!($($rest),+)) };
}

mode::for_each_mode!(mode_enum);

/// The API server refuses a ConfigMap whose data values (`data` and decoded `binaryData`)
/// total more than this (`ValidateConfigMap`, `core.MaxSecretSize`).
pub const MAX_CONFIGMAP_DATA: usize = 1 << 20;

/// What to do about a block too large for its ConfigMap (the controller's error and `render`'s).
pub const TOO_LARGE_WAYS_OUT: &str = "hairpin fewer names (--ingress-class, --allow-domain); \
     --coredns-answer view (coredns mode, CoreDNS 1.10 or later: two thirds of the template \
     pair's size a name, a set lookup per query); --mode coredns-import (a ConfigMap of its own); or \
     --mode external-dns (one object per name)";

/// Marker lines shared with the reference tool, so a cluster migrating from it is adopted.
pub const BEGIN_MARKER: &str = "# === BEGIN ouroboros (do not edit by hand) ===";
pub const END_MARKER: &str = "# === END ouroboros ===";

/// The proxy Service's fully qualified name, with its trailing dot (the rewrite target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyFqdn(String);

pub const DEFAULT_PROXY_FQDN: &str = "ouroboros-proxy.ouroboros.svc.cluster.local.";

impl ProxyFqdn {
    /// Accepts a lowercase-able RFC 1123 name that ends with a dot.
    pub fn parse(s: &str) -> Result<Self, String> {
        let Some(name) = s.strip_suffix('.') else {
            return Err(format!(
                "proxy FQDN {s:?} must end with a dot, e.g. {DEFAULT_PROXY_FQDN}"
            ));
        };
        if !crate::dns_name::is_hostname(name, false) {
            return Err(format!("proxy FQDN {s:?} is not a valid DNS name"));
        }
        Ok(Self(s.to_ascii_lowercase()))
    }

    /// From a Service name, namespace and cluster domain: `name.ns.svc.domain.`
    pub fn for_service(name: &str, namespace: &str, cluster_domain: &str) -> Result<Self, String> {
        Self::parse(&format!(
            "{name}.{namespace}.svc.{}.",
            cluster_domain.trim_end_matches('.')
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProxyFqdn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One data key of one ConfigMap: where a Corefile or import snippet lives. Plain data, here
/// rather than in the writer (`write::apply`), so the PURE checks that name it import no I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapKey {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl ConfigMapKey {
    pub fn new(namespace: &str, name: &str, key: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
        }
    }

    /// `kube-system/coredns`, `Corefile`.
    pub fn coredns_default() -> Self {
        Self::new("kube-system", "coredns", "Corefile")
    }

    /// `kube-system/coredns-custom`, `ouroboros.override`.
    pub fn import_default() -> Self {
        Self::new("kube-system", "coredns-custom", "ouroboros.override")
    }

    /// `kube-system/node-local-dns`, `Corefile` (kubespray names it `nodelocaldns`).
    pub fn node_local_dns_default() -> Self {
        Self::new("kube-system", "node-local-dns", "Corefile")
    }
}

impl fmt::Display for ConfigMapKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConfigMap {}/{} key {:?}",
            self.namespace, self.name, self.key
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn or_list_joins_with_commas_and_a_final_or() {
        assert_eq!(or_list!("a"), "a");
        assert_eq!(or_list!("a", "b"), "a or b");
        assert_eq!(or_list!("a", "b", "c"), "a, b or c");
        assert_eq!(or_list!("a", "b", "c", "d"), "a, b, c or d");
    }

    /// `--mode`'s help names every mode of the table, in its order.
    #[test]
    fn mode_help_lists_every_mode_in_the_tables_order() {
        let names: Vec<&str> = Mode::value_variants().iter().map(|m| m.name()).collect();
        let (last, rest) = names.split_last().unwrap();
        let list = format!("{} or {last}", rest.join(", "));
        assert_eq!(MODE_HELP, format!("Where the names are published: {list}"));
    }

    #[test]
    fn proxy_fqdn() {
        assert_eq!(
            ProxyFqdn::parse(DEFAULT_PROXY_FQDN).unwrap().as_str(),
            DEFAULT_PROXY_FQDN
        );
        assert_eq!(
            ProxyFqdn::parse("P.NS.svc.Corp.").unwrap().as_str(),
            "p.ns.svc.corp."
        );
        for bad in [
            "", ".", "no-dot", "a..b.", "-a.b.", "a b.", "a.b\n.", "a{.b.",
        ] {
            assert!(ProxyFqdn::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            ProxyFqdn::for_service("ouroboros-proxy", "ouroboros", "cluster.local")
                .unwrap()
                .as_str(),
            DEFAULT_PROXY_FQDN
        );
    }
}
