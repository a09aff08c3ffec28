#!/usr/bin/env bash
# Aggregate goodput of an all-to-all burn-in among 4 local processes (4 soft devices on
# loopback addresses), beside the sum of the same 12 edges measured one at a time with
# `podnet perf send-bw` in the same run. Every byte of the burn-in is checked; perf's runs are
# not. Needs root (a private network namespace).
#
#   benches/burnin_goodput.sh [SECONDS]      (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build -q --release -p podnet
exec unshare --net bash -c '
set -euo pipefail
ip link set lo up
P=./target/release/podnet; S='"$secs"'; dir=$(mktemp -d); trap "rm -rf $dir" EXIT
for r in 0 1 2 3; do
  $P burnin --rank $r --world-size 4 --coordinator 127.0.11.1:29400 -d soft:127.0.11.$((r+1)) \
    --patterns all-to-all --duration $S --sizes 65536 --json > $dir/b$r.json &
done
wait
agg=$(cat $dir/b*.json | python3 -c "import sys, json
t = 0.0
for l in sys.stdin:
    v = json.loads(l); assert v[\"ok\"], v
    t += sum(e[\"mb_per_s\"] for e in v[\"edges\"] if e[\"end\"] == \"sender\")
print(f\"{t:.1f}\")")
sum=0
for a in 1 2 3 4; do for b in 1 2 3 4; do [ $a = $b ] && continue
  $P perf send-bw -d soft:127.0.11.$b -s 65536 -D 2 --output bandwidth > $dir/s.txt &
  sleep 0.3
  bw=$($P perf send-bw -d soft:127.0.11.$a -s 65536 -D 2 --output bandwidth 127.0.11.$b)
  wait
  sum=$(python3 -c "print(f\"{$sum + $bw:.1f}\")")
done; done
echo "all-to-all burn-in, 4 ranks, 12 edges, 64 KiB, ${S} s, every byte checked: ${agg} MB/s aggregate"
echo "the same 12 edges one at a time (podnet perf send-bw -D 2, unchecked):        ${sum} MB/s summed"
python3 -c "print(f\"ratio: {$agg / $sum:.2f}\")"
'
