#!/usr/bin/env bash
# Installs what building podnet needs beyond Rust, if it is missing: cmake and libclang-dev for
# the rdma-core provider (sideway's rdma-mummy-sys runs CMake and bindgen). Nothing from
# rdma-core itself is needed to build: libibverbs is loaded when podnet opens a device.
# Idempotent; needs root (or sudo) only when something is missing. Debian and Ubuntu.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q 'ok installed' || need+=(libclang-dev)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing the build packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
