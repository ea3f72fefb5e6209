//! Flag value types and parsers every subcommand shares: usage errors, durations, listen
//! addresses, and the parser unit tests use for one `Args` struct.
//!
//! A leaf of the module graph for the subcommands: it imports none of them and not `cli`, so each
//! subcommand's `Args` can live with the code it configures while `cli` (which dispatches to all
//! of them) is imported by none.

use crate::listen::{parse_listen, ListenAddr};

// Boolean flags: every one takes `--flag`, `--flag=true|false` (and 1/0, yes/no in its
// variable), as users of the reference tool (Go's flag package) type them. Clap's derive has no
// way to name a set of argument settings, so each boolean field repeats them:
//     num_args = 0..=1, require_equals = true,
//     value_parser = clap::builder::BoolishValueParser::new(),
//     default_missing_value = "true", action = ArgAction::Set
// and `cli`'s test every_boolean_flag_takes_flag_and_flag_equals_bool walks every subcommand to
// keep them so.

/// Exit code for bad flags or flag combinations (sysexits.h EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// A flag combination that parses but makes no sense; reported like a clap error, exit 64.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }

    /// The same, as the `anyhow::Error` a subcommand's `run` returns (`cli` maps it to exit 64).
    pub fn err(msg: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Self::new(msg))
    }
}

/// A `NAMESPACE/NAME` reference to one object, as every flag naming one takes it (doctor's
/// `--controller-service-account`, `edge --service`, `--ingress-controller-service`, a target's
/// `ingress-controller=`, `cleanup --stop-controller`): one rule for all of them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses `NAMESPACE/NAME` of an object: the namespace a DNS label and the name a DNS subdomain,
/// as the API server requires of them (surrounding whitespace ignored), so a name it would
/// refuse is refused here, with an example.
pub fn parse_namespaced_name(s: &str) -> Result<NamespacedName, String> {
    use crate::dns_name::{is_label, is_subdomain};
    match s.trim().split_once('/') {
        Some((ns, name)) if is_label(ns) && is_subdomain(name) => Ok(NamespacedName {
            namespace: ns.to_string(),
            name: name.to_string(),
        }),
        _ => Err(format!(
            "{s:?} is not NAMESPACE/NAME (e.g. kube-system/traefik; lowercase letters, digits, \
             '-', and '.' in the name)"
        )),
    }
}

/// [`parse_namespaced_name`] of a Service, whose name is a DNS label (no dots).
pub fn parse_service_name(s: &str) -> Result<NamespacedName, String> {
    let n = parse_namespaced_name(s)?;
    if !crate::dns_name::is_label(&n.name) {
        return Err(format!(
            "{s:?}: a Service's name is a DNS label (lowercase letters, digits, '-'; no '.')"
        ));
    }
    Ok(n)
}

/// Parses durations such as `500ms`, `5s`, `1m`, `1h` or `0` (used by every duration flag).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected e.g. 500ms, 5s, 1m, 1h)"))
}

/// Parses an address pods are answered with or sent to (`--proxy-ip`, `--external-dns-proxy-ip`,
/// a target's `proxy-ip=`). The unspecified address (`0.0.0.0`, `::`) means "any" to a listener
/// but no host to a client, and a DNS answer or hosts line with it sends the pod to itself, so it
/// is refused here rather than written.
pub fn parse_answer_ip(s: &str) -> Result<std::net::IpAddr, String> {
    let ip: std::net::IpAddr = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an IP address"))?;
    if ip.to_canonical().is_unspecified() {
        return Err(format!(
            "{ip} is the unspecified address, which a pod cannot connect to: give the proxy \
             Service's ClusterIP (the controller reads it from the API when the flag is left out)"
        ));
    }
    Ok(ip)
}

/// A listen address flag value; empty disables the listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<ListenAddr>);

impl Listen {
    /// The `value_parser` of every listen flag (`:8080`, `0.0.0.0:80`, `[::1]:8081`, or empty).
    pub fn parse(s: &str) -> Result<Listen, String> {
        parse_listen(s).map(Listen)
    }
}

/// Parses the flags of one `Args` struct alone, as its subcommand would (for unit tests).
#[cfg(test)]
pub(crate) fn parse_args<A: clap::Args>(argv: &[&str]) -> Result<A, clap::Error> {
    use clap::Parser;
    #[derive(Parser)]
    struct Alone<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    Alone::<A>::try_parse_from(std::iter::once("ouroboros").chain(argv.iter().copied()))
        .map(|a| a.args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn namespaced_names_have_one_rule() {
        let ok = |s: &str| parse_namespaced_name(s).map(|n| n.to_string());
        assert_eq!(
            ok("kube-system/traefik").as_deref(),
            Ok("kube-system/traefik")
        );
        assert_eq!(ok(" a/b.c ").as_deref(), Ok("a/b.c"));
        for bad in ["", "x", "/x", "x/", "a/b/c", "Kube/x", "a.b/x", "a/B"] {
            assert!(parse_namespaced_name(bad).is_err(), "{bad:?}");
        }
        // A Service's name is a label: no dots.
        assert!(parse_service_name("ingress/ctl").is_ok());
        let e = parse_service_name("ingress/a.b").unwrap_err();
        assert!(e.contains("DNS label"), "{e}");
    }

    #[test]
    fn durations() {
        for (input, want) in [
            ("500ms", Some(Duration::from_millis(500))),
            ("5s", Some(Duration::from_secs(5))),
            ("1m", Some(Duration::from_secs(60))),
            ("1h", Some(Duration::from_secs(3600))),
            ("0", Some(Duration::ZERO)),
            ("1m30s", Some(Duration::from_secs(90))),
            ("", None),
            ("5", None),
            ("-1s", None),
            ("abc", None),
        ] {
            assert_eq!(parse_duration(input).ok(), want, "{input:?}");
        }
    }

    #[test]
    fn answer_ips() {
        for (input, want) in [
            ("10.96.0.20", Ok("10.96.0.20")),
            (" fd00::20 ", Ok("fd00::20")),
            ("0.0.0.0", Err("unspecified")),
            ("::", Err("unspecified")),
            ("::ffff:0.0.0.0", Err("unspecified")),
            ("10.96.0", Err("not an IP address")),
            ("", Err("not an IP address")),
        ] {
            match (parse_answer_ip(input), want) {
                (Ok(ip), Ok(w)) => assert_eq!(ip.to_string(), w),
                (Err(e), Err(w)) => assert!(e.contains(w), "{input:?}: {e}"),
                (got, want) => panic!("{input:?}: {got:?}, want {want:?}"),
            }
        }
    }
}
