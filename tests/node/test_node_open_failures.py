"""A partition replica that fails to open is recorded, retried with backoff and never
stops the node's other groups (``Upkeep._reconcile``), on a model node whose opening
fails on demand."""

from __future__ import annotations

import asyncio
import pathlib
import time
import types

from raftlog.controller import PartitionAssignment, TopicAssignment
from raftlog.controller.topic_config import TopicConfig
from raftlog.node.upkeep import Upkeep, _open_retry_delay


class _ModelNode(Upkeep):
    """The parts of a node that reconciling uses; opening a group in ``failing`` raises."""

    def __init__(self, data_dir: pathlib.Path, groups: dict[int, str]) -> None:
        self.node_id = 1
        self.config = types.SimpleNamespace(peers={}, data_dir=data_dir)
        self.partitions: dict[int, object] = {}
        self._open_failures = {}
        self._reconcile_needed = asyncio.Event()
        self._transfer_attempts: dict[int, float] = {}
        self.failing: set[int] = set()
        self.attempts: dict[int, int] = {}
        self.groups = groups
        self.controller_stm = types.SimpleNamespace(
            nodes={},
            assignments_for=lambda _node: {
                gid: (TopicAssignment(t, 1, [p := PartitionAssignment(0, gid, [1])]), p)
                for gid, t in self.groups.items()
            },
            topic_config=lambda _name: TopicConfig(),
            find_group=lambda gid: None,
        )

    def owns(self, group_id: int) -> bool:
        return True

    async def _open_partition(self, topic: TopicAssignment, part: PartitionAssignment) -> None:
        self.attempts[part.group_id] = self.attempts.get(part.group_id, 0) + 1
        if part.group_id in self.failing:
            raise NotADirectoryError(f"cannot open {topic.name}/{part.partition}")
        self.partitions[part.group_id] = types.SimpleNamespace(
            configure=lambda _c: None, replicas=list(part.replicas)
        )


def test_one_failing_group_is_recorded_and_the_others_open(tmp_path) -> None:
    async def go() -> None:
        node = _ModelNode(tmp_path, {1: "before", 2: "bad", 3: "after"})
        node.failing = {2}
        await node._reconcile()
        assert sorted(node.partitions) == [1, 3]
        f = node._open_failures[2]
        assert (f.topic, f.partition, f.attempts) == ("bad", 0, 1)
        assert "NotADirectoryError: cannot open bad/0" in f.error
        # woken before its backoff (another controller change): not tried again yet
        await node._reconcile()
        assert node.attempts[2] == 1
        # dropped from the assignment: its failure is forgotten
        node.groups.pop(2)
        await node._reconcile()
        assert node._open_failures == {}

    asyncio.run(go())


def test_a_failed_group_is_retried_after_its_backoff_and_opens_once_fixed(tmp_path) -> None:
    async def go() -> None:
        node = _ModelNode(tmp_path, {2: "bad"})
        node.failing = {2}
        await node._reconcile()
        first = node._open_failures[2]
        # its retry is due later than the timer set for it (a timer that fires early):
        # the early wake-up must schedule another one, or the group is never retried
        first.retry_at = time.monotonic() + 1.0
        node._reconcile_needed.clear()
        await asyncio.wait_for(node._reconcile_needed.wait(), 2.0)  # the first timer
        node._reconcile_needed.clear()
        await node._reconcile()
        assert node.attempts[2] == 1  # too early
        await asyncio.wait_for(node._reconcile_needed.wait(), 3.0)  # woken again
        node._reconcile_needed.clear()
        await node._reconcile()
        assert node.attempts[2] == 2 and node._open_failures[2].attempts == 2
        node.failing.clear()  # fixed
        node._open_failures[2].retry_at = 0.0
        await node._reconcile()
        assert 2 in node.partitions and node._open_failures == {}

    asyncio.run(go())


def test_the_backoff_doubles_and_is_bounded() -> None:
    delays = [_open_retry_delay(n) for n in range(1, 12)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == 30.0 and delays == sorted(delays)
