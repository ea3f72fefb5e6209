//! The one way every subcommand builds its Kubernetes client.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading --kubeconfig {}: {}", .path.display(), read_reason(.error))]
    Read {
        path: PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("loading --kubeconfig {}: {error}", .path.display())]
    Load {
        path: PathBuf,
        error: kube::config::KubeconfigError,
    },
    /// Neither in a cluster nor a kubeconfig file: the usual case on a workstation, said
    /// plainly instead of through kube's nested error text.
    #[error(
        "no Kubernetes configuration: not running in a cluster (KUBERNETES_SERVICE_HOST is \
         unset) and no kubeconfig at {kubeconfig}; pass --kubeconfig or set KUBECONFIG"
    )]
    Missing { kubeconfig: String },
    #[error(
        "no usable Kubernetes configuration (in-cluster service account or kubeconfig): {0}; \
         pass --kubeconfig"
    )]
    Infer(kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(kube::Error),
}

/// Why the file could not be read, without kube's repetition of its (Debug-quoted) path.
fn read_reason(error: &kube::config::KubeconfigError) -> String {
    match error {
        kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

/// The calls a subcommand makes, which decide what `--api-timeout` bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// Requests only (doctor, cleanup): the connection and each response are bounded.
    Requests,
    /// Watches too (controller, edge): only the connection (TCP and TLS) is bounded, since a
    /// watch's response is open for minutes; kube's watcher has an idle timeout of its own.
    Watches,
}

/// `--kubeconfig` when given, else in-cluster, else $KUBECONFIG or ~/.kube/config; `timeout`
/// (`--api-timeout`) bounds what `calls` says. kube's defaults (30 s to connect, no bound on a
/// response) let a server that accepts TCP and never answers keep a command silent for
/// minutes.
pub async fn client(
    kubeconfig: Option<&Path>,
    timeout: Duration,
    calls: Calls,
) -> Result<Client, ClientError> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let mut config = match kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|error| ClientError::Read {
                    path: path.to_path_buf(),
                    error,
                })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|error| ClientError::Load {
                    path: path.to_path_buf(),
                    error,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| match default_kubeconfig() {
                Some(paths) if !in_cluster && !paths.iter().any(|p| p.exists()) => {
                    ClientError::Missing {
                        kubeconfig: paths
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                }
                _ => ClientError::Infer(e),
            })?,
    };
    let from = match kubeconfig {
        Some(path) => format!("--kubeconfig {}", path.display()),
        None if in_cluster => "the in-cluster service account".to_string(),
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(v) => format!("KUBECONFIG={}", v.to_string_lossy()),
            None => default_kubeconfig()
                .and_then(|p| p.into_iter().next())
                .map_or("the default kubeconfig".to_string(), |p| {
                    p.display().to_string()
                }),
        },
    };
    // One line that says which API server every later error is about, and the same words in
    // each connection error's hint, so the line that fails names it too.
    tracing::info!(
        server = %config.cluster_url,
        from = %from,
        timeout = %humantime::format_duration(timeout),
        "Kubernetes API server"
    );
    let _ = SERVER.set(format!("{} (from {from})", config.cluster_url));
    let _ = TIMEOUT.set(timeout);
    config.connect_timeout = Some(timeout);
    if calls == Calls::Requests {
        config.read_timeout = Some(timeout);
    }
    Client::try_from(config).map_err(ClientError::Build)
}

/// `--api-timeout` of the process's client, for the hint of a call that ran out of it.
static TIMEOUT: OnceLock<Duration> = OnceLock::new();

/// The API server [`client`] connected to and where its address came from; a process talks to
/// one API server.
static SERVER: OnceLock<String> = OnceLock::new();

/// `the API server https://10.0.0.1:6443/ (from KUBECONFIG=...)`, or `the API server` before a
/// client was built (tests with a mock client).
fn the_server() -> String {
    match SERVER.get() {
        Some(s) => format!("the API server {s}"),
        None => "the API server".to_string(),
    }
}

/// Where kube looks for a kubeconfig when none is given: each path of $KUBECONFIG, else
/// ~/.kube/config (`None`: no home directory either).
fn default_kubeconfig() -> Option<Vec<PathBuf>> {
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return Some(std::env::split_paths(&list).collect());
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(vec![PathBuf::from(home).join(".kube").join("config")])
}

/// An API status as `HTTP 500 InternalError: message` rather than kube's Debug dump.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// What a failed API call ran into, so each gets the hint that fits it and no other: a refused
/// connection is not an RBAC problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// No connection: refused, reset, no route, name not resolved.
    Unreachable,
    /// No answer in time (`--api-timeout`): the TCP connection, its TLS handshake or the
    /// response never came. A server that accepts and stays silent (a load balancer without a
    /// healthy backend) is not refusing, so it gets its own hint.
    Timeout,
    /// The TLS handshake failed (certificate authority, server name).
    Tls,
    /// 401: the credentials were rejected.
    Unauthorized,
    /// 403: the ServiceAccount lacks the permission.
    Forbidden,
    /// 404: the resource is not served (a CRD not installed) or the object is gone.
    NotFound,
    /// 410 Gone: a watch's resourceVersion is older than the API server still has (etcd
    /// compacted it, or the API server restarted with a fresh watch cache); routine, the
    /// watch lists again.
    Expired,
    Other,
}

impl Cause {
    pub fn of(e: &kube::Error) -> Cause {
        if let kube::Error::Api(s) = e {
            return match s.code {
                401 => Cause::Unauthorized,
                403 => Cause::Forbidden,
                404 => Cause::NotFound,
                410 => Cause::Expired,
                _ => Cause::Other,
            };
        }
        // Transport errors arrive wrapped in a few layers (tower, hyper, the connector): look at
        // every layer for an I/O error, then at the layers' own words.
        let mut layer: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let mut text = String::new();
        while let Some(l) = layer {
            if let Some(io) = l.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                if io.kind() == K::TimedOut {
                    return Cause::Timeout;
                }
                if matches!(
                    io.kind(),
                    K::ConnectionRefused
                        | K::ConnectionReset
                        | K::ConnectionAborted
                        | K::HostUnreachable
                        | K::NetworkUnreachable
                        | K::AddrNotAvailable
                ) {
                    return Cause::Unreachable;
                }
            }
            text.push_str(&l.to_string().to_ascii_lowercase());
            text.push('\n');
            layer = l.source();
        }
        // Certificate trouble only: a peer that closes during the handshake ("tls handshake
        // eof") is a connection problem, not a trust one.
        if text.contains("certificate") || text.contains("alert") {
            Cause::Tls
        } else if text.contains("timed out") || text.contains("deadline has elapsed") {
            Cause::Timeout
        } else if text.contains("connect") || text.contains("dns error") {
            Cause::Unreachable
        } else {
            Cause::Other
        }
    }

    /// The cause of a watch failure.
    pub fn of_watch(e: &kube::runtime::watcher::Error) -> Cause {
        use kube::runtime::watcher::Error as W;
        match e {
            W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => Cause::of(e),
            W::WatchError(s) => Cause::of(&kube::Error::Api(s.clone())),
            _ => Cause::Other,
        }
    }

    /// The hint for this cause; `permissions` (what to grant) is used only for 403.
    pub fn hint(self, permissions: &str) -> String {
        match self {
            Cause::Unreachable => format!(
                "{} is unreachable; check the address and the network path to it",
                the_server()
            ),
            Cause::Timeout => {
                format!(
                    "{} did not answer within {} (--api-timeout): the connection, its TLS \
                 handshake or the response never came; check that this is the API server's \
                 address (a load balancer without a healthy backend accepts connections and \
                 stays silent) and the network path to it",
                    the_server(),
                    TIMEOUT.get().map_or("the timeout".to_string(), |t| {
                        humantime::format_duration(*t).to_string()
                    })
                )
            }
            Cause::Tls => format!(
                "TLS with {} failed; check the kubeconfig's certificate authority and server name",
                the_server()
            ),
            Cause::Unauthorized => format!(
                "{} rejected the credentials (401); renew the token or kubeconfig",
                the_server()
            ),
            Cause::Forbidden => format!("forbidden (403); {permissions}"),
            Cause::NotFound => "not found (404)".to_string(),
            Cause::Expired => "its resourceVersion is too old (410 Gone): etcd compacted it or \
                               the API server restarted; listing again"
                .to_string(),
            Cause::Other => "unexpected API error".to_string(),
        }
    }

    /// The hint for this cause in a call that has succeeded before with the same rights.
    /// A real kube-apiserver that has just started answers 403 (`RBAC: [clusterrole ... not
    /// found]`) until its authorizer has loaded the RBAC objects, so a refusal of what was
    /// allowed a moment ago is most likely that, and is said so before `permissions`.
    pub fn hint_after_success(self, permissions: &str) -> String {
        match self {
            Cause::Forbidden => format!(
                "forbidden (403), though it was allowed before: an API server that has just \
                 started refuses until it has loaded the RBAC rules; if it persists, \
                 {permissions}"
            ),
            other => other.hint(permissions),
        }
    }
}

/// Keeps a failure that repeats every retry from flooding the log: it is logged the first time,
/// then at the 2nd, 4th, 8th... consecutive occurrence (once per doubling, like the backoff),
/// and at once when its cause changes. `reset` after a success.
///
/// A failure of the API server as a whole (unreachable, silent, TLS, credentials) hits every
/// watch and the Lease alike; it is said once per step for the whole process: the first part
/// to reach a step logs it, the others stay quiet for that step.
#[derive(Debug)]
pub struct Repeats {
    count: u64,
    last: Option<Cause>,
    server_wide: &'static SaidStep,
}

/// The last step of a server-wide failure some part logged.
type SaidStep = std::sync::Mutex<Option<(Cause, u64)>>;

/// Shared by every [`Repeats`] of the process: one process talks to one API server.
static SERVER_WIDE: SaidStep = std::sync::Mutex::new(None);

impl Default for Repeats {
    fn default() -> Self {
        Repeats {
            count: 0,
            last: None,
            server_wide: &SERVER_WIDE,
        }
    }
}

impl Cause {
    /// Whether every call fails alike, so one line says it for all.
    fn is_server_wide(self) -> bool {
        matches!(
            self,
            Cause::Unreachable | Cause::Timeout | Cause::Tls | Cause::Unauthorized
        )
    }
}

impl Repeats {
    /// Counts one failure; `Some(n)` (the consecutive count) when it is to be logged.
    pub fn failed(&mut self, cause: Cause) -> Option<u64> {
        if self.last != Some(cause) {
            self.last = Some(cause);
            self.count = 0;
        }
        self.count += 1;
        let step = self.count.is_power_of_two().then_some(self.count)?;
        if !cause.is_server_wide() {
            return Some(step);
        }
        let mut said = self.server_wide.lock().unwrap_or_else(|e| e.into_inner());
        match *said {
            Some((c, n)) if c == cause && n >= step => None,
            _ => {
                *said = Some((cause, step));
                Some(step)
            }
        }
    }

    /// A call succeeded: its failures start over, and so does the server-wide count (the
    /// server answers again).
    pub fn reset(&mut self) {
        if self.last.is_some_and(Cause::is_server_wide) {
            *self.server_wide.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        self.count = 0;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn causes() {
        assert_eq!(Cause::of(&api(401)), Cause::Unauthorized);
        assert_eq!(Cause::of(&api(403)), Cause::Forbidden);
        assert_eq!(Cause::of(&api(404)), Cause::NotFound);
        assert_eq!(Cause::of(&api(410)), Cause::Expired);
        assert_eq!(Cause::of(&api(500)), Cause::Other);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            Cause::of(&kube::Error::Service(Box::new(refused))),
            Cause::Unreachable
        );
        let silent = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            Cause::of(&kube::Error::Service(Box::new(silent))),
            Cause::Timeout
        );
        assert!(Cause::Timeout.hint("").contains("did not answer within"));
        let tls = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        assert_eq!(Cause::of(&kube::Error::Service(Box::new(tls))), Cause::Tls);
        assert!(Cause::Forbidden.hint("grant list").contains("grant list"));
        assert!(!Cause::Unreachable.hint("grant list").contains("grant"));
        let again = Cause::Forbidden.hint_after_success("grant list");
        assert!(
            again.contains("just started") && again.ends_with("grant list"),
            "{again}"
        );
        assert_eq!(
            Cause::Unreachable.hint_after_success("grant list"),
            Cause::Unreachable.hint("grant list")
        );
    }

    /// Repeats sharing a server-wide count of their own, apart from other tests'.
    fn sharing(n: usize) -> Vec<Repeats> {
        let server_wide: &'static SaidStep = Box::leak(Box::default());
        (0..n)
            .map(|_| Repeats {
                server_wide,
                ..Repeats::default()
            })
            .collect()
    }

    #[test]
    fn repeats_are_logged_once_per_doubling() {
        let mut r = sharing(1).remove(0);
        let logged: Vec<u64> = (0..20).filter_map(|_| r.failed(Cause::Forbidden)).collect();
        assert_eq!(logged, [1, 2, 4, 8, 16]);
        assert_eq!(
            r.failed(Cause::Unreachable),
            Some(1),
            "a new cause is logged at once"
        );
        r.reset();
        assert_eq!(r.failed(Cause::Unreachable), Some(1));
    }

    /// Four parts retrying in step against an unreachable server: one line per step in all,
    /// while a per-call cause (403) is still said by each part.
    #[test]
    fn a_server_wide_failure_is_said_once_per_step_for_all_parts() {
        let mut parts = sharing(4);
        let mut lines = Vec::new();
        for _ in 0..8 {
            for (i, p) in parts.iter_mut().enumerate() {
                if let Some(n) = p.failed(Cause::Unreachable) {
                    lines.push((i, n));
                }
            }
        }
        assert_eq!(lines, [(0, 1), (0, 2), (0, 4), (0, 8)]);

        // The server answers again (one part succeeds): the next outage is said at once.
        parts[1].reset();
        assert_eq!(parts[1].failed(Cause::Unreachable), Some(1));
        assert_eq!(parts[2].failed(Cause::Forbidden), Some(1));
        assert_eq!(parts[3].failed(Cause::Forbidden), Some(1));
    }
}
