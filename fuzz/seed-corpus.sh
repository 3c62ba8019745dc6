#!/usr/bin/env bash
# Copies the golden request frames (frame bodies: header + body, no size prefix) into the
# request_decode corpus, and the Produce requests' frames into the record_batch corpus too
# (the fuzzer finds the record data inside them quickly).
set -euo pipefail
cd "$(dirname "$0")"
golden=../crates/kafka-proto/tests/golden/frames
mkdir -p corpus/request_decode corpus/record_batch
n=0
for f in "$golden"/*-req.bin; do
  [ -e "$f" ] || { echo "no golden frames in $golden" >&2; exit 1; }
  cp "$f" corpus/request_decode/
  case "$f" in *-Produce-*) cp "$f" corpus/record_batch/ ;; esac
  n=$((n + 1))
done
echo "seeded $n request frames into fuzz/corpus/request_decode"
