"""Named faults that can be planted in the Raft core, for mutation testing of the simulator.

A mutation is a deliberate safety bug. ``python -m benchmarks sim --mutations``
plants each one in turn and counts how many seeds of the simulator catch it;
a simulator that misses a planted bug would also miss a real one. Production
never sets any: :data:`ACTIVE` is empty unless :func:`planted` is entered, and
checking it costs one set lookup on paths that are not per-record.

The names and what each one breaks:

- ``commit_on_leader_flush``: the leader commits what it has flushed itself,
  without a majority (quorum durability, state machine safety);
- ``dirty_as_flushed``: a follower's dirty (written, not fsynced) offset is
  counted as flushed (quorum durability);
- ``vote_ignores_log``: a vote is granted whatever the candidate's log
  (leader completeness);
- ``skip_truncation``: a follower keeps its conflicting entry instead of
  truncating it (log matching);
- ``accept_stale_replies``: the leader applies a reply older than the newest
  one it applied from that follower (quorum durability);
- ``ignore_inflight_bound``: the leader streams appends to a follower whose
  in-flight window is full (flow control: the window bound);
- ``recovery_pipelines_unmatched``: recovery pipelines a full window of chunks
  to a follower whose match point is not known yet (a fresh probe, or right
  after a mismatch: the return to one chunk at a time is skipped) (flow
  control: etcd's probe state).
- ``paused_backlog_gap``: the append that catches up a paused follower leaves out
  the first batch it missed (log matching: appends never leave a gap).
- ``quiesced_keeps_dead_leader``: a quiescent follower keeps following a leader
  that node liveness declared dead (liveness: a new leader within a bound).
- ``vote_twice_in_term``: a voter grants a candidate although it already voted
  for another (itself included) in the same term (election safety: at most one
  leader per term; one vote per term).
- ``send_before_vote_saved``: with votes saved off the loop, a ready's messages
  and the replies to peers leave before the vote they carry is durable (election
  safety: a crash before the save forgets a vote already given, and the node
  votes again in that term).
- ``read_before_commit_in_term``: a new leader's read index is its commit index
  before an entry of its term is committed (linearizable reads: a read misses
  what the previous leader acknowledged).
- ``lease_after_timeout_now``: a leader that sent timeout-now in its term serves
  reads on its lease again once the transfer ended (linearizable reads: the target,
  elected by a late timeout-now with votes that ignore leases, commits writes the old
  leader's reads miss).
- ``lease_ends_on_any_verdict`` (interaction scripts only, see
  :data:`SCRIPT_MUTATIONS`): a follower's leader lease ends when any node is
  declared dead, not only its leader's (it grants a candidate while its leader is
  heard, and that leader's lease reads miss what the new one commits).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

MUTATIONS: tuple[str, ...] = (
    "commit_on_leader_flush",
    "dirty_as_flushed",
    "vote_ignores_log",
    "skip_truncation",
    "accept_stale_replies",
    "ignore_inflight_bound",
    "recovery_pipelines_unmatched",
    "paused_backlog_gap",
    "quiesced_keeps_dead_leader",
    "vote_twice_in_term",
    "send_before_vote_saved",
    "read_before_commit_in_term",
    "lease_after_timeout_now",
)
"""The simulator's targets: ``python -m benchmarks sim --mutations`` plants each one."""

SCRIPT_MUTATIONS: tuple[str, ...] = ("lease_ends_on_any_verdict",)
"""Faults planted only under the interaction scripts (``tests/raft``), which catch each
every time: the simulator cannot reach their precondition. ``lease_ends_on_any_verdict``
needs a follower that declares some node other than its leader's dead while a candidate
it still hears campaigns and its leader still serves lease reads; in the simulator's
3-node groups that candidate is the node declared dead (unheard), and its verdict comes
only after one election timeout of silence, the lease's own length (0 of 16 seeds)."""

ACTIVE: set[str] = set()
"""The mutations planted now (empty in production)."""


def active(name: str) -> bool:
    """True when mutation ``name`` is planted (the core asks this at each planted site)."""
    return name in ACTIVE


@contextlib.contextmanager
def planted(name: str) -> Iterator[None]:
    """Plant mutation ``name`` for the duration of the block (process-wide)."""
    if name not in MUTATIONS + SCRIPT_MUTATIONS:
        known = ", ".join(MUTATIONS + SCRIPT_MUTATIONS)
        raise ValueError(f"unknown mutation {name!r}; one of {known}")
    ACTIVE.add(name)
    try:
        yield
    finally:
        ACTIVE.discard(name)
