//! Command line: one `Args` struct per subcommand (owned by that subcommand's module), dispatch
//! and exit codes: 0 ok, 1 runtime failure, 64 bad usage (EX_USAGE). Only `main.rs` imports this
//! module; the flag types the subcommands share live in `flags`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::runtime;
use crate::telemetry::{self, LogArgs};

use crate::flags::{UsageError, EXIT_USAGE};

#[derive(Parser, Debug)]
#[command(
    name = "ouroboros",
    version,
    about = "Keeps client IPs intact across a Kubernetes cluster's traffic paths",
    long_about = "Keeps client IPs intact across a Kubernetes cluster's traffic paths.\n\n\
        Every flag can also be set with the environment variable shown in its help; \
        a flag overrides its variable, which overrides the default."
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once at startup
pub enum Command {
    /// Accept TCP, prepend a PROXY-protocol header with the real client address, relay to the ingress controller.
    Proxy(crate::proxy::ProxyArgs),
    /// PROXY-aware HTTP echo server: shows the client address a backend really sees.
    Whoami(crate::whoami::WhoamiArgs),
    /// Print the CoreDNS, hosts-file or external-dns configuration for the hostnames in manifest files, offline.
    #[command(long_about = crate::render::LONG_ABOUT)]
    Render(crate::render::RenderArgs),
    /// Load-balance TCP over a Service's ready endpoints (or static backends), with a PROXY-protocol header.
    Edge(crate::edge::EdgeArgs),
    /// Check a live cluster for the ways client IPs get lost: one OK/WARN/FAIL/SKIP verdict per check, exit 1 on any FAIL.
    Doctor(crate::doctor::DoctorArgs),
    /// Remove what `controller` wrote with the same flags: the Corefile block, the import key, the hosts block or this instance's external-dns objects.
    Cleanup(crate::cleanup::CleanupArgs),
    /// Keep in-cluster DNS for Ingress/Gateway hostnames pointing at the proxy (CoreDNS, hosts file or external-dns).
    Controller(crate::controller::ControllerArgs),
}

/// Entry point behind `main.rs`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS // --help, --version
            };
        }
    };
    if let Err(e) = telemetry::init(&cli.log) {
        eprintln!("error: {e:#}");
        return ExitCode::from(EXIT_USAGE);
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("error: {e:#}\n\nFor more information, try '--help'.");
            ExitCode::from(EXIT_USAGE)
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "exiting");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    // Only the relaying subcommands take runtime flags.
    let default = || runtime::build(0, runtime::BusyPoll::Off);
    match command {
        Command::Proxy(args) => {
            let (rt, loops) = runtime::relay_loops(args.threads, args.busy_poll)?;
            rt.block_on(crate::proxy::run(args, loops))
        }
        Command::Whoami(args) => default()?.block_on(crate::whoami::run(args)),
        Command::Render(args) => crate::render::run(args),
        Command::Edge(args) => {
            let (rt, loops) = runtime::relay_loops(args.threads, args.busy_poll)?;
            rt.block_on(crate::edge::run(args, loops))
        }
        Command::Doctor(args) => default()?.block_on(crate::doctor::run(args)),
        Command::Cleanup(args) => default()?.block_on(crate::cleanup::run(args)),
        // One thread: the controller waits on the API server, and its one CPU-heavy step (the
        // answer rendering) allocates tens of MiB for a moment; on several worker threads each
        // render could land in another malloc arena, and glibc keeps every arena's freed pages
        // (bench/controller/README.md measures it).
        Command::Controller(args) => {
            runtime::build(1, runtime::BusyPoll::Off)?.block_on(crate::controller::run(args))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
