//! The announcements a new holder of an address sends, as bytes: an ARP announcement (IPv4,
//! RFC 5227 §2.3: an ARP request whose sender and target protocol address are both the
//! address, broadcast) and an unsolicited Neighbor Advertisement (IPv6, RFC 4861 §7.2.6: the
//! Override flag set, to all nodes). Every host on the link that has the address in its
//! neighbour cache replaces the old holder's MAC with ours at once, instead of sending to a
//! dead MAC until its entry goes stale.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A MAC address.
pub type Mac = [u8; 6];

/// The Ethernet broadcast address.
pub const BROADCAST: Mac = [0xff; 6];

/// EtherType of ARP.
pub const ETH_P_ARP: u16 = 0x0806;

/// The all-nodes multicast address an unsolicited Neighbor Advertisement goes to.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The hop limit of Neighbor Discovery messages: a receiver drops any other (RFC 4861 §7.1.2),
/// which proves the sender is on the link.
pub const ND_HOP_LIMIT: u32 = 255;

/// The Ethernet frame of an ARP announcement of `ip` at `mac` (42 bytes: the NIC pads it to
/// the 60-byte minimum).
pub fn arp_announcement(mac: Mac, ip: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&BROADCAST);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    // Hardware Ethernet (1), protocol IPv4, 6- and 4-byte addresses, operation request (1).
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    // Target hardware address: unknown (zero) in a request.
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f
}

/// The ICMPv6 message of an unsolicited Neighbor Advertisement of `ip` at `mac`, sent from `ip`
/// to [`ALL_NODES`], its checksum filled in (32 bytes: the IP header is the socket's).
pub fn neighbor_advertisement(mac: Mac, ip: Ipv6Addr) -> Vec<u8> {
    let mut m = Vec::with_capacity(32);
    // Type 136 (Neighbor Advertisement), code 0, checksum (below).
    m.extend_from_slice(&[136, 0, 0, 0]);
    // Flags: Override only. Not Solicited (nobody asked), not Router.
    m.extend_from_slice(&[0x20, 0, 0, 0]);
    m.extend_from_slice(&ip.octets());
    // Option Target Link-Layer Address (2), length 1 (8 bytes), the MAC.
    m.extend_from_slice(&[2, 1]);
    m.extend_from_slice(&mac);
    let sum = icmpv6_checksum(ip, ALL_NODES, &m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// The ICMPv6 checksum (RFC 4443 §2.3) of `message` (its checksum field zero) from `src` to
/// `dst`: the ones' complement of the ones' complement sum over the IPv6 pseudo-header
/// (RFC 8200 §8.1) and the message.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(message.len() as u32).to_be_bytes());
    // Three zero bytes, then the next header: ICMPv6 (58).
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    !fold(ones_sum(&pseudo) + ones_sum(message))
}

/// The sum of `bytes` as big-endian 16-bit words (an odd last byte padded with zero), unfolded.
fn ones_sum(bytes: &[u8]) -> u64 {
    bytes
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

/// Folds the carries of a ones' complement sum back in.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: Mac = [0x02, 0, 0, 0, 0, 0x01];

    #[test]
    fn arp_announcements_byte_for_byte() {
        let cases: &[(Mac, &str, [u8; 42])] = &[
            (
                MAC,
                "192.0.2.10",
                [
                    // Ethernet: to broadcast, from us, ARP.
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06,
                    // Ethernet/IPv4, 6/4, request.
                    0, 1, 0x08, 0, 6, 4, 0, 1, // Sender: us, the address.
                    0x02, 0, 0, 0, 0, 0x01, 192, 0, 2, 10,
                    // Target: unknown MAC, the same address.
                    0, 0, 0, 0, 0, 0, 192, 0, 2, 10,
                ],
            ),
            (
                [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff],
                "10.1.2.3",
                [
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x08,
                    0x06, 0, 1, 0x08, 0, 6, 4, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 10, 1, 2,
                    3, 0, 0, 0, 0, 0, 0, 10, 1, 2, 3,
                ],
            ),
        ];
        for (mac, ip, want) in cases {
            assert_eq!(arp_announcement(*mac, ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[test]
    fn neighbor_advertisement_byte_for_byte() {
        // The checksum by hand, in 16-bit words: the source and the target (2001 0db8 .. 0010)
        // twice = 2 * 2dc9 = 5b92; ff02 + 0001 = ff03; length 0020; next header 003a; type and
        // flags 8800 + 2000 = a800; the option 0201 + 0200 + 0001 = 0402. Sum 206f1, folded
        // 06f3, complemented f90c.
        let want: [u8; 32] = [
            136, 0, 0xf9, 0x0c, 0x20, 0, 0, 0, //
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, //
            2, 1, 0x02, 0, 0, 0, 0, 0x01,
        ];
        let ip: Ipv6Addr = "2001:db8::10".parse().unwrap();
        let na = neighbor_advertisement(MAC, ip);
        assert_eq!(na, want);
        // Checked the receiver's way too: the sum over pseudo-header and message, checksum
        // included, folds to all ones.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip.octets());
        pseudo.extend_from_slice(&ALL_NODES.octets());
        pseudo.extend_from_slice(&[0, 0, 0, 32, 0, 0, 0, 58]);
        assert_eq!(fold(ones_sum(&pseudo) + ones_sum(&na)), 0xffff);
    }

    #[test]
    fn checksums_of_odd_lengths_and_carries() {
        // (message, checksum): an odd byte is padded with zero; carries are folded back.
        let src = Ipv6Addr::UNSPECIFIED;
        let dst = Ipv6Addr::UNSPECIFIED;
        // Pseudo-header alone: length + 58.
        let cases: &[(&[u8], u16)] = &[
            // 0001 + 003a + 0x01 padded (0100) = 013b -> fec4.
            (&[0x01], 0xfec4),
            // 0004 + 003a + ffff + ffff = 2003c -> 003e -> ffc1.
            (&[0xff, 0xff, 0xff, 0xff], 0xffc1),
        ];
        for (m, want) in cases {
            assert_eq!(icmpv6_checksum(src, dst, m), *want, "{m:?}");
        }
    }
}
