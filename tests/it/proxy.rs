//! `ouroboros proxy` end to end: the built binary between real clients and real nginx / HAProxy
//! (or a plain TCP peer where the test needs control over the upstream's timing).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::*;

fn port_of(addr: Option<SocketAddr>) -> SocketAddr {
    addr.expect("listener address logged")
}

#[test]
fn client_address_arrives_at_nginx_and_haproxy() {
    let nginx = Nginx::start();
    let haproxy = Haproxy::start();
    for version in ["v1", "v2"] {
        for (ip, listen) in [(V4, "127.0.0.1:0"), (V6, "[::1]:0")] {
            let proxy = Proxy::relaying(
                listen,
                ip,
                (nginx.http_port, haproxy.port),
                &["--proxy-protocol", version],
            );
            // http listener -> nginx: source is our socket, destination port is 80.
            let http = port_of(proxy.http);
            let (me, status, body) = http_get_via(http);
            assert_eq!(status, 200, "{version} {ip}: {body}");
            assert_eq!(
                body.trim(),
                format!("{} {}:80", plain(me), ip),
                "{version} {ip} via nginx"
            );
            // https listener -> HAProxy: destination port 443, not the listener's own port.
            let https = port_of(proxy.https);
            let (me, status, body) = http_get_via(https);
            assert_eq!(status, 200, "{version} {ip}: {body}");
            assert_eq!(
                body.trim(),
                format!("{} {}:443", plain(me), ip),
                "{version} {ip} via haproxy"
            );
            assert_ne!(https.port(), 443);
        }
    }
}

#[test]
fn header_ports_follow_flags_and_dual_stack_listener_writes_ipv4() {
    let nginx = Nginx::start();
    let port = nginx.http_port.to_string();
    let proxy = Proxy::start(&[
        "--listen-http",
        ":0",
        "--listen-https",
        "",
        "--target-host",
        "localhost",
        "--target-http-port",
        &port,
        "--header-http-port",
        "8000",
    ]);
    let any = port_of(proxy.http);
    assert!(proxy.https.is_none());
    for ip in [V4, V6] {
        let (me, status, body) = http_get_via(SocketAddr::new(ip, any.port()));
        assert_eq!(status, 200, "{body}");
        // An IPv4 client on the dual-stack socket is written as IPv4, not ::ffff:127.0.0.1.
        assert_eq!(body.trim(), format!("{} {ip}:8000", plain(me)));
    }
}

/// Connections a [`tcp_upstream`] accepted, with the PROXY header read off.
type Accepted = mpsc::Receiver<(TcpStream, Vec<u8>)>;

/// A plain TCP upstream: returns its address and a receiver of accepted connections with the
/// PROXY header already read off.
fn tcp_upstream() -> (SocketAddr, Accepted) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let mut s = with_read_deadline(s);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let header = read_proxy_header(&mut s);
                // Readiness probes (v1 UNKNOWN, v2 LOCAL) are not relayed connections.
                let probe = header == b"PROXY UNKNOWN\r\n" || header.get(12) == Some(&0x20);
                if !probe {
                    let _ = tx.send((s, header));
                }
            });
        }
    });
    (addr, rx)
}

fn proxy_to(upstream: SocketAddr, extra: &[&str]) -> Proxy {
    let port = upstream.port();
    Proxy::relaying("127.0.0.1:0", upstream.ip(), (port, port), extra)
}

/// Sends `len` pattern bytes then shuts down the write side; returns the checksum sent.
fn send_all(s: &mut TcpStream, seed: u64, len: usize) -> Fnv {
    let mut p = Pattern::new(seed);
    let mut sum = Fnv::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len());
        p.fill(&mut buf[..n]);
        sum.update(&buf[..n]);
        s.write_all(&buf[..n]).unwrap();
        left -= n;
    }
    s.shutdown(Shutdown::Write).unwrap();
    sum
}

/// Reads to EOF; returns (bytes, checksum).
fn recv_all(s: &mut TcpStream) -> (usize, Fnv) {
    let mut sum = Fnv::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = read_ok("receiving to EOF", s.read(&mut buf));
        if n == 0 {
            return (total, sum);
        }
        sum.update(&buf[..n]);
        total += n;
    }
}

#[test]
fn relays_64_mib_each_way_intact() {
    relay_64_mib("userspace");
}

#[test]
fn relays_64_mib_each_way_intact_with_splice() {
    relay_64_mib("splice");
}

#[test]
fn relays_64_mib_each_way_intact_with_auto() {
    relay_64_mib("auto");
}

#[cfg(feature = "kernel-relay")]
#[test]
fn relays_64_mib_each_way_intact_through_the_kernel_relay() {
    relay_64_mib("sockmap");
}

#[cfg(feature = "kernel-relay")]
/// The flag that selects the kernel relay.
const SOCKMAP: &[&str] = &["--copy-mode", "sockmap"];

#[cfg(feature = "kernel-relay")]
/// Connections of the http listener the kernel relayed.
fn kernel_relayed(proxy: &Proxy) -> f64 {
    proxy
        .metric(r#"ouroboros_proxy_kernel_relayed_connections_total{listener="http"}"#)
        .expect("the kernel relay's metric")
}

fn relay_64_mib(copy_mode: &str) {
    const LEN: usize = 64 << 20;
    let (up, accepted) = tcp_upstream();
    let proxy = proxy_to(up, &["--proxy-protocol", "v2", "--copy-mode", copy_mode]);
    let mut client = connect(port_of(proxy.http));
    let me = client.local_addr().unwrap();
    let (mut server, header) = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    // v2 PROXY TCP4 with our address as source.
    assert_eq!(&header[12..14], &[0x21, 0x11]);
    assert_eq!(&header[16..20], &[127, 0, 0, 1]);
    assert_eq!(u16::from_be_bytes([header[24], header[25]]), me.port());

    let mut server2 = server.try_clone().unwrap();
    let server_send = std::thread::spawn(move || send_all(&mut server2, 2, LEN));
    let server_recv = std::thread::spawn(move || recv_all(&mut server));
    let mut client2 = client.try_clone().unwrap();
    let client_send = std::thread::spawn(move || send_all(&mut client2, 1, LEN));
    let (got_len, got_sum) = recv_all(&mut client);

    let sent_down = server_send.join().unwrap();
    let sent_up = client_send.join().unwrap();
    let (up_len, up_sum) = server_recv.join().unwrap();
    assert_eq!((got_len, got_sum), (LEN, sent_down), "upstream -> client");
    assert_eq!((up_len, up_sum), (LEN, sent_up), "client -> upstream");

    let wait = Instant::now() + Duration::from_secs(10);
    while proxy.metric(r#"ouroboros_proxy_connections_closed_total{listener="http",result="done"}"#)
        != Some(1.0)
    {
        assert!(Instant::now() < wait, "connection close not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bytes = |dir: &str| {
        proxy.metric(&format!(
            r#"ouroboros_proxy_transferred_bytes_total{{listener="http",direction="{dir}"}}"#
        ))
    };
    // The upstream also received the 28-byte header, which is not relayed client data.
    assert_eq!(bytes("to_upstream"), Some(LEN as f64));
    assert_eq!(bytes("to_client"), Some(LEN as f64));
    for dir in ["to_upstream", "to_client"] {
        let spliced = proxy
            .metric(&format!(
                r#"ouroboros_proxy_spliced_bytes_total{{listener="http",direction="{dir}"}}"#
            ))
            .unwrap();
        match copy_mode {
            "userspace" | "sockmap" => assert_eq!(spliced, 0.0, "{dir}"),
            "splice" => assert_eq!(spliced, LEN as f64, "{dir}"),
            // A stream this long fills the buffer and switches to the pipe.
            _ => assert!(spliced > 0.0 && spliced <= LEN as f64, "{dir}: {spliced}"),
        }
    }
    #[cfg(feature = "kernel-relay")]
    {
        let kernel = if copy_mode == "sockmap" { 1.0 } else { 0.0 };
        assert_eq!(kernel_relayed(&proxy), kernel);
    }
    // A build without the kernel relay has none of its series either.
    #[cfg(not(feature = "kernel-relay"))]
    assert_eq!(
        proxy.metric(r#"ouroboros_proxy_kernel_relayed_connections_total{listener="http"}"#),
        None
    );
}

#[test]
fn half_close_client_still_gets_the_whole_reply() {
    for copy_mode in ["auto", "userspace", "splice"] {
        half_close_with_each_loop_setting(copy_mode);
    }
}

#[cfg(feature = "kernel-relay")]
#[test]
fn half_close_client_still_gets_the_whole_reply_through_the_kernel_relay() {
    half_close_with_each_loop_setting("sockmap");
}

fn half_close_with_each_loop_setting(copy_mode: &str) {
    for threads in ["0", "1", "3"] {
        for busy_poll in ["0", "50us", "auto"] {
            half_close(&[
                "--copy-mode",
                copy_mode,
                "--threads",
                threads,
                "--busy-poll",
                busy_poll,
            ]);
        }
    }
}

fn half_close(flags: &[&str]) {
    let (up, accepted) = tcp_upstream();
    let proxy = proxy_to(up, flags);
    let mut client = connect(port_of(proxy.http));
    client.write_all(b"question").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let (mut server, header) = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(header.starts_with(b"PROXY TCP4 127.0.0.1 127.0.0.1 "));
    // The upstream answers only after it saw the client's EOF.
    let mut req = Vec::new();
    read_ok(
        "upstream waiting for the client's request and EOF",
        server.read_to_end(&mut req),
    );
    assert_eq!(req, b"question");
    let sent = send_all(&mut server, 7, 3 << 20);
    drop(server);
    assert_eq!(recv_all(&mut client), (3 << 20, sent));
}

#[test]
fn a_thousand_concurrent_connections() {
    a_thousand_concurrent_connections_with(&[]);
}

/// Keep-alive connections stay open after their first answer, so every one is handed over.
#[cfg(feature = "kernel-relay")]
#[test]
fn a_thousand_concurrent_connections_through_the_kernel_relay() {
    let proxy = a_thousand_concurrent_connections_with(SOCKMAP);
    assert_eq!(kernel_relayed(&proxy), 1000.0);
}

fn a_thousand_concurrent_connections_with(extra: &[&str]) -> Proxy {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const N: usize = 1000;
    raise_fd_limit();
    let nginx = Nginx::start();
    let port = nginx.http_port.to_string();
    let mut args = vec![
        "--target-host",
        "127.0.0.1",
        "--target-http-port",
        &port,
        "--listen-https",
        "",
    ];
    args.extend_from_slice(extra);
    let proxy = Proxy::start(&args);
    let addr = port_of(proxy.http);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let streams = rt.block_on(async {
        let tasks: Vec<_> = (0..N)
            .map(|_| {
                tokio::spawn(async move {
                    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                    let me = s.local_addr().unwrap();
                    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                        .await
                        .unwrap();
                    // Keep-alive: read exactly one response, keep the connection open.
                    let mut resp = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        let n = within("reading a response", s.read(&mut buf))
                            .await
                            .unwrap();
                        assert!(n > 0, "connection closed early");
                        resp.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&resp);
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("Content-Length: "))
                                .unwrap()
                                .parse()
                                .unwrap();
                            if body.len() >= len {
                                assert_eq!(body.trim(), format!("{} 127.0.0.1:80", plain(me)));
                                break;
                            }
                        }
                    }
                    s
                })
            })
            .collect();
        let mut streams = Vec::new();
        for t in tasks {
            streams.push(t.await.unwrap());
        }
        streams
    });
    assert_eq!(streams.len(), N);
    assert_eq!(
        proxy.metric(r#"ouroboros_proxy_connections_active{listener="http"}"#),
        Some(N as f64)
    );
    drop(streams);
    let wait = Instant::now() + Duration::from_secs(10);
    while proxy.metric(r#"ouroboros_proxy_connections_active{listener="http"}"#) != Some(0.0) {
        assert!(Instant::now() < wait, "connections not released");
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy
}

/// Keep-alive requests, one after the other on one connection, to nginx and HAProxy (both
/// requiring the PROXY protocol) through the kernel relay: each answer names this client's
/// address, and each connection went to the kernel.
#[cfg(feature = "kernel-relay")]
#[test]
fn keep_alive_requests_through_the_kernel_relay_reach_nginx_and_haproxy() {
    let nginx = Nginx::start();
    let haproxy = Haproxy::start();
    let proxy = Proxy::relaying("127.0.0.1:0", V4, (nginx.http_port, haproxy.port), SOCKMAP);
    for (addr, port) in [(port_of(proxy.http), 80), (port_of(proxy.https), 443)] {
        let mut s = connect(addr);
        let me = s.local_addr().unwrap();
        for i in 0..200 {
            s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let body = read_one_response(&mut s);
            assert_eq!(
                body.trim(),
                format!("{} 127.0.0.1:{port}", plain(me)),
                "request {i}"
            );
        }
    }
    for listener in ["http", "https"] {
        let series =
            format!(r#"ouroboros_proxy_kernel_relayed_connections_total{{listener="{listener}"}}"#);
        assert_eq!(proxy.metric(&series), Some(1.0), "{listener}");
    }
}

/// Reads one HTTP/1.1 response with a Content-Length from `s`; its body.
#[cfg(feature = "kernel-relay")]
fn read_one_response(s: &mut TcpStream) -> String {
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = read_ok("reading a response", s.read(&mut buf));
        assert!(
            n > 0,
            "connection closed early: {:?}",
            String::from_utf8_lossy(&resp)
        );
        resp.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&resp);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .expect("a Content-Length");
            if body.len() >= len {
                assert_eq!(body.len(), len, "more than one response");
                return body.to_string();
            }
        }
    }
}

/// Without CAP_BPF and CAP_NET_ADMIN (here: running as an unprivileged user), the kernel
/// relay cannot load: the proxy says why once, copies in the process, and stays ready.
#[cfg(feature = "kernel-relay")]
#[test]
fn kernel_relay_without_privileges_falls_back_and_says_why() {
    use std::os::unix::process::CommandExt;
    let nginx = Nginx::start();
    let port = nginx.http_port.to_string();
    let mut cmd = Proxy::command(&[
        "--target-host",
        "127.0.0.1",
        "--target-http-port",
        &port,
        "--listen-https",
        "",
        "--copy-mode",
        "sockmap",
    ]);
    if nix::unistd::geteuid().is_root() {
        cmd.uid(65534).gid(65534);
    }
    let mut proxy = Proxy::spawn(cmd);
    let warn = proxy.wait_log(
        message_starts("copy mode sockmap is not available here"),
        DEADLINE,
    );
    assert_eq!(warn["level"], "WARN", "{warn}");
    let error = warn["error"].as_str().unwrap();
    assert!(error.contains("CAP_BPF and CAP_NET_ADMIN"), "{error}");
    let (me, status, body) = http_get_via(port_of(proxy.http));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.trim(), format!("{} 127.0.0.1:80", plain(me)));
    assert_eq!(kernel_relayed(&proxy), 0.0);
    let (status, body) = proxy.admin("/readyz");
    assert_eq!(status, 200, "{body}");
    let said = proxy
        .logs()
        .iter()
        .filter(|v| message_starts("copy mode sockmap")(v))
        .count();
    assert_eq!(said, 1, "said once");
}

#[test]
fn target_down_closes_clients_and_fails_readiness() {
    let closed = free_port(V4);
    let mut proxy = proxy_to((V4, closed).into(), &[]);
    let (status, body) = proxy.admin("/readyz");
    assert_eq!(status, 503);
    assert!(body.starts_with("connection-refused"), "{body}");
    for round in 1..=2 {
        let mut c = connect(port_of(proxy.http));
        let me = c.local_addr().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        let r = c.read(&mut b);
        assert!(
            matches!(r, Ok(0))
                || r.is_err() && r.as_ref().unwrap_err().kind() != std::io::ErrorKind::WouldBlock,
            "{r:?}"
        );
        // Closed because the dial was refused, with one failed dial counted (below), not after
        // a timeout or retries.
        let client = me.to_string();
        let line = proxy.wait_log(
            |v| v["level"] == "WARN" && v["client"] == client.as_str(),
            Duration::from_secs(5),
        );
        assert_eq!(line["upstream"], format!("127.0.0.1:{closed}"));
        assert_eq!(line["cause"], "connection-refused");
        assert_eq!(
            proxy.metric(r#"ouroboros_proxy_connections_failed_total{listener="http",cause="connection-refused"}"#),
            Some(f64::from(round))
        );
    }
    // Readiness changes are logged once, not per probe.
    for _ in 0..3 {
        assert_eq!(proxy.admin("/readyz").0, 503);
    }
    let not_ready = proxy
        .logs()
        .iter()
        .filter(|v| message_starts("not ready")(v))
        .count();
    assert_eq!(not_ready, 1);
    assert_eq!(proxy.admin("/healthz").0, 200);
}

#[test]
fn unknown_target_name_reports_dns_nxdomain() {
    // The resolver runs on the blocking pool, which the single-threaded runtime has too.
    for threads in ["0", "1"] {
        let proxy = Proxy::start(&[
            "--target-host",
            "no-such-ingress.invalid",
            "--threads",
            threads,
        ]);
        let (status, body) = proxy.admin("/readyz");
        assert_eq!(status, 503, "--threads {threads}");
        assert!(
            body.starts_with("dns-nxdomain"),
            "--threads {threads}: {body}"
        );
        let mut c = connect(port_of(proxy.https));
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
    }
}

#[test]
fn readiness_probe_leaves_nginx_error_log_clean() {
    let nginx = Nginx::start();
    // Negative control: a bare connect-and-close makes nginx's stream module log a broken header.
    drop(connect((V4, nginx.stream_port)));
    let wait = Instant::now() + Duration::from_secs(10);
    while !nginx.error_log().contains("broken header") {
        assert!(
            Instant::now() < wait,
            "nginx did not log the bare connection:\n{}",
            nginx.error_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = nginx.error_log().matches("broken header").count();
    assert_eq!(before, 1, "{}", nginx.error_log());
    let stream = nginx.stream_port.to_string();
    let http = nginx.http_port.to_string();
    for version in ["v1", "v2"] {
        let mut proxy = Proxy::start(&[
            "--target-host",
            "127.0.0.1",
            "--target-http-port",
            &http,
            "--target-https-port",
            &stream,
            "--proxy-protocol",
            version,
        ]);
        for _ in 0..5 {
            let (status, body) = proxy.admin("/readyz");
            assert_eq!(status, 200, "{body}");
        }
        proxy.wait_log(
            |v| v["message"] == "ready: the http and https targets answer",
            DEADLINE,
        );
        let ready_lines = proxy
            .logs()
            .iter()
            .filter(|v| v["message"] == "ready: the http and https targets answer")
            .count();
        assert_eq!(ready_lines, 1, "readiness change logged once");
    }
    // A sentinel connection through nginx's stream server: by the time it is answered, nginx
    // has handled the probes' connections that closed before it.
    let mut s = connect((V4, nginx.stream_port));
    s.write_all(b"PROXY TCP4 192.0.2.1 192.0.2.2 1234 80\r\n")
        .unwrap();
    let mut answer = String::new();
    read_ok("s: read_to_string", s.read_to_string(&mut answer));
    assert_eq!(answer.trim(), "192.0.2.1:1234 192.0.2.2:80");
    let log = nginx.error_log();
    assert_eq!(log.matches("broken header").count(), before, "{log}");
    assert!(
        !log.contains("[error]") || log.matches("[error]").count() == before,
        "{log}"
    );
    // With the https listener disabled, readiness speaks of the one target it probes.
    let mut proxy = Proxy::start(&[
        "--listen-https",
        "",
        "--target-host",
        "127.0.0.1",
        "--target-http-port",
        &http,
    ]);
    let (status, body) = proxy.admin("/readyz");
    assert_eq!(status, 200, "{body}");
    proxy.wait_log(
        |v| v["message"] == "ready: the http target answers",
        DEADLINE,
    );
}

#[test]
fn graceful_shutdown_drains_in_flight_connections() {
    graceful_shutdown_drains_with(&[]);
}

#[cfg(feature = "kernel-relay")]
#[test]
fn graceful_shutdown_drains_connections_the_kernel_relays() {
    graceful_shutdown_drains_with(SOCKMAP);
}

fn graceful_shutdown_drains_with(extra: &[&str]) {
    let (up, accepted) = tcp_upstream();
    let flags = [
        &["--shutdown-delay", "2s", "--shutdown-grace", "30s"][..],
        extra,
    ]
    .concat();
    let mut proxy = proxy_to(up, &flags);
    let http = port_of(proxy.http);
    let mut inflight = connect(http);
    let (mut server, _) = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    server.write_all(b"first part|").unwrap();
    let mut first = [0u8; 11];
    read_ok("inflight: read_exact", inflight.read_exact(&mut first));

    let signalled = Instant::now();
    proxy.signal(Signal::SIGTERM);
    // Readiness fails at once: the first probe after the signal is handled fails.
    proxy.wait_log(message_starts("shutting down: /readyz fails now"), DEADLINE);
    let (status, body) = proxy.admin("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("shutting-down"), "{body}");
    // During the delay new connections are still relayed.
    let mut late = connect(http);
    let (mut late_server, _) = accepted.recv_timeout(Duration::from_secs(5)).unwrap();
    late.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    read_ok("late_server: read_exact", late_server.read_exact(&mut b));
    assert_eq!(&b, b"ping");
    drop((late, late_server));
    assert!(
        !proxy
            .logs()
            .iter()
            .any(|v| v["message"] == "stopped accepting; waiting for in-flight connections"),
        "test too slow for the delay"
    );
    // After the delay, new connections are refused.
    let refused_at = loop {
        match TcpStream::connect(http) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                break signalled.elapsed()
            }
            _ => {}
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "still accepting"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        refused_at >= Duration::from_secs(2),
        "refused after {refused_at:?}"
    );
    // Close the upstream side of the probing connections accepted while polling.
    while let Ok(probe) = accepted.recv_timeout(Duration::from_millis(300)) {
        drop(probe);
    }
    // The in-flight transfer still completes.
    let sent = send_all(&mut server, 9, 4 << 20);
    drop(server);
    assert_eq!(recv_all(&mut inflight), (4 << 20, sent));
    drop(inflight);
    let status = proxy.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}");
    proxy.wait_log(
        |v| v["message"] == "all connections finished; exiting",
        Duration::from_secs(1),
    );
    assert!(
        !proxy.logs().iter().any(|v| v["message"]
            .as_str()
            .is_some_and(|m| m.contains("grace expired"))),
        "waited for the grace instead of the drain"
    );
}

/// Ctrl-C in a terminal (SIGINT) skips the shutdown delay, which is for Kubernetes' SIGTERM:
/// an idle proxy with the default 5 s delay exits at once.
#[test]
fn sigint_skips_the_shutdown_delay() {
    let (up, _accepted) = tcp_upstream();
    let mut proxy = proxy_to(up, &[]);
    proxy.signal(Signal::SIGINT);
    let line = proxy.wait_log(message_starts("shutting down"), DEADLINE);
    assert_eq!(line["delay_ms"], 0, "{line}");
    let status = proxy.wait_exit(DEADLINE);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn shutdown_grace_expiry_warns_and_exits_zero() {
    shutdown_grace_expiry_with(&[]);
}

#[cfg(feature = "kernel-relay")]
#[test]
fn shutdown_grace_expiry_cuts_connections_the_kernel_relays() {
    shutdown_grace_expiry_with(SOCKMAP);
}

fn shutdown_grace_expiry_with(extra: &[&str]) {
    let (up, accepted) = tcp_upstream();
    let flags = [
        &["--shutdown-delay", "0", "--shutdown-grace", "300ms"][..],
        extra,
    ]
    .concat();
    let mut proxy = proxy_to(up, &flags);
    let _held = connect(port_of(proxy.http));
    let _server = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    #[cfg(feature = "kernel-relay")]
    if !extra.is_empty() {
        let wait = Instant::now() + DEADLINE;
        while kernel_relayed(&proxy) != 1.0 {
            assert!(Instant::now() < wait, "not handed to the kernel");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    proxy.signal(Signal::SIGINT);
    let status = proxy.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    let warn = proxy.wait_log(
        |v| {
            v["level"] == "WARN"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("grace expired"))
        },
        Duration::from_secs(1),
    );
    assert_eq!(warn["open"], 1);
}

#[test]
fn max_connections_leaves_excess_clients_in_the_backlog() {
    max_connections_with(&[]);
}

#[cfg(feature = "kernel-relay")]
#[test]
fn max_connections_counts_connections_the_kernel_relays() {
    max_connections_with(SOCKMAP);
}

fn max_connections_with(extra: &[&str]) {
    let (up, accepted) = tcp_upstream();
    // The https listener stays enabled (and idle): it must not hold one of the two slots.
    let proxy = proxy_to(up, &[&["--max-connections", "2"][..], extra].concat());
    let http = port_of(proxy.http);
    let a = connect(http);
    let _b = connect(http);
    let _ = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    let _ = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    // The third handshake completes in the kernel, but the proxy does not take it yet.
    let mut c = connect(http);
    assert!(
        accepted.recv_timeout(Duration::from_millis(500)).is_err(),
        "third connection relayed past the cap"
    );
    assert_eq!(
        proxy.metric(r#"ouroboros_proxy_connections_accepted_total{listener="http"}"#),
        Some(2.0)
    );
    drop(a);
    let (mut s, _) = accepted
        .recv_timeout(Duration::from_secs(10))
        .expect("waiting client served once a slot freed");
    c.write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    read_ok("s: read_exact", s.read_exact(&mut b));
    assert_eq!(&b, b"hi");
}

#[test]
fn bad_flags_exit_64_naming_the_flag() {
    for (args, flag) in [
        (&["--proxy-protocol", "v3"][..], "--proxy-protocol"),
        (
            &["--listen-http", "", "--listen-https", ""][..],
            "--listen-http",
        ),
        (&["--dial-timeout", "soon"][..], "--dial-timeout"),
        (&["--busy-poll", "2ms"][..], "--busy-poll"),
        (&["--target-http-port", "0"][..], "--target-http-port"),
        (&["--listen-health", "nope"][..], "--listen-health"),
        (
            &["--target-service-name", "ingress"][..],
            "--target-service-namespace",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ouroboros"))
            .arg("proxy")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    // Environment variables go through the same checks.
    let out = Command::new(env!("CARGO_BIN_EXE_ouroboros"))
        .arg("proxy")
        .env("OUROBOROS_PROXY_PROXY_PROTOCOL", "v9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--proxy-protocol"));
}

/// A build without the cargo feature `kernel-relay` (the default, and the release image's)
/// still knows `--copy-mode sockmap`: `--help` says it needs the feature, and asking for it
/// (flag or environment) is a usage error naming the feature, never a silent fallback.
#[cfg(not(feature = "kernel-relay"))]
#[test]
fn sockmap_without_the_kernel_relay_feature_is_refused_naming_it() {
    for sub in ["proxy", "edge"] {
        let help = crate::common::help(&[sub]);
        assert!(help.contains("kernel-relay"), "{sub} --help:\n{help}");
        let env = format!("OUROBOROS_{}_COPY_MODE", sub.to_uppercase());
        for (args, envs) in [
            (&["--copy-mode", "sockmap"][..], &[][..]),
            (&[][..], &[(env.as_str(), "sockmap")][..]),
        ] {
            let out = crate::common::command(sub)
                .args(args)
                .envs(envs.iter().copied())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{sub} {args:?}: {stderr}");
            assert!(stderr.contains("--copy-mode"), "{sub} {args:?}: {stderr}");
            assert!(
                stderr.contains("the cargo feature kernel-relay"),
                "{sub} {args:?}: {stderr}"
            );
        }
    }
}

/// Runs the proxy with at most `limit` file descriptors and holds `clients` connections.
fn exhaust_fds(limit: u64) -> (Proxy, Vec<TcpStream>, Accepted) {
    let (up, accepted) = tcp_upstream();
    let port = up.port().to_string();
    let mut cmd = Proxy::command(&[
        "--target-host",
        "127.0.0.1",
        "--target-http-port",
        &port,
        "--target-https-port",
        &port,
    ]);
    crate::sys::limit_open_files(&mut cmd, limit);
    let proxy = Proxy::spawn(cmd);
    let http = port_of(proxy.http);
    let clients: Vec<_> = (0..40).map(|_| connect(http)).collect();
    (proxy, clients, accepted)
}

#[test]
fn running_out_of_file_descriptors_backs_off_and_recovers() {
    // Whether accept(2) or the upstream socket(2) hits the limit first depends on the parity of
    // the descriptors in use at start; one of two adjacent limits makes accept(2) fail.
    let mut hit = None;
    for limit in [40, 41] {
        let (mut proxy, clients, accepted) = exhaust_fds(limit);
        let wait = Instant::now() + Duration::from_secs(10);
        let errors = r#"ouroboros_proxy_accept_errors_total{listener="http"}"#;
        let mut seen = false;
        // The health listener needs a descriptor too; poll the log instead of /metrics.
        while Instant::now() < wait {
            if proxy.logs().iter().any(message_starts("accept failed")) {
                seen = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if seen {
            hit = Some((proxy, clients, accepted, errors));
            break;
        }
        assert!(proxy.is_running());
    }
    let (mut proxy, clients, accepted, errors) = hit.expect("accept(2) never hit EMFILE");
    let warn = proxy.wait_log(message_starts("accept failed"), Duration::from_secs(1));
    assert_eq!(warn["level"], "WARN");
    assert!(
        warn["error"].as_str().unwrap().contains("os error 24"),
        "{warn}"
    );
    // Free the descriptors. The dropped clients left in the backlog are relayed now too, each
    // holding two descriptors until its upstream end closes: a drainer closes every upstream
    // end, and hands over the one that brings the fresh client's bytes.
    drop(clients);
    let (relayed_tx, relayed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (mut s, _) in accepted.iter() {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 5];
            if s.read_exact(&mut b).is_ok() && &b == b"fresh" {
                let _ = relayed_tx.send(s);
            }
        }
    });
    // The listener picks up again and relays a new connection. One that comes before enough
    // relays have finished still finds no descriptor for its upstream and is closed, so a new
    // client tries again every half second.
    let wait = Instant::now() + Duration::from_secs(15);
    let mut fresh = Vec::new();
    loop {
        let mut c = connect(port_of(proxy.http));
        c.write_all(b"fresh").unwrap();
        fresh.push(c);
        if relayed.recv_timeout(Duration::from_millis(500)).is_ok() {
            break;
        }
        assert!(
            Instant::now() < wait,
            "no new connection relayed once descriptors were free"
        );
    }
    assert!(proxy.is_running());
    assert!(proxy.metric(errors).unwrap() >= 1.0);
}

#[test]
fn environment_sets_flags_and_flags_override_it() {
    let nginx = Nginx::start();
    let mut cmd = Proxy::bare_command();
    cmd.args(["--listen-http", "127.0.0.1:0", "--header-http-port", "8001"])
        .env("OUROBOROS_PROXY_LISTEN_HTTPS", "")
        .env("OUROBOROS_PROXY_TARGET_HOST", "127.0.0.1")
        .env(
            "OUROBOROS_PROXY_TARGET_HTTP_PORT",
            nginx.http_port.to_string(),
        )
        .env("OUROBOROS_PROXY_HEADER_HTTP_PORT", "8000");
    let proxy = Proxy::spawn(cmd);
    assert!(
        proxy.https.is_none(),
        "empty env value disables the listener"
    );
    let (me, status, body) = http_get_via(port_of(proxy.http));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.trim(), format!("{} 127.0.0.1:8001", plain(me)));
}

#[test]
fn unanswered_dial_times_out_with_cause_timeout() {
    let (_hole, _filled, port) = black_hole();
    let mut proxy = proxy_to(
        (V4, port).into(),
        &["--dial-timeout", "300ms", "--ready-timeout", "300ms"],
    );
    // The probe gives up at --ready-timeout and says so (the kernel would take minutes).
    let (status, body) = proxy.admin("/readyz");
    assert_eq!(status, 503);
    assert!(body.starts_with("timeout"), "{body}");

    let mut c = connect(port_of(proxy.http));
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut b = [0u8; 1];
    assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    // Closed by the dial timeout (the WARN naming it), not by anything slower.
    let warn = proxy.wait_log(
        |v| v["level"] == "WARN" && v["cause"] == "timeout",
        DEADLINE,
    );
    assert_eq!(warn["upstream"], format!("127.0.0.1:{port}"));
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    idle_timeout_with(&[]);
}

#[cfg(feature = "kernel-relay")]
#[test]
fn idle_connections_the_kernel_relays_are_closed_after_the_idle_timeout() {
    idle_timeout_with(SOCKMAP);
}

fn idle_timeout_with(extra: &[&str]) {
    let (up, accepted) = tcp_upstream();
    let proxy = proxy_to(up, &[&["--idle-timeout", "400ms"][..], extra].concat());
    let mut c = connect(port_of(proxy.http));
    let (mut s, _) = accepted.recv_timeout(Duration::from_secs(10)).unwrap();
    // Traffic keeps it open past the timeout...
    let started = Instant::now();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(200));
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        read_ok("s: read_exact", s.read_exact(&mut b));
    }
    assert!(started.elapsed() >= Duration::from_millis(800));
    // ...silence closes both sides.
    let quiet = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap(), 0);
    assert_eq!(s.read(&mut b).unwrap(), 0);
    let waited = quiet.elapsed();
    assert!(waited >= Duration::from_millis(350), "{waited:?}");
    // Closed by the idle timeout (counted as such), not by anything slower.
    let wait = Instant::now() + Duration::from_secs(5);
    while proxy.metric(
        r#"ouroboros_proxy_connections_closed_total{listener="http",result="idle-timeout"}"#,
    ) != Some(1.0)
    {
        assert!(Instant::now() < wait, "idle close not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}
