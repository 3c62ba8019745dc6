"""confluent-kafka (librdkafka) against a real three-node vdl cluster (see conftest.py).

Every wait is bounded: polls and flushes have timeouts, loops have deadlines, and pytest-timeout
bounds each test as a whole. The failover test kills a node, so it runs last (file order) and
restarts the node at the end to leave the session's cluster whole.
"""

import threading
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PRODUCE_TIMEOUT_S = 30


def producer(cluster, **extra):
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "socket.timeout.ms": 10000,
    }
    conf.update(extra)
    return Producer(conf)


def consumer(cluster, group, **extra):
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
    }
    conf.update(extra)
    return Consumer(conf)


def produce_all(p, topic, values, **kw):
    """Produces `values` in order, flushes, and returns the delivery reports
    [(value, error, offset)] in the order the callbacks ran."""
    reports = []

    def cb(err, msg):
        reports.append((msg.value().decode(), err, msg.offset()))

    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, value=v.encode(), on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.1)
        if i % 50 == 49:
            p.poll(0)
    left = p.flush(PRODUCE_TIMEOUT_S)
    assert left == 0, f"{left} messages not delivered within {PRODUCE_TIMEOUT_S}s"
    return reports


def read_partition(cluster, topic, expect_count, timeout=30.0):
    """Reads the whole partition from offset 0 with an assigned (group-less) consumer until it
    has `expect_count` records and the end of the partition; returns [(offset, value)]."""
    c = consumer(cluster, f"reader-{topic}", **{"enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + timeout
        eof = False
        while time.monotonic() < deadline and not (eof and len(got) >= expect_count):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof = True
                    continue
                if m.error().retriable() or not m.error().fatal():
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            eof = False
            got.append((m.offset(), m.value().decode()))
        return got
    finally:
        c.close()


def assert_dense(records):
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(records))), f"offsets not dense from 0: {offsets[:20]}..."


# (a) Idempotent producer, acks=all, every codec; read back in order.
@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_each_codec_then_consume(cluster, topic, codec):
    p = producer(cluster, **{"enable.idempotence": True, "compression.type": codec})
    values = [f"{codec}-{i}" for i in range(200)]
    reports = produce_all(p, topic, values)
    assert [e for _, e, _ in reports if e is not None] == []
    # Idempotence keeps order: callbacks (per partition) in produce order, offsets dense.
    assert [v for v, _, _ in reports] == values
    assert [o for _, _, o in reports] == list(range(len(values)))
    got = read_partition(cluster, topic, len(values))
    assert_dense(got)
    assert [v for _, v in got] == values


# (a') The same without idempotence (no InitProducerId): all codecs into one topic.
def test_plain_produce_all_codecs_then_consume(cluster, topic):
    expected = []
    for codec in CODECS:
        p = producer(cluster, **{"enable.idempotence": False, "compression.type": codec})
        values = [f"plain-{codec}-{i}" for i in range(50)]
        reports = produce_all(p, topic, values)
        assert [e for _, e, _ in reports if e is not None] == []
        expected += values
    got = read_partition(cluster, topic, len(expected))
    assert_dense(got)
    assert [v for _, v in got] == expected


def consume_n(c, n, timeout=30.0):
    """Polls a subscribed consumer until it has `n` records; returns [(offset, value)]."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF or not m.error().fatal():
                continue
            raise AssertionError(f"consume error: {m.error()}")
        got.append((m.offset(), m.value().decode()))
    assert len(got) >= n, f"consumed {len(got)} of {n} records within {timeout}s"
    return got


# (b) A consumer group commits, closes, and a new member of the group resumes from the commit.
def test_group_commit_close_resume(cluster, topic):
    values = [f"g-{i}" for i in range(100)]
    produce_all(producer(cluster, **{"enable.idempotence": False}), topic, values)
    group = f"group-{topic}"

    c1 = consumer(cluster, group)
    try:
        c1.subscribe([topic])
        first = consume_n(c1, 40)[:40]
        assert first == list(enumerate(values[:40]))
        # Commit "next offset to read" = 40, synchronously.
        committed = c1.commit(offsets=[TopicPartition(topic, 0, 40)], asynchronous=False)
        assert [(tp.offset, tp.error) for tp in committed] == [(40, None)]
    finally:
        c1.close()  # leaves the group

    c2 = consumer(cluster, group)
    try:
        (tp,) = c2.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 40 and tp.error is None
        c2.subscribe([topic])
        rest = consume_n(c2, 60)
        # Resumes exactly at the committed offset: no record again, none skipped.
        assert rest[:60] == [(i, values[i]) for i in range(40, 100)]
        c2.commit(asynchronous=False)
        (tp,) = c2.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 100
    finally:
        c2.close()


# (c) Watermarks and offsets_for_times (ListOffsets with latest/earliest/timestamps).
def test_watermarks_and_offsets_for_times(cluster, topic):
    base_ms = int(time.time() * 1000) - 100_000
    n = 30
    p = producer(cluster, **{"enable.idempotence": False, "linger.ms": 0})
    reports = []
    for i in range(n):
        # One record per request (flush each), so every record is its own batch and the
        # timestamp index has something to look up at every offset.
        p.produce(
            topic,
            value=f"ts-{i}".encode(),
            timestamp=base_ms + i * 1000,
            on_delivery=lambda err, msg: reports.append(err),
        )
        assert p.flush(PRODUCE_TIMEOUT_S) == 0
    assert reports == [None] * n

    c = consumer(cluster, f"wm-{topic}")
    try:
        tp = TopicPartition(topic, 0)
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, n)

        def lookup(ts):
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert r.error is None, r.error
            return r.offset

        # The first offset whose timestamp is >= the one asked for.
        assert lookup(base_ms) == 0
        assert lookup(base_ms - 5000) == 0
        assert lookup(base_ms + 10_000) == 10
        assert lookup(base_ms + 10_500) == 11
        assert lookup(base_ms + (n - 1) * 1000) == n - 1
        # Past every record: no offset (-1, "end").
        assert lookup(base_ms + n * 1000 + 1) == -1
    finally:
        c.close()


def test_list_topics_without_a_topic(cluster, topic):
    """AdminClient.list_topics() and Producer.list_topics() without a topic: librdkafka's
    all-topics Metadata v12 request carries bytes after its body, which Kafka ignores; so must we
    (the connection was closed: "Broker transport failure")."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    assert len(md.brokers) == 3
    assert md.topics[topic].partitions[0].leader in md.brokers
    p = producer(cluster)
    assert topic in p.list_topics(timeout=10).topics


# (d) Failover: SIGKILL the topic's leader while an idempotent acks=all producer produces.
def test_failover_acknowledged_records_survive_exactly_once(cluster, topic):
    group = f"fo-{topic}"
    # Before the kill: some records, and a group offset committed for them.
    pre = [f"pre-{i}" for i in range(20)]
    p0 = producer(cluster, **{"enable.idempotence": False})
    produce_all(p0, topic, pre)
    c = consumer(cluster, group)
    try:
        c.subscribe([topic])
        consume_n(c, 20)
        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
    finally:
        c.close()

    p = producer(
        cluster,
        **{
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        },
    )
    acked = []  # (value, offset) of every record acknowledged without error, in callback order
    failed = []
    lock = threading.Lock()

    def cb(err, msg):
        with lock:
            if err is None:
                acked.append((msg.value().decode(), msg.offset()))
            else:
                failed.append((msg.value().decode(), err))

    stop = threading.Event()
    sent = [0]

    def produce_loop():
        # Bounded by `stop` (set below, under a deadline) and by a hard cap on records.
        while not stop.is_set() and sent[0] < 200_000:
            try:
                p.produce(topic, value=f"fo-{sent[0]}".encode(), on_delivery=cb)
                sent[0] += 1
            except BufferError:
                p.poll(0.05)
                continue
            p.poll(0)
            time.sleep(0.002)  # ~ a few hundred records/s: a steady stream, small totals

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    killed = None
    try:
        time.sleep(1.5)
        with lock:
            assert acked, "nothing acknowledged before the kill"
        killed = cluster.leader(topic)
        acked_at_kill = len(acked)
        t_kill = time.monotonic()
        cluster.kill(killed)
        # A new leader among the two survivors; then the producer must make progress again.
        new_leader = cluster.leader(topic, timeout=15)
        t_elected = time.monotonic()
        assert new_leader != killed
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(acked) >= acked_at_kill + 200:
                    break
            time.sleep(0.1)
        t_resumed = time.monotonic()
        with lock:
            assert len(acked) >= acked_at_kill + 200, (
                f"producer did not continue after failover: {len(acked) - acked_at_kill} "
                f"acks since the kill; errors: {failed[:5]}"
            )
    finally:
        stop.set()
        t.join(timeout=10)
    assert p.flush(60) == 0, "records still undelivered 60 s after the failover"
    print(
        f"\nfailover: killed leader vdl{killed} after {acked_at_kill} acks; vdl{new_leader} led "
        f"{t_elected - t_kill:.2f}s later; 200 more acks {t_resumed - t_kill:.2f}s after the kill; "
        f"{len(acked)} acked in all"
    )
    assert failed == [], f"delivery failures: {failed[:10]}"

    # Every acknowledged record exactly once, in order, at the offset it was acknowledged with.
    expect_total = len(pre) + len(acked)
    got = read_partition(cluster, topic, expect_total, timeout=60)
    assert_dense(got)
    values = [v for _, v in got]
    assert values[: len(pre)] == pre
    log = values[len(pre):]
    assert len(log) == len(set(log)), "duplicates in the log"
    assert sorted(log, key=lambda v: int(v[3:])) == log, "records out of produce order"
    acked_values = [v for v, _ in acked]
    assert set(acked_values) <= set(log), "an acknowledged record is missing"
    by_offset = dict(got)
    for v, off in acked:
        assert by_offset.get(off) == v, f"acked {v} at offset {off}, log has {by_offset.get(off)}"
    # With idempotence nothing is lost or duplicated: the log is exactly what was acknowledged.
    assert sorted(log) == sorted(acked_values)

    # The group's commit from before the kill survived it.
    c = consumer(cluster, group)
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=15)
        assert tp.error is None and tp.offset == 20
    finally:
        c.close()

    # Leave the session's cluster whole: the killed node restarts and catches up.
    cluster.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if cluster.high_watermark(killed, topic) == expect_total:
            break
        time.sleep(0.1)
    assert cluster.high_watermark(killed, topic) == expect_total
