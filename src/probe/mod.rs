//! The hairpin probe: resolve a hairpinned name through the cluster DNS as a pod does, check
//! the answer is the one the controller writes for the name's target, then connect through
//! the answer and send what a client sends, without a PROXY header (a TLS ClientHello with SNI,
//! a `HEAD` with Host), and check the listener answers instead of closing the connection. The
//! controller runs it on an interval (`controller::probe`); `doctor --probe HOST` runs it once
//! and prints each step. [`header_verdict`] knocks a listener both bare and behind a PROXY
//! header, to tell whether it requires, takes or refuses the header.
//!
//! | module | owns |
//! | --- | --- |
//! | `verdict` | PURE: the DNS check against the expected addresses, replies as verdicts |
//! | `rotation` | PURE: which names a round probes |
//! | `header` | PURE: whether a listener takes the PROXY header, from a bare knock and one behind a header |
//! | `resolve` | the DNS queries (UDP, TCP when truncated) |
//! | `knock` | the connection and the request (bare or behind a PROXY header) |
//! | `args` | the flags `controller` and `doctor` share |

pub mod args;
pub mod header;
pub mod knock;
pub mod resolve;
pub mod rotation;
pub mod verdict;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use self::knock::Hello;
use self::verdict::{check_answer, describe_reply, DnsCheck, Expected, Reply, Verdict};

/// A DNS server the probe asks, and what it is (for the report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub addr: SocketAddr,
    pub what: String,
}

/// How a name is probed.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Asked in order; each must answer as expected.
    pub servers: Vec<Server>,
    /// The ports knocked on, each with its request.
    pub ports: Vec<(u16, Hello)>,
    /// For each question, connection and answer.
    pub timeout: Duration,
}

/// One step of a probe, as `doctor --probe` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// `dns`, `expected`, `connect`.
    pub name: &'static str,
    pub text: String,
    pub verdict: Option<Verdict>,
}

/// A probe's result: the verdict, the steps that led to it, and the failure in one line.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub verdict: Verdict,
    pub steps: Vec<Step>,
    /// Why it failed, for a log line (`None` when ok).
    pub failure: Option<String>,
}

/// `ips` comma-separated for a report line, or `empty` when there are none.
pub fn address_list(ips: &[IpAddr], empty: &str) -> String {
    if ips.is_empty() {
        return empty.into();
    }
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(ips: &[IpAddr]) -> String {
    address_list(ips, "no address")
}

/// What `expected` says, for the report.
fn describe_expected(expected: &Expected) -> String {
    match expected {
        Expected::Unchecked => "any address: the name's target is answered by the public DNS \
                                (skip), so the answer is not checked"
            .into(),
        Expected::OneOf(c) => c
            .iter()
            .map(|c| format!("{} ({})", list(&c.ips), c.what))
            .collect::<Vec<_>>()
            .join(", or "),
    }
}

/// Probes `host`: asks each server, checks each answer against `expected`, then sends each
/// port's request to the first address answered.
pub async fn probe(host: &str, expected: &Expected, settings: &Settings) -> Outcome {
    let mut steps = vec![Step {
        name: "expected",
        text: describe_expected(expected),
        verdict: None,
    }];
    let fail = |steps: Vec<Step>, verdict: Verdict, failure: String| Outcome {
        verdict,
        steps,
        failure: Some(failure),
    };
    let mut connect_to: Option<IpAddr> = None;
    for server in &settings.servers {
        let asked = format!("asked {} ({}) for {host}", server.addr, server.what);
        let lookup = match resolve::lookup(server.addr, host, settings.timeout).await {
            Ok(l) => l,
            Err(e) => {
                let v = match &e {
                    resolve::ResolveError::Timeout { .. } => Verdict::Timeout,
                    resolve::ResolveError::Io { source, .. } => verdict::io_verdict(source),
                    _ => Verdict::DnsMissing,
                };
                steps.push(Step {
                    name: "dns",
                    text: format!("{asked}: {e}"),
                    verdict: Some(v),
                });
                return fail(steps, v, e.to_string());
            }
        };
        let check = check_answer(&lookup.addrs, expected);
        let answered = format!(
            "{asked}: A {}, AAAA {}: {}",
            lookup.rcodes[0],
            lookup.rcodes[1],
            list(&lookup.addrs)
        );
        let judged = match (&check, expected) {
            (DnsCheck::Matches(i), Expected::OneOf(c)) => format!("as expected, {}", c[*i].what),
            (DnsCheck::Unchecked, _) => "not checked".into(),
            (DnsCheck::Missing, _) => "nothing to connect to".into(),
            (DnsCheck::Wrong(w), _) => format!("not expected: {}", list(w)),
            (DnsCheck::Matches(_), Expected::Unchecked) => unreachable!("checked"),
        };
        steps.push(Step {
            name: "dns",
            text: format!("{answered}; {judged}"),
            verdict: check.verdict(),
        });
        if let Some(v) = check.verdict() {
            let failure = format!(
                "{} ({}) answered {host} with {}; expected {}",
                server.addr,
                server.what,
                list(&lookup.addrs),
                describe_expected(expected)
            );
            return fail(steps, v, failure);
        }
        connect_to = connect_to.or(lookup.addrs.first().copied());
    }
    let Some(ip) = connect_to else {
        return fail(steps, Verdict::DnsMissing, "no DNS server asked".into());
    };
    if let Some((v, failure)) = knock_all(host, ip, settings, &mut steps).await {
        return fail(steps, v, failure);
    }
    Outcome {
        verdict: Verdict::Ok,
        steps,
        failure: None,
    }
}

/// Sends each port's request to `ip`, a step each; the first failure's verdict and line.
async fn knock_all(
    host: &str,
    ip: IpAddr,
    settings: &Settings,
    steps: &mut Vec<Step>,
) -> Option<(Verdict, String)> {
    for (port, hello) in &settings.ports {
        let addr = SocketAddr::new(ip, *port);
        let said = format!("{addr}, {} for {host}", hello.as_str());
        let request = match knock::request(*hello, host) {
            Ok(r) => r,
            Err(e) => {
                steps.push(Step {
                    name: "connect",
                    text: format!("{said}: cannot build the request: {e}"),
                    verdict: Some(Verdict::Reset),
                });
                return Some((Verdict::Reset, e));
            }
        };
        let reply = knock::knock(addr, &request, settings.timeout).await;
        let v = reply.verdict();
        let how = match &reply {
            Reply::Bytes(b) => format!("answered with {}", describe_reply(b)),
            Reply::Closed => "closed without answering".into(),
            Reply::Failed(e) => e.to_string(),
            Reply::NoAnswer => format!(
                "no answer within {}",
                humantime::format_duration(settings.timeout)
            ),
        };
        steps.push(Step {
            name: "connect",
            text: format!("{said}: {how}"),
            verdict: Some(v),
        });
        if !v.is_ok() {
            return Some((v, format!("{said}: {how}")));
        }
    }
    None
}

/// Whether the listener at `addr` requires, takes optionally or refuses the PROXY header:
/// `hello` for `host` sent bare and behind a v1 header, both at once, each bounded by
/// `timeout` (see [`header`] for what counts as answered). Err: `host` cannot be an
/// SNI name.
pub async fn header_verdict(
    addr: SocketAddr,
    hello: Hello,
    host: &str,
    timeout: Duration,
) -> Result<crate::header_verdict::Verdict, String> {
    let request = knock::request(hello, host)?;
    let (without, with) = tokio::join!(
        knock::knock(addr, &request, timeout),
        knock::knock_behind_header(addr, &request, timeout)
    );
    Ok(header::verdict(&addr.to_string(), hello, &without, &with))
}

/// The header verdict of the ingress controller Service `name` (`NAMESPACE/NAME`) as read
/// (`None`: it does not exist): [`header_verdict`] at the address and with the hello
/// [`header::service_knock`] picks, else Unknown saying why nothing was knocked on.
pub async fn service_header_verdict(
    name: &str,
    svc: Option<&k8s_openapi::api::core::v1::Service>,
    timeout: Duration,
) -> crate::header_verdict::Verdict {
    use crate::header_verdict::{Header, Verdict};
    let unknown = |why: String| Verdict {
        header: Header::Unknown,
        how: format!("Service {name} {why}: nothing knocked on"),
    };
    let Some(svc) = svc else {
        return unknown("not found".into());
    };
    let knock = match header::service_knock(svc) {
        Ok(k) => k,
        Err(e) => return unknown(format!("cannot be probed: {e}")),
    };
    match header_verdict(knock.addr, knock.hello, header::SERVICE_KNOCK_HOST, timeout).await {
        Ok(v) => Verdict {
            header: v.header,
            how: format!("Service {name}: {}", v.how),
        },
        Err(e) => unknown(format!("cannot be probed: {e}")),
    }
}
