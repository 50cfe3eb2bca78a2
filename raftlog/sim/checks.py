"""Invariants the simulator checks after every step.

- no task failed and no handler raised (a bug, a ``SafetyViolation``): the
  first such exception fails the check, with its traceback chained;
- election safety: at most one leader per term, over the whole history: each
  election is recorded the moment it happens (the leader's hook), so a leader
  that stepped down or crashed before the next step counts too;
- one vote per term: a voter's saved vote, once it names a candidate (itself
  included) in a term, never names another in that term (the vote saved, the
  simulated disk's hook, is what a grant is sent after);
- monotonic commit: the commit index never goes backwards on a node (within
  one incarnation: after a crash it restarts from the saved commit context,
  which may be lower);
- state machine safety: every committed batch a node has equals the one any
  other node committed at that offset (checked incrementally against one
  global history of committed batches);
- log matching: two logs holding a batch with the same base offset and term
  hold the same batch, preceded by an entry of the same term (so, inductively,
  the same prefix); checked over every live node's whole log, incrementally;
- leader completeness: a leader elected after an entry was seen committed has
  that entry in its log;
- quorum durability: the last committed entry is on stable storage (the
  simulated disk's flushed offset, which a crash does not lose) on a majority
  of the voters of the configuration at that entry or of the latest one
  (pass every node, crashed ones included: a voter not passed is assumed to
  hold it);
- monotonic follower progress: within one term, a leader's view of a
  follower's flushed and dirty offsets never goes back unless that follower
  truncated its log or restarted recently (within :data:`REGRESSION_WINDOW_S`,
  longer than any reply can be in flight): a follower's offsets only go back by
  a truncation or a crash, so a view going back means the leader applied a
  reply older than one it had applied (a stale reply);
- flow control: a leader never has more pipelined appends outstanding to a
  follower than its in-flight window allows (``max_in_flight_appends``), nor
  adds one to a window already holding ``max_in_flight_bytes`` (the byte bound
  is soft: one append may take the window past it), and a follower that is not
  in ``REPLICATE`` has none (etcd's inflights refuse to add to a full window);
  recovery keeps at most ``recovery_max_inflight`` chunks in flight to a
  probing follower, and at most one until a success in that probe confirmed
  the follower's match point (etcd's probe), and none to a follower not in
  ``PROBE``;
- linearizable reads: a leader whose read index says it may serve reads
  (``RaftCore.read_index``) has that index at or past every entry committed before
  its term: acknowledged at ``quorum_ack`` in an earlier term, or seen committed
  while no node had reached its term (checked at every step and the moment it is
  elected: a new leader's commit index may lag them until an entry of its term
  commits); and none was acknowledged at ``quorum_ack`` in a later term (a leader
  deposed without knowing it, by a transfer's target elected past the voters'
  leases, must not serve reads on its own lease);
- no entry acknowledged at ``quorum_ack`` is ever lost: each one equals the
  committed history at its offset, and after the final heal every one of them
  is committed on the final leader.

``leader_ack`` entries are not checked: one may be lost, by design, when its
leader crashes or loses leadership before a majority has flushed it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from raftlog.raft.core import CoreOptions, PeerStatus
from raftlog.raft.progress import ProgressState
from raftlog.raft.replicate_batcher import ReplicateResult
from raftlog.sim.node import SimNode
from raftlog.storage.api import VoteState
from raftlog.storage.batch import RecordBatch

REGRESSION_WINDOW_S = 1.0
"""How long after a follower truncated a leader's view of it may legitimately go back."""


class InvariantViolation(AssertionError):
    """A safety property of Raft failed; the message names it and the evidence."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    last_offset: int
    term: int
    payload: bytes | memoryview


def _entry(b: RecordBatch) -> _Entry:
    return _Entry(b.last_offset, b.term, b.payload)


class InvariantChecker:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, int] = {}
        # (voter, term) -> the candidate its saved vote names in that term
        self.vote_of: dict[tuple[int, int], int] = {}
        # term -> the nodes that voted for themselves in it (candidates of that term)
        self.candidates: dict[int, set[int]] = {}
        self.history: dict[int, _Entry] = {}  # committed batches by base offset
        self.history_end = -1
        self.acked: dict[int, _Entry] = {}  # quorum_ack results by base offset
        # term -> the last offset of the highest quorum_ack entry acknowledged in it
        self._acked_upto: dict[int, int] = {}
        # term -> the highest last offset first seen committed while it was the highest
        # term seen of any node (as _seen_in_term) or the batch's own
        self._committed_upto: dict[int, int] = {}
        # (node, incarnation) -> highest commit index seen / last offset verified
        self._commit_seen: dict[tuple[int, int], int] = {}
        self._verified: dict[tuple[int, int], int] = {}
        self.checks = 0
        # Log matching: (base offset, term) -> (entry, term of the entry before it).
        self._seen: dict[tuple[int, int], tuple[_Entry, int]] = {}
        # (node, incarnation) -> (last offset checked for log matching, its term)
        self._matched: dict[tuple[int, int], tuple[int, int]] = {}
        # Leader completeness: committed bases in log order, and the highest term any
        # node had when each was first seen committed.
        self._history_bases: list[int] = []
        self._seen_in_term: dict[int, int] = {}
        self._max_term = 0
        # (node, term) of a leader -> how many history entries it was checked for
        self._complete_upto: dict[tuple[int, int], int] = {}
        # A violation found between steps (at a commit), raised by the next check().
        self.pending: InvariantViolation | None = None
        # (leader, incarnation, term, follower) -> (progress epoch, (flushed, dirty) seen)
        self._views: dict[tuple[int, int, int, int], tuple[int, tuple[int, int]]] = {}
        # follower -> ((incarnation, truncations), virtual time that changed last)
        self._truncated: dict[int, tuple[tuple[int, int], float]] = {}

    def record_leader(self, node: SimNode) -> None:
        """Election safety at the moment ``node`` became leader (the node's ``on_leader``
        hook; never raises: a violation waits in :attr:`pending` for the next check)."""
        c = node.consensus
        if not c.is_leader:
            return  # lost it again in the same ready: it led a later term's nobody
        other = self.leader_of_term.setdefault(c.term, node.node_id)
        if other != node.node_id and self.pending is None:
            self.pending = InvariantViolation(
                f"election safety: two leaders in term {c.term}: nodes {other} and "
                f"{node.node_id} (node {other} may have stepped down or crashed since)"
            )
        stale = self._stale_read(node)
        if stale and self.pending is None:
            self.pending = InvariantViolation(stale)

    def record_vote(self, node: SimNode, vote: VoteState) -> None:
        """One vote per term, at the moment ``node`` saved ``vote`` (the node's ``on_vote``
        hook; never raises: a violation waits in :attr:`pending`)."""
        if vote.voted_for == -1:
            return
        if vote.voted_for == node.node_id:
            self.candidates.setdefault(vote.term, set()).add(node.node_id)
        other = self.vote_of.setdefault((node.node_id, vote.term), vote.voted_for)
        if other != vote.voted_for and self.pending is None:
            self.pending = InvariantViolation(
                f"one vote per term: node {node.node_id} voted for node {other} and then for "
                f"node {vote.voted_for} in term {vote.term}"
            )

    @property
    def split_votes(self) -> int:
        """Terms that had two candidates or more and no leader: split votes."""
        led = self.leader_of_term
        return sum(1 for t, nodes in self.candidates.items() if len(nodes) > 1 and t not in led)

    @property
    def contested_terms(self) -> int:
        """Terms that had two candidates or more (a leader or not): competing candidates."""
        return sum(1 for nodes in self.candidates.values() if len(nodes) > 1)

    def _stale_read(self, node: SimNode) -> str:
        """'' unless ``node`` leads and its read index would serve a read that misses an
        entry committed before its term: one acknowledged at quorum_ack in an earlier
        term, or seen committed while no node had reached its term (what leader
        completeness checks too; see the module docstring)."""
        core = node.consensus.core
        decision = core.read_index()
        if not decision.ready:
            return ""
        later = [(t, o) for t, o in self._acked_upto.items() if t > core.term]
        if later:
            term, offset = max(later)
            return (
                f"linearizable reads: node {node.node_id}, leader of term {core.term}, may "
                f"serve reads from read index {decision.index}, though offset {offset} was "
                f"acknowledged in the later term {term}"
            )
        before = [o for t, o in self._acked_upto.items() if t < core.term]
        before += [o for t, o in self._committed_upto.items() if t < core.term]
        earlier = max(before, default=-1)
        if decision.index >= earlier:
            return ""
        return (
            f"linearizable reads: node {node.node_id}, leader of term {core.term}, may serve "
            f"reads from read index {decision.index}, below offset {earlier}, committed "
            "before its term"
        )

    def record_ack(self, result: ReplicateResult, batch: RecordBatch) -> None:
        placed = batch.stamped(result.base_offset, result.term)
        entry = _entry(placed)
        self.acked[result.base_offset] = entry
        upto = self._acked_upto.get(result.term, -1)
        self._acked_upto[result.term] = max(upto, placed.last_offset)
        known = self.history.get(result.base_offset)
        if known is not None and known != entry:
            raise InvariantViolation(
                f"quorum_ack entry at offset {result.base_offset} (term {result.term}) "
                f"differs from the committed entry there (term {known.term})"
            )

    def check(self, nodes: Sequence[SimNode], failure: BaseException | None = None) -> None:
        """Every invariant of the module docstring; ``failure``: a handler's exception."""
        self.checks += 1
        if self.pending is not None:
            raise self.pending
        if failure is not None:
            raise InvariantViolation(f"a request handler raised: {failure!r}") from failure
        for node in nodes:  # the persisted term counts too: a crashed leader's included
            term = node.log.load_vote().term
            self._max_term = max(self._max_term, node.consensus.term if node.alive else 0, term)
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
            self._check_log_matching(node, key)
        for node in nodes:
            if node.alive and node.consensus.is_leader:
                self._check_leader_complete(node)
                stale = self._stale_read(node)
                if stale:
                    raise InvariantViolation(stale)
        self._check_durable(nodes)
        self._check_progress(nodes)

    def _check_progress(self, nodes: Sequence[SimNode]) -> None:
        for leader in nodes:
            if not (leader.alive and leader.consensus.is_leader):
                continue
            core = leader.consensus.core
            for f, p in core.status().peers.items():
                self.observe_progress(leader, f, p, nodes)
                self._check_window(leader, f, p, core.options)
        if self.pending is not None:
            raise self.pending

    def _check_window(
        self, leader: SimNode, follower: int, p: PeerStatus, options: CoreOptions
    ) -> None:
        count, max_count = p.in_flight, options.max_in_flight_appends
        max_bytes = options.max_in_flight_bytes
        over_count = count > max_count
        # Bytes: soft bound, so only the window minus its newest entry must be under it.
        over_bytes = count > 1 and p.in_flight_bytes - p.newest_in_flight_bytes >= max_bytes
        recovering = p.state is not ProgressState.REPLICATE
        if over_count or over_bytes or (recovering and count > 0):
            raise InvariantViolation(
                f"flow control: leader {leader.node_id} (term {leader.consensus.term}) has "
                f"{count} appends ({p.in_flight_bytes} bytes) in flight to node {follower} in "
                f"state {p.state.value}; the window allows {max_count} ({max_bytes} bytes)"
            )
        allowed = (
            (options.recovery_max_inflight if p.recovery_confirmed else 1)
            if p.state is ProgressState.PROBE
            else 0
        )
        if p.recovery_in_flight > allowed:
            raise InvariantViolation(
                f"flow control: leader {leader.node_id} (term {leader.consensus.term}) has "
                f"{p.recovery_in_flight} recovery chunks in flight to node {follower} in state "
                f"{p.state.value} (match point confirmed: {p.recovery_confirmed}); "
                f"{allowed} allowed"
            )

    def observe_progress(
        self, leader: SimNode, follower: int, p: PeerStatus, nodes: Sequence[SimNode]
    ) -> None:
        """Monotonic follower progress, at a step or right after the leader applied a reply
        (the leader's hook): a regression is kept in :attr:`pending`, raised by ``check``."""
        now = asyncio.get_running_loop().time()
        for n in nodes:
            if n.node_id == follower:
                epoch = (n.incarnation, n.consensus.truncations if n.alive else -1)
                seen = self._truncated.get(follower)
                if seen is None or seen[0] != epoch:
                    self._truncated[follower] = (epoch, now)
        c = leader.consensus
        view = (p.flushed_offset, p.dirty_offset)
        key = (leader.node_id, leader.incarnation, c.term, follower)
        old = self._views.get(key)
        self._views[key] = (p.epoch, view)
        if old is None or old[0] != p.epoch or (view[0] >= old[1][0] and view[1] >= old[1][1]):
            return
        truncated = self._truncated.get(follower)
        if truncated is not None and now - truncated[1] <= REGRESSION_WINDOW_S:
            return
        if self.pending is None:
            self.pending = InvariantViolation(
                f"monotonic progress: leader {leader.node_id} (term {c.term}) moved its view "
                f"of node {follower}'s (flushed, dirty) offsets back from {old[1]} to {view}, "
                f"and node {follower} did not truncate its log nor restart"
            )

    def _check_log_matching(self, node: SimNode, key: tuple[int, int]) -> None:
        log = node.consensus.log
        upto, term = self._matched.get(key, (log.start_offset - 1, 0))
        if (
            upto > log.dirty_offset
            or upto < log.start_offset - 1  # compacted past, or replaced by a snapshot
            or (upto >= log.start_offset and log.term_at(upto) != term)
        ):
            upto = log.start_offset - 1  # truncated or replaced since: check it all again
        start = upto + 1
        for _ in range(100_000):
            if start > log.dirty_offset:
                break
            batches = log.read(start, 1 << 20)
            if not batches:
                break
            for b in batches:
                prev = log.term_at(b.base_offset - 1) if b.base_offset > 0 else 0
                mine = (_entry(b), prev if prev is not None else -1)
                other = self._seen.setdefault((b.base_offset, b.term), mine)
                if other[0] != mine[0] or (other[1] != mine[1] and -1 not in (other[1], mine[1])):
                    raise InvariantViolation(
                        f"log matching: node {node.node_id} has batch {b.base_offset}.."
                        f"{b.last_offset} term {b.term} after term {mine[1]}; another log has "
                        f"{other[0]} after term {other[1]} at the same offset and term"
                    )
                upto, term = b.last_offset, b.term
            start = batches[-1].last_offset + 1
        self._matched[key] = (upto, term)

    def _check_leader_complete(self, node: SimNode) -> None:
        c = node.consensus
        key = (node.node_id, c.term)
        i = self._complete_upto.get(key, 0)
        for base in self._history_bases[i:]:
            entry = self.history[base]
            if base < c.log.start_offset:
                continue  # compacted: in the snapshot the log starts after
            if self._seen_in_term[base] < c.term and c.log.term_at(base) != entry.term:
                raise InvariantViolation(
                    f"leader completeness: node {node.node_id} leads term {c.term} without "
                    f"the entry at {base} (term {entry.term}) seen committed by term "
                    f"{self._seen_in_term[base]}; it has term {c.log.term_at(base)} there"
                )
        self._complete_upto[key] = len(self._history_bases)

    def check_commit(self, node: SimNode, nodes: Sequence[SimNode]) -> None:
        """Quorum durability at the moment ``node``'s commit index advanced.

        Never raises (it runs inside the node's stages): a violation is kept in
        :attr:`pending` and raised by the next :meth:`check`.
        """
        c = node.consensus
        end = c.commit_index
        term = c.log.term_at(end)
        if self.pending is not None or end < 0 or term is None:
            return
        try:
            self._check_durable(nodes, end, term, f"{end} at node {node.node_id}'s commit")
        except InvariantViolation as exc:
            self.pending = exc

    def _check_durable(
        self,
        nodes: Sequence[SimNode],
        end: int | None = None,
        term: int | None = None,
        what: str = "",
    ) -> None:
        if end is None or term is None:
            end = self.history_end
            if end < 0:
                return
            base = self._history_bases[-1]
            term = self.history[base].term
            what = f"{base}..{end}"
        on_disk = {
            n.node_id
            for n in nodes
            if (n.log.flushed_offset >= end and n.log.term_at(end) == term)
            or n.log.start_offset - 1 > end  # compacted past it: in the kept snapshot
        }
        # The configurations as a log holding the committed prefix has them (a divergent,
        # uncommitted log may hold a configuration change that never took effect).
        holders = [
            n
            for n in nodes
            if n.alive and n.consensus.commit_index >= end and n.consensus.log.term_at(end) == term
        ]
        if not holders:
            return  # no live node to read the configuration from (checked again next step)
        history = holders[0].consensus.configs
        known = {n.node_id for n in nodes}
        for config in (history.at(end)[1], history.latest):
            voters = config.voters
            # A voter the caller did not pass may hold it: only the ones passed can refute.
            holding = [v for v in voters if v in on_disk or v not in known]
            if len(holding) >= len(voters) // 2 + 1:
                return
        raise InvariantViolation(
            f"quorum durability: committed entry {what} (term {term}) is flushed "
            f"only on nodes {sorted(on_disk)}, not on a majority of voters "
            f"{sorted(history.at(end)[1].voters)} (latest {sorted(history.latest.voters)})"
        )

    def _verify_committed(self, node: SimNode, key: tuple[int, int], commit: int) -> None:
        c = node.consensus
        # below the log start the entries are in the snapshot (compaction, an install)
        start = max(self._verified.get(key, -1) + 1, c.log.start_offset)
        if start > self.history_end + 1 and start > self._verified.get(key, -1) + 1:
            return  # it skipped entries no log has shown the history yet: another will

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
        self._history_bases.append(b.base_offset)
        self._seen_in_term[b.base_offset] = self._max_term
        # Keyed by a term its committer had reached (the batch's own, at least): any
        # leader of a later term holds it below its own entries (leader completeness).
        seen = max(self._max_term, b.term)
        self._committed_upto[seen] = max(self._committed_upto.get(seen, -1), b.last_offset)

    def check_all_acked_committed(self) -> None:
        for base, entry in sorted(self.acked.items()):
            if self.history.get(base) != entry:
                raise InvariantViolation(
                    f"quorum_ack entry at offset {base} (term {entry.term}) is not in the "
                    f"committed log after healing (history ends at {self.history_end})"
                )
