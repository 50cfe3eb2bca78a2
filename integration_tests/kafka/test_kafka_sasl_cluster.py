"""A local cluster with tokens: Kafka clients authenticate with SASL/PLAIN, the client
token as the password (kafka-python), get refused with a wrong one, and the roles
hold through the Kafka door as through the HTTP one (DeleteTopics needs admin)."""

from __future__ import annotations

import os
import pathlib
import secrets
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAuthorizationFailedError
from kafka_wire import Wire, frame, raw_header
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from secure_cluster import make_certificates

from raftlog.cluster import LocalCluster, start_cluster, stop_cluster

SASL_AUTHENTICATION_FAILED = 58
TOKEN = "client-" + secrets.token_hex(8)
ADMIN = "admin-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    for role in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        os.environ.pop(f"RAFTLOG_{role}_TOKEN", None)
    root = tmp_path_factory.mktemp("kafka-sasl")
    cluster = start_cluster(root, 3, auth_token=TOKEN, admin_token=ADMIN)
    try:
        assert len(cluster.kafka_bootstrap) == 3
        yield cluster
    finally:
        stop_cluster(root, timeout_s=10.0)


def _sasl(password: str) -> dict:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "anyone",
        "sasl_plain_password": password,
    }


def test_client_token_as_sasl_password_round_trips(token_cluster) -> None:
    bootstrap = token_cluster.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **_sasl(TOKEN))
    try:
        created = admin.create_topics([NewTopic("sasl-topic", 1, 3)])
        assert [t["error_code"] for t in created["topics"]] == [0]
        # deleting is the admin role's: the client token is refused by role
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics(["sasl-topic"])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **_sasl(TOKEN))
    try:
        meta = producer.send("sasl-topic", key=b"k", value=b"v").get(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=5000, **_sasl(TOKEN)
    )
    try:
        consumer.assign([TopicPartition("sasl-topic", 0)])
        consumer.seek_to_beginning()
        assert [(m.offset, m.key, m.value) for m in consumer] == [(meta.offset, b"k", b"v")]
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **_sasl(ADMIN))
    try:
        deleted = admin.delete_topics(["sasl-topic"])
        assert [t["error_code"] for t in deleted["topics"]] == [0]
    finally:
        admin.close()


def test_a_wrong_password_is_refused_and_the_connection_closed(token_cluster) -> None:
    address = token_cluster.kafka_bootstrap[0]
    with Wire(address) as wire:
        assert int(wire.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
        answer = wire.call(SaslAuthenticateRequest(auth_bytes=b"\0u\0not-the-token"), 2)
        assert int(answer.error_code) == SASL_AUTHENTICATION_FAILED
        assert "neither the client token nor the admin token" in answer.error_message
        assert wire.read_frame() is None  # closed after the answer
    with Wire(address) as wire:  # and before authenticating, only the SASL exchange
        wire.send(frame(raw_header(3, 1, 1) + b"\xff\xff\xff\xff"))  # Metadata v1
        assert wire.read_frame() is None


def test_sasl_ssl_on_a_node_with_tls(tmp_path: pathlib.Path) -> None:
    """A node with --tls-*: its Kafka listener presents the node's certificate, and a
    client verifying it against the CA authenticates with SASL/PLAIN over TLS."""
    cert, key, ca = make_certificates(tmp_path / "certs", ["127.0.0.1"])
    root = tmp_path / "cluster"
    cluster = start_cluster(root, 1, auth_token=TOKEN, admin_token=ADMIN, tls=(cert, key, ca))
    try:
        (address,) = cluster.kafka_bootstrap
        tls = {**_sasl(TOKEN), "security_protocol": "SASL_SSL", "ssl_cafile": ca}
        admin = KafkaAdminClient(bootstrap_servers=[address], **tls)
        try:
            created = admin.create_topics([NewTopic("tls-topic", 1, 1)])
            assert [t["error_code"] for t in created["topics"]] == [0]
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=[address], acks="all", **tls)
        try:
            assert producer.send("tls-topic", value=b"over tls").get(timeout=60).offset >= 0
        finally:
            producer.close()
        # the same port refuses a client that does not speak TLS: no plaintext Kafka
        with Wire(address) as wire:
            wire.send(frame(raw_header(18, 0, 1)))
            assert wire.read_frame() is None  # the TLS handshake fails: closed unanswered
    finally:
        stop_cluster(root, timeout_s=10.0)
