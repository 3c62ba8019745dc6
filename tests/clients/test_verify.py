"""`vdl-perf verify` (issue 16) end to end: ~10 s of acks=all producers, tailing consumers and a
final read against the three-node vdl cluster, and the same against Apache Kafka 3.9 when its
jars are fetched (scripts/kafka/fetch-kafka.sh): the checker must pass both, so it is neutral.

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
ANOMALIES = ("lost", "duplicate", "inconsistent_offsets", "non_monotonic_poll", "poll_skip")


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


def _verify(bootstrap, tmp_path):
    """Runs a 10 s verify on a fresh 3-partition topic; returns (exit status, report, history)."""
    topic = f"verify-{random.randrange(1 << 30):x}"
    history = tmp_path / "history.jsonl"
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
            "--consumers",
            "2",
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


def _assert_clean(status, report, lines):
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
    assert report["polled_records"] >= 2 * total["acked"]
    assert report["produce_latency_ms_p99"] >= report["produce_latency_ms_p50"] > 0
    # The history holds every send, poll and final record the report counted.
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


def test_verify_passes_on_vdl(cluster, tmp_path):
    _assert_clean(*_verify(cluster.bootstrap, tmp_path))


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
    finally:
        cleanup()
