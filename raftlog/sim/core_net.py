"""A tiny synchronous harness for the pure core (scenario tests): cores, logs, delivery."""

from __future__ import annotations

import random

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.core import CoreOptions, RaftCore
from raftlog.raft.messages import TimeoutNowRequest, VoteReply, VoteRequest
from raftlog.storage.api import VoteState
from raftlog.storage.batch import RecordBatch
from raftlog.storage.memory import MemoryLog


def placed(base: int, term: int, count: int = 1, payload: bytes = b"x") -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=0).stamped(base, term)


class CoreNet:
    def __init__(self, n: int, priorities: dict[int, int] | None = None) -> None:
        config = Configuration.of(range(1, n + 1), (), priorities)
        self.logs = {i: MemoryLog() for i in range(1, n + 1)}
        self.cores = {
            i: RaftCore(
                1,
                i,
                ConfigurationHistory(config),
                self.logs[i],
                VoteState(),
                -1,
                CoreOptions(election_timeout_ticks=10),
                random.Random(i),
            )
            for i in self.logs
        }
        self.cut: set[int] = set()  # isolated nodes

    def write(self, node: int, *batches: RecordBatch, flush: bool = True) -> None:
        self.logs[node].append(list(batches))
        if flush:
            self.logs[node].flush()

    def deliver(self, rounds: int = 10) -> list[str]:
        """Deliver vote and timeout-now traffic until quiet; a readable trace of it."""
        trace: list[str] = []
        for _ in range(rounds):
            outbox = []
            for i, core in self.cores.items():
                ready = core.take_ready()
                if ready.vote is not None:
                    self.logs[i].save_vote(ready.vote)
                outbox.extend((i, t, m) for t, m in ready.messages)
            if not outbox:
                return trace
            for source, target, msg in outbox:
                if source in self.cut or target in self.cut:
                    trace.append(f"{source}->{target} {_name(msg)} dropped")
                    continue
                if isinstance(msg, VoteRequest):
                    reply = self.cores[target].handle_vote(msg)
                    trace.append(
                        f"{source}->{target} {_name(msg)} term={msg.term}: "
                        f"{'granted' if reply.granted else 'rejected'}"
                    )
                    self.cores[source].handle_vote_reply(reply)
                elif isinstance(msg, TimeoutNowRequest):
                    self.cores[target].handle_timeout_now(msg)
                    trace.append(f"{source}->{target} timeout-now")
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
