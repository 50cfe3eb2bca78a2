"""The raftlog sink: ``df.writeStream.format("raftlog")`` and ``df.write.format("raftlog")``.

Exactly-once (the default, ``deliveryGuarantee`` ``exactly-once``) is a
two-phase commit decided on the driver (docs/ARCHITECTURE.md, "Exactly-once
from Spark"; the protocol is :mod:`raftlog.client.transactions`):

* ``write()`` in each task attempt *prepares*: it registers a producer of its
  own with the transaction coordinator, writes its rows into an open
  transaction, and returns a commit message with ids and counts only. It
  never commits, because pyspark ends the input iterator silently when an
  upstream operator of the same task fails.
* ``commit()`` on the driver records one commit decision naming exactly the
  participants in the messages it was given, aborts every other registered
  participant of the version (failed, zombie and speculative attempts), and
  returns once every marker is durable. ``abort()`` records an abort, or
  completes a commit that was already recorded.

The transaction key is (writer, version): a streaming query's id and the
micro-batch id; ``txnAppId`` and ``txnVersion`` for ``df.write`` (Delta's
idempotent writes); a fresh id per job for any other ``df.write``, which is
then atomic, and exactly-once across task retries though not across re-runs
of the job. A replay of a committed version writes nothing.

``deliveryGuarantee`` ``at-least-once`` writes plain records as they come,
with any ``acks``; retried tasks write their rows again.

Arrow batches from Spark are cut into Arrow IPC payloads of at most
``chunkBytes`` (default 1 MiB) and sent as they are; rows are never converted
one by one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark_raftlog.arrow_payload import Chunk, chunk_record_batch, conform_batch
from pyspark_raftlog.commit_summary import summarize
from pyspark_raftlog.connection import open_async_client
from pyspark_raftlog.logsetup import get_logger
from pyspark_raftlog.options import SinkOptions
from pyspark_raftlog.txn_writer import PartitionWrite, write_plain

__all__ = ["RaftlogArrowWriter", "RaftlogCommitMessage", "RaftlogStreamWriter"]


@dataclasses.dataclass
class RaftlogCommitMessage(WriterCommitMessage):
    """What one Spark task attempt prepared (ids and counts only, never rows).

    ``key`` is the transaction key as a (writer, version, run) tuple, None for
    at-least-once writes; ``participants`` the coordinator participants, as
    dicts (see ``raftlog.coordinator.state.Participant``).
    """

    spark_partition: int
    write: PartitionWrite
    key: tuple[str, int, str] | None = None
    participants: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass
class _WriterBase:
    """State shared by both writers; pickled from the driver to every task."""

    opts: SinkOptions
    servers: list[str]
    schema: pa.Schema  # the topic's Arrow schema
    num_partitions: int
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    def _chunks(self, batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
        for batch in batches:
            yield from chunk_record_batch(
                conform_batch(self.opts.topic, batch, self.schema), self.opts.chunk_bytes
            )

    def _write(
        self, batches: Iterator[pa.RecordBatch], key: tuple[str, int, str] | None
    ) -> RaftlogCommitMessage:
        """Prepare this task's rows under ``key`` (exactly-once), or write them plainly."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        spark_partition = ctx.partitionId() if ctx is not None else 0
        attempt = str(ctx.taskAttemptId()) if ctx is not None else uuid.uuid4().hex
        topic_partition = spark_partition % self.num_partitions
        opts = self.opts

        async def run() -> RaftlogCommitMessage:
            client = open_async_client(self.servers, opts.request_timeout_s)
            try:
                if key is None:
                    written = await write_plain(
                        client,
                        topic=opts.topic,
                        partition=topic_partition,
                        chunks=self._chunks(batches),
                        acks=opts.acks,
                        max_in_flight=opts.max_in_flight,
                    )
                    return RaftlogCommitMessage(spark_partition, written)
                from raftlog.client.coordinator import CoordinatorClient
                from raftlog.client.transactions import TxnKey, prepare

                prepared = await prepare(
                    client,
                    CoordinatorClient(client),
                    TxnKey(*key),
                    attempt,
                    opts.topic,
                    topic_partition,
                    self._chunks(batches),
                    max_in_flight=opts.max_in_flight,
                    transaction_timeout_ms=opts.transaction_timeout_ms,
                )
                parts = tuple(p.to_json() for p in prepared.participants)
                written = PartitionWrite(
                    topic_partition,
                    records=sum(p["records"] for p in parts),
                    bytes=prepared.bytes,
                    base_offset=min((p["first_offset"] for p in parts), default=-1),
                    last_offset=max((p["last_offset"] for p in parts), default=-1),
                    replayed=prepared.replayed,
                )
                return RaftlogCommitMessage(spark_partition, written, key, parts)
            finally:
                await client.close()

        return asyncio.run(run())

    def _decide(self, messages: list[WriterCommitMessage | None], commit: bool) -> str:
        """Phase two on the driver: decide and write the markers; return what happened."""
        found = [m for m in messages if isinstance(m, RaftlogCommitMessage) and m.key]
        if not found:
            return "nothing prepared"
        key = found[0].key
        assert key is not None
        from raftlog.client.coordinator import CoordinatorClient
        from raftlog.client.transactions import Participant, TxnKey, decide

        participants = [Participant(**p) for m in found for p in m.participants]
        opts = self.opts

        async def run() -> str:
            client = open_async_client(self.servers, opts.request_timeout_s)
            try:
                coordinator = CoordinatorClient(client)
                reply = await decide(
                    client,
                    coordinator,
                    TxnKey(*key),
                    participants,
                    commit=commit,
                )
                return str(reply["status"])
            finally:
                await client.close()

        return asyncio.run(run())


class RaftlogStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming writer: one two-phase commit per micro-batch (version = batch id)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        if not self.opts.exactly_once:
            return self._write(iterator, None)
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or query_id is None:
            raise RuntimeError(
                "raftlog sink: the task has no streaming.sql.batchId/sql.streaming.queryId "
                "local property, so it cannot write exactly-once"
            )
        # A restarted query is a new run; without the property, this writer's own id
        # (made when the query started) tells runs apart as well.
        run = ctx.getLocalProperty("sql.streaming.runId") or self.run_id
        return self._write(iterator, (f"query:{query_id}", int(batch_id), run))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcome = self._decide(messages, commit=True) if self.opts.exactly_once else "written"
        get_logger().info(
            "%s; %s", summarize(self.opts.topic, f"batch {batchId}", messages), outcome
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcome = "at-least-once: written rows stay"
        if self.opts.exactly_once:
            # a commit already recorded is final: this completes it instead
            outcome = self._decide(messages, commit=False)
        get_logger().warning(
            "%s; aborted by Spark: %s",
            summarize(self.opts.topic, f"batch {batchId}", messages),
            outcome,
        )


class RaftlogArrowWriter(_WriterBase, DataSourceArrowWriter):
    """Batch writer: atomic and exactly-once across task retries; idempotent across
    re-runs with ``txnAppId``/``txnVersion``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        if not self.opts.exactly_once:
            return self._write(iterator, None)
        if self.opts.txn_app_id is not None and self.opts.txn_version is not None:
            key = (f"txnAppId:{self.opts.txn_app_id}", self.opts.txn_version, self.run_id)
        else:
            key = (f"write:{self.run_id}", 0, self.run_id)
        return self._write(iterator, key)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        outcome = self._decide(messages, commit=True) if self.opts.exactly_once else "written"
        label = (
            f"txnAppId {self.opts.txn_app_id!r} txnVersion {self.opts.txn_version}"
            if self.opts.txn_app_id is not None
            else "batch write"
        )
        get_logger().info("%s; %s", summarize(self.opts.topic, label, messages), outcome)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        outcome = self._decide(messages, commit=False) if self.opts.exactly_once else "written"
        get_logger().warning(
            "%s; aborted: %s", summarize(self.opts.topic, "batch write", messages), outcome
        )
