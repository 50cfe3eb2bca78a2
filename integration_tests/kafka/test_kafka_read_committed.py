"""Real Kafka consumers against transactions written by raftlog's own transactional
producer: read_committed (kafka-python, confluent-kafka) reads exactly the committed
records and never an aborted one, read_uncommitted reads every data record, and both
end with their position at the end of the log (past the transaction markers and
aborted data, which they never see), so a consumer's lag drains to zero."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition

from raftlog.client import BlockingRaftlogClient
from raftlog.records.framing import frame_records

TOPIC = "read-committed"
READ_TIMEOUT_S = 60.0


def _write(servers: list[str]) -> tuple[list[bytes], list[bytes], int]:
    """plain A, an aborted transaction, plain B, a committed transaction, plain C;
    then an aborted transaction last of all, so the log ends with a marker after
    aborted data. (committed values in order, every data value in order, the HWM)."""
    with BlockingRaftlogClient(servers) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=3)

        def plain(value: bytes) -> None:
            client.produce(TOPIC, 0, [(frame_records([value]), 1)])

        def transaction(values: list[bytes], commit: bool) -> None:
            producer = client.idempotent_producer(TOPIC, 0, transactional=True)
            try:
                for v in values:
                    producer.send([v]).result(60)
                producer.commit() if commit else producer.abort()
            finally:
                producer.close(flush=False)

        plain(b"A")
        transaction([b"aborted-1", b"aborted-2", b"aborted-3"], commit=False)
        plain(b"B")
        transaction([b"committed-1", b"committed-2"], commit=True)
        plain(b"C")
        transaction([b"aborted-4"], commit=False)
        _, hwm, lso = client.list_offsets(TOPIC, 0)
        assert lso == hwm, "no transaction is open"
    committed = [b"A", b"B", b"committed-1", b"committed-2", b"C"]
    every = [b"A", b"aborted-1", b"aborted-2", b"aborted-3", b"B", b"committed-1"]
    every += [b"committed-2", b"C", b"aborted-4"]
    return committed, every, hwm


def _kafka_python(bootstrap: list[str], isolation: str, expect: int) -> tuple[list[bytes], int]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=3000,
    )
    tp = TopicPartition(TOPIC, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            got += [m.value for m in consumer]
            if len(got) >= expect:
                # one more pass: nothing else is read, and the position moves to the end
                got += [m.value for m in consumer]
                break
        return got, consumer.position(tp)
    finally:
        consumer.close()


def test_kafka_python_read_committed_and_uncommitted(kafka_cluster, bootstrap) -> None:
    committed, every, hwm = _write(kafka_cluster.servers)
    got, position = _kafka_python(bootstrap, "read_committed", len(committed))
    assert got == committed
    assert position == hwm, f"read_committed stopped at {position}, the log ends at {hwm}"
    got, position = _kafka_python(bootstrap, "read_uncommitted", len(every))
    assert got == every
    assert position == hwm, f"read_uncommitted stopped at {position}, the log ends at {hwm}"


def test_confluent_kafka_read_committed(kafka_cluster, bootstrap) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkPartition

    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        _, hwm, _ = client.list_offsets(TOPIC, 0)  # written by the test above
    assert hwm > 0
    committed = [b"A", b"B", b"committed-1", b"committed-2", b"C"]
    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([CkPartition(TOPIC, 0, -2)])  # -2: the beginning
        deadline = time.monotonic() + READ_TIMEOUT_S
        position = -1
        while time.monotonic() < deadline:
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            (tp,) = consumer.position([CkPartition(TOPIC, 0)])
            position = tp.offset
            if len(got) >= len(committed) and position == hwm:
                break
    finally:
        consumer.close()
    assert got == committed
    assert position == hwm, f"read_committed stopped at {position}, the log ends at {hwm}"
