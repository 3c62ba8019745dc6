"""A three-node vdl cluster whose processes are this test's own children (so a test can send
SIGTERM to a node and read its exit status), plus vdlctl and /metrics helpers, for the
operations tests (issue 13: test_operations.py).

Environment: VDL_BIN (as conftest.py), VDLCTL_BIN (default target/debug/vdlctl, built with
`cargo build -p vdlctl` when missing).
"""

import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from admin_target import ports_free
from lanes import port_range

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NODES = 3
ELECTION_TIMEOUT_MS = 1000
# The graceful-shutdown bound the nodes are configured with.
SHUTDOWN_TIMEOUT_MS = 15000


def vdl_binary():
    from conftest import _binary

    return _binary()


def vdlctl_binary():
    default = os.path.join(REPO, "target", "debug", "vdlctl")
    b = os.environ.get("VDLCTL_BIN") or default
    if not os.path.exists(b) and b == default:
        subprocess.run(
            ["cargo", "build", "-q", "-p", "vdlctl"], cwd=REPO, check=True, timeout=590
        )
    return os.path.abspath(b)


def _free_base():
    rng = random.Random()
    for _ in range(200):
        # Below Linux's ephemeral range (32768 and up), where a free-checked port can be
        # taken by a connection's local end before the nodes bind it.
        base = rng.randrange(*port_range(12000, 20000))
        if ports_free([base + off + i for off in (0, 100, 200) for i in range(NODES)]):
            return base
    raise RuntimeError("no free port range found")


class OwnCluster:
    """Three `vdl` processes started by this object, on free ports of 127.0.0.1."""

    def __init__(self, extra_config=""):
        self.binary = vdl_binary()
        self.data_dir = tempfile.mkdtemp(prefix="vdl-ops-")
        self.base = _free_base()
        self.procs = {}
        self.extra_config = extra_config
        self.bootstrap = ",".join(f"127.0.0.1:{self.kafka_port(i)}" for i in range(1, NODES + 1))

    def kafka_port(self, i):
        return self.base + i - 1

    def peer_port(self, i):
        return self.base + 100 + i - 1

    def admin(self, i):
        return f"127.0.0.1:{self.base + 200 + i - 1}"

    def config_path(self, i):
        return os.path.join(self.data_dir, f"vdl{i}.toml")

    def _write_config(self, i):
        members = ", ".join(f'"vdl{n}={n}@127.0.0.1:{self.peer_port(n)}"' for n in range(1, NODES + 1))
        with open(self.config_path(i), "w") as f:
            f.write(
                f"""initial_cluster = [{members}]

[node]
id = {i}
name = "vdl{i}"
data_dir = "{self.data_dir}/vdl{i}"
shutdown_timeout_ms = {SHUTDOWN_TIMEOUT_MS}

[listeners]
peer = "127.0.0.1:{self.peer_port(i)}"
kafka = "127.0.0.1:{self.kafka_port(i)}"
admin = "{self.admin(i)}"

[raft]
election_timeout_ms = {ELECTION_TIMEOUT_MS}
{self.extra_config}
"""
            )

    def start_node(self, i):
        assert i not in self.procs or self.procs[i].poll() is not None
        self._write_config(i)
        log = open(os.path.join(self.data_dir, f"vdl{i}.log"), "ab")
        self.procs[i] = subprocess.Popen(
            [self.binary, "start", "--config", self.config_path(i)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")),
        )
        log.close()

    def start(self):
        for i in range(1, NODES + 1):
            self.start_node(i)
        self.wait_healthy(60)

    def terminate(self, i, timeout):
        """SIGTERM node i; returns (exit status, seconds it took). Kills it after `timeout`."""
        p = self.procs[i]
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
            rc = None
        return rc, time.monotonic() - t0

    def stop(self):
        for i, p in self.procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=SHUTDOWN_TIMEOUT_MS / 1000 + 5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        if os.environ.get("VDL_KEEP") == "1":
            print(f"\nops cluster data kept in {self.data_dir}")
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def vdlctl(self, *args, node=1, timeout=90):
        """Runs vdlctl against node `node`'s admin API: CompletedProcess."""
        return subprocess.run(
            [vdlctl_binary(), "--admin", self.admin(node), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self, node=1):
        """(exit status, JSON document) of `vdlctl cluster status --json`."""
        r = self.vdlctl("cluster", "status", "--json", node=node, timeout=30)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
        return r.returncode, doc

    def wait_healthy(self, timeout, node=None):
        """Waits until `vdlctl cluster status` exits 0 (asked of a running node); returns the
        status document."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            running = [n for n, p in self.procs.items() if p.poll() is None]
            ask = node if node is not None else (running[0] if running else 1)
            rc, doc = self.status(ask)
            last = doc
            if rc == 0:
                return doc
            time.sleep(0.2)
        raise AssertionError(f"cluster not healthy within {timeout}s: {json.dumps(last)}")

    def leader_of(self, topic, partition=0, node=1):
        _, doc = self.status(node)
        for p in (doc or {}).get("partitions", []):
            if p["topic"] == topic and p["partition"] == partition:
                return p["leader"]
        return 0

    def scrape(self, i):
        """The parsed /metrics of node i: {sample name: [(labels, value)]}, families."""
        from prometheus_client.openmetrics.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://{self.admin(i)}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            text = r.read().decode()
        families = list(text_string_to_metric_families(text))
        samples = {}
        for fam in families:
            for s in fam.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        return samples, families
