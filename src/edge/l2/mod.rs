//! Layer-2 announcement of the addresses of `l2` pools: the edges elect one holder per address
//! through a Lease per address (the election of [`crate::controller::lease`]); the holder puts
//! the address on its interface (/32 or /128; IPv6 without duplicate address detection, so it
//! is usable at once) and announces it: a gratuitous ARP (IPv4) or an unsolicited Neighbor
//! Advertisement (IPv6), [`ANNOUNCEMENTS`] times [`ANNOUNCE_EVERY`] apart, so the hosts on the
//! link send to its MAC from then on. It takes the address off when the Lease is lost, the
//! address is no longer allocated, or the edge stops (then before it releases the Lease, so the
//! next holder does not find it still here). Non-holders listen on the address too (IP_FREEBIND:
//! [`super::listeners`]), so a new holder serves the moment the address arrives.
//!
//! Failover: a holder that stops releases its Leases; a standby sees that at its next read of
//! the Lease, which comes at the expiry of the renewal it last saw: within the lease duration
//! (15 s), 10 s apart once renewals are seen. A holder that dies keeps them until they expire:
//! 15 s after its last renewal, plus up to a second before a standby takes it.
//!
//! API calls: those of [`crate::controller::lease`] on each Lease `<--lease-name>-<address>`
//! (`get`, `patch`, and `create` on leases) in the edge's lease namespace.

pub mod frames;
pub mod link;
pub mod netlink;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::load_balancer::Served;
use super::pool::{Pool, L2};
use crate::controller::lease::Leadership;
use link::Host;

/// Announcements a new holder sends: more than one, as a frame can be lost and a neighbour
/// ignores an update within a second of the last one (its `locktime`).
pub const ANNOUNCEMENTS: u32 = 3;
/// Time between two announcements.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);
/// Wait before campaigning again after the address could not be put on the interface: the
/// first time; each failure in a row doubles it, up to [`RETRY_MAX`].
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// The longest wait between two attempts to hold an address that cannot be added.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The wait after a failure that followed a wait of `last`.
fn next_retry(last: Duration) -> Duration {
    (last * 2).min(RETRY_MAX)
}

/// The Lease that elects the holder of `ip`: `PREFIX-` and the address with dashes (IPv6 in
/// all eight groups of four digits, so no two addresses share a name and the name never ends
/// in a dash): at most 40 characters after the prefix, a name a real API server accepts when the
/// prefix is a DNS subdomain of at most 212.
pub fn lease_name(prefix: &str, ip: IpAddr) -> String {
    let addr = match ip {
        IpAddr::V4(a) => a.octets().map(|o| o.to_string()).join("-"),
        IpAddr::V6(a) => a.segments().map(|s| format!("{s:04x}")).join("-"),
    };
    format!("{prefix}-{addr}")
}

/// The longest `--lease-name` for which every [`lease_name`] fits the 253 characters of a name.
pub const MAX_PREFIX: usize = 253 - 40;

/// The addresses to elect a holder of: those served now that lie in a pool with `l2`.
pub fn wanted(served: &Served, pools: &[Pool]) -> BTreeMap<IpAddr, L2> {
    let mut out = BTreeMap::new();
    for plan in served.values() {
        for l in &plan.listeners {
            let ip = l.addr.ip();
            let l2 = pools
                .iter()
                .find(|p| p.contains(ip))
                .and_then(|p| p.l2.clone());
            if let Some(l2) = l2 {
                out.insert(ip, l2);
            }
        }
    }
    out
}

/// What the per-address elections are run with.
#[derive(Clone)]
pub struct Settings {
    pub client: Client,
    pub namespace: String,
    /// Lease names are `PREFIX-ADDRESS`.
    pub prefix: String,
    pub identity: String,
    pub host: Arc<dyn Host>,
}

/// Runs one election per address of an `l2` pool in the last published plans until `stop`;
/// then every held address is taken off and its Lease released.
pub async fn follow(
    settings: Settings,
    pools: Vec<Pool>,
    mut served: watch::Receiver<Option<Served>>,
    stop: CancellationToken,
) {
    remove_leftovers(&settings, &pools);
    let mut running: BTreeMap<IpAddr, (L2, CancellationToken, tokio::task::JoinHandle<()>)> =
        BTreeMap::new();
    loop {
        let want = wanted(
            &served.borrow_and_update().clone().unwrap_or_default(),
            &pools,
        );
        let gone: Vec<IpAddr> = (running.iter())
            .filter(|(ip, (l2, _, _))| want.get(*ip) != Some(l2))
            .map(|(ip, _)| *ip)
            .collect();
        for ip in gone {
            if let Some((_, s, task)) = running.remove(&ip) {
                s.cancel();
                let _ = task.await;
            }
        }
        for (ip, l2) in want {
            if let std::collections::btree_map::Entry::Vacant(slot) = running.entry(ip) {
                let s = CancellationToken::new();
                let task = tokio::spawn(hold(settings.clone(), ip, l2.clone(), s.clone()));
                slot.insert((l2, s, task));
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            r = served.changed() => if r.is_err() { break },
        }
    }
    for (_, s, _) in running.values() {
        s.cancel();
    }
    for (_, (_, _, task)) in running {
        let _ = task.await;
    }
}

/// Takes off this host the addresses of the layer-2 pools that an earlier run left on it (it
/// was killed, or could not remove them): this edge holds none yet, and a host that keeps an
/// address another edge now holds answers ARP and NA for it too, taking part of its traffic.
fn remove_leftovers(s: &Settings, pools: &[Pool]) {
    let found = match s.host.host_addresses() {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look for addresses left by an earlier run");
            return;
        }
    };
    for ip in found {
        if let Some(pool) = pools.iter().find(|p| p.l2.is_some() && p.contains(ip)) {
            let named = pool.l2.as_ref().and_then(|l| l.interface.as_deref());
            match s.host.remove(ip, named) {
                Ok(()) => tracing::info!(%ip, pool = %pool.name,
                    "removed an address an earlier run left on this host; it is elected anew"),
                Err(e) => tracing::error!(%ip, error = %e,
                    "cannot remove an address an earlier run left on this host; two edges may answer for it"),
            }
        }
    }
}

/// Campaigns for `ip` until `stop`: holds it while this edge holds its Lease.
async fn hold(s: Settings, ip: IpAddr, l2: L2, stop: CancellationToken) {
    let named = l2.interface.as_deref();
    let lease = lease_name(&s.prefix, ip);
    let mut retry = RETRY_AFTER_FAILURE;
    loop {
        let lease_stop = CancellationToken::new();
        let leadership = Leadership::elect(
            s.client.clone(),
            s.namespace.clone(),
            lease.clone(),
            s.identity.clone(),
            lease_stop.clone(),
        );
        let ended = serve(&s, ip, named, &lease, leadership.rx.clone(), &stop).await;
        if let Ended::AddFailed { held_before, error } = &ended {
            if *held_before {
                retry = RETRY_AFTER_FAILURE;
            }
            // Once per attempt: the wait doubles with each failure in a row.
            tracing::error!(%ip, %lease, %error, retry_in_s = retry.as_secs(),
                "cannot hold the address; giving up its Lease so another edge can, retrying");
        }
        // Off the interface before the Lease goes, so the next holder has the address alone.
        lease_stop.cancel();
        leadership.finish(Duration::from_secs(5)).await;
        if matches!(ended, Ended::Stopped) {
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
        retry = next_retry(retry);
    }
}

/// How [`serve`] ended.
enum Ended {
    /// `stop`, or the election ended.
    Stopped,
    /// The address could not be added: the Lease is to be given up, so another edge can hold
    /// it, and campaigned for again after a wait (shorter when it was held in this term).
    AddFailed { held_before: bool, error: String },
}

/// Follows the Lease of `ip`: adds and announces it on gaining it, removes it on losing it,
/// and before returning.
async fn serve(
    s: &Settings,
    ip: IpAddr,
    named: Option<&str>,
    lease: &str,
    mut leader: watch::Receiver<bool>,
    stop: &CancellationToken,
) -> Ended {
    let mut holding = false;
    let mut held_before = false;
    let mut left = 0;
    let mut ended = Ended::Stopped;
    loop {
        let want = *leader.borrow_and_update();
        if want && !holding {
            match s.host.add(ip, named) {
                Ok(iface) => {
                    tracing::info!(%ip, %iface, %lease, "holding the address: added and announced");
                    holding = true;
                    held_before = true;
                    left = ANNOUNCEMENTS.saturating_sub(1);
                }
                Err(error) => {
                    ended = Ended::AddFailed { held_before, error };
                    break;
                }
            }
        } else if !want && holding {
            release(s, ip, named, lease, "the Lease is no longer held");
            holding = false;
            left = 0;
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            r = leader.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(ANNOUNCE_EVERY), if left > 0 => {
                left -= 1;
                if let Err(e) = s.host.announce(ip, named) {
                    tracing::warn!(%ip, error = %e, "cannot announce the address");
                }
            }
        }
    }
    if holding {
        release(s, ip, named, lease, "stopping");
    }
    ended
}

fn release(s: &Settings, ip: IpAddr, named: Option<&str>, lease: &str, why: &str) {
    match s.host.remove(ip, named) {
        Ok(()) => tracing::info!(%ip, %lease, why, "released the address"),
        Err(e) => tracing::error!(%ip, %lease, error = %e, why,
            "cannot take the address off the interface; two edges may answer for it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_wait_longer_up_to_the_cap() {
        let mut waits = vec![RETRY_AFTER_FAILURE];
        for _ in 0..8 {
            waits.push(next_retry(*waits.last().unwrap()));
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn lease_names_from_addresses() {
        let cases = [
            ("192.0.2.10", "ouroboros-edge-192-0-2-10"),
            (
                "2001:db8::10",
                "ouroboros-edge-2001-0db8-0000-0000-0000-0000-0000-0010",
            ),
            (
                "::",
                "ouroboros-edge-0000-0000-0000-0000-0000-0000-0000-0000",
            ),
            (
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "ouroboros-edge-ffff-ffff-ffff-ffff-ffff-ffff-ffff-ffff",
            ),
            (
                "::ffff:192.0.2.1",
                "ouroboros-edge-0000-0000-0000-0000-0000-ffff-c000-0201",
            ),
        ];
        for (ip, want) in cases {
            let name = lease_name("ouroboros-edge", ip.parse().unwrap());
            assert_eq!(name, want);
            assert!(name.len() - "ouroboros-edge".len() <= 40, "{name}");
            assert!(crate::dns_name::is_subdomain(&name), "{name}");
        }
    }

    #[test]
    fn only_addresses_of_l2_pools_are_elected() {
        use crate::edge::serve::{Listener, Plan};
        let pools = crate::edge::pool::parse_pools(
            "pools:\n- name: lan\n  addresses: [192.0.2.0/28]\n  l2: {interface: eth0}\n\
             - name: routed\n  addresses: [198.51.100.0/28]\n",
        )
        .unwrap();
        let plan = |addrs: &[&str]| Plan {
            regarding: Default::default(),
            version: crate::proxy_protocol::Version::V2,
            listeners: addrs
                .iter()
                .map(|a| Listener {
                    addr: a.parse().unwrap(),
                    port_name: "https".into(),
                })
                .collect(),
        };
        let served: Served = [
            (
                "web/a".to_string(),
                plan(&["192.0.2.1:443", "192.0.2.1:80"]),
            ),
            ("web/b".to_string(), plan(&["198.51.100.1:443"])),
        ]
        .into();
        let named = L2 {
            interface: Some("eth0".into()),
        };
        let want: BTreeMap<IpAddr, L2> = [("192.0.2.1".parse().unwrap(), named)].into();
        assert_eq!(wanted(&served, &pools), want);
        assert!(wanted(&Served::default(), &pools).is_empty());
    }
}
