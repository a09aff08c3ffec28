//! Writing what `podnet capture record` reads: pcapng files through [`pcapng::RingWriter`]
//! (one file or a ring, nanosecond timestamps, each frame's direction), and GSO runs cut back
//! into the packets the wire would carry when asked.

pub use pcapng::RingWriter;
use wire::frame::LinkType;

use crate::Decoded;

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
