//! The integration tests, as one test binary: each module was its own `tests/*.rs` binary, and
//! linking twenty copies of kube and tokio cost more than running them. Run one file's tests
//! with `cargo test --test it <module>::` (e.g. `cargo test --test it chart::`).
//!
//! Filters are substrings: `editors::` also runs `render_cli_editors::`.
//!
//! The tests share one process, so none may change its environment or working directory:
//! children get their environment on their `Command` ([`common::command`]), and flags parsed
//! in-process ignore the environment ([`common::parse_without_env`]) instead of scrubbing it.

#![deny(unsafe_code)]

// Helpers, compiled once for every module.
mod common;
/// The `<!-- NAME: ARGS -->` markers of the docs' tested commands and outputs.
mod doc_markers;
/// A stateful fake of the API server's external-dns objects, with the no-unpublished-name check.
mod external_dns_fake;
/// Sections of documents generated from the code, compared or rewritten.
mod generated;
mod golden_file;
mod kube_mock;
mod support;
/// The only `unsafe` code of the tests.
mod sys;

mod chart;
mod chart_monitoring;
mod cleanup_cli;
mod cli_docs;
mod controller_apply;
mod controller_cli;
mod controller_sync;
mod doc_commands;
mod doc_paths;
mod doctor;
mod doctor_cli;
mod doctor_client_ip;
mod edge;
mod edge_l2;
mod edge_lb;
mod edge_watch;
mod editors;
mod editors_props;
mod external_dns_apply;
mod external_dns_replace;
mod fuzz_corpus;
mod haproxy_headers;
mod hosts_writer;
mod image_cli_doc;
mod migration_doc;
/// On a real node: kubelet and containerd run the chart's pods from our image.
mod node;
/// Against real CoreDNS, etcd, kube-apiserver and kube-proxy (`.ci/peers/build.sh`).
mod peers;
mod proxy;
mod readme_flags;
mod render_cli;
mod render_cli_editors;
mod whoami;
