#!/usr/bin/env bash
# Runs the workspace's test binaries (what `cargo test --workspace` runs, doc-tests included)
# two at a time instead of one after another: `cargo test` runs binaries in sequence, and most
# of ours spend their time waiting (timers, fsync, processes starting), so on a 2-core machine
# a second lane fills the idle time (CI: ~480 s of running became ~250 s).
#
# Usage: scripts/test-lanes.sh [LANES]      (LANES default: VDL_TEST_LANES, else 2)
#
# Why two binaries at once is safe: every test that listens binds 127.0.0.1:0 or probes for a
# free port range itself (tests running in parallel threads inside one binary already rely on
# that), and each keeps its data in its own temporary directory. Each binary still runs its
# tests on its own threads exactly as `cargo test` would (same working directory: the crate's).
#
# Output: each binary's full output is printed in one piece when it ends (never interleaved),
# with its wall time; at the end the failed binaries are listed and the exit status is 1.
set -euo pipefail
cd "$(dirname "$0")/.."

lanes=${1:-${VDL_TEST_LANES:-2}}
work=$(mktemp -d "${TMPDIR:-/tmp}/vdl-test-lanes.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Build every test binary first (compile errors show here, as with `cargo test`), and list
# them: one line per binary, "label<TAB>crate directory<TAB>executable".
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$work/build.json"
python3 - "$work/build.json" >"$work/jobs" <<'PY'
import json, os, sys

for line in open(sys.argv[1]):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg["profile"]["test"]:
        continue  # the bins and examples built alongside, not test harnesses
    t = msg["target"]
    # "path+file:///.../crates/server#vdl-server@0.1.0", or ".../logstore#0.1.0" when the
    # package is named like its directory.
    where, _, name_version = msg["package_id"].rpartition("#")
    package = name_version.split("@")[0] if "@" in name_version else where.rsplit("/", 1)[-1]
    kind = "unittests" if t["kind"] != ["test"] else "tests"
    label = f"{package} {kind} {t['name']}"
    print(f"{label}\t{os.path.dirname(msg['manifest_path'])}\t{msg['executable']}")
PY
# The doc-tests are one more job (cargo compiles and runs them; it needs no other build).
printf 'doc-tests\t.\tcargo test --workspace --doc\n' >>"$work/jobs"

# Longest first, so the long binaries do not end up last in one lane while the other idles
# (seconds measured on CI's 2-core machine; an unknown binary counts as short). Only an order:
# a renamed or removed binary here changes nothing but the order.
python3 - "$work/jobs" "$work/alone" >"$work/ordered" <<'PY'
import sys

SECONDS = {
    "simulation": 103, "lifecycle": 67, "storage_faults": 37, "disk_nemesis": 26,
    "placement": 21, "crash_kill": 20, "peer_identity": 19, "doc-tests": 15, "quiesce": 12,
    "kafka_limits": 9, "cluster": 8, "quotas": 7, "model": 7, "sync_policy": 7, "compaction_model": 7,
}
# Binaries whose assertions bound wall time or replay a seed and need the machine to
# themselves: they run alone, one after another, once the lanes are done. vdl-server's
# `processes` asserts a failover within 2 election timeouts (2.7 s seen next to another binary
# on a loaded machine); `simulation`'s same-seed replay depends on a few wall-clock timers (its
# module docs), which a second binary made it miss once.
ALONE = {"vdl-server tests processes", "vdl-server tests simulation"}
jobs = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
jobs.sort(key=lambda j: -SECONDS.get(j[0].split()[-1], 0))
with open(sys.argv[2], "w") as alone:
    for i, j in enumerate(jobs):
        print("\t".join([str(i)] + j), file=alone if j[0] in ALONE else sys.stdout)
PY

export work
# One job: runs the binary in its crate's directory (as cargo does), keeps its output, and
# prints it under a lock so two lanes never interleave.
run_one() {
  local n=$1 label=$2 dir=$3 cmd=$4 start status=0
  start=$SECONDS
  # A test binary sees CARGO_MANIFEST_DIR as under `cargo test`; cargo itself (the doc-tests)
  # must not: build scripts that watch that variable would rebuild half the workspace.
  if [[ $dir == . ]]; then $cmd; else (cd "$dir" && CARGO_MANIFEST_DIR=$PWD $cmd); fi \
    >"$work/$n.out" 2>&1 || status=$?
  {
    flock 9
    printf '\n---- %s (%s): %d s, %s\n' "$label" "$cmd" "$((SECONDS - start))" \
      "$([[ $status == 0 ]] && echo ok || echo "FAILED (exit $status)")"
    cat "$work/$n.out"
  } 9>"$work/print.lock"
  [[ $status == 0 ]] || echo "$label" >>"$work/failed"
  return 0
}
export -f run_one

echo "running $(($(wc -l <"$work/ordered") - 1)) test binaries and the doc-tests in $lanes lanes, then $(wc -l <"$work/alone") alone"
started=$SECONDS
tr '\n' '\0' <"$work/ordered" |
  xargs -0 -P "$lanes" -I{} bash -c 'IFS=$'"'"'\t'"'"' read -r n label dir cmd <<<"$1"; run_one "$n" "$label" "$dir" "$cmd"' _ {}
echo
echo "test binaries and doc-tests: $(wc -l <"$work/ordered") jobs run in $((SECONDS - started)) s ($lanes lanes)"
while IFS=$'\t' read -r n label dir cmd; do run_one "$n" "$label" "$dir" "$cmd" </dev/null; done <"$work/alone"
echo "then $(wc -l <"$work/alone") alone; all in $((SECONDS - started)) s"
if [[ -s "$work/failed" ]]; then
  echo "FAILED:" >&2
  sed 's/^/  /' "$work/failed" >&2
  exit 1
fi
