//! `podnet agent` against the recorded hosts in `testdata/telemetry` (an mlx5 port with every
//! PMA and RoCE counter, a bnxt_re-like device without `counters/`, rxe recorded in the QEMU
//! guest, and a tree of broken files): the exposition, `promtool check metrics`, the error
//! series, rates across changes, resets and saturation, health, the thresholds file.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{podnet, require_tool, stderr, stdout, testdata};

fn fixture(name: &str) -> PathBuf {
    testdata(&format!("telemetry/{name}/sys"))
}

/// `podnet agent --print` of a tree: the text exposition.
fn print(root: &Path) -> String {
    let o =
        podnet(&["agent", "--print", "--interval", "0.05", "--sysfs-root", root.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// The value of the sample `name{labels…}` whose labels include every one of `want`.
fn value(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (labels, v) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        want.iter()
            .all(|(k, val)| labels.contains(&format!("{k}=\"{val}\"")))
            .then(|| v.trim().parse().ok())?
    })
}

fn promtool(text: &str) {
    require_tool("promtool");
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "promtool check metrics: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn an_mlx5_port_every_counter_normalized_and_raw() {
    let root = fixture("mlx5");
    let t = print(&root);
    promtool(&t);
    let port = [("device", "mlx5_0"), ("port", "1")];
    let file = |f: &str| -> f64 {
        let p = root.join("class/infiniband/mlx5_0/ports/1").join(f);
        std::fs::read_to_string(&p).unwrap().trim().parse().unwrap()
    };
    // Every raw counter, both folders (lifespan is a setting, not a counter).
    let hw = std::fs::read_dir(root.join("class/infiniband/mlx5_0/ports/1/hw_counters")).unwrap();
    let mut n = 0;
    for e in hw {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name == "lifespan" {
            continue;
        }
        let got =
            value(&t, "podnet_rdma_hw_counters_total", &[port[0], port[1], ("counter", &name)]);
        assert_eq!(got, Some(file(&format!("hw_counters/{name}"))), "{name}");
        n += 1;
    }
    assert_eq!(n, 29, "the 29 RoCE hw_counters of the field notes");
    assert_eq!(
        value(
            &t,
            "podnet_rdma_port_counters_total",
            &[port[0], port[1], ("counter", "VL15_dropped")]
        ),
        Some(file("counters/VL15_dropped"))
    );
    // Normalized: unscaled but for the data counters (x4).
    for (metric, f, scale) in [
        ("podnet_rdma_out_of_sequence_total", "hw_counters/out_of_sequence", 1.0),
        ("podnet_rdma_packet_seq_errors_total", "hw_counters/packet_seq_err", 1.0),
        ("podnet_rdma_local_ack_timeouts_total", "hw_counters/local_ack_timeout_err", 1.0),
        ("podnet_rdma_cnp_sent_total", "hw_counters/np_cnp_sent", 1.0),
        ("podnet_rdma_cnp_handled_total", "hw_counters/rp_cnp_handled", 1.0),
        ("podnet_rdma_ecn_marked_packets_total", "hw_counters/np_ecn_marked_roce_packets", 1.0),
        ("podnet_rdma_symbol_errors_total", "counters/symbol_error", 1.0),
        ("podnet_rdma_port_rcv_data_bytes_total", "counters/port_rcv_data", 4.0),
        ("podnet_rdma_port_xmit_data_bytes_total", "counters/port_xmit_data", 4.0),
    ] {
        let want = file(f) * scale;
        assert_eq!(
            value(&t, metric, &[port[0], port[1], ("netdev", "ens1f0np0")]),
            Some(want),
            "{metric}"
        );
    }
    // Port attributes, health, PFC (ethtool for counts and time, DCB for the enabled set).
    assert_eq!(value(&t, "podnet_rdma_port_state_id", &port), Some(4.0));
    assert_eq!(value(&t, "podnet_rdma_port_rate_bytes_per_second", &port), Some(25e9));
    assert_eq!(value(&t, "podnet_rdma_port_active_mtu_bytes", &port), Some(4096.0));
    assert_eq!(
        value(&t, "podnet_rdma_port_health", &[port[0], port[1], ("state", "ok")]),
        Some(1.0)
    );
    let p3 = [("netdev", "ens1f0np0"), ("priority", "3")];
    assert_eq!(value(&t, "podnet_pfc_rx_pause_frames_total", &p3), Some(21.0));
    assert_eq!(value(&t, "podnet_pfc_tx_pause_frames_total", &p3), Some(12.0));
    assert_eq!(value(&t, "podnet_pfc_rx_pause_duration_seconds_total", &p3), Some(0.0021));
    assert_eq!(value(&t, "podnet_pfc_enabled", &p3), Some(1.0));
    assert_eq!(
        value(&t, "podnet_pfc_enabled", &[("netdev", "ens1f0np0"), ("priority", "0")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &t,
            "podnet_netdev_statistic_total",
            &[("netdev", "ens1f0np0"), ("statistic", "rx_crc_errors")]
        ),
        Some(
            std::fs::read_to_string(root.join("class/net/ens1f0np0/statistics/rx_crc_errors"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        )
    );
    assert_eq!(value(&t, "podnet_agent_source_errors", &[]), Some(0.0));
}

#[test]
fn bnxt_re_and_rxe_map_their_own_names() {
    let t = print(&fixture("bnxt_re"));
    promtool(&t);
    let port = [("device", "bnxt_re0"), ("port", "1")];
    // No counters/ folder: one error naming it, and the rest served.
    assert_eq!(
        value(
            &t,
            "podnet_agent_source_error",
            &[("source", "counters"), ("path", "class/infiniband/bnxt_re0/ports/1/counters")]
        ),
        Some(1.0)
    );
    let f = |n: &str| -> f64 {
        std::fs::read_to_string(
            fixture("bnxt_re").join("class/infiniband/bnxt_re0/ports/1/hw_counters").join(n),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
    };
    assert_eq!(
        value(&t, "podnet_rdma_packet_seq_errors_total", &port),
        Some(f("seq_err_naks_rcvd"))
    );
    assert_eq!(value(&t, "podnet_rdma_local_ack_timeouts_total", &port), Some(f("to_retransmits")));
    assert_eq!(value(&t, "podnet_rdma_duplicate_requests_total", &port), Some(f("dup_req")));
    assert_eq!(
        value(&t, "podnet_rdma_port_rcv_discards_total", &port),
        Some(f("rx_roce_discards"))
    );
    assert_eq!(
        value(&t, "podnet_rdma_port_health", &[port[0], port[1], ("state", "ok")]),
        Some(1.0)
    );

    // rxe, as recorded in the QEMU guest after 50 ping-pongs between rxeA and rxeB.
    let t = print(&fixture("rxe"));
    promtool(&t);
    let a = [("device", "rxeA"), ("port", "1")];
    assert_eq!(value(&t, "podnet_rdma_port_xmit_packets_total", &a), Some(250.0));
    assert_eq!(value(&t, "podnet_rdma_port_rcv_packets_total", &a), Some(250.0));
    assert_eq!(value(&t, "podnet_rdma_out_of_sequence_total", &a), Some(0.0));
    assert_eq!(
        value(&t, "podnet_rdma_port_info", &[a[0], ("driver", "rxe"), ("netdev", "vA")]),
        Some(1.0)
    );
    assert_eq!(value(&t, "podnet_rdma_port_active_mtu_bytes", &a), Some(1024.0));
    // rxe has no counters/ folder either.
    assert!(value(&t, "podnet_agent_source_errors", &[]).unwrap() >= 1.0, "{t}");
}

#[test]
fn broken_files_are_named_and_the_rest_is_served() {
    let root = fixture("broken");
    let t = print(&root);
    promtool(&t);
    let d = "class/infiniband/mlx5_1/ports";
    for path in [
        format!("{d}/1/counters/port_xmit_wait"),     // N/A (no PMA)
        format!("{d}/1/counters/symbol_error"),       // a dangling link: unreadable even for root
        format!("{d}/1/hw_counters/out_of_sequence"), // "lots"
        format!("{d}/2/state"),                       // missing
        format!("{d}/2/phys_state"),                  // "9: Bogus", no IBTA state
    ] {
        assert_eq!(
            value(&t, "podnet_agent_source_error", &[("path", &path)]),
            Some(1.0),
            "{path}\n{t}"
        );
    }
    assert_eq!(value(&t, "podnet_agent_source_errors", &[]), Some(5.0));
    // The healthy device is all there; the port without a state is down.
    assert_eq!(
        value(&t, "podnet_rdma_port_health", &[("device", "mlx5_0"), ("state", "ok")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &t,
            "podnet_rdma_port_health",
            &[("device", "mlx5_1"), ("port", "2"), ("state", "down")]
        ),
        Some(1.0)
    );
    // irdma-style names (spaces, capitals) as raw labels, and normalized.
    let p1 = [("device", "mlx5_1"), ("port", "1")];
    assert_eq!(
        value(&t, "podnet_rdma_hw_counters_total", &[p1[0], p1[1], ("counter", "RNR sent")]),
        Some(5.0)
    );
    assert_eq!(value(&t, "podnet_rdma_rnr_naks_sent_total", &p1), Some(5.0));
    // Saturated PMA counters are flagged and get no rate.
    let p2 = [("device", "mlx5_1"), ("port", "2")];
    for c in ["symbol_error", "port_xmit_data"] {
        assert_eq!(
            value(&t, "podnet_rdma_pma_saturated", &[p2[0], p2[1], ("counter", c)]),
            Some(1.0),
            "{c}"
        );
    }
    assert_eq!(
        value(&t, "podnet_rdma_rate_per_second", &[p2[0], p2[1], ("counter", "symbol_errors")]),
        None
    );
    assert!(
        value(&t, "podnet_rdma_rate_per_second", &[p2[0], p2[1], ("counter", "link_downed")])
            .is_some()
    );
    // --once names them too, and exits 1 for the down port.
    let o =
        podnet(&["agent", "--once", "--interval", "0.05", "--sysfs-root", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("mlx5_1  2     ens1f1np1   down      port state unknown"), "{out}");
    assert!(out.contains("symbol_errors saturated: rate unknown"), "{out}");
    assert!(out.contains("source error: class/infiniband/mlx5_1/ports/1/counters/port_xmit_wait: not available: \"N/A (no PMA)\""), "{out}");
}

/// Copies a fixture tree (files and links) into `dst`.
fn copy_tree(src: &Path, dst: &Path) {
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let (s, d) = (e.path(), dst.join(e.file_name()));
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            std::fs::create_dir_all(&d).unwrap();
            copy_tree(&s, &d);
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&s).unwrap(), &d).unwrap();
        } else {
            std::fs::copy(&s, &d).unwrap();
        }
    }
}

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(root: &Path, thresholds: &Path, port: u16) -> Server {
        Server::start_with(root, &["--thresholds", thresholds.to_str().unwrap()], &[], port)
    }

    /// An agent of `root` on 127.0.0.1:`port`, sampling every 0.2 s, with more flags and
    /// environment.
    fn start_with(root: &Path, args: &[&str], env: &[(&str, &str)], port: u16) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_podnet"))
            .args(["agent", "--listen", &format!("127.0.0.1:{port}"), "--interval", "0.2"])
            .args(["--sysfs-root", root.to_str().unwrap()])
            .args(args)
            .envs(env.iter().copied())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the agent never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn get(&self, path: &str, accept: &str) -> (String, String) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(c, "GET {path} HTTP/1.0\r\nHost: x\r\nAccept: {accept}\r\n\r\n").unwrap();
        let mut r = String::new();
        c.read_to_string(&mut r).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        (head.to_string(), body.to_string())
    }

    fn metrics(&self) -> String {
        self.get("/metrics", "*/*").1
    }

    /// A line of the agent's `/proc/PID/status` (`Threads`, `VmRSS`), as a number.
    fn status(&self, key: &str) -> u64 {
        let t = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = t.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')).unwrap();
        line.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// The agent still runs and serves /metrics.
    fn alive(&mut self, after: &str) {
        assert!(self.child.try_wait().unwrap().is_none(), "the agent died after {after}");
        let (head, _) = self.get("/metrics", "*/*");
        assert!(head.contains(" 200 OK"), "after {after}: {head}");
    }

    /// Sends `req` on a new connection; the response's status line (empty if the agent closed
    /// without one) and how long until the agent closed.
    fn send(&self, req: &[u8]) -> (String, Duration) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let t0 = Instant::now();
        // The agent may close before it has read everything: that is its right.
        let _ = c.write_all(req);
        let mut r = Vec::new();
        let _ = c.read_to_end(&mut r);
        let r = String::from_utf8_lossy(&r);
        (r.lines().next().unwrap_or("").to_string(), t0.elapsed())
    }
}

/// Requests that killed or bloated the agent's previous HTTP server, each against the real
/// binary: a body length it tried to allocate (99999999999, 2^64-1), a request line and a
/// header without a newline (1 MiB each), too many headers, a client that sends a byte at a
/// time, a POST, a chunked body; then 800 connections that send nothing. Each is answered
/// with a 4xx or cut off in bounded time, memory and threads stay small, and /metrics is
/// served after each.
#[test]
fn the_metrics_server_bounds_what_a_client_can_make_it_hold() {
    let port = 19000 + (std::process::id() % 400) as u16;
    let mut s = Server::start_with(&fixture("mlx5"), &[], &[], port);
    let big = |head: &str| [head.as_bytes(), &vec![b'A'; 1 << 20]].concat();
    let many_headers: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "Content-Length: 99999999999",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n".to_vec(),
            "HTTP/1.1 413",
        ),
        (
            "Content-Length: 2^64-1",
            b"GET /metrics HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n".to_vec(),
            "HTTP/1.1 4",
        ),
        ("a request line without a newline", big("GET /"), "HTTP/1.1 431"),
        ("a header without a newline", big("GET / HTTP/1.1\r\nX: "), "HTTP/1.1 431"),
        (
            "100 headers",
            format!("GET / HTTP/1.1\r\n{many_headers}\r\n").into_bytes(),
            "HTTP/1.1 431",
        ),
        (
            "a POST",
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            "HTTP/1.1 405",
        ),
        (
            "a chunked body",
            b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            "HTTP/1.1 413",
        ),
    ];
    for (what, req, want) in &cases {
        let (status, took) = s.send(req);
        assert!(status.starts_with(want), "{what}: {status:?}");
        assert!(took < Duration::from_secs(5), "{what}: {took:?}");
        s.alive(what);
    }
    // Headers that never end: cut off within the 5 s header time.
    let (status, took) = s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    assert!(took < Duration::from_secs(15), "{status:?} after {took:?}");
    s.alive("an unfinished request");
    assert!(s.status("VmRSS") < 100 << 10, "{} KiB", s.status("VmRSS"));
    // 800 connections that say nothing: no thread each, little memory; the agent serves
    // again once the header time has cut them off.
    let idle: Vec<TcpStream> =
        (0..800).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let (threads, rss) = (s.status("Threads"), s.status("VmRSS"));
    assert!(threads <= 8, "{threads} threads with 800 idle connections");
    assert!(rss < 100 << 10, "{rss} KiB with 800 idle connections");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = s.send(b"GET /metrics HTTP/1.0\r\n\r\n");
        if status.starts_with("HTTP/1.0 200") || status.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(status.starts_with("HTTP/1.1 503"), "while full: {status:?}");
        assert!(Instant::now() < deadline, "never served again while 800 idle connections wait");
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(idle);
    s.alive("800 idle connections");
}

/// A counter read that never returns — a FIFO whose writer never writes, opened blocking
/// under the fault hook as a sysfs read stalled in firmware is — does not stall the scrape:
/// the device is served from its last good sample, named with its age, the netdev served
/// fresh; however many scrapes come, one reader at most is stuck; once the read returns
/// the device is fresh again.
#[test]
fn a_stalled_source_is_served_from_its_last_sample() {
    crate::util::require_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mlx5"), dir.path());
    let port = 19400 + (std::process::id() % 400) as u16;
    let env = [("PODNET_FAULT_BLOCKING_READS", "1")];
    let s = Server::start_with(dir.path(), &["--sample-deadline", "0.3"], &env, port);
    let dev = [("device", "mlx5_0")];
    let t = s.metrics();
    assert_eq!(value(&t, "podnet_agent_source_error", &[("source", "stalled")]), None, "{t}");
    let fifo = dir.path().join("class/infiniband/mlx5_0/ports/1/hw_counters/zz_fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // The writer: holds the FIFO open, writes nothing until the end.
    let mut writer = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let t = s.metrics();
    assert!(t0.elapsed() < Duration::from_secs(3), "a scrape took {:?}", t0.elapsed());
    let stalled = [("source", "stalled"), dev[0], ("path", "class/infiniband/mlx5_0")];
    assert_eq!(value(&t, "podnet_agent_source_error", &stalled), Some(1.0), "{t}");
    let age = value(&t, "podnet_agent_source_age_seconds", &dev).expect(&t);
    assert!(age > 0.2, "{age}");
    // The device's last good sample and the netdev, fresh, are served.
    let p = [dev[0], ("port", "1")];
    assert!(value(&t, "podnet_rdma_out_of_sequence_total", &p).is_some(), "{t}");
    assert!(value(&t, "podnet_netdev_up", &[("netdev", "ens1f0np0")]).is_some(), "{t}");
    let threads = s.status("Threads");
    let mut last_age = age;
    for _ in 0..5 {
        let t = s.metrics();
        let a = value(&t, "podnet_agent_source_age_seconds", &dev).expect(&t);
        assert!(a > last_age, "the age grows: {a} after {last_age}");
        last_age = a;
    }
    // A thread that made a page may outlive its answer by a moment (the server lets one go
    // after half a second idle; a loaded machine once showed 5 threads against 4), and one
    // counted above may be gone by now; a reader stuck per scrape would never go.
    let until = Instant::now() + Duration::from_secs(3);
    let mut now = s.status("Threads");
    while now > threads && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        now = s.status("Threads");
    }
    assert!(now <= threads, "a reader more for each scrape: {now} threads, {threads} before");
    // The read returns (and the FIFO is gone, or the next read would block on it): fresh.
    std::fs::remove_file(&fifo).unwrap();
    writer.write_all(b"5\n").unwrap();
    drop(writer);
    std::thread::sleep(Duration::from_millis(600));
    let t = s.metrics();
    assert_eq!(value(&t, "podnet_agent_source_age_seconds", &dev), None, "{t}");
    assert_eq!(value(&t, "podnet_agent_source_error", &stalled), None, "{t}");
}

#[test]
fn rates_survive_resets_and_turn_a_port_degraded_then_down() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mlx5"), dir.path());
    let th = dir.path().join("health.toml");
    std::fs::write(&th, "window_seconds = 2\n[degraded]\nout_of_sequence = 50\n").unwrap();
    let s = Server::start(dir.path(), &th, 19464 + (std::process::id() % 500) as u16);
    let hw = dir.path().join("class/infiniband/mlx5_0/ports/1/hw_counters");
    let set = |f: &str, v: u64| std::fs::write(hw.join(f), format!("{v}\n")).unwrap();
    let port = [("device", "mlx5_0"), ("port", "1")];
    let health =
        |t: &str, st: &str| value(t, "podnet_rdma_port_health", &[port[0], port[1], ("state", st)]);
    std::thread::sleep(Duration::from_millis(600));
    let t = s.metrics();
    promtool(&t);
    assert_eq!(health(&t, "ok"), Some(1.0), "{t}");
    // 1,000 out-of-sequence packets a second for two seconds: over the threshold.
    let base: u64 =
        std::fs::read_to_string(hw.join("out_of_sequence")).unwrap().trim().parse().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        set("out_of_sequence", base + (t0.elapsed().as_millis() as u64));
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = s.metrics();
    let r = value(
        &t,
        "podnet_rdma_rate_per_second",
        &[port[0], port[1], ("counter", "out_of_sequence")],
    )
    .unwrap();
    assert!((300.0..3000.0).contains(&r), "rate {r}\n{t}");
    assert_eq!(health(&t, "degraded"), Some(1.0), "{t}");
    // A reset (the counter cleared, then counting slowly): never a negative rate.
    set("out_of_sequence", 3);
    std::thread::sleep(Duration::from_millis(2500));
    let t = s.metrics();
    let r = value(
        &t,
        "podnet_rdma_rate_per_second",
        &[port[0], port[1], ("counter", "out_of_sequence")],
    )
    .unwrap();
    assert!((0.0..50.0).contains(&r), "after a reset: {r}");
    assert_eq!(health(&t, "ok"), Some(1.0), "{t}");
    // OpenMetrics when asked for, with its EOF.
    let (head, body) = s.get("/metrics", "application/openmetrics-text; version=1.0.0");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{}", &body[body.len().saturating_sub(100)..]);
    // The netdev goes down: the port is down.
    std::fs::write(dir.path().join("class/net/ens1f0np0/operstate"), "down\n").unwrap();
    let t = s.metrics();
    assert_eq!(health(&t, "down"), Some(1.0), "{t}");
    let (_, h) = s.get("/health", "*/*");
    assert!(h.contains("\"state\":\"down\"") && h.contains("netdev ens1f0np0 is down"), "{h}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let th = dir.path().join("t.toml");
    std::fs::write(&th, "window_seconds = 30\n[degraded]\nout_of_seqence = 5\n").unwrap();
    let root = fixture("mlx5");
    let r = root.to_str().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    for (args, msg) in [
        (
            vec!["agent", "--once", "--sysfs-root", r, "--thresholds", th.to_str().unwrap()],
            "t.toml:3: unknown key `degraded.out_of_seqence`",
        ),
        (vec!["agent", "--once", "--sysfs-root", "/nonexistent"], "no class/ folder there"),
        (vec!["agent", "--once", "--interval", "0"], "--interval must be"),
        (vec!["agent", "--listen", &busy], "cannot listen on"),
    ] {
        let o = podnet(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(msg), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
    // --once --json: every port with its state and the rates looked at.
    let o = podnet(&["agent", "--once", "--json", "--interval", "0.05", "--sysfs-root", r]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ports"][0]["state"], "ok", "{v}");
    assert_eq!(v["ports"][0]["device"], "mlx5_0", "{v}");
    assert!(v["ports"][0]["rates"]["out_of_sequence"].is_number(), "{v}");
}

#[test]
fn the_probe_measures_podnets_own_stack() {
    let root = fixture("mlx5");
    let o = crate::util::in_netns(&format!(
        "\"$PODNET\" agent --print --probe --interval 0.2 --sysfs-root {}",
        root.display()
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    promtool(&t);
    let pair = [("device", "soft:127.0.0.1"), ("peer", "soft:127.0.0.2")];
    // Two samples, a burst of 32 ping-pongs each, every one in the histogram.
    assert_eq!(value(&t, "podnet_probe_rtt_seconds_count", &pair), Some(64.0), "{t}");
    let sum = value(&t, "podnet_probe_rtt_seconds_sum", &pair).unwrap();
    assert!(sum > 0.0 && sum < 64.0, "{sum}");
    assert_eq!(value(&t, "podnet_probe_failures_total", &[]), Some(0.0));
    // The soft devices are ports: their transport counters, normalized, and their health.
    for dev in ["soft:127.0.0.1", "soft:127.0.0.2"] {
        let p = [("device", dev), ("port", "1")];
        // 64 ping-pongs: at least 64 SENDs each way.
        assert!(
            value(&t, "podnet_rdma_port_xmit_packets_total", &p).unwrap() >= 64.0,
            "{dev}\n{t}"
        );
        assert_eq!(value(&t, "podnet_rdma_out_of_sequence_total", &p), Some(0.0), "{dev}");
        assert_eq!(
            value(&t, "podnet_rdma_port_health", &[p[0], p[1], ("state", "ok")]),
            Some(1.0),
            "{dev}"
        );
        assert_eq!(
            value(&t, "podnet_rdma_port_info", &[p[0], ("driver", "soft")]),
            Some(1.0),
            "{dev}"
        );
    }
    // The recorded host is served beside them.
    assert_eq!(value(&t, "podnet_rdma_port_state_id", &[("device", "mlx5_0")]), Some(4.0));
}

/// `podnet perf --publish` leaves each run's result for the agent: a SEND latency run's
/// every iteration as a histogram, a WRITE bandwidth run's figure as a gauge, both sides'.
#[test]
fn published_benchmarks_are_exported() {
    let root = fixture("rxe");
    let bench = tempfile::tempdir().unwrap();
    let dir = bench.path().join("bench");
    let pubd = format!("--publish={}", dir.display());
    let o = crate::util::in_netns(&format!(
        "ip addr add 127.0.3.1/8 dev lo; ip addr add 127.0.3.2/8 dev lo\n\
         for t in 'send-lat -n 400' 'write-bw -s 65536 -n 400'; do\n\
           $PODNET perf $t -d soft:127.0.3.1 {pubd} --timeout 20 > /dev/null & sleep 0.3\n\
           $PODNET perf $t -d soft:127.0.3.2 {pubd} --timeout 20 --json 127.0.3.1 || exit 3\n\
           wait $! || exit 4\n\
         done\n\
         echo '{{\"test\": \"send-lat\"}}' > {d}/truncated.json\n\
         \"$PODNET\" agent --print --interval 0.05 --sysfs-root {root} --bench-dir {d}",
        d = dir.display(),
        root = root.display()
    ));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let (rows, t) = out.split_at(out.find("# HELP").expect("the exposition"));
    promtool(t);
    // Each run's row, then its receive checks.
    let row = |key: &str| -> serde_json::Value {
        let line = rows.lines().find(|l| l.contains(key)).expect("the client's row");
        serde_json::from_str(line).unwrap()
    };
    let (lat, bw) = (row("t_avg"), row("BW_average"));
    for (dev, peer) in [("soft:127.0.3.1", "127.0.3.2"), ("soft:127.0.3.2", "127.0.3.1")] {
        let l = [("test", "send-lat"), ("device", dev), ("peer", peer), ("size_bytes", "2")];
        // 400 posts, 399 intervals: every one in the histogram, none lost to the buckets.
        assert_eq!(value(t, "podnet_bench_latency_seconds_count", &l), Some(399.0), "{t}");
        let inf = [l[0], l[1], l[2], l[3], ("le", "+Inf")];
        assert_eq!(value(t, "podnet_bench_latency_seconds_bucket", &inf), Some(399.0));
        let sum = value(t, "podnet_bench_latency_seconds_sum", &l).unwrap();
        let mean_us = sum / 399.0 * 1e6;
        if dev == "soft:127.0.3.2" {
            // The client printed t_avg: the histogram's mean is the same figure.
            let t_avg = lat["t_avg"].as_f64().unwrap();
            assert!((mean_us - t_avg).abs() <= 0.02 * t_avg + 0.01, "{mean_us} vs {t_avg}");
            let b =
                [("test", "write-bw"), ("device", dev), ("peer", peer), ("size_bytes", "65536")];
            let gauge = value(t, "podnet_bench_bandwidth_bytes_per_second", &b).unwrap();
            let printed = bw["BW_average"].as_f64().unwrap() * 1_048_576.0;
            assert!((gauge - printed).abs() <= 0.01 * printed, "{gauge} vs {printed}");
        }
        assert!(value(t, "podnet_bench_finished_timestamp_seconds", &l).unwrap() > 1.7e9);
    }
    // The file that is not a record is named; the recorded host is served beside them.
    let bad = [("source", "bench"), ("path", &*format!("{}/truncated.json", dir.display()))];
    assert_eq!(value(t, "podnet_agent_source_error", &bad), Some(1.0), "{t}");
    assert_eq!(value(t, "podnet_rdma_port_state_id", &[("device", "rxe_eth")]), Some(4.0));
}

/// Every metric `podnet agent --help` names is one the agent exports (on a recorded mlx5
/// host, which has every kind of source, and on one with unreadable files).
#[test]
fn the_metrics_help_names_are_the_exported_ones() {
    let help = stdout(&podnet(&["agent", "--help"]));
    let probe = crate::util::in_netns(&format!(
        "\"$PODNET\" agent --print --probe --interval 0.2 --sysfs-root {}",
        fixture("mlx5").display()
    ));
    let t = print(&fixture("mlx5")) + &print(&fixture("broken")) + &stdout(&probe);
    // Whole names; a family named by its prefix (`podnet_bench_*`) is not one to look up.
    let named: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("podnet_") && !w.ends_with('_'))
        .collect();
    assert!(named.len() >= 3, "{help}");
    for name in named {
        let exported = t.lines().any(|l| {
            l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ']))
                || l.strip_prefix("# TYPE ").is_some_and(|r| r.split(' ').next() == Some(name))
        });
        assert!(exported, "--help names {name}, which the agent does not export:\n{t}");
    }
}

/// A counters folder with a FIFO nobody writes, a link to `/dev/zero`, a 64 MiB file, a
/// folder and a name that is not UTF-8, a device folder whose name is not and a port folder
/// that is not a number: the scrape ends at once, bounded in what it reads,
/// each of them named in `podnet_agent_source_error`, the other counters served.
#[test]
fn hostile_files_in_the_tree_are_named_not_hung_on() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .args(["-r", fixture("mlx5").to_str().unwrap(), dir.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let root = dir.path().join("sys");
    let counters = root.join("class/infiniband/mlx5_0/ports/1/hw_counters");
    let made = Command::new("mkfifo").arg(counters.join("zz_fifo")).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", counters.join("zz_zero")).unwrap();
    let big = std::fs::File::create(counters.join("zz_big")).unwrap();
    big.set_len(64 << 20).unwrap();
    std::fs::create_dir(counters.join("zz_folder")).unwrap();
    std::fs::write(counters.join(std::ffi::OsStr::from_bytes(b"zz_\xff")), "1\n").unwrap();
    // A device folder whose name is not UTF-8, a port folder that is not a number.
    let class = root.join("class/infiniband");
    std::fs::create_dir(class.join(std::ffi::OsStr::from_bytes(b"mlx5_\xfe"))).unwrap();
    std::fs::create_dir(class.join("mlx5_0/ports/one")).unwrap();
    let t0 = Instant::now();
    let t = print(&root);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let d = "class/infiniband/mlx5_0/ports/1/hw_counters";
    let odd = ["class/infiniband/mlx5_\u{fffd}", "class/infiniband/mlx5_0/ports/one"];
    for name in ["zz_fifo", "zz_zero", "zz_big", "zz_folder", "zz_\u{fffd}"] {
        let path = format!("{d}/{name}");
        assert_eq!(
            value(&t, "podnet_agent_source_error", &[("path", &path)]),
            Some(1.0),
            "{path}\n{t}"
        );
    }
    for path in odd {
        let e = value(&t, "podnet_agent_source_error", &[("path", path)]);
        assert_eq!(e, Some(1.0), "{path}\n{t}");
    }
    // The rest is served.
    let p = [("device", "mlx5_0"), ("port", "1")];
    assert!(value(&t, "podnet_rdma_out_of_sequence_total", &p).is_some(), "{t}");
}
