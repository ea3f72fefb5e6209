//! `source-hash`'s machinery: a hash stable across builds and hosts, the client key it hashes,
//! and the Maglev lookup table. Separate: pure arithmetic on names and addresses, with its own
//! paper and its own invariants (even shares, minimal movement).

use std::net::IpAddr;

/// Maglev lookup table size: prime, and large against any realistic backend count so each
/// backend's share is within a fraction of a percent of 1/N.
pub const MAGLEV_SIZE: usize = 65537;

/// FNV-1a finished with the splitmix64 mixer: stable across builds and platforms (unlike std's
/// hasher), so every edge host maps a client to the same backend.
pub(super) fn hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The client's IP as hashed: an IPv4 client on a dual-stack socket (`::ffff:a.b.c.d`) hashes
/// like the same client on an IPv4 socket. The port is left out: one client, one backend.
pub(super) fn client_key(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.octets().to_vec(),
            None => v6.octets().to_vec(),
        },
    }
}

/// The Maglev lookup table (Eisenbud et al., NSDI 2016): `size` slots, each the index of a
/// backend in `names`. Each backend walks its own permutation of the slots (offset and skip
/// from its name) and the backends take turns claiming their next free slot, so shares are
/// near equal and the table depends on the set only, not on its history.
pub fn maglev(names: &[String], size: usize) -> Vec<u32> {
    let n = names.len();
    if n == 0 {
        return Vec::new();
    }
    let m = size as u64;
    let perm: Vec<(u64, u64)> = names
        .iter()
        .map(|name| {
            let offset = hash(name.as_bytes(), 1) % m;
            let skip = hash(name.as_bytes(), 2) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; n];
    let mut table = vec![u32::MAX; size];
    let mut filled = 0;
    loop {
        for i in 0..n {
            let (offset, skip) = perm[i];
            loop {
                let slot = ((offset + next[i] * skip) % m) as usize;
                next[i] += 1;
                if table[slot] == u32::MAX {
                    table[slot] = i as u32;
                    filled += 1;
                    break;
                }
            }
            if filled == size {
                return table;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::fake;
    use super::*;

    #[test]
    fn maglev_shares_are_even_and_deterministic() {
        let names: Vec<String> = fake(7).iter().map(|a| a.to_string()).collect();
        let t = maglev(&names, MAGLEV_SIZE);
        assert_eq!(t, maglev(&names, MAGLEV_SIZE));
        let mut counts = [0usize; 7];
        for i in &t {
            counts[*i as usize] += 1;
        }
        let ideal = MAGLEV_SIZE / 7;
        for c in counts {
            assert!(c.abs_diff(ideal) <= ideal / 100 + 1, "{counts:?}");
        }
        assert!(maglev(&[], MAGLEV_SIZE).is_empty());
        assert_eq!(maglev(&names[..1], 13), vec![0; 13]);
    }
}
