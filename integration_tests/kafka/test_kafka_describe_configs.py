"""DescribeConfigs: Kafka clients see a topic's real configs, the ones ``raftlog topic
describe`` prints (overrides as DYNAMIC_TOPIC_CONFIG, the rest DEFAULT_CONFIG), and an
unknown topic gets UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka_wire import Wire
from kio.schema.describe_configs.v1.request import (
    DescribeConfigsRequest as DescribeConfigsV1,
)
from kio.schema.describe_configs.v1.request import (
    DescribeConfigsResource as ResourceV1,
)
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest as DescribeConfigsV4,
)
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsResource as ResourceV4,
)
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
OVERRIDES = {"retention.ms": "3600000", "compression.type": "zstd"}


def _until(check):
    """``check()`` once it stops raising AssertionError (a topic just created reaches
    every node's copy of the controller state a moment later)."""
    return Retrying(
        stop=stop_after_delay(30) | stop_after_attempt(60),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type(AssertionError),
        reraise=True,
    )(check)


@pytest.fixture(scope="module")
def configured_topic(kafka_cluster) -> tuple[str, dict[str, str], list[str]]:
    """A topic with two overrides, and what ``raftlog topic describe --format json``
    says: (name, every config's value, the overridden keys)."""
    name = "configs-topic"
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(kafka_cluster.servers))

    def cli(*args: str) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [sys.executable, "-m", "raftlog", "topic", *args],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr.decode()
        return out

    cli("create", name, "--partitions", "1", *(f"--config={k}={v}" for k, v in OVERRIDES.items()))
    out = cli("describe", name, "--format", "json")
    doc = json.loads(out.stdout)
    assert {k: doc["configs"][k] for k in OVERRIDES} == OVERRIDES
    assert sorted(doc["overrides"]) == sorted(OVERRIDES)
    return name, doc["configs"], doc["overrides"]


def test_kafka_python_describe_configs_equals_raftlog_topic_describe(
    bootstrap, configured_topic
) -> None:
    name, configs, overrides = configured_topic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:

        def described(**kwargs) -> dict:
            got = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name)], **kwargs
            )["topic"][name]
            assert got, "no configs yet"
            return got

        every = _until(lambda: described(config_filter="all", include_synonyms=True))
        assert {k: c["value"] for k, c in every.items()} == configs
        for key, c in every.items():
            want = "DYNAMIC_TOPIC_CONFIG" if key in overrides else "DEFAULT_CONFIG"
            assert c["config_source"] == want, (key, c)
            assert c["read_only"] is False and c["is_sensitive"] is False
            sources = [s["source"] for s in c["synonyms"]]
            assert sources == (
                ["DYNAMIC_TOPIC_CONFIG", "DEFAULT_CONFIG"]
                if key in overrides
                else ["DEFAULT_CONFIG"]
            )
        # kafka-python's default filter: only what is set on the topic
        modified = described()
        assert {k: c["value"] for k, c in modified.items()} == OVERRIDES
    finally:
        admin.close()


def test_confluent_kafka_describe_configs_and_an_unknown_topic(bootstrap, configured_topic) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import ConfigResource as CkResource

    name, configs, overrides = configured_topic
    admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})

    def described() -> dict:
        (future,) = admin.describe_configs([CkResource("topic", name)]).values()
        return future.result(60)

    entries = _until(described)
    assert {k: e.value for k, e in entries.items()} == configs
    assert {k for k, e in entries.items() if not e.is_default} == set(overrides)
    assert entries["segment.bytes"].is_default and not entries["retention.ms"].is_default

    (future,) = admin.describe_configs([CkResource("topic", "no-such-topic")]).values()
    with pytest.raises(KafkaException) as failed:
        future.result(60)
    assert failed.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_v1_and_v4_on_the_wire(bootstrap, configured_topic) -> None:
    """v1 (what librdkafka sends) and v4 (flexible, with types and documentation): keys
    filtered by configuration_keys, an unknown topic and a broker resource refused by
    name, each resource answered on its own in one request."""
    name, configs, _ = configured_topic
    v1 = DescribeConfigsV1(
        resources=(
            ResourceV1(
                resource_type=TOPIC,
                resource_name=name,
                configuration_keys=("retention.ms", "no.such.key"),
            ),
            ResourceV1(resource_type=TOPIC, resource_name="missing", configuration_keys=None),
            ResourceV1(resource_type=BROKER, resource_name="1", configuration_keys=None),
        ),
        include_synonyms=False,
    )
    v4 = DescribeConfigsV4(
        resources=(ResourceV4(resource_type=TOPIC, resource_name=name, configuration_keys=None),),
        include_synonyms=False,
        include_documentation=True,
    )
    for address in bootstrap:  # every node answers from its copy of the controller state

        def answers(address: str = address) -> tuple:
            with Wire(address) as wire:
                first = wire.call(v1, correlation_id=3)
                second = wire.call(v4, correlation_id=4)
            assert first.results[0].error_code == 0, first.results[0]
            return first, second

        first, second = _until(answers)
        topic, missing, broker = first.results
        assert [(c.name, c.value, c.config_source) for c in topic.configs] == [
            ("retention.ms", "3600000", DYNAMIC_TOPIC_CONFIG)
        ]
        assert missing.error_code == UNKNOWN_TOPIC_OR_PARTITION and not missing.configs
        assert "missing" in missing.error_message
        assert broker.error_code == INVALID_REQUEST and "resource_type" in broker.error_message
        (every,) = second.results
        assert {c.name: c.value for c in every.configs} == configs
        by_name = {c.name: c for c in every.configs}
        assert by_name["segment.bytes"].config_source == DEFAULT_CONFIG
        assert (by_name["segment.bytes"].config_type, by_name["retention.ms"].config_type) == (3, 5)
        assert by_name["compression.type"].config_type == 2
        assert "lz4" in by_name["compression.type"].documentation
