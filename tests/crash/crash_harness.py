"""Crash a storage operation sequence after every IO call and check what a restart finds.

A *scenario* is a deterministic function of a :class:`Driver`: it appends,
flushes, truncates, saves votes and commit contexts through the driver, which
forwards to a :class:`SegmentedLog` on a :class:`ModelFileSystem` and keeps
what the log *acknowledged*:

- entries up to the flushed offset returned by the last completed call;
- the last vote and commit context whose save returned;
- for each base offset, every batch ever appended there and not removed by a
  truncation that returned (anything else on disk was never written).

:func:`crash_everywhere` first runs the scenario to count its IO calls, then,
for every IO call ``k`` and every seed, runs it again with the power cut right
after call ``k``, keeps a seeded prefix of the unsynced state, reopens the log
and checks (see :func:`check_recovered`). A second power cut during that
recovery is tried too, at every IO call of the recovery for the first seed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pathlib
from collections.abc import Callable

from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.batch import RecordBatch
from raftlog.storage.fs import ModelFileSystem, SimulatedCrash
from raftlog.storage.log import SegmentedLog

LOG_DIR = pathlib.Path("/data/topic/0")
SEGMENT_BYTES = 700
INDEX_INTERVAL = 120


def open_log(fs: ModelFileSystem) -> SegmentedLog:
    return SegmentedLog.open(
        LOG_DIR, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INDEX_INTERVAL, fs=fs
    )


def batches(base_offset: int, term: int, sizes: list[int], tag: int = 0) -> list[RecordBatch]:
    """Contiguous two-record batches; ``tag`` makes payloads differ between rewrites."""
    out = []
    offset = base_offset
    for i, size in enumerate(sizes):
        payload = bytes((offset * 7 + i + j + tag * 31) % 251 for j in range(size))
        batch = RecordBatch.create(payload, 2, timestamp_ms=1_000 + offset)
        out.append(batch.stamped(offset, term))
        offset += 2
    return out


@dataclasses.dataclass
class Acked:
    """What the log acknowledged before the power cut (see the module docstring)."""

    current: list[RecordBatch] = dataclasses.field(default_factory=list)
    flushed: int = -1
    start: int = 0
    start_pending: int | None = None
    truncate_pending: int | None = None  # a truncation in progress may remove offsets >= this
    allowed: dict[int, set[bytes]] = dataclasses.field(default_factory=dict)
    vote: VoteState = dataclasses.field(default_factory=VoteState)
    vote_pending: VoteState | None = None
    ctx: CommitContext | None = None
    ctx_pending: CommitContext | None = None
    # a snapshot install in progress: its commit context may be ahead of the log
    install_pending: bool = False

    def durable_batches(self) -> list[RecordBatch]:
        cut = self.truncate_pending
        start = max(self.start, self.start_pending or 0)  # a retention in progress may drop
        return [
            b
            for b in self.current
            if b.last_offset <= self.flushed
            and b.base_offset >= start
            and (cut is None or b.base_offset < cut)
        ]


class Driver:
    """Forwards storage calls to the log and records what each completed call acknowledged."""

    def __init__(self, fs: ModelFileSystem) -> None:
        self.fs = fs
        self.acked = Acked()
        self.log: SegmentedLog

    def run(self, scenario: Scenario) -> None:
        """Open the log (its directory creation is part of the sequence) and run ``scenario``."""
        self.log = open_log(self.fs)
        scenario(self)

    def _note_offsets(self) -> None:
        self.acked.flushed = self.log.flushed_offset

    def append(self, new: list[RecordBatch]) -> None:
        for b in new:  # allowed before the call: a crash mid-append may leave them
            self.acked.allowed.setdefault(b.base_offset, set()).add(b.encode())
        self.log.append(new)
        self.acked.current += new
        self._note_offsets()

    def flush(self) -> None:
        self.log.flush()
        self._note_offsets()

    def flush_around(
        self,
        before_sync: list[RecordBatch] | None = None,
        after_sync: list[RecordBatch] | None = None,
    ) -> None:
        """A flush in its three steps with appends landing while it runs (as the leader's
        appends do during the fsync): ``before_sync`` between prepare and the fsync,
        ``after_sync`` between the fsync and finish. Neither is acknowledged by it."""
        plan = self.log.prepare_flush()
        if before_sync:
            self.append(before_sync)
        self.log.sync_flush(plan)
        if after_sync:
            self.append(after_sync)
        self.log.finish_flush(plan)
        self._note_offsets()

    def flush_by_barrier(
        self,
        before_sync: list[RecordBatch] | None = None,
        after_sync: list[RecordBatch] | None = None,
    ) -> None:
        """A flush made durable by the node's syncfs (``--flush-scope node``), not by the
        log's own fsync, with appends landing around it as in :meth:`flush_around`."""
        plan = self.log.prepare_flush()
        if before_sync:
            self.append(before_sync)
        self.fs.open_barrier(LOG_DIR).sync()
        plan = dataclasses.replace(plan, by_barrier=True)
        self.log.sync_flush(plan)
        if after_sync:
            self.append(after_sync)
        self.log.finish_flush(plan)
        self._note_offsets()

    def truncate(self, offset: int) -> None:
        self.acked.truncate_pending = offset
        self.log.truncate(offset)
        self.acked.truncate_pending = None
        # Returned: durable. What was at or after ``offset`` must never come back.
        for base in [b for b in self.acked.allowed if b >= offset]:
            del self.acked.allowed[base]
        self.acked.current = [b for b in self.acked.current if b.base_offset < offset]
        self._note_offsets()

    def prefix_truncate(self, offset: int) -> None:
        self.acked.start_pending = offset
        self.log.prefix_truncate(offset)
        self.acked.start = self.log.start_offset
        self.acked.start_pending = None
        self._note_offsets()

    def install(self, offset: int, term: int, snapshot: bytes) -> None:
        """As a snapshot install does (``Consensus.install_local``): the commit context as
        of ``offset`` first, then the log restarts empty after it. A crash between the two
        leaves the context ahead of the log (the replica is behind its promise until the
        leader installs the snapshot again); the log may lose any of its batches."""
        a = self.acked
        ctx = CommitContext(offset, term, snapshot)
        a.install_pending, a.ctx_pending = True, ctx
        a.truncate_pending, a.start_pending = self.log.start_offset, offset + 1
        self.log.save_commit_context(ctx)
        a.ctx, a.ctx_pending = ctx, None
        self.log.restart_at(offset + 1, term)
        a.truncate_pending, a.start_pending, a.install_pending = None, None, False
        a.allowed.clear()
        a.current, a.start = [], offset + 1
        self._note_offsets()

    def save_vote(self, vote: VoteState) -> None:
        self.acked.vote_pending = vote
        self.log.save_vote(vote)
        self.acked.vote, self.acked.vote_pending = vote, None

    def save_commit_context(self, committed: int, snapshot: bytes = b"") -> None:
        # As consensus does: only ever an offset this replica has flushed.
        assert committed <= self.log.flushed_offset, "scenario bug: context above flushed"
        ctx = CommitContext(committed, self.log.term_at(committed) or 0, snapshot)
        self.acked.ctx_pending = ctx
        self.log.save_commit_context(ctx)
        self.acked.ctx, self.acked.ctx_pending = ctx, None


Scenario = Callable[[Driver], None]


class CrashCheckFailed(AssertionError):
    pass


def check_recovered(fs: ModelFileSystem, acked: Acked, where: str) -> SegmentedLog:
    """Reopen after a crash and check the durability contract; return the open log.

    Raises :class:`CrashCheckFailed` (naming the crash point) when: open fails
    (a restart would need a human), an acknowledged entry is missing or differs,
    a batch appears that was never written (or was durably truncated), the vote
    or the commit context went back, or recovery reports a lost committed suffix.
    """

    def fail(message: str) -> CrashCheckFailed:
        tail = "\n  ".join(fs.trace[-8:])
        return CrashCheckFailed(f"{where}: {message}\n  last IO calls:\n  {tail}")

    try:
        log = open_log(fs)
    except Exception as exc:
        raise fail(f"restart needs a human: open raised {type(exc).__name__}: {exc}") from exc
    try:
        if log.recovery_report.lost_committed_suffix and not acked.install_pending:
            raise fail(f"recovery lost a committed suffix: {log.recovery_report.warnings}")
        found = log.read(log.start_offset, 10**9) if log.dirty_offset >= log.start_offset else []
        by_base = {b.base_offset: b for b in found}
        for want in acked.durable_batches():
            got = by_base.get(want.base_offset)
            if got is None:
                raise fail(
                    f"acknowledged batch at offset {want.base_offset} (flushed offset "
                    f"{acked.flushed}) is missing; log holds {log.start_offset}..{log.dirty_offset}"
                )
            if got.encode() != want.encode():
                raise fail(f"acknowledged batch at offset {want.base_offset} differs")
        for got in found:
            if got.encode() not in acked.allowed.get(got.base_offset, set()):
                raise fail(f"batch at offset {got.base_offset} was never written, or was truncated")
        starts = {acked.start} | ({acked.start_pending} if acked.start_pending else set())
        first_durable = next(iter(acked.durable_batches()), None)
        if (
            first_durable is not None
            and log.start_offset > first_durable.base_offset
            and log.start_offset not in starts
        ):
            raise fail(f"log starts at {log.start_offset}, past acknowledged data")
        vote = log.load_vote()
        if vote not in (acked.vote, acked.vote_pending):
            raise fail(f"vote {vote} is neither the acknowledged {acked.vote} nor the pending one")
        if vote.term < acked.vote.term:
            raise fail(f"term went back from {acked.vote.term} to {vote.term}")
        ctx = log.load_commit_context()
        if ctx not in (acked.ctx, acked.ctx_pending):
            raise fail(f"commit context {ctx} is neither the acknowledged {acked.ctx} nor pending")
    except BaseException:
        log.close()
        raise
    return log


def check_usable(log: SegmentedLog, fs: ModelFileSystem, where: str) -> None:
    """After recovery the log takes a new append, flushes it and reads it back after a reopen."""
    nxt = batches(log.dirty_offset + 1, max(log.last_term, 1), [40], tag=99)
    log.append(nxt)
    log.flush()
    log.close()
    with open_log(fs) as again:
        got = again.read(nxt[0].base_offset, 10**6)
        if got[:1] != nxt:
            raise CrashCheckFailed(f"{where}: a write after recovery did not read back")


def count_io(scenario: Scenario) -> int:
    fs = ModelFileSystem()
    d = Driver(fs)
    d.run(scenario)
    d.log.close()
    return fs.io_calls


@dataclasses.dataclass
class Stats:
    io_calls: int = 0
    crash_points: int = 0
    recovery_crash_points: int = 0


def crash_everywhere(scenario: Scenario, seeds: int = 3, recovery_crashes: bool = True) -> Stats:
    """Cut the power after every IO call of ``scenario``; check each restart.

    ``seeds`` different survivals of the unsynced state per IO call. With
    ``recovery_crashes``, for the first seed the power is cut again after each
    IO call of the recovery, and the second recovery is checked as well.
    """
    stats = Stats(io_calls=count_io(scenario))
    for k in range(1, stats.io_calls + 1):
        for seed in range(seeds):
            fs = ModelFileSystem(crash_after=k)
            d = Driver(fs)
            try:
                d.run(scenario)
            except SimulatedCrash:
                pass
            else:
                raise AssertionError(f"scenario finished before IO call {k}: not deterministic")
            where = f"{scenario.__name__}: crash after IO call {k} ({fs.trace[-1]}), seed {seed}"
            fs.crash(seed)
            stats.crash_points += 1
            if recovery_crashes and seed == 0:
                stats.recovery_crash_points += _crash_recovery(fs, d.acked, where)
            log = check_recovered(fs, d.acked, where)
            check_usable(log, fs, where)
    return stats


def _crash_recovery(fs: ModelFileSystem, acked: Acked, where: str) -> int:
    """Crash the recovery after each of its IO calls, on copies of the crashed state."""
    probe = copy.deepcopy(fs)
    before = probe.io_calls
    open_log(probe).close()
    n = probe.io_calls - before
    for j in range(1, n + 1):
        again = copy.deepcopy(fs)
        again.crash_after = again.io_calls + j
        with contextlib.suppress(SimulatedCrash):
            open_log(again).close()
        again.crash(1000 + j)
        check_recovered(again, acked, f"{where}; then crash after recovery IO call {j}").close()
    return n
