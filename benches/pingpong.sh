#!/usr/bin/env bash
# podnet pingpong on loopback, both progress modes, beside sockperf's UDP ping-pong on the same
# loopback in the same run. Needs root (a private network namespace) and sockperf (Debian
# package `sockperf`). Server pinned to core 0, client to core 1; each figure is the median of
# RUNS runs.
#
#   benches/pingpong.sh [ITERS] [RUNS]
#
# podnet's usec/iter is a round trip (one message each way), as ibv_rc_pingpong's; sockperf
# reports half a round trip, so its figure is doubled here.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20000}
RUNS=${2:-5}
cargo build --release -q -p podnet
PODNET=$PWD/target/release/podnet
command -v sockperf >/dev/null || { echo "sockperf is not installed (apt-get install sockperf)"; exit 2; }

exec unshare --net bash -s "$PODNET" "$ITERS" "$RUNS" <<'EOF'
set -euo pipefail
PODNET=$1 ITERS=$2 RUNS=$3
ip link set lo up
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one() { # MODE SIZE ITERS -> "usec_per_iter mbit_per_sec"
  local mode=$1 size=$2 n=$3 flag=
  [ "$mode" = event ] && flag=-e
  taskset -c 0 "$PODNET" pingpong $flag -s "$size" -n "$n" --json --timeout 60 >/dev/null &
  local srv=$!
  sleep 0.3
  taskset -c 1 "$PODNET" pingpong $flag -s "$size" -n "$n" --json --timeout 60 localhost |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["usec_per_iter"], d["mbit_per_sec"])'
  wait $srv
}
printf '%-34s %8s %14s %14s\n' "what" "size" "usec/iter" "Mbit/s"
for mode in busy event; do
  for size in 1 4096 65536; do
    n=$ITERS; [ "$size" = 65536 ] && n=$((ITERS / 10))
    rows=$(for _ in $(seq "$RUNS"); do one $mode $size $n; done)
    lat=$(echo "$rows" | awk '{print $1}' | median)
    bw=$(echo "$rows" | awk '{print $2}' | median)
    printf '%-34s %8s %14.1f %14.1f\n' "podnet pingpong ($mode)" "$size" "$lat" "$bw"
  done
done
taskset -c 0 sockperf server -i 127.0.0.1 -p 11111 >/dev/null 2>&1 &
srv=$!
sleep 0.5
for opt in "" --nonblocked; do for size in 16 4096; do
  lat=$(for _ in $(seq "$RUNS"); do
    taskset -c 1 sockperf ping-pong -i 127.0.0.1 -p 11111 -m $size -t 3 $opt 2>/dev/null |
      awk '/avg-latency=/ {for (i=1;i<=NF;i++) if ($i ~ /^avg-latency=/) {split($i,a,"="); print a[2]*2}}'
  done | median)
  printf '%-34s %8s %14.1f %14s\n' "sockperf UDP ping-pong ${opt:-(blocking)}" "$size" "$lat" "-"
done; done
kill $srv
EOF
