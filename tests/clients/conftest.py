"""Fixtures for the real-client tests: one three-node vdl cluster (the real binary, three
processes on 127.0.0.1) per pytest session, started and stopped through deploy/local-cluster.sh
with free ports and a temporary data directory.

Environment:
  VDL_BIN   the vdl binary (default: target/debug/vdl, which `cargo test` builds; built with
            `cargo build -p vdl-server --bin vdl` when missing)
  VDL_KEEP  1 = keep the data directory (configs, node logs) after the session, for debugging
"""

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from admin_target import ports_free
from lanes import port_range, runs_here

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "deploy", "local-cluster.sh")
NODES = 3
# Short election timeout: a killed leader is replaced within ~2 s, keeping the failover test
# quick (the processes.rs tests use the same value).
ELECTION_TIMEOUT_MS = 1000


def _free_base(offsets=(0, 100, 200)):
    """A Kafka base port B such that B..B+2, B+100..B+102 and B+200..B+202 are all free
    (the layout local-cluster.sh derives), and B+o..B+o+2 for the other `offsets` (extra
    listeners). Random in a range away from the default 9092 and from the ephemeral range, so
    concurrent runs and the cargo tests rarely collide."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(*port_range(20000, 30000))
        ports = [base + off + i for off in offsets for i in range(NODES)]
        if ports_free(ports):
            return base
    raise RuntimeError("no free port range found")


def kill_and_wait(pid, timeout=10.0):
    """SIGKILLs `pid` and waits (at most `timeout` s) until it is gone or a zombie (setsid'd
    children of init are reaped by it; a zombie has an empty cmdline)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.02)


class Cluster:
    """A running three-node cluster, and the operations the tests need on it. `extra_config` is
    TOML appended to every node's configuration (local-cluster.sh's VDL_EXTRA_CONFIG), e.g. a
    `[security]` table; `extra_env` are further settings of local-cluster.sh (VDL_SECURITY,
    VDL_EXTRA_LISTENERS, ...)."""

    def __init__(self, data_dir, base, binary, extra_config="", extra_env=None):
        self.data_dir = data_dir
        self.base = base
        self.binary = binary
        self.extra_config = extra_config
        self.bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(NODES))
        self.env = dict(
            os.environ,
            VDL_DATA_DIR=data_dir,
            VDL_KAFKA_BASE_PORT=str(base),
            VDL_PEER_BASE_PORT=str(base + 100),
            VDL_ADMIN_BASE_PORT=str(base + 200),
            VDL_BIN=binary,
            VDL_ELECTION_TIMEOUT_MS=str(ELECTION_TIMEOUT_MS),
            VDL_START_TIMEOUT="60",
            VDL_STOP_TIMEOUT="10",
            RUST_LOG=os.environ.get("RUST_LOG", "info"),
            VDL_EXTRA_CONFIG=extra_config,
        )
        self.env.update(extra_env or {})

    def _script(self, cmd, timeout):
        return subprocess.run(
            [SCRIPT, cmd],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self):
        """Starts every node that is not running and waits until each stream has a leader."""
        r = self._script("start", timeout=600 if not os.path.exists(self.binary) else 90)
        if r.returncode != 0:
            raise RuntimeError(f"local-cluster.sh start failed:\n{r.stdout}\n{r.stderr}")
        assert r.stdout.strip().splitlines()[-1] == self.bootstrap, r.stdout

    def stop(self):
        self._script("stop", timeout=60)

    def restart(self, extra_config):
        """Stops every node and starts them again, on the same data, with `extra_config`."""
        self.stop()
        self.extra_config = extra_config
        self.env["VDL_EXTRA_CONFIG"] = extra_config
        self.start()

    def pid(self, node):
        """PID of node `node` (1-based) if it runs, else None."""
        try:
            with open(os.path.join(self.data_dir, f"vdl{node}.pid")) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            return None
        # PIDs are reused: it must be our node, started with its config file.
        if os.path.join(self.data_dir, f"vdl{node}.toml") not in cmdline:
            return None
        return pid

    def kill(self, node):
        """SIGKILL node `node` (1-based), by the PID local-cluster.sh recorded; waits until gone."""
        pid = self.pid(node)
        assert pid is not None, f"vdl{node} is not running"
        kill_and_wait(pid)

    @property
    def secure(self):
        """Whether the cluster runs with VDL_SECURITY=sasl_ssl (admin API over HTTPS, every
        call authenticated)."""
        return self.env.get("VDL_SECURITY") == "sasl_ssl"

    def admin_url(self, node, path):
        """The URL of `path` on node `node`'s admin API (https on a secure cluster)."""
        scheme = "https" if self.secure else "http"
        return f"{scheme}://127.0.0.1:{self.base + 200 + node - 1}{path}"

    def admin_password(self):
        """The bootstrapped `admin` user's password (secure clusters)."""
        with open(os.path.join(self.data_dir, "admin.password")) as f:
            return f.read().strip()

    def admin_call(self, node, path, method="GET", body=None, user="admin", password=None,
                   timeout=10.0, cert=None):
        """One admin API call: (HTTP status, body bytes). On a secure cluster it goes over
        HTTPS verified with the cluster CA, as `user` (HTTP Basic; `user=None`: no Basic) and
        with the client certificate `cert` ((cert, key) paths) if given. HTTP errors are
        answers, not exceptions."""
        import base64
        import ssl

        headers = {}
        context = None
        if self.secure:
            context = ssl.create_default_context(
                cafile=os.path.join(self.data_dir, "tls", "ca.pem")
            )
            if cert is not None:
                context.load_cert_chain(*cert)
            if user is not None:
                pw = self.admin_password() if password is None else password
                token = base64.b64encode(f"{user}:{pw}".encode()).decode()
                headers["Authorization"] = f"Basic {token}"
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(
            self.admin_url(node, path), data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def status(self, node, timeout=2.0):
        """The /status document of node `node` (1-based), or None if it does not answer (on a
        secure cluster asked as the `admin` user)."""
        try:
            code, body = self.admin_call(node, "/status", timeout=timeout)
            return json.loads(body) if code == 200 else None
        except (OSError, ValueError):
            return None

    def running(self):
        return [n for n in range(1, NODES + 1) if self.pid(n) is not None]

    def leader(self, topic, timeout=15.0):
        """The node (1-based) leading `topic`, as that node itself and every other running node
        report it; waits up to `timeout` seconds for one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = set()
            for n in self.running():
                st = self.status(n)
                if st is None:
                    seen.add(None)
                    continue
                leaders = [s["leader"] for s in st["streams"] if s["name"] == topic]
                seen.add(leaders[0] if leaders else None)
            if len(seen) == 1:
                (leader,) = seen
                if leader and leader in self.running():
                    return leader
            time.sleep(0.05)
        raise AssertionError(f"no agreed leader for {topic} within {timeout}s")

    def high_watermark(self, node, topic):
        st = self.status(node)
        for s in (st or {}).get("streams", []):
            if s["name"] == topic:
                return s["high_watermark"]
        return None


def pytest_configure(config):
    # `timeout 600 pytest` (scripts/test.sh) ends pytest with SIGTERM: turn it into an interrupt
    # so the session fixture's teardown still stops the cluster instead of orphaning three nodes.
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def pytest_ignore_collect(collection_path, config):
    # With VDL_TEST_LANE=k/n (scripts/test.sh runs two lanes at once) only this lane's files
    # are collected: lanes.py says which and why that is safe.
    if collection_path.is_file() and collection_path.name.startswith("test_"):
        return None if runs_here(collection_path.name) else True
    return None


def _binary():
    b = os.environ.get("VDL_BIN") or os.path.join(REPO, "target", "debug", "vdl")
    if not os.path.exists(b) and b == os.path.join(REPO, "target", "debug", "vdl"):
        subprocess.run(
            ["cargo", "build", "-q", "-p", "vdl-server", "--bin", "vdl"],
            cwd=REPO,
            check=True,
            timeout=590,
        )
    return os.path.abspath(b)


@contextlib.contextmanager
def running_cluster(extra_config="", extra_env=None, port_offsets=(0, 100, 200), prepare=None):
    """A three-node cluster in a new data directory, configured with `extra_config` and
    `extra_env` (see Cluster; `port_offsets` are the port blocks it needs free, `prepare(data_dir,
    binary)` runs before the start); stopped and removed (unless VDL_KEEP=1) on exit."""
    data_dir = tempfile.mkdtemp(prefix="vdl-clients-")
    c = Cluster(data_dir, _free_base(port_offsets), _binary(), extra_config, extra_env)
    try:
        if prepare is not None:
            prepare(data_dir, c.binary)
        c.start()
        yield c
    finally:
        c.stop()
        if os.environ.get("VDL_KEEP") == "1":
            print(f"\nvdl cluster data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


# The session cluster's consumer-protocol members heartbeat every second (Kafka's default is
# 5 s), as the Kafka 4 brokers of scripts/kafka/kafka-cluster.sh do: a join or a leave then
# converges in seconds (test_consumer_protocol.py).
SESSION_CONFIG = "[kafka]\nconsumer_group_heartbeat_interval_ms = 1000"


@pytest.fixture(scope="session")
def cluster():
    with running_cluster(extra_config=SESSION_CONFIG) as c:
        yield c


@pytest.fixture
def topic(cluster, request):
    """A fresh topic for one test, created with CreateTopics, with a leader elected."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = "t-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:80]
    name = f"{name}-{random.randrange(1 << 30):x}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=NODES)], request_timeout=20
    )
    futures[name].result(timeout=30)
    cluster.leader(name, timeout=20)
    return name


@pytest.fixture(scope="session")
def admin_target(request):
    """The cluster of the admin-tooling tests (issue 11): vdl's session `cluster`, or with
    ADMIN_TEST_TARGET=kafka a three-node Apache Kafka 3.9 cluster (admin_target.py), or with
    ADMIN_TEST_BOOTSTRAP=host:port,... a running three-node cluster of that kind."""
    import admin_target as at

    if os.environ.get("ADMIN_TEST_BOOTSTRAP"):
        # A cluster someone already runs (of the kind ADMIN_TEST_TARGET names): no lifecycle.
        yield at.RunningTarget(at.target_kind(), os.environ["ADMIN_TEST_BOOTSTRAP"])
        return
    if at.target_kind() == "vdl":
        yield at.VdlTarget(request.getfixturevalue("cluster"))
        return
    k, cleanup = at.start_kafka()
    try:
        yield k
    finally:
        cleanup()
