"""The one auth check (raftlog.rpc.server.AuthPolicy): which token opens which route."""

from __future__ import annotations

import pytest

from raftlog.rpc.server import AuthPolicy

CLIENT, PEER = "client-token", "peer-token"
SECURED = AuthPolicy(client_token=CLIENT, peer_token=PEER, open_status=False)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_each_route_takes_its_own_token() -> None:
    assert SECURED.refusal("/v1/produce", bearer(CLIENT)) is None
    assert SECURED.refusal("/raft/append_entries", bearer(PEER)) is None


def test_the_other_kinds_token_is_forbidden_and_named() -> None:
    status, message = SECURED.refusal("/raft/vote", bearer(CLIENT))
    assert status == 403
    assert "refuses the client token" in message and "--peer-token" in message
    status, message = SECURED.refusal("/v1/fetch", bearer(PEER))
    assert status == 403
    assert "refuses the peer token" in message and "--auth-token" in message


@pytest.mark.parametrize("header", ["", "Bearer wrong", CLIENT, f"Bearer {CLIENT}x"])
def test_no_token_or_an_unknown_one_is_unauthorized(header: str) -> None:
    for path, flag in (("/v1/list_topics", "--auth-token"), ("/raft/heartbeat", "--peer-token")):
        status, message = SECURED.refusal(path, header)
        assert status == 401 and flag in message and path in message
        assert ("none was sent" in message) == (header == "")


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_status_routes_take_either_token_off_loopback(path: str) -> None:
    assert SECURED.refusal(path, bearer(CLIENT)) is None
    assert SECURED.refusal(path, bearer(PEER)) is None
    status, message = SECURED.refusal(path, "")
    assert status == 401 and f"{path} needs a token" in message
    loopback = AuthPolicy(client_token=CLIENT, peer_token=PEER, open_status=True)
    assert loopback.refusal(path, "") is None


def test_a_route_whose_token_the_node_lacks_is_open() -> None:
    peers_only = AuthPolicy(peer_token=PEER, open_status=False)
    assert peers_only.refusal("/v1/produce", "") is None
    assert peers_only.refusal("/raft/vote", "")[0] == 401
    assert peers_only.refusal("/health", bearer(PEER)) is None
    assert AuthPolicy(open_status=False).refusal("/health", "") is None
