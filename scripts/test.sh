#!/usr/bin/env bash
# Runs every test of the project: the gates CI enforces, in the order a failure is cheapest to find.
# Usage: ./scripts/test.sh
# It installs what the tests need (Debian packages, a Python venv, Maven artifacts) through
# scripts/test-deps.sh first, so it works on a fresh machine with only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "installing test dependencies"
./scripts/test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace

step "cargo bench -- --test (benchmarks compile and run once)"
cargo bench --workspace -- --test
