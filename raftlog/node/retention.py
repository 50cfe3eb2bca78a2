"""Retention: a partition's log start moved through its Raft log; whole segments deleted below.

Kafka's meanings (``raftlog.controller.topic_config``): ``retention.bytes``
bounds the bytes a partition keeps, ``retention.ms`` the age of its closed
segments (the newest timestamp in the segment; timestamps are the leader's
append times). Only whole *closed* segments go, oldest first; the active
segment is never deleted. As in Kafka, a partition keeps at least
``retention.bytes`` (it deletes a segment only when what remains is still at
least that much), so it holds less than ``retention.bytes`` plus one segment,
plus the active segment.

How all replicas agree:

1. The partition's leader (:meth:`Retention.propose`, on the node's retention
   timer) computes the new log start: the base offset of the first closed
   segment that must stay under both limits. It never moves the start past
   - the high watermark (only committed data is deleted),
   - the last stable offset (an open transaction's data stays, so its abort
     or commit can still be read and filtered),
   - the leader's latest saved commit context (its state machines restart
     from that snapshot and replay the log after it),
   A replica that is down or behind does not hold retention back (Kafka's
   rule): once it is behind the log start, the leader installs the snapshot
   as of its log start on it, then sends the log after it (``recovery``).
2. The leader replicates one LOG_START control entry carrying that offset
   (``quorum_ack``). Readers never see it (control batches are filtered).
3. Every replica applies it in log order (:class:`LogStartStm`, a state
   machine snapshotted with the commit context), so every replica agrees on
   the log start. A fetch below it fails with OFFSET_OUT_OF_RANGE naming the
   requested offset and the log start, as Kafka's does.
4. Every replica deletes, on the same timer and through the storage layer's
   prefix truncation, the whole segments below
   ``min(log start, its own saved commit context + 1)``, and only up to a
   segment whose previous offset it holds a snapshot as of
   (:mod:`raftlog.node.start_snapshots`: what a follower behind it is sent):
   physically a replica may keep a little more (segment boundaries and
   snapshot times differ by replica), never less.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from raftlog.node.start_snapshots import StartSnapshots
from raftlog.raft.replicate_batcher import Consistency
from raftlog.storage.batch import BatchKind, RecordBatch
from raftlog.storage.log import SegmentedLog, SegmentInfo

if TYPE_CHECKING:
    from raftlog.producers.rm_stm import RmStm
    from raftlog.raft.consensus import Consensus

log = logging.getLogger(__name__)

_OFFSET = struct.Struct("<q")
PROPOSE_TIMEOUT_S = 10.0


def log_start_batch(offset: int) -> RecordBatch:
    """The control entry that moves a partition's log start to ``offset``."""
    return RecordBatch.create(_OFFSET.pack(offset), 1, kind=BatchKind.LOG_START)


def decode_log_start(batch: RecordBatch) -> int | None:
    """The offset a LOG_START entry carries; None when its payload is malformed."""
    if batch.kind is not BatchKind.LOG_START or len(batch.payload) != _OFFSET.size:
        return None
    (offset,) = _OFFSET.unpack(batch.payload)
    return offset if offset >= 0 else None


class LogStartStm:
    """The partition's agreed log start: the largest offset a committed LOG_START named.

    Applied on every replica in log order, so every replica derives the same
    value. It only grows. An entry that names an offset past itself (a log
    start beyond the entry that moves it) is malformed and changes nothing,
    on every replica alike; ``apply`` never raises.
    """

    # apply() reads LOG_START payloads only
    reads_data_payloads = False

    def __init__(self) -> None:
        self.log_start = 0

    def apply(self, batch: RecordBatch) -> None:
        if batch.kind is not BatchKind.LOG_START:
            return
        offset = decode_log_start(batch)
        if offset is None or offset > batch.base_offset:
            log.error(
                "ignoring a malformed log start entry at offset %d (payload %r)",
                batch.base_offset,
                batch.payload[:16],
            )
            return
        self.log_start = max(self.log_start, offset)

    def snapshot(self) -> bytes:
        return _OFFSET.pack(self.log_start)

    def restore(self, data: bytes) -> None:
        if len(data) == _OFFSET.size:
            self.log_start = max(0, _OFFSET.unpack(data)[0])


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Kafka's ``retention.bytes`` and ``retention.ms``; -1 is no limit."""

    retention_bytes: int = -1
    retention_ms: int = -1

    @property
    def unlimited(self) -> bool:
        return self.retention_bytes < 0 and self.retention_ms < 0


NO_RETENTION = RetentionPolicy()


NOOP_SEGMENTS_WORTH_A_MOVE = 16
"""Closed segments holding only new leaders' no-ops that justify moving the log start
on their own (fewer go only along with a data segment that retention deletes)."""


def plan_log_start(
    segments: Sequence[SegmentInfo], policy: RetentionPolicy, now_ms: int, limit: int
) -> int | None:
    """The new log start for ``segments`` (oldest first, the last one active), or None.

    The result is the base offset of the first segment kept: every closed
    segment before it is deleted. A closed segment goes, oldest first, while
    what remains is still at least ``retention_bytes`` or its newest timestamp
    is more than ``retention_ms`` before ``now_ms`` (a segment with no
    timestamp holds only a new leader's no-op: no age keeps it); the first
    segment that stays stops the walk (Kafka's rule). The result is never above
    ``limit`` nor past the active segment's base. None: nothing to delete.

    No-op segments alone move the log start only once there are
    ``NOOP_SEGMENTS_WORTH_A_MOVE`` of them: every new term rolls one (52 bytes), and
    a log start moved for each costs a replicated write that wakes its quiescent
    group, on every partition that changed leader (thousands after a failover or a
    creation: those proposals kept the groups awake ten seconds later).
    """
    if policy.unlimited or len(segments) < 2:
        return None
    total = sum(s.size_bytes for s in segments)
    new_start = None
    worth_it = False  # a data segment goes, or enough no-op ones
    noops = 0
    for seg, nxt in itertools.pairwise(segments):
        if nxt.base_offset > limit:
            break
        remaining = total - seg.size_bytes
        over_bytes = policy.retention_bytes >= 0 and remaining >= policy.retention_bytes
        expired = policy.retention_ms >= 0 and (
            seg.max_timestamp_ms < 0 or now_ms - seg.max_timestamp_ms > policy.retention_ms
        )
        if not (over_bytes or expired):
            break
        total -= seg.size_bytes
        new_start = nxt.base_offset
        if seg.max_timestamp_ms < 0 and not over_bytes:
            noops += 1
            worth_it = worth_it or noops >= NOOP_SEGMENTS_WORTH_A_MOVE
        else:
            worth_it = True
    return new_start if worth_it else None


class Retention:
    """One partition replica's retention (see the module doc).

    Construct before ``consensus.start()``: it registers its :class:`LogStartStm`.
    """

    def __init__(self, consensus: Consensus, rm: RmStm, log_: SegmentedLog, name: str) -> None:
        self.stm = LogStartStm()
        consensus.add_state_machine(self.stm)
        self.snapshots = StartSnapshots(consensus, log_, name)
        self._c = consensus
        self._rm = rm
        self._log = log_
        self._name = name
        # nothing is deleted until the node sets the topic's policy (internal topics: never)
        self.policy = NO_RETENTION

    @property
    def log_start(self) -> int:
        """The first offset readers may ask for: the agreed log start, or the local one
        when a restart restored an older snapshot than the deletions it made."""
        return max(self._log.start_offset, self.stm.log_start)

    def due(self) -> bool:
        """Whether :meth:`run` can do anything now: both of its steps need a sealed
        segment (one below the active one), so a partition whose log is one segment
        (an idle one, by far the most common at scale) costs the loop no task."""
        return self._log.segment_count >= 2

    async def run(self, now_ms: int) -> None:
        """One round: propose a new log start when leading, then delete below it."""
        if self._c.is_leader:
            await self.propose(now_ms)
        await self.delete_below_log_start()

    def leader_limit(self) -> int:
        """The highest log start the leader may propose now (see the module doc)."""
        c = self._c
        return min(
            c.high_watermark, self._rm.last_stable_offset, self._log.commit_context_offset + 1
        )

    async def propose(self, now_ms: int) -> int | None:
        """Leader: replicate a new log start when the policy asks for one; return it.

        Returns None when nothing is to be deleted; raises the replicate call's
        error (leadership lost, a timeout) for the caller's next round to retry.
        """
        c = self._c
        if not c.is_leader or self.policy.unlimited:
            return None
        start = self.log_start
        segments = [s for s in self._log.segment_infos() if s.last_offset >= start]
        new_start = plan_log_start(segments, self.policy, now_ms, self.leader_limit())
        if new_start is None or new_start <= start:
            return None
        stages = c.replicate([log_start_batch(new_start)], Consistency.QUORUM_ACK, c.term)
        await asyncio.wait_for(stages.finished, PROPOSE_TIMEOUT_S)
        log.info("%s: log start moves from %d to %d (retention)", self._name, start, new_start)
        return new_start

    async def delete_below_log_start(self) -> int:
        """Delete the whole segments below the log start that this replica may drop now.

        Bounded by this replica's own saved commit context (its state machines
        restart from there) and its commit index; never the active segment.
        Returns the bytes deleted.
        """
        lg = self._log
        target = min(self.stm.log_start, lg.commit_context_offset + 1, self._c.commit_index + 1)
        segments = lg.segment_infos()
        if len(segments) < 2 or segments[0].last_offset >= target:
            return 0
        target = self.snapshots.usable_start(min(target, segments[-1].base_offset))
        if target <= lg.start_offset:
            return 0
        before_start, before_bytes = lg.start_offset, lg.size_bytes
        # a flush holds this lock around its fsync: no segment is deleted under it
        async with self._c.flusher.truncation_lock:
            if not self._c.running:  # the group is closing: its log may be closed
                return 0
            lg.prefix_truncate(target)
            self.snapshots.drop_below_start()
        self._rm.table.prefix_truncate(lg.start_offset)
        freed = before_bytes - lg.size_bytes
        if lg.start_offset > before_start:
            log.info(
                "%s: deleted offsets %d..%d (%d bytes) below the log start %d",
                self._name,
                before_start,
                lg.start_offset - 1,
                freed,
                self.stm.log_start,
            )
        return freed
