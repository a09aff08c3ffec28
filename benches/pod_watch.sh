#!/usr/bin/env bash
# The pod monitor (podnet agent --pod) on an emulated pod with no fault, in two phases:
#   1. cost: COST_SECONDS with nothing else running — the CPU each host's agent takes (user
#      and system time of the process, every host), the bytes it sends to watch the pod
#      (small probes and answers, near-MTU probes, membership);
#   2. false positives: SECONDS with two hosts starved of CPU (two busy loops each, in a
#      cgroup held to 20 % of a core) — a starved host must be named `host-cpu` (a warning)
#      and nothing else; host 0's status is read every 2 s and every error-severity finding
#      counted. The unstarved agents' CPU in this phase is printed too (the busy loops share
#      their CPU with them).
# Root; release build. Every host of the emulated pod runs on one CPU (scripts/emupod.sh),
# and a packet's way through the emulated fabric (the routers' forwarding, the receiver's
# delivery) runs in the softirq of the process that sent it: a host's figure carries that.
#
#   benches/pod_watch.sh [HOSTS [SECONDS [COST_SECONDS]]]   (defaults: 16 60 60;
#                                                           the issue's clean run: 16 600)
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-16} secs=${2:-60} cost_secs=${3:-60}
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
sleep 8
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
# HOST user system (clock ticks) of each agent, and the time.
ticks() { date +%s.%N; while read -r i p; do echo "$i $(awk '{print $14, $15}' /proc/"$p"/stat)"; done < "$work/pids"; }
status() { ip netns exec bw-h0 "$P" pod status --json 2>/dev/null || echo '{}'; }
status > "$work/cost0.json"
ticks > "$work/t0"
sleep "$cost_secs"
ticks > "$work/t1"
status > "$work/cost1.json"
for h in $stressed; do
  bash "$E" host bw "$h" cpu 20
  for _ in 1 2; do setsid bash "$E" exec bw "$h" sh -c 'while :; do :; done' < /dev/null > /dev/null 2>&1 & done
done
sleep 2
ticks > "$work/t2"
end=$(( $(date +%s) + secs ))
: > "$work/samples"
while [ "$(date +%s)" -lt "$end" ]; do
  status >> "$work/samples"
  echo >> "$work/samples"
  sleep 2
done
ticks > "$work/t3"
for h in $stressed; do bash "$E" host bw "$h" kill; done
python3 - "$work" "$hosts" "$stressed" <<'PY'
import json, sys, os
work, n, stressed = sys.argv[1], int(sys.argv[2]), [int(h) for h in sys.argv[3].split()]
hz = os.sysconf("SC_CLK_TCK")
def ticks(name):
    lines = open(f"{work}/{name}").read().split("\n")
    t = float(lines[0])
    per = {int(l.split()[0]): (int(l.split()[1]), int(l.split()[2])) for l in lines[1:] if l.strip()}
    return t, per
def cpu(a, b):
    (ta, pa), (tb, pb) = ticks(a), ticks(b)
    wall = tb - ta
    return wall, {h: ((pb[h][0] - pa[h][0]) / hz / wall * 100, (pb[h][1] - pa[h][1]) / hz / wall * 100)
                  for h in pa if h in pb}
wall, c = cpu("t0", "t1")
tot = sorted(u + s for u, s in c.values())
mean = sum(tot) / len(tot)
user = sum(u for u, _ in c.values()) / len(c)
c0, c1 = json.load(open(f"{work}/cost0.json")).get("cost"), json.load(open(f"{work}/cost1.json")).get("cost")
print(f"{n} hosts x 2 rails, no fault, nothing else running, {wall:.0f} s:")
print(f"  agent CPU per host: mean {mean:.2f} % of a core (user {user:.2f} %, system {mean - user:.2f} %), "
      f"median {tot[len(tot) // 2]:.2f} %, max {tot[-1]:.2f} %")
if c0 and c1:
    s = c1["seconds"] - c0["seconds"]
    mbit = lambda k, i=None: ((c1[k][i] - c0[k][i]) if i is not None else (c1[k] - c0[k])) * 8 / s / 1e6
    print(f"  host 0 sent: small probes and answers {mbit('probe_bytes', 0):.3f} Mbit/s, near-MTU probes "
          f"{mbit('probe_bytes', 1):.3f} Mbit/s, membership {mbit('control_bytes'):.3f} Mbit/s "
          f"(probes per round now: {c1['per_round'][0]} small, {c1['per_round'][1]} near-MTU)")
wall, c = cpu("t2", "t3")
calm = [u + s for h, (u, s) in c.items() if h not in stressed]
errors, warnings, samples = set(), set(), []
text, dec, i = open(f"{work}/samples").read(), json.JSONDecoder(), 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    v, i = dec.raw_decode(text, i)
    samples.append(v)
for v in samples:
    for f in v.get("findings", []):
        (errors if f["severity"] == "error" else warnings).add((f["kind"], f["component"]))
print(f"then {wall:.0f} s with hosts {' and '.join(f'h{h}' for h in stressed)} starved of CPU:")
print(f"  findings of error severity seen at host 0 (false positives): {len(errors)} {sorted(errors)}")
print(f"  warnings: {sorted(warnings)}; {len(samples)} samples of host 0's status, 2 s apart")
print(f"  agent CPU per unstarved host meanwhile: mean {sum(calm) / len(calm):.2f} %, max {max(calm):.2f} %")
PY
