//! podnet perf (rdma-core provider) beside perftest on the same Linux rxe devices in the QEMU
//! guest: `rxeB` → `rxeA` over a veth, interleaved runs of the same test and size, medians and
//! spread side by side with the median of the pairs' ratios (each podnet run over the perftest
//! run beside it), printed and written to `target/rxe-perf-compare.txt`. The guest is
//! emulated (TCG): the figures are reported, the ratios are not asserted. BENCHMARKS.md
//! ("rdma-core provider on rxe") has the runs and how to read them.
//!
//!   cargo bench -p podnet --bench rxe_perf_compare        (root; scripts/deps.sh's packages)
//!
//! A benchmark, not a test: ~4 minutes of timed runs would make the suite slow and its budget
//! flaky on a loaded machine.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rxevm::{Config, Vm};

fn main() {
    let t0 = Instant::now();
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let rxe = vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    vm.warm_up_rxe(env!("CARGO_BIN_EXE_podnet"));
    compare(&vm, rxe.a.gid4, rxe.b.gid4);
    eprintln!("rxe_perf_compare: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The number at column `col` of the result row of a perftest-format table.
fn table_value(out: &str, col: usize) -> Option<f64> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    lines
        .next()?
        .split_whitespace()
        .nth(col)?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
}

fn median_and_spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn compare(vm: &Vm, a_gid: u32, b_gid: u32) {
    let podnet = env!("CARGO_BIN_EXE_podnet");
    // (test, perftest tool, arguments, result column, unit, higher is better, runs each).
    // The emulated guest's speed moves with its host's: in stretches of seconds to a minute
    // and in episodes of a fraction of a second (one 150,000-iteration perftest run's
    // medians over 5,000-iteration windows went 31, 32, 39, 44, 32, .. 48, 46, 38 µs), both
    // tools alike. So the latency tests make many interleaved runs (against the stretches)
    // of 20,000 iterations each, ~0.7 s of ping-pong (a run's typical figure is then the
    // median over many episodes, not one episode's draw; perftest's default of 1,000 is
    // ~35 ms). A run's fixed costs under TCG are ~1.5 s more.
    let cases = [
        ("write-bw", "ib_write_bw", "-s 65536 -n 500", 3, "MB/s", true, 7),
        ("send-lat", "ib_send_lat", "-s 2 -n 20000", 4, "usec (typical)", false, 15),
        ("write-lat", "ib_write_lat", "-s 2 -n 20000", 4, "usec (typical)", false, 15),
    ];
    let mut uncalibrated = 0;
    let mut repeated: Vec<String> = Vec::new();
    let mut report = String::from(
        "podnet perf (rdma-core) vs perftest 4.5 on rxeA <-> rxeB (veth) in the QEMU guest (TCG)\n",
    );
    for (test, tool, args, col, unit, higher, runs) in cases {
        let mut got: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for i in 0..runs {
            // Interleaved, the order alternating: neither tool always runs first.
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                // A latency test's two sides both spin: each tool's server runs on vCPU 0 and
                // its client on vCPU 1, since where the scheduler put both on one vCPU a run
                // measured that, not the tool. A bandwidth test's server sleeps, and rxe's
                // kernel work needs the other vCPU: it is left to the scheduler.
                let (pin0, pin1) =
                    if higher { ("", "") } else { ("taskset -c 0 ", "taskset -c 1 ") };
                let (srv, cli) = if k == 0 {
                    (
                        format!("{pin0}{tool} -d rxeA -x {a_gid} {args} -F"),
                        format!("{pin1}{tool} -d rxeB -x {b_gid} {args} -F 169.254.88.1"),
                    )
                } else {
                    let p = format!("{podnet} perf {test} --provider rdma-core");
                    (
                        format!("{pin0}{p} -d rxeA -x {a_gid} {args}"),
                        format!("{pin1}{p} -d rxeB -x {b_gid} {args} 169.254.88.1"),
                    )
                };
                let script = format!("pair '{srv}' '{cli}'");
                // perftest times with the TSC and calibrates it against the clock at start;
                // under TCG that sometimes fails and it prints `inf` for every figure. Such a
                // run is repeated (at most twice) and counted.
                let mut tries = 0;
                let mut failed = false;
                let v = loop {
                    let out = match vm.run(tool, &script, Duration::from_secs(150)) {
                        Ok(out) => out,
                        // In this guest rxe reorders a bandwidth run's packets (each vCPU
                        // delivers what it transmits: the responder counts out-of-sequence
                        // requests, the requester retries, in every such run of either tool),
                        // and kernel 6.1's retry of a half-sent WRITE can end in a remote
                        // invalid-request NAK. A run that ends in a work-completion error is
                        // repeated once and listed; any other failure, or a second, fails.
                        Err(rxevm::Error::JobFailed { output, .. }) if !failed => {
                            let Some(why) = output.lines().find(|l| {
                                l.contains("completed with") || l.contains("Completion with error")
                            }) else {
                                panic!("{test} run {i}: failed:\n{output}")
                            };
                            failed = true;
                            let who = if k == 0 { "perftest" } else { "podnet" };
                            repeated.push(format!("{test} run {i} of {who}: {}", why.trim()));
                            continue;
                        }
                        Err(e) => panic!("{test} run {i}: {e}"),
                    };
                    // The client's figures; for the latency ping-pongs, where both sides
                    // measure, the server's when the client's calibration failed.
                    let (server, client) =
                        out.output.split_once("--- client:").unwrap_or((&out.output, ""));
                    let v = table_value(client, col).or_else(|| {
                        if test.ends_with("-lat") { table_value(server, col) } else { None }
                    });
                    match v {
                        Some(v) => break v,
                        None if k == 0 && tries < 3 => {
                            tries += 1;
                            uncalibrated += 1;
                        }
                        None => panic!("{test} run {i}: no result row:\n{}", out.output),
                    }
                };
                got[k].push(v);
            }
        }
        let [mut pt, mut pn] = got;
        // Every run in the order run (run i of each tool ran back to back), so a stretch
        // where the host was busy shows as such rather than only as a wide spread.
        let list = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ");
        let mut paired: Vec<f64> = pn.iter().zip(&pt).map(|(n, t)| n / t).collect();
        let runs_line = format!(
            "           runs in order: perftest [{}], podnet [{}], podnet/perftest [{}]",
            list(&pt),
            list(&pn),
            list(&paired)
        );
        let (pt_med, pt_lo, pt_hi) = median_and_spread(&mut pt);
        let (pn_med, pn_lo, pn_hi) = median_and_spread(&mut pn);
        let ratio = pn_med / pt_med;
        // The host's own noise only ever slows a run (a busy neighbour, a preempted vCPU), so
        // each tool's best run is the nearest thing to its undisturbed figure.
        let best = if higher { pn_hi / pt_hi } else { pn_lo / pt_lo };
        // Run i of each tool ran back to back, in the same stretch of the host's speed: the
        // median of the pairs' ratios is what interleaving measures, and what the target is
        // judged on. The ratio of the two medians is printed beside it: where the host was
        // slow for about half of each tool's runs (in stretches of seconds to a minute), each
        // median is a draw between its fast and its slow runs, and so is their ratio.
        let (pair_med, ..) = median_and_spread(&mut paired);
        let target = if higher { "target >= 0.90" } else { "target <= 1.10" };
        let met = if higher { pair_med >= 0.9 } else { pair_med <= 1.1 };
        let _ = writeln!(
            report,
            "{test:<10} {args:<18} perftest {pt_med:>9.2} [{pt_lo:.2} .. {pt_hi:.2}]  podnet {pn_med:>9.2} \
             [{pn_lo:.2} .. {pn_hi:.2}] {unit}"
        );
        let _ = writeln!(
            report,
            "           podnet/perftest: median of the pairs {pair_med:.3} ({target}: {}); \
             ratio of the medians {ratio:.3}; best runs {best:.3} ({runs} runs each)",
            if met { "met" } else { "MISSED" }
        );
        let _ = writeln!(report, "{runs_line}");
        assert!(pt_med > 0.0 && pn_med > 0.0, "{report}");
    }
    let _ = writeln!(
        report,
        "interleaved runs (latency: servers on vCPU 0, clients on vCPU 1); median \
         [min .. max]; perftest runs repeated after an \
         `inf` (TSC calibration failed under TCG): {uncalibrated}; runs repeated after a \
         work-completion error: {}{}",
        repeated.len(),
        repeated.iter().map(|r| format!("\n  {r}")).collect::<String>()
    );
    eprintln!("{report}");
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rxe-perf-compare.txt");
    let _ = std::fs::write(path, &report);
}
