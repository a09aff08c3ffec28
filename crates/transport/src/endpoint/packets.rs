//! Building the packets a QP sends, into datagram buffers reused from the driver.

use std::net::IpAddr;

use wire::{Opcode, Operation, Qpn, Transport, roce};

use verbs::QpType;

use super::*;

/// Datagram buffers back from the driver, reused so that a busy device does not allocate
/// (and page-fault) one per packet.
#[derive(Debug, Default)]
pub(super) struct BufPool(pub(super) Vec<Vec<u8>>);

impl BufPool {
    /// Buffers kept at most (a few MiB of 4 KiB packets).
    pub(super) const KEEP: usize = 1024;

    pub(super) fn take(&mut self, len: usize) -> Vec<u8> {
        match self.0.pop() {
            Some(mut b) => {
                b.clear();
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }
}

pub(super) fn packet(
    pool: &mut BufPool,
    qp: &QueuePair,
    dst: IpAddr,
    repr: &roce::Repr,
    payload: &[u8],
) -> Option<Transmit> {
    let mut buf = pool.take(repr.buffer_len(payload.len()));
    repr.emit(payload, &mut buf).ok()?;
    Some(transmit(qp, dst, buf))
}

/// A packet whose payload (`len` bytes) `fill` writes straight into the datagram buffer;
/// `None` when `fill` fails.
pub(super) fn packet_with(
    pool: &mut BufPool,
    qp: &QueuePair,
    dst: IpAddr,
    repr: &roce::Repr,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> bool,
) -> Option<Transmit> {
    let mut buf = pool.take(repr.buffer_len(len));
    let hdr = repr.header_len();
    if !fill(&mut buf[hdr..hdr + len]) {
        return None;
    }
    repr.emit_around(len, &mut buf).ok()?;
    Some(transmit(qp, dst, buf))
}

pub(super) fn transmit(qp: &QueuePair, dst: IpAddr, buf: Vec<u8>) -> Transmit {
    let (rqpn, fl) = qp.attr.dest.map_or((Qpn::new(0), 0), |d| (d.qpn, d.flow_label));
    Transmit {
        dst,
        dst_port: wire::ROCEV2_UDP_PORT,
        src_port: wire::udp_source_port(fl, qp.qpn, rqpn),
        tos: qp.attr.traffic_class,
        payload: buf,
    }
}

/// The BTH transport of a QP type.
pub(super) fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// The RC opcodes a responder answers with.
pub(super) const RC_ACKNOWLEDGE: Opcode = Opcode::new(Transport::Rc, Operation::Acknowledge);
pub(super) const RC_ATOMIC_ACKNOWLEDGE: Opcode =
    Opcode::new(Transport::Rc, Operation::AtomicAcknowledge);

pub(super) const ACK_SYNDROME: u8 = 0x1f;
