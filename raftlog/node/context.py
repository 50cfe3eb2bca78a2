"""What the parts of a node share: :class:`NodeContext`, made once by
:class:`raftlog.node.process.Node` and passed to each of its parts
(:class:`~raftlog.node.membership.Membership`, :class:`~raftlog.node.metadata.MetadataApi`,
:class:`~raftlog.node.data_api.DataApi`, :class:`~raftlog.node.admin.AdminApi`,
:class:`~raftlog.node.upkeep.Upkeep`).

State only, and two questions asked of that state: no part's behaviour lives here. A
part that uses another part's behaviour gets that part passed to its constructor and
calls its public methods, so ``Node.__init__`` shows every dependency."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from raftlog.node.shards import shard_of

if TYPE_CHECKING:
    from raftlog.controller import ControllerStm
    from raftlog.metrics import NodeMetrics
    from raftlog.node.config import NodeConfig
    from raftlog.node.disk_space import DiskSpace
    from raftlog.node.group_host import GroupHost
    from raftlog.node.partition_replica import PartitionReplica
    from raftlog.node.shards import ShardSet
    from raftlog.rpc.edge_limits import EdgeGuard
    from raftlog.rpc.transport import StreamTransport


@dataclasses.dataclass(eq=False)
class NodeContext:
    """One node process's shared state. Every field but ``controller`` is set once (the
    objects themselves change: ``partitions`` is the one dict of open replicas, which
    :class:`~raftlog.node.upkeep.Upkeep` alone fills and empties)."""

    config: NodeConfig
    #: on shard 0 of a node of several processes, the others; else None
    shards: ShardSet | None
    transport: StreamTransport
    host: GroupHost
    controller_stm: ControllerStm
    #: the partition replicas this process hosts, by group id
    partitions: dict[int, PartitionReplica]
    disk: DiskSpace
    edge: EdgeGuard
    metrics: NodeMetrics
    #: the controller group's Consensus: None on shards K > 0, and until ``Node.start``
    controller: Any = None

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def owns(self, group_id: int) -> bool:
        """Whether this process hosts ``group_id`` (the node's only one, or its shard)."""
        return shard_of(group_id, self.config.shards) == self.config.shard_index

    def controller_leader(self) -> int:
        """The controller group's leader as this node knows it; -1 when unknown."""
        c = self.controller
        if c is None:
            return -1
        return self.node_id if c.is_leader else c.leader_id
