#!/usr/bin/env bash
# Runs every podnet test on this machine: installs what the tests need (scripts/deps.sh), checks
# formatting and lints, then runs the workspace's tests with cargo-nextest (required). No test
# is skipped: a test whose tool is missing fails and names it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -q -- -D warnings
# The fuzz crate is outside the workspace (cargo-fuzz builds it with nightly); check it compiles.
cargo check --manifest-path fuzz/Cargo.toml --locked -q
# Doc examples compile and run (nextest does not run doctests).
cargo test --workspace --all-features --locked --doc -q
# The binary a plain `cargo build` gives (default features: the rdma-core provider in it); the
# rxe test opens rxe in the QEMU guest with it. Only the podnet crate differs from the
# all-features build below.
cargo build --locked -q -p podnet
mkdir -p target/default-features
cp target/debug/podnet target/default-features/podnet
export PODNET_DEFAULT_BIN=$PWD/target/default-features/podnet
# nextest, not cargo test: .config/nextest.toml runs the QEMU guest tests alone and stops a
# guest that hangs, which cargo test would not.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "scripts/test.sh: cargo-nextest is not installed (cargo install cargo-nextest --locked)" >&2
  exit 2
fi
rm -f target/test-summary.txt
rc=0
cargo nextest run --workspace --all-features --locked --no-fail-fast || rc=$?
if [ -s target/test-summary.txt ]; then
  echo "== what passing tests noted (target/test-summary.txt):"
  cat target/test-summary.txt
fi
exit $rc
