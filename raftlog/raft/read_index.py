"""The read index: the one decision behind every linearizable read of a group.

etcd's ``ReadIndex``, made by the core (:meth:`RaftCore.read_index`) and waited on by
one awaitable (:meth:`Consensus.read_barrier`); every state machine and handler that
answers from a group's state asks that, and nothing else.

A leader may answer a read once it holds everything acknowledged before the read began:

- it leads, and is not handing its leadership away;
- an entry of its own term is committed. A new leader's commit index may lag what
  its predecessor committed and acknowledged, and it learns that it holds all of it
  only once an entry of its own term commits (Raft, section 8; the leader's no-op).
  Its commit index at that moment is the term's read index, fixed for the term: any
  later commit is of its own entries, which a reader that asks after them finds in
  the log at once;
- no leader of a later term can have committed anything before the read began. Two
  ways to know it:

  - the lease, while it holds: the leader heard from a quorum of voters within the
    last election timeout (the window of its quorum check, which steps it down once
    it fails), and a voter that heard from a leader within the minimum election
    timeout refuses other candidates; so no other leader is elected meanwhile (as
    etcd's lease-based reads assume: ticks of bounded drift);
  - a quorum round (etcd's ReadOnlySafe), once the lease no longer holds: a quorum of
    voters answered, in this leader's term, a heartbeat or append drawn after the
    read was asked (:class:`~raftlog.raft.local_messages.ReadRequest` numbers the
    read and fences it at the seqs drawn so far). A voter that answered in term T
    after the read began had not voted or accepted anything in a later term before
    it began; any quorum that elected or committed in a later term shares a voter
    with that one; so nothing was committed in a later term before the read began.

  The lease stops holding, for the rest of the term, once the leader sent
  timeout-now: the transfer's target campaigns with votes that ignore the voters'
  leases, and the message may reach it at any time, long after the transfer timed
  out and writes resumed. Reads in such a term take a round each
  (``ReadIndex.confirm``); a quiescent leader wakes for it.

A reader then waits until the state machines applied the read index
(``last_applied``), and answers from their state.
"""

from __future__ import annotations

import dataclasses

__all__ = ["ReadIndex", "unready_reason"]


@dataclasses.dataclass(frozen=True, slots=True)
class ReadIndex:
    """The core's answer to "may a read be served here, and from how far?".

    ``index``: the offset the state machines must have applied before the read is
    answered (when ``ready``). ``why``: '' when a read may be served from ``index``; else
    why not (a phrase that follows "node N, leader of term T, "). ``leader``: False when
    this node does not lead (the caller redirects, rather than wait). ``confirm``: the
    read needs a quorum round asked after it (step a ``ReadRequest``, then ask again with
    the round it was given)."""

    index: int
    leader: bool
    why: str = ""
    confirm: bool = False

    @property
    def ready(self) -> bool:
        return self.leader and not self.why


def unready_reason(decision: ReadIndex, last_applied: int) -> str:
    """Why a leader may not answer a read yet ('' once it may): the core's ``decision``,
    then whether the state machines applied (``last_applied``) its read index."""
    if not decision.ready:
        return decision.why
    if last_applied < decision.index:
        return (
            f"its state machines applied the log only to offset {last_applied}, below its "
            f"read index {decision.index} (its commit index when an entry of its term "
            "first committed)"
        )
    return ""
