//! Command line: one `Args` struct per subcommand (owned by that subcommand's module), dispatch
//! and exit codes: 0 ok, 1 runtime failure, 64 bad usage (EX_USAGE). Only `main.rs` imports this
//! module; the flag types the subcommands share live in `flags`.

use std::collections::BTreeSet;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::runtime;
use crate::telemetry::{self, LogArgs};
use crate::variables;

use crate::flags::{UsageError, EXIT_USAGE};

#[derive(Parser, Debug)]
#[command(
    name = "ouroboros",
    version,
    about = "Keeps client IPs intact across a Kubernetes cluster's traffic paths",
    long_about = "Keeps client IPs intact across a Kubernetes cluster's traffic paths.\n\n\
        Every flag can also be set with the environment variable shown in its help; \
        a flag overrides its variable, which overrides the default.",
    // Every flag's variable by one rule (see `variables`): the derives' `env` names are the
    // old ones, still read as aliases.
    mut_subcommands = crate::variables::name_variables,
    mut_subcommands = short_help
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
    /// Keep in-cluster DNS for Ingress/Gateway hostnames pointing at the proxy (CoreDNS, hosts file or external-dns).
    Controller(crate::controller::ControllerArgs),
    /// Print the CoreDNS, hosts-file or external-dns configuration for the hostnames in manifest files, offline.
    #[command(long_about = crate::render::LONG_ABOUT)]
    Render(crate::render::RenderArgs),
    /// PROXY-aware HTTP echo server: shows the client address a backend really sees.
    Whoami(crate::whoami::WhoamiArgs),
    /// Load-balance TCP over a Service's ready endpoints (or static backends), with a PROXY-protocol header.
    Edge(crate::edge::EdgeArgs),
    /// Check a live cluster for the ways client IPs get lost: one OK/WARN/FAIL/SKIP verdict per check, exit 1 on any FAIL.
    Doctor(crate::doctor::DoctorArgs),
    /// Remove what `controller` wrote with the same flags: the Corefile block, the import key, the hosts block or this instance's external-dns objects.
    Cleanup(crate::cleanup::CleanupArgs),
}

/// `-h` is a summary, `--help` everything: each flag's help is cut to its first sentence (and
/// the `[default: ...]` its text gives), the whole text staying its long help. Most flags'
/// doc comments are one paragraph, which clap shows whole under `-h` too: `controller -h`
/// was as long as `--help`, one line per flag of up to 600 characters.
fn short_help(cmd: clap::Command) -> clap::Command {
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = cmd.mut_args(|arg| {
        if arg.get_long_help().is_some() {
            return arg;
        }
        let Some(help) = arg.get_help().map(ToString::to_string) else {
            return arg;
        };
        match first_sentence(&help) {
            Some(short) => arg.help(short).long_help(help),
            None => arg,
        }
    });
    for sub in subs {
        cmd = cmd.mut_subcommand(&sub, short_help);
    }
    cmd
}

/// The first clause of a flag's help without its parentheses, with the `[default: ...]` the
/// rest gives, or `None` when that is the whole help. A clause ends at a period or semicolon
/// before a space, not in `e.g.` or `i.e.`, nor inside parentheses, brackets or backticks.
fn first_sentence(help: &str) -> Option<String> {
    // Where the first clause ends.
    let (mut depth, mut code, mut end) = (0i32, false, help.len());
    for (i, c) in help.char_indices() {
        match c {
            '`' => code = !code,
            '(' | '[' if !code => depth += 1,
            ')' | ']' if !code => depth -= 1,
            '.' | ';' if depth == 0 && !code && help[i + 1..].starts_with(' ') => {
                let before = &help[..i];
                if !(before.ends_with("e.g") || before.ends_with("i.e")) {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
    }
    // That clause without its parentheses (the brackets, `[default: ...]`, stay).
    let (mut depth, mut code, mut short) = (0i32, false, String::new());
    for c in help[..end].chars() {
        match c {
            '`' => code = !code,
            '(' if !code => depth += 1,
            ')' if !code && depth > 0 => {
                depth -= 1;
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            short.push(c);
        }
    }
    let mut short = short.split_whitespace().collect::<Vec<_>>().join(" ");
    short = short.replace(" ,", ",").replace(" :", ":");
    if let Some(at) = help[end..].find("[default: ") {
        let default = &help[end + at..];
        let close = default.find(']').map_or(default.len(), |e| e + 1);
        short = format!("{short} {}", &default[..close]);
    }
    let short = short.trim_end_matches('.').to_string();
    (short != help.trim_end_matches('.')).then_some(short)
}

/// The command line as parsed: `Cli`'s, with every command's usage line fixed to the one its
/// `--help` prints. clap's usage after a usage error lists the flags that were given as if they
/// were required (`render etc-hosts --hosts-file <FILE> --proxy-ip <IP> --target <SPEC> ...`
/// when only `--hosts-file` is), which reads as three required flags.
///
/// `read_old`: the flags whose variable is read under its old name (`variables::read_old`).
fn command(read_old: &[&variables::Rename]) -> clap::Command {
    use clap::CommandFactory;
    fn fix(cmd: &mut clap::Command) {
        let usage = cmd.render_usage().to_string();
        let line = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_owned();
        *cmd = std::mem::take(cmd).override_usage(line);
        for sub in cmd.get_subcommands_mut() {
            fix(sub);
        }
    }
    let mut cmd = variables::read_old(Cli::command(), read_old);
    cmd.build();
    fix(&mut cmd);
    cmd
}

/// The subcommands as their derives declare them, before `variables::name_variables`: the
/// `env` names written there, which are the variables' old names where the rule differs.
fn declared() -> clap::Command {
    <Command as Subcommand>::augment_subcommands(clap::Command::new("ouroboros"))
}

/// The old names of the variables of the command `argv` runs that are set, each once, and
/// those of them to read (their new name is not set).
fn old_names_set(
    argv: &[String],
    is_set: impl Fn(&str) -> bool,
) -> (Vec<variables::Rename>, Vec<variables::Rename>) {
    use clap::CommandFactory;
    let renames = variables::renames(&declared(), &Cli::command());
    let path = invoked_path(&Cli::command(), argv);
    let set: Vec<variables::Rename> = variables::in_use(&renames, &path, &is_set)
        .into_iter()
        .cloned()
        .collect();
    let read = set.iter().filter(|r| !is_set(&r.new)).cloned().collect();
    (set, read)
}

/// Warns once per old variable name that is set (several flags of a command may share one:
/// `doctor client-ip` reads `doctor`'s `--kubeconfig` too).
fn warn_old_names(set: &[variables::Rename]) {
    let mut warned = BTreeSet::new();
    for r in set {
        if !warned.insert(r.old.as_str()) {
            continue;
        }
        if std::env::var_os(&r.new).is_some() {
            tracing::warn!(
                variable = r.old,
                instead = r.new,
                "a variable's old name is set beside its new one, which wins: unset the old one"
            );
        } else {
            tracing::warn!(
                variable = r.old,
                instead = r.new,
                "a variable's old name is set: it is still read, but set the one named `instead`"
            );
        }
    }
}

/// The subcommands `argv` runs, from the top (`["doctor", "client-ip"]`).
fn invoked_path(cli: &clap::Command, argv: &[String]) -> Vec<String> {
    let mut path: Vec<String> = Vec::new();
    let mut cmd = cli;
    for a in argv.iter().skip(1) {
        if let Some(sub) = cmd.find_subcommand(a.as_str()) {
            path.push(sub.get_name().to_string());
            cmd = sub;
        }
    }
    path
}

/// Entry point behind `main.rs`.
pub fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let (old_set, old_read) = old_names_set(&argv, |k| std::env::var_os(k).is_some());
    let old_read: Vec<&variables::Rename> = old_read.iter().collect();
    let from_env = || {
        env_sourced(&command(&old_read), &argv, |k| {
            std::env::var_os(k).is_some()
        })
    };
    let parsed = command(&old_read)
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let message = name_the_variable(&e.render().to_string(), &from_env());
            eprint!("{message}");
            // `doctor --output json` promises JSON on stdout however it ends.
            let output = std::env::var("OUROBOROS_DOCTOR_OUTPUT").ok();
            if doctor_json(&argv, output.as_deref()) {
                let first = message.lines().next().unwrap_or_default();
                let error = first.strip_prefix("error: ").unwrap_or(first);
                println!("{}", crate::doctor::report::json_failure(error, EXIT_USAGE));
            }
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            let _ = e.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
    };
    if let Err(e) = telemetry::init(&cli.log) {
        eprintln!("error: {e:#}");
        return ExitCode::from(EXIT_USAGE);
    }
    warn_unread_variables();
    warn_old_names(&old_set);
    // A one-shot command run by hand ends with a plain `error:` line, as its usage errors do;
    // the long-running ones (and any asked for JSON logs) end with a structured log line.
    let plain = cli.log.log_format == telemetry::LogFormat::Text
        && matches!(
            cli.command,
            Command::Render(_) | Command::Doctor(_) | Command::Cleanup(_)
        );
    match run(cli.command) {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("error: {e:#}{}", env_note(&from_env()));
            eprintln!("\nFor more information, try '--help'.");
            ExitCode::from(EXIT_USAGE)
        }
        Err(e) if plain => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "exiting");
            ExitCode::FAILURE
        }
    }
}

/// The flags of the invoked subcommand (and the global ones) whose value comes from their
/// environment variable: the variable is set (`is_set`) and the flag is not on `argv`. Returned
/// as (flag as clap names it in errors, variable).
fn env_sourced(
    cli: &clap::Command,
    argv: &[String],
    is_set: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    // The invoked subcommand's path (`render etc-hosts`): each level's flags count.
    let mut path = vec![cli];
    for a in argv.iter().skip(1) {
        if let Some(sub) = path.last().and_then(|c| c.find_subcommand(a.as_str())) {
            path.push(sub);
        }
    }
    let on_argv = |long: &str| {
        let flag = format!("--{long}");
        argv.iter()
            .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
    };
    path.into_iter()
        .flat_map(clap::Command::get_arguments)
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let var = arg.get_env()?.to_str()?;
            (is_set(var) && !on_argv(long)).then(|| (long.to_string(), var.to_string()))
        })
        .collect()
}

/// A clap error about a flag the user never typed names the variable that set it: clap quotes
/// the flag as `'--proxy-ip <IP>'` (or `'--proxy-ip'`), which here becomes
/// `OUROBOROS_CONTROLLER_PROXY_IP (the variable of '--proxy-ip <IP>')`.
fn name_the_variable(message: &str, from_env: &[(String, String)]) -> String {
    let mut out = message.to_string();
    for (long, var) in from_env {
        for quoted in [format!("'--{long} <"), format!("'--{long}'")] {
            if let Some(start) = out.find(&quoted) {
                let end = start + 1 + out[start + 1..].find('\'').unwrap_or(0) + 1;
                let flag = out[start..end].to_string();
                out.replace_range(start..end, &format!("{var} (the variable of {flag})"));
                return out;
            }
        }
    }
    out
}

/// Whether `argv` runs doctor with JSON output: `--output json`, `--output=json`, or no
/// `--output` and `variable` (OUROBOROS_DOCTOR_OUTPUT) `json`. Read from the raw arguments,
/// since clap refused them.
fn doctor_json(argv: &[String], variable: Option<&str>) -> bool {
    let mut words = argv.iter().skip(1).filter(|a| !a.starts_with('-'));
    // The subcommand is the first word that is not a flag or a global flag's value.
    if !words.any(|w| w == "doctor") {
        return false;
    }
    let mut flag = None;
    for (i, a) in argv.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--output=") {
            flag = Some(v);
        } else if a == "--output" {
            flag = argv.get(i + 1).map(String::as_str);
        }
    }
    flag.or(variable) == Some("json")
}

/// Logs each set `OUROBOROS_*` variable that nothing reads (see [`unread_variables`]).
fn warn_unread_variables() {
    use clap::CommandFactory;
    let set = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    for (variable, instead) in unread_variables(&Cli::command(), set) {
        match instead {
            Some(instead) => tracing::warn!(
                variable,
                instead,
                "an OUROBOROS_ variable nothing reads is set: set the one named `instead`"
            ),
            None => tracing::warn!(
                variable,
                "an OUROBOROS_ variable nothing reads is set (a typo, or a flag's old name?)"
            ),
        }
    }
}

/// Variables of the test and benchmark tooling, which the binary does not read either.
const TOOLING_VARIABLES: [&str; 4] = [
    "OUROBOROS_BIN",
    "OUROBOROS_PEERS_CACHE",
    "OUROBOROS_PEERS_DIR",
    "OUROBOROS_WRITE_FIXTURES",
];

/// The `OUROBOROS_*` variables in `set` that no flag of any subcommand reads (a typo, or the
/// reference tool's name, such as `OUROBOROS_CONTROLLER_LOG_LEVEL`), each with the variable
/// that reads what it seems to mean: the one whose name it ends with (`..._LOG_LEVEL` for
/// `OUROBOROS_LOG_LEVEL`), if exactly one does.
fn unread_variables(
    cli: &clap::Command,
    set: impl Iterator<Item = String>,
) -> Vec<(String, Option<String>)> {
    fn known(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        out.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_env()?.to_str().map(String::from)),
        );
        for sub in cmd.get_subcommands() {
            known(sub, out);
        }
    }
    let mut read = BTreeSet::new();
    known(cli, &mut read);
    read.extend(
        variables::renames(&declared(), cli)
            .into_iter()
            .map(|r| r.old),
    );
    let mut unread: Vec<String> = set
        .filter(|v| v.starts_with("OUROBOROS_"))
        .filter(|v| !read.contains(v) && !TOOLING_VARIABLES.contains(&v.as_str()))
        .collect();
    unread.sort();
    unread
        .into_iter()
        .map(|v| {
            let mut like = read.iter().filter(|r| {
                let tail = &r["OUROBOROS".len()..]; // `_LOG_LEVEL`
                v.ends_with(tail)
            });
            let instead = match (like.next(), like.next()) {
                (Some(one), None) => Some(one.clone()),
                _ => None,
            };
            (v, instead)
        })
        .collect()
}

/// Our own usage errors name flags; when some came from the environment, say which.
fn env_note(from_env: &[(String, String)]) -> String {
    if from_env.is_empty() {
        return String::new();
    }
    let list: Vec<String> = from_env
        .iter()
        .map(|(long, var)| format!("{var} (--{long})"))
        .collect();
    format!("\n\nnote: set by the environment: {}", list.join(", "))
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    // Only the relaying subcommands take runtime flags.
    let default = || runtime::build(0, runtime::BusyPoll::Off);
    match command {
        Command::Proxy(args) => {
            let (rt, loops) = runtime::relay_loops(args.threads, args.busy_poll)?;
            runtime::run_then_leave(rt, crate::proxy::run(args, loops))
        }
        Command::Whoami(args) => default()?.block_on(crate::whoami::run(args)),
        Command::Render(args) => crate::render::run(args),
        Command::Edge(args) => {
            let (rt, loops) = runtime::relay_loops(args.threads, args.busy_poll)?;
            runtime::run_then_leave(rt, crate::edge::run(args, loops))
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
        command(&[]).debug_assert();
    }

    /// After a missing required flag, the usage line is the command's own, not one that lists
    /// the flags given as if they were required.
    #[test]
    fn a_usage_error_shows_the_commands_usage() {
        let argv = [
            "ouroboros",
            "render",
            "etc-hosts",
            "--proxy-ip",
            "10.0.0.1",
            "--log-format",
            "json",
            "a.yaml",
        ];
        let e = command(&[]).try_get_matches_from(argv).unwrap_err();
        let text = e.render().to_string();
        let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert_eq!(
            usage, "Usage: ouroboros render etc-hosts [OPTIONS] --hosts-file <FILE> [MANIFEST]...",
            "{text}"
        );
        let help = command(&[])
            .try_get_matches_from(["ouroboros", "render", "etc-hosts", "--help"])
            .unwrap_err()
            .render()
            .to_string();
        assert!(help.contains(usage), "{help}");
    }

    /// Every boolean flag, in every subcommand, takes the three spellings users of the
    /// reference tool type: `--flag`, `--flag=true` and `--flag=false`.
    #[test]
    fn every_boolean_flag_takes_flag_and_flag_equals_bool() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &mut Vec<String>, bad: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                let boolean = arg.get_value_parser().type_id()
                    == clap::value_parser!(bool).type_id()
                    || matches!(
                        arg.get_action(),
                        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
                    );
                if !boolean || ["help", "version"].contains(&long) {
                    continue;
                }
                for (spelling, want) in [
                    (format!("--{long}"), true),
                    (format!("--{long}=true"), true),
                    (format!("--{long}=false"), false),
                ] {
                    let argv = std::iter::once("ouroboros".to_string())
                        .chain(path.iter().cloned())
                        .chain([spelling.clone()]);
                    let got = Cli::command()
                        .ignore_errors(true)
                        .try_get_matches_from(argv)
                        .ok()
                        .and_then(|m| {
                            let mut m = &m;
                            for p in path.iter() {
                                m = m.subcommand_matches(p)?;
                            }
                            let id = arg.get_id().as_str();
                            // A spelling refused (ignore_errors keeps the default) is no answer.
                            (m.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
                                .then(|| m.get_one::<bool>(id).copied())
                                .flatten()
                        });
                    if got != Some(want) {
                        bad.push(format!("ouroboros {} {spelling}: {got:?}", path.join(" ")));
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, bad);
                path.pop();
            }
        }
        let mut bad = Vec::new();
        walk(&Cli::command(), &mut Vec::new(), &mut bad);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn variables_nothing_reads_are_named_with_the_one_meant() {
        use clap::CommandFactory;
        let set = [
            "OUROBOROS_CONTROLLER_LOG_LEVEL",
            "OUROBOROS_PROXY_LOG_FORMAT",
            "OUROBOROS_CONTROLLER_MODE",
            "OUROBOROS_CONTROLER_MODE",
            "OUROBOROS_NOTHING_LIKE_IT",
            "OUROBOROS_PEERS_DIR",
            "HOME",
        ]
        .map(String::from);
        let got = unread_variables(&Cli::command(), set.into_iter());
        let want: Vec<(String, Option<String>)> = [
            // A typo is named, not guessed.
            ("OUROBOROS_CONTROLER_MODE", None),
            (
                "OUROBOROS_CONTROLLER_LOG_LEVEL",
                Some("OUROBOROS_LOG_LEVEL"),
            ),
            ("OUROBOROS_NOTHING_LIKE_IT", None),
            ("OUROBOROS_PROXY_LOG_FORMAT", Some("OUROBOROS_LOG_FORMAT")),
        ]
        .into_iter()
        .map(|(v, i)| (v.to_string(), i.map(String::from)))
        .collect();
        assert_eq!(got, want);
    }

    /// Every flag of every subcommand reads `OUROBOROS_<COMMAND>_<FLAG>`: doctor, cleanup and
    /// render read their own, not the controller's; the probe's flags carry the command's name.
    #[test]
    fn every_flag_reads_its_commands_variable() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, prefix: &str, bad: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if ["help", "version"].contains(&long) {
                    continue;
                }
                let want = variables::variable(prefix, long);
                let got = arg.get_env().and_then(|e| e.to_str());
                if got != Some(want.as_str()) {
                    bad.push(format!("{prefix} --{long}: {got:?}, not {want}"));
                }
            }
            for sub in cmd.get_subcommands() {
                // `render`'s subcommands are its output forms, `doctor client-ip` a command.
                let prefix = match cmd.get_name() {
                    "render" => prefix.to_string(),
                    _ => variables::variable(prefix, sub.get_name()),
                };
                walk(sub, &prefix, bad);
            }
        }
        let mut bad = Vec::new();
        for sub in Cli::command().get_subcommands() {
            walk(
                sub,
                &variables::variable("OUROBOROS", sub.get_name()),
                &mut bad,
            );
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        // What was renamed is still read under its old name, for that command only.
        let renames = variables::renames(&declared(), &Cli::command());
        let old_of = |path: &[&str], new: &str| {
            renames
                .iter()
                .find(|r| r.path == path && r.new == new)
                .map(|r| r.old.as_str())
        };
        for (path, new, old) in [
            (
                &["doctor"][..],
                "OUROBOROS_DOCTOR_MODE",
                Some("OUROBOROS_CONTROLLER_MODE"),
            ),
            (
                &["cleanup"],
                "OUROBOROS_CLEANUP_DRY_RUN",
                Some("OUROBOROS_CONTROLLER_DRY_RUN"),
            ),
            (
                &["controller"],
                "OUROBOROS_CONTROLLER_PROBE_TIMEOUT",
                Some("OUROBOROS_PROBE_TIMEOUT"),
            ),
            (
                &["render", "coredns"],
                "OUROBOROS_RENDER_PROXY_IP",
                Some("OUROBOROS_CONTROLLER_PROXY_IP"),
            ),
            (&["controller"], "OUROBOROS_CONTROLLER_MODE", None),
            (&["render", "coredns"], "OUROBOROS_RENDER_COREFILE", None),
        ] {
            assert_eq!(old_of(path, new), old, "{path:?} {new}");
        }
    }

    #[test]
    fn the_short_help_is_the_first_sentence() {
        for (help, want) in [
            ("One sentence only", None),
            ("Kubeconfig file [default: a. b]", None),
            ("First. Second.", Some("First")),
            ("First; second", Some("First")),
            (
                "Use e.g. `a. b` (see x. y) here. More text [default: 5s].",
                Some("Use e.g. `a. b` here [default: 5s]"),
            ),
            (
                "Kubeconfig (a file) [default: x]",
                Some("Kubeconfig [default: x]"),
            ),
        ] {
            assert_eq!(first_sentence(help).as_deref(), want, "{help}");
        }
    }

    /// `controller -h` is a summary, one short line per flag; `--help` keeps every word.
    #[test]
    fn dash_h_is_a_summary_and_dash_dash_help_the_whole_text() {
        let render = |flag: &str| {
            command(&[])
                .try_get_matches_from(["ouroboros", "controller", flag])
                .unwrap_err()
                .render()
                .to_string()
        };
        let (short, long) = (render("-h"), render("--help"));
        assert!(!short.contains("docs/coredns-answers.md"), "{short}");
        assert!(long.contains("docs/coredns-answers.md"), "{long}");
        // Every flag of every command: its `-h` text is one clause, its `--help` text whole.
        let mut too_long = Vec::new();
        each_arg(&command(&[]), &mut |cmd, arg| {
            let short = arg.get_help().map(ToString::to_string).unwrap_or_default();
            if short.len() > 300 {
                too_long.push(format!(
                    "{} --{:?}: {short}",
                    cmd.get_name(),
                    arg.get_long()
                ));
            }
        });
        assert!(too_long.is_empty(), "{}", too_long.join("\n"));
    }

    /// `f(command, argument)` for every argument of `cmd` and of its subcommands, at any depth.
    fn each_arg(cmd: &clap::Command, f: &mut dyn FnMut(&clap::Command, &clap::Arg)) {
        for arg in cmd.get_arguments() {
            f(cmd, arg);
        }
        for sub in cmd.get_subcommands() {
            each_arg(sub, f);
        }
    }

    /// The text `--help` shows for `arg`.
    fn full_help(arg: &clap::Arg) -> String {
        arg.get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default()
    }

    /// A flag shared with the controller reads right in cleanup, doctor and render: no help there
    /// speaks of publishing or of syncs, which only the controller does.
    #[test]
    fn shared_flags_help_fits_every_command() {
        use clap::CommandFactory;
        let mut bad = Vec::new();
        let cli = Cli::command();
        for name in ["cleanup", "doctor", "render"] {
            each_arg(cli.find_subcommand(name).unwrap(), &mut |cmd, arg| {
                let help = full_help(arg);
                for phrase in ["Where to publish", "each sync would"] {
                    if help.contains(phrase) {
                        bad.push(format!("{} --{:?}: {help}", cmd.get_name(), arg.get_long()));
                    }
                }
            });
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// A help that names some of its flag's values in backticks names them all (the help of
    /// `--coredns-answer` left out `view`).
    #[test]
    fn a_help_naming_values_names_every_value() {
        use clap::CommandFactory;
        let mut bad = Vec::new();
        each_arg(&Cli::command(), &mut |cmd, arg| {
            let help = full_help(arg);
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            let named = values.iter().filter(|v| help.contains(v.as_str())).count();
            if named > 0 && named < values.len() {
                bad.push(format!(
                    "{} --{:?}: {values:?} in {help}",
                    cmd.get_name(),
                    arg.get_long()
                ));
            }
        });
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Each old name set is warned about once per run, and read only when its new name is not set.
    #[test]
    fn old_names_set_are_read_unless_the_new_one_is() {
        let argv = |a: &str| -> Vec<String> { a.split(' ').map(String::from).collect() };
        let set = [
            "OUROBOROS_CONTROLLER_KUBECONFIG",
            "OUROBOROS_CONTROLLER_MODE",
            "OUROBOROS_DOCTOR_MODE",
        ];
        let (warned, read) = old_names_set(&argv("ouroboros doctor client-ip --host x"), |k| {
            set.contains(&k)
        });
        let olds =
            |v: &[variables::Rename]| v.iter().map(|r| r.old.clone()).collect::<BTreeSet<_>>();
        assert_eq!(
            olds(&warned),
            BTreeSet::from([
                "OUROBOROS_CONTROLLER_KUBECONFIG".to_string(),
                "OUROBOROS_CONTROLLER_MODE".into()
            ])
        );
        assert_eq!(
            olds(&read),
            BTreeSet::from(["OUROBOROS_CONTROLLER_KUBECONFIG".to_string()])
        );
        let (warned, _) = old_names_set(&argv("ouroboros controller"), |k| set.contains(&k));
        assert!(warned.is_empty(), "{warned:?}");
    }

    #[test]
    fn doctor_json_is_read_from_the_raw_arguments() {
        let argv = |a: &str| -> Vec<String> { a.split(' ').map(String::from).collect() };
        for (args, variable, want) in [
            ("ouroboros doctor --output json --bogus", None, true),
            ("ouroboros doctor --bogus --output=json", None, true),
            ("ouroboros doctor --bogus", Some("json"), true),
            (
                "ouroboros doctor --output text --bogus",
                Some("json"),
                false,
            ),
            ("ouroboros doctor --bogus", None, false),
            (
                "ouroboros --log-level debug doctor --output=json",
                None,
                true,
            ),
            ("ouroboros render coredns --output=json", None, false),
        ] {
            assert_eq!(
                doctor_json(&argv(args), variable),
                want,
                "{args} {variable:?}"
            );
        }
    }

    #[test]
    fn errors_name_the_environment_variable_that_set_a_flag() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let argv = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
        let set = [
            "OUROBOROS_CONTROLLER_PROXY_IP",
            "OUROBOROS_RENDER_PROXY_IP",
            "OUROBOROS_LOG_LEVEL",
            "OUROBOROS_PROXY_LISTEN",
        ];
        let is_set = |k: &str| set.contains(&k);
        // (argv, flags from the environment)
        for (args, want) in [
            (
                argv(&["ouroboros", "controller"]),
                vec!["proxy-ip", "log-level"],
            ),
            (
                argv(&["ouroboros", "controller", "--proxy-ip=10.0.0.1"]),
                vec!["log-level"],
            ),
            (
                argv(&[
                    "ouroboros",
                    "--log-level",
                    "info",
                    "controller",
                    "--proxy-ip",
                    "x",
                ]),
                vec![],
            ),
            // Another subcommand's variable is not this one's.
            (argv(&["ouroboros", "whoami"]), vec!["log-level"]),
            // A nested subcommand's flags count too.
            (
                argv(&["ouroboros", "render", "etc-hosts", "x.yaml"]),
                vec!["proxy-ip", "log-level"],
            ),
        ] {
            let got: Vec<String> = env_sourced(&cli, &args, is_set)
                .into_iter()
                .map(|(long, _)| long)
                .collect();
            let mut got = got;
            got.sort();
            let mut want: Vec<String> = want.into_iter().map(String::from).collect();
            want.sort();
            assert_eq!(got, want, "{args:?}");
        }
        let from_env = vec![(
            "proxy-ip".to_string(),
            "OUROBOROS_CONTROLLER_PROXY_IP".to_string(),
        )];
        for (message, want) in [
            (
                "error: invalid value '0.0.0.0' for '--proxy-ip <IP>': unspecified\n",
                "error: invalid value '0.0.0.0' for OUROBOROS_CONTROLLER_PROXY_IP (the variable of '--proxy-ip <IP>'): unspecified\n",
            ),
            (
                "error: the argument '--proxy-ip' cannot be used with '--x'\n",
                "error: the argument OUROBOROS_CONTROLLER_PROXY_IP (the variable of '--proxy-ip') cannot be used with '--x'\n",
            ),
            (
                "error: invalid value 'x' for '--proxy-ips <IP>'\n",
                "error: invalid value 'x' for '--proxy-ips <IP>'\n",
            ),
        ] {
            assert_eq!(name_the_variable(message, &from_env), want);
        }
        assert_eq!(env_note(&[]), "");
        assert_eq!(
            env_note(&from_env),
            "\n\nnote: set by the environment: OUROBOROS_CONTROLLER_PROXY_IP (--proxy-ip)"
        );
    }
}
