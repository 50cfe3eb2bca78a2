"""What the leader knows about each follower.

Offsets are record offsets, ``-1`` when nothing is known. The follower
reports ``flushed_offset`` and ``dirty_offset`` in every reply and heartbeat;
``match_offset`` is the last offset verified equal to the leader's log.
``durable_offset = min(flushed, match)`` is what counts toward the commit index:
durable on the follower and equal to the leader's entries.

``last_sent_offset`` is how ``replicate_entries`` and ``recovery`` coordinate:
the pipeline only sends a request whose ``prev_log_offset`` equals it, and only
while the follower is not ``recovering``; otherwise recovery owns the follower.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(slots=True)
class FollowerProgress:
    node: int
    match_offset: int = -1
    next_offset: int = 0
    last_sent_offset: int = -1
    flushed_offset: int = -1
    dirty_offset: int = -1
    in_flight: int = 0
    recovering: bool = False
    # Ticks (leader's clock) of the last reply heard from this follower.
    last_heard_tick: int = 0
    # The seq of the newest reply applied (replies at or below it are stale).
    last_reply_seq: int = -1

    @property
    def durable_offset(self) -> int:
        return min(self.flushed_offset, self.match_offset)

    def reset(self, leader_dirty_offset: int, tick: int) -> None:
        """Optimistic start for a new leader: assume the follower has everything.

        The first append proves it wrong (a mismatch reply) and hands the
        follower to recovery.
        """
        self.match_offset = -1
        self.next_offset = leader_dirty_offset + 1
        self.last_sent_offset = leader_dirty_offset
        self.flushed_offset = -1
        self.dirty_offset = -1
        self.in_flight = 0
        self.recovering = False
        self.last_heard_tick = tick
        self.last_reply_seq = -1
