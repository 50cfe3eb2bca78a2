"""Invariants the simulator checks after every step.

- at most one leader per term;
- the commit index never goes backwards on a node (within one incarnation:
  after a crash it restarts from the saved commit context, which may be lower);
- logs match up to the commit index on every replica: every committed batch a
  node has equals the one any other node committed at that offset (checked
  incrementally against one global history of committed batches);
- no entry acknowledged at ``quorum_ack`` is ever lost: each one equals the
  committed history at its offset, and after the final heal every one of them
  is committed on the final leader.

``leader_ack`` entries are not checked: one may be lost, by design, when its
leader crashes or loses leadership before a majority has flushed it.
"""

from __future__ import annotations

import dataclasses

from raftlog.raft.replicate_batcher import ReplicateResult
from raftlog.sim.node import SimNode
from raftlog.storage.batch import RecordBatch


class InvariantViolation(AssertionError):
    """A safety property of Raft failed; the message names it and the evidence."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    last_offset: int
    term: int
    payload: bytes


def _entry(b: RecordBatch) -> _Entry:
    return _Entry(b.last_offset, b.term, b.payload)


class InvariantChecker:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, int] = {}
        self.history: dict[int, _Entry] = {}  # committed batches by base offset
        self.history_end = -1
        self.acked: dict[int, _Entry] = {}  # quorum_ack results by base offset
        # (node, incarnation) -> highest commit index seen / last offset verified
        self._commit_seen: dict[tuple[int, int], int] = {}
        self._verified: dict[tuple[int, int], int] = {}
        self.checks = 0

    def record_ack(self, result: ReplicateResult, batch: RecordBatch) -> None:
        placed = batch.stamped(result.base_offset, result.term)
        entry = _entry(placed)
        self.acked[result.base_offset] = entry
        known = self.history.get(result.base_offset)
        if known is not None and known != entry:
            raise InvariantViolation(
                f"quorum_ack entry at offset {result.base_offset} (term {result.term}) "
                f"differs from the committed entry there (term {known.term})"
            )

    def check(self, nodes: list[SimNode]) -> None:
        self.checks += 1
        for node in nodes:
            if not node.alive:
                continue
            c = node.consensus
            if c.fatal_error is not None:
                raise InvariantViolation(
                    f"node {node.node_id} task failed: {c.fatal_error!r}"
                ) from c.fatal_error
            if c.is_leader:
                other = self.leader_of_term.setdefault(c.term, node.node_id)
                if other != node.node_id:
                    raise InvariantViolation(
                        f"two leaders in term {c.term}: nodes {other} and {node.node_id}"
                    )
            key = (node.node_id, node.incarnation)
            commit = c.commit_index
            seen = self._commit_seen.get(key, commit)
            if commit < seen:
                raise InvariantViolation(
                    f"node {node.node_id}: commit index went back from {seen} to {commit}"
                )
            self._commit_seen[key] = commit
            self._verify_committed(node, key, commit)

    def _verify_committed(self, node: SimNode, key: tuple[int, int], commit: int) -> None:
        c = node.consensus
        start = self._verified.get(key, c.log.start_offset - 1) + 1
        for _ in range(10_000):
            if start > commit:
                return
            batches = c.read(start, 1 << 20)
            if not batches:
                raise InvariantViolation(
                    f"node {node.node_id}: commit index {commit} but no batch at offset {start}"
                )
            for b in batches:
                self._merge(node.node_id, b)
                self._verified[key] = b.last_offset
            start = batches[-1].last_offset + 1

    def _merge(self, node_id: int, b: RecordBatch) -> None:
        entry = _entry(b)
        if b.base_offset <= self.history_end:
            known = self.history.get(b.base_offset)
            if known != entry:
                raise InvariantViolation(
                    f"log mismatch below the commit index: node {node_id} has committed batch "
                    f"{b.base_offset}..{b.last_offset} term {b.term}, the history has {known}"
                )
            return
        if b.base_offset != self.history_end + 1:
            raise InvariantViolation(
                f"node {node_id}: committed batch at {b.base_offset} leaves a gap after "
                f"{self.history_end}"
            )
        acked = self.acked.get(b.base_offset)
        if acked is not None and acked != entry:
            raise InvariantViolation(
                f"quorum_ack entry at offset {b.base_offset} term {acked.term} was lost: node "
                f"{node_id} committed term {b.term} there"
            )
        self.history[b.base_offset] = entry
        self.history_end = b.last_offset

    def check_all_acked_committed(self) -> None:
        for base, entry in sorted(self.acked.items()):
            if self.history.get(base) != entry:
                raise InvariantViolation(
                    f"quorum_ack entry at offset {base} (term {entry.term}) is not in the "
                    f"committed log after healing (history ends at {self.history_end})"
                )
