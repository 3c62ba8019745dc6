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

import os
import random
import subprocess


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
