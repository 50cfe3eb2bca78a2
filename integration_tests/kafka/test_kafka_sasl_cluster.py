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
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from raftlog.cluster import LocalCluster, start_cluster, stop_cluster

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


def test_a_wrong_password_is_refused(token_cluster) -> None:
    with pytest.raises(KafkaError):
        KafkaAdminClient(
            bootstrap_servers=token_cluster.kafka_bootstrap,
            request_timeout_ms=5000,
            **_sasl("not-the-token"),
        ).list_topics()
    root = pathlib.Path(token_cluster.data_dir)
    log = "".join((root / f"node-{n}.log").read_text() for n in (1, 2, 3))
    assert "neither the client token nor the admin token" in log
