#!/usr/bin/env bash
# The fault campaign (issue 44): podnet qualify and podnet agent --pod judged on pods drawn
# from a seed (podnet pod shape; built by scripts/emupod.sh) with faults from the catalogue
# (crates/topology/src/fault.rs), scored by the scorer written before the runs
# (crates/topology/src/score.rs). Stratified: every fault kind on every uplink class,
# --per-cell draws each, and clean pods. Resumable: a row per draw is appended to --out
# (default target/campaign/seed-N.jsonl) as it ends; a draw already there is not run again.
# Root; release build. Hours for the full campaign on 2 cores.
#
#   benches/campaign.sh [--seed N] [--tool qualify|agent|both] [--uplinks 1:1,2:1,3:1,each-link-all]
#                       [--kinds all|clean,loss,slow,mtu,down,flap,partial-blackhole,spine-down,
#                                tor-loss,corrupt,host-killed,host-frozen,host-starved]
#                       [--per-cell N] [--max-mbit M] [--watch S] [--clean-watch S] [--out FILE]
#                       [--only agent/3:1/flap/0,…]   # a miss again: its id and seed
#   benches/campaign.sh --seed N --table       # the table of what ran (Wilson intervals)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench -q -p podnet --bench campaign -- "$@"
