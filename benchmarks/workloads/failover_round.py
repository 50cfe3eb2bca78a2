"""One failover round: under load, kill -9 a partition's leader; time the first
acknowledged write on the new leader; restart the killed node and wait for it
to catch up. Used by the ``failover`` scenario.

Before the load starts, the round waits until the partition's preferred replica
leads again: a node restarted by the previous round takes its leadership back
once it has caught up, and a round that killed the old leader just after that
hand-over measured nothing (5 ms "failovers" in every other round). The leader
is named again just before the kill.

The clock starts just before SIGKILL. Only acknowledgements that complete
after the killed PID is confirmed gone count, so none of them can have come
from the old leader; a write that was retried inside the client and then
acknowledged by the new leader counts, as it would for a user.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from typing import Any

from benchmarks.workloads import raftlog_local

WORKERS = 4
WARMUP_ACKS = 5
WARMUP_TIMEOUT_S = 20.0
RECOVERY_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 20.0
"""How long a round waits for the preferred replica to lead (it goes on regardless)."""
BEFORE_KILL_S = 1.0
AFTER_RECOVERY_S = 1.0
"""Load runs this long before the kill and after the first new ack, so that the
throughput-over-time plot shows the steady state on both sides of the gap."""
FLUSHED_GAUGE = "raftlog_group_flushed_offset"


@dataclasses.dataclass
class Round:
    killed: int
    recovery_s: float | None
    """None when no write was acknowledged within the bound."""
    new_leader: int
    errors: int
    ack_times: list[float] = dataclasses.field(default_factory=list)
    """When each write was acknowledged, in seconds from SIGKILL (negative: before)."""


def flushed_offset(address: str, node_id: int, topic: str, partition: int) -> float | None:
    """The node's flushed offset of ``topic``/``partition`` from its /metrics."""
    want = (f'node="{node_id}"', f'partition="{partition}"', f'topic="{topic}"')
    for line in raftlog_local.scrape(address).splitlines():
        if line.startswith(FLUSHED_GAUGE + "{") and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return None


async def _bounded_wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s} s")
        await asyncio.sleep(0.05)


async def run_round(cluster: Any, topic: str, meta: Any, pool: Any) -> Round:
    """Kill partition 0's leader of ``topic`` under load and measure; ``meta`` is a
    client for metadata, ``pool`` a :class:`raftlog_local.ClientPool` of WORKERS."""
    from raftlog.cluster import restart_node, stop_node

    payload = os.urandom(100)
    done: list[float] = []
    errors = 0
    stop = asyncio.Event()
    hard_deadline = (
        time.monotonic()
        + WARMUP_TIMEOUT_S
        + RECOVERY_TIMEOUT_S
        + BEFORE_KILL_S
        + AFTER_RECOVERY_S
        + 10
    )

    async def worker(index: int) -> None:
        nonlocal errors
        while not stop.is_set() and time.monotonic() < hard_deadline:
            try:
                await pool.for_worker(index).produce(topic, 0, [(payload, 1)], acks="all")
                done.append(time.monotonic())
            except Exception:  # expected while the leader is down; counted
                errors += 1
                await asyncio.sleep(0.01)

    await _preferred_leads(meta, topic)
    tasks = [asyncio.create_task(worker(i)) for i in range(WORKERS)]
    try:

        async def warmed_up() -> bool:
            return len(done) >= WARMUP_ACKS

        await _bounded_wait(warmed_up, WARMUP_TIMEOUT_S, "no write was acknowledged")
        await asyncio.sleep(BEFORE_KILL_S)
        leader = (await raftlog_local.wait_leaders(meta, topic))[0]
        node = cluster.node(leader)
        t_kill = time.monotonic()
        # stop_node signals the recorded PID (after checking it is still that node) and
        # polls until it is gone; in a thread so that the load keeps running meanwhile.
        await asyncio.to_thread(stop_node, node, signal.SIGKILL, 5.0)
        t_dead = time.monotonic()

        async def acknowledged() -> bool:
            return any(t > t_dead for t in done)

        recovery: float | None
        try:
            await _bounded_wait(acknowledged, RECOVERY_TIMEOUT_S, "no write acknowledged")
            recovery = min(t for t in done if t > t_dead) - t_kill
            await asyncio.sleep(AFTER_RECOVERY_S)
        except TimeoutError:
            recovery = None
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    new_leader = (await raftlog_local.wait_leaders(meta, topic))[0]
    await asyncio.to_thread(restart_node, cluster, leader)
    await _catch_up(cluster, topic, meta, leader)
    return Round(leader, recovery, new_leader, errors, [t - t_kill for t in done])


async def _preferred_leads(meta: Any, topic: str) -> None:
    """Wait (bounded) until partition 0's preferred replica, the first of its
    replicas, is its leader; past the bound the round goes on regardless."""

    async def preferred_leads() -> bool:
        partition = (await meta.describe_topic(topic)).partitions[0]
        return bool(partition.replicas) and partition.leader == partition.replicas[0]

    with contextlib.suppress(TimeoutError):
        await _bounded_wait(preferred_leads, SETTLE_TIMEOUT_S, "the preferred replica leads")


async def _catch_up(cluster: Any, topic: str, meta: Any, node_id: int) -> None:
    """Wait until the restarted node has flushed what the partition had committed."""
    _, high_watermark, _ = await meta.list_offsets(topic, 0)
    address = cluster.node(node_id).address

    async def caught_up() -> bool:
        flushed = await asyncio.to_thread(flushed_offset, address, node_id, topic, 0)
        return flushed is not None and flushed >= high_watermark - 1

    await _bounded_wait(caught_up, CATCH_UP_TIMEOUT_S, f"node {node_id} did not catch up")
