//! The one fake Kubernetes API of the test suite, after kube-rs's mock-service pattern: a
//! `kube::Client` over `tower_test::mock` whose requests are recorded (method, URI with query,
//! JSON body, Content-Type, Accept) and answered from a script ([`serve`]) or by a handler
//! ([`serve_fn`], [`route`]). Requests past a script are recorded and answered 500, so a test can
//! assert the exact request list. [`http`] serves the same handler over plain HTTP for the built
//! binary (reached through the kubeconfig [`HttpApi::kubeconfig`] writes).
//!
//! Used by the library's unit tests (`crate::test_api`) and, through `#[path]`, by the
//! integration tests as `kube_mock`.
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

impl Seen {
    /// The URI without its query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }

    /// Whether this is a watch (`watch=true` in the query).
    pub fn is_watch(&self) -> bool {
        self.uri.contains("watch=true")
    }

    fn of(parts: &http::request::Parts, bytes: &[u8]) -> Self {
        let header = |h: http::header::HeaderName| {
            parts
                .headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            body: (!bytes.is_empty()).then(|| serde_json::from_slice(bytes).unwrap()),
            content_type: header(http::header::CONTENT_TYPE),
            accept: header(http::header::ACCEPT),
        }
    }
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
    serve_fn(script(replies))
}

/// `replies` in order, then 500 for every further request: the handler behind [`serve`], for
/// [`route`] and [`http`] too.
pub fn script(replies: Vec<Reply>) -> impl FnMut(&Seen) -> (u16, Value) + Send + 'static {
    let mut replies = replies.into_iter();
    move |s| match replies.next() {
        Some(r) => r(s),
        None => (500, status(500, "InternalError", "unexpected request")),
    }
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
            let s = Seen::of(&parts, &bytes);
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

/// How [`route`] answers one request.
pub enum Answer {
    Json(u16, Value),
    /// A watch response: one JSON event per line, then the stream ends (the watcher reconnects).
    Events(Vec<Value>),
    /// Never answered until [`Routed::release`] (a watch that stays open).
    Hold,
}

type Held = Vec<(String, tower_test::mock::SendResponse<Response<Body>>)>;

/// A routing mock: answers concurrent requests (watchers list and watch in parallel) by
/// whatever `handler` decides from the method, URI and body, and records every request.
#[derive(Clone)]
pub struct Routed {
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
    held: std::sync::Arc<std::sync::Mutex<Held>>,
}

impl Routed {
    /// (method, uri) of every request so far.
    pub fn calls(&self) -> Vec<(String, String)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| (s.method.clone(), s.uri.clone()))
            .collect()
    }

    /// Requests whose method is `method` and whose URI contains `uri_part`.
    pub fn matching(&self, method: &str, uri_part: &str) -> Vec<(String, Option<Value>)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == method && s.uri.contains(uri_part))
            .map(|s| (s.uri.clone(), s.body.clone()))
            .collect()
    }

    pub fn count(&self, method: &str, uri_part: &str) -> usize {
        self.matching(method, uri_part).len()
    }

    /// Answers the held requests whose URI contains `uri_part` with `events` (one per line);
    /// returns how many were answered.
    pub fn release(&self, uri_part: &str, events: &[Value]) -> usize {
        let mut held = self.held.lock().unwrap();
        let (hit, keep): (Held, Held) = held.drain(..).partition(|(u, _)| u.contains(uri_part));
        *held = keep;
        let n = hit.len();
        for (_, send) in hit {
            send.send_response(lines(events));
        }
        n
    }

    /// Waits up to 5 s for exactly one held watch whose URI contains `uri_part` and answers it
    /// with `event`; panics, listing the calls, when none is held.
    pub async fn deliver(&self, uri_part: &str, event: Value) {
        let events = [event];
        assert!(
            self.wait_for(5, |a| a.release(uri_part, &events) == 1)
                .await,
            "a held watch on {uri_part} to answer {}: {:#?}",
            events[0],
            self.calls()
        );
    }

    /// Waits until `cond` holds (polling every 10 ms), at most `secs` seconds.
    pub async fn wait_for(&self, secs: u64, mut cond: impl FnMut(&Routed) -> bool) -> bool {
        let end = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
        while tokio::time::Instant::now() < end {
            if cond(self) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        cond(self)
    }
}

fn lines(events: &[Value]) -> Response<Body> {
    let mut bytes = Vec::new();
    for e in events {
        bytes.extend(serde_json::to_vec(e).unwrap());
        bytes.push(b'\n');
    }
    Response::new(Body::from(bytes))
}

/// Serves every request through `handler` until the client is dropped.
pub fn route<F>(mut handler: F) -> (Client, Routed)
where
    F: FnMut(&Seen) -> Answer + Send + 'static,
{
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let routed = Routed {
        seen: Default::default(),
        held: Default::default(),
    };
    let r = routed.clone();
    tokio::spawn(async move {
        let mut handle = pin!(handle);
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let s = Seen::of(&parts, &bytes);
            let answer = handler(&s);
            let uri = s.uri.clone();
            r.seen.lock().unwrap().push(s);
            match answer {
                Answer::Json(code, v) => {
                    let mut resp = Response::new(Body::from(serde_json::to_vec(&v).unwrap()));
                    *resp.status_mut() = StatusCode::from_u16(code).unwrap();
                    send.send_response(resp);
                }
                Answer::Events(events) => send.send_response(lines(&events)),
                Answer::Hold => r.held.lock().unwrap().push((uri, send)),
            }
        }
    });
    (Client::new(svc, "default"), routed)
}

/// A list response as the API server sends it.
pub fn list(api_version: &str, kind: &str, rv: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": { "resourceVersion": rv },
        "items": items
    })
}

/// [`route`] over plain HTTP on 127.0.0.1, for the built binary: every request is forwarded to
/// the same in-process mock, so recording, answers, held watches and [`Routed::release`] work as
/// with [`route`]. The server runs on its own runtime and stops when the [`HttpApi`] drops.
pub fn http<F>(handler: F) -> (HttpApi, Routed)
where
    F: FnMut(&Seen) -> Answer + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (client, routed) = {
        let _in = rt.enter();
        route(handler)
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    rt.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let app = axum::Router::new()
            .fallback(move |req: axum::extract::Request| forward(client.clone(), req));
        axum::serve(listener, app).await.unwrap();
    });
    (HttpApi { addr, rt: Some(rt) }, routed)
}

/// A scripted mock ([`script`]) over plain HTTP: see [`http`].
pub fn http_script(replies: Vec<Reply>) -> (HttpApi, Routed) {
    let mut answer = script(replies);
    http(move |s| {
        let (code, v) = answer(s);
        Answer::Json(code, v)
    })
}

async fn forward(client: Client, req: axum::extract::Request) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let req = Request::from_parts(parts, Body::from(bytes.to_vec()));
    let resp = client.send(req).await.expect("the mock answers");
    resp.map(axum::body::Body::new)
}

/// The fake API of [`http`], listening on `addr`.
pub struct HttpApi {
    pub addr: std::net::SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl HttpApi {
    /// Writes a kubeconfig for this server (token auth, namespace `default`) into `dir` and
    /// returns its path.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
                 current-context: fake\nusers:\n- name: fake\n  user:\n    token: test\n",
                self.addr
            ),
        )
        .unwrap();
        p
    }
}

impl Drop for HttpApi {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
