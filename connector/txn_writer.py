"""The writes of one Spark task, free of Spark so that they test against a fake client.

* The exactly-once path is phase one of the two-phase commit in
  :mod:`raftlog.client.transactions` (``prepare``), which the sink calls
  directly. The task's rows go into an
  open transaction of a producer of its own (one per task attempt and topic
  partition), registered with the transaction coordinator first. The task
  never commits: pyspark ends a writer's input iterator silently when an
  upstream operator of the same task fails, so a task cannot tell a finished
  input from an interrupted one. The driver's ``commit()`` decides.
* :func:`write_plain` is the at-least-once path (``deliveryGuarantee``
  ``at-least-once``): pipelined, non-transactional, no producer id.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

from pyspark_raftlog.arrow_payload import Chunk

__all__ = ["PartitionWrite", "PlainClient", "write_plain"]


class PlainClient(Protocol):
    """The part of ``raftlog.client.RaftlogClient`` the at-least-once writer uses."""

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | bytearray | memoryview, int]],
        **kw: Any,
    ) -> Any: ...


@dataclasses.dataclass(frozen=True)
class PartitionWrite:
    """What one task wrote to one topic partition (picklable; part of the commit message).

    ``base_offset``/``last_offset`` span the task's data batches (-1 when nothing
    was written or when unknown). ``replayed`` is True when the version was
    already committed and nothing was sent.
    """

    topic_partition: int
    records: int = 0
    bytes: int = 0
    base_offset: int = -1
    last_offset: int = -1
    replayed: bool = False
    topic: str = ""


async def write_plain(
    client: PlainClient,
    *,
    topic: str,
    partition: int,
    chunks: Iterable[Chunk] | AsyncIterator[Chunk],
    acks: str = "all",
    max_in_flight: int = 5,
    compression: str = "none",
) -> PartitionWrite:
    """At-least-once: produce the chunks without a producer id, ``max_in_flight`` at a time,
    each payload compressed with ``compression`` (none, lz4, zstd).

    Order between the chunks of one task is not kept (requests may overtake
    each other), and a retried task writes its rows again.
    """
    result = PartitionWrite(partition, topic=topic)
    window: deque[_InFlight] = deque()
    try:
        async for payload, rows in _aiter(chunks):
            if len(window) >= max_in_flight:
                result = await _settle(result, window.popleft())
            task = asyncio.ensure_future(
                client.produce(
                    topic, partition, [(payload, rows)], acks=acks, compression=compression
                )
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


async def _aiter(chunks: Iterable[Chunk] | AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    if isinstance(chunks, AsyncIterator):
        async for c in chunks:
            yield c
    else:
        for c in chunks:
            yield c
