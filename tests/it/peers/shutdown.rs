//! The proxy's exit against the host's real resolver (glibc `getaddrinfo`) when the DNS server
//! is silent: a readiness check's lookup runs on a blocking thread that nothing can cancel, and
//! the exit must not wait for it.

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use super::netns::{self, Netns};

/// How long the resolver waits for the silent server (`options timeout:`): the lookup still
/// hangs when the process has long finished draining.
const LOOKUP: Duration = Duration::from_secs(60);

#[test]
fn the_proxy_exits_without_waiting_for_a_lookup_in_flight() {
    if !netns::available() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the shutdown test needs root under CI"
        );
        eprintln!("SKIPPED: the shutdown test needs root (network namespaces)");
        return;
    }
    let ns = Netns::new("ob-exit-lookup");
    ns.resolv_conf("127.0.0.53");
    let resolv = format!("/etc/netns/{}/resolv.conf", ns.name);
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(&resolv)
        .unwrap();
    writeln!(conf, "options timeout:{} attempts:1", LOOKUP.as_secs()).unwrap();
    // A DNS server that takes queries and never answers.
    let dns = ns.run(|| UdpSocket::bind("127.0.0.53:53").unwrap());

    let mut proxy = ns
        .command(env!("CARGO_BIN_EXE_ouroboros"))
        .args([
            "proxy",
            "--listen-http=127.0.0.1:8080",
            "--listen-https=127.0.0.1:8443",
            "--listen-health=127.0.0.1:8081",
            "--target-host=ingress.hairpin.example",
            "--ready-timeout=120s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // A kubelet's probe: its check resolves the target, so a query reaches the silent server.
    let probe = ns.run(|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match std::net::TcpStream::connect("127.0.0.1:8081") {
                Ok(mut s) => {
                    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: proxy\r\n\r\n")
                        .unwrap();
                    break s;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "the health listener: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    });
    dns.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut query = [0u8; 512];
    dns.recv_from(&mut query)
        .expect("the readiness check's lookup reaches the DNS server");

    let pid = nix::unistd::Pid::from_raw(i32::try_from(proxy.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    // Bounds a regression (waiting out the lookup) by half of it; nothing is timed finer.
    let deadline = Instant::now() + LOOKUP / 2;
    let status = loop {
        if let Some(status) = proxy.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = proxy.kill();
            let mut log = String::new();
            let _ = proxy.stderr.take().unwrap().read_to_string(&mut log);
            panic!("the proxy still runs {:?} after SIGINT:\n{log}", LOOKUP / 2);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    drop(probe);
}
