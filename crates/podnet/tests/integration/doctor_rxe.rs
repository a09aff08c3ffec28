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

/// `podnet tune` on the guest's real settings (never on the CI host: they are global): for
/// each profile, apply, apply again, restore leaves every value as it was — the throughput
/// profile also grows the virtio NIC's RX ring (shrunk to 128 of 256 first) with `ethtool -G`
/// and shrinks it back; a setting the kernel refuses (a read-only bind mount over one sysctl)
/// rolls the whole apply back.
#[test]
fn tune_applies_and_restores_in_the_rxe_guest_and_rolls_back_a_refused_change() {
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    let p = env!("CARGO_BIN_EXE_podnet");
    let script = format!(
        r#"set -u
st=$(mktemp -d)/tune.json  # a private folder: tune refuses one others can write
ethtool -G eth0 rx 128 || echo "cannot shrink eth0's ring"
# A file's value, or a ring's size as `ethtool -g` shows it now.
snap() {{ for f in $paths; do case $f in
  ethtool/*) nd=${{f#ethtool/}}; nd=${{nd%%/*}}; r=$(basename $f | cut -d- -f1 | tr a-z A-Z)
    printf '%s=%s\n' "$f" "$(ethtool -g $nd | sed -n '/^Current/,$p' | grep "^$r:" | tr -d ' \t')";;
  *) printf '%s=%s\n' "$f" "$(cat /$f)";;
esac; done; }}
for prof in latency throughput; do
  paths=$({p} tune check --profile $prof --json | python3 -c 'import json,sys; print(" ".join(c["path"] for c in json.load(sys.stdin)["changes"]))')
  echo "$prof planned: $paths"
  [ -n "$paths" ] || {{ echo "nothing planned"; exit 1; }}
  snap > $OUT/before
  {p} tune apply --profile $prof --state $st; echo "$prof apply rc=$?"
  snap > $OUT/applied; grep ethtool $OUT/applied
  {p} tune check --profile $prof; echo "$prof check after apply rc=$?"
  {p} tune apply --profile $prof --state $st; echo "$prof apply again rc=$?"
  python3 -c 'import json; print("saved", len(json.load(open("'$st'"))["saved"]))'
  {p} tune restore --state $st; echo "$prof restore rc=$?"
  snap > $OUT/after
  cmp -s $OUT/before $OUT/after && echo "$prof restored: same" || {{ echo "$prof restored: differs"; diff $OUT/before $OUT/after; }}
  grep ethtool $OUT/after
  [ -e $st ] && echo "$prof state left" || echo "$prof state gone"
done
f=/proc/sys/net/ipv4/conf/vB/arp_announce
mount --bind $f $f && mount -o remount,bind,ro $f || echo "no ro bind mount"
{p} tune apply --profile throughput --state $st; echo "refused apply rc=$?"
umount $f
snap > $OUT/after2
cmp -s $OUT/before $OUT/after2 && echo "rolled back: same" || {{ echo "rolled back: differs"; diff $OUT/before $OUT/after2; }}
[ -e $st ] && echo "state left after refusal" || echo "no state after refusal"
"#
    );
    let out = vm.run("tune", &script, Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
    let o = &out.output;
    eprintln!("{o}");
    for prof in ["latency", "throughput"] {
        for want in [
            "apply rc=0",
            "check after apply rc=0",
            "apply again rc=0",
            "restore rc=0",
            "restored: same",
            "state gone",
        ] {
            let want = format!("{prof} {want}");
            assert!(o.lines().any(|l| l == want), "no {want:?} in:\n{o}");
        }
    }
    for want in [
        // The ring grown to its maximum by apply, and back to 128 after restore.
        "ethtool/eth0/rx-ring=RX:256",
        "ethtool/eth0/rx-ring=RX:128",
        "refused apply rc=1",
        "rolled back: same",
        "no state after refusal",
    ] {
        assert!(o.lines().any(|l| l == want), "no {want:?} in:\n{o}");
    }
    assert!(o.contains("proc/sys/net/ipv4/conf/vB/arp_announce"), "{o}");
    assert!(o.contains("rolled back"), "{o}");
}
