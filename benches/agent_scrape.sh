#!/usr/bin/env bash
# One scrape of 8 mlx5 devices x 2 ports x ~100 counters: `podnet agent` beside
# prometheus-node-exporter (--path.sysfs, the infiniband collector alone) on the same recorded
# tree, in the same run, scrapes interleaved. Prints the median and p90 of each, in ms, and
# how many series each served.
#
#   benches/agent_scrape.sh [SCRAPES]          (default 200; needs curl, python3,
#                                               prometheus-node-exporter)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
tree=$(mktemp -d)
trap 'kill $a $ne 2>/dev/null; rm -rf "$tree"' EXIT
python3 testdata/telemetry/make.py --bench "$tree"
cargo build -q --release -p podnet
./target/release/podnet agent --sysfs-root "$tree" --listen 127.0.0.1:19700 --interval 3600 2>/dev/null & a=$!
prometheus-node-exporter --path.sysfs="$tree" --collector.disable-defaults --collector.infiniband \
  --web.listen-address=127.0.0.1:19701 >/dev/null 2>&1 & ne=$!
sleep 1.5
for port in 19700 19701; do curl -sf -o /dev/null "127.0.0.1:$port/metrics"; done
: > "$tree/podnet.t"; : > "$tree/ne.t"
for _ in $(seq "$n"); do
  curl -s -o /dev/null -w '%{time_total}\n' 127.0.0.1:19700/metrics >> "$tree/podnet.t"
  curl -s -o /dev/null -w '%{time_total}\n' 127.0.0.1:19701/metrics >> "$tree/ne.t"
done
files=$(find "$tree/class/infiniband" -path '*counters/*' -type f | wc -l)
series_p=$(curl -s 127.0.0.1:19700/metrics | grep -vc '^#')
series_n=$(curl -s 127.0.0.1:19701/metrics | grep -c '^node_infiniband')
stats() { sort -n "$1" | awk '{v[NR]=$1} END {printf "median %.2f ms, p90 %.2f ms", v[int(NR/2)+1]*1000, v[int(NR*0.9)]*1000}'; }
echo "tree: 8 devices x 2 ports, $files counter files; $n scrapes each, interleaved"
echo "podnet agent:             $(stats "$tree/podnet.t"); $series_p series"
echo "prometheus-node-exporter: $(stats "$tree/ne.t"); $series_n node_infiniband series"
