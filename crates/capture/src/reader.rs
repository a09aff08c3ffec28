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
}

enum Inner<R: Read> {
    Pcap(PcapReader<R>, Result<LinkType, u32>),
    PcapNg(PcapNgReader<R>, Vec<Result<LinkType, u32>>),
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
                        Some(Ok(RawFrame { link, data, orig_len: p.orig_len }))
                    }
                    Err(e) => Some(Err(classify(frames, e, &self.ended))),
                }
            }
            Inner::PcapNg(r, links) => {
                let (link, orig_len) = loop {
                    let block = match r.next_block()? {
                        Ok(b) => b,
                        Err(e) => return Some(Err(classify(frames, e, &self.ended))),
                    };
                    let (iface, data, orig_len) = match block {
                        Block::SectionHeader(_) => {
                            links.clear();
                            continue;
                        }
                        Block::InterfaceDescription(idb) => {
                            links.push(link_of(u32::from(idb.linktype)));
                            continue;
                        }
                        Block::EnhancedPacket(epb) => {
                            (epb.interface_id, epb.data, epb.original_len)
                        }
                        Block::SimplePacket(spb) => (0, spb.data, spb.original_len),
                        Block::Packet(pb) => (u32::from(pb.interface_id), pb.data, pb.original_len),
                        _ => continue,
                    };
                    let Some(link) = links.get(iface as usize).copied() else {
                        return Some(Err(Error::Malformed {
                            frames,
                            detail: format!(
                                "packet on interface {iface}, which no interface block describes"
                            ),
                        }));
                    };
                    buf.clear();
                    buf.extend_from_slice(&data);
                    break (link, orig_len);
                };
                self.frames += 1;
                Some(Ok(RawFrame { link, data: buf, orig_len }))
            }
        }
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
