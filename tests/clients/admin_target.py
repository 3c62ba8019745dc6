"""The cluster the admin-tooling tests (issue 11: test_admin.py, test_admin_tools.py,
test_admin_go.py) run against, chosen by ADMIN_TEST_TARGET:

  vdl    (default) the three-node vdl cluster of conftest.py's `cluster` fixture
  kafka  a three-node Apache Kafka 3.9 KRaft cluster (scripts/kafka/kafka-cluster.sh, jars
         from scripts/kafka/fetch-kafka.sh), on free ports in a temporary directory, stopped by
         the PIDs that script recorded and removed afterwards

`start_kafka(KAFKA4_VERSION)` starts Apache Kafka 4.1 the same way (the consumer group protocol
tests, test_consumer_protocol.py).

The same assertions run against both: they were proven against Kafka first, so a failure
against vdl is vdl's. Where the two are meant to differ, the test asks `target.kind`.
"""

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

from lanes import port_range

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KAFKA_SCRIPT = os.path.join(REPO, "scripts", "kafka", "kafka-cluster.sh")
FETCH_KAFKA = os.path.join(REPO, "scripts", "kafka", "fetch-kafka.sh")
NODES = 3
# The Kafka 4 release the consumer group protocol (KIP-848) tests compare vdl with.
KAFKA4_VERSION = "4.1.1"


def target_kind():
    """`kafka` or `vdl` (ADMIN_TEST_TARGET; default vdl). Anything else is a usage error."""
    kind = os.environ.get("ADMIN_TEST_TARGET", "vdl")
    if kind not in ("kafka", "vdl"):
        raise ValueError(f"ADMIN_TEST_TARGET must be kafka or vdl, not {kind!r}")
    return kind


def kafka_libs(version=None):
    """The directory of the Apache Kafka jars, 3.9 or `version` (fetched into .cache when
    missing)."""
    env = dict(os.environ, KAFKA_VERSION=version) if version else None
    r = subprocess.run(
        [FETCH_KAFKA], capture_output=True, text=True, timeout=600, check=True, env=env
    )
    return r.stdout.strip().splitlines()[-1]


def ports_free(ports):
    """Whether every port in `ports` can be bound on 127.0.0.1 now."""
    socks = []
    try:
        for p in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def _free_kafka_base():
    """A base port B with B..B+2 (clients) and B+10..B+12 (controllers) free, as
    kafka-cluster.sh lays them out."""
    rng = random.Random()
    for _ in range(200):
        # Below Linux's ephemeral range (32768 and up): a port found free there can be taken
        # by some connection's local end before the JVM binds it (seen in CI: a broker
        # exited during startup).
        base = rng.randrange(*port_range(12000, 20000))
        if ports_free([base + off + i for off in (0, 10) for i in range(NODES)]):
            return base
    raise RuntimeError("no free port range found")


class KafkaCluster:
    """A running three-broker Apache Kafka cluster (3.9, or `version`) started by
    kafka-cluster.sh."""

    kind = "kafka"

    def __init__(self, data_dir, base, version=None):
        self.data_dir = data_dir
        self.base = base
        self.version = version
        self.bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(NODES))

    def _script(self, *args, timeout):
        return subprocess.run(
            [KAFKA_SCRIPT, *args, "--dir", self.data_dir],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, KAFKA_START_TIMEOUT="150", KAFKA_STOP_TIMEOUT="20"),
        )

    def start(self):
        version = ["--kafka-version", self.version] if self.version else []
        r = self._script(
            "start", "--brokers", str(NODES), "--base-port", str(self.base), *version, timeout=300
        )
        if r.returncode != 0:
            raise RuntimeError(f"kafka-cluster.sh start failed:\n{r.stdout}\n{r.stderr}")
        assert r.stdout.strip().splitlines()[-1] == self.bootstrap, r.stdout

    def stop(self):
        # Stops the brokers by the PIDs the script recorded, then removes their data.
        self._script("stop", "--clean", timeout=120)


class VdlTarget:
    """The vdl session cluster (conftest.Cluster) seen through the same interface."""

    kind = "vdl"

    def __init__(self, cluster):
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap


class RunningTarget:
    """A three-node cluster someone else started and stops (ADMIN_TEST_BOOTSTRAP)."""

    def __init__(self, kind, bootstrap):
        self.kind = kind
        self.bootstrap = bootstrap


def start_kafka(version=None):
    """Starts a Kafka cluster (3.9, or `version`, e.g. KAFKA4_VERSION) in a fresh temporary
    directory; returns (cluster, cleanup)."""
    data_dir = tempfile.mkdtemp(prefix="vdl-admin-kafka-")
    k = KafkaCluster(data_dir, _free_kafka_base(), version)

    def cleanup():
        try:
            k.stop()
        finally:
            if os.environ.get("VDL_KEEP") == "1":
                print(f"\nkafka cluster data kept in {data_dir}")
            else:
                shutil.rmtree(data_dir, ignore_errors=True)

    try:
        k.start()
    except BaseException:
        cleanup()
        raise
    return k, cleanup


def unique(prefix):
    """A name no earlier run used: prefix plus random hex."""
    return f"{prefix}-{random.randrange(1 << 40):x}"


def wait_topic_ready(admin, topic, partitions, replicas=NODES, timeout=30.0, in_a_row=3):
    """Waits until `topic` has `partitions` partitions, each with a leader and a full ISR, in
    `in_a_row` consecutive Metadata answers (each may come from another node: a Kafka broker
    learns of a new topic from the metadata log a moment after the controller created it);
    returns the last TopicMetadata. Raises AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last, good = None, 0
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        ready = (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == replicas for p in t.partitions.values())
        )
        good = good + 1 if ready else 0
        if good >= in_a_row:
            return t
        last = t
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready within {timeout}s: {last}")
