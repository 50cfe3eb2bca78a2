"""Fixtures for the nemesis: a 3-node cluster whose peer traffic runs through proxies.

``proxied_cluster`` starts one proxy process with a link per ordered pair of
nodes (``"1-2"``: node 1's raft traffic to node 2) and a client link per node
(``"c-2"``: the workload's client traffic to node 2), then starts the cluster
with each node's ``--peer-routes`` pointing at its links. The finalizer stops
every node and the proxy by PID, even when the test fails.
"""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator

import pytest

from raftlog.cluster import (
    LocalCluster,
    pid_alive,
    restart_node,
    start_cluster,
    stop_cluster,
    stop_node,
)
from raftlog.faults.proxy_process import ProxyProcess


class ProxiedCluster:
    """A running cluster (``.servers``, ``.kill``, ``.restart``, ``.alive``, ``.stop``)
    with ``.proxy`` and link helpers."""

    def __init__(self, cluster: LocalCluster, proxy: ProxyProcess, peers: dict[int, str]) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.peers = peers

    @property
    def servers(self) -> list[str]:
        return self.cluster.servers

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        stop_node(self.cluster.node(node_id), sig, timeout_s=10.0)

    def restart(self, node_id: int) -> None:
        restart_node(self.cluster, node_id)

    def alive(self, node_id: int) -> bool:
        return pid_alive(self.cluster.node(node_id).pid)

    def stop(self) -> None:
        stop_cluster(self.cluster.data_dir, timeout_s=10.0)
        for n in self.cluster.nodes:
            if pid_alive(n.pid):
                stop_node(n, signal.SIGKILL, timeout_s=5.0)

    @property
    def client_map(self) -> dict[str, str]:
        """Each node's address -> its client link through the proxy."""
        return {a: self.proxy.address(f"c-{i}") for i, a in self.peers.items()}

    def links_between(self, a: set[int], b: set[int]) -> list[str]:
        """The peer links from any node of ``a`` to any of ``b`` and back."""
        return [f"{i}-{j}" for i in a for j in b if i != j] + [
            f"{j}-{i}" for i in a for j in b if i != j
        ]


@pytest.fixture
def proxied_cluster(tmp_path: pathlib.Path) -> Iterator[ProxiedCluster]:
    os.environ.pop("RAFTLOG_AUTH_TOKEN", None)
    holder: dict[str, ProxyProcess] = {}

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
        holder["peers"] = dict(peers)  # type: ignore[assignment]
        return {i: {j: proxy.address(f"{i}-{j}") for j in peers if j != i} for i in peers}

    handle: ProxiedCluster | None = None
    try:
        # start_cluster stops the nodes it spawned itself when it fails
        cluster = start_cluster(tmp_path / "cluster", 3, timeout_s=60.0, peer_routes=routes)
        handle = ProxiedCluster(cluster, holder["proxy"], holder["peers"])  # type: ignore[arg-type]
        yield handle
    finally:
        try:
            if handle is not None:
                handle.stop()
        finally:
            proxy = holder.get("proxy")
            if proxy is not None:
                proxy.stop()
