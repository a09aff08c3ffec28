#!/usr/bin/env bash
# podnet qualify across an emulated pod (scripts/emupod.sh), as the CI test runs it: the wall
# time of the full plan (testdata/qualify/emupod.toml) by pod size, and how many of RUNS clean
# runs of the 6 x 2 pod fail a check (false failures). Root; release build.
#
#   benches/pod_qualify.sh [RUNS [SIZES]]     (defaults: 10 "4 8 16")
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10} sizes=${2:-"4 8 16"}
cargo build --release -q -p podnet
P=$PWD/target/release/podnet E=$PWD/scripts/emupod.sh
work=$(mktemp -d)
trap 'bash $E down bq >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
run() { # HOSTS OUT: every host runs the plan; prints rank 0's wall time and failed checks
  local n=$1 out=$2 t0 i
  t0=$(date +%s.%N)
  for ((i = n - 1; i >= 0; i--)); do
    bash "$E" exec bq "$i" "$P" qualify --plan "$work/pod.toml" --hostfile "$work/hosts" \
      --report-dir "$out" --join-timeout 60 > "$work/h$i.out" 2>&1 &
  done
  wait || true
  python3 - "$out/report.json" "$(date +%s.%N)" "$t0" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall = float(sys.argv[2]) - float(sys.argv[3])
fails = [c["name"] for c in r["checks"] if c["status"] == "fail"]
print(f"{wall:.1f} s wall, {r['summary']['passed']} passed, {len(fails)} failed "
      f"{fails[:3]}, suspects {[s['component'] for s in r['suspects']]}")
PY
}
pod() { # HOSTS
  bash "$E" down bq >/dev/null 2>&1 || true
  bash "$E" up bq "$1" 2 2 2 100mbit >/dev/null
  (cat testdata/qualify/emupod.toml; bash "$E" plan bq) > "$work/pod.toml"
  bash "$E" hostfile bq > "$work/hosts"
}
echo "== wall time by pod size (x 2 rails, 2 hosts per ToR, 2 spines, 100 Mbit/s links)"
for n in $sizes; do
  pod "$n"
  printf '%2d hosts: ' "$n"; run "$n" "$work/size$n"
done
echo "== $runs clean runs of the 6 x 2 pod"
pod 6
for ((k = 1; k <= runs; k++)); do printf 'run %2d: ' "$k"; run 6 "$work/clean$k"; done
