"""`vdl-perf verify --transactional` (issue 36) end to end: transactional producers (each its own
transactional.id, several values over two partitions per transaction, one in four aborted), a
fencing check (a second producer with the same transactional.id fences the first
mid-transaction), read_committed tailers and a read_committed final read. The checker finds
lost committed values, aborted values read, torn transactions, reads before the commit and
fencing violations; a run must find none.

- a clean run against the three-node vdl cluster, and the same command against Apache Kafka 3.9
  when its jars are fetched (scripts/kafka/fetch-kafka.sh): the checker is neutral;
- a nemesis run on vdl: while the producers run, kill -9 and restart the transaction
  coordinator (the metadata leader), kill -9 and restart a partition leader, and SIGSTOP /
  SIGCONT a node for two seconds. Every kill is by the PID local-cluster.sh recorded.

Environment:
  VDL_PERF_BIN  the vdl-perf binary (default: target/debug/vdl-perf; built when missing)
"""

import json
import os
import random
import signal
import subprocess
import threading
import time

import pytest

import admin_target as at
from test_verify import _kafka_jars_fetched, _perf_binary

TXN_ANOMALIES = (
    "txn_lost",
    "aborted_read",
    "torn_transaction",
    "read_uncommitted",
    "fencing",
    "phantom",
    "stuck_lso",
)
BASE_ANOMALIES = ("duplicate", "inconsistent_offsets", "non_monotonic_poll", "poll_skip")


def _verify_txn(bootstrap, tmp_path, duration="8s", extra=()):
    """Starts a transactional verify on a fresh 3-partition topic; returns (Popen, topic,
    history path)."""
    topic = f"verify-txn-{random.randrange(1 << 30):x}"
    history = tmp_path / f"history-{topic}.jsonl"
    p = subprocess.Popen(
        [
            _perf_binary(),
            "--json",
            "verify",
            "--transactional",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partitions",
            "3",
            "--duration",
            duration,
            "--producers",
            "3",
            "--consumers",
            "1",
            "--timeout",
            "3s",
            "--max-records",
            "200000",
            "--history",
            str(history),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return p, topic, history


def _finish(p, history, timeout=120):
    out, err = p.communicate(timeout=timeout)
    assert out, f"no report; stderr:\n{err}"
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    return p.returncode, json.loads(out), lines


def _assert_clean(status, report, lines, min_committed=20):
    txn = report["txn"]
    total = txn["total"]
    summary = {k: v for k, v in txn.items() if k != "examples"}
    print(json.dumps(summary))
    if txn["examples"]:
        print(json.dumps(txn["examples"], indent=1))
    assert status == 0, report
    assert report["safe"] is True and txn["safe"] is True
    for kind in TXN_ANOMALIES:
        assert total[kind] == 0, (kind, txn)
    for kind in BASE_ANOMALIES:
        assert report["total"][kind] == 0, (kind, report)
    assert total["committed"] >= min_committed, total
    assert total["aborted"] >= 1, total
    # The fencing check ran: fenced transactions, none of whose values is visible.
    assert total["fenced"] >= 1, total
    # Read_committed final read: exactly the committed values (plus unknown outcomes that
    # turned out committed).
    txns = [line for line in lines if line["type"] == "txn"]
    assert lines[0]["type"] == "run" and lines[0]["transactional"] is True
    final = {line["value"] for line in lines if line["type"] == "final"}
    committed = {
        w["value"] for t in txns if t["outcome"] == "committed" for w in t["writes"]
    }
    aborted = {
        w["value"]
        for t in txns
        if t["outcome"] in ("aborted", "fenced")
        for w in t["writes"]
    }
    assert committed <= final
    assert not (aborted & final)
    assert total["committed_values"] == len(committed)
    # Every partition's last stable offset reached its high watermark.
    bounds = [line for line in lines if line["type"] == "bound"]
    assert len(bounds) == 3
    assert all(b["last_stable_offset"] == b["high_watermark"] for b in bounds), bounds
    # The tailer read at read_committed too: it polled committed values only.
    polled = {line["value"] for line in lines if line["type"] == "poll"}
    assert polled and not (polled & aborted)
    assert all("at_us" in line for line in lines if line["type"] == "poll")


def test_verify_transactional_passes_on_vdl(cluster, tmp_path):
    p, _, history = _verify_txn(cluster.bootstrap, tmp_path)
    _assert_clean(*_finish(p, history))


def _leader_of(cluster, topic, partition, timeout=20.0):
    """The running node leading `topic`-`partition` as some running node's /cluster/status
    says; `__cluster_metadata` partition 0 is the metadata group, whose leader is vdl's
    transaction coordinator."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in cluster.running():
            try:
                code, body = cluster.admin_call(n, "/cluster/status", timeout=2.0)
                doc = json.loads(body) if code == 200 else {}
            except (OSError, ValueError):
                doc = {}
            for p in doc.get("partitions", []):
                if (
                    p["topic"] == topic
                    and p["partition"] == partition
                    and p.get("leader") in cluster.running()
                ):
                    return p["leader"]
        time.sleep(0.1)
    raise AssertionError(f"no leader for {topic}-{partition} within {timeout}s")


def _nemesis(cluster, topic, stop, log):
    """Faults while the producers run: kill -9 the transaction coordinator, restart it; kill
    -9 a partition leader, restart it; SIGSTOP a node for 2 s. Bounded by `stop`."""
    faults = ("coordinator", "partition", "pause")
    i = 0
    while not stop.is_set() and i < len(faults):
        if stop.wait(2.0):
            return
        fault = faults[i]
        i += 1
        if fault == "coordinator":
            node = _leader_of(cluster, "__cluster_metadata", 0)
        elif fault == "partition":
            node = _leader_of(cluster, topic, random.randrange(3))
        else:
            node = random.choice(cluster.running())
        pid = cluster.pid(node)
        t0 = time.monotonic()
        if fault == "pause":
            os.kill(pid, signal.SIGSTOP)
            try:
                stop.wait(2.0)
            finally:
                os.kill(pid, signal.SIGCONT)
        else:
            cluster.kill(node)
            stop.wait(1.5)
            cluster.start()
        log.append(f"{fault}: vdl{node} ({time.monotonic() - t0:.1f} s)")


@pytest.mark.timeout(200)
def test_verify_transactional_survives_kills_and_pauses_on_vdl(cluster, tmp_path):
    p, topic, history = _verify_txn(cluster.bootstrap, tmp_path, duration="20s")
    stop, log = threading.Event(), []
    # The topic exists once the run has prepared it: wait for its leaders first.
    _leader_of(cluster, topic, 0, timeout=30)
    nemesis = threading.Thread(target=_nemesis, args=(cluster, topic, stop, log))
    nemesis.start()
    try:
        result = _finish(p, history, timeout=170)
    finally:
        stop.set()
        nemesis.join(timeout=120)
        cluster.start()
    print("\nnemesis:", "; ".join(log))
    assert len(log) == 3, log
    _assert_clean(*result, min_committed=10)


@pytest.mark.timeout(400)
def test_verify_transactional_passes_on_apache_kafka(tmp_path):
    if not _kafka_jars_fetched():
        pytest.skip("Apache Kafka 3.9 jars not fetched (scripts/kafka/fetch-kafka.sh)")
    kafka, cleanup = at.start_kafka()
    try:
        p, _, history = _verify_txn(kafka.bootstrap, tmp_path)
        _assert_clean(*_finish(p, history))
    finally:
        cleanup()
