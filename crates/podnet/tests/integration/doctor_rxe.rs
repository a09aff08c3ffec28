//! `podnet doctor` in the QEMU guest with Linux rxe: the live guest (three rxe devices on two
//! netdevs and a veth pair, its kernel log) recorded with `--record`, and the recording
//! diagnosed on this host with `--root` exactly as the guest diagnosed itself.

use std::time::Duration;

use rxevm::{Config, Vm};
use serde_json::Value;

use crate::util::{podnet, stderr, stdout};

#[test]
fn doctor_records_the_rxe_guest_and_diagnoses_the_recording_alike() {
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    let p = env!("CARGO_BIN_EXE_podnet");
    let out = vm
        .run(
            "doctor",
            &format!("{p} doctor --json --record $OUT/rec > $OUT/doctor.json; echo doctor rc=$?"),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let rc: i32 = out
        .output
        .lines()
        .find_map(|l| l.strip_prefix("doctor rc=")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", out.output));
    let live: Value =
        serde_json::from_slice(&std::fs::read(vm.out_dir().join("doctor.json")).unwrap()).unwrap();
    let rec = vm.out_dir().join("rec");
    // How testdata/doctor/rxe-guest was made: PODNET_DOCTOR_KEEP=DIR keeps the recording.
    if let Ok(keep) = std::env::var("PODNET_DOCTOR_KEEP") {
        let ok = std::process::Command::new("cp").arg("-r").arg(&rec).arg(&keep).status();
        assert!(ok.is_ok_and(|s| s.success()), "cp -r {} {keep}", rec.display());
    }
    let o = podnet(&["doctor", "--json", "--root", rec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(rc), "{}", stderr(&o));
    let again: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(live, again, "the recording diagnoses differently");
    let devs: Vec<&str> =
        live["devices"].as_array().unwrap().iter().filter_map(|d| d.as_str()).collect();
    for d in ["rxeA", "rxeB", "rxe_eth"] {
        assert!(devs.contains(&d), "{d} not among {devs:?}");
    }
    assert!(live["log"]["lines"].as_u64().unwrap() > 0, "{live}");
    eprintln!(
        "guest: {} findings: {}",
        live["findings"].as_array().unwrap().len(),
        live["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| format!("{} {} {}", f["severity"], f["kind"], f["component"]))
            .collect::<Vec<_>>()
            .join("; ")
    );
}
