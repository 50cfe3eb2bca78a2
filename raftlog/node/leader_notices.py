"""Notices of leaders learned, for the parts of a node that wait for one: a held
metadata answer (:meth:`raftlog.node.metadata.MetadataApi.metadata`) wakes the moment a
replica of this process learns its group's leader, or the controller's topics change,
instead of looking again on a timer.

:class:`LeaderNotices` is fed by every group this process hosts
(``Consensus.known_leader_listeners``, registered by
:class:`~raftlog.node.group_host.GroupHost`) and by the controller state's listener; a
waiter follows only the groups it waits for, so a notice costs one dict lookup when
nobody waits and one set insert per waiter that follows the group otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress


class LeaderWatch:
    """One waiter's view: the groups it follows, those of them whose replica here learned
    a leader since it last looked (:meth:`take_learned`), and whether the controller's
    topics changed meanwhile (:meth:`take_topics_changed`)."""

    def __init__(self, notices: LeaderNotices) -> None:
        self._notices = notices
        self._woken = asyncio.Event()
        self._learned: set[int] = set()
        self._topics_changed = False
        self.groups: set[int] = set()

    def follow(self, groups: Iterable[int]) -> None:
        """Also wake for ``groups`` (a group followed already stays followed)."""
        for g in groups:
            if g not in self.groups:
                self.groups.add(g)
                self._notices.add(g, self)

    def learned(self, group: int) -> None:
        self._learned.add(group)
        self._woken.set()

    def topics_changed(self) -> None:
        self._topics_changed = True
        self._woken.set()

    def take_learned(self) -> set[int]:
        """The followed groups that learned a leader here since the last call."""
        out, self._learned = self._learned, set()
        return out

    def take_topics_changed(self) -> bool:
        """Whether the controller's topics changed since the last call."""
        out, self._topics_changed = self._topics_changed, False
        return out

    async def wait(self, timeout_s: float) -> None:
        """Until a notice came since the last wait (at once if one came meanwhile), or
        ``timeout_s`` passed; never raises on the timeout."""
        if not self._woken.is_set() and timeout_s > 0:
            with suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._woken.wait()
        self._woken.clear()

    def close(self) -> None:
        for g in self.groups:
            self._notices.remove(g, self)
        self.groups.clear()


class LeaderNotices:
    """The node process's register of waiters by group: :meth:`leader_known` (a group's
    replica here learned leader ``leader``) wakes the waiters following the group,
    :meth:`topics_changed` wakes them all."""

    def __init__(self) -> None:
        self._by_group: dict[int, list[LeaderWatch]] = {}
        self._watches: set[LeaderWatch] = set()

    @contextmanager
    def watching(self) -> Iterator[LeaderWatch]:
        """A watch that follows no group yet (:meth:`LeaderWatch.follow`), dropped with
        all it follows on leaving the block."""
        watch = LeaderWatch(self)
        self._watches.add(watch)
        try:
            yield watch
        finally:
            self._watches.discard(watch)
            watch.close()

    def add(self, group: int, watch: LeaderWatch) -> None:
        self._by_group.setdefault(group, []).append(watch)

    def remove(self, group: int, watch: LeaderWatch) -> None:
        watches = self._by_group.get(group)
        if watches is None:
            return
        watches.remove(watch)
        if not watches:
            del self._by_group[group]

    def leader_known(self, group: int, leader: int) -> None:
        """``group``'s replica in this process now knows leader ``leader`` (-1: none)."""
        if leader < 0:
            return
        for watch in self._by_group.get(group, ()):
            watch.learned(group)

    def topics_changed(self) -> None:
        """The controller's topics changed (a listener of its state)."""
        for watch in self._watches:
            watch.topics_changed()

    def waiting(self) -> int:
        """How many groups some waiter follows (0 when nobody waits)."""
        return len(self._by_group)
