"""Helpers of the operations tests (metrics, health, leadership, partitions): the
``raftlog`` command run against a cluster, and a private cluster that checks
retention often.

One copy for those tests; the cluster itself comes from the shared launcher
(:mod:`benchmarks.workloads.cluster_handle`), stopped by PID on exit.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster

CLI_TIMEOUT_S = 60


def run_cli(
    servers: list[str], *args: str, timeout_s: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``python -m raftlog ARGS`` with ``RAFTLOG_SERVERS`` set to ``servers``; never raises
    on a nonzero exit (tests assert on it), bounded by ``timeout_s``."""
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    env.pop("RAFTLOG_AUTH_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture
def ops_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private 3-node cluster (tests kill its nodes) that checks retention every
    200 ms, so a log start moves within a test."""
    with running_cluster(
        tmp_path / "cluster", extra_args=["--retention-check-interval-ms", "200"]
    ) as handle:
        yield handle
