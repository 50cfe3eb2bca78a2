"""A local 3-node raftlog cluster whose every link runs through a proxy process.

The nemesis tests' ``proxied_cluster`` fixture and the ``chaos`` scenario use it: one
:class:`~raftlog.faults.proxy_process.ProxyProcess` serves a link per ordered
pair of nodes (``"1-2"``: node 1's raft traffic to node 2) and a client link per
node (``"c-2"``: clients' traffic to node 2); each node's ``--peer-routes`` point
at its links. :func:`proxied_cluster` stops every node and the proxy by PID on
exit, also when start-up or the caller fails.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import Iterator

from benchmarks.workloads.cluster_handle import NODES, START_TIMEOUT_S, ClusterHandle, start
from raftlog.cluster import LocalCluster
from raftlog.faults.proxy_process import ProxyProcess

__all__ = ["NODES", "ProxiedCluster", "proxied_cluster"]


class ProxiedCluster(ClusterHandle):
    """A running cluster (:class:`ClusterHandle`) with ``proxy`` and link helpers."""

    def __init__(self, cluster: LocalCluster, proxy: ProxyProcess, peers: dict[int, str]) -> None:
        super().__init__(cluster)
        self.proxy = proxy
        self.peers = peers

    @property
    def client_map(self) -> dict[str, str]:
        """Each node's address -> its client link through the proxy."""
        return {a: self.proxy.address(f"c-{i}") for i, a in self.peers.items()}

    def links_between(self, a: set[int], b: set[int]) -> list[str]:
        """The peer links from any node of ``a`` to any of ``b`` and back."""
        return [f"{i}-{j}" for i in a for j in b if i != j] + [
            f"{j}-{i}" for i in a for j in b if i != j
        ]

    def heal_all(self) -> None:
        """Heal every link, SIGCONT and restart every node that is stopped or dead."""
        self.proxy.heal()
        for node_id in NODES:
            if self.alive(node_id):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid(node_id), signal.SIGCONT)
            else:
                self.restart(node_id)


@contextlib.contextmanager
def proxied_cluster(
    data_dir: pathlib.Path,
    timeout_s: float = START_TIMEOUT_S,
    extra_args: list[str] | None = None,
) -> Iterator[ProxiedCluster]:
    """Start the proxy and a 3-node cluster behind it in ``data_dir`` (``extra_args``: the
    nodes' extra server flags); stop both on exit."""
    holder: dict[str, object] = {}

    def routes(peers: dict[int, str]) -> dict[int, dict[int, str]]:
        links: dict[str, tuple[str, int]] = {}
        for i in peers:
            host, _, port = peers[i].rpartition(":")
            links[f"c-{i}"] = (host, int(port))
            for j in peers:
                if i != j:
                    host, _, port = peers[j].rpartition(":")
                    links[f"{i}-{j}"] = (host, int(port))
        proxy = ProxyProcess(links)
        holder["proxy"] = proxy
        proxy.start()
        holder["peers"] = dict(peers)
        return {i: {j: proxy.address(f"{i}-{j}") for j in peers if j != i} for i in peers}

    handle: ProxiedCluster | None = None
    try:
        # start_cluster stops the nodes it spawned itself when it fails
        cluster = start(data_dir, timeout_s, peer_routes=routes, extra_args=extra_args)
        handle = ProxiedCluster(cluster, holder["proxy"], holder["peers"])  # type: ignore[arg-type]
        yield handle
    finally:
        try:
            if handle is not None:
                handle.stop()
        finally:
            proxy = holder.get("proxy")
            if isinstance(proxy, ProxyProcess):
                proxy.stop()
