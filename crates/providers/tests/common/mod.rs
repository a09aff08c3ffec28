//! Test plumbing: a private network namespace per test, a peer process driven over pipes, and
//! in-process sides built with the verbs API.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use providers::{ContextOptions, Progress};
use verbs::{
    Access, CompletionChannel, CompletionQueue, Context, MemoryRegion, ModifyQp, Mtu, Path,
    ProtectionDomain, Psn, QKey, QpCaps, QpInit, QpState, QpType, Qpn, QueuePair, WorkCompletion,
    empty_wc,
};

/// The Q_Key both sides' UD QPs use (the peer binary's).
pub const QKEY: u32 = 0x1111_1111;

/// Byte `k` of a buffer filled with `seed` (the peer binary computes the same).
pub fn pattern(seed: u64, k: usize) -> u8 {
    let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k as u64);
    (x ^ (x >> 29) ^ (x >> 7)) as u8
}

/// `len` bytes of the pattern.
pub fn pattern_bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| pattern(seed, k)).collect()
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} could not run ({e}); scripts/deps.sh installs it"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The addresses of the two test hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// 127.0.0.1 and 127.0.0.2.
    V4,
    /// fd00::1 and fd00::2 on lo.
    V6,
}

impl Family {
    pub fn ips(self) -> (IpAddr, IpAddr) {
        match self {
            Family::V4 => ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()),
            Family::V6 => ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap()),
        }
    }
}

/// Moves the calling thread (and the processes and threads it starts) into a new network
/// namespace with lo up, fd00::1 and fd00::2 on it, and — if `loss_percent` > 0 — an nftables
/// rule dropping that share of incoming RoCE datagrams. Needs root (CI runs as root).
pub fn private_netns(loss_percent: u32) {
    // SAFETY: unshare has no memory-safety preconditions; it affects only this thread.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET) failed: {} — these tests need root",
        std::io::Error::last_os_error()
    );
    run("ip", &["link", "set", "lo", "up"]);
    for a in ["fd00::1/128", "fd00::2/128"] {
        run("ip", &["-6", "addr", "add", a, "dev", "lo", "nodad"]);
    }
    if loss_percent > 0 {
        let rules = format!(
            "table inet podnet_loss {{\n chain input {{\n  type filter hook input priority 0;\n  \
             udp dport 4791 numgen random mod 100 < {loss_percent} counter drop\n }}\n}}\n"
        );
        let path = std::env::temp_dir().join(format!("podnet-loss-{}.nft", std::process::id()));
        std::fs::write(&path, rules).unwrap();
        run("nft", &["-f", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(path);
    }
}

/// Packets the loss rule dropped so far.
pub fn nft_dropped() -> u64 {
    let out = Command::new("nft").args(["list", "table", "inet", "podnet_loss"]).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The peer process (`podnet-verbs-peer`), driven over its stdin/stdout.
pub struct Remote {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Remote {
    pub fn spawn() -> Remote {
        let mut child = Command::new(env!("CARGO_BIN_EXE_podnet-verbs-peer"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start podnet-verbs-peer");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Remote { child, stdin, stdout }
    }

    /// Runs a command; panics with the peer's message if it fails.
    pub fn cmd(&mut self, line: &str) -> Vec<String> {
        writeln!(self.stdin, "{line}").expect("peer alive");
        let mut reply = String::new();
        self.stdout.read_line(&mut reply).expect("peer reply");
        let mut w = reply.split_whitespace().map(str::to_string);
        match w.next().as_deref() {
            Some("ok") => w.collect(),
            _ => panic!("peer: {line:?} -> {}", reply.trim()),
        }
    }

    pub fn counter(&mut self, name: &str) -> u64 {
        let all = self.cmd("counters");
        all.iter()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no counter {name} in {all:?}"))
    }

    /// Kills the peer (a dead host).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peer's side of a connection.
#[derive(Debug, Clone, Copy)]
pub struct RemoteQp {
    pub qpn: Qpn,
    pub addr: u64,
    pub rkey: u32,
}

impl Remote {
    pub fn open(&mut self, ip: IpAddr) {
        self.cmd(&format!("open soft:{ip} event"));
    }

    pub fn qp(&mut self, ty: &str, len: usize, srq: bool) -> RemoteQp {
        let v = self.cmd(&format!("qp {ty} {len}{}", if srq { " srq" } else { "" }));
        RemoteQp {
            qpn: Qpn::new(v[0].parse().unwrap()),
            addr: v[1].parse().unwrap(),
            rkey: v[2].parse().unwrap(),
        }
    }

    /// Completions as (wr_id, status, opcode, byte_len, imm).
    pub fn wait(&mut self, n: usize, ms: u64) -> Vec<(u64, String, String, u32, Option<u32>)> {
        self.cmd(&format!("wait {n} {ms}"))
            .iter()
            .map(|w| {
                let f: Vec<&str> = w.split(':').collect();
                (
                    f[0].parse().unwrap(),
                    f[1].to_string(),
                    f[2].to_string(),
                    f[3].parse().unwrap(),
                    f[4].parse().ok(),
                )
            })
            .collect()
    }
}

/// Connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub psn_local: u32,
    pub psn_remote: u32,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: Mtu::Mtu1024,
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            psn_local: 0x12_3456,
            psn_remote: 0xff_fff0,
        }
    }
}

impl Conn {
    /// The same connection seen from the other end (the PSNs swap).
    pub fn reversed(&self) -> Conn {
        Conn { psn_local: self.psn_remote, psn_remote: self.psn_local, ..*self }
    }
}

/// Two in-process RC sides on 127.0.0.1 and 127.0.0.2 (event mode, `len`-byte buffers),
/// connected to each other.
pub fn local_pair(len: usize) -> (Local, Local) {
    let a = Local::new("127.0.0.1".parse().unwrap(), Progress::Event, QpType::Rc, len);
    let b = Local::new("127.0.0.2".parse().unwrap(), Progress::Event, QpType::Rc, len);
    let c = Conn::default();
    a.connect(b.ctx.ip(), b.qp.qpn(), &c);
    b.connect(a.ctx.ip(), a.qp.qpn(), &c.reversed());
    (a, b)
}

/// An in-process side: context, PD, CQ (with a channel), one buffer with every right, a QP.
pub struct Local {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub channel: CompletionChannel,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    pub qp: QueuePair,
}

pub const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

impl Local {
    pub fn new(ip: IpAddr, progress: Progress, qp_type: QpType, len: usize) -> Local {
        Local::with_options(ip, &ContextOptions { progress, ..Default::default() }, qp_type, len)
    }

    pub fn with_options(ip: IpAddr, opts: &ContextOptions, qp_type: QpType, len: usize) -> Local {
        let ctx = providers::open_soft(ip, 4791, opts).expect("open soft device");
        let pd = ctx.alloc_pd().unwrap();
        let channel = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq(4096, Some(&channel)).unwrap();
        let mr = pd.reg_mr(len, ALL).unwrap();
        let mut init = QpInit::new(qp_type, &cq);
        init.caps = QpCaps { max_send_wr: 256, max_recv_wr: 4096, ..Default::default() };
        let qp = pd.create_qp(&init).unwrap();
        let m = ModifyQp {
            state: Some(QpState::Init),
            access: Some(ALL),
            qkey: Some(QKey(QKEY)),
            ..Default::default()
        };
        qp.modify(&m).unwrap();
        Local { ctx, pd, channel, cq, mr, qp }
    }

    /// Brings the local QP to RTS towards `peer`.
    pub fn connect(&self, peer_ip: IpAddr, peer_qpn: Qpn, c: &Conn) {
        connect_qp(&self.qp, peer_ip, peer_qpn, c);
    }

    /// Connects this side and the peer's QP `r` (at `peer_ip`) to each other.
    pub fn connect_with(&self, remote: &mut Remote, peer_ip: IpAddr, r: &RemoteQp, c: &Conn) {
        self.connect(peer_ip, r.qpn, c);
        let mtu = c.mtu.bytes();
        remote.cmd(&format!(
            "connect {} {} {} {} {mtu} {} {} {} {}",
            self.ctx.ip(),
            self.qp.qpn().get(),
            c.psn_remote,
            c.psn_local,
            c.timeout,
            c.retry_cnt,
            c.rnr_retry,
            c.min_rnr_timer
        ));
    }

    /// Waits for the next completion: blocking on the channel (event mode) or polling.
    pub fn next_wc(&self, timeout: Duration) -> Option<WorkCompletion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut wc = [empty_wc()];
        loop {
            if self.cq.poll(&mut wc) == 1 {
                return Some(wc[0]);
            }
            self.cq.req_notify().unwrap();
            if self.cq.poll(&mut wc) == 1 {
                return Some(wc[0]);
            }
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            self.channel.get_cq_event(Some(left));
        }
    }
}

/// Brings `qp` (in INIT) to RTS towards `peer_qpn` at `peer_ip`.
pub fn connect_qp(qp: &QueuePair, peer_ip: IpAddr, peer_qpn: Qpn, c: &Conn) {
    let path = Path::new(peer_ip, peer_qpn);
    let attrs = verbs::Connect {
        path_mtu: c.mtu,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        min_rnr_timer: c.min_rnr_timer,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        ..verbs::Connect::new(path, Psn::new(c.psn_local), Psn::new(c.psn_remote))
    };
    qp.connect(&attrs).unwrap();
}
