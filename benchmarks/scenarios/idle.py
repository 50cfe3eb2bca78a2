"""Scenario ``idle``: what a cluster costs while nobody writes, by partition count.

Kafka and Redpanda users keep hundreds or thousands of partitions, most of them
idle at any moment. Each partition here is a Raft group with its own ticks and
heartbeats (an idle follower gets one every ``idle_heartbeat_ticks``), so an idle
cluster's CPU grows with its partitions. A 3-node local cluster gets topics of
``TOPIC_PARTITIONS`` partitions (3 replicas each) in steps; after each step every
partition has a leader, the groups settle (and, where the nodes quiesce idle
groups, until they report them quiescent: ``s to quiesce``), and then the nodes' CPU (user +
system of every process of every node, from ``/proc``) is measured over a window
in which no client calls. Local cluster only: it reads the nodes' CPU by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import urllib.request
from typing import Any

from benchmarks.context import RunContext
from benchmarks.registry import Row, Skip, scenario
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.process_cpu import tree_cpu_seconds

TOPIC_PARTITIONS = 30
FULL_STEPS, QUICK_STEPS = (0, 150, 450), (0, 30)
"""Partition counts measured, in increasing order, each a multiple of TOPIC_PARTITIONS."""
FULL_WINDOW_S, QUICK_WINDOW_S = 10, 3
SETTLE_S = 3.0
"""After the last leader is elected: the commit index reaches every follower, whose
groups only then count as idle."""
QUIESCE_WAIT_S = 120.0
"""Then, on nodes that quiesce idle groups, until each node has ticked at most
QUIESCE_SLACK groups (the controller's and a few stragglers) for QUIESCE_QUIET
checks a second apart (the leader balancer's moves after a creation wake groups
for a while), or this long."""
QUIESCE_SLACK = 5
QUIESCE_QUIET = 5


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--idle-seconds", type=int, default=None, help="CPU window per partition count"
    )
    group.add_argument(
        "--partitions",
        type=_steps,
        default=None,
        help="the partition counts to measure, comma-separated, increasing, each a "
        f"multiple of {TOPIC_PARTITIONS} (default 0,150,450; quick 0,30)",
    )


def _steps(text: str) -> tuple[int, ...]:
    """``--partitions``: "0,150,1500" -> (0, 150, 1500); ValueError names the option."""
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--partitions: expected counts like 0,150,1500, got {text!r}"
        ) from None
    if (
        not steps
        or any(n < 0 or n % TOPIC_PARTITIONS for n in steps)
        or list(steps) != sorted(set(steps))
    ):
        raise argparse.ArgumentTypeError(
            f"--partitions: expected increasing multiples of {TOPIC_PARTITIONS}, got {text!r}"
        )
    return steps


async def _grow(client: Any, have: int, want: int) -> int:
    """Create topics of TOPIC_PARTITIONS partitions until ``want``; the count now."""
    while have < want:
        name = f"bench-idle-{have // TOPIC_PARTITIONS}"
        await raftlog_local.create_topic(client, name, TOPIC_PARTITIONS)
        have += TOPIC_PARTITIONS
    return have


def _active_groups(address: str) -> float | None:
    """A node's raftlog_raft_active_groups (None when it exports none: no quiescence)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("raftlog_raft_active_groups{"):
                return float(line.rsplit(" ", 1)[1])
    return None


async def _quiesced(servers: list[str]) -> float:
    """Wait until every node has ticked at most QUIESCE_SLACK groups for QUIESCE_QUIET
    checks in a row (bounded by QUIESCE_WAIT_S); the seconds waited."""
    start = time.monotonic()
    quiet = 0
    while time.monotonic() - start < QUIESCE_WAIT_S and quiet < QUIESCE_QUIET:
        try:
            active = [await asyncio.to_thread(_active_groups, a) for a in servers]
        except OSError:  # a node too busy to render /metrics in time: not settled yet
            await asyncio.sleep(1.0)
            continue
        if any(a is None for a in active):
            break  # nodes that do not quiesce: the settle above is all there is
        quiet = quiet + 1 if all(a <= QUIESCE_SLACK for a in active) else 0
        await asyncio.sleep(1.0)
    return time.monotonic() - start


async def _cores(pids: list[int], window_s: float) -> float:
    """Cores the processes ``pids`` (and their children) used over ``window_s``."""
    start_cpu, start = tree_cpu_seconds(pids), time.monotonic()
    await asyncio.sleep(window_s)
    return (tree_cpu_seconds(pids) - start_cpu) / (time.monotonic() - start)


async def measure(
    ctx: RunContext, cluster: object, steps: tuple[int, ...], window_s: float
) -> list[Row]:
    servers = cluster.servers  # type: ignore[attr-defined]
    pids = [node.pid for node in cluster.nodes]  # type: ignore[attr-defined]
    client = raftlog_local.client_class()(
        servers, request_timeout_s=raftlog_local.REQUEST_TIMEOUT_S
    )
    rows: list[Row] = []
    have = 0
    try:
        for want in steps:
            have = await _grow(client, have, want)
            await asyncio.sleep(SETTLE_S)
            settled_s = await _quiesced(servers)
            cores = await _cores(pids, window_s)
            row: Row = {
                "partitions": f"{have}",
                "cores (3 nodes)": cores,
                "s to quiesce": settled_s,
            }
            if have and rows:
                base = float(rows[0]["cores (3 nodes)"])
                row["cores per 100 partitions"] = (cores - base) * 100 / have
                row["cores per 1,000 partitions"] = (cores - base) * 1000 / have
            rows.append(row)
            ctx.advance(1)
    finally:
        await client.close()
    ctx.add_series(
        "an idle 3-node cluster's CPU by partition count",
        "raftlog",
        "partitions (3 replicas each)",
        "cores used by the 3 nodes",
        [(float(r["partitions"]), float(r["cores (3 nodes)"])) for r in rows],
    )
    return rows


@scenario(
    "idle",
    "an idle 3-node cluster's CPU by partition count (0, 150, 450, or --partitions; quick 0, 30)",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    if getattr(ctx.args, "servers", None):
        raise Skip("it reads the nodes' CPU from /proc by PID, so it runs only on a local cluster")
    steps = getattr(ctx.args, "partitions", None) or (QUICK_STEPS if ctx.quick else FULL_STEPS)
    window_s = ctx.option("idle_seconds", quick=QUICK_WINDOW_S, full=FULL_WINDOW_S)
    ctx.set_total(len(steps))
    with (
        ctx.scratch_dir("idle") as data_dir,
        raftlog_local.local_cluster(data_dir, ctx=ctx) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster, steps, window_s))
    ctx.note(
        f"3-node local cluster; topics of {TOPIC_PARTITIONS} partitions, 3 replicas each, "
        f"every partition led, then {SETTLE_S:.0f} s to settle; CPU = user + system of the "
        f"nodes' processes (from /proc) over {window_s} s with no client calling"
    )
    return rows
