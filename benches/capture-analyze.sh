#!/usr/bin/env bash
# Speed and memory of `podnet capture analyze` (decode, ICRC check, connections, findings) on a
# capture of busy RC traffic the transport simulator writes (16 QP pairs, 4 KiB WRITEs at MTU
# 1024, 0.1 % loss, 0.1 % duplicates, 1 % CE marks), beside `podnet capture decode --json` and
# `tshark -T fields` on the same file, each pinned to one core. A benchmark, not a test.
#
#   benches/capture-analyze.sh [FRAMES]      (default 1000000)
#
# Output files go to bench-out/ (ignored by git).
# shellcheck source=benches/capture-lib.sh
source "$(dirname "$0")/capture-lib.sh"
cargo build --release -q -p podnet-capture --example sim_capture
pcap="$out/sim-$frames.pcap"
[ -f "$pcap" ] || ./target/release/examples/sim_capture "$frames" "$pcap"
size=$(stat -c %s "$pcap")

cat "$pcap" >/dev/null
r=$(best ./target/release/podnet capture analyze --json "$pcap"); read -r a arss <<< "$r"
r=$(best ./target/release/podnet capture decode --json "$pcap"); read -r d drss <<< "$r"
tshark_argv "$pcap"
r=$(best "${TSHARK[@]}"); read -r t trss <<< "$r"
./target/release/podnet capture analyze "$pcap" | head -1

printf 'capture: %s frames, %.1f MB (%s)\n' "$frames" "$(echo "$size/1000000" | bc -l)" "$pcap"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "podnet capture analyze --json (findings)" "$a" "$(rate "$a")" "$((arss / 1024))"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "podnet capture decode --json (every field)" "$d" "$(rate "$d")" "$((drss / 1024))"
printf '%-50s %8.3f s %12s frames/s %8s MiB\n' "tshark -T fields (5 fields, no ICRC check)" "$t" "$(rate "$t")" "$((trss / 1024))"
