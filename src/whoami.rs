//! `ouroboros whoami` (in progress).

#[derive(clap::Args, Debug)]
pub struct WhoamiArgs {}

pub async fn run(_args: WhoamiArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
