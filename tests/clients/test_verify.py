"""`vdl-perf verify` (issue 16) end to end: ~10 s of acks=all producers, tailing consumers and a
final read against the three-node vdl cluster, and the same against Apache Kafka 3.9 when its
jars are fetched (scripts/kafka/fetch-kafka.sh): the checker must pass both, so it is neutral.
Each target gets two runs: assign-mode consumers only, and idempotent producers with
consumer-group members (joining one after another, so the group rebalances mid-run) next to
one assign-mode consumer. Kafka gets a third, `verify --transactional` (test_verify_txn.py),
on the same cluster.

Environment:
  VDL_PERF_BIN  the vdl-perf binary (default: target/debug/vdl-perf, which `cargo test` builds;
                built with `cargo build -p vdl-perf --bin vdl-perf` when missing)
"""

import json
import os
import random
import subprocess

import pytest

import admin_target as at

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ANOMALIES = (
    "lost",
    "duplicate",
    "inconsistent_offsets",
    "non_monotonic_poll",
    "poll_skip",
    "group_lost",
)
# The group run: idempotent producers, one assign-mode consumer, two group members.
GROUP_ARGS = ["--consumers", "1", "--group-consumers", "2", "--idempotent"]


def _perf_binary():
    default = os.path.join(REPO, "target", "debug", "vdl-perf")
    b = os.environ.get("VDL_PERF_BIN") or default
    if not os.path.exists(b) and b == default:
        subprocess.run(
            ["cargo", "build", "-q", "-p", "vdl-perf", "--bin", "vdl-perf"],
            cwd=REPO,
            check=True,
            timeout=590,
        )
    return os.path.abspath(b)


def _verify(bootstrap, tmp_path, extra_args=("--consumers", "2")):
    """Runs a 10 s verify on a fresh 3-partition topic; returns (exit status, report, history)."""
    topic = f"verify-{random.randrange(1 << 30):x}"
    history = tmp_path / f"history-{topic}.jsonl"
    r = subprocess.run(
        [
            _perf_binary(),
            "--json",
            "verify",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partitions",
            "3",
            "--duration",
            "10s",
            "--producers",
            "4",
            *extra_args,
            "--max-records",
            "200000",
            "--history",
            str(history),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert r.stdout, f"no report; stderr:\n{r.stderr}"
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    return r.returncode, json.loads(r.stdout), lines


def _assert_clean(status, report, lines, assign_consumers=2):
    total = report["total"]
    print(json.dumps({k: v for k, v in report.items() if k != "partitions"}))
    assert status == 0, report
    assert report["safe"] is True
    assert total["acked"] >= 100, total
    for kind in ANOMALIES:
        assert total[kind] == 0, (kind, report)
    # Every acknowledged value was polled too: the tailers drain to the final high watermark.
    assert total["unseen"] == 0, report
    assert sorted(report["partitions"]) == ["0", "1", "2"]
    assert all(p["acked"] > 0 for p in report["partitions"].values()), report
    assert report["final_records"] >= total["acked"]
    assert report["polled_records"] >= assign_consumers * total["acked"]
    assert report["produce_latency_ms_p99"] >= report["produce_latency_ms_p50"] > 0
    # The history holds every send, poll and final record the report counted.
    assert lines[0]["type"] == "run" and lines[0]["partitions"] == 3
    kinds = [line["type"] for line in lines]
    assert kinds.count("send") == total["acked"] + total["unknown"]
    assert kinds.count("poll") == report["polled_records"]
    assert kinds.count("final") == report["final_records"]
    acked = {
        line["value"]
        for line in lines
        if line["type"] == "send" and line["outcome"] == "acked"
    }
    final = {line["value"] for line in lines if line["type"] == "final"}
    assert acked <= final


def _assert_group_clean(status, report, lines):
    """A clean group run: everything _assert_clean checks for one assign-mode consumer, plus
    the group members' share, the idempotent producers' figures and the new history lines."""
    _assert_clean(status, report, lines, assign_consumers=1)
    total = report["total"]
    assert report["idempotent"] is True
    assert report["produce_retries"] >= 0
    # The members drain to the final high watermark: the group polled every acknowledged
    # record, re-delivery after a rebalance is counted but is no anomaly.
    assert report["group_polled_records"] >= total["acked"] > 0, report
    assert total["group_unseen"] == 0, report
    assert report["group_generations"] >= 1
    run = lines[0]
    assert run["idempotent"] is True and run["group"].startswith("vdl-perf-verify-")
    sends = [line for line in lines if line["type"] == "send"]
    assert all("retries" in s for s in sends)
    assert sum(s["retries"] for s in sends) == report["produce_retries"]
    assignments = [line for line in lines if line["type"] == "assignment"]
    assert assignments and all(
        {"consumer", "member", "generation", "partition", "start_offset"} <= set(a)
        for a in assignments
    )
    # Every partition was assigned to some member.
    assert {a["partition"] for a in assignments} == {0, 1, 2}
    group_polls = [line for line in lines if line["type"] == "poll" and "generation" in line]
    assert len(group_polls) == report["group_polled_records"]
    assert all(p["member"] and p["consumer"] >= 1 for p in group_polls)
    # The group's final committed offsets reach the end of every partition.
    committed = {
        line["partition"]: line["offset"] for line in lines if line["type"] == "committed"
    }
    final_count = {p: 0 for p in range(3)}
    for line in lines:
        if line["type"] == "final":
            final_count[line["partition"]] += 1
    assert committed == final_count, (committed, final_count)


def test_verify_passes_on_vdl(cluster, tmp_path):
    _assert_clean(*_verify(cluster.bootstrap, tmp_path))


def test_verify_groups_and_idempotence_pass_on_vdl(cluster, tmp_path):
    _assert_group_clean(*_verify(cluster.bootstrap, tmp_path, GROUP_ARGS))


def _kafka_jars_fetched():
    r = subprocess.run(
        [at.FETCH_KAFKA, "--print-only"], capture_output=True, text=True, timeout=30, check=True
    )
    libs = r.stdout.strip().splitlines()[-1]
    return os.path.isdir(libs) and any(n.startswith(".complete-") for n in os.listdir(libs))


@pytest.mark.timeout(400)
def test_verify_passes_on_apache_kafka(tmp_path):
    if not _kafka_jars_fetched():
        pytest.skip("Apache Kafka 3.9 jars not fetched (scripts/kafka/fetch-kafka.sh)")
    kafka, cleanup = at.start_kafka()
    try:
        _assert_clean(*_verify(kafka.bootstrap, tmp_path))
        _assert_group_clean(*_verify(kafka.bootstrap, tmp_path, GROUP_ARGS))
        # The transactional run (test_verify_txn.py) on the same cluster.
        import test_verify_txn

        test_verify_txn.check_on_kafka(kafka, tmp_path)
    finally:
        cleanup()
