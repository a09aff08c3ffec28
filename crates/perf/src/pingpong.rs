//! `ibv_rc_pingpong`'s protocol on podnet's verbs: the TCP exchange of addresses, the RC QP
//! and its buffer, the ping-pong loop, and `--verify`'s check of every byte.
//!
//! The TCP exchange (rdma-core `libibverbs/examples/rc_pingpong.c`, seen in
//! `testdata/rxe/ibv_rc_pingpong-*.tcp.txt`): the client sends `"%04x:%06x:%06x:%s\0"` (LID,
//! QPN, PSN, GID as 32 hex digits; 52 bytes), the server connects its QP and answers the same
//! way, then the client sends `"done\0"`. Both sides keep `rx_depth` receives posted on one
//! buffer and send from that same buffer, so a message bounces back what it received.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use verbs::{
    Access, CompletionChannel, CompletionQueue, Connect, Context, Gid, MemoryRegion, ModifyQp, Mtu,
    Path, Psn, QpCaps, QpInit, QpState, QpType, QueuePair, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion, empty_wc,
};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// ibv_rc_pingpong's buffer fill.
pub const FILL: u8 = 0x7b;
/// ibv_rc_pingpong's page size (its `-c` marks a byte per page).
pub const PAGE: usize = 4096;
/// The TCP port ibv_rc_pingpong listens on.
pub const PORT: u16 = 18515;

/// What a ping-pong run can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verb failed.
    #[error("{what}")]
    Verbs {
        /// What was being done.
        what: &'static str,
        /// The verb's error.
        #[source]
        source: verbs::Error,
    },
    /// A socket call failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The peer or the exchange went wrong (what it sent, a timeout, a closed connection).
    #[error("{0}")]
    Exchange(String),
    /// A work request completed in error.
    #[error("Failed status {status:?} for wr_id {wr_id} ({sent} sent, {received} received)")]
    Completion {
        /// Its status.
        status: WcStatus,
        /// Its work request id.
        wr_id: u64,
        /// Sends completed before it.
        sent: u32,
        /// Receives completed before it.
        received: u32,
    },
}

fn verbs_err(what: &'static str) -> impl FnOnce(verbs::Error) -> Error {
    move |source| Error::Verbs { what, source }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// One side's address as the exchange carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN.
    pub psn: u32,
    /// The GID.
    pub gid: Gid,
}

impl Dest {
    /// The 52 bytes the exchange sends.
    pub fn to_wire(self) -> [u8; 52] {
        let hex: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{hex}", self.lid, self.qpn, self.psn);
        let mut out = [0u8; 52];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// A peer's address from what it sent.
    pub fn parse(msg: &[u8]) -> Result<Dest, Error> {
        let bad = |why: String| Error::Exchange(why);
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let s = std::str::from_utf8(&msg[..end])
            .map_err(|_| bad("the peer's address is not text".into()))?;
        let f: Vec<&str> = s.split(':').collect();
        let [lid, qpn, psn, gid] = f[..] else {
            return Err(bad(format!("the peer sent {s:?}, not LID:QPN:PSN:GID")));
        };
        let num =
            |x: &str| u32::from_str_radix(x, 16).map_err(|_| bad(format!("bad number in {s:?}")));
        if gid.len() != 32 {
            return Err(bad(format!("the peer's GID {gid:?} is not 32 hex digits")));
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16)
                .map_err(|_| bad(format!("bad GID {gid:?}")))?;
        }
        Ok(Dest {
            lid: num(lid)? as u16,
            qpn: num(qpn)? & 0xff_ffff,
            psn: num(psn)? & 0xff_ffff,
            gid: Gid(g),
        })
    }

    /// rc_pingpong's line for it: `  local address:  LID 0x0000, QPN …, PSN …, GID …`.
    pub fn line(&self, what: &str) -> String {
        // As inet_ntop prints it: `::ffff:a.b.c.d` for IPv4, `::` for none.
        let gid = std::net::Ipv6Addr::from(self.gid.0);
        // rc_pingpong pads "local address:" to the width of "remote address:".
        let pad = if what == "local" { " " } else { "" };
        format!(
            "  {what} address: {pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {gid}",
            self.lid, self.qpn, self.psn
        )
    }
}

/// The pattern `--verify` sends in iteration `k`.
pub fn pattern(k: u32, i: usize) -> u8 {
    let x = (u64::from(k) << 32 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// ibv_rc_pingpong's initial buffer, with or without its `-c` page marks.
pub fn initial(size: usize, marks: bool) -> Vec<u8> {
    let mut b = vec![FILL; size];
    if marks {
        // rc_pingpong writes `i / page_size % sizeof(char)`: always 0.
        b.iter_mut().step_by(PAGE).for_each(|x| *x = 0);
    }
    b
}

/// How the server checks what it receives under --verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Not decided yet (before the first message).
    Unknown,
    /// A podnet client: iteration k carries pattern k.
    Pattern,
    /// ibv_rc_pingpong (or podnet without --verify): its first buffer, unchanged ever after.
    Echo,
}

/// `--verify`'s check of each message received: a client expects its own pattern back; a
/// server, from its first message, either a podnet client's patterns or ibv_rc_pingpong's
/// buffer echoed unchanged.
#[derive(Debug, Clone)]
pub struct Verifier {
    client: bool,
    expect: Expect,
    first: Vec<u8>,
}

impl Verifier {
    /// The check of a client (`true`) or a server.
    pub fn new(client: bool) -> Verifier {
        Verifier { client, expect: Expect::Unknown, first: Vec::new() }
    }

    /// Checks message `k`; the first difference, described.
    pub fn check(&mut self, k: u32, got: &[u8]) -> Option<String> {
        let diff = |want: &dyn Fn(usize) -> u8| {
            got.iter().enumerate().find(|(i, b)| **b != want(*i)).map(|(i, b)| {
                format!("message {k}: byte {i} is 0x{b:02x}, expected 0x{:02x}", want(i))
            })
        };
        if self.client {
            // The server echoes what we sent in this iteration.
            return diff(&|i| pattern(k, i));
        }
        if self.expect == Expect::Unknown {
            let rc = [initial(got.len(), false), initial(got.len(), true)];
            self.expect = if rc.iter().any(|b| b == got) { Expect::Echo } else { Expect::Pattern };
            self.first = got.to_vec();
        }
        match self.expect {
            Expect::Echo => diff(&|i| self.first[i]),
            _ => diff(&|i| pattern(k, i)),
        }
    }
}

/// A run's settings (ibv_rc_pingpong's options).
#[derive(Debug, Clone)]
pub struct Options {
    /// Message size, bytes (`-s`).
    pub size: usize,
    /// Round trips (`-n`).
    pub iters: u32,
    /// Receives kept posted (`-r`).
    pub rx_depth: u32,
    /// The path MTU (`-m`).
    pub path_mtu: Mtu,
    /// Completions by event (`-e`) rather than by polling.
    pub events: bool,
    /// The most to wait for the peer or a completion.
    pub timeout: Option<Duration>,
    /// Every byte checked (`--verify`).
    pub verify: bool,
    /// ibv_rc_pingpong's `-c`: page marks in the buffer, checked by the server at the end.
    pub chk: bool,
    /// The client (else the server).
    pub client: bool,
    /// The GID index (`-g`), else the device's.
    pub gid_index: Option<usize>,
}

/// What a run measured and found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Microseconds from the first send to the last completion.
    pub usec: f64,
    /// Bytes moved both ways.
    pub bytes: u64,
    /// Messages received.
    pub received: u32,
    /// Bytes `--verify` checked.
    pub verified: u64,
    /// `--verify`'s first difference.
    pub bad: Option<String>,
    /// `-c` on the server: the pages whose mark was not 0.
    pub invalid_pages: Vec<usize>,
}

/// One side's QP, buffer and completion queue.
pub struct Session {
    opts: Options,
    ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    qp: QueuePair,
    local: Dest,
    posted: u32,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("local", &self.local).finish()
    }
}

impl Session {
    /// Allocates on `ctx` what a run needs and posts the receives; the QP is in INIT.
    pub fn new(ctx: Context, opts: Options) -> Result<Session, Error> {
        let size = opts.size;
        let pd = ctx.alloc_pd().map_err(verbs_err("cannot allocate a PD"))?;
        // [0, size): the receive (and echo) buffer; [size, 2 size): the client's --verify
        // pattern.
        let mr = pd
            .reg_mr((2 * size).max(1), Access::LOCAL_WRITE)
            .map_err(verbs_err("cannot register the buffer"))?;
        // A client's buffer is what it sends first (ibv_rc_pingpong's bytes). A server's is
        // only received into (then echoed): it starts with bytes no peer sends, so a receive
        // that placed nothing cannot pass --verify by what was already there.
        let first = if opts.client { initial(size, opts.chk) } else { vec![!FILL; size] };
        mr.write(0, &first).map_err(verbs_err("cannot fill the buffer"))?;
        let channel = if opts.events {
            Some(ctx.create_comp_channel().map_err(verbs_err("cannot create a channel"))?)
        } else {
            None
        };
        let cq = ctx
            .create_cq(opts.rx_depth.saturating_add(1), channel.as_ref())
            .map_err(verbs_err("cannot create the CQ"))?;
        let mut init = QpInit::new(QpType::Rc, &cq);
        init.caps = QpCaps { max_send_wr: 1, max_recv_wr: opts.rx_depth, ..Default::default() };
        let qp = pd.create_qp(&init).map_err(verbs_err("cannot create the QP"))?;
        let m =
            ModifyQp { state: Some(QpState::Init), access: Some(Access(0)), ..Default::default() };
        qp.modify(&m).map_err(verbs_err("Failed to modify QP to INIT"))?;
        let gid = ctx
            .query_gid(opts.gid_index.unwrap_or(ctx.gid_index()))
            .map_err(verbs_err("cannot read the GID"))?
            .gid;
        let local = Dest { lid: 0, qpn: qp.qpn().get(), psn: random_psn(), gid };
        let mut s = Session { opts, ctx, mr, cq, channel, qp, local, posted: 0 };
        s.posted = s.post_recvs(s.opts.rx_depth)?;
        Ok(s)
    }

    /// This side's address.
    pub fn local(&self) -> Dest {
        self.local
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Connects the QP to `remote` (its GID's address, else `peer`'s), to RTS.
    pub fn connect(&self, remote: &Dest, peer: IpAddr) -> Result<(), Error> {
        let ip = remote.gid.to_ip().unwrap_or(peer);
        let path = Path::new(ip, verbs::Qpn::new(remote.qpn));
        let c = Connect {
            path_mtu: self.opts.path_mtu,
            ..Connect::new(path, Psn::new(self.local.psn), Psn::new(remote.psn))
        };
        self.qp.connect(&c).map_err(verbs_err("Failed to modify QP to RTR/RTS"))
    }

    fn post_recvs(&self, n: u32) -> Result<u32, Error> {
        let mut wrs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut r = RecvWr::new(RECV_WRID);
            if self.opts.size > 0 {
                r.sgl.push(self.mr.sge(0, self.opts.size).map_err(verbs_err("bad SGE"))?);
            }
            wrs.push(r);
        }
        self.qp.post_recv_batch(&wrs).map_err(verbs_err("Couldn't post receive"))?;
        Ok(n)
    }

    fn post_send(&self, k: u32) -> Result<(), Error> {
        let size = self.opts.size;
        let client_verify = self.opts.verify && self.opts.client;
        let off = if client_verify { size } else { 0 };
        if client_verify {
            let p: Vec<u8> = (0..size).map(|i| pattern(k, i)).collect();
            self.mr.write(off, &p).map_err(verbs_err("cannot write the pattern"))?;
        }
        let mut w = SendWr::new(SEND_WRID, SendOp::Send);
        if size > 0 {
            w.sgl.push(self.mr.sge(off, size).map_err(verbs_err("bad SGE"))?);
        }
        self.qp.post_send(w).map_err(verbs_err("Couldn't post send"))
    }

    /// Waits for completions: on the channel with events, else by polling.
    fn wait(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        let deadline = self.opts.timeout.map(|t| Instant::now() + t);
        loop {
            let n = self.cq.poll(out);
            if n > 0 {
                return Ok(n);
            }
            if let Some(ch) = &self.channel {
                self.cq.req_notify().map_err(verbs_err("Couldn't request CQ notification"))?;
                let n = self.cq.poll(out);
                if n > 0 {
                    return Ok(n);
                }
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if ch.get_cq_event(left).is_none() {
                    return Err(self.stalled());
                }
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.stalled());
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The ping-pong: `iters` round trips (the client sends first), `tick` told the
    /// messages received every 256; then the QP lingers until the peer is quiet.
    pub fn run(&mut self, tick: &mut dyn FnMut(u32)) -> Result<Outcome, Error> {
        let (iters, client) = (self.opts.iters, self.opts.client);
        let (mut scnt, mut rcnt) = (0u32, 0u32);
        let mut pending = RECV_WRID;
        let mut verifier = Verifier::new(client);
        let (mut verified, mut bad) = (0u64, None);
        let start = Instant::now();
        if client {
            self.post_send(0)?;
            pending |= SEND_WRID;
        }
        let mut wcs = [empty_wc(); 2];
        while rcnt < iters || scnt < iters {
            if rcnt % 256 == 0 {
                tick(rcnt);
            }
            let n = self.wait(&mut wcs)?;
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    let (status, wr_id) = (wc.status, wc.wr_id);
                    return Err(Error::Completion { status, wr_id, sent: scnt, received: rcnt });
                }
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        if self.opts.verify && bad.is_none() {
                            let got = self
                                .mr
                                .to_vec(0, self.opts.size)
                                .map_err(verbs_err("cannot read the buffer"))?;
                            bad = verifier.check(rcnt, &got);
                            verified += got.len() as u64;
                        }
                        self.posted -= 1;
                        if self.posted <= 1 {
                            self.posted += self.post_recvs(self.opts.rx_depth - self.posted)?;
                        }
                        rcnt += 1;
                    }
                    id => {
                        return Err(Error::Exchange(format!("completion for unknown wr_id {id}")));
                    }
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send(scnt)?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        let usec = start.elapsed().as_secs_f64() * 1e6;
        self.linger();
        let mut invalid_pages = Vec::new();
        if self.opts.chk && !client {
            // ibv_rc_pingpong's -c: the server looks at the first byte of each page, once.
            let buf =
                self.mr.to_vec(0, self.opts.size).map_err(verbs_err("cannot read the buffer"))?;
            invalid_pages = buf
                .iter()
                .step_by(PAGE)
                .enumerate()
                .filter(|(_, b)| **b != 0)
                .map(|(p, _)| p)
                .collect();
        }
        let bytes = self.opts.size as u64 * u64::from(iters) * 2;
        Ok(Outcome { usec, bytes, received: rcnt, verified, bad, invalid_pages })
    }

    /// The error of a wait that timed out, with the device's counters that moved: what a
    /// stalled exchange's cause is read from (lost packets, NAKs, retransmissions).
    fn stalled(&self) -> Error {
        Error::Exchange(format!(
            "no completion for {:?} (device counters: {})",
            self.opts.timeout.unwrap_or_default(),
            self.ctx.counters().moved()
        ))
    }

    /// Keeps the QP until the peer has been quiet for a while. Our last completion does not
    /// mean the peer has its own: if our ACK of its last message was lost, it retransmits,
    /// and a QP that is gone would leave it retrying forever (rxe treats `retry_cnt` 7 as
    /// infinite). So, as TCP's TIME_WAIT does, answer for 200 ms of quiet (at most 2 s).
    fn linger(&self) {
        const QUIET: Duration = Duration::from_millis(200);
        let t0 = Instant::now();
        let mut seen = self.ctx.counters().rcvd_pkts;
        let mut quiet_since = Instant::now();
        while quiet_since.elapsed() < QUIET && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(1));
            let now = self.ctx.counters().rcvd_pkts;
            if now != seen {
                seen = now;
                quiet_since = Instant::now();
            }
        }
    }
}

fn random_psn() -> u32 {
    // A PSN needs no secrecy; fall back to the clock if the random source is missing.
    let r = getrandom::u32().unwrap_or_else(|_| {
        let t =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.subsec_nanos() ^ std::process::id()
    });
    r & 0xff_ffff
}

fn read_msg(sock: &mut TcpStream, n: usize, what: &str) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; n];
    sock.read_exact(&mut buf).map_err(|e| {
        use std::io::ErrorKind as K;
        match e.kind() {
            // A read timeout shows as WouldBlock (Linux) or TimedOut.
            K::WouldBlock | K::TimedOut => {
                let t = sock.read_timeout().ok().flatten().unwrap_or_default();
                Error::Exchange(format!(
                    "no answer from the peer within {t:?} (--timeout) while waiting for {what}"
                ))
            }
            K::UnexpectedEof => {
                Error::Exchange(format!("the peer closed the connection before sending {what}"))
            }
            _ => Error::Io { what: format!("reading the peer's {what}"), source: e },
        }
    })?;
    Ok(buf)
}

/// The client's side of the exchange with the server at `host`:`port`; `connect` is called
/// with the server's address before the client says `done`.
pub fn client_exchange(
    host: &str,
    port: u16,
    local: &Dest,
    timeout: Option<Duration>,
    connect: &dyn Fn(&Dest, IpAddr) -> Result<(), Error>,
) -> Result<Dest, Error> {
    let addrs: Vec<SocketAddr> =
        (host, port).to_socket_addrs().map_err(io_err(format!("cannot resolve {host}")))?.collect();
    let t = timeout.unwrap_or(Duration::from_secs(10));
    let mut last = None;
    let mut sock = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, t) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = Some((a, e)),
        }
    }
    let Some(mut sock) = sock else {
        return Err(Error::Exchange(match last {
            Some((a, e)) => format!("Couldn't connect to {host}:{port} ({a}): {e}"),
            None => format!("{host} has no address"),
        }));
    };
    sock.set_read_timeout(Some(t)).map_err(io_err("setting the socket's timeout"))?;
    let peer = sock.peer_addr().map_err(io_err("reading the peer's address"))?.ip();
    sock.write_all(&local.to_wire()).map_err(io_err("sending the local address"))?;
    let remote = Dest::parse(&read_msg(&mut sock, 52, "its address")?)?;
    sock.write_all(b"done\0").map_err(io_err("sending done"))?;
    connect(&remote, peer)?;
    Ok(remote)
}

/// The server's side of the exchange, listening on `ip`:`port` (the device's address);
/// `connect` is called with the client's address before the server answers.
pub fn server_exchange(
    ip: IpAddr,
    port: u16,
    local: &Dest,
    timeout: Option<Duration>,
    connect: &dyn Fn(&Dest, IpAddr) -> Result<(), Error>,
) -> Result<Dest, Error> {
    let at = SocketAddr::new(ip, port);
    let listener = TcpListener::bind(at).map_err(io_err(format!("cannot listen on {at}")))?;
    let (mut sock, peer) = match timeout {
        None => listener.accept().map_err(io_err("accepting the client"))?,
        Some(t) => {
            listener.set_nonblocking(true).map_err(io_err("setting the listener"))?;
            let deadline = Instant::now() + t;
            loop {
                match listener.accept() {
                    Ok(x) => break x,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            return Err(Error::Exchange(format!(
                                "no client connected within {t:?}"
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(io_err("accepting the client")(e)),
                }
            }
        }
    };
    sock.set_nonblocking(false).map_err(io_err("setting the socket"))?;
    sock.set_read_timeout(Some(timeout.unwrap_or(Duration::from_secs(10))))
        .map_err(io_err("setting the socket's timeout"))?;
    let remote = Dest::parse(&read_msg(&mut sock, 52, "its address")?)?;
    connect(&remote, peer.ip())?;
    sock.write_all(&local.to_wire()).map_err(io_err("sending the local address"))?;
    // The client's "done" says it has our address; like rc_pingpong, don't insist on it.
    let mut done = [0u8; 5];
    let _ = sock.read_exact(&mut done);
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address reads back as written, in rc_pingpong's 52 bytes.
    #[test]
    fn an_address_reads_back_as_written() {
        let gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7]);
        let d = Dest { lid: 0, qpn: 0x11, psn: 0xabcdef, gid };
        let w = d.to_wire();
        assert_eq!(&w[..16], b"0000:000011:abcd");
        assert_eq!(Dest::parse(&w).unwrap(), d);
        assert!(d.line("local").ends_with("GID ::ffff:10.0.0.7"), "{}", d.line("local"));
        for bad in [&b"0000:11:22"[..], b"zz:000011:abcdef:00000000000000000000ffff0a000007"] {
            assert!(matches!(Dest::parse(bad), Err(Error::Exchange(_))), "{bad:?}");
        }
    }

    /// The checker fails a flipped byte in each of its modes: a client's pattern, a podnet
    /// client's patterns at the server, ibv_rc_pingpong's buffer echoed.
    #[test]
    fn verify_finds_a_flipped_byte_in_every_mode() {
        let size = 5000;
        let mut client = Verifier::new(true);
        let mut m: Vec<u8> = (0..size).map(|i| pattern(3, i)).collect();
        assert_eq!(client.check(3, &m), None);
        m[4097] ^= 4;
        assert!(client.check(3, &m).unwrap().contains("message 3: byte 4097"));
        let mut server = Verifier::new(false);
        let p0: Vec<u8> = (0..size).map(|i| pattern(0, i)).collect();
        assert_eq!(server.check(0, &p0), None);
        let mut p1: Vec<u8> = (0..size).map(|i| pattern(1, i)).collect();
        p1[0] ^= 1;
        assert!(server.check(1, &p1).is_some(), "a podnet client's pattern, damaged");
        let mut echo = Verifier::new(false);
        let rc = initial(size, true);
        assert_eq!(echo.check(0, &rc), None);
        assert_eq!(echo.check(1, &rc), None, "ibv_rc_pingpong's buffer, unchanged");
        let mut bad = rc.clone();
        bad[10] = 0;
        assert!(echo.check(2, &bad).unwrap().contains("byte 10"));
    }
}
