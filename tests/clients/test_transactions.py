"""confluent-kafka (librdkafka) transactions against a real three-node vdl cluster (see
conftest.py): a transactional producer commits and aborts, read_committed consumers see the
committed records only (read_uncommitted ones see all), and a second producer with the same
transactional.id fences the first. librdkafka uses transaction version 1 (it does not read
`transaction.version` from ApiVersions); Kafka's Java client runs vdl.clients.TransactionsTest
with 3.9 (version 1) and 4.1.1 (version 2) in tests/clients/run-java.sh.

Every wait is bounded: client calls have timeouts and loops deadlines.
"""

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30


def txn_producer(cluster, txn_id):
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60000,
            "message.timeout.ms": 30000,
            "socket.timeout.ms": 10000,
        }
    )


def read_all(cluster, topic, isolation, want, deadline_s=TIMEOUT_S):
    """The values of partition 0 from the beginning, read with `isolation`, until `want`
    values were read or the deadline passes (then what was read)."""
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = []
        deadline = time.monotonic() + deadline_s
        while len(values) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            values.append(m.value().decode())
        return values
    finally:
        c.close()


def produce(p, topic, values):
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    p.flush(TIMEOUT_S)


def test_commit_and_abort_as_read_committed_sees_them(cluster, topic):
    p = txn_producer(cluster, f"tx-{topic}")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    produce(p, topic, ["a1", "a2"])
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    produce(p, topic, ["b1"])
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    produce(p, topic, ["c1"])
    p.commit_transaction(TIMEOUT_S)

    assert read_all(cluster, topic, "read_committed", 3) == ["a1", "a2", "c1"]
    # Nothing more shows up for read_committed (the aborted b1 is skipped, not late).
    assert read_all(cluster, topic, "read_committed", 4, deadline_s=3) == ["a1", "a2", "c1"]
    assert read_all(cluster, topic, "read_uncommitted", 4) == ["a1", "a2", "b1", "c1"]


def test_a_new_producer_of_the_id_fences_the_old_one(cluster, topic):
    txn_id = f"tx-{topic}"
    old = txn_producer(cluster, txn_id)
    old.init_transactions(TIMEOUT_S)
    old.begin_transaction()
    produce(old, topic, ["old"])

    new = txn_producer(cluster, txn_id)
    # Aborts the old producer's open transaction (with a bumped epoch) before answering.
    new.init_transactions(TIMEOUT_S)
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal(), fenced.value

    new.begin_transaction()
    produce(new, topic, ["new"])
    new.commit_transaction(TIMEOUT_S)
    assert read_all(cluster, topic, "read_committed", 1) == ["new"]
    assert read_all(cluster, topic, "read_committed", 2, deadline_s=3) == ["new"]


TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions.sh


def test_kafka_transactions_tool_lists_and_describes(cluster, topic):
    """Apache Kafka 3.9's own `kafka-transactions.sh` (ListTransactions on every broker,
    FindCoordinator and DescribeTransactions on the coordinator) sees an open transaction and
    a committed one."""
    import os
    import tempfile

    import admin_target as at
    from test_admin_tools import TOOLS_LOG4J, Tools

    done, open_ = f"tx-done-{topic}", f"tx-open-{topic}"
    p = txn_producer(cluster, done)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    produce(p, topic, ["d"])
    p.commit_transaction(TIMEOUT_S)
    q = txn_producer(cluster, open_)
    q.init_transactions(TIMEOUT_S)
    q.begin_transaction()
    produce(q, topic, ["o"])

    with tempfile.TemporaryDirectory(prefix="vdl-txn-tools-") as d:
        log4j = os.path.join(d, "tools-log4j.properties")
        with open(log4j, "w") as f:
            f.write(TOOLS_LOG4J)
        tools = Tools(cluster.bootstrap, at.kafka_libs(), log4j)
        _, out, _ = tools.run(TRANSACTIONS, "list")
        rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
        states = {r[0]: r[3] for r in rows}
        assert states.get(done) == "CompleteCommit", out
        assert states.get(open_) == "Ongoing", out
        assert [r[0] for r in rows].count(done) == 1, f"listed once: {out}"

        _, out, _ = tools.run(TRANSACTIONS, "describe", "--transactional-id", open_)
        header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
        described = dict(zip(header, row))
        assert described["TransactionalId"] == open_, out
        assert described["TransactionState"] == "Ongoing", out
        assert f"{topic}-0" in out, out
    q.abort_transaction(TIMEOUT_S)

