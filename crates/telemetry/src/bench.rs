//! Benchmark results the agent exports: what `podnet perf --publish` (and `podnet qualify
//! --publish`) leave in a folder, one JSON file per test, device, peer and message size.
//!
//! The agent reads the folder at each scrape, so the latest run of each benchmark is a
//! histogram series next to the port counters, in the same Prometheus; a new run of the same
//! test replaces its file (Prometheus sees the histogram's counters reset, as after a
//! restart). The folder is the interface, as node_exporter's textfile collector's is: any
//! tool that writes this format is exported too.
//!
//! ```json
//! { "test": "send-lat", "device": "mlx5_0", "peer": "10.0.0.2", "size": 2,
//!   "finished_unix": 1764490000.5,
//!   "bandwidth_bytes_per_second": null,
//!   "latency_seconds": { "le": [1e-06, 2e-06, …], "cumulative": [0, 12, …],
//!                        "count": 999, "sum": 0.0051 } }
//! ```
//! `le` ascending bounds in seconds, `cumulative` the observations at or under each (never
//! decreasing, never over `count`); `count` includes those over the last bound. A file that
//! is not this is a source error naming it; the other files are still exported.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sample::SourceError;

/// The folder both sides use unless told otherwise.
pub const DEFAULT_DIR: &str = "/run/podnet/bench";

/// A latency distribution, Prometheus's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Histogram {
    /// Upper bounds, seconds, ascending.
    pub le: Vec<f64>,
    /// Observations at or under each bound.
    pub cumulative: Vec<u64>,
    /// Every observation.
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

impl Histogram {
    /// Why it is not a histogram, if it is not.
    pub fn invalid(&self) -> Option<String> {
        if self.le.len() != self.cumulative.len() || self.le.is_empty() {
            return Some("`le` and `cumulative` differ in length or are empty".into());
        }
        if self.le.iter().any(|b| !b.is_finite() || *b <= 0.0)
            || self.le.windows(2).any(|w| w[0] >= w[1])
        {
            return Some("`le` must be positive finite bounds in ascending order".into());
        }
        if self.cumulative.windows(2).any(|w| w[0] > w[1])
            || self.cumulative.last().is_some_and(|c| *c > self.count)
        {
            return Some("`cumulative` must never decrease nor exceed `count`".into());
        }
        if !self.sum.is_finite() || self.sum < 0.0 {
            return Some("`sum` must be a finite number of seconds, not negative".into());
        }
        None
    }

    /// Observations per bucket (not cumulative), the last one `+Inf`: what the encoder takes.
    pub fn per_bucket(&self) -> Vec<(f64, u64)> {
        let mut prev = 0;
        let mut out: Vec<(f64, u64)> = self
            .le
            .iter()
            .zip(&self.cumulative)
            .map(|(b, c)| {
                let n = c - prev;
                prev = *c;
                (*b, n)
            })
            .collect();
        out.push((f64::INFINITY, self.count - prev));
        out
    }
}

/// One benchmark's latest result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The test (`write-bw`, `send-lat`, …).
    pub test: String,
    /// This side's device.
    pub device: String,
    /// The peer: its address or device.
    pub peer: String,
    /// Message size, bytes.
    pub size: u64,
    /// When it finished, seconds since the Unix epoch.
    pub finished_unix: f64,
    /// Average bandwidth (bandwidth tests).
    #[serde(default)]
    pub bandwidth_bytes_per_second: Option<f64>,
    /// Every interval (latency tests).
    #[serde(default)]
    pub latency_seconds: Option<Histogram>,
}

impl Record {
    /// Its file name: the test, device, peer and size, with anything but letters, digits,
    /// `.` and `-` as `_`.
    pub fn file_name(&self) -> String {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
                .collect()
        };
        format!(
            "{}_{}_{}_{}B.json",
            clean(&self.test),
            clean(&self.device),
            clean(&self.peer),
            self.size
        )
    }
}

/// Why a record could not be published.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish to {path}: {source}")]
pub struct PublishError {
    /// The file or folder.
    pub path: String,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Writes `r` into `dir` (created if missing) under [`Record::file_name`], whole or not at
/// all: a temporary file renamed over the old one, so a scrape never reads half a file.
pub fn publish(dir: &Path, r: &Record) -> Result<PathBuf, PublishError> {
    let err = |p: &Path| {
        let path = p.display().to_string();
        move |source| PublishError { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let path = dir.join(r.file_name());
    let tmp = dir.join(format!(".{}.{}", r.file_name(), std::process::id()));
    let text = serde_json::to_string_pretty(r).map_err(|e| PublishError {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&tmp, text + "\n").map_err(err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(err(&path))?;
    Ok(path)
}

/// Every record in `dir` (`*.json`, by name), and a source error for each file that is not
/// one. A missing folder is no records and no error: nothing was published yet.
pub fn read_dir(dir: &Path) -> (Vec<Record>, Vec<SourceError>) {
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    let error = |path: &Path, error: String| SourceError {
        source: "bench",
        device: String::new(),
        port: None,
        path: path.display().to_string(),
        error,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (records, errors),
        Err(e) => {
            errors.push(error(dir, e.to_string()));
            return (records, errors);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    for p in paths {
        // A regular file, opened non-blocking and capped (a FIFO or a link to /dev/zero
        // among the records holds up no scrape).
        let parsed = host::read_capped(&p, 1 << 20)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Record>(&t).map_err(|e| e.to_string()))
            .and_then(|r| match r.latency_seconds.as_ref().and_then(Histogram::invalid) {
                Some(why) => Err(format!("latency_seconds: {why}")),
                None => Ok(r),
            });
        match parsed {
            Ok(r) => records.push(r),
            Err(e) => errors.push(error(&p, e)),
        }
    }
    (records, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(test: &str, peer: &str) -> Record {
        Record {
            test: test.into(),
            device: "soft:127.0.0.1".into(),
            peer: peer.into(),
            size: 2,
            finished_unix: 1.7e9,
            bandwidth_bytes_per_second: None,
            latency_seconds: Some(Histogram {
                le: vec![1e-6, 2e-6, 4e-6],
                cumulative: vec![0, 3, 5],
                count: 6,
                sum: 1e-3,
            }),
        }
    }

    #[test]
    fn published_records_read_back_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bench = dir.path().join("bench");
        assert_eq!(read_dir(&bench).0.len() + read_dir(&bench).1.len(), 0, "none yet");
        let a = record("send-lat", "127.0.0.2");
        let p = publish(&bench, &a).unwrap();
        assert_eq!(p.file_name().unwrap(), "send-lat_soft_127.0.0.1_127.0.0.2_2B.json");
        // The same test again replaces it; another peer is another file.
        publish(&bench, &record("send-lat", "127.0.0.2")).unwrap();
        publish(&bench, &record("send-lat", "::1")).unwrap();
        std::fs::write(bench.join("broken.json"), "{\"test\": 1}").unwrap();
        let mut bad = record("send-lat", "x");
        bad.latency_seconds.as_mut().unwrap().cumulative = vec![3, 2, 5];
        std::fs::write(bench.join("z.json"), serde_json::to_string(&bad).unwrap()).unwrap();
        std::fs::write(bench.join("notes.txt"), "not a record").unwrap();
        let (records, errors) = read_dir(&bench);
        assert_eq!(records.len(), 2, "{records:?}");
        assert!(records.contains(&a));
        let named: Vec<(&str, &str)> =
            errors.iter().map(|e| (e.path.rsplit('/').next().unwrap(), e.source)).collect();
        assert_eq!(named, [("broken.json", "bench"), ("z.json", "bench")], "{errors:?}");
        assert!(errors[1].error.contains("never decrease"), "{}", errors[1].error);
    }

    #[test]
    fn per_bucket_counts_end_with_inf() {
        let h = record("send-lat", "p").latency_seconds.unwrap();
        assert_eq!(h.per_bucket(), vec![(1e-6, 0), (2e-6, 3), (4e-6, 2), (f64::INFINITY, 1)]);
        assert!(h.invalid().is_none());
    }
}
