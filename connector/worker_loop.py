"""One event loop per Python worker process, and the raftlog clients on it, kept across tasks.

Spark reuses a Python worker process for task after task
(``spark.python.worker.reuse``, on by default). A task that made its own event
loop and client paid, every time, for new connections to every node and a
metadata round trip before its first write, and lost the leaders the previous
task had learned. Here the loop runs in a daemon thread of the worker process
and its clients stay open between tasks: a task's coroutine runs on that loop
while the task's own thread waits for it.

Contract:

* :func:`run` blocks the calling thread until the coroutine finishes, and
  returns its result or raises its exception. If the caller is interrupted
  while waiting (the task is killed), the coroutine is cancelled.
* :func:`shared_client` must be awaited on that loop (inside a coroutine given
  to :func:`run`). Clients are keyed by everything that configures them, are
  never closed by a task, and live as long as the process.
* After a fork (pyspark's daemon forks its workers) the child starts a loop of
  its own: a loop and its connections never cross processes.
* :func:`shared_blocking_client` is the same for blocking callers: the source's
  read tasks, and the planner workers that run a streaming writer's
  ``streamWriter()`` and ``commit()`` for every micro-batch. A client opened and
  closed per call cost each of them connection set-ups and a metadata round trip
  (12-19 ms each; in the planner, on the driver's path between two micro-batches).
* The first use in a process freezes the objects it holds by then
  (``gc.freeze``): the cyclic GC no longer walks the imported libraries.
* At the process's exit the clients it opened are closed (:func:`close_all`,
  an ``atexit`` hook), each bounded in time: their connections end with a close
  rather than as garbage at interpreter teardown (aiohttp then wrote "Unclosed
  client session" on the worker's stderr, which Spark passes to the driver's).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import gc
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass
class _Process:
    """What one process keeps: its loop (started on first use) and its clients, async
    (used on that loop) and blocking, keyed by :func:`_key`."""

    pid: int
    loop: asyncio.AbstractEventLoop | None = None
    clients: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict)
    blocking: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict)


_lock = threading.Lock()
_state = _Process(-1)
CLOSE_TIMEOUT_S = 5.0
"""How long :func:`close_all` waits for the async clients to close on the loop."""

log = logging.getLogger(__name__)


def _this_process() -> _Process:
    """This process's state; a fresh one after a fork, as nothing of it (the loop's
    thread, the connections) survives into the child. Call with ``_lock`` held."""
    global _state
    if _state.pid != os.getpid():
        # A Spark worker holds pyspark, pyarrow and pandas: a few hundred thousand
        # objects that live as long as the process. Every full collection of the
        # cyclic GC walked them all: a third of the workers' CPU in the sink (perf:
        # gc_collect_main and its visit_* callbacks). Frozen, they are skipped; they
        # are still freed by reference counting, only a cycle among them would stay.
        gc.freeze()
        _state = _Process(os.getpid())
    return _state


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (extra ``fast``), as the node runs; else asyncio's.

    On Python 3.11 asyncio's socket transport copies what a send leaves over into
    its buffer (a 4 MiB request mostly does); uvloop hands the buffer to libuv.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _running_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use (again after a fork)."""
    with _lock:
        state = _this_process()
        if state.loop is None:
            from raftlog.allocator import keep_large_buffers_in_heap

            # a chunk and its request are 4 MiB each: reuse heap pages, as the node does
            keep_large_buffers_in_heap()
            state.loop = _new_loop()
            threading.Thread(
                target=state.loop.run_forever, name="raftlog-worker-loop", daemon=True
            ).start()
        return state.loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the worker's loop and wait for it (see the module contract)."""
    future = asyncio.run_coroutine_threadsafe(coro, _running_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _key(servers: Sequence[str], request_timeout_s: float) -> tuple[Any, ...]:
    """Everything that configures a client for ``servers``."""
    return (
        tuple(servers),
        getattr(servers, "auth_token", None),
        getattr(servers, "tls_ca_file", None),
        request_timeout_s,
    )


async def shared_client(servers: Sequence[str], request_timeout_s: float) -> Any:
    """The process's client for ``servers`` (with their token and CA) and this timeout."""
    from pyspark_raftlog.connection import open_async_client

    return _shared("clients", open_async_client, servers, request_timeout_s)


def shared_blocking_client(servers: Sequence[str], request_timeout_s: float) -> Any:
    """The process's blocking client for ``servers`` and this timeout; callers never
    close it (a new one after a fork, as the loop)."""
    from pyspark_raftlog.connection import open_blocking_client

    return _shared("blocking", open_blocking_client, servers, request_timeout_s)


def _shared(
    kind: str,
    open_client: Callable[[Sequence[str], float], Any],
    servers: Sequence[str],
    request_timeout_s: float,
) -> Any:
    """This process's client of ``kind`` (a :class:`_Process` cache: clients or
    blocking) for this configuration, opened with ``open_client`` the first time."""
    key = _key(servers, request_timeout_s)
    with _lock:
        clients = getattr(_this_process(), kind)
        client = clients.get(key)
        if client is None:
            client = clients[key] = open_client(servers, request_timeout_s)
        return client


def close_all() -> None:
    """Close the clients this process opened (blocking ones, then the async ones on
    the loop, bounded by :data:`CLOSE_TIMEOUT_S`); a client inherited through a fork
    is not this process's to close. Registered with ``atexit``; safe to call twice."""
    global _state
    with _lock:
        state = _state
        if state.pid != os.getpid():
            return
        _state = _Process(-1)
    for client in state.blocking.values():
        with contextlib.suppress(Exception):
            client.close()
    loop = state.loop
    if loop is None or not loop.is_running() or not state.clients:
        return

    async def close_clients() -> None:
        await asyncio.gather(*(c.close() for c in state.clients.values()), return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(close_clients(), loop).result(CLOSE_TIMEOUT_S)
    except Exception as exc:  # exiting anyway: say why the connections were left open
        log.warning("raftlog worker: closing the clients at exit: %r", exc)


atexit.register(close_all)
