"""``replicate_batcher``: the first stage of the replicate pipeline.

Callers' requests are queued in arrival order with their consistency level and
optional expected term. A memory semaphore (bytes, default 1 MiB) bounds what
is queued; while it is exhausted a request's ``enqueued`` stage does not
resolve: that is the backpressure. While one append is in flight, new requests
build up and go to ``replicate_entries`` as one append. The order in the log
is fixed once ``enqueued`` resolves (the queue is FIFO and drained in order).
The memory units are released by ``replicate_entries`` once the append has
been handed to the transport.

A request that finds no one waiting and the memory it needs free is queued at
once, inside ``replicate()``: its ``enqueued`` is already resolved when the
caller gets it, so ``await stages.enqueued`` does not yield. That keeps the
requests that arrive in one turn of the event loop in one append; rm_stm holds
a producer's lock until ``enqueued``, and when that took a task and a loop turn
per request, a producer's pipelined requests were spread over several appends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from raftlog.raft.errors import RaftError
from raftlog.storage.batch import RecordBatch
from raftlog.storage.fs import DiskFull


class Consistency(enum.Enum):
    QUORUM_ACK = "quorum_ack"  # acks=all: answered when the commit index passes the entry
    LEADER_ACK = "leader_ack"  # acks=1: answered after the leader's append (may be lost)
    NO_ACK = "no_ack"  # acks=0: same path as leader_ack; the caller need not wait


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicateResult:
    base_offset: int
    last_offset: int
    term: int


@dataclasses.dataclass(slots=True)
class ReplicateStages:
    """The two stages of one ``replicate()`` call; both are awaitable futures.

    ``enqueued`` resolves (to None) once the request's place in the log is
    fixed; ``finished`` resolves to a :class:`ReplicateResult` or raises
    :class:`~raftlog.raft.errors.NotLeaderError` /
    :class:`~raftlog.raft.errors.TermMismatchError`.
    """

    enqueued: asyncio.Future[None]
    finished: asyncio.Future[ReplicateResult]

    @classmethod
    def pending(cls) -> ReplicateStages:
        """Stages of a new request: neither resolved; an error nobody awaits is not logged."""
        loop = asyncio.get_running_loop()
        stages = cls(loop.create_future(), loop.create_future())
        stages.enqueued.add_done_callback(_consume_exception)
        stages.finished.add_done_callback(_consume_exception)
        return stages

    @classmethod
    def failed(cls, exc: BaseException) -> ReplicateStages:
        """Stages of a request refused before it was queued: both raise ``exc``."""
        stages = cls.pending()
        stages.enqueued.set_exception(exc)
        stages.finished.set_exception(exc)
        return stages


@dataclasses.dataclass(slots=True)
class ReplicateRequest:
    batches: list[RecordBatch]
    consistency: Consistency
    expected_term: int  # -1: any term
    units: int
    stages: ReplicateStages


def _consume_exception(fut: asyncio.Future[Any]) -> None:
    # Callers of no_ack often never await ``finished``; don't warn about its error.
    if not fut.cancelled():
        fut.exception()


class MemorySemaphore:
    """A byte-counting semaphore; one waiter at a time (the batcher serializes)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"batcher memory must be >= 1 byte, got {capacity}")
        self.capacity = capacity
        self.available = capacity
        self._released = asyncio.Event()

    async def acquire(self, units: int) -> None:
        while self.available < units:
            self._released.clear()
            await self._released.wait()
        self.available -= units

    def try_acquire(self, units: int) -> bool:
        """Take ``units`` if they are free now (never waits); False leaves them."""
        if self.available < units:
            return False
        self.available -= units
        return True

    def release(self, units: int) -> None:
        self.available += units
        self._released.set()


class ReplicateBatcher:
    def __init__(
        self,
        append: Callable[[list[ReplicateRequest]], Awaitable[None]],
        memory_bytes: int,
    ) -> None:
        self._append = append
        self.memory = MemorySemaphore(memory_bytes)
        self._lock = asyncio.Lock()
        self._queue: list[ReplicateRequest] = []
        self._wake = asyncio.Event()
        self._closed_error: BaseException | None = None
        self._waiting = 0
        """Requests between ``replicate()`` and their place in the queue (slow path)."""

    def replicate(
        self, batches: list[RecordBatch], consistency: Consistency, expected_term: int
    ) -> tuple[ReplicateStages, Coroutine[Any, Any, None] | None]:
        """Create the stages and queue the request.

        Returns the stages and None when the request was queued at once (``enqueued``
        resolved), or the coroutine that queues it, which the caller must run: the
        request waits for memory, or behind requests that do (arrival order is log
        order, so none may pass them).
        """
        stages = ReplicateStages.pending()
        size = sum(b.size_bytes for b in batches)
        # A request larger than the window takes all of it rather than wait forever.
        units = min(max(size, 1), self.memory.capacity)
        req = ReplicateRequest(list(batches), consistency, expected_term, units, stages)
        if not self._waiting and self._closed_error is None and self.memory.try_acquire(units):
            self._push(req)
            return stages, None
        self._waiting += 1
        return stages, self._enqueue(req)

    def _push(self, req: ReplicateRequest) -> None:
        self._queue.append(req)
        self._wake.set()
        req.stages.enqueued.set_result(None)

    async def _enqueue(self, req: ReplicateRequest) -> None:
        try:
            async with self._lock:  # FIFO: arrival order is log order
                if self._closed_error is not None:
                    raise self._closed_error
                await self.memory.acquire(req.units)
                if self._closed_error is not None:
                    self.memory.release(req.units)
                    raise self._closed_error
                self._push(req)
        except BaseException as exc:
            for fut in (req.stages.enqueued, req.stages.finished):
                if not fut.done():
                    if isinstance(exc, asyncio.CancelledError):
                        fut.cancel()
                    else:
                        fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._waiting -= 1

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every queued request (leadership lost); their units are released."""
        queued, self._queue = self._queue, []
        for req in queued:
            self.memory.release(req.units)
            for fut in (req.stages.enqueued, req.stages.finished):
                if not fut.done():
                    fut.set_exception(exc)

    def close(self, exc: BaseException) -> None:
        self._closed_error = exc
        self.fail_queued(exc)

    async def run(self) -> None:
        """Drain the queue into appends, one append in flight at a time (until cancelled)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queue:
                continue
            reqs, self._queue = self._queue, []
            try:
                await self._append(reqs)
            except BaseException as exc:
                # The append stage failed (a bug, or a value that slipped past decoding):
                # its callers get the error instead of waiting forever; the task's
                # owner (Consensus) steps down and restarts this loop.
                # A full disk (DiskFull) goes to the callers as it is: the node
                # refuses the write with KAFKA_STORAGE_ERROR, not a retriable error.
                err = exc if isinstance(exc, DiskFull) else RaftError(f"replicate failed: {exc!r}")
                for r in reqs:
                    for fut in (r.stages.enqueued, r.stages.finished):
                        if not fut.done():
                            fut.set_exception(err)
                raise
