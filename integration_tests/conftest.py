"""Shared fixtures for integration tests: real raftlog clusters of node processes.

``raftlog_cluster`` (session scope) starts a 3-node cluster on 127.0.0.1 with
free ports and yields a :class:`ClusterHandle`; ``fresh_cluster`` (function
scope) starts a private one for tests that kill or restart nodes. Every node
is stopped by PID in the fixture finalizer, even when the test fails.
"""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator

import pytest

from raftlog.cluster import (
    LocalCluster,
    NodeProcess,
    pid_alive,
    restart_node,
    start_cluster,
    stop_cluster,
    stop_node,
)


class ClusterHandle:
    """A running local cluster: ``.servers``, ``.nodes``, ``.kill``, ``.restart``, ``.stop``."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    @property
    def servers(self) -> list[str]:
        """Every node's "127.0.0.1:PORT"."""
        return self.cluster.servers

    @property
    def bootstrap(self) -> str:
        """The servers as one comma-separated string (the connector's option form)."""
        return ",".join(self.servers)

    @property
    def data_dir(self) -> pathlib.Path:
        return pathlib.Path(self.cluster.data_dir)

    @property
    def nodes(self) -> list[NodeProcess]:
        """(pid, node_id, address, ...) of every node."""
        return self.cluster.nodes

    def address(self, node_id: int) -> str:
        return self.cluster.node(node_id).address

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the node's PID and wait (bounded) for it to exit."""
        stop_node(self.cluster.node(node_id), sig, timeout_s=10.0)

    def restart(self, node_id: int) -> None:
        """Start a stopped node again with the same id, address and data dir."""
        restart_node(self.cluster, node_id)

    def alive(self, node_id: int) -> bool:
        return pid_alive(self.cluster.node(node_id).pid)

    def stop(self) -> None:
        """Stop every node by PID (SIGTERM, then SIGKILL after a bound)."""
        stop_cluster(self.cluster.data_dir, timeout_s=10.0)
        # a restarted node's PID is not in an older cluster.json copy: stop by handle too
        for n in self.cluster.nodes:
            if pid_alive(n.pid):
                stop_node(n, signal.SIGKILL, timeout_s=5.0)


def _start(tmp: pathlib.Path) -> ClusterHandle:
    # Keep the environment from pointing the nodes elsewhere.
    os.environ.pop("RAFTLOG_AUTH_TOKEN", None)
    return ClusterHandle(start_cluster(tmp, 3, timeout_s=60.0))


@pytest.fixture(scope="session")
def raftlog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A 3-node cluster shared by the session's tests (do not kill its nodes)."""
    handle = _start(tmp_path_factory.mktemp("raftlog-cluster"))
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def fresh_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private 3-node cluster for tests that kill or restart nodes."""
    handle = _start(tmp_path / "cluster")
    try:
        yield handle
    finally:
        handle.stop()
