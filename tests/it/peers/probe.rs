//! The hairpin probe (`ouroboros::probe`) against real peers: names resolved by real CoreDNS
//! (a `hosts` block), requests without a PROXY header sent to real nginx (`listen ...
//! proxy_protocol`) and real HAProxy (`accept-proxy`), which close the connection (and answer
//! behind a header), and to plain
//! HAProxy listeners (TLS and HTTP), which answer.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use ouroboros::probe::knock::Hello;
use ouroboros::probe::verdict::{Candidate, Expected, Verdict};
use ouroboros::probe::{probe, Outcome, Server, Settings};

use super::binary;
use super::coredns::CoreDns;
use crate::support::{free_port, temp_dir, Haproxy, Nginx, TempDir, V4};

/// The address the hosts blocks give the names that should be hairpinned: every listener of
/// these tests is on it.
pub const LOOPBACK: &str = "127.0.0.1";
/// An address that is not the expected one.
pub const WRONG: &str = "192.0.2.7";

/// Real CoreDNS answering `hosts` (`address name` lines) and SERVFAIL for every other name,
/// in `dir`; `None` when the peer is not built.
pub fn hosts_dns(dir: &Path, hosts: &[(&str, &str)]) -> Option<CoreDns> {
    let coredns = binary("coredns")?;
    let port = free_port(V4);
    let lines: String = hosts
        .iter()
        .map(|(ip, name)| format!("        {ip} {name}\n"))
        .collect();
    let corefile = format!(".:{port} {{\n    bind 127.0.0.1\n    hosts {{\n{lines}    }}\n}}\n");
    Some(CoreDns::start(&coredns, dir, &corefile, port))
}

/// A self-signed certificate and its key for `app.example.test`, in one PEM file in `dir` (as
/// HAProxy's `crt` takes it).
pub fn self_signed_pem(dir: &TempDir) -> std::path::PathBuf {
    let (key, cert, pem) = (
        dir.path().join("key.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("haproxy.pem"),
    );
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=app.example.test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut both = std::fs::read(&cert).unwrap();
    both.extend(std::fs::read(&key).unwrap());
    std::fs::write(&pem, both).unwrap();
    pem
}

/// HAProxy answering plain clients: TLS (a self-signed certificate) on the first port, HTTP on
/// the second.
pub fn plain_haproxy(dir: &TempDir) -> (Haproxy, u16, u16) {
    let pem = self_signed_pem(dir);
    let (tls, http) = (free_port(V4), free_port(V4));
    let config = format!(
        r#"global
  maxconn 100
defaults
  mode http
  timeout connect 5s
  timeout client 5s
  timeout server 5s
frontend tls
  bind 127.0.0.1:{tls} ssl crt {pem}
  http-request return status 200
frontend http
  bind 127.0.0.1:{http}
  http-request return status 200
"#,
        pem = pem.display()
    );
    let h = Haproxy::with_config(&config, &[(V4, tls).into(), (V4, http).into()]);
    (h, tls, http)
}

fn run(name: &str, expected: &Expected, settings: &Settings) -> Outcome {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(probe(name, expected, settings))
}

fn proxy_expected() -> Expected {
    Expected::OneOf(vec![Candidate {
        what: "the proxy".into(),
        ips: vec![LOOPBACK.parse().unwrap()],
    }])
}

fn settings(servers: &[(SocketAddr, &str)], ports: &[(u16, Hello)]) -> Settings {
    Settings {
        servers: servers
            .iter()
            .map(|(addr, what)| Server {
                addr: *addr,
                what: what.to_string(),
            })
            .collect(),
        ports: ports.to_vec(),
        timeout: Duration::from_secs(1),
    }
}

fn steps(o: &Outcome) -> String {
    o.steps
        .iter()
        .map(|s| format!("{}: {}", s.name, s.text))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn verdicts_from_real_coredns_nginx_and_haproxy() {
    let dir = temp_dir("probe");
    let Some(dns) = hosts_dns(
        dir.path(),
        &[
            (LOOPBACK, "app.example.test"),
            (WRONG, "wrong.example.test"),
        ],
    ) else {
        return;
    };
    let nginx = Nginx::start();
    let accept_proxy = Haproxy::start();
    let (_plain, tls, http) = plain_haproxy(&dir);
    let refused = free_port(V4);
    // Accepted by the kernel (the backlog), never read nor answered.
    let silent = TcpListener::bind((V4, 0)).unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let cluster = [(dns.addr(), "the cluster DNS")];
    let app = "app.example.test";
    let cases: &[(&str, (u16, Hello), Verdict, &str)] = &[
        (
            app,
            (tls, Hello::Tls),
            Verdict::Ok,
            "answered with a TLS handshake record",
        ),
        (
            app,
            (http, Hello::Http),
            Verdict::Ok,
            "answered with \"HTTP/1.1 200 OK\"",
        ),
        (app, (nginx.http_port, Hello::Http), Verdict::Reset, ""),
        (app, (nginx.http_port, Hello::Tls), Verdict::Reset, ""),
        (app, (accept_proxy.port, Hello::Http), Verdict::Reset, ""),
        (app, (accept_proxy.port, Hello::Tls), Verdict::Reset, ""),
        (app, (refused, Hello::Tls), Verdict::Refused, "refused"),
        (
            app,
            (silent_port, Hello::Http),
            Verdict::Timeout,
            "no answer within 1s",
        ),
        (
            "wrong.example.test",
            (http, Hello::Http),
            Verdict::DnsWrong,
            "not expected: 192.0.2.7",
        ),
        // `hosts` with no plugin after it: SERVFAIL for a name it does not have.
        (
            "missing.example.test",
            (http, Hello::Http),
            Verdict::DnsMissing,
            "A SERVFAIL",
        ),
    ];
    for (name, port, want, says) in cases {
        let o = run(name, &proxy_expected(), &settings(&cluster, &[*port]));
        let text = steps(&o);
        assert_eq!(o.verdict, *want, "{name} {port:?}:\n{text}");
        assert!(text.contains(says), "{name} {port:?}: {says:?} in\n{text}");
        assert_eq!(o.failure.is_none(), *want == Verdict::Ok, "{text}");
        if *want != Verdict::DnsMissing {
            assert!(
                text.contains(&format!(
                    "asked {} (the cluster DNS) for {name}",
                    dns.addr()
                )),
                "{text}"
            );
        }
    }
    // Control: the same listeners answer the same request behind a PROXY header, so what
    // made them close was its absence.
    for (what, port) in [("nginx", nginx.http_port), ("haproxy", accept_proxy.port)] {
        let mut s = crate::support::connect((V4, port));
        let request = b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 80\r\nGET / HTTP/1.1\r\nHost: \
                        app.example.test\r\nConnection: close\r\n\r\n";
        let reply = crate::support::exchange(&mut s, request).expect("an answer");
        assert_eq!(reply.status, 200, "{what}");
    }
    drop(silent);
}

#[test]
fn every_dns_server_is_asked_and_node_local_dns_can_be_the_wrong_one() {
    let dir = temp_dir("probe-nl");
    let (cluster_dir, node_dir) = (dir.path().join("cluster"), dir.path().join("node"));
    std::fs::create_dir_all(&cluster_dir).unwrap();
    std::fs::create_dir_all(&node_dir).unwrap();
    let Some(cluster) = hosts_dns(&cluster_dir, &[(LOOPBACK, "app.example.test")]) else {
        return;
    };
    // A node cache that still answers the public address.
    let node = hosts_dns(&node_dir, &[(WRONG, "app.example.test")]).unwrap();
    let (_plain, _, http) = plain_haproxy(&dir);
    let servers = [
        (cluster.addr(), "the cluster DNS"),
        (node.addr(), "node-local-dns"),
    ];
    let o = run(
        "app.example.test",
        &proxy_expected(),
        &settings(&servers, &[(http, Hello::Http)]),
    );
    assert_eq!(o.verdict, Verdict::DnsWrong, "{}", steps(&o));
    let failure = o.failure.unwrap();
    assert!(
        failure.starts_with(&format!(
            "{} (node-local-dns) answered app.example.test with 192.0.2.7",
            node.addr()
        )),
        "{failure}"
    );
    // The cluster DNS alone answers right, and the listener answers.
    let o = run(
        "app.example.test",
        &proxy_expected(),
        &settings(&servers[..1], &[(http, Hello::Http)]),
    );
    assert_eq!(o.verdict, Verdict::Ok, "{}", steps(&o));
}
