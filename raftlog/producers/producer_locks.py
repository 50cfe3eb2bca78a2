"""One asyncio lock per producer id, dropped when nobody holds or waits for it.

rm_stm takes a producer's lock only until its request is ``enqueued``, which
fixes the request's place in the log; so per producer, log order equals the
order in which requests were checked against the sequence tail.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ProducerLocks:
    """A lock per key; the map holds only keys with a holder or a waiter."""

    def __init__(self) -> None:
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, producer_id: int) -> AsyncIterator[None]:
        lock, users = self._locks.get(producer_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[producer_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[producer_id]
            if users == 1:
                del self._locks[producer_id]
            else:
                self._locks[producer_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
