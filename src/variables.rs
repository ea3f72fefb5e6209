//! The `OUROBOROS_*` variable of every flag, named by one rule: `OUROBOROS_<COMMAND>_<FLAG>`,
//! the command being the subcommand run (`controller`, `doctor`, `doctor client-ip`, ...) and
//! the flag its long name (`--probe-timeout` of `controller` is
//! `OUROBOROS_CONTROLLER_PROBE_TIMEOUT`, of `doctor` `OUROBOROS_DOCTOR_PROBE_TIMEOUT`). A
//! subcommand that only picks an output form of its parent (`render coredns`: `render` runs
//! nothing without one) shares its parent's prefix; one that runs on its own beside its parent
//! (`doctor client-ip`) has its own. The global flags (`--log-*`) keep `OUROBOROS_<FLAG>`.
//!
//! The rule is applied to the command clap builds (`name_variables`), so a flag declared in a
//! struct several subcommands flatten reads each subcommand's own variable, and a new flag
//! needs no `env` attribute. The names written in the `env` attributes are the ones the flags
//! had before the rule (a shared flag had the controller's name in every subcommand; the
//! probe's, `--instance` and `--node-local-dns-*` had none of a subcommand): where one differs
//! from the rule's, it is still read, as an alias, with a warning (`renames`).
//!
//! PURE: clap commands in, clap commands and data out.

/// `OUROBOROS_` and the command's path in capitals (`doctor client-ip` ->
/// `OUROBOROS_DOCTOR_CLIENT_IP`).
fn prefix(path: &[&str]) -> String {
    let mut out = String::from("OUROBOROS");
    for p in path {
        out.push('_');
        out.push_str(&screaming(p));
    }
    out
}

fn screaming(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

/// The variable of flag `--long` in the command whose variables start with `prefix`.
pub fn variable(prefix: &str, long: &str) -> String {
    format!("{prefix}_{}", screaming(long))
}

/// Gives every flag of a top-level subcommand (and of its subcommands) the rule's variable.
/// Applied by `cli::Cli` to each of its subcommands (`mut_subcommands`), before clap
/// propagates the global flags, which therefore keep theirs.
pub fn name_variables(cmd: clap::Command) -> clap::Command {
    let name = cmd.get_name().to_string();
    rename(cmd, &prefix(&[&name]))
}

fn rename(cmd: clap::Command, prefix: &str) -> clap::Command {
    let nested = !cmd.is_subcommand_required_set();
    let mut cmd = cmd.mut_args(|arg| match arg.get_long() {
        Some(long) if !matches!(long, "help" | "version") => {
            let name = variable(prefix, long);
            arg.env(name)
        }
        _ => arg,
    });
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for sub in subs {
        let sub_prefix = if nested {
            format!("{prefix}_{}", screaming(&sub))
        } else {
            prefix.to_string()
        };
        cmd = cmd.mut_subcommand(&sub, |s| rename(s, &sub_prefix));
    }
    cmd
}

/// A flag whose variable had another name before the rule: `old` is still read when `new`
/// is not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// The subcommands' names, from the top (`["doctor", "client-ip"]`).
    pub path: Vec<String>,
    /// The flag's clap id (what `Command::mut_arg` takes).
    pub id: String,
    pub old: String,
    pub new: String,
}

/// Every flag of `named` (the command with the rule applied) whose variable in `declared`
/// (the same subcommands as declared, `env` attributes as written) differs.
pub fn renames(declared: &clap::Command, named: &clap::Command) -> Vec<Rename> {
    fn walk(
        declared: &clap::Command,
        named: &clap::Command,
        path: &mut Vec<String>,
        out: &mut Vec<Rename>,
    ) {
        for arg in named.get_arguments() {
            let new = arg.get_env().and_then(|e| e.to_str());
            let old = declared
                .get_arguments()
                .find(|a| a.get_id() == arg.get_id())
                .and_then(|a| a.get_env())
                .and_then(|e| e.to_str());
            if let (Some(old), Some(new)) = (old, new) {
                if old != new {
                    out.push(Rename {
                        path: path.clone(),
                        id: arg.get_id().to_string(),
                        old: old.to_string(),
                        new: new.to_string(),
                    });
                }
            }
        }
        for sub in named.get_subcommands() {
            if let Some(d) = declared.find_subcommand(sub.get_name()) {
                path.push(sub.get_name().to_string());
                walk(d, sub, path, out);
                path.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(declared, named, &mut Vec::new(), &mut out);
    out
}

/// The renames of the command `path` runs (each level's flags: `doctor client-ip` reads
/// `doctor`'s too) whose old variable is set.
pub fn in_use<'a>(
    renames: &'a [Rename],
    path: &[String],
    is_set: impl Fn(&str) -> bool,
) -> Vec<&'a Rename> {
    renames
        .iter()
        .filter(|r| path.starts_with(&r.path) && is_set(&r.old))
        .collect()
}

/// Makes `cmd` read each rename's old variable instead of its new one (the caller passes only
/// those whose new variable is not set).
pub fn read_old(mut cmd: clap::Command, renames: &[&Rename]) -> clap::Command {
    fn at(cmd: clap::Command, path: &[String], id: &str, old: &str) -> clap::Command {
        match path.split_first() {
            // `mut_args`, not `mut_arg`, which moves the flag to the end of `--help`.
            None => cmd.mut_args(|a| {
                if a.get_id() == id {
                    a.env(old.to_string())
                } else {
                    a
                }
            }),
            Some((first, rest)) => cmd.mut_subcommand(first, |s| at(s, rest, id, old)),
        }
    }
    for r in renames {
        cmd = at(cmd, &r.path, &r.id, &r.old);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> clap::Command {
        use clap::{Arg, Command};
        let shared = || {
            Arg::new("mode")
                .long("mode")
                .env("OUROBOROS_CONTROLLER_MODE")
        };
        Command::new("ouroboros")
            .arg(
                Arg::new("log")
                    .long("log-level")
                    .global(true)
                    .env("OUROBOROS_LOG_LEVEL"),
            )
            .subcommand(Command::new("controller").arg(shared()))
            .subcommand(
                Command::new("doctor")
                    .arg(shared())
                    .arg(
                        Arg::new("timeout")
                            .long("probe-timeout")
                            .env("OUROBOROS_PROBE_TIMEOUT"),
                    )
                    .subcommand(
                        Command::new("client-ip").arg(
                            Arg::new("ns")
                                .long("namespace")
                                .env("OUROBOROS_DOCTOR_CLIENT_IP_NAMESPACE"),
                        ),
                    ),
            )
            .subcommand(
                Command::new("render")
                    .subcommand_required(true)
                    .subcommand(Command::new("etc-hosts").arg(Arg::new("ip").long("proxy-ip"))),
            )
    }

    fn named() -> clap::Command {
        sample().mut_subcommands(name_variables)
    }

    fn env_of(cmd: &clap::Command, path: &[&str], id: &str) -> String {
        let cmd = path.iter().fold(cmd, |c, p| c.find_subcommand(p).unwrap());
        let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
        arg.get_env().unwrap().to_str().unwrap().to_string()
    }

    #[test]
    fn each_command_names_its_flags_variables() {
        let cmd = named();
        for (path, id, want) in [
            (&["controller"][..], "mode", "OUROBOROS_CONTROLLER_MODE"),
            (&["doctor"], "mode", "OUROBOROS_DOCTOR_MODE"),
            (&["doctor"], "timeout", "OUROBOROS_DOCTOR_PROBE_TIMEOUT"),
            (
                &["doctor", "client-ip"],
                "ns",
                "OUROBOROS_DOCTOR_CLIENT_IP_NAMESPACE",
            ),
            // An output form of render shares render's prefix; an arg without one gets it.
            (&["render", "etc-hosts"], "ip", "OUROBOROS_RENDER_PROXY_IP"),
            (&[], "log", "OUROBOROS_LOG_LEVEL"),
        ] {
            assert_eq!(env_of(&cmd, path, id), want, "{path:?} {id}");
        }
    }

    #[test]
    fn renames_are_the_declared_names_the_rule_changed() {
        let got = renames(&sample(), &named());
        let r = |path: &[&str], id: &str, old: &str, new: &str| Rename {
            path: path.iter().map(|p| p.to_string()).collect(),
            id: id.into(),
            old: old.into(),
            new: new.into(),
        };
        assert_eq!(
            got,
            vec![
                r(
                    &["doctor"],
                    "mode",
                    "OUROBOROS_CONTROLLER_MODE",
                    "OUROBOROS_DOCTOR_MODE"
                ),
                r(
                    &["doctor"],
                    "timeout",
                    "OUROBOROS_PROBE_TIMEOUT",
                    "OUROBOROS_DOCTOR_PROBE_TIMEOUT"
                ),
            ]
        );
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let set = |k: &str| k == "OUROBOROS_CONTROLLER_MODE";
        assert_eq!(
            in_use(&got, &path(&["doctor", "client-ip"]), set),
            vec![&got[0]]
        );
        assert!(in_use(&got, &path(&["controller"]), set).is_empty());
        let cmd = read_old(named(), &[&got[0]]);
        assert_eq!(
            env_of(&cmd, &["doctor"], "mode"),
            "OUROBOROS_CONTROLLER_MODE"
        );
        assert_eq!(
            env_of(&cmd, &["controller"], "mode"),
            "OUROBOROS_CONTROLLER_MODE"
        );
    }
}
