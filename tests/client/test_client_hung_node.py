"""A node that accepts connections but never answers (hung, or its port taken by a
process that does not speak raftlog) costs a call one attempt's bound at most: the
next node is asked within the same attempt, and the hung one is tried last for a
while. A local cluster with one node's port occupied once failed a create_topic
after 30 s, every attempt having drawn the hung node first."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from raftlog.client import RaftlogClient
from raftlog.cluster import free_ports
from tests.client.fake_node import FakeNodeServer, Route


class _Answering(FakeNodeServer):
    def routes(self) -> dict[str, Route]:
        return {}


@pytest.fixture
def hung_address() -> Iterator[str]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    (port,) = free_ports(1)
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        sock.close()


@pytest.fixture
async def answering() -> AsyncIterator[_Answering]:
    node = _Answering()
    await node.start()
    yield node
    await node.stop()


async def test_a_hung_node_costs_one_attempt_bound_then_is_tried_last(
    hung_address: str, answering: _Answering
) -> None:
    servers = f"{hung_address},{answering.address}"
    durations = []
    for _ in range(20):  # fresh clients: the seeds come in a random order each time
        client = RaftlogClient(servers, request_timeout_s=5.0)
        client._attempt_timeout_s = 0.3
        try:
            started = time.monotonic()
            assert await client.topic_id("t") == -1  # the fake node names no id
            durations.append(time.monotonic() - started)
            if durations[-1] > 0.25:  # it drew the hung node first: now tried last
                assert client._candidates()[-1] == hung_address
        finally:
            await client.close()
    # never more than one attempt's bound lost to the hung node in a call
    assert max(durations) < 0.55, durations
    assert any(d > 0.25 for d in durations), "the hung node was never drawn first"
