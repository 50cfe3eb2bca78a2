"""A tiny synchronous harness for the pure core (scenario and interaction tests).

It plays the async layer's part by hand: it carries out each core's
:class:`~raftlog.raft.core.Ready` (persist the vote, append the leader's placed
batches, queue the pipelined appends the core chose to send) and delivers vote
and timeout-now traffic. Pipelined appends wait in :attr:`CoreNet.outbox` until
a test delivers, reorders or drops them; nothing is flushed unless a test says so.
"""

from __future__ import annotations

import dataclasses
import random

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.core import CoreOptions, RaftCore
from raftlog.raft.messages import AppendEntriesRequest, TimeoutNowRequest, VoteReply, VoteRequest
from raftlog.storage.api import VoteState
from raftlog.storage.batch import RecordBatch
from raftlog.storage.memory import MemoryLog


def placed(base: int, term: int, count: int = 1, payload: bytes = b"x") -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=0).stamped(base, term)


@dataclasses.dataclass(slots=True)
class Outgoing:
    """An append the leader's core decided to send, not yet delivered: pipelined, or a
    recovery chunk (``recovery``: its outcome goes to the core's recovery calls)."""

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
        # What the last processed ready of each node asked for (flush, recovery, promotion).
        self.last_flush: dict[int, str] = {}
        self.recover: dict[int, list[int]] = {}
        self.promote: dict[int, list[int]] = {}

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
            core.on_configuration_changed()

    def truncate_local(self, node: int, offset: int) -> None:
        self.logs[node].truncate(offset)
        core = self.cores[node]
        if core.configs.truncate(offset):
            core.on_configuration_changed()

    def reachable(self, source: int, target: int) -> bool:
        return (
            source not in self.cut
            and target not in self.cut
            and (source, target) not in self.one_way
        )

    def process(self, node: int) -> list[tuple[int, int, object]]:
        """Carry out ``node``'s ready: vote, local append, queued appends; its messages."""
        ready = self.cores[node].take_ready()
        if ready.append:
            self.append_local(node, ready.append)
        if ready.vote is not None:
            self.logs[node].save_vote(ready.vote)
        if ready.append:
            self.last_flush[node] = (
                "flush now" if ready.flush_now else f"flush coalesced bytes={ready.flush_bytes}"
            )
        self.outbox.extend(Outgoing(node, t, req) for t, req in ready.appends)
        self.recover[node] = list(ready.recover)
        self.promote[node] = list(ready.promote)
        return [(node, t, m) for t, m in ready.messages]

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
                        reply = self.cores[target].handle_vote(msg)
                        verdict = "granted" if reply.granted else "rejected"
                        if not self.reachable(target, source):
                            trace.append(f"{what} term={msg.term}: {verdict}, reply dropped")
                            continue
                        trace.append(f"{what} term={msg.term}: {verdict}")
                        replies.append((source, reply))
                    elif isinstance(msg, TimeoutNowRequest):
                        self.cores[target].handle_timeout_now(msg)
                        trace.append(f"{source}->{target} timeout-now{again}")
                    if not lockstep:
                        for node, reply in replies:
                            self.cores[node].handle_vote_reply(reply)
                        replies.clear()
            for node, reply in replies:
                self.cores[node].handle_vote_reply(reply)
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
