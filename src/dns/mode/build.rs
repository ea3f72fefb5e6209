//! What several modes build their writer with: the context of one build, each target's
//! addresses, and how the controller's picks route them (relay or direct).

use crate::dns::mode::DnsArgs;
use crate::dns::write::form::{CurrentForm, MemoryLimit};
use crate::dns::write::proxy_ips::ProxyIps;
use crate::dns::write::routes::Routes;
use crate::target::{AnswerRule, Target, TargetRule};

use super::ProxySource;

/// What a writer is built with beside the flags.
pub struct Build<'a> {
    pub client: kube::Client,
    /// The rewrite target's domain.
    pub cluster_domain: &'a str,
    /// The named targets, in `--target` order.
    pub targets: &'a [TargetRule],
    /// How each target answers (relay or direct), when the controller picks; `None` answers
    /// every target through its proxy.
    pub routing: Option<Routing<'a>>,
    /// The CoreDNS answer form the controller keeps (`auto`'s pick); `None`: the form the flags
    /// give, `auto` as the pair (cleanup, which answers nothing).
    pub form: Option<CurrentForm>,
    /// The CoreDNS container's memory limit the controller keeps (the reload guard); `None`:
    /// no guard (cleanup).
    pub limit: Option<MemoryLimit>,
}

/// Each target's answer settings (the default target's first) and the picks the controller
/// keeps: a target with an ingress controller Service may be answered with its addresses.
#[derive(Clone, Copy)]
pub struct Routing<'a> {
    pub rules: &'a [AnswerRule],
    pub routes: &'a Routes,
}

impl Routing<'_> {
    /// `relay` answering as `rule`'s pick says: a direct pick with the ingress controller
    /// Service's addresses, or `direct-ip=` (`--direct-ip`) alone; unchanged with neither
    /// (which start-up refuses for `direct`).
    pub fn wrap(
        &self,
        relay: ProxyIps,
        rule: &AnswerRule,
        client: Option<kube::Client>,
    ) -> ProxyIps {
        let flag = match rule.target {
            Target::Default => "--direct-ip",
            Target::Named(_) => "--target ...,direct-ip=",
        };
        match ProxyIps::direct(client, rule.direct_from(), flag) {
            Some(direct) => relay.routed(direct, self.routes.clone(), rule.target),
            None => relay,
        }
    }
}

impl<'a> Build<'a> {
    /// A build answering every target through its proxy.
    pub fn new(client: kube::Client, cluster_domain: &'a str, targets: &'a [TargetRule]) -> Self {
        Self {
            client,
            cluster_domain,
            targets,
            routing: None,
            form: None,
            limit: None,
        }
    }

    /// The build whose CoreDNS writers answer in the form `form` holds when they write, and
    /// refuse a Corefile whose reload would exceed the memory limit `limit` holds.
    pub fn picking(self, form: CurrentForm, limit: MemoryLimit) -> Self {
        Self {
            form: Some(form),
            limit: Some(limit),
            ..self
        }
    }

    /// The build with each target answering as the controller's picks in `routes` say,
    /// `rules` being each target's answer settings (the default target's first).
    pub fn routed(self, rules: &'a [AnswerRule], routes: &'a Routes) -> Self {
        Self {
            routing: Some(Routing { rules, routes }),
            ..self
        }
    }

    /// The `i`th target's addresses as the routing routes them.
    pub fn route_at(&self, ips: ProxyIps, i: usize) -> ProxyIps {
        match self
            .routing
            .and_then(|r| r.rules.get(i).map(|rule| (r, rule)))
        {
            Some((r, rule)) => r.wrap(ips, rule, Some(self.client.clone())),
            None => ips,
        }
    }

    /// The named targets' addresses: given, else their proxy Services' ClusterIPs.
    pub fn target_ips(&self, dns: &DnsArgs) -> Vec<ProxyIps> {
        target_ips(dns, Some(&self.client), self.targets)
    }
}

/// The named targets' addresses: given, else their proxy Services' ClusterIPs (read with
/// `client`).
pub fn target_ips(
    dns: &DnsArgs,
    client: Option<&kube::Client>,
    targets: &[TargetRule],
) -> Vec<ProxyIps> {
    targets
        .iter()
        .zip(dns.shared.target_services(targets))
        .map(|(t, (ns, name))| {
            ProxyIps::new(
                client.cloned(),
                &t.proxy_ips,
                &ns,
                &name,
                "--target ...,proxy-ip=",
            )
        })
        .collect()
}

/// The default target's addresses, from where the mode says they come from.
pub fn proxy_ips(source: &ProxySource, client: Option<kube::Client>) -> ProxyIps {
    let (namespace, name) = &source.service;
    ProxyIps::new(client, &source.ips, namespace, name, source.flag)
}

/// The default target's addresses in every mode but external-dns: --proxy-ip, else the proxy
/// Service (--proxy-service-name, --proxy-service-namespace).
pub fn default_proxy(dns: &DnsArgs) -> ProxySource {
    ProxySource {
        service: (
            dns.shared.proxy_service_namespace(),
            dns.shared.proxy_service_name.clone(),
        ),
        ips: dns.shared.proxy_ips.clone(),
        flag: "--proxy-ip",
    }
}
