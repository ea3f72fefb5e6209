//! Structured logging: human text by default, one JSON object per line on request.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logging flags shared by every subcommand.
#[derive(Args, Clone, Debug)]
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
    let directives = if args.log_level.contains("kube") {
        args.log_level.clone()
    } else {
        format!("{},kube_client::client::builder=off", args.log_level)
    };
    let filter = EnvFilter::try_new(&directives).map_err(|error| LogError::Level {
        level: args.log_level.clone(),
        error,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(LogError::Install)
}
