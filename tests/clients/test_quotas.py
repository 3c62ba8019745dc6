"""Issue 13, flow control: Kafka's client quotas managed with Kafka 3.9's own `kafka-configs.sh`
(AlterClientQuotas / DescribeClientQuotas) and enforced on a real client: a confluent-kafka
(librdkafka) producer whose client id has a `producer_byte_rate` is slowed to it, and
librdkafka reports the broker's `throttle_time_ms` through its throttle callback. Runs against
the cluster admin_target.py picks (ADMIN_TEST_TARGET=vdl|kafka), so the same checks hold for
Apache Kafka 3.9.
"""

import os
import tempfile
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import admin_target as at
from test_admin_tools import CONFIGS, TOOLS_LOG4J, Tools

pytestmark = pytest.mark.timeout(180)

RATE = 100_000  # bytes per second


@pytest.fixture(scope="module")
def tools(admin_target):
    with tempfile.TemporaryDirectory(prefix="vdl-quota-tools-") as d:
        log4j = os.path.join(d, "tools-log4j.properties")
        with open(log4j, "w") as f:
            f.write(TOOLS_LOG4J)
        yield Tools(admin_target.bootstrap, at.kafka_libs(), log4j)


def describe_client(tools, client_id):
    """kafka-configs --describe of one client id: {key: value} of its quotas."""
    _, out, _ = tools.run(
        CONFIGS, "--describe", "--entity-type", "clients", "--entity-name", client_id
    )
    # "Quota configs for client-id 'x' are producer_byte_rate=100000.0, consumer_byte_rate=..."
    quotas = {}
    for line in out.splitlines():
        if " are " in line:
            for kv in line.split(" are ", 1)[1].split(", "):
                k, _, v = kv.partition("=")
                quotas[k.strip()] = float(v)
    return quotas


def test_kafka_configs_manages_client_quotas_and_a_producer_is_slowed_to_its_quota(
    tools, admin_target
):
    client_id = at.unique("quota-app")
    topic = at.unique("quota-topic")
    admin = AdminClient({"bootstrap.servers": admin_target.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=at.NODES)])[
        topic
    ].result(30)
    at.wait_topic_ready(admin, topic, 1)

    tools.run(
        CONFIGS,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
        "--add-config",
        f"producer_byte_rate={RATE},consumer_byte_rate={2 * RATE}",
    )
    deadline = time.monotonic() + 20
    while True:
        quotas = describe_client(tools, client_id)
        if quotas == {"producer_byte_rate": RATE, "consumer_byte_rate": 2 * RATE}:
            break
        assert time.monotonic() < deadline, quotas
        time.sleep(0.5)

    # vdl lets one second's worth through before throttling (a one-second bucket): 500 KB at
    # 100 KB/s then take about 4 s. Apache Kafka measures a fresh client's rate over at least
    # ten one-second samples, so it lets about ten seconds' worth through first: against Kafka
    # the producer sends 1.5 MB to be throttled as long.
    total_kb = 500 if admin_target.kind == "vdl" else 1500
    throttles = []
    p = Producer(
        {
            "bootstrap.servers": admin_target.bootstrap,
            "client.id": client_id,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 20_000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    value = b"q" * 1000
    started = time.monotonic()
    for i in range(total_kb):
        while True:
            try:
                p.produce(topic, value, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    elapsed = time.monotonic() - started
    p.poll(0.5)
    assert throttles and max(throttles) > 0, throttles
    assert elapsed > 3.0, f"{total_kb} KB at a {RATE} B/s quota took {elapsed:.1f} s"

    tools.run(
        CONFIGS,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
        "--delete-config",
        "producer_byte_rate",
    )
    deadline = time.monotonic() + 20
    while describe_client(tools, client_id) != {"consumer_byte_rate": 2 * RATE}:
        assert time.monotonic() < deadline
        time.sleep(0.5)
