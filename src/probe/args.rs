//! The probe's flags `controller` and `doctor` share: where names are resolved, which ports
//! are knocked on, and how long each step may take.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::Args;

use super::knock::Hello;
use super::{Server, Settings};
use crate::flags::UsageError;

/// Where a pod's resolver looks: the name servers of this file.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

#[derive(Args, Clone, Debug)]
pub struct ProbeArgs {
    /// The cluster DNS server the probe asks, IP or IP:PORT (repeat, or comma-separate, for
    /// several) [default: the `nameserver`s of /etc/resolv.conf, in a pod the kube-dns
    /// Service's ClusterIP].
    #[arg(
        long,
        env = "OUROBOROS_PROBE_DNS_SERVER",
        value_name = "ADDR",
        value_delimiter = ',',
        value_parser = parse_server
    )]
    pub probe_dns_server: Vec<SocketAddr>,

    /// Also ask the node-local-dns cache at this address (IP or IP:PORT, usually
    /// 169.254.20.10), where pods resolve through it.
    #[arg(
        long,
        env = "OUROBOROS_PROBE_NODE_LOCAL_DNS",
        value_name = "ADDR",
        value_parser = parse_server
    )]
    pub probe_node_local_dns: Option<SocketAddr>,

    /// Time each DNS question, each connection and each answer may take.
    #[arg(
        long,
        env = "OUROBOROS_PROBE_TIMEOUT",
        value_name = "DURATION",
        default_value = "3s",
        value_parser = parse_timeout
    )]
    pub probe_timeout: Duration,

    /// The port a TLS ClientHello with the name as SNI is sent to; 0: none.
    #[arg(
        long,
        env = "OUROBOROS_PROBE_HTTPS_PORT",
        value_name = "PORT",
        default_value_t = 443
    )]
    pub probe_https_port: u16,

    /// The port `HEAD / HTTP/1.1` with the name as Host is sent to; 0: none.
    #[arg(
        long,
        env = "OUROBOROS_PROBE_HTTP_PORT",
        value_name = "PORT",
        default_value_t = 80
    )]
    pub probe_http_port: u16,
}

/// `IP` (port 53) or `IP:PORT` (`[IPv6]:PORT`).
pub fn parse_server(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| format!("{s:?} is not IP or IP:PORT (e.g. 10.96.0.10 or [fd00::a]:53)"))
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::flags::parse_duration(s)?;
    if d.is_zero() {
        return Err("must be longer than 0 (e.g. 3s)".into());
    }
    Ok(d)
}

impl ProbeArgs {
    /// The probe's settings; `resolv_conf`: that file's text, read when no server is given.
    pub fn settings(&self, resolv_conf: Option<&str>) -> Result<Settings, UsageError> {
        let mut servers: Vec<Server> = if self.probe_dns_server.is_empty() {
            super::resolve::nameservers(resolv_conf.unwrap_or_default())
                .into_iter()
                .map(|addr| Server {
                    addr,
                    what: format!("the cluster DNS, from {RESOLV_CONF}"),
                })
                .collect()
        } else {
            (self.probe_dns_server.iter())
                .map(|addr| Server {
                    addr: *addr,
                    what: "the cluster DNS, --probe-dns-server".into(),
                })
                .collect()
        };
        if servers.is_empty() {
            return Err(UsageError::new(format!(
                "the probe has no DNS server to ask: {RESOLV_CONF} names none; pass \
                 --probe-dns-server with the kube-dns Service's ClusterIP (kubectl -n \
                 kube-system get service kube-dns)"
            )));
        }
        servers.extend(self.probe_node_local_dns.map(|addr| Server {
            addr,
            what: "node-local-dns, --probe-node-local-dns".into(),
        }));
        let ports = [
            (self.probe_https_port, Hello::Tls),
            (self.probe_http_port, Hello::Http),
        ]
        .into_iter()
        .filter(|(p, _)| *p != 0)
        .collect();
        Ok(Settings {
            servers,
            ports,
            timeout: self.probe_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<ProbeArgs, clap::Error> {
        crate::flags::parse_args::<ProbeArgs>(argv)
    }

    #[test]
    fn settings_from_flags_and_resolv_conf() {
        let conf = "nameserver 10.96.0.10\n";
        let s = parse(&[]).unwrap().settings(Some(conf)).unwrap();
        let servers: Vec<String> = s.servers.iter().map(|s| s.addr.to_string()).collect();
        assert_eq!(servers, ["10.96.0.10:53"]);
        assert_eq!(s.ports, [(443, Hello::Tls), (80, Hello::Http)]);
        assert_eq!(s.timeout, Duration::from_secs(3));

        let s = parse(&[
            "--probe-dns-server",
            "10.0.0.10,[fd00::a]:5353",
            "--probe-node-local-dns",
            "169.254.20.10",
            "--probe-http-port",
            "0",
            "--probe-timeout",
            "500ms",
        ])
        .unwrap()
        .settings(Some(conf))
        .unwrap();
        let servers: Vec<String> = s.servers.iter().map(|s| s.addr.to_string()).collect();
        assert_eq!(
            servers,
            ["10.0.0.10:53", "[fd00::a]:5353", "169.254.20.10:53"],
            "the flag wins over resolv.conf; node-local-dns last"
        );
        assert_eq!(s.ports, [(443, Hello::Tls)]);
        assert_eq!(s.timeout, Duration::from_millis(500));

        let e = parse(&[]).unwrap().settings(Some("")).unwrap_err();
        assert!(e.0.contains("--probe-dns-server"), "{e}");
        for bad in [
            &["--probe-dns-server", "kube-dns"][..],
            &["--probe-timeout", "0s"],
            &["--probe-https-port", "70000"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
