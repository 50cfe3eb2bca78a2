"""The seeded simulation of exactly-once writes: the coordinator's two-phase commit under faults.

``run_seed(seed)`` runs one short history on a virtual-time loop, with

- ``partitions`` Raft groups of one topic, each on its own 3 or 5 simulated
  nodes running the real :class:`~raftlog.producers.rm_stm.RmStm` (the nodes of
  :mod:`raftlog.sim.producers`, with the leader's transaction-expiry task);
- one ``__transactions`` group running the real
  :class:`~raftlog.coordinator.tm_stm.TmStm` (and so the real
  :class:`~raftlog.coordinator.state.CoordinatorState`);
- a nemesis crashing and restarting nodes of every group, partitioning their
  networks, dropping messages and moving leaders.

Clients reach a group's leader (or, now and then, any live node) through a
lossy network: a lost request or reply, a crash and a timeout are an unknown
outcome, and the client retries, as the real client does.

Writers play Spark streaming queries. Each writer runs versions 0, 1, 2, ...
(micro-batches); a version is a fixed set of rows (the same on a replay). A
*run* of the driver (one ``runId``) splits the version's rows among 1..3 tasks
(a replay may split them differently); each task attempt *prepares*: for every
topic partition its rows go to, ``init_producer`` at a producer id unique to
(writer, run, attempt, partition), ``register`` with the coordinator (writing
nothing when the version is already committed, nothing when refused), and a
transactional write of its rows. Some attempts fail midway and go on writing
as zombies; some have a speculative twin whose commit message Spark drops.
The driver then makes its one EndTxn call to the coordinator's leader, which runs
the real :class:`~raftlog.coordinator.txn_coordinator.TxnCoordinator` (decide,
every marker through the simulated network to each partition's leader, complete),
naming the first successful attempt of each task, or deciding abort when a task
failed every attempt. The driver is killed at a random moment, or right before or
after its EndTxn (before its checkpoint); the coordinator's node crashes between
the coordinator's own steps (after the decision, after a marker, after every
marker, after the completion). A restarted driver is a new run that replays the
first version its checkpoint does not hold, as a restarted query does. The
coordinator's leader resumes incomplete decisions on a timer (every 0.5 s), as a
node does when it is elected and on its timer.

Readers take cuts: each partition's last stable offset, then the coordinator's
``cut``, then :func:`~raftlog.client.transactions.consistent_cut`, then the
committed data below the cut. After the chaos, every node is restarted and the
network healed; drivers finish their version, the transaction timeout aborts
what zombies left open, and a final cut is read. The history goes to
:func:`raftlog.checker.check_batches`, which reports fractured, lost, duplicated
and uncommitted batches. The run is a pure function of the seed (and config):
a failing seed replays exactly with ``run_seed(seed)``.

``CoordinatorSimConfig.mutation`` plants a bug, to show the checker catches it:

- ``cut_skip``: readers use the last stable offsets as the cut, skipping
  ``consistent_cut``'s adjustment (expect fractured batches);
- ``cut_by_marker``: the first ``consistent_cut``, which took a transaction as
  all out when no participant's marker was below the end, though a committed
  participant's data below the LSO is read whatever its marker's offset
  (expect fractured batches; this simulation found it);
- ``forget_committed``: the coordinator forgets a writer's last committed
  version (as the producer table's expiry did), so a replay registers and
  commits again (expect duplicated rows);
- ``skip_roll_forward``: the coordinator never resumes a decision (not on its timer,
  not for a replay's EndTxn, which it answers with the recorded commit), so nobody
  writes the markers a crashed coordinator left (expect lost batches, once the
  transaction timeout aborts them);
- ``no_abort``: a decision aborts none of the unnamed participants. Not a
  safety bug (nobody commits them; the transaction timeout aborts them, and
  until then the partition's LSO waits): expect nothing for the safety checker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import operator
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

from raftlog.checker.batches import BATCH_KINDS, BatchHistory, BatchReport, check_batches, row_value
from raftlog.client.transactions import consistent_cut, producer_id_for
from raftlog.coordinator.state import CoordinatorState
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC, TmStm
from raftlog.coordinator.txn_coordinator import CoordinatorRefusedError, TxnCoordinator
from raftlog.errors import FencedError, OutOfOrderSequenceError, RaftlogError, TxnLostError
from raftlog.producers.rm_stm import RmStmConfig
from raftlog.raft.errors import RaftError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.rpc.messages import CutTransaction, Participant
from raftlog.sim.checks import InvariantViolation
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.loop import raise_failed, retrieve, run_guarded, run_many
from raftlog.sim.network import NetworkOptions
from raftlog.sim.node import SimNode
from raftlog.sim.producer_nodes import ProducerSimCluster, ProducerSimNode
from raftlog.sim.requests import Caller
from raftlog.storage.batch import RecordBatch

__all__ = [
    "MUTATIONS",
    "CoordinatorSeedResult",
    "CoordinatorSimConfig",
    "CoordinatorSummary",
    "run_seed",
    "run_seeds",
]

T = TypeVar("T")

TOPIC = "events"
MUTATIONS = ("cut_skip", "cut_by_marker", "forget_committed", "skip_roll_forward", "no_abort")
_ALL = 1 << 40
_CRASH_POINTS = (
    ("before", "end_txn"),  # every task done, nothing decided yet
    ("during", "end_txn"),  # the coordinator at work: the call's answer never heard
    ("after", "end_txn"),  # decided and complete, not yet in the driver's checkpoint
)
_COORDINATOR_CRASHES = {
    # the chance that the coordinator's node crashes right after each of its steps
    "decided": 0.2,  # decided, no marker written
    "marker": 0.02,  # some markers written
    "markers": 0.04,  # every marker written, not recorded complete
    "completed": 0.02,  # complete, the answer not yet sent
}


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorSimConfig:
    chaos_s: float = 3.0  # virtual seconds of faults, writes and crashes
    final_s: float = 30.0  # virtual seconds allowed for each phase after healing
    nodes: tuple[int, ...] = (3, 5)
    partitions: int = 2
    writers: int = 2
    readers: int = 2
    request_timeout_s: float = 1.0  # the client's bound on one request
    transaction_timeout_ms: int = 6000  # each task attempt's session
    mutation: str = ""  # one of MUTATIONS, or "" (see the module doc)

    def __post_init__(self) -> None:
        if self.mutation and self.mutation not in MUTATIONS:
            raise ValueError(f"mutation: expected one of {MUTATIONS} or '', got {self.mutation!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorSeedResult:
    seed: int
    ok: bool  # the run finished and the checker found nothing
    nodes: int = 0
    versions: int = 0  # versions committed
    runs: int = 0  # driver runs (1 + restarts) over all writers
    crashes: int = 0  # drivers killed
    attempts: int = 0  # task attempts
    zombies: int = 0  # attempts that failed and wrote on
    replays: int = 0  # attempts told "committed" (wrote nothing)
    refused: int = 0  # attempts refused by the coordinator
    aborts: int = 0  # abort decisions
    cuts: int = 0
    anomalies: dict[str, int] = dataclasses.field(default_factory=dict)
    report: str = ""
    error: str = ""  # a failure of the run itself (not a checker finding)


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorSummary:
    seeds: int
    failed: list[CoordinatorSeedResult]
    versions: int
    crashes: int
    cuts: int
    anomalies: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.failed


# -- the coordinator's group ---------------------------------------------------------------


class _MutantState(CoordinatorState):
    """CoordinatorState with a planted bug (see the module doc)."""

    def __init__(self, mutation: str) -> None:
        super().__init__()
        self.mutation = mutation

    def apply(self, command: Any, offset: int) -> dict[str, Any]:
        op = command.get("op") if isinstance(command, dict) else None
        if self.mutation == "forget_committed" and op in ("register", "decide"):
            writer = self.writers.get(command.get("writer"))
            saved = None if writer is None else writer.last_committed
            if writer is not None:
                writer.last_committed = -1
            try:
                result = super().apply(command, offset)
            finally:
                if writer is not None and saved is not None:
                    writer.last_committed = max(saved, writer.last_committed)
            return result
        result = super().apply(command, offset)
        if self.mutation == "no_abort" and op == "decide" and result.get("status") != "error":
            w = self.writers.get(command["writer"])
            v = None if w is None else w.versions.get(command["version"])
            for d in () if v is None else v.decisions.values():
                d.aborts = []
            if isinstance(result.get("decision"), dict):
                result["decision"]["aborts"] = []
        return result


class _MutantCoordinator(TxnCoordinator):
    """``skip_roll_forward``: a coordinator finishes only the decisions it takes itself in
    the call at hand; one it finds recorded (by a leader before it, or a run before this
    one) is answered as it stands, and nothing is ever resumed (see the module doc)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._fresh: dict[tuple[str, int, str], bool] = {}

    async def resume(self) -> int:
        return 0

    async def end_txn(
        self, writer: str, version: int, run: str, commit: bool, participants: list[Participant]
    ) -> tuple[str, Any]:
        w = self.tm.state.writers.get(writer)
        v = None if w is None else w.versions.get(version)
        fresh = v is None or (run not in v.decisions and v.committed_by is None)
        self._fresh[(writer, version, run)] = fresh
        return await super().end_txn(writer, version, run, commit, participants)

    async def _finish_writer(self, writer: str, run: str) -> int:
        mine = [
            t
            for t in self.tm.state.incomplete(writer)
            if t[2].run == run and self._fresh.get((writer, t[1], run), False)
        ]
        for w, version, decision in mine:
            await self._finish(w, version, decision)
        return len(mine)


class _SimMarkers:
    """The coordinator's :class:`~raftlog.coordinator.txn_coordinator.MarkerWriter` in the
    simulation: each marker goes to its partition's leader through the lossy network
    (retried through leader changes, as a node's peer stream is), to the real rm_stm."""

    def __init__(self, sim: _Sim, caller: Caller) -> None:
        self.sim = sim
        self.caller = caller

    async def write_marker(self, participant: Participant, commit: bool) -> int:
        p = participant
        assert p.topic == TOPIC, p
        res = await self.caller.retrying(
            self.sim.partitions[p.partition],
            lambda node: node.rm.end_transaction(
                p.producer_id,
                p.epoch,
                commit,
                -1,
                record_count=p.records if commit else -1,
                last_sequence=p.last_sequence if commit else -1,
            ),
            f"marker {p.partition}/{p.producer_id}",
        )
        self.sim.markers += 1
        return int(res.offset)


class _TmNode(SimNode):
    """A :class:`SimNode` whose group runs tm_stm and the transaction coordinator."""

    def __init__(self, *args: Any, mutation: str, sim: _Sim, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.mutation = mutation
        self.sim = sim
        self.tm: TmStm
        self.txn: TxnCoordinator

    def _build(self) -> None:
        super()._build()
        self.tm = TmStm(self.consensus, replicate_timeout_s=1.0)
        if self.mutation in ("forget_committed", "no_abort"):
            self.tm.state = _MutantState(self.mutation)
        rng = random.Random(self.seed * 7919 + self.node_id * 31 + self.incarnation)
        caller = Caller(random.Random(rng.random()), self.sim.config.request_timeout_s)
        make = _MutantCoordinator if self.mutation == "skip_roll_forward" else TxnCoordinator
        self.txn = make(
            self.tm,
            _SimMarkers(self.sim, caller),
            step=lambda name: self._step(rng, name),
            spawn=self.spawn,
        )

    async def _step(self, rng: random.Random, name: str) -> None:
        """Between the coordinator's steps: now and then, during the chaos, crash here."""
        if self.sim.winding_down or rng.random() >= _COORDINATOR_CRASHES[name]:
            return
        self.sim.coordinator_crashes += 1
        self.crash()  # cancels this node's tasks, the one running this step among them
        await asyncio.sleep(0)


class _TmCluster(SimCluster):
    def __init__(self, n: int, seed: int, mutation: str, sim: _Sim, **kw: Any) -> None:
        super().__init__(n, seed, **kw)
        self.rebuild_nodes(_TmNode, mutation=mutation, sim=sim)

    def leader(self) -> _TmNode | None:
        # its nodes are _TmNodes (rebuild_nodes made them)
        return cast("_TmNode | None", super().leader())


# -- clients ---------------------------------------------------------------------------------


Hook = Callable[[str, str], Awaitable[None]]


async def _no_hook(when: str, what: str) -> None:
    return None


async def _at_coordinator(
    sim: _Sim, caller: Caller, call: Callable[[TxnCoordinator], Awaitable[T]], what: str
) -> T:
    """``call`` on the coordinator's leader, as a client's call reaches it: through the
    lossy network, retried through leader changes and unknown outcomes (every coordinator
    call is idempotent)."""
    return await caller.retrying(sim.coordinator, lambda node: call(node.txn), what)


# -- writers ---------------------------------------------------------------------------------


class _DriverKilled(Exception):
    """The driver of a run was killed (kill -9); its restart replays."""


@dataclasses.dataclass(slots=True)
class _Attempt:
    attempt: str
    task: int
    rows: list[int]
    fate: str  # "ok", "fail" (fails midway, writes on as a zombie), "spec" (a late twin)
    participants: list[Participant] = dataclasses.field(default_factory=list)
    outcome: str = "running"  # "ok", "failed", "replayed", "refused"


class _Writer:
    """One streaming query: its driver runs (restarted after each kill) and its checkpoint."""

    def __init__(self, sim: _Sim, index: int) -> None:
        self.sim = sim
        self.writer_id = f"q{index}"
        self.rng = random.Random(sim.seed * 1_000_003 + index)
        self.caller = Caller(
            random.Random(sim.seed * 1_000_033 + index), sim.config.request_timeout_s
        )
        self.checkpoint = -1  # the last version whose commit() returned (Spark's commit log)
        self.runs = 0
        self.crashes = 0
        self.aborts = 0
        self.attempts: list[_Attempt] = []
        self.executors: list[asyncio.Task[None]] = []  # attempts, zombies included

    def rows_of(self, version: int) -> int:
        """A version's row count: a function of (seed, writer, version), the same on replay."""
        return random.Random(f"{self.sim.seed}/{self.writer_id}/{version}").randint(1, 12)

    def partition_of(self, version: int, row: int) -> int:
        return (row * 7 + version * 3) % self.sim.config.partitions

    async def run(self) -> None:
        """Driver runs until the chaos ends and the current version is checkpointed."""
        for _ in range(10_000):
            if self.sim.winding_down and self.checkpoint >= self.sim.target.get(self.writer_id, -1):
                return
            self.runs += 1
            run = f"{self.writer_id}-r{self.runs}"
            killer = self._plan_kill()
            driver = asyncio.create_task(self._driver(run, killer))
            killer.driver = driver
            try:
                await driver
            except (asyncio.CancelledError, _DriverKilled):
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise
                self.crashes += 1
            except (CoordinatorRefusedError, TxnLostError, RaftlogError) as exc:
                if isinstance(exc, RaftError):
                    raise  # a raft error the driver's retries did not absorb is a finding
                # the query fails (a lost transaction, a refused commit): it is restarted
                self.sim.driver_errors.append(f"{run}: {exc!r}")
            finally:
                killer.cancel()
            # a restarted query: a new runId, after a while
            await asyncio.sleep(self.rng.uniform(0.0, 0.3))

    def _plan_kill(self) -> _Killer:
        roll = self.rng.random()
        if self.sim.winding_down or roll < 0.15:
            return _Killer(self, None, 0, None)
        if roll < 0.4:
            return _Killer(self, None, 0, self.rng.uniform(0.0, 1.0))
        when, what = self.rng.choice(_CRASH_POINTS)
        return _Killer(self, (when, what), self.rng.choice([1, 1, 2]), None)

    async def _driver(self, run: str, killer: _Killer) -> None:
        for _ in range(10_000):
            version = self.checkpoint + 1
            if self.sim.winding_down and version > self.sim.target.get(self.writer_id, -1):
                return
            if not self.sim.winding_down:
                self.sim.target[self.writer_id] = version
            self.sim.history.declare(self.writer_id, version, self.rows_of(version))
            named, ok = await self._run_tasks(run, version)
            await killer.hook("before", "end_txn")
            status, _ = await _at_coordinator(
                self.sim,
                self.caller,
                operator.methodcaller(
                    "end_txn",
                    writer=self.writer_id,
                    version=version,
                    run=run,
                    commit=ok,
                    participants=named if ok else [],
                ),
                "end_txn",
            )
            await killer.hook("after", "end_txn")
            if ok and status != "committed":
                raise CoordinatorRefusedError(f"{run}: commit of version {version} refused")
            if status == "committed":
                self.sim.history.commit(self.writer_id, version, run)
                await killer.hook("before", "checkpoint")
                self.checkpoint = version
            else:
                # a task failed every attempt: Spark calls abort() and the query fails;
                # its restart replays the version under a new run
                self.aborts += 1
                return
            await asyncio.sleep(self.rng.uniform(0.0, 0.05))

    async def _run_tasks(self, run: str, version: int) -> tuple[list[Participant], bool]:
        """Spark's job for ``version``: the successful attempts' participants, and whether
        every task succeeded. Attempts run as executor tasks, not the driver's: killing the
        driver does not stop them (a zombie writes on)."""
        rows = list(range(self.rows_of(version)))
        tasks = self.rng.randint(1, 3)
        named: list[Participant] = []
        ok = True
        for t in range(tasks):
            mine = [r for r in rows if r % tasks == t]
            if not mine:
                continue
            winner: _Attempt | None = None
            for a in range(3):
                roll = self.rng.random()
                fate = "fail" if roll < 0.25 else "spec" if roll < 0.4 else "ok"
                attempt = _Attempt(f"{run}-v{version}-t{t}-a{a}", t, mine, fate)
                result = await self._launch(run, version, attempt)
                if fate == "spec" and result.outcome == "ok":
                    # a speculative twin that also succeeds: Spark drops its message
                    twin = _Attempt(f"{run}-v{version}-t{t}-a{a}s", t, mine, "ok")
                    await self._launch(run, version, twin, wait=False)
                if result.outcome in ("ok", "replayed"):
                    winner = result
                    break
            if winner is None:
                ok = False
                break
            named += winner.participants
        return named, ok

    async def _launch(
        self, run: str, version: int, attempt: _Attempt, *, wait: bool = True
    ) -> _Attempt:
        self.attempts.append(attempt)
        done = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._attempt(run, version, attempt, done))
        self.executors.append(task)
        task.add_done_callback(retrieve)
        if wait:
            await done  # the driver hears of the attempt's end (or its failure)
        return attempt

    async def _attempt(
        self, run: str, version: int, attempt: _Attempt, done: asyncio.Future[None]
    ) -> None:
        """One task attempt's ``write()``: prepare each partition; never commit."""
        rng = random.Random(f"{self.sim.seed}/{attempt.attempt}")
        caller = Caller(
            random.Random(f"{self.sim.seed}/{attempt.attempt}/c"), self.sim.config.request_timeout_s
        )
        by_partition: dict[int, list[int]] = {}
        for r in attempt.rows:
            by_partition.setdefault(self.partition_of(version, r), []).append(r)
        fail_after = rng.randint(0, len(attempt.rows)) if attempt.fate == "fail" else None
        written = 0

        def failed(outcome: str) -> None:
            if attempt.outcome == "running":
                attempt.outcome = outcome
            if not done.done():
                done.set_result(None)

        try:
            for p, rows in sorted(by_partition.items()):
                part = await self._prepare(run, version, attempt, p, caller)
                if part is None:
                    return  # replayed or refused: nothing written
                seq = 0
                first_offset = last_offset = -1
                for i in range(0, len(rows), 3):
                    if fail_after is not None and written >= fail_after and not done.done():
                        # the attempt fails upstream of the writer; its Python write() runs on
                        self.sim.zombies += 1
                        failed("failed")
                        await asyncio.sleep(rng.uniform(0.0, 0.5))
                    chunk = rows[i : i + 3]
                    payload = "\n".join(
                        row_value(self.writer_id, version, r, attempt.attempt) for r in chunk
                    ).encode()
                    res = await self._produce(caller, p, part, seq, payload, len(chunk))
                    if res is None:
                        failed("failed")  # fenced: the attempt is dead
                        return
                    if first_offset < 0:
                        first_offset = res.base_offset
                    last_offset = res.last_offset
                    seq += len(chunk)
                    written += len(chunk)
                attempt.participants.append(
                    dataclasses.replace(
                        part,
                        records=seq,
                        last_sequence=seq - 1,
                        first_offset=first_offset,
                        last_offset=last_offset,
                    )
                )
            if attempt.fate == "spec":
                await asyncio.sleep(rng.uniform(0.0, 0.3))
            if attempt.fate == "fail":
                failed("failed")  # it failed after its last row: no commit message either
            if attempt.outcome == "running":
                attempt.outcome = "ok" if attempt.participants or not by_partition else "failed"
        except InvariantViolation:
            raise
        except Exception as exc:  # an attempt's unexpected failure: the task fails
            self.sim.attempt_errors.append(f"{attempt.attempt}: {exc!r}")
            failed("failed")
        finally:
            failed("failed")

    async def _prepare(
        self,
        run: str,
        version: int,
        attempt: _Attempt,
        partition: int,
        caller: Caller,
    ) -> Participant | None:
        """init_producer, then register (as ``transactions.prepare``); None: write nothing."""
        pid = producer_id_for(self.writer_id, run, attempt.attempt, TOPIC, partition)
        timeout = self.sim.config.transaction_timeout_ms
        session = await caller.retrying(
            self.sim.partitions[partition],
            lambda node: node.rm.init_producer(pid, timeout),
            "init_producer",
        )
        part = Participant(attempt.attempt, run, TOPIC, partition, pid, session.epoch)
        reply = await _at_coordinator(
            self.sim,
            caller,
            lambda txn: txn.register(self.writer_id, version, part),
            "register",
        )
        if reply.status == "committed":
            attempt.outcome = "replayed"
            self.sim.replays += 1
            return None
        if reply.status != "registered":
            attempt.outcome = "refused"
            self.sim.refused += 1
            return None
        return part

    async def _produce(
        self, caller: Caller, partition: int, part: Participant, seq: int, payload: bytes, n: int
    ) -> Any:
        """One transactional batch, retried until written; None when fenced."""

        async def produce(node: ProducerSimNode) -> Any:
            batch = RecordBatch.create(
                payload,
                n,
                transactional=True,
                producer_id=part.producer_id,
                producer_epoch=part.epoch,
                first_sequence=seq,
                timestamp_ms=0,
            )
            return await node.rm.replicate(batch, Consistency.QUORUM_ACK)

        try:
            return await caller.retrying(self.sim.partitions[partition], produce, "produce")
        except (FencedError, OutOfOrderSequenceError):
            return None  # aborted by a decision, or by its timeout


class _Killer:
    """Kills a driver at one step (``point``, the ``nth`` time) or after ``delay`` seconds."""

    def __init__(
        self, writer: _Writer, point: tuple[str, str] | None, nth: int, delay: float | None
    ) -> None:
        self.writer = writer
        self.point = point
        self.nth = nth
        self.driver: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        if delay is not None:
            self._timer = asyncio.get_running_loop().call_later(delay, self._kill)

    def _kill(self) -> None:
        if self.driver is not None and not self.driver.done() and not self.writer.sim.winding_down:
            self.driver.cancel()

    async def hook(self, when: str, what: str) -> None:
        if self.point == ("during", what) and when == "before":
            # killed while the call is in flight: a little later, whatever it is doing
            delay = self.writer.rng.uniform(0.0, 0.5)
            self._timer = asyncio.get_running_loop().call_later(delay, self._kill)
            return
        if self.point == (when, what):
            self.nth -= 1
            if self.nth == 0:
                self._kill()
                # a killed driver makes no further request: wait here for the cancellation
                await asyncio.sleep(0)
                if self.driver is not None and self.driver.cancelling():
                    raise _DriverKilled(f"killed {when} {what}")

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


# -- readers ---------------------------------------------------------------------------------


async def _take_cut(sim: _Sim, caller: Caller, process: str, *, final: bool = False) -> None:
    """Ends (each partition's LSO), then the coordinator's cut, then the rows below it."""
    ends: dict[int, int] = {}
    for p, cluster in enumerate(sim.partitions):
        ends[p] = await caller.retrying(cluster, lambda node: _lso(node), f"last stable offset {p}")
    transactions = await _at_coordinator(sim, caller, lambda txn: txn.cut(TOPIC, -1), "cut")
    if sim.config.mutation == "cut_skip":
        cut = dict(ends)
    elif sim.config.mutation == "cut_by_marker":
        cut = _cut_by_marker(ends, transactions)
    else:
        cut = consistent_cut(ends, transactions)
    records: list[tuple[tuple[str, int], int, str]] = []
    for p, cluster in enumerate(sim.partitions):
        end = cut[p]
        if end <= 0:
            continue
        batches = await caller.retrying(
            cluster, functools.partial(_read_below, end=end), f"read {p}"
        )
        for b in batches:
            for i, value in enumerate(bytes(b.payload).decode().split("\n")):
                records.append(((TOPIC, p), b.base_offset + i, value))
    now = asyncio.get_running_loop().time()
    sim.history.cut(process, now, {(TOPIC, p): e for p, e in cut.items()}, records, final=final)


def _cut_by_marker(ends: dict[int, int], transactions: list[CutTransaction]) -> dict[int, int]:
    """The mutation ``cut_by_marker``: consistent_cut as first written (see the module doc)."""
    out = dict(ends)
    for _ in range(len(transactions) + 1):
        changed = False
        for t in transactions:
            parts = [q for q in t.participants if q.partition in out]
            if t.complete:
                inside = [q for q in parts if 0 <= q.marker < out[q.partition]]
                if not inside or len(inside) == len(parts):
                    continue
            for q in parts:
                p, cap = q.partition, q.first_offset
                if cap >= 0 and out[p] > cap:
                    out[p] = cap
                    changed = True
        if not changed:
            break
    return out


async def _lso(node: ProducerSimNode) -> int:
    if not node.consensus.is_leader:
        raise RaftError(f"node {node.node_id} is not the leader")
    await node.rm.sync()
    return node.rm.last_stable_offset


async def _read_below(node: ProducerSimNode, end: int) -> list[RecordBatch]:
    """The committed, visible data batches below ``end``, from a node whose LSO reaches it."""
    rm, c = node.rm, node.consensus
    if rm.last_stable_offset < end:
        raise RaftError(f"node {node.node_id}: LSO {rm.last_stable_offset} is below {end}")
    raw = c.read(c.log.start_offset, _ALL, end - 1)
    return [b for b in rm.visible(raw) if b.last_offset < end and not b.is_control]


# -- the simulation --------------------------------------------------------------------------


class _Sim:
    def __init__(self, seed: int, config: CoordinatorSimConfig) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.n = self.rng.choice(config.nodes)
        drop = self.rng.choice([0.0, 0.0, 0.02, 0.05])
        options = sim_options()
        options.flush_latency_s = self.rng.choice([0.0, 0.002, 0.01])
        options.election_timeout_ticks = 5
        rm_config = RmStmConfig(
            transaction_timeout_ms=config.transaction_timeout_ms,
            sync_timeout_s=1.0,
            replicate_timeout_s=self.rng.choice([0.5, 2.0]),
            reorder_wait_s=0.0,
        )

        def net() -> NetworkOptions:
            return NetworkOptions(drop_rate=drop, rpc_timeout_s=0.2)

        self.partitions = [
            ProducerSimCluster(self.n, seed * 101 + p, rm_config, options=options, network=net())
            for p in range(config.partitions)
        ]
        self.winding_down = False
        self.markers = 0
        self.coordinator_crashes = 0
        self.coordinator = _TmCluster(
            self.n, seed * 101 + 99, config.mutation, self, options=options, network=net()
        )
        self.clusters: list[SimCluster] = [*self.partitions, self.coordinator]
        self.history = BatchHistory()
        self.target: dict[str, int] = {}  # per writer: the version to finish when winding down
        self.writers = [_Writer(self, i) for i in range(config.writers)]
        self.zombies = 0
        self.replays = 0
        self.refused = 0
        self.driver_errors: list[str] = []
        self.attempt_errors: list[str] = []

    async def _nemesis(self) -> None:
        rng = random.Random(self.seed * 13 + 5)
        background: list[asyncio.Task[None]] = []
        try:
            for _ in range(10_000):
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                cluster = rng.choice(self.clusters)
                await cluster.random_fault(rng, background, keep_majority=True)
        finally:
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def _resume_once(self) -> None:
        """The coordinator's leader resumes incomplete decisions, as a node's timer does."""
        leader = self.coordinator.leader()
        if leader is None:
            return
        task = leader.spawn(leader.txn.resume())
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), self.config.final_s)
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise asyncio.CancelledError

    async def _coordinator_timer(self) -> None:
        """The coordinator's own resume, on a timer (and so soon after each election)."""
        for _ in range(100_000):
            await asyncio.sleep(0.5)
            await self._resume_once()

    async def _reader(self, i: int) -> None:
        caller = Caller(random.Random(self.seed * 19 + i), self.config.request_timeout_s)
        rng = random.Random(self.seed * 23 + i)
        for _ in range(100_000):
            await asyncio.sleep(rng.uniform(0.05, 0.2))
            with contextlib.suppress(CoordinatorRefusedError):
                await _take_cut(self, caller, f"reader{i}")

    async def run(self) -> CoordinatorSeedResult:
        for c in self.clusters:
            await c.start()
        writers = [asyncio.create_task(w.run()) for w in self.writers]
        background = [
            asyncio.create_task(self._nemesis()),
            asyncio.create_task(self._coordinator_timer()),
            *(asyncio.create_task(self._reader(i)) for i in range(self.config.readers)),
        ]
        await asyncio.wait(writers, timeout=self.config.chaos_s)
        raise_failed(writers)
        # heal: no new faults or kills, every node up; drivers finish their version
        self.winding_down = True
        nemesis = background[0]
        nemesis.cancel()
        await asyncio.gather(nemesis, return_exceptions=True)
        for c in self.clusters:
            c.network.heal()
            c.network.options.drop_rate = 0.0
            for node in c.nodes.values():
                await node.restart()
        _, pending = await asyncio.wait(writers, timeout=self.config.final_s)
        raise_failed(writers)
        if pending:
            raise InvariantViolation(
                f"drivers did not finish after healing: {self.driver_errors[-3:]}"
            )
        # zombies write on for a while, then stop; the timeout aborts what they left open
        executors = [t for w in self.writers for t in w.executors]
        if executors:
            await asyncio.wait(executors, timeout=self.config.final_s)
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._settle()
        caller = Caller(random.Random(self.seed * 29), self.config.request_timeout_s)
        await _take_cut(self, caller, "final", final=True)
        committed = await self._committed(caller)
        report = check_batches(self.history, committed)
        for c in self.clusters:
            await c.stop()
        return self._result(report)

    async def _settle(self) -> None:
        """Wait (bounded) until no transaction is open on any partition and no decision is
        pending: the transaction timeout aborts what zombies and dead runs left open."""
        step = 0.1
        for _ in range(int(self.config.final_s / step)):
            await self._resume_once()
            leaders = [c.leader() for c in self.partitions]
            if all(
                leader is not None and not leader.rm.table.open_transactions() for leader in leaders
            ):
                return
            await asyncio.sleep(step)
        raise InvariantViolation(f"transactions still open {self.config.final_s}s after healing")

    async def _committed(self, caller: Caller) -> set[tuple[str, int]]:
        """Every (writer, version) the coordinator's final state holds committed."""
        out = set()
        for w in self.writers:
            described = await _at_coordinator(
                self, caller, operator.methodcaller("describe", w.writer_id), "describe"
            )
            out |= {(w.writer_id, v) for v in range(described.last_committed + 1)}
        return out

    def _result(self, report: BatchReport) -> CoordinatorSeedResult:
        attempts = [a for w in self.writers for a in w.attempts]
        return CoordinatorSeedResult(
            self.seed,
            report.ok,
            self.n,
            versions=report.versions_committed,
            runs=sum(w.runs for w in self.writers),
            crashes=sum(w.crashes for w in self.writers),
            attempts=len(attempts),
            zombies=self.zombies,
            replays=self.replays,
            refused=self.refused,
            aborts=sum(w.aborts for w in self.writers),
            cuts=report.cuts,
            anomalies={k: v for k, v in report.counts().items() if k in BATCH_KINDS and v},
            report="" if report.ok else report.render(),
            error="" if report.ok else f"seed {self.seed}: {report.render()}",
        )


def run_seed(seed: int, config: CoordinatorSimConfig | None = None) -> CoordinatorSeedResult:
    """Run one seeded history; never raises: a failure is in ``error`` or ``report``."""
    sim = _Sim(seed, config or CoordinatorSimConfig())
    return run_guarded(
        seed,
        sim.run(),
        "raftlog.sim.coordinator_model.run_seed",
        lambda error: CoordinatorSeedResult(seed, False, sim.n, error=error),
    )


def run_seeds(
    seeds: Iterable[int], config: CoordinatorSimConfig | None = None, processes: int = 1
) -> CoordinatorSummary:
    """Run many seeds (in ``processes`` worker processes when > 1)."""
    results = run_many(run_seed, seeds, config, processes, chunksize=8)
    failed = [r for r in results if not r.ok]
    anomalies: dict[str, int] = {}
    for r in results:
        for k, v in r.anomalies.items():
            anomalies[k] = anomalies.get(k, 0) + v
    return CoordinatorSummary(
        len(results),
        failed,
        sum(r.versions for r in results),
        sum(r.crashes for r in results),
        sum(r.cuts for r in results),
        anomalies,
    )


__all__ += ["TRANSACTIONS_TOPIC"]


def main(argv: list[str] | None = None) -> int:
    """``python -m raftlog.sim.coordinator_model --seeds 1000``: the long run; exit 1 on
    any failed seed or anomaly."""
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m raftlog.sim.coordinator_model")
    parser.add_argument("--seeds", type=int, default=1000, help="seeds 0..N-1 (default 1000)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.processes < 1:
        parser.error("--seeds and --processes must be >= 1")
    started = time.monotonic()
    s = run_seeds(range(args.seeds), processes=args.processes)
    took = time.monotonic() - started
    print(
        f"{s.seeds} seeds in {took:.0f} s ({s.seeds / took:.1f} seeds/s): "
        f"{s.versions} versions committed, {s.crashes} driver kills, {s.cuts} cuts; "
        f"failed {[r.seed for r in s.failed]}, anomalies {s.anomalies or 'none'}"
    )
    if s.failed:
        print(s.failed[0].error)
    return 1 if s.failed or s.anomalies else 0


if __name__ == "__main__":
    raise SystemExit(main())
