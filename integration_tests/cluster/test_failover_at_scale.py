"""Failover at scale (issue 47, item 4): kill -9 the node leading a third of 3,000 partitions.

A 3-node cluster gets 3,000 partitions (30 topics of 100, replication factor 3),
created through the controller in batches; every partition gets a leader and the
leaderships settle. Then:

- 100 random partitions each get an idempotent producer writing unique values;
- the node leading the most partitions (about a third) is killed with SIGKILL (by
  PID, through the cluster handle) while they write;
- **re-election, per partition**: from the kill, both live nodes are asked for their
  metadata every ``POLL_S`` (each node answers from its own replicas; a new leader
  reports itself, and when it took over, at once). A partition the dead node led is
  timed from the kill to the moment its new leader took over, by that leader's own
  clock (``partition_scale.reelection_times``; one machine, one clock). p99 over
  those partitions must be at most ``FAILOVER_P99_S`` (15 s; the issue's goal, 5 s, is
  printed and is the benchmark's), and
  every partition must be led again;
- **exactly once**: every write acknowledged during it reads back exactly once, in
  the order written, and no value appears twice in any of the 100 partitions;
- **rebalance**: the dead node is restarted; the leaderships move back (each node's
  balance loop hands a partition to its preferred replica, and the controller's
  leader balancer evens the counts) until it leads at least
  ``REBALANCED_SHARE`` of a third of the partitions.

Figures (creation time, re-election p50/p99/max, rebalance time) are printed.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle
from benchmarks.workloads.latency import quantile
from benchmarks.workloads.partition_scale import (
    create_partitions,
    leaders,
    reelection_times,
    settled_leaders,
    wait_all_led,
)
from raftlog.client import RaftlogClient

# In the default run since 2026-12-03 (about 2 minutes). Its history (a creation that
# stalled at 1,300 partitions, re-elections of p99 258 s, then 42 s, then 5-13 s) is in
# docs/operations.md, "Failover at 3,000". The goal, p99 <= 5 s, is reported
# by the benchmark (`python -m benchmarks partitions`) and printed here; what the test
# asserts is the bound that every run on the 2-core machine kept (p99 5.2-10.1 s over
# the last ten runs), so that a regression to the waves of before (tens of seconds)
# fails CI while the machine's run-to-run spread does not.
pytestmark = pytest.mark.scale

PARTITIONS = 3000
PREFIX = "scale"
WRITERS = 100
FAILOVER_GOAL_P99_S = 5.0  # issue 47's goal: printed, and the benchmark's
FAILOVER_P99_S = 15.0  # asserted (see above)
FAILOVER_BOUND_S = 300.0  # every partition led again by then (a wait; p99 is asserted)
# Creation on the shared 2-core machine (load average 15-25 from other work) took
# about 16 min; a bound on waiting, not a figure this test asserts.
CREATE_BOUND_S = 1800.0
SETTLE_BOUND_S = 60.0
REBALANCE_BOUND_S = 300.0
REBALANCED_SHARE = 0.9
WRITE_GAP_S = 0.05
WRITERS_START_S = 120.0


class Writer:
    """One partition's idempotent producer: unique values, one in flight at a time."""

    def __init__(self, client: RaftlogClient, topic: str, partition: int) -> None:
        self.client, self.topic, self.partition = client, topic, partition
        self.acked: list[bytes] = []
        self.errors: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        producer = await self.client.idempotent_producer(
            self.topic, self.partition, delivery_timeout_s=FAILOVER_BOUND_S
        )
        try:
            k = 0
            while not stop.is_set():
                value = f"{self.topic}/{self.partition}/{k}".encode()
                try:
                    await producer.send_batch(value, 1)
                except Exception as exc:  # the producer is fatal now: count, stop
                    self.errors.append(repr(exc))
                    return
                self.acked.append(value)
                k += 1
                await asyncio.sleep(WRITE_GAP_S)
        finally:
            await producer.close(flush=False)

    async def read_back(self) -> list[bytes]:
        out: list[bytes] = []
        offset = 0
        for _ in range(10_000):  # bounded: far more batches than written
            got = await self.client.fetch(self.topic, self.partition, offset)
            if not got.batches:
                return out
            out.extend(b.payload for b in got.batches)
            offset = got.next_offset
        raise AssertionError(f"{self.topic}/{self.partition}: read back did not end")


@pytest.mark.timeout(CREATE_BOUND_S + SETTLE_BOUND_S + FAILOVER_BOUND_S + REBALANCE_BOUND_S + 300)
async def test_kill_the_node_leading_a_third_of_3000_partitions(
    fresh_cluster: ClusterHandle,
) -> None:
    cluster = fresh_cluster
    rng = random.Random(47)
    started = time.monotonic()
    async with RaftlogClient(cluster.servers, request_timeout_s=60.0) as client:
        await create_partitions(client, PREFIX, 0, PARTITIONS)
        await wait_all_led(client, PREFIX, PARTITIONS, CREATE_BOUND_S)
        created_s = time.monotonic() - started
        before = await settled_leaders(client, PREFIX, PARTITIONS, SETTLE_BOUND_S)
    counts = Counter(before.values())
    victim, led = counts.most_common(1)[0]
    print(f"{PARTITIONS} partitions created and led in {created_s:.1f} s; leaders {counts}")
    assert led >= PARTITIONS // 3, counts
    led_by_victim = {k for k, v in before.items() if v == victim}
    live = [n for n in (1, 2, 3) if n != victim]

    live_servers = [cluster.address(n) for n in live]
    async with (
        RaftlogClient(live_servers, request_timeout_s=60.0) as wclient,
        RaftlogClient(live_servers, request_timeout_s=10.0) as poller,
    ):
        targets = rng.sample(sorted(before), WRITERS)
        writers = [Writer(wclient, topic, part) for topic, part in targets]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.run(stop)) for w in writers]
        try:
            # every writer acknowledged once (its session opened) before the kill
            for _ in range(int(WRITERS_START_S / 0.5)):
                if all(w.acked for w in writers):
                    break
                await asyncio.sleep(0.5)
            started_writers = sum(1 for w in writers if w.acked)
            assert started_writers == WRITERS, f"{started_writers} writers wrote before the kill"
            killed = time.time()
            cluster.kill(victim, signal.SIGKILL)
            found = await reelection_times(
                poller, live_servers, PREFIX, led_by_victim, victim, killed, FAILOVER_BOUND_S
            )
            times = found.elected
            await asyncio.sleep(3.0)  # writes go on through the new leaders
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 180.0)
        missing = led_by_victim - set(times)
        # a partition not led again counts as the whole bound (p99 never understated)
        values = list(times.values()) + [FAILOVER_BOUND_S] * len(missing)
        p50, p99 = quantile(values, 50.0), quantile(values, 99.0)
        seen = list(found.seen.values()) + [FAILOVER_BOUND_S] * len(missing)
        print(
            f"kill -9 of node {victim} (leading {len(led_by_victim)}): re-elected "
            f"{len(times)} partitions, p50 {p50:.2f} s, p99 {p99:.2f} s, "
            f"max {max(values, default=0.0):.2f} s (by the new leaders' clocks; first "
            f"seen by a poll: p99 {quantile(seen, 99.0):.2f} s); "
            f"{len(missing)} not led within {FAILOVER_BOUND_S} s; the goal p99 <= "
            f"{FAILOVER_GOAL_P99_S} s {'met' if p99 <= FAILOVER_GOAL_P99_S else 'not met'}"
        )
        # Availability failures are collected, so that one run measures everything (the
        # rebalance too) before the test fails on them; exactly-once fails at once.
        failures: list[str] = []
        if missing:
            failures.append(f"{len(missing)} partitions not led again within {FAILOVER_BOUND_S} s")
        errors = [w.errors for w in writers if w.errors]
        if errors:
            failures.append(f"{len(errors)} writers stopped: {errors[0]}")

        # Exactly once: every acknowledged write once, in order; nothing twice.
        acked = 0
        for w in writers:
            got = await w.read_back()
            dupes = [v for v, n in Counter(got).items() if n > 1]
            assert not dupes, f"{w.topic}/{w.partition}: duplicated {dupes[:3]}"
            assert got[: len(w.acked)] == w.acked, f"{w.topic}/{w.partition}: lost or reordered"
            # a write not acknowledged (the stop) may have landed, as the last one only
            assert len(got) - len(w.acked) <= 1, f"{w.topic}/{w.partition}: extra {got[-3:]}"
            acked += len(w.acked)
        print(f"{acked} writes to {WRITERS} partitions acknowledged and read back once each")
        if p99 > FAILOVER_P99_S:
            failures.append(f"re-election p99 {p99:.2f} s > {FAILOVER_P99_S} s")

    # Rebalance: the node comes back and leads its share again.
    cluster.restart(victim)
    back = time.monotonic()
    share = 0
    async with RaftlogClient(cluster.servers, request_timeout_s=30.0) as client:
        while time.monotonic() - back < REBALANCE_BOUND_S:
            await asyncio.sleep(2.0)
            try:
                share = Counter((await leaders(client, PREFIX)).values())[victim]
            except Exception:  # the node starting up: ask again
                continue
            if share >= REBALANCED_SHARE * PARTITIONS / 3:
                break
    took = time.monotonic() - back
    print(f"node {victim} back: leads {share} partitions after {took:.1f} s")
    if share < REBALANCED_SHARE * PARTITIONS / 3:
        failures.append(f"node {victim} leads {share} partitions {took:.0f} s after its restart")
    print(f"test wall time {time.monotonic() - started:.1f} s")
    assert not failures, "; ".join(failures)
