# Shared by benches/capture-decode.sh and benches/capture-analyze.sh (sourced, with the
# script's arguments): FRAMES ($1, default 1,000,000), bench-out/, tshark, a release build,
# the core to pin to, and how a run is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-1000000}
out=bench-out
mkdir -p "$out"
command -v tshark >/dev/null || { echo "tshark is needed: apt-get install tshark" >&2; exit 2; }
cargo build --release -q -p podnet
core=$(( $(nproc) - 1 ))

# best CMD…: the best of 3 wall times (s) of CMD pinned to $core, stdout to /dev/null, and that
# run's peak RSS (KiB). An exit status over 1 (podnet's findings are 1) stops the benchmark.
best() {
  local b="" rss="" rc
  for _ in 1 2 3; do
    local s e t
    s=$(date +%s.%N)
    rc=0; /usr/bin/time -f %M -o "$out/rss" taskset -c "$core" "$@" >/dev/null 2>"$out/stderr" || rc=$?
    e=$(date +%s.%N)
    [ "$rc" -le 1 ] || { echo "$* failed ($rc): $(tail -1 "$out/stderr")" >&2; exit 1; }
    t=$(echo "$e - $s" | bc -l)
    if [ -z "$b" ] || (( $(echo "$t < $b" | bc -l) )); then b=$t; rss=$(cat "$out/rss"); fi
  done
  echo "$b $rss"
}

# tshark_argv FILE: sets TSHARK to tshark printing five fields per frame of FILE, the
# comparison both make.
tshark_argv() {
  TSHARK=(tshark -n -r "$1" -T fields -e frame.number -e infiniband.bth.opcode
    -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.invariant.crc)
}

rate() { echo "$frames / $1" | bc -l | xargs printf '%.0f'; }
