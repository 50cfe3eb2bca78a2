"""More clients on the Kafka listener: kcat's metadata listing, confluent-kafka
(librdkafka) idempotent producer and assigned consumer, kafka-python's offset lookups
(ListOffsets: earliest, latest, by timestamp), and a typed topic refused by format."""

from __future__ import annotations

import collections
import datetime
import json
import shutil
import subprocess
import time

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka_wire import Wire
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from raftlog.client import BlockingRaftlogClient
from raftlog.records.framing import Record, frame_keyed

UNSUPPORTED_FOR_MESSAGE_FORMAT = 43


def _until_true(check, what: str) -> None:
    Retrying(
        stop=stop_after_delay(60) | stop_after_attempt(120),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type(AssertionError),
        reraise=True,
    )(check)


def test_kcat_lists_topics_and_the_raft_leaders(kafka_cluster, bootstrap) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: apt-get install kcat (scripts/env.sh installs it)"
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic("kcat-topic", partitions=3, replication_factor=3)

        def same() -> None:
            raft = {p.partition: p.leader for p in client.describe_topic("kcat-topic").partitions}
            listed = subprocess.run(
                [kcat, "-b", bootstrap[0], "-L", "-J", "-t", "kcat-topic"],
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert listed.returncode == 0, listed.stderr.decode()
            meta = json.loads(listed.stdout)
            assert sorted(b["id"] for b in meta["brokers"]) == [1, 2, 3]
            (topic,) = meta["topics"]
            assert topic["topic"] == "kcat-topic"
            assert {p["partition"]: p["leader"] for p in topic["partitions"]} == raft

        _until_true(same, "kcat's leaders equal raft's")


def test_confluent_kafka_idempotent_producer_and_assigned_consumer(bootstrap) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    servers = ",".join(bootstrap)
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic("ck-topic", 3, 3)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True})
    delivered: dict[int, list[tuple[int, bytes]]] = collections.defaultdict(list)

    def on_delivery(err, msg) -> None:
        assert err is None, err
        delivered[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(2000):
        producer.produce(
            "ck-topic", key=b"k%d" % (i % 50), value=b"v%d" % i, on_delivery=on_delivery
        )
        producer.poll(0)
    assert producer.flush(120) == 0
    assert sum(map(len, delivered.values())) == 2000

    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "unused", "enable.auto.commit": False}
    )
    read: dict[int, list[tuple[int, bytes]]] = collections.defaultdict(list)
    try:
        consumer.assign([CkPartition("ck-topic", p, -2) for p in range(3)])  # -2: beginning
        deadline = time.monotonic() + 120
        while sum(map(len, read.values())) < 2000 and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                assert m.error() is None, m.error()
                read[m.partition()].append((m.offset(), m.value()))
    finally:
        consumer.close()
    assert {p: sorted(v) for p, v in delivered.items()} == dict(read)


def test_list_offsets_earliest_latest_and_by_timestamp(kafka_cluster, bootstrap) -> None:
    """By timestamp: the first batch appended at or after it, found through the
    partition's time index (batches are stamped when appended: LogAppendTime)."""
    topic = "offsets-topic"
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic(topic, partitions=1, replication_factor=3)
        before, offsets = [], []
        for _ in range(3):
            before.append(int(time.time() * 1000))
            time.sleep(0.05)
            r = client.produce(topic, 0, [(frame_keyed([Record(b"v", b"k")]), 1)])
            offsets.append(r.base_offset)
            time.sleep(0.05)
        start, hwm, _ = client.list_offsets(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: start}
        assert consumer.end_offsets([tp]) == {tp: hwm}
        found = consumer.offsets_for_times({tp: before[1]})[tp]
        assert found.offset == offsets[1] and before[1] <= found.timestamp < before[2]
        assert consumer.offsets_for_times({tp: int(time.time() * 1000) + 60_000})[tp] is None
    finally:
        consumer.close()


def test_a_typed_topic_is_refused_by_format(kafka_cluster, bootstrap) -> None:
    table = pa.table({"x": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic(
            "typed",
            partitions=1,
            replication_factor=3,
            schema=table.schema.serialize().to_pybytes(),
        )
        client.produce("typed", 0, [(sink.getvalue().to_pybytes(), 2)])
    fetch = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        topics=(
            FetchTopic(
                topic="typed",
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with Wire(bootstrap[0]) as wire:
        answer = wire.call(fetch)
    (part,) = answer.responses[0].partitions
    assert part.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT and not part.records
    log = (kafka_cluster.data_dir / "node-1.log").read_text()
    assert "topic 'typed' is a typed topic (Arrow IPC records with a schema)" in log
