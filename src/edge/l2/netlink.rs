//! Adding and removing an address on an interface: rtnetlink `RTM_NEWADDR` / `RTM_DELADDR`
//! (rtnetlink(7)), the messages built and the answer read by pure functions below, sent over a
//! `NETLINK_ROUTE` socket opened with `nix`.
//!
//! Why no netlink crate: `rtnetlink` brings its own async stack (netlink-proto, a connection
//! task, futures channels) for what is two fixed-layout messages and one acknowledgement here,
//! and `neli` is not in the dependency tree either; `nix` (already a dependency) has the socket
//! and its address, safely.

use std::net::IpAddr;

const NLMSG_ERROR: u16 = 2;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
/// No duplicate address detection: the address is usable at once rather than "tentative" for
/// a second or more (the old holder has given it up, or is dead).
const IFA_F_NODAD: u32 = 0x02;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// Add or remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Add,
    Remove,
}

/// The request that adds `ip` (as /32 or /128) to interface `ifindex`, or removes it; with the
/// acknowledgement asked for. Adding an address that is there already replaces it (no error).
pub fn address_request(change: Change, seq: u32, ifindex: u32, ip: IpAddr) -> Vec<u8> {
    let (kind, flags) = match change {
        Change::Add => (
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        ),
        Change::Remove => (RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK),
    };
    let (family, prefix, octets): (u8, u8, Vec<u8>) = match ip {
        IpAddr::V4(a) => (AF_INET, 32, a.octets().to_vec()),
        IpAddr::V6(a) => (AF_INET6, 128, a.octets().to_vec()),
    };
    let nodad = family == AF_INET6 && change == Change::Add;
    let mut body = Vec::with_capacity(48);
    // struct ifaddrmsg: family, prefix length, flags (the 8-bit copy), scope (universe), index.
    body.extend_from_slice(&[family, prefix, if nodad { IFA_F_NODAD as u8 } else { 0 }, 0]);
    body.extend_from_slice(&ifindex.to_ne_bytes());
    attribute(&mut body, IFA_LOCAL, &octets);
    attribute(&mut body, IFA_ADDRESS, &octets);
    if nodad {
        attribute(&mut body, IFA_FLAGS, &IFA_F_NODAD.to_ne_bytes());
    }
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    // Port id 0: the kernel.
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend(body);
    msg
}

/// A route attribute (struct rtattr): length, type, value, padded to 4 bytes.
fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// What the kernel answered to request `seq`: `Ok` for the acknowledgement, the errno it
/// refused with, or `None` when `reply` holds no answer to `seq` (another message).
pub fn read_ack(reply: &[u8], seq: u32) -> Option<Result<(), i32>> {
    let mut rest = reply;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        if len < 16 || len > rest.len() {
            return None;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let got = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if kind == NLMSG_ERROR && got == seq && len >= 20 {
            let errno = i32::from_ne_bytes(rest[16..20].try_into().ok()?);
            return Some(if errno == 0 { Ok(()) } else { Err(-errno) });
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

/// Sends `change` of `ip` on `ifindex` and waits for the kernel's answer. Removing an address
/// that is not there is not an error (it is what was wanted).
pub fn apply(change: Change, ifindex: u32, ip: IpAddr) -> std::io::Result<()> {
    use nix::sys::socket::{
        recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    let seq = 1;
    let request = address_request(change, seq, ifindex, ip);
    sendto(
        fd.as_raw_fd(),
        &request,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        match read_ack(&buf[..n], seq) {
            None => continue,
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) if change == Change::Remove && e == libc::EADDRNOTAVAIL => return Ok(()),
            Some(Err(e)) => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a little- or big-endian host: netlink is in host order.
    fn ne16(v: u16) -> [u8; 2] {
        v.to_ne_bytes()
    }
    fn ne32(v: u32) -> [u8; 4] {
        v.to_ne_bytes()
    }

    #[test]
    fn requests_byte_for_byte() {
        let v4: IpAddr = "192.0.2.10".parse().unwrap();
        let mut want = Vec::new();
        want.extend(ne32(40)); // 16 header + 8 ifaddrmsg + 2 * 8 attributes
        want.extend(ne16(20)); // RTM_NEWADDR
        want.extend(ne16(0x1 | 0x4 | 0x400 | 0x100));
        want.extend(ne32(7));
        want.extend(ne32(0));
        want.extend([2, 32, 0, 0]);
        want.extend(ne32(3));
        for kind in [2u16, 1] {
            want.extend(ne16(8));
            want.extend(ne16(kind));
            want.extend([192, 0, 2, 10]);
        }
        assert_eq!(address_request(Change::Add, 7, 3, v4), want);

        // Removal: RTM_DELADDR, no create flags.
        let mut del = want.clone();
        del[4..6].copy_from_slice(&ne16(21));
        del[6..8].copy_from_slice(&ne16(0x1 | 0x4));
        assert_eq!(address_request(Change::Remove, 7, 3, v4), del);

        // IPv6: /128, nodad in the 8-bit flags and in IFA_FLAGS.
        let v6: IpAddr = "2001:db8::10".parse().unwrap();
        let got = address_request(Change::Add, 1, 2, v6);
        let mut want = Vec::new();
        want.extend(ne32(16 + 8 + 20 + 20 + 8));
        want.extend(ne16(20));
        want.extend(ne16(0x1 | 0x4 | 0x400 | 0x100));
        want.extend(ne32(1));
        want.extend(ne32(0));
        want.extend([10, 128, 0x02, 0]);
        want.extend(ne32(2));
        for kind in [2u16, 1] {
            want.extend(ne16(20));
            want.extend(ne16(kind));
            want.extend([
                0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
            ]);
        }
        want.extend(ne16(8));
        want.extend(ne16(8));
        want.extend(ne32(0x02));
        assert_eq!(got, want);
        // Removing an IPv6 address asks for no DAD flags.
        assert_eq!(address_request(Change::Remove, 1, 2, v6)[18], 0);
    }

    fn error_message(seq: u32, errno: i32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend(ne32(36));
        m.extend(ne16(2));
        m.extend(ne16(0));
        m.extend(ne32(seq));
        m.extend(ne32(0));
        m.extend(errno.to_ne_bytes());
        m.extend([0; 16]); // the start of the request it answers
        m
    }

    #[test]
    fn acknowledgements_and_refusals() {
        assert_eq!(read_ack(&error_message(1, 0), 1), Some(Ok(())));
        assert_eq!(read_ack(&error_message(1, -1), 1), Some(Err(1)));
        assert_eq!(read_ack(&error_message(2, 0), 1), None, "another request");
        // A message that is not an answer, then the answer.
        let mut two = error_message(1, -99);
        two[4..6].copy_from_slice(&ne16(20));
        two.extend(error_message(1, -99));
        assert_eq!(read_ack(&two, 1), Some(Err(99)));
        // Cut short, or a length that lies.
        assert_eq!(read_ack(&error_message(1, 0)[..12], 1), None);
        let mut lying = error_message(1, 0);
        lying[0..4].copy_from_slice(&ne32(4));
        assert_eq!(read_ack(&lying, 1), None);
    }
}
