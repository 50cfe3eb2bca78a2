"""What the leader knows about each follower, and how it may send to it (etcd's ``tracker/``).

Offsets are record offsets, ``-1`` when nothing is known. The follower
reports ``flushed_offset`` and ``dirty_offset`` in every reply and heartbeat;
``match_offset`` is the last offset verified equal to the leader's log.
``durable_offset = min(flushed, match)`` is what counts toward the commit index:
durable on the follower and equal to the leader's entries.

Every follower is in one of three states (:class:`ProgressState`), and every
transition goes through :meth:`FollowerProgress.become_probe`,
:meth:`~FollowerProgress.become_replicate` or
:meth:`~FollowerProgress.become_snapshot` (etcd's ``ResetState``), called only
by the core:

- ``REPLICATE``: the follower is known to hold the leader's log up to
  ``last_sent_offset`` (or will, once the appends in flight land);
  ``replicate_entries`` streams every new leader append to it, optimistically,
  while its in-flight window (:class:`Inflights`) has room and the append's
  ``prev_log_offset`` equals ``last_sent_offset`` (so appends are never sent
  out of order or with a gap);
- ``PROBE``: what the follower holds is uncertain (a mismatch, a lost append,
  a full window, a new leader's first mismatch): ``recovery`` owns it and sends
  the chunks the core hands out. Until a successful reply in this probe
  establishes the follower's match point (``recovery_confirmed``), one chunk at
  a time from ``next_offset`` (etcd's probe); from then on up to
  ``recovery_max_inflight`` chunks at once (the ``recovery_window``), each
  starting after the last one handed out (``recovery_sent_offset``, the cursor),
  as etcd's replicate state pipelines appends. A mismatch, a lost chunk or a
  reset of any kind goes back to one chunk at a time from the corrected
  ``next_offset``: the window and the cursor are dropped, and the replies of the
  chunks sent before only count through the seq and term checks every reply
  passes. When the window is empty and ``next_offset`` has passed the leader's
  dirty offset the core hands the follower back to ``REPLICATE`` with
  ``last_sent_offset`` at the leader's dirty offset, with no await in between,
  so no pipelined append can slip between the two. A chunk still in the window
  keeps it in ``PROBE`` (its entries may not have landed, and ``REPLICATE``
  would stream the next append as if they had); a chunk leaves the window when
  it is answered or when a reply acknowledges its entries (so with
  ``next_offset`` past the dirty offset the window is empty already: the
  check guards the rule, it does not wait). Chunks sent before a reset may
  still be on the network after the switch: they only carry entries the
  follower holds or takes as equal, and their replies pass the seq checks;
- ``SNAPSHOT``: the follower needs entries below the leader's log start
  (retention or compaction dropped them), which only a snapshot install gives
  it: ``recovery`` sends the snapshot as of the log start in chunks
  (each chunk made by a ``SnapshotChunkRead`` stepped into the core; the follower's side is
  :mod:`raftlog.raft.follower_install`). No appends go meanwhile; once the
  follower confirms the install it probes from the log start, and a heartbeat
  reply showing it reached the log start some other way moves it back to
  ``PROBE`` too (a heartbeat reply in ``SNAPSHOT`` otherwise restarts an
  install that failed).

Invariants: ``match_offset < next_offset`` once anything matched;
``len(inflights) <= max count`` (the byte bound is soft, as etcd's: one
append larger than it may go when the window is empty); a follower not in
``REPLICATE`` has an empty window; a follower not in ``PROBE`` has an empty
``recovery_window``, and one in ``PROBE`` has at most one chunk in it until
``recovery_confirmed`` and at most ``recovery_max_inflight`` after; with the
``recovery_window`` empty the cursor is ignored (the next chunk starts at
``next_offset``: what went unacknowledged is sent again).
"""

from __future__ import annotations

import collections
import dataclasses
import enum


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """The appends sent to one follower and not yet answered (etcd's ``inflights.go``).

    Each entry is one request: (seq, last offset, bytes). The window is full
    when it holds ``max_count`` requests or at least ``max_bytes`` bytes. An
    entry leaves when its request completes (:meth:`release`: a reply, stale
    or not, or a transport error; unlike etcd, every send here completes, and
    a stale reply that frees nothing would keep a window full until the next
    probe) or when an acknowledgement covers its last offset (:meth:`free_le`).
    """

    __slots__ = ("_entries", "bytes", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        if max_count < 1 or max_bytes < 1:
            raise ValueError(f"in-flight bounds must be >= 1, got {max_count}, {max_bytes}")
        self.max_count = max_count
        self.max_bytes = max_bytes
        # seq -> (last offset, bytes), in the order sent (seqs increase).
        self._entries: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def newest_bytes(self) -> int:
        """The size of the request added last (0 when empty)."""
        if not self._entries:
            return 0
        return next(reversed(self._entries.values()))[1]

    def sent(self) -> list[tuple[int, int]]:
        """(seq, last offset) of each request in the window, oldest first."""
        return [(seq, last) for seq, (last, _) in self._entries.items()]

    def full(self) -> bool:
        """No room for another append (by count, or by bytes: soft, as etcd's)."""
        return len(self._entries) >= self.max_count or self.bytes >= self.max_bytes

    def add(self, seq: int, last_offset: int, nbytes: int) -> None:
        """Record a request sent; the caller checked :meth:`full` first."""
        self._entries[seq] = (last_offset, nbytes)
        self.bytes += nbytes

    def release(self, seq: int) -> bool:
        """The request ``seq`` completed; False when it had already left the window."""
        entry = self._entries.pop(seq, None)
        if entry is None:
            return False
        self.bytes -= entry[1]
        return True

    def free_le(self, offset: int) -> None:
        """Drop every request whose entries the follower acknowledged (last offset <= offset)."""
        for seq, (last, _) in list(self._entries.items()):
            if last > offset:
                break
            self.release(seq)

    def reset(self) -> None:
        self._entries.clear()
        self.bytes = 0


@dataclasses.dataclass(slots=True)
class FollowerProgress:
    node: int
    inflights: Inflights
    # The recovery chunks sent in PROBE and not yet answered (by count; see the module
    # docstring). Separate from ``inflights``: that one is REPLICATE's and stays empty here.
    recovery_window: Inflights
    state: ProgressState = ProgressState.REPLICATE
    match_offset: int = -1
    next_offset: int = 0
    last_sent_offset: int = -1
    flushed_offset: int = -1
    dirty_offset: int = -1
    # Ticks (leader's clock) of the last reply heard from this follower.
    last_heard_tick: int = 0
    # The tick of the last heartbeat made for it, and the commit index that one carried
    # (a heartbeat round, RaftCore._heartbeats_due: an idle follower is heartbeated less often).
    heartbeat_tick: int = -(2**62)
    heartbeat_commit: int = -2
    # The tick of the last append made for it in REPLICATE (a ``Propose`` step): an append
    # does what a heartbeat does, so a follower that got one lately is heartbeated as
    # seldom as an idle one.
    append_tick: int = -(2**62)
    # The seq of the newest reply applied (replies at or below it are stale).
    last_reply_seq: int = -1
    # Recovery requests in a row that got no usable reply (see the ``RecoveryLost`` message).
    recovery_failures: int = 0
    # The last offset of the chunks handed out since this probe (re)started: the next
    # chunk starts after it, so the chunks in flight never overlap.
    recovery_sent_offset: int = -1
    # A successful reply arrived in this probe: the follower's match point is known, so
    # recovery may pipeline; False again at every reset (a mismatch, a lost chunk).
    recovery_confirmed: bool = False
    # Which progress entry this is (set by the core when it makes one; PeerStatus.epoch).
    epoch: int = 0

    @property
    def durable_offset(self) -> int:
        return min(self.flushed_offset, self.match_offset)

    @property
    def recovering(self) -> bool:
        """``recovery`` owns this follower (probe) or it waits for a snapshot."""
        return self.state is not ProgressState.REPLICATE

    @property
    def in_flight(self) -> int:
        return len(self.inflights)

    def reset(self, leader_dirty_offset: int, tick: int) -> None:
        """Optimistic start for a new leader: assume the follower has everything.

        The first append proves it wrong (a mismatch reply) and moves the
        follower to probe.
        """
        self.match_offset = -1
        self.flushed_offset = -1
        self.dirty_offset = -1
        self.last_heard_tick = tick
        self.last_reply_seq = -1
        self.heartbeat_commit = -2  # the new leader's first round heartbeats everyone
        self.next_offset = leader_dirty_offset + 1
        self.become_replicate(leader_dirty_offset)

    def become_probe(self, next_offset: int) -> None:
        """Hand the follower to ``recovery``, which sends from ``next_offset`` on, one
        chunk at a time until a success confirms where the follower's log matches."""
        self.next_offset = next_offset
        self.inflights.reset()
        self._reset_recovery()
        self.state = ProgressState.PROBE

    def become_replicate(self, leader_dirty_offset: int) -> None:
        """Caught up to the leader's dirty offset: the pipeline streams from here."""
        self.state = ProgressState.REPLICATE
        self.last_sent_offset = leader_dirty_offset
        self.next_offset = max(self.next_offset, leader_dirty_offset + 1)
        self.inflights.reset()
        self._reset_recovery()

    def become_snapshot(self) -> None:
        """The follower needs entries below the leader's log start."""
        self.state = ProgressState.SNAPSHOT
        self.inflights.reset()
        self._reset_recovery()

    def _reset_recovery(self) -> None:
        # Chunks still on the network after this are no longer in the window: their
        # replies pass the usual seq and term checks and free nothing.
        self.recovery_window.reset()
        self.recovery_sent_offset = self.next_offset - 1
        self.recovery_confirmed = False
