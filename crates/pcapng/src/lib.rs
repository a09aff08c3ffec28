//! pcapng files as `podnet capture record` and the soft device's own capture point write them:
//! Ethernet frames of one interface, nanosecond timestamps, each frame's direction, to one file
//! or a ring of files of about a size each, the oldest overwritten.

#![forbid(unsafe_code)]

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
