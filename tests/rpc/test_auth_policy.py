"""The one auth check (raftlog.rpc.server.AuthPolicy): which token opens which route,
and what a refusal says (the role, its flag and its environment variable)."""

from __future__ import annotations

import pytest

from raftlog.rpc.messages import CLIENT_ROUTES
from raftlog.rpc.roles import PEER_CALLS, ROUTE_ROLES, Role
from raftlog.rpc.server import AuthPolicy

CLIENT, ADMIN, PEER = "client-token", "admin-token", "peer-token"
SECURED = AuthPolicy(client_token=CLIENT, peer_token=PEER, admin_token=ADMIN, open_status=False)
ADMIN_ROUTES = sorted(r for r, role in ROUTE_ROLES.items() if role is Role.ADMIN)
CLIENT_ONLY = sorted(r for r, role in ROUTE_ROLES.items() if role is Role.CLIENT)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_each_route_takes_its_own_token() -> None:
    assert SECURED.refusal("/v1/produce", bearer(CLIENT)) is None
    assert SECURED.refusal("/v1/delete_topic", bearer(ADMIN)) is None
    assert SECURED.refusal("/raft/append_entries", bearer(PEER)) is None


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_the_client_token_never_reaches_an_admin_route(route: str) -> None:
    status, message = SECURED.refusal(f"/v1/{route}", bearer(CLIENT))
    assert status == 403
    assert message.startswith(f"{route} needs the admin role: send the admin token")
    assert "--admin-token" in message and "RAFTLOG_ADMIN_TOKEN" in message
    assert "refuses the client token" in message


def test_the_refusal_names_role_flag_and_variable() -> None:
    _, message = SECURED.refusal("/v1/delete_topic", bearer(CLIENT))
    assert message.startswith(
        "delete_topic needs the admin role: send the admin token "
        "(--admin-token / RAFTLOG_ADMIN_TOKEN)"
    )


@pytest.mark.parametrize("route", sorted(ROUTE_ROLES))
def test_the_admin_token_calls_every_route(route: str) -> None:
    assert SECURED.refusal(f"/v1/{route}", bearer(ADMIN)) is None


@pytest.mark.parametrize("route", sorted(ROUTE_ROLES))
def test_the_peer_token_calls_only_what_nodes_call(route: str) -> None:
    refused = SECURED.refusal(f"/v1/{route}", bearer(PEER))
    if route in PEER_CALLS:
        assert refused is None
    else:
        assert refused is not None and refused[0] == 403
        assert "refuses the peer token" in refused[1]


def test_the_client_and_admin_tokens_never_open_raft_routes() -> None:
    for token, kind in ((CLIENT, "client"), (ADMIN, "admin")):
        status, message = SECURED.refusal("/raft/vote", bearer(token))
        assert status == 403
        assert f"refuses the {kind} token" in message and "--peer-token" in message


def test_create_topic_follows_auto_create_topics_enable() -> None:
    assert SECURED.refusal("/v1/create_topic", bearer(CLIENT)) is None
    off = AuthPolicy(
        client_token=CLIENT, peer_token=PEER, admin_token=ADMIN, auto_create_topics=False
    )
    status, message = off.refusal("/v1/create_topic", bearer(CLIENT))
    assert status == 403 and "create_topic needs the admin role" in message
    assert off.refusal("/v1/create_topic", bearer(ADMIN)) is None


@pytest.mark.parametrize("header", ["", "Bearer wrong", CLIENT, f"Bearer {CLIENT}x"])
def test_no_token_or_an_unknown_one_is_unauthorized(header: str) -> None:
    for path, flag in (
        ("/v1/list_topics", "--client-token"),
        ("/v1/delete_topic", "--admin-token"),
        ("/raft/heartbeat", "--peer-token"),
    ):
        status, message = SECURED.refusal(path, header)
        assert status == 401 and flag in message, message
        assert ("none was sent" in message) == (header == "")


@pytest.mark.parametrize(
    "header",
    ["Bearer \udcff\udcfe", "Basic abc", "bearer " + CLIENT, "\udc80"],
)
def test_a_malformed_authorization_header_is_unauthorized(header: str) -> None:
    # aiohttp hands bytes that are not UTF-8 over as surrogate escapes
    for path in ("/v1/produce", "/v1/stream", "/raft/stream", "/health"):
        status, message = SECURED.refusal(path, header)
        assert status == 401, path
        assert "malformed" in message


def test_the_client_stream_opens_for_any_role_and_checks_each_message() -> None:
    for token in (CLIENT, ADMIN, PEER):
        assert SECURED.refusal("/v1/stream", bearer(token)) is None
    assert SECURED.refusal("/v1/stream", "")[0] == 401
    refused = SECURED.route_refusal("delete_topic", Role.CLIENT)
    assert refused is not None and refused[0] == 403
    assert SECURED.route_refusal("delete_topic", Role.ADMIN) is None
    assert SECURED.route_refusal("produce", None, "none was sent")[0] == 401


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_status_routes_take_any_token_off_loopback(path: str) -> None:
    for token in (CLIENT, ADMIN, PEER):
        assert SECURED.refusal(path, bearer(token)) is None
    status, message = SECURED.refusal(path, "")
    assert status == 401 and f"{path} needs a token" in message
    loopback = AuthPolicy(client_token=CLIENT, peer_token=PEER, open_status=True)
    assert loopback.refusal(path, "") is None


def test_a_route_whose_token_the_node_lacks_is_open() -> None:
    peers_only = AuthPolicy(peer_token=PEER, open_status=False)
    assert peers_only.refusal("/v1/produce", "") is None
    assert peers_only.refusal("/v1/delete_topic", "") is None
    assert peers_only.refusal("/raft/vote", "")[0] == 401
    assert peers_only.refusal("/health", bearer(PEER)) is None
    assert AuthPolicy(open_status=False).refusal("/health", "") is None


def test_without_an_admin_token_admin_calls_are_refused_not_opened() -> None:
    no_admin = AuthPolicy(client_token=CLIENT, peer_token=PEER)
    status, message = no_admin.refusal("/v1/register_node", bearer(CLIENT))
    assert status == 403
    assert "this node has no admin token" in message and "--admin-token" in message
    assert no_admin.refusal("/v1/produce", bearer(CLIENT)) is None
    admin_only = AuthPolicy(peer_token=PEER, admin_token=ADMIN)
    assert admin_only.refusal("/v1/produce", "") is None  # no client token: client routes open
    assert admin_only.refusal("/v1/delete_topic", "")[0] == 401


def test_every_client_route_is_checked_by_its_role() -> None:
    # the policy decides every route of the wire protocol (none falls through open)
    for route in CLIENT_ROUTES.values():
        assert SECURED.refusal(f"/v1/{route}", "") is not None
