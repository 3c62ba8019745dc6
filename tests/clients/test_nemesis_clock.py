"""Issue 16, clock faults: a node's wall clock jumps a day forward and two days back (libfaketime,
per process; the monotonic clock is left alone, as a real step of the system clock leaves it).

Checked: the jump is real (a LogAppendTime topic led by the jumped node stamps records a day
ahead); retention by time deletes nothing early on the jumped node (a 1-hour retention.ms with
data a few seconds old: without the guard in logstore::clock, a day-ahead clock deletes every
sealed segment); and while the leaders' clocks jump back and forth under `vdl-perf verify`,
nothing acknowledged is lost and no anomaly is found (Raft and the request path use only the
monotonic clock). Nodes run in network namespaces (netns.py): root and iproute2 are needed, and
libfaketime (scripts/test-deps.sh installs it).
"""

import glob
import json
import os
import random
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import netns
from test_verify import ANOMALIES, _perf_binary

pytestmark = pytest.mark.timeout(240)

DAY_MS = 86_400_000


def _faketime_lib():
    libs = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob(
        "/usr/lib/faketime/libfaketimeMT.so.1"
    )
    return libs[0] if libs else None


@pytest.fixture
def clock_cluster(tmp_path):
    lib = _faketime_lib()
    if lib is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    clocks = {i: tmp_path / f"clock{i}" for i in range(1, netns.NODES + 1)}
    for f in clocks.values():
        f.write_text("+0\n")

    def env_for(i):
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(clocks[i]),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # Re-read the offset file every second (not on every clock call).
            "FAKETIME_CACHE_DURATION": "1",
        }

    extra = "[storage]\nretention_check_ms = 300\n"
    with netns.running_cluster(extra_config=extra, env_for=env_for) as cluster:
        yield cluster, clocks


def set_clock(clocks, node, offset):
    """Sets node `node`'s wall clock offset (libfaketime syntax: "+1d", "-2d", "+0")."""
    clocks[node].write_text(offset + "\n")


def leaders(admin, topic):
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: pm.leader for p, pm in md.partitions.items()}


def test_wall_clock_jumps_delete_nothing_early_and_lose_nothing(clock_cluster, tmp_path):
    cluster, clocks = clock_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    sfx = f"{random.randrange(1 << 30):x}"
    stamped, retained = f"clock-stamped-{sfx}", f"clock-retained-{sfx}"
    admin.create_topics(
        [
            NewTopic(
                stamped, 3, 3, config={"message.timestamp.type": "LogAppendTime"}
            ),
            NewTopic(
                retained,
                1,
                3,
                config={"retention.ms": "3600000", "segment.bytes": "1048576"},
            ),
        ]
    )[retained].result(30)
    deadline = time.monotonic() + 30
    while -1 in leaders(admin, stamped).values() or len(leaders(admin, stamped)) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.5)

    # 4 MiB in 1 MiB segments: sealed segments a few seconds old under a 1-hour retention.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(4096):
        while True:
            try:
                p.produce(retained, b"r" * 1024, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0

    # Node 2 jumps a day ahead.
    jumped = 2
    set_clock(clocks, jumped, "+1d")
    time.sleep(3)
    # The jump is real: a partition it leads stamps records a day ahead.
    led = [part for part, leader in leaders(admin, stamped).items() if leader == jumped]
    if led:
        p.produce(stamped, b"t", partition=led[0])
        assert p.flush(30) == 0
        c = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{sfx}", "enable.auto.commit": False}
        )
        c.assign([TopicPartition(stamped, led[0], 0)])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                msg = m
        c.close()
        assert msg is not None
        ahead_ms = msg.timestamp()[1] - int(time.time() * 1000)
        assert ahead_ms > DAY_MS - 60_000, f"LogAppendTime only {ahead_ms} ms ahead"
    # Several retention checks later the jumped node still holds every segment.
    time.sleep(2)
    for node in range(1, netns.NODES + 1):
        st = cluster.status(node)
        part = [s for s in st["streams"] if s["name"] == retained][0]
        assert part["log_start_offset"] == 0, (node, part)
        assert part["high_watermark"] >= 4096, (node, part)

    # Leaders' clocks jump forward and back under a verify run.
    history = tmp_path / "history.jsonl"
    verify = subprocess.Popen(
        [_perf_binary(), "--json", "verify", "--bootstrap", cluster.bootstrap,
         "--topic", f"clock-verify-{sfx}", "--partitions", "3", "--duration", "16s",
         "--producers", "3", "--consumers", "1", "--max-records", "200000",
         "--history", str(history)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for offset in ["-2d", "+3d", "+0", "-1h"]:
            time.sleep(3)
            for node in range(1, netns.NODES + 1):
                set_clock(clocks, node, offset if node % 2 == 1 else "+0")
        out, err = verify.communicate(timeout=140)
    finally:
        if verify.poll() is None:
            verify.kill()
    assert out, err[-3000:]
    report = json.loads(out)
    print(json.dumps({k: v for k, v in report.items() if k != "partitions"}))
    assert verify.returncode == 0, report
    for kind in ANOMALIES:
        assert report["total"][kind] == 0, (kind, report)
    assert report["total"]["acked"] >= 100
    for node in range(1, netns.NODES + 1):
        st = cluster.status(node)
        part = [s for s in st["streams"] if s["name"] == retained][0]
        assert part["log_start_offset"] == 0, (node, part)
