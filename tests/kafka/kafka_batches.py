"""Kafka RecordBatch v2 test data shared by the record tests: random records (Kafka's
model: key, value, headers, CreateTime) and kafka-python's builder of a batch of them."""

from __future__ import annotations

from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from raftlog.records.framing import Record


def records_strategy(
    max_value: int = 40, max_key: int = 10, max_records: int = 20
) -> st.SearchStrategy[list[Record]]:
    """1..``max_records`` records; timestamps up to 2**41 (deltas past 2**20 too)."""
    return st.lists(
        st.builds(
            Record,
            value=st.none() | st.binary(max_size=max_value),
            key=st.none() | st.binary(max_size=max_key),
            headers=st.lists(
                st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3
            ).map(tuple),
            timestamp_ms=st.integers(0, 2**41),
        ),
        min_size=1,
        max_size=max_records,
    )


def kafka_batch(records: list[Record], codec: int = 0, producer: tuple = (-1, -1, -1)) -> bytes:
    """``records`` as one batch by kafka-python's builder (offset deltas 0..n-1)."""
    builder = DefaultRecordBatchBuilder(2, codec, False, *producer, 2**30)
    for i, r in enumerate(records):
        builder.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
    return bytes(builder.build())
