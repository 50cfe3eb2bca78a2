"""One simulated node: a MemoryLog per group it hosts and the real Consensus over it.

``crash(keep_unflushed)`` cancels every task of the node at once and tears
the log's unflushed tail (keeping only ``keep_unflushed`` unflushed batches);
``restart()`` builds a fresh Consensus on the surviving log, as a process
restart would.

Votes are saved as a node saves them (``Consensus(vote_saver=...)``): off the
loop, durable only after a seeded delay of up to ``VOTE_SAVE_MAX_S`` (the shared
sync's latency), so a crash in between loses the vote, and everything the
replica decided under it must not have left (Ready semantics; the mutation
``send_before_vote_saved`` lets it leave, and the checks catch the second vote).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.core import Role, SafetyViolation
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.raft.messages import HeartbeatBatchReply, HeartbeatBatchRequest, VoteReply, VoteRequest
from raftlog.raft.node_clock import NodeClock
from raftlog.sim.network import Endpoint, SimNetwork
from raftlog.storage.api import VoteState
from raftlog.storage.memory import MemoryLog

GROUP = 1
# Up to this long (virtual) between a vote decided and durable: a few fsyncs' worth.
VOTE_SAVE_MAX_S = 0.002


class SimNode:
    def __init__(
        self,
        node_id: int,
        network: SimNetwork,
        configuration: Configuration,
        options: ConsensusOptions,
        heartbeat_interval_s: float,
        seed: int,
    ) -> None:
        self.node_id = node_id
        self.network = network
        self.configuration = configuration
        self.options = options
        self.heartbeat_interval_s = heartbeat_interval_s
        self.seed = seed
        self.log = _WatchedLog(self)
        # on the simulated disk: kept across crashes (saved durably before they count)
        self.snapshots = MemorySnapshots()
        self.compactions = 0
        self.alive = False
        self.incarnation = 0
        self._tasks: dict[asyncio.Task[Any], None] = {}  # ordered: deterministic replay
        # Called with this node whenever its commit index advances (the checker's hook).
        self.on_commit: Callable[[SimNode], None] | None = None
        # Called with (this node, follower, progress) when, as leader, it applied a reply.
        self.on_progress: Callable[[SimNode, int, Any], None] | None = None
        # Called with this node the moment it becomes leader (election safety, exactly).
        self.on_leader: Callable[[SimNode], None] | None = None
        # Called with (this node, the vote) each time it saves its term and vote durably.
        self.on_vote: Callable[[SimNode, VoteState], None] | None = None
        self.consensus: Consensus
        self.heartbeats: HeartbeatManager
        self.clock: NodeClock

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = None
        task.add_done_callback(lambda t: self._tasks.pop(t, None))
        return task

    def _build(self) -> None:
        """A fresh HeartbeatManager and Consensus for this incarnation (not started yet);
        a subclass attaches its state machine here, before the node joins the network."""
        transport = _DurableVoteTransport(self, self.network.transport(self.node_id))
        # Node liveness declares a peer dead after an election timeout without a word.
        dead_after_s = max(
            self.options.election_timeout_ticks * self.options.tick_interval_s,
            2 * self.heartbeat_interval_s,
        )
        self.heartbeats = HeartbeatManager(
            self.node_id, transport, self.heartbeat_interval_s, dead_after_s
        )
        self.clock = NodeClock(self.options.tick_interval_s, self.heartbeats)
        self.consensus = Consensus(
            GROUP,
            self.node_id,
            self.configuration,
            self.log,
            transport,
            self.options,
            seed=self.seed * 1009 + self.node_id * 7 + self.incarnation,
            heartbeats=self.heartbeats,
            clock=self.clock,
            vote_saver=self._vote_saver(),
        )
        self.consensus.snapshot_store = self.snapshots

    def _vote_saver(self) -> Callable[[VoteState], Any]:
        """The node's off-loop vote save: durable (``log.save_vote``, which the checker
        watches) after a seeded delay; a crash first (the task cancelled) loses it."""
        rng = random.Random(self.seed * 7919 + self.node_id * 131 + self.incarnation)
        log = self.log

        async def save(vote: VoteState) -> None:
            await asyncio.sleep(rng.uniform(0.0, VOTE_SAVE_MAX_S))
            log.save_vote(vote)

        return save

    def check_durable_vote(self, message: object) -> None:
        """Ready semantics, on every message this node sends or answers with: its term is
        at most the durably saved one, and a granted vote is the saved vote. A violation
        is kept in the network's ``failure`` (the seed fails on it)."""
        durable = self.log.load_vote()
        for term, granted_to in _message_terms(message):
            if term > durable.term or granted_to not in (None, durable.voted_for):
                exc = SafetyViolation(
                    f"node {self.node_id} sent {type(message).__name__} (term {term}, "
                    f"vote for {granted_to}) before saving it: durable {durable}"
                )
                if self.network.failure is None:
                    self.network.failure = exc
                raise exc

    async def compact(self, before_drop: Callable[[], None] | None = None) -> int | None:
        """Retention, as a node does it: save the commit context, then drop the log up
        to the group's state as of the last applied offset (the commit index without state
        machines), keeping that state as the snapshot a follower behind the new log start
        is sent. Never past the saved commit context (a restart restores from it). Returns
        the new log start, or None when nothing could be dropped. ``before_drop`` runs
        just before, with no await in between (the checker reads what is dropped)."""
        if not self.alive:
            return None
        c = self.consensus
        async with c.flusher.truncation_lock:
            if not (self.alive and c.running):
                return None
            if before_drop is not None:
                before_drop()
            c.save_commit_context()
            offset, data = c.state_snapshot()
            if not (self.log.start_offset <= offset <= self.log.commit_context_offset):
                return None
            self.snapshots.keep(offset, data)
            self.log.prefix_truncate(offset + 1)
        self.compactions += 1
        return self.log.start_offset

    async def start(self) -> None:
        self._build()
        if self.on_commit is not None:
            hook = self.on_commit
            self.consensus.commit_listeners.append(lambda: hook(self))
        if self.on_leader is not None:
            leads = self.on_leader
            self.consensus.leader_listeners.append(lambda: leads(self))
        if self.on_progress is not None:
            seen = self.on_progress
            self.consensus.core.progress_listener = lambda f, p: seen(self, f, p)
        dispatcher = PeerDispatcher(self.node_id, self.heartbeats)

        async def handle(message: object) -> object:
            reply = await dispatcher.handle(message)
            self.check_durable_vote(reply)
            return reply

        self.network.attach(self.node_id, Endpoint(handle, self.spawn))
        await self.consensus.start()
        await self.heartbeats.start()
        self.clock.start()
        self.alive = True

    def crash(self, keep_unflushed: int = 0) -> None:
        if not self.alive:
            return
        self.alive = False
        self.network.detach(self.node_id)
        self.clock.kill()
        self.consensus.kill()
        self.heartbeats.kill()
        for t in list(self._tasks):
            t.cancel()
        self.log.tear_tail(keep_unflushed)
        self.incarnation += 1

    async def restart(self) -> None:
        if not self.alive:
            await self.start()

    async def pause_clock(self, seconds: float) -> None:
        """Stop this node's clock for ``seconds`` (virtual), then let it jump: the ticks it
        missed run at once (a stalled timer thread, a VM pause as the node sees it).
        Messages are still handled meanwhile. A restart gives the node a fresh clock."""
        consensus = self.consensus
        rate, consensus.clock_rate = consensus.clock_rate, 0.0
        try:
            await asyncio.sleep(seconds)
        finally:
            if consensus.clock_rate == 0.0:
                consensus.clock_rate = rate or 1.0

    def time_out_election(self) -> bool:
        """This node's election timer fires now: its clock jumps, the ticks it missed run at
        once (no await between them), up to two election timeouts' worth. Called on
        several nodes in a row, their timers fire at the same instant: candidates compete.
        True when the node campaigned (it may not: not a voter, behind its promise, a
        higher priority to wait for, quiescent)."""
        c = self.consensus
        for _ in range(2 * self.options.election_timeout_ticks + 1):
            if not self.alive or c.role is not Role.FOLLOWER:
                break
            c.clock_tick()
        return self.alive and c.role in (Role.CANDIDATE, Role.LEADER)

    async def stop(self) -> None:
        if self.alive:
            self.alive = False
            self.network.detach(self.node_id)
            await self.clock.stop()
            await self.heartbeats.stop()
            await self.consensus.stop()
            for t in list(self._tasks):
                t.cancel()


def _message_terms(message: object) -> list[tuple[int, int | None]]:
    """(term, the candidate a vote was granted to or None) of each Raft message within
    ``message``; prevote messages carry a term nobody saved (by design) and are left out."""
    if isinstance(message, HeartbeatBatchRequest):
        return [(hb.term, None) for hb in message.heartbeats]
    if isinstance(message, HeartbeatBatchReply):
        return [(r.term, None) for r in message.replies]
    if isinstance(message, (VoteRequest, VoteReply)) and message.prevote:
        return []
    if isinstance(message, VoteReply):
        return [(message.term, message.target_node if message.granted else None)]
    term = getattr(message, "term", None)
    return [] if term is None else [(term, None)]


class _DurableVoteTransport:
    """The node's transport, checking each request against its durable vote first."""

    def __init__(self, node: SimNode, inner: Any) -> None:
        self._node, self._inner = node, inner

    async def send(self, target_node: int, message: object) -> object:
        self._node.check_durable_vote(message)
        return await self._inner.send(target_node, message)

    def send_now(self, target_node: int, message: object) -> Any:
        self._node.check_durable_vote(message)
        return self._inner.send_now(target_node, message)


class _WatchedLog(MemoryLog):
    """The node's simulated disk: a MemoryLog that tells the node's ``on_vote`` hook each
    vote it saves (the checker's view of every vote, not a sample of them)."""

    def __init__(self, node: SimNode) -> None:
        super().__init__()
        self._node = node

    def save_vote(self, vote: VoteState) -> None:
        super().save_vote(vote)
        if self._node.on_vote is not None:
            self._node.on_vote(self._node, vote)


class MemorySnapshots:
    """A simulated node's snapshots as of its log start (a
    :class:`raftlog.raft.group_snapshot.SnapshotStore`); on the simulated disk, so a
    crash keeps them: each is saved before the log below it is dropped."""

    def __init__(self) -> None:
        self._kept: dict[int, bytes] = {}

    def at(self, offset: int) -> bytes | None:
        return self._kept.get(offset)

    def keep(self, offset: int, data: bytes) -> None:
        """The state as of ``offset``, about to become the log start minus one."""
        self._kept = {offset: data}

    def installed(self, offset: int, data: bytes) -> None:
        self._kept = {offset: data}
