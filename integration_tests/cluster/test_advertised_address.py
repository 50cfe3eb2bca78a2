"""Clients follow a node's advertised address, not the one it listens on (issue 17, item 1).

One node listens on 127.0.0.1:P and advertises 127.0.0.1:Q, where a TCP proxy
forwards Q to P (standing in for a NAT or a load balancer in front of a host).
A client given only P learns Q from the node and sends its partition calls
there: they pass through the proxy, and once the proxy is cut they fail naming
Q, although P still answers.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal

from raftlog.client import RaftlogClient, RaftlogError, frame_records
from raftlog.cluster import (
    LocalCluster,
    NodeProcess,
    free_ports,
    node_argv,
    pid_alive,
    spawn,
    stop_node,
    wait_ready,
)
from raftlog.faults.proxy import TcpProxy


async def test_a_client_follows_the_advertised_address(tmp_path: pathlib.Path) -> None:
    (port,) = free_ports(1)
    listen = f"127.0.0.1:{port}"
    async with TcpProxy("127.0.0.1", port, name="advertised") as proxy:
        advertised = proxy.address
        argv = node_argv(1, listen, tmp_path, {1: advertised}, ["--advertise", advertised])
        node = NodeProcess(1, listen, -1, argv, str(tmp_path / "node-1.log"))
        proc = spawn(node)
        try:
            # health is asked at the listen address: the proxy sees none of it
            await asyncio.to_thread(
                wait_ready, LocalCluster(str(tmp_path), [node]), 60.0, procs={1: proc}
            )
            async with RaftlogClient([listen], request_timeout_s=10.0) as client:
                meta = await client.metadata()
                assert [(n.node_id, n.address) for n in meta.nodes] == [(1, advertised)]
                await client.create_topic("adv", partitions=1, replication_factor=1)
                before = proxy.bytes_up
                r = await client.produce("adv", 0, [(frame_records([b"via-q"]), 1)])
                assert proxy.bytes_up > before  # the produce went to the advertised address
                fetched = await client.fetch("adv", 0, r.base_offset)
                assert [b.payload for b in fetched.batches] == [frame_records([b"via-q"])]
            proxy.cut()
            async with RaftlogClient([listen], request_timeout_s=3.0) as client:
                assert "adv" in await client.list_topics()  # the seed itself still answers
                try:
                    await client.produce("adv", 0, [(frame_records([b"lost"]), 1)])
                except RaftlogError as exc:
                    assert advertised in str(exc), exc
                else:
                    raise AssertionError("a produce reached the leader with its address cut")
        finally:
            stop_node(node, timeout_s=10.0)
            if pid_alive(node.pid):
                stop_node(node, signal.SIGKILL, timeout_s=5.0)
