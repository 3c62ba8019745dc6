#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Idempotent: each step checks
# first and does nothing when its tool is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The toolchain components the gates use.
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# kcat (librdkafka's command-line client) for the Kafka client tests.
if ! command -v kcat >/dev/null 2>&1; then
  echo "installing kcat (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq kcat
fi
