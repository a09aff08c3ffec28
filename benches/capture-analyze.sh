#!/usr/bin/env bash
# Speed and memory of `podnet capture analyze` (decode, ICRC check, connections, findings) on a
# capture of busy RC traffic the transport simulator writes (16 QP pairs, 4 KiB WRITEs at MTU
# 1024, 0.1 % loss, 0.1 % duplicates, 1 % CE marks), beside `podnet capture decode --json` and
# `tshark -T fields` on the same file, each pinned to one core. A benchmark, not a test.
#
#   benches/capture-analyze.sh [FRAMES]      (default 1000000)
#
# Output files go to bench-out/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-1000000}
out=bench-out
mkdir -p "$out"
command -v tshark >/dev/null || { echo "tshark is needed: apt-get install tshark" >&2; exit 2; }
cargo build --release -q -p podnet
cargo build --release -q -p podnet-capture --example sim_capture
pcap="$out/sim-$frames.pcap"
[ -f "$pcap" ] || ./target/release/examples/sim_capture "$frames" "$pcap"
size=$(stat -c %s "$pcap")
core=$(( $(nproc) - 1 ))

best() { # best-of-3 wall seconds of a command, stdout to /dev/null; also its peak RSS (KiB)
  local b="" rss=""
  for _ in 1 2 3; do
    local s e t
    s=$(date +%s.%N); /usr/bin/time -f %M -o "$out/rss" "$@" >/dev/null 2>"$out/stderr" || true
    e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    if [ -z "$b" ] || (( $(echo "$t < $b" | bc -l) )); then b=$t; rss=$(cat "$out/rss"); fi
  done
  echo "$b $rss"
}

cat "$pcap" >/dev/null
read -r a arss < <(best taskset -c "$core" ./target/release/podnet capture analyze --json "$pcap")
read -r d drss < <(best taskset -c "$core" ./target/release/podnet capture decode --json "$pcap")
read -r t trss < <(best taskset -c "$core" tshark -n -r "$pcap" -T fields -e frame.number \
  -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.invariant.crc)
./target/release/podnet capture analyze "$pcap" | head -1

rate() { echo "$frames / $1" | bc -l | xargs printf '%.0f'; }
printf 'capture: %s frames, %.1f MB (%s)\n' "$frames" "$(echo "$size/1000000" | bc -l)" "$pcap"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "podnet capture analyze --json (findings)" "$a" "$(rate "$a")" "$((arss / 1024))"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "podnet capture decode --json (every field)" "$d" "$(rate "$d")" "$((drss / 1024))"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "tshark -T fields (5 fields, no ICRC check)" "$t" "$(rate "$t")" "$((trss / 1024))"
