//! The caller Pod's side of `doctor client-ip` (`--call HOST`, hidden): asks `http://HOST/`
//! through the pod's resolver (the cluster DNS, so the hairpinned answer) as a client would,
//! retrying until the backend's `whoami` answers, and prints one JSON line: `{"whoami": REPORT}`,
//! or `{"call_error": WHY}` when the time ran out. The request and the reading of the answer
//! are pure; the socket work is [`call`].

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest answer read: whoami's report is a few KiB.
const MAX_ANSWER: u64 = 1024 * 1024;
/// Between attempts: the ingress controller may not have loaded the new Ingress yet.
const RETRY: Duration = Duration::from_secs(1);
/// Each attempt's bound, within the whole call's.
const ATTEMPT: Duration = Duration::from_secs(5);

/// The request: HTTP/1.0, so the answer is never chunked and ends with the connection.
pub fn request(host: &str) -> String {
    format!(
        "GET /?format=json HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n\
         User-Agent: ouroboros-doctor-client-ip\r\n\r\n"
    )
}

/// Whoami's JSON report from an answer, or what the answer was instead.
pub fn report(answer: &[u8]) -> Result<Value, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if answer.is_empty() => {
            return Err("the connection closed without an answer".into())
        }
        Ok(httparse::Status::Partial) => return Err("the answer ended within its head".into()),
        Err(e) => return Err(format!("not an HTTP answer ({e})")),
    };
    let status = resp.code.unwrap_or_default();
    let body = &answer[head_len..];
    if status != 200 {
        let reason = resp.reason.unwrap_or_default();
        return Err(format!(
            "answered {status} {reason}: the Ingress is not (yet) served, or routes elsewhere"
        ));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        "answered 200 but not with whoami's JSON report: the backend is not ouroboros whoami"
            .to_string()
    })?;
    if v.get("remote_addr").is_none() {
        return Err(
            "answered 200 with JSON that is not whoami's report (no remote_addr)".to_string(),
        );
    }
    Ok(v)
}

async fn attempt(host: &str) -> Result<Value, String> {
    let connect = tokio::net::TcpStream::connect((host, 80));
    let mut stream = tokio::time::timeout(ATTEMPT, connect)
        .await
        .map_err(|_| format!("no connection to {host}:80 within {ATTEMPT:?}"))?
        .map_err(|e| format!("connecting to {host}:80: {e}"))?;
    let exchange = async {
        stream.write_all(request(host).as_bytes()).await?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(ATTEMPT, exchange)
        .await
        .map_err(|_| format!("{host}:80 did not answer within {ATTEMPT:?}"))?
        .map_err(|e| format!("asking {host}:80: {e}"))?;
    report(&answer)
}

/// Asks `host` until the backend answers or `timeout` passes; the line to print and whether
/// it is the backend's report.
pub async fn call(host: &str, timeout: Duration) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match tokio::time::timeout_at(deadline, attempt(host)).await {
            Ok(Ok(report)) => return (json!({"whoami": report}).to_string(), true),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer from {host}:80 within {timeout:?}"),
        };
        if tokio::time::Instant::now() + RETRY >= deadline {
            let e = format!("http://{host}/ within {timeout:?}: {last}");
            return (json!({"call_error": e}).to_string(), false);
        }
        tracing::info!(
            host,
            error = last,
            "the backend did not answer yet; retrying"
        );
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_host_and_asks_for_json() {
        assert_eq!(
            request("check.example.com"),
            "GET /?format=json HTTP/1.0\r\nHost: check.example.com\r\nAccept: \
             application/json\r\nUser-Agent: ouroboros-doctor-client-ip\r\n\r\n"
        );
    }

    #[test]
    fn answers() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"remote_addr\": \"10.0.0.1:3\"}";
        assert_eq!(report(ok).unwrap()["remote_addr"], "10.0.0.1:3");
        for (answer, want) in [
            (&b""[..], "the connection closed without an answer"),
            (
                b"HTTP/1.1 200 OK\r\nContent-",
                "the answer ended within its head",
            ),
            (b"SSH-2.0-x\r\n", "not an HTTP answer"),
            (
                b"HTTP/1.1 404 Not Found\r\n\r\ndefault backend",
                "answered 404 Not Found: the Ingress is not (yet) served",
            ),
            (
                b"HTTP/1.1 200 OK\r\n\r\n<html>",
                "answered 200 but not with whoami's JSON",
            ),
            (
                b"HTTP/1.1 200 OK\r\n\r\n{\"a\": 1}",
                "answered 200 with JSON that is not",
            ),
        ] {
            let e = report(answer).unwrap_err();
            assert!(e.starts_with(want), "{answer:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_call_that_never_succeeds_ends_with_an_error_line() {
        // `.invalid` never resolves (RFC 6761); the call's bound ends the wait either way.
        let (line, ok) = call("check.invalid", Duration::from_millis(300)).await;
        assert!(!ok);
        let v: Value = serde_json::from_str(&line).unwrap();
        let e = v["call_error"].as_str().unwrap();
        assert!(
            e.starts_with("http://check.invalid/ within 300ms: "),
            "{line}"
        );
    }
}
