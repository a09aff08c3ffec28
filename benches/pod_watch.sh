#!/usr/bin/env bash
# The pod monitor (podnet agent --pod) on an emulated pod with no fault: what it costs each
# host (CPU of the agent process, bytes it sends to watch the pod: small probes and answers,
# near-MTU probes, membership) and how many faults it names that are not there (false
# positives), with two hosts starved of CPU all along (two busy loops each in a cgroup held
# to 20 % of a core) — a starved host must be named `host-cpu` (a warning) and nothing else.
# Root; release build.
#
#   benches/pod_watch.sh [HOSTS [SECONDS]]     (defaults: 16 60; the issue's clean run: 16 600)
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-16} secs=${2:-60}
cargo build --release -q -p podnet
P=$PWD/target/release/podnet E=$PWD/scripts/emupod.sh
work=$(mktemp -d)
stressed="3 $((hosts - 5))"
trap 'pkill -f "podnet agent --pod $work" 2>/dev/null || true; bash $E down bw >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bash "$E" up bw "$hosts" 2 2 2 100mbit
(printf 'name = "bench"\n[pod]\npairs = "rail-aligned"\n'; bash "$E" plan bw) > "$work/pod.toml"
for ((i = 0; i < hosts; i++)); do
  setsid bash "$E" exec bw "$i" "$P" agent --pod "$work/pod.toml" --pod-host "h$i" \
    > "$work/a$i.log" 2>&1 < /dev/null &
done
sleep 5
for h in $stressed; do
  bash "$E" host bw "$h" cpu 20
  for _ in 1 2; do setsid bash "$E" exec bw "$h" sh -c 'while :; do :; done' < /dev/null > /dev/null 2>&1 & done
done
pids() { # HOST PID of each agent
  local i p
  for ((i = 0; i < hosts; i++)); do
    for p in $(ip netns pids "bw-h$i"); do
      if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = podnet ]; then echo "$i $p"; fi
    done
  done
  return 0
}
pids > "$work/pids"
ticks() { while read -r i p; do echo "$i $(awk '{print $14 + $15}' /proc/"$p"/stat)"; done < "$work/pids"; }
ticks > "$work/t0"
t0=$(date +%s.%N)
end=$(( $(date +%s) + secs ))
: > "$work/samples"
while [ "$(date +%s)" -lt "$end" ]; do
  ip netns exec bw-h0 "$P" pod status --json >> "$work/samples" 2>/dev/null || true
  echo >> "$work/samples"
  sleep 2
done
ticks > "$work/t1"
for h in $stressed; do bash "$E" host bw "$h" kill; done
python3 - "$work" "$hosts" "$(date +%s.%N)" "$t0" "$stressed" <<'PY'
import json, sys, os
work, n, t1, t0, stressed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split()
wall = t1 - t0
hz = os.sysconf("SC_CLK_TCK")
a = dict(l.split() for l in open(f"{work}/t0")); b = dict(l.split() for l in open(f"{work}/t1"))
cpu = {int(i): (int(b[i]) - int(a[i])) / hz / wall * 100 for i in a if i in b}
calm = [v for i, v in cpu.items() if str(i) not in stressed]
last, errors, warnings = None, set(), set()
text, dec, i = open(f"{work}/samples").read(), json.JSONDecoder(), 0
samples = []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    v, i = dec.raw_decode(text, i)
    samples.append(v)
for v in samples:
    last = v
    for f in v["findings"]:
        (errors if f["severity"] == "error" else warnings).add((f["kind"], f["component"]))
c = last["cost"]
s = c["seconds"]
mbit = lambda x: x * 8 / s / 1e6
print(f"{n} hosts x 2 rails, {wall:.0f} s, hosts {' and '.join('h' + h for h in stressed)} starved")
print(f"agent CPU per unstarved host: mean {sum(calm)/len(calm):.2f} %, max {max(calm):.2f} % of a core")
print(f"host 0 sent: small probes and answers {mbit(c['probe_bytes'][0]):.3f} Mbit/s, "
      f"near-MTU probes {mbit(c['probe_bytes'][1]):.3f} Mbit/s, membership {mbit(c['control_bytes']):.3f} Mbit/s "
      f"(probes per round: {c['per_round'][0]} small, {c['per_round'][1]} near-MTU)")
print(f"findings of error severity seen at host 0 (false positives): {len(errors)} {sorted(errors)}")
print(f"warnings: {sorted(warnings)}; {len(samples)} samples of host 0's status, 2 s apart")
PY
