//! Streaming frames out of pcap and pcapng files.

use std::borrow::Cow;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use wire::frame::LinkType;

/// Why a capture file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// The file does not start with a pcap or pcapng magic number.
    #[error("not a pcap or pcapng file (magic {0:02x?})")]
    NotPcap(Vec<u8>),
    /// The file ends in the middle of a header or record.
    #[error("truncated after frame {frames}: {detail}")]
    Truncated {
        /// Frames read before the damage.
        frames: u64,
        /// What the parser said.
        detail: String,
    },
    /// A record larger than the reader takes (pcap-file's buffer, 8,000,000 bytes).
    #[error(
        "record {} is larger than 8,000,000 bytes, the most podnet reads (a frame is at most \
         the capture's snap length, 262,144 bytes by default): not a capture podnet can read",
        frames + 1
    )]
    RecordTooLarge {
        /// Frames read before it.
        frames: u64,
    },
    /// The file's structure is damaged.
    #[error("malformed after frame {frames}: {detail}")]
    Malformed {
        /// Frames read before the damage.
        frames: u64,
        /// What the parser said.
        detail: String,
    },
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One captured frame.
#[derive(Debug)]
pub struct RawFrame<'a> {
    /// The link type, or the LINKTYPE number podnet does not read.
    pub link: Result<LinkType, u32>,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// When it was captured, nanoseconds since the Unix epoch (pcap's seconds and micro- or
    /// nanoseconds; pcapng's ticks at its interface's `if_tsresol`); `None` where the block
    /// has no time (pcapng's simple packet block).
    pub ts_ns: Option<u64>,
}

/// Nanoseconds of `ticks` at a pcapng interface's `if_tsresol` (`v`: 10^-v seconds a tick, or
/// 2^-(v & 0x7f) with the top bit set; 6, microseconds, when the interface does not say).
fn ticks_to_ns(ticks: u64, v: u8) -> u64 {
    let ticks = u128::from(ticks);
    let ns = if v & 0x80 != 0 {
        (ticks * 1_000_000_000) >> u32::from(v & 0x7f).min(127)
    } else if v <= 9 {
        ticks * 10u128.pow(9 - u32::from(v))
    } else {
        ticks / 10u128.pow(u32::from(v - 9).min(30))
    };
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// [`ticks_to_ns`], `None` past what 64 bits of nanoseconds hold (year 2554: a writer that
/// put nanoseconds where its resolution says microseconds).
fn ts_of(ticks: u64, v: u8) -> Option<u64> {
    Some(ticks_to_ns(ticks, v)).filter(|ns| *ns != u64::MAX)
}

enum Inner<R: Read> {
    Pcap(PcapReader<R>, Result<LinkType, u32>),
    /// The reader, and each interface's link type and `if_tsresol`.
    PcapNg(PcapNgReader<R>, Vec<(Result<LinkType, u32>, u8)>),
}

/// The file under the parser, noting when a read found its end: pcap-file reports "unexpected
/// end of file" both there and for a record larger than its buffer.
struct Tracked<R> {
    inner: R,
    ended: Arc<AtomicBool>,
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.ended.store(true, Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// Reads pcap or pcapng, whichever the file is.
pub struct CaptureReader<R: Read> {
    inner: Inner<io::Chain<io::Cursor<[u8; 4]>, Tracked<R>>>,
    ended: Arc<AtomicBool>,
    frames: u64,
    // pcapng frames are copied here: a block borrowed from the reader cannot be returned from
    // the loop that skips non-packet blocks.
    buf: Vec<u8>,
}

fn link_of(n: u32) -> Result<LinkType, u32> {
    LinkType::from_linktype(n).ok_or(n)
}

fn classify(frames: u64, e: pcap_file::PcapError, ended: &AtomicBool) -> Error {
    use pcap_file::PcapError as P;
    match e {
        P::IoError(e)
            if e.kind() == io::ErrorKind::UnexpectedEof && !ended.load(Ordering::Relaxed) =>
        {
            Error::RecordTooLarge { frames }
        }
        P::IncompleteBuffer => {
            Error::Truncated { frames, detail: "the last record is cut short".into() }
        }
        P::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Error::Truncated { frames, detail: e.to_string() }
        }
        P::IoError(e) => Error::Io(e),
        other => Error::Malformed { frames, detail: other.to_string() },
    }
}

impl<R: Read> CaptureReader<R> {
    /// Opens a capture, telling pcap from pcapng by the magic number.
    pub fn new(mut reader: R) -> Result<Self, Error> {
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match reader.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got == 0 {
            return Err(Error::Empty);
        }
        if got < 4 {
            return Err(Error::NotPcap(magic[..got].to_vec()));
        }
        let ended = Arc::new(AtomicBool::new(false));
        let chained = io::Cursor::new(magic).chain(Tracked { inner: reader, ended: ended.clone() });
        let inner = match magic {
            [0xa1, 0xb2, 0xc3, 0xd4]
            | [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d]
            | [0x4d, 0x3c, 0xb2, 0xa1] => {
                let r = PcapReader::new(chained).map_err(|e| classify(0, e, &ended))?;
                let link = link_of(u32::from(r.header().datalink));
                Inner::Pcap(r, link)
            }
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                let r = PcapNgReader::new(chained).map_err(|e| classify(0, e, &ended))?;
                Inner::PcapNg(r, Vec::new())
            }
            _ => return Err(Error::NotPcap(magic.to_vec())),
        };
        Ok(CaptureReader { inner, ended, frames: 0, buf: Vec::new() })
    }

    /// Frames returned so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The next frame, `None` at the end of the file.
    pub fn next_frame(&mut self) -> Option<Result<RawFrame<'_>, Error>> {
        let frames = self.frames;
        let buf = &mut self.buf;
        match &mut self.inner {
            Inner::Pcap(r, link) => {
                let link = *link;
                match r.next_packet()? {
                    Ok(p) => {
                        self.frames += 1;
                        let data: &[u8] = match p.data {
                            Cow::Borrowed(b) => b,
                            Cow::Owned(v) => {
                                *buf = v;
                                buf
                            }
                        };
                        let ts_ns = u64::try_from(p.timestamp.as_nanos()).ok();
                        Some(Ok(RawFrame { link, data, orig_len: p.orig_len, ts_ns }))
                    }
                    Err(e) => Some(Err(classify(frames, e, &self.ended))),
                }
            }
            Inner::PcapNg(r, links) => {
                let (link, orig_len, ts_ns) = loop {
                    let block = match r.next_block()? {
                        Ok(b) => b,
                        Err(e) => return Some(Err(classify(frames, e, &self.ended))),
                    };
                    let (iface, data, orig_len, ticks) = match block {
                        Block::SectionHeader(_) => {
                            links.clear();
                            continue;
                        }
                        Block::InterfaceDescription(idb) => {
                            let res = idb
                                .options
                                .iter()
                                .find_map(|o| match o {
                                    pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfTsResol(v) => Some(*v),
                                    _ => None,
                                })
                                .unwrap_or(6);
                            links.push((link_of(u32::from(idb.linktype)), res));
                            continue;
                        }
                        // pcap-file hands the raw 64-bit tick count over as nanoseconds.
                        Block::EnhancedPacket(epb) => (
                            epb.interface_id,
                            epb.data,
                            epb.original_len,
                            u64::try_from(epb.timestamp.as_nanos()).ok(),
                        ),
                        Block::SimplePacket(spb) => (0, spb.data, spb.original_len, None),
                        Block::Packet(pb) => (
                            u32::from(pb.interface_id),
                            pb.data,
                            pb.original_len,
                            Some(pb.timestamp),
                        ),
                        _ => continue,
                    };
                    let Some(&(link, res)) = links.get(iface as usize) else {
                        return Some(Err(Error::Malformed {
                            frames,
                            detail: format!(
                                "packet on interface {iface}, which no interface block describes"
                            ),
                        }));
                    };
                    buf.clear();
                    buf.extend_from_slice(&data);
                    break (link, orig_len, ticks.and_then(|t| ts_of(t, res)));
                };
                self.frames += 1;
                Some(Ok(RawFrame { link, data: buf, orig_len, ts_ns }))
            }
        }
    }
}

#[cfg(test)]
mod ts_tests {
    use super::ticks_to_ns;

    #[test]
    fn pcapng_ticks_read_at_their_resolution() {
        assert_eq!(ticks_to_ns(1_500_000, 6), 1_500_000_000, "microseconds, the default");
        assert_eq!(ticks_to_ns(1_500_000_000, 9), 1_500_000_000, "nanoseconds");
        assert_eq!(ticks_to_ns(15, 1), 1_500_000_000, "tenths");
        assert_eq!(ticks_to_ns(1 << 20, 0x80 | 20), 1_000_000_000, "2^-20 s ticks");
        assert_eq!(ticks_to_ns(1_500_000_000_000, 12), 1_500_000_000, "picoseconds");
        assert_eq!(ticks_to_ns(u64::MAX, 6), u64::MAX, "saturates");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap (microseconds, Ethernet) with one record of `len` bytes, `cut` short.
    fn pcap(len: u32, cut: usize) -> Vec<u8> {
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        f.extend_from_slice(&u32::MAX.to_le_bytes()); // snaplen
        f.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
        f.extend_from_slice(&[0; 8]); // time
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(&len.to_le_bytes());
        f.resize(f.len() + len as usize - cut, 0xab);
        f
    }

    fn first_error(bytes: Vec<u8>) -> Error {
        let mut r = CaptureReader::new(io::Cursor::new(bytes)).unwrap();
        match r.next_frame() {
            Some(Err(e)) => e,
            other => panic!("{:?}", other.map(|f| f.map(|f| f.data.len()))),
        }
    }

    #[test]
    fn a_record_over_the_buffer_is_named_not_called_truncated() {
        let e = first_error(pcap(9_000_000, 0));
        assert!(matches!(e, Error::RecordTooLarge { frames: 0 }), "{e}");
        assert!(e.to_string().starts_with("record 1 is larger than 8,000,000 bytes"), "{e}");
        // A record that really is cut short still is.
        let e = first_error(pcap(1000, 10));
        assert!(matches!(e, Error::Truncated { frames: 0, .. }), "{e}");
        // And one that fits is read.
        let mut r = CaptureReader::new(io::Cursor::new(pcap(1000, 0))).unwrap();
        assert_eq!(r.next_frame().unwrap().unwrap().data.len(), 1000);
    }
}
