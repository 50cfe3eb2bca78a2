"""A deterministic asyncio event loop with virtual time.

``time()`` returns a virtual clock that starts at 0 and jumps straight to the
next scheduled timer whenever nothing is ready, so a simulated second costs
only the CPU its callbacks use. There is no real IO: the selector never
blocks; it only advances the clock. Ready callbacks run FIFO and timers in
``(when, scheduling order)``, so a run is a pure function of its inputs (the
seed). Do not use threads or executors on this loop.
"""

from __future__ import annotations

import asyncio
import selectors
import traceback
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class SeedOutcome(Protocol):
    """What :func:`run_many` reads of a seed's result."""

    @property
    def ok(self) -> bool: ...
    @property
    def error(self) -> str: ...


R = TypeVar("R", bound=SeedOutcome)


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is scheduled: the run would block forever."""


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self) -> None:
        self._map: dict[int, selectors.SelectorKey] = {}
        self.loop: VirtualTimeLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise Deadlock("no callback is ready and no timer is scheduled")
        if timeout > 0 and self.loop is not None:
            self.loop.advance(timeout)
        return []

    def get_map(self) -> Any:
        return self._map

    def close(self) -> None:
        self._map.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """See the module docstring. ``run(coro, limit_s)`` runs with a virtual-time limit."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        asyncio.set_event_loop(self)
        try:
            return self.run_until_complete(coro)
        finally:
            asyncio.set_event_loop(None)


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh virtual-time loop, then close it."""
    loop = VirtualTimeLoop()
    try:
        return loop.run(coro)
    finally:
        _cancel_all(loop)
        loop.close()


def _cancel_all(loop: VirtualTimeLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def run_guarded(
    seed: int, coro: Coroutine[Any, Any, T], replay: str, failed: Callable[[str], T]
) -> T:
    """Run one seed's history (``coro``) on a fresh virtual-time loop; never raises.

    Any failure (an exception anywhere, an invariant) becomes ``failed(error)``,
    where ``error`` names the seed, the call that replays it (``replay``, a
    dotted function name called with the seed) and the traceback. Only a
    KeyboardInterrupt propagates.
    """
    try:
        return run_virtual(coro)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failed(
            f"seed {seed} failed (replay: {replay}({seed})): "
            + "".join(traceback.format_exception(exc))
        )


def retrieve(task: asyncio.Task[Any]) -> None:
    """A done-callback that marks a task's exception as retrieved (it is handled elsewhere)."""
    if not task.cancelled():
        task.exception()


def raise_failed(tasks: list[asyncio.Task[Any]]) -> None:
    """Raise the exception of the first of ``tasks`` that failed (none: return)."""
    for t in tasks:
        if t.done() and not t.cancelled():
            exc = t.exception()
            if exc is not None:
                raise exc


def run_many(
    run_seed: Callable[[int, Any], R],
    seeds: Iterable[int],
    config: Any,
    processes: int = 1,
    chunksize: int = 16,
) -> list[R]:
    """``run_seed(seed, config)`` for every seed, in ``processes`` worker processes (spawned)
    when > 1; the ``error`` of every result that is not ``ok`` is printed."""
    seed_list = list(seeds)
    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            results = pool.starmap(run_seed, [(s, config) for s in seed_list], chunksize=chunksize)
    else:
        results = [run_seed(s, config) for s in seed_list]
    for r in results:
        if not r.ok:
            print(r.error)
    return results
