"""Scenario ``peers``: etcd and PySyncObj beside raftlog, measured in the same run.

- etcd (3 members, loopback): the ``small`` workload (100-byte values, one per
  request, closed loop) through its JSON gateway, by the same generator that
  drives raftlog in ``small``; raftlog's requests/s at the same client counts
  and the ratio.
- PySyncObj (3 node processes, loopback): replicated 100-byte appends
  submitted inside the nodes, as its own benchmark does; raftlog's records/s
  for 100-byte records batched through its client at acks=all, and the ratio.

A peer that is not installed is left out with how to install it; the scenario
skips only when neither is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.peers import detect
from benchmarks.peers.etcd_cluster import EtcdCluster
from benchmarks.peers.etcd_grpc_load import etcd_grpc_put_load
from benchmarks.peers.etcd_load import etcd_put_load
from benchmarks.registry import Row, Skip, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.closed_loop import record_client_series
from benchmarks.workloads.pysyncobj_bench import measure_pysyncobj
from benchmarks.workloads.raftlog_load import batched_load, small_load

FULL_CLIENTS, QUICK_CLIENTS = (1, 64, 256), (1, 16)
FULL_WINDOWS, QUICK_WINDOWS = (50, 200, 1000, 3000), (100, 1000)
"""PySyncObj commands in flight per node."""
FULL_SECONDS, QUICK_SECONDS = 10.0, 2.0
MAX_REQUESTS = 2_000_000
RECORDS_PER_BATCH = 1000
RAFTLOG_IN_FLIGHT = 4


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--peers-seconds", type=float, default=None, help="seconds per step")


def etcd_version() -> str:
    binary = detect.etcd_binary() or "etcd"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.split()[2] if out.stdout.startswith("etcd Version:") else "?"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "?"


def pysyncobj_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pysyncobj")
    except PackageNotFoundError:
        return "?"


async def raftlog_figures(
    servers: list[str], counts: tuple[int, ...], seconds: float
) -> tuple[dict[int, Any], Any]:
    """raftlog's small-request loads per client count and its batched 100-byte load."""
    client = raftlog_local.client_class()(servers)
    try:
        await raftlog_local.create_topic(client, "bench-peers", 1)
    finally:
        await client.close()
    small = {n: await small_load(servers, "bench-peers", n, seconds, MAX_REQUESTS) for n in counts}
    batch = (os.urandom(100 * RECORDS_PER_BATCH), RECORDS_PER_BATCH)
    batched = await batched_load(
        servers, "bench-peers", 1, batch, "all", RAFTLOG_IN_FLIGHT, seconds, MAX_REQUESTS
    )
    return small, batched


def _etcd_goal(clients: int) -> Goal:
    case = f"small, {clients} clients"
    return Goal(
        f"etcd-{clients}",
        f"small writes (100 B, acks=all), {clients} client{'s' * (clients > 1)}",
        ours=(Pick("raftlog", row(system="raftlog", case=case), "requests/s"),),
        # Every etcd row of this client count (each API measured): the fastest is the peer.
        peers=(Pick("etcd", row(system="etcd*", case=case), "requests/s", detail="system"),),
        target=1.0,
    )


GOALS = (
    *(_etcd_goal(n) for n in FULL_CLIENTS),
    Goal(
        "pysyncobj",
        "batched 100-byte records against PySyncObj's best",
        ours=(
            Pick("raftlog", row(system="raftlog", case="100-byte records in batch*"), "records/s"),
        ),
        peers=(Pick("PySyncObj", row(system="pysyncobj*"), "records/s", detail="case"),),
        target=10.0,
    ),
)


def etcd_rows(
    ctx: RunContext, data_dir: Path, counts: tuple[int, ...], seconds: float, small: dict[int, Any]
) -> list[Row]:
    """etcd through its JSON gateway and through gRPC per client count, then raftlog's row.

    raftlog's ``x etcd`` is to the faster of the two APIs (gRPC is left out, with the
    install command, when ``aetcd`` is missing).
    """
    version, rows = etcd_version(), []
    grpc_hint = detect.aetcd_missing()
    if grpc_hint:
        ctx.note(f"etcd's gRPC API left out: {grpc_hint}")
    apis = {f"etcd {version} gateway": etcd_put_load}
    if not grpc_hint:
        apis[f"etcd {version} gRPC"] = etcd_grpc_put_load
    loads: dict[str, dict[int, Any]] = {system: {} for system in apis}
    with EtcdCluster(data_dir) as etcd:
        for n in counts:
            case = f"small, {n} clients"
            for system, put_load in apis.items():
                load = asyncio.run(put_load(etcd.client_urls, n, seconds, MAX_REQUESTS))
                loads[system][n] = load
                rows.append(
                    {
                        "system": system,
                        "case": case,
                        "requests/s": load.requests_per_s,
                        **load.latency(),
                        "errors": load.errors,
                    }
                )
            if n in small:
                mine, fastest = small[n], max(lo[n].requests_per_s for lo in loads.values())
                rows.append(
                    {
                        "system": "raftlog",
                        "case": case,
                        "requests/s": mine.requests_per_s,
                        **mine.latency(),
                        "errors": mine.errors,
                        "x etcd": mine.requests_per_s / max(fastest, 1e-9),
                    }
                )
            ctx.advance(1)
    for system, by_count in loads.items():
        record_client_series(ctx, system, by_count)
    return rows


@scenario(
    "peers",
    "etcd and PySyncObj beside raftlog: small requests/s and 100-byte records/s, ratios",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    etcd_hint, syncobj_hint = detect.etcd_missing(), detect.pysyncobj_missing()
    if etcd_hint and syncobj_hint:
        raise Skip(f"{etcd_hint}; {syncobj_hint}")
    counts = QUICK_CLIENTS if ctx.quick else FULL_CLIENTS
    windows = QUICK_WINDOWS if ctx.quick else FULL_WINDOWS
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "peers_seconds")
    ctx.set_total(2 * len(counts) + len(windows) + 1)
    rows: list[Row] = []
    with ctx.scratch_dir("peers") as scratch:
        # raftlog first, so its figures are there to divide by; left out (with the
        # reason) while its cluster or client is not built.
        small: dict[int, Any] = {}
        batched = None
        try:
            with raftlog_local.cluster_under_test(ctx, scratch / "raftlog") as cluster:
                small, batched = asyncio.run(raftlog_figures(cluster.servers, counts, seconds))
        except Skip as skip:
            ctx.note(f"raftlog left out: {skip.reason}")
        ctx.advance(len(counts) + 1)

        if etcd_hint:
            ctx.note(f"etcd left out: {etcd_hint}")
        else:
            rows += etcd_rows(ctx, scratch / "etcd", counts, seconds, small)
        record_client_series(ctx, "raftlog", small)

        if syncobj_hint:
            ctx.note(f"PySyncObj left out: {syncobj_hint}")
        else:
            figures = measure_pysyncobj(scratch / "pysyncobj", windows, seconds, 100, ctx.advance)
            for f in figures:
                rows.append(
                    {
                        "system": f"pysyncobj {pysyncobj_version()}",
                        "case": f"100-byte appends, {f.in_flight} in flight per node",
                        "records/s": f.records_per_s,
                        **f.latency,
                        "errors": f.errors,
                    }
                )
            best = max(f.records_per_s for f in figures)
            if batched is not None:
                rows.append(
                    {
                        "system": "raftlog",
                        "case": f"100-byte records in batches of {RECORDS_PER_BATCH}, acks=all",
                        "records/s": batched.requests * RECORDS_PER_BATCH / batched.seconds,
                        **batched.latency(),
                        "errors": batched.errors,
                        "x pysyncobj best": batched.requests
                        * RECORDS_PER_BATCH
                        / batched.seconds
                        / max(best, 1e-9),
                    }
                )
    ctx.note(
        f"{seconds:g} s per step; etcd through its JSON gateway (aiohttp, a connection per "
        "worker) and through gRPC (aetcd, a channel per member), workers round-robin over the "
        "3 members, raftlog's x etcd to the faster of the two; PySyncObj: default SyncObjConf "
        "(in-memory journal, no fsync), commands "
        "submitted with callbacks inside all 3 node processes, closed loop per window; "
        "raftlog: 3-node local cluster, R=3, acks=all, same closed-loop generator as etcd"
    )
    return rows
