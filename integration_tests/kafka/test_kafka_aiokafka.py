"""aiokafka (asyncio, its own protocol code) against the Kafka listener: its idempotent
producer round-trips 10,000 records, read back exactly by an explicitly assigned
consumer (no group), in order per partition, at the offsets the producer was told."""

from __future__ import annotations

import asyncio
import collections

try:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition
except ImportError as exc:  # a test that needs something missing fails with the command
    raise ImportError(
        "the aiokafka tests need aiokafka: pip install -e '.[test]' (or source scripts/env.sh)"
    ) from exc

from raftlog.client import BlockingRaftlogClient

N = 10_000
PARTITIONS = 3
READ_TIMEOUT_S = 120.0


async def test_aiokafka_idempotent_producer_round_trips_10000_records(
    kafka_cluster, bootstrap
) -> None:
    topic = "aiokafka-topic"
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                key=b"k%d" % i,
                value=b"aiokafka-%d" % i,
                partition=i % PARTITIONS,
                headers=[("i", str(i).encode())],
            )
            for i in range(N)
        ]
        acked = await asyncio.wait_for(asyncio.gather(*futures), READ_TIMEOUT_S)
    finally:
        await producer.stop()
    sent: dict[int, list[tuple[int, bytes, bytes]]] = collections.defaultdict(list)
    for i, meta in enumerate(acked):
        sent[meta.partition].append((meta.offset, b"k%d" % i, b"aiokafka-%d" % i))
    for p, records in sent.items():  # the acknowledged offsets are dense and increasing
        offsets = [o for o, _, _ in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), p

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    read: dict[int, list[tuple[int, bytes, bytes]]] = collections.defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_S
        while sum(map(len, read.values())) < N and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
            for tp, messages in batches.items():
                for m in messages:
                    assert list(m.headers) == [("i", m.value.removeprefix(b"aiokafka-"))]
                    read[tp.partition].append((m.offset, m.key, m.value))
    finally:
        await consumer.stop()
    # exactly the records written: none lost, none twice, in order per partition
    assert dict(read) == dict(sent)
