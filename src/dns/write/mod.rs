//! What the DNS modes' writers share: each reads the live target, runs the pure editor of `dns`
//! on it and writes only what changed. `apply` is the CoreDNS and node-local-dns ConfigMaps'
//! writer (the coredns and coredns-import modes'; the etc-hosts and external-dns writers are in
//! their mode's module, `dns::mode`); `proxy_ips` reads the proxy Service's addresses (or, for a target answered directly, the
//! ingress controller Service's: `routes` holds each target's pick); `plan` says which
//! proxy target each name goes to; `replace` decides which old external-dns objects may be
//! deleted once ours are written; `sink` is the interface the controller and `cleanup` drive;
//! `error` the one error they all return; `form` the form the CoreDNS
//! writers answer in (`--coredns-answer`, and `auto`'s pick).

pub mod apply;
pub mod error;
pub mod form;
pub mod plan;
pub mod proxy_ips;
pub mod replace;
pub mod routes;
pub mod sink;
