#!/usr/bin/env bash
# The GPU check, for a host with an NVIDIA GPU (and its driver): under 5 minutes, offline —
# it runs a podnet built beforehand (PODNET=path, default target/release/podnet) and needs
# no package registry. Between two podnet processes over soft devices on loopback, with
# --data-validation: perf write-bw, read-bw and send-bw with GPU memory on both ends, then
# on one end; the GPUs as the driver sees them (dma-buf export, pinned cudaMemcpy bandwidth
# measured in the same run); and, where the host also has a hardware RDMA NIC, the same on it
# (GPUDirect RDMA). Prints every command and its output; the last line says PASS or FAIL.
#
#   cargo build --release -p podnet && scripts/gpu-check.sh            # on the GPU host
#   PODNET=/opt/podnet scripts/gpu-check.sh 2>&1 | tee gpu-check.txt    # a copied binary
set -uo pipefail
cd "$(dirname "$0")/.."
P=${PODNET:-target/release/podnet}
GPU=${GPU:-0}
SIZE=${SIZE:-1048576}
DUR=${DUR:-5}
[ -x "$P" ] || { echo "gpu-check: no podnet at $P (build it first, or set PODNET)"; exit 2; }
fail=0
srv=$(mktemp); trap 'rm -f "$srv"' EXIT
run() { echo "\$ $*"; "$@"; local rc=$?; echo "(exit $rc)"; return $rc; }
echo "== $(date -u +%FT%TZ) $(hostname); $("$P" --version)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader
run "$P" devices --gpus --cuda || fail=1
# Each pair: a server, then a client against it; both must pass (exit 0).
pair() { # pair TEST SERVER-FLAGS CLIENT-FLAGS
  local t=$1 s=$2 c=$3
  echo "== perf $t: server [$s] client [$c]"
  "$P" perf "$t" -s "$SIZE" -D "$DUR" --data-validation $s --timeout 30 > "$srv" 2>&1 &
  local spid=$!
  sleep 1
  "$P" perf "$t" -s "$SIZE" -D "$DUR" --data-validation $c --timeout 30 127.0.0.1; local crc=$?
  wait $spid; local src=$?
  grep -E 'Memory|Validated|validation' "$srv" | sed 's/^/server: /'
  echo "(client exit $crc, server exit $src)"
  [ $crc -eq 0 ] && [ $src -eq 0 ] || fail=1
}
for t in write-bw read-bw send-bw; do
  pair $t "--use_cuda=$GPU" "--use_cuda=$GPU"
  pair $t "--use_cuda=$GPU --use_cuda_dmabuf" ""
done
# Host memory beside it, the same run: what the GPU path costs.
pair write-bw "" ""
# A hardware RDMA NIC too: GPUDirect RDMA through the rdma-core provider.
for d in /sys/class/infiniband/*; do
  [ -e "$d" ] || continue
  drv=$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")
  case $drv in rdma_rxe|siw|"") continue;; esac
  dev=$(basename "$d")
  echo "== GPUDirect RDMA on $dev ($drv)"
  "$P" perf write-bw -d "$dev" -s "$SIZE" -D "$DUR" --data-validation --use_cuda="$GPU" --timeout 30 > "$srv" 2>&1 &
  spid=$!; sleep 1
  nd=$(cat "$d/ports/1/gid_attrs/ndevs/0" 2>/dev/null)
  ip=$(ip -4 -o addr show dev "$nd" 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
  "$P" perf write-bw -d "$dev" -s "$SIZE" -D "$DUR" --data-validation --use_cuda="$GPU" --timeout 30 "$ip" || fail=1
  wait $spid || fail=1
  break
done
if [ $fail -eq 0 ]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL"; exit 1; fi
