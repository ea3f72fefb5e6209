//! Resolving a name as a pod does: a real DNS query (A, then AAAA) to the cluster's DNS
//! server, over UDP, again over TCP when the answer is truncated. The name is asked fully
//! qualified: a pod's search domains would first try `NAME.<namespace>.svc.<cluster domain>`
//! and so on, which the cluster DNS answers NXDOMAIN for any public name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, RCODE, TYPE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Why a query got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{server} did not answer {name} {qtype} within {}", humantime::format_duration(*.timeout))]
    Timeout {
        server: SocketAddr,
        name: String,
        qtype: &'static str,
        timeout: Duration,
    },
    #[error("asking {server} for {name}: {source}")]
    Io {
        server: SocketAddr,
        name: String,
        source: std::io::Error,
    },
    #[error("{name} is not a name a DNS query can carry: {reason}")]
    BadName { name: String, reason: String },
    #[error("{server} sent an answer that does not parse: {reason}")]
    BadReply { server: SocketAddr, reason: String },
}

/// A server's answers to the A and AAAA questions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The response codes, `NOERROR` or e.g. `NXDOMAIN`, A's then AAAA's.
    pub rcodes: [String; 2],
    /// The addresses answered, IPv4 first, in answer order, without duplicates.
    pub addrs: Vec<IpAddr>,
}

static NEXT_ID: AtomicU16 = AtomicU16::new(0);

fn query_id() -> u16 {
    // Distinct ids for concurrent queries; the start varies by process.
    let seed = std::process::id() as u16;
    NEXT_ID.fetch_add(1, Ordering::Relaxed).wrapping_add(seed)
}

/// Asks `server` for `name`'s A and AAAA records, each within `timeout`.
pub async fn lookup(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<Lookup, ResolveError> {
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut rcodes = [String::new(), String::new()];
    for (i, (qtype, label)) in [(TYPE::A, "A"), (TYPE::AAAA, "AAAA")]
        .into_iter()
        .enumerate()
    {
        let ask = ask(server, name, qtype);
        let (rcode, found) =
            tokio::time::timeout(timeout, ask)
                .await
                .map_err(|_| ResolveError::Timeout {
                    server,
                    name: name.to_string(),
                    qtype: label,
                    timeout,
                })??;
        rcodes[i] = rcode;
        for a in found {
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
    }
    Ok(Lookup { rcodes, addrs })
}

fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

/// One question: over UDP, over TCP when truncated.
async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: TYPE,
) -> Result<(String, Vec<IpAddr>), ResolveError> {
    let id = query_id();
    let fq = fqdn(name);
    let bad_name = |reason: String| ResolveError::BadName {
        name: name.to_string(),
        reason,
    };
    let qname = Name::new(&fq).map_err(|e| bad_name(e.to_string()))?;
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    packet.questions.push(Question::new(
        qname,
        QTYPE::TYPE(qtype),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    let bytes = packet
        .build_bytes_vec()
        .map_err(|e| bad_name(e.to_string()))?;
    let io = |source| ResolveError::Io {
        server,
        name: name.to_string(),
        source,
    };
    let data = udp(server, &bytes, id).await.map_err(io)?;
    let bad = |reason: String| ResolveError::BadReply { server, reason };
    let reply = Packet::parse(&data).map_err(|e| bad(e.to_string()))?;
    if !reply.has_flags(PacketFlag::TRUNCATION) {
        return Ok(answers(&reply));
    }
    let data = tcp(server, &bytes).await.map_err(io)?;
    let reply = Packet::parse(&data).map_err(|e| bad(e.to_string()))?;
    Ok(answers(&reply))
}

fn answers(reply: &Packet<'_>) -> (String, Vec<IpAddr>) {
    let rcode = match reply.rcode() {
        RCODE::NoError => "NOERROR".to_string(),
        RCODE::NameError => "NXDOMAIN".to_string(),
        RCODE::ServerFailure => "SERVFAIL".to_string(),
        RCODE::Refused => "REFUSED".to_string(),
        other => format!("{other:?}").to_uppercase(),
    };
    let addrs = reply
        .answers
        .iter()
        .filter_map(|rr| match &rr.rdata {
            RData::A(a) => Some(IpAddr::V4(Ipv4Addr::from(a.address))),
            RData::AAAA(a) => Some(IpAddr::V6(Ipv6Addr::from(a.address))),
            _ => None,
        })
        .collect();
    (rcode, addrs)
}

async fn udp(server: SocketAddr, query: &[u8], id: u16) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).await?;
        // A late answer to an earlier query on a reused port is not this one's.
        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn tcp(server: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(server).await?;
    let len = u16::try_from(query.len()).unwrap_or(u16::MAX);
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    s.write_all(&framed).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let mut data = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut data).await?;
    Ok(data)
}

/// The name servers of a resolv.conf text (`nameserver` lines), on port 53: in a pod with the
/// default DNS policy, the kube-dns Service's ClusterIP (or the node-local-dns address the
/// kubelet hands out).
pub fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .filter_map(|ip| ip.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_of_resolv_conf() {
        for (text, want) in [
            (
                "search default.svc.cluster.local svc.cluster.local cluster.local\n\
                 nameserver 10.96.0.10\noptions ndots:5\n",
                vec!["10.96.0.10:53"],
            ),
            (
                "nameserver 169.254.20.10\nnameserver fd00::a\n# nameserver 1.1.1.1\n",
                vec!["169.254.20.10:53", "[fd00::a]:53"],
            ),
            (
                "nameserver fe80::1%eth0\nnameserver bogus\n",
                vec!["[fe80::1]:53"],
            ),
            ("", vec![]),
        ] {
            let got: Vec<String> = nameservers(text).iter().map(|a| a.to_string()).collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn names_are_asked_fully_qualified() {
        assert_eq!(fqdn("app.example.com"), "app.example.com.");
        assert_eq!(fqdn("app.example.com."), "app.example.com.");
    }
}
