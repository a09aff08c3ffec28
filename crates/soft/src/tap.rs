//! The soft device's own capture point (`SoftOptions::capture`, `PODNET_CAPTURE=FILE`):
//! every datagram the device sends, as the wire carries it (a segmentation-offload run as its
//! packets), and every one it receives, to a pcapng file — both directions, from inside the
//! device, where no `AF_PACKET` socket is needed and none could tell the device's own
//! datagrams apart. Frames are written with the headers the kernel puts on them (addresses,
//! ports, lengths, TOS, the IPv4 Identification the ICRC covers) under an Ethernet header of
//! zeros, as loopback's.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use pcapng::RingWriter;
use wire::icrc::PseudoHeader;

/// A pcapng file being written by a device.
pub(crate) struct Tap {
    w: Mutex<Option<RingWriter>>,
    /// Frames not written (the file failed): counted, never blocking the device.
    pub(crate) lost: AtomicU64,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap").field("lost", &self.lost).finish_non_exhaustive()
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Tap {
    /// Starts writing `path` for the device `name`.
    pub(crate) fn create(path: &Path, name: &str) -> std::io::Result<Tap> {
        let w = RingWriter::create(path, None, u64::MAX, name, 65_535)?;
        Ok(Tap { w: Mutex::new(Some(w)), lost: AtomicU64::new(0) })
    }

    /// Records one datagram under `h` (lengths derived here), `outgoing` or not.
    pub(crate) fn record(&self, h: PseudoHeader, roce: &[u8], outgoing: bool) {
        let h = h.for_payload(roce.len());
        let ip = h.ip_header();
        let mut f = Vec::with_capacity(14 + ip.len() + 8 + roce.len());
        f.extend_from_slice(&[0; 12]);
        f.extend_from_slice(if h.is_ipv4() { &[0x08, 0x00] } else { &[0x86, 0xdd] });
        let at = f.len();
        f.extend_from_slice(ip);
        if h.is_ipv4() {
            // The kernel's header checksum (the ICRC masks it; a reader checks it).
            wire::frame::set_ipv4_checksum(&mut f[at..at + ip.len()]);
        }
        f.extend_from_slice(h.udp_header());
        f.extend_from_slice(roce);
        let mut w = self.w.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Flushed each time: a tool that exits without unwinding loses nothing recorded.
        let ok = w.as_mut().is_some_and(|w| {
            w.write(now_ns(), &f, f.len(), Some(outgoing)).is_ok() && w.flush().is_ok()
        });
        if !ok {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A received datagram: its real IP header when the device read one, else one made
    /// from what the socket told (addresses, ports, ECN).
    pub(crate) fn received(&self, meta: &transport::RecvMeta<'_>, roce: &[u8]) {
        let h = match meta.ip_header {
            Some(ip) => PseudoHeader::with_ip_header(ip, meta.src_port, meta.dst_port).ok(),
            None => PseudoHeader::between(meta.src, meta.dst, meta.src_port, meta.dst_port)
                .map(|h| h.with_tos(meta.ecn)),
        };
        match h {
            Some(h) => self.record(h, roce, false),
            None => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A sent datagram from `src`:`src_port` to `dst`:`dst_port`, Identification `id`.
    pub(crate) fn sent(
        &self,
        (src, src_port): (IpAddr, u16),
        (dst, dst_port): (IpAddr, u16),
        tos: u8,
        id: u16,
        roce: &[u8],
    ) {
        match PseudoHeader::between(src, dst, src_port, dst_port) {
            Some(mut h) => {
                h.set_ipv4_id(id);
                self.record(h.with_tos(tos), roce, true);
            }
            None => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
