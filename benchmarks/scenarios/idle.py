"""Scenario ``idle``: what a cluster costs while nobody writes, by partition count.

Kafka and Redpanda users keep hundreds or thousands of partitions, most of them
idle at any moment. Each partition here is a Raft group; an idle one quiesces (no
ticks, no heartbeats of its own), so what an idle cluster costs per partition is
what is left. A 3-node local cluster gets topics of up to
``TOPIC_PARTITIONS`` partitions (3 replicas each) in steps (0, 300, 1,000 and 3,000
by default; 10,000 with ``--partitions 0,3000,10000``); after each step every
partition has a leader, the groups settle (and, where the nodes quiesce idle
groups, until they report them quiescent: ``s to quiesce``), and then the nodes' CPU (user +
system of every process of every node, from ``/proc``) is measured over a window
in which no client calls. Per node it reports the cores, the resident memory and
the open file descriptors (the largest of the three nodes for the last two). Then,
as a user runs them, the wall time of ``raftlog cluster health`` and of ``raftlog
topic describe`` of one of the topics (the CLI's start-up included; the goal at
10,000 partitions is 2 s each). Local cluster only: it reads the nodes' CPU, memory
and descriptors by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request

from benchmarks.context import RunContext
from benchmarks.goals import Pick, at_most, row
from benchmarks.registry import Row, Skip, scenario
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.partition_scale import (
    TOPIC_PARTITIONS,
    create_partitions,
    node_resources,
    wait_all_led,
)
from benchmarks.workloads.process_cpu import tree_cpu_seconds

FULL_STEPS, QUICK_STEPS = (0, 300, 1000, 3000), (0, 30)
"""Partition counts measured, in increasing order."""
PREFIX = "bench-idle"
LED_BOUND_S = 1800.0
"""Every partition of a step led by then (10,000 partitions on 2 busy cores take minutes)."""
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
CLI_TIMEOUT_S = 120.0
"""A CLI command not done by then fails the scenario (the goal is 2 s)."""

GOALS = (
    at_most(
        "idle-cpu",
        "an idle 3-node cluster's CPU per 1,000 partitions (3 replicas each), "
        "over what it costs with none",
        # the largest count measured: a per-partition cost shows best there
        ours=tuple(
            Pick(f"{n:,} partitions", row(partitions=str(n)), "cores per 1,000 partitions")
            for n in (10000, 3000, 1000, 300)
        ),
        bound=0.02,
        unit="cores per 1,000 partitions",
    ),
)


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--idle-seconds", type=int, default=None, help="CPU window per partition count"
    )
    group.add_argument(
        "--partitions",
        type=_steps,
        default=None,
        help="the partition counts to measure, comma-separated, increasing, up to 10000 "
        f"(created in topics of up to {TOPIC_PARTITIONS}; default 0,300,1000,3000; quick 0,30)",
    )


def _steps(text: str) -> tuple[int, ...]:
    """``--partitions``: "0,300,3000" -> (0, 300, 3000); ValueError names the option."""
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--partitions: expected counts like 0,300,3000, got {text!r}"
        ) from None
    if not steps or any(not 0 <= n <= 10_000 for n in steps) or list(steps) != sorted(set(steps)):
        raise argparse.ArgumentTypeError(
            f"--partitions: expected increasing counts within 0..10000, got {text!r}"
        )
    return steps


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


def _cli_seconds(cluster: object, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """Wall seconds and exit status of ``raftlog ARGS`` against ``cluster``, run as a
    user runs it (a fresh interpreter, start-up included). A status outside ``ok``
    raises with the command's stderr (``cluster health`` exits 1 when the cluster is
    not healthy: a figure, not a failure)."""
    env = dict(os.environ)
    token = getattr(cluster, "auth_token", None)
    if token:
        env["RAFTLOG_CLIENT_TOKEN"] = token
    servers = ",".join(cluster.servers)  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "raftlog", *args, "--servers", servers]
    start = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env, check=False
    )
    elapsed = time.monotonic() - start
    if done.returncode not in ok:
        raise RuntimeError(
            f"raftlog {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-800:]}"
        )
    return elapsed, done.returncode


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
            start = time.monotonic()
            have = await create_partitions(client, PREFIX, have, want)
            if have:
                await wait_all_led(client, PREFIX, have, LED_BOUND_S)
            created_s = time.monotonic() - start
            await asyncio.sleep(SETTLE_S)
            settled_s = await _quiesced(servers)
            cores = await _cores(pids, window_s)
            used = [node_resources(pid) for pid in pids]
            health_s, unhealthy = await asyncio.to_thread(
                _cli_seconds, cluster, "cluster", "health", ok=(0, 1)
            )
            describe_s = None
            if have:
                describe_s, _ = await asyncio.to_thread(
                    _cli_seconds, cluster, "topic", "describe", f"{PREFIX}-0"
                )
            row: Row = {
                "partitions": f"{have}",
                "cores (3 nodes)": cores,
                "cores per node": cores / len(pids),
                "MiB per node": max(mib for mib, _ in used),
                "open files per node": float(max(fds for _, fds in used)),
                "s to create and lead": created_s,
                "s to quiesce": settled_s,
                "s for cluster health": health_s,
            }
            if unhealthy:
                ctx.note(f"at {have} partitions raftlog cluster health said: not healthy")
            if describe_s is not None:
                row["s for topic describe"] = describe_s
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
    "an idle 3-node cluster's cores, memory and open files per node by partition count "
    "(0, 300, 1000, 3000, or --partitions up to 10000; quick 0, 30)",
    add_arguments=add_arguments,
    goals=GOALS,
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
        f"3-node local cluster; topics of up to {TOPIC_PARTITIONS} partitions, 3 replicas each, "
        f"every partition led, then {SETTLE_S:.0f} s to settle; CPU = user + system of the "
        f"nodes' processes (from /proc) over {window_s} s with no client calling"
    )
    return rows
