//! Address pools of the edge load balancer, parsed from YAML (a ConfigMap key) and validated.
//!
//! ```yaml
//! pools:
//!   - name: public
//!     addresses: [192.0.2.0/28, 2001:db8::/124, 198.51.100.10-198.51.100.20]
//!     namespaces: [web]                      # optional: only Services in these namespaces
//!     serviceSelector:                       # optional: only Services with these labels
//!       matchLabels: {edge: public}
//!     l2: {interface: eth0}                  # optional: announce the addresses (layer 2)
//! ```
//!
//! Rules (documented in docs/edge.md):
//! - an IPv4 CIDR of prefix length 30 or shorter leaves out its network and broadcast addresses
//!   (`.0` and `.255` of a /24 are dropped by some routers and client stacks, and a /30 is a
//!   point-to-point link whose ends are the two middle addresses); a /31 (RFC 3021) and a /32 are
//!   used whole. IPv6 has no broadcast: CIDRs are used whole. Ranges are taken as written;
//! - a CIDR with host bits set (`192.0.2.5/28`) is refused, naming the network it probably meant;
//! - entries may not overlap, inside one pool or across pools: an address belongs to one pool;
//! - a pool needs a name (a DNS label, unique) and at least one entry;
//! - `l2` makes the edges elect one holder per address, which puts it on an interface and
//!   announces it (`super::l2`); `l2: {}` finds the interface by the network that contains the
//!   address, `l2: {interface: NAME}` names it (a Linux interface name: 1 to 15 bytes, no `/`,
//!   no whitespace). Without `l2`, the addresses must already be routed to the edge hosts.
//!
//! The arithmetic is written here: no CIDR crate (ipnet, cidr, ipnetwork) is in Cargo.lock,
//! and an inclusive `u128` interval per entry is all the allocator needs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

use crate::dns_name::is_label;

/// An IP family, as Kubernetes spells it in `spec.ipFamilies`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// An address as a number, so that ranges of both families share one arithmetic.
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(family: Family, n: u128) -> IpAddr {
    match family {
        // Only called with numbers taken from an IPv4 range, which fit in 32 bits.
        Family::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// One entry of a pool: the inclusive interval of usable addresses, and the entry as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrRange {
    pub entry: String,
    pub family: Family,
    pub first: u128,
    pub last: u128,
}

impl AddrRange {
    pub fn contains(&self, ip: IpAddr) -> bool {
        Family::of(ip) == self.family && (self.first..=self.last).contains(&to_u128(ip))
    }

    /// The lowest address of this range not in `used`. `used` is small next to a range (an
    /// IPv6 /64 has 2^64 addresses), so this walks `used`, never the range.
    pub fn lowest_free(&self, used: &BTreeSet<IpAddr>) -> Option<IpAddr> {
        let mut n = self.first;
        loop {
            let ip = from_u128(self.family, n);
            if !used.contains(&ip) {
                return Some(ip);
            }
            if n == self.last {
                return None;
            }
            n += 1;
        }
    }

    fn overlaps(&self, other: &AddrRange) -> bool {
        self.family == other.family && self.first <= other.last && other.first <= self.last
    }
}

/// Parses one `addresses` entry: `IP/PREFIX` or `FIRST-LAST` (a single IP is `IP/32` or
/// `IP/128`). The error says what is wrong with the entry; the caller names the pool.
pub fn parse_entry(entry: &str) -> Result<AddrRange, String> {
    let s = entry.trim();
    if let Some((first, last)) = s.split_once('-') {
        let (first, last) = (parse_ip(first.trim())?, parse_ip(last.trim())?);
        if Family::of(first) != Family::of(last) {
            return Err("a range cannot go from one IP family to the other".into());
        }
        if to_u128(first) > to_u128(last) {
            return Err(format!(
                "the range ends ({last}) before it starts ({first})"
            ));
        }
        return Ok(AddrRange {
            entry: s.to_string(),
            family: Family::of(first),
            first: to_u128(first),
            last: to_u128(last),
        });
    }
    let Some((ip, len)) = s.split_once('/') else {
        return Err(
            "expected a CIDR (192.0.2.0/28, 2001:db8::/124) or a range (192.0.2.10-192.0.2.20)"
                .into(),
        );
    };
    let ip = parse_ip(ip.trim())?;
    let family = Family::of(ip);
    let bits: u32 = if family == Family::V4 { 32 } else { 128 };
    let len: u32 = len
        .trim()
        .parse()
        .ok()
        .filter(|l| *l <= bits)
        .ok_or_else(|| format!("the prefix length must be a number from 0 to {bits}"))?;
    let host_bits = bits - len;
    let host_mask: u128 = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    let network = to_u128(ip) & !host_mask;
    if network != to_u128(ip) {
        return Err(format!(
            "host bits are set: the network is {}/{len}",
            from_u128(family, network)
        ));
    }
    let (mut first, mut last) = (network, network | host_mask);
    if family == Family::V4 && len <= 30 {
        first += 1;
        last -= 1;
    }
    Ok(AddrRange {
        entry: s.to_string(),
        family,
        first,
        last,
    })
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not an IPv4 or IPv6 address"))
}

/// A validated pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub ranges: Vec<AddrRange>,
    /// Empty: every namespace.
    pub namespaces: BTreeSet<String>,
    /// Empty: every Service.
    pub match_labels: BTreeMap<String, String>,
    /// Layer-2 announcement of the addresses; `None`: they are routed to the edge hosts.
    pub l2: Option<L2>,
}

/// How a pool's addresses are announced on the link.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L2 {
    /// The interface to put the addresses on; `None`: the one whose network contains them.
    #[serde(default)]
    pub interface: Option<String>,
}

impl Pool {
    /// The pool serves a Service in `namespace` with `labels`.
    pub fn admits(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        (self.namespaces.is_empty() || self.namespaces.contains(namespace))
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    pub fn has_family(&self, family: Family) -> bool {
        self.ranges.iter().any(|r| r.family == family)
    }
}

/// What is wrong with a pool document; each names the pool and the entry, and what to change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("the pool document is not valid YAML for pools: {0} (expected `pools:` with a list of {{name, addresses, namespaces, serviceSelector}})")]
    Yaml(String),
    #[error(
        "pool {name:?}: the name must be a DNS label (lowercase letters, digits, '-', at most 63)"
    )]
    Name { name: String },
    #[error("pool {name:?} is defined twice: give each pool its own name")]
    Duplicate { name: String },
    #[error("pool {pool:?} has no addresses: add a CIDR or a range, or remove the pool")]
    Empty { pool: String },
    #[error("pool {pool:?}, address entry {entry:?}: {reason}")]
    Entry {
        pool: String,
        entry: String,
        reason: String,
    },
    #[error("pool {pool:?}, l2.interface {interface:?} is not a Linux interface name (1 to 15 bytes, no '/' or whitespace)")]
    Interface { pool: String, interface: String },
    #[error("pool {pool:?}, namespace {namespace:?} is not a namespace name (a DNS label)")]
    Namespace { pool: String, namespace: String },
    #[error("pool {pool:?}, entry {entry:?} overlaps pool {other_pool:?}, entry {other_entry:?}: an address belongs to one pool; shrink one of them")]
    Overlap {
        pool: String,
        entry: String,
        other_pool: String,
        other_entry: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    pools: Vec<PoolSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolSpec {
    name: String,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    service_selector: Option<Selector>,
    #[serde(default)]
    l2: Option<L2>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Selector {
    #[serde(default, deserialize_with = "unique_labels")]
    match_labels: BTreeMap<String, String>,
}

/// `matchLabels` with each key once: deserializing into a map keeps the last of two equal keys
/// silently, and a selector that means something other than what was read is worse than none.
fn unique_labels<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Labels;
    impl<'de> serde::de::Visitor<'de> for Labels {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of label keys to values")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format!(
                        "matchLabels: duplicate key {k:?}"
                    )));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Labels)
}

/// Parses and validates a pool document. Pools keep their order: the first pool that admits a
/// Service is the one it takes addresses from.
pub fn parse_pools(yaml: &str) -> Result<Vec<Pool>, PoolError> {
    let doc: Document = yaml_serde::from_str(yaml).map_err(|e| PoolError::Yaml(e.to_string()))?;
    let mut pools: Vec<Pool> = Vec::with_capacity(doc.pools.len());
    for spec in doc.pools {
        let pool = validate_pool(spec)?;
        if pools.iter().any(|p| p.name == pool.name) {
            return Err(PoolError::Duplicate { name: pool.name });
        }
        for r in &pool.ranges {
            let clash = pools
                .iter()
                .flat_map(|p| p.ranges.iter().map(move |o| (p, o)))
                .find(|(_, o)| o.overlaps(r));
            if let Some((p, o)) = clash {
                return Err(PoolError::Overlap {
                    pool: pool.name.clone(),
                    entry: r.entry.clone(),
                    other_pool: p.name.clone(),
                    other_entry: o.entry.clone(),
                });
            }
        }
        pools.push(pool);
    }
    Ok(pools)
}

fn validate_pool(spec: PoolSpec) -> Result<Pool, PoolError> {
    if !is_label(&spec.name) {
        return Err(PoolError::Name { name: spec.name });
    }
    if spec.addresses.is_empty() {
        return Err(PoolError::Empty { pool: spec.name });
    }
    let mut ranges: Vec<AddrRange> = Vec::with_capacity(spec.addresses.len());
    for entry in &spec.addresses {
        let r = parse_entry(entry).map_err(|reason| PoolError::Entry {
            pool: spec.name.clone(),
            entry: entry.clone(),
            reason,
        })?;
        if let Some(o) = ranges.iter().find(|o| o.overlaps(&r)) {
            return Err(PoolError::Overlap {
                pool: spec.name.clone(),
                entry: r.entry,
                other_pool: spec.name.clone(),
                other_entry: o.entry.clone(),
            });
        }
        ranges.push(r);
    }
    if let Some(ns) = spec.namespaces.iter().find(|n| !is_label(n)) {
        return Err(PoolError::Namespace {
            pool: spec.name.clone(),
            namespace: ns.clone(),
        });
    }
    let interface = spec.l2.as_ref().and_then(|l| l.interface.as_deref());
    if let Some(i) = interface.filter(|i| !is_interface_name(i)) {
        return Err(PoolError::Interface {
            pool: spec.name.clone(),
            interface: i.to_string(),
        });
    }
    Ok(Pool {
        l2: spec.l2,
        name: spec.name,
        ranges,
        namespaces: spec.namespaces.into_iter().collect(),
        match_labels: spec
            .service_selector
            .map(|s| s.match_labels)
            .unwrap_or_default(),
    })
}

/// A name Linux accepts for an interface (dev_valid_name in net/core/dev.c).
fn is_interface_name(s: &str) -> bool {
    (1..16).contains(&s.len())
        && s != "."
        && s != ".."
        && !s
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// (entry, first usable, last usable)
    #[test]
    fn entries_give_their_usable_addresses() {
        let cases = [
            ("192.0.2.0/28", "192.0.2.1", "192.0.2.14"),
            ("192.0.2.0/30", "192.0.2.1", "192.0.2.2"),
            ("192.0.2.0/31", "192.0.2.0", "192.0.2.1"),
            ("192.0.2.7/32", "192.0.2.7", "192.0.2.7"),
            ("0.0.0.0/0", "0.0.0.1", "255.255.255.254"),
            ("2001:db8::/124", "2001:db8::", "2001:db8::f"),
            ("2001:db8::5/128", "2001:db8::5", "2001:db8::5"),
            ("::/0", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            ("192.0.2.10-192.0.2.20", "192.0.2.10", "192.0.2.20"),
            (" 192.0.2.9 - 192.0.2.9 ", "192.0.2.9", "192.0.2.9"),
            ("2001:db8::1-2001:db8::ff", "2001:db8::1", "2001:db8::ff"),
        ];
        for (entry, first, last) in cases {
            let r = parse_entry(entry).unwrap_or_else(|e| panic!("{entry}: {e}"));
            assert_eq!(r.first, to_u128(ip(first)), "{entry}");
            assert_eq!(r.last, to_u128(ip(last)), "{entry}");
            assert_eq!(r.family, Family::of(ip(first)), "{entry}");
        }
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let cases = [
            (
                "192.0.2.5/28",
                "host bits are set: the network is 192.0.2.0/28",
            ),
            ("2001:db8::1/124", "the network is 2001:db8::/124"),
            ("192.0.2.0/33", "from 0 to 32"),
            ("2001:db8::/129", "from 0 to 128"),
            ("192.0.2.0/x", "from 0 to 32"),
            (
                "192.0.2.300/24",
                "\"192.0.2.300\" is not an IPv4 or IPv6 address",
            ),
            (
                "192.0.2.20-192.0.2.10",
                "ends (192.0.2.10) before it starts (192.0.2.20)",
            ),
            ("192.0.2.1-2001:db8::1", "one IP family to the other"),
            ("192.0.2.1", "expected a CIDR"),
            ("", "expected a CIDR"),
        ];
        for (entry, want) in cases {
            let err = parse_entry(entry).unwrap_err();
            assert!(err.contains(want), "{entry}: {err}");
        }
    }

    #[test]
    fn lowest_free_skips_used_addresses_and_stops_at_the_end() {
        let r = parse_entry("192.0.2.0/30").unwrap();
        let mut used = BTreeSet::new();
        assert_eq!(r.lowest_free(&used), Some(ip("192.0.2.1")));
        used.insert(ip("192.0.2.1"));
        assert_eq!(r.lowest_free(&used), Some(ip("192.0.2.2")));
        used.insert(ip("192.0.2.2"));
        assert_eq!(r.lowest_free(&used), None);
        // The top of the IPv6 space does not overflow.
        let top = parse_entry("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127").unwrap();
        let used: BTreeSet<IpAddr> = [
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"),
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ]
        .into();
        assert_eq!(top.lowest_free(&used), None);
    }

    #[test]
    fn a_document_parses_into_ordered_pools() {
        let pools = parse_pools(
            "pools:\n\
             - name: public\n  addresses: [192.0.2.0/28, '2001:db8::/124']\n  namespaces: [web]\n  serviceSelector:\n    matchLabels: {edge: public}\n\
             - name: rest\n  addresses: ['198.51.100.10-198.51.100.20']\n",
        )
        .unwrap();
        assert_eq!(pools.len(), 2);
        assert_eq!(pools[0].name, "public");
        assert_eq!(pools[0].ranges.len(), 2);
        assert!(pools[0].has_family(Family::V6) && !pools[1].has_family(Family::V6));
        let labels: BTreeMap<String, String> = [("edge".into(), "public".into())].into();
        assert!(pools[0].admits("web", &labels));
        assert!(!pools[0].admits("other", &labels));
        assert!(!pools[0].admits("web", &BTreeMap::new()));
        assert!(pools[1].admits("any", &BTreeMap::new()));
        assert_eq!(pools[0].l2, None);
        assert!(pools[1].contains(ip("198.51.100.20")) && !pools[1].contains(ip("198.51.100.21")));
    }

    #[test]
    fn l2_pools_name_their_interface_or_find_it() {
        let pools = parse_pools(
            "pools:\n- name: lan\n  addresses: [192.0.2.0/28]\n  l2: {interface: eth0}\n\
             - name: found\n  addresses: [198.51.100.0/28]\n  l2: {}\n",
        )
        .unwrap();
        let named = L2 {
            interface: Some("eth0".into()),
        };
        assert_eq!(pools[0].l2, Some(named));
        assert_eq!(pools[1].l2, Some(L2::default()));
        for ok in ["eth0", "enp0s31f6", "br-lan.100", "a23456789012345"] {
            assert!(is_interface_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "eth 0", "eth0:1", "a/b", "a234567890123456"] {
            assert!(!is_interface_name(bad), "{bad}");
        }
    }

    #[test]
    fn bad_documents_name_the_pool_and_entry() {
        let cases: &[(&str, &str)] = &[
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  adresses: []\n", "unknown field `adresses`"),
            ("pool: []\n", "unknown field `pool`"),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  serviceSelector: {matchExpressions: []}\n", "unknown field `matchExpressions`"),
            ("pools:\n- name: a\n  name: b\n  addresses: [192.0.2.0/28]\n", "duplicate"),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  serviceSelector: {matchLabels: {x: '1', x: '2'}}\n", "duplicate"),
            ("pools:\n- name: a\n", "pool \"a\" has no addresses"),
            ("pools:\n- name: a\n  addresses: []\n", "pool \"a\" has no addresses"),
            ("pools:\n- name: Bad_Name\n  addresses: [192.0.2.0/28]\n", "pool \"Bad_Name\": the name must be a DNS label"),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n- name: a\n  addresses: [192.0.3.0/28]\n", "pool \"a\" is defined twice"),
            ("pools:\n- name: a\n  addresses: [192.0.2.5/28]\n", "pool \"a\", address entry \"192.0.2.5/28\": host bits are set"),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28, 192.0.2.8-192.0.2.9]\n", "pool \"a\", entry \"192.0.2.8-192.0.2.9\" overlaps pool \"a\", entry \"192.0.2.0/28\""),
            ("pools:\n- name: a\n  addresses: ['2001:db8::/120']\n- name: b\n  addresses: ['2001:db8::ff-2001:db8::1ff']\n", "pool \"b\", entry \"2001:db8::ff-2001:db8::1ff\" overlaps pool \"a\""),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  namespaces: [Web]\n", "pool \"a\", namespace \"Web\""),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  l2: {interface: eth0/1}\n", "pool \"a\", l2.interface \"eth0/1\" is not"),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  l2: {interface: a-very-long-name}\n", "l2.interface \"a-very-long-name\""),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  l2: {interface: ''}\n", "l2.interface \"\""),
            ("pools:\n- name: a\n  addresses: [192.0.2.0/28]\n  l2: {iface: eth0}\n", "unknown field `iface`"),
        ];
        for (yaml, want) in cases {
            let err = parse_pools(yaml).unwrap_err().to_string();
            assert!(err.contains(want), "{yaml}\n=> {err}");
        }
        // Adjacent entries and the two families of the same numbers do not overlap.
        parse_pools("pools:\n- name: a\n  addresses: [0.0.0.0/28, 0.0.0.16/28]\n- name: b\n  addresses: ['::/124']\n").unwrap();
    }
}
