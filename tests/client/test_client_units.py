"""Client pieces that need no cluster: record framing, server lists, error mapping."""

from __future__ import annotations

import pytest

from raftlog.client import (
    NotLeaderError,
    RaftlogClient,
    UnknownTopicError,
    frame_records,
    parse_servers,
    unframe_records,
)
from raftlog.client.errors import error_for
from raftlog.rpc.messages import ErrorCode


def test_framing_round_trip_and_rejects_mismatched_count() -> None:
    values = [b"a", b"", b"\x00\xff" * 3]
    payload = frame_records(values)
    assert unframe_records(payload, 3) == values
    assert unframe_records(payload, 2) is None
    assert unframe_records(payload[:-1], 3) is None


def test_parse_servers() -> None:
    assert parse_servers("127.0.0.1:1, 127.0.0.1:2") == ["127.0.0.1:1", "127.0.0.1:2"]
    with pytest.raises(ValueError, match="servers: expected a comma-separated list of HOST:PORT"):
        parse_servers("localhost")
    with pytest.raises(ValueError, match="servers"):
        RaftlogClient("127.0.0.1:99999")


def test_error_mapping_keeps_leader_hint() -> None:
    e = error_for(ErrorCode.NOT_LEADER, "not leader", 2, "127.0.0.1:5")
    assert isinstance(e, NotLeaderError) and e.leader_id == 2 and e.leader_address.endswith(":5")
    assert isinstance(error_for(ErrorCode.UNKNOWN_TOPIC, "unknown topic 't'"), UnknownTopicError)


async def test_unreachable_cluster_fails_with_clear_error() -> None:
    from raftlog.client import ClusterUnavailableError
    from raftlog.cluster import free_ports

    (port,) = free_ports(1)
    async with RaftlogClient([f"127.0.0.1:{port}"], request_timeout_s=0.3) as c:
        with pytest.raises(ClusterUnavailableError, match=f"cannot reach 127.0.0.1:{port}"):
            await c.list_topics()
