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
