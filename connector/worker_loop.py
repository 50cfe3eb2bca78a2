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


def _running_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use (again after a fork)."""
    global _pid, _loop, _clients
    with _lock:
        if _loop is None or _pid != os.getpid():
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


async def shared_client(servers: Sequence[str], request_timeout_s: float) -> Any:
    """The process's client for ``servers`` (with their token and CA) and this timeout."""
    from pyspark_raftlog.connection import open_async_client

    key = (
        tuple(servers),
        getattr(servers, "auth_token", None),
        getattr(servers, "tls_ca_file", None),
        request_timeout_s,
    )
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = open_async_client(servers, request_timeout_s)
    return client
