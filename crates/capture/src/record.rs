//! One decoded frame.

use wire::frame::{self, Frame, LinkType, NotRoce};
use wire::{bth, roce};

/// Why a RoCEv2 frame could not be decoded whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// The frame ends before its BTH or the extension headers its opcode calls for (or, for a
    /// complete frame, before its ICRC).
    Truncated,
    /// The BTH pad count is larger than the bytes between the headers and the ICRC.
    BadPadCount,
}

impl RecordError {
    /// The stable name used in `--json` output.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordError::Truncated => "truncated",
            RecordError::BadPadCount => "bad_pad_count",
        }
    }
}

/// A RoCEv2 frame, decoded as far as its bytes allow.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// 1-based index of the frame in the capture.
    pub frame: u64,
    /// The L2–L4 edge and the RoCEv2 bytes.
    pub edge: Frame<'a>,
    /// The BTH, if the capture holds it.
    pub bth: Option<bth::Repr>,
    /// All headers, if the capture holds every extension header the opcode calls for.
    pub headers: Option<roce::Repr>,
    /// Payload length without pad, from the UDP length (known even when the capture cut the
    /// payload), if the headers were read.
    pub payload_len: Option<usize>,
    /// The ICRC trailer in wire order, if captured.
    pub icrc: Option<[u8; 4]>,
    /// ICRC verdict; `None` when the capture cut the trailer.
    pub icrc_ok: Option<bool>,
    /// Set when the frame could not be decoded whole.
    pub error: Option<RecordError>,
    /// When the frame is a run of packets sent with UDP segmentation offload and captured
    /// before segmentation (as on loopback): this packet's place in it, `(index, count)`.
    pub gso_segment: Option<(u32, u32)>,
    /// When it was captured, nanoseconds since the Unix epoch ([`crate::RawFrame::ts_ns`]);
    /// [`decode`] leaves it to the caller, who has the frame's.
    pub ts_ns: Option<u64>,
    /// The switch mirror's encapsulation the frame came in (ERSPAN), if any.
    pub encap: Option<crate::erspan::Encap>,
}

/// What [`decode`] found in one frame.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "one lives on the stack per frame; boxing would allocate per frame on the decode hot path"
)]
pub enum Decoded<'a> {
    /// A RoCEv2 frame.
    Roce(Record<'a>),
    /// A run of RoCEv2 packets in one captured datagram: a UDP GSO send captured before
    /// the kernel cut it (on loopback, or a NIC that segments UDP itself), one record per
    /// packet.
    Gso(Vec<Record<'a>>),
    /// Not RoCEv2, and why.
    NotRoce(NotRoce),
    /// A mirror's encapsulation podnet does not read, named (GRE with another payload, an
    /// ERSPAN header cut short).
    Unsupported(&'static str),
}

impl<'a> Decoded<'a> {
    /// Its records: one for a RoCEv2 frame, one per packet of a GSO run, none otherwise.
    pub fn records(&self) -> &[Record<'a>] {
        match self {
            Decoded::Roce(r) => std::slice::from_ref(r),
            Decoded::Gso(run) => run,
            Decoded::NotRoce(_) | Decoded::Unsupported(_) => &[],
        }
    }

    /// Its records, to change.
    fn records_mut(&mut self) -> &mut [Record<'a>] {
        match self {
            Decoded::Roce(r) => std::slice::from_mut(r),
            Decoded::Gso(run) => run,
            Decoded::NotRoce(_) | Decoded::Unsupported(_) => &mut [],
        }
    }

    /// Sets the capture time of its records (a GSO run's packets share their datagram's).
    pub fn set_ts_ns(&mut self, ts_ns: Option<u64>) {
        self.records_mut().iter_mut().for_each(|r| r.ts_ns = ts_ns);
    }
}

/// Decodes frame number `index` (1-based) of link type `link`; a frame is RoCEv2 when it is
/// UDP to `port`. A switch mirror's ERSPAN packet is decoded as the frame it carries.
pub fn decode(index: u64, link: LinkType, data: &[u8], port: u16) -> Decoded<'_> {
    match crate::erspan::inner(link, data) {
        None => decode_frame(index, link, data, port),
        Some(Err(what)) => Decoded::Unsupported(what),
        Some(Ok((frame, encap))) => {
            let mut d = decode_frame(index, LinkType::Ethernet, frame, port);
            d.records_mut().iter_mut().for_each(|r| r.encap = Some(encap));
            d
        }
    }
}

fn decode_frame(index: u64, link: LinkType, data: &[u8], port: u16) -> Decoded<'_> {
    let edge = match frame::parse(link, data, port) {
        Ok(f) => f,
        Err(why) => return Decoded::NotRoce(why),
    };
    let complete = edge.is_complete();
    let captured = edge.roce;
    let wire_len = edge.roce_len;
    let bth = bth::Packet::new_checked(captured).ok().map(|p| bth::Repr::parse(&p));
    let headers = roce::Repr::parse_headers(captured).ok();
    let mut error = None;
    let mut payload_len = None;
    let icrc_field = if wire_len >= roce::ICRC_LEN && complete {
        let t = &captured[wire_len - roce::ICRC_LEN..wire_len];
        Some([t[0], t[1], t[2], t[3]])
    } else {
        None
    };
    match &headers {
        Some(h) => {
            let fixed = h.header_len() + roce::ICRC_LEN;
            match wire_len.checked_sub(fixed) {
                None => error = Some(RecordError::Truncated),
                Some(rest) if usize::from(h.bth.pad_count) > rest => {
                    error = Some(RecordError::BadPadCount)
                }
                Some(rest) => payload_len = Some(rest - usize::from(h.bth.pad_count)),
            }
        }
        None => error = Some(RecordError::Truncated),
    }
    // The ICRC covers every byte before it, so it can be checked whenever the capture holds the
    // whole UDP payload and there is a BTH for it to cover.
    let icrc_ok = if complete && wire_len >= bth::HEADER_LEN + roce::ICRC_LEN {
        wire::icrc::verify(edge.ip.header, edge.udp.header, &captured[..wire_len]).ok()
    } else {
        None
    };
    if icrc_ok == Some(false)
        && let Some(run) = split_gso(index, &edge)
    {
        return Decoded::Gso(run);
    }
    Decoded::Roce(Record {
        frame: index,
        edge,
        bth,
        headers,
        payload_len,
        icrc: icrc_field,
        icrc_ok,
        error,
        gso_segment: None,
        ts_ns: None,
        encap: None,
    })
}

/// The largest RoCEv2 packet: BTH and the longest extension headers, a 4096-byte payload,
/// pad and ICRC.
const MAX_PACKET: usize = 4096 + 64;

/// Cuts a datagram whose ICRC failed into the packets of a GSO run, if it is one: equal
/// segments (the last may be shorter), each starting with a BTH to the same QP and each with
/// a good ICRC over its own IP and UDP headers (the lengths are the segment's, on IPv4 the
/// Identification the datagram's plus the segment's index, as Linux's GSO numbers them; the
/// rest the datagram's). RoCEv2 packets are multiples of 4 bytes, so only those sizes are
/// tried.
fn split_gso<'a>(index: u64, edge: &Frame<'a>) -> Option<Vec<Record<'a>>> {
    let data = &edge.roce[..edge.roce_len];
    let total = data.len();
    let first = bth::Packet::new_checked(data).ok().map(|p| bth::Repr::parse(&p))?;
    let same_qp = |at: usize| {
        bth::Packet::new_checked(&data[at..]).ok().map(|p| bth::Repr::parse(&p)).is_some_and(|b| {
            b.dest_qp == first.dest_qp && b.tver == first.tver && b.pkey == first.pkey
        })
    };
    let min = bth::HEADER_LEN + roce::ICRC_LEN;
    let mut seg = min;
    while seg < total && seg <= MAX_PACKET {
        let cut = |k: usize| (k * seg, ((k + 1) * seg).min(total));
        let count = total.div_ceil(seg);
        let last = total - (count - 1) * seg;
        let plausible =
            last >= min && last.is_multiple_of(4) && (1..count).all(|k| same_qp(k * seg));
        if plausible && (0..count).all(|k| segment_icrc_ok(edge, k, &data[cut(k).0..cut(k).1])) {
            let records = (0..count)
                .map(|k| {
                    let bytes = &data[cut(k).0..cut(k).1];
                    let mut e = edge.clone();
                    e.roce = bytes;
                    e.roce_len = bytes.len();
                    let headers = roce::Repr::parse_headers(bytes).ok();
                    let payload_len = headers.as_ref().and_then(|h| {
                        bytes.len().checked_sub(
                            h.header_len() + roce::ICRC_LEN + usize::from(h.bth.pad_count),
                        )
                    });
                    let t = &bytes[bytes.len() - roce::ICRC_LEN..];
                    Record {
                        frame: index,
                        bth: bth::Packet::new_checked(bytes).ok().map(|p| bth::Repr::parse(&p)),
                        headers,
                        payload_len,
                        icrc: Some([t[0], t[1], t[2], t[3]]),
                        icrc_ok: Some(true),
                        error: payload_len.is_none().then_some(RecordError::BadPadCount),
                        gso_segment: Some((k as u32, count as u32)),
                        ts_ns: None,
                        encap: None,
                        edge: e,
                    }
                })
                .collect();
            return Some(records);
        }
        seg += 4;
    }
    None
}

/// Checks the ICRC of segment `k` with the IP and UDP lengths (and IPv4 Identification) it
/// had on the wire.
fn segment_icrc_ok(edge: &Frame<'_>, k: usize, bytes: &[u8]) -> bool {
    let h = edge.ip.header;
    wire::icrc::PseudoHeader::captured(h, edge.udp.header)
        .and_then(|mut p| {
            if p.is_ipv4() {
                p.set_ipv4_id(u16::from_be_bytes([h[4], h[5]]).wrapping_add(k as u16));
            }
            p.for_each_segment().verify(bytes)
        })
        .unwrap_or(false)
}

/// Counts over a whole capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frames read.
    pub frames: u64,
    /// RoCEv2 frames.
    pub roce: u64,
    /// RoCEv2 frames whose ICRC verified.
    pub icrc_ok: u64,
    /// RoCEv2 frames whose ICRC did not verify.
    pub icrc_bad: u64,
    /// RoCEv2 frames whose ICRC could not be checked (the capture cut them).
    pub icrc_unchecked: u64,
    /// RoCEv2 frames that could not be decoded whole.
    pub errors: u64,
    /// Frames that are not RoCEv2.
    pub not_roce: u64,
    /// Of those, frames cut before their UDP ports could be read.
    pub not_roce_truncated: u64,
    /// Frames of a link type podnet does not read.
    pub unsupported_link: u64,
    /// Captured datagrams that were GSO runs (each of their packets counts as a RoCEv2 frame
    /// above).
    pub gso_runs: u64,
    /// Frames that came in a switch mirror's ERSPAN (counted above as what they carry).
    pub erspan: u64,
    /// Frames in an encapsulation podnet does not read, by its name (counted as not RoCEv2).
    pub unsupported_encap: std::collections::BTreeMap<&'static str, u64>,
}

impl Summary {
    /// Counts one decoded frame.
    pub fn count(&mut self, d: &Decoded<'_>) {
        self.frames += 1;
        let first = match d {
            Decoded::Roce(r) => Some(r),
            Decoded::Gso(run) => run.first(),
            _ => None,
        };
        if first.is_some_and(|r| r.encap.is_some()) {
            self.erspan += 1;
        }
        match d {
            Decoded::Unsupported(what) => {
                self.not_roce += 1;
                *self.unsupported_encap.entry(what).or_default() += 1;
            }
            Decoded::Roce(r) => {
                self.roce += 1;
                match r.icrc_ok {
                    Some(true) => self.icrc_ok += 1,
                    Some(false) => self.icrc_bad += 1,
                    None => self.icrc_unchecked += 1,
                }
                if r.error.is_some() {
                    self.errors += 1;
                }
            }
            Decoded::Gso(run) => {
                self.gso_runs += 1;
                // Each packet of the run counts as a RoCEv2 frame; the captured frame once.
                self.roce += run.len() as u64;
                self.icrc_ok += run.iter().filter(|r| r.icrc_ok == Some(true)).count() as u64;
                self.errors += run.iter().filter(|r| r.error.is_some()).count() as u64;
            }
            Decoded::NotRoce(why) => {
                self.not_roce += 1;
                if *why == NotRoce::Truncated {
                    self.not_roce_truncated += 1;
                }
            }
        }
    }

    /// Counts a frame of a link type podnet does not read (it is not RoCEv2 to podnet).
    pub fn count_unsupported(&mut self) {
        self.frames += 1;
        self.not_roce += 1;
        self.unsupported_link += 1;
    }
}
