//! Runs the built binary for the CLI tests (`render`, `controller`, `doctor`, `cleanup`).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests")
}

pub fn fixture(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

pub fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .display()
        .to_string()
}

/// `ouroboros SUBCOMMAND` without the caller's OUROBOROS_*, RUST_LOG, KUBECONFIG and
/// KUBERNETES_SERVICE_HOST variables, and with the cluster domain pinned (the host's
/// resolv.conf would otherwise decide it).
pub fn command(subcommand: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.arg(subcommand);
    for (k, _) in std::env::vars() {
        if k.starts_with("OUROBOROS_")
            || ["RUST_LOG", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"].contains(&k.as_str())
        {
            cmd.env_remove(k);
        }
    }
    // Each command reads its own variable (`OUROBOROS_<COMMAND>_<FLAG>`).
    if ["controller", "doctor", "render"].contains(&subcommand) {
        let variable = format!("OUROBOROS_{}_CLUSTER_DOMAIN", subcommand.to_uppercase());
        cmd.env(variable, "cluster.local");
    }
    cmd
}

/// `T::try_parse_from(argv)` as if no environment variable were set: every argument's `env` is
/// dropped (in subcommands too), so the caller's OUROBOROS_* variables cannot change what the
/// in-process tests parse, and no test has to touch the environment the whole binary shares.
pub fn parse_without_env<T, I, A>(argv: I) -> Result<T, clap::Error>
where
    T: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<std::ffi::OsString> + Clone,
{
    fn without_env(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.env(None::<&'static str>))
            .mut_subcommands(without_env)
    }
    let mut cmd = without_env(T::command());
    let mut matches = cmd.try_get_matches_from_mut(argv)?;
    T::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// Runs `ouroboros render ARGS` with the environment of [`command`] plus `env`.
pub fn render_env(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut cmd = command("render");
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd, stdin)
}

/// Runs `cmd` to its end with `stdin` (or nothing) as its input.
pub fn run(cmd: &mut Command, stdin: Option<&str>) -> Output {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().expect("waiting for the child");
    Output {
        code: out
            .status
            .code()
            .expect("exit code (not killed by a signal)"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

pub fn render(args: &[&str]) -> Output {
    render_env(args, None, &[])
}

/// Asserts success and returns stdout.
pub fn ok(out: Output) -> String {
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    out.stdout
}

/// Asserts a failure with `code`, nothing on stdout, and returns stderr.
pub fn fails(out: Output, code: i32) -> String {
    assert_eq!(
        out.code, code,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    assert_eq!(out.stdout, "", "nothing on stdout on failure");
    out.stderr
}

/// The DNSEndpoint documents on stdout.
pub fn endpoints(stdout: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(stdout)
        .map(|d| serde_json::Value::deserialize(d).expect("DNSEndpoint YAML"))
        .filter(|v| !v.is_null()) // an empty stdout parses as one empty document
        .collect()
}

/// The dnsNames of the DNSEndpoints on stdout.
pub fn dns_names(stdout: &str) -> BTreeSet<String> {
    endpoints(stdout)
        .iter()
        .flat_map(|o| o["spec"]["endpoints"].as_array().unwrap().clone())
        .map(|e| e["dnsName"].as_str().unwrap().to_string())
        .collect()
}

pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// What every hostile name in hostile.yaml carries; none may reach stdout.
pub const HOSTILE_FRAGMENTS: &[&str] = &[
    "newline",
    "evil",
    "attacker",
    "brace",
    "open.example",
    "quoted",
    "space inside",
    "inside",
    "192.0.2.10",
    "2001:db8",
    "kubernetes.default",
    "*.svc",
    "dot..dot",
    "localhost",
    "api.svc",
    "10.in-addr",
    "semi",
    "under_score",
    "caf",
    "byte",
    "*.*",
    "*.com",
];

/// Whether `text` names `flag` (or variable) as a whole word: `--dial` does not match inside
/// `--dial-timeout`, nor `..._DIAL` inside `..._DIAL_TIMEOUT`.
pub fn names(text: &str, flag: &str) -> bool {
    let word = format!(
        "(?:^|[^A-Za-z0-9_-]){}(?:[^A-Za-z0-9_-]|$)",
        regex::escape(flag)
    );
    regex::Regex::new(&word).unwrap().is_match(text)
}

/// `ouroboros ARGS --help` (stdout) without the caller's OUROBOROS_* variables, whose values
/// would otherwise show up in it.
pub fn help(args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ouroboros"));
    cmd.args(args).arg("--help");
    for (k, _) in std::env::vars() {
        if k.starts_with("OUROBOROS_") {
            cmd.env_remove(k);
        }
    }
    let out = ok(run(&mut cmd, None));
    assert!(
        !out.is_empty(),
        "ouroboros {} --help printed nothing",
        args.join(" ")
    );
    out
}

/// The long flags and env vars a `--help` output defines (option lines, not prose).
pub fn help_options(help: &str) -> (Vec<String>, Vec<String>) {
    let mut flags = Vec::new();
    let mut envs = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        // Option lines start with `--name` or `-x, --name`; prose never does.
        let rest = t.strip_prefix("--").or_else(|| {
            t.get(4..)
                .filter(|_| t.starts_with('-'))
                .and_then(|r| r.strip_prefix("--"))
        });
        if let Some(rest) = rest {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() && name != "help" && name != "version" {
                flags.push(format!("--{name}"));
            }
        }
        if let Some(i) = t.find("[env: ") {
            let env: String = t[i + 6..].chars().take_while(|c| *c != '=').collect();
            envs.push(env);
        }
    }
    (flags, envs)
}
