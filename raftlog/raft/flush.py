"""Flush coalescing: one fsync in flight per log, batched by bytes and a short delay.

Appends are written without fsync. ``note_append`` schedules a background
flush when the pending bytes pass ``flush_bytes`` or after ``flush_delay_s``;
``flush_now`` asks for a flush that *starts after the call* and waits for it
(concurrent callers share it). Group commit: when the last flush served more than
one waiter, writers are concurrent, and an asked-for flush first waits
``linger_s`` for more of them to join (one fsync for all; a lone writer never
waits, nor does a flush whose pending bytes already pass ``linger_max_bytes``,
``flush_bytes`` unless given).

A flush is the log's three steps (see :class:`~raftlog.storage.api.LogStorage`):
``prepare_flush`` records the dirty offset on the event loop, ``sync_flush``
fsyncs in a thread executor when ``in_executor`` (the on-disk log: fsync must
not stall the event loop) or inline (the simulator's disk, so runs stay
deterministic), and ``finish_flush`` marks the recorded offset flushed. With a
``barrier`` (the node's :class:`~raftlog.raft.node_flush.NodeFlush`), the log's own
fsync is replaced by the node's syncfs, which serves every group that asked
meanwhile: the plan is marked ``by_barrier`` and ``sync_flush`` only brings the
index files up to date.
Appends (the leader's, a follower's) do not wait for a flush: they run while
its fsync does, and what they add is flushed by the next one. Only what cuts,
deletes or closes the log's files (a follower's suffix truncation, a snapshot
install's ``restart_at``, retention's prefix truncation, closing the log) takes
:attr:`FlushCoalescer.truncation_lock`, which a flush holds from prepare to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

from raftlog.storage.api import LogStorage

_T = TypeVar("_T")


class FlushCoalescer:
    def __init__(
        self,
        log: LogStorage,
        flush_bytes: int,
        flush_delay_s: float,
        in_executor: bool,
        on_flushed: Callable[[int], None],
        latency_s: float = 0.0,
        linger_s: float = 0.0,
        barrier: Callable[[], Awaitable[None]] | None = None,
        on_failed: Callable[[BaseException], None] | None = None,
        linger_max_bytes: int | None = None,
    ) -> None:
        self._log = log
        # Told of a failed flush that a request_flush asked for (that caller does not
        # wait, so nobody else would hear of it); a waiter gets the error itself.
        self._on_failed = on_failed
        # Returns once a syncfs of the log's filesystem that started after the call
        # returned (NodeFlush.sync); None: the log fsyncs its own files.
        self._barrier = barrier
        self._flush_bytes = flush_bytes
        self._delay = flush_delay_s
        self._in_executor = in_executor
        self._on_flushed = on_flushed
        # A modelled fsync duration (the simulator's slow disk); 0 in production.
        self._latency_s = latency_s
        # Group commit under concurrency: how long an asked-for flush waits for more
        # appends to join it, once the last flush served more than one waiter.
        self._linger_s = linger_s
        # A flush with this many bytes pending or more never lingers (default flush_bytes).
        self._linger_max_bytes = flush_bytes if linger_max_bytes is None else linger_max_bytes
        self._last_waiters = 0
        self._asked = 0  # request_flush calls since the last flush started
        self._pending_bytes = 0
        self._waiters: list[asyncio.Future[int]] = []
        self._wake = asyncio.Event()
        # Set when a flush is wanted at once (a waiter, the bytes bound): it also cuts
        # short the delay a flush by delay is waiting out.
        self._urgent = asyncio.Event()
        self.flushes = 0
        # Held by a flush from prepare to finish (around its fsync). Truncations (suffix,
        # prefix, a snapshot install's restart) and closing the log take it: no file is
        # cut, deleted or closed under an fsync, and no plan outlives the files it names.
        # Appends never take it. Uncontended in inline mode without a modelled latency
        # (acquiring never yields).
        self.truncation_lock = asyncio.Lock()

    def note_append(self, nbytes: int) -> None:
        """Record unflushed bytes; a flush follows by size or by delay."""
        self._pending_bytes += nbytes
        if self._pending_bytes >= self._flush_bytes:
            self._urgent.set()
        self._wake.set()

    def request_flush(self) -> None:
        """Ask for a flush that starts after this call, without waiting for it (the
        leader: its ``on_flushed`` callback, not a waiter, carries the result on). It
        counts as a waiter for the group-commit linger, as :meth:`flush_now` does."""
        self._asked += 1
        self._urgent.set()
        self._wake.set()

    async def flush_now(self) -> int:
        """Wait for a flush that started after this call; return the flushed offset."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._urgent.set()
        self._wake.set()
        return await fut

    def fail_waiters(self, exc: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(exc)

    async def run(self) -> None:
        """The flusher task; runs until cancelled."""
        while True:
            await self._wake.wait()
            if not self._urgent.is_set():
                # Give concurrent appends a window to join this flush; a writer that
                # waits for a flush (or the bytes bound) meanwhile cuts it short, so an
                # acks=all write never waits out a delay meant for the others.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._delay):
                        await self._urgent.wait()
            if (
                self._urgent.is_set()
                and self._linger_s > 0
                and self._last_waiters > 1
                and self._pending_bytes < self._linger_max_bytes
            ):
                # Writers are concurrent: more of them are about to ask; one fsync for
                # all of them costs them the linger, and saves the disk and the CPU
                # one fsync each. A lone writer (the last flush served one) never waits,
                # nor a flush of linger_max_bytes or more: it has a full flush's worth, and
                # lingering only delayed large writes (1 partition of 256 KiB batches at
                # acks=all in `benchmarks throughput`: 100 MB/s, 105-108 without it).
                await asyncio.sleep(self._linger_s)
            self._wake.clear()
            self._urgent.clear()
            waiters, self._waiters = self._waiters, []
            asked, self._asked = self._asked, 0
            self._last_waiters = len(waiters) + asked
            self._pending_bytes = 0
            try:
                if self._log.flushed_offset < self._log.dirty_offset:
                    await self._flush()
                    self.flushes += 1
            except Exception as exc:  # surface a disk error to every waiter, keep running
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)
                if asked and self._on_failed is not None:
                    self._on_failed(exc)
                continue
            flushed = self._log.flushed_offset
            self._on_flushed(flushed)
            for w in waiters:
                if not w.done():
                    w.set_result(flushed)

    async def _flush(self) -> None:
        """One flush: record, fsync (appends go on meanwhile), mark the recorded offset."""
        log = self._log
        async with self.truncation_lock:
            plan = log.prepare_flush()
            if self._latency_s > 0:  # the modelled fsync takes this long
                await asyncio.sleep(self._latency_s)
            if self._barrier is not None and (plan.files or plan.dir_version is not None):
                await self._barrier()
                # No fsync left, only the index files' small writes: no thread hop.
                plan = dataclasses.replace(plan, by_barrier=True)
                log.sync_flush(plan)
            elif self._in_executor:
                await in_thread(log.sync_flush, plan)
            else:
                log.sync_flush(plan)
            log.finish_flush(plan)


async def in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in the default executor, awaited to its end even when cancelled.

    A thread cannot be stopped: returning early on cancellation would release the
    truncation lock while the fsync still runs, letting a truncation or ``close``
    cut its files. The cancellation is re-raised once the thread is done.
    """
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    cancelled = False
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancelled = True
        except BaseException:
            break  # fn raised: fut is done
    if cancelled:
        if not fut.cancelled():
            fut.exception()  # retrieved (a failed fsync has already poisoned the log)
        raise asyncio.CancelledError
    return fut.result()
