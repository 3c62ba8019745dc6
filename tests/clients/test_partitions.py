"""confluent-kafka (librdkafka) on multi-partition topics of a real three-node vdl cluster (see
conftest.py): keyed produce with the default partitioner, a two-member consumer group sharing a
6-partition topic and rebalancing when a member leaves, CreatePartitions through AdminClient,
and a node killed while an idempotent producer writes to six partitions.

Every wait is bounded. The failover test kills a node, so it runs last in this file and restarts
the node at the end to leave the session's cluster whole.
"""

import random
import threading
import time
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

NODES = 3  # the session cluster of conftest.py

PRODUCE_TIMEOUT_S = 30


def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def wait_for_partitions(cluster, topic, count, timeout=30.0):
    """Waits until Metadata lists `count` partitions of `topic`, each with a leader."""
    a = admin(cluster)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None:
            last = {p: t.partitions[p].leader for p in t.partitions}
            if len(last) == count and all(leader >= 0 for leader in last.values()):
                return last
        time.sleep(0.1)
    raise AssertionError(f"{topic}: no leader for every one of {count} partitions: {last}")


def new_topic(cluster, request, partitions):
    name = "p-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:60]
    name = f"{name}-{random.randrange(1 << 30):x}"
    a = admin(cluster)  # kept alive until the future resolves
    futures = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=NODES)], request_timeout=20
    )
    futures[name].result(timeout=30)
    wait_for_partitions(cluster, name, partitions)
    return name


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
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def produce_keyed(p, topic, records):
    """Produces (key, value) pairs in order; returns {value: (partition, offset)} from the
    delivery reports, asserting none failed."""
    reports = {}
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append((msg.value().decode(), err))
        else:
            reports[msg.value().decode()] = (msg.partition(), msg.offset())

    for i, (k, v) in enumerate(records):
        while True:
            try:
                p.produce(topic, key=k.encode(), value=v.encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.1)
        if i % 50 == 49:
            p.poll(0)
    assert p.flush(PRODUCE_TIMEOUT_S) == 0, "records not delivered in time"
    assert errors == [], f"delivery errors: {errors[:5]}"
    return reports


def read_partitions(cluster, topic, partitions, expect_total, timeout=60.0):
    """Reads every partition from offset 0 with an assigned consumer until `expect_total`
    records and the end of every partition; returns {partition: [(offset, value)]}."""
    c = consumer(cluster, f"reader-{topic}", **{"enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = defaultdict(list)
        at_eof = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            total = sum(len(v) for v in got.values())
            if total >= expect_total and len(at_eof) == partitions:
                break
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(m.partition())
                    continue
                if not m.error().fatal():
                    continue
                raise AssertionError(f"consume error: {m.error()}")
            at_eof.discard(m.partition())
            got[m.partition()].append((m.offset(), m.value().decode()))
        return got
    finally:
        c.close()


def test_keyed_produce_spreads_over_partitions_and_keeps_key_order(cluster, request):
    topic = new_topic(cluster, request, 6)
    records = [(f"key-{k}", f"{k}:{i}") for i in range(10) for k in range(60)]
    reports = produce_keyed(producer(cluster), topic, records)
    # The default partitioner puts a key on one partition; 60 keys reach all six.
    partition_of_key = defaultdict(set)
    for v, (p, _) in reports.items():
        partition_of_key[v.split(":")[0]].add(p)
    assert all(len(ps) == 1 for ps in partition_of_key.values()), partition_of_key
    used = {next(iter(ps)) for ps in partition_of_key.values()}
    assert used == set(range(6)), f"partitions used: {sorted(used)}"

    got = read_partitions(cluster, topic, 6, len(records))
    assert sum(len(v) for v in got.values()) == len(records)
    for p, recs in got.items():
        # Offsets are dense from 0 in each partition, and each key's records are in order.
        assert [o for o, _ in recs] == list(range(len(recs))), f"partition {p}"
        per_key = defaultdict(list)
        for o, v in recs:
            assert reports[v] == (p, o), f"{v} read at {p}/{o}, acknowledged at {reports[v]}"
            k, i = v.split(":")
            per_key[k].append(int(i))
        assert all(seq == list(range(10)) for seq in per_key.values()), per_key


def test_two_member_group_shares_six_partitions_and_rebalances(cluster, request):
    topic = new_topic(cluster, request, 6)
    records = [(f"k{k}", f"{k}:{i}") for i in range(20) for k in range(30)]
    reports = produce_keyed(producer(cluster), topic, records)
    group = f"g-{topic}"
    members = [consumer(cluster, group), consumer(cluster, group)]
    consumed = defaultdict(list)  # value -> [member index]
    try:
        for c in members:
            c.subscribe([topic])
        # Both members poll until the group has settled on a split of the six partitions.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for i, c in enumerate(members):
                m = c.poll(0.2)
                if m is not None and not m.error():
                    consumed[m.value().decode()].append(i)
                    c.commit(message=m, asynchronous=False)
            shares = [{tp.partition for tp in c.assignment()} for c in members]
            if all(shares) and shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == set(
                range(6)
            ) and len(consumed) >= len(records):
                break
        shares = [{tp.partition for tp in c.assignment()} for c in members]
        assert all(shares), f"a member got nothing: {shares}"
        assert shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == set(range(6)), shares
        assert len(consumed) == len(records), f"consumed {len(consumed)} of {len(records)}"
        for v, who in consumed.items():
            assert len(set(who)) == 1, f"{v} consumed by both members"
            assert reports[v][0] in shares[who[0]], f"{v} read by a member not assigned its partition"

        # One member leaves: the other takes every partition and goes on from the commits.
        members[0].close()
        left = members.pop(0)
        more = [(f"k{k}", f"{k}:{i}") for i in range(20, 25) for k in range(30)]
        more_reports = produce_keyed(producer(cluster), topic, more)
        c = members[0]
        late = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                late.append(m.value().decode())
                c.commit(message=m, asynchronous=False)
            if {tp.partition for tp in c.assignment()} == set(range(6)) and len(late) >= len(more):
                break
        assert {tp.partition for tp in c.assignment()} == set(range(6))
        assert sorted(late) == sorted(more_reports), "the remaining member missed or repeated records"
        # Committed offsets per partition are the log end offsets.
        committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=15)
        for tp in committed:
            _, high = c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            assert tp.error is None and tp.offset == high, (tp.partition, tp.offset, high)
        del left
    finally:
        for c in members:
            c.close()


def test_create_partitions_grows_a_topic(cluster, request):
    topic = new_topic(cluster, request, 2)
    a = admin(cluster)
    a.create_partitions([NewPartitions(topic, 5)], request_timeout=20)[topic].result(timeout=30)
    wait_for_partitions(cluster, topic, 5)
    # Shrinking is refused as Kafka refuses it.
    try:
        a.create_partitions([NewPartitions(topic, 3)], request_timeout=20)[topic].result(timeout=30)
        raise AssertionError("shrinking a topic was accepted")
    except Exception as e:  # KafkaException carrying INVALID_PARTITIONS
        assert "INVALID_PARTITIONS" in str(e) or "partitions" in str(e).lower(), e
    reports = produce_keyed(
        producer(cluster), topic, [(f"key-{k}", f"{k}:0") for k in range(100)]
    )
    assert {p for p, _ in reports.values()} == set(range(5))


def test_failover_with_six_partitions_loses_nothing(cluster, request):
    """SIGKILL a node while an idempotent acks=all producer writes keyed records to a
    6-partition topic: afterwards every acknowledged record is in its partition exactly once, at
    the offset it was acknowledged with, in produce order per partition."""
    topic = new_topic(cluster, request, 6)
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
    acked = {}  # value -> (partition, offset)
    failed = []
    lock = threading.Lock()

    def cb(err, msg):
        with lock:
            if err is None:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())
            else:
                failed.append((msg.value().decode(), err))

    stop = threading.Event()
    sent = [0]

    def produce_loop():
        while not stop.is_set() and sent[0] < 100_000:
            n = sent[0]
            try:
                p.produce(topic, key=f"k{n % 48}".encode(), value=f"v{n}".encode(), on_delivery=cb)
                sent[0] += 1
            except BufferError:
                p.poll(0.05)
                continue
            p.poll(0)
            time.sleep(0.002)

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    killed = None
    try:
        time.sleep(1.5)
        with lock:
            assert acked, "nothing acknowledged before the kill"
            acked_at_kill = len(acked)
        killed = cluster.leader(topic)  # partition 0's leader
        cluster.kill(killed)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(acked) >= acked_at_kill + 300:
                    break
            time.sleep(0.1)
        with lock:
            assert len(acked) >= acked_at_kill + 300, (
                f"producer did not continue after the kill: errors {failed[:5]}"
            )
    finally:
        stop.set()
        t.join(timeout=10)
    try:
        assert p.flush(60) == 0, "records still undelivered 60 s after the kill"
        assert failed == [], f"delivery failures: {failed[:10]}"
        got = read_partitions(cluster, topic, 6, len(acked))
        for part, recs in got.items():
            assert [o for o, _ in recs] == list(range(len(recs))), f"partition {part} not dense"
            values = [v for _, v in recs]
            assert len(values) == len(set(values)), f"duplicates in partition {part}"
            assert values == sorted(values, key=lambda v: int(v[1:])), f"order in {part}"
            for o, v in recs:
                assert acked.get(v) == (part, o), f"{v} at {part}/{o}, acked at {acked.get(v)}"
        total = sum(len(v) for v in got.values())
        # Idempotence: the partitions hold exactly what was acknowledged.
        assert total == len(acked), f"{total} records stored, {len(acked)} acknowledged"
        print(f"\n6-partition failover: killed vdl{killed}; {len(acked)} acked, all stored once")
    finally:
        # Leave the session's cluster whole.
        cluster.start()
        wait_for_partitions(cluster, topic, 6)
