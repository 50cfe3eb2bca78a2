"""A local 3-node raftlog cluster of node processes, started in a scratch dir, stopped by PID.

One implementation for the integration tests' cluster fixtures (``raftlog_cluster``,
``fresh_cluster``, and the nemesis tests' ``proxied_cluster`` through
:mod:`benchmarks.workloads.nemesis_cluster`) and the benchmarks that kill or restart
nodes. :func:`running_cluster` stops every node by PID on exit, also when the caller
fails; a cluster that fails to start is stopped by ``start_cluster`` itself.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import Callable, Iterator

from raftlog.cluster import (
    LocalCluster,
    NodeProcess,
    pid_alive,
    restart_node,
    start_cluster,
    stop_cluster,
    stop_node,
)

NODES = (1, 2, 3)
START_TIMEOUT_S = 60.0


class ClusterHandle:
    """A running local cluster: ``servers``, ``nodes``, ``kill``, ``restart``, ``alive``,
    ``stop``."""

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

    def pid(self, node_id: int) -> int:
        return self.cluster.node(node_id).pid

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


def start(
    data_dir: pathlib.Path,
    timeout_s: float = START_TIMEOUT_S,
    peer_routes: Callable[[dict[int, str]], dict[int, dict[int, str]]] | None = None,
    extra_args: list[str] | None = None,
) -> LocalCluster:
    """Start a 3-node cluster in ``data_dir`` (``peer_routes`` and ``extra_args``, the
    nodes' extra server flags, as ``start_cluster``'s)."""
    # Keep the environment from pointing the nodes elsewhere.
    for role in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        os.environ.pop(f"RAFTLOG_{role}_TOKEN", None)
    return start_cluster(
        data_dir,
        len(NODES),
        extra_args=extra_args,
        timeout_s=timeout_s,
        peer_routes=peer_routes,
    )


@contextlib.contextmanager
def running_cluster(
    data_dir: pathlib.Path,
    timeout_s: float = START_TIMEOUT_S,
    extra_args: list[str] | None = None,
) -> Iterator[ClusterHandle]:
    """A 3-node cluster in ``data_dir``; every node is stopped by PID on exit."""
    handle = ClusterHandle(start(data_dir, timeout_s, extra_args=extra_args))
    try:
        yield handle
    finally:
        handle.stop()
