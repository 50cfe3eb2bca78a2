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
* :func:`shared_blocking_client` is the same for blocking callers: the planner
  workers that run a streaming writer's ``streamWriter()`` and ``commit()`` for
  every micro-batch are long-lived too, and a client opened and closed per call
  cost each micro-batch two connection set-ups and metadata round trips
  (12-19 ms each, on the driver's path between two micro-batches).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_pid = -1
_loop: asyncio.AbstractEventLoop | None = None
_clients: dict[tuple[Any, ...], Any] = {}
_blocking_pid = -1
_blocking: dict[tuple[Any, ...], Any] = {}


def _running_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use (again after a fork)."""
    global _pid, _loop, _clients
    with _lock:
        if _loop is None or _pid != os.getpid():
            from raftlog.allocator import keep_large_buffers_in_heap

            # a chunk and its request are 4 MiB each: reuse heap pages, as the node does
            keep_large_buffers_in_heap()
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="raftlog-worker-loop", daemon=True
            ).start()
            _loop, _pid, _clients = loop, os.getpid(), {}
        return _loop


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

    key = _key(servers, request_timeout_s)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = open_async_client(servers, request_timeout_s)
    return client


def shared_blocking_client(servers: Sequence[str], request_timeout_s: float) -> Any:
    """The process's blocking client for ``servers`` and this timeout; callers never
    close it (a new one after a fork, as the loop)."""
    global _blocking_pid, _blocking
    from pyspark_raftlog.connection import open_blocking_client

    key = _key(servers, request_timeout_s)
    with _lock:
        if _blocking_pid != os.getpid():
            _blocking_pid, _blocking = os.getpid(), {}
        client = _blocking.get(key)
        if client is None:
            client = _blocking[key] = open_blocking_client(servers, request_timeout_s)
        return client
