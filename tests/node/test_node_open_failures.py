"""A partition replica that fails to open is recorded, retried with backoff and never
stops the node's other groups (``Upkeep.reconcile``), on a model node whose host fails
to open a group on demand."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import time
import types

from raftlog.controller import PartitionAssignment, TopicAssignment
from raftlog.controller.topic_config import TopicConfig
from raftlog.node.membership import Membership
from raftlog.node.upkeep import Upkeep, open_retry_delay
from raftlog.producers.producer_table import ProducerTable


class _Replica:
    """A partition replica as reconciling uses it: its replicas, its settings, and its
    producer table (whose open transactions the node follows)."""

    def __init__(self, replicas: list[int]) -> None:
        self.replicas = list(replicas)
        self.tm = None
        self.rm = types.SimpleNamespace(table=ProducerTable())
        self.config: TopicConfig | None = None
        self.configured: list[TopicConfig] = []

    def configure(self, config: TopicConfig) -> None:
        self.config = config
        self.configured.append(config)


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
        return _Replica(replicas)


class _ModelNode:
    """The parts of a node that reconciling uses: a context over ``_Host``, a controller
    state placing each of ``groups`` (group id -> topic) here, and the real Upkeep."""

    def __init__(self, data_dir: pathlib.Path, groups: dict[int, str]) -> None:
        self.groups = groups
        self.host = _Host()
        self.partitions: dict[int, _Replica] = {}
        self.configs: dict[str, TopicConfig] = {}
        controller_stm = types.SimpleNamespace(
            nodes={},
            assignments_for=lambda _node: {
                gid: (TopicAssignment(t, 1, [p := PartitionAssignment(0, gid, [1])]), p)
                for gid, t in self.groups.items()
            },
            # a new object each time, as the controller state resolves it
            topic_config=lambda name: dataclasses.replace(self.configs.get(name, TopicConfig())),
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


def test_a_replica_is_configured_when_it_opens_and_when_its_topic_settings_change(
    tmp_path,
) -> None:
    """Every controller change reconciles; a replica is configured again only when its
    topic's settings changed (not every replica on every change: at 10,000 partitions
    that was 0.27 s of the event loop per topic created)."""

    async def go() -> None:
        node = _ModelNode(tmp_path, {1: "a", 2: "b", 3: "c"})
        await node.upkeep.reconcile()
        assert [len(node.partitions[g].configured) for g in (1, 2, 3)] == [1, 1, 1]
        await node.upkeep.reconcile()  # another controller change: nothing to apply
        assert [len(node.partitions[g].configured) for g in (1, 2, 3)] == [1, 1, 1]
        node.configs["a"] = TopicConfig(segment_bytes=1 << 20)
        await node.upkeep.reconcile()
        assert [len(node.partitions[g].configured) for g in (1, 2, 3)] == [2, 1, 1]
        assert node.partitions[1].config == TopicConfig(segment_bytes=1 << 20)
        assert node.partitions[2].config == TopicConfig()

    asyncio.run(go())


def test_a_large_reconcile_freezes_the_collector_as_it_opens(tmp_path, monkeypatch) -> None:
    """A reconcile that opens thousands of replicas freezes every FREEZE_EVERY of them,
    not only at its end: unfrozen, millions of objects made each full collection stop
    the loop for seconds."""
    from raftlog.node import gc_policy, upkeep

    opened_at_freeze: list[int] = []

    async def go() -> None:
        node = _ModelNode(tmp_path, {g: f"t{g}" for g in range(1, 601)})
        monkeypatch.setattr(
            gc_policy, "replicas_opened", lambda: opened_at_freeze.append(len(node.partitions))
        )
        await node.upkeep.reconcile()
        assert len(node.partitions) == 600

    asyncio.run(go())
    every = upkeep.FREEZE_EVERY
    assert opened_at_freeze == [every, 2 * every, 600], opened_at_freeze
