"""The worker process's event loop and clients outlive a task (pyspark_raftlog.worker_loop)."""

from __future__ import annotations

import asyncio
import os
import select
import signal

import pytest
from pyspark_raftlog import worker_loop
from pyspark_raftlog.connection import ClusterServers


async def _loop_and_client(servers: ClusterServers) -> tuple[object, object]:
    return asyncio.get_running_loop(), await worker_loop.shared_client(servers, 5.0)


def test_tasks_of_one_process_share_the_loop_and_the_client() -> None:
    servers = ClusterServers(["127.0.0.1:1"], auth_token="t")
    loop1, client1 = worker_loop.run(_loop_and_client(servers))
    loop2, client2 = worker_loop.run(_loop_and_client(ClusterServers(["127.0.0.1:1"], "t")))
    assert loop1 is loop2 and client1 is client2
    assert loop1 is not None and not loop1.is_closed()
    # another token (or CA, or timeout) is another client
    _, other = worker_loop.run(_loop_and_client(ClusterServers(["127.0.0.1:1"], "u")))
    assert other is not client1


def test_an_error_reaches_the_task_and_the_loop_keeps_serving() -> None:
    async def boom() -> None:
        raise ValueError("row 3 is bad")

    with pytest.raises(ValueError, match="row 3 is bad"):
        worker_loop.run(boom())
    assert worker_loop.run(asyncio.sleep(0, result=7)) == 7


def test_a_forked_child_gets_a_loop_of_its_own() -> None:
    parent_loop, _ = worker_loop.run(_loop_and_client(ClusterServers(["127.0.0.1:1"])))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether it runs coroutines on a new loop, then exit
        try:
            ok = worker_loop.run(_child_check(parent_loop))
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        # bounded: a child left with its parent's loop (whose thread did not survive the
        # fork) would wait forever
        ready, _, _ = select.select([read], [], [], 30.0)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        assert ready and os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


async def _child_check(parent_loop: object) -> bool:
    return asyncio.get_running_loop() is not parent_loop
