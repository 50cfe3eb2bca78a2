"""VoteLog: every group's vote in one append-only file, one write and one fsync a batch,
and never an acknowledged vote lost across a power cut (torn writes included)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import random

import pytest

from raftlog.storage.api import StorageCorruption, VoteState
from raftlog.storage.fs import ModelFileSystem, SimulatedCrash
from raftlog.storage.vote_log import RECORD_SIZE, VoteLog, log_name, newer

ROOT = pathlib.Path("/data")


def model(mutation: str = "") -> ModelFileSystem:
    fs = ModelFileSystem(mutation=mutation)
    fs.mkdirs(ROOT)
    fs.syncfs(ROOT)
    return fs


def test_newer_orders_a_groups_votes_by_term_then_cast() -> None:
    assert newer(VoteState(3, -1), VoteState(2, 1)) == VoteState(3, -1)
    assert newer(VoteState(3, -1), VoteState(3, 2)) == VoteState(3, 2)
    assert newer(VoteState(3, 2), VoteState(3, -1)) == VoteState(3, 2)
    assert newer(VoteState(), VoteState(1, -1)) == VoteState(1, -1)


async def test_saves_of_one_loop_turn_are_one_batch_and_reopen_finds_the_newest() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs)
    fsyncs = fs.fsync_calls
    await asyncio.gather(*(votes.save(g, VoteState(term=4, voted_for=g % 3)) for g in range(1000)))
    assert (votes.batches, votes.saved) == (1, 1000)
    assert fs.fsync_calls - fsyncs == 1  # one fsync for a thousand groups' votes
    await votes.save(7, VoteState(term=5, voted_for=-1))
    await votes.save(7, VoteState(term=5, voted_for=2))
    votes.close()
    fs.crash(0, keep_unsynced=False)  # only what was fsynced survives
    again = VoteLog.open(ROOT, fs=fs)
    assert again.vote(7) == VoteState(5, 2)
    assert again.vote(8) == VoteState(4, 2)
    assert again.vote(999) == VoteState(4, 0)
    assert again.vote(1000) == VoteState()  # never saved
    assert again.groups == 1000
    again.close()


async def test_a_newer_vote_asked_during_a_batch_replaces_the_waiting_one() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs)
    first = asyncio.ensure_future(votes.save(1, VoteState(2, 1)))
    await asyncio.sleep(0)  # the first batch may be being written
    later = [votes.save(1, VoteState(3, -1)), votes.save(1, VoteState(3, 2))]
    await asyncio.gather(first, *later)
    assert votes.saved < 3  # a waiting vote was replaced, not written too
    votes.close()
    assert VoteLog.open(ROOT, fs=fs).vote(1) == VoteState(3, 2)


async def _run_until_cut(fs: ModelFileSystem, rng: random.Random, acked: dict, asked: dict) -> None:
    """Rounds of concurrent saves (a new term for some groups, then votes in it) until the
    model cuts the power; ``acked``: each group's newest vote whose save returned,
    ``asked``: every vote asked for per group."""
    votes = VoteLog.open(ROOT, fs=fs, compact_records=64)  # compacts every few rounds
    for _ in range(40):
        calls = []
        for g in rng.sample(range(24), rng.randint(1, 12)):
            current = newer(acked.get(g, VoteState()), votes.vote(g))
            vote = (
                VoteState(current.term + 1, -1)
                if current.voted_for != -1 or rng.random() < 0.5
                else VoteState(current.term, rng.randint(1, 3))
            )
            asked.setdefault(g, []).append(vote)
            calls.append((g, vote))

        async def save(g: int, vote: VoteState) -> None:
            await votes.save(g, vote)
            acked[g] = newer(acked.get(g, VoteState()), vote)

        results = await asyncio.gather(*(save(g, v) for g, v in calls), return_exceptions=True)
        crashed = [r for r in results if isinstance(r, SimulatedCrash)]
        if crashed:
            votes.close()
            raise crashed[0]
        assert not [r for r in results if isinstance(r, BaseException)], results
    votes.close()


async def _crash_violations(mutation: str, runs: int) -> list[str]:
    """Power cuts at every IO call of a run of saves and compactions, each crash keeping
    a seeded (maybe torn) prefix of the unsynced writes; what reopening finds wrong."""
    violations: list[str] = []
    for run in range(runs):
        fs = model(mutation)
        fs.crash_after = fs.io_calls + 1 + run
        acked: dict[int, VoteState] = {}
        asked: dict[int, list[VoteState]] = {}
        with contextlib.suppress(SimulatedCrash):  # a run ends at its power cut
            await _run_until_cut(fs, random.Random(run), acked, asked)
        fs.crash(run)
        votes = VoteLog.open(ROOT, fs=fs)
        for g, vote in acked.items():
            found = votes.vote(g)
            if newer(found, vote) != found:
                violations.append(f"run {run}: group {g} acked {vote}, found {found}")
            if found not in asked[g]:
                violations.append(f"run {run}: group {g} found {found}, never asked")
        votes.close()
    return violations


async def test_no_acknowledged_vote_is_lost_at_any_power_cut() -> None:
    assert await _crash_violations("", runs=300) == []


async def test_the_power_cut_check_catches_a_log_that_skips_its_fsync() -> None:
    """The planted fault: fsyncs that write nothing (the model's ``skip-fsync``) must
    lose acknowledged votes, or the check above could not fail."""
    violations = await _crash_violations("skip-fsync", runs=60)
    assert any("acked" in v for v in violations), violations


async def test_a_torn_tail_is_cut_and_the_log_goes_on() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs)
    await votes.save(1, VoteState(3, 1))
    votes.close()
    path = ROOT / log_name(0)
    good = fs.read_file(path)
    assert good is not None and len(good) == RECORD_SIZE
    # the power went during the next batch: a zeroed sector and half a record
    fs.write_file(path, good + bytes(RECORD_SIZE) + b"\x01" * 10, fsync=True)
    votes = VoteLog.open(ROOT, fs=fs)
    assert votes.vote(1) == VoteState(3, 1)
    await votes.save(2, VoteState(1, 2))
    votes.close()
    data = fs.read_file(path)
    assert data is not None and len(data) == 2 * RECORD_SIZE  # cut, then appended after it
    reopened = VoteLog.open(ROOT, fs=fs)
    assert (reopened.vote(1), reopened.vote(2)) == (VoteState(3, 1), VoteState(1, 2))


async def test_damage_before_a_later_batch_is_corruption_not_a_tail() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs)
    for term in range(1, 5):  # four batches, one record each
        await votes.save(1, VoteState(term, -1))
    votes.close()
    path = ROOT / log_name(0)
    data = bytearray(fs.read_file(path) or b"")
    data[RECORD_SIZE + 3] ^= 0xFF  # the second batch's record: batches 3 and 4 follow
    fs.write_file(path, bytes(data), fsync=True)
    with pytest.raises(StorageCorruption, match=r"votes\.0\.log: bad vote record at position 32"):
        VoteLog.open(ROOT, fs=fs)


async def test_each_shard_reads_the_others_logs_for_groups_that_moved() -> None:
    fs = model()
    shard1 = VoteLog.open(ROOT, shard=1, fs=fs)
    await shard1.save(5, VoteState(7, 3))
    await shard1.save(6, VoteState(2, -1))
    shard1.close()
    # --shards changed: group 5 now belongs to shard 0, whose own log has an older vote
    shard0 = VoteLog.open(ROOT, shard=0, fs=fs)
    await shard0.save(6, VoteState(4, 1))
    shard0.close()
    shard0 = VoteLog.open(ROOT, shard=0, fs=fs)
    assert shard0.vote(5) == VoteState(7, 3)
    assert shard0.vote(6) == VoteState(4, 1)
    shard0.close()


async def test_compaction_keeps_each_groups_newest_vote() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs, compact_records=20)
    for term in range(1, 30):
        await asyncio.gather(*(votes.save(g, VoteState(term, g % 2)) for g in range(3)))
    assert votes.compactions >= 1
    votes.close()
    data = fs.read_file(ROOT / log_name(0)) or b""
    assert len(data) < 20 * RECORD_SIZE  # the file stays bounded
    again = VoteLog.open(ROOT, fs=fs)
    assert [again.vote(g) for g in range(3)] == [VoteState(29, g % 2) for g in range(3)]


async def test_a_failed_write_fails_its_callers_and_leaves_no_partial_record() -> None:
    fs = model()
    votes = VoteLog.open(ROOT, fs=fs)
    await votes.save(1, VoteState(1, 1))
    fs.capacity_bytes = fs.used_bytes() + RECORD_SIZE + 7  # room for one record and a bit
    with pytest.raises(OSError, match="No space left"):
        await asyncio.gather(*(votes.save(g, VoteState(2, 1)) for g in range(2, 6)))
    fs.capacity_bytes = None
    await votes.save(9, VoteState(3, 1))  # the log goes on once there is room
    votes.close()
    again = VoteLog.open(ROOT, fs=fs)
    assert (again.vote(1), again.vote(9)) == (VoteState(1, 1), VoteState(3, 1))
    assert len(fs.read_file(ROOT / log_name(0)) or b"") == 2 * RECORD_SIZE
