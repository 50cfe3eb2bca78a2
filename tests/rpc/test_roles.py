"""The route -> role table (raftlog.rpc.roles): every client route has exactly one role,
and the table's safety rules hold."""

from __future__ import annotations

from raftlog.rpc.messages import CLIENT_ROUTES
from raftlog.rpc.roles import (
    AUTO_CREATE_ROUTE,
    PEER_CALLS,
    ROUTE_ROLES,
    Role,
    may_call,
    role_of,
)

ISSUE_CLIENT = {
    "produce",
    "fetch",
    "metadata",
    "list_topics",
    "list_offsets",
    "offset_for_timestamp",
    "init_producer",
    "end_txn",
    "coordinator",
    # the transaction coordinator's other calls (issue 45: typed, beside its EndTxn)
    "txn_register",
    "txn_abort_run",
    "txn_cut",
    "txn_describe_writer",
    "partition_status",
    "describe_configs",
    "create_topic",
}
ISSUE_ADMIN = {
    "delete_topic",
    "alter_config",
    "create_partitions",
    "register_node",
    "move_partition",
    "complete_move",
    "transfer_leadership",
    "decommission_node",
}


def test_every_client_route_has_exactly_one_role() -> None:
    routes = list(CLIENT_ROUTES.values())
    assert len(routes) == len(set(routes))
    missing = sorted(set(routes) - set(ROUTE_ROLES))
    assert not missing, f"client routes without a role in raftlog.rpc.roles: {missing}"
    assert not set(ROUTE_ROLES) - set(routes), "roles of routes that do not exist"
    assert all(isinstance(role, Role) and role is not Role.PEER for role in ROUTE_ROLES.values())


def test_the_roles_are_the_issues() -> None:
    assert {r for r, role in ROUTE_ROLES.items() if role is Role.CLIENT} == ISSUE_CLIENT
    assert {r for r, role in ROUTE_ROLES.items() if role is Role.ADMIN} == ISSUE_ADMIN


def test_a_route_without_a_role_is_admin() -> None:
    assert role_of("a_route_added_later") is Role.ADMIN
    assert not may_call(Role.CLIENT, "a_route_added_later")


def test_create_topic_is_admin_when_auto_create_is_off() -> None:
    assert role_of(AUTO_CREATE_ROUTE, auto_create_topics=True) is Role.CLIENT
    assert role_of(AUTO_CREATE_ROUTE, auto_create_topics=False) is Role.ADMIN
    assert not may_call(Role.CLIENT, AUTO_CREATE_ROUTE, auto_create_topics=False)


def test_the_peer_role_reaches_one_admin_route_only() -> None:
    assert set(ROUTE_ROLES) >= PEER_CALLS
    assert {r for r in PEER_CALLS if ROUTE_ROLES[r] is Role.ADMIN} == {"complete_move"}
    assert not may_call(Role.PEER, "register_node")
    assert not may_call(None, "produce")
