//! DNS on the wire for the CoreDNS tests: a client that asks one question over UDP or TCP, and
//! the stub upstream CoreDNS forwards to (the network is closed, and the answers a pod would get
//! from the public DNS must be known to be told apart from our block's).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use simple_dns::rdata::{RData, A, AAAA, CAA, MX, SOA, TXT};
use simple_dns::{
    Name, Packet, PacketFlag, Question, ResourceRecord, CLASS, QCLASS, QTYPE, RCODE, TYPE,
};

/// The upstream's A answer for every name it is asked: a public address our block never uses.
pub const UPSTREAM_A: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
pub const UPSTREAM_AAAA: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x5, 0, 0, 0, 0, 7);
/// Names the upstream answers with NXDOMAIN start with this label prefix.
pub const NXDOMAIN_PREFIX: &str = "nx-";

/// One answer: the response code and each answer record as `TYPE value` (`A 10.96.0.10`,
/// `TXT "upstream"`), which is what the tests compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub rcode: RCODE,
    pub answers: Vec<String>,
}

pub fn record_text(rr: &ResourceRecord) -> String {
    match &rr.rdata {
        RData::A(a) => format!("A {}", Ipv4Addr::from(a.address)),
        RData::AAAA(a) => format!("AAAA {}", Ipv6Addr::from(a.address)),
        RData::CNAME(c) => format!("CNAME {}", c.0),
        RData::TXT(t) => {
            let parts: Vec<String> = t
                .iter_raw()
                .map(|(k, v)| match v {
                    Some(v) => format!(
                        "{}={}",
                        String::from_utf8_lossy(k),
                        String::from_utf8_lossy(v)
                    ),
                    None => String::from_utf8_lossy(k).into_owned(),
                })
                .collect();
            format!("TXT {}", parts.join(" "))
        }
        RData::MX(m) => format!("MX {} {}", m.preference, m.exchange),
        RData::CAA(c) => format!("CAA {} {}", c.tag, String::from_utf8_lossy(&c.value)),
        RData::SOA(s) => format!("SOA {} {}", s.mname, s.rname),
        other => format!("{:?}", other.type_code()),
    }
}

static NEXT_ID: AtomicU16 = AtomicU16::new(1);

/// Asks `server` for `name`/`qtype` once, over TCP or UDP, with a 5 s deadline.
pub fn query(server: SocketAddr, name: &str, qtype: TYPE, tcp: bool) -> std::io::Result<Reply> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    packet.questions.push(Question::new(
        Name::new_unchecked(name),
        QTYPE::TYPE(qtype),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    let bytes = packet.build_bytes_vec().map_err(invalid)?;
    let deadline = Some(Duration::from_secs(5));
    let data = if tcp {
        let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
        s.set_read_timeout(deadline)?;
        let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        s.write_all(&framed)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len)?;
        let mut data = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut data)?;
        data
    } else {
        let s = UdpSocket::bind((unspecified_like(server.ip()), 0))?;
        s.set_read_timeout(deadline)?;
        s.send_to(&bytes, server)?;
        let mut buf = vec![0u8; 65535];
        let (n, _) = s.recv_from(&mut buf)?;
        buf.truncate(n);
        buf
    };
    let reply = Packet::parse(&data).map_err(invalid)?;
    if reply.id() != id {
        return Err(invalid(format!(
            "reply id {} for query id {id}",
            reply.id()
        )));
    }
    Ok(Reply {
        rcode: reply.rcode(),
        answers: reply.answers.iter().map(record_text).collect(),
    })
}

fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

/// A stub public DNS server on 127.0.0.1 (UDP and TCP on one port): every name has one record
/// of each common type (A, AAAA, TXT, MX, CAA, SOA) with fixed values, except names whose first
/// label starts with [`NXDOMAIN_PREFIX`] (NXDOMAIN). It records each question it was asked, so a
/// test can tell whether CoreDNS forwarded a query or answered it itself.
pub struct Upstream {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<(String, String)>>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let (udp, tcp) = bind_pair();
        Upstream::serve(udp, tcp, UPSTREAM_A)
    }

    /// Serves on sockets bound by the caller (in another network namespace, say), answering A
    /// queries with `a`.
    pub fn serve(udp: UdpSocket, tcp: TcpListener, a: Ipv4Addr) -> Upstream {
        let addr = udp.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65535];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                if let Some(reply) = answer(&buf[..n], a, &log) {
                    let _ = udp.send_to(&reply, from);
                }
            }
        });
        let log = asked.clone();
        std::thread::spawn(move || {
            for mut s in tcp.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut len = [0u8; 2];
                    while s.read_exact(&mut len).is_ok() {
                        let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                        if s.read_exact(&mut q).is_err() {
                            return;
                        }
                        let Some(reply) = answer(&q, a, &log) else {
                            return;
                        };
                        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                        framed.extend_from_slice(&reply);
                        if s.write_all(&framed).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Upstream { addr, asked }
    }

    /// How many times the upstream was asked `name` (any case, no trailing dot) with `qtype`.
    pub fn times_asked(&self, name: &str, qtype: TYPE) -> usize {
        let want = (
            name.trim_end_matches('.').to_ascii_lowercase(),
            format!("{qtype:?}"),
        );
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|q| **q == want)
            .count()
    }

    /// Whether the upstream was asked `name` (any case, no trailing dot) with `qtype`.
    pub fn was_asked(&self, name: &str, qtype: TYPE) -> bool {
        let want = (
            name.trim_end_matches('.').to_ascii_lowercase(),
            format!("{qtype:?}"),
        );
        self.asked.lock().unwrap().contains(&want)
    }
}

/// A UDP socket and a TCP listener on one free port of 127.0.0.1 (in this thread's network
/// namespace). The port the OS gives the UDP socket may be taken for TCP by another test: then
/// another port.
pub fn bind_pair() -> (UdpSocket, TcpListener) {
    for _ in 0..100 {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()) {
            return (udp, tcp);
        }
    }
    panic!("no port of 127.0.0.1 free for both UDP and TCP in 100 tries");
}

fn answer(query: &[u8], a: Ipv4Addr, log: &Mutex<Vec<(String, String)>>) -> Option<Vec<u8>> {
    let q = Packet::parse(query).ok()?;
    let mut reply = Packet::new_reply(q.id());
    reply.set_flags(PacketFlag::RECURSION_AVAILABLE);
    let question = q.questions.first()?.clone();
    let name = question
        .qname
        .to_string()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let qtype = match question.qtype {
        QTYPE::TYPE(t) => t,
        _ => TYPE::A,
    };
    log.lock()
        .unwrap()
        .push((name.clone(), format!("{qtype:?}")));
    let owner = question.qname.clone();
    reply.questions.push(question);
    if name.starts_with(NXDOMAIN_PREFIX) {
        *reply.rcode_mut() = RCODE::NameError;
        return reply.build_bytes_vec().ok();
    }
    let rdata = match qtype {
        TYPE::A => Some(RData::A(A::from(a))),
        TYPE::AAAA => Some(RData::AAAA(AAAA::from(UPSTREAM_AAAA))),
        TYPE::TXT => Some(RData::TXT(TXT::new().with_string("upstream").ok()?)),
        TYPE::MX => Some(RData::MX(MX {
            preference: 10,
            exchange: Name::new_unchecked("mail.upstream.test"),
        })),
        TYPE::CAA => Some(RData::CAA(CAA {
            flag: 0,
            tag: "issue".try_into().ok()?,
            value: b"letsencrypt.org".as_slice().into(),
        })),
        TYPE::SOA => Some(RData::SOA(SOA {
            mname: Name::new_unchecked("ns.upstream.test"),
            rname: Name::new_unchecked("hostmaster.upstream.test"),
            serial: 1,
            refresh: 3600,
            retry: 600,
            expire: 86400,
            minimum: 60,
        })),
        _ => None,
    };
    if let Some(rdata) = rdata {
        reply
            .answers
            .push(ResourceRecord::new(owner, CLASS::IN, 60, rdata));
    }
    reply.build_bytes_vec().ok()
}
