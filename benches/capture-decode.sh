#!/usr/bin/env bash
# Decoding speed of `podnet capture decode --json` beside `tshark -T fields` on the same
# synthetic capture, each pinned to one core. A benchmark, not a test: it prints figures.
#
#   benches/capture-decode.sh [FRAMES]      (default 1000000)
#
# Output files go to bench-out/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-1000000}
out=bench-out
mkdir -p "$out"
command -v tshark >/dev/null || { echo "tshark is needed: apt-get install tshark" >&2; exit 2; }
cargo build --release -q -p podnet
cargo build --release -q -p podnet-wire --example synth_capture
pcap="$out/synth-$frames.pcap"
[ -f "$pcap" ] || ./target/release/examples/synth_capture "$frames" "$pcap"
size=$(stat -c %s "$pcap")
core=$(( $(nproc) - 1 ))

best() { # best-of-3 wall seconds of a command, stdout to /dev/null
  local b=""
  for _ in 1 2 3; do
    local s e t
    s=$(date +%s.%N); "$@" >/dev/null 2>"$out/stderr"; e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    if [ -z "$b" ] || (( $(echo "$t < $b" | bc -l) )); then b=$t; fi
  done
  echo "$b"
}

# Warm the page cache so both read from memory.
cat "$pcap" >/dev/null
p=$(best taskset -c "$core" ./target/release/podnet capture decode --json "$pcap")
lines=$(./target/release/podnet capture decode --json "$pcap" | wc -l)
[ "$lines" -eq "$frames" ] || { echo "podnet printed $lines records for $frames frames" >&2; exit 1; }
t=$(best taskset -c "$core" tshark -n -r "$pcap" -T fields -e frame.number -e infiniband.bth.opcode \
      -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.invariant.crc)

rate() { echo "$frames / $1" | bc -l | xargs printf '%.0f'; }
printf 'capture: %s frames, %.1f MB (%s)\n' "$frames" "$(echo "$size/1000000" | bc -l)" "$pcap"
printf '%-44s %8.3f s %12s frames/s\n' "podnet capture decode --json (every field, ICRC checked)" "$p" "$(rate "$p")"
printf '%-44s %8.3f s %12s frames/s\n' "tshark -T fields (5 fields, no ICRC check)" "$t" "$(rate "$t")"
printf 'podnet / tshark: %.1fx\n' "$(echo "$t / $p" | bc -l)"
