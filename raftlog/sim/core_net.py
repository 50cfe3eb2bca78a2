"""A tiny synchronous harness for the pure core (scenario and interaction tests).

It plays the async layer's part by hand, through the core's one door: every
message goes in by :meth:`~raftlog.raft.core.RaftCore.step`, and the harness
carries out each :class:`~raftlog.raft.core.Ready` (:meth:`CoreNet.carry_out`:
append the leader's placed batches and a follower's planned truncations and
appends, persist the vote, queue the pipelined appends the core chose to send)
and delivers vote and timeout-now traffic. Replies come out of the readies only.
Pipelined appends wait in :attr:`CoreNet.outbox` until a test delivers, reorders
or drops them; nothing is flushed unless a test or a request says so.
"""

from __future__ import annotations

import dataclasses
import random

from raftlog.raft import group_snapshot
from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.core import CoreOptions, Message, RaftCore, Ready, reply_in
from raftlog.raft.local_messages import (
    AppendPersisted,
    ConfigurationChanged,
    HeartbeatAnswered,
    RecoveryAnswered,
)
from raftlog.raft.messages import (
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    TimeoutNowRequest,
    VoteReply,
    VoteRequest,
)
from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.batch import RecordBatch
from raftlog.storage.memory import MemoryLog


def placed(base: int, term: int, count: int = 1, payload: bytes = b"x") -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=0).stamped(base, term)


@dataclasses.dataclass(slots=True)
class Outgoing:
    """An append the leader's core decided to send, not yet delivered: pipelined, or a
    recovery chunk (``recovery``: its outcome is stepped back as ``RecoveryAnswered``,
    or ``RecoveryLost`` when it is dropped)."""

    source: int
    target: int
    request: AppendEntriesRequest
    recovery: bool = False


class CoreNet:
    def __init__(
        self,
        n: int,
        priorities: dict[int, int] | None = None,
        options: CoreOptions | None = None,
    ) -> None:
        self.initial = Configuration.of(range(1, n + 1), (), priorities)
        self.options = options or CoreOptions(election_timeout_ticks=10)
        self.logs: dict[int, MemoryLog] = {}
        self.cores: dict[int, RaftCore] = {}
        for i in range(1, n + 1):
            self.add_node(i)
        self.cut: set[int] = set()  # isolated nodes
        self.one_way: set[tuple[int, int]] = set()  # (source, target): source cannot reach target
        self.outbox: list[Outgoing] = []
        # Per node: the requests to peers (votes, timeout-now) its readies asked to send.
        self.unsent: dict[int, list[tuple[int, object]]] = {}
        # What the last processed ready of each node asked for (flush, recovery, promotion).
        self.last_flush: dict[int, str] = {}
        self.recover: dict[int, list[int]] = {}
        self.promote: dict[int, list[int]] = {}
        # a leader's heartbeats to send at once (commit_at_once), until the caller takes them
        self.heartbeats_now: dict[int, list[tuple[int, Heartbeat]]] = {}

    def add_node(self, node: int) -> None:
        """A fresh replica with the initial configuration (a learner until it is a voter)."""
        self.logs[node] = MemoryLog()
        self.cores[node] = RaftCore(
            1,
            node,
            ConfigurationHistory(self.initial),
            self.logs[node],
            VoteState(),
            -1,
            dataclasses.replace(self.options),
            random.Random(node),
        )

    def write(self, node: int, *batches: RecordBatch, flush: bool = True) -> None:
        self.append_local(node, list(batches))
        if flush:
            self.logs[node].flush()

    def append_local(self, node: int, batches: list[RecordBatch]) -> None:
        """Append to ``node``'s log and let its core see configuration entries (as
        ``Consensus.append_local`` does)."""
        self.logs[node].append(batches)
        core = self.cores[node]
        if core.configs.observe(batches):
            core.step(ConfigurationChanged())

    def truncate_local(self, node: int, offset: int) -> None:
        self.logs[node].truncate(offset)
        core = self.cores[node]
        if core.configs.truncate(offset):
            core.step(ConfigurationChanged())

    def install_local(self, node: int, offset: int, term: int, data: bytes) -> None:
        """Replace ``node``'s log by the snapshot ``data`` as of ``offset`` (as
        ``Consensus.install_local``: the commit context first, then the log restarts
        after it, then the configurations it carries)."""
        log = self.logs[node]
        log.save_commit_context(CommitContext(offset, term, data))
        log.restart_at(offset + 1, term)
        saved = group_snapshot.saved_config(data)
        if saved is None:
            raise ValueError(f"the snapshot at {offset} has no configuration")
        core = self.cores[node]
        core.configs.restart(*saved)
        core.step(ConfigurationChanged())

    def reachable(self, source: int, target: int) -> bool:
        return (
            source not in self.cut
            and target not in self.cut
            and (source, target) not in self.one_way
        )

    def process(self, node: int) -> list[tuple[int, int, object]]:
        """Carry out ``node``'s ready; its requests to peers not yet delivered (this
        ready's and those of readies carried out since), as (source, target, message)."""
        self.carry_out(node)
        unsent, self.unsent[node] = self.unsent.get(node, []), []
        return [(node, t, m) for t, m in unsent]

    def carry_out(self, node: int) -> Ready:
        """Carry out ``node``'s ready as ``Consensus.process_ready`` does (the local log,
        the vote, the flush asked for, the queued appends; its requests wait for
        :meth:`process`); the ready (its replies are the caller's to deliver)."""
        ready = self.cores[node].take_ready()
        if ready.append:
            self.append_local(node, ready.append)
            self.cores[node].advance(ready)
        for plan in ready.persist:
            if plan.truncate_at != -1:
                self.truncate_local(node, plan.truncate_at)
            if plan.batches:
                self.append_local(node, plan.batches)
        if ready.vote is not None:
            self.logs[node].save_vote(ready.vote)
        if ready.append:
            self.last_flush[node] = (
                "flush now" if ready.flush_now else f"flush coalesced bytes={ready.flush_bytes}"
            )
        self.outbox.extend(Outgoing(node, t, req) for t, req in ready.appends)
        self.recover[node] = list(ready.recover)
        self.promote[node] = list(ready.promote)
        self.heartbeats_now.setdefault(node, []).extend(ready.heartbeats_now)
        self.unsent.setdefault(node, []).extend(ready.messages)
        return ready

    def step(self, node: int, message: Message) -> Ready:
        """Step ``message`` into ``node``'s core and carry out the ready."""
        self.cores[node].step(message)
        return self.carry_out(node)

    def decide(self, node: int, message: Message) -> Ready:
        """Step ``message`` into ``node``'s core and take the ready without carrying it
        out (a test of the decision alone: the log stays as it was)."""
        self.cores[node].step(message)
        return self.cores[node].take_ready()

    def answer(
        self,
        leader: int,
        peer: int,
        reply: AppendEntriesReply | HeartbeatReply,
        term: int | None = None,
        prev: int = -1,
    ) -> None:
        """Step into ``leader`` ``peer``'s reply to a request of term ``term`` (None: the
        leader's) whose predecessor was ``prev``, one the harness does not hold (it has
        no place in a window); the ready is left to the caller."""
        core = self.cores[leader]
        term = core.term if term is None else term
        if isinstance(reply, HeartbeatReply):
            hb = Heartbeat(core.group, term, prev, 0, core.commit_index, seq=-1)
            core.step(HeartbeatAnswered(peer, hb, reply))
            return
        req = AppendEntriesRequest(
            core.group, leader, peer, term, prev, 0, core.commit_index, False, [], seq=-1
        )
        core.step(RecoveryAnswered(peer, req, reply))

    def request(self, node: int, message: Message) -> object:
        """Step a peer's request into ``node`` and carry out the ready: the reply in it."""
        return reply_in(self.step(node, message))

    def deliver_append(self, follower: int, req: AppendEntriesRequest) -> AppendEntriesReply:
        """The follower's side of an append, as ``follower_append`` carries it out: step
        it in; a refusal comes at once, else the plan is persisted (flushed when the
        request asks) and :class:`AppendPersisted` makes the reply."""
        ready = self.step(follower, req)
        if not ready.replies:
            if req.flush:
                self.logs[follower].flush()
            ready = self.step(follower, AppendPersisted(req))
        reply = reply_in(ready)
        assert isinstance(reply, AppendEntriesReply)
        return reply

    def deliver(
        self, rounds: int = 10, *, lockstep: bool = False, duplicate: bool = False
    ) -> list[str]:
        """Deliver vote and timeout-now traffic until quiet; a readable trace of it.

        Each reply is applied as soon as its request was handled, unless ``lockstep``:
        then every request of a round is handled before any of its replies is applied
        (the network carries all of a round's requests first), so candidates that start
        together stay in step. ``duplicate`` delivers each request twice and applies both
        replies (a duplicated request, a duplicated grant)."""
        trace: list[str] = []
        for _ in range(rounds):
            outbox: list[tuple[int, int, object]] = []
            for i in self.cores:
                outbox.extend(self.process(i))
            if not outbox:
                return trace
            replies: list[tuple[int, VoteReply]] = []
            for source, target, msg in outbox:
                for copy in range(2 if duplicate else 1):
                    again = " (again)" if copy else ""
                    what = f"{source}->{target} {_name(msg)}{again}"
                    if not self.reachable(source, target):
                        trace.append(f"{what} dropped")
                        continue
                    if isinstance(msg, VoteRequest):
                        reply = self.request(target, msg)
                        assert isinstance(reply, VoteReply)
                        verdict = "granted" if reply.granted else "rejected"
                        if not self.reachable(target, source):
                            trace.append(f"{what} term={msg.term}: {verdict}, reply dropped")
                            continue
                        trace.append(f"{what} term={msg.term}: {verdict}")
                        replies.append((source, reply))
                    elif isinstance(msg, TimeoutNowRequest):
                        # Its reply is not delivered (a lost reply: the core sends again).
                        self.request(target, msg)
                        trace.append(f"{source}->{target} timeout-now{again}")
                    if not lockstep:
                        for node, answer in replies:
                            self.cores[node].step(answer)
                        replies.clear()
            for node, answer in replies:
                self.cores[node].step(answer)
        raise AssertionError("traffic did not quiesce")

    def state(self) -> list[str]:
        return [
            f"n{i} {c.role.value} term={c.term} vote={c.voted_for} leader={c.leader_id} "
            f"commit={c.commit_index}"
            for i, c in sorted(self.cores.items())
        ]


def _name(msg: object) -> str:
    if isinstance(msg, VoteRequest):
        return "prevote" if msg.prevote else "vote"
    if isinstance(msg, VoteReply):
        return "vote-reply"
    return type(msg).__name__
