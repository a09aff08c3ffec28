//! RoCEv2 on the wire: the InfiniBand transport headers as RoCEv2 carries them over UDP, the
//! invariant CRC, and the Ethernet/IP/UDP edge that frames them.
//!
//! The layout follows smoltcp's `wire` module. Each header has a zero-copy view,
//! `Packet<T: AsRef<[u8]>>`, and a `Repr` that is the header's meaning, with `parse`,
//! `buffer_len` and `emit`.
//!
//! # Panic contract
//! Untrusted bytes go through `new_checked`, which verifies the length once; as long as the
//! buffer is not modified afterwards, no accessor of that view can panic. `new_unchecked` is for
//! buffers the caller has already sized (emitting), and accessors on a buffer that is too short
//! panic there. Nothing in this crate panics on bytes that came through `new_checked` or
//! [`frame::parse`].
//!
//! # Layers
//! - [`opcode`]: the opcode table (RC, UC, RD, UD, XRC, CNP): name, transport, which extension
//!   headers follow the BTH and whether payload follows them.
//! - [`bth`], [`ext`]: the Base Transport Header and the extension headers (RDETH, DETH, XRCETH,
//!   RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH).
//! - [`roce`]: a whole RoCEv2 UDP payload (BTH … pad, ICRC) as one view and one `Repr`.
//! - [`icrc`]: the invariant CRC over IPv4 and IPv6, as Linux rxe and RoCE NICs compute it.
//! - [`frame`]: the L2–L4 edge (Ethernet with 802.1Q/QinQ tags, Linux cooked SLL/SLL2, raw IP;
//!   IPv4/IPv6; UDP) through etherparse, and a builder that emits whole frames.

#![forbid(unsafe_code)]

pub mod bth;
pub mod ext;
pub mod frame;
pub mod icrc;
pub mod opcode;
pub mod roce;
mod types;

pub use opcode::{ExtHeaders, Opcode, Operation, Transport};
pub use types::{Psn, QKey, Qpn, RKey};

/// UDP destination port that marks RoCEv2 (IANA).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// The lowest UDP source port a RoCEv2 connection gets; ports run to 0xFFFF.
pub const ROCEV2_SOURCE_PORT_MIN: u16 = 0xC000;

/// The RoCEv2 UDP source port of a connection, as Linux computes it (`rdma_get_udp_sport`, used
/// by rxe and by mlx5): from the GRH flow label if one is set, else from one computed over both
/// QPNs (`lqpn × rqpn`, folded: `v ^= v >> 20; v ^= v >> 40`, 20 bits); the 20-bit label is
/// then folded into 14 bits above 0xC000. Without a flow label both directions of a
/// connection get the same port, and a fabric's ECMP hash spreads a host pair's connections
/// over its paths by it. A UD QP (no remote QP) gets 0xC000.
pub fn udp_source_port(flow_label: u32, lqpn: Qpn, rqpn: Qpn) -> u16 {
    let fl = if flow_label & 0xf_ffff != 0 {
        flow_label & 0xf_ffff
    } else {
        let mut v = u64::from(lqpn.get()) * u64::from(rqpn.get());
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xf_ffff) as u32
    };
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low as u16) | ROCEV2_SOURCE_PORT_MIN
}

/// The flow label that gives a connection the UDP source port `port` under
/// [`udp_source_port`] (`None` below 0xC000): how a QP is given a chosen port — a probe that
/// walks a fabric's ECMP paths — on podnet's soft devices, rxe and NICs that derive the port
/// from the flow label.
pub fn flow_label_for_udp_source_port(port: u16) -> Option<u32> {
    // Upper bits 1 (never 0, which means "compute one"), lower bits the port's 14 folded
    // with them.
    (port >= ROCEV2_SOURCE_PORT_MIN).then(|| (1 << 14) | (u32::from(port & 0x3fff) ^ 1))
}

/// Why a buffer could not be read or written as a RoCEv2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the headers, pad and ICRC that its opcode requires.
    #[error("truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the headers need.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// The BTH pad count is larger than the bytes that follow the headers.
    #[error("pad count {pad} exceeds the {available} bytes after the headers")]
    BadPadCount {
        /// The pad count from the BTH.
        pad: u8,
        /// Bytes between the end of the extension headers and the ICRC.
        available: usize,
    },
    /// A `Repr` lacks an extension header its opcode requires, or has one it forbids.
    #[error(
        "opcode {opcode:#04x} requires extension headers {required:?}, the Repr has {present:?}"
    )]
    HeaderMismatch {
        /// The opcode.
        opcode: u8,
        /// The extension headers the opcode requires.
        required: ExtHeaders,
        /// The extension headers the Repr has.
        present: ExtHeaders,
    },
    /// The opcode carries no payload, but the Repr has some.
    #[error("opcode {0:#04x} carries no payload")]
    UnexpectedPayload(u8),
    /// The bytes given as an IP header are not a whole IPv4 or IPv6 header.
    #[error("not an IPv4 or IPv6 header")]
    BadIpHeader,
    /// A field value does not fit its bit width (24-bit QPN/PSN/MSN, 4-bit TVer).
    #[error("{field} value {value:#x} does not fit in {bits} bits")]
    FieldRange {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The field's width in bits.
        bits: u32,
    },
}

/// Result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Reads a big-endian 24-bit value from the first three bytes of `b`.
#[inline]
fn be24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Writes the low 24 bits of `v` big-endian into the first three bytes of `b`.
#[inline]
fn put_be24(b: &mut [u8], v: u32) {
    b[0] = (v >> 16) as u8;
    b[1] = (v >> 8) as u8;
    b[2] = v as u8;
}

/// Checks that `value` fits in `bits` bits.
#[inline]
fn check_range(field: &'static str, value: u64, bits: u32) -> Result<()> {
    if value >> bits == 0 { Ok(()) } else { Err(Error::FieldRange { field, value, bits }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_ports_match_rxe() {
        let port = |a: u32, b: u32| udp_source_port(0, Qpn::new(a), Qpn::new(b));
        // Observed in testdata/rxe (both ends had the same QPN): 0x11 -> 49441,
        // 0x12 -> 49476, 0x14 -> 49552; and 0x16 -> 49636, 0x17 -> 49681.
        for (q, p) in [(0x11, 49441), (0x12, 49476), (0x14, 49552), (0x16, 49636), (0x17, 49681)] {
            assert_eq!(port(q, q), p, "QPN {q:#x}");
        }
        // Symmetric, and the folds matter for large QPNs.
        assert_eq!(port(0x11, 0x2345), port(0x2345, 0x11));
        assert_eq!(port(0, 0), 0xc000);
    }

    #[test]
    fn a_flow_label_chooses_the_port() {
        // Linux's rdma_flow_label_to_udp_sport: the label's low 14 bits folded with its high 6.
        assert_eq!(
            udp_source_port(0x5_4321, Qpn::new(0x11), Qpn::new(0x12)),
            0xc000 | (0x0321 ^ 0x15)
        );
        for p in [0xc000u16, 0xc001, 0xd00d, 0xffff] {
            let fl = flow_label_for_udp_source_port(p).unwrap();
            assert!(fl != 0 && fl <= 0xf_ffff, "{fl:#x}");
            assert_eq!(udp_source_port(fl, Qpn::new(7), Qpn::new(9)), p);
        }
        assert_eq!(flow_label_for_udp_source_port(4791), None);
    }
}
