"""The raftlog sink: ``df.writeStream.format("raftlog")`` and ``df.write.format("raftlog")``.

Exactly-once (the default, ``deliveryGuarantee`` ``exactly-once``) is a
two-phase commit decided on the driver (docs/ARCHITECTURE.md, "Exactly-once
from Spark"; the protocol is :mod:`raftlog.client.transactions`):

* ``write()`` in each task attempt *prepares*: it registers a producer of its
  own with the transaction coordinator, writes its rows into an open
  transaction, and returns a commit message with ids and counts only. It
  never commits, because pyspark ends the input iterator silently when an
  upstream operator of the same task fails.
* ``commit()`` on the driver is one call to the transaction coordinator
  (EndTxn): it records one commit decision naming exactly the participants in
  the messages it was given, writes their commit markers and the abort markers
  of every other registered participant of the version (failed, zombie and
  speculative attempts), and answers once every marker is durable. ``abort()``
  is one call too: it records an abort, or completes a commit that was already
  recorded.

The transaction key is (writer, version): a streaming query's id and the
micro-batch id; ``txnAppId`` and ``txnVersion`` for ``df.write`` (Delta's
idempotent writes); a fresh id per job for any other ``df.write``, which is
then atomic, and exactly-once across task retries though not across re-runs
of the job. A replay of a committed version writes nothing.

``deliveryGuarantee`` ``at-least-once`` writes plain records as they come,
with any ``acks``; retried tasks write their rows again.

Routing (:mod:`pyspark_raftlog.routing`): each row goes to a topic (option
``topic``, else the row's ``topic`` column) and a partition (the ``partition``
column, else Kafka's murmur2 of ``partitionBy``'s columns or of the ``key``
column, else the Spark partition id mod the partition count). A task splits
every Arrow batch by (topic, partition) with one sort, and feeds each group
to its own participant: one prepared transaction per (task attempt, topic,
partition), all written in parallel, all named in the commit message.

The rows of Spark's Arrow batches are cut into Arrow IPC payloads of at most
``chunkBytes`` (default 4 MiB: in ``benchmarks spark`` at 1,000,000 rows per
micro-batch the nodes spent 0.65-0.69 CPU-seconds per micro-batch with it,
0.75-0.81 with 1 MiB, 2 runs each, on 2026-11-25; 8 MiB gained nothing more. That
was under an older linger rule that sent most of Spark's batches alone, in payloads
of about 1.2 MB, whatever the option: on 2026-11-27 the nodes spent 1.72 CPU-s per
million rows with that rule, 0.91 with full 4 MiB payloads), joined
across batches (:class:`~pyspark_raftlog.arrow_payload.RowChunker`; rows wait
for a full payload at most ``lingerMs``, default 1 s, from the first that waits, as
Kafka's ``linger.ms``: see :data:`~pyspark_raftlog.options.DEFAULT_LINGER_MS`), and sent
as they are; rows are never converted one by one. A DataFrame of ``value``
and only Kafka's columns is written as raw records instead (:mod:`pyspark_raftlog.raw_records`),
joined across Spark's batches by a
:class:`~pyspark_raftlog.raw_records.RecordChunker`, which frames each payload
straight from the runs of rows it spans with one copy of their bytes.

``compression`` (none, lz4, zstd) compresses each payload in the task before
it is sent (``chunkBytes`` counts uncompressed bytes); without the option, each
topic's config ``compression.type`` decides, read once per task and topic. The
codec is recorded in each batch, and every reader decompresses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark_raftlog import worker_loop
from pyspark_raftlog.arrow_payload import Chunk, RowChunker, conform_batch
from pyspark_raftlog.commit_summary import summarize
from pyspark_raftlog.logsetup import get_logger
from pyspark_raftlog.options import SinkOptions, WriteLayout
from pyspark_raftlog.txn_writer import PartitionWrite, write_plain

if TYPE_CHECKING:
    from pyspark_raftlog.raw_records import RecordChunker
    from pyspark_raftlog.topics import TopicPlan

    from raftlog.client.transactions import Participant

__all__ = ["RaftlogArrowWriter", "RaftlogCommitMessage", "RaftlogStreamWriter"]


@dataclasses.dataclass
class RaftlogCommitMessage(WriterCommitMessage):
    """What one Spark task attempt prepared (ids and counts only, never rows).

    ``key`` is the transaction key as a (writer, version, run) tuple, None for
    at-least-once writes; ``participants`` the coordinator participants
    (``raftlog.rpc.messages.Participant``: the type the coordinator logs).
    """

    spark_partition: int
    write: PartitionWrite  # the first of ``writes`` (kept for readers of one partition)
    key: tuple[str, int, str] | None = None
    participants: tuple[Participant, ...] = ()
    writes: tuple[PartitionWrite, ...] = ()  # one per (topic, partition) the task wrote


# raftlog.controller.topic_config.COMPRESSION_TYPE (the connector speaks the client API only)
TOPIC_COMPRESSION_CONFIG = "compression.type"

# Chunks queued per topic partition ahead of its writer: bounds a task's memory while
# one partition's writes are slower than the others'.
_QUEUE_CHUNKS = 8


@dataclasses.dataclass
class _WriterBase:
    """State shared by both writers; pickled from the driver to every task."""

    opts: SinkOptions
    servers: list[str]
    schema: pa.Schema  # the topic's Arrow schema (typed), or the raw-records marker
    num_partitions: int  # of option `topic` (0 when rows name their topics)
    layout: WriteLayout | None = None  # None: typed, every column, option topic
    # option `topic`'s id as the driver found it (-1: unknown, or rows name their topics):
    # the tasks start their producer sessions on that topic only, without a lookup
    topic_id: int = -1
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    def _encode(
        self, topic: str, batch: pa.RecordBatch, chunker: RowChunker | RecordChunker
    ) -> Iterator[Chunk]:
        """The payloads that one routed group of rows (data columns only) completes;
        ``chunker`` is its (topic, partition)'s, and holds the rows that wait for more."""
        layout = self.layout
        if layout is not None and layout.raw:
            yield from chunker.add(batch)
            return
        if layout is not None and len(layout.data_columns) != batch.num_columns:
            batch = batch.select(list(layout.data_columns))
        yield from chunker.add(conform_batch(topic, batch, self.schema))

    def _chunker(self) -> RowChunker | RecordChunker:
        """A (topic, partition)'s chunker: of Arrow IPC payloads, or of Kafka-style records
        when the rows are written raw."""
        if self.layout is not None and self.layout.raw:
            from pyspark_raftlog.raw_records import RecordChunker

            return RecordChunker(self.opts.chunk_bytes)
        return RowChunker(self.opts.chunk_bytes)

    def _write(
        self, batches: Iterator[pa.RecordBatch], key: tuple[str, int, str] | None
    ) -> RaftlogCommitMessage:
        """Prepare this task's rows under ``key`` (exactly-once), or write them plainly.

        One writer per (topic, partition) the rows route to, started on its
        first rows and fed through a bounded queue, all running concurrently.
        """
        from pyspark import TaskContext

        ctx = TaskContext.get()
        spark_partition = ctx.partitionId() if ctx is not None else 0
        attempt = str(ctx.taskAttemptId()) if ctx is not None else uuid.uuid4().hex
        opts = self.opts

        async def run() -> RaftlogCommitMessage:
            # The worker process's client: connections and learned leaders outlive the task.
            client = await worker_loop.shared_client(self.servers, opts.request_timeout_s)
            router = _Router(self, client, spark_partition)
            queues: dict[tuple[str, int], asyncio.Queue] = {}
            chunkers: dict[tuple[str, int], RowChunker | RecordChunker] = {}
            writers: dict[tuple[str, int], asyncio.Task] = {}
            # one lookup per topic, shared; run beside the participants' registration
            codecs: dict[str, asyncio.Future[str]] = {}

            def start(topic: str, partition: int) -> asyncio.Queue:
                queue: asyncio.Queue = asyncio.Queue(_QUEUE_CHUNKS)
                queues[(topic, partition)] = queue
                chunkers[(topic, partition)] = self._chunker()
                if topic not in codecs:
                    codecs[topic] = asyncio.ensure_future(_codec(client, opts, topic))
                writers[(topic, partition)] = asyncio.ensure_future(
                    self._write_partition(
                        client,
                        key,
                        attempt,
                        topic,
                        partition,
                        _drain(queue),
                        codecs[topic],
                        router.topic_ids.get(topic, -1),
                    )
                )
                return queue

            loop = asyncio.get_running_loop()
            linger_s = opts.linger_ms / 1000.0
            # (topic, partition) -> when its chunker's oldest waiting row arrived (loop time)
            waiting_since: dict[tuple[str, int], float] = {}

            async def flush(where: tuple[str, int]) -> None:
                waiting_since.pop(where, None)
                for chunk in chunkers[where].flush():
                    await _put(queues[where], writers[where], chunk)

            async def flush_lingered() -> None:
                now = loop.time()
                for where in [w for w, since in waiting_since.items() if since + linger_s <= now]:
                    await flush(where)

            try:
                # Spark's input is pulled in a thread: while it blocks (an upstream operator
                # still computing the next batch), the partition writers keep sending, and
                # rows that wait for a full payload go once the first of them has waited
                # lingerMs (Kafka's linger.ms).
                while True:
                    pulled = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
                    while waiting_since and not pulled.done():
                        left = min(waiting_since.values()) + linger_s - loop.time()
                        if left > 0:
                            await asyncio.wait((pulled,), timeout=left)
                        await flush_lingered()
                    batch = await pulled
                    if batch is None:
                        break
                    for where, rows in await router.split(batch):
                        queue = queues.get(where) or start(*where)
                        sent = False
                        for chunk in self._encode(where[0], rows, chunkers[where]):
                            await _put(queue, writers[where], chunk)
                            sent = True
                        if not chunkers[where].waiting:
                            waiting_since.pop(where, None)
                        elif sent or where not in waiting_since:
                            # what a full payload left over is (nearly all) this batch's rows
                            waiting_since[where] = loop.time()
                    await flush_lingered()
                for where in list(chunkers):
                    await flush(where)
                for where, queue in queues.items():
                    await _put(queue, writers[where], None)
                done = await asyncio.gather(*writers.values())
            except BaseException:
                for task in (*writers.values(), *codecs.values()):
                    task.cancel()
                await asyncio.gather(*writers.values(), *codecs.values(), return_exceptions=True)
                raise
            finally:
                # a replayed version never awaits its codec: the lookup is not needed
                for codec in codecs.values():
                    codec.cancel()
                await asyncio.gather(*codecs.values(), return_exceptions=True)
            writes = tuple(w for w, _ in done) or (
                PartitionWrite(
                    spark_partition % max(1, self.num_partitions), topic=opts.topic or ""
                ),
            )
            parts = tuple(p for _, ps in done for p in ps)
            return RaftlogCommitMessage(
                spark_partition, writes[0], key if key is not None else None, parts, writes
            )

        return worker_loop.run(run())

    async def _write_partition(
        self,
        client: Any,
        key: tuple[str, int, str] | None,
        attempt: str,
        topic: str,
        partition: int,
        chunks: Any,
        codec: Awaitable[str],
        topic_id: int,
    ) -> tuple[PartitionWrite, tuple[Participant, ...]]:
        """One (topic, partition)'s rows: prepared as one participant, or written plainly,
        each payload compressed with ``codec`` (awaited: the topic's, when not an option).
        ``topic_id`` (-1: unknown) is the topic's id as planned: the participant's
        producer session starts on that topic only."""
        opts = self.opts
        if key is None:
            compression = await codec
            written = await write_plain(
                client,
                topic=topic,
                partition=partition,
                chunks=chunks,
                acks=opts.acks,
                max_in_flight=opts.max_in_flight,
                compression=compression,
            )
            return written, ()
        from raftlog.client.coordinator import CoordinatorClient
        from raftlog.client.transactions import TxnKey, prepare

        prepared = await prepare(
            client,
            CoordinatorClient(client),
            TxnKey(*key),
            attempt,
            topic,
            partition,
            chunks,
            max_in_flight=opts.max_in_flight,
            transaction_timeout_ms=opts.transaction_timeout_ms,
            compression=codec,  # awaited once registered: the lookup overlaps the calls
            topic_id=topic_id,
        )
        parts = prepared.participants
        written = PartitionWrite(
            partition,
            records=sum(p.records for p in parts),
            bytes=prepared.bytes,
            base_offset=min((p.first_offset for p in parts), default=-1),
            last_offset=max((p.last_offset for p in parts), default=-1),
            replayed=prepared.replayed,
            topic=topic,
        )
        return written, parts

    @property
    def _label(self) -> str:
        return self.opts.topic or "(per-row topics)"

    def _decide(
        self, messages: list[WriterCommitMessage | None], commit: bool, version: int
    ) -> str:
        """Phase two on the driver: one EndTxn call; return what happened. The
        coordinator answers once the decision and every marker of it are durable.

        An abort with no commit message (a query stopped in the middle of a batch:
        Spark hands ``abort()`` nothing) aborts what this run registered for
        ``version``, so no open transaction holds readers back until its timeout.
        """
        found = [m for m in messages if isinstance(m, RaftlogCommitMessage) and m.key]
        if not found and commit:
            return "nothing prepared"
        from raftlog.client.coordinator import CoordinatorClient
        from raftlog.client.transactions import TxnKey, abort_run, decide

        participants = [p for m in found for p in m.participants]
        opts = self.opts

        async def run() -> str:
            # commit() runs in a long-lived driver-side worker: its shared client keeps
            # the connections and the coordinator's leader from one micro-batch to the next
            client = await worker_loop.shared_client(self.servers, opts.request_timeout_s)
            coordinator = CoordinatorClient(client)
            if not found:
                n = await abort_run(coordinator, self.run_id, version)
                return f"aborted what this run registered ({n} transactions)"
            key = found[0].key
            assert key is not None
            reply = await decide(coordinator, TxnKey(*key), participants, commit=commit)
            return str(reply["status"])

        return worker_loop.run(run())


async def _codec(client: Any, opts: SinkOptions, topic: str) -> str:
    """The codec ``topic``'s payloads are written with: option ``compression``, else the
    topic's config ``compression.type``; none when that is ``producer`` (the writer's own
    choice, Kafka's default) or when the cluster does not report one."""
    if opts.compression is not None:
        return opts.compression
    described = await client.describe_configs(topic)
    configured = described.configs.get(TOPIC_COMPRESSION_CONFIG, "none")
    return "none" if configured == "producer" else configured


async def _drain(queue: asyncio.Queue) -> AsyncIterator[Chunk]:
    """The chunks put on ``queue`` until None."""
    while True:
        item = await queue.get()
        if item is None:
            return
        yield item


async def _put(queue: asyncio.Queue, writer: asyncio.Task, item: Chunk | None) -> None:
    """Put ``item`` for ``writer``; raise its error instead of waiting forever if it died."""
    put = asyncio.ensure_future(queue.put(item))
    await asyncio.wait({put, writer}, return_when=asyncio.FIRST_COMPLETED)
    if not put.done():
        put.cancel()
        writer.result()  # raises the writer's error
        raise RuntimeError("raftlog sink: a partition writer stopped before its input ended")


class _Router:
    """Splits a task's Arrow batches by (topic, partition); see pyspark_raftlog.routing."""

    def __init__(self, writer: _WriterBase, client: Any, spark_partition: int) -> None:
        self.writer = writer
        self.client = client
        self.spark_partition = spark_partition
        opts = writer.opts
        self.counts: dict[str, int] = {}
        self.topic_ids: dict[str, int] = {}  # as found when planned (-1: not known)
        if opts.topic is not None and writer.num_partitions:
            self.counts[opts.topic] = writer.num_partitions
            self.topic_ids[opts.topic] = writer.topic_id

    async def _count(self, topic: str) -> int:
        """The partition count of ``topic``, creating it as the driver would (topic column)."""
        if topic not in self.counts:
            from pyspark_raftlog.options import check_topic_name

            check_topic_name(topic, "topic")
            layout = self.writer.layout
            raw = layout is not None and layout.raw
            plan = await asyncio.to_thread(_ensure_blocking, self.writer, topic, raw)
            self.counts[topic] = plan.partitions
            self.topic_ids[topic] = plan.topic_id
        return self.counts[topic]

    async def split(self, batch: pa.RecordBatch) -> list[tuple[tuple[str, int], pa.RecordBatch]]:
        """[((topic, partition), rows)] covering ``batch``, each group in row order."""
        import numpy as np
        import pyarrow.compute as pc
        from pyspark_raftlog.routing import key_bytes, partitions_of

        n = batch.num_rows
        if n == 0:
            return []
        opts, layout = self.writer.opts, self.writer.layout
        names = batch.schema.names
        if layout is not None and layout.topic_column:
            col = batch.column(names.index("topic"))
            if col.null_count:
                row = int(pc.index(pc.is_null(col), True).as_py())
                raise ValueError(f"column 'topic' of row {row} is null; every row needs a topic")
            dictionary = pc.dictionary_encode(col)
            topics = [str(t) for t in dictionary.dictionary.to_pylist()]
            codes = dictionary.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            assert opts.topic is not None
            topics, codes = [opts.topic], np.zeros(n, np.int64)
        counts = np.array([await self._count(t) for t in topics], np.int64)[codes]
        hashed, null_default = None, False
        if opts.partition_by:
            hashed = key_bytes([batch.column(names.index(c)) for c in opts.partition_by])
        elif "key" in names:
            hashed, null_default = batch.column(names.index("key")), True
        explicit = batch.column(names.index("partition")) if "partition" in names else None
        parts = partitions_of(
            counts,
            explicit=explicit,
            hashed_bytes=hashed,
            hash_null_means_default=null_default,
            default=self.spark_partition,
        )
        group = codes * (int(parts.max()) + 1) + parts
        if (group == group[0]).all():
            return [((topics[int(codes[0])], int(parts[0])), batch)]
        order = np.argsort(group, kind="stable")
        ordered = group[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        out = []
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True):
            i = int(order[lo])
            rows = batch.take(pa.array(order[lo:hi]))
            out.append(((topics[int(codes[i])], int(parts[i])), rows))
        return out


def _ensure_blocking(writer: _WriterBase, topic: str, raw: bool) -> TopicPlan:
    """ensure_topic through the worker process's blocking client (run in a thread from the
    task's event loop; the client outlives the task, as the source's does)."""
    from pyspark_raftlog.topics import ensure_topic

    client = worker_loop.shared_blocking_client(writer.servers, writer.opts.request_timeout_s)
    return ensure_topic(client, writer.opts, writer.schema, topic, raw=raw)


class RaftlogStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming writer: one two-phase commit per micro-batch (version = batch id)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        if not self.opts.exactly_once:
            return self._write(iterator, None)
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # write() runs in a Spark task
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or query_id is None:
            raise RuntimeError(
                "raftlog sink: the task has no streaming.sql.batchId/sql.streaming.queryId "
                "local property, so it cannot write exactly-once"
            )
        # The run is this writer's own id, made when the query started: a restarted
        # query is a new run, and abort() can name the run without any commit message.
        return self._write(iterator, (f"query:{query_id}", int(batch_id), self.run_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcome = "written"
        if self.opts.exactly_once:
            outcome = self._decide(messages, commit=True, version=batchId)
        get_logger().info("%s; %s", summarize(self._label, f"batch {batchId}", messages), outcome)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcome = "at-least-once: written rows stay"
        if self.opts.exactly_once:
            # a commit already recorded is final: this completes it instead
            outcome = self._decide(messages, commit=False, version=batchId)
        get_logger().warning(
            "%s; aborted by Spark: %s",
            summarize(self._label, f"batch {batchId}", messages),
            outcome,
        )


class RaftlogArrowWriter(_WriterBase, DataSourceArrowWriter):
    """Batch writer: atomic and exactly-once across task retries; idempotent across
    re-runs with ``txnAppId``/``txnVersion``."""

    @property
    def _version(self) -> int:
        return self.opts.txn_version if self.opts.txn_version is not None else 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        if not self.opts.exactly_once:
            return self._write(iterator, None)
        if self.opts.txn_app_id is not None:
            # scoped to the topic, as Delta's (txnAppId, txnVersion) is to its table
            writer = f"txnAppId:{self.opts.topic or '*'}:{self.opts.txn_app_id}"
            key = (writer, self._version, self.run_id)
        else:
            key = (f"write:{self.run_id}", 0, self.run_id)
        return self._write(iterator, key)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        outcome = "written"
        if self.opts.exactly_once:
            outcome = self._decide(messages, commit=True, version=self._version)
        label = (
            f"txnAppId {self.opts.txn_app_id!r} txnVersion {self.opts.txn_version}"
            if self.opts.txn_app_id is not None
            else "batch write"
        )
        get_logger().info("%s; %s", summarize(self._label, label, messages), outcome)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        outcome = "written"
        if self.opts.exactly_once:
            outcome = self._decide(messages, commit=False, version=self._version)
        get_logger().warning(
            "%s; aborted: %s", summarize(self._label, "batch write", messages), outcome
        )
