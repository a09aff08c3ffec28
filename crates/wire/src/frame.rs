//! The L2–L4 edge: finding the RoCEv2 UDP payload in a captured frame, and building whole
//! frames around a RoCEv2 packet.
//!
//! Parsing goes through etherparse's lax slicer, so a frame cut short by a capture's snap
//! length still yields the headers it holds. Link types are the ones tcpdump writes: Ethernet
//! (with 802.1Q, 802.1ad/QinQ and 0x9100 tags), Linux cooked capture v1 (SLL) and v2 (SLL2,
//! `tcpdump -i any` since libpcap 1.10) and raw IP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header,
    LaxLinkExtSlice, LaxNetSlice, LaxSlicedPacket, SingleVlanHeader, TransportSlice, UdpHeader,
    VlanId, VlanPcp,
};

use crate::{Error, Result, icrc, roce};

/// The link layer of captured frames, from a pcap(ng) LINKTYPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_LINUX_SLL (113): Linux cooked capture v1.
    LinuxSll,
    /// LINKTYPE_LINUX_SLL2 (276): Linux cooked capture v2.
    LinuxSll2,
    /// LINKTYPE_RAW (101), LINKTYPE_IPV4 (228), LINKTYPE_IPV6 (229): the frame starts with an
    /// IP header.
    RawIp,
}

impl LinkType {
    /// The link type for a pcap LINKTYPE number, if podnet reads it.
    pub const fn from_linktype(n: u32) -> Option<LinkType> {
        match n {
            1 => Some(LinkType::Ethernet),
            113 => Some(LinkType::LinuxSll),
            276 => Some(LinkType::LinuxSll2),
            101 | 228 | 229 => Some(LinkType::RawIp),
            _ => None,
        }
    }

    /// The pcap LINKTYPE number podnet writes for this link type.
    pub const fn linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::RawIp => 101,
        }
    }
}

/// A VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// The tag protocol identifier: 0x8100 (802.1Q), 0x88a8 (802.1ad), 0x9100.
    pub tpid: u16,
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// The IP header of a RoCEv2 frame.
#[derive(Debug, Clone, Copy)]
pub struct Ip<'a> {
    /// The header bytes the ICRC covers: the whole IPv4 header with options, or the 40-byte
    /// IPv6 header.
    pub header: &'a [u8],
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 TOS or IPv6 traffic class: DSCP in bits 7:2, ECN in bits 1:0.
    pub tos: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 Identification; `None` for IPv6.
    pub id: Option<u16>,
}

impl Ip<'_> {
    /// 4 or 6.
    pub fn version(&self) -> u8 {
        if self.src.is_ipv4() { 4 } else { 6 }
    }
    /// The ECN bits (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub fn ecn(&self) -> u8 {
        self.tos & 0x3
    }
}

/// The UDP header of a RoCEv2 frame.
#[derive(Debug, Clone, Copy)]
pub struct Udp<'a> {
    /// The 8 header bytes.
    pub header: &'a [u8],
    /// Source port (rxe: `0xC000 | hash(qpn)`).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
    /// The length field: header plus payload.
    pub length: u16,
    /// The checksum (0 when the sender left it out, as rxe does).
    pub checksum: u16,
}

/// A frame that carries RoCEv2: its VLAN tags, IP and UDP headers and the UDP payload.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// VLAN tags, outermost first (`vlan_count` of them are set).
    pub vlans: [Option<VlanTag>; 3],
    /// IP header.
    pub ip: Ip<'a>,
    /// UDP header.
    pub udp: Udp<'a>,
    /// The captured bytes of the UDP payload: BTH … ICRC. Shorter than `roce_len` when the
    /// capture cut the frame.
    pub roce: &'a [u8],
    /// The UDP payload's length on the wire, from the UDP (or IP) length field.
    pub roce_len: usize,
}

impl Frame<'_> {
    /// Whether the capture holds the whole UDP payload.
    pub fn is_complete(&self) -> bool {
        self.roce.len() >= self.roce_len
    }

    /// Checks the ICRC; `None` when the capture cut the frame before its end.
    pub fn icrc_ok(&self) -> Option<bool> {
        if !self.is_complete() {
            return None;
        }
        icrc::verify(self.ip.header, self.udp.header, &self.roce[..self.roce_len]).ok()
    }
}

/// Why a frame is not RoCEv2 (for counting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotRoce {
    /// No IPv4 or IPv6 header (ARP, LLDP, another EtherType, an unreadable link header).
    NotIp,
    /// IP, but not UDP (or a non-first fragment).
    NotUdp,
    /// UDP to another port.
    OtherPort,
    /// Cut before the UDP ports could be read.
    Truncated,
}

/// Finds the RoCEv2 UDP payload of a captured frame: IP and UDP with destination port `port`.
pub fn parse(link: LinkType, data: &[u8], port: u16) -> core::result::Result<Frame<'_>, NotRoce> {
    let sliced = match link {
        LinkType::Ethernet => {
            LaxSlicedPacket::from_ethernet(data).map_err(|_| NotRoce::Truncated)?
        }
        LinkType::LinuxSll => {
            if data.len() < 16 {
                return Err(NotRoce::Truncated);
            }
            let proto = u16::from_be_bytes([data[14], data[15]]);
            LaxSlicedPacket::from_ether_type(EtherType(proto), &data[16..])
        }
        LinkType::LinuxSll2 => {
            if data.len() < 20 {
                return Err(NotRoce::Truncated);
            }
            let proto = u16::from_be_bytes([data[0], data[1]]);
            LaxSlicedPacket::from_ether_type(EtherType(proto), &data[20..])
        }
        LinkType::RawIp => LaxSlicedPacket::from_ip(data).map_err(|_| NotRoce::NotIp)?,
    };
    let mut vlans = [None; 3];
    for (i, (slot, ext)) in vlans.iter_mut().zip(sliced.link_exts.iter()).enumerate() {
        if let LaxLinkExtSlice::Vlan(v) = ext {
            let h = v.to_header();
            *slot = Some(VlanTag {
                tpid: tpid(link, data, i),
                pcp: h.pcp.value(),
                vid: h.vlan_id.value(),
            });
        }
    }
    // The IP packet's bytes, borrowed from `data` (the slicer's IPv4 header view borrows the
    // slicer itself).
    let ip_bytes: &[u8] = match link {
        LinkType::RawIp => data,
        _ => sliced.ether_payload().map_or(&[][..], |p| p.payload),
    };
    let (ip, payload) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            let ihl = h.slice().len();
            let ip = Ip {
                header: ip_bytes.get(..ihl).ok_or(NotRoce::Truncated)?,
                src: IpAddr::V4(h.source_addr()),
                dst: IpAddr::V4(h.destination_addr()),
                tos: (h.dcp().value() << 2) | h.ecn().value(),
                ttl: h.ttl(),
                id: Some(h.identification()),
            };
            (ip, v4.payload().clone())
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            let ip = Ip {
                header: ip_bytes.get(..40).ok_or(NotRoce::Truncated)?,
                src: IpAddr::V6(h.source_addr()),
                dst: IpAddr::V6(h.destination_addr()),
                tos: h.traffic_class(),
                ttl: h.hop_limit(),
                id: None,
            };
            (ip, v6.payload().clone())
        }
        _ => {
            // A frame cut before the end of its IP header cannot be told apart; anything else
            // without an IP header is another protocol.
            return Err(match sliced.stop_err {
                Some((etherparse::err::packet::SliceError::Len(_), _)) => NotRoce::Truncated,
                _ => NotRoce::NotIp,
            });
        }
    };
    if payload.ip_number != IpNumber::UDP || payload.fragmented {
        return Err(NotRoce::NotUdp);
    }
    let udp = match &sliced.transport {
        Some(TransportSlice::Udp(u)) => u,
        _ => return Err(NotRoce::Truncated),
    };
    let uh = udp.header_slice();
    let udp = Udp {
        header: uh,
        src_port: u16::from_be_bytes([uh[0], uh[1]]),
        dst_port: u16::from_be_bytes([uh[2], uh[3]]),
        length: u16::from_be_bytes([uh[4], uh[5]]),
        checksum: u16::from_be_bytes([uh[6], uh[7]]),
    };
    if udp.dst_port != port {
        return Err(NotRoce::OtherPort);
    }
    // The UDP payload as captured: what follows the UDP header, up to the UDP length.
    let after = &payload.payload[8.min(payload.payload.len())..];
    let roce_len = if udp.length >= 8 {
        usize::from(udp.length) - 8
    } else {
        // A zero (jumbogram) or bogus length: fall back to the IP payload length.
        after.len()
    };
    let roce = &after[..after.len().min(roce_len)];
    Ok(Frame { vlans, ip, udp, roce, roce_len })
}

/// The TPID of the `i`-th VLAN tag: the EtherType field in front of it.
fn tpid(link: LinkType, data: &[u8], i: usize) -> u16 {
    let at = match link {
        LinkType::Ethernet => 12 + 4 * i,
        LinkType::LinuxSll => 14 + 4 * i,
        // SLL2's protocol field leads the header; the tags start after its 20 bytes.
        LinkType::LinuxSll2 if i == 0 => 0,
        LinkType::LinuxSll2 => 18 + 4 * i,
        LinkType::RawIp => return 0,
    };
    data.get(at..at + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// The link layer [`FrameBuilder`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// Ethernet II, with VLAN tags outermost first.
    Ethernet {
        /// Source MAC.
        src: [u8; 6],
        /// Destination MAC.
        dst: [u8; 6],
        /// VLAN tags, outermost first.
        vlans: Vec<VlanTag>,
    },
    /// Linux cooked capture v1 (as `tcpdump -i any` wrote before libpcap 1.10).
    LinuxSll {
        /// Link-layer source address.
        src: [u8; 6],
    },
    /// Linux cooked capture v2.
    LinuxSll2 {
        /// Link-layer source address.
        src: [u8; 6],
        /// Interface index.
        ifindex: u32,
    },
    /// No link header: the frame starts with IP.
    RawIp,
}

impl Link {
    /// The pcap link type of frames with this link layer.
    pub fn link_type(&self) -> LinkType {
        match self {
            Link::Ethernet { .. } => LinkType::Ethernet,
            Link::LinuxSll { .. } => LinkType::LinuxSll,
            Link::LinuxSll2 { .. } => LinkType::LinuxSll2,
            Link::RawIp => LinkType::RawIp,
        }
    }
}

/// The IP header [`FrameBuilder`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpParams {
    /// IPv4, DF set, no options.
    V4 {
        /// Source.
        src: Ipv4Addr,
        /// Destination.
        dst: Ipv4Addr,
        /// TOS: DSCP and ECN.
        tos: u8,
        /// TTL.
        ttl: u8,
        /// Identification.
        id: u16,
    },
    /// IPv6, no extension headers.
    V6 {
        /// Source.
        src: Ipv6Addr,
        /// Destination.
        dst: Ipv6Addr,
        /// Traffic class: DSCP and ECN.
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

/// Builds whole frames around RoCEv2 packets, ICRC included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameBuilder {
    /// The link layer.
    pub link: Link,
    /// The IP header.
    pub ip: IpParams,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Compute the UDP checksum (rxe sends 0, which IPv6 allows only for tunnels such as
    /// RoCEv2 per RFC 6935).
    pub udp_checksum: bool,
}

fn io_err(_: std::io::Error) -> Error {
    // Writing to a Vec cannot fail; a header value out of range is reported by the caller.
    Error::BadIpHeader
}

impl FrameBuilder {
    /// Appends a frame carrying `repr` and `payload` to `out` and returns its length.
    pub fn build_into(
        &self,
        repr: &roce::Repr,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize> {
        let start = out.len();
        let roce_len = repr.buffer_len(payload.len());
        let udp_len = 8 + roce_len;
        let ether_type = match self.ip {
            IpParams::V4 { .. } => EtherType::IPV4,
            IpParams::V6 { .. } => EtherType::IPV6,
        };
        match &self.link {
            Link::Ethernet { src, dst, vlans } => {
                let first = vlans.first().map_or(ether_type, |v| EtherType(v.tpid));
                Ethernet2Header { source: *src, destination: *dst, ether_type: first }
                    .write(out)
                    .map_err(io_err)?;
                for (i, v) in vlans.iter().enumerate() {
                    let next = vlans.get(i + 1).map_or(ether_type, |n| EtherType(n.tpid));
                    SingleVlanHeader {
                        pcp: VlanPcp::try_new(v.pcp)
                            .map_err(|_| range("vlan pcp", v.pcp.into(), 3))?,
                        drop_eligible_indicator: false,
                        vlan_id: VlanId::try_new(v.vid)
                            .map_err(|_| range("vlan id", v.vid.into(), 12))?,
                        ether_type: next,
                    }
                    .write(out)
                    .map_err(io_err)?;
                }
            }
            Link::LinuxSll { src } => {
                out.extend_from_slice(&4u16.to_be_bytes()); // packet type: sent by us
                out.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
                out.extend_from_slice(&6u16.to_be_bytes());
                out.extend_from_slice(src);
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&ether_type.0.to_be_bytes());
            }
            Link::LinuxSll2 { src, ifindex } => {
                out.extend_from_slice(&ether_type.0.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&ifindex.to_be_bytes());
                out.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
                out.push(4); // PACKET_OUTGOING
                out.push(6);
                out.extend_from_slice(src);
                out.extend_from_slice(&[0, 0]);
            }
            Link::RawIp => {}
        }
        let ip_start = out.len();
        match self.ip {
            IpParams::V4 { src, dst, tos, ttl, id } => {
                let len =
                    u16::try_from(udp_len).map_err(|_| range("ip length", udp_len as u64, 16))?;
                let mut h = Ipv4Header::new(len, ttl, IpNumber::UDP, src.octets(), dst.octets())
                    .map_err(|_| range("ip length", udp_len as u64, 16))?;
                h.dscp = IpDscp::try_new(tos >> 2).map_err(|_| Error::BadIpHeader)?;
                h.ecn = IpEcn::try_new(tos & 3).map_err(|_| Error::BadIpHeader)?;
                h.identification = id;
                h.dont_fragment = true;
                h.header_checksum = h.calc_header_checksum();
                h.write(out).map_err(io_err)?;
            }
            IpParams::V6 { src, dst, traffic_class, flow_label, hop_limit } => {
                let len =
                    u16::try_from(udp_len).map_err(|_| range("ip length", udp_len as u64, 16))?;
                Ipv6Header {
                    traffic_class,
                    flow_label: Ipv6FlowLabel::try_new(flow_label)
                        .map_err(|_| range("flow label", flow_label.into(), 20))?,
                    payload_length: len,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src.octets(),
                    destination: dst.octets(),
                }
                .write(out)
                .map_err(io_err)?;
            }
        }
        let udp_start = out.len();
        let udp = UdpHeader {
            source_port: self.src_port,
            destination_port: self.dst_port,
            length: udp_len as u16,
            checksum: 0,
        };
        udp.write(out).map_err(io_err)?;
        let roce_start = out.len();
        out.resize(roce_start + roce_len, 0);
        repr.emit(payload, &mut out[roce_start..])?;
        {
            let (head, roce) = out.split_at_mut(roce_start);
            icrc::seal(&head[ip_start..udp_start], &head[udp_start..], roce)?;
        }
        if self.udp_checksum {
            let body = &out[roce_start..];
            let sum = match self.ip {
                IpParams::V4 { src, dst, .. } => {
                    udp.calc_checksum_ipv4_raw(src.octets(), dst.octets(), body)
                }
                IpParams::V6 { src, dst, .. } => {
                    udp.calc_checksum_ipv6_raw(src.octets(), dst.octets(), body)
                }
            }
            .map_err(|_| Error::BadIpHeader)?;
            out[udp_start + 6..udp_start + 8].copy_from_slice(&sum.to_be_bytes());
        }
        Ok(out.len() - start)
    }

    /// A new frame carrying `repr` and `payload`.
    pub fn build(&self, repr: &roce::Repr, payload: &[u8]) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(96 + payload.len());
        self.build_into(repr, payload, &mut v)?;
        Ok(v)
    }
}

fn range(field: &'static str, value: u64, bits: u32) -> Error {
    Error::FieldRange { field, value, bits }
}

/// Writes the header checksum of the IPv4 header `header` (options included) into its
/// bytes 10–11.
pub fn set_ipv4_checksum(header: &mut [u8]) {
    if header.len() < 20 {
        return;
    }
    header[10..12].copy_from_slice(&[0, 0]);
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    header[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[cfg(test)]
mod checksum_tests {
    /// The worked example of RFC 1071's kind found in every textbook: 0xb861.
    #[test]
    fn an_ipv4_header_checksum_is_the_textbook_one() {
        let mut h = hex_header("450000730000400040110000c0a80001c0a800c7");
        super::set_ipv4_checksum(&mut h);
        assert_eq!(&h[10..12], &[0xb8, 0x61]);
        // Checking a header with its checksum in place sums to 0xffff: set again, unchanged.
        let before = h.clone();
        super::set_ipv4_checksum(&mut h);
        assert_eq!(h, before);
    }

    fn hex_header(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
