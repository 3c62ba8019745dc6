"""Issue 11, "Kafka's admin tooling works unmodified": Apache Kafka 3.9's own command-line tools,
run from the jars (`java -cp '.cache/kafka-3.9/libs/*' <main class>`, what the kafka-*.sh wrappers
do), against the cluster admin_target.py picks (ADMIN_TEST_TARGET=vdl|kafka). Each tool's
printed output is parsed and checked, not only its exit status. Every JVM start costs 1-2 s on
two cores, so the runs are few (28) and each is bounded by a timeout.
"""

import json
import os
import subprocess
import tempfile
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

import admin_target as at

pytestmark = pytest.mark.timeout(240)

NODES = at.NODES
TOPICS = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
CONFIGS = "kafka.admin.ConfigCommand"  # kafka-configs.sh
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"  # kafka-consumer-groups.sh
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"  # kafka-delete-records.sh
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"  # kafka-get-offsets.sh
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"  # kafka-leader-election.sh
TOOL_TIMEOUT_S = 60
# Tool logging: warnings and errors only, to stderr (the tools' own output is on stdout).
TOOLS_LOG4J = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n
"""


class Tools:
    """Runs Kafka's tools against one cluster."""

    def __init__(self, bootstrap, libs, log4j):
        self.bootstrap = bootstrap
        self.libs = libs
        self.log4j = log4j

    def run(self, main_class, *args, ok=True):
        """Runs `main_class` with --bootstrap-server and `args`; returns (exit status, stdout,
        stderr). With ok=True the exit status must be 0."""
        cmd = [
            "java",
            "-Xmx256m",
            # A short-lived client: quicker JVM start, no JIT beyond C1, one GC thread.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Dlog4j.configuration=file:{self.log4j}",
            "-cp",
            os.path.join(self.libs, "*"),
            main_class,
            "--bootstrap-server",
            self.bootstrap,
            *args,
        ]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
        if ok:
            assert r.returncode == 0, (
                f"{main_class} {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
            )
        return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def tools(admin_target):
    with tempfile.TemporaryDirectory(prefix="vdl-admin-tools-") as d:
        log4j = os.path.join(d, "tools-log4j.properties")
        with open(log4j, "w") as f:
            f.write(TOOLS_LOG4J)
        yield Tools(admin_target.bootstrap, at.kafka_libs(), log4j)


@pytest.fixture(scope="module")
def admin(admin_target):
    return AdminClient({"bootstrap.servers": admin_target.bootstrap})


def wait_for(what, check, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def parse_describe_topic(out):
    """kafka-topics --describe of one topic: (summary {key: value}, [partition {key: value}])."""
    summary, partitions = None, []
    for line in out.splitlines():
        fields = {}
        for part in line.strip().split("\t"):
            if ": " in part or part.endswith(":"):
                k, _, v = part.partition(":")
                fields[k.strip()] = v.strip()
        if "PartitionCount" in fields:
            summary = fields
        elif "Partition" in fields:
            partitions.append(fields)
    assert summary is not None, out
    return summary, partitions


def parse_table(out, first_header):
    """Rows of a table the consumer-groups tool prints (header line starting with
    `first_header`, columns separated by spaces) as dicts."""
    rows, header = [], None
    for line in out.splitlines():
        tokens = line.split()
        if tokens[:1] == [first_header]:
            header = tokens
        elif header and len(tokens) == len(header):
            rows.append(dict(zip(header, tokens, strict=True)))
    assert header is not None, out
    return rows


def describe_topic(tools, name, partitions):
    """kafka-topics --describe of `name`, parsed. The tool asks any one node, and a Kafka broker
    may learn of new partitions a moment after another: up to three tries until it shows
    `partitions` partitions (the caller asserts the count)."""
    for _ in range(3):
        _, out, _ = tools.run(TOPICS, "--describe", "--topic", name)
        summary, parts = parse_describe_topic(out)
        if summary["PartitionCount"] == str(partitions):
            break
        time.sleep(0.5)
    return summary, parts


def parse_unbroken_table(out, header):
    """Rows (lists of fields) of a table that Kafka 3.9 prints without line breaks between its
    rows (--reset-offsets, --delete-offsets): the tokens after `header` read len(header) at a time."""
    tokens = out.split()
    for i in range(len(tokens) - len(header) + 1):
        if tokens[i : i + len(header)] == header:
            rows = tokens[i + len(header) :]
            assert len(rows) % len(header) == 0, out
            return [rows[j : j + len(header)] for j in range(0, len(rows), len(header))]
    raise AssertionError(f"no table {header} in:\n{out}")


def parse_reset(out):
    """{partition: NEW-OFFSET} of --reset-offsets."""
    rows = parse_unbroken_table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
    return {int(r[2]): int(r[3]) for r in rows}


def parse_offsets(out):
    """{(topic, partition): offset} from kafka-get-offsets' topic:partition:offset lines."""
    res = {}
    for line in out.split():
        topic, p, off = line.rsplit(":", 2)
        res[(topic, int(p))] = int(off)
    return res


def test_kafka_topics_create_list_describe_alter_delete(tools, admin):
    name = at.unique("tool-topic")
    _, out, _ = tools.run(
        TOPICS,
        "--create",
        "--topic",
        name,
        "--partitions",
        "2",
        "--replication-factor",
        str(NODES),
        "--config",
        "retention.ms=3600000",
    )
    assert f"Created topic {name}." in out
    at.wait_topic_ready(admin, name, 2)

    _, out, _ = tools.run(TOPICS, "--list")
    assert name in out.split()

    summary, parts = describe_topic(tools, name, 2)
    assert summary["Topic"] == name
    assert summary["PartitionCount"] == "2" and summary["ReplicationFactor"] == str(NODES)
    # Configs lists the values that are not defaults: the one set at creation among them.
    assert "retention.ms=3600000" in summary["Configs"].split(","), summary
    assert sorted(int(p["Partition"]) for p in parts) == [0, 1]
    for p in parts:
        replicas = p["Replicas"].split(",")
        assert len(set(replicas)) == NODES, p
        assert p["Leader"] in replicas, p
        assert sorted(p["Isr"].split(",")) == sorted(replicas), p

    # Creating it again fails and says why.
    rc, out, err = tools.run(TOPICS, "--create", "--topic", name, "--partitions", "1", ok=False)
    assert rc != 0 and "already exists" in out + err, out + err

    tools.run(TOPICS, "--alter", "--topic", name, "--partitions", "4")
    at.wait_topic_ready(admin, name, 4)
    summary, parts = describe_topic(tools, name, 4)
    assert summary["PartitionCount"] == "4" and sorted(int(p["Partition"]) for p in parts) == [
        0,
        1,
        2,
        3,
    ]
    assert all(p["Leader"] in p["Replicas"].split(",") for p in parts), parts

    tools.run(TOPICS, "--delete", "--topic", name)
    wait_for(f"{name} deleted", lambda: name not in admin.list_topics(timeout=10).topics)


def test_kafka_configs_describe_add_delete(tools, admin):
    name = at.unique("tool-cfg")
    fs = admin.create_topics([NewTopic(name, 1, NODES, config={"retention.ms": "3600000"})])
    fs[name].result(timeout=30)
    at.wait_topic_ready(admin, name, 1)
    entity = ["--entity-type", "topics", "--entity-name", name]

    def dynamic_configs(keys):
        """{key: (value, rest of line)} of `kafka-configs --describe`; up to three tries until
        it lists exactly `keys` (the tool asks any one node, which may lag a moment)."""
        for _ in range(3):
            _, out, _ = tools.run(CONFIGS, "--describe", *entity)
            lines = out.splitlines()
            assert lines[0].strip() == f"Dynamic configs for topic {name} are:", out
            # "  key=value sensitive=false synonyms={SOURCE:name=value, ...}"
            res = {}
            for line in lines[1:]:
                key_value, _, rest = line.strip().partition(" sensitive=")
                k, _, v = key_value.partition("=")
                res[k] = (v, rest)
            if sorted(res) == sorted(keys):
                break
            time.sleep(0.5)
        return res

    wait_for(
        "retention.ms visible", lambda: _configs_of(admin, name).get("retention.ms") == "3600000"
    )
    cfg = dynamic_configs(["retention.ms"])
    assert list(cfg) == ["retention.ms"], cfg
    value, rest = cfg["retention.ms"]
    assert value == "3600000"
    # The first synonym is the topic's own setting.
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000" in rest, rest

    _, out, _ = tools.run(
        CONFIGS,
        "--alter",
        *entity,
        "--add-config",
        "retention.bytes=1048576,max.message.bytes=400000",
    )
    assert f"Completed updating config for topic {name}." in out
    _, out, _ = tools.run(CONFIGS, "--alter", *entity, "--delete-config", "retention.ms")
    assert f"Completed updating config for topic {name}." in out

    def altered():
        c = _configs_of(admin, name)
        return c.get("retention.bytes") == "1048576" and c.get("retention.ms") != "3600000"

    wait_for("altered configs visible", altered)
    cfg = dynamic_configs(["max.message.bytes", "retention.bytes"])
    assert sorted(cfg) == ["max.message.bytes", "retention.bytes"], cfg
    assert cfg["retention.bytes"][0] == "1048576" and cfg["max.message.bytes"][0] == "400000"
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.bytes=1048576" in cfg["retention.bytes"][1]

    # An unknown key is refused, and the error names it.
    rc, out, err = tools.run(CONFIGS, "--alter", *entity, "--add-config", "bogus.key=1", ok=False)
    assert rc != 0
    assert "InvalidConfigurationException" in out + err and "bogus.key" in out + err, out + err


def _configs_of(admin, topic):
    """{name: value} of `topic`'s configs ({} when not described yet)."""
    (f,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    try:
        return {k: v.value for k, v in f.result(timeout=30).items()}
    except KafkaException:
        return {}


def test_consumer_groups_records_offsets_and_elections(tools, admin, admin_target):
    """One topic of three partitions with ten records each, timestamps one second apart; a group
    with committed offsets 4/10/0. Then kafka-consumer-groups --describe (lag), kafka-delete-records,
    kafka-get-offsets, every kind of --reset-offsets, --delete-offsets, --delete (refused while a
    member is in the group), and kafka-leader-election."""
    name = at.unique("tool-grp")
    admin.create_topics([NewTopic(name, 3, NODES)])[name].result(timeout=30)
    at.wait_topic_ready(admin, name, 3)
    base_ms = (int(time.time()) - 3600) * 1000  # an hour ago, whole seconds
    p = Producer({"bootstrap.servers": admin_target.bootstrap, "acks": "all"})
    for part in range(3):
        for i in range(10):
            p.produce(
                name, value=f"{part}-{i}".encode(), partition=part, timestamp=base_ms + i * 1000
            )
    assert p.flush(30) == 0
    group = at.unique("tool-grp-g")
    c = Consumer(
        {
            "bootstrap.servers": admin_target.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    c.commit(
        offsets=[
            TopicPartition(name, 0, 4),
            TopicPartition(name, 1, 10),
            TopicPartition(name, 2, 0),
        ],
        asynchronous=False,
    )
    c.close()

    _, out, _ = tools.run(GROUPS, "--list")
    assert group in out.split()

    _, out, _ = tools.run(GROUPS, "--describe", "--group", group)
    rows = parse_table(out, "GROUP")
    lag = {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows}
    assert lag == {0: ("4", "10", "6"), 1: ("10", "10", "0"), 2: ("0", "10", "10")}, out
    assert all(
        r["GROUP"] == group and r["TOPIC"] == name and r["CONSUMER-ID"] == "-" for r in rows
    ), out

    # kafka-delete-records: partition 2 up to offset 3; partition 1 past its end is refused.
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(
            {
                "version": 1,
                "partitions": [
                    {"topic": name, "partition": 2, "offset": 3},
                    {"topic": name, "partition": 1, "offset": 11},
                ],
            },
            f,
        )
        f.flush()
        _, out, _ = tools.run(DELETE_RECORDS, "--offset-json-file", f.name)
    assert f"partition: {name}-2\tlow_watermark: 3" in out, out
    assert (
        f"partition: {name}-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException"
        in out
    ), out

    # kafka-get-offsets: latest by default, earliest with --time -2 (the new low watermark).
    _, out, _ = tools.run(GET_OFFSETS, "--topic", name)
    assert parse_offsets(out) == {(name, 0): 10, (name, 1): 10, (name, 2): 10}, out
    _, out, _ = tools.run(GET_OFFSETS, "--topic-partitions", f"{name}:0,{name}:2", "--time", "-2")
    assert parse_offsets(out) == {(name, 0): 0, (name, 2): 3}, out

    # --reset-offsets: to the earliest (partition 2's low watermark is 3 now), by a shift, and to
    # a point in time (the first record at or after it).
    _, out, _ = tools.run(
        GROUPS, "--reset-offsets", "--group", group, "--topic", name, "--to-earliest", "--execute"
    )
    assert parse_reset(out) == {0: 0, 1: 0, 2: 3}, out
    _, out, _ = tools.run(
        GROUPS,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{name}:1",
        "--shift-by",
        "4",
        "--execute",
    )
    assert parse_reset(out) == {1: 4}, out
    when = datetime.fromtimestamp((base_ms + 5500) / 1000, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f"
    )[:-3]
    _, out, _ = tools.run(
        GROUPS,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{name}:0,2",
        "--to-datetime",
        when + "Z",
        "--execute",
    )
    assert parse_reset(out) == {0: 6, 2: 6}, out
    _, out, _ = tools.run(GROUPS, "--describe", "--group", group)
    rows = parse_table(out, "GROUP")
    assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LAG"])) for r in rows} == {
        0: (6, 4),
        1: (4, 6),
        2: (6, 4),
    }, out

    # --delete-offsets (OffsetDelete) for partition 1 only.
    _, out, _ = tools.run(GROUPS, "--delete-offsets", "--group", group, "--topic", f"{name}:1")
    rows = parse_unbroken_table(out, ["TOPIC", "PARTITION", "STATUS"])
    assert rows == [[name, "1", "Successful"]], out
    (fut,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(name, i) for i in range(3)])]
    ).values()
    got = {tp.partition: tp.offset for tp in fut.result(timeout=30).topic_partitions}
    assert got == {0: 6, 1: -1001, 2: 6}, got

    # --delete: refused while a member is in the group, done once it left.
    member = Consumer(
        {
            "bootstrap.servers": admin_target.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    try:
        member.subscribe([name])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "no assignment within 30 s"
        _, out, _ = tools.run(GROUPS, "--describe", "--group", group, "--members")
        rows = parse_table(out, "GROUP")
        assert len(rows) == 1 and rows[0]["#PARTITIONS"] == "3", out
        _, out, err = tools.run(GROUPS, "--delete", "--group", group, ok=False)
        assert "The group is not empty" in out + err or "NonEmptyGroupException" in out + err, (
            out + err
        )
    finally:
        member.close()
    _, out, _ = tools.run(GROUPS, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out, out
    _, out, _ = tools.run(GROUPS, "--list")
    assert group not in out.split()

    # kafka-leader-election: every leader is already the preferred one.
    _, out, err = tools.run(ELECTION, "--election-type", "preferred", "--all-topic-partitions")
    assert "Error" not in out + err and "Exception" not in out + err, out + err
    _, out, _ = tools.run(
        ELECTION, "--election-type", "preferred", "--topic", name, "--partition", "0"
    )
    assert f"Valid replica already elected for partitions {name}-0" in out, out
