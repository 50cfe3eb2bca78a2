"""Shared fixtures for integration tests: real raftlog clusters of node processes.

``raftlog_cluster`` (session scope) starts a 3-node cluster on 127.0.0.1 with
free ports and yields a :class:`~benchmarks.workloads.cluster_handle.ClusterHandle`;
``fresh_cluster`` (function scope) starts a private one for tests that kill or restart
nodes. Every node is stopped by PID in the fixture finalizer, even when the test fails.

The cluster launcher is one copy shared with the benchmarks
(:mod:`benchmarks.workloads.cluster_handle`); the repository root is put on ``sys.path``
here, since ``benchmarks`` runs from there and is not installed.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

_REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster  # noqa: E402


@pytest.fixture(scope="session")
def raftlog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A 3-node cluster shared by the session's tests (do not kill its nodes)."""
    with running_cluster(tmp_path_factory.mktemp("raftlog-cluster")) as handle:
        yield handle


@pytest.fixture
def fresh_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private 3-node cluster for tests that kill or restart nodes."""
    with running_cluster(tmp_path / "cluster") as handle:
        yield handle
