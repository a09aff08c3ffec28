//! A verbs endpoint driven line by line over stdin/stdout: the far side of the verbs crate's
//! two-process tests, and a handy peer when debugging interop by hand.
//!
//! Each command is one line of words; each answer is one line, `ok …` or `err <message>`.
//!
//! ```text
//! open <device> <busy|event> [raw|udp]     -> ok <ip>   (IPv4 receive path)
//! qp <rc|uc|ud> <buf-bytes> [srq]          -> ok <qpn> <addr> <rkey>
//! connect <ip> <qpn> <sq-psn> <rq-psn> <mtu> <timeout> <retry> <rnr-retry> <min-rnr>  -> ok
//! recv <first-wr-id> <count> <len> <stride>  -> ok        (receive i at offset i*stride)
//! fill <off> <len> <seed>                  -> ok          (pattern bytes, see `pattern`)
//! digest <off> <len> [<off> <len> …]       -> ok <crc32> …
//! word <off>                               -> ok <u64>     (native-endian word)
//! wait <count> <timeout-ms>                -> ok <wr_id>:<status>:<opcode>:<len>:<imm|-> …
//! counters                                 -> ok <name>=<value> …
//! events                                   -> ok <event> …
//! quit                                     -> (exits)
//! ```

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::time::Duration;

use providers::{ContextOptions, Ipv4Receive, Progress};
use verbs::{
    Access, CompletionQueue, Connect, Context, MemoryRegion, ModifyQp, Mtu, Path, ProtectionDomain,
    Psn, QKey, QpCaps, QpInit, QpState, QpType, Qpn, QueuePair, RecvWr, SharedReceiveQueue,
    empty_wc,
};

/// The Q_Key of every UD QP here.
const QKEY: u32 = 0x1111_1111;

struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    srq: Option<SharedReceiveQueue>,
    cq: CompletionQueue,
    _pd: ProtectionDomain,
}

/// The test pattern: byte `k` of a buffer filled with `seed`.
fn pattern(seed: u64, k: usize) -> u8 {
    let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k as u64);
    (x ^ (x >> 29) ^ (x >> 7)) as u8
}

fn words<T: std::str::FromStr>(w: &[&str]) -> Result<Vec<T>, String> {
    w.iter().map(|s| s.parse::<T>().map_err(|_| format!("bad number {s:?}"))).collect()
}

struct Peer {
    ctx: Option<Context>,
    side: Option<Side>,
}

impl Peer {
    fn ctx(&self) -> Result<&Context, String> {
        self.ctx.as_ref().ok_or_else(|| "no device: open first".to_string())
    }

    fn side(&self) -> Result<&Side, String> {
        self.side.as_ref().ok_or_else(|| "no QP: qp first".to_string())
    }

    fn run(&mut self, line: &str) -> Result<String, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let e = |x: verbs::Error| x.to_string();
        match w.as_slice() {
            ["open", dev, progress, rest @ ..] => {
                let progress = if *progress == "busy" { Progress::Busy } else { Progress::Event };
                let ipv4_receive = match rest {
                    ["udp"] => Ipv4Receive::Udp,
                    ["raw"] => Ipv4Receive::Raw,
                    _ => Ipv4Receive::Auto,
                };
                let ctx = providers::open(
                    dev,
                    &ContextOptions { progress, ipv4_receive, ..Default::default() },
                )
                .map_err(e)?;
                let ip = ctx.ip();
                self.ctx = Some(ctx);
                Ok(ip.to_string())
            }
            ["qp", ty, len, rest @ ..] => {
                let ctx = self.ctx()?;
                let qp_type = match *ty {
                    "rc" => QpType::Rc,
                    "uc" => QpType::Uc,
                    "ud" => QpType::Ud,
                    _ => return Err(format!("bad QP type {ty}")),
                };
                let len: usize = len.parse().map_err(|_| "bad length")?;
                let pd = ctx.alloc_pd().map_err(e)?;
                let all = Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC;
                let mr = pd.reg_mr(len, all).map_err(e)?;
                let cq = ctx.create_cq(4096, None).map_err(e)?;
                let srq =
                    if rest == ["srq"] { Some(pd.create_srq(4096).map_err(e)?) } else { None };
                let mut init = QpInit::new(qp_type, &cq);
                init.caps = QpCaps { max_send_wr: 256, max_recv_wr: 4096, ..Default::default() };
                init.srq = srq.as_ref();
                let qp = pd.create_qp(&init).map_err(e)?;
                let m = ModifyQp {
                    state: Some(QpState::Init),
                    access: Some(all),
                    qkey: Some(QKey(QKEY)),
                    ..Default::default()
                };
                qp.modify(&m).map_err(e)?;
                let out = format!("{} {} {}", qp.qpn().get(), mr.addr(), mr.rkey().0);
                self.side = Some(Side { qp, mr, srq, cq, _pd: pd });
                Ok(out)
            }
            ["connect", ip, qpn, rest @ ..] => {
                let s = self.side()?;
                let v: Vec<u32> = words(rest)?;
                let [sq, rq, m, timeout, retry, rnr, min_rnr] = v[..] else {
                    return Err("connect needs 9 arguments".into());
                };
                let ip = ip.parse().map_err(|_| "bad IP")?;
                let qpn = Qpn::new(qpn.parse().map_err(|_| "bad QPN")?);
                let c = Connect {
                    path_mtu: Mtu::from_bytes(m).ok_or(format!("bad MTU {m}"))?,
                    timeout: timeout as u8,
                    retry_cnt: retry as u8,
                    rnr_retry: rnr as u8,
                    min_rnr_timer: min_rnr as u8,
                    max_rd_atomic: 16,
                    max_dest_rd_atomic: 16,
                    ..Connect::new(Path::new(ip, qpn), Psn::new(sq), Psn::new(rq))
                };
                s.qp.connect(&c).map_err(e)?;
                Ok(String::new())
            }
            ["recv", rest @ ..] => {
                let s = self.side()?;
                let v: Vec<usize> = words(rest)?;
                let [first, count, len, stride] = v[..] else {
                    return Err("recv needs 4 arguments".into());
                };
                for i in first..first + count {
                    let mut r = RecvWr::new(i as u64);
                    if len > 0 {
                        let sge = s.mr.sge(i * stride, len).map_err(e)?;
                        r.sgl.push(sge);
                    }
                    match &s.srq {
                        Some(srq) => srq.post_recv(r).map_err(e)?,
                        None => s.qp.post_recv(r).map_err(e)?,
                    }
                }
                Ok(String::new())
            }
            ["fill", off, len, seed] => {
                let s = self.side()?;
                let [off, len]: [usize; 2] = [off.parse().unwrap_or(0), len.parse().unwrap_or(0)];
                let seed: u64 = seed.parse().map_err(|_| "bad seed")?;
                let data: Vec<u8> = (0..len).map(|k| pattern(seed, k)).collect();
                s.mr.write(off, &data).map_err(e)?;
                Ok(String::new())
            }
            ["digest", rest @ ..] => {
                let s = self.side()?;
                let v: Vec<usize> = words(rest)?;
                let mut out = Vec::new();
                for p in v.chunks(2) {
                    let [off, len] = p else { return Err("digest takes pairs".into()) };
                    let bytes = s.mr.to_vec(*off, *len).map_err(e)?;
                    out.push(crc32fast::hash(&bytes).to_string());
                }
                Ok(out.join(" "))
            }
            ["word", off] => {
                let s = self.side()?;
                let off: usize = off.parse().map_err(|_| "bad offset")?;
                let b = s.mr.to_vec(off, 8).map_err(e)?;
                Ok(u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])).to_string())
            }
            ["wait", count, ms] => {
                let s = self.side()?;
                let count: usize = count.parse().map_err(|_| "bad count")?;
                let ms: u64 = ms.parse().map_err(|_| "bad timeout")?;
                let deadline = std::time::Instant::now() + Duration::from_millis(ms);
                let mut out = Vec::new();
                let mut wc = [empty_wc(); 32];
                while out.len() < count && std::time::Instant::now() < deadline {
                    let n = s.cq.poll(&mut wc[..(count - out.len()).min(32)]);
                    for c in &wc[..n] {
                        let imm = c.imm.map_or("-".to_string(), |i| i.to_string());
                        let op = format!("{:?}", c.opcode);
                        out.push(format!("{}:{:?}:{op}:{}:{imm}", c.wr_id, c.status, c.byte_len));
                    }
                    if n == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                Ok(out.join(" "))
            }
            ["counters"] => {
                let c = self.ctx()?.counters();
                Ok(c.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(" "))
            }
            ["events"] => {
                let ctx = self.ctx()?;
                let mut out = Vec::new();
                while let Some(ev) = ctx.get_async_event(Some(Duration::ZERO)) {
                    out.push(format!("{ev:?}").replace(' ', ""));
                }
                Ok(out.join(" "))
            }
            _ => Err(format!("unknown command {line:?}")),
        }
    }
}

fn main() {
    let mut peer = Peer { ctx: None, side: None };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "quit" {
            break;
        }
        let reply = match peer.run(&line) {
            Ok(s) if s.is_empty() => "ok".to_string(),
            Ok(s) => format!("ok {s}"),
            Err(m) => format!("err {m}"),
        };
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}
