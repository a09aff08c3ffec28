//! Reference sessions: rdma-core's and perftest's tools between two rxe devices over the veth
//! wire, with the RoCE traffic captured on the wire and the TCP side channel on lo.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use crate::{Error, Result, RxeSetup, Vm, io_err};

/// One tool run between rxeB (server) and rxeA (client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// File stem, e.g. `ib_send_bw-ipv6`.
    pub name: String,
    /// The tool.
    pub tool: &'static str,
    /// Extra arguments (both sides).
    pub args: String,
    /// Use the IPv6 GIDs.
    pub ipv6: bool,
}

/// The sessions issue 3 asks for: ibv_rc_pingpong at 1, 4096 and 65536 bytes and the six
/// perftest tools, over IPv4 and IPv6 GIDs. `iters` is each tool's iteration count (perftest
/// refuses fewer than 5, so its tools get at least 5); the bandwidth tools use their default
/// message size (64 KiB).
pub fn reference_sessions(iters: u32) -> Vec<Session> {
    sessions(iters, None)
}

/// [`reference_sessions`] with the bandwidth tools' message size set to `bw_size` bytes (for a
/// quicker run under emulation).
pub fn sessions(iters: u32, bw_size: Option<u32>) -> Vec<Session> {
    let mut v = Vec::new();
    for ipv6 in [false, true] {
        let fam = if ipv6 { "ipv6" } else { "ipv4" };
        for size in [1, 4096, 65536] {
            v.push(Session {
                name: format!("ibv_rc_pingpong-s{size}-{fam}"),
                tool: "ibv_rc_pingpong",
                args: format!("-s {size} -n {iters}"),
                ipv6,
            });
        }
        for tool in [
            "ib_send_bw",
            "ib_write_bw",
            "ib_read_bw",
            "ib_atomic_bw",
            "ib_send_lat",
            "ib_write_lat",
        ] {
            let n = iters.max(5);
            let size = match bw_size {
                Some(s) if tool.ends_with("_bw") && tool != "ib_atomic_bw" => format!(" -s {s}"),
                _ => String::new(),
            };
            v.push(Session {
                name: format!("{tool}-{fam}"),
                tool,
                args: format!("-n {n} -F{size}"),
                ipv6,
            });
        }
    }
    v
}

/// What one session left in the output folder.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The session.
    pub session: Session,
    /// RoCE traffic captured on vA.
    pub roce_pcap: PathBuf,
    /// The TCP side channel captured on lo.
    pub tcp_pcap: PathBuf,
    /// Both tools' output.
    pub log: PathBuf,
    /// The side channel as text (see [`transcript`]).
    pub transcript: PathBuf,
}

/// Runs `sessions` in the guest and copies their captures, logs and transcripts to `dir`.
pub fn record(vm: &Vm, rxe: &RxeSetup, sessions: &[Session], dir: &Path) -> Result<Vec<Recorded>> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let out = vm.out_dir();
    let mut done = Vec::new();
    for s in sessions {
        let (ga, gb) = if s.ipv6 { (rxe.a.gid6, rxe.b.gid6) } else { (rxe.a.gid4, rxe.b.gid4) };
        let gflag = if s.tool == "ibv_rc_pingpong" { "-g" } else { "-x" };
        let server = format!("{} -d {} {gflag} {gb} {}", s.tool, rxe.b.name, s.args);
        let client = format!("{} -d {} {gflag} {ga} {} 127.0.0.1", s.tool, rxe.a.name, s.args);
        let roce = out.join(format!("{}.pcap", s.name));
        let tcp = out.join(format!("{}.tcp.pcap", s.name));
        let script = format!(
            "rm -f $OUT/.tcpdump.err\ncap_start vA {roce} 'udp port 4791'\ncap_start lo {tcp} 'tcp port 18515'\n\
             pair '{server}' '{client}'; rc=$?\ncap_stop || exit 1\nexit $rc\n",
            roce = roce.display(),
            tcp = tcp.display()
        );
        let job = vm.run(&s.name, &script, Duration::from_secs(180))?;
        let dst = |ext: &str| dir.join(format!("{}{ext}", s.name));
        let copy =
            |from: &Path, to: &Path| std::fs::copy(from, to).map(|_| ()).map_err(io_err(from));
        copy(&roce, &dst(".pcap"))?;
        copy(&tcp, &dst(".tcp.pcap"))?;
        std::fs::write(dst(".log"), &job.output).map_err(io_err(dst(".log")))?;
        let text = transcript(
            &dst(".tcp.pcap"),
            &format!("{} (server: {server}; client: {client})", s.name),
        )?;
        std::fs::write(dst(".tcp.txt"), text).map_err(io_err(dst(".tcp.txt")))?;
        done.push(Recorded {
            session: s.clone(),
            roce_pcap: dst(".pcap"),
            tcp_pcap: dst(".tcp.pcap"),
            log: dst(".log"),
            transcript: dst(".tcp.txt"),
        });
    }
    Ok(done)
}

/// The TCP conversation in a capture as text: one line per TCP segment with payload (on lo one
/// `write()` is one segment), `c>s` from the client (the side that connected) or `s>c`, the
/// byte count and the bytes with printable ASCII as is, `\0` for NUL, `\n`, `\\` and
/// `\xNN` otherwise.
pub fn transcript(pcap: &Path, label: &str) -> Result<String> {
    let file = std::fs::File::open(pcap).map_err(io_err(pcap))?;
    let mut r = pcap_file::pcap::PcapReader::new(file).map_err(|e| Error::Command {
        cmd: format!("read {}", pcap.display()),
        detail: e.to_string(),
    })?;
    let linktype = u32::from(r.header().datalink);
    let mut client: Option<u16> = None;
    let mut server_port = 0u16;
    let mut msgs: Vec<(bool, Vec<u8>)> = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| Error::Command {
            cmd: format!("read {}", pcap.display()),
            detail: e.to_string(),
        })?;
        let sliced = match linktype {
            1 => SlicedPacket::from_ethernet(&p.data),
            _ => SlicedPacket::from_ip(&p.data),
        };
        let Ok(sliced) = sliced else { continue };
        let (Some(NetSlice::Ipv4(_) | NetSlice::Ipv6(_)), Some(TransportSlice::Tcp(tcp))) =
            (&sliced.net, &sliced.transport)
        else {
            continue;
        };
        if tcp.syn() && !tcp.ack() {
            client = Some(tcp.source_port());
            server_port = tcp.destination_port();
        }
        let payload = tcp.payload();
        if payload.is_empty() {
            continue;
        }
        msgs.push((Some(tcp.source_port()) == client, payload.to_vec()));
    }
    let mut s = String::new();
    let total: usize = msgs.iter().map(|m| m.1.len()).sum();
    let _ = writeln!(s, "# TCP side channel of {label}");
    let _ = writeln!(
        s,
        "# server port {server_port}; {} segments, {total} bytes; c>s from the client, s>c from the server",
        msgs.len()
    );
    for (from_client, bytes) in &msgs {
        let _ = write!(s, "{} {} ", if *from_client { "c>s" } else { "s>c" }, bytes.len());
        for &b in bytes {
            match b {
                0 => s.push_str("\\0"),
                b'\n' => s.push_str("\\n"),
                b'\\' => s.push_str("\\\\"),
                0x20..=0x7e => s.push(b as char),
                _ => {
                    let _ = write!(s, "\\x{b:02x}");
                }
            }
        }
        s.push('\n');
    }
    Ok(s)
}

/// A session with a fault injected in the guest, for `podnet capture analyze`: a server on
/// rxeB, a client on rxeA, nftables chains (the body of the harness's table) or none, the RoCE
/// traffic captured on vA — the client's side of the veth wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSession {
    /// File stem, e.g. `rxe-burst-loss`.
    pub name: &'static str,
    /// What is wrong, for the log.
    pub fault: &'static str,
    /// The server (on rxeB); `{podnet}`, `{gb}` are replaced.
    pub server: String,
    /// The client (on rxeA); `{podnet}`, `{ga}` are replaced.
    pub client: String,
    /// nftables chains in force during the run.
    pub nft: Option<&'static str>,
    /// A netem qdisc on vA's egress during the run (`tc qdisc add dev vA root netem …`):
    /// what it drops never reaches the capture point on vA, and the sender does not know.
    pub netem: Option<&'static str>,
}

/// The fault sessions: a clean run, random loss before the capture point (netem on vA's
/// egress: a drop in vA's nftables output hook is not loss, rxe sends the packet again at
/// once), a burst dropped after it (vB's input), CE marks on Not-ECT traffic that rxe answers
/// with no CNP, a podnet receiver that reposts its one receive late (RNR), and a podnet
/// client that WRITEs with a bad R_Key (the last two need a fault-injection build). A few
/// dozen messages of 4 KiB each: small captures.
pub fn fault_sessions() -> Vec<FaultSession> {
    let bw = |tool: &str, extra: &str| {
        (
            format!("{tool} -d rxeB -x {{gb}} -s 4096 -n 20 -F{extra}"),
            format!("{tool} -d rxeA -x {{ga}} -s 4096 -n 20 -F{extra} 169.254.88.2"),
        )
    };
    let (ws, wc) = bw("ib_write_bw", "");
    vec![
        FaultSession {
            name: "rxe-clean",
            fault: "none",
            server: ws.clone(),
            client: wc.clone(),
            nft: None,
            netem: None,
        },
        FaultSession {
            name: "rxe-random-loss",
            fault: "3 % of rxeA's RoCE packets lost on vA's egress (netem), before the capture point",
            server: ws.clone(),
            client: wc.clone(),
            nft: None,
            netem: Some("loss 3%"),
        },
        FaultSession {
            name: "rxe-burst-loss",
            fault: "packets 50-54 arriving at vB dropped on its input, after the capture point",
            server: ws.clone(),
            client: wc.clone(),
            nft: Some(
                "chain in {\n type filter hook input priority 0;\n iifname \"vB\" udp dport 4791 numgen inc mod 1000 50-54 drop\n}",
            ),
            netem: None,
        },
        FaultSession {
            name: "rxe-ce",
            fault: "every RoCE packet leaving vA marked CE (rxe sends Not-ECT and answers no CNP)",
            server: ws,
            client: wc,
            nft: Some(
                "chain out {\n type filter hook output priority 0;\n oifname \"vA\" udp dport 4791 ip ecn set ce\n}",
            ),
            netem: None,
        },
        FaultSession {
            name: "podnet-rnr",
            fault: "a podnet receiver with one receive posted reposts each 20 ms late (PODNET_FAULT_RECV_HOLD_MS)",
            server: "PODNET_FAULT_RECV_HOLD_MS=20 {podnet} perf send-bw --provider rdma-core -d rxeB -x {gb} -s 4096 -n 4 -r 1".into(),
            client: "{podnet} perf send-bw --provider rdma-core -d rxeA -x {ga} -s 4096 -n 4 169.254.88.2".into(),
            nft: None,
            netem: None,
        },
        FaultSession {
            name: "podnet-bad-rkey",
            fault: "a podnet client WRITEs with the server's R_Key bit-flipped (PODNET_FAULT_BAD_RKEY)",
            server: "{podnet} perf write-bw --provider rdma-core -d rxeB -x {gb} -s 4096 -n 5".into(),
            client: "PODNET_FAULT_BAD_RKEY=1 {podnet} perf write-bw --provider rdma-core -d rxeA -x {ga} -s 4096 -n 5 169.254.88.2".into(),
            nft: None,
            netem: None,
        },
    ]
}

/// Runs the fault sessions with the podnet binary at `podnet` and copies each capture and
/// log (the fault, both tools' output, rxeA's and rxeB's counters before and after) to `dir`.
pub fn record_faults(vm: &Vm, rxe: &RxeSetup, podnet: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let out = vm.out_dir();
    let mut done = Vec::new();
    for s in fault_sessions() {
        let fill = |t: &str| {
            t.replace("{podnet}", podnet)
                .replace("{ga}", &rxe.a.gid4.to_string())
                .replace("{gb}", &rxe.b.gid4.to_string())
        };
        match s.nft {
            Some(chains) => vm.nft(chains)?,
            None => vm.nft_reset()?,
        }
        let pcap = out.join(format!("{}.pcap", s.name));
        let (qdisc, no_qdisc) = match s.netem {
            Some(n) => (format!("tc qdisc add dev vA root netem {n}"), "tc qdisc del dev vA root"),
            None => (String::new(), ""),
        };
        let script = format!(
            "echo \"# fault: {fault}\"\necho '# counters before'; counters rxeA | sed 's/^/rxeA /'; counters rxeB | sed 's/^/rxeB /'\n\
             {qdisc}\nrm -f $OUT/.tcpdump.err\ncap_start vA {pcap} 'udp port 4791'\n\
             pair '{server}' '{client}'; echo \"# rc=$?\"\ncap_stop\n{no_qdisc}\n\
             echo '# counters after'; counters rxeA | sed 's/^/rxeA /'; counters rxeB | sed 's/^/rxeB /'\n",
            fault = s.fault,
            pcap = pcap.display(),
            server = fill(&s.server),
            client = fill(&s.client),
        );
        let job = vm.spawn(s.name, &script, Duration::from_secs(240))?.wait()?;
        vm.nft_reset()?;
        let dst = dir.join(format!("{}.pcap", s.name));
        std::fs::copy(&pcap, &dst).map_err(io_err(&pcap))?;
        let log = dir.join(format!("{}.log", s.name));
        std::fs::write(&log, job.output.replace(podnet, "podnet")).map_err(io_err(&log))?;
        done.push(dst);
    }
    Ok(done)
}
