//! The one way every subcommand builds its Kubernetes client.

use std::path::{Path, PathBuf};

use kube::Client;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading --kubeconfig {}: {error}", .path.display())]
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

/// `--kubeconfig` when given, else in-cluster, else $KUBECONFIG or ~/.kube/config.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    let config = match kubeconfig {
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
        None => kube::Config::infer().await.map_err(|e| {
            let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
            match default_kubeconfig() {
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
            }
        })?,
    };
    let from = match kubeconfig {
        Some(path) => format!("--kubeconfig {}", path.display()),
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            "the in-cluster service account".to_string()
        }
        None => "the default kubeconfig".to_string(),
    };
    // One line that says which API server every later error is about.
    tracing::info!(server = %config.cluster_url, from = %from, "Kubernetes API server");
    Client::try_from(config).map_err(ClientError::Build)
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
