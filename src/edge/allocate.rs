//! Which address each LoadBalancer Service of our class gets, as a pure function of the pools
//! and the Services.
//!
//! Rules (documented in docs/edge.md):
//! - a Service is ours when `spec.type` is `LoadBalancer` and `spec.loadBalancerClass` is our
//!   class (a Service without a class belongs to the cluster's default load balancer);
//! - it gets one address per family of `spec.ipFamilies`, all or none: a dual-stack Service
//!   that can have an IPv4 address but no IPv6 one gets neither;
//! - an address it holds in `status.loadBalancer.ingress` is kept while a pool that admits the
//!   Service contains it (and it is what the Service requests, if it requests one), so a
//!   restart reallocates nothing;
//! - it may request addresses, one per family: the `ouroboros.io/load-balancer-ips` annotation
//!   (`192.0.2.5,2001:db8::5`), else the deprecated `spec.loadBalancerIP`;
//! - a family it neither holds nor requests takes the lowest free address of the first pool (in
//!   document order) that admits it, has that family and has a free address;
//! - two Services wanting one address: the holder keeps it; else the older `creationTimestamp`
//!   wins, then namespace/name. The loser gets no address and a reason;
//! - addresses other load balancers report for their Services are never handed out;
//! - a Service that is no longer a LoadBalancer but still reports addresses of our pools is
//!   released: its status is to be emptied, its addresses are free.
//!
//! A Service that fails gives back what it held in this pass; another Service that lost a
//! conflict against it gets the address on the next pass (every pass is computed from scratch).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::pool::{Family, Pool};

/// The `spec.loadBalancerClass` served unless told otherwise.
pub const DEFAULT_CLASS: &str = "ouroboros.io/edge";

/// The annotation through which a Service requests its addresses.
pub const REQUEST_ANNOTATION: &str = "ouroboros.io/load-balancer-ips";

/// A Service port as `status.loadBalancer.ingress[].ports` carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub port: i32,
    pub protocol: String,
}

/// Whose Service this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `type: LoadBalancer` of our class.
    Ours,
    /// `type: LoadBalancer` of another class (or none): another load balancer's.
    OtherLoadBalancer,
    /// Not a LoadBalancer (any more).
    NotLoadBalancer,
}

/// What allocation reads of one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbService {
    pub namespace: String,
    pub name: String,
    pub created: Option<Time>,
    pub labels: BTreeMap<String, String>,
    pub kind: Kind,
    /// `spec.ipFamilies`, in order; IPv4 alone when unset.
    pub families: Vec<Family>,
    /// Requested addresses by family, or why the request cannot be read.
    pub requested: Result<BTreeMap<Family, IpAddr>, Reason>,
    /// The IPs in `status.loadBalancer.ingress`.
    pub held: Vec<IpAddr>,
    pub ports: Vec<Port>,
}

impl LbService {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Reads a Service. `class` is the `loadBalancerClass` served.
    pub fn from_service(svc: &Service, class: &str) -> LbService {
        let meta = &svc.metadata;
        let spec = svc.spec.clone().unwrap_or_default();
        let kind = match (spec.type_.as_deref(), spec.load_balancer_class.as_deref()) {
            (Some("LoadBalancer"), Some(c)) if c == class => Kind::Ours,
            (Some("LoadBalancer"), _) => Kind::OtherLoadBalancer,
            _ => Kind::NotLoadBalancer,
        };
        let mut families: Vec<Family> = Vec::new();
        for f in spec.ip_families.iter().flatten() {
            let f = match f.as_str() {
                "IPv4" => Family::V4,
                "IPv6" => Family::V6,
                _ => continue,
            };
            if !families.contains(&f) {
                families.push(f);
            }
        }
        if families.is_empty() {
            families.push(Family::V4);
        }
        let request = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(REQUEST_ANNOTATION))
            .map(|v| (REQUEST_ANNOTATION, v.as_str()))
            .or_else(|| {
                (spec.load_balancer_ip.as_deref())
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| ("spec.loadBalancerIP", v))
            });
        let held = (svc.status.as_ref())
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.as_deref()?.parse().ok())
            .collect();
        let ports = (spec.ports.iter().flatten())
            .map(|p| Port {
                port: p.port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            })
            .collect();
        LbService {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            created: meta.creation_timestamp.clone(),
            labels: meta.labels.clone().unwrap_or_default(),
            kind,
            families,
            requested: request.map_or(Ok(BTreeMap::new()), |(from, v)| parse_request(from, v)),
            held,
            ports,
        }
    }
}

/// Parses a request: IPs separated by commas, at most one per family. `from` names where it
/// was written, for the message.
pub fn parse_request(from: &str, value: &str) -> Result<BTreeMap<Family, IpAddr>, Reason> {
    let mut out: BTreeMap<Family, IpAddr> = BTreeMap::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ip: IpAddr = part.parse().map_err(|_| Reason::BadRequest {
            from: from.to_string(),
            value: part.to_string(),
        })?;
        if let Some(first) = out.insert(Family::of(ip), ip) {
            return Err(Reason::TwoPerFamily {
                from: from.to_string(),
                family: Family::of(ip),
                first,
                second: ip,
            });
        }
    }
    Ok(out)
}

/// Why a Service of our class has no address; the message is the Event's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("{from}: {value:?} is not an IP address; write IPs separated by commas, at most one per IP family")]
    BadRequest { from: String, value: String },
    #[error("{from}: two {family} addresses requested ({first}, {second}); a Service gets one address per IP family")]
    TwoPerFamily {
        from: String,
        family: Family,
        first: IpAddr,
        second: IpAddr,
    },
    #[error("requested address {address} is {family}, which spec.ipFamilies does not list; request an address of each listed family only")]
    WrongFamily { address: IpAddr, family: Family },
    #[error("requested address {address} is in no pool that admits this Service (check each pool's addresses, namespaces and serviceSelector)")]
    NotInPool { address: IpAddr },
    #[error("requested address {address} is taken by Service {holder}; request another address or free it there")]
    Conflict { address: IpAddr, holder: String },
    #[error("no pool with {family} addresses admits this Service (check each pool's namespaces and serviceSelector); nothing assigned")]
    NoPool { family: Family },
    #[error("no free {family} address left in pools {pools}; nothing assigned: add addresses to a pool or free some")]
    Exhausted { family: Family, pools: String },
}

impl Reason {
    /// The Event `reason` (CamelCase, machine-readable).
    pub fn event_reason(&self) -> &'static str {
        match self {
            Reason::BadRequest { .. }
            | Reason::TwoPerFamily { .. }
            | Reason::WrongFamily { .. }
            | Reason::NotInPool { .. } => "InvalidAddressRequest",
            Reason::Conflict { .. } => "AddressConflict",
            Reason::NoPool { .. } => "NoAddressPool",
            Reason::Exhausted { .. } => "AddressPoolExhausted",
        }
    }
}

/// One `status.loadBalancer.ingress` entry to write (its `ipMode` is always `Proxy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingress {
    pub ip: IpAddr,
    pub ports: Vec<Port>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// One entry per family, in `spec.ipFamilies` order.
    Assigned(Vec<Ingress>),
    /// Ours, without an address: the status is to be emptied.
    Unassigned(Reason),
    /// Not a LoadBalancer any more: the status is to be emptied.
    Released,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub namespace: String,
    pub name: String,
    pub outcome: Outcome,
}

/// The allocation of one Service of ours during a pass.
struct Plan<'a> {
    svc: &'a LbService,
    /// Pools that admit the Service, in document order.
    pools: Vec<&'a Pool>,
    chosen: BTreeMap<Family, IpAddr>,
    failed: Option<Reason>,
}

/// Who has which address during a pass.
struct Book<'a> {
    plans: Vec<Plan<'a>>,
    owner: BTreeMap<IpAddr, String>,
}

impl Book<'_> {
    fn claim(&mut self, i: usize, ip: IpAddr) {
        self.owner.insert(ip, self.plans[i].svc.key());
        self.plans[i].chosen.insert(Family::of(ip), ip);
    }

    /// Marks plan `i` failed and gives back what it claimed.
    fn fail(&mut self, i: usize, reason: Reason) {
        let plan = &mut self.plans[i];
        for ip in std::mem::take(&mut plan.chosen).into_values() {
            self.owner.remove(&ip);
        }
        plan.failed = Some(reason);
    }
}

/// Decides the addresses of every Service, sorted by namespace/name.
pub fn allocate(pools: &[Pool], services: &[LbService]) -> Vec<Decision> {
    let mut ours: Vec<&LbService> = services.iter().filter(|s| s.kind == Kind::Ours).collect();
    // Older first (a missing timestamp last), then namespace/name: who wins a conflict.
    ours.sort_by(|a, b| {
        (a.created.is_none(), &a.created, &a.namespace, &a.name).cmp(&(
            b.created.is_none(),
            &b.created,
            &b.namespace,
            &b.name,
        ))
    });
    let owner = services
        .iter()
        .filter(|s| s.kind == Kind::OtherLoadBalancer)
        .flat_map(|s| s.held.iter().map(move |ip| (*ip, s.key())))
        .collect();
    let plans = ours
        .into_iter()
        .map(|svc| Plan {
            svc,
            pools: (pools.iter())
                .filter(|p| p.admits(&svc.namespace, &svc.labels))
                .collect(),
            chosen: BTreeMap::new(),
            failed: None,
        })
        .collect();
    let mut book = Book { plans, owner };
    keep_held(&mut book);
    take_requested(&mut book);
    take_free(&mut book);
    decisions(&book, pools, services)
}

/// Step 1: each Service keeps the addresses it holds that are still valid for it.
fn keep_held(book: &mut Book<'_>) {
    for i in 0..book.plans.len() {
        let plan = &book.plans[i];
        let svc = plan.svc;
        let requested = svc.requested.as_ref().ok();
        let keep: Vec<IpAddr> = (svc.held.iter().copied())
            .filter(|ip| svc.families.contains(&Family::of(*ip)))
            .filter(|ip| plan.pools.iter().any(|p| p.contains(*ip)))
            .filter(|ip| {
                requested
                    .and_then(|r| r.get(&Family::of(*ip)))
                    .is_none_or(|r| r == ip)
            })
            .collect();
        for ip in keep {
            if !book.owner.contains_key(&ip) && !book.plans[i].chosen.contains_key(&Family::of(ip))
            {
                book.claim(i, ip);
            }
        }
    }
}

/// Step 2: requested addresses, in priority order.
fn take_requested(book: &mut Book<'_>) {
    for i in 0..book.plans.len() {
        let plan = &book.plans[i];
        let requested = match &plan.svc.requested {
            Ok(r) => r.clone(),
            Err(reason) => {
                book.fail(i, reason.clone());
                continue;
            }
        };
        for (family, ip) in requested {
            let plan = &book.plans[i];
            let problem = if !plan.svc.families.contains(&family) {
                Some(Reason::WrongFamily {
                    address: ip,
                    family,
                })
            } else if !plan.pools.iter().any(|p| p.contains(ip)) {
                Some(Reason::NotInPool { address: ip })
            } else if plan.chosen.get(&family) == Some(&ip) {
                None
            } else if let Some(holder) = book.owner.get(&ip) {
                Some(Reason::Conflict {
                    address: ip,
                    holder: holder.clone(),
                })
            } else {
                book.claim(i, ip);
                None
            };
            if let Some(reason) = problem {
                book.fail(i, reason);
                break;
            }
        }
    }
}

/// Step 3: every family still missing takes the lowest free address of the first pool that
/// has one. Addresses any Service requests are not handed out to another.
fn take_free(book: &mut Book<'_>) {
    let requested: BTreeSet<IpAddr> = (book.plans.iter())
        .flat_map(|p| p.svc.requested.iter().flat_map(|r| r.values().copied()))
        .collect();
    let mut used: BTreeSet<IpAddr> = book.owner.keys().copied().collect();
    used.extend(&requested);
    for i in 0..book.plans.len() {
        if book.plans[i].failed.is_some() {
            continue;
        }
        let failure = free_families(book, i, &mut used);
        if let Some(reason) = failure {
            // What this Service held is free again for the Services after it.
            for ip in book.plans[i].chosen.values() {
                if !requested.contains(ip) {
                    used.remove(ip);
                }
            }
            book.fail(i, reason);
        }
    }
}

/// Claims the missing families of plan `i`; the reason when one cannot be had.
fn free_families(book: &mut Book<'_>, i: usize, used: &mut BTreeSet<IpAddr>) -> Option<Reason> {
    for family in book.plans[i].svc.families.clone() {
        if book.plans[i].chosen.contains_key(&family) {
            continue;
        }
        let pools: Vec<&Pool> = (book.plans[i].pools.iter().copied())
            .filter(|p| p.has_family(family))
            .collect();
        let free = (pools.iter())
            .flat_map(|p| p.ranges.iter().filter(|r| r.family == family))
            .find_map(|r| r.lowest_free(used));
        match free {
            Some(ip) => {
                used.insert(ip);
                book.claim(i, ip);
            }
            None if pools.is_empty() => return Some(Reason::NoPool { family }),
            None => {
                let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                let pools = names.join(", ");
                return Some(Reason::Exhausted { family, pools });
            }
        }
    }
    None
}

fn decisions(book: &Book<'_>, pools: &[Pool], services: &[LbService]) -> Vec<Decision> {
    let mut out: Vec<Decision> = book
        .plans
        .iter()
        .map(|plan| {
            let outcome = match &plan.failed {
                Some(reason) => Outcome::Unassigned(reason.clone()),
                None => Outcome::Assigned(
                    (plan.svc.families.iter())
                        .filter_map(|f| plan.chosen.get(f))
                        .map(|ip| Ingress {
                            ip: *ip,
                            ports: plan.svc.ports.clone(),
                        })
                        .collect(),
                ),
            };
            Decision {
                namespace: plan.svc.namespace.clone(),
                name: plan.svc.name.clone(),
                outcome,
            }
        })
        .collect();
    out.extend(
        services
            .iter()
            .filter(|s| s.kind == Kind::NotLoadBalancer)
            .filter(|s| {
                s.held
                    .iter()
                    .any(|ip| pools.iter().any(|p| p.contains(*ip)))
            })
            .map(|s| Decision {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                outcome: Outcome::Released,
            }),
    );
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::pool::parse_pools;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pools(yaml: &str) -> Vec<Pool> {
        parse_pools(yaml).unwrap()
    }

    /// A /29 IPv4 pool (usable .1 to .6) and a /126 IPv6 pool (::0 to ::3) for every Service.
    fn default_pools() -> Vec<Pool> {
        pools("pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n- name: v6\n  addresses: ['2001:db8::/126']\n")
    }

    /// A Service of ours in namespace `ns`, created at second `age` of the day.
    fn svc(ns: &str, name: &str, age: u32) -> LbService {
        LbService {
            namespace: ns.into(),
            name: name.into(),
            created: Some(Time(format!("2026-01-01T00:00:{age:02}Z").parse().unwrap())),
            labels: BTreeMap::new(),
            kind: Kind::Ours,
            families: vec![Family::V4],
            requested: Ok(BTreeMap::new()),
            held: vec![],
            ports: vec![Port {
                port: 443,
                protocol: "TCP".into(),
            }],
        }
    }

    fn with_families(mut s: LbService, f: &[Family]) -> LbService {
        s.families = f.to_vec();
        s
    }

    fn holding(mut s: LbService, held: &[&str]) -> LbService {
        s.held = held.iter().map(|h| ip(h)).collect();
        s
    }

    fn requesting(mut s: LbService, value: &str) -> LbService {
        s.requested = parse_request(REQUEST_ANNOTATION, value);
        s
    }

    fn kind(mut s: LbService, k: Kind) -> LbService {
        s.kind = k;
        s
    }

    /// Each decision as `ns/name => ips` or `ns/name => !EventReason: message`.
    fn show(decisions: &[Decision]) -> Vec<String> {
        decisions
            .iter()
            .map(|d| {
                let what = match &d.outcome {
                    Outcome::Assigned(ing) => {
                        let ips: Vec<String> = ing.iter().map(|i| i.ip.to_string()).collect();
                        ips.join(",")
                    }
                    Outcome::Unassigned(r) => format!("!{}: {r}", r.event_reason()),
                    Outcome::Released => "released".into(),
                };
                format!("{}/{} => {what}", d.namespace, d.name)
            })
            .collect()
    }

    fn check(name: &str, pools: &[Pool], services: &[LbService], want: &[&str]) {
        let got = show(&allocate(pools, services));
        assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                g.starts_with(w),
                "{name}: got {g:?}, want it to start with {w:?}"
            );
        }
    }

    #[test]
    fn addresses_go_to_the_older_service_first_and_lowest_first() {
        let p = default_pools();
        check("one", &p, &[svc("a", "web", 1)], &["a/web => 192.0.2.1"]);
        // Input order does not matter: the older Service takes the lower address.
        check(
            "two",
            &p,
            &[svc("z", "young", 9), svc("z", "old", 1)],
            &["z/old => 192.0.2.1", "z/young => 192.0.2.2"],
        );
        // Same age: namespace/name decides.
        check(
            "tie",
            &p,
            &[svc("b", "x", 1), svc("a", "x", 1)],
            &["a/x => 192.0.2.1", "b/x => 192.0.2.2"],
        );
    }

    #[test]
    fn dual_stack_gets_both_families_or_neither() {
        let both = [Family::V6, Family::V4];
        check(
            "both, in spec.ipFamilies order",
            &default_pools(),
            &[with_families(svc("a", "d", 1), &both)],
            &["a/d => 2001:db8::,192.0.2.1"],
        );
        let v4_only = pools("pools:\n- name: v4\n  addresses: [192.0.2.0/29]\n");
        check(
            "no IPv6 pool: nothing, and the IPv4 address stays free",
            &v4_only,
            &[
                holding(with_families(svc("a", "d", 1), &both), &["192.0.2.1"]),
                svc("a", "later", 2),
            ],
            &[
                "a/d => !NoAddressPool: no pool with IPv6 addresses admits this Service",
                "a/later => 192.0.2.1",
            ],
        );
        let one_v6 = pools("pools:\n- name: p\n  addresses: [192.0.2.0/29, '2001:db8::1/128']\n");
        check(
            "IPv6 exhausted: nothing half-done",
            &one_v6,
            &[
                with_families(svc("a", "first", 1), &both),
                with_families(svc("a", "second", 2), &both),
            ],
            &[
                "a/first => 2001:db8::1,192.0.2.1",
                "a/second => !AddressPoolExhausted: no free IPv6 address left in pools p; nothing assigned",
            ],
        );
    }

    #[test]
    fn held_addresses_are_kept_while_valid() {
        let p = default_pools();
        check(
            "restart: nothing moves, the newcomer takes the lowest free",
            &p,
            &[
                holding(svc("a", "young", 9), &["192.0.2.1"]),
                holding(svc("a", "old", 1), &["192.0.2.5"]),
                svc("a", "new", 5),
            ],
            &[
                "a/new => 192.0.2.2",
                "a/old => 192.0.2.5",
                "a/young => 192.0.2.1",
            ],
        );
        check(
            "a held address outside every pool (pool shrunk) is replaced",
            &p,
            &[holding(svc("a", "s", 1), &["198.51.100.1"])],
            &["a/s => 192.0.2.1"],
        );
        check(
            "a held network address (not usable) is replaced",
            &p,
            &[holding(svc("a", "s", 1), &["192.0.2.0"])],
            &["a/s => 192.0.2.1"],
        );
        check(
            "a held address of a family no longer asked for is dropped",
            &p,
            &[holding(
                with_families(svc("a", "s", 1), &[Family::V6]),
                &["192.0.2.3"],
            )],
            &["a/s => 2001:db8::"],
        );
        check(
            "two Services report the same address: the older keeps it",
            &p,
            &[
                holding(svc("a", "young", 9), &["192.0.2.3"]),
                holding(svc("a", "old", 1), &["192.0.2.3"]),
            ],
            &["a/old => 192.0.2.3", "a/young => 192.0.2.1"],
        );
        check(
            "a request for another address moves it",
            &p,
            &[requesting(
                holding(svc("a", "s", 1), &["192.0.2.3"]),
                "192.0.2.4",
            )],
            &["a/s => 192.0.2.4"],
        );
    }

    #[test]
    fn requests_are_honoured_or_refused_with_a_reason() {
        let p = default_pools();
        let both = [Family::V4, Family::V6];
        let cases: &[(&str, LbService, &str)] = &[
            ("one", requesting(svc("a", "s", 1), "192.0.2.6"), "a/s => 192.0.2.6"),
            (
                "both families, spaces allowed",
                requesting(with_families(svc("a", "s", 1), &both), " 2001:db8::3 , 192.0.2.6 "),
                "a/s => 192.0.2.6,2001:db8::3",
            ),
            (
                "one family requested, the other allocated",
                requesting(with_families(svc("a", "s", 1), &both), "2001:db8::2"),
                "a/s => 192.0.2.1,2001:db8::2",
            ),
            (
                "outside the pools",
                requesting(svc("a", "s", 1), "198.51.100.1"),
                "a/s => !InvalidAddressRequest: requested address 198.51.100.1 is in no pool",
            ),
            (
                "broadcast address of a CIDR",
                requesting(svc("a", "s", 1), "192.0.2.7"),
                "a/s => !InvalidAddressRequest: requested address 192.0.2.7 is in no pool",
            ),
            (
                "family not asked for",
                requesting(svc("a", "s", 1), "2001:db8::1"),
                "a/s => !InvalidAddressRequest: requested address 2001:db8::1 is IPv6, which spec.ipFamilies does not list",
            ),
            (
                "not an IP",
                requesting(svc("a", "s", 1), "192.0.2.1,web"),
                "a/s => !InvalidAddressRequest: ouroboros.io/load-balancer-ips: \"web\" is not an IP address",
            ),
            (
                "two of one family",
                requesting(svc("a", "s", 1), "192.0.2.1,192.0.2.2"),
                "a/s => !InvalidAddressRequest: ouroboros.io/load-balancer-ips: two IPv4 addresses requested (192.0.2.1, 192.0.2.2)",
            ),
        ];
        for (name, s, want) in cases {
            check(name, &p, std::slice::from_ref(s), &[want]);
        }
    }

    #[test]
    fn conflicts_go_to_the_holder_then_the_older() {
        let p = default_pools();
        check(
            "no holder: the older requester wins",
            &p,
            &[requesting(svc("a", "young", 9), "192.0.2.4"), requesting(svc("a", "old", 1), "192.0.2.4")],
            &[
                "a/old => 192.0.2.4",
                "a/young => !AddressConflict: requested address 192.0.2.4 is taken by Service a/old",
            ],
        );
        check(
            "the holder keeps it against an older requester",
            &p,
            &[holding(svc("a", "young", 9), &["192.0.2.4"]), requesting(svc("a", "old", 1), "192.0.2.4")],
            &[
                "a/old => !AddressConflict: requested address 192.0.2.4 is taken by Service a/young",
                "a/young => 192.0.2.4",
            ],
        );
        check(
            "an address another load balancer reports is taken",
            &p,
            &[
                kind(
                    holding(svc("lb", "metal", 0), &["192.0.2.1", "192.0.2.2"]),
                    Kind::OtherLoadBalancer,
                ),
                requesting(svc("a", "r", 2), "192.0.2.2"),
                svc("a", "s", 1),
            ],
            &[
                "a/r => !AddressConflict: requested address 192.0.2.2 is taken by Service lb/metal",
                "a/s => 192.0.2.3",
            ],
        );
        check(
            "automatic allocation leaves a younger Service's request alone",
            &p,
            &[
                requesting(svc("a", "young", 9), "192.0.2.1"),
                svc("a", "old", 1),
            ],
            &["a/old => 192.0.2.2", "a/young => 192.0.2.1"],
        );
    }

    #[test]
    fn pools_are_taken_in_order_and_honour_namespaces_and_selectors() {
        let p = pools(
            "pools:\n\
             - name: small\n  addresses: [192.0.2.10-192.0.2.10]\n\
             - name: web-only\n  addresses: [198.51.100.0/30]\n  namespaces: [web]\n\
             - name: labelled\n  addresses: [203.0.113.0/30]\n  serviceSelector: {matchLabels: {tier: edge}}\n",
        );
        let mut labelled = svc("x", "l", 3);
        labelled.labels.insert("tier".into(), "edge".into());
        check(
            "first pool, then the next that admits",
            &p,
            &[
                svc("web", "a", 1),
                svc("web", "b", 2),
                svc("web", "c", 3),
                svc("x", "d", 4),
                labelled,
            ],
            &[
                "web/a => 192.0.2.10",
                "web/b => 198.51.100.1",
                "web/c => 198.51.100.2",
                "x/d => !AddressPoolExhausted: no free IPv4 address left in pools small;",
                "x/l => 203.0.113.1",
            ],
        );
        check(
            "no pool admits",
            &pools("pools:\n- name: web-only\n  addresses: [198.51.100.0/30]\n  namespaces: [web]\n"),
            &[svc("x", "a", 1), requesting(svc("x", "b", 2), "198.51.100.1")],
            &[
                "x/a => !NoAddressPool: no pool with IPv4 addresses admits this Service",
                "x/b => !InvalidAddressRequest: requested address 198.51.100.1 is in no pool that admits",
            ],
        );
        check(
            "a held address in a pool that no longer admits the Service is replaced",
            &p,
            &[holding(svc("x", "moved", 1), &["198.51.100.1"])],
            &["x/moved => 192.0.2.10"],
        );
    }

    #[test]
    fn services_leaving_the_class_are_released_and_others_left_alone() {
        let p = default_pools();
        check(
            "released: its address is free for another",
            &p,
            &[
                kind(
                    holding(svc("a", "gone", 0), &["192.0.2.1"]),
                    Kind::NotLoadBalancer,
                ),
                svc("a", "new", 5),
            ],
            &["a/gone => released", "a/new => 192.0.2.1"],
        );
        check(
            "not ours, no address of our pools: no decision",
            &p,
            &[
                kind(
                    holding(svc("a", "cluster-ip", 0), &["198.51.100.1"]),
                    Kind::NotLoadBalancer,
                ),
                kind(svc("a", "plain", 0), Kind::NotLoadBalancer),
                kind(
                    holding(svc("a", "metal", 0), &["192.0.2.6"]),
                    Kind::OtherLoadBalancer,
                ),
            ],
            &[],
        );
    }

    #[test]
    fn ingress_carries_the_service_ports() {
        let mut s = svc("a", "s", 1);
        s.ports.push(Port {
            port: 53,
            protocol: "UDP".into(),
        });
        let d = allocate(&default_pools(), &[s.clone()]);
        assert_eq!(
            d[0].outcome,
            Outcome::Assigned(vec![Ingress {
                ip: ip("192.0.2.1"),
                ports: s.ports
            }])
        );
    }

    fn service(json: serde_json::Value) -> Service {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn reading_a_service() {
        let s = service(serde_json::json!({
            "metadata": {"namespace": "web", "name": "traefik", "labels": {"app": "t"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"ouroboros.io/load-balancer-ips": "2001:db8::5,192.0.2.5"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "ouroboros.io/edge",
                "ipFamilies": ["IPv6", "IPv4"], "loadBalancerIP": "192.0.2.9",
                "ports": [{"port": 443}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.5", "ipMode": "Proxy"}, {"hostname": "lb.example"}]}}
        }));
        let l = LbService::from_service(&s, DEFAULT_CLASS);
        assert_eq!(l.key(), "web/traefik");
        assert_eq!(l.kind, Kind::Ours);
        assert_eq!(l.families, vec![Family::V6, Family::V4]);
        assert_eq!(l.held, vec![ip("192.0.2.5")]);
        assert_eq!(l.labels.get("app").map(String::as_str), Some("t"));
        // The annotation wins over the deprecated field.
        assert_eq!(
            l.requested,
            Ok([
                (Family::V4, ip("192.0.2.5")),
                (Family::V6, ip("2001:db8::5"))
            ]
            .into())
        );
        let protocols: Vec<(i32, &str)> = l
            .ports
            .iter()
            .map(|p| (p.port, p.protocol.as_str()))
            .collect();
        assert_eq!(protocols, vec![(443, "TCP"), (53, "UDP")]);
        assert_eq!(
            LbService::from_service(&s, "other.io/lb").kind,
            Kind::OtherLoadBalancer
        );

        let legacy = service(serde_json::json!({
            "metadata": {"namespace": "a", "name": "b"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "ouroboros.io/edge", "loadBalancerIP": "192.0.2.9"}
        }));
        let l = LbService::from_service(&legacy, DEFAULT_CLASS);
        assert_eq!(l.requested, Ok([(Family::V4, ip("192.0.2.9"))].into()));
        assert_eq!(l.families, vec![Family::V4], "no ipFamilies: IPv4");
        let bad = parse_request("spec.loadBalancerIP", "x");
        assert_eq!(bad.unwrap_err().to_string(), "spec.loadBalancerIP: \"x\" is not an IP address; write IPs separated by commas, at most one per IP family");

        let default_lb = service(serde_json::json!({"spec": {"type": "LoadBalancer"}}));
        assert_eq!(
            LbService::from_service(&default_lb, DEFAULT_CLASS).kind,
            Kind::OtherLoadBalancer
        );
        let cluster_ip = service(serde_json::json!({"spec": {"type": "ClusterIP"}}));
        assert_eq!(
            LbService::from_service(&cluster_ip, DEFAULT_CLASS).kind,
            Kind::NotLoadBalancer
        );
    }
}
