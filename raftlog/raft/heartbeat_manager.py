"""Node-level heartbeats: one request per peer node carries every group this node leads.

Every ``interval_s`` the manager asks each group it hosts that is a leader for
one :class:`~raftlog.raft.messages.Heartbeat` per follower, groups them by
peer node, and sends one :class:`HeartbeatBatchRequest` per peer (skipping a
peer whose previous batch is still in flight, so a slow peer never piles up
requests). Replies are routed back to their groups, which update the
followers' flushed and dirty offsets and may start recovery.

Node liveness: every round also goes to each peer that a hosted group has as a
member, empty when no group has a heartbeat for it, so that quiescent groups
(which send none) still learn whether the peer's node is up. A peer heard from
(a reply to our batch, or a batch of its own) within ``dead_after_s`` is alive;
past it, the peer is *declared dead* once, and every hosted group is told
(``on_node_dead``: a quiescent one whose leader, or member, is there wakes),
which costs one pass over the groups per death, not per round. Any request from
the peer counts as hearing it (the dispatcher says so), not only heartbeats.

Silence is counted in this node's rounds, not in wall time: a round that comes
late (this node's loop was busy: thousands of groups electing, a burst of
frames) credits the peers' silence with at most two intervals. Counted in wall
time, a loop stalled for ``dead_after_s`` found every peer silent (their
replies unread in its socket buffers) and declared them all dead; every group
they were members of woke, the extra work stalled the loop again, and a
3-node cluster of 3,000 partitions declared a node dead 120 times in 7 minutes
with no node down. As a group's election timer counts ticks, not seconds, a
node too busy to run its rounds does not judge its peers meanwhile.

A silent peer is declared dead only once the link to it failed: its last batch
ended in a TransportError (refused, reset, closed, or no reply within the
transport's timeout) and nothing was heard since. A batch still in flight is no
verdict: the peer's loop may be busy (a fifth of a core, a thousand elections),
and its reply comes late, not never. A killed process breaks the link at once
(its stream closes, a reconnect is refused), so its verdict still comes after
``dead_after_s`` of rounds; a peer that is hung or cut off is declared dead
when the transport gives up on its batch (its timeout) or after
``dead_after_s``, whichever is later. On the 3-node cluster of 3,000
partitions, judged by silence alone, the live nodes declared each other dead
while the failover's elections kept their loops busy for over a second, and
every verdict woke the groups their peer led: more elections, more load.

A peer whose address *refused* a connection (:class:`PeerRefused`: no process
listens there, it was killed or stopped) has its silence counted on the clock
instead, since it was last heard: a late round on this node cannot make a
process that is gone look gone. Counted in rounds, a live node whose loop ran
a thousand elections and answered metadata besides (rounds a second or more
apart, each crediting 0.2 s) declared a killed peer dead 5-10 s after the kill,
while the other live node had done so within 2 s and its candidates' votes were
refused meanwhile on the late node's lease (3,000 partitions, 2026-12-03).
Each verdict is logged with its silence.

With a :class:`~raftlog.raft.node_clock.NodeClock` (``driven_by_clock``), the
clock runs the rounds over its active groups only; alone, the manager runs its
own loop over every registered group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

from raftlog.raft.errors import PeerRefused, TransportError
from raftlog.raft.messages import (
    APPEND_GROUP_UNAVAILABLE,
    GROUP_UNAVAILABLE_TERM,
    Heartbeat,
    HeartbeatBatchReply,
    HeartbeatBatchRequest,
    HeartbeatReply,
)
from raftlog.raft.stage_context import HeartbeatGroup
from raftlog.raft.transport import Transport

log = logging.getLogger(__name__)


class HeartbeatManager:
    def __init__(
        self,
        node_id: int,
        transport: Transport,
        interval_s: float = 0.1,
        dead_after_s: float = 1.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat interval_s must be > 0, got {interval_s}")
        if dead_after_s <= interval_s:
            raise ValueError(
                f"heartbeat dead_after_s must be above interval_s ({interval_s}), "
                f"got {dead_after_s}"
            )
        self.dead_after_s = dead_after_s
        # True when a NodeClock runs the rounds (start() then runs no loop of its own).
        self.driven_by_clock = False
        # Liveness: when each peer was last heard from (loop time), its silence since in
        # this node's rounds (seconds, each round credits at most two intervals), and
        # the peers declared dead.
        self._last_heard: dict[int, float] = {}
        self._silent_s: dict[int, float] = {}
        self._last_round: float | None = None
        self._dead: set[int] = set()
        # Peers whose last batch failed (TransportError) and not heard from since: only
        # those may be declared dead (see the module docstring).
        self._unreachable: set[int] = set()
        # Of those, the peers whose address refused a connection: silence on the clock.
        self._refused: set[int] = set()
        self.nodes_declared_dead = 0
        # Per-group heartbeats sent (the cost quiescence removes), and node-level batches.
        self.group_heartbeats_sent = 0
        self.batches_sent = 0
        self.node_id = node_id
        self.transport = transport
        self.interval_s = interval_s
        self._groups: dict[int, HeartbeatGroup] = {}
        self._in_flight: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._sends: dict[asyncio.Task[None], None] = {}  # ordered: deterministic replay

    def register(self, consensus: HeartbeatGroup) -> None:
        self._groups[consensus.group] = consensus
        self.watch(consensus.peer_nodes())

    def watch(self, nodes: Iterable[int]) -> None:
        """Track the liveness of ``nodes`` (a group's members; this node is skipped).
        A peer starts alive, as if heard now: the node just started or joined."""
        now = None
        for node in nodes:
            if node != self.node_id and node not in self._last_heard:
                if now is None:
                    now = asyncio.get_running_loop().time()
                self._last_heard[node] = now
                self._silent_s[node] = 0.0

    def is_alive(self, node: int) -> bool:
        """False once ``node`` was declared dead, until it is heard from again."""
        return node not in self._dead

    def heard_ago_s(self, node: int) -> float | None:
        """Seconds since ``node`` was last heard from (a batch of its own or a reply to
        ours), on the loop's clock; None for a node not watched. Unlike a group's ticks,
        this goes on while the groups are quiescent."""
        heard = self._last_heard.get(node)
        if heard is None:
            return None
        return asyncio.get_running_loop().time() - heard

    def heard(self, node: int) -> None:
        """``node`` is alive: a reply or a request of its own just arrived from it. One
        declared dead is alive again, and every hosted group is told (a leader that
        quiesced without it wakes to bring it up to date)."""
        if node in self._last_heard or node in self._dead:
            self._last_heard[node] = asyncio.get_running_loop().time()
            self._silent_s[node] = 0.0
            self._unreachable.discard(node)
            self._refused.discard(node)
            if node in self._dead:
                self._dead.discard(node)
                for c in list(self._groups.values()):
                    if c.running:
                        c.on_node_alive(node)

    def _check_liveness(self) -> None:
        now = asyncio.get_running_loop().time()
        last, self._last_round = self._last_round, now
        # A late round credits at most two intervals of silence (see the module docstring).
        credit = 0.0 if last is None else min(now - last, 2 * self.interval_s)
        for node in self._last_heard:
            if node in self._dead:
                continue
            rounds = self._silent_s.get(node, 0.0) + credit
            self._silent_s[node] = rounds
            silent = rounds
            if node in self._refused:
                silent = max(rounds, now - self._last_heard[node])
            if silent <= self.dead_after_s or node not in self._unreachable:
                continue  # heard lately, or its batch is still on its way (a busy peer)
            self._dead.add(node)
            self.nodes_declared_dead += 1
            log.warning(
                "node %s: declared node %s dead: %.1f s of silence (%.1f s of rounds), its link %s",
                self.node_id,
                node,
                now - self._last_heard[node],
                rounds,
                "refused" if node in self._refused else "failed",
            )
            refused = node in self._refused
            for c in list(self._groups.values()):
                if c.running:
                    c.on_node_dead(node, refused)

    def unregister(self, group: int) -> None:
        self._groups.pop(group, None)

    def group(self, group: int) -> HeartbeatGroup | None:
        return self._groups.get(group)

    async def start(self) -> None:
        self._last_round = None
        for node in self._last_heard:  # a restart: nobody was heard while stopped
            self.heard(node)
        if self._task is None and not self.driven_by_clock:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        self._task = None
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sends.clear()
        self._in_flight.clear()
        self._unreachable.clear()
        self._refused.clear()

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

    def send_round(self, groups: Iterable[HeartbeatGroup] | None = None) -> None:
        """Send one heartbeat batch to every watched peer: the heartbeats that the led
        groups among ``groups`` (default: every registered group) have for it, or none
        (liveness alone). Then declare dead the peers not heard from in time."""
        per_peer: dict[int, list[tuple[HeartbeatGroup, Heartbeat]]] = {
            node: [] for node in self._last_heard
        }
        for c in list(self._groups.values()) if groups is None else groups:
            if not (c.running and c.is_leader):
                continue
            for node, hb in c.heartbeats():
                per_peer.setdefault(node, []).append((c, hb))
        self._check_liveness()
        loop = asyncio.get_running_loop()
        for peer, items in sorted(per_peer.items()):
            if peer in self._in_flight:
                continue
            self._in_flight.add(peer)
            self.batches_sent += 1
            self.group_heartbeats_sent += len(items)
            self._spawn(loop, self._send(peer, items))

    def send_now(self, group: HeartbeatGroup, heartbeats: list[tuple[int, Heartbeat]]) -> None:
        """Send ``group``'s ``heartbeats`` at once, a batch per peer, outside the rounds:
        neither counted as a round (liveness) nor held back by a batch in flight to the
        peer (a new commit index that waited for it would wait a round)."""
        loop = asyncio.get_running_loop()
        for peer, hb in heartbeats:
            self.group_heartbeats_sent += 1
            self._spawn(loop, self._send(peer, [(group, hb)], in_round=False))

    def _spawn(self, loop: asyncio.AbstractEventLoop, send: Coroutine[Any, Any, None]) -> None:
        """Run ``send`` as a task kept in ``_sends`` until it is done (``stop`` and
        ``kill`` cancel what is left there)."""
        task = loop.create_task(send)
        self._sends[task] = None
        task.add_done_callback(lambda t: self._sends.pop(t, None))

    async def _send(
        self, peer: int, items: list[tuple[HeartbeatGroup, Heartbeat]], *, in_round: bool = True
    ) -> None:
        req = HeartbeatBatchRequest(self.node_id, peer, [hb for _, hb in items])
        try:
            reply = await self.transport.send(peer, req)
        except TransportError as exc:
            if in_round:  # the round's batch is the liveness verdict's evidence
                self._unreachable.add(peer)
                if isinstance(exc, PeerRefused):
                    self._refused.add(peer)
            return
        finally:
            if in_round:
                self._in_flight.discard(peer)
        if not isinstance(reply, HeartbeatBatchReply) or len(reply.replies) != len(items):
            return
        self.heard(peer)
        for (c, hb), r in zip(items, reply.replies, strict=True):
            if c.running:
                c.on_heartbeat_reply(peer, hb, r)

    async def handle_heartbeats(self, req: HeartbeatBatchRequest) -> HeartbeatBatchReply:
        """Route each group's heartbeat; groups not hosted here answer "unavailable"."""
        self.heard(req.source_node)
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
