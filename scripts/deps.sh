#!/usr/bin/env bash
# Installs the Debian packages podnet's tests need, if they are missing. Idempotent; needs root
# (or sudo) only when something is missing.
#
#   tshark                       dissects podnet-emitted frames for the wire-format cross-check
#   qemu-system-x86, busybox-static, kmod, cpio, xz-utils
#                                boot the Linux Soft-RoCE guest (crates/rxevm)
#   rdma-core, ibverbs-utils, ibverbs-providers, rdmacm-utils, perftest
#                                the reference peer's tools, run inside the guest
#   chromium                     renders qualify's report.html headless (its test)
#   prometheus (promtool), prometheus-node-exporter
#                                check the agent's exposition; the node_exporter comparison
#   cmake, libclang-dev          build podnet at all (the rdma-core provider, on by default):
#                                scripts/build-deps.sh, run first
#   iproute2, tcpdump, nftables, python3, util-linux
#                                the guest's network, captures, loss rules, and helpers
#   ethtool                      doctor's and tune's NIC settings, read and set in the guest
#   time                         GNU time: a test's bound on capture analyze's peak memory
set -euo pipefail
"$(dirname "$0")/build-deps.sh"
# command  package
want="
chromium chromium
promtool prometheus
prometheus-node-exporter prometheus-node-exporter
tshark tshark
qemu-system-x86_64 qemu-system-x86
busybox busybox-static
depmod kmod
cpio cpio
xz xz-utils
ibv_rc_pingpong ibverbs-utils
ib_send_bw perftest
rping rdmacm-utils
rdma iproute2
ethtool ethtool
tcpdump tcpdump
nft nftables
python3 python3
unshare util-linux
nsenter util-linux
"
need=()
while read -r cmd pkg; do
  [ -n "$cmd" ] || continue
  PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done <<< "$want"
# Providers (the rxe plugin) and rdma-core's udev/config files have no command to look for.
for pkg in ibverbs-providers rdma-core; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# `time` is a shell keyword too: look for GNU time's file.
[ -x /usr/bin/time ] || need+=(time)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# PyPI: junitparser reads qualify's junit.xml as CI systems do.
if ! python3 -c 'import junitparser' 2>/dev/null; then
  echo "installing from PyPI: junitparser" >&2
  $sudo python3 -m pip install -q junitparser 2>/dev/null ||
    $sudo python3 -m pip install -q --break-system-packages junitparser ||
    { echo "cannot install junitparser from PyPI" >&2; exit 1; }
fi
