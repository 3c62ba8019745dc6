"""A compacted topic with offset gaps, for the client tests of issue 35 (test_compaction_gaps.py).

`make_compacted_topic` creates a topic with `cleanup.policy=compact` (1 s `segment.ms`, dirty
ratio 0.01, no compaction lag), produces many updates to a few keys and two tombstones with
librdkafka (idempotent, so record i lands at offset i, each with its own timestamp), and waits
(bounded) until every replica's cleaner has left only the latest record of each key. What a
client must then see is an `Expectation`: the surviving records at their original offsets, the
log end offset, timestamp lookups, and a group commit and a DeleteRecords offset that both lie
inside a gap. The checks of every client family read the same expectation (as JSON for the Go
and Java programs).
"""

import json
import re
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Node settings that make the cleaner run quickly: its rounds and the segment.ms roll check
# every 200 ms (the defaults are 15 s and 10 s).
CLUSTER_CONFIG = """
[storage]
cleaner_backoff_ms = 200
retention_check_ms = 200
"""

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}

KEYS = [f"k{i}" for i in range(6)]
ROUNDS_1 = 60  # every key, before the first pause
ROUNDS_2 = 40  # k0..k2 only, after it
TS_STEP_MS = 10
COMPACTION_TIMEOUT_S = 90


def _records(base_ms):
    """The records to produce, in order: [(key, value or None, timestamp ms)]. Record i gets
    timestamp base_ms + i * TS_STEP_MS (increasing with the offset)."""
    out = []
    for r in range(ROUNDS_1):
        out += [(k, f"{k}-v{r}") for k in KEYS]
    out.append(("k4", None))  # a tombstone in the first part
    pause = len(out)
    for r in range(ROUNDS_1, ROUNDS_1 + ROUNDS_2):
        out += [(k, f"{k}-v{r}") for k in KEYS[:3]]
    out.append(("k2", None))  # the last record: a tombstone
    return [(k, v, base_ms + i * TS_STEP_MS) for i, (k, v) in enumerate(out)], pause


def _node_metric_lines(cluster, node, name, topic):
    try:
        code, body = cluster.admin_call(node, "/metrics", timeout=5)
    except OSError:
        return []
    if code != 200:
        return []
    pat = re.compile(rf'^{name}\{{topic="{re.escape(topic)}",partition="0"\}} (\S+)$')
    return [m.group(1) for m in map(pat.match, body.decode().splitlines()) if m]


def read_all(bootstrap, topic, end, timeout=30.0):
    """Every record of partition 0 from the beginning up to `end` with an assigned consumer:
    [(offset, key, value or None, timestamp)]. Fails on a consume error or when the end is not
    reached within `timeout` (a stall at a gap)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gap-reader-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= end:
                        return got
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            v = m.value()
            got.append((m.offset(), m.key().decode(), None if v is None else v.decode(),
                        m.timestamp()[1]))
        raise AssertionError(f"end {end} not reached within {timeout}s; read {got[-5:]}")
    finally:
        c.close()


class Expectation:
    """What every client must see in a compacted topic (see the module doc)."""

    def __init__(self, topic, produced, survivors, end):
        self.topic = topic
        # [(offset, key, value or None, timestamp)], offsets increasing with gaps.
        self.survivors = survivors
        self.end = end
        offsets = [s[0] for s in survivors]
        ts_of = {o: ts for o, (_, _, ts) in enumerate(produced)}
        removed = sorted(set(range(end)) - set(offsets))
        # The group commits an offset inside a gap after about half of the survivors.
        half = len(survivors) // 2
        self.commit_at = next(o for o in removed if o > offsets[half - 1])
        self.before_commit = [s for s in survivors if s[0] < self.commit_at]
        self.after_commit = [s for s in survivors if s[0] >= self.commit_at]
        # DeleteRecords moves the log start into the middle of the widest gap between two
        # survivors.
        a, b = max(zip(offsets, offsets[1:]), key=lambda ab: ab[1] - ab[0])
        assert b - a > 1, offsets
        self.delete_to = (a + b) // 2
        self.after_delete = [s for s in survivors if s[0] >= self.delete_to]

        def first_at_or_after(ts, floor=0):
            return next((o for o, _, _, t in survivors if t >= ts and o >= floor), -1)

        # Lookups by time: before everything, each survivor's own timestamp, and the
        # timestamp of the removed record just before each survivor (answers that survivor).
        probes = [produced[0][2] - 5000]
        for o in offsets:
            probes.append(ts_of[o])
            if o - 1 in removed:
                probes.append(ts_of[o - 1])
        probes.append(produced[-1][2] + 1)  # past every record: no offset
        self.by_time = [(ts, first_at_or_after(ts)) for ts in probes]
        self.by_time_after_delete = [
            (ts, first_at_or_after(ts, self.delete_to)) for ts in probes
        ]

    def to_lines(self):
        """The expectation as the Java program reads it: one `name value...` line each (a
        tombstone's value is `\\N`; keys and values have no spaces)."""
        out = [f"topic {self.topic}", f"end {self.end}", f"commit_at {self.commit_at}",
               f"delete_to {self.delete_to}"]
        null = "\\N"
        out += [f"survivor {o} {ts} {k} {null if v is None else v}"
                for o, k, v, ts in self.survivors]
        out += [f"by_time {ts} {o}" for ts, o in self.by_time]
        out += [f"by_time_after_delete {ts} {o}" for ts, o in self.by_time_after_delete]
        return "\n".join(out) + "\n"

    def to_json(self):
        """The expectation as the Go program reads it."""
        rec = lambda s: {"offset": s[0], "key": s[1], "value": s[2], "timestamp": s[3]}
        return json.dumps(
            {
                "topic": self.topic,
                "end": self.end,
                "survivors": [rec(s) for s in self.survivors],
                "commit_at": self.commit_at,
                "delete_to": self.delete_to,
                "by_time": [[ts, o] for ts, o in self.by_time],
                "by_time_after_delete": [[ts, o] for ts, o in self.by_time_after_delete],
            }
        )


def make_compacted_topic(cluster, name):
    """Creates `name` (compacted, 1 partition, 3 replicas), fills it, waits until compaction
    left one record per key, and returns the `Expectation`."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics([NewTopic(name, 1, 3, config=TOPIC_CONFIG)], request_timeout=20)
    fut[name].result(timeout=30)
    cluster.leader(name, timeout=20)

    base_ms = int(time.time() * 1000) - 600_000
    produced, pause = _records(base_ms)
    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 30000,
        }
    )
    offsets = {}

    def produce(items, start):
        for i, (k, v, ts) in enumerate(items, start):
            p.produce(
                name,
                key=k.encode(),
                value=None if v is None else v.encode(),
                timestamp=ts,
                on_delivery=lambda err, msg, i=i: offsets.__setitem__(i, (err, msg.offset())),
            )
        assert p.flush(30) == 0

    produce(produced[:pause], 0)
    # Let segment.ms roll the first part out of the active segment and the cleaner see it.
    time.sleep(2.5)
    produce(produced[pause:], pause)
    # Idempotent: record i at offset i.
    assert [offsets[i] for i in range(len(produced))] == [(None, i) for i in range(len(produced))]

    end = len(produced)
    latest = {}
    for i, (k, _, _) in enumerate(produced):
        latest[k] = i
    want = [(o, produced[o][0], produced[o][1], produced[o][2]) for o in sorted(latest.values())]

    # Bounded wait: every replica cleaned (its scrape shows a last clean), and a read from the
    # beginning shows only the latest record of each key.
    deadline = time.monotonic() + COMPACTION_TIMEOUT_S
    got = None
    while time.monotonic() < deadline:
        cleaned = all(
            _node_metric_lines(cluster, n, "vdl_partition_last_clean_timestamp_seconds", name)
            for n in (1, 2, 3)
        )
        if cleaned:
            got = read_all(cluster.bootstrap, name, end)
            if got == want:
                return Expectation(name, produced, want, end)
        time.sleep(1)
    raise AssertionError(
        f"compaction did not leave one record per key within {COMPACTION_TIMEOUT_S}s: "
        f"read {len(got or [])} records (want {len(want)}): {(got or [])[:10]}"
    )
