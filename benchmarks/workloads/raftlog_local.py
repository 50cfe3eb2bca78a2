"""A raftlog local cluster for one scenario: started in a scratch dir, stopped by PID.

The cluster and client modules are looked up with :func:`require`, so a
scenario skips (with the missing piece named) until they are built; once they
exist, a cluster that fails to start fails the scenario with the nodes' logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.registry import require

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
LEADER_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 120.0
FSYNC_COUNTER = "raftlog_fsyncs_total"
SYNCFS_COUNTER = "raftlog_syncfs_total"
"""A node's syncfs calls (--flush-scope node): each one barrier, however many groups it
served; counted with the groups' own fsyncs."""
REQUEST_TIMEOUT_S = 10.0
"""Per call, retries included: a request not acknowledged by then counts as an error
(the client's own default, 30 s, would let one stuck request eat a quick run)."""


def client_class() -> Any:
    """``raftlog.client.RaftlogClient`` (Skip until it exists)."""
    return require("raftlog.client", "RaftlogClient")


def blocking_client_class() -> Any:
    """``raftlog.client.BlockingRaftlogClient`` (Skip until it exists)."""
    return require("raftlog.client", "BlockingRaftlogClient")


def server_flags(ctx: Any = None) -> list[str]:
    """The run's ``--shards`` and ``--flush-scope`` (defaults 1 and node) as the flags
    of the nodes a scenario starts; each is noted in the results."""
    args = getattr(ctx, "args", None)
    shards = getattr(args, "shards", None) or 1
    if shards > 1:
        ctx.note(f"each node runs {shards} processes (raftlog server --shards {shards})")
    flush_scope = getattr(args, "flush_scope", None) or "node"
    if ctx is not None:
        ctx.note(f"nodes flush with raftlog server --flush-scope {flush_scope}")
    return ["--shards", str(shards), "--flush-scope", flush_scope]


@contextlib.contextmanager
def local_cluster(data_dir: Path, nodes: int = 3, ctx: Any = None) -> Iterator[Any]:
    """A running ``raftlog.cluster.LocalCluster`` in ``data_dir``; every node is stopped
    by its recorded PID on exit, also when start-up or the scenario fails. Its nodes
    run ``--shards`` processes each and flush with ``--flush-scope`` (the run's flags,
    from ``ctx``; defaults 1 and node)."""
    flags = server_flags(ctx)
    start_cluster = require("raftlog.cluster", "start_cluster")
    stop_cluster = require("raftlog.cluster", "stop_cluster")
    client_class()  # skip before starting processes when the client is missing
    try:
        yield start_cluster(
            data_dir,
            nodes,
            timeout_s=START_TIMEOUT_S,
            extra_args=flags,
        )
    finally:
        # cluster.json is written before start-up waits, so this finds every PID started.
        stop_cluster(data_dir, timeout_s=STOP_TIMEOUT_S)


@dataclasses.dataclass(frozen=True)
class ExistingCluster:
    """A cluster the benchmark did not start (``--servers``): it is measured, never
    stopped, restarted or killed."""

    servers: list[str]


@contextlib.contextmanager
def cluster_under_test(ctx: Any, data_dir: Path) -> Iterator[Any]:
    """The cluster a scenario measures: the one named by ``--servers HOST:PORT,...``,
    else a fresh local cluster in ``data_dir`` (stopped by PID on exit).

    Either has ``servers``; only a local cluster can be killed or restarted.
    """
    servers = getattr(ctx.args, "servers", None)
    if servers:
        parse_servers = require("raftlog.client.calls", "parse_servers")
        ctx.note(f"measured on the existing cluster --servers {servers}")
        yield ExistingCluster(parse_servers(servers))
        return
    with local_cluster(data_dir, ctx=ctx) as cluster:
        yield cluster


def scrape(address: str, timeout_s: float = 5.0) -> str:
    """A node's ``/metrics`` text ("" when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as resp:
            return resp.read().decode()
    except (OSError, urllib.error.URLError):
        return ""


def fsync_total(addresses: list[str]) -> float | None:
    """Every durability barrier of every node: the groups' fsyncs plus the nodes' syncfs
    calls; None when no node exports a sample of either."""
    total, seen = 0.0, False
    for address in addresses:
        for line in scrape(address).splitlines():
            for counter in (FSYNC_COUNTER, SYNCFS_COUNTER):
                if line.startswith(counter + "{") or line.startswith(counter + " "):
                    total += float(line.rsplit(" ", 1)[1])
                    seen = True
    return total if seen else None


def replica_log_ends(addresses: list[str]) -> dict[str, list[float]]:
    """Per group, every answering replica's dirty offset, from the nodes' ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    ends: dict[str, list[float]] = {}
    for address in addresses:
        for family in text_string_to_metric_families(scrape(address)):
            if family.name == "raftlog_group_dirty_offset":
                for sample in family.samples:
                    ends.setdefault(sample.labels.get("group", ""), []).append(sample.value)
    return ends


async def wait_replicas_caught_up(
    addresses: list[str], replicas: int = 3, timeout_s: float = SETTLE_TIMEOUT_S
) -> float | None:
    """Wait until every group's ``replicas`` replicas hold the same log end.

    Returns the seconds waited, or None when they had not caught up by ``timeout_s``.
    Between benchmark cases, so that one case (an acks=0 burst leaves followers far
    behind) does not bill its replication backlog to the next.
    """
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        ends = await asyncio.to_thread(replica_log_ends, addresses)
        if ends and all(len(v) >= replicas and len(set(v)) == 1 for v in ends.values()):
            return time.monotonic() - start
        await asyncio.sleep(0.2)
    return None


async def wait_leaders(client: Any, topic: str, timeout_s: float = LEADER_TIMEOUT_S) -> list[int]:
    """The leader node id of each partition of ``topic``, once every one has a leader."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = await client.describe_topic(topic)
        leaders = [p.leader for p in meta.partitions]
        if all(leader >= 0 for leader in leaders):
            return leaders
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} has partitions without a leader: {leaders}")
        await asyncio.sleep(0.05)


async def create_topic(
    client: Any, name: str, partitions: int, configs: dict[str, str] | None = None
) -> list[int]:
    """Create ``name`` with 3 replicas (and the topic ``configs``, Kafka's names) and wait
    until every partition has a leader."""
    await client.create_topic(name, partitions, 3, configs=configs)
    return await wait_leaders(client, name)


class ClientPool:
    """Clients for ``workers`` concurrent workers, one client per ``per_client`` workers.

    A client's connection pool holds a few connections per node; spreading the
    workers over clients gives each worker its own connection, as independent
    clients would have, instead of queueing them behind one pool.
    """

    def __init__(
        self,
        servers: list[str],
        workers: int,
        per_client: int = 16,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        cls = client_class()
        self.per_client = per_client
        self.clients = [
            cls(servers, request_timeout_s=request_timeout_s)
            for _ in range(max(1, -(-workers // per_client)))
        ]

    def for_worker(self, worker: int) -> Any:
        return self.clients[(worker // self.per_client) % len(self.clients)]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
