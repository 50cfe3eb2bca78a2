"""Retention: the plan (Kafka's rules), the log start state machine, segment rolls by
size and time, and a 3-replica group on disk moving its log start through the log."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from raftlog.node.retention import (
    NO_RETENTION,
    NOOP_SEGMENTS_WORTH_A_MOVE,
    LogStartStm,
    Retention,
    RetentionPolicy,
    decode_log_start,
    log_start_batch,
    plan_log_start,
)
from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.sim.local_network import LocalNetwork
from raftlog.storage.api import CommitContext
from raftlog.storage.batch import BatchKind, RecordBatch
from raftlog.storage.log import SegmentedLog, SegmentInfo

NOW = 1_700_000_000_000


def _segs(*sizes_and_ages: tuple[int, int]) -> list[SegmentInfo]:
    """Segments of 10 offsets each: (size in bytes, age in ms; -1: no timestamp)."""
    return [
        SegmentInfo(10 * i, 10 * i + 9, size, -1 if age < 0 else NOW - age)
        for i, (size, age) in enumerate(sizes_and_ages)
    ]


# ---------------------------------------------------------------- plan (pure)


def test_bytes_rule_keeps_at_least_retention_bytes_as_kafka() -> None:
    segs = _segs((100, 0), (100, 0), (100, 0), (100, 0), (50, 0))  # 450 bytes, last active
    # delete while what remains is still >= 250: drops 2 segments (450 -> 250)
    assert plan_log_start(segs, RetentionPolicy(250, -1), NOW, 10**9) == 20
    # 249 would allow a third (250 - 100 = 150 < 249? no: 150 < 249 keeps it)
    assert plan_log_start(segs, RetentionPolicy(249, -1), NOW, 10**9) == 20
    assert plan_log_start(segs, RetentionPolicy(150, -1), NOW, 10**9) == 30
    # never the active segment, even with retention.bytes 0
    assert plan_log_start(segs, RetentionPolicy(0, -1), NOW, 10**9) == 40
    assert plan_log_start(segs, RetentionPolicy(450, -1), NOW, 10**9) is None


def test_time_rule_walks_oldest_first_and_stops_at_the_first_young_segment() -> None:
    segs = _segs((100, 5000), (100, 500), (100, 5000), (100, 0))
    # the second segment is young: the third (old again) stays behind it, as in Kafka
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 10**9) == 10
    # a segment with no timestamp (only a new leader's no-op) has no age to keep it
    segs = _segs((52, -1), (100, 5000), (100, 0))
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 10**9) == 20
    # ... but no-op segments alone are not worth a replicated write (it wakes the
    # group) until there are NOOP_SEGMENTS_WORTH_A_MOVE of them
    few = NOOP_SEGMENTS_WORTH_A_MOVE - 1
    segs = _segs(*[(52, -1)] * few, (100, 0))
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 10**9) is None
    segs = _segs(*[(52, -1)] * (few + 1), (100, 0))
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 10**9) == 10 * (few + 1)


def test_limit_bounds_the_new_start_and_unlimited_deletes_nothing() -> None:
    segs = _segs((100, 5000), (100, 5000), (100, 5000), (100, 0))
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 25) == 20
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 19) == 10
    assert plan_log_start(segs, RetentionPolicy(-1, 1000), NOW, 9) is None
    assert plan_log_start(segs, NO_RETENTION, NOW, 10**9) is None
    assert plan_log_start(segs[:1], RetentionPolicy(0, 0), NOW, 10**9) is None


# ---------------------------------------------------------------- log start state machine


def test_log_start_stm_only_grows_ignores_malformed_and_snapshots() -> None:
    stm = LogStartStm()
    stm.apply(log_start_batch(40).stamped(100, 1))
    assert stm.log_start == 40
    stm.apply(log_start_batch(30).stamped(101, 1))  # older: no effect
    assert stm.log_start == 40
    stm.apply(log_start_batch(500).stamped(102, 1))  # past its own entry: malformed
    bad = RecordBatch.create(b"xx", kind=BatchKind.LOG_START).stamped(103, 1)
    stm.apply(bad)
    assert decode_log_start(bad) is None
    stm.apply(RecordBatch.create(b"\x00" * 8).stamped(104, 1))  # data: not a log start
    assert stm.log_start == 40
    again = LogStartStm()
    again.restore(stm.snapshot())
    assert again.log_start == 40
    again.restore(b"garbage")  # a blob of another size changes nothing
    assert again.log_start == 40


# ---------------------------------------------------------------- segment rolls


def _batch(offset: int, ts: int, size: int = 100, term: int = 1) -> RecordBatch:
    return RecordBatch.create(b"x" * size, timestamp_ms=ts).stamped(offset, term)


def test_segment_ms_rolls_on_batch_timestamps_and_survives_reopen(tmp_path: pathlib.Path) -> None:
    log = SegmentedLog.open(tmp_path)
    log.configure(segment_bytes=1 << 20, segment_ms=1000)
    log.append([_batch(0, 0), _batch(1, NOW), _batch(2, NOW + 999)])  # a no-op first: ts 0
    assert log.segment_count == 1
    log.append([_batch(3, NOW + 1000)])  # 1000 ms after the first timestamp: roll
    log.append([_batch(4, NOW + 1500), _batch(5, NOW + 2000)])
    assert [(s.base_offset, s.max_timestamp_ms) for s in log.segment_infos()] == [
        (0, NOW + 999),
        (3, NOW + 1500),
        (5, NOW + 2000),
    ]
    log.flush()
    log.close()
    reopened = SegmentedLog.open(tmp_path)
    infos = reopened.segment_infos()
    assert [(s.base_offset, s.last_offset, s.max_timestamp_ms) for s in infos] == [
        (0, 2, NOW + 999),
        (3, 4, NOW + 1500),
        (5, 5, NOW + 2000),
    ]
    # the active segment's first timestamp came back too: the next roll is on time
    reopened.configure(segment_bytes=1 << 20, segment_ms=1000)
    reopened.append([_batch(6, NOW + 2999)])
    assert reopened.segment_count == 3
    reopened.append([_batch(7, NOW + 3000)])
    assert reopened.segment_count == 4
    reopened.close()


def test_segment_bytes_change_applies_to_the_next_appends(tmp_path: pathlib.Path) -> None:
    log = SegmentedLog.open(tmp_path)
    log.append([_batch(i, NOW) for i in range(10)])
    assert log.segment_count == 1
    log.configure(segment_bytes=400, segment_ms=None)  # ~2 batches of 152 bytes each
    log.append([_batch(i, NOW) for i in range(10, 16)])
    assert [s.base_offset for s in log.segment_infos()] == [0, 10, 12, 14]
    with pytest.raises(ValueError, match="segment_bytes"):
        log.configure(segment_bytes=0, segment_ms=None)
    with pytest.raises(ValueError, match="segment_ms"):
        log.configure(segment_bytes=400, segment_ms=0)
    log.close()


def test_commit_context_offset_tracks_saves_and_reopen(tmp_path: pathlib.Path) -> None:
    log = SegmentedLog.open(tmp_path)
    assert log.commit_context_offset == -1
    log.append([_batch(i, NOW) for i in range(3)])
    log.flush()
    log.save_commit_context(CommitContext(2, 1, b""))
    assert log.commit_context_offset == 2
    log.close()
    assert SegmentedLog.open(tmp_path).commit_context_offset == 2


# ---------------------------------------------------------------- a group on disk


async def _wait_for(predicate, what: str, limit: int = 500) -> None:  # type: ignore[no-untyped-def]
    for _ in range(limit):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gave up waiting for {what}")


class _Replica:
    def __init__(self, c: Consensus, hb: HeartbeatManager, retention: Retention, rm: RmStm) -> None:
        self.c, self.hb, self.retention, self.rm = c, hb, retention, rm


async def _group(
    tmp_path: pathlib.Path, network: LocalNetwork, recovery_chunk_bytes: int = 512 * 1024
) -> dict[int, _Replica]:
    options = ConsensusOptions(
        tick_interval_s=0.01,
        commit_context_interval_ticks=5,
        recovery_chunk_bytes=recovery_chunk_bytes,
    )
    config = Configuration.of([1, 2, 3])
    out = {}
    for node in (1, 2, 3):
        log = SegmentedLog.open(tmp_path / f"n{node}", segment_bytes=1000)
        hb = HeartbeatManager(node, network.transport(node), interval_s=0.02)
        c = Consensus(9, node, config, log, network.transport(node), options, node, hb)
        rm = RmStm(c, RmStmConfig())
        retention = Retention(c, rm, log, f"t/0 on node {node}")
        retention.policy = RetentionPolicy(2000, -1)
        network.register(node, PeerDispatcher(node, hb).handle)
        await c.start()
        await hb.start()
        out[node] = _Replica(c, hb, retention, rm)
    return out


async def _stop(replicas: dict[int, _Replica]) -> None:
    for r in replicas.values():
        await r.hb.stop()
        await r.c.stop()
        r.c.log.close()


async def _write(leader: Consensus, count: int) -> int:
    last = -1
    for i in range(count):
        res = await leader.replicate([RecordBatch.create(b"%06d" % i + b"." * 394)]).finished
        last = res.last_offset
    return last


async def test_log_start_moves_through_the_log_and_every_replica_deletes(
    tmp_path: pathlib.Path,
) -> None:
    network = LocalNetwork()
    replicas = await _group(tmp_path, network)
    try:
        await _wait_for(lambda: any(r.c.is_leader for r in replicas.values()), "a leader")
        leader = next(r for r in replicas.values() if r.c.is_leader)
        # one segment: nothing to do, so the node's loop spends nothing on the partition
        assert [r.retention.due() for r in replicas.values()] == [False] * 3
        assert await leader.retention.propose(NOW) is None
        last = await _write(leader.c, 40)  # 40 batches of 452 bytes, 2 per 1000-byte segment
        await _wait_for(
            lambda: all(r.c.log.commit_context_offset >= last for r in replicas.values()),
            "every replica to save a commit context past the writes",
        )
        assert [r.retention.due() for r in replicas.values()] == [True] * 3
        new_start = await leader.retention.propose(NOW)
        assert new_start is not None and new_start > 0
        # Kafka's rule on the leader's segments: what remains is at least 2000 bytes
        remaining = [s for s in leader.c.log.segment_infos() if s.base_offset >= new_start]
        assert sum(s.size_bytes for s in remaining) >= 2000
        await _wait_for(
            lambda: all(r.retention.stm.log_start == new_start for r in replicas.values()),
            "every replica to apply the log start entry",
        )
        for r in replicas.values():
            r.c.save_commit_context()
            await r.retention.delete_below_log_start()
            assert r.c.log.start_offset == new_start  # same batches, same segment boundaries
            assert r.retention.log_start == new_start
            files = sorted(p.name for p in (tmp_path / f"n{r.c.node_id}").glob("*.log"))
            assert int(files[0].split("-")[0]) == new_start
        # the retained tail is intact: the data batches after the log start, in order
        kept = [b.payload[:6] for b in leader.c.read(new_start, 1 << 20) if not b.is_control]
        assert kept == [b"%06d" % i for i in range(40 - len(kept), 40)]
    finally:
        await _stop(replicas)


def _data(c: Consensus, start: int) -> list[tuple[int, int, bytes]]:
    """(offset, term, payload) of every batch from ``start`` (control batches included)."""
    return [(b.base_offset, b.term, b.payload) for b in c.log.read(start, 1 << 30)]


@pytest.mark.parametrize("chunk_bytes", [512 * 1024, 7])
async def test_a_follower_behind_the_log_start_gets_the_snapshot_installed(
    tmp_path: pathlib.Path, chunk_bytes: int
) -> None:
    """A follower cut off while retention deletes what it lacks does not hold the log
    start back (Kafka's rule): on its return the leader installs the snapshot as of its
    log start (in one chunk, or in 7-byte chunks), then sends the log; the follower ends
    with the leader's retained tail, byte for byte, the same state machines, and can
    lead."""
    network = LocalNetwork()
    replicas = await _group(tmp_path, network, recovery_chunk_bytes=chunk_bytes)
    try:
        await _wait_for(lambda: any(r.c.is_leader for r in replicas.values()), "a leader")
        leader = next(r for r in replicas.values() if r.c.is_leader)
        await _write(leader.c, 4)
        lagger = next(n for n in replicas if n != leader.c.node_id)
        await _wait_for(
            lambda: leader.c.status().peers[lagger].durable_offset >= 3, "the follower to catch up"
        )
        network.isolate(lagger)
        await asyncio.sleep(0.05)  # replies in flight land (or are lost) first
        held = replicas[lagger].c.log.dirty_offset
        last = await _write(leader.c, 40)
        await _wait_for(lambda: leader.c.log.commit_context_offset >= last, "a commit context")
        new_start = await leader.retention.propose(NOW)
        assert new_start is not None and new_start > held + 1  # the lagger holds nothing back
        await _wait_for(lambda: leader.retention.stm.log_start == new_start, "the log start")
        leader.c.save_commit_context()
        await leader.retention.delete_below_log_start()
        start = leader.c.log.start_offset
        assert held + 1 < start <= new_start
        assert leader.retention.snapshots.kept[0] == start - 1

        network.heal()
        follower = replicas[lagger]
        await _wait_for(
            lambda: (
                follower.c.log.dirty_offset >= leader.c.log.dirty_offset
                and follower.c.core.commit_index >= last
            ),
            "the lagger to get the snapshot and the log after it",
            limit=1000,
        )
        assert leader.c.core.snapshots_installed >= 1
        snapshot_bytes = len(leader.retention.snapshots.at(start - 1) or b"")
        # one request per chunk (the log's recovery requests come on top)
        assert leader.c.recovery.requests_sent >= -(-snapshot_bytes // chunk_bytes)
        assert follower.c.log.start_offset == start
        assert _data(follower.c, start) == _data(leader.c, start)
        assert follower.retention.snapshots.kept[0] == start - 1
        assert follower.retention.snapshots.at(start - 1) == leader.retention.snapshots.at(
            start - 1
        )
        # the log start command came after the last write: apply up to the leader's
        await _wait_for(
            lambda: follower.c.last_applied >= leader.c.last_applied, "the lagger to apply"
        )
        assert follower.retention.stm.log_start == new_start
        assert follower.rm.snapshot() == leader.rm.snapshot()  # the same producer table

        # it can lead: its log, configuration and state machines are whole
        await leader.c.transfer_leadership(lagger)
        await _wait_for(lambda: follower.c.is_leader, "the lagger to lead")
        after = await _write(follower.c, 3)
        assert after > last + 3
        kept = [b.payload[:6] for b in follower.c.read(start, 1 << 20) if not b.is_control]
        assert kept[-3:] == [b"%06d" % i for i in range(3)]
        assert kept[-43:-3] == [b"%06d" % i for i in range(40)][-len(kept[-43:-3]) :]
    finally:
        await _stop(replicas)
