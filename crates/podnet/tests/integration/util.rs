//! Helpers: run podnet, find test data, write captures, require external tools.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `testdata/` folder.
pub(crate) fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

/// Appends `line` to `target/test-summary.txt`, which `scripts/test.sh` prints after the run:
/// what a passing test wants seen (reruns an interop test took, and why).
pub(crate) fn summary_note(line: &str) {
    use std::io::Write as _;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-summary.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// The tests that may skip, each with what this machine lacks — the one list of them. A test
/// that skips under another name fails ([`named_skip`]).
pub(crate) const NAMED_SKIPS: &[(&str, &str)] = &[(
    "gpu::rdma_core_registers_gpu_memory_with_a_real_nic",
    "needs a host with an NVIDIA GPU (its driver) and a hardware RDMA NIC (GPUDirect RDMA: \
     dma-buf or nvidia_peermem); scripts/gpu-check.sh is the check to run on such a host",
)];

/// Skips `test` loudly: says why on stderr and in `target/test-summary.txt` (printed after
/// the run). Panics if `test` is not in [`NAMED_SKIPS`].
pub(crate) fn named_skip(test: &str, seen: &str) {
    let Some((_, why)) = NAMED_SKIPS.iter().find(|(t, _)| *t == test) else {
        panic!("{test} skipped ({seen}), but it is not among util::NAMED_SKIPS");
    };
    eprintln!("SKIPPED (named) {test}: {why}; here: {seen}");
    summary_note(&format!("SKIPPED (named) {test}: {why}; here: {seen}"));
}

/// Runs `podnet` with `args`.
pub(crate) fn podnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podnet")).args(args).output().expect("run podnet")
}

/// Fails the test, saying why, unless podnet was built with the fault hook (feature
/// `fault-injection`, which `scripts/test.sh` turns on with `--all-features`).
pub(crate) fn require_fault_injection() {
    if !cfg!(feature = "fault-injection") {
        panic!(
            "this test needs podnet built with --features fault-injection (scripts/test.sh uses --all-features)"
        );
    }
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
    let stamped = frames.iter().enumerate().map(|(i, (d, orig))| (d.as_slice(), *orig, i as u64));
    write_pcap_stamped(path, linktype, stamped);
}

/// A pcap file of `frames` (bytes, original length, µs after a fixed start, each).
pub(crate) fn write_pcap_stamped<'a>(
    path: &Path,
    linktype: u32,
    frames: impl Iterator<Item = (&'a [u8], u32, u64)>,
) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).unwrap();
    let header = PcapHeader { datalink: linktype.into(), ..Default::default() };
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for (data, orig, us) in frames {
        let ts = std::time::Duration::from_micros(1_700_000_000_000_000 + us);
        w.write_packet(&PcapPacket::new(ts, orig, data)).unwrap();
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
/// file); `$PODNET` is the binary under test. The script may call `listening [PORT]` right
/// after starting a server in the background: it returns once a TCP socket listens on PORT
/// (18515, perf's and pingpong's), once that server (`$!`) has exited, or after 5 s — the
/// server is ready for its client however loaded the machine (a fixed `sleep 0.3` was not,
/// under the whole suite).
pub(crate) fn in_netns(script: &str) -> Output {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let listening = "listening() { for _ in $(seq 100); do \
        ss -Hltn \"sport = :${1:-18515}\" | grep -q . && return 0; \
        kill -0 $! 2> /dev/null || return 0; sleep 0.05; done; }\n";
    Command::new("unshare")
        .args(["--net", "sh", "-c", &format!("ip link set lo up\n{listening}{script}")])
        .current_dir(dir.path())
        .env("PODNET", env!("CARGO_BIN_EXE_podnet"))
        .output()
        .expect("unshare (util-linux) runs")
}

/// Shell lines (for [`in_netns`]) that make `n` hosts on one bridge: namespaces
/// `{tag}h$$_1` … `{tag}h$$_n`, host `i` at `{subnet}.i/24` on its `eth0`, all removed when
/// the script exits.
pub(crate) fn bridged_hosts(tag: &str, subnet: &str, n: u32) -> String {
    format!(
        "S={tag}sw$$; ip netns add $S; ip -n $S link add br0 type bridge; ip -n $S link set br0 up\n\
         trap 'for i in $(seq {n}); do ip netns del {tag}h$$_$i 2>/dev/null; done; ip netns del $S 2>/dev/null' EXIT\n\
         for i in $(seq {n}); do H={tag}h$$_$i; ip netns add $H\n\
           ip link add eth0 netns $H type veth peer name p$i netns $S\n\
           ip -n $S link set p$i master br0; ip -n $S link set p$i up\n\
           ip -n $H addr add {subnet}.$i/24 dev eth0; ip -n $H link set eth0 up; ip -n $H link set lo up\n\
         done\n"
    )
}

/// Runs podnet (host, in the tap's namespace) against a tool in the QEMU guest: with
/// `podnet_serves`, podnet listens (TCP 18515) and the guest runs `guest_cmd connect_to`;
/// otherwise the guest tool listens and podnet connects to the guest's IPv4 address. Returns
/// podnet's output and the guest's (`rc=N` on its first line).
pub(crate) fn podnet_vs_guest(
    vm: &rxevm::Vm,
    podnet_args: &[&str],
    guest_cmd: &str,
    connect_to: &str,
    podnet_serves: bool,
) -> (Output, String) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let name = guest_cmd.split_whitespace().next().unwrap_or("guest tool");
    if podnet_serves {
        let child = vm
            .host_command(env!("CARGO_BIN_EXE_podnet"))
            .args(podnet_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        crate::pingpong::wait_listen(vm, 18515);
        let g = vm.run(name, &format!("{guest_cmd} {connect_to}"), Duration::from_secs(120));
        let o = child.wait_with_output().unwrap();
        (o, g.map(|g| format!("rc={}\n{}", g.rc, g.output)).unwrap_or_else(|e| format!("{e}")))
    } else {
        let script = format!(
            "{guest_cmd} > $OUT/peer.out 2>&1 & pid=$!\n\
             wait_tcp 18515 $pid && touch $OUT/peer.ready; wait $pid; rc=$?\n\
             echo rc=$rc; cat $OUT/peer.out; exit $rc"
        );
        let ready = vm.out_dir().join("peer.ready");
        let _ = std::fs::remove_file(&ready);
        let job = vm.spawn(name, &script, Duration::from_secs(120)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.exists() {
            assert!(Instant::now() < deadline && !job.is_finished(), "{name} never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The guest tools listen on IPv4; the GIDs pick the RoCE family.
        let mut args = podnet_args.to_vec();
        args.push(rxevm::GUEST_IP4);
        let o = vm.host_command(env!("CARGO_BIN_EXE_podnet")).args(&args).output().unwrap();
        let g = job.wait().map(|g| g.output).unwrap_or_else(|e| format!("{e}"));
        (o, g)
    }
}
