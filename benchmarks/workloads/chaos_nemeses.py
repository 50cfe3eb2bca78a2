"""The nemeses of ``python -m benchmarks chaos``, one round each, and a round's runner.

A round creates a fresh topic, starts a bounded :class:`Workload` of idempotent
producers (through the proxy's client links), lets a quarter of the writes land,
runs one nemesis while more writes are released, heals everything (links, frozen
and dead nodes), waits for every producer to be acknowledged, reads every
partition back and runs the checker. The nemeses are those of the integration
tests in ``integration_tests/nemesis/``:

- ``kill``: kill -9 of partition 0's leader, chased ``chase`` times in a row;
- ``sigstop``: SIGSTOP of the leader past the election timeout, then SIGCONT;
- ``partition``: the leader isolated in a minority of one (refused connections),
  or a follower split from the majority (blackholed), at random;
- ``drop``: responses dropped on the client link to the leader (writes land,
  clients time out and retry);
- ``crash``: a node restarted with ``RAFTLOG_FAILPOINTS=log.before_flush=crash@K``
  (a power cut at its K-th flush: every log cut to its flushed offset);
- ``torn``: a stopped node's partition log loses the last bytes of its last
  segment (half a batch).

Every wait is bounded by a deadline and an iteration count.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import random
import signal
import time
from collections.abc import Awaitable, Callable

from benchmarks.workloads.nemesis_cluster import NODES, ProxiedCluster
from benchmarks.workloads.nemesis_workload import Workload
from raftlog.checker import Report
from raftlog.faults.crash import has_segment, tear_tail
from raftlog.faults.failpoints import ENV_VAR, LOG_BEFORE_FLUSH

PRODUCERS_PER_PARTITION = 2
PARTITIONS = 2
ELECTION_TIMEOUT_S = 0.5  # ConsensusOptions: 10 ticks of 50 ms

Nemesis = Callable[[ProxiedCluster, Workload, random.Random, "RoundPlan"], Awaitable[str]]


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """Sizes of one round: batches per producer, and leader kills per ``kill`` round."""

    batches: int
    chase: int

    def step(self, fraction: float) -> int:
        """Batches per producer released once ``fraction`` of the round is written."""
        return max(1, min(self.batches, round(self.batches * fraction)))

    def acked(self, fraction: float) -> int:
        """Batches acknowledged in all at ``fraction``."""
        return self.step(fraction) * PARTITIONS * PRODUCERS_PER_PARTITION


@dataclasses.dataclass
class RoundResult:
    nemesis: str
    topic: str
    detail: str
    report: Report
    seconds: float
    expected: int  # values the producers wrote (each acknowledged once the round completed)
    error: str | None = None  # the round did not complete (liveness), e.g. producers stuck


async def _kill(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    victims = []
    for i in range(plan.chase):
        leader = await w.leader(0, alive=c.alive)
        await asyncio.to_thread(c.kill, leader, signal.SIGKILL)
        victims.append(leader)
        fraction = 0.25 + 0.5 * (i + 1) / plan.chase
        w.release(plan.step(fraction))
        await w.leader(0, exclude=leader, alive=c.alive)
        await asyncio.to_thread(c.restart, leader)
        await w.wait_acked(plan.acked(fraction))
    return f"killed leaders of partition 0: {victims}"


async def _sigstop(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    old = await w.leader(0, alive=c.alive)
    pid = c.pid(old)
    os.kill(pid, signal.SIGSTOP)
    try:
        w.release(plan.step(0.6))
        new = await w.leader(0, exclude=old)
        await w.wait_acked(plan.acked(0.6))
        await asyncio.sleep(rng.uniform(2, 4) * ELECTION_TIMEOUT_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    return f"froze leader {old}; node {new} took over"


async def _partition(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    leader = await w.leader(0, alive=c.alive)
    if rng.random() < 0.5:
        minority, blackhole, what = leader, False, "isolated leader"
    else:
        minority = rng.choice([n for n in NODES if n != leader])
        blackhole, what = True, "blackholed follower"
    majority = set(NODES) - {minority}
    for link in c.links_between({minority}, majority):
        await asyncio.to_thread(c.proxy.cut, link, blackhole=blackhole)
    try:
        w.release(plan.step(0.6))
        for p in range(PARTITIONS):
            await w.leader(p, exclude=minority)
        await w.wait_acked(plan.acked(0.6))
    finally:
        await asyncio.to_thread(c.proxy.heal)
    return f"{what} {minority} cut from {sorted(majority)} (leader of partition 0: {leader})"


async def _drop(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    leader = await w.leader(0, alive=c.alive)
    await asyncio.to_thread(c.proxy.drop_responses, f"c-{leader}")
    unknown = 0
    try:
        w.release(plan.step(0.4))
        deadline = time.monotonic() + 15.0
        for _ in range(300):
            unknown = sum(
                1
                for op in w.history.operations
                if op.partition == 0 and op.outcome.value == "unknown"
            )
            if unknown >= 2 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        await asyncio.to_thread(c.proxy.heal)
    return f"dropped responses of leader {leader}: {unknown} writes timed out"


async def _crash(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    victim = rng.choice(NODES)
    at = rng.randint(5, 30)
    await asyncio.to_thread(c.kill, victim, signal.SIGKILL)
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = f"{LOG_BEFORE_FLUSH}=crash@{at}"
    try:
        await asyncio.to_thread(c.restart, victim)
    finally:
        if previous is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = previous
    fired = False
    deadline = time.monotonic() + 30.0
    fraction = 0.25
    for _ in range(600):
        if not c.alive(victim):
            fired = True
            break
        if time.monotonic() > deadline:
            break
        fraction = min(0.9, fraction + 0.02)
        w.release(plan.step(fraction))  # keep writes (and so flushes) coming
        await asyncio.sleep(0.1)
    if not fired:  # the workload ran out before the K-th flush: stop it the plain way
        await asyncio.to_thread(c.kill, victim, signal.SIGKILL)
    acked = w.acked
    await asyncio.to_thread(c.restart, victim)
    how = "crashed" if fired else "did not reach (killed instead)"
    return f"node {victim} {how} at its flush #{at} with {acked} batches acknowledged"


_TORN_WAIT_STEPS = 300
"""Tenths of a second the torn nemesis waits for its victim's log of the round's topic
(a segment in it)."""


async def _torn(c: ProxiedCluster, w: Workload, rng: random.Random, plan: RoundPlan) -> str:
    victim = rng.choice(NODES)
    partition = rng.randrange(PARTITIONS)
    nbytes = rng.randint(1, 40)
    log_dir = c.data_dir / f"node-{victim}" / "partitions" / w.topic / str(partition)
    # The round's topic has leaders once two replicas serve; a victim restarted by the
    # round before creates its replica when it catches up with the controller.
    # Its directory comes before its first segment: wait for the segment (a full run
    # tore an empty directory once: "holds no segment to tear").
    for _ in range(_TORN_WAIT_STEPS):
        if has_segment(log_dir):
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(
            f"node {victim} has no log of {w.topic}/{partition} "
            f"{_TORN_WAIT_STEPS / 10:g} s into the round: it never created its replica"
        )
    await asyncio.to_thread(c.kill, victim, signal.SIGKILL)
    cut = await asyncio.to_thread(tear_tail, log_dir, nbytes)
    w.release(plan.step(0.6))  # written while it is down
    await w.wait_acked(plan.acked(0.6))
    await asyncio.to_thread(c.restart, victim)
    return (
        f"tore {nbytes} bytes off node {victim}'s {w.topic}/{partition} "
        f"(last whole batch {cut.last_offset})"
    )


NEMESES: dict[str, Nemesis] = {
    "kill": _kill,
    "sigstop": _sigstop,
    "partition": _partition,
    "drop": _drop,
    "crash": _crash,
    "torn": _torn,
}


async def run_round(
    c: ProxiedCluster,
    nemesis: str,
    index: int,
    plan: RoundPlan,
    rng: random.Random,
    history_dir: pathlib.Path,
) -> RoundResult:
    """One round of ``nemesis`` on a fresh topic (see the module doc)."""
    topic = f"chaos-{index}-{nemesis}"
    start = time.monotonic()
    error: str | None = None
    detail = ""
    async with Workload(
        c.servers,
        history_dir / f"{topic}.jsonl",
        topic=topic,
        partitions=PARTITIONS,
        producers_per_partition=PRODUCERS_PER_PARTITION,
        batches=plan.batches,
        pace_s=0.0,
        address_map=c.client_map,
    ) as w:
        await w.setup()
        w.start()
        try:
            w.release(plan.step(0.25))
            await w.wait_acked(plan.acked(0.25))
            detail = await NEMESES[nemesis](c, w, rng, plan)
        except AssertionError as exc:  # a bounded wait ran out during the fault
            error = f"during the nemesis: {exc}"
        finally:
            await asyncio.to_thread(c.heal_all)
        try:
            await w.finish()
        except AssertionError as exc:
            error = (error + "; " if error else "") + f"after healing: {exc}"
        await w.final_read()
        report = w.check()
    seconds = time.monotonic() - start
    return RoundResult(nemesis, topic, detail, report, seconds, w.total_batches, error)


@contextlib.contextmanager
def no_failpoints() -> object:
    """Keep a failpoint of the caller's environment from reaching the nodes."""
    previous = os.environ.pop(ENV_VAR, None)
    try:
        yield
    finally:
        if previous is not None:
            os.environ[ENV_VAR] = previous
