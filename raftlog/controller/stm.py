"""The controller state machine applied on every node from group 0's log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from raftlog.controller import topic_config
from raftlog.controller.commands import (
    SNAPSHOT_V2_MAGIC,
    SNAPSHOT_V3_MAGIC,
    SNAPSHOT_V4_MAGIC,
    SNAPSHOT_V5_MAGIC,
    SNAPSHOT_V6_MAGIC,
    AlterTopicConfigCmd,
    BalanceLeaderCmd,
    Command,
    CompleteMoveCmd,
    ControllerSnapshot,
    ControllerSnapshotV2,
    ControllerSnapshotV3,
    ControllerSnapshotV4,
    ControllerSnapshotV5,
    ControllerSnapshotV6,
    CreatePartitionsCmd,
    DecommissionNodeCmd,
    DeleteTopicCmd,
    MovePartitionCmd,
    PartitionAssignment,
    PendingMove,
    PinnedPartition,
    PreferReplicaCmd,
    RegisteredNode,
    RegisterNodeCmd,
    RemoveNodeCmd,
    TopicAssignment,
    TopicOverrides,
    config_values,
    decode_command,
)
from raftlog.controller.placement import place_partitions
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.storage.batch import BatchKind, RecordBatch

log = logging.getLogger(__name__)


class ControllerStm:
    """Topics and their placement, derived deterministically from the log.

    ``apply`` is called in log order with every committed batch of group 0;
    non-CONTROLLER batches (NOOP, configuration) only advance
    ``last_applied``. Listeners run after each change (the node reconciles
    its local partition groups from them). ``next_group_id`` only grows, so a
    group id is never reused, even after a topic is deleted and recreated.

    ``configs`` holds each topic's config overrides (valid ones only: a command
    whose configs do not validate changes nothing, on every replica alike); a
    topic without an entry runs with the defaults.

    ``nodes`` holds the nodes registered after the cluster started (node id ->
    advertised address; ``raftlog local add-node``): every node adds them to its
    peers, so a node restarted with its old ``--peers`` still reaches them.

    ``moves`` holds the partition moves in progress (group id -> target replicas):
    set by a move, ended by its completion (or the topic's deletion).

    ``decommissioning`` are nodes being drained (never placed on; still nodes of the
    cluster), ``removed`` nodes that left it (drained and out of the controller
    group: no longer listed).

    ``pinned`` holds, per group whose preferred replica a user chose
    (``transfer-leadership``: a :class:`PreferReplicaCmd`), when it was chosen (the
    command batch's timestamp, ms since the epoch, the same on every replica): the
    leader balancer leaves such a partition alone for a while. The balancer's own
    :class:`BalanceLeaderCmd` pins nothing and leaves a pin as it is.
    """

    def __init__(self) -> None:
        self.topics: dict[str, TopicAssignment] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.nodes: dict[int, str] = {}
        self.moves: dict[int, list[int]] = {}
        self.decommissioning: set[int] = set()
        self.removed: set[int] = set()
        self.pinned: dict[int, int] = {}
        self.next_group_id = 1
        self.last_applied = -1
        self._listeners: list[Callable[[], None]] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def apply(self, batch: RecordBatch) -> None:
        """Apply one committed batch (idempotent for batches at or below last_applied)."""
        if batch.last_offset <= self.last_applied:
            return
        if batch.kind is BatchKind.CONTROLLER:
            try:
                cmd = decode_command(batch)
            except CodecError as exc:
                # A replicated command is the same on every replica; skipping it
                # everywhere keeps replicas identical.
                log.error("skipping malformed controller command at %d: %s", batch.base_offset, exc)
            else:
                self._apply_command(cmd, batch.timestamp_ms)
        self.last_applied = batch.last_offset
        self._notify()

    def _apply_command(self, cmd: Command, timestamp_ms: int) -> None:
        if isinstance(cmd, DeleteTopicCmd):
            gone = self.topics.pop(cmd.name, None)
            self.configs.pop(cmd.name, None)
            for p in gone.partitions if gone is not None else []:
                self.moves.pop(p.group_id, None)
                self.pinned.pop(p.group_id, None)
            return
        if isinstance(cmd, MovePartitionCmd | CompleteMoveCmd):
            self._apply_move(cmd)
            return
        if isinstance(cmd, DecommissionNodeCmd):
            if cmd.node_id not in self.removed:
                self.decommissioning.add(cmd.node_id)
            return
        if isinstance(cmd, RemoveNodeCmd):
            self.decommissioning.discard(cmd.node_id)
            self.removed.add(cmd.node_id)
            return
        if isinstance(cmd, AlterTopicConfigCmd):
            self._apply_alter(cmd)
            return
        if isinstance(cmd, PreferReplicaCmd | BalanceLeaderCmd):
            group = self._apply_prefer(cmd)
            if group is not None and isinstance(cmd, PreferReplicaCmd):
                self.pinned[group] = timestamp_ms
            return
        if isinstance(cmd, CreatePartitionsCmd):
            self._apply_create_partitions(cmd)
            return
        if isinstance(cmd, RegisterNodeCmd):
            # a later registration of the same id moves it (the node's new address)
            self.nodes[cmd.node_id] = cmd.address
            return
        if cmd.name in self.topics:
            return
        try:
            overrides = topic_config.validate_configs({c.key: c.value for c in cmd.configs})
        except ValueError as exc:
            log.error("skipping create of topic %r: %s", cmd.name, exc)
            return
        try:
            rf = min(cmd.replication_factor, len(set(cmd.nodes)))
            lists = place_partitions(cmd.partitions, rf, cmd.nodes, self.next_group_id - 1)
        except ValueError as exc:
            log.error("skipping create of topic %r: %s", cmd.name, exc)
            return
        parts = []
        for index, replicas in enumerate(lists):
            parts.append(PartitionAssignment(index, self.next_group_id, replicas))
            self.next_group_id += 1
        self.topics[cmd.name] = TopicAssignment(cmd.name, rf, parts, cmd.schema)
        if overrides:
            self.configs[cmd.name] = overrides

    def _apply_alter(self, cmd: AlterTopicConfigCmd) -> None:
        if cmd.name not in self.topics:
            log.error("skipping config change of unknown topic %r", cmd.name)
            return
        try:
            overrides = topic_config.apply_changes(
                self.configs.get(cmd.name, {}),
                {c.key: c.value for c in cmd.set},
                cmd.delete,
            )
        except ValueError as exc:
            log.error("skipping config change of topic %r: %s", cmd.name, exc)
            return
        if overrides:
            self.configs[cmd.name] = overrides
        else:
            self.configs.pop(cmd.name, None)

    def _apply_prefer(self, cmd: PreferReplicaCmd | BalanceLeaderCmd) -> int | None:
        """Put ``cmd.node`` first; the group id, or None when the command is skipped."""
        t = self.topics.get(cmd.topic)
        if t is None or not 0 <= cmd.partition < len(t.partitions):
            log.error("skipping preferred replica of unknown %s/%d", cmd.topic, cmd.partition)
            return None
        p = t.partitions[cmd.partition]
        if cmd.node not in p.replicas:
            log.error(
                "skipping preferred replica %d of %s/%d: not a replica (%s)",
                cmd.node,
                cmd.topic,
                cmd.partition,
                p.replicas,
            )
            return None
        replicas = [cmd.node] + [r for r in p.replicas if r != cmd.node]
        parts = list(t.partitions)
        parts[cmd.partition] = PartitionAssignment(p.partition, p.group_id, replicas)
        self.topics[t.name] = TopicAssignment(t.name, t.replication_factor, parts, t.schema)
        return p.group_id

    def _apply_move(self, cmd: MovePartitionCmd | CompleteMoveCmd) -> None:
        t = self.topics.get(cmd.topic)
        target = list(cmd.replicas)
        if t is None or not 0 <= cmd.partition < len(t.partitions):
            log.error("skipping move of unknown %s/%d", cmd.topic, cmd.partition)
            return
        if not target or len(set(target)) != len(target) or min(target) < 0:
            log.error("skipping move of %s/%d to %s", cmd.topic, cmd.partition, target)
            return
        p = t.partitions[cmd.partition]
        if isinstance(cmd, CompleteMoveCmd):
            if self.moves.get(p.group_id) != target:
                return  # a late or repeated completion: nothing is moving there
            del self.moves[p.group_id]
            replicas = target
        else:
            # every replica that was or will be: the target first (the balancer leads
            # towards it), then those that are to go, which keep theirs until the end
            old = self.moves.get(p.group_id, [])
            keep = [n for n in [*p.replicas, *old] if n not in target]
            replicas = target + list(dict.fromkeys(keep))
            self.moves[p.group_id] = target
        parts = list(t.partitions)
        parts[cmd.partition] = PartitionAssignment(p.partition, p.group_id, replicas)
        self.topics[t.name] = TopicAssignment(t.name, t.replication_factor, parts, t.schema)

    def _apply_create_partitions(self, cmd: CreatePartitionsCmd) -> None:
        t = self.topics.get(cmd.name)
        if t is None:
            log.error("skipping new partitions of unknown topic %r", cmd.name)
            return
        have = len(t.partitions)
        if cmd.partitions <= have:
            # a retried command, or a race with another: never fewer, and nothing twice
            if cmd.partitions < have:
                log.error(
                    "skipping partitions of topic %r: %d requested, it has %d",
                    cmd.name,
                    cmd.partitions,
                    have,
                )
            return
        try:
            rf = min(t.replication_factor, len(set(cmd.nodes)))
            lists = place_partitions(cmd.partitions - have, rf, cmd.nodes, self.next_group_id - 1)
        except ValueError as exc:
            log.error("skipping new partitions of topic %r: %s", cmd.name, exc)
            return
        parts = list(t.partitions)
        for i, replicas in enumerate(lists):
            parts.append(PartitionAssignment(have + i, self.next_group_id, replicas))
            self.next_group_id += 1
        self.topics[t.name] = TopicAssignment(t.name, t.replication_factor, parts, t.schema)

    def topic_overrides(self, name: str) -> dict[str, str]:
        """The config overrides of topic ``name`` (empty: every key at its default)."""
        return dict(self.configs.get(name, {}))

    def topic_config(self, name: str) -> topic_config.TopicConfig:
        """The effective settings of topic ``name`` (the defaults when it has no overrides)."""
        return topic_config.effective(self.configs.get(name, {}))

    def snapshot(self) -> bytes:
        return SNAPSHOT_V6_MAGIC + codec.encode(
            ControllerSnapshotV6(
                self.next_group_id,
                sorted(self.topics.values(), key=_name),
                [
                    TopicOverrides(name, config_values(cfg))
                    for name, cfg in sorted(self.configs.items())
                ],
                [RegisteredNode(n, a) for n, a in sorted(self.nodes.items())],
                [PendingMove(g, list(r)) for g, r in sorted(self.moves.items())],
                sorted(self.decommissioning),
                sorted(self.removed),
                [PinnedPartition(g, at) for g, at in sorted(self.pinned.items())],
            )
        )

    def restore(self, data: bytes) -> None:
        """Restore a snapshot of any form (V1, from before topic configs, has none; V1
        and V2, from before registered nodes, have none)."""
        if not data:
            return
        snap: Any = None
        for magic, form in _SNAPSHOT_FORMS:
            if data.startswith(magic):
                snap = codec.decode(data[len(magic) :], form)
                break
        else:
            old = codec.decode_body(ControllerSnapshot, data)
            snap = ControllerSnapshotV2(old.next_group_id, old.topics, [])
        # what an older form lacks is empty
        configs = {o.name: {c.key: c.value for c in o.configs} for o in snap.configs}
        self.topics = {t.name: t for t in snap.topics}
        self.configs = {n: c for n, c in configs.items() if c and n in self.topics}
        self.next_group_id = snap.next_group_id
        self.nodes = {n.node_id: n.address for n in getattr(snap, "nodes", [])}
        self.moves = {m.group_id: list(m.replicas) for m in getattr(snap, "moves", [])}
        self.decommissioning = set(getattr(snap, "decommissioning", []))
        self.removed = set(getattr(snap, "removed", []))
        self.pinned = {p.group_id: p.at_ms for p in getattr(snap, "pins", [])}
        self._notify()

    def assignments_for(
        self, node_id: int
    ) -> dict[int, tuple[TopicAssignment, PartitionAssignment]]:
        """group id -> (topic, partition) for every partition replicated on ``node_id``."""
        out = {}
        for t in self.topics.values():
            for p in t.partitions:
                if node_id in p.replicas:
                    out[p.group_id] = (t, p)
        return out

    def find_group(self, group_id: int) -> tuple[TopicAssignment, PartitionAssignment] | None:
        for t in self.topics.values():
            for p in t.partitions:
                if p.group_id == group_id:
                    return t, p
        return None

    async def wait_applied(self, offset: int, timeout: float) -> bool:
        """Wait until ``last_applied >= offset``; False on timeout."""
        if self.last_applied >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return False
        finally:
            if (offset, fut) in self._waiters:
                self._waiters.remove((offset, fut))
        return True

    def _notify(self) -> None:
        for fn in self._listeners:
            try:
                fn()
            except Exception:  # a listener bug must not stop the state machine
                log.exception("controller listener failed")
        # apply runs on the event loop thread, so futures can be resolved directly
        for offset, fut in list(self._waiters):
            if offset <= self.last_applied and not fut.done():
                fut.set_result(None)


# Framed snapshot forms, newest first: (magic, message type).
_SNAPSHOT_FORMS: tuple[tuple[bytes, type], ...] = (
    (SNAPSHOT_V6_MAGIC, ControllerSnapshotV6),
    (SNAPSHOT_V5_MAGIC, ControllerSnapshotV5),
    (SNAPSHOT_V4_MAGIC, ControllerSnapshotV4),
    (SNAPSHOT_V3_MAGIC, ControllerSnapshotV3),
    (SNAPSHOT_V2_MAGIC, ControllerSnapshotV2),
)


def _name(t: TopicAssignment) -> str:
    return t.name
