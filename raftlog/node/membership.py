"""The cluster's nodes as one node knows them: the controller state's registrations and
removals over the node's ``--peers``. A part of :class:`raftlog.node.process.Node`."""

from __future__ import annotations

import logging

from raftlog.node.context import NodeContext
from raftlog.rpc.messages import NodeInfo

log = logging.getLogger("raftlog.node")


class Membership:
    """Which nodes clients are told of, which may hold new replicas, and the peers a
    node learns from the controller state."""

    def __init__(self, ctx: NodeContext) -> None:
        self._ctx = ctx

    def node_infos(self) -> list[NodeInfo]:
        """The nodes of the cluster as clients are told them (removed ones left out)."""
        gone = self._ctx.controller_stm.removed
        return [NodeInfo(i, a) for i, a in sorted(self._ctx.config.peers.items()) if i not in gone]

    def placeable_nodes(self) -> list[int]:
        """The nodes new replicas may go to: neither removed nor being drained."""
        stm = self._ctx.controller_stm
        out = set(self._ctx.config.peers) - stm.removed
        return sorted(out - stm.decommissioning)

    def learn_nodes(self) -> None:
        """Add the nodes registered through the controller to this node's peers (also
        when it was started with an older ``--peers``): raft traffic and clients
        (metadata) reach them from now on."""
        ctx = self._ctx
        for node, address in sorted(ctx.controller_stm.nodes.items()):
            if node != ctx.node_id and ctx.config.peers.get(node) != address:
                log.info("node %d joined the cluster at %s", node, address)
                ctx.config.peers[node] = address
                ctx.transport.add_peer(node, address)
