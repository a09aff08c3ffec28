//! One perftest test between two processes, on any verbs device: the resources, perftest's
//! TCP conversation around the measurement ([`exchange`]), the loops ([`engine`]) and the
//! figures ([`stats`]). The CLI (`podnet perf`) prints what an [`Observer`] is told; other
//! tools (qualification, burn-in) call [`run`] directly.
//!
//! The conversation is perftest 4.5-0.17's, as recorded (`docs/rxe-reference.md`), so either
//! side can be perftest. Where perftest has no recorded shape — data validation, `-b` SEND, a
//! SEND sweep (`-a`) — both sides must be podnet, and podnet marks its key strings so that
//! two podnet sides that disagree on the test say so instead of waiting on each other: the
//! key's SRQ number, which perftest sends as 0 and ignores without SRQ/XRC, carries
//! `0x504e` ("PN"), the test and the flags that change the conversation.
//!
//! [`exchange`]: crate::exchange
//! [`engine`]: crate::engine
//! [`stats`]: crate::stats

use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use verbs::{
    Access, CompletionQueue, Connect, Context, Gid, MemoryRegion, ModifyQp, Mtu, Path,
    ProtectionDomain, Psn, QKey, QpCaps, QpInit, QpState, QpType, Qpn, QueuePair, UdDest,
};

use crate::engine::{self, BwOp, BwPlan, LatPlan, Layout, Peer, RemoteBuffer, Seeds, Side, Stop};
use crate::exchange::{self, BwReport, Channel, Key, KeySwap, Role, Setup, Test};
use crate::stats::{Bandwidth, Latency};

/// perftest's Q_Key for UD (`DEF_QKEY`).
pub const QKEY: u32 = 0x1111_1111;
/// READs and atomics a podnet QP accepts at once (its key's `out_reads`).
pub const OUT_READS: u8 = 16;
/// perftest's CQ moderation for the bandwidth tests (`DEF_CQ_MOD`).
pub const DEF_CQ_MOD: usize = 100;
/// perftest's `MSG_SIZE_CQ_MOD_LIMIT`: above it, a single size over RC or UC is run without
/// CQ moderation unless `-Q` asks for it.
pub const MSG_SIZE_CQ_MOD_LIMIT: usize = 8192;
/// perftest's largest `-Q` (`MAX_CQ_MOD`).
pub const MAX_CQ_MOD: usize = 1024;
/// The marker in the high half of podnet's key SRQ numbers.
const TAG: u32 = 0x504e_0000;

/// Why a test could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The side channel failed or the peer spoke out of turn.
    #[error(transparent)]
    Exchange(#[from] exchange::Error),
    /// A verb failed.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// The measurement failed.
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// The measurement stalled or a work request failed, with the device's counters that
    /// had moved: what the cause is read from (lost packets, NAKs, retransmissions).
    #[error("{error} (device counters: {counters})")]
    OnTheWire {
        /// What the engine said.
        error: engine::Error,
        /// [`verbs::Counters::moved`] at the time.
        counters: String,
    },
    /// The two sides asked for different things.
    #[error(
        "the peer runs {peer}; this side runs {mine}: start both sides with the same test and flags"
    )]
    Mismatch {
        /// What the peer runs.
        peer: String,
        /// What this side runs.
        mine: String,
    },
    /// The options do not make a test.
    #[error("{0}")]
    Invalid(String),
    /// GPU memory was asked for and is not to be had.
    #[error("--use_cuda: {0}")]
    Gpu(#[from] gpu::GpuError),
}

/// The eight tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerfTest {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_atomic_lat`.
    AtomicLat,
}

impl PerfTest {
    /// Every test, in podnet's order.
    pub const ALL: [PerfTest; 8] = [
        PerfTest::WriteBw,
        PerfTest::WriteLat,
        PerfTest::ReadBw,
        PerfTest::ReadLat,
        PerfTest::SendBw,
        PerfTest::SendLat,
        PerfTest::AtomicBw,
        PerfTest::AtomicLat,
    ];

    /// podnet's name: `write-bw`, ….
    pub fn name(self) -> &'static str {
        match self {
            PerfTest::WriteBw => "write-bw",
            PerfTest::WriteLat => "write-lat",
            PerfTest::ReadBw => "read-bw",
            PerfTest::ReadLat => "read-lat",
            PerfTest::SendBw => "send-bw",
            PerfTest::SendLat => "send-lat",
            PerfTest::AtomicBw => "atomic-bw",
            PerfTest::AtomicLat => "atomic-lat",
        }
    }

    /// The test a name (podnet's or perftest's, `write-bw` or `ib_write_bw`) names.
    pub fn from_name(s: &str) -> Option<PerfTest> {
        let s = s.strip_prefix("ib_").unwrap_or(s).replace('_', "-");
        PerfTest::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Whether it is a bandwidth test.
    pub fn is_bw(self) -> bool {
        matches!(self, PerfTest::WriteBw | PerfTest::ReadBw | PerfTest::SendBw | PerfTest::AtomicBw)
    }

    /// The operation it measures.
    pub fn op(self, atomic: BwOp) -> BwOp {
        match self {
            PerfTest::WriteBw | PerfTest::WriteLat => BwOp::Write,
            PerfTest::ReadBw | PerfTest::ReadLat => BwOp::Read,
            PerfTest::SendBw | PerfTest::SendLat => BwOp::Send,
            PerfTest::AtomicBw | PerfTest::AtomicLat => atomic,
        }
    }

    /// Transports it runs on (perftest's rules): WRITE on RC and UC, READ and atomics on
    /// RC, SEND on RC, UC and UD.
    pub fn transports(self) -> &'static [QpType] {
        match self {
            PerfTest::WriteBw | PerfTest::WriteLat => &[QpType::Rc, QpType::Uc],
            PerfTest::SendBw | PerfTest::SendLat => &[QpType::Rc, QpType::Uc, QpType::Ud],
            _ => &[QpType::Rc],
        }
    }

    /// Its side-channel conversation.
    pub fn exchange(self) -> Test {
        match self {
            PerfTest::WriteBw => Test::WriteBw,
            PerfTest::WriteLat => Test::WriteLat,
            PerfTest::ReadBw => Test::ReadBw,
            PerfTest::ReadLat => Test::ReadLat,
            PerfTest::SendBw => Test::SendBw,
            PerfTest::SendLat => Test::SendLat,
            PerfTest::AtomicBw => Test::AtomicBw,
            PerfTest::AtomicLat => Test::AtomicLat,
        }
    }

    /// perftest's title line (`RDMA_Write BW Test`, …).
    pub fn title(self, atomic: BwOp) -> String {
        let verb = match self.op(atomic) {
            BwOp::Write => "RDMA_Write",
            BwOp::Read => "RDMA_Read",
            BwOp::Send => "Send",
            BwOp::FetchAdd => "Atomic FETCH_AND_ADD",
            BwOp::CompareSwap => "Atomic CMP_AND_SWAP",
        };
        format!("{verb} {} Test", if self.is_bw() { "BW" } else { "Latency" })
    }

    fn code(self) -> u32 {
        PerfTest::ALL.iter().position(|t| *t == self).unwrap_or(0) as u32 + 1
    }
}

/// What to run: perftest's options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The test.
    pub test: PerfTest,
    /// RC, UC or UD (`-c`).
    pub connection: QpType,
    /// Message sizes, in order (`-s`, or `-a`'s sweep).
    pub sizes: Vec<usize>,
    /// Messages per QP and size (`-n`); a sweep may cap it per size ([`Options::iters_for`]).
    pub iters: u64,
    /// Run for this long instead (`-D`).
    pub duration: Option<Duration>,
    /// Repeat the `-D` measurement for ever, a row each time (`--run_infinitely`; bandwidth).
    pub run_infinitely: bool,
    /// QPs (`-q`).
    pub qps: usize,
    /// Operations in flight per QP (`-t`).
    pub tx_depth: usize,
    /// Bandwidth tests: work requests per post call (`-l`, perftest's `--post_list`); `None`
    /// for the device's default, [`Options::post_list_on`].
    pub post_list: Option<usize>,
    /// Bandwidth tests: a completion every this many messages (`-Q`, perftest's
    /// `--cq-mod`); `None` for perftest's default, [`Options::cq_mod`].
    pub cq_mod: Option<usize>,
    /// Receives posted per QP (`-r`).
    pub rx_depth: usize,
    /// Both directions at once (`-b`; bandwidth).
    pub bidirectional: bool,
    /// The path MTU (`-m`); the smaller of both ports' active MTUs without it.
    pub mtu: Option<Mtu>,
    /// The local GID index (`-x`).
    pub gid_index: usize,
    /// Check every payload (`--data-validation`).
    pub validate: bool,
    /// The atomic (`-A`): fetch-and-add or compare-and-swap.
    pub atomic: BwOp,
    /// How long to wait for a completion or an active peer's answer.
    pub stall: Duration,
    /// How long a passive side waits for the measuring one (`None`: until it closes).
    pub wait: Option<Duration>,
    /// The traffic class of the QPs' packets (`--tclass`).
    pub traffic_class: Option<u8>,
    /// The RC local ACK timeout code, 4.096 µs × 2^n (`-u`; perftest's default 14, 67 ms).
    pub qp_timeout: u8,
    /// Messages up to this many bytes go inline (`-I`; SEND and WRITE): the payload is
    /// copied into the work request at the post, and a NIC need not fetch it by DMA.
    pub inline_size: usize,
    /// The UDP source ports of the QPs' packets (0xC000–0xFFFF), QP `i` from the `i`-th
    /// (round the list again past its end), each set as the flow label that gives it; both
    /// sides must ask for the same ones. Empty: the port each QP's numbers hash to, as rxe
    /// and RoCE NICs choose it. A probe that walks ECMP paths sets one; a test that spreads
    /// its QPs over known paths sets one a QP.
    pub udp_source_ports: Vec<u16>,
    /// Where the buffers are: host memory, or a GPU's (`--use_cuda`).
    pub memory: Placement,
}

/// Where a test's buffers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Host memory the provider allocates.
    #[default]
    Host,
    /// GPU memory (`--use_cuda=GPU`): the soft provider copies each payload through the
    /// GPU's copy engine, the rdma-core provider registers it with the NIC (its dma-buf, or
    /// through a peer-memory module).
    Cuda {
        /// The CUDA ordinal.
        gpu: u32,
        /// `--use_cuda_dmabuf`: register the GPU's dma-buf (refused where it exports none).
        dmabuf: bool,
    },
}

/// perftest's default inline size (`-I` not given) for `test` over `connection` on a device
/// of the kernel driver `driver` (`host::DeviceInfo::provider`): inline is the
/// default for the SEND and WRITE latency tests only, 220 bytes for WRITE, 236 for SEND (188
/// over UD) on the NICs perftest knows by default (mlx4, mlx5), its own figures for the others
/// it names, and 0 on a device it does not recognise (rxe, siw, podnet's soft devices).
pub fn perftest_default_inline(test: PerfTest, connection: QpType, driver: &str) -> usize {
    let own = match driver {
        "mlx5_core" | "mlx4_core" => None,
        "bnxt_en" | "erdma" => Some(96),
        "efa" | "hns3" => Some(32),
        "qede" => Some(128),
        "irdma" => Some(101),
        _ => return 0,
    };
    match test {
        PerfTest::WriteLat => own.unwrap_or(220),
        PerfTest::SendLat if connection == QpType::Ud => own.unwrap_or(188),
        PerfTest::SendLat => own.unwrap_or(236),
        _ => 0,
    }
}

impl Options {
    /// perftest's defaults for `test`: 65,536 bytes and 5,000 iterations for WRITE bandwidth,
    /// 1,000 for the other bandwidth tests; 2 bytes and 1,000 iterations for latency; one
    /// QP; TX depth 128 (bandwidth) or 1 (latency); RX depth 512; RC.
    pub fn new(test: PerfTest) -> Options {
        let bw = test.is_bw();
        Options {
            test,
            connection: QpType::Rc,
            sizes: vec![if bw { 65536 } else { 2 }],
            iters: if test == PerfTest::WriteBw { 5000 } else { 1000 },
            duration: None,
            run_infinitely: false,
            qps: 1,
            tx_depth: if bw { 128 } else { 1 },
            post_list: None,
            cq_mod: None,
            rx_depth: 512,
            bidirectional: false,
            mtu: None,
            gid_index: 0,
            validate: false,
            atomic: BwOp::FetchAdd,
            stall: engine::STALL,
            wait: None,
            traffic_class: None,
            qp_timeout: 14,
            inline_size: 0,
            udp_source_ports: Vec::new(),
            memory: Placement::Host,
        }
    }

    /// The bandwidth tests' CQ moderation, as perftest settles it: `-Q` if given; else the
    /// post list when `-l` is more than 1; else 1 for one size above 8 KiB over RC or UC
    /// when polling (perftest turns moderation off for large messages, where it is not
    /// needed, but keeps it with `events`: fewer events to wait for) and 100 otherwise;
    /// never more than the TX depth.
    pub fn cq_mod(&self, events: bool) -> usize {
        let large = self.sizes.len() == 1
            && self.sizes[0] > MSG_SIZE_CQ_MOD_LIMIT
            && self.connection != QpType::Ud
            && !events;
        let m = match self.cq_mod {
            Some(m) => m,
            None if let Some(l @ 2..) = self.post_list => l,
            None if large => 1,
            None => DEF_CQ_MOD,
        };
        m.clamp(1, self.tx_depth.max(1))
    }

    /// The bandwidth tests' post list on `ctx`: `-l` if given; else perftest's 1 on an RDMA
    /// device (on Linux rxe each `ibv_post_send` is a system call that runs the requester
    /// in the caller's time, as perftest's loop expects), and on a soft device the whole TX
    /// depth (its post transmits at once, one `sendmmsg` per list: one call per message
    /// halves its small-message rate). 1 for the latency tests.
    pub fn post_list_on(&self, ctx: &Context) -> usize {
        match self.post_list {
            Some(l) => l,
            None if self.test.is_bw() && ctx.provider_kind() == verbs::ProviderKind::Soft => {
                self.tx_depth
            }
            None => 1,
        }
    }

    /// `-a`'s sizes: 2 to 2²³ bytes, doubling.
    pub fn sweep() -> Vec<usize> {
        (1..24).map(|i| 1usize << i).collect()
    }

    /// The iterations for `size` in a sweep: `-n`, but no more than 1 GiB per size (at least
    /// 16), so `-a` ends in reasonable time at 8 MiB.
    pub fn iters_for(&self, size: usize) -> u64 {
        if self.sizes.len() > 1 {
            self.iters.min(((1u64 << 30) / size.max(1) as u64).max(16))
        } else {
            self.iters
        }
    }

    fn stop_for(&self, size: usize) -> Stop {
        match self.duration {
            Some(d) => Stop::Duration(d),
            None => Stop::Iters(self.iters_for(size)),
        }
    }

    fn size_of(&self, size: usize) -> usize {
        if self.op().is_atomic() { 8 } else { size }
    }

    fn op(&self) -> BwOp {
        self.test.op(self.atomic)
    }

    /// Checks the combination; the message says what is wrong.
    pub fn validate_options(&self) -> Result<(), Error> {
        let t = self.test;
        let bad = |m: String| Err(Error::Invalid(m));
        if !t.transports().contains(&self.connection) {
            return bad(format!(
                "{} runs on {} only, not {:?}",
                t.name(),
                names(t.transports()),
                self.connection
            ));
        }
        if self.sizes.is_empty() || self.qps == 0 || self.tx_depth == 0 || self.rx_depth == 0 {
            return bad("sizes, QPs and depths must be at least 1".into());
        }
        if self.sizes.contains(&0) {
            // A 0-byte message moves nothing: its 0 MB/s would read as a passed run.
            return bad("-s 0: a message carries at least 1 byte".into());
        }
        if self.iters < 2 && self.duration.is_none() {
            return bad("-n must be at least 2 (perftest measures intervals)".into());
        }
        if !t.is_bw() && self.qps != 1 {
            return bad(format!("{} measures one QP; -q must be 1", t.name()));
        }
        if !t.is_bw() && self.bidirectional {
            return bad("-b is for the bandwidth tests".into());
        }
        if !t.is_bw() && (self.post_list.is_some() || self.cq_mod.is_some()) {
            return bad(format!(
                "-l and -Q are for the bandwidth tests; {} posts one message at a time",
                t.name()
            ));
        }
        if let Some(l) = self.post_list
            && (l == 0 || l > self.tx_depth)
        {
            return bad(format!("-l {l} must be from 1 to the TX depth ({})", self.tx_depth));
        }
        if let Some(m) = self.cq_mod
            && !(1..=MAX_CQ_MOD).contains(&m)
        {
            return bad(format!("-Q {m} must be from 1 to {MAX_CQ_MOD}"));
        }
        // perftest's rules for a post list the user asked for: whole lists of messages, and
        // a completion at the end of one.
        if let Some(l @ 2..) = self.post_list {
            if self.duration.is_none() && !self.iters.is_multiple_of(l as u64) {
                return bad(format!(
                    "-n {} must be a multiple of the post list (-l {l})",
                    self.iters
                ));
            }
            // (-Q as it will be used: no more than the TX depth.)
            if let Some(q) = self.cq_mod
                && let m = q.min(self.tx_depth)
                && !l.is_multiple_of(m)
            {
                let used =
                    if m < q { format!(", used as {m}: the TX depth") } else { String::new() };
                return bad(format!(
                    "-l {l} must be a multiple of the CQ moderation (-Q {q}{used})"
                ));
            }
        }
        if self.run_infinitely && (self.duration.is_none() || !t.is_bw()) {
            return bad("--run_infinitely needs a bandwidth test and -D".into());
        }
        if self.connection == QpType::Ud
            && let Some(&m) = self.sizes.iter().max()
            && m > 4096
        {
            return bad(format!("UD messages fit one packet: {m} bytes is more than any MTU"));
        }
        if let Some(&m) = self.sizes.iter().max()
            && m > 1 << 30
        {
            return bad(format!("{m} bytes per message is more than 1 GiB"));
        }
        Ok(())
    }

    fn tag(&self) -> u32 {
        let ty = match self.connection {
            QpType::Rc => 0,
            QpType::Uc => 1,
            QpType::Ud => 2,
        };
        let flags = u32::from(self.validate)
            | u32::from(self.bidirectional) << 1
            | u32::from(self.sizes.len() > 1) << 2
            | u32::from(self.duration.is_some()) << 3;
        TAG | self.test.code() << 12 | ty << 8 | flags
    }
}

fn names(t: &[QpType]) -> String {
    t.iter().map(|x| format!("{x:?}").to_uppercase()).collect::<Vec<_>>().join("/")
}

fn describe_tag(tag: u32) -> String {
    let test = PerfTest::ALL
        .get(((tag >> 12 & 0xf) as usize).wrapping_sub(1))
        .map_or("an unknown test", |t| t.name());
    let ty = ["RC", "UC", "UD"].get((tag >> 8 & 0xf) as usize).unwrap_or(&"?");
    let mut s = format!("{test} over {ty}");
    for (bit, name) in [(1, "--data-validation"), (2, "-b"), (4, "-a"), (8, "-D")] {
        if tag & bit != 0 {
            s.push(' ');
            s.push_str(name);
        }
    }
    s
}

/// What the banner shows once the QPs are connected.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The device's name.
    pub device: String,
    /// This side's keys, one per QP.
    pub local: Vec<Key>,
    /// The peer's.
    pub remote: Vec<Key>,
    /// The path MTU in bytes.
    pub mtu: u32,
    /// The port's link layer (perftest's "Link type").
    pub link_layer: verbs::LinkLayer,
    /// Whether the peer is podnet.
    pub peer_is_podnet: bool,
    /// The bandwidth tests' CQ moderation ([`Options::cq_mod`]).
    pub cq_mod: usize,
    /// Work requests per post call in a bandwidth test ([`Options::post_list_on`]).
    pub post_list: usize,
    /// Where this side's buffers are: `host`, or the GPU (`GPU 0 (0000:3c:00.0) NVIDIA H200`).
    pub memory: String,
}

/// One result row.
#[derive(Debug, Clone)]
pub enum Row {
    /// A bandwidth row (with `-b`, both directions summed).
    Bw(Bandwidth),
    /// A latency row.
    Lat(Latency),
}

/// What a run produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The rows, in order.
    pub rows: Vec<Row>,
    /// What data validation checked on this side and, for WRITEs and atomics, on the peer.
    pub validation: Option<engine::Validation>,
    /// The peer's keys.
    pub remote: Vec<Key>,
    /// Each latency row's intervals as histogram buckets, in order.
    pub latency_buckets: Vec<crate::stats::LatencyBuckets>,
}

/// Told what happens as it happens.
pub trait Observer {
    /// The QPs are connected.
    fn connected(&mut self, _c: &Connected) {}
    /// A measurement is about to start (this side measures `bytes_per_msg` messages).
    fn measuring(&mut self, _size: usize) {}
    /// Progress: messages and bytes done in the current measurement.
    fn progress(&mut self, _done: u64, _bytes: u64) {}
    /// A latency run of a number of iterations measured these intervals, in order, one way
    /// in µs (perftest's `-U` list); told just before its row.
    fn intervals(&mut self, _intervals: &[f64]) {}
    /// A row is ready.
    fn row(&mut self, _row: &Row) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;
impl Observer for Quiet {}

struct Resources {
    _pd: ProtectionDomain,
    mr: MemoryRegion,
    cq: CompletionQueue,
    channel: Option<verbs::CompletionChannel>,
    qps: Vec<QueuePair>,
    layout: Layout,
    inline_size: usize,
    /// Where the buffers are, for the report (`host`, `GPU 0 (0000:3c:00.0) NVIDIA H200`).
    memory: String,
}

impl Resources {
    /// What each QP tells the peer: its number, a random first PSN, where its area is and
    /// its R_Key (none for SENDs), the GID, podnet's tag.
    fn keys(&self, o: &Options, gid: Gid, tag: u32) -> Vec<Key> {
        self.qps
            .iter()
            .enumerate()
            .map(|(q, qp)| Key {
                lid: 0,
                out_reads: u16::from(OUT_READS),
                qpn: qp.qpn().get(),
                psn: random_psn(),
                rkey: if o.op() == BwOp::Send { 0 } else { self.mr.rkey().0 },
                vaddr: self.mr.addr() + self.layout.remote(q, 0) as u64,
                gid: Some(gid.0),
                srqn: tag,
            })
            .collect()
    }

    fn side(&self, stall: Duration) -> Side<'_> {
        Side {
            qps: &self.qps,
            cq: &self.cq,
            mr: &self.mr,
            channel: self.channel.as_ref(),
            layout: self.layout,
            stall,
            inline_size: self.inline_size,
        }
    }
}

fn create(ctx: &Context, o: &Options, events: bool) -> Result<Resources, Error> {
    let max = o.sizes.iter().copied().max().unwrap_or(0);
    let layout = Layout::new(o.size_of(max), o.connection == QpType::Ud, o.validate);
    let pd = ctx.alloc_pd()?;
    let remote_access = match o.op() {
        BwOp::Write => Access::REMOTE_WRITE,
        BwOp::Read => Access::REMOTE_READ,
        BwOp::FetchAdd | BwOp::CompareSwap => Access::REMOTE_ATOMIC,
        BwOp::Send => Access(0),
    };
    // What the device takes, checked before anything is allocated: a depth or QP count
    // past it is a flag to fix, named as such.
    let lim = ctx.query_device()?;
    let over = |flag: &str, asked: usize, max: u32, what: &str| {
        (asked > max as usize).then(|| {
            Error::Invalid(format!(
                "{flag} {asked}: {} takes at most {max} {what}",
                ctx.device_name()
            ))
        })
    };
    if let Some(e) = over("-q", o.qps, lim.max_qp, "QPs")
        .or_else(|| over("-t", o.tx_depth, lim.max_qp_wr, "work requests per queue"))
        .or_else(|| over("-r", o.rx_depth, lim.max_qp_wr, "work requests per queue"))
    {
        return Err(e);
    }
    let len = layout.region_len(o.qps);
    let access = Access::LOCAL_WRITE | remote_access;
    let (mr, memory) = match o.memory {
        Placement::Host => (pd.reg_mr(len, access)?, "host".to_string()),
        Placement::Cuda { gpu, dmabuf } => {
            let g = gpu::Gpu::open(gpu)?;
            if dmabuf && !g.dma_buf_supported() {
                return Err(gpu::GpuError::Unsupported(
                    "--use_cuda_dmabuf: the GPU exports no dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0)",
                )
                .into());
            }
            let buf: std::sync::Arc<dyn verbs::DeviceMemory> = std::sync::Arc::new(g.alloc(len)?);
            let mut what = format!("{} {}", buf.describe(), g.name());
            if dmabuf {
                // Exported here whatever the provider: the soft one copies through the
                // copy engine, a NIC's registers the dma-buf (reg_device_mr exports again).
                drop(buf.dmabuf().map_err(|e| Error::Invalid(format!("--use_cuda_dmabuf: {e}")))?);
                what.push_str(", dma-buf exported");
            }
            (pd.reg_device_mr(buf, access)?, what)
        }
    };
    let channel = if events { Some(ctx.create_comp_channel()?) } else { None };
    let rx = o.rx_depth.max(130);
    let per_qp = o.tx_depth + rx + 4;
    // Past u32 is past every device's limit: saturate, and let the provider refuse it.
    let wide = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let cq = ctx.create_cq(wide(per_qp.saturating_mul(o.qps)), channel.as_ref())?;
    let mut qps = Vec::with_capacity(o.qps);
    for _ in 0..o.qps {
        let mut init = QpInit::new(o.connection, &cq);
        init.caps = QpCaps {
            // Room for the latency loops' unsignaled runs (engine::SIGNAL_EVERY) too.
            max_send_wr: wide(o.tx_depth.max(engine::SIGNAL_EVERY as usize)).saturating_add(1),
            max_recv_wr: wide(rx),
            max_inline_data: wide(o.inline_size),
        };
        let qp = pd.create_qp(&init)?;
        let ud = o.connection == QpType::Ud;
        qp.modify(&ModifyQp {
            state: Some(QpState::Init),
            access: (!ud).then_some(remote_access),
            qkey: ud.then_some(QKey(QKEY)),
            ..Default::default()
        })?;
        qps.push(qp);
    }
    Ok(Resources { _pd: pd, mr, cq, channel, qps, layout, inline_size: o.inline_size, memory })
}

fn random_psn() -> u32 {
    getrandom::u32().unwrap_or(0x5eed) & 0xff_ffff
}

fn seed(psn: u32) -> u64 {
    0x706f_646e_6574_0000 ^ u64::from(psn)
}

/// The side channel with the timeouts of each phase.
struct Talk<'a> {
    ch: Channel<&'a TcpStream>,
    sock: &'a TcpStream,
    stall: Duration,
    wait: Option<Duration>,
}

impl Talk<'_> {
    /// A side that measures: its peer answers within the stall limit.
    fn active(&self) -> std::io::Result<()> {
        self.sock.set_read_timeout(Some(self.stall))
    }
    /// A side that does not measure waits for the one that does (as perftest's sleeps in
    /// its side channel's read; the device moves packets meanwhile on its own).
    fn passive(&self) -> std::io::Result<()> {
        self.sock.set_read_timeout(self.wait)
    }
}

/// An engine error; a stall or a failed work request with the device's counters that moved.
fn on_the_wire(ctx: &Context, error: engine::Error) -> Error {
    match error {
        engine::Error::Stalled(_) | engine::Error::Completion { .. } => {
            Error::OnTheWire { error, counters: ctx.counters().moved() }
        }
        e => Error::Engine(e),
    }
}

/// Runs `o` as `role` with the peer at the other end of `sock`; `events` sleeps on a
/// completion channel instead of busy-polling. `peer_ip` is where the peer's QPs are when
/// its GID does not say.
pub fn run(
    ctx: &Context,
    o: &Options,
    role: Role,
    sock: &TcpStream,
    peer_ip: IpAddr,
    events: bool,
    obs: &mut dyn Observer,
) -> Result<Outcome, Error> {
    o.validate_options()?;
    let res = create(ctx, o, events)?;
    let side = res.side(o.stall);
    let gid = ctx.query_gid(o.gid_index)?.gid;
    let tag = o.tag();
    let local = res.keys(o, gid, tag);
    let post_list = o.post_list_on(ctx);
    let cq_mod = o.cq_mod(events);
    let port_mtu = ctx.query_port().active_mtu;
    let my_mtu = o.mtu.unwrap_or(port_mtu);
    let mut talk = Talk { ch: Channel::new(sock, role), sock, stall: o.stall, wait: o.wait };
    talk.active().map_err(exchange::Error::Io)?;
    let setup = Setup {
        page_size: engine::PAGE as u32,
        cache_line: 64,
        mtu: my_mtu.bytes(),
        keys: local.clone(),
    };
    // The swaps up to the first with every key, then (after connecting and posting what the
    // measurement needs) the rest: the last starts the measurement.
    let swaps = o.test.exchange().key_swaps();
    let first_all = swaps.iter().position(|s| *s == KeySwap::All).map_or(swaps.len(), |i| i + 1);
    let peer = talk.ch.handshake_swaps(&setup, &swaps[..first_all])?;
    if peer.keys.len() != local.len() {
        return Err(Error::Mismatch {
            peer: format!("{} QPs", peer.keys.len()),
            mine: format!("{} (-q)", local.len()),
        });
    }
    let peer_is_podnet = peer.keys.first().is_some_and(|k| k.srqn & 0xffff_0000 == TAG);
    if let Some(k) = peer.keys.first()
        && peer_is_podnet
        && k.srqn != tag
    {
        return Err(Error::Mismatch { peer: describe_tag(k.srqn), mine: describe_tag(tag) });
    }
    let mtu = match o.mtu {
        Some(m) => m,
        None => Mtu::from_bytes(peer.mtu.min(my_mtu.bytes())).unwrap_or(Mtu::Mtu1024),
    };
    let peers = connect(&res.qps, o, &local, &peer.keys, mtu, peer_ip)?;
    obs.connected(&Connected {
        device: ctx.device_name(),
        local: local.clone(),
        remote: peer.keys.clone(),
        mtu: mtu.bytes(),
        link_layer: ctx.query_port().link_layer,
        peer_is_podnet,
        post_list,
        cq_mod,
        memory: res.memory.clone(),
    });
    let seeds =
        o.validate.then(|| Seeds { mine: seed(local[0].psn), peer: seed(peer.keys[0].psn) });
    let client = role == Role::Client;
    let op = o.op();
    let script = o.test.exchange().script();
    // What must be in place before the measurement starts.
    let sink = o.test == PerfTest::SendBw && (!client || o.bidirectional);
    if let Some(sd) = seeds
        && op == BwOp::Read
    {
        engine::fill_remote(&side, sd.mine)?;
    }
    // With validation each receive has a slot of its own.
    let rx_depth = if o.validate { o.rx_depth.min(res.layout.slots) } else { o.rx_depth };
    if sink {
        engine::post_receives(&side, rx_depth)?;
    }
    if o.test == PerfTest::SendLat {
        engine::post_receives(&side, engine::SEND_LAT_DEPTH)?;
    }
    debug_assert_eq!(swaps.len(), script.barriers_before + 1);
    for s in &swaps[first_all..] {
        talk.ch.barrier(&local, *s)?;
    }
    let mut out = Outcome { remote: peer.keys.clone(), ..Default::default() };
    let mut validation = engine::Validation::default();
    let measures = client
        || o.bidirectional
        || sink
        || !o.test.is_bw() && matches!(op, BwOp::Write | BwOp::Send);
    let mut last_report = BwReport { size: 0, iters: 0, bw_peak: 0.0, bw_avg: 0.0, msg_rate: 0.0 };
    // WRITE bandwidth and atomics are checked by their target after the run; WRITE latency's
    // target checks each message as it polls for it.
    let dv_on_peer = seeds.is_some() && (op.is_atomic() || op == BwOp::Write && o.test.is_bw());
    let initiates = client || o.bidirectional;
    loop {
        for (i, &size) in o.sizes.iter().enumerate() {
            let size = o.size_of(size);
            if i > 0 && o.test == PerfTest::SendBw {
                // podnet's SEND sweep: both sides start each size together.
                talk.ch.swap_keys(&local)?;
            }
            // SENDs keep one layout through a sweep (their receives stay posted); the others
            // cut their areas for each size.
            let mut side = side;
            if op != BwOp::Send {
                side.layout = res.layout.for_message(size, o.connection == QpType::Ud);
            }
            let side = side;
            let mut completed = vec![0u64; o.qps];
            let mut size_validation = engine::Validation::default();
            if measures {
                obs.measuring(size);
                let stop = o.stop_for(size);
                if o.test.is_bw() {
                    let plan = BwPlan {
                        op: initiates.then_some(op),
                        sink,
                        size,
                        tx_depth: o.tx_depth,
                        post_list,
                        cq_mod,
                        peers: &peers,
                        stop,
                        seeds,
                        end_marker: peer_is_podnet
                            && o.connection == QpType::Rc
                            && o.test == PerfTest::SendBw
                            && matches!(stop, Stop::Duration(_)),
                    };
                    let r = engine::bw(&side, &plan, &mut |d, b| obs.progress(d, b))
                        .map_err(|e| on_the_wire(ctx, e))?;
                    size_validation.merge(&r.validation);
                    completed.clone_from(&r.completed);
                    let mut fig = if initiates { r.sent } else { r.received };
                    if let (Some(f), Stop::Iters(n)) = (fig.as_mut(), stop) {
                        // perftest's #iterations: -n times the QPs (what they all moved).
                        f.iters = n * o.qps as u64;
                    }
                    if let Some(f) = fig {
                        last_report = BwReport {
                            size: f.size,
                            iters: f.iters,
                            bw_peak: f.bw_peak,
                            bw_avg: f.bw_avg,
                            msg_rate: f.msg_rate,
                        };
                        if !o.bidirectional {
                            out.rows.push(Row::Bw(f));
                            obs.row(&Row::Bw(f));
                        }
                    }
                } else {
                    let plan = LatPlan { size, stop, initiator: client, peer: peers[0], seeds };
                    let mut p = |d, b| obs.progress(d, b);
                    let r = match op {
                        BwOp::Send => engine::send_lat(&side, &plan, &mut p),
                        BwOp::Write => engine::write_lat(&side, &plan, &mut p),
                        _ => engine::one_sided_lat(&side, &plan, op, &mut p),
                    }
                    .map_err(|e| on_the_wire(ctx, e))?;
                    size_validation.merge(&r.validation);
                    completed[0] = r.completed;
                    out.rows.push(Row::Lat(r.latency));
                    out.latency_buckets.extend(r.buckets);
                    if let Some(v) = &r.intervals {
                        obs.intervals(v);
                    }
                    obs.row(&Row::Lat(r.latency));
                }
            }
            if let Some(sd) = seeds {
                // Both sides end up with everything that was checked, on either side.
                let mine = std::mem::take(&mut size_validation);
                let round = Round {
                    op,
                    size,
                    seeds: sd,
                    completed: &completed,
                    initiator: initiates,
                    target_check: dv_on_peer,
                };
                let all = settle(&mut talk, &side, &round, mine)?;
                validation.merge(&all);
            }
        }
        // A side that does not measure has nothing to repeat: it waits at the barrier.
        if !o.run_infinitely || !measures {
            break;
        }
    }
    // After the measurement.
    if script.barrier_after {
        if measures { talk.active() } else { talk.passive() }.map_err(exchange::Error::Io)?;
        talk.ch.barrier(&local, KeySwap::First)?;
        talk.active().map_err(exchange::Error::Io)?;
    }
    if let Some(row) = peer_row(&mut talk, o, &local, &last_report, client)? {
        out.rows.push(Row::Bw(row));
        obs.row(&Row::Bw(row));
    }
    if script.done {
        talk.ch.done()?;
    }
    if o.validate {
        out.validation = Some(validation);
    }
    Ok(out)
}

/// Connects each QP to the peer's (its GID's address, else `peer_ip`) at `mtu`; where each
/// one's operations go.
fn connect(
    qps: &[QueuePair],
    o: &Options,
    local: &[Key],
    remote: &[Key],
    mtu: Mtu,
    peer_ip: IpAddr,
) -> Result<Vec<Peer>, Error> {
    let mut peers = Vec::with_capacity(o.qps);
    for (i, (qp, (mine, theirs))) in qps.iter().zip(local.iter().zip(remote)).enumerate() {
        let ip = Gid(theirs.gid.unwrap_or([0; 16])).to_ip().unwrap_or(peer_ip);
        let path = Path::new(ip, Qpn::new(theirs.qpn));
        let port = o.udp_source_ports.get(i % o.udp_source_ports.len().max(1));
        let path = match port.copied() {
            Some(port) => path.with_udp_source_port(port).ok_or_else(|| {
                Error::Invalid(format!(
                    "UDP source port {port}: RoCEv2 source ports are 49152-65535"
                ))
            })?,
            None => path,
        };
        let c = Connect {
            path_mtu: mtu,
            max_rd_atomic: OUT_READS.min(theirs.out_reads.clamp(1, 255) as u8),
            max_dest_rd_atomic: OUT_READS,
            traffic_class: o.traffic_class,
            timeout: o.qp_timeout,
            ..Connect::new(path, Psn::new(mine.psn), Psn::new(theirs.psn))
        };
        qp.connect(&c)?;
        // Tests only (feature `fault-injection`): the peer's R_Key with its top bit flipped,
        // so every RDMA operation draws a remote access error NAK.
        #[cfg(feature = "fault-injection")]
        let theirs_rkey = if std::env::var_os("PODNET_FAULT_BAD_RKEY").is_some() {
            eprintln!(
                "podnet: FAULT INJECTION: the peer's R_Key {:#x} used as {:#x}",
                theirs.rkey,
                theirs.rkey ^ 0x8000_0000
            );
            theirs.rkey ^ 0x8000_0000
        } else {
            theirs.rkey
        };
        #[cfg(not(feature = "fault-injection"))]
        let theirs_rkey = theirs.rkey;
        peers.push(Peer {
            buffer: RemoteBuffer { addr: theirs.vaddr, rkey: verbs::RKey(theirs_rkey) },
            ud: (o.connection == QpType::Ud).then_some(UdDest {
                flow_label: path.flow_label,
                ..UdDest::new(ip, Qpn::new(theirs.qpn), QKey(QKEY))
            }),
        });
    }
    Ok(peers)
}

/// After the measurement, where the test swaps reports: the row this side prints from the
/// peer's (both directions summed with `--bidirectional`; the client's figures on a perftest
/// server).
fn peer_row(
    talk: &mut Talk<'_>,
    o: &Options,
    local: &[Key],
    mine: &BwReport,
    client: bool,
) -> Result<Option<Bandwidth>, Error> {
    let script = o.test.exchange().script();
    if !(script.reports || (o.bidirectional && o.test == PerfTest::SendBw)) {
        return Ok(None);
    }
    let theirs = talk.ch.swap_reports(mine)?;
    if script.reports {
        talk.ch.barrier(local, KeySwap::First)?;
    }
    Ok(if o.bidirectional {
        Some(Bandwidth {
            size: mine.size,
            iters: mine.iters,
            bw_peak: mine.bw_peak + theirs.bw_peak,
            bw_avg: mine.bw_avg + theirs.bw_avg,
            msg_rate: mine.msg_rate + theirs.msg_rate,
        })
    } else if !client {
        // perftest's server prints the client's figures.
        Some(Bandwidth {
            size: theirs.size,
            iters: theirs.iters,
            bw_peak: theirs.bw_peak,
            bw_avg: theirs.bw_avg,
            msg_rate: theirs.msg_rate,
        })
    } else {
        None
    })
}

/// What one size's measurement leaves for its data-validation step.
struct Round<'a> {
    op: BwOp,
    size: usize,
    seeds: Seeds,
    /// Operations each QP completed.
    completed: &'a [u64],
    /// Whether this side initiated the operations (it measured).
    initiator: bool,
    /// Whether the initiator's operations land in the target's memory, which checks them
    /// (WRITE bandwidth and atomics).
    target_check: bool,
}

/// How long the last packets of a UC run may take to land once they stopped coming.
const LANDING_GRACE: Duration = Duration::from_millis(500);

/// Waits until each UC QP of `side` expects the PSN its peer's requester sends next: a UC
/// WRITE completes at the initiator when it is sent, so the initiator's counts can come
/// before the last packets were taken off this side's socket. Gives up once the expected
/// PSNs stop moving for [`LANDING_GRACE`] (packets lost: the check that follows reports
/// them). RC needs no wait: its completions follow the responder's ACKs.
fn wait_landed(side: &Side<'_>, sent_up_to: &[Psn]) -> Result<(), Error> {
    let mut last: Vec<Option<Psn>> = vec![None; side.qps.len()];
    let mut moved_at = std::time::Instant::now();
    loop {
        let mut behind = false;
        for ((qp, &want), seen) in side.qps.iter().zip(sent_up_to).zip(&mut last) {
            if qp.qp_type() != QpType::Uc {
                continue;
            }
            let at = qp.query()?.1.rq_psn;
            if at != want {
                behind = true;
            }
            if *seen != Some(at) {
                *seen = Some(at);
                moved_at = std::time::Instant::now();
            }
        }
        if !behind || moved_at.elapsed() > LANDING_GRACE {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// podnet's data-validation step after each size (both sides podnet). For WRITE bandwidth
/// and atomics the initiator first sends how many operations each QP completed and the
/// target checks its buffer; then the sides swap what they found, so each reports both.
fn settle(
    talk: &mut Talk<'_>,
    side: &Side<'_>,
    round: &Round<'_>,
    mut found: engine::Validation,
) -> Result<engine::Validation, Error> {
    let &Round { op, size, seeds, completed, initiator, target_check } = round;
    // A side that did not measure waits for the one that did.
    if initiator { talk.active() } else { talk.passive() }.map_err(exchange::Error::Io)?;
    if target_check {
        // Per QP: the operations it completed and the PSN its requester sends next.
        let len = 12 * side.qps.len();
        let mut counts_msg = vec![0u8; len];
        if initiator {
            for ((c, n), qp) in counts_msg.chunks_mut(12).zip(completed).zip(side.qps) {
                c[..8].copy_from_slice(&n.to_be_bytes());
                c[8..].copy_from_slice(&qp.query()?.1.sq_psn.get().to_be_bytes());
            }
        }
        let theirs = talk.ch.swap(&counts_msg, len)?;
        let word = |c: &[u8], r: std::ops::Range<usize>| {
            c.get(r).map_or(0, |b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
        };
        let counts: Vec<u64> = theirs.chunks(12).map(|c| word(c, 0..8)).collect();
        let psns: Vec<Psn> = theirs.chunks(12).map(|c| Psn::new(word(c, 8..12) as u32)).collect();
        // The peer initiated when it sent counts: check what it did to this side.
        if counts.iter().any(|&c| c > 0) {
            found.merge(&if op == BwOp::Write {
                wait_landed(side, &psns)?;
                engine::check_written(side, size, seeds.peer, &counts)
            } else {
                let v = engine::check_atomics(side, &counts);
                // Before the results go back: the initiator starts the next size of a
                // sweep only once it has them.
                engine::reset_atomics(side, &counts)?;
                v
            });
        }
    }
    const RESULT: usize = 24 + 200;
    let mut mine = vec![0u8; RESULT];
    mine[..8].copy_from_slice(&found.messages.to_be_bytes());
    mine[8..16].copy_from_slice(&found.bytes.to_be_bytes());
    mine[16..24].copy_from_slice(&found.errors.to_be_bytes());
    if let Some(e) = &found.first_error {
        let b = e.as_bytes();
        let n = b.len().min(200);
        mine[24..24 + n].copy_from_slice(&b[..n]);
    }
    // The results go both ways at once. Where the counts went first both sides are past the
    // measurement and each answers within the stall limit; else this swap is where the side
    // that did not measure waits for the one that does, however long it measures (a READ
    // sweep of 4 GB under loss takes longer than the stall limit: the waiting side timed
    // out, freed its memory, and the measuring side's READs met RemAccessErr).
    if initiator || target_check {
        talk.active().map_err(exchange::Error::Io)?;
    }
    let r = talk.ch.swap(&mine, RESULT)?;
    let word = |i: usize| u64::from_be_bytes(r[i..i + 8].try_into().unwrap_or([0; 8]));
    let text: Vec<u8> = r[24..].iter().copied().take_while(|&b| b != 0).collect();
    found.merge(&engine::Validation {
        messages: word(0),
        bytes: word(8),
        errors: word(16),
        first_error: (!text.is_empty())
            .then(|| format!("at the peer: {}", String::from_utf8_lossy(&text))),
    });
    Ok(found)
}

#[cfg(test)]
mod inline_tests {
    use super::*;

    #[test]
    fn perftests_default_inline_sizes() {
        use PerfTest::*;
        let d = |t, c, drv| perftest_default_inline(t, c, drv);
        assert_eq!(d(WriteLat, QpType::Rc, "mlx5_core"), 220);
        assert_eq!(d(SendLat, QpType::Rc, "mlx5_core"), 236);
        assert_eq!(d(SendLat, QpType::Uc, "mlx4_core"), 236);
        assert_eq!(d(SendLat, QpType::Ud, "mlx5_core"), 188);
        assert_eq!(d(WriteLat, QpType::Uc, "bnxt_en"), 96);
        assert_eq!(d(SendLat, QpType::Ud, "efa"), 32);
        // Only the SEND and WRITE latency tests, and only on a NIC perftest knows.
        for t in [WriteBw, SendBw, ReadBw, ReadLat, AtomicBw, AtomicLat] {
            assert_eq!(d(t, QpType::Rc, "mlx5_core"), 0, "{t:?}");
        }
        for drv in ["rxe", "siw", "soft", "unknown"] {
            assert_eq!(d(WriteLat, QpType::Rc, drv), 0, "{drv}");
            assert_eq!(d(SendLat, QpType::Rc, drv), 0, "{drv}");
        }
    }

    #[test]
    fn post_lists_follow_perftests_rules() {
        let o = |l: usize, q: Option<usize>, n: u64| Options {
            post_list: Some(l),
            cq_mod: q,
            iters: n,
            tx_depth: 8,
            ..Options::new(PerfTest::SendBw)
        };
        assert!(o(8, None, 1000).validate_options().is_ok());
        assert!(o(8, Some(4), 1000).validate_options().is_ok());
        // -Q above the TX depth is the TX depth, as perftest clamps it before its check.
        assert!(o(8, Some(16), 1000).validate_options().is_ok());
        assert_eq!(o(8, Some(16), 1000).cq_mod(false), 8);
        assert!(o(8, Some(3), 1000).validate_options().is_err());
        // The message names -Q as given and as used.
        let e = o(4, Some(16), 1000).validate_options().unwrap_err().to_string();
        assert!(
            e.contains(
                "-l 4 must be a multiple of the CQ moderation (-Q 16, used as 8: the TX depth)"
            ),
            "{e}"
        );
        let e = o(8, Some(3), 1000).validate_options().unwrap_err().to_string();
        assert!(e.ends_with("(-Q 3)"), "{e}");
        assert!(o(8, None, 1001).validate_options().is_err());
        // A run of a duration has no count to divide; a list of 1 is no list.
        let timed = Options { duration: Some(Duration::from_secs(1)), ..o(8, None, 1001) };
        assert!(timed.validate_options().is_ok());
        assert!(o(1, Some(3), 1001).validate_options().is_ok());
        // Large messages: moderation off when polling, perftest's 100 (here the TX depth)
        // with events.
        let big = Options { sizes: vec![65536], post_list: None, ..o(8, None, 1000) };
        assert_eq!((big.cq_mod(false), big.cq_mod(true)), (1, 8));
    }
}
