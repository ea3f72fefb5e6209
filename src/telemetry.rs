//! Structured logging: human text by default, one JSON object per line on request.

use clap::{Args, ValueEnum};
use tracing::Level;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logging flags shared by every subcommand, under a heading of their own so that a
/// subcommand's help lists its own options first.
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Global options")]
pub struct LogArgs {
    /// Log format: text or json.
    #[arg(long, env = "OUROBOROS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log level or tracing filter directive (e.g. `info`, `debug`, `ouroboros=debug,warn`).
    #[arg(
        long,
        env = "OUROBOROS_LOG_LEVEL",
        default_value = "info",
        global = true
    )]
    pub log_level: String,
}

/// Why logging could not start.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("invalid --log-level {level:?}: {error}; use e.g. info, debug or ouroboros=debug")]
    Level {
        level: String,
        error: tracing_subscriber::filter::ParseError,
    },
    #[error("installing the log subscriber: {0}")]
    Install(Box<dyn std::error::Error + Send + Sync>),
}

/// Installs the global subscriber. Logs go to stderr so stdout stays clean for `render`.
pub fn init(args: &LogArgs) -> Result<(), LogError> {
    // kube's client logs each failed request at ERROR, once per retry and layer; ours say what
    // failed with the hint for its cause, so the library's are off unless asked for by name.
    let quiet_kube = !args.log_level.contains("kube");
    let directives = if quiet_kube {
        format!("{},kube_client::client::builder=off", args.log_level)
    } else {
        args.log_level.clone()
    };
    let filter = EnvFilter::try_new(&directives).map_err(|error| LogError::Level {
        level: args.log_level.clone(),
        error,
    })?;
    let kept =
        filter_fn(move |m| quiet_kube.then(|| kube_warning(m.target(), *m.level())) != Some(true));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Text => builder.with_ansi(false).finish().with(kept).try_init(),
        LogFormat::Json => {
            crate::hostname::log_names_in_json();
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .finish()
                .with(kept)
                .try_init()
        }
    };
    result.map_err(|e| LogError::Install(e.into()))
}

/// Whether an event is one of kube's client warnings that come back to the caller as the
/// error of the same request (dropped: ours name it with its hint). The one that matters: an
/// error response whose body is not a Status object is warned about before it is returned, and
/// a real API server answers a list of a group it does not serve (a Gateway-API CRD not
/// installed) with a plain-text `404 page not found`, so every retry of that watch logged one
/// while the controller's own message says it once. Only this module's own target: TLS
/// warnings (`kube_client::client::tls`) stay.
///
/// Also kube-lease-manager's `LeaseManager watcher error`, logged at ERROR on each retry of its
/// renewal loop without a word on the cause: through an API-server outage that was one error a
/// few seconds, while the controller's own reads of the Lease (`controller::lease`) report the
/// same failure once per doubling with its hint, and a refused renewal is reported at start by
/// the permission check (`controller::rbac`).
///
/// And kube-runtime's watcher warnings: each is a 403 (`watcher error 403: Api(Status {...})`,
/// a Debug dump) that the watcher also returns, where the controller logs it once per doubling
/// with what to grant.
fn kube_warning(target: &str, level: Level) -> bool {
    match target {
        "kube_client::client" | "kube_runtime::watcher" => level == Level::WARN,
        "kube_lease_manager::manager" => level == Level::ERROR,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_library_lines_the_controller_reports_itself_are_dropped() {
        assert!(kube_warning("kube_client::client", Level::WARN));
        assert!(!kube_warning("kube_client::client", Level::ERROR));
        assert!(!kube_warning("kube_client::client::tls", Level::WARN));
        assert!(!kube_warning("ouroboros::controller::sources", Level::WARN));
        assert!(kube_warning("kube_lease_manager::manager", Level::ERROR));
        assert!(kube_warning("kube_runtime::watcher", Level::WARN));
        assert!(!kube_warning("kube_runtime::watcher", Level::ERROR));
        assert!(!kube_warning("ouroboros::controller::lease", Level::ERROR));
    }
}
