"""``raftlog server --flush-scope``: how a node makes its groups' writes durable.

``node`` (the default, on Linux >= 5.8): one syncfs of the data directory's
filesystem serves every group that asked for a flush meanwhile; each node exports
``raftlog_syncfs_total`` and its partitions' own fsyncs stay where they were.
``group``: each partition's log fsyncs its own files, and no syncfs is counted.
Both run real 3-node clusters under a write load on several partitions, and
every acknowledged record must read back.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from ops_helpers import read_partition
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import BlockingRaftlogClient, RaftlogClient, frame_records
from raftlog.cluster import load_cluster, stop_cluster
from raftlog.storage.fs import syncfs_reports_errors

PARTITIONS = 4
BATCHES = 40


def counters(address: str) -> dict[str, float]:
    """The sum of each of the node's fsync and syncfs counters."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("raftlog_fsyncs", "raftlog_syncfs"):
            out[family.name] = sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def write_and_read_back(cluster: ClusterHandle, topic: str) -> list[dict[str, float]]:
    """Produce BATCHES batches to every partition at once (acks=all), read every one
    back exactly, and return each node's counters' rise over the load."""

    async def load() -> None:
        async with RaftlogClient(cluster.servers, request_timeout_s=30.0) as client:
            await client.create_topic(topic, PARTITIONS, 3)

            async def one(p: int) -> None:
                for i in range(BATCHES):
                    records = [f"{p}-{i}-{j}".encode() for j in range(5)]
                    await client.produce(topic, p, [(frame_records(records), len(records))])

            await asyncio.gather(*(one(p) for p in range(PARTITIONS)))

    before = [counters(n.address) for n in cluster.nodes]
    asyncio.run(load())
    after = [counters(n.address) for n in cluster.nodes]
    with BlockingRaftlogClient(cluster.servers) as client:
        for p in range(PARTITIONS):
            want = [f"{p}-{i}-{j}".encode() for i in range(BATCHES) for j in range(5)]
            assert read_partition(client, topic, p) == want, f"partition {p}"
    return [{k: a[k] - b.get(k, 0.0) for k in a} for a, b in zip(after, before, strict=True)]


def test_node_scope_makes_one_syncfs_serve_the_groups(tmp_path: pathlib.Path) -> None:
    assert syncfs_reports_errors(), "this test needs Linux >= 5.8 (syncfs reports errors)"
    with running_cluster(tmp_path / "node") as cluster:
        rises = write_and_read_back(cluster, "scoped")
    for node, rise in enumerate(rises, 1):
        # every node flushed through its syncfs: each acks=all write needed a barrier
        assert rise["raftlog_syncfs"] > 0, (node, rise)
        # the partitions' logs fsynced none of those flushes themselves (each node holds
        # all 4 partitions, and each of their BATCHES sequential writes needs a flush
        # there): what they fsynced is their votes and commit contexts
        assert rise["raftlog_fsyncs"] < BATCHES, (node, rise)


def test_group_scope_fsyncs_per_log_and_counts_no_syncfs(tmp_path: pathlib.Path) -> None:
    with running_cluster(tmp_path / "group", extra_args=["--flush-scope", "group"]) as cluster:
        rises = write_and_read_back(cluster, "per-log")
    for node, rise in enumerate(rises, 1):
        assert "raftlog_syncfs" not in rise, (node, rise)
        assert rise["raftlog_fsyncs"] > BATCHES, (node, rise)


@pytest.fixture
def home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A RAFTLOG_HOME of this test's own; every node recorded there is stopped at the end."""
    root = tmp_path / "raftlog-home"
    try:
        yield root
    finally:
        stop_cluster(root, timeout_s=10.0)


def _local_start(home: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAFTLOG_SERVERS", "RAFTLOG_AUTH_TOKEN")
    }
    env["RAFTLOG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "raftlog", "local", "start", *args],
        capture_output=True,
        env=env,
        timeout=90,
        check=False,
    )


def test_local_start_runs_the_nodes_with_the_flush_scope_asked(home: pathlib.Path) -> None:
    started = _local_start(home, "--flush-scope", "group")
    assert started.returncode == 0, started.stderr.decode()
    servers = started.stdout.decode().strip().split(",")
    cluster = load_cluster(home)
    assert cluster is not None and cluster.flag("--flush-scope") == "group"
    assert cluster.servers == servers
    rises = write_and_read_back(ClusterHandle(cluster), "local-per-log")
    for node, rise in enumerate(rises, 1):
        assert "raftlog_syncfs" not in rise, (node, rise)
        assert rise["raftlog_fsyncs"] > BATCHES, (node, rise)

    # the recorded cluster keeps its scope, and says so when asked for another
    again = _local_start(home, "--flush-scope", "node")
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.decode().strip().split(",") == servers
    assert (
        "--flush-scope node ignored: the local cluster in "
        f"{home.resolve()} was created with --flush-scope group"
    ) in again.stderr.decode()
    same = _local_start(home, "--flush-scope", "group")
    assert same.returncode == 0 and b"warning" not in same.stderr, same.stderr.decode()
