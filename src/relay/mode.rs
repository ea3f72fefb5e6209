//! `--copy-mode` (`proxy`, `edge`): how a route moves a connection's bytes once the PROXY header
//! is written. The flag's value ([`Mode`]) names what was asked; [`Relaying`], what the process
//! set up: each variant is one path of the relay, matched exhaustively where connections are
//! relayed (`relay::handle`).
//!
//! The kernel relay (`sockmap`: a BPF program moves the bytes, `relay::sockmap`) is compiled
//! only with the cargo feature `kernel-relay`, off by default: it holds most of the crate's
//! `unsafe` code and does not beat `auto` on the benchmark (docs/kernel-relay.md). A build
//! without it still knows the value `sockmap`, and refuses it naming the feature.

#[cfg(feature = "kernel-relay")]
use std::sync::Arc;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use super::copy::CopyMode;
#[cfg(feature = "kernel-relay")]
use super::sockmap::Sockmap;

/// The value of `--copy-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `auto`, `userspace`, `splice`: this process copies.
    Copy(CopyMode),
    /// `sockmap`: the kernel relay.
    #[cfg(feature = "kernel-relay")]
    Kernel,
}

/// Why `sockmap` is refused by a build without the kernel relay.
pub const NOT_BUILT: &str = "the kernel relay (sockmap) is not in this build: it needs one \
                             with the cargo feature kernel-relay (cargo build --release \
                             --features kernel-relay); the release image is built without it";

/// `sockmap`'s line in `--help`.
const SOCKMAP_HELP: &str = if cfg!(feature = "kernel-relay") {
    "the kernel moves the bytes between the sockets (a BPF program redirecting through a \
     socket map): needs CAP_BPF and CAP_NET_ADMIN and Linux 5.10+, else logs why once and runs \
     `auto`"
} else {
    "the kernel relay: only in a build with the cargo feature kernel-relay, which this build \
     and the release image do not have"
};

impl Mode {
    /// The mode a `--copy-mode` value names.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name {
            "auto" => Ok(Mode::Copy(CopyMode::Auto)),
            "userspace" => Ok(Mode::Copy(CopyMode::Userspace)),
            "splice" => Ok(Mode::Copy(CopyMode::Splice)),
            #[cfg(feature = "kernel-relay")]
            "sockmap" => Ok(Mode::Kernel),
            #[cfg(not(feature = "kernel-relay"))]
            "sockmap" => Err(NOT_BUILT.to_string()),
            _ => Err("expected auto, userspace, splice or sockmap".to_string()),
        }
    }

    /// clap's parser for `--copy-mode`: lists every value in `--help` (`sockmap` too, saying
    /// whether this build has it) and refuses `sockmap` naming the feature when it does not.
    pub fn parser() -> impl TypedValueParser<Value = Mode> {
        PossibleValuesParser::new([
            PossibleValue::new("auto").help(
                "read/write for requests and replies, switching a direction to splice(2) while \
                 it streams and back after a short read",
            ),
            PossibleValue::new("userspace")
                .help("always read/write through a pooled 64 KiB buffer"),
            PossibleValue::new("splice")
                .help("always Linux splice(2) through a pooled pipe; the bytes stay in the kernel"),
            PossibleValue::new("sockmap").help(SOCKMAP_HELP),
        ])
        .try_map(|name| Mode::from_name(&name))
    }
}

/// How a route relays its connections, as set up for the process.
#[derive(Clone)]
pub enum Relaying {
    /// This process copies the bytes (`copy::relay`).
    Copy(CopyMode),
    /// The kernel moves the bytes (`sockmap::relay_or_copy`); a connection the kernel does
    /// not take (a side already closed, the map full) is copied here with `fallback`.
    #[cfg(feature = "kernel-relay")]
    Kernel {
        kernel: Arc<Sockmap>,
        fallback: CopyMode,
    },
}

/// Sets up `mode` for a process relaying at most `max_connections` at once (0 = no limit).
/// `sockmap` loads the kernel relay once for the process, or says once why it cannot and
/// copies in this process (`auto`).
// Only the kernel relay sizes anything by the connection limit.
#[cfg_attr(not(feature = "kernel-relay"), allow(unused_variables))]
pub fn relaying(mode: Mode, max_connections: usize) -> Relaying {
    match mode {
        Mode::Copy(copy) => Relaying::Copy(copy),
        #[cfg(feature = "kernel-relay")]
        Mode::Kernel => load_kernel(max_connections),
    }
}

#[cfg(feature = "kernel-relay")]
fn load_kernel(max_connections: usize) -> Relaying {
    let cap = if max_connections == 0 {
        65536
    } else {
        max_connections
    };
    match Sockmap::load(cap) {
        Ok(k) => {
            tracing::info!("copy mode sockmap: the kernel relays established connections");
            let kernel = Arc::new(k);
            tokio::spawn(kernel.clone().ring_doorbells());
            Relaying::Kernel {
                kernel,
                fallback: CopyMode::Auto,
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "copy mode sockmap is not available here; copying in this process (auto) instead");
            Relaying::Copy(CopyMode::Auto)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_paths() {
        assert_eq!(Mode::from_name("auto"), Ok(Mode::Copy(CopyMode::Auto)));
        assert_eq!(
            Mode::from_name("userspace"),
            Ok(Mode::Copy(CopyMode::Userspace))
        );
        assert_eq!(Mode::from_name("splice"), Ok(Mode::Copy(CopyMode::Splice)));
        assert!(Mode::from_name("bpf").is_err());
        #[cfg(feature = "kernel-relay")]
        assert_eq!(Mode::from_name("sockmap"), Ok(Mode::Kernel));
        #[cfg(not(feature = "kernel-relay"))]
        assert_eq!(Mode::from_name("sockmap"), Err(NOT_BUILT.to_string()));
    }
}
