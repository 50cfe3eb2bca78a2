"""A partition replica that fails to open is recorded, retried with backoff and never
stops the node's other groups (``Upkeep.reconcile``), on a model node whose host fails
to open a group on demand."""

from __future__ import annotations

import asyncio
import pathlib
import time
import types

from raftlog.controller import PartitionAssignment, TopicAssignment
from raftlog.controller.topic_config import TopicConfig
from raftlog.node.membership import Membership
from raftlog.node.upkeep import Upkeep, open_retry_delay


class _Host:
    """The node's group host as reconciling uses it; opening a group in ``failing`` raises."""

    def __init__(self) -> None:
        self.failing: set[int] = set()
        self.attempts: dict[int, int] = {}

    async def open_partition(
        self,
        topic: str,
        partition: int,
        group_id: int,
        directory: pathlib.Path,
        replicas: list[int],
    ) -> object:
        self.attempts[group_id] = self.attempts.get(group_id, 0) + 1
        if group_id in self.failing:
            raise NotADirectoryError(f"cannot open {topic}/{partition}")
        return types.SimpleNamespace(configure=lambda _c: None, replicas=list(replicas), tm=None)


class _ModelNode:
    """The parts of a node that reconciling uses: a context over ``_Host``, a controller
    state placing each of ``groups`` (group id -> topic) here, and the real Upkeep."""

    def __init__(self, data_dir: pathlib.Path, groups: dict[int, str]) -> None:
        self.groups = groups
        self.host = _Host()
        self.partitions: dict[int, object] = {}
        controller_stm = types.SimpleNamespace(
            nodes={},
            assignments_for=lambda _node: {
                gid: (TopicAssignment(t, 1, [p := PartitionAssignment(0, gid, [1])]), p)
                for gid, t in self.groups.items()
            },
            topic_config=lambda _name: TopicConfig(),
            find_group=lambda gid: None,
        )
        ctx = types.SimpleNamespace(
            node_id=1,
            config=types.SimpleNamespace(peers={}, data_dir=data_dir),
            partitions=self.partitions,
            host=self.host,
            controller_stm=controller_stm,
            owns=lambda _gid: True,
        )
        # reconciling asks no metadata, admin or marker writer (no replica has a tm_stm)
        self.upkeep = Upkeep(ctx, None, Membership(ctx), None, None)  # type: ignore[arg-type]


def test_one_failing_group_is_recorded_and_the_others_open(tmp_path) -> None:
    async def go() -> None:
        node = _ModelNode(tmp_path, {1: "before", 2: "bad", 3: "after"})
        node.host.failing = {2}
        await node.upkeep.reconcile()
        assert sorted(node.partitions) == [1, 3]
        f = node.upkeep.open_failures[2]
        assert (f.topic, f.partition, f.attempts) == ("bad", 0, 1)
        assert "NotADirectoryError: cannot open bad/0" in f.error
        # woken before its backoff (another controller change): not tried again yet
        await node.upkeep.reconcile()
        assert node.host.attempts[2] == 1
        # dropped from the assignment: its failure is forgotten
        node.groups.pop(2)
        await node.upkeep.reconcile()
        assert node.upkeep.open_failures == {}

    asyncio.run(go())


def test_a_failed_group_is_retried_after_its_backoff_and_opens_once_fixed(tmp_path) -> None:
    async def go() -> None:
        node = _ModelNode(tmp_path, {2: "bad"})
        node.host.failing = {2}
        await node.upkeep.reconcile()
        first = node.upkeep.open_failures[2]
        # its retry is due later than the timer set for it (a timer that fires early):
        # the early wake-up must schedule another one, or the group is never retried
        first.retry_at = time.monotonic() + 1.0
        node.upkeep.reconcile_needed.clear()
        await asyncio.wait_for(node.upkeep.reconcile_needed.wait(), 2.0)  # the first timer
        node.upkeep.reconcile_needed.clear()
        await node.upkeep.reconcile()
        assert node.host.attempts[2] == 1  # too early
        await asyncio.wait_for(node.upkeep.reconcile_needed.wait(), 3.0)  # woken again
        node.upkeep.reconcile_needed.clear()
        await node.upkeep.reconcile()
        assert node.host.attempts[2] == 2 and node.upkeep.open_failures[2].attempts == 2
        node.host.failing.clear()  # fixed
        node.upkeep.open_failures[2].retry_at = 0.0
        await node.upkeep.reconcile()
        assert 2 in node.partitions and node.upkeep.open_failures == {}

    asyncio.run(go())


def test_the_backoff_doubles_and_is_bounded() -> None:
    delays = [open_retry_delay(n) for n in range(1, 12)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == 30.0 and delays == sorted(delays)
