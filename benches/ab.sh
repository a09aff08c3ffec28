#!/usr/bin/env bash
# Two podnet binaries, run after run, on the soft provider's perf rows: a before/after for a
# change, with the host's drift shared between the two. Loopback in a private network
# namespace, server pinned to core 0, client to core 1; each figure the median of RUNS runs.
#
#   benches/ab.sh BEFORE_BIN AFTER_BIN [SECONDS] [RUNS]      (root)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: benches/ab.sh BEFORE_BIN AFTER_BIN [SECONDS] [RUNS]"; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
cd "$(dirname "$0")/.."
exec unshare --net bash -s "$before" "$after" "${3:-3}" "${4:-5}" <<'IN'
BEFORE=$1 AFTER=$2 SECS=$3 RUNS=$4
source benches/pair.sh
netns_up
one() { local bin=$1; shift; pair "$bin" "$1" "$2" "$SECS" "${@:3}"; }
B=$(mktemp) A=$(mktemp)
trap 'rm -f "$B" "$A"' EXIT
row() { local name=$1; shift
  : > "$B"; : > "$A"
  for _ in $(seq $RUNS); do one "$BEFORE" "$@" >> "$B"; one "$AFTER" "$@" >> "$A"; done
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$(median < "$B")" "$(median < "$A")" \
    "$(tr '\n' ' ' < "$B")" "$(tr '\n' ' ' < "$A")"
}
echo "| what | before | after | before, each run | after, each run |"
echo "|---|---|---|---|---|"
row "write-bw 64K v6 MB/s" 6 BW_average write-bw -s 65536 -q 1
row "write-bw 64K v4 MB/s" 4 BW_average write-bw -s 65536 -q 1
row "write-bw 64K v4 -q 8 MB/s" 4 BW_average write-bw -s 65536 -q 8
row "write-bw 2B v6 Mpps" 6 MsgRate write-bw -s 2
row "write-bw 2B v4 Mpps" 4 MsgRate write-bw -s 2
row "read-bw 64K v6 MB/s" 6 BW_average read-bw -s 65536
row "write-lat 2B v6 us" 6 t_typical write-lat -s 2
row "write-lat 2B v4 us" 4 t_typical write-lat -s 2
row "send-lat 2B v6 us" 6 t_typical send-lat -s 2
IN
