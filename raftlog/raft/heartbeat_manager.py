"""Node-level heartbeats: one request per peer node carries every group this node leads.

Every ``interval_s`` the manager asks each group it hosts that is a leader for
one :class:`~raftlog.raft.messages.Heartbeat` per follower, groups them by
peer node, and sends one :class:`HeartbeatBatchRequest` per peer (skipping a
peer whose previous batch is still in flight, so a slow peer never piles up
requests). Replies are routed back to their groups, which update the
followers' flushed and dirty offsets and may start recovery.
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import TransportError
from raftlog.raft.messages import (
    APPEND_GROUP_UNAVAILABLE,
    Heartbeat,
    HeartbeatBatchReply,
    HeartbeatBatchRequest,
    HeartbeatReply,
)
from raftlog.raft.stage_context import HeartbeatGroup
from raftlog.raft.transport import Transport

GROUP_UNAVAILABLE_TERM = -1


class HeartbeatManager:
    def __init__(self, node_id: int, transport: Transport, interval_s: float = 0.1) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat interval_s must be > 0, got {interval_s}")
        self.node_id = node_id
        self.transport = transport
        self.interval_s = interval_s
        self._groups: dict[int, HeartbeatGroup] = {}
        self._in_flight: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._sends: dict[asyncio.Task[None], None] = {}  # ordered: deterministic replay

    def register(self, consensus: HeartbeatGroup) -> None:
        self._groups[consensus.group] = consensus

    def unregister(self, group: int) -> None:
        self._groups.pop(group, None)

    def group(self, group: int) -> HeartbeatGroup | None:
        return self._groups.get(group)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        self._task = None
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sends.clear()
        self._in_flight.clear()

    def kill(self) -> None:
        """Cancel everything at once (a simulated crash)."""
        for t in (self._task, *self._sends):
            if t is not None:
                t.cancel()
        self._task = None
        self._sends.clear()
        self._in_flight.clear()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.send_round()

    def send_round(self) -> None:
        """Send one heartbeat batch to every peer that a led group has as member."""
        per_peer: dict[int, list[tuple[HeartbeatGroup, Heartbeat]]] = {}
        for c in list(self._groups.values()):
            if not (c.running and c.is_leader):
                continue
            for node, hb in c.heartbeats():
                per_peer.setdefault(node, []).append((c, hb))
        loop = asyncio.get_running_loop()
        for peer, items in sorted(per_peer.items()):
            if peer in self._in_flight:
                continue
            self._in_flight.add(peer)
            task = loop.create_task(self._send(peer, items))
            self._sends[task] = None
            task.add_done_callback(lambda t: self._sends.pop(t, None))

    async def _send(self, peer: int, items: list[tuple[HeartbeatGroup, Heartbeat]]) -> None:
        req = HeartbeatBatchRequest(self.node_id, peer, [hb for _, hb in items])
        try:
            reply = await self.transport.send(peer, req)
        except TransportError:
            return
        finally:
            self._in_flight.discard(peer)
        if not isinstance(reply, HeartbeatBatchReply) or len(reply.replies) != len(items):
            return
        for (c, hb), r in zip(items, reply.replies, strict=True):
            if c.running:
                c.on_heartbeat_reply(peer, hb, r)

    async def handle_heartbeats(self, req: HeartbeatBatchRequest) -> HeartbeatBatchReply:
        """Route each group's heartbeat; groups not hosted here answer "unavailable"."""
        replies = []
        for hb in req.heartbeats:
            c = self._groups.get(hb.group)
            if c is None or not c.running:
                replies.append(unavailable_reply(hb))
            else:
                replies.append(c.handle_heartbeat(req.source_node, hb))
        return HeartbeatBatchReply(self.node_id, req.source_node, replies)


def unavailable_reply(hb: Heartbeat) -> HeartbeatReply:
    """The reply to a heartbeat for a group not running here: the leader retries later."""
    return HeartbeatReply(
        hb.group,
        GROUP_UNAVAILABLE_TERM,
        APPEND_GROUP_UNAVAILABLE,
        last_matched_offset=-1,
        last_flushed_offset=-1,
        last_dirty_offset=-1,
        seq=hb.seq,
    )
