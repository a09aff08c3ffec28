//! perftest's TCP side channel, as Debian 12's perftest 4.5-0.17 speaks it (recorded in
//! `testdata/rxe/ib_*.tcp.txt`, described in `docs/rxe-reference.md`).
//!
//! Every step is symmetric — the client writes then reads, the server reads then writes:
//! a 16-byte NUL-padded version string, the page size and the cache-line size as big-endian
//! 32-bit integers, the active MTU as the decimal string of the `ibv_mtu` enum (2 bytes), then
//! one key string per QP ([`Key`]), repeated later as barriers. Bandwidth tests then swap a
//! [`BwReport`] (only the client's carries figures); all but the WRITE latency test end with
//! `done\0` from each side.
//!
//! The message formats are pure functions here; [`Channel`] runs the steps over any
//! `Read + Write`.

use std::io::{Read, Write};

/// The version string perftest 4.5-0.17 sends.
pub const VERSION: &str = "6.06";
/// The length of the version message.
pub const VERSION_LEN: usize = 16;
/// The length of a key string with a GID (RoCE always has one), NUL included.
pub const KEY_LEN_GID: usize = 108;
/// The length of a key string without a GID, NUL included.
pub const KEY_LEN_NO_GID: usize = 59;
/// The length of a bandwidth report: five big-endian 8-byte fields, swapped one at a time.
pub const REPORT_LEN: usize = 40;
/// The closing message of the bandwidth tests.
pub const DONE: &[u8; 5] = b"done\0";

/// Why a side-channel message could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The peer sent something that is not the expected message.
    #[error("the peer sent {what} perftest does not send: {detail}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The peer runs another perftest version.
    #[error("the peer runs perftest version {peer:?}, this is {VERSION:?}: both sides must match")]
    Version {
        /// What the peer sent.
        peer: String,
    },
    /// The socket failed or the peer went away.
    #[error("side channel: {0}")]
    Io(#[from] std::io::Error),
}

fn malformed(what: &'static str, detail: impl Into<String>) -> Error {
    Error::Malformed { what, detail: detail.into() }
}

/// The version message: `VERSION` NUL-padded to 16 bytes.
pub fn version_message() -> [u8; VERSION_LEN] {
    let mut m = [0u8; VERSION_LEN];
    m[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    m
}

/// The version string in a version message.
pub fn parse_version(m: &[u8]) -> Result<String, Error> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
    std::str::from_utf8(&m[..end])
        .map(str::to_string)
        .map_err(|_| malformed("a version", "not text"))
}

/// The MTU message: the `ibv_mtu` enum (1 = 256 … 5 = 4096) as a decimal digit and a NUL.
pub fn mtu_message(mtu_bytes: u32) -> Option<[u8; 2]> {
    let e = match mtu_bytes {
        256 => b'1',
        512 => b'2',
        1024 => b'3',
        2048 => b'4',
        4096 => b'5',
        _ => return None,
    };
    Some([e, 0])
}

/// The MTU in bytes an MTU message names.
pub fn parse_mtu(m: &[u8]) -> Result<u32, Error> {
    match m {
        [d @ b'1'..=b'5', 0] => Ok(128 << (d - b'0')),
        _ => Err(malformed("an MTU", format!("{m:02x?}"))),
    }
}

/// One QP's key string: what the peer needs to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding READs/atomics the QP accepts (perftest sends 1 on rxe).
    pub out_reads: u16,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The first PSN (24 bits).
    pub psn: u32,
    /// The remote key of the buffer (0 in the send tests).
    pub rkey: u32,
    /// The buffer's virtual address.
    pub vaddr: u64,
    /// The GID, when the port has one (always on RoCE).
    pub gid: Option<[u8; 16]>,
    /// The SRQ number (0 without an SRQ).
    pub srqn: u32,
}

impl Key {
    /// The key string, NUL-terminated (108 bytes with a GID, 59 without).
    pub fn to_message(&self) -> Vec<u8> {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        match self.gid {
            Some(g) => {
                for b in g {
                    s.push_str(&format!("{b:02x}:"));
                }
                s.push_str(&format!("{:08x}:", self.srqn));
            }
            None => s.push_str(&format!("{:08x}", self.srqn)),
        }
        let mut v = s.into_bytes();
        v.push(0);
        v
    }

    /// Parses a key string (with or without a GID).
    pub fn parse(m: &[u8]) -> Result<Key, Error> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let s = std::str::from_utf8(&m[..end]).map_err(|_| malformed("a key", "not text"))?;
        let f: Vec<&str> = s.split(':').collect();
        let hex = |x: &str, what: &'static str| {
            u64::from_str_radix(x, 16).map_err(|_| malformed("a key", format!("bad {what} {x:?}")))
        };
        let (gid, srqn) = match f.len() {
            // lid, out_reads, qpn, psn, rkey, vaddr, srqn
            7 => (None, hex(f[6], "SRQN")?),
            // … vaddr, 16 GID bytes, srqn, and the empty field after the last ':'
            24 if f[23].is_empty() => {
                let mut g = [0u8; 16];
                for (i, b) in g.iter_mut().enumerate() {
                    *b = hex(f[6 + i], "GID byte")? as u8;
                }
                (Some(g), hex(f[22], "SRQN")?)
            }
            n => return Err(malformed("a key", format!("{n} fields in {s:?}"))),
        };
        Ok(Key {
            lid: hex(f[0], "LID")? as u16,
            out_reads: hex(f[1], "out_reads")? as u16,
            qpn: hex(f[2], "QPN")? as u32 & 0xff_ffff,
            psn: hex(f[3], "PSN")? as u32 & 0xff_ffff,
            rkey: hex(f[4], "R_Key")? as u32,
            vaddr: hex(f[5], "address")?,
            gid,
            srqn: srqn as u32,
        })
    }
}

/// A bandwidth test's report (`xchg_bw_reports`). Only the client's carries figures; the
/// server's half is whatever its stack held, so it is sent zeroed here and ignored on receipt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth, MB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The 40-byte message, every field big-endian (the doubles too).
    pub fn to_message(&self) -> [u8; REPORT_LEN] {
        let mut m = [0u8; REPORT_LEN];
        m[0..8].copy_from_slice(&self.size.to_be_bytes());
        m[8..16].copy_from_slice(&self.iters.to_be_bytes());
        m[16..24].copy_from_slice(&self.bw_peak.to_bits().to_be_bytes());
        m[24..32].copy_from_slice(&self.bw_avg.to_bits().to_be_bytes());
        m[32..40].copy_from_slice(&self.msg_rate.to_bits().to_be_bytes());
        m
    }

    /// Reads a report.
    pub fn parse(m: &[u8; REPORT_LEN]) -> BwReport {
        let w = |i: usize| u64::from_be_bytes(m[i..i + 8].try_into().unwrap_or([0; 8]));
        BwReport {
            size: w(0),
            iters: w(8),
            bw_peak: f64::from_bits(w(16)),
            bw_avg: f64::from_bits(w(24)),
            msg_rate: f64::from_bits(w(32)),
        }
    }
}

/// Which end of the side channel this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connected out: writes first.
    Client,
    /// Accepted the connection: reads first.
    Server,
}

/// What one side tells the other before the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The page size (`cycle_buffer`).
    pub page_size: u32,
    /// The cache-line size.
    pub cache_line: u32,
    /// The port's active MTU in bytes.
    pub mtu: u32,
    /// One key per QP.
    pub keys: Vec<Key>,
}

/// The side channel over a connected stream.
#[derive(Debug)]
pub struct Channel<S> {
    stream: S,
    role: Role,
}

impl<S: Read + Write> Channel<S> {
    /// A channel on `stream` for `role`.
    pub fn new(stream: S, role: Role) -> Channel<S> {
        Channel { stream, role }
    }

    /// One symmetric step: sends `mine`, returns the peer's message of `len` bytes.
    pub fn swap(&mut self, mine: &[u8], len: usize) -> Result<Vec<u8>, Error> {
        let mut theirs = vec![0u8; len];
        match self.role {
            Role::Client => {
                self.stream.write_all(mine)?;
                self.stream.read_exact(&mut theirs)?;
            }
            Role::Server => {
                self.stream.read_exact(&mut theirs)?;
                self.stream.write_all(mine)?;
            }
        }
        Ok(theirs)
    }

    /// The opening steps and then the key swaps of `swaps` (perftest's order for a test:
    /// [`Test::key_swaps`]). Returns the peer's setup with every one of its keys (from the
    /// first swap of all of them); a peer of another version is an error.
    pub fn handshake_swaps(&mut self, mine: &Setup, swaps: &[KeySwap]) -> Result<Setup, Error> {
        let mut peer = self.opening(mine)?;
        for s in swaps {
            let got = self.barrier(&mine.keys, *s)?;
            if peer.keys.len() < got.len() {
                peer.keys = got;
            }
        }
        Ok(peer)
    }

    /// One key swap as a barrier: every QP's key, or QP 0's alone.
    pub fn barrier(&mut self, keys: &[Key], which: KeySwap) -> Result<Vec<Key>, Error> {
        match which {
            KeySwap::All => self.swap_keys(keys),
            KeySwap::First => self.swap_keys(&keys[..keys.len().min(1)]),
        }
    }

    /// Version, page size, cache line and MTU; the returned setup has no keys yet.
    fn opening(&mut self, mine: &Setup) -> Result<Setup, Error> {
        let v = parse_version(&self.swap(&version_message(), VERSION_LEN)?)?;
        if v != VERSION {
            return Err(Error::Version { peer: v });
        }
        let int = |b: Vec<u8>| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let page_size = int(self.swap(&mine.page_size.to_be_bytes(), 4)?);
        let cache_line = int(self.swap(&mine.cache_line.to_be_bytes(), 4)?);
        let my_mtu = mtu_message(mine.mtu)
            .ok_or_else(|| malformed("an MTU", format!("{} is not an IB MTU", mine.mtu)))?;
        let mtu = parse_mtu(&self.swap(&my_mtu, 2)?)?;
        Ok(Setup { page_size, cache_line, mtu, keys: Vec::new() })
    }

    /// The opening steps: version, page size, cache line, MTU, then the keys. Returns the
    /// peer's setup; a peer of another version is an error.
    pub fn handshake(&mut self, mine: &Setup) -> Result<Setup, Error> {
        self.handshake_swaps(mine, &[KeySwap::All])
    }

    /// Swaps the key strings, one per QP (also perftest's barrier).
    pub fn swap_keys(&mut self, keys: &[Key]) -> Result<Vec<Key>, Error> {
        keys.iter()
            .map(|k| {
                let m = k.to_message();
                Key::parse(&self.swap(&m, m.len())?)
            })
            .collect()
    }

    /// Swaps bandwidth reports (the client's carries the figures): five 8-byte swaps, one
    /// per field, as `xchg_bw_reports` does.
    pub fn swap_reports(&mut self, mine: &BwReport) -> Result<BwReport, Error> {
        let out = mine.to_message();
        let mut m = [0u8; REPORT_LEN];
        for (o, i) in m.chunks_mut(8).zip(out.chunks(8)) {
            o.copy_from_slice(&self.swap(i, 8)?);
        }
        Ok(BwReport::parse(&m))
    }

    /// The closing `done\0`: each side writes its own, then reads the peer's (the recordings
    /// show either one first on the wire).
    pub fn done(&mut self) -> Result<(), Error> {
        let mut theirs = [0u8; 5];
        self.stream.write_all(DONE)?;
        self.stream.read_exact(&mut theirs)?;
        if &theirs != DONE {
            return Err(malformed("a closing message", format!("{theirs:02x?}")));
        }
        Ok(())
    }
}

/// Which keys a side-channel swap carries. perftest swaps every QP's key at some steps and
/// QP 0's alone at others (`ctx_hand_shake` in a loop over the QPs, or once); with one QP
/// they are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySwap {
    /// One key per QP.
    All,
    /// QP 0's key.
    First,
}

/// The perftest tests whose side-channel conversation is recorded (`testdata/rxe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `ib_send_bw`.
    SendBw,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_read_lat` (not recorded; the shape follows perftest's `read_lat.c`).
    ReadLat,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_atomic_lat` (not recorded; the shape follows perftest's `atomic_lat.c`).
    AtomicLat,
}

/// Where a test's conversation puts its steps around the measurement.
///
/// Read from the recordings by lining up the side channel's TCP segments with the first and
/// last RoCE packet of each session (same guest clock): the measurement runs between
/// [`Script::barriers_before`] key swaps after the handshake's and whatever follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// Key swaps (barriers) after the handshake's, before the measurement.
    pub barriers_before: usize,
    /// After the measurement: a barrier, then the reports (bandwidth tests but SEND), then
    /// a barrier again.
    pub reports: bool,
    /// Whether a barrier follows the measurement (all but `ib_write_lat`).
    pub barrier_after: bool,
    /// Whether the conversation ends with `done\0` each way.
    pub done: bool,
}

impl Test {
    /// The recorded shape of this test's conversation.
    pub const fn script(self) -> Script {
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
                Script { barriers_before: 2, reports: true, barrier_after: true, done: true }
            }
            Test::SendBw | Test::SendLat | Test::ReadLat | Test::AtomicLat => {
                Script { barriers_before: 3, reports: false, barrier_after: true, done: true }
            }
            Test::WriteLat => {
                Script { barriers_before: 3, reports: false, barrier_after: false, done: false }
            }
        }
    }

    /// The key swaps before the measurement, the handshake's included, as perftest's
    /// `*_bw.c` / `*_lat.c` make them (upstream 00b55b6; with one QP, the recorded sessions'
    /// 3 or 4 swaps). After the measurement every swap is QP 0's.
    pub const fn key_swaps(self) -> &'static [KeySwap] {
        use KeySwap::{All, First};
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => &[All, All, First],
            Test::SendBw | Test::SendLat => &[All, First, All, First],
            Test::WriteLat | Test::ReadLat | Test::AtomicLat => &[First, All, All, First],
        }
    }

    /// The sizes of the messages each side sends, in order, for `qps` QPs (what a transcript
    /// shows once per direction).
    pub fn message_sizes(self, qps: usize) -> Vec<usize> {
        let s = self.script();
        let mut v = vec![VERSION_LEN, 4, 4, 2];
        let keys = |v: &mut Vec<usize>| v.extend(std::iter::repeat_n(KEY_LEN_GID, qps));
        for _ in 0..=s.barriers_before {
            keys(&mut v);
        }
        if s.barrier_after {
            keys(&mut v);
        }
        if s.reports {
            v.extend([8; 5]);
            keys(&mut v);
        }
        if s.done {
            v.push(DONE.len());
        }
        v
    }
}
