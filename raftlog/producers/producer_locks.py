"""One asyncio lock per producer id, dropped when nobody holds or waits for it.

rm_stm takes a producer's lock only until its request is ``enqueued``, which
fixes the request's place in the log; so per producer, log order equals the
order in which requests were checked against the sequence tail.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class ProducerLocks:
    """A lock per key; the map holds only keys with a holder or a waiter."""

    def __init__(self) -> None:
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    def hold(self, producer_id: int) -> _Hold:
        """``async with locks.hold(pid):`` holds ``pid``'s lock for the block."""
        return _Hold(self, producer_id)

    def _join(self, producer_id: int) -> asyncio.Lock:
        lock, users = self._locks.get(producer_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[producer_id] = (lock, users + 1)
        return lock

    def _leave(self, producer_id: int) -> None:
        lock, users = self._locks[producer_id]
        if users == 1:
            del self._locks[producer_id]
        else:
            self._locks[producer_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class _Hold:
    """The context manager of one ``hold()``: a class, not a generator-based one,
    because rm_stm enters one per request and the generator machinery cost more
    than the lock."""

    __slots__ = ("_lock", "_locks", "_producer_id")

    def __init__(self, locks: ProducerLocks, producer_id: int) -> None:
        self._locks, self._producer_id = locks, producer_id
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        lock = self._locks._join(self._producer_id)
        try:
            await lock.acquire()
        except BaseException:
            self._locks._leave(self._producer_id)
            raise
        self._lock = lock

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._lock is not None
        self._lock.release()
        self._locks._leave(self._producer_id)
