"""Issue 33, item 4: bootstrap SCRAM users become ordinary metadata, as in Kafka.

deploy/local-cluster.sh with VDL_SECURITY=sasl_ssl configures the user `admin` in every node's
`[[security.scram_users]]` (SCRAM-SHA-512 and SCRAM-SHA-256). Deleting admin's SCRAM-SHA-256
credential through the Kafka API (what `kafka-configs.sh --alter --delete-config SCRAM-SHA-256
--entity-type users --entity-name admin` sends) must work: the credential is gone from
DescribeUserScramCredentials and the password no longer authenticates with SCRAM-SHA-256,
also after every node restarted with the same configuration; SCRAM-SHA-512 still works.

Before the fix the deletion was refused (RESOURCE_NOT_FOUND: the configured user was not in
the metadata), and a deleted replicated credential brought the configured password back.
"""

import logging
import os
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

from conftest import running_cluster

pytestmark = pytest.mark.timeout(240)

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def secure():
    with running_cluster(extra_env={"VDL_SECURITY": "sasl_ssl"}) as c:
        yield c


def _conf(cluster, mechanism, **extra):
    with open(os.path.join(cluster.data_dir, "admin.password")) as f:
        password = f.read().strip()
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": "admin",
        "sasl.password": password,
        "ssl.ca.location": os.path.join(cluster.data_dir, "tls", "ca.pem"),
    }
    conf.update(extra)
    return conf


class _Collect(logging.Handler):
    """librdkafka's log lines (where it reports SASL failures)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _probe(cluster, mechanism, bootstrap=None):
    """(answered, log lines): whether a metadata request with admin's password over
    `mechanism` was answered within TIMEOUT_S / 3 seconds, and what librdkafka logged. With
    one node's `bootstrap` the answer is known at that node's first authentication failure
    (nothing else can answer: the client learns of other nodes only from metadata)."""
    collect = _Collect()
    log = logging.getLogger(f"rdkafka-{mechanism}-{time.monotonic_ns()}")
    log.addHandler(collect)
    log.setLevel(logging.DEBUG)
    errors = []
    conf = _conf(cluster, mechanism, logger=log, error_cb=lambda e: errors.append(str(e)))
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    admin = AdminClient(conf)
    deadline = time.monotonic() + TIMEOUT_S / 3
    while True:
        try:
            admin.list_topics(timeout=1)
            return True, collect.lines
        except KafkaException:
            # Logs and errors reach Python when the client is polled.
            admin.poll(0.2)
        refused = any("Authentication failed" in line for line in collect.lines + errors)
        if (bootstrap and refused) or time.monotonic() > deadline:
            return False, collect.lines + errors


def _authenticates(cluster, mechanism, bootstrap=None):
    """True when admin's password authenticates with `mechanism`, False when the cluster
    refuses it (an authentication failure; anything else fails the test)."""
    answered, lines = _probe(cluster, mechanism, bootstrap)
    if not answered:
        assert any("Authentication failed" in line for line in lines), (
            f"failed for another reason: {lines}"
        )
    return answered


def _node(cluster, index):
    """The bootstrap address of node `index` (0-based) alone."""
    return f"127.0.0.1:{cluster.base + index}"


def _mechanisms(cluster):
    """admin's SCRAM mechanisms as DescribeUserScramCredentials lists them."""
    admin = AdminClient(_conf(cluster, "SCRAM-SHA-512"))
    futures = admin.describe_user_scram_credentials(["admin"], request_timeout=TIMEOUT_S)
    description = futures["admin"].result(timeout=TIMEOUT_S)
    return sorted(str(info.mechanism) for info in description.scram_credential_infos)


def _eventually(what, check, timeout=TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except KafkaException:
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_deleting_a_bootstrap_credential_sticks(secure):
    # The configured credentials are in the metadata.
    _eventually(
        "admin's configured credentials listed",
        lambda: _mechanisms(secure) == ["ScramMechanism.SCRAM_SHA_256", "ScramMechanism.SCRAM_SHA_512"],
    )
    assert _authenticates(secure, "SCRAM-SHA-256")
    admin = AdminClient(_conf(secure, "SCRAM-SHA-512"))
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("admin", ScramMechanism.SCRAM_SHA_256)],
        request_timeout=TIMEOUT_S,
    )
    futures["admin"].result(timeout=TIMEOUT_S)
    assert _mechanisms(secure) == ["ScramMechanism.SCRAM_SHA_512"]
    # Every node refuses the deleted mechanism (each asked on its own).
    _eventually(
        "SCRAM-SHA-256 refused",
        lambda: not any(
            _authenticates(secure, "SCRAM-SHA-256", _node(secure, n)) for n in range(3)
        ),
    )
    assert _authenticates(secure, "SCRAM-SHA-512")

    # The same configuration after a restart of every node: still deleted.
    secure.restart(secure.extra_config)
    assert _mechanisms(secure) == ["ScramMechanism.SCRAM_SHA_512"]
    for node in range(3):
        bootstrap = _node(secure, node)
        assert not _authenticates(secure, "SCRAM-SHA-256", bootstrap), bootstrap
    assert _authenticates(secure, "SCRAM-SHA-512")
