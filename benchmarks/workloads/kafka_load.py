"""Kafka-protocol loads through confluent-kafka (librdkafka), the native client's
batched reads beside them, and the listener's record conversion cost per record.

confluent-kafka is a test extra (``pip install -e '.[test]'``); :func:`confluent`
raises :class:`benchmarks.registry.Skip` with that command when it is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any

from benchmarks.registry import Skip
from benchmarks.workloads.latency import latency_columns

RECORD_SIZE = 100
FLUSH_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 300.0
FETCH_BYTES = 1 << 20


def confluent() -> Any:
    """The ``confluent_kafka`` module, or Skip naming the install command."""
    try:
        import confluent_kafka
    except ImportError:
        raise Skip("confluent-kafka is not installed: pip install -e '.[test]'") from None
    return confluent_kafka


@dataclasses.dataclass
class ProduceResult:
    records: int  # acknowledged
    seconds: float  # from the first produce() to the last acknowledgement
    latencies_s: list[float]  # per record: produce() to its delivery report
    errors: int = 0
    first_error: str = ""
    #: this process's CPU seconds over the run (the Python loop and librdkafka's threads)
    client_cpu_s: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def kafka_produce(
    bootstrap: list[str],
    topic: str,
    seconds: float,
    max_records: int,
    queued: int | None = None,
) -> ProduceResult:
    """confluent-kafka's idempotent producer writing 100-byte records to partition 0 for
    ``seconds``; produce() waits, polling, while its queue is full. Its settings are what
    a user gets asking for acks=all and idempotence: ``acks=all``,
    ``enable.idempotence=true``, and librdkafka's defaults for the rest (linger.ms 5,
    batch.size 1,000,000 bytes, batch.num.messages 10,000, queue.buffering.max.messages
    100,000, compression none, max.in.flight.requests.per.connection 1,000,000, which
    idempotence caps at 5).

    Even so one produce request is in flight per partition: librdkafka's idempotent
    producer counts the *messages* in flight (``rktp_msgs_inflight``) against that
    window of 5, so a batch of more than 5 records fills it (the listener's trace shows
    each produce request arriving after the previous one was answered, with
    max.in.flight 5 set explicitly too). Its throughput is a batch per round trip,
    against any broker.

    ``queued``: librdkafka's queue bound (``queue.buffering.max.messages``; None: its
    default, 100,000), which is also the records unacknowledged: a record's latency
    is mostly its wait in that queue when the queue is long."""
    ck = confluent()
    producer = ck.Producer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "acks": "all",
            "enable.idempotence": True,
            **({} if queued is None else {"queue.buffering.max.messages": queued}),
        }
    )
    value = os.urandom(RECORD_SIZE)
    clock = time.perf_counter
    result = ProduceResult(0, 0.0, [])
    last_ack = [0.0]

    def delivered(t0: float, err: Any, _msg: Any) -> None:
        now = clock()
        last_ack[0] = now
        if err is not None:
            result.errors += 1
            result.first_error = result.first_error or str(err)
            return
        result.latencies_s.append(now - t0)

    start = clock()
    cpu_start = time.process_time()
    deadline = start + seconds
    sent = 0
    while sent < max_records and clock() < deadline:
        try:
            producer.produce(
                topic, value, partition=0, on_delivery=functools.partial(delivered, clock())
            )
            sent += 1
        except BufferError:  # the queue holds `outstanding` records: wait for reports
            producer.poll(0.001)
            continue
        if sent % 512 == 0:
            producer.poll(0)
    left = producer.flush(FLUSH_TIMEOUT_S)
    result.errors += left
    result.records = len(result.latencies_s)
    result.seconds = (last_ack[0] or clock()) - start
    result.client_cpu_s = time.process_time() - cpu_start
    return result


def kafka_consume(
    bootstrap: list[str], topic: str, records: int, settings: dict[str, Any] | None = None
) -> tuple[int, float]:
    """(records read, seconds) for a confluent-kafka consumer assigned partition 0 from
    its beginning, until it has read ``records`` (bounded by READ_TIMEOUT_S); timed
    from the assignment, once the consumer has the topic's metadata. librdkafka's
    defaults unless ``settings`` (librdkafka's property names) says otherwise:
    fetch.min.bytes 1, fetch.wait.max.ms 500, max.partition.fetch.bytes 1 MiB (so one
    ~1 MB producer batch a fetch), fetch.max.bytes 50 MiB, queued.min.messages 100,000
    prefetched, and fetch.queue.backoff.ms 1,000: once the local queue holds
    queued.min.messages, the next fetch of the partition is put off (up to that long)."""
    ck = confluent()
    consumer = ck.Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "bench-unused",  # assigned, never joined
            "enable.auto.commit": False,
            **(settings or {}),
        }
    )
    clock = time.perf_counter
    read = 0
    try:
        # connected and the topic's leader known before the clock starts, as the native
        # client is (it created the topics)
        consumer.list_topics(topic, timeout=FLUSH_TIMEOUT_S)
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        start = clock()
        deadline = start + READ_TIMEOUT_S
        while read < records and clock() < deadline:
            # at most what is left: consume() waits out its timeout for a count that
            # never comes (0.5 s after the last record, timed as reading)
            for m in consumer.consume(min(10_000, records - read), 0.5):
                if m.error() is None:
                    read += 1
        return read, clock() - start
    finally:
        consumer.close()


def kafka_consume_prefetched(bootstrap: list[str], topic: str, records: int) -> float:
    """Records/s of confluent-kafka's consume() once librdkafka holds all ``records``
    of partition 0 in its local queue: the client's own ceiling (a Python object per
    record), with no fetch round trip in the timing. Prefetching is waited for by
    librdkafka's statistics (the partition's fetch queue count), bounded by
    READ_TIMEOUT_S; 0.0 when it never holds them all."""
    import json

    ck = confluent()
    queued = [0]

    def stats(text: str) -> None:
        for t in json.loads(text).get("topics", {}).values():
            part = t.get("partitions", {}).get("0")
            if part is not None:
                queued[0] = int(part.get("fetchq_cnt", 0))

    consumer = ck.Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "queued.min.messages": records + 1,
            "queued.max.messages.kbytes": 2_000_000,
            "statistics.interval.ms": 100,
            "stats_cb": stats,
        }
    )
    clock = time.perf_counter
    try:
        consumer.list_topics(topic, timeout=FLUSH_TIMEOUT_S)
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        deadline = clock() + READ_TIMEOUT_S
        read = 0  # poll() serves the statistics callback, and may hand a record over
        while read + queued[0] < records and clock() < deadline:
            m = consumer.poll(0.1)
            read += m is not None and m.error() is None
        if read + queued[0] < records:
            return 0.0
        timed_from = read
        start = clock()
        while read < records and clock() < deadline:
            for m in consumer.consume(min(10_000, records - read), 0.5):
                if m.error() is None:
                    read += 1
        seconds = clock() - start
        return (read - timed_from) / seconds if seconds > 0 else 0.0
    finally:
        consumer.close()


async def native_consume(client: Any, topic: str, records: int) -> tuple[int, float]:
    """(records read, seconds) for the native client fetching partition 0 from offset 0
    in 1 MiB fetches, one at a time, counting each batch's records (no per-record
    decoding: the batched path)."""
    clock = time.perf_counter
    read, offset = 0, 0
    start = clock()
    deadline = start + READ_TIMEOUT_S
    while read < records and clock() < deadline:
        r = await client.fetch(topic, 0, offset, max_bytes=FETCH_BYTES)
        read += sum(b.record_count for b in r.batches)
        offset = r.next_offset
    return read, clock() - start


def conversion_cost(records: int = 1000, rounds: int = 20) -> dict[str, float]:
    """CPU microseconds per record of the listener's conversions, in this process:
    a produced RecordBatch v2 of ``records`` 100-byte records (keyed) into raftlog's
    keyed payload (CRC check and decode included), and a stored batch back into a
    RecordBatch v2 for a fetch."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from raftlog.kafka.records import decode_batch, encode_batch
    from raftlog.storage.batch import RecordBatch

    builder = DefaultRecordBatchBuilder(2, 0, False, 1, 0, 0, 2**31 - 1)
    value = os.urandom(RECORD_SIZE)
    for i in range(records):
        builder.append(i, 1_700_000_000_000 + i, b"key-%d" % i, value, [])
    produced = bytes(builder.build())
    clock = time.process_time
    t0 = clock()
    for _ in range(rounds):
        decoded = decode_batch(produced)
    produce_s = clock() - t0
    stored = RecordBatch.create(decoded.payload, decoded.record_count)
    t0 = clock()
    for _ in range(rounds):
        encode_batch(stored)
    fetch_s = clock() - t0
    per = 1e6 / (records * rounds)
    return {"produce us/record": produce_s * per, "fetch us/record": fetch_s * per}


def latency(values_s: list[float]) -> dict[str, float]:
    """The p50 and p99 columns (ms) of :func:`latency_columns`."""
    cols = latency_columns(values_s)
    return {k: cols[k] for k in ("p50 ms", "p99 ms") if k in cols}
