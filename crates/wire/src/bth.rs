//! The Base Transport Header (12 bytes), first in every RoCEv2 UDP payload.
//!
//! ```text
//!  0       opcode
//!  1       SE(7) MigReq(6) PadCnt(5:4) TVer(3:0)
//!  2..4    P_Key
//!  4       FECN(7) BECN(6) reserved(5:0)      -- byte 4 is masked to 0xff in the ICRC
//!  5..8    destination QP (24 bits)
//!  8       AckReq(7) reserved(6:0)
//!  9..12   PSN (24 bits)
//! ```

use crate::{Error, Opcode, Psn, Qpn, Result, be24, check_range, put_be24};

mod field {
    pub(super) const OPCODE: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const PKEY: core::ops::Range<usize> = 2..4;
    pub(super) const FB: usize = 4;
    pub(super) const DEST_QP: core::ops::Range<usize> = 5..8;
    pub(super) const ACK: usize = 8;
    pub(super) const PSN: core::ops::Range<usize> = 9..12;
}

/// Length of the BTH in bytes.
pub const HEADER_LEN: usize = 12;

/// The default partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// A zero-copy view of a BTH.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let available = buffer.as_ref().len();
        if available < HEADER_LEN {
            return Err(Error::Truncated { needed: HEADER_LEN, available });
        }
        Ok(Packet { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited Event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request (APM).
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count: 0–3 bytes between the payload and the ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        let b = &self.b()[field::PKEY];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// Forward ECN: the packet met congestion (RoCEv2 uses the IP ECN bits instead; kept for IB).
    pub fn fecn(&self) -> bool {
        self.b()[field::FB] & 0x80 != 0
    }
    /// Backward ECN.
    pub fn becn(&self) -> bool {
        self.b()[field::FB] & 0x40 != 0
    }
    /// The six reserved bits of byte 4.
    pub fn resv6(&self) -> u8 {
        self.b()[field::FB] & 0x3f
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be24(&self.b()[field::DEST_QP]))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & 0x80 != 0
    }
    /// The seven reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK] & 0x7f
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be24(&self.b()[field::PSN]))
    }
}

/// The meaning of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The opcode.
    pub opcode: Opcode,
    /// Solicited Event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count. [`crate::roce::Repr::emit`] derives it from the payload length.
    pub pad_count: u8,
    /// Transport header version; 0 for every IBTA release so far.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Repr {
    /// A BTH with the given opcode, destination QP and PSN, the default P_Key and every flag
    /// clear.
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a BTH. Every bit pattern is a valid BTH, so this cannot fail.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        }
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the BTH into the first 12 bytes of `buf`; reserved bits are written as 0.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_range("pad_count", self.pad_count.into(), 2)?;
        check_range("tver", self.tver.into(), 4)?;
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated { needed: HEADER_LEN, available: buf.len() });
        }
        buf[field::OPCODE] = self.opcode.0;
        buf[field::FLAGS] = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | (self.pad_count << 4)
            | self.tver;
        buf[field::PKEY].copy_from_slice(&self.pkey.to_be_bytes());
        buf[field::FB] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put_be24(&mut buf[field::DEST_QP], self.dest_qp.get());
        buf[field::ACK] = u8::from(self.ack_req) << 7;
        put_be24(&mut buf[field::PSN], self.psn.get());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The UC SEND_ONLY BTH of vector 1 (scapy's roce.uts example).
    const BYTES: [u8; 12] =
        [0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode(0x24));
        assert!(!p.solicited());
        assert!(p.mig_req());
        assert_eq!(p.pad_count(), 2);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.pkey(), 0xffff);
        assert!(!p.fecn() && !p.becn());
        assert_eq!(p.dest_qp(), Qpn::new(0xd3));
        assert!(!p.ack_req());
        assert_eq!(p.psn(), Psn::new(13_571_856));
    }

    #[test]
    fn round_trip() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        let r = Repr::parse(&p);
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn short_buffers_are_refused() {
        assert_eq!(
            Packet::new_checked(&BYTES[..11]).unwrap_err(),
            Error::Truncated { needed: 12, available: 11 }
        );
        let r = Repr::new(Opcode(4), Qpn::new(1), Psn::new(1));
        assert!(r.emit(&mut [0u8; 11]).is_err());
        assert!(Repr { pad_count: 4, ..r }.emit(&mut [0u8; 12]).is_err());
        assert!(Repr { tver: 16, ..r }.emit(&mut [0u8; 12]).is_err());
    }
}
