"""Issue 33, the admin HTTP API: on a secure cluster (local-cluster.sh VDL_SECURITY=sasl_ssl: SASL_SSL
Kafka ports, mutual TLS between nodes, the admin API over HTTPS with authentication required) with
the ACL authorizer on and `admin` a super user, every admin endpoint is attacked as issue 33
shows it:

- without credentials: 401 (before: 200, records read and appended, limits changed, members
  added, leadership moved);
- with a wrong password, an unknown user, Basic over plain HTTP: 401;
- as a SCRAM user created through the Kafka API that the ACLs allow nothing: 403;
- then with the ACL that guards the same power on the Kafka port (created with the Kafka
  AdminClient): allowed. Records need READ / WRITE on the topic, not a cluster ACL.

And vdlctl with credentials (--user, --password-file / VDLCTL_PASSWORD, --tls-ca) runs `cluster
status` (which gathers every node's view over HTTPS with the caller's credentials) and a leader
transfer; without them it is refused.
"""

import base64
import json
import os
import socket
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from conftest import NODES, REPO, running_cluster

pytestmark = pytest.mark.timeout(300)

SUFFIX = uuid.uuid4().hex[:8]
TOPIC = f"adm-{SUFFIX}"
USER = "alice"
USER_PASSWORD = f"alice-{SUFFIX}"
SECURE_ENV = {
    "VDL_SECURITY": "sasl_ssl",
    "VDL_EXTRA_CONFIG": (
        '[security]\nauthorizer = "acl"\nsuper_users = ["User:admin"]\n'
        "\n[storage]\noperator_delete_allowed = true\n"
    ),
}


def _kafka_conf(cluster, user, password):
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": os.path.join(cluster.data_dir, "tls", "ca.pem"),
    }


@pytest.fixture(scope="module")
def secure():
    with running_cluster(extra_env=SECURE_ENV) as c:
        admin = AdminClient(_kafka_conf(c, "admin", c.admin_password()))
        admin.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replication_factor=NODES)], request_timeout=20
        )[TOPIC].result(timeout=30)
        # A low-privilege user, created through the Kafka API (AlterUserScramCredentials).
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    USER,
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                    USER_PASSWORD.encode(),
                )
            ]
        )
        for f in futures.values():
            f.result(timeout=30)
        c.leader(TOPIC, timeout=30)
        yield c, admin


def _acl(operation, resource_type=ResourceType.BROKER, name="kafka-cluster"):
    return AclBinding(
        resource_type,
        name,
        ResourcePatternType.LITERAL,
        f"User:{USER}",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def _grant(admin, *bindings):
    for f in admin.create_acls(list(bindings), request_timeout=20).values():
        f.result(timeout=30)


def _revoke(admin, *bindings):
    from confluent_kafka.admin import AclBindingFilter

    filters = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
            b.permission_type,
        )
        for b in bindings
    ]
    for f in admin.delete_acls(filters, request_timeout=20).values():
        f.result(timeout=30)


def _batch(value):
    """One Kafka record batch (magic 2) with one record, as a producer would write it."""
    import struct

    def varint(n):
        n = (n << 1) ^ (n >> 63)
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])

    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + record
    crc = _crc32c(after_crc)
    after_len = struct.pack(">ibI", 0, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_len)) + after_len


def _crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _endpoints(cluster):
    """Every admin endpoint, with arguments that would act if allowed: (name, method, path,
    body, the ACL that must allow it)."""
    leader = cluster.leader(TOPIC, timeout=30)
    return [
        ("status", "GET", "/status", None, "describe"),
        ("metrics", "GET", "/metrics", None, "describe"),
        ("members", "GET", "/members", None, "describe"),
        ("rates", "GET", "/rates", None, "describe"),
        ("replicas", "GET", "/replicas", None, "describe"),
        ("cluster-status", "GET", "/cluster/status", None, "describe"),
        ("segments", "GET", f"/partitions/{TOPIC}/0/segments", None, "describe"),
        ("set-rates", "PUT", "/rates", {"produce_requests_per_sec": None}, "alter"),
        (
            "add-member",
            "POST",
            "/members?timeout_ms=1000",
            # Id 0: refused as bad input (400) once past authorization, so an allowed call
            # adds nothing to the cluster.
            {"id": 0, "peer": "127.0.0.1:1", "kafka": "127.0.0.1:2"},
            "alter",
        ),
        ("remove-member", "DELETE", "/members/77?timeout_ms=1000", None, "alter"),
        (
            "transfer",
            "POST",
            f"/partitions/{TOPIC}/0/leader?to={leader}&timeout_ms=5000",
            b"",
            "alter",
        ),
        ("balance", "POST", "/leaders/balance?timeout_ms=5000", b"", "alter"),
        (
            "delete-segments",
            "POST",
            f"/partitions/{TOPIC}/0/segments/delete?before=0",
            b"",
            "alter",
        ),
        ("read", "GET", f"/streams/{TOPIC}/records?offset=0", None, "read"),
        ("append", "POST", f"/streams/{TOPIC}/append", _batch(b"x"), "write"),
    ]


def _call(cluster, name, method, path, body, node=None, **auth):
    # Records and appends go to the partition's leader (a follower answers 421).
    if node is None:
        node = cluster.leader(TOPIC, timeout=30) if name in ("read", "append") else 1
    return cluster.admin_call(node, path, method=method, body=body, timeout=30, **auth)


def test_every_endpoint_refuses_callers_without_valid_credentials(secure):
    cluster, _ = secure
    for name, method, path, body, _ in _endpoints(cluster):
        for label, auth in [
            ("no credentials", {"user": None}),
            ("wrong password", {"user": "admin", "password": "not-the-password"}),
            ("unknown user", {"user": f"nobody-{SUFFIX}", "password": "x"}),
        ]:
            code, answer = _call(cluster, name, method, path, body, **auth)
            assert code == 401, f"{name} with {label}: {code} {answer[:300]!r}"
            if answer:
                assert "error" in json.loads(answer), answer
    # Nothing acted: no member 77, the stream still empty.
    members = json.loads(_call(cluster, "members", "GET", "/members", None)[1])
    assert all(m["id"] != 77 for m in members), members
    st = cluster.status(cluster.leader(TOPIC))
    assert [s["high_watermark"] for s in st["streams"] if s["name"] == TOPIC] == [0]


def test_plain_http_and_basic_without_tls_are_refused(secure):
    cluster, _ = secure
    port = cluster.base + 200
    # Plain HTTP to the HTTPS port, with a valid Basic header: no HTTP answer at all.
    token = base64.b64encode(f"admin:{cluster.admin_password()}".encode()).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            f"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n\r\n".encode()
        )
        s.settimeout(5)
        try:
            got = s.recv(4096)
        except (socket.timeout, ConnectionResetError):
            got = b""
    assert not got.startswith(b"HTTP/1.1 200"), got


def test_a_user_without_acls_is_forbidden_then_each_acl_allows_its_endpoints(secure):
    cluster, admin = secure
    endpoints = _endpoints(cluster)
    me = {"user": USER, "password": USER_PASSWORD}
    for name, method, path, body, _ in endpoints:
        code, answer = _call(cluster, name, method, path, body, **me)
        assert code == 403, f"{name} as {USER} without ACLs: {code} {answer[:300]!r}"
        assert "may not" in json.loads(answer)["error"], answer
    grants = {
        "describe": _acl(AclOperation.DESCRIBE),
        "alter": _acl(AclOperation.ALTER),
        "read": _acl(AclOperation.READ, ResourceType.TOPIC, TOPIC),
        "write": _acl(AclOperation.WRITE, ResourceType.TOPIC, TOPIC),
    }
    try:
        for acl_name in ("describe", "alter", "read", "write"):
            _grant(admin, grants[acl_name])
            deadline = time.monotonic() + 20
            for name, method, path, body, needs in endpoints:
                if needs != acl_name:
                    continue
                while True:
                    code, answer = _call(cluster, name, method, path, body, **me)
                    if code not in (401, 403) or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)  # the ACL reaches every node through the metadata log
                assert code not in (401, 403), f"{name} with {acl_name}: {code} {answer[:300]!r}"
                if name == "add-member":
                    assert code == 400, (code, answer)
                elif name == "remove-member":
                    assert code == 404, (code, answer)
                elif name in ("cluster-status",):
                    # The other nodes answered the forwarded calls, made with alice's
                    # credentials over HTTPS.
                    doc = json.loads(answer)
                    assert all(n["reachable"] for n in doc["nodes"]), doc
                elif name in ("balance", "transfer"):
                    assert code in (200, 504), (code, answer)
                else:
                    assert code == 200, f"{name}: {code} {answer[:300]!r}"
        # The record appended through the admin API is what a Kafka consumer reads.
        consumer = Consumer(
            {
                **_kafka_conf(cluster, "admin", cluster.admin_password()),
                "group.id": f"g-{SUFFIX}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([TOPIC])
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.close()
        assert got == [b"x"], got
        # READ without WRITE: reads pass, appends do not (and the other way round).
        _revoke(admin, grants["write"])
        leader = cluster.leader(TOPIC)
        deadline = time.monotonic() + 20
        while True:
            code, _ = cluster.admin_call(
                leader, f"/streams/{TOPIC}/append", method="POST", body=_batch(b"y"), **me
            )
            if code == 403 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 403
        code, _ = cluster.admin_call(leader, f"/streams/{TOPIC}/records?offset=0", **me)
        assert code == 200
    finally:
        _revoke(admin, *grants.values())


def _vdlctl_binary():
    b = os.environ.get("VDLCTL_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "debug", "vdlctl"
    )
    if not os.path.exists(b):
        subprocess.run(["cargo", "build", "-q", "-p", "vdlctl"], cwd=REPO, check=True, timeout=590)
    return b


def _vdlctl(cluster, *args, env=None, node=1):
    return subprocess.run(
        [_vdlctl_binary(), "--admin", f"127.0.0.1:{cluster.base + 200 + node - 1}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


def test_vdlctl_passes_credentials(secure, tmp_path):
    cluster, _ = secure
    ca = os.path.join(cluster.data_dir, "tls", "ca.pem")
    password_file = os.path.join(cluster.data_dir, "admin.password")
    # Without credentials: refused (HTTP 401), not served.
    r = _vdlctl(cluster, "--tls-ca", ca, "cluster", "status")
    assert r.returncode == 1 and "401" in r.stderr, (r.stdout, r.stderr)
    # A password is never taken from the command line: --user alone needs a file or the env.
    r = _vdlctl(cluster, "--tls-ca", ca, "--user", "admin", "cluster", "status",
                env={"VDLCTL_PASSWORD": ""})
    assert r.returncode != 0
    # With the password file: a healthy cluster, every node reachable (forwarded over HTTPS
    # with the caller's credentials).
    deadline = time.monotonic() + 60
    while True:
        r = _vdlctl(cluster, "--tls-ca", ca, "--user", "admin", "--password-file", password_file,
                    "cluster", "status", "--json")
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert r.returncode == 0, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["healthy"] and all(n["reachable"] for n in doc["nodes"]), doc
    # Each node announced an address that answers as that node (no answer filed under another id).
    assert len({n["admin"] for n in doc["nodes"]}) == NODES, doc
    # With the password in the environment: a leader transfer, asked of a node that does not lead.
    leader = cluster.leader(TOPIC, timeout=30)
    target = next(n for n in range(1, NODES + 1) if n != leader)
    r = _vdlctl(cluster, "--tls-ca", ca, "--user", "admin", "leader", "transfer", TOPIC, "0",
                "--to", str(target), env={"VDLCTL_PASSWORD": cluster.admin_password()},
                node=target)
    # vdlctl returns 0 once the target leads (the periodic leader rebalance may move the
    # leadership back to the preferred replica right after, so it is not asked again here).
    assert r.returncode == 0, (r.stdout, r.stderr)
    # A client certificate from the cluster CA authenticates too (as its subject, which the
    # ACLs allow nothing: 403, not 401).
    tls = os.path.join(cluster.data_dir, "tls")
    r = _vdlctl(cluster, "--tls-ca", ca, "--tls-cert", os.path.join(tls, "client-admin.pem"),
                "--tls-key", os.path.join(tls, "client-admin.key"), "cluster", "status")
    assert r.returncode == 1 and "403" in r.stderr, (r.stdout, r.stderr)
