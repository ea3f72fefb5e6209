//! The host side of holding an address: which interface it goes on (named by the pool, else
//! the one whose network contains it), adding and removing it there ([`super::netlink`]), and
//! announcing it ([`super::frames`]) from a packet socket (ARP) or an ICMPv6 raw socket (NA).

use std::net::{IpAddr, Ipv6Addr, SocketAddrV6};

use super::frames::{self, Mac};
use super::netlink::{self, Change};

/// One interface of this host: its name, index, MAC (none: not Ethernet-like, e.g. loopback),
/// and its addresses with their prefix lengths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub index: u32,
    pub mac: Option<Mac>,
    pub networks: Vec<(IpAddr, u8)>,
}

/// Whether `ip` lies in `net`/`len` (same family).
fn in_network(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    let (a, b, bits) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a >> shift) == (b >> shift)
}

/// The interface to put `ip` on: the one named, else the one with the longest network that
/// contains `ip` (a host route, /32 or /128, does not count: that may be `ip` itself, held
/// before). It must have a MAC to announce from. The error says what to write in the pool.
pub fn choose<'a>(
    ifaces: &'a [Iface],
    named: Option<&str>,
    ip: IpAddr,
) -> Result<&'a Iface, String> {
    let found = match named {
        Some(name) => ifaces.iter().find(|i| i.name == name).ok_or_else(|| {
            format!("there is no interface {name:?} on this host; name one that is (l2.interface in the pool)")
        })?,
        None => {
            let host = if ip.is_ipv4() { 32 } else { 128 };
            ifaces
                .iter()
                .filter(|i| i.mac.is_some())
                .flat_map(|i| i.networks.iter().map(move |n| (i, *n)))
                .filter(|(_, n)| n.1 < host && in_network(ip, *n))
                .max_by_key(|(_, n)| n.1)
                .map(|(i, _)| i)
                .ok_or_else(|| {
                    format!("no interface of this host has a network that contains {ip}; name the interface (l2.interface in the pool)")
                })?
        }
    };
    if found.mac.is_none() {
        return Err(format!(
            "interface {:?} has no MAC address to announce {ip} from (layer 2 needs an Ethernet-like link)",
            found.name
        ));
    }
    Ok(found)
}

/// The addresses with a host prefix (/32, /128) on `ifaces`: how a holder adds them.
pub fn host_addresses(ifaces: &[Iface]) -> Vec<IpAddr> {
    (ifaces.iter())
        .flat_map(|i| i.networks.iter())
        .filter(|(ip, len)| u32::from(*len) == if ip.is_ipv4() { 32 } else { 128 })
        .map(|(ip, _)| *ip)
        .collect()
}

/// This host's interfaces, as getifaddrs(3) lists them.
pub fn interfaces() -> std::io::Result<Vec<Iface>> {
    let mut out: Vec<Iface> = Vec::new();
    for a in nix::ifaddrs::getifaddrs()? {
        let pos = match out.iter().position(|i| i.name == a.interface_name) {
            Some(p) => p,
            None => {
                out.push(Iface {
                    name: a.interface_name.clone(),
                    index: 0,
                    mac: None,
                    networks: Vec::new(),
                });
                out.len() - 1
            }
        };
        let iface = &mut out[pos];
        let Some(addr) = a.address else { continue };
        if let Some(link) = addr.as_link_addr() {
            iface.index = link.ifindex() as u32;
            iface.mac = link.addr().filter(|m| m.iter().any(|b| *b != 0));
            continue;
        }
        let ip: Option<IpAddr> = (addr.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())))
            .or_else(|| addr.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())));
        let len = a.netmask.and_then(|m| {
            (m.as_sockaddr_in().map(|s| u32::from(s.ip()).count_ones()))
                .or_else(|| m.as_sockaddr_in6().map(|s| u128::from(s.ip()).count_ones()))
        });
        if let (Some(ip), Some(len)) = (ip, len) {
            iface.networks.push((ip, len as u8));
        }
    }
    Ok(out)
}

/// What the announcer does to the host: the real one is [`System`]; tests record the calls.
pub trait Host: Send + Sync + 'static {
    /// Puts `ip` on the interface (`named`, or found) and announces it once; the interface's
    /// name.
    fn add(&self, ip: IpAddr, named: Option<&str>) -> Result<String, String>;
    /// Announces `ip` again (it is on the interface).
    fn announce(&self, ip: IpAddr, named: Option<&str>) -> Result<(), String>;
    /// Takes `ip` off the interface.
    fn remove(&self, ip: IpAddr, named: Option<&str>) -> Result<(), String>;
    /// The host addresses (/32, /128) on this host's interfaces now.
    fn host_addresses(&self) -> Result<Vec<IpAddr>, String>;
}

/// The host this process runs on (CAP_NET_ADMIN to change addresses, CAP_NET_RAW to announce).
pub struct System;

fn find(ip: IpAddr, named: Option<&str>) -> Result<Iface, String> {
    let all = interfaces().map_err(|e| format!("cannot list the interfaces: {e}"))?;
    choose(&all, named, ip).cloned()
}

/// The hint for a refused system call.
fn hint(e: &std::io::Error, what: &str) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!("{what}: {e}; the edge needs the capabilities NET_ADMIN and NET_RAW for layer-2 pools (the chart adds them)")
    } else {
        format!("{what}: {e}")
    }
}

impl Host for System {
    fn add(&self, ip: IpAddr, named: Option<&str>) -> Result<String, String> {
        let iface = find(ip, named)?;
        netlink::apply(Change::Add, iface.index, ip)
            .map_err(|e| hint(&e, &format!("cannot add {ip} to {}", iface.name)))?;
        announce_on(&iface, ip)?;
        Ok(iface.name)
    }

    fn announce(&self, ip: IpAddr, named: Option<&str>) -> Result<(), String> {
        announce_on(&find(ip, named)?, ip)
    }

    fn host_addresses(&self) -> Result<Vec<IpAddr>, String> {
        let all = interfaces().map_err(|e| format!("cannot list the interfaces: {e}"))?;
        Ok(host_addresses(&all))
    }

    fn remove(&self, ip: IpAddr, named: Option<&str>) -> Result<(), String> {
        // The interface that has `ip` now, whatever the pool says: that is where it must go from.
        let all = interfaces().map_err(|e| format!("cannot list the interfaces: {e}"))?;
        let host = if ip.is_ipv4() { 32 } else { 128 };
        let holding = all
            .iter()
            .find(|i| i.networks.iter().any(|n| n.0 == ip && n.1 == host));
        let Some(iface) = holding.or_else(|| choose(&all, named, ip).ok()) else {
            return Ok(());
        };
        netlink::apply(Change::Remove, iface.index, ip)
            .map_err(|e| hint(&e, &format!("cannot remove {ip} from {}", iface.name)))
    }
}

/// Sends one announcement of `ip` on `iface`.
fn announce_on(iface: &Iface, ip: IpAddr) -> Result<(), String> {
    let mac = iface
        .mac
        .ok_or_else(|| format!("interface {:?} has no MAC", iface.name))?;
    let sent = match ip {
        IpAddr::V4(v4) => send_arp(iface.index, mac, v4),
        IpAddr::V6(v6) => send_na(iface.index, mac, v6),
    };
    sent.map_err(|e| hint(&e, &format!("cannot announce {ip} on {}", iface.name)))
}

fn send_arp(ifindex: u32, mac: Mac, ip: std::net::Ipv4Addr) -> std::io::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    // Protocol 0: a socket that sends only (it receives nothing, so nothing queues on it).
    let fd = socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    crate::sys::send_link_frame(
        &fd,
        ifindex,
        frames::BROADCAST,
        frames::ETH_P_ARP,
        &frames::arp_announcement(mac, ip),
    )
}

fn send_na(ifindex: u32, mac: Mac, ip: Ipv6Addr) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    s.set_multicast_hops_v6(frames::ND_HOP_LIMIT)?;
    s.set_multicast_if_v6(ifindex)?;
    s.set_multicast_loop_v6(false)?;
    // From the address itself (added with nodad, so usable at once).
    s.bind(&SocketAddrV6::new(ip, 0, 0, 0).into())?;
    let to = SocketAddrV6::new(frames::ALL_NODES, 0, 0, ifindex);
    s.send_to(&frames::neighbor_advertisement(mac, ip), &to.into())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, mac: bool, nets: &[(&str, u8)]) -> Iface {
        Iface {
            name: name.into(),
            index: 1,
            mac: mac.then_some([2, 0, 0, 0, 0, 1]),
            networks: nets
                .iter()
                .map(|(ip, l)| (ip.parse().unwrap(), *l))
                .collect(),
        }
    }

    #[test]
    fn the_interface_is_named_or_found_by_its_network() {
        let all = [
            iface("lo", false, &[("127.0.0.1", 8), ("::1", 128)]),
            iface("eth0", true, &[("10.0.0.5", 16), ("192.0.2.10", 32)]),
            iface("eth1", true, &[("10.0.1.5", 24), ("2001:db8::5", 64)]),
            iface("wg0", false, &[("172.16.0.1", 24)]),
        ];
        // (named, address, the interface or the error)
        let cases: &[(Option<&str>, &str, Result<&str, &str>)] = &[
            (None, "10.0.1.200", Ok("eth1")), // the longest network wins
            (None, "10.0.9.200", Ok("eth0")),
            (None, "2001:db8::ff", Ok("eth1")),
            // Its own /32 (held already) does not count.
            (
                None,
                "192.0.2.10",
                Err("no interface of this host has a network that contains 192.0.2.10"),
            ),
            (None, "172.16.0.9", Err("no interface of this host")),
            (None, "127.0.0.2", Err("no interface of this host")),
            (Some("eth0"), "192.0.2.10", Ok("eth0")),
            (
                Some("eth9"),
                "192.0.2.10",
                Err("there is no interface \"eth9\""),
            ),
            (
                Some("wg0"),
                "172.16.0.9",
                Err("interface \"wg0\" has no MAC address"),
            ),
        ];
        for (named, ip, want) in cases {
            let got = choose(&all, *named, ip.parse().unwrap()).map(|i| i.name.as_str());
            crate::table::expect(&got, want, (named, ip));
        }
    }

    #[test]
    fn host_addresses_are_those_of_host_prefixes() {
        let all = [
            iface("lo", false, &[("127.0.0.1", 8), ("::1", 128)]),
            iface(
                "eth0",
                true,
                &[("10.0.0.5", 16), ("192.0.2.10", 32), ("2001:db8::10", 128)],
            ),
        ];
        let got: Vec<String> = host_addresses(&all).iter().map(|i| i.to_string()).collect();
        assert_eq!(got, ["::1", "192.0.2.10", "2001:db8::10"]);
    }

    #[test]
    fn this_hosts_interfaces_are_read() {
        let all = interfaces().unwrap();
        let lo = all.iter().find(|i| i.name == "lo").expect("a loopback");
        assert!(lo.index > 0 && lo.mac.is_none(), "{lo:?}");
        assert!(
            lo.networks.contains(&("127.0.0.1".parse().unwrap(), 8)),
            "{lo:?}"
        );
    }

    #[test]
    fn networks_contain_their_addresses() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        for (addr, net, len, want) in [
            ("10.0.1.200", "10.0.1.5", 24, true),
            ("10.0.2.200", "10.0.1.5", 24, false),
            ("10.0.2.200", "0.0.0.0", 0, true),
            ("2001:db8::ff", "2001:db8::5", 64, true),
            ("2001:db9::ff", "2001:db8::5", 64, false),
            ("10.0.1.200", "::", 0, false),
        ] {
            assert_eq!(
                in_network(ip(addr), (ip(net), len)),
                want,
                "{addr} in {net}/{len}"
            );
        }
    }
}
