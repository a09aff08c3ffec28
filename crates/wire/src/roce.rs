//! A whole RoCEv2 UDP payload: BTH, the extension headers its opcode calls for, payload, pad
//! and the 4-byte ICRC.

use crate::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Rdeth, Reth, XrcEth};
use crate::{Error, ExtHeaders, Opcode, QKey, Qpn, RKey, Result, bth};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Length of BTH plus the extension headers of `opcode`.
pub const fn header_len(opcode: Opcode) -> usize {
    bth::HEADER_LEN + opcode.ext_headers().len()
}

/// The length of the packet at the head of `bytes` as its headers tell it
/// ([`Opcode::len_in_headers`]), with `path_mtu` for a FIRST or MIDDLE packet; `None` for a
/// packet whose length only its datagram knows, or when its headers are not all there. What
/// cuts a run of packets received as one datagram (UDP GSO, unsegmented) at the right place.
pub fn len_from_headers(bytes: &[u8], path_mtu: usize) -> Option<usize> {
    let op = bth::Packet::new_checked(bytes).ok()?.opcode();
    if !op.len_in_headers() {
        return None;
    }
    let payload = if op.fills_path_mtu() {
        path_mtu
    } else if op.has_payload() {
        usize::try_from(Packet::new_checked(bytes).ok()?.reth()?.dma_len).ok()?
    } else {
        0
    };
    Some(header_len(op) + payload + usize::from(pad_for(payload)) + ICRC_LEN)
}

/// Pad bytes that align a payload of `len` bytes to 4.
pub const fn pad_for(len: usize) -> u8 {
    ((4 - (len % 4)) % 4) as u8
}

/// A zero-copy view of a RoCEv2 UDP payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer, checking that it holds the BTH, every extension header of its opcode, the
    /// pad its BTH announces and the ICRC. After this no accessor can fail or panic.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        let p = bth::Packet::new_checked(b)?;
        let hdr = header_len(p.opcode());
        let needed = hdr + ICRC_LEN;
        if b.len() < needed {
            return Err(Error::Truncated { needed, available: b.len() });
        }
        let available = b.len() - needed;
        if usize::from(p.pad_count()) > available {
            return Err(Error::BadPadCount { pad: p.pad_count(), available });
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

    /// The BTH.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.b()[..bth::HEADER_LEN])
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }

    /// The extension headers present.
    pub fn ext_headers(&self) -> ExtHeaders {
        self.opcode().ext_headers()
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        header_len(self.opcode())
    }

    fn ext(&self, h: ExtHeaders) -> Option<&[u8]> {
        let off = bth::HEADER_LEN + self.ext_headers().offset_of(h)?;
        self.b().get(off..)
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth> {
        self.ext(ExtHeaders::RETH).and_then(|b| Reth::parse(b).ok())
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth> {
        self.ext(ExtHeaders::AETH).and_then(|b| Aeth::parse(b).ok())
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth> {
        self.ext(ExtHeaders::DETH).and_then(|b| Deth::parse(b).ok())
    }
    /// The RDETH, if the opcode carries one.
    pub fn rdeth(&self) -> Option<Rdeth> {
        self.ext(ExtHeaders::RDETH).and_then(|b| Rdeth::parse(b).ok())
    }
    /// The XRCETH, if the opcode carries one.
    pub fn xrceth(&self) -> Option<XrcEth> {
        self.ext(ExtHeaders::XRCETH).and_then(|b| XrcEth::parse(b).ok())
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth> {
        self.ext(ExtHeaders::ATOMIC_ETH).and_then(|b| AtomicEth::parse(b).ok())
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth> {
        self.ext(ExtHeaders::ATOMIC_ACK_ETH).and_then(|b| AtomicAckEth::parse(b).ok())
    }
    /// The immediate data, if the opcode carries it.
    pub fn immdt(&self) -> Option<ImmDt> {
        self.ext(ExtHeaders::IMMDT).and_then(|b| ImmDt::parse(b).ok())
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth> {
        self.ext(ExtHeaders::IETH).and_then(|b| Ieth::parse(b).ok())
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        let b = self.b();
        let end = b.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &b[self.header_len()..end]
    }

    /// The bytes the ICRC covers after the IP and UDP headers: everything but the trailer.
    pub fn covered(&self) -> &[u8] {
        let b = self.b();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC trailer in wire order.
    pub fn icrc_bytes(&self) -> [u8; 4] {
        let b = self.b();
        let t = &b[b.len() - ICRC_LEN..];
        [t[0], t[1], t[2], t[3]]
    }

    /// The ICRC as [`crate::icrc::compute`] returns it (the trailer read little-endian).
    pub fn icrc(&self) -> u32 {
        u32::from_le_bytes(self.icrc_bytes())
    }
}

/// The meaning of a RoCEv2 packet's headers. The payload is not part of it: [`Repr::emit`]
/// takes it as an argument, and [`Packet::payload`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The BTH.
    pub bth: bth::Repr,
    /// RDETH (RD).
    pub rdeth: Option<Rdeth>,
    /// DETH (UD, RD requests).
    pub deth: Option<Deth>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcEth>,
    /// RETH (RDMA WRITE first/only, READ request).
    pub reth: Option<Reth>,
    /// AtomicETH (COMPARE_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (acknowledges, READ responses).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (ATOMIC_ACKNOWLEDGE).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data (the *_WITH_IMMEDIATE opcodes).
    pub immdt: Option<ImmDt>,
    /// IETH (SEND_WITH_INVALIDATE).
    pub ieth: Option<Ieth>,
}

impl Repr {
    /// Headers with only a BTH; add the extension headers the opcode needs before emitting.
    pub const fn new(bth: bth::Repr) -> Repr {
        Repr {
            bth,
            rdeth: None,
            deth: None,
            xrceth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// Headers for `bth`'s opcode with every extension header it calls for present and zero;
    /// set their fields before emitting.
    pub fn with_zeroed_headers(bth: bth::Repr) -> Repr {
        let ext = bth.opcode.ext_headers();
        let has = |h| ext.contains(h);
        Repr {
            bth,
            rdeth: has(ExtHeaders::RDETH).then_some(Rdeth { ee_context: 0 }),
            deth: has(ExtHeaders::DETH).then_some(Deth { qkey: QKey(0), src_qp: Qpn::new(0) }),
            xrceth: has(ExtHeaders::XRCETH).then_some(XrcEth { xrc_srq: 0 }),
            reth: has(ExtHeaders::RETH).then_some(Reth { va: 0, rkey: RKey(0), dma_len: 0 }),
            atomic_eth: has(ExtHeaders::ATOMIC_ETH).then_some(AtomicEth {
                va: 0,
                rkey: RKey(0),
                swap_add: 0,
                compare: 0,
            }),
            aeth: has(ExtHeaders::AETH).then_some(Aeth { syndrome: 0, msn: 0 }),
            atomic_ack_eth: has(ExtHeaders::ATOMIC_ACK_ETH).then_some(AtomicAckEth { orig: 0 }),
            immdt: has(ExtHeaders::IMMDT).then_some(ImmDt { value: 0 }),
            ieth: has(ExtHeaders::IETH).then_some(Ieth { rkey: RKey(0) }),
        }
    }

    /// Reads the BTH and the extension headers its opcode calls for from the start of `buf`.
    /// `buf` may end anywhere after them: this is how a capture cut by its snap length is read.
    pub fn parse_headers(buf: &[u8]) -> Result<Repr> {
        let p = bth::Packet::new_checked(buf)?;
        let ext = p.opcode().ext_headers();
        let needed = bth::HEADER_LEN + ext.len();
        if buf.len() < needed {
            return Err(Error::Truncated { needed, available: buf.len() });
        }
        let at = |h: ExtHeaders| ext.offset_of(h).map(|o| &buf[bth::HEADER_LEN + o..]);
        Ok(Repr {
            bth: bth::Repr::parse(&p),
            rdeth: at(ExtHeaders::RDETH).map(Rdeth::parse).transpose()?,
            deth: at(ExtHeaders::DETH).map(Deth::parse).transpose()?,
            xrceth: at(ExtHeaders::XRCETH).map(XrcEth::parse).transpose()?,
            reth: at(ExtHeaders::RETH).map(Reth::parse).transpose()?,
            atomic_eth: at(ExtHeaders::ATOMIC_ETH).map(AtomicEth::parse).transpose()?,
            aeth: at(ExtHeaders::AETH).map(Aeth::parse).transpose()?,
            atomic_ack_eth: at(ExtHeaders::ATOMIC_ACK_ETH).map(AtomicAckEth::parse).transpose()?,
            immdt: at(ExtHeaders::IMMDT).map(ImmDt::parse).transpose()?,
            ieth: at(ExtHeaders::IETH).map(Ieth::parse).transpose()?,
        })
    }

    /// Reads the headers of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            bth: bth::Repr::parse(&p.bth()),
            rdeth: p.rdeth(),
            deth: p.deth(),
            xrceth: p.xrceth(),
            reth: p.reth(),
            atomic_eth: p.atomic_eth(),
            aeth: p.aeth(),
            atomic_ack_eth: p.atomic_ack_eth(),
            immdt: p.immdt(),
            ieth: p.ieth(),
        }
    }

    /// The extension headers this Repr holds.
    pub fn present(&self) -> ExtHeaders {
        let mut e = ExtHeaders::NONE;
        for (has, h) in [
            (self.rdeth.is_some(), ExtHeaders::RDETH),
            (self.deth.is_some(), ExtHeaders::DETH),
            (self.xrceth.is_some(), ExtHeaders::XRCETH),
            (self.reth.is_some(), ExtHeaders::RETH),
            (self.atomic_eth.is_some(), ExtHeaders::ATOMIC_ETH),
            (self.aeth.is_some(), ExtHeaders::AETH),
            (self.atomic_ack_eth.is_some(), ExtHeaders::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), ExtHeaders::IMMDT),
            (self.ieth.is_some(), ExtHeaders::IETH),
        ] {
            if has {
                e = e | h;
            }
        }
        e
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        header_len(self.bth.opcode)
    }

    /// Bytes [`Repr::emit`] writes for a payload of `payload_len` bytes: headers, payload, pad
    /// and ICRC.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + usize::from(pad_for(payload_len)) + ICRC_LEN
    }

    /// Writes headers, `payload`, zero pad (the BTH pad count is set from the payload length)
    /// and a zero ICRC field into `buf`, and returns the length written. Fill in the ICRC with
    /// [`crate::icrc::seal`] once the IP and UDP headers are known.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let len = self.emit_around(payload.len(), buf)?;
        let hdr = self.header_len();
        buf[hdr..hdr + payload.len()].copy_from_slice(payload);
        Ok(len)
    }

    /// [`Repr::emit`] for a payload of `payload_len` bytes already in place at
    /// `buf[header_len()..]` (gathered there by the caller, saving a copy): writes the
    /// headers, pad and zero ICRC field around it.
    pub fn emit_around(&self, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let op = self.bth.opcode;
        let required = op.ext_headers();
        let present = self.present();
        if required != present {
            return Err(Error::HeaderMismatch { opcode: op.0, required, present });
        }
        if !op.has_payload() && payload_len != 0 {
            return Err(Error::UnexpectedPayload(op.0));
        }
        let len = self.buffer_len(payload_len);
        if buf.len() < len {
            return Err(Error::Truncated { needed: len, available: buf.len() });
        }
        let pad = pad_for(payload_len);
        bth::Repr { pad_count: pad, ..self.bth }.emit(buf)?;
        let at = |h: ExtHeaders| bth::HEADER_LEN + required.offset_of(h).unwrap_or(0);
        if let Some(x) = self.rdeth {
            x.emit(&mut buf[at(ExtHeaders::RDETH)..])?;
        }
        if let Some(x) = self.deth {
            x.emit(&mut buf[at(ExtHeaders::DETH)..])?;
        }
        if let Some(x) = self.xrceth {
            x.emit(&mut buf[at(ExtHeaders::XRCETH)..])?;
        }
        if let Some(x) = self.reth {
            x.emit(&mut buf[at(ExtHeaders::RETH)..])?;
        }
        if let Some(x) = self.atomic_eth {
            x.emit(&mut buf[at(ExtHeaders::ATOMIC_ETH)..])?;
        }
        if let Some(x) = self.aeth {
            x.emit(&mut buf[at(ExtHeaders::AETH)..])?;
        }
        if let Some(x) = self.atomic_ack_eth {
            x.emit(&mut buf[at(ExtHeaders::ATOMIC_ACK_ETH)..])?;
        }
        if let Some(x) = self.immdt {
            x.emit(&mut buf[at(ExtHeaders::IMMDT)..])?;
        }
        if let Some(x) = self.ieth {
            x.emit(&mut buf[at(ExtHeaders::IETH)..])?;
        }
        let hdr = self.header_len();
        buf[hdr + payload_len..len].fill(0);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Psn;

    fn write_first() -> Repr {
        let mut r = Repr::new(bth::Repr::new(Opcode(0x06), Qpn::new(0x12), Psn::new(7)));
        r.reth = Some(Reth { va: 0x1000, rkey: RKey(0xabcd), dma_len: 8192 });
        r
    }

    #[test]
    fn emit_then_view() {
        let r = write_first();
        let payload = [0x5au8; 4093];
        let mut buf = vec![0u8; r.buffer_len(payload.len())];
        assert_eq!(buf.len(), 12 + 16 + 4093 + 3 + 4);
        assert_eq!(r.emit(&payload, &mut buf).unwrap(), buf.len());
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.bth().pad_count(), 3);
        assert_eq!(p.payload(), &payload[..]);
        assert_eq!(p.reth(), r.reth);
        assert_eq!(p.aeth(), None);
        let back = Repr::parse(&p);
        assert_eq!(back, Repr { bth: bth::Repr { pad_count: 3, ..r.bth }, ..r });
        assert_eq!(Repr::parse_headers(&buf[..28]).unwrap(), back);
        assert!(Repr::parse_headers(&buf[..27]).is_err());
    }

    #[test]
    fn a_packets_length_from_its_headers() {
        let packet = |op: u8, reth: Option<u32>, payload: usize| {
            let mut r = Repr::new(bth::Repr::new(Opcode(op), Qpn::new(0x12), Psn::new(7)));
            r.reth = reth.map(|dma_len| Reth { va: 0x1000, rkey: RKey(1), dma_len });
            if r.bth.opcode.ext_headers().contains(ExtHeaders::AETH) {
                r.aeth = Some(Aeth { syndrome: 0, msn: 1 });
            }
            if r.bth.opcode.ext_headers().contains(ExtHeaders::IMMDT) {
                r.immdt = Some(ImmDt { value: 9 });
            }
            let mut buf = vec![0u8; r.buffer_len(payload)];
            r.emit(&vec![0u8; payload], &mut buf).unwrap();
            buf
        };
        // RC WRITE FIRST and SEND MIDDLE: the path MTU, whatever the datagram holds after.
        let mut run = packet(0x06, Some(8192), 1024);
        run.extend(packet(0x07, None, 1024));
        assert_eq!(len_from_headers(&run, 1024), Some(12 + 16 + 1024 + 4));
        assert_eq!(len_from_headers(&packet(0x01, None, 256), 256), Some(12 + 256 + 4));
        // WRITE ONLY (and with immediate): the RETH's length, padded.
        assert_eq!(len_from_headers(&packet(0x0a, Some(2), 2), 4096), Some(12 + 16 + 2 + 2 + 4));
        assert_eq!(
            len_from_headers(&packet(0x0b, Some(5), 5), 4096),
            Some(12 + 16 + 4 + 5 + 3 + 4)
        );
        // READ request and ACK: headers and ICRC.
        assert_eq!(len_from_headers(&packet(0x0c, Some(1 << 20), 0), 4096), Some(12 + 16 + 4));
        assert_eq!(len_from_headers(&packet(0x11, None, 0), 4096), Some(12 + 4 + 4));
        // SEND ONLY, WRITE LAST, a READ response's last: only the datagram knows.
        for op in [0x04, 0x08, 0x0f] {
            assert_eq!(len_from_headers(&packet(op, None, 8), 4096), None, "{op:#x}");
        }
        // A WRITE ONLY cut before its RETH tells nothing.
        assert_eq!(len_from_headers(&packet(0x0a, Some(2), 2)[..20], 4096), None);
    }

    #[test]
    fn mismatched_reprs_are_refused() {
        let mut r = write_first();
        r.reth = None;
        let mut buf = [0u8; 64];
        assert!(matches!(r.emit(&[], &mut buf), Err(Error::HeaderMismatch { .. })));
        let mut r = write_first();
        r.immdt = Some(ImmDt { value: 1 });
        assert!(matches!(r.emit(&[], &mut buf), Err(Error::HeaderMismatch { .. })));
        let mut r = Repr::new(bth::Repr::new(Opcode(0x11), Qpn::new(1), Psn::new(1)));
        r.aeth = Some(Aeth { syndrome: 0x1f, msn: 1 });
        assert_eq!(r.emit(&[1], &mut buf), Err(Error::UnexpectedPayload(0x11)));
        assert!(write_first().emit(&[0; 64], &mut buf).is_err());
    }

    // Found by the frame_parse fuzz target: an XRC ATOMIC_ACKNOWLEDGE with four bytes after
    // its headers. Parsing is lenient (a decoder must show what is there); emit refuses to
    // build such a packet.
    #[test]
    fn trailing_bytes_on_an_opcode_without_payload() {
        let mut b = [0u8; 12 + 4 + 8 + 4 + 4];
        b[0] = 0xb2;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        let r = Repr::parse(&p);
        let mut out = [0u8; 64];
        assert_eq!(r.emit(p.payload(), &mut out), Err(Error::UnexpectedPayload(0xb2)));
        assert_eq!(r.emit(&[], &mut out), Ok(12 + 4 + 8 + 4));
    }

    #[test]
    fn views_refuse_short_and_bad_pad() {
        // RC SEND_ONLY, pad count 3, but only 2 bytes between BTH and ICRC.
        let mut b = [0u8; 18];
        b[0] = 0x04;
        b[1] = 0x30;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadPadCount { pad: 3, available: 2 }
        );
        // RDMA WRITE FIRST needs 12 + 16 + 4 bytes.
        let mut b = [0u8; 31];
        b[0] = 0x06;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated { needed: 32, available: 31 }
        );
        // An unknown opcode: no extension headers, the rest is payload.
        let mut b = [0u8; 20];
        b[0] = 0x1f;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.reth(), None);
    }
}
