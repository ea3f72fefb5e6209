//! PURE: what a probe's answers mean. The DNS answer against the addresses expected for the
//! name's target, and a connection's outcome as one of the fixed verdicts the metrics count.

use std::io;
use std::net::IpAddr;

use crate::header_verdict::Route;

/// A probe's result: the metric label `result`, one per host and round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// DNS answered as expected and the ingress controller answered the request.
    Ok,
    /// DNS answered with an address that is not the target's.
    DnsWrong,
    /// DNS answered without any address (NXDOMAIN, SERVFAIL, no record).
    DnsMissing,
    /// The connection was refused (RST to the SYN, or the network was unreachable).
    Refused,
    /// The connection was closed or reset before any answer: the typical sign of a listener
    /// that expects a PROXY header and got a plain request.
    Reset,
    /// No answer within the per-connection timeout (DNS or the request).
    Timeout,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Ok,
        Verdict::DnsWrong,
        Verdict::DnsMissing,
        Verdict::Refused,
        Verdict::Reset,
        Verdict::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::DnsWrong => "dns-wrong",
            Verdict::DnsMissing => "dns-missing",
            Verdict::Refused => "refused",
            Verdict::Reset => "reset",
            Verdict::Timeout => "timeout",
        }
    }

    pub fn is_ok(self) -> bool {
        self == Verdict::Ok
    }

    /// What an operator does about it, for logs and `doctor --probe`.
    pub fn hint(self) -> &'static str {
        match self {
            Verdict::Ok => "",
            Verdict::DnsWrong => {
                "the cluster DNS does not answer with the target's addresses: check the \
                 controller's last write (its logs, `ouroboros doctor`) and whether another \
                 server block, a node-local-dns cache or a search domain answers the name"
            }
            Verdict::DnsMissing => {
                "the cluster DNS has no address for the name: check that the name is in the \
                 controller's block (`ouroboros doctor`) and that the upstream resolves it"
            }
            Verdict::Refused => {
                "nothing listens on that address and port: check the proxy's (or the ingress \
                 controller's) Service, its ports and its ready endpoints"
            }
            Verdict::Reset => {
                "the listener closed the connection without answering a plain request: it \
                 most likely expects a PROXY header the in-cluster path does not send (the \
                 hairpin is not relayed by the proxy, or the proxy does not send the header)"
            }
            Verdict::Timeout => {
                "no answer in time: check network policies, the proxy's endpoints and the DNS \
                 Service"
            }
        }
    }
}

/// One set of addresses a name may be answered with, and what they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `the proxy`, `the ingress controller Service`.
    pub what: String,
    pub ips: Vec<IpAddr>,
}

/// What the DNS answer is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// The answer must be made of one candidate's addresses.
    OneOf(Vec<Candidate>),
    /// The name is answered by the public DNS (its target is `skip`): not checked.
    Unchecked,
}

/// The answer the controller writes for a target with pick `route`: the proxy's addresses
/// (`relay`), the ingress controller Service's (`direct`, when known), or none (`skip`).
pub fn expected(route: Route, relay: &[IpAddr], direct: Option<&[IpAddr]>) -> Expected {
    let one = |what: &str, ips: &[IpAddr]| {
        Expected::OneOf(vec![Candidate {
            what: what.into(),
            ips: ips.to_vec(),
        }])
    };
    match (route, direct) {
        (Route::Skip, _) => Expected::Unchecked,
        (Route::Direct, Some(d)) => one("the ingress controller Service", d),
        // A direct pick with nothing to answer directly with is relayed (the writers do the
        // same; start-up refuses `direct` so).
        (Route::Relay, _) | (Route::Direct, None) => one("the proxy", relay),
    }
}

/// The DNS step's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsCheck {
    /// Every answered address is one of this candidate's (its index).
    Matches(usize),
    Unchecked,
    /// No address.
    Missing,
    /// These answered addresses belong to no candidate (or not all to the same one).
    Wrong(Vec<IpAddr>),
}

impl DnsCheck {
    /// The verdict when the check fails (`None`: go on to connect).
    pub fn verdict(&self) -> Option<Verdict> {
        match self {
            DnsCheck::Matches(_) | DnsCheck::Unchecked => None,
            DnsCheck::Missing => Some(Verdict::DnsMissing),
            DnsCheck::Wrong(_) => Some(Verdict::DnsWrong),
        }
    }
}

/// Checks `answered` (the A and AAAA addresses) against `expected`. A subset of one candidate's
/// addresses is right: a client of one family gets only that family's.
pub fn check_answer(answered: &[IpAddr], expected: &Expected) -> DnsCheck {
    if answered.is_empty() {
        return DnsCheck::Missing;
    }
    let Expected::OneOf(candidates) = expected else {
        return DnsCheck::Unchecked;
    };
    if let Some(i) = candidates
        .iter()
        .position(|c| answered.iter().all(|a| c.ips.contains(a)))
    {
        return DnsCheck::Matches(i);
    }
    let known = |a: &IpAddr| candidates.iter().any(|c| c.ips.contains(a));
    let mut wrong: Vec<IpAddr> = answered.iter().copied().filter(|a| !known(a)).collect();
    if wrong.is_empty() {
        // Each address is someone's, but they are mixed: all of them are reported.
        wrong = answered.to_vec();
    }
    DnsCheck::Wrong(wrong)
}

/// How a request ended.
#[derive(Debug)]
pub enum Reply {
    /// The first bytes of an answer.
    Bytes(Vec<u8>),
    /// EOF before any byte.
    Closed,
    /// Connecting, sending or reading failed.
    Failed(io::Error),
    /// Nothing within the timeout.
    NoAnswer,
}

impl Reply {
    pub fn verdict(&self) -> Verdict {
        match self {
            Reply::Bytes(b) if !b.is_empty() => Verdict::Ok,
            Reply::Bytes(_) | Reply::Closed => Verdict::Reset,
            Reply::Failed(e) => io_verdict(e),
            Reply::NoAnswer => Verdict::Timeout,
        }
    }
}

/// An I/O error of connecting or exchanging as a verdict.
pub fn io_verdict(e: &io::Error) -> Verdict {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused | K::HostUnreachable | K::NetworkUnreachable => Verdict::Refused,
        K::TimedOut | K::WouldBlock => Verdict::Timeout,
        // Reset, aborted, broken pipe, unexpected EOF and anything else that ended the
        // connection after it was made.
        _ => Verdict::Reset,
    }
}

/// What the first bytes of an answer are, for the report: a TLS record's type, or an HTTP
/// status line.
pub fn describe_reply(bytes: &[u8]) -> String {
    match bytes {
        [] => "nothing".into(),
        [0x16, 3, ..] => "a TLS handshake record (the ServerHello)".into(),
        [0x15, 3, ..] => "a TLS alert (the server speaks TLS but refused the hello)".into(),
        _ => {
            let text = String::from_utf8_lossy(bytes);
            let line = text.lines().next().unwrap_or_default();
            let line: String = line.chars().filter(|c| !c.is_control()).take(80).collect();
            if line.is_empty() {
                format!("{} bytes", bytes.len())
            } else {
                format!("{:?}", line)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn expected_answer_follows_the_route() {
        let relay = ips(&["10.96.0.20", "fd00::20"]);
        let direct = ips(&["10.96.0.80"]);
        let proxy = |ips: &[IpAddr]| {
            Expected::OneOf(vec![Candidate {
                what: "the proxy".into(),
                ips: ips.to_vec(),
            }])
        };
        for (route, direct, want) in [
            (Route::Relay, Some(&direct[..]), proxy(&relay)),
            (Route::Relay, None, proxy(&relay)),
            (
                Route::Direct,
                Some(&direct[..]),
                Expected::OneOf(vec![Candidate {
                    what: "the ingress controller Service".into(),
                    ips: direct.clone(),
                }]),
            ),
            (Route::Direct, None, proxy(&relay)),
            (Route::Skip, Some(&direct[..]), Expected::Unchecked),
            (Route::Skip, None, Expected::Unchecked),
        ] {
            assert_eq!(
                expected(route, &relay, direct),
                want,
                "{route:?} {direct:?}"
            );
        }
    }

    #[test]
    fn dns_answers_checked_against_the_candidates() {
        let both = Expected::OneOf(vec![
            Candidate {
                what: "the proxy".into(),
                ips: ips(&["10.96.0.20", "fd00::20"]),
            },
            Candidate {
                what: "the ingress controller Service".into(),
                ips: ips(&["10.96.0.80"]),
            },
        ]);
        for (answered, want, verdict) in [
            (vec![], DnsCheck::Missing, Some(Verdict::DnsMissing)),
            (ips(&["10.96.0.20"]), DnsCheck::Matches(0), None),
            (ips(&["10.96.0.20", "fd00::20"]), DnsCheck::Matches(0), None),
            (ips(&["fd00::20"]), DnsCheck::Matches(0), None),
            (ips(&["10.96.0.80"]), DnsCheck::Matches(1), None),
            (
                ips(&["203.0.113.5"]),
                DnsCheck::Wrong(ips(&["203.0.113.5"])),
                Some(Verdict::DnsWrong),
            ),
            (
                ips(&["10.96.0.20", "203.0.113.5"]),
                DnsCheck::Wrong(ips(&["203.0.113.5"])),
                Some(Verdict::DnsWrong),
            ),
            (
                ips(&["10.96.0.20", "10.96.0.80"]),
                DnsCheck::Wrong(ips(&["10.96.0.20", "10.96.0.80"])),
                Some(Verdict::DnsWrong),
            ),
        ] {
            let got = check_answer(&answered, &both);
            assert_eq!(got, want, "{answered:?}");
            assert_eq!(got.verdict(), verdict, "{answered:?}");
        }
        let public = ips(&["203.0.113.5"]);
        assert_eq!(
            check_answer(&public, &Expected::Unchecked),
            DnsCheck::Unchecked
        );
        assert_eq!(
            check_answer(&[], &Expected::Unchecked),
            DnsCheck::Missing,
            "a skipped target's name still needs an address to be probed"
        );
    }

    #[test]
    fn replies_and_errors_as_verdicts() {
        use io::ErrorKind as K;
        let os = io::Error::from_raw_os_error;
        for (reply, want) in [
            (Reply::Bytes(b"HTTP/1.1 200 OK\r\n".to_vec()), Verdict::Ok),
            (Reply::Bytes(vec![0x15, 3, 3, 0, 2]), Verdict::Ok),
            (Reply::Bytes(vec![]), Verdict::Reset),
            (Reply::Closed, Verdict::Reset),
            (Reply::NoAnswer, Verdict::Timeout),
            (Reply::Failed(os(libc::ECONNREFUSED)), Verdict::Refused),
            (Reply::Failed(os(libc::EHOSTUNREACH)), Verdict::Refused),
            (Reply::Failed(os(libc::ENETUNREACH)), Verdict::Refused),
            (Reply::Failed(os(libc::ECONNRESET)), Verdict::Reset),
            (Reply::Failed(os(libc::EPIPE)), Verdict::Reset),
            (Reply::Failed(os(libc::ETIMEDOUT)), Verdict::Timeout),
            (Reply::Failed(K::UnexpectedEof.into()), Verdict::Reset),
            (Reply::Failed(K::TimedOut.into()), Verdict::Timeout),
        ] {
            assert_eq!(reply.verdict(), want, "{reply:?}");
        }
    }

    #[test]
    fn replies_described() {
        for (bytes, want) in [
            (&b""[..], "nothing"),
            (
                &[0x16, 3, 3, 0, 0x7a][..],
                "a TLS handshake record (the ServerHello)",
            ),
            (
                &[0x15, 3, 1, 0, 2, 2, 40][..],
                "a TLS alert (the server speaks TLS but refused the hello)",
            ),
            (
                &b"HTTP/1.1 308 Permanent Redirect\r\nLocation: x\r\n"[..],
                "\"HTTP/1.1 308 Permanent Redirect\"",
            ),
            (&[0, 1, 2][..], "3 bytes"),
        ] {
            assert_eq!(describe_reply(bytes), want, "{bytes:?}");
        }
        let names: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(
            names,
            [
                "ok",
                "dns-wrong",
                "dns-missing",
                "refused",
                "reset",
                "timeout"
            ]
        );
        assert!(Verdict::ALL[1..].iter().all(|v| !v.hint().is_empty()));
    }
}
