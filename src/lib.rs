//! ouroboros: keeps client IPs intact across the paths a Kubernetes cluster's traffic takes.
//!
//! Pure modules (`hostname`, `proxy_protocol`, `dns`) do no I/O; the subcommand modules wire
//! them to sockets, files and the Kubernetes API.

pub mod admin;
pub mod cleanup;
pub mod cli;
pub mod cluster_domain;
pub mod controller;
pub mod dns;
pub mod doctor;
pub mod edge;
pub mod hostname;
pub mod kube_client;
pub mod manifests;
pub mod proxy;
pub mod proxy_protocol;
pub mod relay;
pub mod render;
pub mod runtime;
pub mod shutdown;
#[cfg(test)]
mod table;
pub mod telemetry;
pub mod whoami;
