//! PURE: which old external-dns objects a sync may delete, given which of our writes are
//! confirmed. An old object is one that publishes names and is to go: an object the reference
//! tool wrote and `--external-dns-adopt` takes over, one of ours under a name the current naming
//! scheme no longer gives, or one whose names are no longer wanted. Deleting it before the object
//! of ours that publishes the same names is written withdraws those names from DNS until a retry
//! succeeds, or for good when RBAC refuses the write; so an old object goes only once every
//! object of ours that publishes one of its names is confirmed (written in this sync, or listed
//! already holding the desired state). Names no object of ours publishes are not waited for:
//! they are no longer wanted.
//!
//! Also here, because the decision needs them: what a DNSEndpoint or an annotated Service
//! publishes, read from its JSON as external-dns reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde_json::Value;

/// One record set an object publishes: (DNS name, record type), e.g. `("www.example.com", "A")`.
pub type Record = (String, String);

/// What an object publishes, as far as its fields can be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publishes {
    Records(BTreeSet<Record>),
    /// No name could be read (an unexpected shape): it may publish anything.
    Unknown,
}

impl Publishes {
    /// The DNS names, or `None` when [`Publishes::Unknown`].
    pub fn names(&self) -> Option<BTreeSet<&str>> {
        match self {
            Publishes::Records(r) => Some(r.iter().map(|(n, _)| n.as_str()).collect()),
            Publishes::Unknown => None,
        }
    }
}

/// One desired object of ours: what it publishes and whether it is confirmed written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ours {
    pub records: BTreeSet<Record>,
    /// Written successfully in this sync, or listed already holding the desired state.
    pub confirmed: bool,
}

/// What to do with one old object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Delete,
    /// Keep it: it still publishes names whose object of ours (these, by name) is not
    /// confirmed.
    Keep {
        waiting_for: Vec<String>,
    },
}

/// The verdict for each of `old` (by name), given `ours` (our desired objects by name). An old
/// object whose names cannot be read waits for every object of ours.
pub fn deletions(
    ours: &BTreeMap<String, Ours>,
    old: &BTreeMap<String, Publishes>,
) -> BTreeMap<String, Verdict> {
    old.iter()
        .map(|(name, publishes)| {
            let names = publishes.names();
            let waiting_for: Vec<String> = ours
                .iter()
                .filter(|(_, o)| !o.confirmed)
                .filter(|(_, o)| match &names {
                    None => true,
                    Some(names) => o.records.iter().any(|(n, _)| names.contains(n.as_str())),
                })
                .map(|(n, _)| n.clone())
                .collect();
            let verdict = if waiting_for.is_empty() {
                Verdict::Delete
            } else {
                Verdict::Keep { waiting_for }
            };
            (name.clone(), verdict)
        })
        .collect()
}

/// What a `DNSEndpoint` publishes: each endpoint's `dnsName` and `recordType` that has a target.
pub fn endpoint_records(body: &Value) -> Publishes {
    let records: BTreeSet<Record> = body["spec"]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["targets"].as_array().is_some_and(|t| !t.is_empty()))
        .filter_map(|e| {
            let name = e["dnsName"].as_str()?.trim_end_matches('.');
            let kind = e["recordType"].as_str().unwrap_or("A");
            (!name.is_empty()).then(|| (name.to_string(), kind.to_string()))
        })
        .collect();
    known(records)
}

/// What an annotated Service publishes: each name of a `hostname` annotation (comma-separated)
/// under any of `prefixes`, with A for the IPv4 and AAAA for the IPv6 addresses of the `target`
/// annotation under the same prefix (CNAME for a name). Without a target external-dns picks
/// the addresses itself: the type is then `*` (any).
pub fn service_records(body: &Value, prefixes: &[&str]) -> Publishes {
    let annotations = &body["metadata"]["annotations"];
    let mut records = BTreeSet::new();
    for p in prefixes {
        let Some(hosts) = annotations[format!("{p}hostname")].as_str() else {
            continue;
        };
        let types: BTreeSet<&str> = match annotations[format!("{p}target")].as_str() {
            Some(targets) => targets
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| match t.parse::<IpAddr>() {
                    Ok(ip) if ip.to_canonical().is_ipv4() => "A",
                    Ok(_) => "AAAA",
                    Err(_) => "CNAME",
                })
                .collect(),
            None => BTreeSet::from(["*"]),
        };
        for host in hosts.split(',').map(|h| h.trim().trim_end_matches('.')) {
            if host.is_empty() {
                continue;
            }
            for t in &types {
                records.insert((host.to_string(), t.to_string()));
            }
        }
    }
    known(records)
}

fn known(records: BTreeSet<Record>) -> Publishes {
    if records.is_empty() {
        Publishes::Unknown
    } else {
        Publishes::Records(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recs(list: &[(&str, &str)]) -> BTreeSet<Record> {
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    /// (object name, its records, confirmed)
    type OursRow<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    fn ours(list: &[OursRow]) -> BTreeMap<String, Ours> {
        list.iter()
            .map(|(name, r, confirmed)| {
                let o = Ours {
                    records: recs(r),
                    confirmed: *confirmed,
                };
                (name.to_string(), o)
            })
            .collect()
    }

    fn keep(waiting: &[&str]) -> Verdict {
        Verdict::Keep {
            waiting_for: waiting.iter().map(|s| s.to_string()).collect(),
        }
    }

    const WWW_A: (&str, &str) = ("www.example.com", "A");
    const WWW_AAAA: (&str, &str) = ("www.example.com", "AAAA");
    const API_A: (&str, &str) = ("api.example.com", "A");
    const OLD_A: (&str, &str) = ("old.example.com", "A");

    #[test]
    fn deletions_table() {
        let written = [WWW_A, WWW_AAAA];
        // (row, ours: (name, records, confirmed), old object's records (None: unreadable), verdict)
        type Row<'a> = (
            &'a str,
            Vec<OursRow<'a>>,
            Option<Vec<(&'a str, &'a str)>>,
            Verdict,
        );
        let rows: Vec<Row> = vec![
            (
                "ours for the name is written: theirs goes",
                vec![("www", &written, true)],
                Some(vec![WWW_A]),
                Verdict::Delete,
            ),
            (
                "our write failed: theirs stays",
                vec![("www", &written, false)],
                Some(vec![WWW_A]),
                keep(&["www"]),
            ),
            (
                "their AAAA-only object (one per family) waits for ours too",
                vec![("www", &[WWW_A], false)],
                Some(vec![WWW_AAAA]),
                keep(&["www"]),
            ),
            (
                "a record type we do not publish is not waited for once the name is ours",
                vec![("www", &[WWW_A], true)],
                Some(vec![WWW_A, WWW_AAAA]),
                Verdict::Delete,
            ),
            (
                "a name nobody of ours publishes is no longer wanted",
                vec![("www", &written, false)],
                Some(vec![OLD_A]),
                Verdict::Delete,
            ),
            (
                "several names: each one's object must be written",
                vec![("www", &written, true), ("api", &[API_A], false)],
                Some(vec![WWW_A, API_A]),
                keep(&["api"]),
            ),
            (
                "several names, all written",
                vec![("www", &written, true), ("api", &[API_A], true)],
                Some(vec![WWW_A, API_A, OLD_A]),
                Verdict::Delete,
            ),
            (
                "unrelated failures do not hold it back",
                vec![("www", &written, true), ("api", &[API_A], false)],
                Some(vec![WWW_A]),
                Verdict::Delete,
            ),
            (
                "unreadable: waits for every write",
                vec![("www", &written, true), ("api", &[API_A], false)],
                None,
                keep(&["api"]),
            ),
            (
                "unreadable, every write confirmed",
                vec![("www", &written, true), ("api", &[API_A], true)],
                None,
                Verdict::Delete,
            ),
            (
                "cleanup: nothing of ours is wanted, so everything goes",
                vec![],
                Some(vec![WWW_A]),
                Verdict::Delete,
            ),
            ("cleanup, unreadable", vec![], None, Verdict::Delete),
        ];
        for (row, o, old, want) in rows {
            let publishes = match old {
                Some(r) => Publishes::Records(recs(&r)),
                None => Publishes::Unknown,
            };
            let old = BTreeMap::from([("theirs".to_string(), publishes)]);
            let got = deletions(&ours(&o), &old);
            assert_eq!(got, BTreeMap::from([("theirs".to_string(), want)]), "{row}");
        }
    }

    #[test]
    fn each_old_object_is_judged_on_its_own() {
        let o = ours(&[("www", &[WWW_A], false), ("api", &[API_A], true)]);
        let old = BTreeMap::from([
            ("a".to_string(), Publishes::Records(recs(&[WWW_A]))),
            ("b".to_string(), Publishes::Records(recs(&[API_A]))),
        ]);
        let got = deletions(&o, &old);
        assert_eq!(got["a"], keep(&["www"]));
        assert_eq!(got["b"], Verdict::Delete);
    }

    #[test]
    fn endpoint_records_table() {
        let ep = |endpoints: Value| json!({"spec": {"endpoints": endpoints}});
        for (row, body, want) in [
            (
                "dual stack",
                ep(json!([
                    {"dnsName": "www.example.com", "recordType": "A", "targets": ["10.0.0.1"]},
                    {"dnsName": "www.example.com", "recordType": "AAAA", "targets": ["fd00::1"]}
                ])),
                Publishes::Records(recs(&[WWW_A, WWW_AAAA])),
            ),
            (
                "trailing dot, no target on one",
                ep(json!([
                    {"dnsName": "www.example.com.", "recordType": "A", "targets": ["10.0.0.1"]},
                    {"dnsName": "api.example.com", "recordType": "A", "targets": []}
                ])),
                Publishes::Records(recs(&[WWW_A])),
            ),
            ("no endpoints", ep(json!([])), Publishes::Unknown),
            ("no spec", json!({"metadata": {}}), Publishes::Unknown),
        ] {
            assert_eq!(endpoint_records(&body), want, "{row}");
        }
    }

    #[test]
    fn service_records_table() {
        let svc = |a: Value| json!({"metadata": {"annotations": a}});
        let alpha = [
            "external-dns.alpha.kubernetes.io/",
            "external-dns.kubernetes.io/",
        ];
        for (row, body, want) in [
            (
                "both families under the alpha prefix",
                svc(json!({
                    "external-dns.alpha.kubernetes.io/hostname": "www.example.com",
                    "external-dns.alpha.kubernetes.io/target": "10.0.0.1, fd00::1"
                })),
                Publishes::Records(recs(&[WWW_A, WWW_AAAA])),
            ),
            (
                "several names, a mapped IPv4 address",
                svc(json!({
                    "external-dns.kubernetes.io/hostname": "www.example.com,api.example.com.",
                    "external-dns.kubernetes.io/target": "::ffff:10.0.0.1"
                })),
                Publishes::Records(recs(&[WWW_A, API_A])),
            ),
            (
                "no target: any type",
                svc(json!({"external-dns.kubernetes.io/hostname": "www.example.com"})),
                Publishes::Records(recs(&[("www.example.com", "*")])),
            ),
            (
                "a name as target",
                svc(json!({
                    "external-dns.kubernetes.io/hostname": "www.example.com",
                    "external-dns.kubernetes.io/target": "lb.example.net"
                })),
                Publishes::Records(recs(&[("www.example.com", "CNAME")])),
            ),
            (
                "a prefix not read",
                svc(json!({"internal-dns/hostname": "www.example.com"})),
                Publishes::Unknown,
            ),
            (
                "no annotations",
                json!({"metadata": {}}),
                Publishes::Unknown,
            ),
        ] {
            assert_eq!(service_records(&body, &alpha), want, "{row}");
        }
    }
}
