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


def test_planner_calls_of_one_process_share_a_blocking_client(monkeypatch) -> None:
    """streamWriter() and commit() run per micro-batch in long-lived workers: one
    blocking client per configuration, never closed by its callers."""
    # this test's own process state: its blocking clients are closed below
    mine = worker_loop._Process(os.getpid())
    monkeypatch.setattr(worker_loop, "_state", mine)
    try:
        _check_shared_blocking_clients()
    finally:
        for client in mine.blocking.values():
            client.close()


def _check_shared_blocking_clients() -> None:
    servers = ClusterServers(["127.0.0.1:1"], auth_token="t")
    first = worker_loop.shared_blocking_client(servers, 5.0)
    again = worker_loop.shared_blocking_client(ClusterServers(["127.0.0.1:1"], "t"), 5.0)
    assert first is again
    assert worker_loop.shared_blocking_client(servers, 6.0) is not first  # another timeout
    assert worker_loop.shared_blocking_client(ClusterServers(["127.0.0.1:1"], "u"), 5.0) is not (
        first
    )
    # open: a call gets the cluster's answer (here: unreachable), not "the client is closed"
    from raftlog.client import ClusterUnavailableError

    with pytest.raises(ClusterUnavailableError):
        first.list_topics()


def _run_check(script: str, process: str) -> str:
    """The output of ``script`` run in a new interpreter with argument ``process``:
    "worker" (it runs the connector's loop first) or "plain"."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", script, process],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


_HEAP_CHECK = """
import resource, sys

def page_faults_of_30_chunk_buffers():
    for _ in range(3):  # warm up: the allocator's thresholds settle
        held = [bytearray(4 << 20) for _ in range(3)]
        del held
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        held = [bytearray(4 << 20) for _ in range(3)]
        del held
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

if sys.argv[1] == "worker":
    import asyncio
    from pyspark_raftlog import worker_loop
    worker_loop.run(asyncio.sleep(0))
print(page_faults_of_30_chunk_buffers())
"""


@pytest.mark.parametrize("process", ["worker", "plain"])
def test_a_worker_keeps_the_sinks_4_mib_buffers_in_its_heap(process: str) -> None:
    """Once a worker runs the connector's loop, freed 4 MiB buffers (a chunk, its
    request) stay in its heap for the next ones. By default glibc gives them back to
    the kernel, and every chunk's pages fault in and are zeroed again: 20,160 page
    faults for 30 buffers here, and most of a worker's CPU for chunking (140 against
    35 ms per 1,000,000 rows)."""
    faults = int(_run_check(_HEAP_CHECK, process).split()[-1])
    if process == "worker":
        assert faults < 100, f"{faults} page faults for 30 reused 4 MiB buffers"
    else:
        assert faults > 3000, f"the allocator's default kept the buffers ({faults} faults)"


_FREEZE_CHECK = """
import gc, sys
import pyarrow  # a worker's libraries are imported before the connector runs
if sys.argv[1] == "worker":
    import asyncio
    from pyspark_raftlog import worker_loop
    worker_loop.run(asyncio.sleep(0))
frozen = gc.get_freeze_count()
gc.collect()
print(frozen, len(gc.get_objects(generation=2)))  # gen 2: what a full collection walks
"""


@pytest.mark.parametrize("process", ["worker", "plain"])
def test_a_worker_keeps_its_libraries_out_of_the_cyclic_gc(process: str) -> None:
    """Once a worker runs the connector, the objects of the libraries it imported are
    frozen: a full collection no longer walks them (they were a third of the workers'
    CPU in the sink). A process that never ran the connector is left alone."""
    frozen, walked = map(int, _run_check(_FREEZE_CHECK, process).split())
    if process == "worker":
        assert frozen > 50_000, f"only {frozen} objects frozen"
        assert walked < frozen // 10, (frozen, walked)
    else:
        assert frozen == 0, f"{frozen} objects frozen in a process that never ran the connector"


def test_the_loop_is_uvloops_when_it_is_installed() -> None:
    """The set-up installs the ``fast`` extra: the worker's loop is then uvloop's, whose
    transport sends a 4 MiB request without copying what the socket did not take."""
    try:
        import uvloop
    except ImportError:
        pytest.fail("uvloop is missing: .venv/bin/python -m pip install -e '.[fast]'")
    loop = worker_loop.run(_running())
    assert isinstance(loop, uvloop.Loop)


async def _running() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


_EXIT_SCRIPT = """
import contextlib
from pyspark_raftlog import worker_loop
from pyspark_raftlog.connection import ClusterServers

servers = ClusterServers(["127.0.0.1:1"])  # refused: each call fails, after its session opened
blocking = worker_loop.shared_blocking_client(servers, 1.0)
with contextlib.suppress(Exception):
    blocking.list_topics()

async def call_async():
    client = await worker_loop.shared_client(servers, 1.0)
    with contextlib.suppress(Exception):
        await client.list_topics()

worker_loop.run(call_async())
print("exiting", flush=True)
"""


def test_a_worker_that_exits_closes_its_clients_first() -> None:
    """A Spark worker's clients live as long as its process. Left to the interpreter's
    teardown, each open aiohttp session was reported on stderr ("Unclosed client
    session", which Spark passes on to the driver's log); the exit hook closes them."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting" in done.stdout
    assert "Unclosed" not in done.stderr, done.stderr[-2000:]
