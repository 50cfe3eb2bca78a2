"""What the parts of a node share. :class:`raftlog.node.process.Node` is made of
``Upkeep``, ``AdminApi``, ``MetadataApi`` and ``DataApi`` over one state; each part
derives from :class:`NodeParts`, which declares that state (made by ``Node.__init__``)
and the methods one part calls on another, so that the contract between them is
written down once and the type checker holds each part to it.

Declarations only: nothing here runs. The methods are declared for the type checker
alone (under ``TYPE_CHECKING``); at run time ``Node``'s own parts provide them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftlog.controller import ControllerStm, PartitionAssignment, TopicAssignment
    from raftlog.controller.commands import Command
    from raftlog.metrics import NodeMetrics
    from raftlog.node.config import NodeConfig
    from raftlog.node.disk_space import DiskSpace
    from raftlog.node.group_host import GroupHost
    from raftlog.node.partition_replica import PartitionReplica
    from raftlog.node.shards import ShardSet
    from raftlog.node.txn_markers import PeerMarkers
    from raftlog.rpc.edge_limits import EdgeGuard
    from raftlog.rpc.messages import NodeInfo, PartitionStatus, TopicConfigs, TopicInfo
    from raftlog.rpc.transport import StreamTransport


class NodeParts:
    """The state and cross-part methods every part of a ``Node`` may use."""

    config: NodeConfig
    node_id: int
    #: on shard 0 of a node of several processes, the others; else None
    shards: ShardSet | None
    transport: StreamTransport
    host: GroupHost
    controller_stm: ControllerStm
    #: the controller group's Consensus (None on shards K > 0, and before start)
    controller: Any
    partitions: dict[int, PartitionReplica]
    disk: DiskSpace
    edge: EdgeGuard
    metrics: NodeMetrics
    txn_markers: PeerMarkers
    _reconcile_needed: asyncio.Event
    _transfer_attempts: dict[int, float]

    if TYPE_CHECKING:
        # Node (process.py)
        def owns(self, group_id: int) -> bool: ...
        def controller_leader(self) -> int: ...

        # MetadataApi (metadata.py)
        def _assignment(
            self, topic: str, partition: int
        ) -> tuple[TopicAssignment, PartitionAssignment]: ...
        def _topic_configs(self, name: str) -> TopicConfigs: ...
        def _topic_info(
            self,
            t: TopicAssignment,
            here: dict[int, PartitionStatus],
            remote: dict[int, PartitionStatus] | None = None,
        ) -> TopicInfo: ...
        async def _topic_info_now(
            self, t: TopicAssignment, *, ask_leaders: bool = False
        ) -> TopicInfo: ...
        async def _statuses_here(self, gids: list[int]) -> dict[int, PartitionStatus]: ...
        async def _remote_statuses(
            self, topics: list[TopicAssignment], here: dict[int, PartitionStatus]
        ) -> dict[int, PartitionStatus]: ...

        # AdminApi (admin.py)
        def _node_infos(self) -> list[NodeInfo]: ...
        def _placeable_nodes(self) -> list[int]: ...
        async def _replicate_controller(self, cmd: Command) -> None: ...

        # Upkeep (upkeep.py)
        def _learn_nodes(self) -> None: ...
