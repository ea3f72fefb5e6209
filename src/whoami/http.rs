//! PURE: the HTTP/1.1 side of `whoami` as data: a request head parsed from bytes, how its body
//! is framed, whether the connection stays open, which format the client wants, and the bytes
//! of an answer. The socket work around it lives in `whoami/mod.rs`.
//!
//! A small reader over `httparse` rather than hyper: an echo server must show header names with
//! their original case, order and duplicates, which hyper's `HeaderMap` normalises away.

/// Longest request head accepted (request line + headers).
pub(super) const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

/// A parsed request head, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// In arrival order, names as sent.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub(super) fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.header_values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    pub(super) fn expects_continue(&self) -> bool {
        self.minor_version >= 1 && self.has_token("expect", "100-continue")
    }

    pub fn version(&self) -> &'static str {
        if self.minor_version == 0 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        }
    }
}

/// Parses a request head from the start of `buf`: `Ok(Some((request, head_len)))` when whole,
/// `Ok(None)` when more bytes are needed. PURE.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize)>, (u16, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let request = Request {
                method: req.method.unwrap_or_default().to_string(),
                target: req.path.unwrap_or_default().to_string(),
                minor_version: req.version.unwrap_or(1),
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
            };
            Ok(Some((request, len)))
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            Err((431, "Request Header Fields Too Large"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err((431, "Request Header Fields Too Large")),
        Err(_) => Err((400, "Bad Request")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyFraming {
    Length(u64),
    /// Not read: the connection closes after the answer.
    Chunked,
}

/// RFC 9112 section 6: Transfer-Encoding wins; Content-Length values must agree.
pub(super) fn body_framing(r: &Request) -> Result<BodyFraming, &'static str> {
    if r.header_values("transfer-encoding").next().is_some() {
        return Ok(BodyFraming::Chunked);
    }
    let mut length = None;
    for v in r.header_values("content-length").flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err("invalid Content-Length");
        }
        let n: u64 = v.parse().map_err(|_| "invalid Content-Length")?;
        if length.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length values");
        }
        length = Some(n);
    }
    Ok(BodyFraming::Length(length.unwrap_or(0)))
}

pub(super) fn keep_alive(r: &Request) -> bool {
    if r.has_token("connection", "close") {
        return false;
    }
    r.minor_version >= 1 || r.has_token("connection", "keep-alive")
}

/// `?format=json|text` wins over `Accept: application/json`.
pub(super) fn wants_json(r: &Request) -> bool {
    let query = r.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let query = query.split('#').next().unwrap_or("");
    for pair in query.split('&') {
        if let Some(("format", v)) = pair.split_once('=') {
            return v.eq_ignore_ascii_case("json");
        }
    }
    r.header_values("accept")
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
}

pub(super) fn response_bytes(
    status: u16,
    reason: &str,
    content_type: &str,
    body: &str,
    request: &Request,
    keep_alive: bool,
) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
        body.len()
    );
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    } else if request.minor_version == 0 {
        head.push_str("Connection: keep-alive\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !request.method.eq_ignore_ascii_case("HEAD") {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// A `Connection: close` error answer with a one-line text body.
pub(super) fn error_response(status: u16, reason: &str) -> String {
    let body = format!("{status} {reason}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn req(raw: &str) -> Request {
        let (r, len) = parse_head(raw.as_bytes()).unwrap().unwrap();
        assert_eq!(len, raw.len(), "{raw:?}");
        r
    }

    #[test]
    fn request_heads() {
        let r = req("GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8\r\n\r\n");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/a?b=c");
        assert_eq!(r.version(), "HTTP/1.1");
        // Case, order and duplicates as sent.
        assert_eq!(
            r.headers,
            vec![
                ("Host".into(), "x".into()),
                ("X-Forwarded-For".into(), "1.2.3.4".into()),
                ("x-forwarded-for".into(), "5.6.7.8".into()),
            ]
        );
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(parse_head(b""), Ok(None));
        assert_eq!(
            parse_head(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n\r\n"),
            Err((400, "Bad Request"))
        );
        assert_eq!(
            parse_head(b"\r\n\r\n\0\r\nQUIT\n"),
            Err((400, "Bad Request"))
        );
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(
            parse_head(many.as_bytes()),
            Err((431, "Request Header Fields Too Large"))
        );
        let huge = format!("GET / HTTP/1.1\r\nA: {}", "b".repeat(MAX_HEAD));
        assert_eq!(
            parse_head(huge.as_bytes()),
            Err((431, "Request Header Fields Too Large"))
        );
    }

    #[test]
    fn framing_and_keep_alive() {
        for (raw, framing, alive) in [
            ("GET / HTTP/1.1\r\n\r\n", Ok(BodyFraming::Length(0)), true),
            (
                "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                false,
            ),
            (
                "GET / HTTP/1.1\r\nConnection: Upgrade, Close\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                false,
            ),
            ("GET / HTTP/1.0\r\n\r\n", Ok(BodyFraming::Length(0)), false),
            (
                "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                Ok(BodyFraming::Length(0)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
                Ok(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                Err("conflicting Content-Length values"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                Err("invalid Content-Length"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
                Err("invalid Content-Length"),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                Ok(BodyFraming::Chunked),
                true,
            ),
        ] {
            let r = req(raw);
            assert_eq!(body_framing(&r), framing, "{raw:?}");
            assert_eq!(keep_alive(&r), alive, "{raw:?}");
        }
        assert!(req("POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").expects_continue());
        assert!(!req("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expects_continue());
    }

    #[test]
    fn json_negotiation() {
        for (raw, json) in [
            ("GET / HTTP/1.1\r\n\r\n", false),
            ("GET /?format=json HTTP/1.1\r\n\r\n", true),
            ("GET /x?a=1&format=JSON HTTP/1.1\r\n\r\n", true),
            (
                "GET /?format=text HTTP/1.1\r\nAccept: application/json\r\n\r\n",
                false,
            ),
            ("GET / HTTP/1.1\r\nAccept: application/json\r\n\r\n", true),
            (
                "GET / HTTP/1.1\r\nAccept: text/html, application/json;q=0.9\r\n\r\n",
                true,
            ),
            ("GET / HTTP/1.1\r\nAccept: text/plain\r\n\r\n", false),
            ("GET /format=json HTTP/1.1\r\n\r\n", false),
        ] {
            assert_eq!(wants_json(&req(raw)), json, "{raw:?}");
        }
    }

    #[test]
    fn responses() {
        let get = req("GET / HTTP/1.1\r\n\r\n");
        let head = req("HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let r =
            String::from_utf8(response_bytes(200, "OK", "text/plain", "abc", &get, false)).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nabc"
        );
        let r =
            String::from_utf8(response_bytes(200, "OK", "text/plain", "abc", &head, true)).unwrap();
        assert!(
            r.ends_with(
                "Content-Length: 3\r\nCache-Control: no-store\r\nConnection: keep-alive\r\n\r\n"
            ),
            "{r}"
        );
    }

    #[test]
    fn error_answers_close_the_connection() {
        assert_eq!(
            error_response(408, "Request Timeout"),
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 20\r\nConnection: close\r\n\r\n408 Request Timeout\n"
        );
    }
}
