//! Writing what `podnet capture record` reads: pcapng files (nanosecond timestamps, each
//! frame's direction), one file or a ring of them, and GSO runs cut back into the packets the
//! wire would carry when asked.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use wire::frame::LinkType;

use crate::Decoded;

fn other(e: pcap_file::PcapError) -> io::Error {
    io::Error::other(e.to_string())
}

/// pcapng files of one interface: a single file, or a ring of `ring` files of about
/// `file_bytes` each, the oldest overwritten.
pub struct RingWriter {
    base: PathBuf,
    ring: Option<u32>,
    file_bytes: u64,
    index: u32,
    used: u32,
    in_file: u64,
    netdev: String,
    snaplen: u32,
    w: PcapNgWriter<BufWriter<File>>,
}

impl std::fmt::Debug for RingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingWriter").field("base", &self.base).field("index", &self.index).finish()
    }
}

impl RingWriter {
    /// Starts writing frames of Ethernet interface `netdev` to `base` (with a ring: to
    /// `NAME.0.EXT`, `NAME.1.EXT`, …).
    pub fn create(
        base: &Path,
        ring: Option<u32>,
        file_bytes: u64,
        netdev: &str,
        snaplen: u32,
    ) -> io::Result<RingWriter> {
        let ring = ring.filter(|&n| n > 0);
        let path = Self::path_of(base, ring.map(|_| 0));
        let w = Self::open(&path, netdev, snaplen)?;
        Ok(RingWriter {
            base: base.to_path_buf(),
            ring,
            file_bytes,
            index: 0,
            used: 1,
            in_file: 0,
            netdev: netdev.into(),
            snaplen,
            w,
        })
    }

    /// The file `index` of a ring at `base` (the base itself without a ring).
    pub fn path_of(base: &Path, index: Option<u32>) -> PathBuf {
        let Some(i) = index else { return base.to_path_buf() };
        let stem = base.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let name = match base.extension() {
            Some(ext) => format!("{stem}.{i}.{}", ext.to_string_lossy()),
            None => format!("{stem}.{i}"),
        };
        base.with_file_name(name)
    }

    fn open(path: &Path, netdev: &str, snaplen: u32) -> io::Result<PcapNgWriter<BufWriter<File>>> {
        let f = File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        })?;
        let mut w = PcapNgWriter::new(BufWriter::with_capacity(1 << 20, f)).map_err(other)?;
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(netdev.to_string())),
                // Timestamps in nanoseconds (pcap-file writes a Duration's nanoseconds).
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        w.write_pcapng_block(idb).map_err(other)?;
        Ok(w)
    }

    /// Writes one frame captured at `ts_ns` (`data`, `orig_len` on the wire); `outgoing`
    /// marks its direction (pcapng's `epb_flags`) when known.
    pub fn write(
        &mut self,
        ts_ns: u64,
        data: &[u8],
        orig_len: usize,
        outgoing: Option<bool>,
    ) -> io::Result<()> {
        if let Some(n) = self.ring
            && self.in_file >= self.file_bytes
        {
            self.w.get_mut().flush()?;
            self.index = (self.index + 1) % n;
            self.used = self.used.max(self.index + 1);
            self.w = Self::open(
                &Self::path_of(&self.base, Some(self.index)),
                &self.netdev,
                self.snaplen,
            )?;
            self.in_file = 0;
        }
        let options = match outgoing {
            // Bits 0-1: 01 inbound, 10 outbound.
            Some(out) => vec![EnhancedPacketOption::Flags(if out { 2 } else { 1 })],
            None => Vec::new(),
        };
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(ts_ns),
            original_len: orig_len as u32,
            data: Cow::Borrowed(data),
            options,
        };
        self.in_file += self.w.write_pcapng_block(epb).map_err(other)? as u64;
        Ok(())
    }

    /// Pushes what is buffered to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.get_mut().flush()
    }

    /// Flushes the last file; the files written, oldest first.
    pub fn finish(mut self) -> io::Result<Vec<PathBuf>> {
        self.w.get_mut().flush()?;
        Ok(match self.ring {
            None => vec![self.base.clone()],
            Some(n) => {
                let order: Vec<u32> = if self.used < n {
                    (0..self.used).collect()
                } else {
                    (1..=n).map(|k| (self.index + k) % n).collect()
                };
                order.into_iter().map(|i| Self::path_of(&self.base, Some(i))).collect()
            }
        })
    }
}

/// Cuts an Ethernet frame that holds a GSO run (packets sent with UDP segmentation offload,
/// captured before the kernel cut them) into the frames the wire carries: each its own IP
/// and UDP lengths, IPv4 Identification the run's plus its place (as Linux numbers them),
/// IPv4 header checksum, and a zero UDP checksum (as RoCEv2 senders may). `None` when the
/// frame is not such a run.
pub fn split_gso(data: &[u8], port: u16) -> Option<Vec<Vec<u8>>> {
    let Decoded::Gso(run) = crate::decode(0, LinkType::Ethernet, data, port) else { return None };
    let first = run.first()?;
    let ip_at = first.edge.ip.header.as_ptr() as usize - data.as_ptr() as usize;
    let ip_len = first.edge.ip.header.len();
    let v4 = first.edge.ip.src.is_ipv4();
    let udp_at = ip_at + ip_len;
    let mut out = Vec::with_capacity(run.len());
    for (k, r) in run.iter().enumerate() {
        let seg = &r.edge.roce[..r.edge.roce_len];
        let mut f = Vec::with_capacity(udp_at + 8 + seg.len());
        f.extend_from_slice(&data[..udp_at + 8]);
        f.extend_from_slice(seg);
        let udp_len = (8 + seg.len()) as u16;
        f[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
        f[udp_at + 6..udp_at + 8].copy_from_slice(&[0, 0]);
        if v4 {
            let ip = &mut f[ip_at..ip_at + ip_len];
            ip[2..4].copy_from_slice(&(ip_len as u16 + udp_len).to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(k as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            wire::frame::set_ipv4_checksum(ip);
        } else {
            f[ip_at + 4..ip_at + 6].copy_from_slice(&udp_len.to_be_bytes());
        }
        out.push(f);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of three files of about 1 KB: ten frames of 300 bytes fill it more than once;
    /// the files come back oldest first, each a pcapng with nanosecond times that reads back.
    #[test]
    fn a_ring_overwrites_the_oldest_file_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("r.pcapng");
        let mut w = RingWriter::create(&base, Some(3), 1000, "eth9", 65535).unwrap();
        for i in 0..10u64 {
            let frame = vec![i as u8; 300];
            w.write(1_796_000_000_123_456_789 + i, &frame, 300, Some(i % 2 == 0)).unwrap();
        }
        let files = w.finish().unwrap();
        let names: Vec<String> =
            files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let mut firsts = Vec::new();
        for f in &files {
            let mut r = crate::CaptureReader::new(std::fs::File::open(f).unwrap()).unwrap();
            let raw = r.next_frame().expect("a frame").unwrap();
            firsts.push((raw.data[0], raw.ts_ns.unwrap()));
        }
        // Oldest first; the frames' own times, to the nanosecond.
        assert!(firsts.windows(2).all(|w| w[0].0 < w[1].0), "{firsts:?}");
        for (b, t) in &firsts {
            assert_eq!(*t, 1_796_000_000_123_456_789 + u64::from(*b));
        }
        assert!(!dir.path().join("r.3.pcapng").exists());
    }
}
