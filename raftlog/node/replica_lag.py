"""Which followers of a partition leader lag: Kafka's ISR rule
(``replica.lag.time.max.ms``), over the leader's own follower progress.

A follower is *caught up* at a sample when its matched offset reaches the leader's
last offset at that sample, or at the previous sample's time when it reaches the last
offset the leader had then (so a follower that keeps pace one sample behind, as a
pipelined follower under steady writes does, is never lagging). A follower *lags* when
it has not been caught up for longer than the limit. When a leadership starts (or the
term changes) every follower starts as caught up, as Kafka's new leader does.

Pure: the caller samples (``raftlog.node.upkeep``) with its clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["FollowerLag", "FollowerLagTracker"]


@dataclasses.dataclass(frozen=True, slots=True)
class FollowerLag:
    """One lagging follower: how far behind the leader's last offset, in records, at the
    last sample, and for how long (ms) it has not been caught up."""

    node: int
    behind_records: int
    not_caught_up_ms: int


class FollowerLagTracker:
    """Per follower, when it was last caught up (see the module doc)."""

    def __init__(self) -> None:
        self._term: int | None = None
        self._caught_up_at: dict[int, float] = {}
        self._behind: dict[int, int] = {}
        self._prev: tuple[int, float] | None = None  # (leader's last offset, when)

    def reset(self) -> None:
        """Not the leader (any more): forget every follower."""
        self._term = None
        self._caught_up_at.clear()
        self._behind.clear()
        self._prev = None

    def observe(
        self, now_s: float, term: int, last_offset: int, matched: Mapping[int, int]
    ) -> None:
        """One sample on the leader at ``now_s`` (monotonic seconds) in ``term``: its
        ``last_offset`` and each follower's matched offset (followers not listed are
        forgotten)."""
        if term != self._term:
            self.reset()
            self._term = term
        for node in [n for n in self._caught_up_at if n not in matched]:
            del self._caught_up_at[node]
            self._behind.pop(node, None)
        for node, match in matched.items():
            at = self._caught_up_at.setdefault(node, now_s)
            if match >= last_offset:
                at = now_s
            elif self._prev is not None and match >= self._prev[0]:
                at = max(at, self._prev[1])
            self._caught_up_at[node] = at
            self._behind[node] = max(0, last_offset - match)
        self._prev = (last_offset, now_s)

    def lagging(self, now_s: float, max_lag_ms: int) -> list[FollowerLag]:
        """The followers not caught up for more than ``max_lag_ms``, by node id."""
        out = []
        for node, at in sorted(self._caught_up_at.items()):
            ms = int((now_s - at) * 1000)
            if ms > max_lag_ms:
                out.append(FollowerLag(node, self._behind.get(node, 0), ms))
        return out
