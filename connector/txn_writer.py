"""The exactly-once write of one Spark task: one single-partition transaction.

This is DESIGN.md's "Exactly-once from Spark" protocol, free of Spark so that
it can be tested against a fake client:

1. ``init_producer(producer id)`` bumps the epoch: it fences older attempts and
   zombies of the same task and aborts their open transaction.
2. If the producer's last committed version is at least ``version`` (the
   micro-batch id, or ``txnVersion``), this is a replay: its data is already
   in, so nothing is written.
3. Otherwise the task's chunks are produced transactionally with sequence
   numbers (sequences count records, as Kafka's do), up to ``max_in_flight``
   requests in flight. rm_stm deduplicates network retries by sequence.
4. The transaction is committed with ``version``; the commit marker is
   acknowledged at ``acks``.

The unit of exactly-once is the task's whole output, not a chunk: a retried
task may see its rows in another order, so chunk k of one attempt is not chunk
k of the next. A task that dies leaves an open transaction, which the next
attempt's ``init_producer`` (or the server's transaction timeout) aborts.

:func:`write_plain` is the at-least-once path (batch writes without
``txnAppId``/``txnVersion``): pipelined, non-transactional, no producer id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from pyspark_raftlog.arrow_payload import Chunk

__all__ = ["PartitionWrite", "TxnClient", "producer_id_for", "write_plain", "write_transaction"]

# How often one request is re-sent after an out-of-order-sequence reply. Such a
# reply only means a pipelined request overtook its predecessor on the network;
# once the predecessor is acknowledged the retry is in order, so one or two suffice.
_OUT_OF_ORDER_RETRIES = 3


class TxnClient(Protocol):
    """The part of ``raftlog.client.RaftlogClient`` the writer uses."""

    async def init_producer(self, topic: str, partition: int, producer_id: int) -> Any: ...

    async def produce(
        self, topic: str, partition: int, records: list[tuple[bytes, int]], **kw: Any
    ) -> Any: ...

    async def end_transaction(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        version: int = -1,
        acks: str = "all",
    ) -> int: ...


@dataclasses.dataclass(frozen=True)
class PartitionWrite:
    """What one task wrote to one topic partition (picklable; part of the commit message).

    ``base_offset``/``last_offset`` span the task's data batches (-1 when nothing
    was written); ``commit_offset`` is the commit marker's offset (-1 when none).
    ``replayed`` is True when the version was already committed and nothing was sent.
    """

    topic_partition: int
    records: int = 0
    bytes: int = 0
    base_offset: int = -1
    last_offset: int = -1
    commit_offset: int = -1
    replayed: bool = False


def producer_id_for(*key: object) -> int:
    """A stable, positive 63-bit producer id from ``key`` (e.g. query id and Spark partition).

    blake2b, not ``hash()``: Python's string hash is salted per process, and the
    id must be equal in every worker and across restarts.
    """
    text = "\x1f".join(str(k) for k in key).encode("utf-8")
    pid = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") & ((1 << 63) - 1)
    return pid or 1  # 0 is a valid id, but keep clear of any "unset" confusion


async def write_transaction(
    client: TxnClient,
    *,
    topic: str,
    partition: int,
    producer_id: int,
    version: int,
    chunks: Iterable[Chunk],
    acks: str = "all",
    max_in_flight: int = 5,
) -> PartitionWrite:
    """Run the protocol above for one task; return what was written.

    ``chunks`` is consumed lazily, so chunking the next Arrow batch overlaps with
    the requests in flight. An empty task writes nothing and contacts no server.
    On any failure the open transaction is aborted (best effort) and the error
    propagates, failing the task; Spark's retry then starts from step 1.
    """
    from raftlog.client import OutOfOrderSequenceError  # lazily: runs in a Spark worker

    it = iter(chunks)
    first = next(it, None)
    if first is None:
        return PartitionWrite(partition)
    session = await client.init_producer(topic, partition, producer_id)
    if session.last_committed_version >= version:
        return PartitionWrite(partition, replayed=True)
    epoch = session.epoch

    async def send(payload: bytes, rows: int, seq: int, before: asyncio.Task | None) -> Any:
        for attempt in range(_OUT_OF_ORDER_RETRIES + 1):
            try:
                return await client.produce(
                    topic,
                    partition,
                    [(payload, rows)],
                    acks=acks,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    first_sequence=seq,
                    transactional=True,
                )
            except OutOfOrderSequenceError:
                if attempt == _OUT_OF_ORDER_RETRIES:
                    raise
                if before is not None:  # overtook its predecessor: wait for it, then resend
                    await asyncio.wait([before])
        raise AssertionError("unreachable")

    result = PartitionWrite(partition)
    window: deque[_InFlight] = deque()
    seq = 0
    try:
        for payload, rows in _prepend(first, it):
            if len(window) >= max_in_flight:
                result = await _settle(result, window.popleft())
            before = window[-1].task if window else None
            task = asyncio.ensure_future(send(payload, rows, seq, before))
            window.append(_InFlight(task, rows, len(payload)))
            seq += rows
        while window:
            result = await _settle(result, window.popleft())
        commit_offset = await client.end_transaction(
            topic, partition, producer_id, epoch, commit=True, version=version, acks=acks
        )
    except BaseException:
        await _cancel(window)
        await _abort_quietly(client, topic, partition, producer_id, epoch, acks)
        raise
    return dataclasses.replace(result, commit_offset=commit_offset)


async def write_plain(
    client: TxnClient,
    *,
    topic: str,
    partition: int,
    chunks: Iterable[Chunk],
    acks: str = "all",
    max_in_flight: int = 5,
) -> PartitionWrite:
    """At-least-once: produce the chunks without a producer id, ``max_in_flight`` at a time.

    Order between the chunks of one task is not kept (requests may overtake
    each other), and a retried task writes its rows again.
    """
    result = PartitionWrite(partition)
    window: deque[_InFlight] = deque()
    try:
        for payload, rows in chunks:
            if len(window) >= max_in_flight:
                result = await _settle(result, window.popleft())
            task = asyncio.ensure_future(
                client.produce(topic, partition, [(payload, rows)], acks=acks)
            )
            window.append(_InFlight(task, rows, len(payload)))
        while window:
            result = await _settle(result, window.popleft())
    except BaseException:
        await _cancel(window)
        raise
    return result


@dataclasses.dataclass(frozen=True)
class _InFlight:
    """One produce request in the pipeline and what it carries."""

    task: asyncio.Future
    rows: int
    size: int


async def _settle(result: PartitionWrite, request: _InFlight) -> PartitionWrite:
    """Wait for ``request``; fold its offsets, rows and bytes into ``result``."""
    produced = await request.task
    base = produced.base_offset
    if result.base_offset >= 0:
        base = min(base, result.base_offset)
    return dataclasses.replace(
        result,
        records=result.records + request.rows,
        bytes=result.bytes + request.size,
        base_offset=base,
        last_offset=max(result.last_offset, produced.last_offset),
    )


async def _cancel(window: deque[_InFlight]) -> None:
    """Cancel the requests still in flight and wait until they have stopped."""
    for request in window:
        request.task.cancel()
    await asyncio.gather(*(r.task for r in window), return_exceptions=True)


def _prepend(first: Chunk, rest: Iterable[Chunk]) -> Iterable[Chunk]:
    yield first
    yield from rest


async def _abort_quietly(
    client: TxnClient, topic: str, partition: int, producer_id: int, epoch: int, acks: str
) -> None:
    """Abort the open transaction so readers are not held back by it until the timeout.

    Best effort: when the cluster is unreachable the next attempt's
    init_producer, or the server's transaction timeout, aborts it instead.
    """
    # Any error here is swallowed: the original error is what the task must report.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(
            client.end_transaction(topic, partition, producer_id, epoch, commit=False, acks=acks),
            timeout=5.0,
        )
