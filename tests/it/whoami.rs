//! `ouroboros whoami` end to end: the real binary, raw clients sending PROXY headers, and real
//! HAProxy 2.6 in front of it.

use crate::support;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};

use crate::support::{closed_without_reply, exchange, Haproxy, Proxy, Whoami, V4, V6};
use ouroboros::proxy_protocol::{encode_tcp, Destination, Source, Version};

const GET_JSON: &[u8] = b"GET /?format=json HTTP/1.1\r\nHost: whoami.test\r\n\r\n";

fn local(s: &TcpStream) -> String {
    s.local_addr().unwrap().to_string()
}

#[test]
fn v1_header_then_keep_alive_requests() {
    let w = Whoami::start("127.0.0.1:0", &[]);
    let mut s = w.connect();
    let mut first = b"PROXY TCP4 192.0.2.10 203.0.113.7 51234 443\r\n".to_vec();
    first.extend_from_slice(GET_JSON);
    let r = exchange(&mut s, &first).expect("response to the first request");
    assert_eq!(r.status, 200, "{}", r.head);
    assert!(
        r.head.contains("Content-Type: application/json"),
        "{}",
        r.head
    );
    let v = r.json();
    assert_eq!(v["proxy"]["version"], 1);
    assert_eq!(v["proxy"]["command"], "PROXY");
    assert_eq!(v["proxy"]["transport"], "TCP4");
    assert_eq!(v["proxy"]["source"], "192.0.2.10:51234");
    assert_eq!(v["proxy"]["destination"], "203.0.113.7:443");
    assert_eq!(v["proxy"]["tlvs"], serde_json::json!([]));
    assert_eq!(v["client_addr"], "192.0.2.10:51234");
    assert_eq!(v["remote_addr"], local(&s));
    assert_eq!(v["local_addr"], w.addr.to_string());
    assert_eq!(v["connection_request"], 1);
    assert_eq!(v["request"]["method"], "GET");
    assert_eq!(v["request"]["target"], "/?format=json");
    assert_eq!(v["request"]["version"], "HTTP/1.1");
    assert_eq!(
        v["request"]["headers"],
        serde_json::json!([{"name": "Host", "value": "whoami.test"}])
    );

    // Same connection: the header is remembered, the request counter moves on.
    let r = exchange(
        &mut s,
        b"GET /second HTTP/1.1\r\nHost: h\r\nAccept: application/json\r\nX-Forwarded-For: 198.51.100.1, 10.0.0.1\r\n\r\n",
    )
    .expect("response on the kept-alive connection");
    let v = r.json();
    assert_eq!(v["connection_request"], 2);
    assert_eq!(v["client_addr"], "192.0.2.10:51234");
    assert_eq!(v["request"]["headers"][2]["name"], "X-Forwarded-For");
    assert_eq!(
        v["request"]["headers"][2]["value"],
        "198.51.100.1, 10.0.0.1"
    );

    // Connection: close is honoured.
    let r = exchange(&mut s, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    assert!(r.head.contains("Connection: close"), "{}", r.head);
    assert!(closed_without_reply(&mut s));
}

#[test]
fn v1_over_ipv6_in_text() {
    let w = Whoami::start("[::1]:0", &[]);
    let mut s = w.connect();
    let mut bytes = b"PROXY TCP6 2001:db8::1 2001:db8::2 0 65535\r\n".to_vec();
    bytes.extend_from_slice(
        b"GET /path HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 2001:db8::1\r\n\r\n",
    );
    let r = exchange(&mut s, &bytes).unwrap();
    assert!(r.head.contains("Content-Type: text/plain"), "{}", r.head);
    let text = r.text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Hostname: "), "{text}");
    assert!(lines.contains(&"IP: ::1"), "{text}");
    assert!(
        lines.contains(&format!("RemoteAddr: {}", local(&s)).as_str()),
        "{text}"
    );
    assert!(
        lines.contains(&"Proxy: v1 PROXY TCP6 [2001:db8::1]:0 -> [2001:db8::2]:65535"),
        "{text}"
    );
    assert!(lines.contains(&"ClientAddr: [2001:db8::1]:0"), "{text}");
    assert!(lines.contains(&"GET /path HTTP/1.1"), "{text}");
    assert!(lines.contains(&"X-Forwarded-For: 2001:db8::1"), "{text}");
}

/// A v2 header with TLVs, built by the encoder plus hand-written TLVs.
#[test]
fn v2_header_with_tlvs() {
    let w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "required"]);
    let mut header = encode_tcp(
        Version::V2,
        Source("[2001:db8::7]:40000".parse().unwrap()),
        Destination("[2001:db8::8]:443".parse().unwrap()),
    )
    .as_bytes()
    .to_vec();
    let tlvs: &[(u8, &[u8])] = &[
        (0x01, b"h2"),
        (0x02, b"shop.example.com"),
        (0x05, b"req-42"),
        (0x04, b""),
        (0xe1, &[0x00, 0xff]),
    ];
    for (kind, value) in tlvs {
        header.push(*kind);
        header.extend_from_slice(&(value.len() as u16).to_be_bytes());
        header.extend_from_slice(value);
    }
    let len = (header.len() - 16) as u16;
    header[14..16].copy_from_slice(&len.to_be_bytes());
    let mut s = w.connect();
    // Header and request in separate writes: the header read must not depend on segmenting.
    s.write_all(&header[..20]).unwrap();
    s.flush().unwrap();
    s.write_all(&header[20..]).unwrap();
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    let p = &v["proxy"];
    assert_eq!(p["version"], 2);
    assert_eq!(p["command"], "PROXY");
    assert_eq!(p["transport"], "TCP6");
    assert_eq!(p["source"], "[2001:db8::7]:40000");
    assert_eq!(p["destination"], "[2001:db8::8]:443");
    assert_eq!(v["client_addr"], "[2001:db8::7]:40000");
    let got: Vec<(u64, Option<&str>, &str, Option<&str>)> = p["tlvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["type"].as_u64().unwrap(),
                t["name"].as_str(),
                t["value_hex"].as_str().unwrap(),
                t["value"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, Some("ALPN"), "6832", Some("h2")),
            (
                2,
                Some("AUTHORITY"),
                "73686f702e6578616d706c652e636f6d",
                Some("shop.example.com")
            ),
            (5, Some("UNIQUE_ID"), "7265712d3432", Some("req-42")),
            (4, Some("NOOP"), "", None),
            (0xe1, None, "00ff", None),
        ]
    );
}

#[test]
fn v2_local_header_reports_no_addresses() {
    let w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "required"]);
    let mut s = w.connect();
    let mut bytes = ouroboros::proxy_protocol::encode_local(Version::V2)
        .as_bytes()
        .to_vec();
    bytes.extend_from_slice(GET_JSON);
    let v = exchange(&mut s, &bytes).unwrap().json();
    assert_eq!(v["proxy"]["command"], "LOCAL");
    assert_eq!(v["proxy"]["source"], serde_json::Value::Null);
    assert_eq!(v["client_addr"], local(&s));
}

/// `:PORT` listens on every interface, IPv4 and IPv6, and shows IPv4 clients as IPv4.
#[test]
fn all_interfaces_serve_ipv4_and_ipv6() {
    let w = Whoami::start(":0", &[]);
    assert!(w.addr.ip().is_unspecified(), "{}", w.addr);
    for ip in ["127.0.0.1", "::1"] {
        let addr = SocketAddr::new(ip.parse().unwrap(), w.addr.port());
        let mut s = support::connect_with_deadline(addr, support::DEADLINE);
        let v = exchange(&mut s, GET_JSON).unwrap().json();
        assert_eq!(v["remote_addr"], local(&s), "{ip}");
        assert_eq!(v["local_addr"], addr.to_string(), "{ip}");
    }
}

/// A request body is skipped so the next request on the connection parses cleanly.
#[test]
fn request_bodies_are_skipped_between_requests() {
    let w = Whoami::start("127.0.0.1:0", &[]);
    let mut s = w.connect();
    let mut bytes = b"POST /upload HTTP/1.1\r\nContent-Length: 10000\r\n\r\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'z', 10_000));
    let r = exchange(&mut s, &bytes).unwrap();
    assert!(r.text().contains("POST /upload HTTP/1.1\n"), "{}", r.text());
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    assert_eq!(v["connection_request"], 2);
    assert_eq!(v["request"]["method"], "GET");
    // Expect: 100-continue gets the interim answer before the body is sent.
    let interim = exchange(
        &mut s,
        b"PUT /?format=json HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
    )
    .unwrap();
    assert_eq!(interim.status, 100, "{}", interim.head);
    let v = exchange(&mut s, b"data").unwrap().json();
    assert_eq!(v["connection_request"], 3);
    assert_eq!(v["request"]["method"], "PUT");
    // Chunked bodies are not read: the answer closes the connection.
    let r = exchange(
        &mut s,
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .unwrap();
    assert!(r.head.contains("Connection: close"), "{}", r.head);
    assert!(closed_without_reply(&mut s));
}

#[test]
fn optional_mode_serves_plain_http() {
    let w = Whoami::start("127.0.0.1:0", &[]);
    // `P` could start `PROXY `: the decision waits for the second byte.
    let put: &[u8] = b"PUT /?format=json HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    for request in [GET_JSON, put] {
        let mut s = w.connect();
        let r = exchange(&mut s, request).unwrap();
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(v["proxy"], serde_json::Value::Null);
        assert_eq!(v["client_addr"], local(&s));
        assert_eq!(v["remote_addr"], local(&s));
    }
}

/// `--proxy-protocol v1|v2` means the version, as it does for `proxy` and `edge`: whoami takes a
/// header of that version and closes a connection with the other one, naming both.
#[test]
fn a_version_mode_takes_only_that_version() {
    let header = |version: &str| {
        let v = if version == "v1" {
            Version::V1
        } else {
            Version::V2
        };
        let mut bytes = encode_tcp(
            v,
            Source("192.0.2.10:51234".parse().unwrap()),
            Destination("203.0.113.7:443".parse().unwrap()),
        )
        .as_bytes()
        .to_vec();
        bytes.extend_from_slice(GET_JSON);
        bytes
    };
    for (mode, number, other) in [("v1", 1, "v2"), ("v2", 2, "v1")] {
        let mut w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", mode]);
        let mut s = w.connect();
        let v = exchange(&mut s, &header(mode))
            .unwrap_or_else(|| panic!("{mode}: no reply"))
            .json();
        assert_eq!(v["proxy"]["version"], number, "{mode}: {v}");
        assert_eq!(v["client_addr"], "192.0.2.10:51234", "{mode}: {v}");
        let mut s = w.connect();
        s.write_all(&header(other)).unwrap();
        assert!(
            closed_without_reply(&mut s),
            "{mode}: a {other} header is refused"
        );
        let peer = local(&s);
        let line = w.wait_for_log(|v| v["level"] == "WARN" && v["peer"] == peer.as_str());
        let reason = line["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!(
                "a PROXY {other} header, where --proxy-protocol {mode}"
            )),
            "{line}"
        );
    }
}

#[test]
fn required_mode_rejects_a_connection_without_header() {
    let mut w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "required"]);
    let mut s = w.connect();
    s.write_all(GET_JSON).unwrap();
    assert!(
        closed_without_reply(&mut s),
        "no HTTP answer without a header"
    );
    let peer = local(&s);
    let line = w.wait_for_log(|v| v["level"] == "WARN" && v["peer"] == peer.as_str());
    assert_eq!(line["message"], "closing connection: bad PROXY header");
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .contains("no PROXY protocol signature"),
        "{line}"
    );
}

#[test]
fn broken_header_is_closed_and_logged() {
    let mut w = Whoami::start("127.0.0.1:0", &[]);
    for (bytes, reason) in [
        (
            &b"PROXY TCP4 192.0.2.1 192.0.2.2 99999 80\r\nGET / HTTP/1.1\r\n\r\n"[..],
            "source port",
        ),
        (
            b"PROXY TCP4 192.0.2.1 192.0.2.2 1 80\nGET / HTTP/1.1\r\n\r\n",
            "LF without CR",
        ),
        (
            b"\r\n\r\n\0\r\nQUIT\n\x21\x13\x00\x00",
            "family/protocol byte 0x13",
        ),
    ] {
        let mut s = w.connect();
        s.write_all(bytes).unwrap();
        assert!(closed_without_reply(&mut s));
        let peer = local(&s);
        let line = w.wait_for_log(|v| v["level"] == "WARN" && v["peer"] == peer.as_str());
        assert!(line["reason"].as_str().unwrap().contains(reason), "{line}");
    }
    // A header cut short by the client closing is broken too.
    let mut s = w.connect();
    s.write_all(b"PROXY TCP4 192.0.2.1").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed_without_reply(&mut s));
    let peer = local(&s);
    let line = w.wait_for_log(|v| v["level"] == "WARN" && v["peer"] == peer.as_str());
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .contains("incomplete PROXY header"),
        "{line}"
    );
}

#[test]
fn off_mode_treats_a_proxy_header_as_http() {
    let w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "off"]);
    for header in [
        b"PROXY TCP4 192.0.2.10 203.0.113.7 51234 443\r\n".to_vec(),
        encode_tcp(
            Version::V2,
            Source("192.0.2.10:51234".parse().unwrap()),
            Destination("203.0.113.7:443".parse().unwrap()),
        )
        .as_bytes()
        .to_vec(),
    ] {
        let mut s = w.connect();
        let mut bytes = header.clone();
        bytes.extend_from_slice(GET_JSON);
        let r = exchange(&mut s, &bytes).expect("an HTTP error response");
        assert_eq!(r.status, 400, "{}", r.head);
        assert!(closed_without_reply(&mut s));
    }
    let mut s = w.connect();
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    assert_eq!(v["proxy"], serde_json::Value::Null);
}

#[test]
fn silent_client_is_disconnected_after_the_read_timeout() {
    let mut w = Whoami::start("127.0.0.1:0", &["--read-timeout", "300ms"]);
    let mut s = w.connect();
    let me = s.local_addr().unwrap().to_string();
    let start = std::time::Instant::now();
    assert!(closed_without_reply(&mut s));
    let took = start.elapsed();
    assert!(took >= std::time::Duration::from_millis(250), "{took:?}");
    // Closed by the read timeout (its own log line), not by anything slower.
    w.wait_for_log(|v| v["message"] == "closing silent connection" && v["peer"] == me.as_str());
}

#[test]
fn sigterm_exits_zero_with_an_idle_keep_alive_connection() {
    let w = Whoami::start("127.0.0.1:0", &["--read-timeout", "1m"]);
    let mut s = w.connect();
    assert_eq!(exchange(&mut s, GET_JSON).unwrap().status, 200);
    let addr = w.addr;
    let status = w.terminate();
    assert!(status.success(), "{status}");
    assert!(closed_without_reply(&mut s));
    assert!(TcpStream::connect(addr).is_err(), "listener closed");
}

#[test]
fn bad_flags_exit_64() {
    for args in [
        &["whoami", "--listen", "8080"][..],
        &["whoami", "--listen", "::1:80"],
        &["whoami", "--proxy-protocol", "v3"],
        &["whoami", "--read-timeout", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ouroboros"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(args[1]), "{args:?}: {err}");
    }
}

#[test]
fn env_vars_configure_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ouroboros"))
        .args(["whoami"])
        .env("OUROBOROS_WHOAMI_LISTEN", "nonsense")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen \"nonsense\""));
}

/// Real HAProxy 2.6 in front of whoami, v1 and v2, over IPv4 and IPv6: whoami reports the
/// address the client connected from.
#[test]
fn behind_haproxy_the_client_address_arrives() {
    let w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "required"]);
    let (v4, v6): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
    let (p4, p6) = (support::free_ports(v4, 2), support::free_ports(v6, 2));
    let fronts: Vec<(SocketAddr, &str, u8)> = vec![
        (SocketAddr::new(v4, p4[0]), "send-proxy", 1),
        (SocketAddr::new(v4, p4[1]), "send-proxy-v2", 2),
        (SocketAddr::new(v6, p6[0]), "send-proxy", 1),
        (SocketAddr::new(v6, p6[1]), "send-proxy-v2", 2),
    ];
    let mut cfg = String::from(
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n",
    );
    for (i, (addr, kw, _)) in fronts.iter().enumerate() {
        cfg.push_str(&format!(
            "listen l{i}\n  bind {addr}\n  server whoami {} {kw}\n",
            w.addr
        ));
    }
    let addrs: Vec<SocketAddr> = fronts.iter().map(|f| f.0).collect();
    let _h = Haproxy::with_config(&cfg, &addrs);
    for (addr, kw, version) in fronts {
        let mut s = support::connect_with_deadline(addr, support::DEADLINE);
        let v = exchange(&mut s, GET_JSON)
            .unwrap_or_else(|| panic!("{kw} {addr}: no reply"))
            .json();
        assert_eq!(v["proxy"]["version"], version, "{kw} {addr}");
        assert_eq!(v["proxy"]["command"], "PROXY");
        assert_eq!(v["proxy"]["source"], local(&s), "{kw} {addr}");
        assert_eq!(v["proxy"]["destination"], addr.to_string(), "{kw} {addr}");
        assert_eq!(v["client_addr"], local(&s), "{kw} {addr}");
        // The socket peer is HAProxy's own outgoing connection, not the client.
        assert_ne!(v["remote_addr"], local(&s));
    }
}

/// whoami behind `ouroboros proxy`, v1 and v2, over 127.0.0.1 and [::1]: the header whoami
/// receives carries the client's socket address as source and the header port (80/443 by
/// default, `--header-http(s)-port` when set) as destination port.
#[test]
fn behind_ouroboros_proxy_the_client_address_and_header_port_arrive() {
    let w = Whoami::start(":0", &["--proxy-protocol", "required"]);
    for (version, number, header_ports) in [
        ("v1", 1, None),
        ("v2", 2, None),
        ("v1", 1, Some((8000, 8444))),
        ("v2", 2, Some((8000, 8444))),
    ] {
        for (ip, listen) in [(V4, "127.0.0.1:0"), (V6, "[::1]:0")] {
            let (http_header, https_header) = header_ports.unwrap_or((80, 443));
            let (http_flag, https_flag) = (http_header.to_string(), https_header.to_string());
            let mut extra = vec!["--proxy-protocol", version];
            if header_ports.is_some() {
                extra.extend([
                    "--header-http-port",
                    &http_flag,
                    "--header-https-port",
                    &https_flag,
                ]);
            }
            let proxy = Proxy::relaying(listen, ip, (w.addr.port(), w.addr.port()), &extra);
            for (listener, header_port) in [(proxy.http, http_header), (proxy.https, https_header)]
            {
                let listener = listener.expect("listener address logged");
                let case = format!("{version} {listener} header port {header_port}");
                let mut s = support::connect_with_deadline(listener, support::DEADLINE);
                let v = exchange(&mut s, GET_JSON)
                    .unwrap_or_else(|| panic!("{case}: no reply"))
                    .json();
                assert_eq!(v["proxy"]["version"], number, "{case}: {v}");
                assert_eq!(v["proxy"]["command"], "PROXY", "{case}: {v}");
                let transport = if ip.is_ipv4() { "TCP4" } else { "TCP6" };
                assert_eq!(v["proxy"]["transport"], transport, "{case}: {v}");
                assert_eq!(v["proxy"]["source"], local(&s), "{case}: {v}");
                assert_eq!(
                    v["proxy"]["destination"],
                    SocketAddr::new(ip, header_port).to_string(),
                    "{case}: {v}"
                );
                assert_ne!(listener.port(), header_port, "{case}");
                assert_eq!(v["client_addr"], local(&s), "{case}: {v}");
                // The socket peer is the proxy's outgoing connection, not the client.
                assert_ne!(v["remote_addr"], local(&s), "{case}: {v}");
            }
        }
    }
}

/// HAProxy in HTTP mode adds X-Forwarded-For and v2 TLVs (CRC32C, UNIQUE_ID): whoami shows both,
/// and its CRC32C check agrees with HAProxy's.
#[test]
fn behind_haproxy_http_mode_with_tlvs_and_forwarded_for() {
    let w = Whoami::start("[::1]:0", &["--proxy-protocol", "required"]);
    let front = SocketAddr::new(
        "::1".parse().unwrap(),
        support::free_port("::1".parse().unwrap()),
    );
    let cfg = format!(
        "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         listen l\n  bind {front}\n  option forwardfor\n  unique-id-format req-%[src]\n  \
         server whoami {} send-proxy-v2 proxy-v2-options crc32c,unique-id\n",
        w.addr
    );
    let _h = Haproxy::with_config(&cfg, &[front]);
    let mut s = support::connect_with_deadline(front, support::DEADLINE);
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    assert_eq!(v["client_addr"], local(&s));
    assert_eq!(v["proxy"]["transport"], "TCP6");
    let tlvs = v["proxy"]["tlvs"].as_array().unwrap();
    let names: Vec<&str> = tlvs.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["CRC32C", "UNIQUE_ID"], "{v}");
    assert_eq!(tlvs[1]["value"], "req-::1");
    let xff = v["request"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| {
            h["name"]
                .as_str()
                .unwrap()
                .eq_ignore_ascii_case("x-forwarded-for")
        })
        .unwrap_or_else(|| panic!("no X-Forwarded-For in {v}"));
    assert_eq!(xff["value"], "::1");
    // HAProxy keeps the server connection alive: a second request rides on the same header.
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    assert_eq!(v["client_addr"], local(&s));
}

/// HAProxy terminating TLS writes ALPN, AUTHORITY and SSL TLVs (version, cipher, algorithms);
/// whoami names and decodes them. A second HAProxy section plays the TLS client (SNI + ALPN),
/// so no TLS library or tool is needed in the test.
#[test]
fn behind_haproxy_tls_termination_tlvs_are_named() {
    let w = Whoami::start("127.0.0.1:0", &["--proxy-protocol", "required"]);
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let ports = support::free_ports(lo, 2);
    let (plain, tls) = (SocketAddr::new(lo, ports[0]), SocketAddr::new(lo, ports[1]));
    let pem = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/whoami-test-tls.pem"
    );
    let cfg = format!(
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         listen tls_client\n  bind {plain}\n  \
         server tls {tls} ssl verify none sni str(shop.example.com) alpn http/1.1\n\
         listen tls_server\n  bind {tls} ssl crt {pem} alpn http/1.1\n  \
         server whoami {} send-proxy-v2 proxy-v2-options ssl,ssl-cipher,cert-sig,cert-key,authority,crc32c\n",
        w.addr
    );
    let _h = Haproxy::with_config(&cfg, &[plain, tls]);
    let mut s = support::connect_with_deadline(plain, support::DEADLINE);
    let v = exchange(&mut s, GET_JSON).unwrap().json();
    let p = &v["proxy"];
    assert_eq!(p["destination"], tls.to_string(), "{v}");
    let named: Vec<(&str, Option<&str>)> = p["tlvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["value"].as_str()))
        .collect();
    assert_eq!(named[0].0, "CRC32C", "{v}");
    assert_eq!(named[1], ("ALPN", Some("http/1.1")));
    assert_eq!(named[2], ("AUTHORITY", Some("shop.example.com")));
    assert_eq!(named[3].0, "SSL");
    let ssl = &p["tlvs"][3]["ssl"];
    assert_eq!(ssl["client"], 1, "TLS used");
    assert_eq!(ssl["verify"], 0);
    let subs: Vec<&str> = ssl["tlvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        subs,
        ["SSL_VERSION", "SSL_KEY_ALG", "SSL_SIG_ALG", "SSL_CIPHER"],
        "{v}"
    );
    assert!(ssl["tlvs"][0]["value"]
        .as_str()
        .unwrap()
        .starts_with("TLSv1."));

    // The same in text.
    let text = exchange(&mut s, b"GET / HTTP/1.1\r\nHost: shop.example.com\r\n\r\n")
        .unwrap()
        .text();
    assert!(
        text.contains(
            "ProxyTLV: 0x02 AUTHORITY 73686f702e6578616d706c652e636f6d \"shop.example.com\"\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("ProxyTLV: 0x20 SSL client=0x01 verify=0\n"),
        "{text}"
    );
    assert!(text.contains("ProxyTLV: 0x20.0x23 SSL_CIPHER "), "{text}");
}
