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
    /// Not RoCEv2, and why.
    NotRoce(NotRoce),
}

/// Decodes frame number `index` (1-based) of link type `link`; a frame is RoCEv2 when it is
/// UDP to `port`.
pub fn decode(index: u64, link: LinkType, data: &[u8], port: u16) -> Decoded<'_> {
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
    Decoded::Roce(Record {
        frame: index,
        edge,
        bth,
        headers,
        payload_len,
        icrc: icrc_field,
        icrc_ok,
        error,
    })
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
}

impl Summary {
    /// Counts one decoded frame.
    pub fn count(&mut self, d: &Decoded<'_>) {
        self.frames += 1;
        match d {
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
