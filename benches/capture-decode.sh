#!/usr/bin/env bash
# Decoding speed of `podnet capture decode --json` beside `tshark -T fields` on the same
# synthetic capture, each pinned to one core. A benchmark, not a test: it prints figures.
#
#   benches/capture-decode.sh [FRAMES]      (default 1000000)
#
# Output files go to bench-out/ (ignored by git).
# shellcheck source=benches/capture-lib.sh
source "$(dirname "$0")/capture-lib.sh"
cargo build --release -q -p podnet-wire --example synth_capture
pcap="$out/synth-$frames.pcap"
[ -f "$pcap" ] || ./target/release/examples/synth_capture "$frames" "$pcap"
size=$(stat -c %s "$pcap")

# Warm the page cache so both read from memory.
cat "$pcap" >/dev/null
r=$(best ./target/release/podnet capture decode --json "$pcap"); read -r p _ <<< "$r"
lines=$(./target/release/podnet capture decode --json "$pcap" | wc -l)
[ "$lines" -eq "$frames" ] || { echo "podnet printed $lines records for $frames frames" >&2; exit 1; }
tshark_argv "$pcap"
r=$(best "${TSHARK[@]}"); read -r t _ <<< "$r"

printf 'capture: %s frames, %.1f MB (%s)\n' "$frames" "$(echo "$size/1000000" | bc -l)" "$pcap"
printf '%-44s %8.3f s %12s frames/s\n' "podnet capture decode --json (every field, ICRC checked)" "$p" "$(rate "$p")"
printf '%-44s %8.3f s %12s frames/s\n' "tshark -T fields (5 fields, no ICRC check)" "$t" "$(rate "$t")"
printf 'podnet / tshark: %.1fx\n' "$(echo "$t / $p" | bc -l)"
