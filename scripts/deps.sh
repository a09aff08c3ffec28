#!/usr/bin/env bash
# Installs the Debian packages podnet's tests need, if they are missing. Idempotent; needs root
# (or sudo) only when something is missing.
#
#   tshark   dissects podnet-emitted frames for the wire-format cross-check
set -euo pipefail
need=()
command -v tshark >/dev/null 2>&1 || need+=(tshark)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
