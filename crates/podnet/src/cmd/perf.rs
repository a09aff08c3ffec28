//! `podnet perf`: perftest's tests, options, banner and tables on podnet's verbs, talking
//! perftest's TCP exchange (`perf::session`).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use perf::engine::BwOp;
use perf::exchange::{Key, Role};
use perf::session::{self, Connected, Observer, Options, PerfTest, Row};
use perf::stats::{Bandwidth, Latency, PERFTEST_MB};
use providers::{ContextOptions, Progress, UdpOffload};
use serde_json::{Value, json};
use verbs::{Context, Counters, Mtu, QpType};

use crate::cli::PerfArgs;

const LINE: &str =
    "---------------------------------------------------------------------------------------";
const BW_HEADER_MB: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const BW_HEADER_GB: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Turns the flags into session options; the error names the flag.
fn options(a: &PerfArgs) -> anyhow::Result<(Options, bool)> {
    let Some(test) = PerfTest::from_name(&a.test) else {
        bail!("unknown test {:?}: one of {}", a.test, PerfTest::ALL.map(PerfTest::name).join(", "));
    };
    let mut o = Options::new(test);
    o.connection = match a.connection.to_ascii_uppercase().as_str() {
        "UC" => QpType::Uc,
        "UD" => QpType::Ud,
        _ => QpType::Rc,
    };
    if a.all && a.size.is_some() {
        bail!("-a and -s exclude each other");
    }
    if a.all {
        o.sizes = Options::sweep();
        if o.connection == QpType::Ud {
            o.sizes.retain(|&s| s <= 4096);
        }
    } else if let Some(s) = a.size {
        o.sizes = vec![s];
    } else if o.connection == QpType::Ud && test.is_bw() {
        // perftest's UD default is the MTU.
        o.sizes = vec![1024];
    }
    if let Some(n) = a.iters {
        o.iters = n;
    }
    if let Some(d) = a.duration {
        if !(d.is_finite() && d > 0.0 && d < 1e6) {
            bail!("-D must be a positive number of seconds, not {d}");
        }
        if a.iters.is_some() {
            bail!("-D and -n exclude each other");
        }
        o.duration = Some(Duration::from_secs_f64(d));
    }
    o.run_infinitely = a.run_infinitely;
    o.qps = a.qps;
    if let Some(t) = a.tx_depth {
        o.tx_depth = t;
    }
    if a.tx_depth.is_some() && !test.is_bw() && o.tx_depth != 1 {
        bail!("-t: the latency tests keep one message in flight");
    }
    o.post_list = a.post_list;
    o.cq_mod = a.cq_mod;
    o.rx_depth = a.rx_depth;
    o.bidirectional = a.bidirectional;
    o.mtu = match a.mtu {
        None => None,
        Some(m) => match Mtu::from_bytes(m) {
            Some(m) => Some(m),
            None => bail!("-m must be 256, 512, 1024, 2048 or 4096, not {m}"),
        },
    };
    o.gid_index = a.gid_index.unwrap_or(0);
    o.traffic_class = a.tclass;
    o.qp_timeout = a.qp_timeout;
    o.inline_size = a.inline_size.unwrap_or(0) as usize;
    o.validate = a.data_validation;
    if let Some(n) = a.use_cuda {
        // Asked before a socket is opened: a host without the GPU says so at once.
        let g = gpu::Gpu::open(n).map_err(|e| anyhow::anyhow!("--use_cuda={n}: {e}"))?;
        if a.use_cuda_dmabuf && !g.dma_buf_supported() {
            bail!(
                "--use_cuda_dmabuf: GPU {n} ({}) exports no dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0)",
                g.pci_bus_id()
            );
        }
        o.memory = session::Placement::Cuda { gpu: n, dmabuf: a.use_cuda_dmabuf };
    }
    o.atomic = if a.atomic_type == "CMP_AND_SWAP" { BwOp::CompareSwap } else { BwOp::FetchAdd };
    let stall = match a.timeout {
        Some(t) if t.is_finite() && t > 0.0 && t < 1e6 => Duration::from_secs_f64(t),
        Some(t) => bail!("--timeout must be a positive number of seconds, not {t}"),
        None => perf::engine::STALL,
    };
    o.stall = stall;
    // A passive side waits for the measuring one: until it closes, or --timeout after the
    // measurement should have ended.
    o.wait = a.timeout.map(|_| stall + o.duration.unwrap_or_default());
    if a.dev.ib_port != 1 {
        bail!("-i {}: the device has one port, 1", a.dev.ib_port);
    }
    if a.output.is_some() && a.json {
        bail!("--output and --json exclude each other");
    }
    if a.report_unsorted {
        if test.is_bw() {
            bail!(
                "-U (--report-unsorted) lists a latency test's iterations; {} is a bandwidth test",
                test.name()
            );
        }
        if o.duration.is_some() {
            bail!(
                "-U (--report-unsorted) lists the iterations of a run of -n; a -D run keeps a histogram"
            );
        }
        if a.output.is_some() {
            bail!("-U (--report-unsorted) and --output exclude each other");
        }
    }
    o.validate_options().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((o, a.events))
}

/// What gets printed as the run goes.
struct Printer<'a> {
    args: &'a PerfArgs,
    opts: &'a Options,
    role: Role,
    bar: ProgressBar,
    bar_shown: bool,
    started: Instant,
    size_started: Instant,
    size: usize,
    connected: Option<Connected>,
    rows: Vec<Row>,
    header_done: bool,
    /// The next row's intervals (`-U` with `--json`).
    unsorted: Option<Vec<f64>>,
}

impl Printer<'_> {
    fn text(&self) -> bool {
        !self.args.json && self.args.output.is_none()
    }

    fn out(&self, line: &str) {
        // A closed stdout (`| head`) ends the output, not the test.
        let _ = writeln!(std::io::stdout(), "{line}");
    }

    fn bw_unit(&self, mb: f64) -> f64 {
        if self.args.report_gbits { mb * PERFTEST_MB * 8.0 / 1e9 } else { mb }
    }

    fn banner(&self, c: &Connected) {
        let o = self.opts;
        let t = o.test;
        let conn = format!("{:?}", o.connection).to_uppercase();
        let mut l = vec![
            LINE.to_string(),
            format!("                    {}", t.title(o.atomic)),
            format!(" Dual-port       : OFF\t\tDevice         : {}", c.device),
            format!(" Number of qps   : {}\t\tTransport type : IB", o.qps),
            format!(" Connection type : {conn}\t\tUsing SRQ      : OFF"),
            " PCIe relax order: OFF".into(),
            " ibv_wr* API     : OFF".into(),
        ];
        let sends = self.role == Role::Client || o.bidirectional;
        if sends || !t.is_bw() {
            l.push(format!(" TX depth        : {}", o.tx_depth));
        }
        if matches!(t, PerfTest::SendBw | PerfTest::SendLat) {
            l.push(format!(" RX depth        : {}", o.rx_depth));
        }
        if t.is_bw() {
            if sends && c.post_list > 1 {
                l.push(format!(" Post List       : {}", c.post_list));
            }
            l.push(format!(" CQ Moderation   : {}", c.cq_mod));
        }
        l.push(format!(" Mtu             : {}[B]", c.mtu));
        l.push(format!(" Link type       : {}", c.link_layer));
        l.push(format!(" GID index       : {}", o.gid_index));
        if matches!(o.test.op(o.atomic), BwOp::Read | BwOp::FetchAdd | BwOp::CompareSwap) {
            l.push(format!(" Outstand reads  : {}", session::OUT_READS));
        } else {
            l.push(format!(" Max inline data : {}[B]", o.inline_size));
        }
        l.push(" rdma_cm QPs\t : OFF".into());
        l.push(" Data ex. method : Ethernet".into());
        if o.validate {
            l.push(" Data validation : ON (podnet)".into());
        }
        if c.memory != "host" {
            l.push(format!(" Memory          : {}", c.memory));
            if o.validate {
                l.push(" Validated on    : the host, after a copy back from the GPU".into());
            }
        }
        l.push(LINE.into());
        for k in &c.local {
            l.extend(key_lines("local", k, t));
        }
        for k in &c.remote {
            l.extend(key_lines("remote", k, t));
        }
        l.push(LINE.into());
        for x in l {
            self.out(&x);
        }
    }

    fn header(&mut self) {
        if self.header_done || !self.text() {
            return;
        }
        self.header_done = true;
        let h = if !self.opts.test.is_bw() {
            LAT_HEADER
        } else if self.args.report_gbits {
            BW_HEADER_GB
        } else {
            BW_HEADER_MB
        };
        self.out(h);
    }

    fn row_line(&self, r: &Row) -> String {
        match r {
            Row::Bw(b) => {
                if let Some(which) = &self.args.output {
                    return match which.as_str() {
                        "message_rate" => format!("{:.6}", b.msg_rate),
                        _ => format!("{:.2}", self.bw_unit(b.bw_avg)),
                    };
                }
                format!(
                    " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                    b.size,
                    b.iters,
                    self.bw_unit(b.bw_peak),
                    self.bw_unit(b.bw_avg),
                    b.msg_rate
                )
            }
            Row::Lat(l) => {
                if self.args.output.is_some() {
                    return format!("{:.2}", l.t_typical);
                }
                format!(
                    " {:<7} {:<10} {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
                    l.size,
                    l.iters,
                    l.t_min,
                    l.t_max,
                    l.t_typical,
                    l.t_avg,
                    l.t_stdev,
                    l.p99,
                    l.p99_9
                )
            }
        }
    }

    fn row_json(&self, r: &Row) -> Value {
        let base = json!({
            "test": self.opts.test.name(),
            "role": if self.role == Role::Client { "client" } else { "server" },
            "device": self.connected.as_ref().map(|c| c.device.clone()),
            "connection": format!("{:?}", self.opts.connection).to_uppercase(),
            "qps": self.opts.qps,
            "bidirectional": self.opts.bidirectional,
            "duration_mode": self.opts.duration.is_some(),
            "memory": self.connected.as_ref().map(|c| c.memory.clone()),
        });
        let mut v = base;
        if let (Some(m), Some(u)) = (v.as_object_mut(), &self.unsorted) {
            m.insert("unsorted_usec".into(), u.iter().map(|x| round(*x, 3)).collect());
        }
        let extra = match r {
            Row::Bw(b) => bw_json(b),
            Row::Lat(l) => lat_json(l),
        };
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        v
    }
}

fn bw_json(b: &Bandwidth) -> Value {
    json!({
        "MsgSize": b.size,
        "n_iterations": b.iters,
        "BW_peak": round(b.bw_peak, 2),
        "BW_average": round(b.bw_avg, 2),
        "MsgRate": round(b.msg_rate, 6),
        "bw_unit": "MB/sec (2^20 bytes)",
        "BW_average_Gbps": round(b.bw_avg * PERFTEST_MB * 8.0 / 1e9, 3),
    })
}

fn lat_json(l: &Latency) -> Value {
    json!({
        "MsgSize": l.size,
        "n_iterations": l.iters,
        "t_min": round(l.t_min, 2),
        "t_max": round(l.t_max, 2),
        "t_typical": round(l.t_typical, 2),
        "t_avg": round(l.t_avg, 2),
        "t_stdev": round(l.t_stdev, 2),
        "percentile_99": round(l.p99, 2),
        "percentile_99.9": round(l.p99_9, 2),
    })
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    if x.is_finite() { (x * f).round() / f } else { 0.0 }
}

fn key_lines(which: &str, k: &Key, t: PerfTest) -> Vec<String> {
    let mut first =
        format!(" {which} address: LID {:04x} QPN {:#06x} PSN {:#08x}", k.lid, k.qpn, k.psn);
    if !matches!(t, PerfTest::SendBw | PerfTest::SendLat) {
        first.push_str(&format!(" RKey {:#08x} VAddr {:#016x}", k.rkey, k.vaddr));
    }
    let gid =
        k.gid.unwrap_or([0; 16]).iter().map(|b| format!("{b:02}")).collect::<Vec<_>>().join(":");
    vec![first, format!(" GID: {gid}")]
}

impl Observer for Printer<'_> {
    fn connected(&mut self, c: &Connected) {
        if self.text() {
            self.banner(c);
        }
        self.connected = Some(c.clone());
    }

    fn measuring(&mut self, size: usize) {
        self.size = size;
        self.size_started = Instant::now();
        self.header();
        self.bar.set_position(0);
        self.bar.set_message(format!("{} {size} B", self.opts.test.name()));
    }

    fn progress(&mut self, done: u64, bytes: u64) {
        if !self.bar_shown
            && self.started.elapsed() > Duration::from_secs(2)
            && std::io::stderr().is_terminal()
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar_shown = true;
        }
        self.bar.set_position(done);
        let secs = self.size_started.elapsed().as_secs_f64().max(1e-9);
        let mb = bytes as f64 / secs / PERFTEST_MB;
        self.bar.set_message(format!(
            "{} {} B: {:.2} {}",
            self.opts.test.name(),
            self.size,
            self.bw_unit(mb),
            if self.args.report_gbits { "Gb/s" } else { "MB/s" }
        ));
    }

    fn intervals(&mut self, intervals: &[f64]) {
        if !self.args.report_unsorted {
            return;
        }
        if self.args.json {
            self.unsorted = Some(intervals.to_vec());
            return;
        }
        // perftest's `-U`: the list, then the table's header again above the row.
        self.header();
        self.bar.suspend(|| {
            let mut text = String::with_capacity(16 * (intervals.len() + 4));
            text.push_str("#, usec\n");
            for (i, v) in intervals.iter().enumerate() {
                let _ = writeln!(text, "{}, {v:.3}", i + 1);
            }
            let _ = writeln!(text, "{LINE}\n{LAT_HEADER}");
            let _ = std::io::stdout().write_all(text.as_bytes());
        });
    }

    fn row(&mut self, r: &Row) {
        self.header();
        self.bar.suspend(|| {
            if self.args.json {
                self.out(&self.row_json(r).to_string());
            } else {
                self.out(&self.row_line(r));
            }
        });
        self.rows.push(r.clone());
        self.unsorted = None;
    }
}

/// Runs `podnet perf`.
pub(crate) fn run(args: &PerfArgs) -> anyhow::Result<ExitCode> {
    let (mut opts, events) = options(args)?;
    let progress = if events { Progress::Event } else { Progress::Busy };
    let udp_offload = if args.no_udp_offload { UdpOffload::Off } else { UdpOffload::Auto };
    let ctx = super::open_device(
        &args.dev,
        &ContextOptions { progress, udp_offload, gid_index: args.gid_index, ..Default::default() },
    )?;
    if args.inline_size.is_none() && ctx.provider_kind() == verbs::ProviderKind::RdmaCore {
        // perftest's default for this NIC, so the two compare like with like without -I.
        // The driver link alone: the GID tables `rdma_device` would read are a slow start.
        if let Some(driver) = host::rdma_provider(&host::default_root(), &ctx.device_name()) {
            opts.inline_size =
                perf::session::perftest_default_inline(opts.test, opts.connection, &driver);
        }
    }
    opts.gid_index = args.gid_index.unwrap_or(ctx.gid_index());
    ctx.query_gid(opts.gid_index)?; // a -x the device does not have fails before any peer is involved
    let role = if args.server.is_some() { Role::Client } else { Role::Server };
    let (sock, peer) = match &args.server {
        Some(host) => connect(host, args.dev.port, opts.stall)?,
        None => accept(&ctx, args, &opts)?,
    };
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {pos} messages {per_sec} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let mut p = Printer {
        args,
        opts: &opts,
        role,
        bar,
        bar_shown: false,
        started: Instant::now(),
        size_started: Instant::now(),
        size: 0,
        connected: None,
        rows: Vec::new(),
        header_done: false,
        unsorted: None,
    };
    let before = ctx.counters();
    let result = session::run(&ctx, &opts, role, &sock, peer, events, &mut p);
    p.bar.finish_and_clear();
    let after = ctx.counters();
    let outcome = match result {
        Ok(o) => o,
        Err(e) => bail!("{}", explain(&e)),
    };
    if p.text() && p.header_done {
        p.out(LINE);
    }
    if ctx.provider_kind() == verbs::ProviderKind::Soft {
        print_receive_checks(args, &p, &before, &after);
    }
    if args.out_json {
        write_out_json(args, &opts, &p)?;
    }
    if let Some(dir) = &args.publish.publish {
        // The peer is its RoCE address (its GID), not the side channel's source address.
        let rdma_peer = outcome
            .remote
            .first()
            .and_then(|k| verbs::Gid(k.gid?).to_ip())
            .map_or_else(|| peer.to_string(), |ip| ip.to_string());
        for r in bench_records(opts.test.name(), &outcome, &ctx.device_name(), &rdma_peer) {
            telemetry::bench::publish(dir, &r)?;
        }
    }
    if let Some(v) = &outcome.validation {
        let ok = v.errors == 0 && v.messages > 0;
        if args.json {
            let j = json!({"data_validation": {"messages": v.messages, "bytes": v.bytes,
                "errors": v.errors, "first_error": v.first_error, "ok": ok}});
            p.out(&j.to_string());
        } else if args.output.is_none() {
            p.out(&format!(
                " Data validation: {} messages, {} bytes checked, {} errors",
                v.messages, v.bytes, v.errors
            ));
        }
        if let Some(e) = &v.first_error {
            eprintln!("podnet: data validation: {e}");
        }
        if !ok {
            if v.messages == 0 {
                eprintln!("podnet: data validation checked nothing");
            }
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What this side's soft device received during the run and how much of it had its ICRC
/// checked: every packet taken must have been (an IPv4 Identification recovered from the
/// ICRC leaves a 16-bit check only, counted as unverified); and how many datagrams the
/// receiving socket dropped because this side fell behind (lost for good on UC and UD).
fn print_receive_checks(args: &PerfArgs, p: &Printer<'_>, a: &Counters, b: &Counters) {
    let d = |f: fn(&Counters) -> u64| f(b).saturating_sub(f(a));
    let taken = d(|c| c.rcvd_pkts);
    let (errors, unverified) = (d(|c| c.icrc_errors), d(|c| c.icrc_unverified));
    let verified = taken.saturating_sub(unverified);
    let overflow = d(|c| c.rx_socket_drops);
    if args.json {
        let j = json!({"receive_checks": {"received": taken + errors, "icrc_verified": verified,
            "icrc_unverified": unverified, "icrc_errors": errors, "socket_drops": overflow}});
        p.out(&j.to_string());
    } else if args.output.is_none() {
        p.out(&format!(
            " Received: {} packets, {verified} with a verified ICRC, {unverified} unverified, {errors} ICRC errors, {overflow} dropped by a full receive socket",
            taken + errors
        ));
    }
}

/// One line that says what went wrong and what to do.
fn explain(e: &session::Error) -> String {
    use perf::exchange::Error as X;
    match e {
        session::Error::Exchange(X::Io(io)) => match io.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                "the peer closed the connection mid-test (did it fail, or run another test or options?)".into()
            }
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                "the peer stopped answering on the side channel (another test or options, or it hangs); see --timeout".into()
            }
            _ => format!("side channel: {io}"),
        },
        other => other.to_string(),
    }
}

fn connect(host: &str, port: u16, t: Duration) -> anyhow::Result<(TcpStream, std::net::IpAddr)> {
    let addrs: Vec<SocketAddr> =
        (host, port).to_socket_addrs().with_context(|| format!("cannot resolve {host}"))?.collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, t) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok((s, a.ip()));
            }
            Err(e) => last = Some((a, e)),
        }
    }
    match last {
        Some((a, e)) => bail!("Couldn't connect to {host}:{port} ({a}): {e}"),
        None => bail!("{host} has no address"),
    }
}

fn accept(
    ctx: &Context,
    args: &PerfArgs,
    opts: &Options,
) -> anyhow::Result<(TcpStream, std::net::IpAddr)> {
    let ip = ctx.ip();
    let listener = TcpListener::bind((ip, args.dev.port))
        .with_context(|| format!("cannot listen on {}", SocketAddr::new(ip, args.dev.port)))?;
    if !args.json && args.output.is_none() {
        let _ = writeln!(
            std::io::stdout(),
            "\n************************************\n* Waiting for client to connect... *\n************************************"
        );
        let _ = std::io::stdout().flush();
    }
    let (sock, peer) = match args.timeout {
        None => listener.accept()?,
        Some(_) => {
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + opts.stall;
            loop {
                match listener.accept() {
                    Ok(x) => break x,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            bail!("no client connected within {:?}", opts.stall);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    sock.set_nonblocking(false)?;
    sock.set_nodelay(true)?;
    Ok((sock, peer.ip()))
}

/// What `--publish` leaves for the agent: a record per size, the latest row of each.
pub(crate) fn bench_records(
    test: &str,
    out: &session::Outcome,
    device: &str,
    peer: &str,
) -> Vec<telemetry::bench::Record> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let record = |size| telemetry::bench::Record {
        test: test.to_string(),
        device: device.to_string(),
        peer: peer.to_string(),
        size,
        finished_unix: now,
        bandwidth_bytes_per_second: None,
        latency_seconds: None,
    };
    let mut by_size: std::collections::BTreeMap<u64, telemetry::bench::Record> =
        std::collections::BTreeMap::new();
    for row in &out.rows {
        if let Row::Bw(b) = row {
            by_size.entry(b.size).or_insert_with(|| record(b.size)).bandwidth_bytes_per_second =
                Some(b.bw_avg * PERFTEST_MB);
        }
    }
    for b in &out.latency_buckets {
        by_size.entry(b.size).or_insert_with(|| record(b.size)).latency_seconds =
            Some(telemetry::bench::Histogram {
                le: b.le.clone(),
                cumulative: b.cumulative.clone(),
                count: b.count,
                sum: b.sum,
            });
    }
    by_size.into_values().collect()
}

/// perftest's `--out_json` file: `test_info` and `results` (one object, or a list for -a).
fn write_out_json(args: &PerfArgs, o: &Options, p: &Printer<'_>) -> anyhow::Result<()> {
    let c = p.connected.as_ref();
    let mut info = json!({
        "test": o.test.title(o.atomic).replace(' ', "_"),
        "Dual_port": "OFF",
        "Device": c.map(|c| c.device.clone()),
        "Number_of_qps": o.qps,
        "Transport_type": "IB",
        "Connection_type": format!("{:?}", o.connection).to_uppercase(),
        "Using_SRQ": "OFF",
        "TX_depth": o.tx_depth,
        "RX_depth": o.rx_depth,
        "Mtu": c.map(|c| c.mtu),
        "Link_type": c.map(|c| c.link_layer.name()),
        "GID_index": o.gid_index,
        "rdma_cm_QPs": "OFF",
        "Data_ex_method": "Ethernet",
        "Duration": o.duration.map(|d| d.as_secs_f64()),
        "Data_validation": o.validate,
        "Memory": c.map(|c| c.memory.clone()),
    });
    // As perftest writes them: the post list when it is more than 1, the CQ moderation for
    // the bandwidth tests.
    if let Some(m) = info.as_object_mut()
        && o.test.is_bw()
    {
        if let Some(l) = c.map(|c| c.post_list).filter(|l| *l > 1) {
            m.insert("Post_List".into(), l.into());
        }
        if let Some(q) = c.map(|c| c.cq_mod) {
            m.insert("CQ_Moderation".into(), q.into());
        }
    }
    let mut results: Vec<Value> = p
        .rows
        .iter()
        .map(|r| match r {
            Row::Bw(b) => {
                let mut v = bw_json(b);
                if args.report_gbits
                    && let Some(m) = v.as_object_mut()
                {
                    m.insert("BW_peak".into(), json!(round(p.bw_unit(b.bw_peak), 2)));
                    m.insert("BW_average".into(), json!(round(p.bw_unit(b.bw_avg), 2)));
                }
                v
            }
            Row::Lat(l) => lat_json(l),
        })
        .collect();
    let results = if results.len() == 1 { results.remove(0) } else { Value::Array(results) };
    let doc = json!({"test_info": info, "results": results});
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(&args.out_json_file, text + "\n")
        .with_context(|| format!("cannot write {}", args.out_json_file.display()))?;
    Ok(())
}
