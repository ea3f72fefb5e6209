//! PURE: what one `whoami` answer shows (the socket peer, the PROXY header with its TLVs, the
//! request head) rendered as text or JSON.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::http::Request;
use crate::proxy_protocol::decode::header::{Header, Tlv};
use crate::proxy_protocol::Version;

/// Everything one answer shows.
pub(super) struct Report<'a> {
    pub(super) hostname: &'a str,
    pub(super) ips: &'a [IpAddr],
    pub(super) remote: SocketAddr,
    pub(super) local: Option<SocketAddr>,
    pub(super) proxy: Option<&'a Header>,
    pub(super) request: &'a Request,
    pub(super) request_number: u64,
}

impl Report<'_> {
    /// The client as the backend should see it: the PROXY source when the header names one.
    fn client(&self) -> SocketAddr {
        self.proxy
            .and_then(|h| h.source())
            .map_or(self.remote, |s| s.0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A TLV value as text when it is printable UTF-8 (ALPN, AUTHORITY, UNIQUE_ID usually are).
fn printable(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_control))
}

fn version_number(v: Version) -> u8 {
    match v {
        Version::V1 => 1,
        Version::V2 => 2,
    }
}

/// `ProxyTLV: 0x05 UNIQUE_ID 7265712d37663361 "req-7f3a"`: type, name, hex, text if printable.
fn tlv_line(out: &mut String, prefix: &str, t: &Tlv) {
    let _ = write!(out, "ProxyTLV: {prefix}{:#04x}", t.kind);
    if let Some(name) = t.name() {
        let _ = write!(out, " {name}");
    }
    let _ = write!(out, " {}", hex(&t.value));
    if let Some(s) = printable(&t.value) {
        let _ = write!(out, " {s:?}");
    }
    out.push('\n');
}

fn tlv_json(t: &Tlv) -> serde_json::Value {
    serde_json::json!({
        "type": t.kind,
        "name": t.name(),
        "value_hex": hex(&t.value),
        "value": printable(&t.value),
    })
}

pub(super) fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Hostname: {}", r.hostname);
    for ip in r.ips {
        let _ = writeln!(out, "IP: {ip}");
    }
    let _ = writeln!(out, "RemoteAddr: {}", r.remote);
    if let Some(local) = r.local {
        let _ = writeln!(out, "LocalAddr: {local}");
    }
    match r.proxy {
        None => out.push_str("Proxy: none\n"),
        Some(h) => {
            let _ = writeln!(out, "Proxy: {h}");
            for t in &h.tlvs {
                tlv_line(&mut out, "", t);
                if let Some(ssl) = t.ssl() {
                    let _ = writeln!(
                        out,
                        "ProxyTLV: {:#04x} SSL client={:#04x} verify={}",
                        t.kind, ssl.client, ssl.verify
                    );
                    for sub in &ssl.tlvs {
                        tlv_line(&mut out, "0x20.", sub);
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "ClientAddr: {}", r.client());
    let _ = writeln!(out, "ConnectionRequest: {}", r.request_number);
    let q = r.request;
    let _ = writeln!(out, "{} {} {}", q.method, q.target, q.version());
    for (name, value) in &q.headers {
        let _ = writeln!(out, "{name}: {value}");
    }
    out
}

pub(super) fn render_json(r: &Report) -> String {
    use serde_json::{json, Value};
    let proxy = r.proxy.map_or(Value::Null, |h| {
        json!({
            "version": version_number(h.version),
            "command": h.command.to_string(),
            "transport": h.transport.as_str(),
            "source": h.source().map(|s| s.0.to_string()),
            "destination": h.destination().map(|d| d.0.to_string()),
            "tlvs": h.tlvs.iter().map(|t| {
                let mut v = tlv_json(t);
                if let Some(ssl) = t.ssl() {
                    v["ssl"] = json!({
                        "client": ssl.client,
                        "verify": ssl.verify,
                        "tlvs": ssl.tlvs.iter().map(tlv_json).collect::<Vec<_>>(),
                    });
                }
                v
            }).collect::<Vec<_>>(),
        })
    });
    let q = r.request;
    let body = json!({
        "hostname": r.hostname,
        "ips": r.ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "remote_addr": r.remote.to_string(),
        "local_addr": r.local.map(|l| l.to_string()),
        "proxy": proxy,
        "client_addr": r.client().to_string(),
        "connection_request": r.request_number,
        "request": {
            "method": q.method,
            "target": q.target,
            "version": q.version(),
            "headers": q.headers.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
        },
    });
    let mut s = serde_json::to_string_pretty(&body).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy_protocol::decode::header::{Command, Transport};
    use crate::proxy_protocol::{Destination, Source};
    use crate::whoami::http::tests::req;

    fn sample_header() -> Header {
        Header {
            version: Version::V2,
            command: Command::Proxy,
            transport: Transport::Tcp4,
            addresses: Some((
                Source("192.0.2.10:51234".parse().unwrap()),
                Destination("203.0.113.7:443".parse().unwrap()),
            )),
            tlvs: vec![
                Tlv {
                    kind: 0x05,
                    value: b"req-7f3a".to_vec(),
                },
                Tlv {
                    kind: 0xea,
                    value: vec![0, 1],
                },
                Tlv {
                    kind: 0x20,
                    value: b"\x01\0\0\0\0\x21\0\x07TLSv1.3".to_vec(),
                },
            ],
        }
    }

    #[test]
    fn text_report() {
        let request =
            req("GET /x HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: 198.51.100.1\r\n\r\n");
        let header = sample_header();
        let ips = ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let report = Report {
            hostname: "node-1",
            ips: &ips,
            remote: "10.0.0.5:40000".parse().unwrap(),
            local: Some("10.0.0.6:8080".parse().unwrap()),
            proxy: Some(&header),
            request: &request,
            request_number: 2,
        };
        assert_eq!(
            render_text(&report),
            "Hostname: node-1\n\
             IP: 127.0.0.1\n\
             IP: ::1\n\
             RemoteAddr: 10.0.0.5:40000\n\
             LocalAddr: 10.0.0.6:8080\n\
             Proxy: v2 PROXY TCP4 192.0.2.10:51234 -> 203.0.113.7:443\n\
             ProxyTLV: 0x05 UNIQUE_ID 7265712d37663361 \"req-7f3a\"\n\
             ProxyTLV: 0xea 0001\n\
             ProxyTLV: 0x20 SSL 0100000000210007544c5376312e33\n\
             ProxyTLV: 0x20 SSL client=0x01 verify=0\n\
             ProxyTLV: 0x20.0x21 SSL_VERSION 544c5376312e33 \"TLSv1.3\"\n\
             ClientAddr: 192.0.2.10:51234\n\
             ConnectionRequest: 2\n\
             GET /x HTTP/1.1\n\
             Host: a.example\n\
             X-Forwarded-For: 198.51.100.1\n"
        );
        let plain = Report {
            proxy: None,
            ..report
        };
        let text = render_text(&plain);
        assert!(
            text.contains("\nProxy: none\nClientAddr: 10.0.0.5:40000\n"),
            "{text}"
        );
    }

    #[test]
    fn json_report() {
        let request = req("GET /?format=json HTTP/1.0\r\nHost: a\r\n\r\n");
        let header = sample_header();
        let report = Report {
            hostname: "node-1",
            ips: &[],
            remote: "[::1]:40000".parse().unwrap(),
            local: None,
            proxy: Some(&header),
            request: &request,
            request_number: 1,
        };
        let v: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(v["remote_addr"], "[::1]:40000");
        assert_eq!(v["local_addr"], serde_json::Value::Null);
        assert_eq!(v["client_addr"], "192.0.2.10:51234");
        assert_eq!(v["proxy"]["version"], 2);
        assert_eq!(v["proxy"]["command"], "PROXY");
        assert_eq!(v["proxy"]["transport"], "TCP4");
        assert_eq!(v["proxy"]["destination"], "203.0.113.7:443");
        assert_eq!(v["proxy"]["tlvs"][0]["name"], "UNIQUE_ID");
        assert_eq!(v["proxy"]["tlvs"][0]["value"], "req-7f3a");
        assert_eq!(v["proxy"]["tlvs"][1]["name"], serde_json::Value::Null);
        assert_eq!(v["proxy"]["tlvs"][1]["value_hex"], "0001");
        assert_eq!(v["proxy"]["tlvs"][1]["value"], serde_json::Value::Null);
        assert_eq!(v["proxy"]["tlvs"][1].get("ssl"), None);
        let ssl = &v["proxy"]["tlvs"][2]["ssl"];
        assert_eq!(ssl["client"], 1);
        assert_eq!(ssl["verify"], 0);
        assert_eq!(ssl["tlvs"][0]["name"], "SSL_VERSION");
        assert_eq!(ssl["tlvs"][0]["value"], "TLSv1.3");
        assert_eq!(v["request"]["version"], "HTTP/1.0");
        assert_eq!(v["request"]["headers"][0]["name"], "Host");
    }
}
