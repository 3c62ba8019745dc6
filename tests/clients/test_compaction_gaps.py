"""Issue 35: Fetch, ListOffsets (earliest, latest, by time), consumer groups and DeleteRecords
across the offset gaps of a compacted partition, with every client family the suite has:
librdkafka (confluent-kafka) and kafka-python (here), franz-go (tests/clients/go/admin/gaps),
sarama (tests/clients/go/sarama), and the Java client 3.9 and 4.x (vdl.clients.CompactionGaps).
Each family gets its own compacted topic (DeleteRecords changes it), made by compacted.py on
this module's own cluster, whose cleaner runs every 200 ms; the expectation (survivors at their
offsets, lookups, offsets inside gaps) is the same for all.
"""

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

import compacted
from conftest import REPO, running_cluster
from test_admin_go import go_binary

pytestmark = pytest.mark.timeout(300)

# The Java client versions checked (scripts/test-deps.sh prefetches the 4.x one as well).
JAVA_CLIENT_VERSIONS = ["3.9.2", "4.1.1"]


# Each family's own compacted topic (DeleteRecords changes it).
GAP_TOPICS = [
    "gaps-librdkafka",
    "gaps-franz-go",
    *[f"gaps-java-{v}" for v in JAVA_CLIENT_VERSIONS],
    "gaps-sarama",
    "gaps-kafka-python",
    "gaps-vdlctl",
]


@pytest.fixture(scope="module")
def gap_cluster():
    with running_cluster(extra_config=compacted.CLUSTER_CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def gap_topic(gap_cluster):
    """`gap_topic(name)`: the `Expectation` of the compacted topic `name` (one of GAP_TOPICS).
    Making one is mostly waiting (a segment roll, the cleaner of every replica), so all of
    them are made at once, in the background, when the first test asks for its own; each test
    waits only for its own topic (a failure to make it fails that test)."""
    pool = ThreadPoolExecutor(max_workers=len(GAP_TOPICS), thread_name_prefix="gap-topic")
    futures = {
        name: pool.submit(compacted.make_compacted_topic, gap_cluster, name) for name in GAP_TOPICS
    }
    try:
        yield lambda name: futures[name].result(timeout=compacted.COMPACTION_TIMEOUT_S + 120)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def consumer(bootstrap, group, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_records(c, want, timeout=30.0):
    """Polls until `want` records arrived (failing on an error or after `timeout`):
    [(offset, key, value or None, timestamp)]."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consume error: {m.error()}")
        v = m.value()
        got.append((m.offset(), m.key().decode(), None if v is None else v.decode(),
                    m.timestamp()[1]))
    assert len(got) == want, f"{len(got)} of {want} records within {timeout}s: {got}"
    return got


def test_librdkafka_across_gaps(gap_cluster, gap_topic):
    e = gap_topic("gaps-librdkafka")
    b = gap_cluster.bootstrap
    tp = TopicPartition(e.topic, 0)

    # Fetch from the beginning (offset 0 was removed): every survivor at its offset, no stall.
    assert e.survivors[0][0] > 0
    assert compacted.read_all(b, e.topic, e.end) == e.survivors

    # A group consumes the first half, commits an offset inside a gap, closes; a new member
    # finds that offset committed and resumes with the next survivor.
    group = f"g-{e.topic}"
    c = consumer(b, group)
    c.subscribe([e.topic])
    assert poll_records(c, len(e.before_commit)) == e.before_commit
    c.commit(offsets=[TopicPartition(e.topic, 0, e.commit_at)], asynchronous=False)
    c.close()
    c = consumer(b, group)
    try:
        (committed,) = c.committed([tp], timeout=10)
        assert committed.offset == e.commit_at
        c.subscribe([e.topic])
        assert poll_records(c, len(e.after_commit)) == e.after_commit
    finally:
        c.close()

    # ListOffsets: earliest (compaction does not move the log start), latest, by time (one
    # partition per request: a request naming a partition twice is not what clients send).
    c = consumer(b, f"lo-{e.topic}")
    try:

        def by_time(lookups):
            out = []
            for ts, _ in lookups:
                (r,) = c.offsets_for_times([TopicPartition(e.topic, 0, ts)], timeout=10)
                assert r.error is None, r.error
                out.append((ts, r.offset))
            return out

        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, e.end)
        assert by_time(e.by_time) == e.by_time

        # DeleteRecords to an offset inside a gap: the log start becomes that offset.
        admin = AdminClient({"bootstrap.servers": b})
        (res,) = admin.delete_records([TopicPartition(e.topic, 0, e.delete_to)]).values()
        assert res.result(timeout=20).low_watermark == e.delete_to
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (e.delete_to, e.end)
        assert by_time(e.by_time_after_delete) == e.by_time_after_delete
    finally:
        c.close()
    assert compacted.read_all(b, e.topic, e.end) == e.after_delete


def run_program(argv, expectation, tmp_path, timeout=150):
    """Runs a family's checker (`argv` + the expectation file); shows its output; it must end
    with "all checks passed"."""
    path = tmp_path / "expect.json"
    path.write_text(expectation.to_json())
    r = subprocess.run(argv + [str(path)], capture_output=True, text=True, timeout=timeout)
    print(r.stdout)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, f"checks failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert lines and lines[-1] == "all checks passed", r.stdout
    assert not [line for line in lines if line.startswith("FAIL")], r.stdout


def test_franz_go_across_gaps(gap_cluster, gap_topic, tmp_path):
    module = os.path.join(REPO, "tests", "clients", "go", "admin")
    prog = str(tmp_path / "gaps")
    r = subprocess.run(
        [go_binary(), "build", "-mod=readonly", "-o", prog, "./gaps"],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"go build failed:\n{r.stdout}\n{r.stderr}"
    e = gap_topic("gaps-franz-go")
    run_program([prog, "-bootstrap", gap_cluster.bootstrap, "-expect"], e, tmp_path)


@pytest.mark.parametrize("kafka_version", JAVA_CLIENT_VERSIONS)
def test_java_client_across_gaps(gap_cluster, gap_topic, tmp_path, kafka_version):
    """Kafka's Java client 3.9 and 4.x: tests/clients/java's pom with `kafka.version` set (the
    class path from Maven, offline: scripts/test-deps.sh prefetched both)."""
    proj = os.path.join(REPO, "tests", "clients", "java")
    cp_file = tmp_path / "classpath.txt"
    r = subprocess.run(
        ["mvn", "-B", "-q", "-o", "-f", os.path.join(proj, "pom.xml"),
         f"-Dkafka.version={kafka_version}",
         "dependency:build-classpath", f"-Dmdep.outputFile={cp_file}"],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, f"Maven class path (offline) failed:\n{r.stdout}\n{r.stderr}"
    cp = cp_file.read_text().strip()
    classes = tmp_path / "classes"
    src = os.path.join(proj, "src", "main", "java", "vdl", "clients")
    r = subprocess.run(
        ["javac", "--release", "17", "-d", str(classes), "-cp", cp,
         os.path.join(src, "CompactionGaps.java")],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, f"javac failed:\n{r.stdout}\n{r.stderr}"
    e = gap_topic(f"gaps-java-{kafka_version}")
    path = tmp_path / "expect.txt"
    path.write_text(e.to_lines())
    r = subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
         "-cp", f"{classes}:{cp}", "vdl.clients.CompactionGaps", gap_cluster.bootstrap,
         str(path)],
        capture_output=True, text=True, timeout=180,
    )
    print(r.stdout)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, f"checks failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert lines and lines[-1] == "all checks passed", r.stdout


def test_sarama_across_gaps(gap_cluster, gap_topic, tmp_path):
    module = os.path.join(REPO, "tests", "clients", "go", "sarama")
    prog = str(tmp_path / "sarama")
    r = subprocess.run(
        [go_binary(), "build", "-mod=readonly", "-o", prog, "."],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"go build failed:\n{r.stdout}\n{r.stderr}"
    e = gap_topic("gaps-sarama")
    run_program([prog, "-bootstrap", gap_cluster.bootstrap, "-expect"], e, tmp_path)


def test_kafka_python_across_gaps(gap_cluster, gap_topic):
    # Imported here: the other families' tests run without kafka-python (scripts/test-deps.sh
    # installs it into .venv).
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    e = gap_topic("gaps-kafka-python")
    servers = gap_cluster.bootstrap.split(",")
    tp = KTopicPartition(e.topic, 0)

    def kconsumer(group):
        return KafkaConsumer(
            bootstrap_servers=servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=1000,
        )

    def poll(c, want, timeout=30.0):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got += [
                    (r.offset, r.key.decode(), None if r.value is None else r.value.decode(),
                     r.timestamp)
                    for r in recs
                ]
        assert len(got) >= want, f"{len(got)} of {want} records within {timeout}s: {got}"
        return got[:want]

    def read_from_beginning(want):
        c = kconsumer(None)
        try:
            c.assign([tp])
            c.seek_to_beginning(tp)
            return poll(c, want)
        finally:
            c.close()

    assert read_from_beginning(len(e.survivors)) == e.survivors

    group = f"g-{e.topic}"
    c = kconsumer(group)
    c.subscribe([e.topic])
    assert poll(c, len(e.before_commit)) == e.before_commit
    c.commit({tp: OffsetAndMetadata(e.commit_at, "", -1)})
    c.close()
    c = kconsumer(group)
    try:
        assert c.committed(tp) == e.commit_at
        c.subscribe([e.topic])
        assert poll(c, len(e.after_commit)) == e.after_commit
    finally:
        c.close()

    def list_offsets(start, lookups):
        c = kconsumer(None)
        try:
            assert c.beginning_offsets([tp]) == {tp: start}
            assert c.end_offsets([tp]) == {tp: e.end}
            for ts, want in lookups:
                got = c.offsets_for_times({tp: ts})[tp]
                assert (got.offset if got is not None else -1) == want, (ts, got, want)
        finally:
            c.close()

    list_offsets(0, e.by_time)
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        res = admin.delete_records({tp: e.delete_to}, timeout_ms=20000)
        assert res[tp]["low_watermark"] == e.delete_to, res
    finally:
        admin.close()
    list_offsets(e.delete_to, e.by_time_after_delete)
    assert read_from_beginning(len(e.after_delete)) == e.after_delete


def test_vdlctl_shows_the_cleaner_figures(gap_cluster, gap_topic):
    """`vdlctl segment list` on a compacted partition shows the log cleaner's figures of the
    leader's replica, the same as that node's scrape; a topic that does not compact has none."""
    import json

    from ops_cluster import vdlctl_binary

    e = gap_topic("gaps-vdlctl")
    admin = f"127.0.0.1:{gap_cluster.base + 200}"

    def vdlctl(*args):
        r = subprocess.run([vdlctl_binary(), "--admin", admin, *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    doc = json.loads(vdlctl("segment", "list", e.topic, "0", "--json"))
    c = doc["cleaner"]
    sealed = sum(s["bytes"] for s in doc["segments"] if not s["active"])
    # Everything produced was cleaned: the first dirty offset is the log end, and the sealed
    # segments are clean bytes (or cleanable ones, if a roll sealed something since).
    assert c["first_dirty_offset"] == e.end, c
    assert c["cleaned_bytes"] > 0 and c["cleaned_bytes"] + c["cleanable_bytes"] == sealed, doc
    total = c["cleaned_bytes"] + c["cleanable_bytes"]
    assert abs(c["dirty_ratio"] - c["cleanable_bytes"] / total) < 1e-9, c
    assert abs(c["last_clean_ms"] / 1000 - time.time()) < 300, c

    # The scrape of the node that answered says the same.
    def metric(name):
        (v,) = compacted._node_metric_lines(gap_cluster, doc["node"], name, e.topic)
        return float(v)

    assert metric("vdl_partition_cleaned_bytes") == c["cleaned_bytes"]
    assert metric("vdl_partition_cleanable_bytes") == c["cleanable_bytes"]
    assert abs(metric("vdl_partition_dirty_ratio") - c["dirty_ratio"]) < 1e-9
    assert metric("vdl_partition_last_clean_timestamp_seconds") == c["last_clean_ms"] // 1000

    text = vdlctl("segment", "list", e.topic, "0")
    print(text)
    assert "log cleaner (cleanup.policy compact):" in text, text
    assert f"  first dirty offset  {e.end}\n" in text, text
    assert f"  cleaned bytes       {c['cleaned_bytes']}\n" in text, text
    assert " s ago)\n" in text, text

    # A topic that does not compact: no cleaner figures.
    from confluent_kafka.admin import NewTopic

    plain_admin = AdminClient({"bootstrap.servers": gap_cluster.bootstrap})
    fut = plain_admin.create_topics([NewTopic("gaps-plain", 1, 3)], request_timeout=20)
    fut["gaps-plain"].result(timeout=30)
    gap_cluster.leader("gaps-plain", timeout=20)
    assert "cleaner" not in json.loads(vdlctl("segment", "list", "gaps-plain", "0", "--json"))
    assert "log cleaner" not in vdlctl("segment", "list", "gaps-plain", "0")
