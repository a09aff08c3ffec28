//! `podnet qualify`: the built-in plan passes; a failing check is named the same way in the
//! summary, report.json, junit.xml (read by PyPI's junitparser) and report.html; malformed
//! plans are one-line errors naming file, line and key; report.html renders in headless
//! Chromium with no console errors and every chart has a size.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::{in_netns, podnet, require_tool, stderr, stdout};

/// Runs `podnet qualify ARGS --report-dir out` in a private network namespace and a temporary
/// folder; returns (exit code, stdout, report.json, junit.xml, report.html).
fn qualify(plan: Option<&str>, extra: &str) -> (i32, String, Value, String, String) {
    qualify_with_env(plan, extra, "")
}

/// [`qualify`] with `env` (`NAME=value …`) in podnet's environment.
fn qualify_with_env(
    plan: Option<&str>,
    extra: &str,
    env: &str,
) -> (i32, String, Value, String, String) {
    let plan_arg = match plan {
        Some(p) => {
            let esc = p.replace('\'', "'\\''");
            format!("printf '%s' '{esc}' > plan.toml; P='--plan plan.toml'")
        }
        None => "P=".into(),
    };
    let o = in_netns(&format!(
        "{plan_arg}\n{env} \"$PODNET\" qualify $P --report-dir out {extra} > summary.txt 2> err.txt; rc=$?\n\
         echo \"rc=$rc\"; cat summary.txt; echo '=== json'; cat out/report.json; echo; echo '=== junit';\n\
         cat out/junit.xml; echo '=== html'; cat out/report.html; echo '=== err'; cat err.txt"
    ));
    let all = stdout(&o);
    let (head, rest) =
        all.split_once("=== json\n").unwrap_or_else(|| panic!("{all}{}", stderr(&o)));
    let (json, rest) = rest.split_once("=== junit\n").unwrap();
    let (junit, rest) = rest.split_once("=== html\n").unwrap();
    let (html, _err) = rest.split_once("=== err\n").unwrap();
    let rc = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("rc="))
        .and_then(|c| c.parse().ok())
        .unwrap();
    let v: Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {all}"));
    (rc, head.to_string(), v, junit.to_string(), html.to_string())
}

/// junitparser's view of a junit.xml: (test cases, failures as "name: message").
fn junitparser(xml: &str) -> (usize, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("junit.xml");
    std::fs::write(&f, xml).unwrap();
    let script = "import sys\nfrom junitparser import JUnitXml, Failure\nx = JUnitXml.fromfile(sys.argv[1])\n\
        n = 0\nfor s in x:\n    for c in s:\n        n += 1\n        for r in c.result:\n            \
        if isinstance(r, Failure):\n                print('FAIL', c.name + ': ' + (r.message or ''))\nprint('CASES', n)\n";
    let o = Command::new("python3")
        .args(["-c", script, f.to_str().unwrap()])
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "junitparser (scripts/deps.sh installs it from PyPI): {}",
        stderr(&o)
    );
    let out = stdout(&o);
    let cases = out.lines().find_map(|l| l.strip_prefix("CASES ")).unwrap().parse().unwrap();
    let fails = out.lines().filter_map(|l| l.strip_prefix("FAIL ")).map(str::to_string).collect();
    (cases, fails)
}

fn checks(v: &Value) -> &Vec<Value> {
    v["checks"].as_array().unwrap()
}

#[test]
fn the_built_in_plan_passes_and_reports() {
    let t = std::time::Instant::now();
    let bench = tempfile::tempdir().unwrap();
    let publish = format!("--publish={}", bench.path().display());
    let (rc, summary, v, junit, html) = qualify(None, &publish);
    assert_eq!(rc, 0, "{summary}");
    let s = &v["summary"];
    assert_eq!(s["failed"], 0, "{summary}");
    // 4 devices x 4 checks, 4 devices with themselves x (2 bandwidth + 2 latency), 6 pairs x
    // (2 bandwidth + 2 latency + 1 integrity), 4 MTUs.
    assert_eq!(
        s["passed"].as_u64().unwrap() + s["skipped"].as_u64().unwrap(),
        16 + 16 + 30 + 4,
        "{summary}"
    );
    assert!(summary.contains("default: 4 soft devices on loopback: "), "{summary}");
    // Each device with itself (the matrix's diagonal), then the 6 pairs.
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 4 + 6);
    assert!(pairs[..4].iter().all(|p| p["a"] == p["b"] && p["status"] == "pass"), "{pairs:?}");
    let device_bw = checks(&v)
        .iter()
        .find(|c| c["name"] == "perf/write-bw/65536B/soft:127.0.1.3/bandwidth")
        .expect("a device's own bandwidth check");
    assert!(device_bw["measured"].as_f64().unwrap() > 0.0, "{device_bw}");
    assert!(device_bw["detail"].as_str().unwrap().contains("with itself"), "{device_bw}");
    for c in checks(&v) {
        assert!(c["name"].is_string() && c["unit"].is_string() && c["detail"].is_string(), "{c}");
        assert!(["pass", "fail", "skipped"].contains(&c["status"].as_str().unwrap()), "{c}");
    }
    let integrity: Vec<&Value> = checks(&v)
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("integrity/"))
        .collect();
    assert_eq!(integrity.len(), 6);
    for c in integrity {
        assert!(c["detail"].as_str().unwrap().contains(" 0 damaged"), "{c}");
    }
    let (cases, fails) = junitparser(&junit);
    assert_eq!((cases, fails.len()), (checks(&v).len(), 0));
    assert_eq!(html.matches("<svg").count(), 3, "bandwidth, latency, pair matrix");
    assert!(t.elapsed().as_secs() < 60, "the built-in plan took {:?}", t.elapsed());
    // --publish: a record per device and pair, test and size (2 WRITE sizes, 1 SEND size),
    // each as the agent reads it; the latencies with every iteration (2000 posts).
    let (records, errors) = telemetry::bench::read_dir(bench.path());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(records.len(), (4 + 6) * 3, "{records:?}");
    let lat = records
        .iter()
        .find(|r| {
            r.test == "send-lat" && r.device == "soft:127.0.1.2" && r.peer == "soft:127.0.1.1"
        })
        .expect("the pair's latency, measured by its client");
    assert_eq!(lat.latency_seconds.as_ref().unwrap().count, 1999);
    let own = records
        .iter()
        .find(|r| r.test == "write-bw" && r.device == "soft:127.0.1.4" && r.peer == r.device)
        .expect("a device's own bandwidth");
    assert!(own.bandwidth_bytes_per_second.unwrap() > 0.0, "{own:?}");
}

#[test]
fn an_impossible_threshold_fails_and_is_named_everywhere() {
    let plan = "name = \"impossible\"\ndevices = [\"soft:127.0.2.1\", \"soft:127.0.2.2\"]\n\
        [[perf]]\ntest = \"write-bw\"\nsizes = [65536]\niters = 500\nmin_bw_mb_per_s = 1e12\n\
        [[perf]]\ntest = \"send-lat\"\non = \"both\"\niters = 500\nmax_median_us = 1000000\n";
    let (rc, summary, v, junit, html) = qualify(Some(plan), "");
    assert_eq!(rc, 1, "{summary}");
    let name = "perf/write-bw/65536B/soft:127.0.2.1<->soft:127.0.2.2/bandwidth";
    // The summary.
    assert!(
        summary.lines().any(|l| l.starts_with("fail")
            && l.contains(name)
            && l.contains("want >= 1000000000000")),
        "{summary}"
    );
    assert!(summary.contains("1 failed"), "{summary}");
    // report.json.
    let failed: Vec<&Value> = checks(&v).iter().filter(|c| c["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["name"], name);
    assert_eq!(failed[0]["unit"], "MB/s");
    assert!(failed[0]["measured"].as_f64().unwrap() > 0.0);
    assert_eq!(failed[0]["threshold"], ">= 1000000000000");
    // It was measured a second time before it failed, and says so.
    assert!(
        failed[0]["detail"].as_str().unwrap().contains("measured twice; the first run gave "),
        "{}",
        failed[0]
    );
    // The latency check with a reachable threshold passed, on the pair and on each device.
    for on in ["soft:127.0.2.1<->soft:127.0.2.2", "soft:127.0.2.1", "soft:127.0.2.2"] {
        let name = format!("perf/send-lat/2B/{on}/median");
        assert!(checks(&v).iter().any(|c| c["status"] == "pass" && c["name"] == name), "{name}");
    }
    // junit.xml, read by junitparser: the same name, the measured value in the message.
    let (_, fails) = junitparser(&junit);
    assert_eq!(fails.len(), 1, "{fails:?}");
    assert!(
        fails[0].starts_with(&format!("{name}: {name}: "))
            && fails[0].contains("MB/s, want >= 1000000000000"),
        "{fails:?}"
    );
    // report.html: in the failed table, and the pair's cell red.
    let failed_table =
        html.split("<table id=\"failed\">").nth(1).unwrap().split("</table>").next().unwrap();
    assert!(
        failed_table.contains(&name.replace('<', "&lt;").replace('>', "&gt;")),
        "{failed_table}"
    );
    assert!(html.contains("fill=\"#c62828\""), "the pair matrix shows the failure");
    assert!(html.contains("FAILED"));
}

#[test]
fn malformed_plans_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (
            "name = \"x\"\ndevices = [\"soft:127.0.0.1\"]\n[device]\nport_actve = true\n",
            "plan.toml:4: unknown field `port_actve`",
        ),
        (
            "name = \"x\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.2\"]\n[[perf]]\ntest = \"write-bandwidth\"\n",
            "plan.toml:4: `perf.test` = \"write-bandwidth\"",
        ),
        (
            "name = \"x\"\ndevices = [\"soft:127.0.0.1\"]\n[integrity]\nseconds = -2\n",
            "plan.toml:4: `integrity.seconds` = -2",
        ),
        ("name = \"x\"\ndevices = \"soft:127.0.0.1\"\n", "plan.toml:2:"),
        (
            "name = \"x\"\ndevices = [\"soft:127.0.0.1\"]\n[[perf]]\ntest = \"write-bw\"\non = \"racks\"\n",
            "plan.toml:5: unknown variant `racks`",
        ),
    ] {
        let p = dir.path().join("plan.toml");
        std::fs::write(&p, text).unwrap();
        let o = podnet(&[
            "qualify",
            "--plan",
            p.to_str().unwrap(),
            "--report-dir",
            dir.path().join("r").to_str().unwrap(),
        ]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{text}: {e}");
        assert!(e.contains(want), "{want:?} not in {e:?}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(!dir.path().join("r").exists(), "no report for a plan that could not run");
    }
    let o = podnet(&["qualify", "--plan", "/nonexistent.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent.toml"), "{}", stderr(&o));
    // What is not a plan is refused at once, read no further than the cap: an endless
    // device, a FIFO nobody writes (opening it would wait forever), a 2 MiB file.
    let fifo = dir.path().join("fifo.toml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let big = dir.path().join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    for (path, want) in [
        (std::path::Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
        (big.as_path(), "larger than 1024 KiB"),
    ] {
        let t0 = std::time::Instant::now();
        let o = podnet(&["qualify", "--plan", path.to_str().unwrap()]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{path:?}: {e}");
        assert!(e.contains(want) && e.trim().lines().count() == 1, "{path:?}: {e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{path:?}");
    }
}

/// report.html in headless Chromium: no console errors, and every `<svg>` chart has a
/// non-empty bounding box (a copy of the report with a measuring script appended is loaded;
/// the report itself has no script). The screenshot is kept in the target folder.
#[test]
fn the_html_report_renders_in_chromium() {
    require_tool("chromium");
    let (rc, summary, _, _, html) = qualify(
        Some(
            "name = \"two\"\ndevices = [\"soft:127.0.3.1\", \"soft:127.0.3.2\"]\n[[perf]]\ntest = \"write-bw\"\nsizes = [4096, 65536]\niters = 300\n[[perf]]\ntest = \"send-lat\"\niters = 300\n",
        ),
        "",
    );
    assert_eq!(rc, 0, "{summary}");
    let dir = tempfile::tempdir().unwrap();
    let probe = html.replace(
        "</body>",
        "<script>const b = [...document.querySelectorAll('svg')].map(s => { const r = s.getBoundingClientRect(); return Math.round(r.width) + 'x' + Math.round(r.height); });\n\
         document.body.setAttribute('data-svg-boxes', b.join(','));</script></body>",
    );
    let f = dir.path().join("report.html");
    std::fs::write(&f, &probe).unwrap();
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qualify-report.png");
    let run = |extra: &[&str]| {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1280,2400",
            ])
            .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
            .args(extra)
            .arg(format!("file://{}", f.display()))
            .output()
            .expect("chromium runs")
    };
    let o = run(&["--dump-dom"]);
    let dom = stdout(&o);
    let err = stderr(&o);
    let console: Vec<&str> = err.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    let boxes = dom
        .split("data-svg-boxes=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no result in the DOM: {dom}\n{err}"));
    let boxes: Vec<&str> = boxes.split(',').collect();
    assert_eq!(boxes.len(), 3, "{boxes:?}");
    for b in &boxes {
        let (w, h) = b.split_once('x').unwrap();
        assert!(w.parse::<u32>().unwrap() > 100 && h.parse::<u32>().unwrap() > 100, "{boxes:?}");
    }
    std::fs::write(&f, &html).unwrap();
    let o = run(&[&format!("--screenshot={}", shot.display())]);
    assert!(shot.exists(), "no screenshot: {}", stderr(&o));
    eprintln!(
        "screenshot: {} ({} bytes); chart boxes {boxes:?}",
        shot.display(),
        std::fs::metadata(&shot).unwrap().len()
    );
}

/// A plan of 400 devices: device checks open one device at a time with no progress thread
/// spinning, so the process never holds hundreds of threads (it once opened every device at
/// once, each with a busy-poll thread: 231 s for 1000 on 2 cores). The thread count is
/// sampled while it runs; every device is checked.
#[test]
fn many_devices_are_checked_one_at_a_time() {
    let devices: Vec<String> =
        (0..400).map(|i| format!("\"soft:127.0.{}.{}\"", 2 + i / 200, 1 + i % 200)).collect();
    let plan = format!(
        "name = \"400 devices\"\ndevices = [{}]\npairs = [[\"soft:127.0.2.1\", \"soft:127.0.2.2\"]]\n\
         [device]\nport_active = true\nroce_v2_gid = true\n",
        devices.join(", ")
    );
    let o = in_netns(&format!(
        "cat > plan.toml <<'PLAN'\n{plan}PLAN\n\
         \"$PODNET\" qualify --plan plan.toml --report-dir out --json > report.json 2> err.txt & p=$!\n\
         max=0; while kill -0 $p 2>/dev/null; do\n\
           t=$(awk '/^Threads:/ {{print $2}}' /proc/$p/status 2>/dev/null || echo 0)\n\
           [ \"${{t:-0}}\" -gt \"$max\" ] && max=$t; sleep 0.02; done\n\
         wait $p; echo \"rc=$? max_threads=$max\"; cat err.txt; echo ===; cat report.json"
    ));
    let all = stdout(&o);
    let (out, json) = all.split_once("===\n").unwrap_or_else(|| panic!("{all}{}", stderr(&o)));
    let v: Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {all}"));
    let present = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.ends_with("/present")))
        .filter(|c| c["status"] == "pass")
        .count();
    assert_eq!(present, 400, "{out}");
    let max: u32 = out
        .split("max_threads=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(max < 20, "{max} threads at once: {out}");
}

/// qualify's integrity check is shown to fail: with the fault hook damaging every 11th
/// payload after its ICRC check, the check fails, names the damage, and qualify exits 1.
#[test]
fn the_integrity_check_catches_damage_after_the_icrc() {
    crate::util::require_fault_injection();
    let plan = "name = \"damage\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.2\"]\n\
                [integrity]\nseconds = 1\nsize = 4096\n";
    let (rc, summary, v, _, _) = qualify_with_env(Some(plan), "", "PODNET_FAULT_CORRUPT_EVERY=11");
    assert_eq!(rc, 1, "{summary}");
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().is_some_and(|n| n.starts_with("integrity/")))
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(c["status"], "fail", "{c}");
    assert!(c["detail"].as_str().unwrap_or("").contains("differs"), "{c}");
}
