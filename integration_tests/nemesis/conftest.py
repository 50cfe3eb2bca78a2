"""Fixtures for the nemesis: a 3-node cluster whose peer traffic runs through proxies.

``proxied_cluster`` is :func:`benchmarks.workloads.nemesis_cluster.proxied_cluster` (one
copy of the wiring, shared with ``python -m benchmarks chaos``): one proxy process with a
link per ordered pair of nodes (``"1-2"``: node 1's raft traffic to node 2) and a client
link per node (``"c-2"``: the workload's client traffic to node 2). The finalizer stops
every node and the proxy by PID, even when the test fails.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from benchmarks.workloads import nemesis_cluster
from benchmarks.workloads.nemesis_cluster import ProxiedCluster


@pytest.fixture
def proxied_cluster(tmp_path: pathlib.Path) -> Iterator[ProxiedCluster]:
    with nemesis_cluster.proxied_cluster(tmp_path / "cluster") as handle:
        yield handle
