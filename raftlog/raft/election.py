"""Election timing and priority-based voting, in ticks (no clock).

Randomized timeouts: a follower waits ``[base, 2 * base)`` ticks without hearing
a leader before it campaigns; the RNG is injected (seeded) so runs replay.

Priority voting as in Redpanda (``consensus::next_target_priority``): a node
only campaigns when its priority is at least the *target* priority, which
starts at the highest voter priority. Each timeout at which the node declines
to campaign decays the target by ``(n - 1) / n`` (n voters), so the
highest-priority live node wins first, and lower ones follow after a few
rounds when it is gone. Hearing a leader restores the target.
"""

from __future__ import annotations

import random

from raftlog.raft.configuration import MIN_PRIORITY, Configuration


class ElectionTimer:
    """Counts ticks since the last leader contact against a randomized timeout."""

    def __init__(self, base_ticks: int, rng: random.Random) -> None:
        if base_ticks < 2:
            raise ValueError(f"election_timeout_ticks must be >= 2, got {base_ticks}")
        self.base_ticks = base_ticks
        self._rng = rng
        self.elapsed = 0
        self.timeout = self._draw()

    def _draw(self) -> int:
        return self.base_ticks + self._rng.randrange(self.base_ticks)

    def reset(self) -> None:
        self.elapsed = 0
        self.timeout = self._draw()

    def expire_after(self, ticks: int) -> None:
        """This timeout only: expire ``ticks`` ticks from now (if sooner than drawn)."""
        self.timeout = min(self.timeout, self.elapsed + max(1, ticks))

    def end_lease(self) -> None:
        """Count the leader as unheard for at least the minimum timeout: the lease it
        held here is over (:attr:`within_lease` is False); the timeout drawn stands."""
        self.elapsed = max(self.elapsed, self.base_ticks)

    def expire_soon(self, ticks: int) -> None:
        """This timeout only: expire ``ticks`` plus a random part of half the minimum
        timeout from now (if sooner than drawn): thousands of groups told at once
        spread their campaigns over that half timeout."""
        self.expire_after(ticks + self._rng.randrange(max(1, self.base_ticks // 2)))

    def give_way(self, timeouts: int = 1) -> None:
        """This timeout only: expire no sooner than ``timeouts`` minimum timeouts plus a
        fresh randomized one from now (another replica campaigns first)."""
        self.timeout = max(self.timeout, self.elapsed + timeouts * self.base_ticks + self._draw())

    def tick(self) -> bool:
        """Advance one tick; True when the timeout has expired."""
        self.elapsed += 1
        return self.elapsed >= self.timeout

    @property
    def within_lease(self) -> bool:
        """A leader was heard within the minimum election timeout."""
        return self.elapsed < self.base_ticks


class PriorityTarget:
    """Redpanda's ``_target_priority``."""

    def __init__(self) -> None:
        self.value = -1  # -1: reset to the configuration's maximum on first use

    def reset(self) -> None:
        self.value = -1

    def may_campaign(self, config: Configuration, node: int, silent_leader: int = -1) -> bool:
        """True when ``node`` may campaign now; otherwise decay the target for next time.

        ``silent_leader`` is the leader this node followed until its timer fired: it is
        the one node known not to be serving, so the first target is the highest
        priority of the *other* voters. Without that, killing the top-priority leader
        cost every survivor one extra election timeout before anyone campaigned.
        Priorities order elections; they never decide safety.
        """
        if self.value < 0:
            others = [v for v in config.voters if v != silent_leader]
            self.value = max((config.priority(v) for v in others), default=MIN_PRIORITY)
        if config.priority(node) >= self.value:
            return True
        n = max(len(config.voters), 1)
        self.value = max((self.value * (n - 1)) // n, MIN_PRIORITY)
        return False
