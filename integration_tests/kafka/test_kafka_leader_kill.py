"""A partition leader killed (SIGKILL, by PID, through the cluster handle) while
kafka-python writes with its defaults (idempotent, acks=all): every send succeeds, and
reading everything back gives exactly the records written, each once, in order per
partition, at the offsets the producer was told. This module has a cluster of its own
(the fixture is per module), since it kills one of its nodes."""

from __future__ import annotations

import collections
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tenacity import Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from raftlog.client import BlockingRaftlogClient

N = 30_000
PARTITIONS = 3
KILL_AFTER = 8_000  # records acknowledged before the kill: the write is well under way
TIMEOUT_S = 180


def _leaders(servers: list[str], topic: str) -> dict[int, int]:
    with BlockingRaftlogClient(servers) as client:
        return {p.partition: p.leader for p in client.describe_topic(topic).partitions}


def test_a_leader_killed_during_an_idempotent_write_loses_and_duplicates_nothing(
    kafka_cluster, bootstrap
) -> None:
    topic = "leader-kill"
    servers = kafka_cluster.servers
    with BlockingRaftlogClient(servers) as client:
        client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    leaders = Retrying(
        stop=stop_after_delay(60) | stop_after_attempt(300),
        wait=wait_fixed(0.2),
        retry=retry_if_result(lambda ls: not all(v in (1, 2, 3) for v in ls.values())),
    )(lambda: _leaders(servers, topic))

    producer = KafkaProducer(bootstrap_servers=bootstrap)  # defaults: idempotent, acks=all
    assert producer.config["enable_idempotence"] and producer.config["acks"] in (-1, "all")
    victim = leaders[0]
    try:
        futures = []
        killed_at = None
        for i in range(N):
            futures.append(
                producer.send(
                    topic, key=b"key-%d" % i, value=b"value-%d" % i, partition=i % PARTITIONS
                )
            )
            if i == KILL_AFTER + 2_000:
                # some acknowledged, more in flight and buffered: kill partition 0's leader
                futures[KILL_AFTER].get(timeout=TIMEOUT_S)
                killed_at = i
                kafka_cluster.kill(victim)
                assert not kafka_cluster.alive(victim)
            if i % 500 == 0:
                time.sleep(0.01)  # the write spans the kill and the election after it
        producer.flush(timeout=TIMEOUT_S)
        acked = [f.get(timeout=TIMEOUT_S) for f in futures]
    finally:
        producer.close(timeout=30)
    assert killed_at is not None
    after = _leaders(servers, topic)
    assert after[0] != victim, f"partition 0 is still led by the killed node {victim}"

    sent: dict[int, list[tuple[int, bytes, bytes]]] = collections.defaultdict(list)
    for i, meta in enumerate(acked):
        sent[meta.partition].append((meta.offset, b"key-%d" % i, b"value-%d" % i))

    consumer = KafkaConsumer(
        bootstrap_servers=[a for n, a in enumerate(bootstrap, 1) if n != victim],
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    read: dict[int, list[tuple[int, bytes, bytes]]] = collections.defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        for _ in range(60):  # bounded: each pass ends after 5 s without a record
            for m in consumer:
                read[m.partition].append((m.offset, m.key, m.value))
            if sum(map(len, read.values())) >= N:
                break
    finally:
        consumer.close()
    keys = [k for records in read.values() for _, k, _ in records]
    assert len(keys) == len(set(keys)), "a record was written twice"
    assert sum(map(len, read.values())) == N, "a record was lost"
    # exactly the records written, once each, in order, at the offsets acknowledged
    assert dict(read) == dict(sent)


def test_a_confluent_consumer_reads_on_through_a_leader_kill(kafka_cluster, bootstrap) -> None:
    """librdkafka reading a partition whose leader is SIGKILLed mid-read: with
    Metadata capped at v6 (no leader epochs, so no OffsetForLeaderEpoch validation)
    it finds the new leader and reads on from its position, every record once, in
    order, to the end of the log."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkPartition

    for node in (1, 2, 3):  # the test above may have left a node dead
        if not kafka_cluster.alive(node):
            kafka_cluster.restart(node)
    topic, total, kill_at = "leader-kill-read", 20_000, 5_000
    servers = kafka_cluster.servers
    with BlockingRaftlogClient(servers) as client:
        client.create_topic(topic, partitions=1, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(total):
            producer.send(topic, value=b"v%d" % i, partition=0)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=30)
    with BlockingRaftlogClient(servers) as client:
        _, hwm, _ = client.list_offsets(topic, 0)
    victim = _leaders(servers, topic)[0]
    assert victim in (1, 2, 3)

    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "unused",
            "enable.auto.commit": False,
            # small fetches, a small prefetch queue: the kill lands mid-read
            "max.partition.fetch.bytes": 64 * 1024,
            "queued.max.messages.kbytes": 256,
        }
    )
    read: list[tuple[int, bytes]] = []
    killed = False
    try:
        consumer.assign([CkPartition(topic, 0, -2)])  # -2: the beginning
        deadline = time.monotonic() + TIMEOUT_S
        position = -1
        end = -1
        while time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                read.append((m.offset(), m.value()))
            if not killed and len(read) >= kill_at:
                kafka_cluster.kill(victim)
                killed = True
            (tp,) = consumer.position([CkPartition(topic, 0)])
            position = tp.offset
            # a new leader appends a batch of its term when elected: the end moves past
            # hwm, and again at each later election (the leader balancer's transfer back
            # is one), so the end is read now, while the consumer is at it
            if len(read) >= total and position > hwm:
                with BlockingRaftlogClient(servers) as client:
                    _, end, _ = client.list_offsets(topic, 0)
                if position == end:
                    break
    finally:
        consumer.close()
    assert killed and not kafka_cluster.alive(victim)
    assert [v for _, v in read] == [b"v%d" % i for i in range(total)]  # once each, in order
    offsets = [o for o, _ in read]
    assert offsets == sorted(set(offsets))
    assert position > hwm, f"the consumer stopped at {position}, before the new leader's batch"
    assert position == end, f"the consumer stopped at {position}, the log ends at {end}"
