"""The raftlog source: ``spark.readStream.format("raftlog")`` and ``spark.read.format("raftlog")``.

Topics: option ``topic``, ``subscribe`` (a list) or ``subscribePattern`` (a
regex over whole names, re-evaluated at every trigger, so topics created while
the query runs are picked up from their beginning). Every row carries
``__raftlog_topic``, ``__raftlog_partition``, ``__raftlog_offset`` and
``__raftlog_timestamp``. A topic of raw records (``raftlog produce``, or the
sink given Kafka's columns) reads with Kafka's schema (``key``, ``value``,
``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``,
``headers``).

Only committed records are read: offsets end at each partition's last stable
offset (LSO), and fetches use ``read_committed``, so data of open or aborted
transactions is never returned. Offsets are Kafka-style JSON
``{"<topic>": {"<partition>": next_offset}}`` (see :mod:`pyspark_raftlog.offsets`).

``read()`` yields the stored Arrow record batches themselves (sliced to the
planned range, plus the metadata columns): no row-by-row path. One Spark input
partition per topic partition, cut further for ``minPartitions``.

Admission control: ``maxRecordsPerTrigger`` (offsets per trigger; transaction
markers occupy offsets too, so slightly fewer records may be read) and
``maxBytesPerTrigger`` (stored payload bytes). The byte limit is measured by
fetching the candidate batches on the driver, so it costs a second read of the
admitted data; it is soft by at most one record batch, which is always admitted
so that the stream makes progress. ``Trigger.AvailableNow`` reads up to the
LSOs seen when the query started.

``failOnDataLoss`` (default true): when the offsets to read were removed by
retention, the task fails naming the lost range; when false, it skips ahead to
the log start and logs a warning.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from pyspark_raftlog import worker_loop
from pyspark_raftlog.admission import TriggerDelay, limit_end_offsets
from pyspark_raftlog.arrow_payload import conform_batch, decode_payload
from pyspark_raftlog.connection import open_blocking_client
from pyspark_raftlog.errors import DataLossError
from pyspark_raftlog.logsetup import get_logger
from pyspark_raftlog.offsets import (
    OffsetDocumentError,
    TopicPartition,
    format_topic_offsets,
    parse_topic_ids,
    parse_topic_offsets,
    resolve_topic_spec,
)
from pyspark_raftlog.options import OffsetSpec, SourceOptions
from pyspark_raftlog.spark_schema import METADATA_FIELDS, arrow_schema_of, is_raw_read
from pyspark_raftlog.splits import split_ranges

from raftlog.client.errors import CorruptBatchError
from raftlog.records.payload_check import check_payload

__all__ = ["RaftlogBatchReader", "RaftlogInputPartition", "RaftlogStreamReader"]

FETCH_BYTES = 16 * 1024 * 1024
"""Bytes asked for per fetch: four of the sink's 4 MiB batches. Every fetch costs the
node and this reader a request's fixed work (a read of the log, a frame, a reply to
decode, a hand-over between the loop and the task); against 4 MiB, 16 MiB fetches cut
the reader's CPU per row by a fifth and the leader's by a quarter (read_range over 2
partitions, alternating runs in one process, 2026-12-01); 32 MiB was no better."""
# A fetch that returns nothing below the planned end means the partition's LSO
# moved back (a new leader that has not yet caught up); retried this many times.
_EMPTY_FETCH_RETRIES = 50
_EMPTY_FETCH_PAUSE_S = 0.2


class RaftlogInputPartition(InputPartition):
    """Read offsets ``[start, end)`` of one topic partition (picklable; sent to a task)."""

    def __init__(self, partition: int, start: int, end: int, topic: str = "") -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class ReaderBase:
    """Planning helpers shared by the stream and batch readers; runs on the driver.

    The reader is pickled to the tasks (``read()`` runs there), so the driver's
    client is dropped from the pickled state.
    """

    def __init__(self, opts: SourceOptions, servers: list[str], schema: StructType) -> None:
        self.opts = opts
        self.servers = servers
        self.schema = schema
        self._client: Any = None
        self._topic_ids: dict[str, int] = {}  # topic -> id, as the last _bounds() saw it

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    def driver_client(self) -> Any:
        """The driver's blocking client, opened on first use (never pickled)."""
        if self._client is None:
            self._client = open_blocking_client(self.servers, self.opts.request_timeout_s)
        return self._client

    def read_topics(self) -> list[str]:
        """The topics read now: the listed ones, or those matching ``subscribePattern``."""
        if self.opts.pattern is None:
            return list(self.opts.topics)
        return sorted(t for t in self.driver_client().list_topics() if self.opts.matches(t))

    def _bounds(self) -> dict[TopicPartition, tuple[int, int]]:
        """(topic, partition) -> (log start offset, end of a consistent cut), from each leader.

        The end is the last stable offset, lowered where needed so that every
        committed micro-batch of an exactly-once writer is either all in or all
        out (``raftlog.client.transactions.committed_cut``), per topic: a
        reader never sees part of a batch as if it were all of it. For each
        topic the LSOs are read first, the coordinator second, as the cut requires.
        A subscribed topic that does not exist (yet) has no partitions; option
        ``topic`` naming a missing topic is an error.
        """
        from raftlog.client import UnknownTopicError
        from raftlog.client.transactions import committed_cut

        client = self.driver_client()
        out: dict[TopicPartition, tuple[int, int]] = {}
        for topic in self.read_topics():
            try:
                meta = client.describe_topic(topic)
            except UnknownTopicError:
                if len(self.opts.topics) == 1 and self.opts.pattern is None:
                    raise
                continue
            self._topic_ids[topic] = getattr(meta, "topic_id", -1)
            starts, ends = {}, {}
            for part in meta.partitions:
                start, _hw, lso = client.list_offsets(topic, part.partition)
                starts[part.partition], ends[part.partition] = start, lso
            topic_id = self._topic_ids[topic]
            cut = client.call(lambda c, t=topic, e=ends, i=topic_id: committed_cut(c, t, e, i))
            for p in starts:
                out[(topic, p)] = (starts[p], max(starts[p], cut[p]))
        return out

    def _start(self, bounds: Mapping[TopicPartition, tuple[int, int]], default: str) -> dict:
        """Where the read starts in each partition: ``startingTimestamp`` when given, else
        ``startingOffsets`` (``default`` when unset)."""
        if self.opts.starting_timestamp is not None:
            return self._timestamp_start(bounds, self.opts.starting_timestamp)
        if self.opts.starting_offsets_by_timestamp is not None:
            by_topic = self.opts.starting_offsets_by_timestamp
            missing = sorted(tp for tp in bounds if tp[1] not in by_topic.get(tp[0], {}))
            if missing:
                raise OffsetDocumentError(
                    "option 'startingOffsetsByTimestamp' must give a timestamp for every "
                    f"partition read; missing (topic, partition): {missing}"
                )
            return self._timestamp_start(bounds, lambda t, p: by_topic[t][p])
        spec = self.opts.starting_offsets or OffsetSpec(default)
        return resolve_topic_spec(spec, bounds, "startingOffsets")

    def _timestamp_start(
        self,
        bounds: Mapping[TopicPartition, tuple[int, int]],
        timestamp_ms: int | Callable[[str, int], int],
    ) -> dict[TopicPartition, int]:
        """Per partition, the first offset whose batch was appended at or after
        ``timestamp_ms`` (one for all, or per (topic, partition)), from the leader's time
        index (never a scan); the end of the consistent cut when there is none before it."""
        client = self.driver_client()
        out: dict[TopicPartition, int] = {}
        for (topic, p), (log_start, end) in bounds.items():
            ts = timestamp_ms(topic, p) if callable(timestamp_ms) else timestamp_ms
            offset, _ts, _lso = client.call(
                lambda c, t=topic, q=p, s=ts: c.offset_for_timestamp(t, q, s)
            )
            out[(topic, p)] = end if offset < 0 else min(max(offset, log_start), end)
        return out

    def _plan(
        self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
    ) -> list[InputPartition]:
        ranges = {tp: (start.get(tp, 0), e) for tp, e in end.items()}
        return [
            RaftlogInputPartition(tp[1], s, e, tp[0])
            for tp, s, e in split_ranges(ranges, self.opts.min_partitions)
        ]

    def _parse(self, doc: dict) -> dict[TopicPartition, int]:
        return parse_topic_offsets(doc, self.opts.matches)

    def _recreated(self, doc: dict, ids: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Topics of offset document ``doc`` that were deleted and created again since
        (their id in ``doc`` differs from the one in ``ids``): topic -> (old id, new id).
        """
        then = parse_topic_ids(doc)
        return {
            t: (old, ids[t]) for t, old in then.items() if ids.get(t, -1) >= 0 and ids[t] != old
        }

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RaftlogInputPartition):
            # partitions() planned nothing (every range empty): Spark then runs one task
            # with a plain InputPartition of its own, which has nothing to read
            return
        yield from read_range(self.opts, self.servers, self.schema, partition)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RaftlogStreamReader(ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control and Trigger.AvailableNow."""

    def __init__(self, opts: SourceOptions, servers: list[str], schema: StructType) -> None:
        super().__init__(opts, servers, schema)
        self._target: dict[TopicPartition, int] | None = None  # AvailableNow: LSOs at start
        self._latest: dict[TopicPartition, int] = {}
        # minOffsetsPerTrigger/maxTriggerDelay; kept by this reader, which lives in one
        # Python worker for the whole query run (a restart starts a new delay)
        self._delay = (
            None
            if opts.min_offsets_per_trigger is None
            else TriggerDelay(opts.min_offsets_per_trigger, opts.max_trigger_delay_ms)
        )

    def initialOffset(self) -> dict:
        # "latest": Kafka's default for streams
        return format_topic_offsets(self._start(self._bounds(), "latest"), self._topic_ids)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: lso for p, (_, lso) in self._bounds().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bounds = self._bounds()
        begin = self._parse(start)
        for topic, (old, new) in self._recreated(start, self._topic_ids).items():
            # Its offsets name records of a topic that is gone: Kafka's data loss.
            mine = {tp: off for tp, off in begin.items() if tp[0] == topic}
            message = (
                f"raftlog source: topic {topic!r} was deleted and created again (topic id "
                f"{old}, now {new}); the records after offsets "
                f"{ {p: off for (_, p), off in sorted(mine.items())} } of the old topic were "
                "never read"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    message + "; set option 'failOnDataLoss' to false to read the new topic "
                    "from its beginning and continue"
                )
            get_logger().warning("%s; reading the new topic from its beginning", message)
            for tp in mine:
                del begin[tp]
        for p, (log_start, _) in bounds.items():
            begin.setdefault(p, log_start)  # a partition new since `start`: from its beginning
        latest = {p: lso for p, (_, lso) in bounds.items()}
        self._latest = dict(latest)
        if self._target is not None:
            latest = {p: min(lso, self._target.get(p, lso)) for p, lso in latest.items()}
        latest = {p: max(off, begin[p]) for p, off in latest.items()}  # never move back
        # Which partitions go first when the limit cannot serve all: a hash of the start
        # offsets, so the choice changes from batch to batch without a systematic bias
        # (a plain sum of offsets advances in steps that can favour one partition forever).
        rotation = zlib.crc32(json.dumps(sorted(begin.items())).encode())
        # a topic that vanished (deleted, or no longer matching): nothing more to read there
        begin = {tp: off for tp, off in begin.items() if tp in latest}
        if self._delay is not None and self._target is None:  # AvailableNow never waits
            new = sum(latest[p] - begin[p] for p in latest)
            if not self._delay.admit(new, time.time() * 1000):
                get_logger().info(
                    "raftlog source: topic %r: %d new offsets, fewer than minOffsetsPerTrigger "
                    "%d; batch held back up to maxTriggerDelay",
                    self.opts.topic,
                    new,
                    self._delay.min_offsets,
                )
                return start  # the previous end: Spark runs no batch
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = limit_end_offsets(begin, latest, limit.max_rows, rotation)
            if self.opts.max_bytes_per_trigger is not None:
                end = self._limit_bytes(begin, end, self.opts.max_bytes_per_trigger, rotation)
        elif isinstance(limit, ReadMaxBytes):
            end = self._limit_bytes(begin, latest, limit.max_bytes, rotation)
        return format_topic_offsets(end, self._topic_ids)

    def reportLatestOffset(self) -> dict | None:
        if not self._latest:
            return None
        return format_topic_offsets(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = self._parse(start)
        stop = self._parse(end)
        for topic in self._recreated(start, parse_topic_ids(end)):
            # latestOffset let the new topic in (failOnDataLoss=false): read it from 0,
            # which the read moves up to its log start
            begin = {tp: off for tp, off in begin.items() if tp[0] != topic}
        planned = self._plan(begin, stop)
        if self._latest:
            behind = sum(max(0, lso - stop.get(p, 0)) for p, lso in self._latest.items())
            get_logger().info(
                "raftlog source: topic %r: %d offsets in %d splits this batch; %d offsets behind "
                "latest",
                self.opts.topic,
                sum(e - begin.get(p, 0) for p, e in stop.items()),
                len(planned),
                behind,
            )
        return planned

    def commit(self, end: dict) -> None:
        # Nothing to do: raftlog has no consumer groups, the checkpoint is the position.
        # (Spark may call this late, or not at all for the last batch.)
        return None

    def _limit_bytes(
        self,
        begin: Mapping[TopicPartition, int],
        end: Mapping[TopicPartition, int],
        max_bytes: int,
        rotation: int,
    ) -> dict[TopicPartition, int]:
        """Cut ``end`` so that about ``max_bytes`` of stored payload is admitted.

        Each partition's byte share is proportional to its backlog (in offsets);
        its end is the end of the last whole batch that fits in its share. If no
        batch fits anywhere, one batch of one partition (chosen round-robin by
        ``rotation``) is admitted so the stream makes progress. A range that a
        fetch skips without returning a batch (aborted transactional data) costs
        no bytes: the partition's end moves past it.
        """
        client = self.driver_client()
        backlog = {p: max(0, end[p] - begin[p]) for p in end}
        waiting = sorted(p for p, b in backlog.items() if b > 0)
        if not waiting:
            return dict(end)
        total = sum(backlog.values())
        shares = {p: max(1, max_bytes * backlog[p] // total) for p in waiting}
        out = {p: begin.get(p, 0) for p in end}
        first_batch_end: dict[TopicPartition, int] = {}
        for p in waiting:
            result = client.fetch(p[0], p[1], begin[p], max_bytes=max(1, shares[p]))
            skipped = getattr(result, "next_offset", -1)
            if not result.batches and skipped > begin[p]:
                out[p] = min(end[p], skipped)  # only aborted data there: free to pass
                continue
            used = 0
            # stored sizes (compressed): the client hands back decompressed payloads
            for batch, size in zip(result.batches, result.stored_bytes, strict=True):
                batch_end = min(end[p], batch.base_offset + batch.record_count)
                first_batch_end.setdefault(p, batch_end)
                used += size
                if used > shares[p] or batch.base_offset >= end[p]:
                    break
                out[p] = batch_end
        if all(out[p] == begin[p] for p in waiting) and first_batch_end:
            # not one whole batch fits (e.g. a record larger than the limit): admit one
            candidates = sorted(first_batch_end)
            p = candidates[rotation % len(candidates)]
            out[p] = first_batch_end[p]
        return out


class RaftlogBatchReader(ReaderBase, DataSourceReader):
    """Batch reader: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default
    latest)."""

    def partitions(self) -> Sequence[InputPartition]:
        bounds = self._bounds()
        start = self._start(bounds, "earliest")
        if self.opts.ending_timestamp is not None:
            end = self._timestamp_start(bounds, self.opts.ending_timestamp)
            end = {tp: max(e, start.get(tp, e)) for tp, e in end.items()}  # never before start
        else:
            end = resolve_topic_spec(
                self.opts.ending_offsets or OffsetSpec("latest"), bounds, "endingOffsets"
            )
        try:
            return self._plan(start, end)
        finally:
            self.stop()  # the planning client is not needed after this


def read_range(
    opts: SourceOptions, servers: list[str], schema: StructType, part: RaftlogInputPartition
) -> Iterator[pa.RecordBatch]:
    """Yield the committed records of ``[part.start, part.end)`` as Arrow batches of ``schema``.

    Runs in a Spark task, on the worker process's shared blocking client (never
    closed here). Each stored payload becomes one output batch, sliced to the
    range, with the metadata columns appended.
    """
    from raftlog.client import OffsetOutOfRangeError

    out_schema = arrow_schema_of(schema)
    # None: raw records, read with Kafka's schema
    user_schema = (
        None
        if is_raw_read(schema)
        else pa.schema(list(out_schema)[: len(out_schema) - len(METADATA_FIELDS)])
    )
    topic, p = part.topic or opts.topics[0], part.partition
    offset = part.start
    # The worker process's client: its connections and learned leaders outlive the task
    # (a client per task cost each one its connection set-ups and a metadata round trip).
    client = worker_loop.shared_blocking_client(servers, opts.request_timeout_s)

    def fetch(at: int) -> concurrent.futures.Future[Any]:
        return client.submit(lambda c: c.fetch(topic, p, at, max_bytes=FETCH_BYTES))

    # The fetch of the next range is sent before this one's batches are decoded, so
    # the node reads and sends it while this task turns the last one into Arrow.
    ahead: concurrent.futures.Future[Any] | None = None
    try:
        empty = 0
        while offset < part.end:
            pending, ahead = ahead or fetch(offset), None
            try:
                result = pending.result()
                log_start = result.start_offset
            except OffsetOutOfRangeError:
                log_start = client.list_offsets(topic, p)[0]
                if offset >= log_start:
                    raise
                result = None
            if offset < log_start:
                offset = _on_data_loss(opts, p, offset, log_start, part.end, topic)
                continue
            assert result is not None
            nxt = result.next_offset
            if nxt < 0 and result.batches:
                nxt = result.batches[-1].base_offset + result.batches[-1].record_count
            if offset < nxt < part.end:
                ahead = fetch(nxt)
            for batch in result.batches:
                if batch.base_offset >= part.end:
                    break
                yield _to_output(topic, p, batch, offset, part.end, user_schema, out_schema)
            if nxt > offset:
                offset, empty = nxt, 0
                continue
            empty += 1
            if empty > _EMPTY_FETCH_RETRIES:
                raise RuntimeError(
                    f"raftlog source: partition {p} of topic {topic!r} returned no records at "
                    f"offset {offset} (planned end {part.end}, last stable offset "
                    f"{result.last_stable_offset}) after {empty} attempts"
                )
            time.sleep(_EMPTY_FETCH_PAUSE_S)  # a new leader's LSO may lag briefly
    finally:
        if ahead is not None:
            ahead.cancel()


def _on_data_loss(
    opts: SourceOptions, p: int, offset: int, log_start: int, end: int, topic: str = ""
) -> int:
    message = (
        f"raftlog source: offsets {offset}..{min(log_start, end) - 1} of partition {p} of topic "
        f"{topic or opts.topic!r} were removed (the log now starts at {log_start})"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            message + "; set option 'failOnDataLoss' to false to skip them and continue"
        )
    get_logger().warning("%s; skipping them (failOnDataLoss=false)", message)
    return min(log_start, end)


def _to_output(
    topic: str,
    p: int,
    batch: Any,
    start: int,
    end: int,
    user_schema: pa.Schema | None,
    out_schema: pa.Schema,
) -> pa.RecordBatch:
    """One stored batch, sliced to ``[start, end)``, as an output batch of ``out_schema``.

    ``user_schema`` None: the batch holds raw records (read with Kafka's schema).
    CorruptBatchError, naming the topic, partition and offsets, when the payload cannot
    hold the batch's record count.
    """
    lo = max(start, batch.base_offset) - batch.base_offset
    hi = min(end, batch.base_offset + batch.record_count) - batch.base_offset
    first = batch.base_offset + lo
    n = hi - lo
    try:
        if user_schema is None:
            return _raw_output(topic, p, batch, lo, n, out_schema)
        # rows against bytes (and no IPC body compression) before Arrow reads it
        check_payload(batch.payload, batch.record_count)
        # ValueError: not one Arrow batch, or not the topic's columns (SchemaMismatchError):
        # a batch stored before the node checked typed topics' payloads
        data = conform_batch(topic, decode_payload(batch.payload).slice(lo, n), user_schema)
    except ValueError as exc:  # PayloadError among them
        # as Kafka's source on corrupt data: the query fails, naming the batch
        last = batch.base_offset + batch.record_count - 1
        raise CorruptBatchError(topic, p, batch.base_offset, last, str(exc)) from None
    stamps = _row_stamps(data, batch.timestamp_ms * 1000)
    return pa.RecordBatch.from_arrays(
        [*data.columns, *_metadata(topic, p, first, stamps, out_schema)], schema=out_schema
    )


def _row_stamps(data: pa.RecordBatch, append_us: int) -> np.ndarray:
    """Each typed row's timestamp (µs): its ``timestamp`` column where the topic has one of
    a timestamp type and the row's value is not null, else the batch's append time."""
    i = data.schema.get_field_index("timestamp")
    if i < 0 or not pa.types.is_timestamp(data.schema.field(i).type):
        return np.full(data.num_rows, append_us, np.int64)
    column = data.column(i)
    if column.type.unit != "us":
        column = column.cast(pa.timestamp("us", column.type.tz))
    # Values straight from the buffer, nulls replaced with numpy: pyarrow.compute's
    # fill_null with a Python scalar imports pandas (see _fixed_width for the cost).
    values = np.frombuffer(column.buffers()[1], np.int64, column.offset + len(column))
    values = values[column.offset :]
    if column.null_count:
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
        values = np.where(valid, values, np.int64(append_us))
    return np.ascontiguousarray(values, np.int64)


def _metadata(
    topic: str, p: int, first: int, stamps_us: np.ndarray, out_schema: pa.Schema
) -> list[pa.Array]:
    n = len(stamps_us)
    return [
        _repeated_string(topic, n),
        _fixed_width(pa.int32(), np.full(n, p, np.int32)),
        _fixed_width(pa.int64(), np.arange(first, first + n, dtype=np.int64)),
        _fixed_width(out_schema[-1].type, stamps_us),
    ]


def _raw_output(
    topic: str, p: int, batch: Any, lo: int, n: int, out_schema: pa.Schema
) -> pa.RecordBatch:
    """Raw records (any payload; see pyspark_raftlog.raw_records) in Kafka's schema."""
    from pyspark_raftlog.raw_records import decode_records

    d = decode_records(batch.payload, batch.record_count)
    first = batch.base_offset + lo
    if d.timestamp_ms is not None:
        stamps = d.timestamp_ms[lo : lo + n] * 1000
        kind = 0  # CreateTime: the writer's own
    else:
        stamps = np.full(n, batch.timestamp_ms * 1000, np.int64)
        kind = 1  # LogAppendTime: the leader's
    stamps = np.ascontiguousarray(stamps, np.int64)
    meta = _metadata(topic, p, first, stamps, out_schema)
    names = out_schema.names
    columns = [
        d.key.slice(lo, n),
        d.value.slice(lo, n),
        meta[0],
        meta[1],
        meta[2],
        _fixed_width(out_schema.field(names.index("timestamp")).type, stamps),
        _fixed_width(pa.int32(), np.full(n, kind, np.int32)),
        d.headers.slice(lo, n).cast(out_schema.field(names.index("headers")).type),
        *meta,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=out_schema)


def _repeated_string(text: str, n: int) -> pa.Array:
    """A string array of ``n`` copies of ``text``, built from buffers (see _fixed_width)."""
    raw = text.encode("utf-8")
    offsets = np.arange(0, len(raw) * (n + 1), len(raw) or 1, dtype=np.int32)[: n + 1]
    if not raw:
        offsets = np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def _fixed_width(arrow_type: pa.DataType, values: np.ndarray) -> pa.Array:
    """A non-null Arrow array of ``arrow_type`` over ``values``' memory (no copy).

    Built from buffers rather than with ``pa.array``: ``pa.array`` (and
    ``pa.scalar``) import pandas on first use to check for pandas objects, which
    costs a freshly forked Python worker 0.2-0.8 s -- most of a small read.
    ``values`` must have ``arrow_type``'s width (int32 for int32, int64 for int64
    and microsecond timestamps).
    """
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])
