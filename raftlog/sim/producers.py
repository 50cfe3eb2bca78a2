"""The seeded simulator with producers: rm_stm on every replica, under faults.

``run_seed(seed)`` runs one short history (3 or 5 nodes) on a virtual-time
loop. Each simulated node runs the real :class:`~raftlog.raft.consensus.Consensus`
with the real :class:`~raftlog.producers.rm_stm.RmStm` as its state machine
(snapshotted with the commit context, restored on restart), and a leader task
that aborts expired transactions (``RmStm.abort_expired``) as a node would.

Clients (outside the cluster) send requests to whoever they believe leads,
after a random network delay (so a producer's pipelined requests can overtake
each other); a request runs as a task of the node it reached, so a crash
cancels it. A lost request or reply, a crash and a timeout all look like an
unknown outcome to the client. Producers:

- idempotent: ``init_producer``, then batches driven by a
  :class:`~raftlog.producers.sequencer.Sequencer`, 5 in flight, retried in
  order (window 1 after a failure) through leader changes;
- transactional: sessions of transactions that commit (with the transaction
  number as application version), abort, or *die* (the session is abandoned
  mid-transaction with requests in flight; the next ``init_producer`` or the
  transaction timeout aborts it). A commit whose outcome is unknown is
  resolved by the next session's ``last_committed_version``.

A nemesis crashes nodes (tearing their unflushed tail), restarts them,
partitions the network, drops messages, transfers leadership and makes the
leader step down. Every ``check_s`` the Raft invariants
(:class:`~raftlog.sim.checks.InvariantChecker`) and the visibility invariants
run on every live replica: the batches rm_stm lets a reader see below its LSO
must be exactly the ones an independent model of the committed log
(:class:`~raftlog.sim.txn_model.LogModel`) says are visible, and none of an
open transaction. The model also fails on any duplicate or gap in a
producer's sequence, and on any batch of a fenced epoch.

After healing, producers finish, open transactions are aborted by the
timeout, every replica catches up, and then: every replica's filter equals the
model, the LSO is the high watermark, the producer tables are byte-equal, and
the visible data is exactly every acknowledged idempotent batch and every
committed transaction's batches, once each and in order per producer.

A failing seed prints itself and replays exactly with ``run_seed(seed)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from raftlog.producers.outcomes import (
    DuplicateSequenceError,
    OutOfOrderSequenceError,
    ProducerError,
    ProducerFencedError,
)
from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.producers.sequencer import MAX_IN_FLIGHT, Sequencer, SequencerError
from raftlog.raft.errors import RaftError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.sim.checks import InvariantChecker, InvariantViolation
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.loop import run_many, run_virtual
from raftlog.sim.network import NetworkOptions
from raftlog.sim.node import SimNode
from raftlog.sim.txn_model import LogModel, Status
from raftlog.storage.batch import BatchKind, RecordBatch

T = TypeVar("T")

_ALL = 1 << 40  # read everything at once
_EXPIRE_EVERY_S = 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerSimConfig:
    chaos_s: float = 1.5  # virtual seconds of faults and writes
    final_s: float = 20.0  # virtual seconds allowed for each phase after healing
    check_s: float = 0.03  # invariant check period
    nodes: tuple[int, ...] = (3, 5)
    idempotent_producers: int = 2
    transactional_producers: int = 3
    request_timeout_s: float = 1.0  # the client's bound on one request


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerSeedResult:
    seed: int
    ok: bool
    nodes: int
    idempotent_acked: int = 0  # idempotent batches acknowledged
    committed: int = 0  # transactions known committed
    aborted: int = 0  # transactions aborted (by the producer, or fenced)
    died: int = 0  # transactions abandoned mid-way
    timeout_aborts: int = 0  # open transactions aborted by a newer epoch (fence or timeout)
    retries: int = 0  # client requests that failed retriably
    checks: int = 0
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerSummary:
    seeds: int
    failed: list[ProducerSeedResult]
    idempotent_acked: int
    committed: int
    aborted: int
    died: int
    timeout_aborts: int
    retries: int

    @property
    def ok(self) -> bool:
        return not self.failed


class _Lost(Exception):
    """A request or its reply was lost, its node crashed, or it timed out: outcome unknown."""


def _now_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


# -- nodes -------------------------------------------------------------------------------


class ProducerSimNode(SimNode):
    """A :class:`SimNode` whose group runs rm_stm, and a leader task expiring transactions."""

    def __init__(self, *args: Any, rm_config: RmStmConfig, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.rm_config = rm_config
        self.rm: RmStm
        self.errors: list[str] = []  # unexpected exceptions of this node's rm_stm tasks

    def _build(self) -> None:
        super()._build()
        self.rm = RmStm(self.consensus, self.rm_config, clock_ms=_now_ms)

    async def start(self) -> None:
        await super().start()
        self.spawn(self._expirer(self.rm))

    async def _expirer(self, rm: RmStm) -> None:
        for _ in range(10_000_000):
            await asyncio.sleep(_EXPIRE_EVERY_S)
            if not (self.consensus.running and self.consensus.is_leader):
                continue
            try:
                await rm.abort_expired(_now_ms())
            except (ProducerError, RaftError, TimeoutError):
                continue
            except Exception:
                self.errors.append("abort_expired failed:\n" + traceback.format_exc())


class ProducerSimCluster(SimCluster):
    def __init__(self, n: int, seed: int, rm_config: RmStmConfig, **kw: Any) -> None:
        super().__init__(n, seed, **kw)
        some = next(iter(self.nodes.values()))
        self.nodes = {
            i: ProducerSimNode(
                i,
                self.network,
                some.configuration,
                self.options,
                some.heartbeat_interval_s,
                seed,
                rm_config=rm_config,
            )
            for i in self.nodes
        }

    def live(self) -> list[ProducerSimNode]:
        return super().live()  # type: ignore[return-value]


# -- the client side ---------------------------------------------------------------------


class _Client:
    """Requests from outside the cluster to a node's rm_stm, through a lossy network."""

    def __init__(self, sim: _Sim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.failures = 0

    async def call(self, fn: Callable[[RmStm], Awaitable[T]]) -> T:
        """Run ``fn(rm)`` on the node believed to lead; raises _Lost or what ``fn`` raises."""
        cluster = self.sim.cluster
        net = cluster.network
        node = cluster.leader()
        if node is None or self.rng.random() < 0.1:  # stale metadata: any live node
            live = cluster.live()
            node = self.rng.choice(live) if live else None
        if node is None:
            await asyncio.sleep(0.05)
            raise _Lost("no live node")
        await asyncio.sleep(net._delay())
        if not node.alive or (net.options.drop_rate and self.rng.random() < net.options.drop_rate):
            await asyncio.sleep(self.sim.config.request_timeout_s)
            raise _Lost(f"request to node {node.node_id} lost")
        assert isinstance(node, ProducerSimNode)
        task = node.spawn(fn(node.rm))
        task.add_done_callback(_retrieve)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.sim.config.request_timeout_s)
        except TimeoutError:
            raise _Lost(f"node {node.node_id} did not answer in time") from None
        except asyncio.CancelledError:
            task_me = asyncio.current_task()
            if task.cancelled() and (task_me is None or task_me.cancelling() == 0):
                raise _Lost(f"node {node.node_id} crashed while handling the request") from None
            raise
        await asyncio.sleep(net._delay())
        if net.options.drop_rate and self.rng.random() < net.options.drop_rate:
            raise _Lost(f"reply from node {node.node_id} lost")
        return result

    async def retrying(self, fn: Callable[[RmStm], Awaitable[T]], what: str) -> T:
        """``call`` until it succeeds or raises a non-retriable ProducerError (bounded)."""
        for _ in range(1000):
            try:
                return await self.call(fn)
            except ProducerError as exc:
                if not exc.retriable:
                    raise
            except (_Lost, RaftError, TimeoutError):
                pass
            self.failures += 1
            await asyncio.sleep(self.rng.uniform(0.01, 0.05))
        raise InvariantViolation(f"{what}: no success after 1000 attempts")


@dataclasses.dataclass(slots=True)
class _Txn:
    version: int
    fate: str  # "commit", "abort" or "die"
    tags: list[bytes] = dataclasses.field(default_factory=list)
    outcome: str = "open"  # "committed", "aborted", "died", "unknown" (commit not confirmed)


class _Fenced(Exception):
    pass


class _Producer:
    """One producer id: sessions of batches driven by a Sequencer (see the module doc)."""

    def __init__(self, sim: _Sim, pid: int, transactional: bool) -> None:
        self.sim = sim
        self.pid = pid
        self.transactional = transactional
        self.rng = random.Random(sim.seed * 101 + pid)
        self.client = _Client(sim, random.Random(sim.seed * 103 + pid))
        self.tags: list[bytes] = []  # idempotent: every batch, in sequence order
        self.acked = 0  # idempotent: acknowledged batches (a prefix of tags at the end)
        self.txns: list[_Txn] = []
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
        """Send until every batch added to ``seq`` is acknowledged; raises _Fenced.

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
                    timestamp_ms=_now_ms(),
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
            except ProducerFencedError as exc:
                fenced.append(exc)
            except ProducerError as exc:
                if not exc.retriable:
                    raise InvariantViolation(
                        f"producer {self.pid}: produce of sequence {first} failed: {exc!r}"
                    ) from exc
                seq.on_retriable(first, send_attempt)
                retry_later()
            except (_Lost, RaftError, TimeoutError):
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
            if not t.cancelled() and t.exception() is not None:
                errors.append(t.exception())  # type: ignore[arg-type]

        try:
            for _ in range(100_000):
                if errors:
                    raise errors[0]
                if fenced:
                    raise _Fenced(str(fenced[0]))
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
            except _Fenced as exc:
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
            with contextlib.suppress(_Fenced):
                await self._session(seq)

    async def _session(self, seq: Sequencer) -> None:
        """Transactions until the session dies, is fenced, or the run winds down."""
        for _ in range(1000):
            if self.sim.winding_down:
                return
            roll = self.rng.random()
            fate = "commit" if roll < 0.55 else "abort" if roll < 0.8 else "die"
            txn = _Txn(len(self.txns), fate)
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
                except _Fenced:
                    txn.outcome = "aborted"  # fenced before it died: the fencing aborted it
                    raise
                txn.outcome = "died"
                # the dead session's transaction stays open until the next init_producer or
                # the transaction timeout aborts it
                await asyncio.sleep(self.rng.uniform(0.0, 1.5))
                return
            try:
                await self._send_all(seq, payloads)
            except _Fenced:
                txn.outcome = "aborted"  # no commit was sent: the fencing aborted it
                raise
            if fate == "abort":
                txn.outcome = "aborted"  # fenced or not, it never commits: no commit is sent
                try:
                    res = await self.client.retrying(
                        lambda rm: rm.end_transaction(self.pid, seq.epoch, False), "abort"
                    )
                except ProducerFencedError as exc:
                    raise _Fenced(str(exc)) from exc
                seq.reset(res.producer_epoch)  # an abort bumps the epoch: go on at the new one
            else:
                txn.outcome = "unknown"
                try:
                    await self.client.retrying(
                        lambda rm, v=txn.version: rm.end_transaction(self.pid, seq.epoch, True, v),
                        "commit",
                    )
                except ProducerFencedError as exc:
                    raise _Fenced(str(exc)) from exc  # the next init_producer resolves it
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


# -- the simulation ----------------------------------------------------------------------


class _Sim:
    def __init__(self, seed: int, config: ProducerSimConfig) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.n = self.rng.choice(config.nodes)
        drop = self.rng.choice([0.0, 0.0, 0.02, 0.05])
        options = sim_options()
        options.flush_latency_s = self.rng.choice([0.0, 0.002, 0.01])
        options.election_timeout_ticks = 5
        rm_config = RmStmConfig(
            transaction_timeout_ms=self.rng.choice([300, 800, 2000]),
            sync_timeout_s=1.0,
            replicate_timeout_s=self.rng.choice([0.5, 2.0]),
            reorder_wait_s=self.rng.choice([0.0, 0.05, 0.5]),
        )
        self.cluster = ProducerSimCluster(
            self.n,
            seed,
            rm_config,
            options=options,
            network=NetworkOptions(drop_rate=drop, rpc_timeout_s=0.2),
        )
        self.raft_checker = InvariantChecker()
        self.model = LogModel()
        self.verified: dict[tuple[int, int], int] = {}  # (node, incarnation) -> LSO verified
        self.winding_down = False
        pids = 100
        self.producers = [
            _Producer(self, pids + i, transactional=i >= config.idempotent_producers)
            for i in range(config.idempotent_producers + config.transactional_producers)
        ]

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        nodes = self.cluster.live()
        self.raft_checker.check(list(nodes))
        for node in nodes:
            if node.errors:
                raise InvariantViolation(f"node {node.node_id}: {node.errors[0]}")
            if not node.consensus.running:
                continue
            c = node.consensus
            if c.commit_index > self.model.end:
                self.model.feed(node.node_id, c.read(self.model.end + 1, _ALL))
            self._check_visible(node)

    def _check_visible(self, node: ProducerSimNode) -> None:
        """rm_stm's filter on this replica agrees with the model below the replica's LSO."""
        rm, c = node.rm, node.consensus
        key = (node.node_id, node.incarnation)
        lso = rm.last_stable_offset
        start = self.verified.get(key, c.log.start_offset)
        if lso < start:
            raise InvariantViolation(
                f"node {node.node_id}: LSO went back from {start} to {lso} (same incarnation)"
            )
        if lso > rm.table.applied_offset + 1:
            raise InvariantViolation(
                f"node {node.node_id}: LSO {lso} is past the applied offset "
                f"{rm.table.applied_offset}"
            )
        if lso == start:
            return
        raw = c.read(start, _ALL, lso - 1)
        seen = [b.base_offset for b in rm.visible(raw)]
        expected = []
        for b in raw:
            if b.kind is not BatchKind.DATA or b.last_offset >= lso:
                continue
            status = self.model.status[b.base_offset]
            if status is Status.PENDING:
                raise InvariantViolation(
                    f"node {node.node_id}: LSO {lso} is past offset {b.base_offset}, data of "
                    f"producer {b.producer_id}'s open transaction"
                )
            if status is Status.VISIBLE:
                expected.append(b.base_offset)
        if seen != expected:
            extra = sorted(set(seen) - set(expected))
            missing = sorted(set(expected) - set(seen))
            raise InvariantViolation(
                f"node {node.node_id}: below LSO {lso} (from {start}) rm_stm shows batches "
                f"{extra} the model hides (aborted or fenced) and hides {missing} it shows"
            )
        self.verified[key] = lso

    async def _checker(self) -> None:
        for _ in range(10_000_000):
            self.check()
            await asyncio.sleep(self.config.check_s)

    # -- faults --------------------------------------------------------------

    async def _nemesis(self) -> None:
        rng = random.Random(self.seed * 13 + 5)
        background: list[asyncio.Task[None]] = []
        try:
            for _ in range(10_000):
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                await self.cluster.random_fault(rng, background, keep_majority=True)
        finally:
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    # -- the run -------------------------------------------------------------

    async def run(self) -> ProducerSeedResult:
        cluster = self.cluster
        await cluster.start()
        checker = asyncio.create_task(self._checker())
        nemesis = asyncio.create_task(self._nemesis())
        producers = [asyncio.create_task(p.run()) for p in self.producers]
        watched = [checker, *producers]
        await asyncio.wait(
            watched, timeout=self.config.chaos_s, return_when=asyncio.FIRST_EXCEPTION
        )
        _raise_failed(watched)
        # heal: no new faults, every node up; producers finish what they started
        self.winding_down = True
        nemesis.cancel()
        await asyncio.gather(nemesis, return_exceptions=True)
        cluster.network.heal()
        cluster.network.options.drop_rate = 0.0
        for node in cluster.nodes.values():
            await node.restart()
        await _wait_producers(checker, producers, self.config.final_s)
        late = [p.pid for p, t in zip(self.producers, producers, strict=True) if not t.done()]
        if late:
            raise InvariantViolation(f"producers {late} did not finish after healing")
        await self._settle()
        _raise_failed([checker])
        checker.cancel()
        await asyncio.gather(checker, return_exceptions=True)
        self._final_checks()
        await cluster.stop()
        txns = [t for p in self.producers for t in p.txns]
        return ProducerSeedResult(
            self.seed,
            True,
            self.n,
            idempotent_acked=sum(p.acked for p in self.producers),
            committed=sum(t.outcome == "committed" for t in txns),
            aborted=sum(t.outcome == "aborted" for t in txns),
            died=sum(t.outcome == "died" for t in txns),
            timeout_aborts=self.model.bump_aborts,
            retries=sum(p.retries + p.client.failures for p in self.producers),
            checks=self.raft_checker.checks,
        )

    async def _settle(self) -> None:
        """Wait (bounded, virtual time) for no open transaction and every replica caught up."""
        step = 0.05
        client = _Client(self, random.Random(self.seed * 7 + 3))
        for _ in range(int(self.config.final_s / step)):
            leader = self.cluster.leader()
            if leader is not None and not leader.rm.table.open_transactions():
                # a barrier in the leader's term: everything before it is applied there
                with contextlib.suppress(_Lost, RaftError, ProducerError, TimeoutError):
                    await client.call(lambda rm: rm.sync())
                    break
            await asyncio.sleep(step)
        else:
            leader = self.cluster.leader()
            open_tx = None if leader is None else leader.rm.table.open_transactions()
            raise InvariantViolation(
                f"no leader with every transaction closed within {self.config.final_s}s after "
                f"healing (leader {leader and leader.node_id}, open transactions {open_tx})"
            )
        for _ in range(int(self.config.final_s / step)):
            nodes = self.cluster.live()
            leader = self.cluster.leader()
            if leader is not None and len(nodes) == self.n:
                target = leader.consensus.commit_index
                if all(n.rm.table.applied_offset == target for n in nodes):
                    self.check()
                    return
            await asyncio.sleep(step)
        raise InvariantViolation(
            "replicas did not catch up after healing: applied offsets "
            + str({n.node_id: n.rm.table.applied_offset for n in self.cluster.live()})
        )

    def _final_checks(self) -> None:
        model = self.model
        expected_visible = [b.base_offset for b in model.visible()]
        lso = model.last_stable_offset()
        if lso != model.end + 1:
            raise InvariantViolation(f"a transaction is still open after healing (LSO {lso})")
        snapshots = {}
        for node in self.cluster.live():
            rm, c = node.rm, node.consensus
            if rm.last_stable_offset != lso:
                raise InvariantViolation(
                    f"node {node.node_id}: LSO {rm.last_stable_offset}, the model's is {lso}"
                )
            seen = [b.base_offset for b in rm.visible(c.read(c.log.start_offset, _ALL))]
            if seen != expected_visible:
                raise InvariantViolation(
                    f"node {node.node_id}: visible batches differ from the model's: extra "
                    f"{sorted(set(seen) - set(expected_visible))}, missing "
                    f"{sorted(set(expected_visible) - set(seen))}"
                )
            snapshots[node.node_id] = rm.snapshot()
        if len(set(snapshots.values())) != 1:
            raise InvariantViolation("producer tables differ between replicas after catching up")
        self._check_producers([model.data[base] for base in expected_visible])

    def _check_producers(self, visible: list[RecordBatch]) -> None:
        """What producers were told matches what readers see, once each and in order."""
        by_pid: dict[int, list[bytes]] = {}
        for b in visible:
            by_pid.setdefault(b.producer_id, []).append(b.payload)
        for p in self.producers:
            got = by_pid.pop(p.pid, [])
            if p.transactional:
                unresolved = [t.version for t in p.txns if t.outcome in ("open", "unknown")]
                if unresolved:
                    raise InvariantViolation(
                        f"producer {p.pid}: transactions {unresolved} have no known outcome"
                    )
                want = [tag for t in p.txns if t.outcome == "committed" for tag in t.tags]
                if self.model.last_committed_version(p.pid) != p.last_committed:
                    raise InvariantViolation(
                        f"producer {p.pid}: last committed version in the log "
                        f"{self.model.last_committed_version(p.pid)}, the producer's "
                        f"{p.last_committed}"
                    )
            else:
                if p.acked != len(p.tags):
                    raise InvariantViolation(
                        f"producer {p.pid}: only {p.acked} of {len(p.tags)} batches acknowledged"
                    )
                want = p.tags
            if got != want:
                raise InvariantViolation(_diff(p.pid, want, got))
        if by_pid:
            raise InvariantViolation(f"visible data of unknown producers {sorted(by_pid)}")


def _diff(pid: int, want: list[bytes], got: list[bytes]) -> str:
    dup = sorted({t for t in got if got.count(t) > 1})
    missing = [t for t in want if t not in got]
    extra = [t for t in got if t not in want]
    return (
        f"producer {pid}: visible data differs from what was acknowledged/committed: "
        f"duplicated {dup[:5]}, missing {missing[:5]}, not committed {extra[:5]}, "
        f"order ok: {[t for t in got if t in want] == [t for t in want if t in got]}"
    )


async def _wait_producers(
    checker: asyncio.Task[None], producers: list[asyncio.Task[None]], timeout_s: float
) -> None:
    """Wait (bounded) until every producer is done; raise the first failure of any task."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for _ in range(10_000):
        _raise_failed([checker, *producers])
        pending = [t for t in producers if not t.done()]
        left = deadline - loop.time()
        if not pending or left <= 0 or checker.done():
            return
        await asyncio.wait([checker, *pending], timeout=left, return_when=asyncio.FIRST_COMPLETED)


def _raise_failed(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


def run_seed(seed: int, config: ProducerSimConfig | None = None) -> ProducerSeedResult:
    """Run one seeded history; never raises: a failure is in ``error``."""
    sim = _Sim(seed, config or ProducerSimConfig())
    try:
        return run_virtual(sim.run())
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return ProducerSeedResult(
            seed,
            False,
            sim.n,
            checks=sim.raft_checker.checks,
            error=f"seed {seed} failed (replay: raftlog.sim.producers.run_seed({seed})): "
            + "".join(traceback.format_exception(exc)),
        )


def run_seeds(
    seeds: Iterable[int], config: ProducerSimConfig | None = None, processes: int = 1
) -> ProducerSummary:
    """Run many seeds (in ``processes`` worker processes when > 1); failing seeds print."""
    results = run_many(run_seed, seeds, config, processes, chunksize=8)
    failed = [r for r in results if not r.ok]
    return ProducerSummary(
        len(results),
        failed,
        sum(r.idempotent_acked for r in results),
        sum(r.committed for r in results),
        sum(r.aborted for r in results),
        sum(r.died for r in results),
        sum(r.timeout_aborts for r in results),
        sum(r.retries for r in results),
    )
