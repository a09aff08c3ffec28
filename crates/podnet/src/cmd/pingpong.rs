//! `podnet pingpong`: ibv_rc_pingpong's protocol, options and output on podnet's verbs.
//!
//! The TCP exchange (rdma-core `libibverbs/examples/rc_pingpong.c`, seen in
//! `testdata/rxe/ibv_rc_pingpong-*.tcp.txt`): the client sends `"%04x:%06x:%06x:%s\0"` (LID,
//! QPN, PSN, GID as 32 hex digits; 52 bytes), the server connects its QP and answers the same
//! way, then the client sends `"done\0"`. Both sides keep `rx_depth` receives posted on one
//! buffer and send from that same buffer, so a message bounces back what it received.

use std::io::{IsTerminal, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use providers::{ContextOptions, Progress};
use serde_json::json;
use verbs::{
    Access, CompletionChannel, CompletionQueue, Connect, Context, Gid, MemoryRegion, ModifyQp, Mtu,
    Path, Psn, QpCaps, QpInit, QpState, QpType, QueuePair, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion, empty_wc,
};

use crate::cli::PingpongArgs;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// ibv_rc_pingpong's buffer fill and page size.
const FILL: u8 = 0x7b;
const PAGE: usize = 4096;

/// One side's address as the exchange carries it.
#[derive(Debug, Clone, Copy)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Gid,
}

impl Dest {
    fn to_wire(self) -> [u8; 52] {
        let hex: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{hex}", self.lid, self.qpn, self.psn);
        let mut out = [0u8; 52];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    fn parse(msg: &[u8]) -> anyhow::Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let s = std::str::from_utf8(&msg[..end]).context("the peer's address is not text")?;
        let f: Vec<&str> = s.split(':').collect();
        let [lid, qpn, psn, gid] = f[..] else {
            bail!("the peer sent {s:?}, not LID:QPN:PSN:GID");
        };
        let num =
            |x: &str| u32::from_str_radix(x, 16).with_context(|| format!("bad number in {s:?}"));
        ensure!(gid.len() == 32, "the peer's GID {gid:?} is not 32 hex digits");
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16).context("bad GID")?;
        }
        Ok(Dest {
            lid: num(lid)? as u16,
            qpn: num(qpn)? & 0xff_ffff,
            psn: num(psn)? & 0xff_ffff,
            gid: Gid(g),
        })
    }

    fn line(&self, what: &str) -> String {
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
fn pattern(k: u32, i: usize) -> u8 {
    let x = (u64::from(k) << 32 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// ibv_rc_pingpong's initial buffer, with or without its `-c` page marks.
fn initial(size: usize, marks: bool) -> Vec<u8> {
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

struct Session {
    args: PingpongArgs,
    ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    qp: QueuePair,
    size: usize,
    timeout: Option<Duration>,
}

/// Runs `podnet pingpong`.
pub(crate) fn run(args: &PingpongArgs) -> anyhow::Result<ExitCode> {
    ensure!(args.dev.ib_port == 1, "-i {}: the device has one port, 1", args.dev.ib_port);
    ensure!(args.iters > 0, "--iters must be at least 1");
    ensure!(args.rx_depth >= 2, "--rx-depth must be at least 2");
    let Some(path_mtu) = Mtu::from_bytes(args.mtu) else {
        bail!("--mtu must be 256, 512, 1024, 2048 or 4096, not {}", args.mtu);
    };
    let timeout = match args.timeout {
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
        Some(t) => bail!("--timeout must be a positive number of seconds, not {t}"),
        None => None,
    };
    let progress = if args.events { Progress::Event } else { Progress::Busy };
    let opts = ContextOptions { progress, gid_index: args.gid_idx, ..Default::default() };
    let ctx = super::open_device(&args.dev, &opts)?;
    // What the device takes, before anything is allocated.
    let lim = ctx.query_device()?;
    ensure!(
        args.rx_depth <= lim.max_qp_wr,
        "--rx-depth {}: {} takes at most {} work requests per queue",
        args.rx_depth,
        ctx.device_name(),
        lim.max_qp_wr
    );
    let size = args.size as usize;
    let pd = ctx.alloc_pd()?;
    // [0, size): the receive (and echo) buffer; [size, 2 size): the client's --verify pattern.
    let mr = pd.reg_mr((2 * size).max(1), Access::LOCAL_WRITE)?;
    // A client's buffer is what it sends first (ibv_rc_pingpong's bytes). A server's is
    // only received into (then echoed): it starts with bytes no peer sends, so a receive
    // that placed nothing cannot pass --verify by what was already there.
    let first = match args.server {
        Some(_) => initial(size, args.chk),
        None => vec![!FILL; size],
    };
    mr.write(0, &first)?;
    let channel = if args.events { Some(ctx.create_comp_channel()?) } else { None };
    let cq = ctx.create_cq(args.rx_depth.saturating_add(1), channel.as_ref())?;
    let mut init = QpInit::new(QpType::Rc, &cq);
    init.caps = QpCaps { max_send_wr: 1, max_recv_wr: args.rx_depth, ..Default::default() };
    let qp = pd.create_qp(&init)?;
    let m = ModifyQp { state: Some(QpState::Init), access: Some(Access(0)), ..Default::default() };
    qp.modify(&m)?;
    let gid = ctx.query_gid(args.gid_idx.unwrap_or(ctx.gid_index()))?.gid;
    let mut s = Session { args: args.clone(), ctx, mr, cq, channel, qp, size, timeout };
    let posted = s.post_recvs(args.rx_depth)?;
    let local = Dest { lid: 0, qpn: s.qp.qpn().get(), psn: random_psn(), gid };
    let connect = |remote: &Dest, peer: IpAddr| -> anyhow::Result<()> {
        let ip = remote.gid.to_ip().unwrap_or(peer);
        let path = Path::new(ip, verbs::Qpn::new(remote.qpn));
        let c =
            Connect { path_mtu, ..Connect::new(path, Psn::new(local.psn), Psn::new(remote.psn)) };
        s.qp.connect(&c).context("Failed to modify QP to RTR/RTS")
    };
    let remote = match &args.server {
        Some(host) => client_exchange(host, args.dev.port, &local, timeout, &connect)?,
        None => server_exchange(s.ctx.ip(), args.dev.port, &local, timeout, &connect)?,
    };
    if !args.json {
        writeln!(std::io::stdout(), "{}", local.line("local"))?;
        writeln!(std::io::stdout(), "{}", remote.line("remote"))?;
    }
    s.run_loop(posted, &local, &remote)
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

fn read_msg(sock: &mut TcpStream, n: usize, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    sock.read_exact(&mut buf).map_err(|e| {
        use std::io::ErrorKind as K;
        match e.kind() {
            // A read timeout shows as WouldBlock (Linux) or TimedOut.
            K::WouldBlock | K::TimedOut => {
                let t = sock.read_timeout().ok().flatten().unwrap_or_default();
                anyhow::anyhow!(
                    "no answer from the peer within {t:?} (--timeout) while waiting for {what}"
                )
            }
            K::UnexpectedEof => {
                anyhow::anyhow!("the peer closed the connection before sending {what}")
            }
            _ => anyhow::Error::new(e).context(format!("reading the peer's {what}")),
        }
    })?;
    Ok(buf)
}

fn client_exchange(
    host: &str,
    port: u16,
    local: &Dest,
    timeout: Option<Duration>,
    connect: &dyn Fn(&Dest, IpAddr) -> anyhow::Result<()>,
) -> anyhow::Result<Dest> {
    let addrs: Vec<SocketAddr> =
        (host, port).to_socket_addrs().with_context(|| format!("cannot resolve {host}"))?.collect();
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
        match last {
            Some((a, e)) => bail!("Couldn't connect to {host}:{port} ({a}): {e}"),
            None => bail!("{host} has no address"),
        }
    };
    sock.set_read_timeout(Some(t))?;
    let peer = sock.peer_addr()?.ip();
    sock.write_all(&local.to_wire()).context("sending the local address")?;
    let remote = Dest::parse(&read_msg(&mut sock, 52, "its address")?)?;
    sock.write_all(b"done\0").context("sending done")?;
    connect(&remote, peer)?;
    Ok(remote)
}

fn server_exchange(
    ip: IpAddr,
    port: u16,
    local: &Dest,
    timeout: Option<Duration>,
    connect: &dyn Fn(&Dest, IpAddr) -> anyhow::Result<()>,
) -> anyhow::Result<Dest> {
    let listener = TcpListener::bind((ip, port))
        .with_context(|| format!("cannot listen on {}", SocketAddr::new(ip, port)))?;
    let (mut sock, peer) = match timeout {
        None => listener.accept()?,
        Some(t) => {
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + t;
            loop {
                match listener.accept() {
                    Ok(x) => break x,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        ensure!(Instant::now() < deadline, "no client connected within {t:?}");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(timeout.unwrap_or(Duration::from_secs(10))))?;
    let remote = Dest::parse(&read_msg(&mut sock, 52, "its address")?)?;
    connect(&remote, peer.ip())?;
    sock.write_all(&local.to_wire()).context("sending the local address")?;
    // The client's "done" says it has our address; like rc_pingpong, don't insist on it.
    let mut done = [0u8; 5];
    let _ = sock.read_exact(&mut done);
    Ok(remote)
}

impl Session {
    fn post_recvs(&self, n: u32) -> anyhow::Result<u32> {
        let mut wrs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut r = RecvWr::new(RECV_WRID);
            if self.size > 0 {
                r.sgl.push(self.mr.sge(0, self.size)?);
            }
            wrs.push(r);
        }
        self.qp.post_recv_batch(&wrs)?;
        Ok(n)
    }

    fn post_send(&self, k: u32) -> anyhow::Result<()> {
        let client_verify = self.args.verify && self.args.server.is_some();
        let off = if client_verify { self.size } else { 0 };
        if client_verify {
            let p: Vec<u8> = (0..self.size).map(|i| pattern(k, i)).collect();
            self.mr.write(off, &p)?;
        }
        let mut w = SendWr::new(SEND_WRID, SendOp::Send);
        if self.size > 0 {
            w.sgl.push(self.mr.sge(off, self.size)?);
        }
        self.qp.post_send(w)?;
        Ok(())
    }

    /// Waits for completions: on the channel with -e, else by polling.
    fn wait(&self, out: &mut [WorkCompletion]) -> anyhow::Result<usize> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            let n = self.cq.poll(out);
            if n > 0 {
                return Ok(n);
            }
            if let Some(ch) = &self.channel {
                self.cq.req_notify()?;
                let n = self.cq.poll(out);
                if n > 0 {
                    return Ok(n);
                }
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if ch.get_cq_event(left).is_none() {
                    bail!(self.stalled());
                }
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                bail!(self.stalled());
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn run_loop(
        &mut self,
        mut routs: u32,
        local: &Dest,
        remote: &Dest,
    ) -> anyhow::Result<ExitCode> {
        let iters = self.args.iters;
        let client = self.args.server.is_some();
        let (mut scnt, mut rcnt) = (0u32, 0u32);
        let mut pending = RECV_WRID;
        let mut expect = Expect::Unknown;
        let mut first: Vec<u8> = Vec::new();
        let mut verified = 0u64;
        let mut bad: Option<String> = None;
        let start = Instant::now();
        if client {
            self.post_send(0)?;
            pending |= SEND_WRID;
        }
        let mut wcs = [empty_wc(); 2];
        // A progress bar on stderr for runs that last: shown after 2 s, to a terminal only.
        let bar =
            ProgressBar::with_draw_target(Some(u64::from(iters)), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} iters {per_sec} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let mut bar_shown = false;
        while rcnt < iters || scnt < iters {
            if rcnt % 256 == 0 {
                if !bar_shown
                    && start.elapsed() > Duration::from_secs(2)
                    && std::io::stderr().is_terminal()
                {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar_shown = true;
                }
                bar.set_position(u64::from(rcnt));
            }
            let n = self.wait(&mut wcs)?;
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    eprintln!(
                        "podnet: Failed status {:?} for wr_id {} ({} sent, {} received)",
                        wc.status, wc.wr_id, scnt, rcnt
                    );
                    return Ok(ExitCode::from(1));
                }
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        if self.args.verify && bad.is_none() {
                            let got = self.mr.to_vec(0, self.size)?;
                            bad = self.check(rcnt, &got, client, &mut expect, &mut first);
                            verified += got.len() as u64;
                        }
                        routs -= 1;
                        if routs <= 1 {
                            routs += self.post_recvs(self.args.rx_depth - routs)?;
                        }
                        rcnt += 1;
                    }
                    id => bail!("completion for unknown wr_id {id}"),
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send(scnt)?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        let usec = start.elapsed().as_secs_f64() * 1e6;
        bar.finish_and_clear();
        self.linger();
        if self.args.chk && !client {
            // ibv_rc_pingpong's -c: the server looks at the first byte of each page, once.
            let buf = self.mr.to_vec(0, self.size)?;
            for (page, b) in buf.iter().step_by(PAGE).enumerate() {
                if *b != 0 {
                    writeln!(std::io::stdout(), "invalid data in page {page}")?;
                }
            }
        }
        let bytes = self.size as u64 * u64::from(iters) * 2;
        let counters = self.ctx.counters();
        if self.args.json {
            let c: serde_json::Map<String, serde_json::Value> =
                counters.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            let dest = |d: &Dest| {
                json!({"lid": d.lid, "qpn": d.qpn, "psn": d.psn,
                       "gid": d.gid.to_ip().map(|i| i.to_string())})
            };
            let v = json!({
                "device": self.ctx.device_name(),
                "role": if client { "client" } else { "server" },
                "local": dest(local),
                "remote": dest(remote),
                "size": self.size,
                "iters": iters,
                "bytes": bytes,
                "seconds": usec / 1e6,
                "mbit_per_sec": bytes as f64 * 8.0 / usec,
                "usec_per_iter": usec / f64::from(iters),
                "progress": if self.args.events { "event" } else { "busy" },
                "verify": self.args.verify.then(|| json!({
                    "bytes_checked": verified,
                    "ok": bad.is_none(),
                    "error": bad,
                })),
                "counters": c,
            });
            writeln!(std::io::stdout(), "{v}")?;
        } else {
            writeln!(
                std::io::stdout(),
                "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
                usec / 1e6,
                bytes as f64 * 8.0 / usec
            )?;
            writeln!(
                std::io::stdout(),
                "{iters} iters in {:.2} seconds = {:.2} usec/iter",
                usec / 1e6,
                usec / f64::from(iters)
            )?;
            if self.args.verify && bad.is_none() {
                writeln!(std::io::stdout(), "verified {verified} bytes in {rcnt} messages")?;
            }
        }
        if let Some(b) = bad {
            eprintln!("podnet: --verify: {b}");
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    }

    /// The error of a wait that timed out, with the device's counters that moved: what a
    /// stalled exchange's cause is read from (lost packets, NAKs, retransmissions).
    fn stalled(&self) -> String {
        format!(
            "no completion for {:?} (device counters: {})",
            self.timeout.unwrap_or_default(),
            self.ctx.counters().moved()
        )
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

    /// Checks message `k`; returns a description of the first difference.
    fn check(
        &self,
        k: u32,
        got: &[u8],
        client: bool,
        expect: &mut Expect,
        first: &mut Vec<u8>,
    ) -> Option<String> {
        let diff = |want: &dyn Fn(usize) -> u8| {
            got.iter().enumerate().find(|(i, b)| **b != want(*i)).map(|(i, b)| {
                format!("message {k}: byte {i} is 0x{b:02x}, expected 0x{:02x}", want(i))
            })
        };
        if client {
            // The server echoes what we sent in this iteration.
            return diff(&|i| pattern(k, i));
        }
        if *expect == Expect::Unknown {
            let rc = [initial(got.len(), false), initial(got.len(), true)];
            *expect = if rc.iter().any(|b| b == got) { Expect::Echo } else { Expect::Pattern };
            *first = got.to_vec();
        }
        match expect {
            Expect::Echo => diff(&|i| first[i]),
            _ => diff(&|i| pattern(k, i)),
        }
    }
}
