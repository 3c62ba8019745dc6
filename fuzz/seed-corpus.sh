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

# A few Raft peer frames (appends and a heartbeat, votes, leader-side responses, a snapshot,
# proposals and read index messages) for peer_message; the fuzzer mutates them into the rest.
mkdir -p corpus/peer_message
if command -v python3 >/dev/null; then
  python3 - <<'PY'
import struct

def varint(n):
    out = b''
    while True:
        b, n = n & 0x7f, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def fv(num, v):  # varint field, omitted when 0 (proto3)
    return varint(num << 3) + varint(v) if v else b''

def fb(num, b):  # length-delimited field
    return varint(num << 3 | 2) + varint(len(b)) + b

def entry(term, index, data=b'x', ctx=b''):
    return fv(2, term) + fv(3, index) + fb(4, data) + (fb(6, ctx) if ctx else b'')

def msg(kind, frm, to, term, log_term=0, index=0, commit=0, entries=(), reject=0, snap=None):
    m = fv(1, kind) + fv(2, to) + fv(3, frm) + fv(4, term) + fv(5, log_term) + fv(6, index)
    for e in entries:
        m += fb(7, e)
    m += fv(8, commit) + fv(10, reject)
    return m + (fb(9, snap) if snap else b'')

def frame(msgs):  # a frame body of versions 1 and 2: (group u64, length u32, message)*
    return b''.join(struct.pack('>QI', g, len(m)) + m for g, m in msgs)

def frame_v3(msgs):  # a version 3 frame body: PeerFrame { repeated GroupMessage messages = 1 }
    return b''.join(fb(1, fv(1, g) + (fb(2, m) if m else b'')) for g, m in msgs)

voters = fv(1, 1) + fv(1, 2) + fv(1, 3)
snap = fb(1, struct.pack('>Q', 7)) + fb(2, fb(1, voters) + fv(2, 5) + fv(3, 1))
ctx = bytes([2]) + struct.pack('>QQ', 2, 9)
seeds = {
    'append': [(2, msg(3, 2, 1, 1, entries=[entry(1, 1), entry(1, 2)])),
               (2, msg(8, 2, 1, 1, commit=2)),
               (2, msg(3, 2, 1, 1, 1, 2, 2, [entry(1, 3)]))],
    'votes': [(2, msg(17, 2, 1, 1)), (2, msg(5, 3, 1, 1)), (2, msg(18, 2, 1, 1, reject=1)),
              (2, msg(6, 3, 1, 2))],
    'leader': [(2, msg(14, 2, 1, 1)), (2, msg(4, 2, 1, 1)), (2, msg(9, 3, 1, 1)),
               (2, msg(13, 2, 1, 1))],
    'snapshot': [(2, msg(7, 2, 1, 1, snap=snap)), (2, msg(8, 2, 1, 1, commit=5))],
    'propose': [(1, msg(2, 2, 1, 0, entries=[entry(0, 0, b'{}', ctx)])),
                (1, msg(15, 2, 1, 0, entries=[entry(0, 0, b'r')])),
                (1, msg(16, 2, 1, 1, index=1, entries=[entry(0, 0, b'r')]))],
}
# The first byte picks the decoder: odd, version 3 (protobuf); even, versions 1 and 2.
for name, msgs in seeds.items():
    with open('corpus/peer_message/' + name, 'wb') as f:
        f.write(b'\x00' + frame(msgs))
    with open('corpus/peer_message/' + name + '-v3', 'wb') as f:
        f.write(b'\x01' + frame_v3(msgs))
print(f'seeded {2 * len(seeds)} peer frames into fuzz/corpus/peer_message')
PY
else
  echo "python3 not found: fuzz/corpus/peer_message starts empty" >&2
fi

# metadata_command: every metadata command's entry (protobuf and JSON) and a metadata snapshot,
# written by the server's unit tests; segment_recovery: real store files (segment + index).
mkdir -p corpus/metadata_command corpus/segment_recovery
seeds_meta="$(cd corpus/metadata_command && pwd)"
seeds_store="$(cd corpus/segment_recovery && pwd)"
(cd .. && VDL_FUZZ_SEEDS_DIR="$seeds_meta" cargo test -q -p vdl-server --lib -- fuzz_seeds_decode snapshot_round_trips_every_field >/dev/null)
(cd .. && VDL_FUZZ_SEEDS_DIR="$seeds_store" cargo test -q -p logstore --test fuzz_seeds >/dev/null)
echo "seeded $(ls corpus/metadata_command | wc -l) metadata entries/snapshots, $(ls corpus/segment_recovery | wc -l) store files"
