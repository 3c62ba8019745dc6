#!/usr/bin/env python3
"""confluent-kafka (librdkafka) client for the golden capture: exercises as
many Kafka APIs as the Python client naturally uses. Every step is bounded by a
timeout and a failing step is reported but does not stop the others (error
responses are useful vectors too).

Usage: capture_client.py BOOTSTRAP [SASL_BOOTSTRAP]
"""
import sys
import time
import traceback

from confluent_kafka import (Consumer, KafkaException, Producer, TopicPartition,
                             TopicCollection, ConsumerGroupTopicPartitions)
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic,
                                   OffsetSpec, ResourceType, AclBindingFilter,
                                   ResourcePatternType, AclOperation, AclPermissionType,
                                   ConfigEntry, AlterConfigOpType)

BS = sys.argv[1]
SASL_BS = sys.argv[2] if len(sys.argv) > 2 else None
TOPIC = "golden-py"
TMP_TOPIC = "golden-py-tmp"
GROUP = "golden-py-group"
T = 15  # seconds per step
COMMON = {"bootstrap.servers": BS, "client.id": "golden-py", "socket.timeout.ms": 10000}
FAILED = []


def step(name, fn):
    t0 = time.time()
    try:
        fn()
        print("py: %-28s ok (%.1fs)" % (name, time.time() - t0), flush=True)
    except Exception as e:  # noqa: BLE001 - keep going, report at the end
        FAILED.append(name)
        print("py: %-28s FAILED: %r" % (name, e), flush=True)
        traceback.print_exc(limit=1)


def wait_all(futs):
    for f in (futs.values() if isinstance(futs, dict) else [futs]):
        try:
            f.result(timeout=T)
        except KafkaException as e:
            print("   (broker error, kept as vector): %s" % e, flush=True)


admin = AdminClient(dict(COMMON))


def payloads(n=10, size=100, tag="m"):
    for i in range(n):
        body = ("%s-%03d-" % (tag, i)).encode()
        yield body + b"x" * (size - len(body))


def create_topics():
    wait_all(admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(TMP_TOPIC, 2, 1)],
                                 request_timeout=T, operation_timeout=T))


def produce_all_codecs():
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer(dict(COMMON, **{"enable.idempotence": True, "acks": "all",
                                     "compression.type": codec, "linger.ms": 50}))
        for i, v in enumerate(payloads(tag=codec)):
            p.produce(TOPIC, key=b"k%d" % i, value=v, headers=[("codec", codec.encode())])
        left = p.flush(T)
        if left:
            raise RuntimeError("%d messages not delivered with %s" % (left, codec))


def transactional():
    p = Producer(dict(COMMON, **{"transactional.id": "golden-py-txn", "linger.ms": 20}))
    p.init_transactions(T)
    p.begin_transaction()
    for v in payloads(n=3, tag="txn"):
        p.produce(TOPIC, value=v)
    c = Consumer(dict(COMMON, **{"group.id": GROUP + "-txn", "enable.auto.commit": False}))
    p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], c.consumer_group_metadata(), T)
    p.commit_transaction(T)
    p.begin_transaction()
    p.produce(TOPIC, value=b"aborted")
    p.abort_transaction(T)
    c.close()


def consume_group():
    c = Consumer(dict(COMMON, **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False, "session.timeout.ms": 10000,
                                 "isolation.level": "read_committed"}))
    c.subscribe([TOPIC])
    got, deadline = 0, time.time() + 25
    while got < 50 and time.time() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got += 1
    if got == 0:
        raise RuntimeError("consumed nothing")
    c.commit(asynchronous=False)
    print("   consumed %d" % got)
    print("   committed", c.committed([TopicPartition(TOPIC, 0)], timeout=T))
    print("   watermarks", c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=T))
    ts = int(time.time() * 1000) - 60000
    print("   offsets_for_times", c.offsets_for_times([TopicPartition(TOPIC, 0, ts)], timeout=T))
    c.close()


def admin_reads():
    admin.describe_cluster(request_timeout=T).result(timeout=T)
    admin.list_topics(timeout=T)
    wait_all(admin.describe_topics(TopicCollection([TOPIC]), request_timeout=T))
    wait_all(admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC),
                                     ConfigResource(ResourceType.BROKER, "0")],
                                    request_timeout=T))
    wait_all(admin.list_consumer_groups(request_timeout=T))
    wait_all(admin.describe_consumer_groups([GROUP], request_timeout=T))
    wait_all(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)],
                                               request_timeout=T))
    tp = TopicPartition(TOPIC, 0)
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.max_timestamp(),
                 OffsetSpec.for_timestamp(int(time.time() * 1000) - 60000)):
        wait_all(admin.list_offsets({tp: spec}, request_timeout=T))


def admin_writes():
    # The deprecated whole-resource AlterConfigs (API 33).
    wait_all(admin.alter_configs([ConfigResource(
        ResourceType.TOPIC, TMP_TOPIC, set_config={"retention.ms": "7200000"})],
        request_timeout=T))
    wait_all(admin.incremental_alter_configs([ConfigResource(
        ResourceType.TOPIC, TMP_TOPIC,
        incremental_configs=[ConfigEntry("retention.ms", "3600000",
                                         incremental_operation=AlterConfigOpType.SET)])],
        request_timeout=T))
    wait_all(admin.create_partitions([NewPartitions(TMP_TOPIC, 3)], request_timeout=T))
    wait_all(admin.delete_records([TopicPartition(TOPIC, 0, 2)], request_timeout=T))
    # No authorizer on the broker: these come back with SECURITY_DISABLED,
    # still valid request/response vectors.
    wait_all(admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY), request_timeout=T))
    wait_all(admin.describe_user_scram_credentials(request_timeout=T))
    wait_all(admin.delete_consumer_groups([GROUP + "-txn"], request_timeout=T))
    wait_all(admin.delete_topics([TMP_TOPIC], request_timeout=T, operation_timeout=T))


def sasl():
    a = AdminClient(dict(COMMON, **{"bootstrap.servers": SASL_BS,
                                    "security.protocol": "SASL_PLAINTEXT",
                                    "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                    "sasl.password": "alice-secret"}))
    a.list_topics(timeout=T)
    a.describe_cluster(request_timeout=T).result(timeout=T)


step("create_topics", create_topics)
step("produce (5 codecs, idempotent)", produce_all_codecs)
step("transactional produce", transactional)
step("consumer group", consume_group)
step("admin reads", admin_reads)
step("admin writes", admin_writes)
if SASL_BS:
    step("sasl plain", sasl)
print("py: done, failed steps: %s" % (FAILED or "none"), flush=True)
# Fail loudly so capture.sh does not write a partial set of fixtures.
sys.exit(1 if FAILED else 0)
