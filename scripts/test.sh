#!/usr/bin/env bash
# Runs every test of the project: the gates CI enforces, in the order a failure is cheapest to find.
# Usage: ./scripts/test.sh
# It installs what the tests need (Debian packages, a Python venv, Maven artifacts) through
# scripts/test-deps.sh first, so it works on a fresh machine with only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the seconds since the start, so a run's log (CI's too) shows where its time
# goes; the last line gives the total.
started_s=$SECONDS
step() { printf '\n==> %s (at %d s)\n' "$*" "$((SECONDS - started_s))"; }
trap 'printf "\n==> test.sh ended after %d s\n" "$((SECONDS - started_s))"' EXIT
# Free disk space, printed at each step: the build and the tests' data directories need several
# GB, and a run that fills the disk fails with ENOSPC wherever it happens to be.
disk() { df -h --output=avail,target . 2>/dev/null | tail -1 | sed 's/^/    disk free: /' || true; }

# A fresh clone (CI) gains nothing from incremental compilation, which would keep a second copy
# of every crate's intermediate files on disk; a developer's warm target keeps its setting.
if [[ ! -d target/debug ]]; then export CARGO_INCREMENTAL=0; fi

step "installing test dependencies"
./scripts/test-deps.sh

disk
step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

disk
step "cargo test"
cargo test --workspace
disk

# Real Kafka clients against three real vdl processes (target/debug/vdl, which cargo test just
# built). Both suites run even if the first fails, so one run reports on both; each is bounded.
step "client tests: confluent-kafka / librdkafka (pytest tests/clients)"
clients_failed=()
if timeout 1800 ./.venv/bin/pytest -q tests/clients; then echo "client tests (Python): passed"
else echo "client tests (Python): FAILED"; clients_failed+=(python); fi

step "client tests: Apache Kafka Java client, Connect and Streams 3.9 against vdl and Kafka (tests/clients/run-java.sh)"
if timeout 900 tests/clients/run-java.sh; then echo "client tests (Java): passed"
else echo "client tests (Java): FAILED"; clients_failed+=(java); fi
if ((${#clients_failed[@]})); then echo "client tests failed: ${clients_failed[*]}" >&2; exit 1; fi

# The benchmarks in the test profile, each run once (criterion's test mode; the end-to-end ones
# run each cell for a moment when not started by `cargo bench`): proves they build and work,
# without a second, optimized build of the whole workspace (about a third of a fresh run).
# Measuring is `cargo bench` (docs/benchmarks.md), never CI.
step "benchmarks run once (cargo test --benches)"
cargo test --workspace --bench '*'
