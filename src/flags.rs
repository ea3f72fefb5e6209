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
