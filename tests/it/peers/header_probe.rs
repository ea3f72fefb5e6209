//! The header probe (`ouroboros::probe::header_verdict`) against real listeners: the
//! same request sent bare and behind a PROXY v1 header to real nginx (`listen ...
//! proxy_protocol`) and real HAProxy (`accept-proxy`, over HTTP and TLS), which answer only
//! behind it; to plain HAProxy listeners, which answer only without it (the header gets a
//! `400` over HTTP); to `ouroboros whoami`, which detects it; and to a closed port.

use std::net::SocketAddr;
use std::time::Duration;

use ouroboros::header_verdict::{Header, Verdict};
use ouroboros::probe::header_verdict;
use ouroboros::probe::knock::Hello;

use super::probe::{plain_haproxy, self_signed_pem};
use crate::support::{free_port, temp_dir, Haproxy, Nginx, Whoami, V4};

fn probe(port: u16, hello: Hello) -> Verdict {
    let addr = SocketAddr::new(V4, port);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(header_verdict(
            addr,
            hello,
            "app.example.test",
            Duration::from_secs(2),
        ))
        .unwrap()
}

/// HAProxy terminating TLS behind a required header (`accept-proxy ssl`).
fn tls_accept_proxy(dir: &crate::support::TempDir) -> (Haproxy, u16) {
    let pem = self_signed_pem(dir);
    let port = free_port(V4);
    let config = format!(
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client \
         5s\n  timeout server 5s\nfrontend tls\n  bind 127.0.0.1:{port} accept-proxy ssl crt \
         {}\n  http-request return status 200\n",
        pem.display()
    );
    (Haproxy::with_config(&config, &[(V4, port).into()]), port)
}

#[test]
fn header_verdicts_of_real_listeners() {
    let dir = temp_dir("header-probe");
    let tls_dir = temp_dir("header-probe-tls");
    let nginx = Nginx::start();
    let accept_proxy = Haproxy::start();
    let (_tls_accept, tls_accept_port) = tls_accept_proxy(&tls_dir);
    let (_plain, tls, http) = plain_haproxy(&dir);
    let whoami = Whoami::start("127.0.0.1:0", &[]);
    let closed = free_port(V4);
    let cases: &[(&str, u16, Hello, Header, &str)] = &[
        (
            "nginx proxy_protocol",
            nginx.http_port,
            Hello::Http,
            Header::Required,
            "without a PROXY header closed without answering, behind a PROXY v1 header \
             answered \"HTTP/1.1 200 OK\"",
        ),
        (
            "haproxy accept-proxy",
            accept_proxy.port,
            Hello::Http,
            Header::Required,
            "behind a PROXY v1 header answered \"HTTP/1.1 200 OK\"",
        ),
        (
            "haproxy accept-proxy ssl",
            tls_accept_port,
            Hello::Tls,
            Header::Required,
            "behind a PROXY v1 header answered a TLS handshake record",
        ),
        (
            "plain haproxy, HTTP",
            http,
            Hello::Http,
            Header::Refused,
            "behind a PROXY v1 header answered \"HTTP/1.1 400",
        ),
        (
            "plain haproxy, TLS",
            tls,
            Hello::Tls,
            Header::Refused,
            "without a PROXY header answered a TLS handshake record",
        ),
        (
            "ouroboros whoami",
            whoami.addr.port(),
            Hello::Http,
            Header::Optional,
            "without a PROXY header answered \"HTTP/1.1 200 OK\"",
        ),
        (
            "closed port",
            closed,
            Hello::Tls,
            Header::Unknown,
            "refused",
        ),
    ];
    for (what, port, hello, want, says) in cases {
        let v = probe(*port, *hello);
        assert_eq!(v.header, *want, "{what}: {}", v.how);
        assert!(v.how.contains(says), "{what}: {says:?} in {:?}", v.how);
        assert!(
            v.how
                .starts_with(&format!("probed 127.0.0.1:{port} ({})", hello.as_str())),
            "{what}: {}",
            v.how
        );
    }
}
