//! The one way every subcommand builds its Kubernetes client.

use kube::Client;

/// `--kubeconfig` when given, else in-cluster, else $KUBECONFIG or ~/.kube/config.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("reading --kubeconfig {}: {e}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("loading --kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no Kubernetes configuration (in-cluster service account or kubeconfig): {e}; pass --kubeconfig"
            )
        })?,
    };
    Client::try_from(config).map_err(|e| anyhow::anyhow!("building the Kubernetes client: {e}"))
}

/// An API status as `HTTP 500 InternalError: message` rather than kube's Debug dump.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}
