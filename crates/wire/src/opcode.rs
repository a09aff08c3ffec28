//! The BTH opcode table.
//!
//! Bits 7:5 of the opcode select the transport (RC, UC, RD, UD, the RoCEv2 CNP, XRC; 110 and 111
//! are manufacturer specific), bits 4:0 the operation. For every defined opcode the table gives
//! its name (as rdma-core's `ib_pack.h` and Wireshark spell it, e.g. `RC_RDMA_WRITE_FIRST`), the
//! extension headers that follow the BTH (in IBTA order) and whether payload follows them, so a
//! parser never mis-reads a header. An opcode that is not defined has no name, no extension
//! headers, and everything between the BTH and the ICRC is its payload.

use core::fmt;

/// The transport service an opcode belongs to (BTH opcode bits 7:5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (000).
    Rc,
    /// Unreliable Connected (001).
    Uc,
    /// Reliable Datagram (010).
    Rd,
    /// Unreliable Datagram (011).
    Ud,
    /// RoCEv2 Congestion Notification Packet (100).
    Cnp,
    /// Extended Reliable Connected (101).
    Xrc,
    /// Manufacturer specific (110, 111).
    Manufacturer,
}

impl Transport {
    /// The prefix the table uses in opcode names.
    pub const fn prefix(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Manufacturer => "MANUFACTURER",
        }
    }
}

/// A set of extension headers, iterated in the order they follow the BTH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    /// No extension header.
    pub const NONE: Self = ExtHeaders(0);
    /// Reliable Datagram ETH (4 bytes).
    pub const RDETH: Self = ExtHeaders(1 << 0);
    /// Datagram ETH (8 bytes).
    pub const DETH: Self = ExtHeaders(1 << 1);
    /// XRC ETH (4 bytes).
    pub const XRCETH: Self = ExtHeaders(1 << 2);
    /// RDMA ETH (16 bytes).
    pub const RETH: Self = ExtHeaders(1 << 3);
    /// Atomic ETH (28 bytes).
    pub const ATOMIC_ETH: Self = ExtHeaders(1 << 4);
    /// ACK ETH (4 bytes).
    pub const AETH: Self = ExtHeaders(1 << 5);
    /// Atomic ACK ETH (8 bytes).
    pub const ATOMIC_ACK_ETH: Self = ExtHeaders(1 << 6);
    /// Immediate data (4 bytes).
    pub const IMMDT: Self = ExtHeaders(1 << 7);
    /// Invalidate ETH (4 bytes).
    pub const IETH: Self = ExtHeaders(1 << 8);

    /// Every header in wire order with its length and name.
    pub const ORDER: [(ExtHeaders, usize, &'static str); 9] = [
        (Self::RDETH, 4, "RDETH"),
        (Self::DETH, 8, "DETH"),
        (Self::XRCETH, 4, "XRCETH"),
        (Self::RETH, 16, "RETH"),
        (Self::ATOMIC_ETH, 28, "AtomicETH"),
        (Self::AETH, 4, "AETH"),
        (Self::ATOMIC_ACK_ETH, 8, "AtomicAckETH"),
        (Self::IMMDT, 4, "ImmDt"),
        (Self::IETH, 4, "IETH"),
    ];

    /// The union of two sets.
    pub const fn union(self, other: Self) -> Self {
        ExtHeaders(self.0 | other.0)
    }

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total length in bytes of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        n
    }

    /// Byte offset of `header` from the end of the BTH, if `header` is in the set.
    pub const fn offset_of(self, header: Self) -> Option<usize> {
        if !self.contains(header) {
            return None;
        }
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if Self::ORDER[i].0.0 == header.0 {
                return Some(n);
            }
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

impl core::ops::BitOr for ExtHeaders {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for ExtHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_set();
        for (h, _, name) in Self::ORDER {
            if self.contains(h) {
                list.entry(&format_args!("{name}"));
            }
        }
        list.finish()
    }
}

impl Transport {
    /// The opcode bits 7:5 of the transport, in place (`Uc` is `0x20`); `Manufacturer` is
    /// `0xc0`, the first of its two.
    pub const fn opcode_bits(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Rd => 0x40,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
            Transport::Xrc => 0xa0,
            Transport::Manufacturer => 0xc0,
        }
    }
}

// The enum and `Operation::ALL` from one list, in bit order from 0.
macro_rules! operations {
    ($(#[$edoc:meta])* enum; $($(#[$doc:meta])* $op:ident,)*) => {
        $(#[$edoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Operation {
            $($(#[$doc])* $op,)*
        }

        impl Operation {
            /// Every operation, by its bits.
            pub const ALL: [Operation; 24] = [$(Operation::$op),*];
        }
    };
}

operations! {
    /// The operation of an opcode (bits 4:0), the same for RC, UC, RD, UD and XRC: an opcode
    /// is a [`Transport`] and an `Operation` ([`Opcode::new`]). Which transports define which
    /// operation is the table's business ([`Opcode::info`]).
    enum;
    /// SEND First (0x00).
    SendFirst,
    /// SEND Middle.
    SendMiddle,
    /// SEND Last.
    SendLast,
    /// SEND Last with Immediate.
    SendLastWithImmediate,
    /// SEND Only.
    SendOnly,
    /// SEND Only with Immediate.
    SendOnlyWithImmediate,
    /// RDMA WRITE First.
    RdmaWriteFirst,
    /// RDMA WRITE Middle.
    RdmaWriteMiddle,
    /// RDMA WRITE Last.
    RdmaWriteLast,
    /// RDMA WRITE Last with Immediate.
    RdmaWriteLastWithImmediate,
    /// RDMA WRITE Only.
    RdmaWriteOnly,
    /// RDMA WRITE Only with Immediate.
    RdmaWriteOnlyWithImmediate,
    /// RDMA READ Request.
    RdmaReadRequest,
    /// RDMA READ Response First.
    RdmaReadResponseFirst,
    /// RDMA READ Response Middle.
    RdmaReadResponseMiddle,
    /// RDMA READ Response Last.
    RdmaReadResponseLast,
    /// RDMA READ Response Only.
    RdmaReadResponseOnly,
    /// Acknowledge (0x11).
    Acknowledge,
    /// ATOMIC Acknowledge.
    AtomicAcknowledge,
    /// CmpSwap.
    CompareSwap,
    /// FetchAdd.
    FetchAdd,
    /// Resync (RD).
    Resync,
    /// SEND Last with Invalidate.
    SendLastWithInvalidate,
    /// SEND Only with Invalidate (0x17).
    SendOnlyWithInvalidate,
}

impl Operation {
    /// The operation with these bits (opcode bits 4:0), if one is defined.
    pub const fn from_bits(bits: u8) -> Option<Operation> {
        if (bits as usize) < Self::ALL.len() { Some(Self::ALL[bits as usize]) } else { None }
    }

    /// Its bits (opcode bits 4:0).
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// The name without its transport, e.g. `SEND_ONLY`.
    pub const fn name(self) -> &'static str {
        OPS[self as usize].0
    }

    /// A responder's answer (a READ response, an ACK or an atomic ACK), not a request.
    pub const fn is_response(self) -> bool {
        matches!(
            self,
            Operation::RdmaReadResponseFirst
                | Operation::RdmaReadResponseMiddle
                | Operation::RdmaReadResponseLast
                | Operation::RdmaReadResponseOnly
                | Operation::Acknowledge
                | Operation::AtomicAcknowledge
        )
    }

    /// The first packet of a message (or its only one).
    pub const fn is_first_or_only(self) -> bool {
        use Operation::*;
        matches!(
            self,
            SendFirst
                | SendOnly
                | SendOnlyWithImmediate
                | RdmaWriteFirst
                | RdmaWriteOnly
                | RdmaWriteOnlyWithImmediate
                | RdmaReadRequest
                | RdmaReadResponseFirst
                | RdmaReadResponseOnly
                | Acknowledge
                | AtomicAcknowledge
                | CompareSwap
                | FetchAdd
                | SendOnlyWithInvalidate
        )
    }

    /// The last packet of a message (or its only one).
    pub const fn is_last_or_only(self) -> bool {
        use Operation::*;
        !matches!(
            self,
            SendFirst
                | SendMiddle
                | RdmaWriteFirst
                | RdmaWriteMiddle
                | RdmaReadResponseFirst
                | RdmaReadResponseMiddle
        )
    }

    /// A packet that starts consuming a receive WQE: the first or only packet of a SEND, or
    /// the last or only packet of an RDMA WRITE with immediate.
    pub const fn consumes_receive_at_start(self) -> bool {
        use Operation::*;
        matches!(
            self,
            SendFirst
                | SendOnly
                | SendOnlyWithImmediate
                | RdmaWriteLastWithImmediate
                | RdmaWriteOnlyWithImmediate
                | SendOnlyWithInvalidate
        )
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The name, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// The transport service.
    pub transport: Transport,
    /// Extension headers that follow the BTH.
    pub ext: ExtHeaders,
    /// Whether payload follows the extension headers. The CNP's 16 reserved bytes count as
    /// payload, as RoCE NICs and Wireshark treat them.
    pub payload: bool,
}

/// A BTH opcode.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

// The operations (opcode bits 4:0), shared by RC, UC, RD, UD and XRC.
const OPS: [(&str, ExtHeaders, bool); 24] = {
    const N: ExtHeaders = ExtHeaders::NONE;
    const R: ExtHeaders = ExtHeaders::RETH;
    const I: ExtHeaders = ExtHeaders::IMMDT;
    const A: ExtHeaders = ExtHeaders::AETH;
    [
        ("SEND_FIRST", N, true),
        ("SEND_MIDDLE", N, true),
        ("SEND_LAST", N, true),
        ("SEND_LAST_WITH_IMMEDIATE", I, true),
        ("SEND_ONLY", N, true),
        ("SEND_ONLY_WITH_IMMEDIATE", I, true),
        ("RDMA_WRITE_FIRST", R, true),
        ("RDMA_WRITE_MIDDLE", N, true),
        ("RDMA_WRITE_LAST", N, true),
        ("RDMA_WRITE_LAST_WITH_IMMEDIATE", I, true),
        ("RDMA_WRITE_ONLY", R, true),
        ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", R.union(I), true),
        ("RDMA_READ_REQUEST", R, false),
        ("RDMA_READ_RESPONSE_FIRST", A, true),
        ("RDMA_READ_RESPONSE_MIDDLE", N, true),
        ("RDMA_READ_RESPONSE_LAST", A, true),
        ("RDMA_READ_RESPONSE_ONLY", A, true),
        ("ACKNOWLEDGE", A, false),
        ("ATOMIC_ACKNOWLEDGE", A.union(ExtHeaders::ATOMIC_ACK_ETH), false),
        ("COMPARE_SWAP", ExtHeaders::ATOMIC_ETH, false),
        ("FETCH_ADD", ExtHeaders::ATOMIC_ETH, false),
        ("RESYNC", N, false),
        ("SEND_LAST_WITH_INVALIDATE", ExtHeaders::IETH, true),
        ("SEND_ONLY_WITH_INVALIDATE", ExtHeaders::IETH, true),
    ]
};

// Full names, indexed by opcode, for the opcodes the table defines.
macro_rules! names {
    ($($p:literal),*) => {
        [$(
            [
                concat!($p, "_SEND_FIRST"), concat!($p, "_SEND_MIDDLE"), concat!($p, "_SEND_LAST"),
                concat!($p, "_SEND_LAST_WITH_IMMEDIATE"), concat!($p, "_SEND_ONLY"),
                concat!($p, "_SEND_ONLY_WITH_IMMEDIATE"), concat!($p, "_RDMA_WRITE_FIRST"),
                concat!($p, "_RDMA_WRITE_MIDDLE"), concat!($p, "_RDMA_WRITE_LAST"),
                concat!($p, "_RDMA_WRITE_LAST_WITH_IMMEDIATE"), concat!($p, "_RDMA_WRITE_ONLY"),
                concat!($p, "_RDMA_WRITE_ONLY_WITH_IMMEDIATE"), concat!($p, "_RDMA_READ_REQUEST"),
                concat!($p, "_RDMA_READ_RESPONSE_FIRST"), concat!($p, "_RDMA_READ_RESPONSE_MIDDLE"),
                concat!($p, "_RDMA_READ_RESPONSE_LAST"), concat!($p, "_RDMA_READ_RESPONSE_ONLY"),
                concat!($p, "_ACKNOWLEDGE"), concat!($p, "_ATOMIC_ACKNOWLEDGE"),
                concat!($p, "_COMPARE_SWAP"), concat!($p, "_FETCH_ADD"), concat!($p, "_RESYNC"),
                concat!($p, "_SEND_LAST_WITH_INVALIDATE"), concat!($p, "_SEND_ONLY_WITH_INVALIDATE"),
            ]
        ),*]
    };
}
const NAMES: [[&str; 24]; 5] = names!("RC", "UC", "RD", "UD", "XRC");

/// The opcode table, computed once at compile time.
static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_info();
        i += 1;
    }
    t
};

impl Opcode {
    /// The RoCEv2 Congestion Notification Packet.
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode of `operation` on `transport` (defined or not: see [`Opcode::info`]).
    pub const fn new(transport: Transport, operation: Operation) -> Opcode {
        Opcode(transport.opcode_bits() | operation.bits())
    }

    /// The operation (opcode bits 4:0), if those bits name one; `None` for the CNP.
    pub const fn operation(self) -> Option<Operation> {
        match self.transport() {
            Transport::Cnp => None,
            _ => Operation::from_bits(self.operation_bits()),
        }
    }

    /// The transport service (opcode bits 7:5).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Manufacturer,
        }
    }

    /// The operation's bits (opcode bits 4:0), defined or not.
    pub const fn operation_bits(self) -> u8 {
        self.0 & 0x1f
    }

    /// The table row, or `None` for an opcode the table does not define.
    pub const fn info(self) -> Option<OpcodeInfo> {
        TABLE[self.0 as usize]
    }

    const fn compute_info(self) -> Option<OpcodeInfo> {
        let op = self.operation_bits() as usize;
        let t = self.transport();
        let (row, defined) = match t {
            Transport::Rc => (0, op <= 0x14 || op == 0x16 || op == 0x17),
            Transport::Uc => (1, op <= 0x0b),
            Transport::Rd => (2, op <= 0x15),
            Transport::Ud => (3, op == 0x04 || op == 0x05),
            Transport::Xrc => (4, op <= 0x14 || op == 0x16 || op == 0x17),
            Transport::Cnp => {
                return if op == 1 {
                    Some(OpcodeInfo {
                        name: "CNP",
                        transport: Transport::Cnp,
                        ext: ExtHeaders::NONE,
                        payload: true,
                    })
                } else {
                    None
                };
            }
            Transport::Manufacturer => return None,
        };
        if !defined {
            return None;
        }
        let (_, base, payload) = OPS[op];
        // Requests: everything but read responses and (atomic) acknowledges.
        let request = !(op >= 0x0d && op <= 0x12);
        let ext = match t {
            Transport::Rd if request => ExtHeaders::RDETH.union(ExtHeaders::DETH).union(base),
            Transport::Rd => ExtHeaders::RDETH.union(base),
            Transport::Ud => ExtHeaders::DETH.union(base),
            Transport::Xrc if request => ExtHeaders::XRCETH.union(base),
            _ => base,
        };
        Some(OpcodeInfo { name: NAMES[row][op], transport: t, ext, payload })
    }

    /// The opcode's name, `None` if the table does not define it.
    pub const fn name(self) -> Option<&'static str> {
        match self.info() {
            Some(i) => Some(i.name),
            None => None,
        }
    }

    /// The extension headers that follow the BTH (none for an undefined opcode).
    pub const fn ext_headers(self) -> ExtHeaders {
        match self.info() {
            Some(i) => i.ext,
            None => ExtHeaders::NONE,
        }
    }

    /// Whether payload may follow the extension headers (true for an undefined opcode: its
    /// bytes after the BTH are reported as payload).
    pub const fn has_payload(self) -> bool {
        match self.info() {
            Some(i) => i.payload,
            None => true,
        }
    }

    /// Whether the opcode is the first or only packet of a message.
    pub const fn is_first_or_only(self) -> bool {
        match self.operation() {
            Some(op) => op.is_first_or_only(),
            None => false,
        }
    }

    /// Whether the opcode is the last or only packet of a message.
    pub const fn is_last_or_only(self) -> bool {
        match self.operation() {
            Some(op) => op.is_last_or_only(),
            None => false,
        }
    }

    /// Whether a packet with this opcode carries exactly the path MTU of payload: the FIRST
    /// and MIDDLE packets of a message (IBTA 9.7.2 has a responder reject any other length).
    pub const fn fills_path_mtu(self) -> bool {
        match self.operation() {
            Some(op) => !op.is_last_or_only(),
            None => false,
        }
    }

    /// Whether the length of a packet with this opcode follows from its headers and the path
    /// MTU ([`crate::roce::len_from_headers`]): a FIRST or MIDDLE packet, an RDMA WRITE ONLY
    /// (its RETH's DMA length) and a packet without payload (a READ request, an atomic, an
    /// ACK). A SEND ONLY or a LAST packet is as long as the datagram that carries it says.
    pub const fn len_in_headers(self) -> bool {
        match self.operation() {
            Some(Operation::RdmaWriteOnly | Operation::RdmaWriteOnlyWithImmediate) => true,
            Some(op) => !op.is_last_or_only() || !self.has_payload(),
            None => false,
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#04x})", self.0),
            None => write!(f, "UNKNOWN({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "opcode {:#04x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opcode_is_a_transport_and_an_operation() {
        use Transport::*;
        let mut named = 0;
        for t in [Rc, Uc, Rd, Ud, Xrc] {
            for op in Operation::ALL {
                let o = Opcode::new(t, op);
                assert_eq!((o.transport(), o.operation()), (t, Some(op)), "{o:?}");
                if let Some(n) = o.name() {
                    assert_eq!(n, format!("{}_{}", t.prefix(), op.name()));
                    named += 1;
                }
            }
        }
        assert_eq!(named, 23 + 12 + 22 + 2 + 23, "every defined opcode");
        assert_eq!(Opcode::new(Rc, Operation::Acknowledge), Opcode(0x11));
        assert_eq!(Opcode::new(Ud, Operation::SendOnlyWithImmediate), Opcode(0x65));
        for b in 0..=0x1fu8 {
            let op = Operation::from_bits(b);
            assert_eq!(op.map(Operation::bits), (b < 0x18).then_some(b));
            // The responses are operations 0x0d-0x12, as rxe's and IBTA's tables have them.
            assert_eq!(op.is_some_and(Operation::is_response), (0x0d..=0x12).contains(&b));
        }
        assert_eq!((Opcode::CNP.operation(), Opcode::CNP.is_first_or_only()), (None, false));
    }

    #[test]
    fn names_match_ib_pack() {
        assert_eq!(Opcode(0x04).name(), Some("RC_SEND_ONLY"));
        assert_eq!(Opcode(0x06).name(), Some("RC_RDMA_WRITE_FIRST"));
        assert_eq!(Opcode(0x11).name(), Some("RC_ACKNOWLEDGE"));
        assert_eq!(Opcode(0x17).name(), Some("RC_SEND_ONLY_WITH_INVALIDATE"));
        assert_eq!(Opcode(0x24).name(), Some("UC_SEND_ONLY"));
        assert_eq!(Opcode(0x2b).name(), Some("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"));
        assert_eq!(Opcode(0x64).name(), Some("UD_SEND_ONLY"));
        assert_eq!(Opcode(0x65).name(), Some("UD_SEND_ONLY_WITH_IMMEDIATE"));
        assert_eq!(Opcode(0x55).name(), Some("RD_RESYNC"));
        assert_eq!(Opcode(0xa0).name(), Some("XRC_SEND_FIRST"));
        assert_eq!(Opcode(0x81).name(), Some("CNP"));
    }

    #[test]
    fn undefined_opcodes_have_no_name_and_no_headers() {
        for op in [0x15u8, 0x18, 0x1f, 0x2c, 0x56, 0x60, 0x66, 0x80, 0x82, 0xb5, 0xc0, 0xff] {
            assert_eq!(Opcode(op).name(), None, "{op:#x}");
            assert!(Opcode(op).ext_headers().is_empty());
            assert!(Opcode(op).has_payload());
        }
        let defined = (0..=255u8).filter(|&o| Opcode(o).name().is_some()).count();
        // RC 23 + UC 12 + RD 22 + UD 2 + XRC 23 + CNP 1.
        assert_eq!(defined, 83);
    }

    #[test]
    fn header_sets_follow_ibta() {
        let e = |o| Opcode(o).ext_headers();
        assert_eq!(e(0x0b), ExtHeaders::RETH | ExtHeaders::IMMDT);
        assert_eq!(e(0x12), ExtHeaders::AETH | ExtHeaders::ATOMIC_ACK_ETH);
        assert_eq!(e(0x65), ExtHeaders::DETH | ExtHeaders::IMMDT);
        assert_eq!(e(0x46), ExtHeaders::RDETH | ExtHeaders::DETH | ExtHeaders::RETH);
        assert_eq!(e(0x4d), ExtHeaders::RDETH | ExtHeaders::AETH);
        assert_eq!(e(0x4e), ExtHeaders::RDETH);
        assert_eq!(e(0xac), ExtHeaders::XRCETH | ExtHeaders::RETH);
        assert_eq!(e(0xb1), ExtHeaders::AETH);
        assert_eq!(e(0xb7), ExtHeaders::XRCETH | ExtHeaders::IETH);
        let h = ExtHeaders::RDETH | ExtHeaders::DETH | ExtHeaders::RETH | ExtHeaders::IMMDT;
        assert_eq!(h.len(), 32);
        assert_eq!(h.offset_of(ExtHeaders::RETH), Some(12));
        assert_eq!(h.offset_of(ExtHeaders::IMMDT), Some(28));
        assert_eq!(h.offset_of(ExtHeaders::AETH), None);
        assert!(!Opcode(0x0c).has_payload());
        assert!(!Opcode(0x13).has_payload());
    }

    #[test]
    fn first_and_last() {
        assert!(Opcode(0x04).is_first_or_only() && Opcode(0x04).is_last_or_only());
        assert!(Opcode(0x06).is_first_or_only() && !Opcode(0x06).is_last_or_only());
        assert!(!Opcode(0x07).is_first_or_only() && !Opcode(0x07).is_last_or_only());
        assert!(!Opcode(0x0f).is_first_or_only() && Opcode(0x0f).is_last_or_only());
    }
}
