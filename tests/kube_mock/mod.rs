//! kube-rs's mock-service pattern for API-layer tests: a `kube::Client` whose requests are
//! recorded (method, URI with query, JSON body) and answered from a script, in order. Requests
//! past the script are recorded and answered 500, so a test can assert the exact request list.
#![allow(dead_code)]

use std::pin::pin;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tower_test::mock;

/// A `Status` object as the API server sends it with an error.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code
    })
}

#[derive(Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub body: Option<Value>,
    /// The Content-Type and Accept headers (e.g. `application/apply-patch+yaml` for a
    /// server-side apply, a `PartialObjectMetadataList` Accept for a metadata-only list).
    pub content_type: Option<String>,
    pub accept: Option<String>,
}

pub type Reply = Box<dyn FnOnce(&Seen) -> (u16, Value) + Send>;

pub fn reply(code: u16, v: Value) -> Reply {
    Box::new(move |_| (code, v))
}

/// Answers a write with the object it was sent, as the server would (with a new resourceVersion).
pub fn echo(new_rv: &'static str) -> Reply {
    Box::new(move |seen| {
        let mut v = seen.body.clone().expect("write without a body");
        v["metadata"]["resourceVersion"] = json!(new_rv);
        (200, v)
    })
}

pub fn conflict() -> Reply {
    reply(
        409,
        status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on configmaps \"coredns\": the object has been \
             modified; please apply your changes to the latest version and try again",
        ),
    )
}

/// Serves `replies` in order and records every request; requests past the script are recorded
/// and answered 500, so the exact request list can be asserted.
pub fn serve(replies: Vec<Reply>) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    let mut replies = replies.into_iter();
    serve_fn(move |s| match replies.next() {
        Some(r) => r(s),
        None => (500, status(500, "InternalError", "unexpected request")),
    })
}

pub fn calls(seen: &[Seen]) -> Vec<(&str, &str)> {
    seen.iter()
        .map(|s| (s.method.as_str(), s.uri.as_str()))
        .collect()
}

/// A routing mock: `route` answers every request (by method, path and query, in any order) and
/// every request is recorded. For code whose call order is not the point of the test, or whose
/// calls are too many to script one by one.
pub fn serve_fn(
    mut route: impl FnMut(&Seen) -> (u16, Value) + Send + 'static,
) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let task = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let mut seen = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let header = |h: http::header::HeaderName| {
                parts
                    .headers
                    .get(h)
                    .and_then(|v| v.to_str().ok())
                    .map(String::from)
            };
            let s = Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                body: (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap()),
                content_type: header(http::header::CONTENT_TYPE),
                accept: header(http::header::ACCEPT),
            };
            let (code, v) = route(&s);
            seen.push(s);
            let mut resp = Response::new(Body::from(serde_json::to_vec(&v).unwrap()));
            *resp.status_mut() = StatusCode::from_u16(code).unwrap();
            send.send_response(resp);
        }
        seen
    });
    (Client::new(svc, "default"), task)
}

/// A 404 `Status` for `kind` `name`, as the API server sends it.
pub fn not_found(kind: &str, name: &str) -> (u16, Value) {
    (
        404,
        status(404, "NotFound", &format!("{kind} \"{name}\" not found")),
    )
}

/// A client whose API server is gone: every request fails in transport, with no HTTP status.
pub fn unreachable() -> Client {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    drop(handle);
    Client::new(svc, "default")
}
