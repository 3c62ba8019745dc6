"""The faults of the transactional verify's nemesis (test_verify_txn.py), for a vdl cluster
(conftest.Cluster) and for an Apache Kafka 3.9 cluster (admin_target.KafkaCluster): kill -9 and
restart the transaction coordinator of a transactional id, kill -9 and restart a partition
leader, SIGSTOP / SIGCONT a node. Every signal goes to a PID the cluster's start script
recorded (and is checked to be that node's process); every wait is bounded.

On vdl the transaction coordinator is the metadata leader (the leader of `__cluster_metadata`
in /cluster/status). A power cut (POWER_FAULTS, vdl only) kills a node and drops every write it
had not fsynced, through the fault-injecting file system the node runs with
(VDL_FAULT_INJECTION=1 of deploy/local-cluster.sh). On Kafka it is the leader of the `__transaction_state` partition of the
transactional id (Java's String.hashCode, made non-negative, modulo the 50 partitions); a
killed broker is started again with the command line it ran with.
"""

import json
import os
import random
import signal
import subprocess
import time

TXN_STATE_PARTITIONS = 50


def java_string_hash(s):
    """Java's String.hashCode of an ASCII string, as a signed 32-bit int."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_txn_partition(transactional_id):
    """The `__transaction_state` partition of `transactional_id` (Kafka's partitionFor)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % TXN_STATE_PARTITIONS


class VdlFaults:
    """Faults on a conftest.Cluster (nodes 1..3)."""

    def __init__(self, cluster):
        self.cluster = cluster

    def leader_of(self, topic, partition, timeout=20.0):
        """The running node leading `topic`-`partition`, as /cluster/status says."""
        cluster = self.cluster
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in cluster.running():
                try:
                    code, body = cluster.admin_call(n, "/cluster/status", timeout=2.0)
                    doc = json.loads(body) if code == 200 else {}
                except (OSError, ValueError):
                    doc = {}
                for p in doc.get("partitions", []):
                    if (
                        p["topic"] == topic
                        and p["partition"] == partition
                        and p.get("leader") in cluster.running()
                    ):
                        return p["leader"]
            time.sleep(0.1)
        raise AssertionError(f"no leader for {topic}-{partition} within {timeout}s")

    def coordinator(self, transactional_id):
        return self.leader_of("__cluster_metadata", 0)

    def nodes(self):
        return self.cluster.running()

    def pid(self, node):
        return self.cluster.pid(node)

    def kill(self, node):
        self.cluster.kill(node)

    def restart(self, *nodes):
        self.cluster.start()

    def power_cut(self, node):
        """Drops every write killed node `node` had not fsynced, torn (the cluster runs with
        VDL_FAULT_INJECTION=1: `vdl power-cut` on its control file); the count dropped."""
        control = os.path.join(self.cluster.data_dir, f"faults{node}")
        r = subprocess.run(
            [self.cluster.binary, "power-cut", "--control", control, "--torn"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip())


class KafkaFaults:
    """Faults on an admin_target.KafkaCluster (brokers 0..2, node id = broker index)."""

    def __init__(self, kafka):
        from confluent_kafka.admin import AdminClient

        self.kafka = kafka
        self.admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        self.cmdlines = {}

    def _pid_file(self, node):
        return os.path.join(self.kafka.data_dir, f"broker-{node}", "pid")

    def pid(self, node):
        try:
            with open(self._pid_file(node)) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError):
            return None
        marker = os.path.join(self.kafka.data_dir, f"broker-{node}", "server.properties")
        return pid if marker.encode() in cmdline else None

    def nodes(self):
        return [n for n in range(3) if self.pid(n) is not None]

    def leader_of(self, topic, partition, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                md = self.admin.list_topics(topic=topic, timeout=5)
                t = md.topics.get(topic)
                leader = t.partitions[partition].leader if t and not t.error else -1
            except Exception:  # noqa: BLE001 - a broker just killed: ask again
                leader = -1
            if leader in self.nodes():
                return leader
            time.sleep(0.2)
        raise AssertionError(f"no leader for {topic}-{partition} within {timeout}s")

    def coordinator(self, transactional_id):
        return self.leader_of("__transaction_state", kafka_txn_partition(transactional_id))

    def kill(self, node):
        pid = self.pid(node)
        assert pid is not None, f"broker {node} is not running"
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            self.cmdlines[node] = [a.decode() for a in f.read().split(b"\0") if a]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(")")[-1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.02)

    def restart(self, *nodes, timeout=120.0):
        """Starts brokers `nodes` again with the command lines they ran with; waits for their
        ports."""
        import socket

        for node in nodes:
            log = os.path.join(self.kafka.data_dir, f"broker-{node}", "logs", "stdout.log")
            with open(log, "ab") as out:
                p = subprocess.Popen(
                    self.cmdlines[node],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            with open(self._pid_file(node), "w") as f:
                f.write(f"{p.pid}\n")
        deadline = time.monotonic() + timeout
        for node in nodes:
            port = self.kafka.base + node
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"broker {node} did not open port {port}")
                    time.sleep(0.3)


FAULTS = ("coordinator", "partition", "pause", "crash_all")
# Power cuts: the node is killed and every write it had not fsynced is dropped (torn), as a
# power loss would; only on a vdl cluster run with VDL_FAULT_INJECTION=1 (VdlFaults.power_cut).
POWER_FAULTS = ("power_cut_coordinator", "power_cut_all")


def run(
    faults, topic, transactional_id, stop, log, rounds=1, gap_s=2.0, down_s=1.5, pause_s=2.0,
    kinds=FAULTS,
):
    """`rounds` rounds of: kill -9 the coordinator of `transactional_id` and restart it; kill -9
    the leader of a random partition of `topic` (3 partitions) and restart it; SIGSTOP the
    coordinator or a random node for `pause_s` s; kill -9 every node at once and restart them
    all (a crash of the whole cluster: processes only, written data stays in the page cache);
    with POWER_FAULTS, cut the power of the coordinator, or of every node at once (killed, their
    unsynced writes dropped, restarted). `gap_s` s between faults; stops early when `stop` is set. Each fault done is appended to
    `log`. `kinds` chooses some of the faults (in that order)."""
    for _ in range(rounds):
        for fault in kinds:
            if stop.wait(gap_s):
                return
            if fault == "coordinator":
                node = faults.coordinator(transactional_id)
            elif fault == "partition":
                node = faults.leader_of(topic, random.randrange(3))
            elif fault == "pause":
                # The coordinator half the time: a pause longer than the producers' retries
                # leaves EndTxn outcomes unknown.
                if random.random() < 0.5:
                    node = faults.coordinator(transactional_id)
                else:
                    node = random.choice(faults.nodes())
            elif fault == "power_cut_coordinator":
                node = faults.coordinator(transactional_id)
            else:
                node = "all"
            t0 = time.monotonic()
            dropped = None
            if fault == "pause":
                pid = faults.pid(node)
                os.kill(pid, signal.SIGSTOP)
                try:
                    stop.wait(pause_s)
                finally:
                    os.kill(pid, signal.SIGCONT)
            elif fault == "crash_all":
                nodes = faults.nodes()
                for n in nodes:
                    faults.kill(n)
                time.sleep(down_s)
                faults.restart(*nodes)
            elif fault in POWER_FAULTS:
                nodes = faults.nodes() if node == "all" else [node]
                for n in nodes:
                    faults.kill(n)
                dropped = sum(faults.power_cut(n) for n in nodes)
                time.sleep(down_s)
                faults.restart(*nodes)
            else:
                faults.kill(node)
                time.sleep(down_s)
                faults.restart(node)
            lost = "" if dropped is None else f", {dropped} unsynced writes dropped"
            log.append(f"{fault}: node {node} ({time.monotonic() - t0:.1f} s{lost})")
