"""Whole-cluster power loss: the simulation on the real on-disk log over a page-cache model.

Every node keeps its group's log as a real :class:`SegmentedLog` (segments,
indexes, vote and commit context records) on one shared
:class:`~raftlog.storage.fs.ModelFileSystem` (one directory per node). Two
kinds of crash:

- a *process* crash of one node (:meth:`DiskSimNode.crash`): its tasks die and
  its log is closed, but the page cache survives, as with ``kill -9``; the
  restart reopens and recovers the log;
- a *power cut* of every node at once (:func:`power_cut`): every node dies,
  then the model keeps only what was durable plus a seeded prefix of the rest
  (torn sectors included), and every node recovers from that.

The run is otherwise the seeded simulator's (a client writing at every
consistency level, partitions, drops, transfers, step-downs, single crashes),
with the invariants of :class:`~raftlog.sim.checks.InvariantChecker` checked
every step: above all, no ``quorum_ack`` entry is ever lost, which holds only
if every acknowledged flush really was durable on a majority.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import random
import traceback
from collections.abc import Iterable

from raftlog.raft.errors import RaftError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.sim.checks import InvariantChecker
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.loop import run_many, run_virtual
from raftlog.sim.network import NetworkOptions
from raftlog.sim.node import GROUP, SimNode
from raftlog.storage.batch import RecordBatch
from raftlog.storage.fs import ModelFileSystem
from raftlog.storage.log import SegmentedLog

_CONSISTENCIES = [Consistency.QUORUM_ACK] * 3 + [Consistency.LEADER_ACK, Consistency.NO_ACK]
SEGMENT_BYTES = 2048  # small: many rolls, seals and segment deletions per run
INDEX_INTERVAL_BYTES = 256


class DiskSimNode(SimNode):
    """A :class:`SimNode` whose log is a :class:`SegmentedLog` on the shared model disk."""

    def __init__(self, node: SimNode, fs: ModelFileSystem) -> None:
        super().__init__(
            node.node_id,
            node.network,
            node.configuration,
            node.options,
            node.heartbeat_interval_s,
            node.seed,
        )
        self.fs = fs
        self.directory = pathlib.Path(f"/node-{node.node_id}/group-{GROUP}")
        # SimNode types its log as the MemoryLog it makes; this node's is on disk
        self.log = self._open()  # type: ignore[assignment]
        self._log_open = True
        self.recoveries = 0

    def _open(self) -> SegmentedLog:
        return SegmentedLog.open(
            self.directory,
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=INDEX_INTERVAL_BYTES,
            fs=self.fs,
        )

    async def start(self) -> None:
        if not self._log_open:
            self.log = self._open()  # type: ignore[assignment]
            self._log_open = True
            self.recoveries += 1
            report = self.log.recovery_report
            if report.lost_committed_suffix:
                raise AssertionError(
                    f"node {self.node_id}: recovery lost a committed suffix: {report.warnings}"
                )
        await super().start()

    def crash(self, keep_unflushed: int = 0) -> None:
        """A process crash: everything stops, the page cache (the model's written state) stays."""
        if not self.alive:
            return
        self.alive = False
        self.network.detach(self.node_id)
        self.consensus.kill()
        self.heartbeats.kill()
        for t in list(self._tasks):
            t.cancel()
        self.log.close()
        self._log_open = False
        self.incarnation += 1


def power_cut(cluster: SimCluster, fs: ModelFileSystem, seed: int) -> None:
    """Cut the power of every node at once: each dies, and only durable data survives."""
    for node in cluster.nodes.values():
        node.crash()
        if isinstance(node, DiskSimNode) and node._log_open:  # already down: close now
            node.log.close()
            node._log_open = False
    fs.crash(seed)


@dataclasses.dataclass(frozen=True, slots=True)
class PowerResult:
    seed: int
    ok: bool
    nodes: int
    acked: int
    power_cuts: int
    checks: int
    error: str = ""


class _PowerSim:
    def __init__(self, seed: int, chaos_s: float, final_s: float) -> None:
        self.seed = seed
        self.chaos_s = chaos_s
        self.final_s = final_s
        self.rng = random.Random(seed)
        self.n = self.rng.choice((3, 5))
        options = sim_options()
        options.flush_latency_s = self.rng.choice([0.0, 0.002, 0.01])
        options.election_timeout_ticks = 5
        drop = self.rng.choice([0.0, 0.0, 0.05])
        self.cluster = SimCluster(
            self.n, seed, options, network=NetworkOptions(drop_rate=drop, rpc_timeout_s=0.2)
        )
        self.fs = ModelFileSystem()
        self.cluster.nodes = {
            i: DiskSimNode(node, self.fs) for i, node in self.cluster.nodes.items()
        }
        self.checker = InvariantChecker()
        self.stop = False
        self.power_cuts = 0
        self.background: list[asyncio.Task[None]] = []

    async def run(self) -> PowerResult:
        cluster = self.cluster
        await cluster.start()
        checker_task = asyncio.create_task(self._checker())
        tasks = [asyncio.create_task(self._client(i)) for i in range(2)]
        tasks.append(asyncio.create_task(self._nemesis()))
        await asyncio.wait([checker_task], timeout=self.chaos_s)
        self.stop = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if checker_task.done():
            checker_task.result()
        # One last power cut of everything, then heal and restart: nothing acked is lost.
        power_cut(cluster, self.fs, self.seed * 7919 + 1)
        self.power_cuts += 1
        cluster.network.heal()
        cluster.network.options.drop_rate = 0.0
        for node in cluster.nodes.values():
            await node.restart()
        await self._final_write()
        self.checker.check(list(cluster.nodes.values()))
        if checker_task.done():
            checker_task.result()
        checker_task.cancel()
        await asyncio.gather(checker_task, return_exceptions=True)
        self.checker.check_all_acked_committed()
        await cluster.stop()
        for node in cluster.nodes.values():
            node.log.close()
        return PowerResult(
            self.seed, True, self.n, len(self.checker.acked), self.power_cuts, self.checker.checks
        )

    async def _final_write(self) -> None:
        final = RecordBatch.create(b"final", timestamp_ms=0)
        last_error: BaseException | None = None
        for _ in range(20):
            await asyncio.sleep(self.cluster.options.tick_interval_s)
            leader = await self.cluster.wait_for_leader(self.final_s)
            try:
                result = await asyncio.wait_for(
                    leader.consensus.replicate([final]).finished, self.final_s
                )
            except (RaftError, TimeoutError) as exc:
                last_error = exc
                continue
            self.checker.record_ack(result, final)
            return
        raise AssertionError(f"no final write committed after the power came back: {last_error!r}")

    async def _checker(self) -> None:
        for _ in range(10_000_000):
            self.checker.check(list(self.cluster.nodes.values()))
            await asyncio.sleep(0.01)

    async def _client(self, client: int) -> None:
        rng = random.Random(self.seed * 7 + client)
        for i in range(100_000):
            await asyncio.sleep(rng.uniform(0.005, 0.05))
            if self.stop:
                return
            leader = self.cluster.leader()
            if leader is None:
                continue
            consistency = rng.choice(_CONSISTENCIES)
            batch = RecordBatch.create(
                f"{self.seed}:{client}:{i}".encode() * rng.randint(1, 20),
                rng.randint(1, 3),
                timestamp_ms=0,
            )
            try:
                stages = leader.consensus.replicate([batch], consistency)
                result = await asyncio.wait_for(stages.finished, 2.0)
            except (RaftError, TimeoutError):
                continue
            if consistency is Consistency.QUORUM_ACK:
                self.checker.record_ack(result, batch)

    async def _nemesis(self) -> None:
        rng = random.Random(self.seed * 13 + 5)
        for _ in range(10_000):
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            if self.stop:
                return
            if rng.random() < 0.15:
                power_cut(self.cluster, self.fs, rng.randrange(1 << 30))
                self.power_cuts += 1
                for node in self.cluster.nodes.values():  # the power comes back
                    await node.restart()
            else:
                await self.cluster.random_fault(rng, self.background)


def run_power_seed(seed: int, chaos_s: float = 2.0, final_s: float = 15.0) -> PowerResult:
    """One seeded history with whole-cluster power cuts; never raises (see ``error``)."""
    sim = _PowerSim(seed, chaos_s, final_s)
    try:
        return run_virtual(sim.run())
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return PowerResult(
            seed,
            False,
            sim.n,
            len(sim.checker.acked),
            sim.power_cuts,
            sim.checker.checks,
            f"seed {seed} failed (replay: raftlog.sim.power.run_power_seed({seed})): "
            + "".join(traceback.format_exception(exc)),
        )


def _run(seed: int, _config: object) -> PowerResult:
    return run_power_seed(seed)


def run_power_seeds(seeds: Iterable[int], processes: int = 1) -> list[PowerResult]:
    """Run many seeds (in ``processes`` worker processes when > 1)."""
    return run_many(_run, seeds, None, processes, chunksize=16)
