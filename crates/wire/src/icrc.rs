//! The RoCEv2 invariant CRC (ICRC).
//!
//! CRC-32 (IEEE 802.3, reflected, as zlib computes it) over:
//! 8 bytes of 0xFF (standing in for the InfiniBand LRH), the IP header with the fields a router
//! may change set to 1s (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop
//! limit), the UDP header with its checksum set to 1s, the BTH with byte 4 (FECN, BECN,
//! reserved) set to 1s, then the extension headers, payload and pad. It is stored
//! little-endian: the trailer's four bytes are `icrc.to_le_bytes()`.
//!
//! This is what Linux's `rxe_icrc.c` computes and what RoCE NICs check; the test vectors in
//! `testdata/roce` include a ConnectX-4 Lx capture. The IPv4 Identification field is covered:
//! whoever verifies must see the real IP header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{Error, Result, bth};

/// The IP and UDP headers of a RoCEv2 packet as its ICRC covers them: the one place podnet
/// builds those bytes, for the drivers that seal what they send, the transport that verifies
/// what it receives, capture analysis and the tests.
///
/// Built from addresses and ports ([`PseudoHeader::ipv4`], [`PseudoHeader::ipv6`],
/// [`PseudoHeader::between`]) or around a real IP header ([`PseudoHeader::with_ip_header`]),
/// its length fields (IPv4 total length, IPv6 payload length, UDP length) are those of the
/// packet being sealed or verified, derived from its RoCE payload. [`PseudoHeader::captured`]
/// takes both headers exactly as they were on the wire. Fields the ICRC masks (TOS or traffic
/// class and flow label, TTL or hop limit, both checksums) may hold anything; built headers
/// carry TTL 64 and zero checksums, as a UD receive's GRH shows them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PseudoHeader {
    ip: [u8; 60],
    ip_len: u8,
    udp: [u8; 8],
    /// Whether the length fields follow the payload (else they are as given).
    derived_lengths: bool,
}

impl core::fmt::Debug for PseudoHeader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PseudoHeader")
            .field("ip", &self.ip_header())
            .field("udp", &self.udp)
            .field("derived_lengths", &self.derived_lengths)
            .finish()
    }
}

impl PseudoHeader {
    /// An IPv4 header without options (`identification`; `dont_fragment`: the DF flag) and a
    /// UDP header between those ports.
    #[inline]
    pub fn ipv4(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        identification: u16,
        dont_fragment: bool,
        src_port: u16,
        dst_port: u16,
    ) -> PseudoHeader {
        let mut ip = [0u8; 60];
        ip[0] = 0x45;
        ip[4..6].copy_from_slice(&identification.to_be_bytes());
        ip[6] = if dont_fragment { 0x40 } else { 0 };
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        PseudoHeader { ip, ip_len: 20, udp: udp(src_port, dst_port), derived_lengths: true }
    }

    /// An IPv6 header (no extension headers) and a UDP header between those ports.
    #[inline]
    pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16, dst_port: u16) -> PseudoHeader {
        let mut ip = [0u8; 60];
        ip[0] = 0x60;
        ip[6] = 17;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src.octets());
        ip[24..40].copy_from_slice(&dst.octets());
        PseudoHeader { ip, ip_len: 40, udp: udp(src_port, dst_port), derived_lengths: true }
    }

    /// The headers Linux builds for a UDP socket sending from `src` to `dst`: IPv4 with DF
    /// and Identification 0 (what an unconnected socket sends), or IPv6. `None` when the
    /// addresses are of different families.
    #[inline]
    pub fn between(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> Option<Self> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Some(PseudoHeader::ipv4(s, d, 0, true, src_port, dst_port))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(PseudoHeader::ipv6(s, d, src_port, dst_port)),
            _ => None,
        }
    }

    /// A received packet's real IP header (IPv4 with its options, or IPv6) and a UDP header
    /// between those ports; the length fields follow the payload.
    #[inline]
    pub fn with_ip_header(ip_header: &[u8], src_port: u16, dst_port: u16) -> Result<Self> {
        let mut h = PseudoHeader::copy_ip(ip_header)?;
        h.udp = udp(src_port, dst_port);
        Ok(h)
    }

    /// Both headers exactly as they were on the wire, length fields included.
    #[inline]
    pub fn captured(ip_header: &[u8], udp_header: &[u8]) -> Result<Self> {
        if udp_header.len() < 8 {
            return Err(Error::Truncated { needed: 8, available: udp_header.len() });
        }
        let mut h = PseudoHeader::copy_ip(ip_header)?;
        h.udp.copy_from_slice(&udp_header[..8]);
        h.derived_lengths = false;
        Ok(h)
    }

    /// The same headers with length fields that follow the payload: for one segment of a
    /// GSO or GRO run captured as one buffer.
    pub fn for_each_segment(mut self) -> Self {
        self.derived_lengths = true;
        self
    }

    #[inline]
    fn copy_ip(ip_header: &[u8]) -> Result<Self> {
        let len = match ip_header.first().map(|b| b >> 4) {
            Some(4) => usize::from(ip_header[0] & 0x0f) * 4,
            Some(6) => 40,
            _ => return Err(Error::BadIpHeader),
        };
        if len < 20 || ip_header.len() < len {
            return Err(Error::BadIpHeader);
        }
        let mut ip = [0u8; 60];
        ip[..len].copy_from_slice(&ip_header[..len]);
        Ok(PseudoHeader { ip, ip_len: len as u8, udp: [0; 8], derived_lengths: true })
    }

    /// The same headers with `tos` as the IPv4 TOS or IPv6 traffic class (ECN in its low two
    /// bits), which the ICRC masks but a receiver reads.
    pub fn with_tos(mut self, tos: u8) -> Self {
        if self.is_ipv4() {
            self.ip[1] = tos;
        } else {
            self.ip[0] = 0x60 | (tos >> 4);
            self.ip[1] = (self.ip[1] & 0x0f) | (tos << 4);
        }
        self
    }

    /// Whether the IP header is IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.ip[0] >> 4 == 4
    }

    /// Sets the IPv4 Identification (nothing for IPv6).
    pub fn set_ipv4_id(&mut self, id: u16) {
        if self.is_ipv4() {
            self.ip[4..6].copy_from_slice(&id.to_be_bytes());
        }
    }

    /// The IP header as it stands (length fields as last derived or given).
    pub fn ip_header(&self) -> &[u8] {
        &self.ip[..usize::from(self.ip_len)]
    }

    /// The UDP header as it stands.
    pub fn udp_header(&self) -> &[u8; 8] {
        &self.udp
    }

    /// The headers with the length fields of a packet whose RoCE payload (BTH … ICRC) is
    /// `roce_len` bytes; as given for [`PseudoHeader::captured`] headers.
    #[inline]
    pub fn for_payload(mut self, roce_len: usize) -> Self {
        if self.derived_lengths {
            let udp_len = (8 + roce_len) as u16;
            self.udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            if self.is_ipv4() {
                let total = u16::from(self.ip_len) + udp_len;
                self.ip[2..4].copy_from_slice(&total.to_be_bytes());
            } else {
                self.ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            }
        }
        self
    }

    /// The ICRC of a packet whose RoCE payload without its ICRC field is `covered`.
    #[inline]
    pub fn compute(&self, covered: &[u8]) -> Result<u32> {
        if covered.len() < bth::HEADER_LEN {
            return Err(Error::Truncated { needed: bth::HEADER_LEN, available: covered.len() });
        }
        // One copy, sized for the packet, with the fields a router may change set to 1s.
        let mut h = self.for_payload(covered.len() + 4);
        let n = usize::from(h.ip_len);
        if h.is_ipv4() {
            h.ip[1] = 0xff; // TOS
            h.ip[8] = 0xff; // TTL
            h.ip[10] = 0xff; // header checksum
            h.ip[11] = 0xff;
        } else {
            h.ip[0] |= 0x0f; // traffic class and flow label
            h.ip[1] = 0xff;
            h.ip[2] = 0xff;
            h.ip[3] = 0xff;
            h.ip[7] = 0xff; // hop limit
        }
        h.udp[6] = 0xff; // checksum
        h.udp[7] = 0xff;
        let mut crc = seeded();
        crc.update(&h.ip[..n]);
        crc.update(&h.udp);
        let mut b = [0u8; bth::HEADER_LEN];
        b.copy_from_slice(&covered[..bth::HEADER_LEN]);
        b[4] = 0xff; // FECN, BECN, reserved
        crc.update(&b);
        crc.update(&covered[bth::HEADER_LEN..]);
        Ok(crc.finalize())
    }

    /// Computes the ICRC of `roce` (a whole RoCE payload whose last four bytes are the ICRC
    /// field) and writes it there.
    #[inline]
    pub fn seal(&self, roce: &mut [u8]) -> Result<u32> {
        let split = icrc_split(roce.len())?;
        let (covered, trailer) = roce.split_at_mut(split);
        let icrc = self.compute(covered)?;
        trailer.copy_from_slice(&icrc.to_le_bytes());
        Ok(icrc)
    }

    /// Whether the ICRC at the end of `roce` matches.
    #[inline]
    pub fn verify(&self, roce: &[u8]) -> Result<bool> {
        let split = icrc_split(roce.len())?;
        let (covered, trailer) = roce.split_at(split);
        let want = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        Ok(self.compute(covered)? == want)
    }

    /// The IPv4 Identification that makes the ICRC at the end of `roce` match (the one in
    /// these headers is ignored), or `None` when none does; see [`recover_ipv4_id`].
    pub fn recover_ipv4_id(&self, roce: &[u8]) -> Result<Option<u16>> {
        if !self.is_ipv4() {
            return Err(Error::BadIpHeader);
        }
        let split = icrc_split(roce.len())?;
        let (covered, trailer) = roce.split_at(split);
        let received = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        let mut zeroed = *self;
        zeroed.set_ipv4_id(0);
        let base = zeroed.compute(covered)?;
        // Bytes of ICRC input after the ID field: 8 (LRH stand-in) + IP header + UDP +
        // covered, minus the 14 up to and including the ID.
        let after = 8 + usize::from(self.ip_len) + 8 + covered.len() - 14;
        let y = id_recovery::back(base ^ received, after)
            .ok_or(Error::Truncated { needed: 0, available: after })?;
        Ok(id_recovery::id_of(y))
    }
}

fn udp(src_port: u16, dst_port: u16) -> [u8; 8] {
    let mut u = [0u8; 8];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&dst_port.to_be_bytes());
    u
}

fn icrc_split(len: usize) -> Result<usize> {
    len.checked_sub(4).ok_or(Error::Truncated { needed: 4, available: len })
}

/// The CRC state after the 8 bytes of 0xFF that stand in for the LRH.
fn seeded() -> crc32fast::Hasher {
    // crc32 of eight 0xFF bytes, as a finalized value to resume from.
    const AFTER_LRH: u32 = 0x2144_df1c;
    crc32fast::Hasher::new_with_initial(AFTER_LRH)
}

/// Computes the ICRC of a RoCEv2 packet.
///
/// `ip_header` is the whole IPv4 header (IHL × 4 bytes; options included) or the 40-byte IPv6
/// header, `udp_header` the 8-byte UDP header, both as captured ([`PseudoHeader::captured`]),
/// and `covered` the UDP payload without its last four bytes (BTH, extension headers, payload
/// and pad). Returns the value whose little-endian bytes are the trailer.
pub fn compute(ip_header: &[u8], udp_header: &[u8], covered: &[u8]) -> Result<u32> {
    PseudoHeader::captured(ip_header, udp_header)?.compute(covered)
}

/// Checks the ICRC of a whole RoCEv2 UDP payload (`roce` ends with the four ICRC bytes),
/// over the IP and UDP headers exactly as captured ([`PseudoHeader::captured`]).
pub fn verify(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<bool> {
    PseudoHeader::captured(ip_header, udp_header)?.verify(roce)
}

/// Computes the ICRC of `roce` (a whole RoCEv2 UDP payload whose last four bytes are the ICRC
/// field) over the IP and UDP headers as given, and writes it there.
pub fn seal(ip_header: &[u8], udp_header: &[u8], roce: &mut [u8]) -> Result<u32> {
    PseudoHeader::captured(ip_header, udp_header)?.seal(roce)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrh_seed_is_crc_of_eight_ff() {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        assert_eq!(h.finalize(), 0x2144_df1c);
    }

    #[test]
    fn scapy_uc_example() {
        // Vector 1: scapy's roce.uts asserts ICRC 0x78f353f3 (wire bytes 78 f3 53 f3).
        let frame = hex::decode(
            "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca2\
             2460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3",
        )
        .unwrap();
        let (ip, udp, roce) = (&frame[14..34], &frame[34..42], &frame[42..]);
        assert!(verify(ip, udp, roce).unwrap());
        let icrc = compute(ip, udp, &roce[..roce.len() - 4]).unwrap();
        assert_eq!(icrc.to_le_bytes(), [0x78, 0xf3, 0x53, 0xf3]);
        let mut bad = roce.to_vec();
        bad[20] ^= 1;
        assert!(!verify(ip, udp, &bad).unwrap());
        // Fields outside the invariant part do not change it: TOS, TTL, checksums, FECN/BECN.
        let mut ip2 = ip.to_vec();
        ip2[1] = 0xb9;
        ip2[8] = 3;
        ip2[10] = 0;
        let mut udp2 = udp.to_vec();
        udp2[6] = 0;
        udp2[7] = 0;
        let mut roce2 = roce.to_vec();
        roce2[4] = 0xc0;
        assert!(verify(&ip2, &udp2, &roce2).unwrap());
        // The IPv4 Identification is covered.
        ip2[4] ^= 1;
        assert!(!verify(&ip2, &udp2, &roce2).unwrap());
    }

    #[test]
    fn built_headers_match_the_wire() {
        // Vector 1 again: 192.168.0.7 to itself, ID 0x0478, DF, UDP 0xc000 -> 4791.
        let frame = hex::decode(
            "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca2\
             2460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3",
        )
        .unwrap();
        let (ip, udp, roce) = (&frame[14..34], &frame[34..42], &frame[42..]);
        let a = Ipv4Addr::new(192, 168, 0, 7);
        let built = PseudoHeader::ipv4(a, a, 0x0478, true, 0xc000, 4791);
        assert!(built.verify(roce).unwrap());
        assert!(PseudoHeader::with_ip_header(ip, 0xc000, 4791).unwrap().verify(roce).unwrap());
        assert!(PseudoHeader::captured(ip, udp).unwrap().verify(roce).unwrap());
        // The lengths are the packet's: the built header, sized for it, is the captured one
        // but for the fields the ICRC masks (TOS 0x01, the checksums).
        let sized = built.with_tos(0x01).for_payload(roce.len());
        assert_eq!(&sized.ip_header()[..10], &ip[..10]);
        assert_eq!(&sized.ip_header()[12..], &ip[12..]);
        assert_eq!(&sized.udp_header()[..6], &udp[..6]);
        // The Identification is covered, and recovered.
        let mut other = built;
        other.set_ipv4_id(0x0479);
        assert!(!other.verify(roce).unwrap());
        assert_eq!(other.recover_ipv4_id(roce).unwrap(), Some(0x0478));
        // Sealed with built headers, verified against them; IPv6 too.
        let (s6, d6) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let h6 = PseudoHeader::between(IpAddr::V6(s6), IpAddr::V6(d6), 0xc001, 4791).unwrap();
        let mut pkt = roce.to_vec();
        h6.seal(&mut pkt).unwrap();
        assert!(h6.verify(&pkt).unwrap() && !built.verify(&pkt).unwrap());
        assert!(h6.with_tos(0xff).verify(&pkt).unwrap(), "the traffic class is masked");
        assert!(PseudoHeader::between(IpAddr::V4(a), IpAddr::V6(d6), 1, 2).is_none());
        // A captured header keeps its lengths; one segment of a GSO run takes its own.
        let mut seg = roce.to_vec();
        seg.extend_from_slice(&[0; 4]);
        built.seal(&mut seg).unwrap();
        let run = PseudoHeader::captured(ip, udp).unwrap();
        assert!(!run.verify(&seg).unwrap());
        assert!(run.for_each_segment().verify(&seg).unwrap());
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert_eq!(compute(&[0x45; 10], &[0; 8], &[0; 12]), Err(Error::BadIpHeader));
        assert_eq!(compute(&[0x60; 39], &[0; 8], &[0; 12]), Err(Error::BadIpHeader));
        assert_eq!(compute(&[0x10; 40], &[0; 8], &[0; 12]), Err(Error::BadIpHeader));
        assert!(compute(&[0x45; 20], &[0; 7], &[0; 12]).is_err());
        assert!(compute(&[0x45; 20], &[0; 8], &[0; 11]).is_err());
        assert!(verify(&[0x45; 20], &[0; 8], &[0; 3]).is_err());
    }
}

/// Recovering the IPv4 Identification from an ICRC.
///
/// A plain UDP socket does not show a received packet's IP header, and the ICRC covers its
/// Identification field. CRC-32 is affine in its input, so for two inputs of equal length that
/// differ only in the 2 ID bytes, the ICRCs differ by the raw (zero-init) CRC of those bytes
/// advanced over everything after them. Given every other field, exactly one 16-bit ID can make
/// a received ICRC match — and only if the other 16 bits of the CRC agree: a 16-bit check
/// remains, not a 32-bit one, so a driver that relies on this must count such packets as not
/// fully verified.
mod id_recovery {
    use std::collections::HashMap;
    use std::sync::OnceLock;

    const POLY: u32 = 0xedb8_8320;

    fn table() -> &'static [u32; 256] {
        static T: OnceLock<[u32; 256]> = OnceLock::new();
        T.get_or_init(|| {
            let mut t = [0u32; 256];
            for (i, e) in t.iter_mut().enumerate() {
                let mut c = i as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
                }
                *e = c;
            }
            t
        })
    }

    /// The raw (zero-init, no final xor) CRC of the two ID bytes.
    fn raw2(id: u16) -> u32 {
        let t = table();
        let [b0, b1] = id.to_be_bytes();
        let s = t[usize::from(b0)];
        (s >> 8) ^ t[((s ^ u32::from(b1)) & 0xff) as usize]
    }

    /// Undoes one zero byte of CRC progress: the inverse of `s -> (s >> 8) ^ T[s & 0xff]`.
    /// The top bytes of the 256 table entries are all distinct, which is what makes it
    /// invertible.
    fn back_one(s: u32) -> u32 {
        static TOP: OnceLock<[u8; 256]> = OnceLock::new();
        let top = TOP.get_or_init(|| {
            let mut inv = [0u8; 256];
            for (x, e) in table().iter().enumerate() {
                inv[(e >> 24) as usize] = x as u8;
            }
            inv
        });
        let x = top[(s >> 24) as usize];
        ((s ^ table()[usize::from(x)]) << 8) | u32::from(x)
    }

    type Matrix = [u32; 32];

    fn apply(m: &Matrix, v: u32) -> u32 {
        let mut r = 0;
        for (i, col) in m.iter().enumerate() {
            if v >> i & 1 != 0 {
                r ^= col;
            }
        }
        r
    }

    /// `back_one` raised to 2^j, for j = 0..=24 (inputs up to 16 MiB).
    fn powers() -> &'static [Matrix; 25] {
        static P: OnceLock<[Matrix; 25]> = OnceLock::new();
        P.get_or_init(|| {
            let mut p = [[0u32; 32]; 25];
            for (i, col) in p[0].iter_mut().enumerate() {
                *col = back_one(1 << i);
            }
            for j in 1..25 {
                let prev = p[j - 1];
                for (i, col) in p[j].iter_mut().enumerate() {
                    *col = apply(&prev, apply(&prev, 1 << i));
                }
            }
            p
        })
    }

    /// Undoes `k` zero bytes of CRC progress.
    pub(super) fn back(mut v: u32, k: usize) -> Option<u32> {
        let p = powers();
        for (j, m) in p.iter().enumerate() {
            if k >> j & 1 != 0 {
                v = apply(m, v);
            }
        }
        (k >> p.len() == 0).then_some(v)
    }

    /// The ID whose raw CRC is `y`, if any.
    pub(super) fn id_of(y: u32) -> Option<u16> {
        static INV: OnceLock<HashMap<u32, u16>> = OnceLock::new();
        INV.get_or_init(|| (0..=u16::MAX).map(|id| (raw2(id), id)).collect()).get(&y).copied()
    }
}

/// Recovers the IPv4 Identification a sender used, from a received RoCEv2 packet whose IP
/// header is known except for that field (its value in `ip_header` is ignored): the one ID
/// that makes the ICRC match, or `None` when no ID does (the packet is damaged). Only 16 of
/// the ICRC's 32 bits remain as a check; see the module notes.
pub fn recover_ipv4_id(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<Option<u16>> {
    PseudoHeader::captured(ip_header, udp_header)?.recover_ipv4_id(roce)
}
