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
