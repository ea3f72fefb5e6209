//! `ouroboros proxy` (in progress).

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {}

pub async fn run(_args: ProxyArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
