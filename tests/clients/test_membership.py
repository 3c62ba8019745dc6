"""Replacing a node of a real three-process cluster with `vdlctl member` while `vdl-perf verify`
writes (acks=all producers) and reads: node 4 starts with `join = true`, `vdlctl member add`
returns once it votes, `vdlctl member remove --id 1` moves node 1's replicas to it (leadership
handed away first) and node 1 is stopped. The checker finds no lost, duplicate or inconsistent
record; every partition holds the same bytes on nodes 2, 3 and 4 (admin API reads); `member
list` shows node 1 removed and node 4 a voter.

Its own cluster (membership changes would disturb the session cluster's tests), on free ports
(VDL_MEMBERSHIP_BASE_PORT: a fixed base instead, 12 ports from it).

Environment:
  VDL_BIN, VDL_PERF_BIN, VDLCTL_BIN  the binaries (default: target/debug/..., built when missing)
"""

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from admin_target import ports_free
from lanes import port_range

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ANOMALIES = ("lost", "duplicate", "inconsistent_offsets", "non_monotonic_poll", "poll_skip")
NODES = 4


def _binary(env, name, package):
    default = os.path.join(REPO, "target", "debug", name)
    b = os.environ.get(env) or default
    if not os.path.exists(b) and b == default:
        subprocess.run(
            ["cargo", "build", "-q", "-p", package, "--bin", name],
            cwd=REPO,
            check=True,
            timeout=590,
        )
    return os.path.abspath(b)


def _base_port():
    fixed = os.environ.get("VDL_MEMBERSHIP_BASE_PORT")
    if fixed:
        return int(fixed)
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(*port_range(20000, 30000))
        if ports_free([base + i for i in range(3 * NODES)]):
            return base
    raise RuntimeError("no free port range found")


class Procs:
    """Four node configs (node 4 joins) and the processes started from them."""

    def __init__(self, root, base, binary):
        self.root = root
        self.binary = binary
        self.peer = [base + i for i in range(NODES)]
        self.kafka = [base + NODES + i for i in range(NODES)]
        self.admin = [base + 2 * NODES + i for i in range(NODES)]
        self.procs = {}
        for i in range(1, NODES + 1):
            members = range(1, NODES + 1) if i == NODES else range(1, NODES)
            initial = ", ".join(f'"vdl{j}={j}@127.0.0.1:{self.peer[j - 1]}"' for j in members)
            join = "join = true\n" if i == NODES else ""
            with open(self.config(i), "w") as f:
                f.write(
                    f"initial_cluster = [{initial}]\n\n"
                    f'[node]\nid = {i}\nname = "vdl{i}"\ndata_dir = "{root}/vdl{i}"\n{join}\n'
                    f'[listeners]\npeer = "127.0.0.1:{self.peer[i - 1]}"\n'
                    f'kafka = "127.0.0.1:{self.kafka[i - 1]}"\n'
                    f'admin = "127.0.0.1:{self.admin[i - 1]}"\n\n'
                    f"[raft]\nelection_timeout_ms = 1000\n"
                )

    def config(self, i):
        return os.path.join(self.root, f"vdl{i}.toml")

    def start(self, i):
        log = open(os.path.join(self.root, f"vdl{i}.log"), "ab")
        self.procs[i] = subprocess.Popen(
            [self.binary, "start", "--config", self.config(i)], stdout=log, stderr=log
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                self.get(i, "/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        with open(os.path.join(self.root, f"vdl{i}.log"), errors="replace") as f:
            tail = f.readlines()[-20:]
        raise AssertionError(f"node {i} did not start; its log ends:\n{''.join(tail)}")

    def stop(self, i):
        p = self.procs.pop(i, None)
        if p is None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def get(self, i, path):
        """GET on node i's admin API: (body bytes, headers)."""
        url = f"http://127.0.0.1:{self.admin[i - 1]}{path}"
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read(), r.headers

    def records(self, i, topic, partition):
        """Every committed batch of a partition's replica on node i, and its high watermark."""
        out = b""
        offset = 0
        while True:
            body, headers = self.get(
                i, f"/streams/{topic}/records?partition={partition}&offset={offset}"
            )
            hw = int(headers["x-high-watermark"])
            pos = 0
            while pos + 27 <= len(body):
                base, length = struct.unpack_from(">qi", body, pos)
                (last_delta,) = struct.unpack_from(">i", body, pos + 23)
                pos += 12 + length
                offset = base + last_delta + 1
            out += body[:pos]
            if offset >= hw or pos == 0:
                return out, hw


@pytest.fixture
def procs():
    root = tempfile.mkdtemp(prefix="vdl-membership-")
    p = Procs(root, _base_port(), _binary("VDL_BIN", "vdl", "vdl-server"))
    try:
        yield p
    finally:
        for i in list(p.procs):
            p.stop(i)
        if os.environ.get("VDL_KEEP") == "1":
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _vdlctl(procs, node, *args, timeout=150):
    r = subprocess.run(
        [_binary("VDLCTL_BIN", "vdlctl", "vdlctl"), "--admin", f"127.0.0.1:{procs.admin[node - 1]}"]
        + list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, f"vdlctl {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_replace_a_node_under_load(procs, tmp_path):
    for i in (1, 2, 3):
        procs.start(i)
    deadline = time.time() + 30
    while True:
        members = json.loads(_vdlctl(procs, 2, "member", "list", "--json"))
        if [m["state"] for m in members] == ["voter"] * 3:
            break
        assert time.time() < deadline, members
        time.sleep(0.2)

    topic = f"membership-{random.randrange(1 << 30):x}"
    bootstrap = f"127.0.0.1:{procs.kafka[1]},127.0.0.1:{procs.kafka[2]}"
    history = tmp_path / "history.jsonl"
    verify = subprocess.Popen(
        [
            _binary("VDL_PERF_BIN", "vdl-perf", "vdl-perf"),
            "--json",
            "verify",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partitions",
            "3",
            "--duration",
            "20s",
            "--producers",
            "4",
            "--consumers",
            "2",
            "--max-records",
            "200000",
            "--history",
            str(history),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        procs.start(4)
        started = time.time()
        out = _vdlctl(
            procs,
            2,
            "member",
            "add",
            "--id",
            "4",
            "--peer",
            f"127.0.0.1:{procs.peer[3]}",
            "--kafka",
            f"127.0.0.1:{procs.kafka[3]}",
            "--timeout-s",
            "60",
        )
        print(f"{out.strip()} after {time.time() - started:.1f} s")
        started = time.time()
        out = _vdlctl(procs, 3, "member", "remove", "--id", "1", "--timeout-s", "120")
        print(f"{out.strip()} after {time.time() - started:.1f} s")
        procs.stop(1)
        stdout, stderr = verify.communicate(timeout=100)
    finally:
        if verify.poll() is None:
            verify.kill()
            verify.wait()
    assert stdout, f"no verify report; stderr:\n{stderr}"
    report = json.loads(stdout)
    total = report["total"]
    print(json.dumps({k: v for k, v in report.items() if k != "partitions"}))
    assert verify.returncode == 0, report
    assert report["safe"] is True
    assert total["acked"] >= 100, total
    for kind in ANOMALIES:
        assert total[kind] == 0, (kind, report)
    assert total["unseen"] == 0, report

    members = {m["id"]: m for m in json.loads(_vdlctl(procs, 2, "member", "list", "--json"))}
    assert members[1]["state"] == "removed", members
    assert members[1]["replicas"] == 0, members
    for i in (2, 3, 4):
        assert members[i]["state"] == "voter", members
    print(_vdlctl(procs, 4, "member", "list"))

    # Every partition: the same bytes on the three replicas, once their high watermarks agree.
    for p in range(3):
        deadline = time.time() + 30
        while True:
            copies = [procs.records(i, topic, p) for i in (2, 3, 4)]
            if all(c == copies[0] for c in copies):
                break
            assert time.time() < deadline, f"partition {p} differs: {[(len(d), hw) for d, hw in copies]}"
            time.sleep(0.3)
        print(f"partition {p}: {len(copies[0][0])} bytes, high watermark {copies[0][1]} on nodes 2, 3, 4")
        assert copies[0][1] > 0
