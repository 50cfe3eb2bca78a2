"""Kafka clients against raftlog's Kafka listener on a 3-node local cluster:
kafka-python writes and reads (exactly, in order, offsets equal to raftlog's), one log
behind two front doors (``raftlog produce``/``consume`` and Kafka), Metadata leaders
equal the Raft leaders."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka_wire import Wire
from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from benchmarks.workloads.cluster_handle import running_cluster
from raftlog.client import BlockingRaftlogClient

N = 3000
TIMEOUT_MS = 30_000


def _cli(servers: list[str], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def _consume_all(bootstrap: list[str], topic: str, partitions: int, expect: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        got = []
        for _ in range(50):  # bounded: each pass ends after 5 s without a record
            got += list(consumer)
            if len(got) >= expect:
                break
        return got
    finally:
        consumer.close()


def _raftlog_offsets(servers: list[str], topic: str, partition: int, count: int) -> list:
    out = _cli(
        servers,
        "consume",
        topic,
        "--partition",
        str(partition),
        "--from-beginning",
        "--format",
        "json",
        "--max",
        str(count),
        "--timeout-ms",
        "5000",
    )
    assert out.returncode == 0, out.stderr.decode()
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


def _round_trip(
    kafka_cluster, bootstrap: list[str], topic: str, *, exact: bool = True, **producer_config
) -> None:
    """Produce N records over 3 partitions with kafka-python, read them back with a Kafka
    consumer and with raftlog's own reader. ``exact``: what was read is exactly what was
    acknowledged (an idempotent producer). Otherwise at least once, as Kafka promises a
    producer without idempotence: every acknowledged record is read at its offset, and
    anything more is a copy of a sent record (a retry after an answer that left the
    outcome unknown, a leadership change under the write, writes it again)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        created = admin.create_topics([NewTopic(topic, 3, 3)])
        assert [t["error_code"] for t in created["topics"]] == [0]
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **producer_config)
    try:
        futures = [
            producer.send(
                topic,
                key=b"key-%d" % i,
                value=b"value-%d" % i,
                partition=i % 3,
                headers=[("n", str(i).encode())],
            )
            for i in range(N)
        ]
        producer.flush(timeout=120)
        acked = [f.get(timeout=60) for f in futures]
    finally:
        producer.close()
    sent = collections.defaultdict(list)
    for i, meta in enumerate(acked):
        sent[meta.partition].append((meta.offset, b"key-%d" % i, b"value-%d" % i))

    got = _consume_all(bootstrap, topic, 3, N)
    read = collections.defaultdict(list)
    for m in got:
        read[m.partition].append((m.offset, m.key, m.value))
        assert m.headers == [("n", m.value.removeprefix(b"value-"))]
    if exact:
        # exactly the records written, in order per partition, at the offsets acknowledged
        assert dict(read) == dict(sent)
    else:
        for p, records in sent.items():
            at = {offset: (key, value) for offset, key, value in read[p]}
            assert [(o, *at.get(o, (None, None))) for o, _, _ in records] == records, p
            values = {value for _, _, value in records}
            assert {value for _, _, value in read[p]} == values, p

    # offsets equal raftlog's own reader's
    for p in range(3):
        native = _raftlog_offsets(kafka_cluster.servers, topic, p, len(read[p]))
        assert [(r["offset"], r["key"].encode(), r["value"].encode()) for r in native] == read[p]


def test_kafka_python_round_trip_without_idempotence(kafka_cluster, bootstrap) -> None:
    _round_trip(kafka_cluster, bootstrap, "kp-plain", exact=False, enable_idempotence=False)


def test_kafka_python_defaults_idempotent_round_trip(kafka_cluster, bootstrap) -> None:
    """kafka-python 3's defaults: idempotent (InitProducerId, sequences per partition)."""
    _round_trip(kafka_cluster, bootstrap, "kp-idempotent")


def test_raftlog_produce_is_read_by_kafka_and_kafka_by_raftlog_consume(
    kafka_cluster, bootstrap
) -> None:
    servers = kafka_cluster.servers
    with BlockingRaftlogClient(servers) as client:
        client.create_topic("doors", partitions=1, replication_factor=3)
    out = _cli(
        servers,
        "produce",
        "doors",
        "--partition",
        "0",
        "--key-separator",
        ":",
        "--header",
        "src=cli",
        stdin=b"k1:from-cli\n",
    )
    assert out.returncode == 0, out.stderr.decode()

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    try:
        producer.send(
            "doors", key=b"k2", value=b"from-kafka", partition=0, headers=[("src", b"kafka")]
        ).get(timeout=60)
    finally:
        producer.close()

    got = _consume_all(bootstrap, "doors", 1, 2)
    assert [(m.key, m.value, m.headers) for m in got] == [
        (b"k1", b"from-cli", [("src", b"cli")]),
        (b"k2", b"from-kafka", [("src", b"kafka")]),
    ]
    native = _raftlog_offsets(servers, "doors", 0, 2)
    assert [(r["offset"], r["key"], r["value"]) for r in native] == [
        (m.offset, m.key.decode(), m.value.decode()) for m in got
    ]
    assert native[1]["headers"] == [{"key": "src", "value": "kafka"}]


def test_metadata_leaders_are_the_raft_leaders(kafka_cluster, bootstrap) -> None:
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic("leaders", partitions=6, replication_factor=3)

        def same_leaders() -> None:
            # leaders are elected after the create, and the balancer may move one:
            # compare one view of Raft's with every node's Kafka answer, until they agree
            raft = {p.partition: p.leader for p in client.describe_topic("leaders").partitions}
            assert sorted(raft) == list(range(6))
            assert all(leader in (1, 2, 3) for leader in raft.values()), raft
            for address in bootstrap:  # every node answers the same, from Raft
                with Wire(address) as wire:
                    meta = wire.call(
                        MetadataRequest(topics=(MetadataRequestTopic(name="leaders"),))
                    )
                assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3]
                assert sorted(f"{b.host}:{b.port}" for b in meta.brokers) == sorted(bootstrap)
                (topic,) = meta.topics
                assert topic.error_code == 0
                assert {p.partition_index: p.leader_id for p in topic.partitions} == raft

        Retrying(
            stop=stop_after_delay(60) | stop_after_attempt(120),
            wait=wait_fixed(0.5),
            retry=retry_if_exception_type(AssertionError),
            reraise=True,
        )(same_leaders)


def test_a_node_of_several_processes_forwards_to_the_owning_shard(tmp_path) -> None:
    """With --shards 2 a node's Kafka listener (on shard 0) reaches the partitions of
    shard 1 through the node's forwarding, as its HTTP door does."""
    with running_cluster(tmp_path / "sharded", extra_args=["--shards", "2"]) as handle:
        bootstrap = handle.cluster.kafka_bootstrap
        _round_trip(handle, bootstrap, "sharded", enable_idempotence=False)
