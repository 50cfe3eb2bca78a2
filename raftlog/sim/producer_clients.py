"""The clients of the producer simulation: requests through a lossy network, and producers.

A :class:`Client` sends a request from outside the cluster to whoever it
believes leads, after a random network delay (so a producer's pipelined
requests can overtake each other); it runs as a task of the node it reached,
so a crash cancels it. A lost request or reply, a crash and a timeout all look
like an unknown outcome (:class:`Lost`). A :class:`ProducerModel` is one
producer id: idempotent batches driven by a
:class:`~raftlog.producers.sequencer.Sequencer`, or sessions of transactions
that commit, abort or die (see :mod:`raftlog.sim.producers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from raftlog.errors import (
    DuplicateSequenceError,
    FencedError,
    OutOfOrderSequenceError,
    RaftlogError,
)
from raftlog.producers.rm_stm import EndTxnResult, RmStm
from raftlog.producers.sequencer import MAX_IN_FLIGHT, Sequencer, SequencerError
from raftlog.raft.errors import RaftError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.sim.checks import InvariantViolation
from raftlog.sim.producer_nodes import ProducerSimCluster, now_ms
from raftlog.sim.requests import Caller, Lost
from raftlog.storage.batch import RecordBatch

T = TypeVar("T")


class ProducerSim(Protocol):
    """What the clients see of their simulation."""

    seed: int
    cluster: ProducerSimCluster
    # Set once the faults stop: producers finish what they started and stop.
    winding_down: bool

    @property
    def request_timeout_s(self) -> float: ...


class Client:
    """A :class:`~raftlog.sim.requests.Caller` bound to the producer cluster, calling the
    rm_stm of the node it reaches."""

    def __init__(self, sim: ProducerSim, rng: random.Random) -> None:
        self.sim = sim
        self.caller = Caller(rng, sim.request_timeout_s)

    @property
    def failures(self) -> int:
        return self.caller.failures

    async def call(self, fn: Callable[[RmStm], Awaitable[T]]) -> T:
        """Run ``fn(rm)`` on the node believed to lead; raises Lost or what ``fn`` raises."""
        return await self.caller.call(self.sim.cluster, lambda node: fn(node.rm))

    async def retrying(self, fn: Callable[[RmStm], Awaitable[T]], what: str) -> T:
        """``call`` until it succeeds or raises a non-retriable RaftlogError (bounded)."""
        return await self.caller.retrying(self.sim.cluster, lambda node: fn(node.rm), what)


@dataclasses.dataclass(slots=True)
class Txn:
    version: int
    fate: str  # "commit", "abort" or "die"
    tags: list[bytes] = dataclasses.field(default_factory=list)
    outcome: str = "open"  # "committed", "aborted", "died", "unknown" (commit not confirmed)


class Fenced(Exception):
    pass


class ProducerModel:
    """One producer id: sessions of batches driven by a Sequencer (see the module doc)."""

    def __init__(self, sim: ProducerSim, pid: int, transactional: bool) -> None:
        self.sim = sim
        self.pid = pid
        self.transactional = transactional
        self.rng = random.Random(sim.seed * 101 + pid)
        self.client = Client(sim, random.Random(sim.seed * 103 + pid))
        self.tags: list[bytes] = []  # idempotent: every batch, in sequence order
        self.acked = 0  # idempotent: acknowledged batches (a prefix of tags at the end)
        self.txns: list[Txn] = []
        self.last_committed = -1
        self.sends = 0
        self.retries = 0
        self.sessions = 0

    # -- one session ---------------------------------------------------------

    async def _init(self) -> tuple[int, int]:
        result = await self.client.retrying(lambda rm: rm.init_producer(self.pid), "init_producer")
        self.sessions += 1
        version = result.last_committed_version
        # the only commit whose outcome may be unknown is the last transaction's
        pending = self.txns[-1] if self.txns and self.txns[-1].outcome == "unknown" else None
        allowed = {self.last_committed} | ({pending.version} if pending else set())
        if version not in allowed:
            raise InvariantViolation(
                f"producer {self.pid}: init_producer returned last committed version {version}, "
                f"expected one of {sorted(allowed)}"
            )
        if pending is not None:
            pending.outcome = "committed" if version == pending.version else "aborted"
        self.last_committed = version
        return result.epoch, version

    async def _send_all(
        self, seq: Sequencer, payloads: dict[int, bytes], die_after: int | None = None
    ) -> None:
        """Send until every batch added to ``seq`` is acknowledged; raises Fenced.

        ``die_after``: abandon the session (cancel every send) after that many sends.
        """
        running: set[asyncio.Task[None]] = set()
        wake = asyncio.Event()
        fenced: list[BaseException] = []
        state = {"not_before": 0.0, "backoff": 0.0}
        loop = asyncio.get_running_loop()

        def retry_later() -> None:
            self.retries += 1
            seq.max_in_flight = 1
            state["backoff"] = min(0.5, max(0.02, state["backoff"] * 2))
            state["not_before"] = loop.time() + state["backoff"]

        async def attempt(first: int, count: int, send_attempt: int) -> None:
            payload = payloads[first]
            epoch, tx = seq.epoch, self.transactional

            async def produce(rm: RmStm) -> Any:
                batch = RecordBatch.create(
                    payload,
                    count,
                    transactional=tx,
                    producer_id=self.pid,
                    producer_epoch=epoch,
                    first_sequence=first,
                    timestamp_ms=now_ms(),
                )
                return await rm.replicate(batch, Consistency.QUORUM_ACK)

            try:
                await self.client.call(produce)
            except DuplicateSequenceError:
                seq.on_success(first, send_attempt, None)
            except OutOfOrderSequenceError:
                try:
                    seq.on_out_of_order(first, send_attempt)
                except SequencerError as exc:
                    raise InvariantViolation(f"producer {self.pid}: {exc}") from exc
                retry_later()
            except FencedError as exc:
                fenced.append(exc)
            except RaftlogError as exc:
                if not exc.retriable:
                    raise InvariantViolation(
                        f"producer {self.pid}: produce of sequence {first} failed: {exc!r}"
                    ) from exc
                seq.on_retriable(first, send_attempt)
                retry_later()
            except (Lost, RaftError, TimeoutError):
                seq.on_retriable(first, send_attempt)
                retry_later()
            else:
                seq.on_success(first, send_attempt, 0)
                seq.max_in_flight = MAX_IN_FLIGHT
                state["backoff"] = state["not_before"] = 0.0
            finally:
                wake.set()

        errors: list[BaseException] = []

        def done(t: asyncio.Task[None]) -> None:
            running.discard(t)
            if not t.cancelled():
                exc = t.exception()
                if exc is not None:
                    errors.append(exc)

        try:
            for _ in range(100_000):
                if errors:
                    raise errors[0]
                if fenced:
                    raise Fenced(str(fenced[0]))
                if seq.idle:
                    return
                if die_after is not None and self.sends >= die_after:
                    return  # the caller abandons the session; the finally cancels the sends
                send = seq.next_to_send() if loop.time() >= state["not_before"] else None
                if send is not None:
                    self.sends += 1
                    t = asyncio.create_task(
                        attempt(send.first_sequence, send.record_count, send.attempt)
                    )
                    running.add(t)
                    t.add_done_callback(done)
                    await asyncio.sleep(0)
                    continue
                wake.clear()
                wait = max(0.001, state["not_before"] - loop.time()) if not running else 0.5
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), wait)
            raise InvariantViolation(f"producer {self.pid}: sender did not finish")
        finally:
            for t in list(running):
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    # -- idempotent ------------------------------------------------------------

    async def run_idempotent(self) -> None:
        epoch, _ = await self._init()
        seq = Sequencer(self.pid, epoch)
        payloads: dict[int, bytes] = {}
        for k in range(10_000):
            if self.sim.winding_down:
                break
            for _ in range(self.rng.randint(1, 8)):
                tag = f"i{self.pid}/{len(self.tags)}".encode()
                first = seq.add(self.rng.randint(1, 3))
                payloads[first] = tag
                self.tags.append(tag)
            try:
                await self._send_all(seq, payloads)
            except Fenced as exc:
                raise InvariantViolation(
                    f"idempotent producer {self.pid} (one session) was fenced: {exc}"
                ) from exc
            self.acked = len(self.tags)
            await asyncio.sleep(self.rng.uniform(0.0, 0.05) if k % 3 else 0.0)
        await self._send_all(seq, payloads)
        self.acked = len(self.tags)

    # -- transactional -------------------------------------------------------

    async def run_transactional(self) -> None:
        for _ in range(1000):
            if self.sim.winding_down:
                return
            epoch, _ = await self._init()
            seq = Sequencer(self.pid, epoch)
            with contextlib.suppress(Fenced):
                await self._session(seq)

    async def _commit(self, seq: Sequencer, version: int, rm: RmStm) -> EndTxnResult:
        """One attempt to commit ``version`` (at the sequencer's epoch when it is made)."""
        return await rm.end_transaction(self.pid, seq.epoch, True, version)

    async def _session(self, seq: Sequencer) -> None:
        """Transactions until the session dies, is fenced, or the run winds down."""
        for _ in range(1000):
            if self.sim.winding_down:
                return
            roll = self.rng.random()
            fate = "commit" if roll < 0.55 else "abort" if roll < 0.8 else "die"
            txn = Txn(len(self.txns), fate)
            self.txns.append(txn)
            payloads: dict[int, bytes] = {}
            for i in range(self.rng.randint(1, 6)):
                tag = f"t{self.pid}/{txn.version}/{i}".encode()
                payloads[seq.add(self.rng.randint(1, 3))] = tag
                txn.tags.append(tag)
            if fate == "die":
                try:
                    await self._send_all(
                        seq, payloads, die_after=self.sends + self.rng.randint(0, 6)
                    )
                except Fenced:
                    txn.outcome = "aborted"  # fenced before it died: the fencing aborted it
                    raise
                txn.outcome = "died"
                # the dead session's transaction stays open until the next init_producer or
                # the transaction timeout aborts it
                await asyncio.sleep(self.rng.uniform(0.0, 1.5))
                return
            try:
                await self._send_all(seq, payloads)
            except Fenced:
                txn.outcome = "aborted"  # no commit was sent: the fencing aborted it
                raise
            if fate == "abort":
                txn.outcome = "aborted"  # fenced or not, it never commits: no commit is sent
                try:
                    res = await self.client.retrying(
                        lambda rm: rm.end_transaction(self.pid, seq.epoch, False), "abort"
                    )
                except FencedError as exc:
                    raise Fenced(str(exc)) from exc
                seq.reset(res.producer_epoch)  # an abort bumps the epoch: go on at the new one
            else:
                txn.outcome = "unknown"
                try:
                    await self.client.retrying(
                        functools.partial(self._commit, seq, txn.version), "commit"
                    )
                except FencedError as exc:
                    raise Fenced(str(exc)) from exc  # the next init_producer resolves it
                txn.outcome = "committed"
                self.last_committed = txn.version
            await asyncio.sleep(self.rng.uniform(0.0, 0.05))

    async def run(self) -> None:
        if self.transactional:
            await self.run_transactional()
            # resolve a commit left unknown by a fence at the very end
            if self.txns and self.txns[-1].outcome == "unknown":
                await self._init()
        else:
            await self.run_idempotent()
