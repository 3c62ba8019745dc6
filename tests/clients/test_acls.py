"""Issue 12, authorization and users: a three-node PLAINTEXT cluster with `authorizer = "acl"`,
where every client is `User:ANONYMOUS`, managed with Apache Kafka 3.9's own `kafka-acls.sh`
(kafka.admin.AclCommand) and `kafka-configs.sh` (kafka.admin.ConfigCommand), run from the cached
jars as test_admin_tools.py runs them, and used with confluent-kafka.

Bootstrap: the cluster first starts with `User:ANONYMOUS` as a super user, creates the topics
and lets ANONYMOUS manage ACLs and users (ALTER, DESCRIBE, DESCRIBE_CONFIGS on the cluster) and
use the consumer groups `g-acl-*` (READ);
then it restarts on the same data without super users, so these ACLs come back from the
replicated metadata, and ANONYMOUS can do nothing else until `kafka-acls.sh --add` allows it.
"""

import os
import random
import re
import tempfile
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import admin_target as at
from conftest import NODES, running_cluster
from test_admin_tools import TOOLS_LOG4J, Tools

pytestmark = pytest.mark.timeout(420)

ACLS = "kafka.admin.AclCommand"  # kafka-acls.sh
CONFIGS = "kafka.admin.ConfigCommand"  # kafka-configs.sh
ANONYMOUS = "User:ANONYMOUS"
# The Kafka port is PLAINTEXT (every client is User:ANONYMOUS); the admin API, which requires
# authentication by default once the authorizer is on, admits anonymous calls here and checks
# them against the ACLs like the Kafka port (ANONYMOUS gets DESCRIBE on the cluster below).
ANONYMOUS_ADMIN = "\n[admin]\nrequire_auth = false\n"
BOOTSTRAP_CONFIG = (
    '[security]\nauthorizer = "acl"\nsuper_users = ["User:ANONYMOUS"]\n' + ANONYMOUS_ADMIN
)
ACL_CONFIG = '[security]\nauthorizer = "acl"\nsuper_users = ["User:admin"]\n' + ANONYMOUS_ADMIN
SUFFIX = f"{random.randrange(1 << 30):x}"
TOPIC = f"acl-orders-{SUFFIX}"
PREFIXED = f"pre-{SUFFIX}-events"
OTHER = f"other-{SUFFIX}"


@pytest.fixture(scope="module")
def acl_cluster():
    with running_cluster(BOOTSTRAP_CONFIG) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=1, replication_factor=NODES) for t in (TOPIC, PREFIXED, OTHER)],
            request_timeout=20,
        )
        for f in futures.values():
            f.result(timeout=30)
        with tempfile.TemporaryDirectory(prefix="vdl-acl-tools-") as d:
            log4j = os.path.join(d, "tools-log4j.properties")
            with open(log4j, "w") as f:
                f.write(TOOLS_LOG4J)
            tools = Tools(c.bootstrap, at.kafka_libs(), log4j)
            tools.run(
                ACLS,
                "--add",
                "--allow-principal",
                ANONYMOUS,
                "--operation",
                "Alter",
                "--operation",
                "Describe",
                "--operation",
                "DescribeConfigs",
                "--cluster",
            )
            # Consumers need their group (FindCoordinator, offsets): READ on the test's groups,
            # so what is refused below is the topics.
            tools.run(
                ACLS,
                "--add",
                "--allow-principal",
                ANONYMOUS,
                "--operation",
                "Read",
                "--group",
                "g-acl-",
                "--resource-pattern-type",
                "prefixed",
            )
            c.restart(ACL_CONFIG)
            for t in (TOPIC, PREFIXED, OTHER):
                c.leader(t, timeout=30)
            yield c, tools


def produce(bootstrap, topic, value, timeout=20.0):
    """Produces one message; returns the delivery error code (None when delivered)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": int(timeout * 1000),
            "enable.idempotence": False,
            "acks": "all",
        }
    )
    outcome = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(timeout + 5)
    assert len(outcome) == 1, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def consume_first(bootstrap, topic, timeout=20.0, subscribe=False):
    """Reads partition 0 from the beginning, assigned (or subscribed in a group): ("message",
    value) or ("error", code)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-acl-{SUFFIX}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        if subscribe:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return ("error", m.error().code())
            return ("message", m.value())
        return ("timeout", None)
    finally:
        c.close()


def listed_topics(bootstrap):
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


def eventually(what, check, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def acl_list(tools, *resource):
    """`kafka-acls.sh --list` of `resource` (e.g. "--topic", name): {pattern: [entry, ...]}."""
    _, out, _ = tools.run(ACLS, "--list", *resource)
    acls, current = {}, None
    for line in out.splitlines():
        m = re.match(r"Current ACLs for resource `(ResourcePattern\(.*\))`:", line.strip())
        if m:
            current = m.group(1)
            acls[current] = []
        elif current and line.strip().startswith("(principal="):
            acls[current].append(line.strip())
    return acls


def pattern(name, kind="TOPIC", pattern_type="LITERAL"):
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern_type})"


def entry(operation, permission="ALLOW"):
    return f"(principal={ANONYMOUS}, host=*, operation={operation}, permissionType={permission})"


def test_without_acls_produce_and_fetch_are_refused_and_topics_hidden(acl_cluster):
    c, _ = acl_cluster
    assert produce(c.bootstrap, OTHER, b"x", timeout=10) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The consumer learns it from Metadata (the topic is not even described to it).
    assert consume_first(c.bootstrap, OTHER, timeout=15, subscribe=True) == (
        "error",
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    topics = listed_topics(c.bootstrap)
    assert OTHER not in topics and TOPIC not in topics, topics


def test_kafka_acls_add_allows_deny_wins_remove_restores(acl_cluster):
    c, tools = acl_cluster
    assert produce(c.bootstrap, TOPIC, b"x", timeout=10) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _, out, _ = tools.run(
        ACLS,
        "--add",
        "--allow-principal",
        ANONYMOUS,
        "--operation",
        "Write",
        "--topic",
        TOPIC,
    )
    assert f"Adding ACLs for resource `{pattern(TOPIC)}`" in out, out
    # Every node applies the ACL: the producer (which talks to the leader) gets through.
    eventually("produce allowed", lambda: produce(c.bootstrap, TOPIC, b"allowed") is None)
    # WRITE implies DESCRIBE, not READ: the Fetch itself is refused.
    assert consume_first(c.bootstrap, TOPIC, timeout=15) == (
        "error",
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    tools.run(ACLS, "--add", "--allow-principal", ANONYMOUS, "--operation", "Read", "--topic", TOPIC)
    eventually("fetch allowed", lambda: consume_first(c.bootstrap, TOPIC, timeout=5)[0] == "message")
    assert consume_first(c.bootstrap, TOPIC, subscribe=True) == ("message", b"allowed")
    eventually("topic listed", lambda: TOPIC in listed_topics(c.bootstrap))

    listed = acl_list(tools, "--topic", TOPIC)
    assert sorted(listed[pattern(TOPIC)]) == sorted([entry("WRITE"), entry("READ")]), listed

    # A DENY of WRITE wins over the ALLOW; READ stays allowed.
    tools.run(ACLS, "--add", "--deny-principal", ANONYMOUS, "--operation", "Write", "--topic", TOPIC)
    eventually(
        "deny applied",
        lambda: produce(c.bootstrap, TOPIC, b"denied", timeout=8)
        == KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    assert consume_first(c.bootstrap, TOPIC) == ("message", b"allowed")

    _, out, _ = tools.run(
        ACLS,
        "--remove",
        "--force",
        "--deny-principal",
        ANONYMOUS,
        "--operation",
        "Write",
        "--topic",
        TOPIC,
    )
    listed = acl_list(tools, "--topic", TOPIC)
    assert entry("WRITE", "DENY") not in listed[pattern(TOPIC)], listed
    eventually("deny removed", lambda: produce(c.bootstrap, TOPIC, b"again") is None)


def test_prefixed_acls_cover_names_with_the_prefix_only(acl_cluster):
    c, tools = acl_cluster
    prefix = f"pre-{SUFFIX}-"
    tools.run(
        ACLS,
        "--add",
        "--allow-principal",
        ANONYMOUS,
        "--operation",
        "All",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    eventually("prefixed allow applied", lambda: produce(c.bootstrap, PREFIXED, b"p") is None)
    assert produce(c.bootstrap, OTHER, b"x", timeout=8) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    eventually("prefixed topic listed", lambda: PREFIXED in listed_topics(c.bootstrap))
    assert OTHER not in listed_topics(c.bootstrap)

    listed = acl_list(tools, "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert listed == {pattern(prefix, pattern_type="PREFIXED"): [entry("ALL")]}, listed
    # --list without a resource shows every ACL, the cluster's from before the restart too.
    everything = acl_list(tools)
    assert entry("ALTER") in everything[pattern("kafka-cluster", kind="CLUSTER")], everything
    assert pattern(prefix, pattern_type="PREFIXED") in everything

    tools.run(
        ACLS,
        "--remove",
        "--force",
        "--allow-principal",
        ANONYMOUS,
        "--operation",
        "All",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    assert acl_list(tools, "--topic", prefix, "--resource-pattern-type", "prefixed") == {}
    eventually(
        "prefixed allow removed",
        lambda: produce(c.bootstrap, PREFIXED, b"p", timeout=8)
        == KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )


def test_kafka_configs_manages_scram_credentials(acl_cluster):
    _, tools = acl_cluster
    user = f"alice-{SUFFIX}"
    _, out, _ = tools.run(
        CONFIGS,
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
        "--entity-type",
        "users",
        "--entity-name",
        user,
    )
    assert f"Completed updating config for user {user}." in out, out
    _, out, _ = tools.run(CONFIGS, "--describe", "--entity-type", "users", "--entity-name", user)
    assert (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=8192"
        in out
    ), out
    # (Iterations outside 4096..=16384 never reach the server: the tool refuses them itself;
    # the server's UNACCEPTABLE_CREDENTIAL is checked in crates/server/tests/kafka_acls.rs.)
    _, out, _ = tools.run(
        CONFIGS,
        "--alter",
        "--delete-config",
        "SCRAM-SHA-512",
        "--entity-type",
        "users",
        "--entity-name",
        user,
    )
    assert f"Completed updating config for user {user}." in out, out
    _, out, _ = tools.run(CONFIGS, "--describe", "--entity-type", "users", "--entity-name", user)
    assert "SCRAM-SHA-512" not in out, out
