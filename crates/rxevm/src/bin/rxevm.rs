//! `rxevm`: the rxe guest harness from the command line.
//!
//! ```text
//! rxevm run [--rxe] 'SHELL SCRIPT'   boot, (set up rxe,) run the script in the guest, power off
//! rxevm hold                         boot, print "READY <qemu pid>", stay up until stdin closes
//! rxevm record DIR [ITERS]           record the reference sessions (rxevm::record) into DIR
//! rxevm record-faults DIR PODNET      record the fault sessions (rxevm::record::fault_sessions)
//!                                     with the podnet binary PODNET (a fault-injection build)
//! ```
//! Exit status: the script's, or 2 when the guest could not be run.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use rxevm::{Config, Vm};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("hold") => hold(),
        Some("record") => record(&args[1..]),
        Some("record-faults") => record_faults(&args[1..]),
        _ => {
            eprintln!(
                "usage: rxevm run [--rxe] 'SCRIPT' | rxevm hold | rxevm record DIR [ITERS] | rxevm record-faults DIR PODNET"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rxevm: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> rxevm::Result<ExitCode> {
    let rxe = args.iter().any(|a| a == "--rxe");
    let script = args.iter().filter(|a| *a != "--rxe").cloned().collect::<Vec<_>>().join(" ");
    let vm = Vm::boot(&Config::default())?;
    eprintln!("rxevm: guest up in {:.1} s ({})", vm.boot_time().as_secs_f64(), vm.ready_line());
    if rxe {
        let s = vm.setup_rxe()?;
        eprintln!("rxevm: {s:?}");
    }
    let out = vm.spawn("script", &script, Duration::from_secs(600))?.wait()?;
    print!("{}", out.output);
    Ok(ExitCode::from(out.rc.clamp(0, 255) as u8))
}

fn hold() -> rxevm::Result<ExitCode> {
    let vm = Vm::boot(&Config::default())?;
    println!("READY {}", vm.qemu_pid());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(ExitCode::SUCCESS)
}

fn record(args: &[String]) -> rxevm::Result<ExitCode> {
    let Some(dir) = args.first() else {
        eprintln!("usage: rxevm record DIR [ITERS]");
        return Ok(ExitCode::from(2));
    };
    let iters: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let dir = std::path::Path::new(dir);
    let vm = Vm::boot(&Config::default())?;
    eprintln!("rxevm: guest up in {:.1} s ({})", vm.boot_time().as_secs_f64(), vm.ready_line());
    let rxe = vm.setup_rxe()?;
    versions(&vm, dir)?;
    for r in rxevm::record::record(&vm, &rxe, &rxevm::record::reference_sessions(iters), dir)? {
        eprintln!("rxevm: recorded {}", r.session.name);
    }
    Ok(ExitCode::SUCCESS)
}

fn record_faults(args: &[String]) -> rxevm::Result<ExitCode> {
    let (Some(dir), Some(podnet)) = (args.first(), args.get(1)) else {
        eprintln!("usage: rxevm record-faults DIR PODNET");
        return Ok(ExitCode::from(2));
    };
    let podnet = std::fs::canonicalize(podnet)
        .map_err(|e| rxevm::Error::Io { path: podnet.into(), source: e })?;
    let vm = Vm::boot(&Config::default())?;
    eprintln!("rxevm: guest up in {:.1} s ({})", vm.boot_time().as_secs_f64(), vm.ready_line());
    let rxe = vm.setup_rxe()?;
    versions(&vm, std::path::Path::new(dir))?;
    let podnet = podnet.display().to_string();
    vm.warm_up_rxe(&podnet);
    for f in rxevm::record::record_faults(&vm, &rxe, &podnet, std::path::Path::new(dir))? {
        eprintln!("rxevm: recorded {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the guest's tool and kernel versions to `dir/VERSIONS`.
fn versions(vm: &Vm, dir: &std::path::Path) -> rxevm::Result<()> {
    let versions = vm.run(
        "versions",
        "dpkg-query -W -f='${Package} ${Version}\\n' perftest ibverbs-utils rdma-core ibverbs-providers libibverbs1 tcpdump iproute2 nftables; echo \"kernel $(uname -r)\"",
        Duration::from_secs(30),
    )?;
    std::fs::create_dir_all(dir).map_err(|e| rxevm::Error::Io { path: dir.into(), source: e })?;
    std::fs::write(dir.join("VERSIONS"), &versions.output)
        .map_err(|e| rxevm::Error::Io { path: dir.join("VERSIONS"), source: e })
}
