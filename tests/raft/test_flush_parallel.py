"""Appends run while a flush's fsync does; only truncations and close wait for it.

The fsync is held in its executor thread (the page-cache model's fsync has made
the data durable, then waits on an event). Before the flush was split in three
steps the flusher held one lock around the whole flush, and appends took it
too: every append below would have waited for the held fsync (a timeout here).
"""

from __future__ import annotations

import asyncio
import pathlib
import threading

import pytest

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.flush import FlushCoalescer
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.raft.replicate_batcher import Consistency
from raftlog.sim.local_network import LocalNetwork
from raftlog.storage.batch import RecordBatch
from raftlog.storage.fs import ModelFileSystem, _ModelFile
from raftlog.storage.log import SegmentedLog

LOG_DIR = pathlib.Path("/data/topic/0")
LIMIT_S = 5.0  # every wait is bounded: a deadlock fails the test instead of hanging it


class HeldFsync:
    """Once armed, hold the next segment fsync of ``fs`` made in a worker thread (the
    flush's blocking step) after the model made the data durable, until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.fs: ModelFileSystem | None = None
        original = _ModelFile.fsync

        def fsync(handle: _ModelFile) -> None:
            original(handle)
            if (
                self.fs is not None
                and handle._fs is self.fs
                and handle.path.suffix == ".log"
                and threading.current_thread() is not threading.main_thread()
                and not self.started.is_set()
            ):
                self.started.set()
                self.release.wait(LIMIT_S * 2)

        monkeypatch.setattr(_ModelFile, "fsync", fsync)

    def arm(self, fs: ModelFileSystem) -> None:
        self.fs = fs

    async def wait_started(self) -> None:
        await _wait_for(self.started.is_set, "the flush to block in its fsync")


async def _wait_for(predicate, what: str) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(poll(), LIMIT_S)
    except TimeoutError:
        raise AssertionError(f"gave up waiting for {what}") from None


def batch(payload: bytes) -> RecordBatch:
    return RecordBatch.create(payload, 1, timestamp_ms=1)


def record_finished_flushes(monkeypatch: pytest.MonkeyPatch, log: SegmentedLog) -> list[int]:
    """The offset each ``finish_flush`` of ``log`` marked flushed, in order."""
    marked: list[int] = []
    original = log.finish_flush

    def finish_flush(plan):
        marked.append(original(plan))
        return marked[-1]

    monkeypatch.setattr(log, "finish_flush", finish_flush)
    return marked


async def test_the_leader_appends_while_its_flush_is_blocked_in_its_fsync(monkeypatch):
    held = HeldFsync(monkeypatch)
    fs = ModelFileSystem()
    log = SegmentedLog.open(LOG_DIR, fs=fs)
    marked = record_finished_flushes(monkeypatch, log)
    network = LocalNetwork()
    options = ConsensusOptions(tick_interval_s=0.01, flush_in_executor=True)
    c = Consensus(1, 1, Configuration.of([1]), log, network.transport(1), options)
    await c.start()
    try:
        await _wait_for(lambda: c.is_leader, "a leader")
        await asyncio.wait_for(c.replicate([batch(b"warm")]).finished, LIMIT_S)
        held.arm(fs)
        before = len(marked)
        first = await asyncio.wait_for(
            c.replicate([batch(b"a")], Consistency.LEADER_ACK).finished, LIMIT_S
        )
        await held.wait_started()  # the coalesced flush of ``first`` is in its fsync
        assert c.flusher.truncation_lock.locked()
        assert log.flushed_offset < first.last_offset

        # The point: the leader's append completes while that fsync is held.
        second = await asyncio.wait_for(
            c.replicate([batch(b"b")], Consistency.LEADER_ACK).finished, LIMIT_S
        )
        assert second.base_offset == first.last_offset + 1
        assert log.dirty_offset == second.last_offset
        assert log.flushed_offset < first.last_offset  # the held flush has not finished
        # A quorum_ack write is appended too, but commits only once flushed.
        third = c.replicate([batch(b"c")], Consistency.QUORUM_ACK)
        await _wait_for(lambda: log.dirty_offset > second.last_offset, "the third append")
        assert not third.finished.done() and c.commit_index < first.last_offset

        held.release.set()
        done = await asyncio.wait_for(third.finished, LIMIT_S)
        # The held flush marked what it recorded (``first``), never the appends made
        # during its fsync; the next flush covered those.
        assert marked[before] == first.last_offset
        assert log.flushed_offset == log.dirty_offset == done.last_offset == c.commit_index
    finally:
        held.release.set()
        await c.stop()
        async with c.flusher.truncation_lock:
            log.close()


async def test_a_follower_appends_while_its_flush_is_blocked_in_its_fsync(monkeypatch):
    held = HeldFsync(monkeypatch)
    network = LocalNetwork()
    options = ConsensusOptions(tick_interval_s=0.01, flush_in_executor=True)
    config = Configuration.of([1, 2, 3])
    disks = {n: ModelFileSystem() for n in (1, 2, 3)}
    nodes: dict[int, tuple[Consensus, HeartbeatManager]] = {}
    for n in (1, 2, 3):
        log = SegmentedLog.open(LOG_DIR, fs=disks[n])
        hb = HeartbeatManager(n, network.transport(n), interval_s=0.02)
        c = Consensus(7, n, config, log, network.transport(n), options, n, hb)
        network.register(n, PeerDispatcher(n, hb).handle)
        await c.start()
        await hb.start()
        nodes[n] = (c, hb)
    try:
        await _wait_for(lambda: any(c.is_leader for c, _ in nodes.values()), "a leader")
        leader = next(c for c, _ in nodes.values() if c.is_leader)
        follower = next(c for c, _ in nodes.values() if not c.is_leader)
        warm = await asyncio.wait_for(leader.replicate([batch(b"warm")]).finished, LIMIT_S)
        await _wait_for(lambda: follower.log.flushed_offset >= warm.last_offset, "warm flushed")
        held.arm(disks[follower.node_id])
        first = await asyncio.wait_for(
            leader.replicate([batch(b"a")], Consistency.LEADER_ACK).finished, LIMIT_S
        )
        await held.wait_started()  # the follower's flush of ``first`` is in its fsync
        assert follower.flusher.truncation_lock.locked()
        second = await asyncio.wait_for(
            leader.replicate([batch(b"b")], Consistency.LEADER_ACK).finished, LIMIT_S
        )
        # The follower appends ``second`` while its fsync is held.
        await _wait_for(
            lambda: follower.log.dirty_offset >= second.last_offset, "the follower's append"
        )
        assert follower.log.flushed_offset < first.last_offset
        held.release.set()
        await _wait_for(
            lambda: follower.log.flushed_offset >= second.last_offset, "the follower's flush"
        )
    finally:
        held.release.set()
        for c, hb in nodes.values():
            await hb.stop()
            await c.stop()
            async with c.flusher.truncation_lock:
                c.log.close()


async def _started_flusher(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[HeldFsync, SegmentedLog, FlushCoalescer, asyncio.Task[None]]:
    """A flusher over a log of offsets 0..5 whose flush is held in its fsync."""
    held = HeldFsync(monkeypatch)
    fs = ModelFileSystem()
    log = SegmentedLog.open(LOG_DIR, fs=fs)
    flusher = FlushCoalescer(log, 1, 0.001, in_executor=True, on_flushed=lambda _: None)
    task = asyncio.get_running_loop().create_task(flusher.run())
    held.arm(fs)
    log.append([batch(b"x").stamped(i, 1) for i in range(6)])
    flusher.note_append(1)
    await held.wait_started()
    return held, log, flusher, task


async def test_a_truncation_waits_for_the_fsync_and_leaves_flushed_at_most_dirty(monkeypatch):
    held, log, flusher, task = await _started_flusher(monkeypatch)
    try:
        log.append([batch(b"y").stamped(i, 1) for i in range(6, 9)])  # during the fsync
        cut = asyncio.get_running_loop().create_task(_truncate(flusher, log, 4))
        await asyncio.sleep(0.05)
        assert not cut.done() and log.dirty_offset == 8  # it waits for the fsync
        held.release.set()
        await asyncio.wait_for(cut, LIMIT_S)
        # The flush marked its recorded 5, the cut at 4 then brought both below it.
        assert (log.flushed_offset, log.dirty_offset) == (3, 3)
    finally:
        held.release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        log.close()


async def _truncate(flusher: FlushCoalescer, log: SegmentedLog, offset: int) -> None:
    async with flusher.truncation_lock:
        log.truncate(offset)


async def test_a_cancelled_flusher_keeps_the_lock_until_its_fsync_ends(monkeypatch):
    held, log, flusher, task = await _started_flusher(monkeypatch)
    try:
        task.cancel()
        await asyncio.sleep(0.05)
        # The thread still fsyncs: closing the log now would pull its file away.
        assert not task.done() and flusher.truncation_lock.locked()
        held.release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, LIMIT_S)
        assert not flusher.truncation_lock.locked()
    finally:
        held.release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        async with flusher.truncation_lock:
            log.close()


async def _fsyncs_for_writers(linger_s: float, rounds: int) -> tuple[int, float]:
    """Rounds of 8 writers, each of which appends and waits for a flush: the first two
    at once (concurrent writers), the other six 1 ms apart. The fsyncs done, and how
    long a lone writer, before any round, waited for its flush."""
    log = SegmentedLog.open(LOG_DIR, fs=ModelFileSystem())
    flusher = FlushCoalescer(
        log, 1 << 20, 0.001, in_executor=True, on_flushed=lambda _: None, linger_s=linger_s
    )
    task = asyncio.get_running_loop().create_task(flusher.run())
    loop = asyncio.get_running_loop()
    try:
        log.append([batch(b"x").stamped(0, 1)])
        started = loop.time()
        await asyncio.wait_for(flusher.flush_now(), LIMIT_S)
        lone_wait = loop.time() - started
        flushes_before = flusher.flushes
        for r in range(rounds):
            base = 1 + r * 8
            asks = []
            for i in range(8):
                log.append([batch(b"x").stamped(base + i, 1)])
                asks.append(asyncio.ensure_future(flusher.flush_now()))
                if i >= 1:
                    await asyncio.sleep(0.001)
            flushed = await asyncio.wait_for(asyncio.gather(*asks), LIMIT_S)
            assert flushed[-1] >= base + 7 and log.flushed_offset == base + 7
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return flusher.flushes - flushes_before, lone_wait


async def test_concurrent_writers_share_an_fsync_with_the_linger_and_a_lone_one_never_waits():
    """Without the linger, writers arriving 1 ms apart get about one fsync each (the
    model's fsync is quick); with a 20 ms linger, the concurrent ones of a round share
    one or two. A lone writer's flush starts at once, linger or not."""
    rounds = 5
    plain, _ = await _fsyncs_for_writers(0.0, rounds)
    lingered, lone_wait = await _fsyncs_for_writers(0.02, rounds)
    assert plain >= rounds * 5, plain
    assert lingered <= rounds * 3, lingered
    assert lone_wait < 0.015, lone_wait


async def _second_round_wait(
    payload: bytes, flush_bytes: int, linger_s: float, linger_max_bytes: int | None = None
) -> float:
    """Two writers append ``payload`` each and wait for a flush, twice; how long the
    second round waited (its flusher knows the last flush served two writers)."""
    log = SegmentedLog.open(LOG_DIR, fs=ModelFileSystem())
    flusher = FlushCoalescer(
        log,
        flush_bytes,
        10.0,
        in_executor=True,
        on_flushed=lambda _: None,
        linger_s=linger_s,
        linger_max_bytes=linger_max_bytes,
    )
    task = asyncio.get_running_loop().create_task(flusher.run())
    loop = asyncio.get_running_loop()
    try:
        waited = 0.0
        for r in range(2):
            started = loop.time()
            asks = []
            for i in range(2):
                data = batch(payload).stamped(r * 2 + i, 1)
                log.append([data])
                flusher.note_append(data.size_bytes)
                asks.append(asyncio.ensure_future(flusher.flush_now()))
            await asyncio.wait_for(asyncio.gather(*asks), LIMIT_S)
            waited = loop.time() - started
            assert log.flushed_offset == r * 2 + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return waited


async def test_a_flush_the_bytes_bound_asks_for_never_lingers():
    """Group commit's linger is for small writes; once the pending bytes pass
    ``flush_bytes`` there is a full flush's worth to write, and waiting for more
    only adds latency (large batches at acks=all: 4 ms of a 10 ms round trip).
    Small appends from concurrent writers still linger."""
    linger = 0.3
    large = await _second_round_wait(b"x" * 4096, 4096, linger)
    small = await _second_round_wait(b"x" * 16, 4096, linger)
    assert large < linger / 3, large
    assert small >= linger, small


async def test_the_linger_bound_is_its_own_below_the_bytes_bound():
    """The node's groups flush by bytes at 1 MiB but stop lingering at 256 KiB
    (ConsensusOptions): appends between the two still skip the linger, smaller ones
    linger, and an append past ``flush_bytes`` skips it as before."""
    linger = 0.3
    between = await _second_round_wait(b"x" * 4096, 1 << 20, linger, linger_max_bytes=4096)
    small = await _second_round_wait(b"x" * 16, 1 << 20, linger, linger_max_bytes=4096)
    past = await _second_round_wait(b"x" * 4096, 4096, linger, linger_max_bytes=1 << 20)
    assert between < linger / 3, between
    assert small >= linger, small
    assert past >= linger, past  # the linger bound alone decides, not flush_bytes


async def test_a_failed_flush_that_request_flush_asked_for_reaches_on_failed():
    """The leader asks for its flush with ``request_flush`` and waits for nobody: a
    failed one must still be heard (the group steps down), or the leader would go on
    leading a log it cannot make durable. A failed flush nobody asked for (the bytes
    or the delay started it) is not reported; a later asked one is, each time."""
    fs = ModelFileSystem()
    log = SegmentedLog.open(LOG_DIR, fs=fs)
    failures: list[BaseException] = []
    flusher = FlushCoalescer(
        log, 1 << 20, 0.001, in_executor=False, on_flushed=lambda _: None,
        on_failed=failures.append,
    )  # fmt: skip
    task = asyncio.get_running_loop().create_task(flusher.run())
    try:
        log.append([batch(b"a").stamped(0, 1)])
        flusher.request_flush()
        await _wait_for(lambda: log.flushed_offset == 0, "the asked-for flush")
        assert failures == []
        fs.fail_fsync_at = fs.fsync_calls + 1
        log.append([batch(b"b").stamped(1, 1)])
        flusher.note_append(10)  # flushed by the delay, asked by nobody
        await _wait_for(lambda: fs.fsync_calls >= fs.fail_fsync_at, "the failing fsync")
        await asyncio.sleep(0.01)
        assert failures == [], "a flush nobody asked for was reported"
        for n in (1, 2):
            flusher.request_flush()  # the log is poisoned: every flush fails from now on
            await _wait_for(lambda n=n: len(failures) == n, "the failure to be reported")
        assert all("stopped after a failed fsync" in str(f) for f in failures), failures
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
