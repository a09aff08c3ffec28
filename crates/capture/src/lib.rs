//! RoCEv2 packet-capture analysis.
//!
//! [`decode`] turns one captured frame into a [`Record`] (sans-IO: bytes in, a value out);
//! [`Record::write_json`] and [`Record::write_line`] render it for machines and people;
//! [`CaptureReader`] streams frames out of pcap and pcapng files of the link types tcpdump
//! writes. [`analyze::Analyzer`] looks across frames: connections, losses, resends, NAKs,
//! congestion, latencies, and the findings they add up to.

pub mod analyze;
pub mod erspan;
pub mod html;
mod json;
pub mod live;
mod reader;
mod record;
pub mod write;

pub use reader::{CaptureReader, Error as ReadError, RawFrame};
pub use record::{Decoded, Record, RecordError, Summary, decode};
