# Sourced by compare.sh and ab.sh, inside their private network namespace: the loopback
# addresses a soft pair uses and one podnet perf pair, pinned (server core 0, client core 1).
#
#   netns_up                                 lo up, fd00::1 and fd00::2 on it
#   pair BIN FAMILY KEY SECONDS ARGS...      prints the JSON key KEY of the client's row
#   median                                   the median of the numbers on stdin, one a line

netns_up() {
  ip link set lo up
  ip -6 addr add fd00::1/128 dev lo nodad
  ip -6 addr add fd00::2/128 dev lo nodad
  sleep 1
}

pair() {
  local bin=$1 fam=$2 key=$3 secs=$4; shift 4
  local sdev=soft:127.0.0.1 cdev=soft:127.0.0.2 host=127.0.0.1
  if [ "$fam" = 6 ]; then sdev=soft:fd00::1 cdev=soft:fd00::2 host=fd00::1; fi
  # PAIR_CORES=none: unpinned. PAIR_CHECKS=FILE: both sides' receive_checks lines go there.
  local pin0=(taskset -c 0) pin1=(taskset -c 1) out
  if [ "${PAIR_CORES:-}" = none ]; then pin0=() pin1=(); fi
  out=$(mktemp)
  "${pin0[@]}" "$bin" perf "$@" -d $sdev -D "$secs" --json --timeout 30 > "$out.s" &
  local srv=$!
  sleep 0.3
  "${pin1[@]}" "$bin" perf "$@" -d $cdev -D "$secs" --json --timeout 30 $host > "$out"
  wait $srv
  python3 -c "import json,sys; print(json.loads(open('$out').readline())['$key'])"
  if [ -n "${PAIR_CHECKS:-}" ]; then grep -h receive_checks "$out" "$out.s" > "$PAIR_CHECKS" || true; fi
  rm -f "$out" "$out.s"
}

median() { sort -g | awk '{a[NR]=$1} END {printf "%s", a[int((NR+1)/2)]}'; }
