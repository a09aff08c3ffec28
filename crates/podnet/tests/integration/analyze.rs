//! `podnet capture analyze` as a user runs it: on the simulator's committed captures (their
//! exact counts are checked in crates/capture/tests/analyze_sim.rs, which writes them), exit
//! status by severity, `--json`, `--html`, and bad input.

use serde_json::Value;

use crate::util::{podnet, stderr, stdout, testdata};

fn analyze(name: &str, extra: &[&str]) -> (i32, String) {
    let path = testdata(&format!("capture/{name}"));
    let mut args = vec!["capture", "analyze"];
    args.extend(extra);
    args.push(path.to_str().unwrap());
    let o = podnet(&args);
    (o.status.code().unwrap_or(-1), stdout(&o))
}

#[test]
fn analyze_exits_by_the_worst_finding() {
    // (capture, exit status, the first finding's kind)
    for (name, code, first) in [
        ("sim-clean.pcap", 0, None),
        ("sim-burst-loss-at-receiver.pcap", 0, Some("loss")),
        ("sim-burst-loss-at-sender.pcap", 0, Some("loss-after-capture")),
        ("sim-capture-missed.pcap", 0, Some("capture-missed")),
        ("sim-congestion.pcap", 0, Some("congestion")),
        ("sim-rnr.pcap", 0, Some("rnr")),
        ("sim-access-error.pcap", 1, Some("access-error")),
        ("sim-vanished.pcap", 1, Some("unanswered")),
    ] {
        let (rc, text) = analyze(name, &[]);
        assert_eq!(rc, code, "{name}: {text}");
        match first {
            None => assert!(text.contains("no findings"), "{name}: {text}"),
            Some(k) => assert!(
                text.contains(&format!("1. WARN {k} (#1 "))
                    || text.contains(&format!("1. ERROR {k} (#1 ")),
                "{name}: {text}"
            ),
        }
        let (rc, json) = analyze(name, &["--json"]);
        assert_eq!(rc, code, "{name}");
        let v: Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}: {json}"));
        assert_eq!(v["findings"][0]["kind"].as_str(), first, "{name}");
        let d = &v["connections"][0]["directions"][0];
        for key in [
            "src",
            "dst",
            "dest_qp",
            "packets",
            "opcodes",
            "psn",
            "answers",
            "congestion",
            "goodput",
        ] {
            assert!(!d[key].is_null(), "{name}: no {key} in {d}");
        }
    }
}

#[test]
fn analyze_writes_an_html_timeline_with_the_findings_first() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let (rc, _) = analyze("sim-burst-loss-at-receiver.pcap", &["--html", html.to_str().unwrap()]);
    assert_eq!(rc, 0);
    let page = std::fs::read_to_string(&html).unwrap();
    let findings = page.find("<h2>Findings</h2>").expect("findings");
    let timeline = page.find("<svg").expect("a timeline");
    assert!(findings < timeline);
    assert!(page[findings..timeline].contains("lost packets on the path"));
    // The loss and the resends are marked on the timeline.
    assert!(page.contains("gap at PSN 296"), "{page}");
    assert_eq!(page.matches("<title>resent PSN").count(), 8);
}

#[test]
fn analyze_refuses_what_is_not_a_capture_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pcap");
    std::fs::write(&bad, b"not a capture at all").unwrap();
    for path in [bad.to_str().unwrap(), "/nonexistent/x.pcap"] {
        let o = podnet(&["capture", "analyze", path]);
        assert_eq!(o.status.code(), Some(2), "{path}");
        let e = stderr(&o);
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

/// The server's QPN in a session log: the first `local address` line (the server's output
/// comes first).
fn server_qpn(log: &str) -> u32 {
    let line = log.lines().find(|l| l.contains("local address:")).expect("a local address line");
    let qpn = line.split_whitespace().skip_while(|w| *w != "QPN").nth(1).unwrap();
    u32::from_str_radix(qpn.trim_start_matches("0x"), 16).unwrap()
}

/// Captures recorded in the QEMU guest between rxe devices, and between a podnet peer and
/// rxe, with faults injected there (`rxevm record-faults`; each log says the fault): the
/// clean one gives no finding, each fault its finding on the server's QP.
#[test]
fn analyze_names_each_fault_recorded_in_the_guest() {
    for (name, code, first) in [
        ("rxe-clean", 0, None),
        ("rxe-random-loss", 0, Some("loss")),
        ("rxe-burst-loss", 0, Some("loss-after-capture")),
        ("rxe-ce", 0, Some("ce-without-cnp")),
        ("podnet-rnr", 0, Some("rnr")),
        ("podnet-bad-rkey", 1, Some("access-error")),
    ] {
        let log = std::fs::read_to_string(testdata(&format!("capture/rxe/{name}.log"))).unwrap();
        assert!(log.contains("# fault: "), "{name}: the log names its fault");
        let (rc, json) = analyze(&format!("rxe/{name}.pcap"), &["--json"]);
        assert_eq!(rc, code, "{name}: {json}");
        let v: Value = serde_json::from_str(&json).unwrap();
        let findings = v["findings"].as_array().unwrap();
        let Some(kind) = first else {
            assert!(findings.is_empty(), "{name}: {json}");
            continue;
        };
        // Only the fault's own findings.
        assert_eq!(findings.len(), 1, "{name}: {json}");
        let f = &findings[0];
        assert_eq!(f["kind"], kind, "{name}: {json}");
        let qp = format!("169.254.88.1 > 169.254.88.2 QP {:#x}", server_qpn(&log));
        assert_eq!(f["flow"], qp.as_str(), "{name}: {json}");
        let d = &v["connections"][0]["directions"][0];
        match name {
            // Linux 6.1's rxe sends Not-ECT; the marks were the fault's.
            "rxe-ce" => {
                assert_eq!(
                    (d["congestion"]["ect"].as_u64(), d["congestion"]["cnps"].as_u64()),
                    (Some(0), Some(0))
                );
                assert!(f["cause"].as_str().unwrap().contains("CE seen, no CNP"));
            }
            "podnet-rnr" => {
                assert!(f["cause"].as_str().unwrap().contains("receiver not ready"));
                // The sequence errors behind each RNR NAK are not losses.
                assert_eq!(d["psn"]["lost_after_capture"], 0, "{json}");
                assert_eq!(d["answers"]["rnr_naks"], d["psn"]["burst_after_rnr"]);
            }
            "podnet-bad-rkey" => {
                let used = log.split("used as ").nth(1).unwrap().split_whitespace().next().unwrap();
                assert!(
                    f["summary"].as_str().unwrap().contains(&format!("R_Key {used}")),
                    "{json}"
                );
            }
            _ => {}
        }
    }
}

/// Every capture in testdata (perftest and rc_pingpong between rxe devices, the shared
/// vectors, podnet's own, the simulator's, the fault recordings): analyzed to the end, a
/// report that parses, never a panic.
#[test]
fn analyze_reads_every_committed_capture() {
    let mut seen = 0;
    for dir in ["roce", "rxe", "capture", "capture/rxe"] {
        for e in std::fs::read_dir(testdata(dir)).unwrap().flatten() {
            let p = e.path();
            let name = p.to_string_lossy().to_string();
            if !(name.ends_with(".pcap") || name.ends_with(".pcapng")) {
                continue;
            }
            let o = podnet(&["capture", "analyze", "--json", &name]);
            assert!(matches!(o.status.code(), Some(0 | 1)), "{name}: {}", stderr(&o));
            let v: Value =
                serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(v["frames"].as_u64().unwrap() > 0, "{name}");
            seen += 1;
        }
    }
    assert!(seen >= 50, "only {seen} captures");
}
