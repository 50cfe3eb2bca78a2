"""The raftlog sink: ``df.writeStream.format("raftlog")`` and ``df.write.format("raftlog")``.

Streaming writes are exactly-once (DESIGN.md, "Exactly-once from Spark"):
each task writes its whole output as one single-partition transaction of
producer id ``hash(query id, Spark partition id)`` into topic partition
``spark partition mod N``, committed with version = micro-batch id. A replayed
micro-batch or a retried task is detected by ``init_producer`` and the
producer's last committed version; see :mod:`pyspark_raftlog.txn_writer`.

Batch writes (``df.write``, e.g. inside ``foreachBatch``):

* with ``txnAppId`` and ``txnVersion`` they are idempotent, as Delta Lake's are:
  the producer id comes from (txnAppId, Spark partition) and the version is
  ``txnVersion``, so writing the same (txnAppId, txnVersion) twice lands the
  data once, and a version older than the last one written is skipped;
* without them a batch write is plain **at-least-once**: a retried task, or
  running the same job again, writes its rows again.

Arrow batches from Spark are cut into Arrow IPC payloads of at most
``chunkBytes`` (default 1 MiB) and sent as they are; rows are never converted
one by one. ``write()`` returns once the commit marker (or, at-least-once, each
batch) is acknowledged at ``acks``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator

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
from pyspark_raftlog.txn_writer import (
    PartitionWrite,
    producer_id_for,
    write_plain,
    write_transaction,
)

__all__ = ["RaftlogArrowWriter", "RaftlogCommitMessage", "RaftlogStreamWriter"]


@dataclasses.dataclass
class RaftlogCommitMessage(WriterCommitMessage):
    """What one Spark task wrote: its partition id and the per-topic-partition result."""

    spark_partition: int
    write: PartitionWrite


@dataclasses.dataclass
class _WriterBase:
    """State shared by both writers; pickled from the driver to every task."""

    opts: SinkOptions
    servers: list[str]
    schema: pa.Schema  # the topic's Arrow schema
    num_partitions: int

    def _chunks(self, batches: Iterable[pa.RecordBatch]) -> Iterator[Chunk]:
        for batch in batches:
            yield from chunk_record_batch(
                conform_batch(self.opts.topic, batch, self.schema), self.opts.chunk_bytes
            )

    def _write(
        self, batches: Iterator[pa.RecordBatch], version_key: tuple | None
    ) -> PartitionWrite:
        """Write this task's batches; transactional when ``version_key`` is (key, version)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        spark_partition = ctx.partitionId() if ctx is not None else 0
        topic_partition = spark_partition % self.num_partitions
        opts = self.opts

        async def run() -> PartitionWrite:
            client = open_async_client(self.servers, opts.request_timeout_s)
            try:
                if version_key is None:
                    return await write_plain(
                        client,
                        topic=opts.topic,
                        partition=topic_partition,
                        chunks=self._chunks(batches),
                        acks=opts.acks,
                        max_in_flight=opts.max_in_flight,
                    )
                key, version = version_key
                return await write_transaction(
                    client,
                    topic=opts.topic,
                    partition=topic_partition,
                    producer_id=producer_id_for(*key, spark_partition),
                    version=version,
                    chunks=self._chunks(batches),
                    acks=opts.acks,
                    max_in_flight=opts.max_in_flight,
                )
            finally:
                await client.close()

        return asyncio.run(run())


class RaftlogStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Exactly-once streaming writer (one transaction per task, version = batch id)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or query_id is None:
            raise RuntimeError(
                "raftlog sink: the task has no streaming.sql.batchId/sql.streaming.queryId "
                "local property, so it cannot write exactly-once"
            )
        result = self._write(iterator, (("query", query_id), int(batch_id)))
        return RaftlogCommitMessage(ctx.partitionId(), result)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        get_logger().info(summarize(self.opts.topic, f"batch {batchId}", messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Tasks that committed stay committed: the replay of this batch id skips them
        # (their version is recorded), so nothing is duplicated and nothing must be undone.
        get_logger().warning(
            "%s; aborted by Spark, its replay will skip the committed tasks",
            summarize(self.opts.topic, f"batch {batchId}", messages),
        )


class RaftlogArrowWriter(_WriterBase, DataSourceArrowWriter):
    """Batch writer: idempotent with txnAppId/txnVersion, else at-least-once."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftlogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        key = None
        if self.opts.txn_app_id is not None and self.opts.txn_version is not None:
            key = (("txnAppId", self.opts.txn_app_id), self.opts.txn_version)
        result = self._write(iterator, key)
        return RaftlogCommitMessage(ctx.partitionId() if ctx is not None else 0, result)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        label = (
            f"txnAppId {self.opts.txn_app_id!r} txnVersion {self.opts.txn_version}"
            if self.opts.txn_app_id is not None
            else "batch write (at-least-once)"
        )
        get_logger().info(summarize(self.opts.topic, label, messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        get_logger().warning("%s; aborted", summarize(self.opts.topic, "batch write", messages))
