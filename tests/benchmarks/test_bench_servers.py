"""``python -m benchmarks --servers HOST:PORT,...`` measures a cluster it did not start.

The cluster here is started by the test (and stopped by PID in the fixture's
finalizer); the benchmark must write its figures against it, leave it running, and
skip, naming why, the scenarios that would kill its nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import BlockingRaftlogClient

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHandle]:
    with running_cluster(tmp_path / "cluster") as handle:
        yield handle


def test_servers_runs_on_the_given_cluster_and_leaves_it_running(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks", "small", "failover", "--quick"),
            *("--small-seconds", "1", "--servers", cluster.bootstrap, "--out", str(out)),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    by_name = {s["name"]: s for s in doc["scenarios"]}
    small, failover = by_name["small"], by_name["failover"]
    assert small["status"] == "ok"
    assert any(f"--servers {cluster.bootstrap}" in n for n in small["notes"])
    acked = [r for r in small["rows"] if r["requests/s"] > 0]
    assert acked and all("p99.9 ms" in r and r["max ms"] >= r["p50 ms"] for r in acked)
    assert failover["status"] == "skipped"
    assert "kills nodes by PID" in failover["reason"]
    # the records went to this cluster, and every node still runs
    client = BlockingRaftlogClient(cluster.bootstrap, request_timeout_s=10.0)
    try:
        assert client.describe_topic("bench-small").partitions[0].leader in (1, 2, 3)
    finally:
        client.close()
    assert all(cluster.alive(n) for n in (1, 2, 3))
