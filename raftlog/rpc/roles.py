"""Roles: which secret may call which route (issue 44, item 1).

Three secrets, each a role: *client* (data and read calls, transactions, and
``create_topic`` while ``auto.create.topics.enable``), *admin* (topic delete,
configs, partitions, membership and moves; every client route too) and *peer*
(the nodes' own: ``/raft/*``, and of ``/v1/*`` only :data:`PEER_CALLS`, the
calls a node makes on another node or on its own shards).

Invariants (checked by ``tests/rpc/test_roles.py``):

- every route of :data:`raftlog.rpc.messages.CLIENT_ROUTES` has exactly one
  entry in :data:`ROUTE_ROLES`; a route without one is treated as admin (fail
  closed) by :func:`role_of`;
- no admin route is callable with the client token;
- the peer role reaches exactly one admin route, ``complete_move`` (a
  partition's leader tells the controller a move is done).

The node's internal calls (moves, partition
status, shard 0's calls to its shards) authenticate with the peer token: the
nodes' identity, never handed to clients or admins.
"""

from __future__ import annotations

import enum


class Role(enum.Enum):
    CLIENT = "client"
    ADMIN = "admin"
    PEER = "peer"


#: Each role's flag and environment variable (the node's and the CLI's).
TOKEN_FLAGS: dict[Role, tuple[str, str]] = {
    Role.CLIENT: ("--client-token", "RAFTLOG_CLIENT_TOKEN"),
    Role.ADMIN: ("--admin-token", "RAFTLOG_ADMIN_TOKEN"),
    Role.PEER: ("--peer-token", "RAFTLOG_PEER_TOKEN"),
}
#: The client token's older names, still accepted (existing users, the connector).
CLIENT_TOKEN_ALIAS = ("--auth-token", "RAFTLOG_AUTH_TOKEN")

#: The route whose role follows ``auto.create.topics.enable``: client while it is
#: on (Kafka's default), admin when it is off.
AUTO_CREATE_ROUTE = "create_topic"

ROUTE_ROLES: dict[str, Role] = {
    "produce": Role.CLIENT,
    "fetch": Role.CLIENT,
    "metadata": Role.CLIENT,
    "list_topics": Role.CLIENT,
    "list_offsets": Role.CLIENT,
    "offset_for_timestamp": Role.CLIENT,
    "init_producer": Role.CLIENT,
    "end_txn": Role.CLIENT,
    # the transaction coordinator's calls (``CoordinatorEndTxnRequest`` and its kin)
    "txn_register": Role.CLIENT,
    "coordinator": Role.CLIENT,  # EndTxn: the coordinator's one call per micro-batch
    "txn_abort_run": Role.CLIENT,
    "txn_cut": Role.CLIENT,
    "txn_describe_writer": Role.CLIENT,
    "partition_status": Role.CLIENT,
    "describe_configs": Role.CLIENT,
    AUTO_CREATE_ROUTE: Role.CLIENT,  # admin when auto.create.topics.enable is false
    "delete_topic": Role.ADMIN,
    "alter_config": Role.ADMIN,
    "create_partitions": Role.ADMIN,
    "register_node": Role.ADMIN,
    "move_partition": Role.ADMIN,
    "complete_move": Role.ADMIN,
    "transfer_leadership": Role.ADMIN,
    "decommission_node": Role.ADMIN,
}
"""Route name under ``/v1/`` -> the role that may call it (admin may call all)."""

PEER_CALLS: frozenset[str] = frozenset(
    {
        # shard 0 forwards a client's partition call to the shard that owns it
        "produce",
        "fetch",
        "list_offsets",
        "offset_for_timestamp",
        "init_producer",
        "end_txn",
        "txn_register",
        "coordinator",
        "txn_abort_run",
        "txn_cut",
        "txn_describe_writer",
        # metadata and watermarks from other nodes and shards
        "metadata",
        "partition_status",
        # a partition's leader ends a move at the controller
        "complete_move",
    }
)
"""The ``/v1/`` routes the peer token may call: those nodes call on each other."""


PAGE_ROLES: dict[str, Role] = {
    # the console's page (raftlog.console), when the node serves it (--console)
    "/console": Role.CLIENT,
    # what the transaction coordinators this node leads recorded (the console's Spark
    # writers and open transactions), read-only JSON
    "/transactions": Role.CLIENT,
}
"""GET paths outside ``/v1/`` that show the cluster, read-only -> the role they need.
The admin and peer tokens pass too (the peer's: shard 0 gathers its shards' answers);
open when the node has no client token, as client routes are."""


def role_of(route: str, auto_create_topics: bool = True) -> Role:
    """The role ``route`` needs; admin for a route without an entry (fail closed)."""
    if route == AUTO_CREATE_ROUTE and not auto_create_topics:
        return Role.ADMIN
    return ROUTE_ROLES.get(route, Role.ADMIN)


def may_call(who: Role | None, route: str, auto_create_topics: bool = True) -> bool:
    """Whether a caller of role ``who`` (None: no known token) may call ``route``."""
    if who is Role.ADMIN:
        return True
    if who is Role.PEER:
        return route in PEER_CALLS
    return who is Role.CLIENT and role_of(route, auto_create_topics) is Role.CLIENT


def token_source(role: Role) -> str:
    """How to send ``role``'s token, for error messages: its flag and variable."""
    flag, env = TOKEN_FLAGS[role]
    text = f"the {role.value} token ({flag} / {env}"
    if role is Role.CLIENT:
        text += f", or their aliases {CLIENT_TOKEN_ALIAS[0]} / {CLIENT_TOKEN_ALIAS[1]}"
    return text + ")"
