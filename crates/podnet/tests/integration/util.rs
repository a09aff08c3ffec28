//! Helpers: run podnet, find test data, write captures, require external tools.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `testdata/` folder.
pub(crate) fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

/// Runs `podnet` with `args`.
pub(crate) fn podnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podnet")).args(args).output().expect("run podnet")
}

/// stdout as UTF-8.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

/// stderr as UTF-8.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// Decodes with `--json` and returns one JSON value per line.
pub(crate) fn decode_json(path: &Path) -> Vec<serde_json::Value> {
    decode_json_and_summary(path).0
}

/// Decodes with `--json`: one JSON value per line, and the summary line from stderr.
pub(crate) fn decode_json_and_summary(path: &Path) -> (Vec<serde_json::Value>, String) {
    let o = podnet(&["capture", "decode", "--json", path.to_str().unwrap()]);
    assert!(o.status.success(), "decode failed: {}", stderr(&o));
    let rows = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (rows, stderr(&o))
}

/// Writes Ethernet frames (each with its original length) to a pcap file.
pub(crate) fn write_pcap(path: &Path, linktype: u32, frames: &[(Vec<u8>, u32)]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).unwrap();
    let header = PcapHeader { datalink: linktype.into(), ..Default::default() };
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for (i, (data, orig)) in frames.iter().enumerate() {
        let ts = std::time::Duration::from_micros(1_700_000_000_000_000 + i as u64);
        w.write_packet(&PcapPacket::new(ts, *orig, data)).unwrap();
    }
}

/// Panics, loudly, when a tool a test needs is missing. CI installs every one of them
/// (`.ci/run`); no test is skipped silently.
pub(crate) fn require_tool(name: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{name}` (Debian package; .ci/run installs it), and it is not installed"
    );
}

/// How much counter `k` rose from `before` to `after` (a missing counter counts as 0).
pub(crate) fn counter_delta(
    after: &std::collections::BTreeMap<String, u64>,
    before: &std::collections::BTreeMap<String, u64>,
    k: &str,
) -> u64 {
    after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)
}

/// Runs `sh -c script` in a new network namespace with lo up (so loopback tests never meet
/// another test's device or port), in a fresh temporary folder (so they never share a
/// file); `$PODNET` is the binary under test.
pub(crate) fn in_netns(script: &str) -> Output {
    let dir = tempfile::tempdir().expect("a temporary folder");
    Command::new("unshare")
        .args(["--net", "sh", "-c", &format!("ip link set lo up\n{script}")])
        .current_dir(dir.path())
        .env("PODNET", env!("CARGO_BIN_EXE_podnet"))
        .output()
        .expect("unshare (util-linux) runs")
}
