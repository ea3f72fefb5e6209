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
    #[error(
        "no Kubernetes configuration (in-cluster service account or kubeconfig): {0}; pass \
         --kubeconfig"
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
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    Client::try_from(config).map_err(ClientError::Build)
}

/// An API status as `HTTP 500 InternalError: message` rather than kube's Debug dump.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}
