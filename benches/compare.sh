#!/usr/bin/env bash
# podnet perf (soft provider) beside what users would pick instead, in one run on loopback in a
# private network namespace, each side pinned to its own core (server: core 0, client: core 1):
#
#   - write-bw -s 65536 -q 1   vs iperf3, one TCP stream            (target >= 1.0x)
#   - send-lat -s 2, busy-poll vs sockperf ping-pong -m 16 --nonblocked, both ends non-blocking
#                                                                    (target <= 1.5x, medians)
#   - send-lat -s 2 -e         vs sockperf ping-pong -m 16, blocking (target <= 1.2x, medians)
#   - write-bw -s 2 msg rate   vs sockperf throughput -m 16          (target >= 5 Mpps)
#
# podnet runs on IPv6 (fd00::1, fd00::2 on lo), where the soft provider uses UDP GSO/GRO, and
# the bandwidth and message-rate rows are repeated without it (--no-udp-offload) and on IPv4
# (raw-socket receive, no offload). On loopback nothing is ever segmented: a GSO send reaches
# the receiving socket as one buffer, so offload saves per-datagram kernel work, not wire work.
# Latency is half a round trip on both sides (perftest's t_typical; sockperf's percentile 50).
# Each figure is the median of RUNS runs of SECONDS seconds.
#
#   benches/compare.sh [SECONDS] [RUNS]        (root; Debian packages iperf3, sockperf)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-4}
RUNS=${2:-3}
for t in iperf3 sockperf taskset; do
  command -v $t >/dev/null || { echo "compare.sh: $t is not installed (apt-get install $t)"; exit 2; }
done
cargo build --release -q -p podnet
PODNET=$PWD/target/release/podnet

exec unshare --net bash -s "$PODNET" "$SECS" "$RUNS" <<'EOF'
set -euo pipefail
PODNET=$1 SECS=$2 RUNS=$3
source benches/pair.sh
netns_up
# perf FAMILY KEY ARGS...: one podnet pair; prints the JSON key of the client's row.
perf() { local fam=$1 key=$2; shift 2; pair "$PODNET" "$fam" "$key" "$SECS" "$@"; }
med() { for _ in $(seq "$RUNS"); do "$@"; done | median; }
iperf() {
  taskset -c 0 iperf3 -s -1 -B 127.0.0.1 -p 5201 >/dev/null &
  local srv=$!
  sleep 0.3
  # MB/s of 2^20 bytes, as perftest's column.
  taskset -c 1 iperf3 -c 127.0.0.1 -p 5201 -t "$SECS" -J |
    python3 -c "import json,sys; print(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8/2**20)"
  wait $srv
}
sp_server() { taskset -c 0 sockperf server -i 127.0.0.1 -p 11111 "$@" >/dev/null 2>&1 & echo $!; }
sp_lat() {
  taskset -c 1 sockperf ping-pong -i 127.0.0.1 -p 11111 -m 16 -t "$SECS" "$@" 2>&1 |
    awk '/percentile 50.000/ {print $NF}'
}
sp_rate() {
  taskset -c 1 sockperf throughput -i 127.0.0.1 -p 11111 -m 16 -t "$SECS" 2>&1 |
    awk '/Message Rate is/ {for (i=1;i<=NF;i++) if ($i=="is") print $(i+1)/1e6}'
}

bw6=$(med perf 6 BW_average write-bw -s 65536 -q 1)
bw6n=$(med perf 6 BW_average write-bw -s 65536 -q 1 --no-udp-offload)
bw4=$(med perf 4 BW_average write-bw -s 65536 -q 1)
tcp=$(med iperf)
lat=$(med perf 6 t_typical send-lat -s 2)
lat4=$(med perf 4 t_typical send-lat -s 2)
latuc=$(med perf 6 t_typical send-lat -s 2 -c UC)
late=$(med perf 6 t_typical send-lat -s 2 -e)
rate6=$(med perf 6 MsgRate write-bw -s 2)
rate6n=$(med perf 6 MsgRate write-bw -s 2 --no-udp-offload)
rate4=$(med perf 4 MsgRate write-bw -s 2)
srv=$(sp_server --nonblocked); sleep 0.5
splat=$(med sp_lat --nonblocked); kill $srv; wait $srv 2>/dev/null || true
srv=$(sp_server); sleep 0.5
splatb=$(med sp_lat); sprate=$(med sp_rate); kill $srv; wait $srv 2>/dev/null || true

row() { # what podnet alternative unit ratio-kind target
  python3 - "$@" <<'PY'
import sys
what, p, a, unit, kind, target = sys.argv[1:7]
p, a = float(p), float(a)
r = p / a
ok = {"ge": r >= float(target), "le": r <= float(target), "abs": p >= float(target)}[kind]
t = {"ge": f">= {target}x", "le": f"<= {target}x", "abs": f">= {target} {unit}"}[kind]
print(f"{what:<44} {p:>10.2f} {a:>10.2f} {unit:<6} {r:>6.2f}x  {t:<12} {'met' if ok else 'MISSED'}")
PY
}
echo "podnet perf (soft) vs the alternative; loopback, pinned, median of $RUNS x ${SECS}s"
printf '%-44s %10s %10s %-6s %7s  %-12s %s\n' what podnet other unit ratio target
row "write-bw 64 KiB, IPv6 GSO/GRO / iperf3 TCP" "$bw6" "$tcp" MB/s ge 1.0
row "write-bw 64 KiB, IPv6 no offload / iperf3" "$bw6n" "$tcp" MB/s ge 1.0
row "write-bw 64 KiB, IPv4 raw rx / iperf3" "$bw4" "$tcp" MB/s ge 1.0
row "send-lat 2 B busy, IPv6 RC / sockperf nb" "$lat" "$splat" usec le 1.5
row "send-lat 2 B busy, IPv4 RC / sockperf nb" "$lat4" "$splat" usec le 1.5
row "send-lat 2 B busy, IPv6 UC / sockperf nb" "$latuc" "$splat" usec le 1.5
row "send-lat 2 B -e, IPv6 RC / sockperf blocking" "$late" "$splatb" usec le 1.2
row "write-bw 2 B rate, IPv6 GSO/GRO" "$rate6" "$sprate" Mpps abs 5
row "write-bw 2 B rate, IPv6 no offload" "$rate6n" "$sprate" Mpps abs 5
row "write-bw 2 B rate, IPv4 raw rx" "$rate4" "$sprate" Mpps abs 5
echo "(other: iperf3 -c, sockperf ping-pong -m 16 [--nonblocked] percentile 50, sockperf throughput -m 16)"
EOF
