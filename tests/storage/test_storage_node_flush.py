"""Cross-group flush coalescing (``--flush-scope node``): one syncfs serves many logs.

Several groups' logs on one modelled filesystem flush through one
:class:`NodeFlush`: their flushes are served by a syncfs, no log fsyncs a file of
its own, and a power cut that keeps nothing unsynced keeps every flushed batch.
The model's syncfs is as hostile as its fsync: a failed one drops every dirty
page, and ``skip-syncfs`` (a syncfs that does nothing) must lose data here.
"""

from __future__ import annotations

import asyncio
import pathlib
import threading
from collections.abc import Callable

import pytest
from storage_helpers import make_batches

from raftlog.raft.flush import FlushCoalescer
from raftlog.raft.node_flush import NodeFlush
from raftlog.storage.fs import (
    REAL_FS,
    FsyncFailed,
    ModelFileSystem,
    set_fatal_handler,
    syncfs_reports_errors,
)
from raftlog.storage.log import SegmentedLog

DATA = pathlib.Path("/data")
GROUPS = 4


def open_logs(fs: ModelFileSystem) -> list[SegmentedLog]:
    return [SegmentedLog.open(DATA / "topic" / str(g), fs=fs) for g in range(GROUPS)]


async def flush_all_through_one_node_flush(
    fs: ModelFileSystem, logs: list[SegmentedLog]
) -> tuple[NodeFlush, list[int]]:
    """Append to every log, then flush them all at once; the flushed offsets."""
    node_flush = NodeFlush(fs.open_barrier(DATA))
    node_flush.start()
    coalescers = [
        FlushCoalescer(log, 1 << 20, 0.001, True, lambda _: None, barrier=node_flush.sync)
        for log in logs
    ]
    tasks = [asyncio.create_task(c.run()) for c in coalescers]
    try:
        for g, log in enumerate(logs):
            log.append(make_batches(0, 1, [100 + g, 200, 300]))
        flushed = await asyncio.wait_for(asyncio.gather(*(c.flush_now() for c in coalescers)), 10)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await node_flush.stop()
    return node_flush, list(flushed)


async def test_one_syncfs_serves_the_flushes_of_every_group() -> None:
    fs = ModelFileSystem()
    logs = open_logs(fs)
    node_flush, flushed = await flush_all_through_one_node_flush(fs, logs)
    assert flushed == [5] * GROUPS  # 3 batches of 2 records: offsets 0..5
    assert node_flush.served == GROUPS
    assert node_flush.syncs < GROUPS, "the groups' flushes were not coalesced"
    assert [log.fsyncs for log in logs] == [0] * GROUPS  # no log fsynced a file itself
    assert [log.flushed_offset for log in logs] == [5] * GROUPS

    fs.crash(seed=7, keep_unsynced=False)  # only what a barrier made durable survives
    for g, log in enumerate(open_logs(fs)):
        batches = log.read(0, 1 << 20)
        assert [b.last_offset for b in batches] == [1, 3, 5], f"group {g} lost flushed batches"
        assert batches[0].payload == make_batches(0, 1, [100 + g])[0].payload


async def test_a_syncfs_that_does_nothing_is_caught_by_the_crash_check() -> None:
    """The planted fault: with ``skip-syncfs`` the flushed batches are gone after the cut,
    which is what the test above would then find."""
    fs = ModelFileSystem(mutation="skip-syncfs")
    logs = open_logs(fs)
    _, flushed = await flush_all_through_one_node_flush(fs, logs)
    assert flushed == [5] * GROUPS  # claimed flushed ...
    fs.crash(seed=7, keep_unsynced=False)
    reopened = open_logs(fs)
    assert all(log.dirty_offset < 5 for log in reopened)  # ... and lost: the check fails


async def test_a_failed_syncfs_fails_every_flush_it_served_and_claims_nothing() -> None:
    fatal: list[str] = []
    set_fatal_handler(fatal.append)
    try:
        fs = ModelFileSystem()
        logs = open_logs(fs)
        fs.fail_fsync_at = fs.fsync_calls + 1  # the next barrier: the node's syncfs
        with pytest.raises(FsyncFailed, match=r"syncfs\).*never retried"):
            await flush_all_through_one_node_flush(fs, logs)
    finally:
        set_fatal_handler(None)
    assert fatal, "a failed syncfs must reach the fatal handler (the node stops)"
    assert all(log.flushed_offset == -1 for log in logs)
    fs.crash(seed=3, keep_unsynced=False)  # the dropped pages are never written
    assert all(log.dirty_offset == -1 for log in open_logs(fs))


async def test_on_this_kernel_the_real_syncfs_makes_a_log_durable(tmp_path: pathlib.Path) -> None:
    barrier = REAL_FS.open_barrier(tmp_path)
    if not syncfs_reports_errors():  # Linux < 5.8: each group fsyncs its own files
        assert barrier is None
        return
    assert barrier is not None
    node_flush = NodeFlush(barrier)
    node_flush.start()
    log = SegmentedLog.open(tmp_path / "t" / "0")
    coalescer = FlushCoalescer(log, 1 << 20, 0.001, True, lambda _: None, barrier=node_flush.sync)
    task = asyncio.create_task(coalescer.run())
    try:
        log.append(make_batches(0, 1, [100, 100]))
        assert await asyncio.wait_for(coalescer.flush_now(), 10) == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await node_flush.stop()
    assert (node_flush.syncs, log.fsyncs, log.flushed_offset) == (1, 0, 3)
    log.close()
    assert [b.last_offset for b in SegmentedLog.open(tmp_path / "t" / "0").read(0, 1 << 20)] == [
        1,
        3,
    ]


class HeldBarrier:
    """A syncfs model that records its calls and blocks, in its thread, until the test
    gives it a permit: the round in flight stays in flight until the test lets it go."""

    def __init__(self, permits: int = 1 << 20) -> None:
        self.permits = threading.Semaphore(permits)
        self.entered = 0  # syncfs calls started
        self.calls: list[str] = []  # "sync", "close", in the order they happened
        self.fail_next: BaseException | None = None

    def sync(self) -> None:
        self.calls.append("sync")
        self.entered += 1
        assert self.permits.acquire(timeout=10), "the test never released the held syncfs"
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def close(self) -> None:
        self.calls.append("close")


async def _until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(2000):  # 10 s at most
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_sync_asked_during_a_round_waits_for_the_next_syncfs() -> None:
    """The contract: sync() returns after a syncfs that *started after the call*. A
    round in flight when a group asks does not serve it (its writes may have missed
    that syncfs); the next round does. 3 times over."""
    barrier = HeldBarrier(permits=0)
    node_flush = NodeFlush(barrier)  # type: ignore[arg-type]
    node_flush.start()
    try:
        for n in range(3):
            first = asyncio.ensure_future(node_flush.sync())
            await _until(lambda n=n: barrier.entered == 2 * n + 1, "the first round's syncfs")
            second = asyncio.ensure_future(node_flush.sync())  # asks mid-round
            await asyncio.sleep(0.01)
            barrier.permits.release()  # round 1 returns
            await asyncio.wait_for(first, 10)
            await _until(lambda n=n: barrier.entered == 2 * n + 2, "the next round's syncfs")
            await asyncio.sleep(0.01)
            assert not second.done(), "a sync asked mid-round was answered by that round"
            barrier.permits.release()
            await asyncio.wait_for(second, 10)
        assert (node_flush.syncs, node_flush.served) == (6, 6)
    finally:
        barrier.permits.release(10)
        await node_flush.stop()


async def test_stop_waits_for_the_syncfs_in_flight_before_closing_the_handle() -> None:
    barrier = HeldBarrier(permits=0)
    node_flush = NodeFlush(barrier)  # type: ignore[arg-type]
    node_flush.start()
    waiter = asyncio.ensure_future(node_flush.sync())
    await _until(lambda: barrier.entered == 1, "the syncfs to start")
    late = asyncio.ensure_future(node_flush.sync())  # would need a round that never runs
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(node_flush.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done() and barrier.calls == ["sync"], "closed under the syncfs"
    barrier.permits.release()
    await asyncio.wait_for(stopping, 10)
    assert barrier.calls == ["sync", "close"]
    await waiter  # the round in flight still answers its waiter
    with pytest.raises(ConnectionAbortedError, match="flusher stopped"):
        await late
    with pytest.raises(RuntimeError, match="not running"):
        await node_flush.sync()


async def test_a_failed_syncfs_poisons_the_node_flush_no_syncfs_runs_again() -> None:
    """fsyncgate: after a failed syncfs the kernel may have dropped the dirty pages, so a
    later syncfs would return 0 for data that is gone. The round's waiters, those that
    asked meanwhile, and every later ask fail with the same error, and no syncfs runs."""
    barrier = HeldBarrier(permits=0)
    node_flush = NodeFlush(barrier)  # type: ignore[arg-type]
    node_flush.start()
    try:
        barrier.fail_next = FsyncFailed("/data (syncfs)", OSError(5, "EIO"))
        first = asyncio.ensure_future(node_flush.sync())
        await _until(lambda: barrier.entered == 1, "the syncfs to start")
        meanwhile = asyncio.ensure_future(node_flush.sync())
        await asyncio.sleep(0.01)
        barrier.permits.release(5)
        for waiter in (first, meanwhile):
            with pytest.raises(FsyncFailed, match="EIO"):
                await asyncio.wait_for(waiter, 10)
        with pytest.raises(FsyncFailed, match="EIO"):
            await asyncio.wait_for(node_flush.sync(), 10)
        assert (node_flush.syncs, barrier.calls) == (0, ["sync"])
    finally:
        await node_flush.stop()
