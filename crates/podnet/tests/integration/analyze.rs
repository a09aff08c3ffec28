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
