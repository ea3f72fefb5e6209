//! ouroboros: keeps client IPs intact across the paths a Kubernetes cluster's traffic takes.
//!
//! Module map (PURE: data in, data out, no sockets, files or API calls):
//!
//! | module | owns |
//! | --- | --- |
//! | `cli` | the subcommands and dispatch; imported only by `main.rs` |
//! | `flags` | flag types every subcommand shares (usage errors, durations, listen addresses) |
//! | `variables` | PURE: the `OUROBOROS_*` variable of every flag, by one rule, and the old names still read |
//! | `listen` | the listen-address grammar and dual-stack bind (relay, admin, whoami) |
//! | `dns_name` | PURE: the DNS name rules (labels, subdomains, host names) every check shares |
//! | `hostname` | PURE: `Hostname` and the policy of what may be hairpinned |
//! | `header_verdict` | PURE: whether an ingress controller requires, takes or refuses the PROXY header, read from its own configuration object, and the answer a target gets from that (`choose`) |
//! | `target` | PURE: proxy targets, one type from `--target` to the metric label (`Target`, `TargetRule`) |
//! | `proxy_protocol` | PURE: PROXY v1/v2 encode, and decode (`decode`: `header`, `error`, `v1`, `v2`, `tlv`) |
//! | `accept` | the one accept loop (cap, backoff, drain) behind `proxy`, `edge` and `whoami`, generic over a connection `Handler` |
//! | `relay` | the relay `Handler` of `proxy` and `edge`: upstream dialling, PROXY header, byte copy (`mode`: `--copy-mode`; `sockmap`, the kernel relay, only with the cargo feature `kernel-relay`) |
//! | `proxy`, `edge`, `whoami` | those subcommands (`edge::balance`: `pick`, `maglev` PURE, `backend`, `metrics`; `whoami::http` and `whoami::report` PURE) |
//! | `dns` | the DNS configuration: PURE editors and renderers (`corefile`, `answer`, `answer_form` (`--coredns-answer` and what `auto` picks from CoreDNS's image tag), `name_regex`, `reload_memory` (what a CoreDNS reload of the block may cost in memory), `coredns_import`, `etc_hosts`, `external`, `block`) and `Mode`, the key of the mode table |
//! | `dns::args` | the DNS-target flags every mode shares (`SharedArgs`), beside each mode's own |
//! | `dns::mode` | one module per DNS mode behind the `DnsMode` trait (`coredns`, `coredns_import`, `etc_hosts` and `external_dns`, each with its writer, RBAC, removal, flags and `render` subcommand), the mode table (`for_each_mode!`, from which `Mode`, `Mode::spec`, `DnsArgs` and `render`'s subcommands are generated), what several modes build with (`build`) and what `render` hands a mode (`render`) |
//! | `dns::write` | what the writers share: the CoreDNS ConfigMaps' writer (`apply`), the proxies' addresses (`proxy_ips`), the `Sink` trait and `AnySink`, which proxy target each name goes to (`plan`, PURE), which old external-dns objects may go (`replace`, PURE) and their one error (`error`: `SinkError`, `Reason`) |
//! | `controller` | sources to desired hosts (`hostnames`, PURE: `kinds` the source kinds listed once, `model`, `collect`, `class`, `args`), the sync engine, lease, watches (`sources`), RBAC as data |
//! | `probe` | the hairpin probe the controller runs and `doctor --probe` prints: resolve through the cluster DNS, check the answer, send a PROXY-free request (`verdict` and `rotation` PURE; `resolve`, `knock`, `args`) |
//! | `render`, `cleanup`, `doctor` | those subcommands (`doctor::checks` PURE: `inputs`, `ingress`, `sources`, `coredns`, `shadowing`, `coredns_version`, `node_local_dns`, `proxy`, `crd`, `permissions`; `doctor::client_ip` the end-to-end client-address check: `objects`, `state`, `verdict` PURE, `call` the caller Pod's side) |
//! | `manifests` | manifest files to typed objects for `render` (`files`; `documents` and `objects` PURE; `error`) |
//! | `admin`, `telemetry`, `shutdown`, `runtime`, `kube_client`, `cluster_domain` | process plumbing |
//! | `sys` | the only `unsafe` code: thin wrappers over the few syscalls no crate covers (`kernel_relay`: the kernel relay's, only with the cargo feature `kernel-relay`) |
//! | `fuzzing` | hidden, and only with the cargo feature `fuzzing` (tests, `fuzz/`): the property checks the fuzz targets (`fuzz/`) and `tests/it/fuzz_corpus.rs` share |
//!
//! `module_rules` (a unit test) checks the PURE modules import no I/O, the top-level modules
//! and the sibling modules inside each module import each other without a cycle, and nothing
//! imports `cli`.

#![deny(unsafe_code)]

pub mod accept;
pub mod admin;
pub mod cleanup;
pub mod cli;
pub mod cluster_domain;
pub mod controller;
pub mod dns;
pub mod dns_name;
pub mod doctor;
pub mod edge;
pub mod flags;
// Test support, not in the library a plain build makes: `cargo test` turns the feature on (a
// dev-dependency on this crate), and so does fuzz/.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod header_verdict;
pub mod hostname;
pub mod kube_client;
pub mod listen;
pub mod manifests;
#[cfg(test)]
mod module_rules;
pub mod probe;
pub mod proxy;
pub mod proxy_protocol;
pub mod relay;
pub mod render;
pub mod runtime;
pub mod shutdown;
mod sys;
#[cfg(test)]
mod table;
pub mod target;
pub mod telemetry;
#[cfg(test)]
mod test_api;
pub mod variables;
pub mod whoami;
