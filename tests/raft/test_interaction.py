"""Interaction tests from data files (etcd's ``testdata/*.txt`` style).

Each file under ``tests/raft/testdata/`` is a script of commands against a few
pure cores (:class:`~raftlog.sim.core_net.CoreNet`), each followed by the output
it must print::

    campaign 1 prevote
    ----
    1->2 prevote term=1: granted
    ...

A blank line ends a block; ``#`` starts a comment line. Run with
``RAFTLOG_REWRITE_TESTDATA=1`` to rewrite every expected output from what the
code prints now (then review the diff).

Commands:

- ``nodes N [prio=ID:P,...]``: a fresh group of N voters;
- ``campaign ID prevote|vote [transfer]``: ID starts a round; ``deliver [lockstep]
  [dup]``: deliver vote and timeout-now traffic until quiet (prints it); with
  ``lockstep`` every request of a round is handled before any reply is applied
  (candidates that start together stay in step), with ``dup`` each request is
  delivered twice and both replies applied;
- ``tick ID [N]``: N ticks on ID (prints its state); ``cut ID...``/``heal``;
- ``write ID base=B term=T [count=C] [unflushed]``: place a batch in ID's log;
- ``heartbeat LEADER FOLLOWER``: one heartbeat and its reply (prints both);
- ``seq LEADER FOLLOWER``: draw the next append seq;
- ``reply LEADER FOLLOWER seq=S matched=M flushed=F dirty=D [heartbeat] [fail]``:
  apply a reply as the leader's stage would (prints the follower's progress);
- ``flush ID``: flush ID's log (a leader then recounts its commit index);
- ``append LEADER FOLLOWER prev=P [seq=S]``: the leader's entries after P, as one
  append, checked and applied by the follower (prints the plan and the reply);
- ``progress LEADER``, ``state``: print views;
- ``decode TYPE field=value...``: encode a wire message (defaults for the rest)
  and decode it (prints the value or the codec's error).

Flow control and membership (the core's decisions, carried out by the harness as
the async stages would; ``nodes N inflight=K inflight_bytes=B chunk=C
recovery_inflight=R`` sets the window, the recovery chunk size and recovery's window):

- ``propose LEADER [count=C] [size=S] [flush] [learner=ID|voter=ID|remove=ID]``:
  the core places one batch (a data batch, or that configuration change) and the
  harness appends it; prints the flush asked for, each pipelined append the core
  chose to send, and each follower it moved to probe;
- ``send LEADER FOLLOWER [n=K] [reverse] [drop]``: deliver the queued appends to
  FOLLOWER (the first K; in reverse order; or drop them: a transport error), each
  applied by the follower (flushed when the request asks) and its reply fed back;
- ``send ... seq=S`` delivers only the queued request ``S``; ``send ... hold``
  applies them at the follower but holds the replies back, until ``replies
  LEADER FOLLOWER [reverse]`` feeds them to the leader;
- ``recover LEADER FOLLOWER``: one round of ``recovery``: the chunk the core
  chooses, its append and the reply (or why recovery stops);
- ``chunks LEADER FOLLOWER``: what ``recovery`` sends before it waits for a
  reply: every chunk the core hands out now, each queued (``send`` delivers,
  reorders or drops them like pipelined appends; their outcomes go to the
  core's recovery calls); a progress line shows ``recovery_window=[seq:last
  offset, ...]`` while chunks are in it;
- ``outbox``, ``log ID``: what waits to be sent; a log's batches;
- ``add-node ID``, ``cut-one-way A B`` (A can no longer reach B),
  ``compact ID offset=O`` (prefix-truncate a log below O);
- ``install LEADER FOLLOWER [chunk=B]``: one snapshot install, chunk by chunk, as
  ``recovery`` and the follower's stage carry it out;
- ``transfer LEADER TARGET``: begin a leadership transfer (``deliver`` then carries
  the timeout-now the core decides to send).

Delays and reads:

- ``hold ID``: the network holds back ID's requests to peers not yet delivered (votes,
  timeout-now) until ``release ID`` gives them back to ``deliver``;
- ``read ID [round=N] [quorum]``: ID's read index decision (for the read given round
  N; ``quorum``: a quorum round asked for whatever the lease); ``read-ask ID``: ID
  numbers a read that needs a quorum round (``ReadRequest``) and prints the round.

Quiescence:

- ``heartbeats LEADER``: one heartbeat round (what a ``HeartbeatRound`` step makes, each
  delivered and answered; prints whether it asked to quiesce and whether the
  follower did), then every node's quiescence and tick count;
- ``quiescent``: every node's quiescence and tick count;
- ``node-dead ID NODE``: node liveness on ID declares NODE dead; ``node-alive ID
  NODE``: it hears NODE again. A leader that quiesced without members declared dead
  prints ``quiescent-without-dead``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import typing
from typing import Any

import pytest

import raftlog.rpc.messages as client_messages
import raftlog.rpc.peer  # noqa: F401  (registers raft's messages)
from raftlog.raft import group_snapshot, mutations
from raftlog.raft import messages as raft_messages
from raftlog.raft.configuration import Configuration
from raftlog.raft.core import CoreOptions, Message, RaftCore, reply_in
from raftlog.raft.local_messages import (
    AppendAnswered,
    AppendPersisted,
    Campaign,
    HeartbeatAnswered,
    HeartbeatFrom,
    HeartbeatRound,
    InstallAnswered,
    InstallChunkHeld,
    InstallPersisted,
    LocalFlushed,
    NodeAlive,
    NodeDead,
    Propose,
    ReadRequest,
    RecoveryAnswered,
    RecoveryChunkRead,
    RecoveryLost,
    RecoveryPoll,
    SnapshotChunkRead,
    Tick,
    TransferLeadership,
)
from raftlog.raft.messages import (
    APPEND_FAILURE,
    APPEND_SUCCESS,
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshotReply,
    InstallSnapshotRequest,
)
from raftlog.raft.progress import ProgressState
from raftlog.rpc import codec
from raftlog.sim.core_net import CoreNet, Outgoing, placed
from raftlog.storage.batch import RecordBatch

TESTDATA = pathlib.Path(__file__).parent / "testdata"


def _quiescence_word(core: RaftCore) -> str:
    if core.quiescent_without_dead:
        return "quiescent-without-dead"
    return "quiescent" if core.quiescent else "awake"


REWRITE = os.environ.get("RAFTLOG_REWRITE_TESTDATA") == "1"


@dataclasses.dataclass
class Block:
    command: str
    expected: list[str]


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line or line.startswith("#"):
            continue
        if i >= len(lines) or lines[i].rstrip() != "----":
            raise ValueError(f"line {i}: {line!r} must be followed by a '----' line")
        i += 1
        out = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(line, out))
    return blocks


def render(blocks: list[Block], actual: list[list[str]], header: str) -> str:
    parts = [header.rstrip()] if header.strip() else []
    for block, out in zip(blocks, actual, strict=True):
        parts.append("\n".join([block.command, "----", *(out or ["ok"])]))
    return "\n\n".join(parts) + "\n"


def _kv(args: list[str]) -> tuple[dict[str, str], set[str]]:
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    return kv, {a for a in args if "=" not in a}


class Interpreter:
    def __init__(self) -> None:
        self.net = CoreNet(3)
        # Replies a follower made but the network holds back (``send ... hold``).
        self.held: list[tuple[Outgoing, AppendEntriesReply]] = []
        # Requests to peers (votes, timeout-now) the network holds back (``hold``).
        self.held_requests: dict[int, list[tuple[int, object]]] = {}

    def run(self, command: str) -> list[str]:
        name, *args = command.split()
        handler = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {name!r}")
        try:
            return handler(args)
        except Exception as exc:  # a refusal is output too (SafetyViolation, codec errors)
            return [f"error: {type(exc).__name__}: {exc}"]

    def cmd_nodes(self, args: list[str]) -> list[str]:
        kv, _ = _kv(args[1:])
        prio = None
        if "prio" in kv:
            prio = {int(k): int(v) for k, v in (p.split(":") for p in kv["prio"].split(","))}
        options = CoreOptions(election_timeout_ticks=10)
        if "inflight" in kv:
            options.max_in_flight_appends = int(kv["inflight"])
        if "inflight_bytes" in kv:
            options.max_in_flight_bytes = int(kv["inflight_bytes"])
        if "chunk" in kv:
            options.recovery_chunk_bytes = int(kv["chunk"])
        if "recovery_inflight" in kv:
            options.recovery_max_inflight = int(kv["recovery_inflight"])
        if "commit_at_once" in kv:
            options.commit_at_once = kv["commit_at_once"] == "1"
        self.net = CoreNet(int(args[0]), prio, options)
        return self.net.state()

    def cmd_campaign(self, args: list[str]) -> list[str]:
        core = self.net.cores[int(args[0])]
        core.step(Campaign(prevote=args[1] == "prevote", transfer="transfer" in args))
        return [f"n{args[0]} {core.role.value} term={core.term}"]

    def cmd_deliver(self, args: list[str]) -> list[str]:
        return self.net.deliver(lockstep="lockstep" in args, duplicate="dup" in args) or [
            "(nothing)"
        ]

    def cmd_tick(self, args: list[str]) -> list[str]:
        core = self.net.cores[int(args[0])]
        for _ in range(int(args[1]) if len(args) > 1 else 1):
            core.step(Tick())
        state = [line for line in self.net.state() if line.startswith(f"n{args[0]} ")]
        return [f"{state[0]} priority_target={core.priority_target.value}"]

    def cmd_cut(self, args: list[str]) -> list[str]:
        self.net.cut |= {int(a) for a in args}
        return [f"cut {sorted(self.net.cut)}"]

    def cmd_heal(self, args: list[str]) -> list[str]:
        self.net.cut.clear()
        self.net.one_way.clear()
        return ["healed"]

    def cmd_write(self, args: list[str]) -> list[str]:
        kv, flags = _kv(args[1:])
        node = int(args[0])
        batch = placed(int(kv["base"]), int(kv["term"]), int(kv.get("count", "1")))
        self.net.write(node, batch, flush="unflushed" not in flags)
        log = self.net.logs[node]
        return [f"n{node} log dirty={log.dirty_offset} flushed={log.flushed_offset}"]

    def cmd_flush(self, args: list[str]) -> list[str]:
        node = int(args[0])
        self.net.logs[node].flush()
        self.net.cores[node].step(LocalFlushed())
        log = self.net.logs[node]
        return [f"n{node} flushed={log.flushed_offset} commit={self.net.cores[node].commit_index}"]

    def cmd_heartbeat(self, args: list[str]) -> list[str]:
        leader, follower = int(args[0]), int(args[1])
        self.net.cores[leader].step(HeartbeatRound(only=follower))
        ((_, hb),) = self.net.carry_out(leader).heartbeats
        reply = self._heartbeat(leader, follower, hb)
        self.net.process(leader)
        return [
            f"hb seq={hb.seq} prev={hb.prev_log_offset}@{hb.prev_log_term} "
            f"commit={hb.leader_commit}",
            f"reply seq={reply.seq} result={reply.result} matched={reply.last_matched_offset} "
            f"flushed={reply.last_flushed_offset} dirty={reply.last_dirty_offset}",
            *self._after_ready(leader),
            *self._progress(leader, follower),
            f"commit={self.net.cores[leader].commit_index}",
        ]

    def cmd_heartbeats(self, args: list[str]) -> list[str]:
        """One heartbeat round of LEADER, as the node's heartbeat manager sends it: the
        heartbeats the core says are due, each delivered and its reply fed back."""
        leader = int(args[0])
        self.net.cores[leader].step(HeartbeatRound())
        out = []
        for follower, hb in self.net.carry_out(leader).heartbeats:
            if not self.net.reachable(leader, follower):
                out.append(f"hb {leader}->{follower} seq={hb.seq} quiesce={hb.quiesce}: lost")
                continue
            reply = self._heartbeat(leader, follower, hb)
            self.net.process(leader)
            out.append(
                f"hb {leader}->{follower} seq={hb.seq} quiesce={hb.quiesce}: "
                f"quiesced={reply.quiesced}"
            )
        return (out or ["(no heartbeat due)"]) + self._quiescence()

    def _heartbeat(self, leader: int, follower: int, hb: Heartbeat) -> HeartbeatReply:
        """Deliver ``hb`` to the follower and step its reply into the leader."""
        reply = self.net.request(follower, HeartbeatFrom(leader, hb))
        assert isinstance(reply, HeartbeatReply)
        self.net.cores[leader].step(HeartbeatAnswered(follower, hb, reply))
        return reply

    def cmd_quiescent(self, args: list[str]) -> list[str]:
        return self._quiescence()

    def cmd_node_dead(self, args: list[str]) -> list[str]:
        """``node-dead ID NODE``: node liveness on ID declares NODE dead."""
        self.net.cores[int(args[0])].step(NodeDead(int(args[1])))
        return self._quiescence()

    def cmd_node_alive(self, args: list[str]) -> list[str]:
        """``node-alive ID NODE``: node liveness on ID hears NODE again."""
        self.net.cores[int(args[0])].step(NodeAlive(int(args[1])))
        return self._quiescence()

    def _quiescence(self) -> list[str]:
        return [
            " ".join(
                f"n{i}={_quiescence_word(c)}@{c.ticks}" for i, c in sorted(self.net.cores.items())
            )
        ]

    def cmd_seq(self, args: list[str]) -> list[str]:
        return [f"seq={self.net.cores[int(args[0])].next_seq(int(args[1]))}"]

    def cmd_reply(self, args: list[str]) -> list[str]:
        leader, follower = int(args[0]), int(args[1])
        kv, flags = _kv(args[2:])
        core = self.net.cores[leader]
        result = APPEND_FAILURE if "fail" in flags else APPEND_SUCCESS
        fields = (
            int(kv.get("matched", "-1")),
            int(kv.get("flushed", "-1")),
            int(kv.get("dirty", "-1")),
        )
        term = int(kv.get("term", str(core.term)))
        # A reply to a request the script does not name: one of this term, from ``prev``,
        # that holds no place in a window (seq -1).
        if "heartbeat" in flags:
            hb_reply = HeartbeatReply(1, term, result, *fields, seq=int(kv["seq"]))
            hb = Heartbeat(1, core.term, -1, 0, core.commit_index, seq=-1)
            core.step(HeartbeatAnswered(follower, hb, hb_reply))
        else:
            reply = AppendEntriesReply(
                1, follower, leader, term, result, *fields, seq=int(kv["seq"])
            )
            req = AppendEntriesRequest(
                1, leader, follower, core.term, int(kv.get("prev", "-1")), 0,
                core.commit_index, False, [], seq=-1,
            )  # fmt: skip
            core.step(RecoveryAnswered(follower, req, reply))
        return [*self._progress(leader, follower), f"commit={core.commit_index}"]

    def cmd_append(self, args: list[str]) -> list[str]:
        leader, follower = int(args[0]), int(args[1])
        kv, _ = _kv(args[2:])
        prev = int(kv["prev"])
        lcore, fcore = self.net.cores[leader], self.net.cores[follower]
        batches = (
            self.net.logs[leader].read(prev + 1, 1 << 20) if prev < lcore.log.dirty_offset else []
        )
        prev_term = lcore.term_at(prev)
        req = AppendEntriesRequest(
            1, leader, follower, lcore.term, prev, prev_term or 0, lcore.commit_index, True,
            batches, seq=int(kv.get("seq", str(lcore.next_seq(follower)))),
        )  # fmt: skip
        ready = self.net.step(follower, req)
        if ready.replies:
            refusal = reply_in(ready)
            assert isinstance(refusal, AppendEntriesReply)
            return [f"refused: result={refusal.result} dirty={refusal.last_dirty_offset}"]
        (plan,) = ready.persist
        out = [
            f"plan truncate_at={plan.truncate_at} "
            f"append={[f'{b.base_offset}@{b.term}' for b in plan.batches]}"
        ]
        self.net.logs[follower].flush()
        reply = reply_in(self.net.step(follower, AppendPersisted(req)))
        assert isinstance(reply, AppendEntriesReply)
        out.append(
            f"reply seq={reply.seq} matched={reply.last_matched_offset} "
            f"flushed={reply.last_flushed_offset} commit={fcore.commit_index}"
        )
        return out

    def cmd_propose(self, args: list[str]) -> list[str]:
        leader = int(args[0])
        kv, flags = _kv(args[1:])
        core = self.net.cores[leader]
        config = core.configs.latest
        if "learner" in kv:
            batch = config.with_learner(int(kv["learner"])).to_batch()
        elif "voter" in kv:
            batch = config.with_voter(int(kv["voter"])).to_batch()
        elif "remove" in kv:
            batch = config.without(int(kv["remove"])).to_batch()
        else:
            size = int(kv.get("size", "1"))
            batch = RecordBatch.create(b"x" * size, int(kv.get("count", "1")), timestamp_ms=0)
        queued = len(self.net.outbox)
        core.step(Propose([batch], flush="flush" in flags))
        placed_batches = self.net.carry_out(leader).append
        out = [
            f"n{leader} placed {b.base_offset}..{b.last_offset}@{b.term} {b.size_bytes}B"
            for b in placed_batches
        ]
        out.append(f"n{leader} {self.net.last_flush.get(leader, 'no flush')}")
        out += [self._describe(o.request) for o in self.net.outbox[queued:]]
        out += self._after_ready(leader)
        return out

    def _process_reply(self, leader: int) -> list[str]:
        """Carry out the leader's ready after a reply: the appends it sends (a paused
        follower's backlog), the recoveries and promotions it starts."""
        queued = len(self.net.outbox)
        self.net.process(leader)
        out = [f"then {self._describe(o.request)}" for o in self.net.outbox[queued:]]
        return out + self._after_ready(leader)

    def _after_ready(self, leader: int) -> list[str]:
        peers = self.net.cores[leader].status().peers
        out = [
            f"recovery of n{n} from {peers[n].next_offset}"
            for n in self.net.recover.get(leader, [])
            if n in peers
        ]
        out += [f"promote n{n}" for n in self.net.promote.get(leader, [])]
        for follower, hb in self.net.heartbeats_now.pop(leader, []):
            told = f"hb now {leader}->{follower} seq={hb.seq} commit={hb.leader_commit}"
            if not self.net.reachable(leader, follower):
                out.append(f"{told}: lost")
                continue
            self._heartbeat(leader, follower, hb)
            out.append(f"{told}: n{follower} commit={self.net.cores[follower].commit_index}")
        return out

    @staticmethod
    def _describe(req: AppendEntriesRequest) -> str:
        batches = ",".join(f"{b.base_offset}..{b.last_offset}" for b in req.batches)
        return (
            f"{req.source_node}->{req.target_node} append seq={req.seq} "
            f"prev={req.prev_log_offset}@{req.prev_log_term} [{batches}] "
            f"commit={req.leader_commit} flush={req.flush}"
        )

    def cmd_outbox(self, args: list[str]) -> list[str]:
        return [self._describe(o.request) for o in self.net.outbox] or ["(empty)"]

    def cmd_send(self, args: list[str]) -> list[str]:
        leader, follower = int(args[0]), int(args[1])
        kv, flags = _kv(args[2:])
        mine = [o for o in self.net.outbox if o.source == leader and o.target == follower]
        if "seq" in kv:
            mine = [o for o in mine if o.request.seq == int(kv["seq"])]
        mine = mine[: int(kv["n"])] if "n" in kv else mine
        for o in mine:
            self.net.outbox.remove(o)
        if "reverse" in flags:
            mine.reverse()
        out = []
        lcore = self.net.cores[leader]
        for o in mine:
            req = o.request
            if "drop" in flags or not self.net.reachable(leader, follower):
                out.append(f"{self._describe(req)}: dropped")
                self._lost(lcore, follower, o)
            else:
                reply = self.net.deliver_append(follower, req)
                out.append(
                    f"{self._describe(req)}: result={reply.result} "
                    f"matched={reply.last_matched_offset} flushed={reply.last_flushed_offset} "
                    f"dirty={reply.last_dirty_offset} seq={reply.seq}"
                )
                if not self.net.reachable(follower, leader):
                    out.append("reply dropped")
                    self._lost(lcore, follower, o)
                elif "hold" in flags:
                    out.append("reply held")
                    self.held.append((o, reply))
                else:
                    lcore.step(_answered(follower, o, reply))
            out += self._process_reply(leader)
        return [*(out or ["(nothing queued)"]), *self._progress(leader, follower),
                f"commit={lcore.commit_index}"]  # fmt: skip

    def cmd_replies(self, args: list[str]) -> list[str]:
        """Feed the held replies to the leader's core, oldest first (``reverse``: newest)."""
        leader, follower = int(args[0]), int(args[1])
        _, flags = _kv(args[2:])
        mine = [(o, r) for o, r in self.held if o.source == leader and o.target == follower]
        self.held = [h for h in self.held if h not in mine]
        if "reverse" in flags:
            mine.reverse()
        lcore = self.net.cores[leader]
        out = []
        for o, reply in mine:
            out.append(f"reply to seq={o.request.seq}: result={reply.result} "
                       f"matched={reply.last_matched_offset} seq={reply.seq}")  # fmt: skip
            lcore.step(_answered(follower, o, reply))
            out += self._process_reply(leader)
        return [*(out or ["(nothing held)"]), *self._progress(leader, follower),
                f"commit={lcore.commit_index}"]  # fmt: skip

    @staticmethod
    def _lost(lcore: RaftCore, follower: int, o: Outgoing) -> None:
        """No reply (a transport error), as the pipeline or ``recovery`` reports it."""
        if o.recovery:
            lcore.step(RecoveryLost(follower, o.request.term, o.request.seq))
        else:
            lcore.step(AppendAnswered(follower, o.request, None))

    def cmd_recover(self, args: list[str]) -> list[str]:
        leader, follower = int(args[0]), int(args[1])
        lcore = self.net.cores[leader]
        chunk = self.net.step(leader, RecoveryPoll(follower, lcore.term)).recovery_read.get(
            follower
        )
        if chunk is None:
            p = lcore.status().peers.get(follower)
            return [
                f"stop: {p.state.value if p else 'no progress'}",
                *self._progress(leader, follower),
            ]
        req = self._chunk_request(leader, follower, chunk.start, chunk.max_bytes)
        if req is None:
            return [f"chunk from {chunk.start}: stop", *self._progress(leader, follower)]
        out = [f"chunk from {chunk.start} max={chunk.max_bytes}B: {self._describe(req)}"]
        if not self.net.reachable(leader, follower):
            return [*out, "dropped", *self._progress(leader, follower)]
        reply = self.net.deliver_append(follower, req)
        out.append(
            f"reply result={reply.result} matched={reply.last_matched_offset} "
            f"flushed={reply.last_flushed_offset} dirty={reply.last_dirty_offset}"
        )
        lcore.step(RecoveryAnswered(follower, req, reply))
        self.net.process(leader)
        return [*out, *self._after_ready(leader), *self._progress(leader, follower),
                f"commit={lcore.commit_index}"]  # fmt: skip

    def cmd_chunks(self, args: list[str]) -> list[str]:
        """Every chunk the core hands out for the follower's recovery before the stage
        would wait for a reply; each is queued, not delivered."""
        leader, follower = int(args[0]), int(args[1])
        lcore = self.net.cores[leader]
        out = []
        for _ in range(100):
            poll = self.net.step(leader, RecoveryPoll(follower, lcore.term))
            chunk = poll.recovery_read.get(follower)
            if chunk is None:
                break
            req = self._chunk_request(leader, follower, chunk.start, chunk.max_bytes)
            if req is None:
                out.append(f"chunk from {chunk.start}: stop")
                break
            self.net.outbox.append(Outgoing(leader, follower, req, recovery=True))
            out.append(f"chunk from {chunk.start}: {self._describe(req)}")
        p = lcore.status().peers.get(follower)
        state = p.state.value if p else "no progress"
        out.append("then wait for a reply" if p and p.recovery_in_flight else f"then stop: {state}")
        return [*out, *self._progress(leader, follower)]

    def _chunk_request(
        self, leader: int, follower: int, start: int, max_bytes: int
    ) -> AppendEntriesRequest | None:
        """Read the chunk the leader's core named and step it in: the append it makes."""
        batches = self.net.logs[leader].read(start, max_bytes)
        term = self.net.cores[leader].term
        ready = self.net.step(leader, RecoveryChunkRead(follower, term, batches))
        sent = next((r for t, r in ready.recovery_send if t == follower), None)
        return sent if isinstance(sent, AppendEntriesRequest) else None

    def cmd_transfer(self, args: list[str]) -> list[str]:
        """The leader begins a transfer to the target (the core decides the rest)."""
        leader, target = int(args[0]), int(args[1])
        core = self.net.cores[leader]
        core.step(TransferLeadership(target))
        return [f"n{leader} transfer_target={core.transfer_target} writes={core.accepting_writes}"]

    def cmd_hold(self, args: list[str]) -> list[str]:
        """``hold ID``: hold back ID's undelivered requests to peers (a slow network)."""
        node = int(args[0])
        held = [(t, m) for _, t, m in self.net.process(node)]
        self.held_requests.setdefault(node, []).extend(held)
        return [f"{node}->{t} {type(m).__name__} held" for t, m in held] or ["(nothing)"]

    def cmd_release(self, args: list[str]) -> list[str]:
        """``release ID``: give ID's held requests back to the network (``deliver``)."""
        node = int(args[0])
        held = self.held_requests.pop(node, [])
        self.net.unsent.setdefault(node, []).extend(held)
        return [f"{node}->{t} {type(m).__name__} released" for t, m in held] or ["(nothing)"]

    def cmd_read(self, args: list[str]) -> list[str]:
        """``read ID [round=N] [quorum]``: ID's read index decision."""
        kv, flags = _kv(args[1:])
        core = self.net.cores[int(args[0])]
        d = core.read_index(int(kv.get("round", "-1")), quorum_round="quorum" in flags)
        if d.ready:
            return [f"n{args[0]} read index={d.index}"]
        confirm = " (needs a round)" if d.confirm else ""
        return [f"n{args[0]} refuses the read{confirm}: it {d.why}"]

    def cmd_read_ask(self, args: list[str]) -> list[str]:
        """``read-ask ID``: ID numbers a read that needs a quorum round."""
        node = int(args[0])
        ready = self.net.step(node, ReadRequest())
        return [f"n{node} read round={ready.read_round}", *self._quiescence()]

    def cmd_install(self, args: list[str]) -> list[str]:
        """One snapshot install round as ``recovery`` and ``follower_install`` do it: the
        snapshot as of the leader's log start minus one (its configuration), in chunks of
        ``chunk=B`` bytes; the follower restarts its log after it."""
        leader, follower = int(args[0]), int(args[1])
        kv, _ = _kv(args[2:])
        lcore = self.net.cores[leader]
        peer = lcore.status().peers.get(follower)
        if peer is None or peer.state is not ProgressState.SNAPSHOT:
            return ["no snapshot wanted", *self._progress(leader, follower)]
        offset = self.net.logs[leader].start_offset - 1
        cfg_offset, cfg = lcore.configs.at(offset)
        data = group_snapshot.join([group_snapshot.config_blob(cfg_offset, cfg)])
        step, position, out = int(kv.get("chunk", len(data))), 0, []
        for _ in range(1000):
            chunk = data[position : position + step]
            read = SnapshotChunkRead(follower, lcore.term, offset, position, len(data), chunk)
            sent = self.net.step(leader, read).recovery_send
            req = next((r for t, r in sent if t == follower), None)
            if not isinstance(req, InstallSnapshotRequest):
                out.append("stop")
                break
            ready = self.net.step(follower, req)
            if ready.install:
                held = position + len(chunk)
                if held < len(data):
                    ready = self.net.step(follower, InstallChunkHeld(req, held))
                else:
                    self.net.install_local(follower, offset, req.last_included_term, data)
                    ready = self.net.step(follower, InstallPersisted(req))
            reply = reply_in(ready)
            assert isinstance(reply, InstallSnapshotReply)
            out.append(
                f"chunk {req.chunk_offset}+{len(req.data)}/{req.total_bytes} as of "
                f"{req.last_included_offset}@{req.last_included_term}: held="
                f"{reply.bytes_received} result={reply.result} dirty={reply.last_dirty_offset}"
            )
            following = self.net.step(leader, InstallAnswered(follower, req, reply)).install_next
            if follower not in following:
                break
            position = following[follower]
        self.net.process(leader)
        return [*out, *self.cmd_log([str(follower)]), *self._progress(leader, follower)]

    def cmd_log(self, args: list[str]) -> list[str]:
        node = int(args[0])
        log = self.net.logs[node]
        batches = log.read(log.start_offset, 1 << 30) if log.dirty_offset >= 0 else []
        entries = " ".join(f"{b.base_offset}..{b.last_offset}@{b.term}" for b in batches)
        return [
            f"n{node} start={log.start_offset} dirty={log.dirty_offset} "
            f"flushed={log.flushed_offset}: {entries or '(empty)'}"
        ]

    def cmd_add_node(self, args: list[str]) -> list[str]:
        self.net.add_node(int(args[0]))
        return [line for line in self.net.state() if line.startswith(f"n{args[0]} ")]

    def cmd_cut_one_way(self, args: list[str]) -> list[str]:
        self.net.one_way.add((int(args[0]), int(args[1])))
        return [f"{args[0]} cannot reach {args[1]}"]

    def cmd_compact(self, args: list[str]) -> list[str]:
        kv, _ = _kv(args[1:])
        node = int(args[0])
        self.net.logs[node].prefix_truncate(int(kv["offset"]))
        return self.cmd_log([args[0]])

    def cmd_config(self, args: list[str]) -> list[str]:
        core = self.net.cores[int(args[0])]
        c: Configuration = core.configs.latest
        return [
            f"n{args[0]} voters={list(c.voters)} learners={list(c.learners)} role={core.role.value}"
        ]

    def cmd_progress(self, args: list[str]) -> list[str]:
        leader = int(args[0])
        return [
            line
            for f in sorted(self.net.cores[leader].status().peers)
            for line in self._progress(leader, f)
        ]

    def _progress(self, leader: int, follower: int) -> list[str]:
        p = self.net.cores[leader].status().peers.get(follower)
        if p is None:
            return [f"n{follower}: no progress on n{leader}"]
        recovering = (
            " recovery_window=[" + ",".join(f"{seq}:{last}" for seq, last in p.recovery_sent) + "]"
            if p.recovery_sent
            else ""
        )
        return [
            f"n{follower}: match={p.match_offset} next={p.next_offset} flushed={p.flushed_offset} "
            f"dirty={p.dirty_offset} durable={p.durable_offset} last_reply_seq={p.last_reply_seq} "
            f"state={p.state.value} inflight={p.in_flight}{recovering}"
        ]

    def cmd_state(self, args: list[str]) -> list[str]:
        return self.net.state()

    def cmd_decode(self, args: list[str]) -> list[str]:
        cls = getattr(raft_messages, args[0], None) or getattr(client_messages, args[0])
        kv, _ = _kv(args[1:])
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if f.name in kv:
                raw = kv[f.name]
                values[f.name] = _value(tp, raw)
            elif f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            else:
                values[f.name] = _value(tp, None)
        msg = cls(**values)
        try:
            decoded = codec.decode(codec.encode(msg))
        except codec.CodecError as exc:
            return [f"refused: {exc}"]
        return [f"ok: {decoded == msg}"]


def _answered(follower: int, o: Outgoing, reply: AppendEntriesReply) -> Message:
    """The leader's message for ``reply`` to a queued append: a recovery chunk's, or a
    pipelined append's."""
    if o.recovery:
        return RecoveryAnswered(follower, o.request, reply)
    return AppendAnswered(follower, o.request, reply)


def _value(tp: Any, raw: str | None) -> Any:
    if tp is int:
        return 0 if raw is None else int(raw)
    if tp is bool:
        return raw == "true"
    if tp is str:
        return raw or "t"
    if tp is bytes:
        return (raw or "x").encode()
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        if item is client_messages.ProduceBatch:
            count = 1 if raw is None else int(raw)
            return [client_messages.ProduceBatch(b"x", count)]
        if item is int:
            return [] if raw is None else [int(x) for x in raw.split(",")]
        return []
    return None


SCRIPTS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script(path: pathlib.Path) -> None:
    text = path.read_text(encoding="utf-8")
    header_lines = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            header_lines.append(line)
        else:
            break
    blocks = parse(text)
    interp = Interpreter()
    actual = [interp.run(b.command) for b in blocks]
    if REWRITE:
        path.write_text(render(blocks, actual, "\n".join(header_lines)), encoding="utf-8")
        return
    for block, out in zip(blocks, actual, strict=True):
        assert (out or ["ok"]) == block.expected, f"{path.name}: {block.command}"


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 30


def test_parse_rejects_a_command_without_separator() -> None:
    with pytest.raises(ValueError, match="must be followed by a '----' line"):
        parse("state\nn1 follower\n")


@pytest.mark.parametrize(
    ("script", "mutation"),
    [
        ("stale_replies_reversed", "accept_stale_replies"),
        ("duplicate_reply", "accept_stale_replies"),
        ("vote_log_freshness", "vote_ignores_log"),
        ("log_repair", "skip_truncation"),
        ("commit_needs_flushed_majority", "commit_on_leader_flush"),
        ("commit_needs_flushed_majority", "dirty_as_flushed"),
        ("inflight_window_full", "ignore_inflight_bound"),
        ("stale_reply_after_probe", "accept_stale_replies"),
        ("recovery_mismatch_walks_back", "skip_truncation"),
        ("flush_coalescing", "commit_on_leader_flush"),
        ("recovery_pipelined", "recovery_pipelines_unmatched"),
        ("inflight_window_full", "paused_backlog_gap"),
        ("quiesce_dead_leader", "quiesced_keeps_dead_leader"),
        ("split_vote", "vote_twice_in_term"),
        ("read_after_transfer_timed_out", "lease_after_timeout_now"),
        ("verdict_campaign_order", "lease_ends_on_any_verdict"),
    ],
)
def test_a_planted_fault_breaks_its_script(script: str, mutation: str) -> None:
    """The scripts can fail: each planted core fault changes some expected output."""
    blocks = parse((TESTDATA / f"{script}.txt").read_text(encoding="utf-8"))
    interp = Interpreter()
    with mutations.planted(mutation):
        actual = [interp.run(b.command) for b in blocks]
    assert any((out or ["ok"]) != b.expected for b, out in zip(blocks, actual, strict=True))
