//! The extension transport headers that follow the BTH.
//!
//! Each is fixed-size, so each is one `Repr` with `parse` (length-checked), `LEN` and `emit`.
//! Which ones a packet carries, and in what order, is the opcode's business
//! ([`crate::opcode`]); [`crate::roce::Packet`] finds them.

use core::time::Duration;

use crate::{Error, QKey, Qpn, RKey, Result, be24, check_range, put_be24};

fn need(buf: &[u8], len: usize) -> Result<()> {
    if buf.len() < len {
        Err(Error::Truncated { needed: len, available: buf.len() })
    } else {
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// RDMA Extended Transport Header: where an RDMA WRITE or READ goes (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key of the target memory region.
    pub rkey: RKey,
    /// Length of the whole RDMA operation in bytes.
    pub dma_len: u32,
}

impl Reth {
    /// Length in bytes.
    pub const LEN: usize = 16;

    /// Reads a RETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(Reth { va: u64_at(buf, 0), rkey: RKey(u32_at(buf, 8)), dma_len: u32_at(buf, 12) })
    }

    /// Writes the RETH at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        need(buf, Self::LEN)?;
        buf[0..8].copy_from_slice(&self.va.to_be_bytes());
        buf[8..12].copy_from_slice(&self.rkey.0.to_be_bytes());
        buf[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
        Ok(())
    }
}

/// What an AETH syndrome says (bits 6:5 select the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// 00: ACK, with the end-to-end flow-control credit code in bits 4:0.
    Ack(CreditCode),
    /// 01: RNR NAK, with the RNR timer code in bits 4:0.
    RnrNak(RnrTimer),
    /// 11: NAK, with the NAK code in bits 4:0.
    Nak(NakCode),
    /// 10: reserved; the raw syndrome.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a raw 8-bit syndrome. Bit 7 is reserved and ignored.
    pub const fn from_raw(raw: u8) -> Self {
        let low = raw & 0x1f;
        match (raw >> 5) & 0x3 {
            0 => Syndrome::Ack(CreditCode(low)),
            1 => Syndrome::RnrNak(RnrTimer(low)),
            3 => Syndrome::Nak(NakCode::from_raw(low)),
            _ => Syndrome::Reserved(raw),
        }
    }

    /// Encodes the syndrome as 8 bits.
    pub const fn to_raw(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.0 & 0x1f,
            Syndrome::RnrNak(t) => 0x20 | (t.0 & 0x1f),
            Syndrome::Nak(n) => 0x60 | n.to_raw(),
            Syndrome::Reserved(r) => r,
        }
    }
}

/// The 5-bit credit code of an ACK. It is a code, not a count: per IBTA 0–30 index a
/// logarithmic credit table and 0x1F means "invalid" (the responder does not advertise
/// credits, i.e. unlimited), not 31 credits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditCode(pub u8);

impl CreditCode {
    /// The responder does not advertise credits.
    pub const INVALID: CreditCode = CreditCode(0x1f);

    /// Whether the code is 0x1F (no credit limit advertised).
    pub const fn is_unlimited(self) -> bool {
        self.0 == 0x1f
    }
}

/// The 5-bit RNR NAK timer code: how long the requester waits before it retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnrTimer(pub u8);

impl RnrTimer {
    // IBTA table 45 in microseconds, as rxe's `rnrnak_usec` has it.
    const USEC: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];

    /// The time the code stands for (code 0 is the longest, 655.36 ms).
    pub const fn duration(self) -> Duration {
        Duration::from_micros(Self::USEC[(self.0 & 0x1f) as usize] as u64)
    }
}

/// The code of a NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    /// 0: PSN sequence error (the responder expected another PSN).
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error (bad R_Key, bounds, access rights).
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5–31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// Decodes bits 4:0.
    pub const fn from_raw(code: u8) -> Self {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// Encodes bits 4:0.
    pub const fn to_raw(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

/// ACK Extended Transport Header (4 bytes). The syndrome is kept raw; [`Aeth::syndrome`]
/// decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// The raw 8-bit syndrome.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Length in bytes.
    pub const LEN: usize = 4;

    /// Reads an AETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(Aeth { syndrome: buf[0], msn: be24(&buf[1..4]) })
    }

    /// Writes the AETH at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_range("msn", self.msn.into(), 24)?;
        need(buf, Self::LEN)?;
        buf[0] = self.syndrome;
        put_be24(&mut buf[1..4], self.msn);
        Ok(())
    }

    /// The decoded syndrome.
    pub const fn syndrome(&self) -> Syndrome {
        Syndrome::from_raw(self.syndrome)
    }
}

/// Datagram Extended Transport Header (8 bytes): UD and RD requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deth {
    /// Queue key the receiver checks.
    pub qkey: QKey,
    /// Source QP.
    pub src_qp: Qpn,
}

impl Deth {
    /// Length in bytes.
    pub const LEN: usize = 8;

    /// Reads a DETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(Deth { qkey: QKey(u32_at(buf, 0)), src_qp: Qpn::new(be24(&buf[5..8])) })
    }

    /// Writes the DETH at the start of `buf` (the reserved byte as 0).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        need(buf, Self::LEN)?;
        buf[0..4].copy_from_slice(&self.qkey.0.to_be_bytes());
        buf[4] = 0;
        put_be24(&mut buf[5..8], self.src_qp.get());
        Ok(())
    }
}

/// Atomic Extended Transport Header (28 bytes): COMPARE_SWAP and FETCH_ADD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: RKey,
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP only).
    pub compare: u64,
}

impl AtomicEth {
    /// Length in bytes.
    pub const LEN: usize = 28;

    /// Reads an AtomicETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(AtomicEth {
            va: u64_at(buf, 0),
            rkey: RKey(u32_at(buf, 8)),
            swap_add: u64_at(buf, 12),
            compare: u64_at(buf, 20),
        })
    }

    /// Writes the AtomicETH at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        need(buf, Self::LEN)?;
        buf[0..8].copy_from_slice(&self.va.to_be_bytes());
        buf[8..12].copy_from_slice(&self.rkey.0.to_be_bytes());
        buf[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        buf[20..28].copy_from_slice(&self.compare.to_be_bytes());
        Ok(())
    }
}

/// Atomic ACK Extended Transport Header (8 bytes): the original remote value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEth {
    /// The value at the remote address before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Length in bytes.
    pub const LEN: usize = 8;

    /// Reads an AtomicAckETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(AtomicAckEth { orig: u64_at(buf, 0) })
    }

    /// Writes the AtomicAckETH at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        need(buf, Self::LEN)?;
        buf[0..8].copy_from_slice(&self.orig.to_be_bytes());
        Ok(())
    }
}

/// A 4-byte extension header made of one 32-bit big-endian value (ImmDt, IETH), or of a
/// reserved byte and a 24-bit value (RDETH, XRCETH).
macro_rules! word_header {
    ($(#[$m:meta])* $name:ident { $(#[$fm:meta])* $field:ident: $ty:ty } get $get:expr, put $put:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            $(#[$fm])*
            pub $field: $ty,
        }

        impl $name {
            /// Length in bytes.
            pub const LEN: usize = 4;

            /// Reads the header from the start of `buf`.
            pub fn parse(buf: &[u8]) -> Result<Self> {
                need(buf, Self::LEN)?;
                let get: fn(&[u8]) -> $ty = $get;
                Ok($name { $field: get(buf) })
            }

            /// Writes the header at the start of `buf`.
            pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
                need(buf, Self::LEN)?;
                let put: fn(&mut [u8], $ty) = $put;
                put(buf, self.$field);
                Ok(())
            }
        }
    };
}

word_header!(
    /// Immediate data (4 bytes): delivered in the receiver's completion.
    ImmDt {
        /// The 32-bit immediate value, as the requester posted it (network order on the wire).
        value: u32
    }
    get |b| u32_at(b, 0), put |b, v| b[..4].copy_from_slice(&v.to_be_bytes())
);

word_header!(
    /// Invalidate Extended Transport Header (4 bytes): SEND_WITH_INVALIDATE.
    Ieth {
        /// The R_Key the responder invalidates.
        rkey: RKey
    }
    get |b| RKey(u32_at(b, 0)), put |b, v| b[..4].copy_from_slice(&v.0.to_be_bytes())
);

word_header!(
    /// Reliable Datagram Extended Transport Header (4 bytes).
    Rdeth {
        /// The end-to-end context (24 bits).
        ee_context: u32
    }
    get |b| be24(&b[1..4]), put |b, v| { b[0] = 0; put_be24(&mut b[1..4], v) }
);

word_header!(
    /// XRC Extended Transport Header (4 bytes): XRC requests.
    XrcEth {
        /// The XRC shared receive queue number (24 bits).
        xrc_srq: u32
    }
    get |b| be24(&b[1..4]), put |b, v| { b[0] = 0; put_be24(&mut b[1..4], v) }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeth_syndromes_decode_per_ibta() {
        assert_eq!(Syndrome::from_raw(0x1f), Syndrome::Ack(CreditCode::INVALID));
        assert!(CreditCode(0x1f).is_unlimited());
        assert_eq!(Syndrome::from_raw(0x00), Syndrome::Ack(CreditCode(0)));
        assert_eq!(Syndrome::from_raw(0x2e), Syndrome::RnrNak(RnrTimer(14)));
        assert_eq!(Syndrome::from_raw(0x60), Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(Syndrome::from_raw(0x61), Syndrome::Nak(NakCode::InvalidRequest));
        assert_eq!(Syndrome::from_raw(0x62), Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(Syndrome::from_raw(0x63), Syndrome::Nak(NakCode::RemoteOperationalError));
        assert_eq!(Syndrome::from_raw(0x64), Syndrome::Nak(NakCode::InvalidRdRequest));
        assert_eq!(Syndrome::from_raw(0x65), Syndrome::Nak(NakCode::Reserved(5)));
        assert_eq!(Syndrome::from_raw(0x41), Syndrome::Reserved(0x41));
        for raw in 0..0x80u8 {
            assert_eq!(Syndrome::from_raw(raw).to_raw(), raw, "{raw:#x}");
        }
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(RnrTimer(0).duration(), Duration::from_micros(655_360));
        assert_eq!(RnrTimer(1).duration(), Duration::from_micros(10));
        assert_eq!(RnrTimer(12).duration(), Duration::from_micros(640));
        assert_eq!(RnrTimer(14).duration(), Duration::from_micros(1_280));
        assert_eq!(RnrTimer(31).duration(), Duration::from_micros(491_520));
        // The table is increasing from code 1 on.
        assert!((1..31).all(|c| RnrTimer(c).duration() < RnrTimer(c + 1).duration()));
    }

    #[test]
    fn headers_round_trip_and_refuse_short_buffers() {
        let mut b = [0u8; 28];
        let a =
            AtomicEth { va: 0x7f00_dead_0008, rkey: RKey(0x1122_3344), swap_add: 1, compare: 2 };
        a.emit(&mut b).unwrap();
        assert_eq!(AtomicEth::parse(&b).unwrap(), a);
        assert!(AtomicEth::parse(&b[..27]).is_err());
        let d = Deth { qkey: QKey(0x8001_0000), src_qp: Qpn::new(0x777) };
        d.emit(&mut b).unwrap();
        assert_eq!(&b[..8], &[0x80, 0x01, 0, 0, 0, 0, 0x07, 0x77]);
        assert_eq!(Deth::parse(&b).unwrap(), d);
        let x = XrcEth { xrc_srq: 0xabcdef };
        x.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[0, 0xab, 0xcd, 0xef]);
        assert_eq!(XrcEth::parse(&b).unwrap(), x);
        assert!(Aeth { syndrome: 0, msn: 1 << 24 }.emit(&mut b).is_err());
        assert!(Reth::parse(&b[..15]).is_err());
        assert!(ImmDt::parse(&b[..3]).is_err());
    }
}
