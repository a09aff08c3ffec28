//! Issue 43: rank 0 trusts no rank. A real rank 0 (`podnet qualify` across a two-host pod on
//! soft devices on loopback addresses) against a rank 1 written here that joins as a rank
//! does and then misbehaves: answers for jobs out of range and of other phases, answers that do
//! not parse, never listens when asked, and sends figures no link could carry.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn plan(dir: &std::path::Path, net: u8) -> std::path::PathBuf {
    plan_of(dir, net, 2)
}

/// A pod of `n` hosts h0… on soft:127.0.`net`.1…, all pairs, one short WRITE test.
fn plan_of(dir: &std::path::Path, net: u8, n: u8) -> std::path::PathBuf {
    let p = dir.join("pod.toml");
    let mut text =
        "name = \"rogue\"\n[[perf]]\ntest = \"write-bw\"\nsizes = [65536]\niters = 200\n\
                    [pod]\npairs = \"all\"\nstall_seconds = 2\n"
            .to_string();
    for i in 0..n {
        text += &format!(
            "[[pod.hosts]]\nname = \"h{i}\"\nrails = [{{ device = \"soft:127.0.{net}.{}\", tor = \"t0\" }}]\n",
            i + 1
        );
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// Rank 1 as a rogue: joins with host h1's facts, then for each command of rank 0 answers
/// as `answer` says; returns when rank 0 says the run is over (or gives up on it).
fn rogue(net: u8, port: u16, answer: impl FnMut(&Value) -> Vec<Value>) {
    rogue_of(net, port, 2, answer);
}

/// [`rogue`] in a world of `size` ranks.
fn rogue_of(net: u8, port: u16, size: u32, mut answer: impl FnMut(&Value) -> Vec<Value>) {
    let world = rendezvous::world::World {
        rank: 1,
        size,
        coordinator: format!("127.0.{net}.1:{port}").parse().unwrap(),
        launcher: rendezvous::world::Launcher::Flags,
    };
    let rails: Vec<topology::Rail> =
        vec![topology::Rail { device: format!("soft:127.0.{net}.2"), tor: "t0".into() }];
    let facts = qualify::podrun::host_facts(std::path::Path::new("/sys"), 1, "h1", &rails);
    let info = serde_json::to_value(qualify::podrun::RankInfo { facts }).unwrap();
    let t = rendezvous::bootstrap::Timeouts::default();
    let session = rendezvous::bootstrap::join(&world, "rogue", info, &t, None).expect("joined");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(150) {
        let cmd = match session.recv(Duration::from_millis(200)) {
            Ok(Some((_, cmd))) => cmd,
            Ok(None) => continue,
            // Rank 0 ended the run (or lost another rank): done.
            Err(_) => return,
        };
        if cmd["op"] == "done" {
            return;
        }
        for a in answer(&cmd) {
            let _ = session.send(0, a);
        }
    }
}

#[test]
fn a_rogue_rank_cannot_crash_rank_0_nor_pass_a_figure_no_link_carries() {
    let net = 231;
    let port = 29431;
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(dir.path(), net);
    let reports = dir.path().join("rep");
    let t0 = Instant::now();
    let rank0 = Command::new(env!("CARGO_BIN_EXE_podnet"))
        .args(["qualify", "--plan"])
        .arg(&plan)
        .args(["--rank", "0", "--world-size", "2", "--coordinator"])
        .arg(format!("127.0.{net}.1:{port}"))
        .arg("--report-dir")
        .arg(&reports)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut strays_sent = false;
    rogue(net, port, |cmd| {
        let job = cmd["job"].as_u64().unwrap_or(0);
        match cmd["op"].as_str() {
            // Asked to listen: answers for jobs that are not this phase's, an answer in the
            // wrong state, one that does not parse — then silence.
            Some("serve") if !strays_sent => {
                strays_sent = true;
                vec![
                    json!({"reply": "listening", "job": u64::MAX, "addr": "127.0.0.1:1"}),
                    json!({"reply": "listening", "job": job + 1000, "addr": "127.0.0.1:1"}),
                    json!({"reply": "not_serving", "job": job.wrapping_sub(1), "error": "x"}),
                    json!({"reply": "measured", "job": job, "results": []}),
                    json!({"reply": "what", "job": job}),
                ]
            }
            Some("serve") => vec![],
            // Asked to measure: 10^12 MB/s on a soft device.
            Some("measure") => {
                let n = cmd["tests"].as_array().map_or(1, Vec::len);
                let r = json!({"figures": [{"kind": "bw", "size": 65536, "mb_per_s": 1e12}],
                               "error": null, "sent_pkts": 1, "retransmitted_pkts": 0});
                vec![json!({"reply": "measured", "job": job, "results": vec![r; n]})]
            }
            _ => vec![],
        }
    });
    let out = rank0.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "rank 0 panicked: {err}");
    let report = std::fs::read_to_string(reports.join("report.json"))
        .unwrap_or_else(|e| panic!("no report ({e}); rank 0 said: {err}"));
    assert!(report.contains("rank 1 (h1) did not listen within 15 s"), "{report}");
    assert!(report.contains("implausible figure"), "{report}");
    assert_eq!(out.status.code(), Some(1), "a failed run: {err}");
    assert!(err.contains("set aside"), "the stray answers are said: {err}");
    // Bounded by the work: a silent server costs its listen deadline, not ~90 s per phase.
    assert!(t0.elapsed() < Duration::from_secs(120), "took {:?}", t0.elapsed());
}

/// A copy of a recorded host to spoil.
fn spoilable(tree: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = crate::util::testdata(&format!("doctor/{tree}"));
    let ok = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    dir
}

/// `podnet args…`, killed after `limit`: (exit code, stdout, stderr, how long). Its output is
/// read as it comes (a full pipe must not stall it).
fn bounded(args: &[&str], limit: Duration) -> (Option<i32>, String, String, Duration) {
    let t0 = Instant::now();
    let c = Command::new(env!("CARGO_BIN_EXE_podnet"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.id().to_string();
    let (done, stop) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if stop.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    });
    let o = c.wait_with_output().unwrap();
    let _ = done.send(());
    let _ = killer.join();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code(), s(&o.stdout), s(&o.stderr), t0.elapsed())
}

fn mkfifo(p: &std::path::Path) {
    let _ = std::fs::remove_file(p);
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

#[test]
fn recorded_trees_that_never_end_are_read_bounded() {
    // The kernel log and a command's output linked to /dev/zero, a PCI config space a FIFO;
    // then the kernel log a FIFO.
    let dir = spoilable("mlx5-problems");
    let root = dir.path();
    for f in ["kmsg", "cmd/ethtool-g-ens1f0np0", "cmd/ethtool-S-ens1f0np0"] {
        std::fs::remove_file(root.join(f)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join(f)).unwrap();
    }
    mkfifo(&root.join("sys/bus/pci/devices/0000:3a:00.0/config"));
    let r = root.to_str().unwrap();
    let limit = Duration::from_secs(30);
    let (code, out, err, took) = bounded(&["doctor", "--root", r], limit);
    assert!(matches!(code, Some(0 | 1)), "{code:?} after {took:?}: {err}");
    assert!(out.contains("errors"), "{out}");
    mkfifo(&root.join("kmsg"));
    let (code, _, err, took) = bounded(&["doctor", "--root", r], limit);
    assert!(matches!(code, Some(0 | 1)), "a FIFO as kmsg: {code:?} after {took:?}: {err}");
    let other = spoilable("clean");
    let rs = [r, other.path().to_str().unwrap()];
    let (code, _, err, took) = bounded(&["doctor", "--compare", rs[0], rs[1]], limit);
    assert!(matches!(code, Some(0 | 1)), "--compare: {code:?} after {took:?}: {err}");
    let sys = root.join("sys");
    let proc = root.join("proc");
    let args = [
        "agent",
        "--print",
        "--interval",
        "0.2",
        "--sysfs-root",
        sys.to_str().unwrap(),
        "--procfs-root",
        proc.to_str().unwrap(),
    ];
    let (code, out, err, took) = bounded(&args, limit);
    assert_eq!(code, Some(0), "the agent: after {took:?}: {err}");
    assert!(out.contains("podnet_pcie_link_width"), "{out}");
}

#[test]
fn a_recording_is_private_and_writes_through_no_link() {
    let parent = tempfile::tempdir().unwrap();
    let rec = parent.path().join("rec");
    let (code, _, err, _) = bounded(
        &[
            "doctor",
            "--root",
            crate::util::testdata("doctor/mlx5-problems").to_str().unwrap(),
            "--record",
            rec.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(code, Some(0 | 1)), "{err}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&rec).unwrap().mode() & 0o777, 0o700);
    let kmsg = std::fs::metadata(rec.join("kmsg")).unwrap();
    assert_eq!(kmsg.mode() & 0o077, 0, "the kernel log is readable by others");
    // A recording folder that exists but is another's to write, or a link: refused.
    let open = parent.path().join("open");
    std::fs::create_dir(&open).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let link = parent.path().join("link");
    std::os::unix::fs::symlink(parent.path().join("elsewhere"), &link).unwrap();
    for bad in [&open, &link] {
        let (code, _, err, _) = bounded(
            &[
                "doctor",
                "--root",
                crate::util::testdata("doctor/clean").to_str().unwrap(),
                "--record",
                bad.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        );
        assert_eq!(code, Some(2), "{}: {err}", bad.display());
    }
    assert!(!parent.path().join("elsewhere").exists());
}

/// A RoCEv2 SEND_ONLY frame on QP `qp` at PSN `psn`, from 10.1.x.y.
fn send_only(src: std::net::Ipv4Addr, qp: u32, psn: u32) -> Vec<u8> {
    use wire::frame::{FrameBuilder, IpParams, Link};
    use wire::{Opcode, Psn, Qpn, bth, roce};
    let b = FrameBuilder {
        link: Link::Ethernet { src: [2, 0, 0, 0, 0, 1], dst: [2, 0, 0, 0, 0, 2], vlans: vec![] },
        ip: IpParams::V4 { src, dst: "10.9.0.2".parse().unwrap(), tos: 2, ttl: 64, id: 1 },
        src_port: 0xc000,
        dst_port: 4791,
        udp_checksum: false,
    };
    let r = roce::Repr::with_zeroed_headers(bth::Repr {
        ack_req: true,
        ..bth::Repr::new(Opcode(0x04), Qpn::new(qp), Psn::new(psn))
    });
    b.build(&r, &[7u8; 64]).unwrap()
}

#[test]
fn capture_analyze_is_linear_in_flows_and_says_what_it_could_not_make_sense_of() {
    let dir = tempfile::tempdir().unwrap();
    // 120,000 flows of one packet each (a QP each, from three hosts): the whole file 12 MB.
    let frames: Vec<(Vec<u8>, u32)> = (0..120_000u32)
        .map(|i| {
            let src = std::net::Ipv4Addr::new(10, 9, 1, (i % 3) as u8 + 1);
            let f = send_only(src, 0x100 + i, 1);
            let len = f.len() as u32;
            (f, len)
        })
        .collect();
    let many = dir.path().join("many.pcap");
    crate::util::write_pcap(&many, 1, &frames);
    let (code, out, err, took) =
        bounded(&["capture", "analyze", many.to_str().unwrap()], Duration::from_secs(60));
    assert!(matches!(code, Some(0 | 1)), "{code:?} after {took:?}: {err}");
    assert!(took < Duration::from_secs(30), "120,000 flows took {took:?}");
    assert!(out.contains("120000 RoCEv2 packets"), "{}", &out[..out.len().min(500)]);
    // Its peak memory: a flow holds what it saw, not a ring sized for a long one.
    let rss = peak_rss_kib(&["capture", "analyze", "--json", many.to_str().unwrap()]);
    assert!(rss < 1_500_000, "{rss} KiB for 120,000 one-packet flows");
    // A one-packet flow has no rate; timestamps going backwards are said and not believed.
    let back = dir.path().join("back.pcap");
    let src = std::net::Ipv4Addr::new(10, 9, 1, 1);
    // Frames at 2 ms, then 1 ms and 1.1 ms: the clock stepped back between the first two.
    let frames = [
        (send_only(src, 5, 1), 2_000),
        (send_only(src, 6, 1), 1_000),
        (send_only(src, 6, 2), 1_100),
    ];
    let stamped = frames.iter().map(|(f, us)| (f.as_slice(), f.len() as u32, *us));
    crate::util::write_pcap_stamped(&back, 1, stamped);
    let (_, out, err, _) =
        bounded(&["capture", "analyze", back.to_str().unwrap()], Duration::from_secs(30));
    assert!(out.contains("went back in time"), "{out}{err}");
    assert!(out.contains("no rate"), "{out}");
    assert!(!out.contains("Mbit/s over"), "an impossible rate: {out}");
}

/// The peak resident memory of `podnet args…`, KiB (GNU time's %M).
fn peak_rss_kib(args: &[&str]) -> u64 {
    let o = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_podnet"))
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("/usr/bin/time (apt-get install time)");
    let err = String::from_utf8_lossy(&o.stderr);
    err.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("{err}"))
}

#[test]
fn a_rank_that_heartbeats_but_never_answers_is_named_beside_a_rank_that_dies() {
    // h1 (a rogue: it joins and heartbeats, and answers nothing) and h2 (honest, killed
    // 12 s in): the report names h2 as lost and h1 as the rank that held the run.
    let net = 232;
    let port = 29432;
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_of(dir.path(), net, 3);
    let reports = dir.path().join("rep");
    let coordinator = format!("127.0.{net}.1:{port}");
    let rank = |r: &str, report: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_podnet"));
        c.args(["qualify", "--plan"]).arg(&plan);
        c.args(["--rank", r, "--world-size", "3", "--coordinator", &coordinator]);
        if report {
            c.arg("--report-dir").arg(&reports);
        }
        c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let rank0 = rank("0", true);
    let mut rank2 = rank("2", false);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(12));
        let _ = rank2.kill();
        let _ = rank2.wait();
    });
    rogue_of(net, port, 3, |_| vec![]);
    killer.join().unwrap();
    let out = rank0.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let report = std::fs::read_to_string(reports.join("report.json"))
        .unwrap_or_else(|e| panic!("no report ({e}); rank 0 said: {err}"));
    let v: Value = serde_json::from_str(&report).unwrap();
    let suspects: Vec<(String, String)> = v["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["component"].as_str().unwrap_or("").to_string(),
                s["evidence"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        suspects.iter().any(|(c, e)| c == "h2" && e.contains("stopped answering")),
        "{suspects:?}"
    );
    assert!(
        suspects.iter().any(|(c, e)| c == "h1" && e.contains("answers heartbeats")),
        "the silent rank is named: {suspects:?}"
    );
}
