"""Saves asked for one by one, written in batches: one batch in flight at a time.

The shared mechanism of :class:`~raftlog.storage.record_writer.RecordWriter` (many
groups' small records) and :class:`~raftlog.storage.vote_log.VoteLog` (every
group's vote). Contract: :meth:`SaveBatches.save` returns once ``write`` returned
for a batch holding ``key``'s value, or raises what that ``write`` raised. Saves
asked for while a batch is being written join the next one; within a batch a
newer value of a key replaces the older one, and every caller of that key waits
for the newer (durable state at least as new as each asked for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class SaveBatches(Generic[K, V]):
    """Batches of ``key -> value`` handed to ``write`` (a coroutine), one at a time."""

    def __init__(self, write: Callable[[dict[K, V]], Awaitable[None]]) -> None:
        self._write = write
        # key -> (newest value, the callers waiting for it)
        self._pending: dict[K, tuple[V, list[asyncio.Future[None]]]] = {}
        self._running: asyncio.Task[None] | None = None

    async def save(self, key: K, value: V) -> None:
        """Return once a batch holding ``key``'s value (this one or newer) is written."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self._pending[key][1] if key in self._pending else []
        waiters.append(fut)
        self._pending[key] = (value, waiters)
        if self._running is None:
            self._running = loop.create_task(self._run())
        await fut

    async def _run(self) -> None:
        try:
            while self._pending:
                await asyncio.sleep(0)  # the saves asked for in this loop turn join
                batch, self._pending = self._pending, {}
                error: BaseException | None = None
                try:
                    await self._write({key: value for key, (value, _) in batch.items()})
                except BaseException as exc:
                    error = exc
                for _, waiters in batch.values():
                    for w in waiters:
                        if w.done():
                            continue
                        if error is None:
                            w.set_result(None)
                        else:
                            w.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise error
        finally:
            self._running = None
