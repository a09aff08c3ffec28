#!/usr/bin/env bash
# podnet perf (soft provider) beside what users would pick instead, in one run, on IPv4 and on
# IPv6 soft devices, each row with its target and `met`/`MISSED`:
#
#   - write-bw -s 65536 -q 1      vs iperf3, one TCP stream               (target >= 1.0x)
#     with the CPU each side took per GB moved (both processes, user + system)
#   - write-bw -s 65536 -q 4, unpinned, vs its own -q 1                   (target >= 1.5x)
#   - send-lat -s 2, busy-poll    vs sockperf ping-pong -m 16 --nonblocked (target <= 1.5x)
#   - send-lat -s 2 -e            vs sockperf ping-pong -m 16, blocking    (target <= 1.2x)
#   - write-bw -s 2 message rate                                          (target >= 5 M/s)
#   - pingpong -s 65536 per iteration vs twice send-lat -s 65536 -m 1024's typical, the same
#     path MTU (pingpong's default, as rc_pingpong's)                    (target <= 1.2x)
#   - write-bw -s 65536 -q 1 between two network namespaces over a veth, vs iperf3 there
#
# Loopback in a private network namespace, each side pinned to its own core (server: core 0,
# client: core 1) except the -q 4 row. On loopback nothing is ever segmented (a GSO run reaches
# the receiver as one buffer), so offload saves per-datagram kernel work, not wire work; the
# veth row is the same. Latency is half a round trip on both sides (perftest's t_typical;
# sockperf's percentile 50). Each figure is the median of RUNS runs of SECONDS seconds. Every
# podnet row also checks that each receiver verified the ICRC of every packet it took
# (`receive_checks`): a row where one did not is marked `UNVERIFIED`.
#
#   benches/compare.sh [SECONDS] [RUNS]        (root; Debian packages iperf3, sockperf)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-4}
RUNS=${2:-5}
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
work=$(mktemp -d)
trap 'rm -rf "$work"; ip netns del cmp-a 2>/dev/null || true; ip netns del cmp-b 2>/dev/null || true' EXIT
: > "$work/unverified"
# verified WHAT FILE...: records WHAT in $work/unverified unless every side's JSON in the
# FILEs (perf's receive_checks lines, pingpong's row with its device counters) says its device
# took packets and verified the ICRC of each.
verified() {
  local what=$1; shift
  python3 - "$@" <<'PY' || echo "$what" >> "$work/unverified"
import json, sys
sides = 0
for f in sys.argv[1:]:
    for l in open(f):
        v = json.loads(l)
        if "receive_checks" in v:
            c = v["receive_checks"]
            ok = c["received"] > 0 and c["icrc_verified"] == c["received"]
        elif "counters" in v:
            c = v["counters"]
            ok = c.get("rcvd_pkts", 0) > 0 and c.get("icrc_unverified", 0) == 0 \
                and c.get("icrc_errors", 0) == 0
        else:
            continue
        sides += 1
        if not ok:
            sys.exit(1)
sys.exit(0 if sides == 2 else 1)
PY
}
# perf FAMILY KEY ARGS...: one pinned podnet pair; prints the client's KEY.
perf() {
  local fam=$1 key=$2; shift 2
  PAIR_CHECKS=$work/checks pair "$PODNET" "$fam" "$key" "$SECS" "$@"
  verified "$fam $*" "$work/checks"
}
med() { for _ in $(seq "$RUNS"); do "$@"; done | median; }
# cpu CMD...: runs CMD; appends the user + system seconds it and its children took to $work/cpu.
cpu() { # (`times` in a pipe would report the pipe's subshell, not this one)
  ( "$@"; t=$(mktemp); times > "$t"
    tail -1 "$t" | sed 's/[ms]/ /g' | awk '{print $1 * 60 + $2 + $3 * 60 + $4}' >> "$work/cpu"; rm -f "$t" )
}
# per_gb MB/S: the CPU seconds in $work/cpu per GB moved at MB/S for SECS, into $work/cpugb.
per_gb() {
  python3 -c "s = sum(float(l) for l in open('$work/cpu')); print(s / ($1 * 2**20 * $SECS / 1e9))" >> "$work/cpugb"
}
# bwcpu FAMILY ARGS...: MB/s of one pinned podnet bandwidth pair, and CPU seconds per GB moved
# (both processes) into $work/cpugb.
bwcpu() {
  : > "$work/cpu"
  local bw
  bw=$(cpu perf "$@")
  per_gb "$bw"
  echo "$bw"
}
iperf() { # [NETNS_SERVER NETNS_CLIENT ADDRESS]: MB/s (2^20 bytes, as perftest's column)
  local ns_s=() ns_c=() addr=127.0.0.1
  if [ $# -eq 3 ]; then ns_s=(ip netns exec "$1") ns_c=(ip netns exec "$2") addr=$3; fi
  : > "$work/cpu"
  cpu "${ns_s[@]}" taskset -c 0 iperf3 -s -1 -B "$addr" -p 5201 >/dev/null &
  local srv=$!
  sleep 0.3
  local bw
  # Into a file, read after: a reader started beside a pinned run takes CPU from it.
  cpu "${ns_c[@]}" taskset -c 1 iperf3 -c "$addr" -p 5201 -t "$SECS" -J > "$work/iperf.json"
  wait $srv
  bw=$(python3 -c "import json; print(json.load(open('$work/iperf.json'))['end']['sum_received']['bits_per_second']/8/2**20)")
  per_gb "$bw"
  echo "$bw"
}
cpugb() { median < "$work/cpugb"; : > "$work/cpugb"; }
unpinned() { PAIR_CORES=none perf "$@"; } # FAMILY KEY ARGS...: a podnet pair on any core
sp_server() { taskset -c 0 sockperf server -i "$1" -p 11111 "${@:2}" >/dev/null 2>&1 & echo $!; }
sp_lat() {
  taskset -c 1 sockperf ping-pong -i "$1" -p 11111 -m 16 -t "$SECS" "${@:2}" > "$work/sp.txt" 2>&1
  awk '/percentile 50.000/ {print $NF}' "$work/sp.txt"
}
pingpong() { # FAMILY: usec per iteration of podnet pingpong -s 65536
  local s=127.0.0.1 c=127.0.0.2
  if [ "$1" = 6 ]; then s=fd00::1 c=fd00::2; fi
  taskset -c 0 "$PODNET" pingpong -d soft:$s -s 65536 -n 2000 --json > "$work/pps.json" &
  local srv=$!
  sleep 0.3
  taskset -c 1 "$PODNET" pingpong -d soft:$c -s 65536 -n 2000 --json $s > "$work/pp.json"
  wait $srv
  verified "$1 pingpong" "$work/pp.json" "$work/pps.json"
  python3 -c "import json; print(json.loads(open('$work/pp.json').readline())['usec_per_iter'])"
}

: > "$work/cpugb"
declare -A R
for fam in 4 6; do
  R[bw$fam]=$(med bwcpu "$fam" BW_average write-bw -s 65536 -q 1); R[bwcpu$fam]=$(cpugb)
  R[bwq4$fam]=$(med unpinned "$fam" BW_average write-bw -s 65536 -q 4)
  R[bwq1u$fam]=$(med unpinned "$fam" BW_average write-bw -s 65536 -q 1)
  R[lat$fam]=$(med perf "$fam" t_typical send-lat -s 2)
  R[late$fam]=$(med perf "$fam" t_typical send-lat -s 2 -e)
  R[rate$fam]=$(med perf "$fam" MsgRate write-bw -s 2)
  R[lat64k$fam]=$(med perf "$fam" t_typical send-lat -s 65536 -m 1024)
  R[pp$fam]=$(med pingpong "$fam")
done
R[tcp]=$(med iperf); R[tcpcpu]=$(cpugb)
# sockperf (Debian 12's) takes IPv4 addresses only: its IPv4 figure is both families' yardstick.
srv=$(sp_server 127.0.0.1 --nonblocked); sleep 0.5
R[splat]=$(med sp_lat 127.0.0.1 --nonblocked); kill $srv; wait $srv 2>/dev/null || true
srv=$(sp_server 127.0.0.1); sleep 0.5
R[splatb]=$(med sp_lat 127.0.0.1); kill $srv; wait $srv 2>/dev/null || true
# Two namespaces over a veth with jumbo frames (as a RoCE fabric runs: a 4096-byte RoCE MTU
# needs more than 1500): podnet's pair and iperf3 between 10.77.0.1 and 10.77.0.2.
ip netns add cmp-a; ip netns add cmp-b
ip link add va netns cmp-a type veth peer name vb netns cmp-b
ip -n cmp-a addr add 10.77.0.1/24 dev va; ip -n cmp-b addr add 10.77.0.2/24 dev vb
ip -n cmp-a link set va mtu 9000 up; ip -n cmp-b link set vb mtu 9000 up
ip -n cmp-a link set lo up; ip -n cmp-b link set lo up; sleep 1
veth() {
  ip netns exec cmp-a taskset -c 0 "$PODNET" perf write-bw -s 65536 -d soft:10.77.0.1 -D "$SECS" --json --timeout 30 > "$work/veths.json" &
  local srv=$!
  sleep 0.3
  ip netns exec cmp-b taskset -c 1 "$PODNET" perf write-bw -s 65536 -d soft:10.77.0.2 -D "$SECS" --json --timeout 30 10.77.0.1 > "$work/veth.json"
  wait $srv
  verified "veth write-bw" "$work/veth.json" "$work/veths.json"
  python3 -c "import json; print(json.loads(open('$work/veth.json').readline())['BW_average'])"
}
R[veth]=$(med veth)
R[vethtcp]=$(med iperf cmp-a cmp-b 10.77.0.1); : > "$work/cpugb"

row() { # what podnet other unit ratio-kind target
  python3 - "$@" <<'PY'
import sys
what, p, a, unit, kind, target = sys.argv[1:7]
p, a = float(p), float(a)
r = p / a
ok = {"ge": r >= float(target), "le": r <= float(target), "abs": p >= float(target)}[kind]
t = {"ge": f">= {target}x", "le": f"<= {target}x", "abs": f">= {target} {unit}"}[kind]
other = f"{a:>10.2f}" if kind != "abs" else f"{'':>10}"
ratio = f"{r:>6.2f}x" if kind != "abs" else f"{'':>7}"
print(f"{what:<46} {p:>10.2f} {other} {unit:<6} {ratio}  {t:<13} {'met' if ok else 'MISSED'}")
PY
}
echo "podnet perf (soft) vs the alternative; loopback, pinned, median of $RUNS x ${SECS}s"
printf '%-46s %10s %10s %-6s %7s  %-13s %s\n' what podnet other unit ratio target
for fam in 4 6; do
  v=IPv$fam
  row "write-bw 64 KiB -q 1, $v / iperf3 TCP" "${R[bw$fam]}" "${R[tcp]}" MB/s ge 1.0
  row "  CPU s per GB moved, $v / iperf3" "${R[bwcpu$fam]}" "${R[tcpcpu]}" s/GB le 1000
  row "write-bw 64 KiB -q 4 / -q 1, $v, unpinned" "${R[bwq4$fam]}" "${R[bwq1u$fam]}" MB/s ge 1.5
  row "send-lat 2 B busy, $v RC / sockperf nb" "${R[lat$fam]}" "${R[splat]}" usec le 1.5
  row "send-lat 2 B -e, $v RC / sockperf blocking" "${R[late$fam]}" "${R[splatb]}" usec le 1.2
  row "write-bw 2 B message rate, $v" "${R[rate$fam]}" 1 M/s abs 5
  row "pingpong 64 KiB / 2 x send-lat 64 KiB, $v" "${R[pp$fam]}" "$(python3 -c "print(2 * ${R[lat64k$fam]})")" usec le 1.2
done
row "write-bw 64 KiB, IPv4 over a veth / iperf3" "${R[veth]}" "${R[vethtcp]}" MB/s ge 1.0
echo "(other: iperf3 -c over IPv4; sockperf ping-pong -m 16 [--nonblocked] percentile 50 over"
echo " IPv4; pingpong against send-lat at pingpong's path MTU, 1,024 as rc_pingpong's default."
echo " The CPU row's target is only that it is printed. Loopback and the veth never segment:"
echo " a GSO run reaches the receiver as one buffer)"
if [ -s "$work/unverified" ]; then
  echo "UNVERIFIED: in these podnet runs a receiver took packets whose ICRC it did not verify:"
  sort "$work/unverified" | uniq -c
  exit 1
fi
echo "every podnet receiver verified the ICRC of every packet it took"
EOF
