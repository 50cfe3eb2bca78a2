"""``NodeClock``: one clock per node that ticks every active group and paces heartbeats.

A node hosting thousands of groups must not run a timer per group: the clock is
one task that, every ``tick_interval_s`` (divided by ``rate``), ticks each
*active* group, and runs the node's heartbeat round (the
:class:`~raftlog.raft.heartbeat_manager.HeartbeatManager`'s, over the same
active groups) every ``heartbeats.interval_s`` of loop time. A group is active
unless its core is quiescent (:attr:`raftlog.raft.core.RaftCore.quiescent`):
the group's driver calls :meth:`set_active` after each ``Ready`` it carries
out, so a tick costs time in proportion to the active groups only, and an
idle node's clock does nothing but the per-peer liveness heartbeats.

``rate`` is the simulator's clock drift (ticks run ``rate`` times as fast) and
its clock pause (0: no tick runs; the ticks missed run all at once when the
rate is set back). Heartbeat rounds follow the loop's time, not ``rate``, as a
separate heartbeat timer did before. Always 1.0 in production.

Contract: a group's ``clock_tick`` runs only while the group is active and
started; one group's tick that raises is reported to that group
(``on_tick_failed``) and the clock goes on with the others.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.raft.stage_context import HeartbeatGroup


class TickingGroup(HeartbeatGroup, Protocol):
    """One group as the node clock sees it."""

    def clock_tick(self) -> None: ...

    def on_tick_failed(self, exc: Exception) -> None: ...


class NodeClock:
    def __init__(self, tick_interval_s: float, heartbeats: HeartbeatManager | None = None) -> None:
        if tick_interval_s <= 0:
            raise ValueError(f"NodeClock tick_interval_s must be > 0, got {tick_interval_s}")
        self.tick_interval_s = tick_interval_s
        self.heartbeats = heartbeats
        if heartbeats is not None:
            heartbeats.driven_by_clock = True
        self.rate = 1.0
        # Insertion-ordered (a dict, not a set): ticks run in a replayable order.
        self._active: dict[TickingGroup, None] = {}
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0  # clock ticks run (each ticks every active group once)

    @property
    def active_groups(self) -> int:
        return len(self._active)

    def active(self) -> list[TickingGroup]:
        """The groups ticked now (a copy), for node loops that need look only at
        groups whose state can change without a message: a quiescent group's can't."""
        return list(self._active)

    def active_group_ids(self) -> set[int]:
        """The group ids of :meth:`active`: what node loops that look only at groups
        that can change without a message join with their own candidates."""
        return {g.group for g in self._active}

    def set_active(self, group: TickingGroup, active: bool) -> None:
        """Tick ``group`` (and heartbeat it, as leader) from the next tick on, or stop."""
        if active:
            self._active[group] = None
        else:
            self._active.pop(group, None)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def kill(self) -> None:
        """Cancel at once (a simulated crash)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        missed = 0
        while True:
            if self.rate <= 0:
                # The simulator's clock pause: no tick runs while it lasts; the ticks it
                # missed all run at once when the clock resumes (the clock jumps).
                await asyncio.sleep(self.tick_interval_s)
                missed += 1
            else:
                await asyncio.sleep(self.tick_interval_s / self.rate)
                for _ in range(missed + 1):
                    self.tick()
                missed = 0
            hb = self.heartbeats
            if hb is not None and loop.time() >= next_round:
                next_round = max(next_round + hb.interval_s, loop.time() - hb.interval_s)
                hb.send_round(list(self._active))

    def tick(self) -> None:
        """Tick every active group once (a group that quiesces in its tick leaves)."""
        self.ticks += 1
        for group in list(self._active):
            if group not in self._active:
                continue  # stopped by an earlier group's tick
            try:
                group.clock_tick()
            except Exception as exc:
                group.on_tick_failed(exc)
