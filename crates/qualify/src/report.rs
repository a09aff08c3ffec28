//! What a run found, and the reports people and CI systems read: `report.json`, `junit.xml`
//! and a self-contained `report.html` with SVG charts.
//!
//! `report.json`:
//! ```json
//! { "plan": "…", "started_unix": 1764490000, "seconds": 41.2,
//!   "summary": { "passed": 40, "failed": 1, "skipped": 3 },
//!   "checks": [ { "name": "perf/write-bw/65536B/soft:127.0.1.1<->soft:127.0.1.2/bandwidth",
//!                 "status": "pass", "measured": 2871.4, "threshold": ">= 574.2 (0.2 x calibration 2871.0)",
//!                 "unit": "MB/s", "detail": "…", "seconds": 0.4 } ],
//!   "devices": [...], "pairs": [ { "a": "…", "b": "…", "status": "pass" } ],  (a == b: the
//!                                      device with itself, a check with `on = "devices"`)
//!   "bandwidth": [ { "pair", "test", "size", "mb_per_s" } ],
//!   "latency": [ { "pair", "test", "size", "min", "median", "p99", "p99_9" } ] }
//! ```
//! `status` is `pass`, `fail` or `skipped`; `measured` and `threshold` may be null (a check
//! that is a fact, not a figure).

use std::fmt::Write as _;

use serde::Serialize;

/// A check's outcome. Ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within its threshold.
    Pass,
    /// Could not run here; `detail` says why.
    Skipped,
    /// Outside its threshold, or it failed to run.
    Fail,
}

impl Status {
    /// `pass`, `skipped`, `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skipped => "skipped",
            Status::Fail => "fail",
        }
    }
}

/// One check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Its name: `host/…`, `device/<dev>/…`, `perf/<test>/<size>B/<a><-><b>/<figure>`,
    /// `integrity/<a><-><b>`.
    pub name: String,
    /// The outcome.
    pub status: Status,
    /// What was measured.
    pub measured: Option<f64>,
    /// What it was held to (`>= 574.2 (0.2 x calibration 2871.0)`).
    pub threshold: Option<String>,
    /// The unit of `measured`.
    pub unit: String,
    /// More: the device, the reason for a skip, the error.
    pub detail: String,
    /// How long it took.
    pub seconds: f64,
}

impl Check {
    /// A check that could not run here.
    pub fn skipped(name: &str, why: &str) -> Check {
        Check {
            name: name.to_string(),
            status: Status::Skipped,
            measured: None,
            threshold: None,
            unit: String::new(),
            detail: why.to_string(),
            seconds: 0.0,
        }
    }

    /// `measured unit (threshold)`, or what there is of it.
    pub fn figure(&self) -> String {
        let mut s = match self.measured {
            Some(m) => format!("{} {}", fmt_num(m), self.unit),
            None => String::new(),
        };
        if let Some(t) = &self.threshold {
            let _ = write!(s, "{}{t}", if s.is_empty() { "" } else { ", want " });
        }
        s.trim().to_string()
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// A bandwidth figure for the charts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BwPoint {
    /// `a<->b`.
    pub pair: String,
    /// The test.
    pub test: String,
    /// Message size.
    pub size: u64,
    /// Average bandwidth, MB/s.
    pub mb_per_s: f64,
}

/// A latency figure for the charts (µs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatPoint {
    /// `a<->b`.
    pub pair: String,
    /// The test.
    pub test: String,
    /// Message size.
    pub size: u64,
    /// Minimum.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

/// A pair's worst outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairResult {
    /// The server side.
    pub a: String,
    /// The client side.
    pub b: String,
    /// The worst of its checks.
    pub status: Status,
}

/// Counts by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

/// A run's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The plan's name.
    pub plan: String,
    /// When the run started (seconds since the epoch).
    pub started_unix: u64,
    /// How long it took.
    pub seconds: f64,
    /// Counts.
    pub summary: Summary,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// The devices.
    pub devices: Vec<String>,
    /// Each pair's outcome.
    pub pairs: Vec<PairResult>,
    /// Bandwidth figures.
    pub bandwidth: Vec<BwPoint>,
    /// Latency figures.
    pub latency: Vec<LatPoint>,
}

impl Report {
    /// An empty report for `plan`.
    pub fn new(plan: &str) -> Report {
        Report {
            plan: plan.to_string(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            seconds: 0.0,
            summary: Summary::default(),
            checks: Vec::new(),
            devices: Vec::new(),
            pairs: Vec::new(),
            bandwidth: Vec::new(),
            latency: Vec::new(),
        }
    }

    /// Counts the checks.
    pub fn summarize(&mut self) -> Summary {
        let mut s = Summary::default();
        for c in &self.checks {
            match c.status {
                Status::Pass => s.passed += 1,
                Status::Fail => s.failed += 1,
                Status::Skipped => s.skipped += 1,
            }
        }
        self.summary = s;
        s
    }

    /// `report.json`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// `junit.xml`: a test case per check; a failure carries the measured value and the
    /// threshold, a skip its reason.
    pub fn junit(&self) -> String {
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let s = self.summary;
        let _ = writeln!(
            x,
            "<testsuites name=\"podnet qualify\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            self.checks.len(),
            s.failed,
            s.skipped,
            self.seconds
        );
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" time=\"{:.3}\">",
            esc(&self.plan),
            self.checks.len(),
            s.failed,
            s.skipped,
            self.seconds
        );
        for c in &self.checks {
            let class = c.name.split('/').next().unwrap_or("qualify");
            let _ = write!(
                x,
                "    <testcase classname=\"podnet.qualify.{}\" name=\"{}\" time=\"{:.3}\"",
                esc(class),
                esc(&c.name),
                c.seconds
            );
            match c.status {
                Status::Pass => {
                    let _ = writeln!(
                        x,
                        "><system-out>{}</system-out></testcase>",
                        esc(&format!("{} {}", c.figure(), c.detail))
                    );
                }
                Status::Fail => {
                    let msg = format!(
                        "{}: {}",
                        c.name,
                        if c.figure().is_empty() { c.detail.clone() } else { c.figure() }
                    );
                    let _ = writeln!(
                        x,
                        "><failure message=\"{}\" type=\"threshold\">{}</failure></testcase>",
                        esc(&msg),
                        esc(&c.detail)
                    );
                }
                Status::Skipped => {
                    let _ = writeln!(x, "><skipped message=\"{}\"/></testcase>", esc(&c.detail));
                }
            }
        }
        x.push_str("  </testsuite>\n</testsuites>\n");
        x
    }

    /// The terminal summary: failures first, then counts.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let w = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(10).min(90);
        for c in &self.checks {
            let _ = writeln!(t, "{:<7} {:<w$}  {}", c.status.as_str(), c.name, c.figure());
            if c.status != Status::Pass && !c.detail.is_empty() {
                let _ = writeln!(t, "{:<7} {:<w$}  {}", "", "", c.detail);
            }
        }
        let s = self.summary;
        let _ = writeln!(
            t,
            "\n{}: {} passed, {} failed, {} skipped in {:.1} s",
            self.plan, s.passed, s.failed, s.skipped, self.seconds
        );
        t
    }
}

/// Escapes XML/HTML text and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}
