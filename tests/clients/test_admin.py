"""Issue 11, "Kafka's admin tooling works unmodified": librdkafka's AdminClient (confluent-kafka)
against the cluster admin_target.py picks (ADMIN_TEST_TARGET=vdl|kafka). Every assertion was
proven against Apache Kafka 3.9 first; see tests/clients/README.md for the expectations chosen
where Kafka's behaviour leaves room.
"""

import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

import admin_target as at

pytestmark = pytest.mark.timeout(120)

NODES = at.NODES
# The topic configs vdl implements (issue 11); describe_configs must report each of them.
SUPPORTED_CONFIGS = (
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "max.message.bytes",
    "min.insync.replicas",
    "cleanup.policy",
    "message.timestamp.type",
)
# Where a topic config nobody set on the topic comes from: the built-in default, or the broker's
# own config file (Kafka reports segment.bytes and min.insync.replicas as STATIC_BROKER_CONFIG
# because kafka-cluster.sh's broker config sets them). vdl may answer either.
NOT_SET_ON_TOPIC = (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG)


@pytest.fixture(scope="module")
def admin(admin_target):
    return AdminClient({"bootstrap.servers": admin_target.bootstrap})


def error_of(future, timeout=30):
    """The KafkaError a future failed with, or None when it succeeded."""
    try:
        future.result(timeout=timeout)
    except KafkaException as e:
        return e.args[0]
    return None


def create_topic(admin, prefix, partitions=1, config=None):
    name = at.unique(prefix)
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=NODES, config=config or {})],
        request_timeout=20,
    )
    fs[name].result(timeout=30)
    at.wait_topic_ready(admin, name, partitions)
    return name


def topic_metadata(admin, name, partitions):
    """`name`'s TopicMetadata once every node asked shows its `partitions` partitions ready."""
    return at.wait_topic_ready(admin, name, partitions, in_a_row=1)


def topic_configs(admin, topic, timeout=10.0):
    """{name: ConfigEntry} of `topic` as DescribeConfigs reports it. A broker that has not yet
    learnt of a topic created a moment ago answers UNKNOWN_TOPIC_OR_PART (Kafka's brokers take
    new topics from the metadata log asynchronously): asked again for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        fs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=20)
        (f,) = fs.values()
        try:
            return f.result(timeout=30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def wait_configs(admin, topic, expected, timeout=10.0):
    """Waits until DescribeConfigs of `topic` shows every {name: value} of `expected` (Kafka's
    brokers apply a config change from the metadata log a moment after the controller accepted
    it); returns the configs."""
    deadline = time.monotonic() + timeout
    while True:
        cfg = topic_configs(admin, topic)
        seen = {k: cfg[k].value if k in cfg else None for k in expected}
        if seen == expected:
            return cfg
        assert time.monotonic() < deadline, f"{topic}: configs {seen}, expected {expected}"
        time.sleep(0.2)


def incremental_alter(admin, topic, *ops):
    """Applies (name, value, AlterConfigOpType) ops to `topic`; returns the future's error or None."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    fs = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)], request_timeout=20
    )
    (f,) = fs.values()
    return error_of(f)


def produce(bootstrap, topic, n, partition=None):
    """Produces n records (acks=all) and returns their (partition, offset) in delivery order."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    delivered, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    for i in range(n):
        kwargs = {"partition": partition} if partition is not None else {"key": f"k{i}"}
        p.produce(topic, value=f"v{i}".encode(), on_delivery=on_delivery, **kwargs)
    assert p.flush(30) == 0, "records still undelivered after 30 s"
    assert not errors, errors
    assert len(delivered) == n
    return delivered


def consumer(bootstrap, group, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10000,
    }
    conf.update(extra)
    return Consumer(conf)


def consume(c, n, timeout=30.0):
    """Polls until n records arrived (bounded by `timeout`); returns them."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    assert len(out) == n, f"consumed {len(out)} of {n} records in {timeout}s"
    return out


def wait_for(what, check, timeout=20.0):
    """Calls check() until it returns a true value (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


# --- cluster and topics ---


def test_describe_cluster_and_list_topics_without_a_topic(admin, admin_target):
    name = create_topic(admin, "adm-list", partitions=2)

    def all_topics_with_name():
        m = admin.list_topics(timeout=20)  # Metadata for all topics
        return m if name in m.topics else None

    # Asked again while a node that has not learnt of the new topic yet answers.
    md = wait_for(f"{name} in all-topics Metadata", all_topics_with_name)
    assert sorted(md.brokers) == sorted(b.id for b in md.brokers.values())
    assert len(md.brokers) == NODES
    endpoints = {f"{b.host}:{b.port}" for b in md.brokers.values()}
    assert endpoints == set(admin_target.bootstrap.split(","))
    assert sorted(md.topics[name].partitions) == [0, 1]

    desc = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert desc.cluster_id, "DescribeCluster returns a cluster id"
    assert len(desc.nodes) == NODES
    assert {f"{n.host}:{n.port}" for n in desc.nodes} == endpoints
    assert {n.id for n in desc.nodes} == set(md.brokers)
    # Kafka (KRaft) names one of the brokers as "controller"; vdl must name a node too.
    assert desc.controller is not None and desc.controller.id in set(md.brokers)


def test_create_topic_with_configs_describe_then_delete(admin):
    name = create_topic(
        admin,
        "adm-create",
        partitions=3,
        config={"retention.ms": "3600000", "max.message.bytes": "500000"},
    )
    md = topic_metadata(admin, name, 3)
    assert len(md.partitions) == 3
    for p in md.partitions.values():
        assert (
            len(p.replicas) == NODES
            and p.leader in p.replicas
            and sorted(p.isrs) == sorted(p.replicas)
        )

    cfg = topic_configs(admin, name)
    for key in SUPPORTED_CONFIGS:
        assert key in cfg, f"DescribeConfigs lacks {key}"
        assert not cfg[key].is_read_only, key
    # Set at creation: the topic's own (dynamic) config, not a default.
    for key, value in (("retention.ms", "3600000"), ("max.message.bytes", "500000")):
        assert cfg[key].value == value, (key, cfg[key])
        assert cfg[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (key, cfg[key])
        assert not cfg[key].is_default
    # Not set: a default (built in or from the broker's config), with a sensible value.
    for key in (
        "retention.bytes",
        "segment.bytes",
        "min.insync.replicas",
        "cleanup.policy",
        "message.timestamp.type",
    ):
        assert cfg[key].source in [s.value for s in NOT_SET_ON_TOPIC], (key, cfg[key])
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["message.timestamp.type"].value == "CreateTime"
    assert int(cfg["retention.bytes"].value) == -1 or int(cfg["retention.bytes"].value) > 0
    assert int(cfg["segment.bytes"].value) > 0
    assert 1 <= int(cfg["min.insync.replicas"].value) <= NODES

    fs = admin.delete_topics([name], request_timeout=20)
    fs[name].result(timeout=30)
    wait_for(f"{name} gone from metadata", lambda: name not in admin.list_topics(timeout=10).topics)
    # Deleting it again: it does not exist any more.
    err = error_of(admin.delete_topics([name], request_timeout=20)[name])
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err


def test_create_existing_topic_is_refused(admin):
    name = create_topic(admin, "adm-exists")
    err = error_of(admin.create_topics([NewTopic(name, 1, NODES)], request_timeout=20)[name])
    assert err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
    # validate_only gives the same answer without creating anything.
    err = error_of(
        admin.create_topics([NewTopic(name, 1, NODES)], validate_only=True, request_timeout=20)[
            name
        ]
    )
    assert err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err


def test_replication_factor_above_node_count_is_refused(admin):
    name = at.unique("adm-rf")
    err = error_of(admin.create_topics([NewTopic(name, 1, NODES + 1)], request_timeout=20)[name])
    assert err is not None and err.code() == KafkaError.INVALID_REPLICATION_FACTOR, err
    assert name not in admin.list_topics(timeout=10).topics


# --- topic configs ---


def test_incremental_alter_configs_set_and_delete(admin):
    name = create_topic(admin, "adm-incr")
    before = topic_configs(admin, name)
    assert (
        incremental_alter(
            admin,
            name,
            ("retention.ms", "7200000", AlterConfigOpType.SET),
            ("retention.bytes", "104857600", AlterConfigOpType.SET),
            ("segment.bytes", "16777216", AlterConfigOpType.SET),
        )
        is None
    )
    after = wait_configs(
        admin,
        name,
        {"retention.ms": "7200000", "retention.bytes": "104857600", "segment.bytes": "16777216"},
    )
    for key, value in (
        ("retention.ms", "7200000"),
        ("retention.bytes", "104857600"),
        ("segment.bytes", "16777216"),
    ):
        assert after[key].value == value, (key, after[key])
        assert after[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (key, after[key])
    # Untouched keys stay as they were.
    assert after["max.message.bytes"].value == before["max.message.bytes"].value

    # DELETE reverts one key to its default and leaves the others alone.
    assert incremental_alter(admin, name, ("retention.ms", "", AlterConfigOpType.DELETE)) is None
    reverted = wait_configs(admin, name, {"retention.ms": before["retention.ms"].value})
    assert reverted["retention.ms"].value == before["retention.ms"].value
    assert reverted["retention.ms"].source == before["retention.ms"].source
    assert reverted["retention.bytes"].value == "104857600"
    assert reverted["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # min.insync.replicas within 1..replication factor is accepted.
    assert (
        incremental_alter(admin, name, ("min.insync.replicas", "1", AlterConfigOpType.SET)) is None
    )
    wait_configs(admin, name, {"min.insync.replicas": "1"})


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_whole_topic_config(admin):
    """The legacy AlterConfigs: the request's set becomes the topic's whole config, so a key
    set before and left out reverts to its default."""
    name = create_topic(admin, "adm-legacy", config={"retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.bytes": "2097152"})
    (f,) = admin.alter_configs([res], request_timeout=20).values()
    f.result(timeout=30)
    cfg = wait_configs(admin, name, {"retention.bytes": "2097152"})
    assert cfg["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, cfg[
        "retention.ms"
    ]
    assert cfg["retention.ms"].value != "3600000"


def test_unknown_config_or_bad_value_is_invalid_config(admin):
    name = create_topic(admin, "adm-invalid")
    before = topic_configs(admin, name)
    for key, value in (
        ("no.such.config", "1"),
        ("retention.ms", "not-a-number"),
        ("max.message.bytes", "-5"),
        ("message.timestamp.type", "Sometimes"),
    ):
        err = incremental_alter(admin, name, (key, value, AlterConfigOpType.SET))
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (key, value, err)
        # Kafka's message names the offending key; so must vdl's.
        assert key in err.str(), (key, err.str())
    after = topic_configs(admin, name)
    for key in SUPPORTED_CONFIGS:
        assert after[key].value == before[key].value, key
    # The same at creation: nothing is created.
    bad = at.unique("adm-invalid-create")
    err = error_of(
        admin.create_topics(
            [NewTopic(bad, 1, NODES, config={"retention.ms": "soon"})], request_timeout=20
        )[bad]
    )
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert "retention.ms" in err.str(), err.str()
    assert bad not in admin.list_topics(timeout=10).topics


def test_cleanup_policy_compact(admin, admin_target):
    """cleanup.policy=compact is accepted at creation and through IncrementalAlterConfigs, and
    switched back to delete at runtime, by vdl as by Kafka; an unknown policy is refused."""
    name = create_topic(admin, "adm-compact")
    assert (
        incremental_alter(admin, name, ("cleanup.policy", "delete", AlterConfigOpType.SET)) is None
    )
    err = incremental_alter(admin, name, ("cleanup.policy", "compact", AlterConfigOpType.SET))
    assert err is None, err
    wait_configs(admin, name, {"cleanup.policy": "compact"})
    err = incremental_alter(admin, name, ("cleanup.policy", "delete", AlterConfigOpType.SET))
    assert err is None, err
    wait_configs(admin, name, {"cleanup.policy": "delete"})
    bad = incremental_alter(admin, name, ("cleanup.policy", "shred", AlterConfigOpType.SET))
    assert bad is not None and bad.code() == KafkaError.INVALID_CONFIG, bad
    created = at.unique("adm-compact-create")
    cerr = error_of(
        admin.create_topics(
            [NewTopic(created, 1, NODES, config={"cleanup.policy": "compact"})], request_timeout=20
        )[created]
    )
    assert cerr is None, cerr


def test_message_timestamp_type_log_append_time(admin, admin_target):
    """message.timestamp.type=LogAppendTime: a record produced with an old create time is stored
    and fetched with the append time instead; back to CreateTime, the producer's time is kept.

    Kafka's partition leader applies a config change from the metadata log a moment after
    DescribeConfigs (which any node answers) shows it, so each switch is probed with one record at
    a time until it takes effect, for at most 10 s."""
    name = create_topic(admin, "adm-ts")
    p = Producer({"bootstrap.servers": admin_target.bootstrap, "acks": "all"})
    c = consumer(admin_target.bootstrap, at.unique("adm-ts-g"))

    def produce_and_fetch(create_ms):
        """Produces one record with create time `create_ms`; returns the delivery report's and
        the fetched record's (timestamp type, timestamp)."""
        reports = []
        p.produce(
            name,
            value=b"x",
            partition=0,
            timestamp=create_ms,
            on_delivery=lambda e, m: reports.append((e, m)),
        )
        assert p.flush(30) == 0
        ((err, msg),) = reports
        assert err is None, err
        c.assign([TopicPartition(name, 0, msg.offset())])
        (m,) = consume(c, 1)
        assert m.offset() == msg.offset()
        return msg.timestamp(), m.timestamp()

    def probe(expect_type, create_ms):
        deadline = time.monotonic() + 10
        while True:
            reported, fetched = produce_and_fetch(create_ms)
            if fetched[0] == expect_type or time.monotonic() > deadline:
                return reported, fetched
            time.sleep(0.2)

    try:
        assert (
            incremental_alter(
                admin, name, ("message.timestamp.type", "LogAppendTime", AlterConfigOpType.SET)
            )
            is None
        )
        wait_configs(admin, name, {"message.timestamp.type": "LogAppendTime"})
        start_ms = int(time.time() * 1000)
        reported, fetched = probe(TIMESTAMP_LOG_APPEND_TIME, 1_000_000)
        assert fetched[0] == TIMESTAMP_LOG_APPEND_TIME, fetched
        assert start_ms - 5000 <= fetched[1] <= int(time.time() * 1000) + 5000, fetched
        # The Produce response carries the append time the record was stored with.
        assert reported == fetched, (reported, fetched)

        assert (
            incremental_alter(
                admin, name, ("message.timestamp.type", "CreateTime", AlterConfigOpType.SET)
            )
            is None
        )
        wait_configs(admin, name, {"message.timestamp.type": "CreateTime"})
        reported, fetched = probe(TIMESTAMP_CREATE_TIME, start_ms - 60_000)
        assert fetched == (TIMESTAMP_CREATE_TIME, start_ms - 60_000), fetched
    finally:
        c.close()


# --- consumer groups ---


def group_offsets(admin, group, partitions):
    req = [ConsumerGroupTopicPartitions(group, partitions)]
    (f,) = admin.list_consumer_group_offsets(req, request_timeout=20).values()
    res = f.result(timeout=30)
    assert res.group_id == group
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


def test_consumer_group_lifecycle(admin, admin_target):
    name = create_topic(admin, "adm-grp", partitions=2)
    produce(admin_target.bootstrap, name, 15, partition=0)
    produce(admin_target.bootstrap, name, 10, partition=1)
    group = at.unique("adm-grp-g")
    tps = [TopicPartition(name, 0), TopicPartition(name, 1)]

    c = consumer(admin_target.bootstrap, group)
    try:
        c.subscribe([name])
        consume(c, 25)
        c.commit(asynchronous=False)

        listed = admin.list_consumer_groups(request_timeout=20).result(timeout=30)
        assert not listed.errors, listed.errors
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1, [g.group_id for g in listed.valid]
        assert mine[0].state == ConsumerGroupState.STABLE
        assert not mine[0].is_simple_consumer_group

        (f,) = admin.describe_consumer_groups([group], request_timeout=20).values()
        d = f.result(timeout=30)
        assert d.group_id == group and d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor in ("range", "roundrobin", "cooperative-sticky")
        assert len(d.members) == 1
        assigned = sorted(
            (tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions
        )
        assert assigned == [(name, 0), (name, 1)]
        assert d.coordinator is not None and d.coordinator.id >= 0

        assert group_offsets(admin, group, tps) == {(name, 0): 15, (name, 1): 10}

        # A group with a member cannot be deleted.
        (f,) = admin.delete_consumer_groups([group], request_timeout=20).values()
        err = error_of(f)
        assert err is not None and err.code() == KafkaError.NON_EMPTY_GROUP, err
    finally:
        c.close()

    # Empty now: its offsets can be rewritten, and a new member starts there.
    wait_for(
        "group empty after close",
        lambda: (
            admin.describe_consumer_groups([group], request_timeout=20)[group]
            .result(timeout=30)
            .state
            == ConsumerGroupState.EMPTY
        ),
    )
    req = [
        ConsumerGroupTopicPartitions(
            group, [TopicPartition(name, 0, 5), TopicPartition(name, 1, 7)]
        )
    ]
    (f,) = admin.alter_consumer_group_offsets(req, request_timeout=20).values()
    res = f.result(timeout=30)
    assert sorted((tp.partition, tp.offset, tp.error) for tp in res.topic_partitions) == [
        (0, 5, None),
        (1, 7, None),
    ]
    assert group_offsets(admin, group, tps) == {(name, 0): 5, (name, 1): 7}

    c = consumer(admin_target.bootstrap, group)
    try:
        c.subscribe([name])
        got = consume(c, (15 - 5) + (10 - 7))
        firsts = {}
        for m in got:
            firsts.setdefault(m.partition(), m.offset())
        assert firsts == {0: 5, 1: 7}
    finally:
        c.close()

    (f,) = admin.delete_consumer_groups([group], request_timeout=20).values()
    assert error_of(f) is None
    listed = admin.list_consumer_groups(request_timeout=20).result(timeout=30)
    assert group not in [g.group_id for g in listed.valid]
    # Its committed offsets went with it.
    assert group_offsets(admin, group, tps) == {(name, 0): -1001, (name, 1): -1001}
    # Deleting it again: no such group.
    (f,) = admin.delete_consumer_groups([group], request_timeout=20).values()
    err = error_of(f)
    assert err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND, err


# --- records ---


def test_delete_records_moves_the_low_watermark(admin, admin_target):
    name = create_topic(admin, "adm-delrec")
    produce(admin_target.bootstrap, name, 20, partition=0)
    (f,) = admin.delete_records([TopicPartition(name, 0, 7)]).values()
    deleted = f.result(timeout=30)
    assert deleted.low_watermark == 7

    c = consumer(admin_target.bootstrap, at.unique("adm-delrec-g"))
    try:
        assert c.get_watermark_offsets(TopicPartition(name, 0), timeout=10) == (7, 20)
        c.subscribe([name])
        got = consume(c, 13)
        assert [m.offset() for m in got] == list(range(7, 20))
        assert [m.value() for m in got] == [f"v{i}".encode() for i in range(7, 20)]
    finally:
        c.close()

    earliest = admin.list_offsets(
        {TopicPartition(name, 0): OffsetSpec.earliest()}, request_timeout=20
    )
    latest = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.latest()}, request_timeout=20)
    assert next(iter(earliest.values())).result(timeout=30).offset == 7
    assert next(iter(latest.values())).result(timeout=30).offset == 20

    # Deleting below the low watermark changes nothing; past the high watermark is refused.
    (f,) = admin.delete_records([TopicPartition(name, 0, 3)]).values()
    assert f.result(timeout=30).low_watermark == 7
    (f,) = admin.delete_records([TopicPartition(name, 0, 21)]).values()
    err = error_of(f)
    assert err is not None and err.code() == KafkaError.OFFSET_OUT_OF_RANGE, err
    # -1 means "up to the high watermark".
    (f,) = admin.delete_records([TopicPartition(name, 0, -1)]).values()
    assert f.result(timeout=30).low_watermark == 20


def test_elect_preferred_leaders_when_already_preferred(admin):
    """After creation every partition's leader is its preferred (first) replica, so a preferred
    election has nothing to do: ELECTION_NOT_NEEDED per partition, the leaders unchanged."""
    name = create_topic(admin, "adm-elect", partitions=2)

    def preferred_everywhere():
        t = admin.list_topics(topic=name, timeout=10).topics[name]
        return all(p.leader == p.replicas[0] for p in t.partitions.values())

    wait_for("preferred leaders", preferred_everywhere)
    f = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(name, 0), TopicPartition(name, 1)]
    )
    res = f.result(timeout=30)
    assert sorted((tp.partition, e.code() if e else None) for tp, e in res.items()) == [
        (0, KafkaError.ELECTION_NOT_NEEDED),
        (1, KafkaError.ELECTION_NOT_NEEDED),
    ]
    assert preferred_everywhere()
