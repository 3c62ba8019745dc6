"""Peers prove their identity on a cluster started as deploy/local-cluster.sh
VDL_SECURITY=sasl_ssl starts it (issue 33, item 2): mutual TLS between the nodes with the peer
CA (tls/peer-ca.pem), each node's certificate naming its node id (vdl-node://<id>), separate from
the client CA (tls/ca.pem) that signs Kafka client certificates.

- the Kafka client certificate `client-admin` on node 1's peer port, claiming node 2: refused;
- node 3's own peer certificate on node 1's peer port, claiming node 2: refused;
- node 3's certificate claiming node 3: the TLS handshake and the hello pass (the legitimate
  case, so the refusal above is about the name, not the certificate);

each refusal counted in `peer_refused_connections`, and the cluster keeps serving SASL_SSL
clients.
"""

import os
import socket
import ssl
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer

from conftest import running_cluster


@pytest.fixture(scope="module")
def secure():
    with running_cluster(extra_env={"VDL_SECURITY": "sasl_ssl"}) as c:
        yield c


def hello(claimed, advertised):
    """A version 3 peer hello claiming node `claimed`."""
    body = bytes([0x08, claimed]) + b"\x12" + bytes([len(advertised)]) + advertised
    return b"VDLP\x00\x03" + struct.pack(">I", len(body)) + body


def dial_peer(cluster, node, cert, claimed):
    """TLS to `node`'s peer port presenting `cert` (tls/<cert>.pem), trusting the peer CA;
    sends a hello claiming `claimed` and a small frame. Returns "refused" when the node closed
    the connection (TLS alert or end of stream) within 3 s, "open" when it kept it."""
    tls = os.path.join(cluster.data_dir, "tls")

    def path(name):
        # Before the peer CA (the build this test was checked to fail on), the peer files were
        # ca.pem and node<i>.pem.
        p = os.path.join(tls, name)
        return p if os.path.exists(p) else os.path.join(tls, name.replace("peer-", ""))

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(path("peer-ca.pem"))
    ctx.load_cert_chain(path(f"{cert}.pem"), path(f"{cert}.key"))
    port = cluster.base + 100 + node - 1
    advertised = f"127.0.0.1:{cluster.base + claimed - 1}".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            s = ctx.wrap_socket(raw)
        except (ssl.SSLError, ConnectionResetError):
            return "refused"
        with s:
            s.settimeout(3)
            try:
                s.sendall(hello(claimed, advertised) + struct.pack(">I", 0))
                data = s.recv(4096)
            except socket.timeout:
                return "open"
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                return "refused"
            assert data == b"", data  # the acceptor never writes
            return "refused"


def refused(cluster):
    return cluster.status(1)["peer_refused_connections"]


def wait_refused_above(cluster, before):
    deadline = time.monotonic() + 10
    while refused(cluster) <= before:
        assert time.monotonic() < deadline, "the connection was not counted as refused"
        time.sleep(0.1)


def sasl_ssl_config(cluster):
    with open(os.path.join(cluster.data_dir, "admin.password")) as f:
        password = f.read().strip()
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{cluster.base + i}" for i in range(3)),
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": password,
        "ssl.ca.location": os.path.join(cluster.data_dir, "tls", "ca.pem"),
    }


def test_the_kafka_client_certificate_is_no_peer_credential(secure):
    before = refused(secure)
    assert dial_peer(secure, 1, "client-admin", claimed=2) == "refused"
    wait_refused_above(secure, before)


def test_a_member_certificate_does_not_pass_for_another_member(secure):
    before = refused(secure)
    assert dial_peer(secure, 1, "peer-node3", claimed=2) == "refused"
    wait_refused_above(secure, before)
    # The same certificate under its own id is admitted (the hello is then a real member's).
    assert dial_peer(secure, 1, "peer-node3", claimed=3) == "open"


def test_the_cluster_still_serves_after_the_attempts(secure):
    for cert, claimed in [("client-admin", 3), ("peer-node2", 1)]:
        for node in (1, 2, 3):
            if node != claimed:
                assert dial_peer(secure, node, cert, claimed) == "refused"
    topic = f"peer-identity-{os.getpid()}"
    conf = sasl_ssl_config(secure)
    p = Producer({**conf, "acks": "all"})
    for i in range(5):
        p.produce(topic, f"r{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"r{i}".encode() for i in range(5)]
