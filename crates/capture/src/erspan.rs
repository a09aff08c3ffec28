//! Switch mirrors: the mirrored frame inside an ERSPAN packet. A switch's port mirror
//! (Arista, NVIDIA Spectrum, Cisco, Juniper) sends copies to an analyzer in GRE: an outer
//! Ethernet, IP and GRE header, then ERSPAN's own header and the original Ethernet frame —
//! often cut to a snap length. Types (draft-foschiano-erspan): I, GRE protocol 0x88BE without
//! a sequence number and no ERSPAN header; II, 0x88BE with one and an 8-byte header (version
//! 1); III, 0x22EB and a 12-byte header (version 2), 8 more with its platform subheader (the
//! O bit). Other GRE payloads are named as encapsulations podnet does not read.

use wire::frame::LinkType;

/// The encapsulation a mirrored frame came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// ERSPAN type I.
    ErspanI,
    /// ERSPAN type II.
    ErspanII,
    /// ERSPAN type III.
    ErspanIII,
}

impl Encap {
    /// `erspan1`, `erspan2`, `erspan3`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Encap::ErspanI => "erspan1",
            Encap::ErspanII => "erspan2",
            Encap::ErspanIII => "erspan3",
        }
    }
}

/// The IP payload of a frame of `link` and its IP protocol (IPv6: the first next header).
fn ip_payload(link: LinkType, data: &[u8]) -> Option<(u8, &[u8])> {
    let ip = match link {
        LinkType::Ethernet => {
            let mut at = 12;
            let mut ty = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
            // VLAN tags (802.1Q, 802.1ad, 0x9100), at most three.
            for _ in 0..3 {
                if !matches!(ty, 0x8100 | 0x88a8 | 0x9100) {
                    break;
                }
                at += 4;
                ty = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
            }
            if !matches!(ty, 0x0800 | 0x86dd) {
                return None;
            }
            data.get(at + 2..)?
        }
        LinkType::LinuxSll => data.get(16..)?,
        LinkType::LinuxSll2 => data.get(20..)?,
        LinkType::RawIp => data,
    };
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            // A fragment past the first holds no GRE header.
            let frag = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff;
            (ihl >= 20 && frag == 0).then_some((*ip.get(9)?, ip.get(ihl..)?))
        }
        6 => Some((*ip.get(6)?, ip.get(40..)?)),
        _ => None,
    }
}

/// What an ERSPAN-looking frame holds: `None` when it is not GRE; `Some(Ok(..))` the
/// mirrored Ethernet frame and its encapsulation; `Some(Err(name))` a GRE payload podnet does
/// not read (its GRE protocol named), or an ERSPAN header cut short.
pub fn inner(link: LinkType, data: &[u8]) -> Option<Result<(&[u8], Encap), &'static str>> {
    let (proto, gre) = ip_payload(link, data)?;
    if proto != 47 {
        return None;
    }
    let Some((flags, ty)) =
        gre.get(..4).map(|h| (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]])))
    else {
        return Some(Err("GRE (cut before its header ends)"));
    };
    // GRE (RFC 2784/2890): checksum (C), key (K) and sequence number (S) words follow.
    let (c, k, s) = (flags & 0x8000 != 0, flags & 0x2000 != 0, flags & 0x1000 != 0);
    let at = 4 + 4 * (usize::from(c) + usize::from(k) + usize::from(s));
    let cut = "ERSPAN (cut before its header ends)";
    let Some(rest) = gre.get(at..) else { return Some(Err(cut)) };
    Some(match (ty, s) {
        (0x88be, false) => Ok((rest, Encap::ErspanI)),
        (0x88be, true) => match rest.first() {
            Some(v) if v >> 4 == 1 => rest.get(8..).map(|f| (f, Encap::ErspanII)).ok_or(cut),
            Some(_) => Err("ERSPAN type II with another version"),
            None => Err(cut),
        },
        (0x22eb, _) => match (rest.first(), rest.get(11)) {
            (Some(v), Some(last)) if v >> 4 == 2 => {
                // The O bit: an 8-byte platform-specific subheader follows.
                let len = if last & 1 != 0 { 20 } else { 12 };
                rest.get(len..).map(|f| (f, Encap::ErspanIII)).ok_or(cut)
            }
            (Some(_), Some(_)) => Err("ERSPAN type III with another version"),
            _ => Err(cut),
        },
        (0x6558, _) => Err("GRE transparent Ethernet bridging (0x6558)"),
        (0x0800 | 0x86dd, _) => Err("GRE over IP (a tunnel, not a mirror)"),
        _ => Err("GRE with a protocol podnet does not read"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outer Ethernet / IPv4 (protocol 47) / GRE `gre` / `after` bytes.
    fn outer(gre: &[u8], after: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 47, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let total = (20 + gre.len() + after.len()) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(gre);
        f.extend_from_slice(after);
        f
    }

    #[test]
    fn each_erspan_type_yields_the_mirrored_frame() {
        let mirrored = b"the mirrored ethernet frame";
        // Type II: S set, sequence number, then version 1 in the first nibble.
        let mut ii = vec![0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 7];
        let mut after = vec![0x10, 0x64, 0x00, 0x01, 0, 0, 0, 0];
        after.extend_from_slice(mirrored);
        let f = outer(&ii, &after);
        assert_eq!(inner(LinkType::Ethernet, &f), Some(Ok((&mirrored[..], Encap::ErspanII))));
        // Type III, with and without the platform subheader (O bit).
        ii[2..4].copy_from_slice(&[0x22, 0xeb]);
        for (o, sub) in [(0u8, 0usize), (1, 8)] {
            let mut after = vec![0x20, 0x64, 0x00, 0x01, 1, 2, 3, 4, 0, 0, 0, o];
            after.extend(std::iter::repeat_n(0xee, sub));
            after.extend_from_slice(mirrored);
            let f = outer(&ii, &after);
            assert_eq!(inner(LinkType::Ethernet, &f), Some(Ok((&mirrored[..], Encap::ErspanIII))));
        }
        // Type I: no sequence number, no ERSPAN header.
        let f = outer(&[0, 0, 0x88, 0xbe], mirrored);
        assert_eq!(inner(LinkType::Ethernet, &f), Some(Ok((&mirrored[..], Encap::ErspanI))));
        // Named, not read: another GRE payload; a header cut short.
        let f = outer(&[0, 0, 0x65, 0x58], mirrored);
        assert_eq!(
            inner(LinkType::Ethernet, &f),
            Some(Err("GRE transparent Ethernet bridging (0x6558)"))
        );
        let f = outer(&[0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 7], &[0x10, 0x64]);
        assert_eq!(inner(LinkType::Ethernet, &f), Some(Err("ERSPAN (cut before its header ends)")));
        // Not GRE at all.
        let mut udp = outer(&[], &[]);
        udp[14 + 9] = 17;
        assert_eq!(inner(LinkType::Ethernet, &udp), None);
    }
}
