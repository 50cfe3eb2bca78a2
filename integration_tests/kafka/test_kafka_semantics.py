"""Kafka semantics the listener maps onto raftlog's: isolation_level against an open
transaction (read_committed stops at the last stable offset, and an aborted one is
never read committed), acks=0 writes with no answer, and a follower answers a produce
NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import datetime

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_wire import Wire, leader_address, produce_request, record_batch
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest

from raftlog.client import BlockingRaftlogClient
from raftlog.records.framing import frame_records

NOT_LEADER_OR_FOLLOWER = 6
INVALID_TXN_STATE = 48


def _fetch(address: str, topic: str, offset: int, isolation: int) -> tuple[int, int, list]:
    """(high watermark, last stable offset, [(offset, value)]) of one Kafka fetch v11."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        isolation_level=isolation,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with Wire(address) as wire:
        answer = wire.call(request)
    (part,) = answer.responses[0].partitions
    assert part.error_code == 0, part
    records = []
    batches = MemoryRecords(part.records or b"")
    while batches.has_next():
        batch = batches.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        if not batch.is_control_batch:  # as clients do: never handed to the application
            records += [(r.offset, r.value) for r in batch]
    return part.high_watermark, part.last_stable_offset, records


def test_a_transactional_batch_is_refused_and_holds_no_reader_back(
    kafka_cluster, bootstrap
) -> None:
    """The listener has no Kafka transactions, so no coordinator would end a transaction a
    Kafka client opens: a transactional batch (from an InitProducerId producer, as a
    hostile or buggy client sends it) gets INVALID_TXN_STATE and is not stored, and a
    read_committed fetch sees the batch after it at once. Stored, it held the partition's
    last stable offset below that batch until the transaction timeout (60 s)."""
    topic = "txn-refused"
    address = leader_address(kafka_cluster, bootstrap, topic)
    with Wire(address) as wire:
        init = wire.call(
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)
            )
        )
        assert init.error_code == 0
        builder = DefaultRecordBatchBuilder(
            2, 0, True, init.producer_id, init.producer_epoch, 0, 2**20
        )
        builder.append(0, 1_700_000_000_000, b"k", b"open-transaction", [])
        answer = wire.call(produce_request(topic, bytes(builder.build())), correlation_id=2)
        (refused,) = answer.responses[0].partition_responses
        assert refused.error_code == INVALID_TXN_STATE, refused
        assert "transactional" in (refused.error_message or ""), refused
        plain = wire.call(produce_request(topic, bytes(record_batch())), correlation_id=3)
        (stored,) = plain.responses[0].partition_responses
        assert stored.error_code == 0, stored
    hwm, lso, records = _fetch(address, topic, 0, isolation=1)
    assert lso == hwm, (lso, hwm)
    assert [v for _, v in records] == [b"value-0", b"value-1", b"value-2"]
    _, _, uncommitted = _fetch(address, topic, 0, isolation=0)
    assert [v for _, v in uncommitted] == [b"value-0", b"value-1", b"value-2"]


def test_isolation_level_against_open_and_aborted_transactions(kafka_cluster, bootstrap) -> None:
    topic = "txn-isolation"
    address = leader_address(kafka_cluster, bootstrap, topic)
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        committed = client.produce(topic, 0, [(frame_records([b"plain"]), 1)])
        producer = client.idempotent_producer(topic, 0, transactional=True)
        try:
            open_tx = producer.send([b"in-flight"]).result(60)
            hwm, lso, uncommitted = _fetch(address, topic, committed.base_offset, 0)
            assert lso == open_tx.base_offset < hwm
            assert (open_tx.base_offset, b"in-flight") in uncommitted
            _, _, visible = _fetch(address, topic, committed.base_offset, 1)
            assert visible == [(committed.base_offset, b"plain")]  # stops at the LSO
            producer.abort()
        finally:
            producer.close(flush=False)
    _, lso_after, visible = _fetch(address, topic, committed.base_offset, 1)
    assert lso_after > open_tx.base_offset
    assert visible == [(committed.base_offset, b"plain")]  # the aborted record never shows


def test_acks_zero_writes_without_an_answer(kafka_cluster, bootstrap) -> None:
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic("acks-zero", partitions=1, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=0, enable_idempotence=False)
    try:
        for i in range(20):
            producer.send("acks-zero", value=b"v%d" % i, partition=0)
        producer.flush(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition("acks-zero", 0)])
        consumer.seek_to_beginning()
        got = []
        for _ in range(10):
            got += [m.value for m in consumer]
            if len(got) >= 20:
                break
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(20)]


def test_a_follower_answers_not_leader_or_follower(kafka_cluster, bootstrap) -> None:
    topic = "edge-follower"
    leader = leader_address(kafka_cluster, bootstrap, topic)
    follower = next(a for a in bootstrap if a != leader)
    with Wire(follower) as wire:
        answer = wire.call(produce_request(topic, bytes(record_batch())))
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == NOT_LEADER_OR_FOLLOWER, part


def test_a_transactional_producer_fails_at_once_naming_what_is_not_supported(bootstrap) -> None:
    """confluent-kafka's init_transactions gets a fatal error within a second, saying
    that the listener has no Kafka transactions: it used to retry FindCoordinator's
    INVALID_REQUEST until its own timeout and say only "Timed out"."""
    import time

    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": ",".join(bootstrap), "transactional.id": "t-1"})
    started = time.monotonic()
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(30)
    error = caught.value.args[0]
    assert time.monotonic() - started < 10
    assert error.fatal() and error.code() == 53, error  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "Kafka transactions (key_type 1, a transactional.id) are not supported" in error.str()
