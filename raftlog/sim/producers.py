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
from collections.abc import Iterable
from typing import TypeVar

from raftlog.errors import RaftlogError
from raftlog.producers.rm_stm import RmStmConfig
from raftlog.raft.errors import RaftError
from raftlog.sim.checks import InvariantChecker, InvariantViolation
from raftlog.sim.cluster import sim_options
from raftlog.sim.loop import raise_failed, run_guarded, run_many
from raftlog.sim.network import NetworkOptions
from raftlog.sim.producer_clients import Client, ProducerModel
from raftlog.sim.producer_nodes import ProducerSimCluster, ProducerSimNode
from raftlog.sim.requests import Lost
from raftlog.sim.txn_model import LogModel, Status
from raftlog.storage.batch import BatchKind, RecordBatch

T = TypeVar("T")

_ALL = 1 << 40  # read everything at once


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


# -- the simulation ----------------------------------------------------------------------


class _Sim:
    """One seeded history (see the module doc); the clients see it as a ProducerSim."""

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
            ProducerModel(self, pids + i, transactional=i >= config.idempotent_producers)
            for i in range(config.idempotent_producers + config.transactional_producers)
        ]

    @property
    def request_timeout_s(self) -> float:
        return self.config.request_timeout_s

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
        raise_failed(watched)
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
        raise_failed([checker])
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
        client = Client(self, random.Random(self.seed * 7 + 3))
        for _ in range(int(self.config.final_s / step)):
            leader = self.cluster.leader()
            if leader is not None and not leader.rm.table.open_transactions():
                # a barrier in the leader's term: everything before it is applied there
                with contextlib.suppress(Lost, RaftError, RaftlogError, TimeoutError):
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
            # bytes(): the payload itself when it is bytes; a view would compare and
            # print as an object, not its bytes
            by_pid.setdefault(b.producer_id, []).append(bytes(b.payload))
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
        raise_failed([checker, *producers])
        pending = [t for t in producers if not t.done()]
        left = deadline - loop.time()
        if not pending or left <= 0 or checker.done():
            return
        await asyncio.wait([checker, *pending], timeout=left, return_when=asyncio.FIRST_COMPLETED)


def run_seed(seed: int, config: ProducerSimConfig | None = None) -> ProducerSeedResult:
    """Run one seeded history; never raises: a failure is in ``error``."""
    sim = _Sim(seed, config or ProducerSimConfig())
    return run_guarded(
        seed,
        sim.run(),
        "raftlog.sim.producers.run_seed",
        lambda error: ProducerSeedResult(
            seed, False, sim.n, checks=sim.raft_checker.checks, error=error
        ),
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
