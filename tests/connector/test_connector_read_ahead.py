"""The source's read of one range fetches the next chunk of the log before it decodes the
one it holds (``read_range``), and still reads every record once, in order.

The client is scripted (a log of stored batches, each fetch answered from it), so
what is asserted is what the reader asks for and yields, fetch by fetch.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_raftlog import source
from pyspark_raftlog.arrow_payload import encode_payload
from pyspark_raftlog.options import parse_source_options
from pyspark_raftlog.source import RaftlogInputPartition, read_range
from pyspark_raftlog.spark_schema import METADATA_FIELDS

from raftlog.client import OffsetOutOfRangeError
from raftlog.client.results import FetchResult
from raftlog.storage.batch import RecordBatch

ROWS_PER_BATCH = 10
BATCHES_PER_FETCH = 3


class ScriptedClient:
    """A blocking client over a log of ``batches`` stored batches of ``v`` = offset;
    a fetch answers up to BATCHES_PER_FETCH of them. ``events`` records each fetch
    sent, in order, with what the reader had yielded by then."""

    def __init__(self, batches: int, start: int = 0) -> None:
        self.log = [
            RecordBatch.create(
                encode_payload(
                    pa.record_batch([pa.array(range(b, b + ROWS_PER_BATCH), pa.int64())], ["v"])
                ),
                ROWS_PER_BATCH,
                timestamp_ms=1,
            ).stamped(b, 1)
            for b in range(0, batches * ROWS_PER_BATCH, ROWS_PER_BATCH)
        ]
        self.start = start
        self.events: list[tuple[str, int]] = []
        self.pending: list[concurrent.futures.Future[Any]] = []
        self.closed = False

    # the async client's fetch, answered at once
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        self.events.append(("fetch", offset))
        if offset < self.start:
            raise OffsetOutOfRangeError(f"offset {offset} is below the log start {self.start}")
        found = [b for b in self.log if b.last_offset >= offset][:BATCHES_PER_FETCH]
        end = len(self.log) * ROWS_PER_BATCH
        nxt = found[-1].last_offset + 1 if found else offset
        return FetchResult(found, end, end, self.start, nxt)

    def submit(self, fn: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(self))
        except Exception as exc:
            future.set_exception(exc)
        self.pending.append(future)
        return future

    def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        end = len(self.log) * ROWS_PER_BATCH
        return self.start, end, end

    def close(self) -> None:
        self.closed = True


SCHEMA = StructType(
    [StructField("v", LongType()), *(StructField(f.name, f.dataType) for f in METADATA_FIELDS)]
)


def _read(client: ScriptedClient, start: int, end: int, **opts: str) -> Any:
    o = parse_source_options({"topic": "t", **opts}, streaming=False)
    return read_range(o, ["h:1"], SCHEMA, RaftlogInputPartition(0, start, end, "t"))


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(client: ScriptedClient) -> ScriptedClient:
        monkeypatch.setattr(source.worker_loop, "shared_blocking_client", lambda *a, **k: client)
        return client

    return install


@pytest.mark.parametrize(("start", "end"), [(0, 200), (5, 200), (0, 117), (33, 34), (95, 160)])
def test_every_record_of_the_range_once_in_order(scripted: Any, start: int, end: int) -> None:
    client = scripted(ScriptedClient(batches=20))
    values: list[int] = []
    for out in _read(client, start, end):
        values.extend(out.column(0).to_pylist())
    assert values == list(range(start, end))
    assert not client.closed  # the worker's shared client outlives the task


def test_the_next_fetch_is_sent_before_this_one_is_decoded(scripted: Any) -> None:
    """When the first output batch is yielded, the fetch after it was already sent."""
    client = scripted(ScriptedClient(batches=20))
    reader = _read(client, 0, 200)
    next(reader)
    assert client.events == [("fetch", 0), ("fetch", BATCHES_PER_FETCH * ROWS_PER_BATCH)]
    reader.close()


def test_no_fetch_past_the_range_and_a_closed_read_cancels_its_fetch(scripted: Any) -> None:
    client = scripted(ScriptedClient(batches=20))
    list(_read(client, 0, 60))
    assert client.events == [("fetch", 0), ("fetch", 30)]  # 60 is the end: not fetched

    client = scripted(ScriptedClient(batches=20))
    reader = _read(client, 0, 200)
    next(reader)
    reader.close()  # the task ends early (a limit, a failure elsewhere)
    assert client.pending[-1].cancelled() or client.pending[-1].done()
    assert not client.closed


def test_records_removed_under_the_reader_are_data_loss_by_name(scripted: Any) -> None:
    """Retention moved the log start past the range's start: the fetch ahead fails as the
    fetch in hand did, with failOnDataLoss's error naming the offsets."""
    client = scripted(ScriptedClient(batches=20, start=50))
    with pytest.raises(Exception, match=r"offsets 0\.\.49 .* were removed"):
        list(_read(client, 0, 200))
    client = scripted(ScriptedClient(batches=20, start=50))
    values = []
    for out in _read(client, 0, 200, failOnDataLoss="false"):
        values.extend(out.column(0).to_pylist())
    assert values == list(range(50, 200))
