//! The write paths: the only code that changes a DNS target. Each writer reads the live target,
//! runs the pure editor of `dns` on it and writes only what changed: `apply` (the CoreDNS and
//! node-local-dns ConfigMaps), `hosts_writer` (a node's hosts file), `external_writer`
//! (external-dns objects); `proxy_ips` reads the proxy Service's addresses (or, for a target answered directly, the
//! ingress controller Service's: `routes` holds each target's pick); `plan` says which
//! proxy target each name goes to; `replace` decides which old external-dns objects may be
//! deleted once ours are written; `sink` is the interface the controller and `cleanup` drive;
//! `error` the one error they all return.

pub mod apply;
pub mod error;
pub mod external_writer;
pub mod hosts_writer;
pub mod plan;
pub mod proxy_ips;
pub mod replace;
pub mod routes;
pub mod sink;
