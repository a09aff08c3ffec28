#!/usr/bin/env bash
# Does the soft provider lose to its own load? `podnet perf TEST -a` (every size, 2 B to
# 8 MiB) for every test, the bandwidth tests on 8 QPs, each sweep with --data-validation,
# RUNS times each, between two soft devices on loopback in a private network namespace;
# prints how many sweeps of each test passed, and the first failure's last lines.
# RCVBUF (bytes) stands for an unprivileged process under default sysctls: 212992 is
# rmem_max's default (needs the fault-injection build, which this script makes).
#
# ITERS (-n) shortens each size's run; perftest's -a default is 4000 per size and QP, and a
# sweep of all eight tests takes about 15 minutes on 2 cores.
#
#   benches/sweeps.sh [RUNS] [RCVBUF] [ITERS]   (root; RUNS 20, RCVBUF 212992, ITERS 4000)
#   TESTS="send-bw write-bw" benches/sweeps.sh …  (only those tests)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
RCVBUF=${2:-212992}
ITERS=${3:-4000}
cargo build --release -q -p podnet --features fault-injection
TESTS=${TESTS:-write-bw read-bw send-bw atomic-bw write-lat read-lat send-lat atomic-lat}
exec unshare --net bash -s "$PWD/target/release/podnet" "$RUNS" "$RCVBUF" "$ITERS" "$TESTS" <<'IN'
set -uo pipefail
PODNET=$1 RUNS=$2 N=$4 TESTS=$5
export PODNET_FAULT_RCVBUF=$3
ip link set lo up
sleep 0.5
log=$(mktemp)
printf '%-10s %-4s %s\n' test qps "sweeps passed"
for t in $TESTS; do
  q=8
  case $t in *-lat) q=1 ;; esac # latency tests run one QP, as perftest's do
  dv=--data-validation
  ok=0 first=
  for r in $(seq "$RUNS"); do
    "$PODNET" perf "$t" -a -n "$N" -q $q $dv -d soft:127.0.0.1 --timeout 60 >/dev/null 2>&1 &
    srv=$!
    sleep 0.3
    if timeout 900 "$PODNET" perf "$t" -a -n "$N" -q $q $dv -d soft:127.0.0.2 --timeout 60 127.0.0.1 \
      >"$log" 2>&1; then
      ok=$((ok + 1))
    elif [ -z "$first" ]; then
      first="run $r: $(tail -2 "$log" | tr '\n' ' ')"
    fi
    wait $srv 2>/dev/null
  done
  printf '%-10s %-4s %d/%d %s\n' "$t" "$q" "$ok" "$RUNS" "$first"
done
rm -f "$log"
IN
