"""A node's answers to the admin calls that go through the controller, a part of
:class:`raftlog.node.process.Node`: topics, configs, partitions, leadership transfer,
node registration, partition moves and decommissioning."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_fixed,
)

from raftlog.controller import (
    AlterTopicConfigCmd,
    CompleteMoveCmd,
    CreatePartitionsCmd,
    CreateTopicCmd,
    DecommissionNodeCmd,
    DeleteTopicCmd,
    MovePartitionCmd,
    PartitionAssignment,
    PreferReplicaCmd,
    RegisterNodeCmd,
    RemoveNodeCmd,
    TopicAssignment,
    colliding_topic,
    command_batch,
    config_values,
    topic_config,
    validate_topic_name,
)
from raftlog.controller.commands import Command
from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.node.config import (
    DECOMMISSION_CATCH_UP_S,
    DEFAULT_REPLICATION_FACTOR,
    HEARD_AFTER_TICKS,
    LEADERSHIP_TRANSFER_WAIT_S,
    MAX_PARTITIONS,
    MOVE_STEP_INTERVAL_S,
    host_port,
)
from raftlog.node.context import NodeContext
from raftlog.node.internal_topics import refuse_internal, refuse_internal_create
from raftlog.node.membership import Membership
from raftlog.node.metadata import MetadataApi
from raftlog.raft.errors import TransportError
from raftlog.records.topic_schema import schema_from_bytes
from raftlog.rpc.messages import (
    AlterConfigRequest,
    AlterConfigResponse,
    CompleteMoveRequest,
    ConfigEntry,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ErrorCode,
    MovePartitionRequest,
    MovePartitionResponse,
    RegisterNodeRequest,
    RegisterNodeResponse,
    TransferLeadershipRequest,
    TransferLeadershipResponse,
)
from raftlog.rpc.server import RequestError

log = logging.getLogger("raftlog.node")


class AdminApi:
    """Controller calls: each replicates one controller command (on the controller's
    leader) and waits until it is applied. Topics and partitions are looked up and
    described through ``metadata``; the cluster's nodes are ``membership``'s."""

    def __init__(self, ctx: NodeContext, metadata: MetadataApi, membership: Membership) -> None:
        self._ctx = ctx
        self._metadata = metadata
        self._membership = membership

    # ------------------------------------------------------------ controller calls

    def _require_controller_leader(self) -> None:
        if not self._ctx.controller.is_leader:
            leader = self._ctx.controller.leader_id
            raise RequestError(
                ErrorCode.NOT_LEADER,
                f"node {self._ctx.node_id} is not the controller leader (leader: {leader})",
                leader,
                self._ctx.config.peers.get(leader, ""),
            )

    def _controller_moved(self, exc: Any) -> RequestError:
        """NOT_LEADER naming the controller's leader (a NotLeaderError's) for the client."""
        return RequestError(
            ErrorCode.NOT_LEADER,
            str(exc),
            exc.leader_id,
            self._ctx.config.peers.get(exc.leader_id, ""),
        )

    async def replicate_controller(self, cmd: Command) -> None:
        from raftlog.raft.errors import NotLeaderError
        from raftlog.raft.replicate_batcher import Consistency

        try:
            stages = self._ctx.controller.replicate([command_batch(cmd)], Consistency.QUORUM_ACK)
            res = await asyncio.wait_for(stages.finished, 10.0)
        except NotLeaderError as exc:
            raise self._controller_moved(exc) from exc
        except TimeoutError as exc:
            raise RequestError(ErrorCode.TIMEOUT, "the controller did not commit in 10s") from exc
        if not await self._ctx.controller_stm.wait_applied(res.last_offset, 10.0):
            raise RequestError(ErrorCode.TIMEOUT, "the controller did not apply the command in 10s")

    async def create_topic(self, req: CreateTopicRequest) -> CreateTopicResponse:
        refuse_internal_create(
            req.name, req.partitions, bool(req.configs) or req.schema is not None
        )
        try:
            if req.name not in (TRANSACTIONS_TOPIC, CONSUMER_OFFSETS_TOPIC):  # "__" names
                validate_topic_name(req.name)
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        partitions = self._ctx.config.default_partitions if req.partitions == -1 else req.partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: expected 1..{MAX_PARTITIONS} (or -1 for the default), "
                f"got {req.partitions}",
            )
        if req.replication_factor < 1 and req.replication_factor != -1:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replication_factor: expected >= 1 (or -1 for the default), "
                f"got {req.replication_factor}",
            )
        if req.schema is not None:
            try:
                schema_from_bytes(req.schema)
            except ValueError as exc:
                raise RequestError(ErrorCode.INVALID_REQUEST, f"schema: {exc}") from None
        overrides = _config_changes(req.configs)
        self._require_controller_leader()
        existing = self._ctx.controller_stm.topics.get(req.name)
        if existing is None:
            other = colliding_topic(req.name, self._ctx.controller_stm.topics)
            if other is not None:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"invalid topic name {req.name!r}: it collides with the existing topic "
                    f"{other!r} (names differing only in '.' vs '_' are refused, as Kafka "
                    "refuses them)",
                )
            placeable = self._membership.placeable_nodes()
            rf = self._replication_factor(req.replication_factor, len(placeable))
            await self.replicate_controller(
                CreateTopicCmd(
                    req.name,
                    partitions,
                    rf,
                    placeable,
                    req.schema,
                    config_values(overrides),
                )
            )
        elif not req.exist_ok:
            raise RequestError(ErrorCode.TOPIC_EXISTS, f"topic {req.name!r} already exists")
        topic = self._ctx.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.INTERNAL, f"topic {req.name!r} was not created")
        return CreateTopicResponse(await self._metadata.topic_info_now(topic))

    @staticmethod
    def _replication_factor(asked: int, nodes: int) -> int:
        """The replication factor of a new topic: -1 (not given) is the default,
        ``DEFAULT_REPLICATION_FACTOR`` capped at the node count; an explicit one above
        the node count is refused (Kafka's INVALID_REPLICATION_FACTOR), never reduced."""
        if asked == -1:
            return max(1, min(DEFAULT_REPLICATION_FACTOR, nodes))
        if asked > nodes:
            raise RequestError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication_factor (--replication-factor): {asked} is above the "
                f"{nodes} node(s) of the cluster that can hold replicas; expected 1..{nodes}",
            )
        return asked

    async def delete_topic(self, req: DeleteTopicRequest) -> DeleteTopicResponse:
        refuse_internal(req.name, "deleted")
        self._require_controller_leader()
        if req.name not in self._ctx.controller_stm.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        await self.replicate_controller(DeleteTopicCmd(req.name))
        return DeleteTopicResponse(req.name)

    async def alter_config(self, req: AlterConfigRequest) -> AlterConfigResponse:
        """Set and delete config overrides of a topic through the controller's log.

        Unknown keys and bad values are refused by name before anything is
        replicated; the response carries every key's value after the change.
        """
        refuse_internal(req.name, "altered")
        changes = _config_changes(req.set)
        try:
            topic_config.apply_changes(
                self._ctx.controller_stm.topic_overrides(req.name), changes, req.delete
            )
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        self._require_controller_leader()
        if req.name not in self._ctx.controller_stm.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        await self.replicate_controller(
            AlterTopicConfigCmd(req.name, config_values(changes), sorted(set(req.delete)))
        )
        return AlterConfigResponse(self._metadata.topic_configs(req.name))

    async def describe_configs(self, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
        names = req.names or sorted(self._ctx.controller_stm.topics)
        unknown = [n for n in names if n not in self._ctx.controller_stm.topics]
        if unknown:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {unknown[0]!r}")
        return DescribeConfigsResponse([self._metadata.topic_configs(n) for n in names])

    async def transfer_leadership(
        self, req: TransferLeadershipRequest
    ) -> TransferLeadershipResponse:
        """Make ``target_node`` the partition's preferred replica through the controller,
        then wait (bounded) until it leads: the node leading the partition hands the
        leadership over (``Upkeep``'s balance loop), and the balancer keeps it there.

        The choice pins the partition: the leader balancer leaves it alone for
        ``--leader-balance-pin-ms`` (see ``ControllerStm.pinned``). Asked again for the
        node already preferred, the command is replicated again only when that pin has
        expired or was never made (the balancer's or the placement's choice), so the
        user's choice is pinned from now on."""
        self._require_controller_leader()
        topic, part = self._metadata.assignment(req.topic, req.partition)
        where = f"{req.topic}/{req.partition}"
        if req.target_node not in part.replicas:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"target_node: node {req.target_node} is not a replica of {where} "
                f"(replicas: {','.join(map(str, part.replicas))})",
            )
        pinned_at = self._ctx.controller_stm.pinned.get(part.group_id)
        pin_fresh = (
            pinned_at is not None
            and time.time() * 1000 - pinned_at < self._ctx.config.leader_balance_pin_ms
        )
        if part.replicas[0] != req.target_node or not pin_fresh:
            await self.replicate_controller(
                PreferReplicaCmd(req.topic, req.partition, req.target_node)
            )
        deadline = time.monotonic() + LEADERSHIP_TRANSFER_WAIT_S
        leader = -1
        while time.monotonic() < deadline:
            topic, part = self._metadata.assignment(req.topic, req.partition)
            one = dataclasses.replace(topic, partitions=[part])
            leader = (
                (await self._metadata.topic_info_now(one, ask_leaders=True)).partitions[0].leader
            )
            if leader == req.target_node:
                return TransferLeadershipResponse(leader)
            await asyncio.sleep(0.1)
        raise RequestError(
            ErrorCode.TIMEOUT,
            f"{where}: node {req.target_node} did not take the leadership within "
            f"{LEADERSHIP_TRANSFER_WAIT_S:g}s (leader: {leader}); it is the preferred replica, "
            "so the leader moves to it as soon as it has caught up",
        )

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        """Grow a topic to ``partitions`` partitions in all through the controller; the
        nodes open the new groups when they apply it. A smaller count is refused (Kafka's
        rule: partitions are never removed); the current count changes nothing."""
        refuse_internal(req.name, "given partitions")
        self._require_controller_leader()
        topic = self._ctx.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        have = len(topic.partitions)
        if req.partitions < have:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: topic {req.name!r} has {have} partitions and a count can only "
                f"grow; {req.partitions} would remove some (give the new total, >= {have})",
            )
        if req.partitions > MAX_PARTITIONS:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: expected {have}..{MAX_PARTITIONS}, got {req.partitions}",
            )
        if req.partitions > have:
            await self.replicate_controller(
                CreatePartitionsCmd(req.name, req.partitions, self._membership.placeable_nodes())
            )
        topic = self._ctx.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"topic {req.name!r} was deleted")
        return CreatePartitionsResponse(await self._metadata.topic_info_now(topic))

    async def register_node(self, req: RegisterNodeRequest) -> RegisterNodeResponse:
        """A new node joins: its address goes into the controller state (every node
        adds it to its peers), then it joins the controller group as a learner, which
        the controller's leader promotes to a voter once it has caught up. Repeating
        the call for a registered node changes nothing."""
        try:
            host_port(req.address, "address")
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        self._require_controller_leader()
        members = self._ctx.controller.configuration.members
        known = self._ctx.config.peers.get(req.node_id)
        if known is not None and known != req.address and req.node_id in members:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"node_id: node {req.node_id} is already in the cluster at {known}, "
                f"not {req.address}",
            )
        if known != req.address:
            await self.replicate_controller(RegisterNodeCmd(req.node_id, req.address))
            self._membership.learn_nodes()  # the listener does it too: the learner needs it now
        if req.node_id not in self._ctx.controller.configuration.members:
            await self._change_controller_members(req.node_id, add=True)
        return RegisterNodeResponse(self._membership.node_infos())

    async def move_partition(self, req: MovePartitionRequest) -> MovePartitionResponse:
        """Start a move of a partition's replicas through the controller (see
        ``move_loop``), or answer whether the same move is done. Refused by name: an
        empty, repeated or unknown target, another move of the partition in progress.
        A new replica of a partition whose log no longer starts at 0 gets the snapshot
        as of the log start installed first (``recovery``)."""
        topic, part = self._metadata.assignment(req.topic, req.partition)
        where = f"{req.topic}/{req.partition}"
        target = list(req.replicas)
        if not target:
            raise RequestError(ErrorCode.INVALID_REQUEST, "replicas: expected at least one node id")
        repeated = sorted({n for n in target if target.count(n) > 1})
        if repeated:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: node(s) {','.join(map(str, repeated))} listed twice",
            )
        placeable = self._membership.placeable_nodes()
        unknown = [n for n in target if n not in placeable]
        if unknown:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: node(s) {','.join(map(str, unknown))} are not in the cluster "
                f"(nodes: {','.join(map(str, placeable))})",
            )
        self._require_controller_leader()
        pending = self._ctx.controller_stm.moves.get(part.group_id)
        if pending is None and part.replicas == target:
            return MovePartitionResponse(target, True)
        if pending is not None and pending != target:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: {where} is already moving to {','.join(map(str, pending))}; "
                "wait until that move is done",
            )
        if pending is None:
            one = dataclasses.replace(topic, partitions=[part])
            start = (await self._metadata.topic_info_now(one, ask_leaders=True)).partitions[0]
            if start.start_offset < 0:
                raise RequestError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"{where} has no leader to carry out a move"
                )
            await self.replicate_controller(MovePartitionCmd(req.topic, req.partition, target))
        return MovePartitionResponse(target, False)

    async def complete_move(self, req: CompleteMoveRequest) -> MovePartitionResponse:
        """A partition's leader reports its group runs with a move's target: end it."""
        self._require_controller_leader()
        _topic, part = self._metadata.assignment(req.topic, req.partition)
        target = list(req.replicas)
        if self._ctx.controller_stm.moves.get(part.group_id) == target:
            await self.replicate_controller(CompleteMoveCmd(req.topic, req.partition, target))
        _topic, part = self._metadata.assignment(req.topic, req.partition)
        done = part.group_id not in self._ctx.controller_stm.moves and part.replicas == target
        return MovePartitionResponse(target, done)

    async def decommission_node(self, req: DecommissionNodeRequest) -> DecommissionNodeResponse:
        """Drain a node through the controller, then remove it; repeated, it answers how
        far that has got (the CLI polls it). Its partitions are moved (``move_loop``)
        to the node with the fewest replicas that does not hold them, which takes the
        leaving node's place in the replica list (its preference included). When none
        is left, the node leaves the controller group and is recorded as removed."""
        node = req.node_id
        if node not in self._ctx.config.peers:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"node_id: node {node} is not in the cluster "
                f"(nodes: {','.join(str(n.node_id) for n in self._membership.node_infos())})",
            )
        # only the controller's leader answers, also for a removed node: it alone knows
        # whether the node has left the controller group yet
        self._require_controller_leader()
        if node == self._ctx.node_id:
            # the controller's leader leaves last: hand the leadership over, and let the
            # client ask the new leader (NOT_LEADER is retried)
            others = [v for v in self._ctx.controller.configuration.voters if v != node]
            if others:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._ctx.controller.transfer_leadership(others[0]), 5.0)
            raise self._controller_moved(self._ctx.controller.not_leader_error())
        if node not in self._ctx.controller_stm.removed:
            if node not in self._ctx.controller_stm.decommissioning:
                await self.replicate_controller(DecommissionNodeCmd(node))
            remaining = await self._drain(node)
            if remaining:
                return DecommissionNodeResponse(remaining, False)
            # Recorded first, while the node still gets the controller's log: it learns
            # it was removed (its own metadata leaves it out, so a client that still asks
            # it is not told of it); then it leaves the controller group.
            await self.replicate_controller(RemoveNodeCmd(node))
            await self._until_caught_up(node, DECOMMISSION_CATCH_UP_S)
        if node in self._ctx.controller.configuration.members:
            await self._change_controller_members(node, add=False)
        return DecommissionNodeResponse(0, True)

    async def _until_caught_up(self, node: int, timeout_s: float) -> None:
        """Wait (bounded; a node that is down is not waited for longer) until ``node``
        has applied the controller's log up to its commit index: it matched it, then
        answered heartbeats sent after that (which carry the commit index)."""
        matched_at: list[int] = []

        async def behind() -> bool:
            status = self._ctx.controller.status()
            p = status.peers.get(node)
            if p is None:
                return False
            if not matched_at:
                if p.match_offset < self._ctx.controller.commit_index:
                    return True
                matched_at.append(status.ticks)
            return p.last_heard_tick < matched_at[0] + HEARD_AFTER_TICKS

        await AsyncRetrying(
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(0.05),
            retry=retry_if_result(bool),
            retry_error_callback=lambda _state: True,  # not caught up in time: go on
        )(behind)

    async def _drain(self, node: int) -> int:
        """Start a move away from ``node`` of each partition on it that is not moving
        yet; the number of partitions with a replica on it."""
        load: dict[int, int] = dict.fromkeys(self._membership.placeable_nodes(), 0)
        on_node: list[tuple[TopicAssignment, PartitionAssignment]] = []
        for t in self._ctx.controller_stm.topics.values():
            for p in t.partitions:
                for r in p.replicas:
                    if r in load:
                        load[r] += 1
                if node in p.replicas:
                    on_node.append((t, p))
        for t, p in on_node:
            if p.group_id in self._ctx.controller_stm.moves:
                continue  # moving already (this drain's, or an operator's)
            spare = sorted((n for n in load if n not in p.replicas), key=lambda n: (load[n], n))
            if not spare:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"node_id: node {node} cannot leave: {t.name}/{p.partition} already has a "
                    f"replica on every other node ({','.join(map(str, p.replicas))})",
                )
            target = [spare[0] if r == node else r for r in p.replicas]
            load[spare[0]] += 1
            await self.move_partition(MovePartitionRequest(t.name, p.partition, target))
        return len(on_node)

    async def move_loop(self) -> None:
        """Carry out the moves of the partitions this node leads, a step each round
        (``PartitionReplica.move_step``: learners first, promoted once caught up, then
        the old members removed, the leader last). A new leader picks a move up where
        the group's configuration stands. Once the group runs with the target, the
        controller ends the move and the dropped nodes close their replicas."""
        while True:
            await asyncio.sleep(MOVE_STEP_INTERVAL_S)
            for gid, target in list(self._ctx.controller_stm.moves.items()):
                rep = self._ctx.partitions.get(gid)
                if rep is None or not rep.consensus.is_leader:
                    continue
                try:
                    if not await asyncio.wait_for(rep.move_step(list(target)), 30.0):
                        continue
                    await self._complete_move_at_controller(
                        CompleteMoveRequest(rep.topic, rep.partition, list(target))
                    )
                    log.info("%s/%d: moved to %s", rep.topic, rep.partition, target)
                except Exception as exc:  # leadership moved, a timeout: next round
                    log.warning("%s/%d: moving to %s: %r", rep.topic, rep.partition, target, exc)

    async def _complete_move_at_controller(self, req: CompleteMoveRequest) -> None:
        """Tell the controller's leader a move is done, node to node on the peer stream
        (this node itself when it leads; every node in turn when the leader is unknown
        here, as on a shard K > 0: the others refuse it)."""
        leader = self._ctx.controller_leader()
        if leader == self._ctx.node_id:
            await self.complete_move(req)
            return
        targets = [leader] if leader >= 0 else sorted(self._ctx.config.peers)
        errors = []
        for node in targets:
            try:
                await self._ctx.transport.send(node, req)
                return
            except TransportError as exc:
                errors.append(str(exc))
        raise TransportError(f"no controller leader took the move's end: {errors}")

    async def _change_controller_members(self, node: int, *, add: bool) -> None:
        """Add ``node`` to the controller group as a learner, or remove it (one
        configuration change at a time: retried while another, e.g. a promotion, is in
        flight)."""
        from raftlog.raft.errors import ConfigurationChangeError, NotLeaderError

        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_delay(10.0),
                wait=wait_fixed(0.2),
                retry=retry_if_exception_type(ConfigurationChangeError),
                reraise=True,
            ):
                with attempt:
                    if (node in self._ctx.controller.configuration.members) == add:
                        return
                    change = (
                        self._ctx.controller.add_member(node)
                        if add
                        else self._ctx.controller.remove_member(node)
                    )
                    await asyncio.wait_for(change, 10.0)
        except NotLeaderError as exc:
            raise self._controller_moved(exc) from exc
        except ConfigurationChangeError as exc:
            raise RequestError(ErrorCode.TIMEOUT, f"controller member {node}: {exc}") from exc
        except TimeoutError as exc:
            raise RequestError(
                ErrorCode.TIMEOUT,
                f"{'adding' if add else 'removing'} node {node} (controller group) did not "
                "commit in 10s",
            ) from exc


def _config_changes(entries: list[ConfigEntry]) -> dict[str, str]:
    """Config entries of a request as validated overrides; INVALID_REQUEST names a bad one."""
    out: dict[str, str] = {}
    try:
        for e in entries:
            if e.key in out:
                raise ValueError(f"configs: {e.key} is given twice")
            out[e.key] = topic_config.validate_value(e.key, e.value)
    except ValueError as exc:
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
    return out
