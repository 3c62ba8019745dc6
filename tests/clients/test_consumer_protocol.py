"""confluent-kafka (librdkafka 2.16) with the consumer group protocol of Kafka 4 (KIP-848,
issue 37: `group.protocol=consumer`), against vdl (the session cluster of conftest.py) and
against Apache Kafka 4.1 (three KRaft brokers from scripts/kafka/kafka-cluster.sh, jars from
Maven Central), with the same assertions:

- members join and leave a 6-partition topic while numbered records flow (A; B joins; C joins;
  B closes; D joins): after each step the group converges (every partition owned once, sizes
  within one, the described assignments equal their targets), and the on_assign/on_revoke
  callbacks show that a member revoked only partitions it lost and got only partitions it
  gained (a member keeping its partitions sees no callback: no stop-the-world), nothing lost;
- every record processed exactly once across the clean handovers (each member commits what it
  processed every 500 ms and, as users do, on revocation);
- AdminClient: describe_consumer_groups shows type CONSUMER, state STABLE, assignor "uniform"
  and the members with their assignments; list_consumer_groups with the type filter CONSUMER
  lists the group, with CLASSIC does not;
- Kafka 4.1's kafka-consumer-groups.sh (ConsumerGroupCommand) --describe shows the group, its
  members with their epochs and assignments, and its state;
- `group.remote.assignor=range`: described with assignor "range", two members with three
  consecutive partitions each;
- a member with group.protocol=classic and one with group.protocol=consumer in one group (the
  classic one a member of the consumer group, assigned by the server-side assignor through
  JoinGroup/SyncGroup): they converge to 3/3, the group described as CONSUMER; the classic one
  closes and the other gets all 6.

KAFKA4_BOOTSTRAP=host:port,... uses a running three-node Kafka 4.1 cluster instead of starting
one. Every wait is bounded.
"""

import os
import subprocess
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

import admin_target as at

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
STEP_TIMEOUT_S = 45
PRODUCE_EVERY_S = 0.01
MAX_RECORDS = 30000
GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TOOLS_LOG4J2 = """status = warn
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
"""


@pytest.fixture(scope="module", params=["vdl", "kafka4"])
def target(request):
    """The cluster under test: vdl's session cluster, or Apache Kafka 4.1."""
    if request.param == "vdl":
        yield at.VdlTarget(request.getfixturevalue("cluster"))
        return
    if os.environ.get("KAFKA4_BOOTSTRAP"):
        yield at.RunningTarget("kafka", os.environ["KAFKA4_BOOTSTRAP"])
        return
    k, cleanup = at.start_kafka(at.KAFKA4_VERSION)
    try:
        yield k
    finally:
        cleanup()


def new_topic(target):
    name = at.unique("cgp")
    a = AdminClient({"bootstrap.servers": target.bootstrap})
    a.create_topics([NewTopic(name, PARTITIONS, at.NODES)], request_timeout=20)[name].result(
        timeout=30
    )
    at.wait_topic_ready(a, name, PARTITIONS)
    return name


class RecordStream:
    """Numbered records ("0", "1", ...; record i on partition i mod 6), written at a steady pace
    by a thread of its own until stopped (at most MAX_RECORDS)."""

    def __init__(self, bootstrap, topic):
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        self.topic = topic
        self.sent = 0
        self.errors = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        def cb(err, msg):
            if err is not None:
                self.errors.append(err)

        i = 0
        while i < MAX_RECORDS and not self.stop_flag.is_set():
            try:
                self.p.produce(self.topic, value=str(i).encode(), partition=i % PARTITIONS,
                               on_delivery=cb)
            except BufferError:
                self.p.poll(0.1)
                continue
            i += 1
            self.sent = i
            self.p.poll(0)
            time.sleep(PRODUCE_EVERY_S)

    def finish(self, at_least):
        """Stops once at least `at_least` records are out; returns how many were sent, all
        delivered."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while self.sent < at_least and self.thread.is_alive():
            assert time.monotonic() < deadline, f"the producer did not reach {at_least}"
            time.sleep(0.05)
        self.stop_flag.set()
        self.thread.join(10)
        assert self.p.flush(60) == 0, "records not delivered in time"
        assert self.errors == [], f"delivery errors: {self.errors[:5]}"
        return self.sent


class Member:
    """A consumer of the group (group.protocol=consumer unless told), polled by the test's
    thread, and what its rebalance callbacks saw."""

    def __init__(
        self, name, bootstrap, group, topic, processed, assignor=None, protocol="consumer"
    ):
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self._on_error,
        }
        if assignor:
            conf["group.remote.assignor"] = assignor
        self.name = name
        self.errors = []  # the client's error events (the last few), for failure messages
        self.topic = topic
        self.processed = processed
        self.events = []
        self.next = {}  # partition -> the offset after the last record processed
        self.stale_commits = 0
        self.last_commit = time.monotonic()
        self.c = Consumer(conf)
        self.c.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _on_error(self, err):
        self.errors = (self.errors + [str(err)])[-3:]

    def _note(self, kind, parts):
        if parts:
            self.events.append((kind, frozenset(p.partition for p in parts)))

    def _on_assign(self, consumer, parts):
        self._note("assigned", parts)

    def _on_revoke(self, consumer, parts):
        self._note("revoked", parts)
        # Commit what was processed of the partitions going away: their next owner starts right
        # after it, so the handover loses and repeats nothing.
        done = [
            TopicPartition(self.topic, p.partition, self.next.pop(p.partition))
            for p in parts
            if p.partition in self.next
        ]
        deadline = time.monotonic() + 10
        while done:
            try:
                consumer.commit(offsets=done, asynchronous=False)
                break
            except KafkaException:
                # STALE_MEMBER_EPOCH: the commit went out with the epoch the member had just
                # before a heartbeat moved it (Kafka 4.1 takes commits at the current member
                # epoch only); the retry carries the new one.
                self.stale_commits += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _on_lost(self, consumer, parts):
        self._note("lost", parts)
        for p in parts:
            self.next.pop(p.partition, None)

    def poll(self):
        m = self.c.poll(0.02)
        if m is not None and m.error() is None:
            self.processed[int(m.value())] += 1
            self.next[m.partition()] = m.offset() + 1
        elif m is not None:
            if m.error().fatal():
                raise AssertionError(f"member {self.name}: {m.error()}")
            self._on_error(m.error())
        if time.monotonic() - self.last_commit > 0.5 and self.next:
            self.last_commit = time.monotonic()
            try:
                self.commit_processed()
            except KafkaException:
                # Kafka 4.1 answers STALE_MEMBER_EPOCH to a commit sent with the epoch the member
                # had just before the coordinator bumped it; the next round commits again.
                self.stale_commits += 1

    def commit_processed(self):
        offsets = [TopicPartition(self.topic, p, o) for p, o in self.next.items()]
        self.c.commit(offsets=offsets, asynchronous=False)

    def owned(self):
        return frozenset(tp.partition for tp in self.c.assignment())

    def close(self, others):
        """Commits what it processed and leaves the group cleanly (close), the others polled
        meanwhile."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while self.next:
            try:
                self.commit_processed()
                break
            except KafkaException as e:
                assert time.monotonic() < deadline, f"member {self.name}: commit failed: {e}"
                poll_all([self] + others)
        self.c.close()


def poll_all(members):
    for m in members:
        m.poll()


def owners(live):
    return {name: m.owned() for name, m in live.items()}


def covers_evenly(owned):
    sizes = [len(s) for s in owned.values()]
    union = frozenset().union(*owned.values()) if owned else frozenset()
    return sum(sizes) == PARTITIONS and len(union) == PARTITIONS and max(sizes) - min(sizes) <= 1


def describe(admin, group):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def agrees(desc, live, assignor):
    """Whether the coordinator's description matches the members: STABLE, `assignor`, the same
    member ids, each at its target assignment, the one its consumer has."""
    if (
        desc.state != ConsumerGroupState.STABLE
        or desc.partition_assignor != assignor
        or len(desc.members) != len(live)
    ):
        return False
    by_id = {m.c.memberid(): m.owned() for m in live.values()}
    for md in desc.members:
        assigned = frozenset(tp.partition for tp in md.assignment.topic_partitions)
        if md.target_assignment is None:
            return False
        target = frozenset(tp.partition for tp in md.target_assignment.topic_partitions)
        if assigned != target or by_id.get(md.member_id) != assigned:
            return False
    return True


def converge(admin, group, live, assignor):
    """Polls every live member until they own every partition once, evenly, and the group's
    description agrees; returns {name: partitions}."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    last_check, last = 0.0, None
    while True:
        poll_all(live.values())
        if time.monotonic() - last_check > 0.3:
            last_check = time.monotonic()
            owned = owners(live)
            errors = {n: m.errors for n, m in live.items() if m.errors}
            last = f"owned {owned}" + (f"; client errors {errors}" if errors else "")
            if covers_evenly(owned):
                try:
                    desc = describe(admin, group)
                except KafkaException as e:
                    desc, last = None, last + f"; describe failed: {e}"
                if desc is not None:
                    last += f"; described state {desc.state}, assignor {desc.partition_assignor}"
                    if agrees(desc, live, assignor):
                        return owned
        assert time.monotonic() < deadline, f"the group did not converge: {last}"


def check_only_moved_partitions(change, live, before, after, marks):
    """In a step, a member revoked only partitions it owned before and not after, and was
    assigned only partitions it owns after and not before; nothing was lost."""
    for name, m in live.items():
        was, now = before.get(name, frozenset()), after[name]
        for kind, parts in m.events[marks.get(name, 0):]:
            allowed = {"revoked": was - now, "assigned": now - was}.get(kind, frozenset())
            assert parts <= allowed, (
                f"{change}: member {name} had {kind} {sorted(parts)} (owned {sorted(was)} "
                f"before, {sorted(now)} after): only moved partitions may be revoked or assigned"
            )
    assert before != after, f"{change}: no partition moved: {before}"


def groups_tool(target, log4j2, *args):
    """Kafka 4.1's kafka-consumer-groups.sh with `args` (log4j2: its logging config file);
    returns its stdout (exit status 0)."""
    libs = at.kafka_libs(at.KAFKA4_VERSION)
    cmd = [
        "java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile=file:{log4j2}", "-cp", os.path.join(libs, "*"),
        GROUPS_TOOL, "--bootstrap-server", target.bootstrap, *args,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"kafka-consumer-groups.sh {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_members_join_and_leave_while_records_flow(target, tmp_path):
    topic = new_topic(target)
    group = topic + "-group"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    processed = Counter()
    live, everyone = {}, []
    stream = RecordStream(target.bootstrap, topic)
    try:
        for change in ["+A", "+B", "+C", "-B", "+D"]:
            name = change[1:]
            before = owners(live)
            marks = {n: len(m.events) for n, m in live.items()}
            started = time.monotonic()
            if change[0] == "+":
                live[name] = Member(name, target.bootstrap, group, topic, processed)
                everyone.append(live[name])
            else:
                leaving = live.pop(name)
                leaving.close(list(live.values()))
            after = converge(admin, group, live, "uniform")
            check_only_moved_partitions(change, live, before, after, marks)
            print(f"\n{target.kind}: {change} converged in {time.monotonic() - started:.1f} s: "
                  f"{ {n: sorted(p) for n, p in after.items()} }")

        desc = describe(admin, group)
        assert desc.type == ConsumerGroupType.CONSUMER, desc
        assert desc.state == ConsumerGroupState.STABLE, desc
        assert desc.partition_assignor == "uniform", desc
        assert sorted(m.client_id for m in desc.members) == ["A", "C", "D"], desc
        listed = admin.list_consumer_groups(
            types={ConsumerGroupType.CONSUMER}, request_timeout=10
        ).result(timeout=15)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].type == ConsumerGroupType.CONSUMER, listed.valid
        classic = admin.list_consumer_groups(
            types={ConsumerGroupType.CLASSIC}, request_timeout=10
        ).result(timeout=15)
        assert all(g.group_id != group for g in classic.valid), classic.valid

        # Kafka's own tool, run in a thread: the members are polled here meanwhile (a member
        # that stops polling stops reconciling its assignment).
        outputs = {}
        log4j2 = tmp_path / "tools-log4j2.properties"
        log4j2.write_text(TOOLS_LOG4J2)
        views = {"members": ["--members", "--verbose"], "state": ["--state"], "offsets": []}

        def tool(view):
            outputs[view] = groups_tool(target, log4j2, "--describe", "--group", group,
                                        *views[view])

        threads = [threading.Thread(target=tool, args=(v,), daemon=True) for v in views]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 150
        while any(t.is_alive() for t in threads):
            poll_all(live.values())
            assert time.monotonic() < deadline, "kafka-consumer-groups.sh did not finish"
        assert set(outputs) == set(views), "kafka-consumer-groups.sh failed"
        print("\n" + "\n".join(outputs.values()))
        check_tool_output(outputs, group, topic, live)

        total = stream.finish(500)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while len(processed) < total:
            poll_all(live.values())
            assert time.monotonic() < deadline, f"{len(processed)} of {total} processed"
        for name in list(live):
            live.pop(name).close(list(live.values()))
        missing = [i for i in range(total) if processed[i] == 0]
        twice = [i for i in range(total) if processed[i] > 1]
        assert not missing, f"{len(missing)} records never processed: {missing[:20]}"
        assert not twice, f"{len(twice)} records processed twice: {twice[:20]}"
        assert len(processed) == total, "records processed that were never produced"
        print(f"\n{target.kind}: {total} records, each processed once; stale periodic commits "
              f"{sum(m.stale_commits for m in everyone)}")
    finally:
        stream.stop_flag.set()
        for m in live.values():
            m.c.close()


def check_tool_output(outputs, group, topic, live):
    """kafka-consumer-groups.sh --describe: --members --verbose lists each member (client id,
    its partitions, its epochs), --state the assignor and state, the default view the offsets of
    the six partitions."""
    members = outputs["members"]
    header = next((ln.split() for ln in members.splitlines() if "CONSUMER-ID" in ln), None)
    assert header is not None, members
    for col in ("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"):
        assert col in header, f"no {col} column (not described as a consumer group):\n{members}"
    rows = [ln.split() for ln in members.splitlines() if ln.startswith(group + " ")]
    client = header.index("CLIENT-ID")
    assert sorted(r[client] for r in rows) == sorted(live), members
    for r in rows:
        owned = sorted(live[r[client]].owned())
        assert r[header.index("#PARTITIONS")] == str(len(owned)), members
        assignment = r[header.index("CURRENT-ASSIGNMENT")]
        assert assignment == f"{topic}:{','.join(map(str, owned))}", members
    state = outputs["state"]
    assert "uniform" in state and "Stable" in state, state
    offsets = [ln for ln in outputs["offsets"].splitlines() if ln.startswith(group + " ")]
    assert len(offsets) == PARTITIONS, outputs["offsets"]


def test_range_assignor_when_asked(target):
    topic = new_topic(target)
    group = topic + "-range"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    processed = Counter()
    live = {
        name: Member(name, target.bootstrap, group, topic, processed, assignor="range")
        for name in ("R1", "R2")
    }
    try:
        owned = converge(admin, group, live, "range")
        for parts in owned.values():
            ps = sorted(parts)
            assert len(ps) == 3 and ps[2] - ps[0] == 2, f"not 3 consecutive partitions: {owned}"
        assert describe(admin, group).type == ConsumerGroupType.CONSUMER
    finally:
        for m in live.values():
            m.c.close()


def test_classic_and_consumer_members_share_a_group(target):
    topic = new_topic(target)
    group = topic + "-mixed"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    processed = Counter()
    live = {"N": Member("N", target.bootstrap, group, topic, processed)}
    try:
        converge(admin, group, live, "uniform")
        live["C"] = Member("C", target.bootstrap, group, topic, processed, protocol="classic")
        owned = converge(admin, group, live, "uniform")
        assert sorted(len(p) for p in owned.values()) == [3, 3], owned
        assert describe(admin, group).type == ConsumerGroupType.CONSUMER
        live.pop("C").c.close()
        owned = converge(admin, group, live, "uniform")
        assert owned == {"N": frozenset(range(PARTITIONS))}
    finally:
        for m in live.values():
            m.c.close()
