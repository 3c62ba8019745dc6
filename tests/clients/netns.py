"""Nodes in their own network namespaces on one bridge, so links between nodes can be cut while
clients in the root namespace still reach every node (issue 16's network nemesis).

Layout (one per test run, names carry a random suffix so runs never collide):

    root namespace:  bridge vbr<sfx> 10.<a>.<b>.1/24          (clients, the test)
    vdl<i>-<sfx>:    eth0 10.<a>.<b>.<10+i>/24 on the bridge  (node i)

A link i-j is cut with blackhole routes in both namespaces (i drops what it sends to j, and j
what it sends to i); the bridge and the root namespace are untouched, so the test's clients and
its admin API calls keep working. Everything is removed by `teardown`, also after a failure.
Needs root and iproute2 (`ip netns`).
"""

import contextlib
import json
import os
import random
import subprocess
import tempfile
import time
import urllib.request

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NODES = 3
KAFKA_PORT, PEER_PORT, ADMIN_PORT = 9092, 9100, 9292
ELECTION_TIMEOUT_MS = 1000


def _ip(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def available():
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    try:
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    except FileNotFoundError:
        return "iproute2 (ip) is not installed"
    return None if r.returncode == 0 else "ip netns does not work here"


def _free_subnet():
    used = _ip("-o", "-4", "addr").stdout
    for _ in range(100):
        a, b = 10, random.randrange(100, 250)
        c = random.randrange(0, 256)
        prefix = f"{a}.{b}.{c}."
        if prefix not in used:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 subnet")


class Net:
    """The bridge and one namespace per node."""

    def __init__(self, nodes):
        self.sfx = f"{random.randrange(1 << 20):05x}"
        self.prefix = _free_subnet()
        self.bridge = f"vbr{self.sfx}"
        self.nodes = nodes
        self.cut = set()
        self.created = []  # what to remove, in order

    def ns(self, i):
        return f"vdl{i}-{self.sfx}"

    def addr(self, i):
        """Node i's address (1-based)."""
        return f"{self.prefix}{10 + i}"

    def setup(self):
        _ip("link", "add", self.bridge, "type", "bridge")
        self.created.append(("link", self.bridge))
        _ip("addr", "add", f"{self.prefix}1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(1, self.nodes + 1):
            ns, veth = self.ns(i), f"vh{self.sfx}{i}"
            _ip("netns", "add", ns)
            self.created.append(("netns", ns))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.created.append(("link", veth))
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("addr", "add", f"{self.addr(i)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def exec_prefix(self, i):
        """The command prefix that runs a program in node i's namespace."""
        return ["ip", "netns", "exec", self.ns(i)]

    def cut_link(self, i, j):
        """Drops all traffic between nodes i and j (both directions)."""
        if (min(i, j), max(i, j)) in self.cut:
            return
        _ip("route", "add", "blackhole", f"{self.addr(j)}/32", ns=self.ns(i))
        _ip("route", "add", "blackhole", f"{self.addr(i)}/32", ns=self.ns(j))
        self.cut.add((min(i, j), max(i, j)))

    def heal_link(self, i, j):
        if (min(i, j), max(i, j)) not in self.cut:
            return
        _ip("route", "del", "blackhole", f"{self.addr(j)}/32", ns=self.ns(i), check=False)
        _ip("route", "del", "blackhole", f"{self.addr(i)}/32", ns=self.ns(j), check=False)
        self.cut.discard((min(i, j), max(i, j)))

    def isolate(self, i):
        """Cuts node i from every other node."""
        for j in range(1, self.nodes + 1):
            if j != i:
                self.cut_link(i, j)

    def heal_all(self):
        for i, j in list(self.cut):
            self.heal_link(i, j)

    def teardown(self):
        for kind, name in reversed(self.created):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self.created.clear()


def _binary():
    b = os.environ.get("VDL_BIN") or os.path.join(REPO, "target", "debug", "vdl")
    assert os.path.exists(b), f"{b} missing: cargo build -p vdl-server first"
    return os.path.abspath(b)


class NetCluster:
    """Three vdl processes, node i in namespace i, started and stopped by PID."""

    def __init__(self, net, data_dir, extra_config="", env_for=None):
        self.net = net
        self.data_dir = data_dir
        self.extra_config = extra_config
        self.env_for = env_for or (lambda i: {})
        self.procs = {}
        self.bootstrap = ",".join(f"{net.addr(i)}:{KAFKA_PORT}" for i in range(1, NODES + 1))

    def config(self, i):
        members = ", ".join(
            f'"vdl{j}={j}@{self.net.addr(j)}:{PEER_PORT}"' for j in range(1, NODES + 1)
        )
        path = os.path.join(self.data_dir, f"vdl{i}.toml")
        with open(path, "w") as f:
            f.write(
                f"""initial_cluster = [{members}]

[node]
id = {i}
name = "vdl{i}"
data_dir = "{self.data_dir}/vdl{i}"

[listeners]
peer = "{self.net.addr(i)}:{PEER_PORT}"
kafka = "{self.net.addr(i)}:{KAFKA_PORT}"
kafka_advertised = "{self.net.addr(i)}:{KAFKA_PORT}"
admin = "{self.net.addr(i)}:{ADMIN_PORT}"

[raft]
election_timeout_ms = {ELECTION_TIMEOUT_MS}
{self.extra_config}
"""
            )
        return path

    def start(self):
        for i in range(1, NODES + 1):
            log = open(os.path.join(self.data_dir, f"vdl{i}.log"), "w")
            # `ip netns exec` execs the program: the PID is the node's own.
            self.procs[i] = subprocess.Popen(
                self.net.exec_prefix(i) + [_binary(), "start", "--config", self.config(i)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(
                    os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"), **self.env_for(i)
                ),
            )
        deadline = time.monotonic() + 60
        while not all(self.status(i) for i in range(1, NODES + 1)):
            assert time.monotonic() < deadline, "nodes did not start"
            for i, p in self.procs.items():
                assert p.poll() is None, f"vdl{i} exited: {self.log(i)}"
            time.sleep(0.2)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def log(self, i):
        with open(os.path.join(self.data_dir, f"vdl{i}.log")) as f:
            return f.read()[-3000:]

    def status(self, i, timeout=2.0):
        url = f"http://{self.net.addr(i)}:{ADMIN_PORT}/status"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def leader_of(self, topic, partition=0):
        """The leader of a partition as most nodes report it (None when unknown)."""
        votes = {}
        for i in range(1, NODES + 1):
            st = self.status(i) or {"streams": []}
            for s in st["streams"]:
                if s["name"] == topic and s.get("partition", 0) == partition and s["leader"]:
                    votes[s["leader"]] = votes.get(s["leader"], 0) + 1
        return max(votes, key=votes.get) if votes else None

    def watermarks(self, topic):
        """{partition: [high watermark on node 1..3]} (None where a node does not answer)."""
        out = {}
        for i in range(1, NODES + 1):
            st = self.status(i) or {"streams": []}
            for s in st["streams"]:
                if s["name"] == topic:
                    out.setdefault(s.get("partition", 0), [None] * NODES)[i - 1] = s[
                        "high_watermark"
                    ]
        return out


@contextlib.contextmanager
def running_cluster(extra_config="", env_for=None):
    """A NetCluster on a fresh Net (skips the test when namespaces cannot be used); everything
    is stopped and removed on exit, also after a failure."""
    why = available()
    if why:
        pytest.skip(why)
    net = Net(NODES)
    data_dir = tempfile.mkdtemp(prefix="vdl-nemesis-")
    cluster = NetCluster(net, data_dir, extra_config, env_for)
    try:
        net.setup()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        net.teardown()
