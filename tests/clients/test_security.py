"""Issue 12, the connection layer: TLS, SASL (PLAIN, SCRAM-SHA-256/512) and mutual TLS between
nodes, with real clients against a three-node vdl cluster started by deploy/local-cluster.sh
with VDL_SECURITY=sasl_ssl. Every node has three Kafka listeners:

  SASL_SSL        its Kafka port (base + i): SCRAM-SHA-512 and SCRAM-SHA-256 over TLS
  SASL_PLAIN      base + 300 + i: SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256
  MTLS            base + 400 + i: SSL, a client certificate from the cluster CA required

and the nodes talk to each other over mutual TLS; authorization is on (`authorizer = "acl"`, the
admin's SCRAM user and client certificate are the super users). kcat (librdkafka), confluent-kafka (librdkafka)
and Apache Kafka 3.9's Java client (its console producer and consumer) produce and consume on
each; then the failures: wrong password, unknown user, a certificate of another CA, an expired
one, a plaintext client on a TLS port, a request before authentication, a forged peer
connection without a certificate. Sessions last 8 s (connections_max_reauth_ms), so clients
re-authenticate on their connections during the longer tests (KIP-368).
"""

import os
import socket
import struct
import subprocess
import tempfile
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

import admin_target as at
from conftest import NODES, running_cluster

pytestmark = pytest.mark.timeout(240)

SASL_PLAIN_OFFSET = 300
MTLS_OFFSET = 400
REAUTH_MS = 8000
SECURE_ENV = {
    "VDL_SECURITY": "sasl_ssl",
    "VDL_EXTRA_LISTENERS": (
        f"SASL_PLAIN:SASL_PLAINTEXT:{SASL_PLAIN_OFFSET}:PLAIN,SCRAM-SHA-256 "
        f"MTLS:SSL:{MTLS_OFFSET}"
    ),
    "VDL_EXTRA_CONFIG": f"[security]\nconnections_max_reauth_ms = {REAUTH_MS}",
}
SCRAM_FAILED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism {}"
)
CLIENT_TIMEOUT_S = 60


def _certificates(data_dir, binary):
    """The cluster's CA and certificates, made before the start so that the CA also signs an
    expired client certificate (local-cluster.sh keeps certificates it finds)."""
    subprocess.run(
        [
            binary,
            "certs",
            "generate",
            "--out",
            os.path.join(data_dir, "tls"),
            "--nodes",
            str(NODES),
            "--clients",
            "admin",
            "--expired-clients",
            "expired",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def secure():
    with running_cluster(
        extra_env=SECURE_ENV,
        port_offsets=(0, 100, 200, SASL_PLAIN_OFFSET, MTLS_OFFSET),
        prepare=_certificates,
    ) as c:
        yield c


class Setup:
    """Where a client connects and with what, for one way of authenticating."""

    def __init__(self, cluster, kind):
        tls = os.path.join(cluster.data_dir, "tls")
        with open(os.path.join(cluster.data_dir, "admin.password")) as f:
            password = f.read().strip()
        self.kind = kind
        self.ca = os.path.join(tls, "ca.pem")
        self.cert = os.path.join(tls, "client-admin.pem")
        self.key = os.path.join(tls, "client-admin.key")
        offset = {"scram512": 0, "scram256": 0, "plain": SASL_PLAIN_OFFSET, "mtls": MTLS_OFFSET}
        self.bootstrap = ",".join(
            f"127.0.0.1:{cluster.base + offset[kind] + i}" for i in range(NODES)
        )
        self.protocol = {
            "scram512": "SASL_SSL",
            "scram256": "SASL_SSL",
            "plain": "SASL_PLAINTEXT",
            "mtls": "SSL",
        }[kind]
        self.mechanism = {
            "scram512": "SCRAM-SHA-512",
            "scram256": "SCRAM-SHA-256",
            "plain": "PLAIN",
            "mtls": None,
        }[kind]
        self.user = "admin"
        self.password = password

    def librdkafka(self, **overrides):
        """librdkafka properties (confluent-kafka and kcat -X)."""
        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.mechanism:
            conf.update(
                {
                    "sasl.mechanisms": self.mechanism,
                    "sasl.username": self.user,
                    "sasl.password": self.password,
                }
            )
        if self.protocol in ("SASL_SSL", "SSL"):
            conf["ssl.ca.location"] = self.ca
        if self.kind == "mtls":
            conf["ssl.certificate.location"] = self.cert
            conf["ssl.key.location"] = self.key
        conf.update(overrides)
        return conf

    def java(self, directory):
        """A Java client properties file (Kafka 3.9: PEM trust and key stores)."""
        lines = [f"security.protocol={self.protocol}"]
        if self.mechanism:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            lines += [
                f"sasl.mechanism={self.mechanism}",
                f'sasl.jaas.config={module} required username="{self.user}" '
                f'password="{self.password}";',
            ]
        if self.protocol in ("SASL_SSL", "SSL"):
            lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca}"]
        if self.kind == "mtls":
            keystore = os.path.join(directory, "client-admin-keystore.pem")
            with open(keystore, "w") as out:
                for part in (self.key, self.cert):
                    with open(part) as f:
                        out.write(f.read())
            lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}"]
        path = os.path.join(directory, f"{self.kind}.properties")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path


KINDS = ["scram512", "scram256", "plain", "mtls"]


def new_topic(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce_and_consume(setup, topic, values):
    """Produces `values` with acks=all through confluent-kafka, then reads them back with a
    consumer group; returns what was read."""
    errors = []
    producer = Producer(setup.librdkafka(acks="all", error_cb=errors.append))
    delivered = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(msg.value())

    for v in values:
        producer.produce(topic, v, on_delivery=on_delivery)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, errors
    assert len(delivered) == len(values)
    consumer = Consumer(
        setup.librdkafka(
            **{
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("kind", KINDS)
def test_confluent_kafka_produces_and_consumes(secure, kind):
    setup = Setup(secure, kind)
    topic = new_topic(f"py-{kind}")
    values = [f"{kind}-{i}".encode() for i in range(50)]
    assert produce_and_consume(setup, topic, values) == values


def kcat_args(setup):
    args = []
    for k, v in setup.librdkafka().items():
        if k != "bootstrap.servers":
            args += ["-X", f"{k}={v}"]
    return args + ["-b", setup.bootstrap]


@pytest.mark.parametrize("kind", KINDS)
def test_kcat_produces_and_consumes(secure, kind):
    setup = Setup(secure, kind)
    topic = new_topic(f"kcat-{kind}")
    lines = [f"kcat-{kind}-{i}" for i in range(20)]
    subprocess.run(
        ["kcat", *kcat_args(setup), "-P", "-t", topic, "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
        capture_output=True,
    )
    out = subprocess.run(
        ["kcat", *kcat_args(setup), "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
        capture_output=True,
    ).stdout
    assert out.splitlines() == lines


JAVA_LOG4J = "log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n\n"


@pytest.fixture(scope="module")
def java_tools():
    libs = at.kafka_libs()
    with tempfile.TemporaryDirectory(prefix="vdl-security-java-") as d:
        log4j = os.path.join(d, "log4j.properties")
        with open(log4j, "w") as f:
            f.write(JAVA_LOG4J)

        def command(main_class, *args):
            return [
                "java",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                f"-Dlog4j.configuration=file:{log4j}",
                "-cp",
                os.path.join(libs, "*"),
                main_class,
                *args,
            ]

        def run(main_class, *args, stdin=None):
            return subprocess.run(
                command(main_class, *args),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=120,
            )

        run.command = command
        yield d, run


@pytest.mark.parametrize("kind", KINDS)
def test_java_client_produces_and_consumes(secure, java_tools, kind):
    directory, run = java_tools
    setup = Setup(secure, kind)
    props = setup.java(directory)
    topic = new_topic(f"java-{kind}")
    lines = [f"java-{kind}-{i}" for i in range(20)]
    r = run(
        "kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        setup.bootstrap,
        "--topic",
        topic,
        "--producer.config",
        props,
        "--request-required-acks",
        "all",
        stdin="\n".join(lines) + "\n",
    )
    assert r.returncode == 0, r.stderr
    r = run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        setup.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(len(lines)),
        "--timeout-ms",
        "60000",
        "--consumer.config",
        props,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == lines


def auth_errors(conf, wait_s=8.0):
    """Connects a client with `conf` and returns the errors librdkafka reported (polling until
    it reported one, at most `wait_s`); metadata must not be had."""
    errors = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + wait_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=2)
    return errors


@pytest.mark.parametrize(
    "kind,user,password,message",
    [
        ("scram512", "admin", "wrong", SCRAM_FAILED.format("SCRAM-SHA-512")),
        ("scram256", "nobody", "whatever", SCRAM_FAILED.format("SCRAM-SHA-256")),
        ("plain", "admin", "wrong", "Authentication failed: Invalid username or password"),
        ("plain", "nobody", "x", "Authentication failed: Invalid username or password"),
    ],
)
def test_wrong_password_or_unknown_user_is_refused(secure, kind, user, password, message):
    setup = Setup(secure, kind)
    setup.user, setup.password = user, password
    before = total(secure, "authentication_failures")
    errors = auth_errors(setup.librdkafka())
    assert any(
        e.code() == KafkaError._AUTHENTICATION and message in e.str() for e in errors
    ), [e.str() for e in errors]
    assert total(secure, "authentication_failures") > before


def test_unknown_ca_and_expired_client_certificates_are_refused(secure, binary_path):
    setup = Setup(secure, "mtls")
    with tempfile.TemporaryDirectory(prefix="vdl-other-ca-") as other:
        subprocess.run(
            [binary_path, "certs", "generate", "--out", other, "--nodes", "0", "--clients", "stranger"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        tls = os.path.join(secure.data_dir, "tls")
        for cert, key in [
            (os.path.join(other, "client-stranger.pem"), os.path.join(other, "client-stranger.key")),
            (os.path.join(tls, "client-expired.pem"), os.path.join(tls, "client-expired.key")),
        ]:
            before = total(secure, "tls_handshake_failures")
            errors = auth_errors(
                setup.librdkafka(
                    **{"ssl.certificate.location": cert, "ssl.key.location": key}
                )
            )
            assert errors, cert
            assert all(e.code() != KafkaError.NO_ERROR for e in errors)
            assert total(secure, "tls_handshake_failures") > before, cert
    # Without a certificate at all: refused as well (client auth is required).
    conf = setup.librdkafka()
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    before = total(secure, "tls_handshake_failures")
    assert auth_errors(conf)
    assert total(secure, "tls_handshake_failures") > before


@pytest.fixture(scope="module")
def binary_path(secure):
    return secure.binary


def total(cluster, counter):
    """The sum over the nodes of a /status security counter."""
    n = 0
    for node in range(1, NODES + 1):
        st = cluster.status(node)
        assert st is not None, f"vdl{node} /status"
        n += st["security"][counter]
    return n


# ---- raw Kafka frames, for what no client library does on purpose --------------------------


def request(api_key, version, correlation_id, body=b""):
    """A request frame with a v1 header (client id "raw")."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_response(sock):
    """(correlation id, body) of the next response, or None when the connection is closed."""
    size = recv_exact(sock, 4)
    if size is None:
        return None
    (n,) = struct.unpack(">i", size)
    payload = recv_exact(sock, n)
    if payload is None:
        return None
    return struct.unpack(">i", payload[:4])[0], payload[4:]


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def kafka_string(s):
    return struct.pack(">h", len(s)) + s.encode()


def test_requests_before_authentication_close_the_connection(secure):
    port = secure.base + SASL_PLAIN_OFFSET
    # ApiVersions is served before authentication; Metadata closes the connection unanswered.
    before = total(secure, "unauthenticated_request_closes")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request(18, 0, 1))
        cid, body = read_response(s)
        assert cid == 1 and struct.unpack(">h", body[:2])[0] == 0
        s.sendall(request(3, 0, 2, struct.pack(">i", 0)))
        assert read_response(s) is None
    assert total(secure, "unauthenticated_request_closes") == before + 1


def test_failed_authentication_is_answered_after_the_delay_then_closed(secure):
    port = secure.base + SASL_PLAIN_OFFSET
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        # SaslHandshake v1 for a mechanism the listener does not offer: its list comes back.
        s.sendall(request(17, 1, 1, kafka_string("SCRAM-SHA-512")))
        cid, body = read_response(s)
        (error,) = struct.unpack(">h", body[:2])
        assert (cid, error) == (1, 33)  # UNSUPPORTED_SASL_MECHANISM
        assert b"PLAIN" in body and b"SCRAM-SHA-256" in body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request(17, 1, 1, kafka_string("PLAIN")))
        cid, body = read_response(s)
        assert (cid, struct.unpack(">h", body[:2])[0]) == (1, 0)
        token = b"\0admin\0not-the-password"
        sent = time.monotonic()
        s.sendall(request(36, 0, 2, struct.pack(">i", len(token)) + token))
        cid, body = read_response(s)
        waited = time.monotonic() - sent
        (error, msg_len) = struct.unpack(">hh", body[:4])
        message = body[4 : 4 + msg_len].decode()
        assert (cid, error) == (2, 58)  # SASL_AUTHENTICATION_FAILED
        assert message == "Authentication failed: Invalid username or password"
        assert waited >= 0.09, waited  # connection.failed.authentication.delay.ms = 100
        assert read_response(s) is None


def test_plaintext_client_on_a_tls_port_gets_no_kafka_answer(secure):
    before = total(secure, "tls_handshake_failures")
    with socket.create_connection(("127.0.0.1", secure.base), timeout=10) as s:
        s.sendall(request(18, 0, 7))
        data = b""
        while True:
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
    # At most a TLS alert record (content type 21), never a Kafka response.
    assert data == b"" or data[0] == 21, data
    assert total(secure, "tls_handshake_failures") > before
    # A librdkafka client speaking PLAINTEXT to the SASL_SSL port gets nowhere either.
    assert auth_errors({"bootstrap.servers": f"127.0.0.1:{secure.base}"})


def test_forged_peer_connection_without_a_certificate_is_refused(secure):
    """A stranger dials node 1's peer port claiming to be node 2 (a valid version 3 hello)
    and sends a Raft heartbeat frame: without a certificate of the cluster CA the TLS
    handshake fails and nothing it sent is read."""
    peer_port = secure.base + 100
    before = secure.status(1)["peer_refused_connections"]
    advertised = f"127.0.0.1:{secure.base + 1}".encode()
    hello_body = b"\x08\x02" + b"\x12" + bytes([len(advertised)]) + advertised
    hello = b"VDLP\x00\x03" + struct.pack(">I", len(hello_body)) + hello_body
    frame = struct.pack(">I", 4) + b"\x0a\x02\x08\x07"
    with socket.create_connection(("127.0.0.1", peer_port), timeout=10) as s:
        s.sendall(hello + frame)
        data = b""
        while True:
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
    assert data == b"" or data[0] == 21, data  # a TLS alert at most
    deadline = time.monotonic() + 10
    while secure.status(1)["peer_refused_connections"] <= before:
        assert time.monotonic() < deadline, "the forged connection was not refused"
        time.sleep(0.1)
    # The real members still talk over mutual TLS: the cluster serves writes.
    setup = Setup(secure, "scram512")
    topic = new_topic("after-forgery")
    assert produce_and_consume(setup, topic, [b"still-replicated"]) == [b"still-replicated"]


def test_clients_reauthenticate_on_their_connections(secure):
    """Sessions last REAUTH_MS: a producer that runs longer re-authenticates on its connection
    (KIP-368) and every record is delivered."""
    setup = Setup(secure, "scram512")
    topic = new_topic("reauth")
    before = total(secure, "reauthentications")
    errors = []
    producer = Producer(setup.librdkafka(acks="all", error_cb=errors.append))
    delivered = []
    end = time.monotonic() + REAUTH_MS / 1000 * 1.6
    i = 0
    while time.monotonic() < end:
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
        producer.poll(0.2)
        i += 1
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert len(delivered) == i and all(e is None for e in delivered), delivered
    assert total(secure, "reauthentications") > before


def test_java_client_reauthenticates_on_its_connection(secure, java_tools):
    """Kafka's console producer fed one line every 0.5 s for 2.5 session lifetimes (its JVM
    takes a few seconds to start and connect): the Java client re-authenticates its
    connections before their sessions end (KIP-368), so every line is written and none is lost
    to a closed connection."""
    directory, run = java_tools
    setup = Setup(secure, "scram512")
    props = setup.java(directory)
    topic = new_topic("java-reauth")
    before = total(secure, "reauthentications")
    producer = subprocess.Popen(
        run.command(
            "kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            setup.bootstrap,
            "--topic",
            topic,
            "--producer.config",
            props,
            "--request-required-acks",
            "all",
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        end = time.monotonic() + REAUTH_MS / 1000 * 2.5
        while time.monotonic() < end:
            line = f"reauth-{len(lines)}"
            producer.stdin.write(line + "\n")
            producer.stdin.flush()
            lines.append(line)
            time.sleep(0.5)
        _, err = producer.communicate(timeout=60)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert producer.returncode == 0, err
    assert total(secure, "reauthentications") > before
    r = run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        setup.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(len(lines)),
        "--timeout-ms",
        "60000",
        "--consumer.config",
        props,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == lines


def test_a_user_created_with_kafka_configs_logs_in_and_a_deleted_one_cannot(secure, java_tools):
    """The replicated SCRAM credentials (issue 12): Kafka's `kafka-configs.sh` creates a user
    over SASL_SSL as the bootstrapped admin (AlterUserScramCredentials, salted and hashed, kept
    in the cluster metadata); that user then produces and consumes with SCRAM-SHA-512 and
    SCRAM-SHA-256 on every node's listener; once its credentials are deleted, its login fails."""
    directory, run = java_tools
    admin = Setup(secure, "scram512")
    props = admin.java(directory)
    user, password = f"carol-{uuid.uuid4().hex[:6]}", "c4rol-secret"

    def configs(*args):
        r = run(
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            admin.bootstrap,
            "--command-config",
            props,
            "--entity-type",
            "users",
            "--entity-name",
            user,
            *args,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    configs(
        "--alter",
        "--add-config",
        f"SCRAM-SHA-512=[iterations=8192,password={password}]",
    )
    configs("--alter", "--add-config", f"SCRAM-SHA-256=[password={password}]")
    assert "SCRAM-SHA-512=iterations=8192" in configs("--describe")
    # VDL_SECURITY=sasl_ssl turns authorization on (only the admin is a super user): carol
    # may use her own topics and consumer groups, as `kafka-acls.sh` allows her.
    r = run(
        "kafka.admin.AclCommand",
        "--bootstrap-server",
        admin.bootstrap,
        "--command-config",
        props,
        "--add",
        "--allow-principal",
        f"User:{user}",
        "--operation",
        "All",
        "--topic",
        "carol-",
        "--group",
        "g-carol-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for kind in ("scram512", "scram256"):
        setup = Setup(secure, kind)
        setup.user, setup.password = user, password
        topic = new_topic(f"carol-{kind}")
        values = [f"{user}-{kind}-{i}".encode() for i in range(10)]
        # Every node applies the credential from the metadata log: a login may race it.
        deadline = time.monotonic() + 20
        while not logs_in(setup.librdkafka()):
            assert time.monotonic() < deadline, "the new user cannot log in"
        assert produce_and_consume(setup, topic, values) == values
    # One mechanism per request: Kafka 3.9 refuses a user altered twice in one request.
    configs("--alter", "--delete-config", "SCRAM-SHA-512")
    configs("--alter", "--delete-config", "SCRAM-SHA-256")
    gone = Setup(secure, "scram512")
    gone.user, gone.password = user, password
    deadline = time.monotonic() + 20
    while logs_in(gone.librdkafka()):
        assert time.monotonic() < deadline, "a deleted user still logs in"


def logs_in(conf):
    """Whether a client with `conf` gets metadata from every node without an authentication
    error."""
    errors = []
    producer = Producer({**conf, "error_cb": errors.append})
    try:
        md = producer.list_topics(timeout=5)
        producer.poll(0.5)
        return len(md.brokers) == NODES and not errors
    except KafkaException:
        return False
