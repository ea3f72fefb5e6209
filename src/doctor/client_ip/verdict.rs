//! PURE: what the backend saw, read from the caller's output, and the verdict against the
//! caller pod's address, the load balancer's and the nodes'.

use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

/// What the backend (`whoami`) reported about the request that reached it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    /// The socket peer: the ingress controller (or whatever reached the backend).
    pub remote_addr: Option<String>,
    /// The PROXY-protocol header's source, when the backend got one.
    pub proxy_source: Option<String>,
    pub x_real_ip: Option<String>,
    pub x_forwarded_for: Option<String>,
    pub forwarded: Option<String>,
}

/// The caller's output line: the backend's report (`whoami`'s JSON), or why the call failed.
pub fn caller_output(logs: &str) -> Result<Backend, String> {
    // The container's log holds its stderr too (log lines); the answer is the last JSON
    // object with one of the caller's keys.
    for line in logs.lines().rev() {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        if let Some(report) = v.get("whoami") {
            return Ok(backend(report));
        }
        if let Some(e) = v.get("call_error").and_then(Value::as_str) {
            return Err(e.to_string());
        }
    }
    Err(format!(
        "the caller printed no result (its log: {:?})",
        logs.trim()
    ))
}

/// The fields of `whoami`'s JSON report the verdict needs; header names are matched without
/// regard to case, and repeated headers are joined with `, ` (as HTTP reads them).
pub fn backend(report: &Value) -> Backend {
    let s = |v: &Value| v.as_str().map(String::from);
    let header = |name: &str| {
        let values: Vec<&str> = report["request"]["headers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|h| {
                h["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
            })
            .filter_map(|h| h["value"].as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    };
    Backend {
        remote_addr: s(&report["remote_addr"]),
        proxy_source: s(&report["proxy"]["source"]),
        x_real_ip: header("x-real-ip"),
        x_forwarded_for: header("x-forwarded-for"),
        forwarded: header("forwarded"),
    }
}

/// An address as headers write it: `IP`, `IP:PORT`, `[IPv6]` or `[IPv6]:PORT`.
fn address(s: &str) -> Option<IpAddr> {
    let s = s.trim().trim_matches('"');
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| s.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// The first element's `for=` of a `Forwarded` header (RFC 7239).
fn forwarded_for(v: &str) -> Option<IpAddr> {
    let first = v.split(',').next()?;
    first.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then(|| address(v))?
    })
}

/// The client address the backend was told, and where it was read: `X-Real-IP`, else the
/// first `X-Forwarded-For` entry (the one the first proxy saw), else `Forwarded: for=`, else
/// the PROXY header's source. `None`: no header names a client.
pub fn seen(b: &Backend) -> Option<(IpAddr, &'static str)> {
    let first_xff = |v: &String| v.split(',').next().and_then(address);
    b.x_real_ip
        .as_deref()
        .and_then(address)
        .map(|a| (a, "X-Real-IP"))
        .or_else(|| {
            b.x_forwarded_for
                .as_ref()
                .and_then(first_xff)
                .map(|a| (a, "X-Forwarded-For"))
        })
        .or_else(|| {
            b.forwarded
                .as_deref()
                .and_then(forwarded_for)
                .map(|a| (a, "Forwarded"))
        })
        .or_else(|| {
            b.proxy_source
                .as_deref()
                .and_then(address)
                .map(|a| (a, "PROXY header"))
        })
}

/// How the client address fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The backend saw the caller pod's address.
    Intact,
    /// It saw a load-balancer address: the path went out to the load balancer and back
    /// (`externalTrafficPolicy`/SNAT there), or the LB's address replaced the client's.
    LoadBalancer,
    /// It saw a node's address: kube-proxy or the CNI masqueraded the hairpin.
    Node,
    /// It saw another address (a proxy or the ingress controller itself, say).
    Other,
    /// No header named a client.
    Missing,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Intact => "intact",
            Verdict::LoadBalancer => "load-balancer",
            Verdict::Node => "node",
            Verdict::Other => "other",
            Verdict::Missing => "missing",
        }
    }

    /// What it means and what to do.
    pub fn explain(self) -> &'static str {
        match self {
            Verdict::Intact => "the backend saw the caller pod's address",
            Verdict::LoadBalancer => {
                "the backend saw the load balancer's address: in-cluster requests for the name \
                 leave through the load balancer, which replaces the client address; check that \
                 the controller's block answers the name (`ouroboros doctor`)"
            }
            Verdict::Node => {
                "the backend saw a node's address: the hairpin was masqueraded (kube-proxy or the \
                 CNI); check that the name is answered with the proxy's address and that the \
                 ingress controller reads the PROXY header"
            }
            Verdict::Other => {
                "the backend saw an address that is neither the caller's, a node's nor the load \
                 balancer's, such as the proxy's or the ingress controller's own: check that the \
                 ingress controller reads the PROXY header from the proxy (`ouroboros doctor`, \
                 check proxy-protocol)"
            }
            Verdict::Missing => {
                "no X-Real-IP, X-Forwarded-For, Forwarded or PROXY header named a client: the \
                 ingress controller does not pass the client address on to backends (check \
                 its forwarded-header settings)"
            }
        }
    }
}

/// The verdict for `seen` (what the backend was told) against the caller pod's addresses, the
/// load balancer's and the nodes'.
pub fn verdict(
    seen: Option<IpAddr>,
    caller: &[IpAddr],
    load_balancer: &[IpAddr],
    nodes: &[IpAddr],
) -> Verdict {
    match seen {
        None => Verdict::Missing,
        Some(ip) if caller.contains(&ip) => Verdict::Intact,
        Some(ip) if load_balancer.contains(&ip) => Verdict::LoadBalancer,
        Some(ip) if nodes.contains(&ip) => Verdict::Node,
        Some(_) => Verdict::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn report(headers: &[(&str, &str)], proxy: Option<&str>) -> Value {
        json!({
            "remote_addr": "10.244.0.5:41234",
            "proxy": proxy.map(|s| json!({"source": s})),
            "request": {"headers": headers.iter()
                .map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>()},
        })
    }

    #[test]
    fn seen_address_by_header() {
        for (headers, proxy, want) in [
            (
                vec![("X-Real-IP", "10.244.1.7")],
                None,
                Some(("10.244.1.7", "X-Real-IP")),
            ),
            // X-Real-IP wins over X-Forwarded-For; header names in any case.
            (
                vec![("x-forwarded-for", "10.0.0.9"), ("x-real-ip", "10.244.1.7")],
                None,
                Some(("10.244.1.7", "X-Real-IP")),
            ),
            // The first entry is the one the first proxy saw.
            (
                vec![("X-Forwarded-For", "10.244.1.7, 10.244.0.3")],
                None,
                Some(("10.244.1.7", "X-Forwarded-For")),
            ),
            // Repeated headers are one list.
            (
                vec![
                    ("X-Forwarded-For", "192.0.2.1"),
                    ("X-Forwarded-For", "10.0.0.2"),
                ],
                None,
                Some(("192.0.2.1", "X-Forwarded-For")),
            ),
            (
                vec![(
                    "Forwarded",
                    "for=\"[2001:db8::7]:4711\";proto=http, for=10.0.0.1",
                )],
                None,
                Some(("2001:db8::7", "Forwarded")),
            ),
            (
                vec![("Forwarded", "proto=http;For=192.0.2.60")],
                None,
                Some(("192.0.2.60", "Forwarded")),
            ),
            // Unreadable values fall through to the next source.
            (
                vec![("X-Real-IP", "unknown"), ("Forwarded", "for=_hidden")],
                Some("10.244.1.7:5555"),
                Some(("10.244.1.7", "PROXY header")),
            ),
            (
                vec![("X-Forwarded-For", "10.1.2.3:8080")],
                None,
                Some(("10.1.2.3", "X-Forwarded-For")),
            ),
            (vec![("Host", "a")], None, None),
            (vec![("X-Forwarded-For", "")], None, None),
        ] {
            let b = backend(&report(&headers, proxy));
            let got = seen(&b);
            assert_eq!(got, want.map(|(a, f)| (ip(a), f)), "{headers:?} {proxy:?}");
        }
    }

    #[test]
    fn verdicts() {
        let caller = [ip("10.244.1.7"), ip("fd00::7")];
        let lb = [ip("203.0.113.10")];
        let nodes = [ip("192.168.1.11"), ip("192.168.1.12")];
        for (seen, want) in [
            (Some("10.244.1.7"), Verdict::Intact),
            (Some("fd00::7"), Verdict::Intact),
            (Some("203.0.113.10"), Verdict::LoadBalancer),
            (Some("192.168.1.12"), Verdict::Node),
            (Some("10.244.0.5"), Verdict::Other),
            (None, Verdict::Missing),
        ] {
            assert_eq!(
                verdict(seen.map(ip), &caller, &lb, &nodes),
                want,
                "{seen:?}"
            );
        }
    }

    #[test]
    fn the_caller_output_is_its_last_result_line() {
        let ok = format!(
            "2024-01-01T00:00:00Z  INFO something\n{}\n",
            json!({"whoami": report(&[("X-Real-IP", "10.244.1.7")], None)})
        );
        let b = caller_output(&ok).unwrap();
        assert_eq!(b.x_real_ip.as_deref(), Some("10.244.1.7"));
        assert_eq!(b.remote_addr.as_deref(), Some("10.244.0.5:41234"));
        assert_eq!(
            caller_output("{\"call_error\": \"no answer from check.example.com:80\"}\n"),
            Err("no answer from check.example.com:80".into())
        );
        // A JSON log line is not a result.
        let e = caller_output("{\"level\":\"INFO\",\"fields\":{}}\n").unwrap_err();
        assert!(e.starts_with("the caller printed no result"), "{e}");
    }
}
