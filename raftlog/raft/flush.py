"""Flush coalescing: one fsync in flight per log, batched by bytes and a short delay.

Appends are written without fsync. ``note_append`` schedules a background
flush when the pending bytes pass ``flush_bytes`` or after ``flush_delay_s``;
``flush_now`` asks for a flush that *starts after the call* and waits for it
(concurrent callers share it). A flush runs ``log.flush()`` in a thread
executor when ``in_executor`` (the on-disk log: fsync must not stall the event
loop) or inline (the simulator's disk, so runs stay deterministic).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftlog.storage.api import LogStorage


class FlushCoalescer:
    def __init__(
        self,
        log: LogStorage,
        flush_bytes: int,
        flush_delay_s: float,
        in_executor: bool,
        on_flushed: Callable[[int], None],
        latency_s: float = 0.0,
    ) -> None:
        self._log = log
        self._flush_bytes = flush_bytes
        self._delay = flush_delay_s
        self._in_executor = in_executor
        self._on_flushed = on_flushed
        # A modelled fsync duration (the simulator's slow disk); 0 in production.
        self._latency_s = latency_s
        self._pending_bytes = 0
        self._urgent = False
        self._waiters: list[asyncio.Future[int]] = []
        self._wake = asyncio.Event()
        self.flushes = 0
        # Held while log.flush() runs in a thread: appends and truncations take it too,
        # so the log is never mutated concurrently with an fsync (the storage need not
        # be thread-safe). Uncontended in inline mode, where acquiring never yields.
        self.mutation_lock = asyncio.Lock()

    def note_append(self, nbytes: int) -> None:
        """Record unflushed bytes; a flush follows by size or by delay."""
        self._pending_bytes += nbytes
        if self._pending_bytes >= self._flush_bytes:
            self._urgent = True
        self._wake.set()

    async def flush_now(self) -> int:
        """Wait for a flush that started after this call; return the flushed offset."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._urgent = True
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
            if not self._urgent:
                # Give concurrent appends a short window to join this flush.
                await asyncio.sleep(self._delay)
            self._wake.clear()
            self._urgent = False
            waiters, self._waiters = self._waiters, []
            self._pending_bytes = 0
            try:
                if self._log.flushed_offset < self._log.dirty_offset:
                    if self._latency_s > 0:
                        await asyncio.sleep(self._latency_s)
                    if self._in_executor:
                        loop = asyncio.get_running_loop()
                        async with self.mutation_lock:
                            await loop.run_in_executor(None, self._log.flush)
                    else:
                        self._log.flush()
                    self.flushes += 1
            except Exception as exc:  # surface a disk error to every waiter, keep running
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)
                continue
            flushed = self._log.flushed_offset
            self._on_flushed(flushed)
            for w in waiters:
                if not w.done():
                    w.set_result(flushed)
