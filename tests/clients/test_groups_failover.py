"""confluent-kafka (librdkafka): a consumer group keeps its generation when its coordinator dies
(issue 20 item 1). Three consumers share a 6-partition topic; the coordinator (the metadata
leader) is SIGKILLed; the members go on at the new coordinator without any rebalance: no
revoke, lost or assign callback, the same member ids, and no record delivered to two members.

Every wait is bounded. The test kills a node and restarts it at the end to leave the session's
cluster whole.
"""

import time
from collections import defaultdict

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from test_partitions import new_topic, producer, produce_keyed

MEMBERS = 3
PARTITIONS = 6
RECORDS_PER_ROUND = 300


def member(cluster, group, index, events):
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "client.id": f"member-{index}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def on_assign(consumer, parts):
        events[index].append(("assign", sorted(p.partition for p in parts)))

    def on_revoke(consumer, parts):
        events[index].append(("revoke", sorted(p.partition for p in parts)))

    def on_lost(consumer, parts):
        events[index].append(("lost", sorted(p.partition for p in parts)))

    return c, on_assign, on_revoke, on_lost


def poll_round(consumers, seen, owner):
    """One poll of every member; records who got what. Raises on a record seen twice."""
    for i, c in enumerate(consumers):
        msg = c.poll(0.05)
        if msg is None or msg.error() is not None:
            continue
        key = (msg.partition(), msg.offset())
        assert key not in owner, f"{key} delivered to member {owner[key]} and member {i}"
        owner[key] = i
        seen.add(msg.value().decode())


def test_coordinator_failover_keeps_the_generation(cluster, request):
    topic = new_topic(cluster, request, PARTITIONS)
    group = topic + "-group"
    p = producer(cluster, **{"message.timeout.ms": 60000, "retry.backoff.ms": 50})
    first = [(f"key-{k % 48}", f"a{k}") for k in range(RECORDS_PER_ROUND)]
    produce_keyed(p, topic, first)

    events = defaultdict(list)
    consumers = []
    for i in range(MEMBERS):
        c, on_assign, on_revoke, on_lost = member(cluster, group, i, events)
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        consumers.append(c)
    seen, owner = set(), {}
    killed = None
    try:
        # Every member owns two partitions and everything produced so far is consumed.
        deadline = time.monotonic() + 60
        while True:
            poll_round(consumers, seen, owner)
            owned = [len(c.assignment()) for c in consumers]
            if owned == [2] * MEMBERS and len(seen) == RECORDS_PER_ROUND:
                break
            assert time.monotonic() < deadline, f"group not settled: {owned}, {len(seen)} seen"
        # Let auto-commits and a few heartbeats of this generation happen.
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            poll_round(consumers, seen, owner)
        member_ids = [c.memberid() for c in consumers]
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        before = {i: list(e) for i, e in events.items()}

        a = AdminClient({"bootstrap.servers": cluster.bootstrap})  # alive until resolved
        desc = a.describe_consumer_groups([group], request_timeout=20)[group].result(timeout=30)
        killed = desc.coordinator.id
        assert killed in cluster.running()
        cluster.kill(killed)

        # More records while the members carry on at the new coordinator.
        second = [(f"key-{k % 48}", f"b{k}") for k in range(RECORDS_PER_ROUND)]
        produce_keyed(p, topic, second)
        deadline = time.monotonic() + 60
        while len(seen) < 2 * RECORDS_PER_ROUND:
            poll_round(consumers, seen, owner)
            assert time.monotonic() < deadline, f"{len(seen)} of {2 * RECORDS_PER_ROUND} seen"
        # Several session timeouts' worth of heartbeats at the new coordinator.
        settle = time.monotonic() + 12
        while time.monotonic() < settle:
            poll_round(consumers, seen, owner)

        after = {i: events[i][len(before.get(i, [])):] for i in range(MEMBERS)}
        assert all(not e for e in after.values()), f"rebalance callbacks after the kill: {after}"
        assert [c.memberid() for c in consumers] == member_ids, "member ids changed"
        assert [sorted(tp.partition for tp in c.assignment()) for c in consumers] == assignments
        assert len(seen) == 2 * RECORDS_PER_ROUND
        print(f"\ngroup failover: killed coordinator vdl{killed}; no rebalance, "
              f"{len(owner)} records each delivered to one member")
    finally:
        for c in consumers:
            c.close()
        if killed is not None:
            cluster.start()
