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
# What `cargo test --workspace` runs (every test binary and the doc-tests), but two jobs at a
# time: most of them wait on timers, fsync and processes rather than compute, and one after
# another they took ~480 s of CI's run. Safe because every test takes its ports by probing
# (the tests inside one binary already run at once) and its own temporary directories; see the
# script. The two binaries with wall-time bounds (a failover deadline, a seeded replay) run
# alone afterwards. Each binary's output is printed whole when it ends.
step "cargo test (test binaries two at a time: scripts/test-lanes.sh)"
scripts/test-lanes.sh 2
disk

# Real Kafka clients against three real vdl processes (target/debug/vdl, which cargo test just
# built), in two lanes at once: the Python suite split by file (tests/clients/lanes.py says which
# file runs where), the second lane then runs the Java suite. Safe because every test file starts
# its own clusters (or its lane's session cluster) in its own temporary directory, with topic
# names of its own, and each lane draws ports from its own half of every port range. They wait on
# elections, rebalances and JVMs more than they compute (one after another: ~890 s of CI's run).
# Every suite runs even if another fails, so one run reports on all; each is bounded. A lane's
# output is printed whole when it ends.
step "client tests: pytest tests/clients (confluent-kafka, Kafka's tools, ...) in two lanes, then the Java suite (Apache Kafka Java client, Connect, Streams 3.9) in the second"
lanes_dir=$(mktemp -d)
(
  if VDL_TEST_LANE=1/2 timeout 1800 ./.venv/bin/pytest -q tests/clients; then echo "client tests (Python, lane 1): passed"
  else echo "client tests (Python, lane 1): FAILED"; echo python-lane-1 >>"$lanes_dir/failed"; fi
) >"$lanes_dir/lane1.log" 2>&1 &
lane1=$!
(
  if VDL_TEST_LANE=2/2 timeout 1800 ./.venv/bin/pytest -q tests/clients; then echo "client tests (Python, lane 2): passed"
  else echo "client tests (Python, lane 2): FAILED"; echo python-lane-2 >>"$lanes_dir/failed"; fi
  echo "==> Java suite (tests/clients/run-java.sh) at $((SECONDS - started_s)) s"
  if VDL_TEST_LANE=2/2 timeout 1200 tests/clients/run-java.sh; then echo "client tests (Java): passed"
  else echo "client tests (Java): FAILED"; echo java >>"$lanes_dir/failed"; fi
) >"$lanes_dir/lane2.log" 2>&1 &
lane2=$!
# Each lane's output when it ends, the first to end first.
wait -n -p ended "$lane1" "$lane2" || true
first=$([[ $ended == "$lane1" ]] && echo 1 || echo 2)
for lane in "$first" "$((3 - first))"; do
  [[ $lane == "$first" ]] || wait "$([[ $lane == 1 ]] && echo "$lane1" || echo "$lane2")" || true
  printf '\n==> client tests lane %s ended at %d s\n' "$lane" "$((SECONDS - started_s))"
  cat "$lanes_dir/lane$lane.log"
done
if [[ -s "$lanes_dir/failed" ]]; then echo "client tests failed: $(tr '\n' ' ' <"$lanes_dir/failed")" >&2; exit 1; fi
rm -rf "$lanes_dir"

# The benchmarks in the test profile, each run once (criterion's test mode; the end-to-end ones
# run each cell for a moment when not started by `cargo bench`): proves they build and work,
# without a second, optimized build of the whole workspace (about a third of a fresh run).
# Measuring is `cargo bench` (docs/benchmarks.md), never CI.
step "benchmarks run once (cargo test --benches)"
cargo test --workspace --bench '*'
