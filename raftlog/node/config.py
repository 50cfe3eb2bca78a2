"""A node's configuration: the ``raftlog server`` flags, :class:`NodeConfig`, and the
node's fixed tunables."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import os
import pathlib
from typing import Any

from raftlog.kafka.groups.limits import GroupLimits
from raftlog.node.disk_space import DEFAULT_MIN_FREE_BYTES
from raftlog.producers.rm_stm import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    SESSION_TRANSACTION_TIMEOUT_MS,
)
from raftlog.rpc.edge_limits import EdgeLimits
from raftlog.rpc.roles import CLIENT_TOKEN_ALIAS, TOKEN_FLAGS, Role
from raftlog.rpc.tls import TlsConfigError, TlsFiles, client_context, server_context

log = logging.getLogger("raftlog.node")


DEFAULT_PARTITIONS = 6
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_PARTITIONS = 10_000
# bounds --shards: processes per node
MAX_SHARDS = 256
# --flush-scope: "node", one syncfs of the data directory's filesystem serves every
# group that asked for a flush meanwhile (raftlog.raft.node_flush); "group", each
# group's log fsyncs its own files.
FLUSH_SCOPE_NODE = "node"
FLUSH_SCOPE_GROUP = "group"
FLUSH_SCOPES = (FLUSH_SCOPE_NODE, FLUSH_SCOPE_GROUP)
COORDINATOR_ROLL_FORWARD_S = 5.0
"""How often the transaction coordinator's leader retries its incomplete decisions."""
COORDINATOR_ELECTION_CHECK_S = 0.2
"""How soon a newly elected coordinator leader resumes the decisions it finds incomplete."""
COORDINATOR_RESUME_TIMEOUT_S = 120.0
"""The bound of one resume round (its markers are retried for 30 s each)."""
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 10_000
# How long a deleted topic's replica stays moved aside before the node deletes it
# (Kafka's file.delete.delay.ms).
DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES = 16 * 1024 * 1024
"""``__transactions``' largest segment (Kafka's ``transaction.state.log.segment.bytes``)."""
DEFAULT_FILE_DELETE_DELAY_MS = 60_000
# A new topic's replication factor when the client gives none (capped at the node count).
DEFAULT_REPLICATION_FACTOR = 3
# How long transfer-leadership waits for the new leader: under the client's attempt
# timeout (10 s); a retriable TIMEOUT after it, and the client asks again (idempotent).
LEADERSHIP_TRANSFER_WAIT_S = 8.0
# How often the leader of a moving partition takes the move's next step.
MOVE_STEP_INTERVAL_S = 0.2
# How long a decommission waits for the leaving node to learn it was removed, and how
# many ticks after it matched the log a reply must come (a heartbeat that carried the
# commit index was answered).
DECOMMISSION_CATCH_UP_S = 3.0
HEARD_AFTER_TICKS = 3
# The leader balancer (raftlog.controller.leader_balancer), run by the controller leader:
# how often it looks (0 turns it off), how long a user's transfer-leadership keeps it
# off that partition, and how recently the controller leader must have heard from a
# node for the balancer to count it live (heartbeats go every 50 ms).
DEFAULT_LEADER_BALANCE_INTERVAL_MS = 3_000
DEFAULT_LEADER_BALANCE_PIN_MS = 10 * 60 * 1000
LEADER_BALANCE_LIVE_MS = 2_000
# How long a follower may go without catching up to its leader's log end before
# `cluster health` reports it lagging (Kafka's replica.lag.time.max.ms).
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
# How often partition leaders sample their followers' progress for that.
REPLICA_LAG_SAMPLE_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    host: str
    port: int
    data_dir: pathlib.Path
    peers: dict[int, str]  # every node's advertised address, this one included
    auth_token: str | None = None  # the client token (--client-token, alias --auth-token)
    # the nodes' own secret for /raft/*; never accepted from clients, nor theirs here
    peer_token: str | None = None
    # the admin role's secret (raftlog.rpc.roles): topic delete, configs, membership
    admin_token: str | None = None
    # Kafka's auto.create.topics.enable: create_topic is a client call (else admin)
    auto_create_topics_enable: bool = True
    tls: TlsFiles | None = None
    default_partitions: int = DEFAULT_PARTITIONS
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    heartbeat_interval_s: float = 0.05
    # Open transactions older than this are aborted by the partition leader, so
    # that a dead writer cannot hold back the last stable offset (and readers).
    transaction_timeout_ms: int = SESSION_TRANSACTION_TIMEOUT_MS
    # The largest per-session transaction timeout a client may ask for (init_producer).
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    # Where to send peer (raft) traffic for a node when not its address: e.g. a
    # fault-injecting proxy per link. Clients are still told ``peers``.
    peer_routes: dict[int, str] = dataclasses.field(default_factory=dict)
    # How often partition leaders apply retention and every replica deletes below the
    # log start (Kafka's log.retention.check.interval.ms).
    retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS
    # How long a deleted topic's replicas stay moved aside before the node deletes them.
    file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS
    # the coordinator topic's largest segment (--transaction-state-log-segment-bytes):
    # retention drops its closed segments, so completed transactions' records go
    transaction_state_log_segment_bytes: int = DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES
    # The leader balancer: how often the controller leader evens out leaderships
    # (0: never), and how long a user's transfer-leadership pins a partition.
    leader_balance_interval_ms: int = DEFAULT_LEADER_BALANCE_INTERVAL_MS
    leader_balance_pin_ms: int = DEFAULT_LEADER_BALANCE_PIN_MS
    # A follower not caught up to its leader's log end for this long is lagging.
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    # The node's processes (raftlog.node.shards): ``shards`` of them, this one is
    # ``shard_index`` (0: the one started, serving the node's address).
    shards: int = 1
    shard_index: int = 0
    # How flushes are made durable: FLUSH_SCOPE_NODE or FLUSH_SCOPE_GROUP.
    flush_scope: str = FLUSH_SCOPE_NODE
    # --allow-plaintext: serve and peer beyond loopback without TLS (tokens in clear)
    allow_plaintext: bool = False
    # Below this much free space in data_dir's filesystem the node is degraded: it
    # refuses client writes (KAFKA_STORAGE_ERROR); see raftlog.node.disk_space.
    min_free_bytes: int = DEFAULT_MIN_FREE_BYTES
    # Limits at the edge (raftlog.rpc.edge_limits): connections and requests in flight.
    edge: EdgeLimits = dataclasses.field(default_factory=EdgeLimits)
    # --kafka-listen: where the Kafka protocol listener binds (None: no listener), every
    # node's Kafka address (--kafka-peers; what Metadata lists as brokers), and the
    # largest Kafka request accepted (--kafka-max-request-bytes)
    kafka_listen: str | None = None
    kafka_peers: dict[int, str] = dataclasses.field(default_factory=dict)
    kafka_max_request_bytes: int = 0
    kafka_max_connections: int = 1024
    # what Kafka clients may make the group coordinator hold (--kafka-max-group*)
    kafka_group_limits: GroupLimits = dataclasses.field(default_factory=GroupLimits)
    # --quiesce / --no-quiesce: idle groups stop ticking and heartbeating
    # (raftlog.raft.core.RaftCore.quiescent); node liveness stands in for them.
    quiesce: bool = True
    # --console: serve the console's page at /console (raftlog.console), client role
    console: bool = False
    # --max-open-segment-files: the bound on segment descriptors the node's logs hold
    # open (raftlog.storage.open_files); 0: half the process's open-file limit
    max_open_segment_files: int = 0

    @property
    def address(self) -> str:
        """The advertised address: what peers and clients are told."""
        return self.peers[self.node_id]

    @property
    def listen(self) -> str:
        """The address the node binds."""
        return f"{self.host}:{self.port}"


def parse_peers(text: str, option: str = "--peers") -> dict[int, str]:
    """``"1=127.0.0.1:9001,2=..."`` -> ``{1: "127.0.0.1:9001", ...}``.

    Raises ValueError naming the option and the expected form."""
    out: dict[int, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        node, sep, addr = item.partition("=")
        host, colon, port = addr.rpartition(":")
        if (
            not sep
            or not node.strip().isdigit()
            or not colon
            or not host
            or not port.isdigit()
            or not 0 < int(port) < 65536
        ):
            raise ValueError(f"{option}: expected ID=HOST:PORT[,ID=HOST:PORT...], got {item!r}")
        out[int(node)] = addr
    if not out:
        raise ValueError(f"{option}: expected at least one ID=HOST:PORT")
    return out


def is_loopback(host: str) -> bool:
    """This host's own loopback: ``localhost``, ``127.0.0.1`` or ``::1``.

    The rest of 127.0.0.0/8 counts as a network: one machine uses those addresses
    to stand in for separate hosts (the several-hosts test does), so a node there
    is held to a networked node's rules (tokens, a guarded /health). Stricter, never
    looser, than treating it as loopback.
    """
    if host.strip("[]") == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return ip in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def beyond_loopback(addresses: list[str]) -> list[str]:
    """The HOST:PORT ``addresses`` whose host is not :func:`is_loopback`, sorted, once each."""
    return sorted({a for a in addresses if not is_loopback(a.rpartition(":")[0])})


def host_port(value: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError naming ``flag`` and the expected form."""
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{flag}: expected HOST:PORT (port 1-65535), got {value!r}")
    return host, int(port)


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-id", type=int, required=True, help="this node's id (an integer >= 0)")
    p.add_argument("--listen", required=True, help="HOST:PORT to serve on, e.g. 127.0.0.1:9092")
    p.add_argument(
        "--advertise",
        default=None,
        help="HOST:PORT peers and clients reach this node at (default: --listen)",
    )
    p.add_argument("--data-dir", required=True, help="where this node keeps its logs")
    p.add_argument(
        "--peers",
        default="",
        help="every node of the cluster as ID=HOST:PORT,... (this node may be omitted)",
    )
    p.add_argument(
        "--peer-routes",
        default="",
        help="send raft traffic for these nodes elsewhere (e.g. through a proxy): ID=HOST:PORT,...",
    )
    add_token_arguments(p, (Role.CLIENT, Role.ADMIN, Role.PEER))
    p.add_argument(
        "--auto-create-topics-enable",
        type=_boolean("--auto-create-topics-enable"),
        default=True,
        metavar="true|false",
        help="Kafka's auto.create.topics.enable: true lets the client token create "
        "topics; false makes create_topic an admin call (default true)",
    )
    p.add_argument("--tls-cert", default=None, help="this node's PEM certificate (chain)")
    p.add_argument("--tls-key", default=None, help="the PEM private key of --tls-cert")
    p.add_argument("--tls-ca", default=None, help="the cluster's PEM CA: peers are verified by it")
    p.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="bind or peer beyond loopback without TLS: the tokens then cross the network "
        "in plain text (a warning at every start); without it such a node refuses to start",
    )
    p.add_argument(
        "--default-partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help="partitions of topics created without a count (default 6)",
    )
    p.add_argument(
        "--max-batch-bytes",
        type=int,
        default=DEFAULT_MAX_BATCH_BYTES,
        help="largest batch payload accepted by produce (default 16 MiB)",
    )
    p.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=SESSION_TRANSACTION_TIMEOUT_MS,
        help="abort transactions left open this long (default 60000)",
    )
    p.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        help="largest transaction timeout a producer session may ask for (default 900000)",
    )
    p.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=DEFAULT_RETENTION_CHECK_INTERVAL_MS,
        help="how often partitions apply retention.bytes/retention.ms (default 10000)",
    )
    p.add_argument(
        "--file-delete-delay-ms",
        type=int,
        default=DEFAULT_FILE_DELETE_DELAY_MS,
        help="how long a deleted topic's replicas stay moved aside before the node "
        "deletes them (Kafka's file.delete.delay.ms; default 60000)",
    )
    p.add_argument(
        "--transaction-state-log-segment-bytes",
        type=int,
        default=DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES,
        help="the largest segment of the coordinator's internal topic __transactions: "
        "retention drops its closed segments, and with them completed transactions "
        "(Kafka's transaction.state.log.segment.bytes; default 16777216)",
    )
    p.add_argument(
        "--leader-balance-interval-ms",
        type=int,
        default=DEFAULT_LEADER_BALANCE_INTERVAL_MS,
        help="how often the controller leader evens out the partitions led per node; "
        "0 turns the leader balancer off (default 3000)",
    )
    p.add_argument(
        "--leader-balance-pin-ms",
        type=int,
        default=DEFAULT_LEADER_BALANCE_PIN_MS,
        help="how long a partition transfer-leadership keeps the leader balancer off "
        "that partition (default 600000)",
    )
    p.add_argument(
        "--min-free-bytes",
        type=int,
        default=DEFAULT_MIN_FREE_BYTES,
        help="free space to keep in the data directory's filesystem: below it the node "
        "refuses produce with KAFKA_STORAGE_ERROR (degraded mode) and keeps serving reads; "
        "the rest is room for Raft's votes and retention (default 67108864, 64 MiB)",
    )
    p.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        default=DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        help="a follower not caught up to its leader for this long is reported lagging "
        "(Kafka's replica.lag.time.max.ms; default 30000)",
    )
    p.add_argument(
        "--shards",
        type=int,
        default=None,
        help="processes this node runs, each the owner of a share of its groups, behind "
        f"the one --listen address (default: the number of cores, {os.cpu_count() or 1} here)",
    )
    p.add_argument(
        "--flush-scope",
        choices=FLUSH_SCOPES,
        default=FLUSH_SCOPE_NODE,
        help="node: one syncfs of the data directory's filesystem makes every group's "
        "writes durable at once, serving all the groups that asked meanwhile (Linux >= "
        "5.8, else as group); group: each partition's log fsyncs its own files, which "
        "suits a filesystem shared with heavy writers (default node)",
    )
    _add_edge_arguments(p)
    p.add_argument(
        "--kafka-listen",
        default=None,
        help="HOST:PORT of this node's Kafka protocol listener (default: none). With a "
        "client token, Kafka clients authenticate with SASL/PLAIN, the token as the "
        "password; beyond loopback that is required, over TLS (the node's --tls-*)",
    )
    p.add_argument(
        "--kafka-peers",
        default="",
        help="every node's Kafka listener, ID=HOST:PORT,...: the brokers Kafka clients "
        "are told (default: this node's --kafka-listen alone)",
    )
    p.add_argument(
        "--kafka-max-request-bytes",
        type=int,
        default=None,
        help="the largest Kafka request a client may declare; a larger one closes its "
        "connection before it is read (Kafka's socket.request.max.bytes; default: the "
        "node's own request limit, 2 x --max-batch-bytes + 1 MiB)",
    )
    p.add_argument(
        "--kafka-max-connections",
        type=int,
        default=None,
        help="open Kafka connections the listener accepts; one more is closed at once "
        "(default 1024)",
    )
    for flag, (_fields, lo, what) in _GROUP_FLAGS.items():
        p.add_argument(flag, type=int, default=None, help=what + f" (at least {lo})")
    p.add_argument(
        "--quiesce",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a partition with nothing to replicate stops ticking and sending heartbeats "
        "of its own; one heartbeat per pair of nodes tells whether a node is up, and a "
        "write, a lagging replica, a dead node or a membership change wakes it "
        "(--no-quiesce: every partition ticks; default on)",
    )
    p.add_argument(
        "--console",
        action="store_true",
        help="serve the read-only web console at /console (the client role, this node's "
        "TLS; a browser gives the client token as the password); default off",
    )
    p.add_argument(
        "--max-open-segment-files",
        type=int,
        default=0,
        help="segment files the node's partitions hold open at once: the least recently "
        "used flushed ones are closed past it (and any unused for 60 s), and reopened on "
        "use; 0: half the open-file limit, which the node raises to its hard limit at "
        "start (default 0)",
    )
    # set by shard 0 for the processes it starts (raftlog.node.shards); never by users
    p.add_argument("--shard-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log-level", default="INFO")


# the defaults, read from an instance: GroupLimits has __slots__, so on the class each
# field is a slot descriptor, not its default (the help once said "(default <member
# 'max_groups' of 'GroupLimits' objects>)")
_GROUP_DEFAULTS = GroupLimits()

#: the group coordinator's limits: flag -> (GroupLimits fields it sets, lowest value,
#: help); defaults from GroupLimits (raftlog.kafka.groups.limits)
_GROUP_FLAGS: dict[str, tuple[tuple[str, ...], int, str]] = {
    "--kafka-max-groups": (
        ("max_groups",),
        1,
        "consumer groups with members one node coordinates; a new one beyond gets "
        f"COORDINATOR_NOT_AVAILABLE (default {_GROUP_DEFAULTS.max_groups})",
    ),
    "--kafka-max-group-members": (
        ("max_members",),
        1,
        "members of one consumer group (Kafka's group.max.size); one more gets "
        f"GROUP_MAX_SIZE_REACHED (default {_GROUP_DEFAULTS.max_members})",
    ),
    "--kafka-max-group-metadata-bytes": (
        ("max_member_metadata_bytes", "max_assignment_bytes"),
        1024,
        "bytes of one group member's subscription (JoinGroup) and of its assignment "
        "(SyncGroup); more gets INVALID_REQUEST "
        f"(default {_GROUP_DEFAULTS.max_member_metadata_bytes})",
    ),
    "--kafka-max-offset-metadata-bytes": (
        ("max_offset_metadata_bytes",),
        0,
        "bytes of a committed offset's metadata (Kafka's offset.metadata.max.bytes); more "
        f"gets OFFSET_METADATA_TOO_LARGE (default {_GROUP_DEFAULTS.max_offset_metadata_bytes})",
    ),
}


def _group_limits(args: argparse.Namespace) -> GroupLimits:
    """The --kafka-max-group* flags over GroupLimits' defaults; ValueError naming the
    flag below its lowest value."""
    values: dict[str, int] = {}
    for flag, (fields, lo, _help) in _GROUP_FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is None:
            continue
        if not lo <= value <= 2**31 - 1:
            raise ValueError(f"{flag}: expected {lo}..2147483647, got {value}")
        values.update(dict.fromkeys(fields, value))
    return GroupLimits(**values)


#: the edge limits' flags: dest -> (lowest value, help); defaults from EdgeLimits
_EDGE_FLAGS = {
    "queued_max_request_bytes": (
        1024 * 1024,
        "bytes of requests read and not yet answered, node-wide; over it the node stops "
        "reading from the connections that bring more until answers free room (Kafka's "
        "queued.max.request.bytes; default {} = 256 MiB)",
    ),
    "max_in_flight_per_stream": (
        1,
        "requests of one stream (a client's or a peer's) answered at once; over it the "
        "stream is not read until one is answered (default {})",
    ),
    "request_header_timeout_ms": (
        100,
        "close a connection that has not sent a whole HTTP request head within this "
        "long (default {})",
    ),
    "connections_max_idle_ms": (
        100,
        "close a connection (keep-alive or stream) with nothing in flight that received "
        "nothing for this long; clients reconnect (Kafka's connections.max.idle.ms; "
        "default {})",
    ),
    "max_connections": (1, "connections a node accepts at once (default {})"),
    "max_connections_per_ip": (
        1,
        "connections a node accepts at once from one client address (default {})",
    ),
    "max_batches_per_produce": (
        1,
        "batches one produce may carry; more is refused with INVALID_REQUEST (default {})",
    ),
    "max_topics_per_metadata": (
        1,
        "distinct topic names one metadata request may name (duplicates are dropped "
        "first); more is refused with INVALID_REQUEST (default {})",
    ),
}


def _add_edge_arguments(p: argparse.ArgumentParser) -> None:
    defaults = EdgeLimits()
    for dest, (_low, text) in _EDGE_FLAGS.items():
        default = getattr(defaults, dest)
        p.add_argument(
            "--" + dest.replace("_", "-"), type=int, default=default, help=text.format(default)
        )


def _edge_limits(args: argparse.Namespace) -> EdgeLimits:
    """The edge flags, each checked against its lowest sensible value."""
    defaults = EdgeLimits()
    values = {}
    for dest, (low, _text) in _EDGE_FLAGS.items():
        value = getattr(args, dest, getattr(defaults, dest))
        if value < low:
            raise ValueError(
                f"--{dest.replace('_', '-')}: expected an integer >= {low}, got {value}"
            )
        values[dest] = value
    return EdgeLimits(**values)


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    """Validate the server flags; ValueError names the flag and the expected form."""
    if args.node_id < 0:
        raise ValueError(f"--node-id: expected an integer >= 0, got {args.node_id}")
    host, port = host_port(args.listen, "--listen")
    advertise = getattr(args, "advertise", None) or args.listen
    advertised_host, _ = host_port(advertise, "--advertise")
    if advertised_host in ("0.0.0.0", "::", "[::]"):
        raise ValueError(
            f"--advertise: expected an address peers and clients can reach, got {advertise!r} "
            "(a wildcard --listen needs --advertise HOST:PORT)"
        )
    peers = parse_peers(args.peers) if args.peers else {}
    if peers.get(args.node_id, advertise) != advertise:
        raise ValueError(
            f"--peers: node {args.node_id} is listed as {peers[args.node_id]} "
            f"but it advertises {advertise} (--advertise, default --listen)"
        )
    peers[args.node_id] = advertise
    routes_arg = getattr(args, "peer_routes", "")
    peer_routes = parse_peers(routes_arg, "--peer-routes") if routes_arg else {}
    unknown = sorted(set(peer_routes) - set(peers))
    if unknown:
        raise ValueError(
            f"--peer-routes: node(s) {', '.join(map(str, unknown))} are not in --peers"
        )
    token = resolve_token(args, Role.CLIENT)
    peer_token = resolve_token(args, Role.PEER)
    admin_token = resolve_token(args, Role.ADMIN)
    non_loopback = beyond_loopback([args.listen, *peers.values()])
    if non_loopback and not (token and peer_token):
        raise ValueError(
            f"binding or peering beyond loopback ({', '.join(non_loopback)}) "
            "requires a client token and a peer token: pass --client-token (or its alias "
            "--auth-token, or set RAFTLOG_CLIENT_TOKEN) and --peer-token (or set "
            "RAFTLOG_PEER_TOKEN)"
        )
    if (token or admin_token) and not peer_token:
        flag = "--auth-token" if token else "--admin-token"
        raise ValueError(
            f"{flag} needs --peer-token too (or RAFTLOG_PEER_TOKEN): the nodes' own "
            "secret for raft traffic, which clients never get"
        )
    if token and token == peer_token:
        raise ValueError(
            "--peer-token must differ from --auth-token: a client token must not open the "
            "raft routes"
        )
    if admin_token and admin_token in (token, peer_token):
        other = "--client-token" if admin_token == token else "--peer-token"
        raise ValueError(
            f"--admin-token must differ from {other}: the three roles have separate secrets"
        )
    tls = tls_files(args)
    allow_plaintext = bool(getattr(args, "allow_plaintext", False))
    if non_loopback and tls is None and not allow_plaintext:
        raise ValueError(
            f"binding or peering beyond loopback ({', '.join(non_loopback)}) "
            "without TLS sends the tokens across the network in plain text: pass "
            "--tls-cert/--tls-key/--tls-ca (PEM files), or --allow-plaintext to run "
            "without TLS on a network you trust"
        )
    if not 1 <= args.default_partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"--default-partitions: expected 1..{MAX_PARTITIONS}, got {args.default_partitions}"
        )
    if not 1 <= args.max_batch_bytes <= 64 * 1024 * 1024:
        raise ValueError(
            f"--max-batch-bytes: expected 1..67108864 bytes, got {args.max_batch_bytes}"
        )
    txn_timeout = getattr(args, "transaction_timeout_ms", SESSION_TRANSACTION_TIMEOUT_MS)
    if not 1 <= txn_timeout <= 24 * 3600 * 1000:
        raise ValueError(
            f"--transaction-timeout-ms: expected 1..86400000 milliseconds, got {txn_timeout}"
        )
    max_txn_timeout = getattr(
        args, "max_transaction_timeout_ms", DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    )
    if not 1 <= max_txn_timeout <= 24 * 3600 * 1000:
        raise ValueError(
            f"--max-transaction-timeout-ms: expected 1..86400000 milliseconds, "
            f"got {max_txn_timeout}"
        )
    retention_interval = getattr(
        args, "retention_check_interval_ms", DEFAULT_RETENTION_CHECK_INTERVAL_MS
    )
    if not 10 <= retention_interval <= 24 * 3600 * 1000:
        raise ValueError(
            f"--retention-check-interval-ms: expected 10..86400000 milliseconds, "
            f"got {retention_interval}"
        )
    day_ms = 24 * 3600 * 1000
    file_delete_delay = getattr(args, "file_delete_delay_ms", DEFAULT_FILE_DELETE_DELAY_MS)
    if not 0 <= file_delete_delay <= 365 * day_ms:
        raise ValueError(
            f"--file-delete-delay-ms: expected 0..31536000000 milliseconds, got {file_delete_delay}"
        )
    txn_segment = getattr(
        args, "transaction_state_log_segment_bytes", DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES
    )
    if not 1024 <= txn_segment <= 1 << 30:
        raise ValueError(
            f"--transaction-state-log-segment-bytes: expected 1024..1073741824 bytes, "
            f"got {txn_segment}"
        )
    balance_interval = getattr(
        args, "leader_balance_interval_ms", DEFAULT_LEADER_BALANCE_INTERVAL_MS
    )
    if not (balance_interval == 0 or 100 <= balance_interval <= day_ms):
        raise ValueError(
            "--leader-balance-interval-ms: expected 0 (off) or 100..86400000 milliseconds, "
            f"got {balance_interval}"
        )
    pin_ms = getattr(args, "leader_balance_pin_ms", DEFAULT_LEADER_BALANCE_PIN_MS)
    if not 0 <= pin_ms <= 365 * day_ms:
        raise ValueError(
            f"--leader-balance-pin-ms: expected 0..31536000000 milliseconds, got {pin_ms}"
        )
    lag_max = getattr(args, "replica_lag_time_max_ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS)
    if not 100 <= lag_max <= day_ms:
        raise ValueError(
            f"--replica-lag-time-max-ms: expected 100..86400000 milliseconds, got {lag_max}"
        )
    min_free = getattr(args, "min_free_bytes", DEFAULT_MIN_FREE_BYTES)
    if not 0 <= min_free <= 2**50:
        raise ValueError(f"--min-free-bytes: expected 0..{2**50} bytes, got {min_free}")
    max_open = getattr(args, "max_open_segment_files", 0)
    if not 0 <= max_open <= 1 << 24:
        raise ValueError(
            f"--max-open-segment-files: expected 0 (half the open-file limit) or "
            f"1..{1 << 24} files, got {max_open}"
        )
    shards = getattr(args, "shards", None)
    if shards is None:
        shards = os.cpu_count() or 1
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"--shards: expected 1..{MAX_SHARDS} processes, got {shards}")
    shard_index = getattr(args, "shard_index", 0)
    if not 0 <= shard_index < shards:
        raise ValueError(f"--shard-index: expected 0..{shards - 1}, got {shard_index}")
    kafka_listen, kafka_peers, kafka_max, kafka_connections = _kafka_flags(
        args, token, tls, allow_plaintext
    )
    return NodeConfig(
        node_id=args.node_id,
        host=host,
        port=int(port),
        data_dir=pathlib.Path(args.data_dir),
        peers=peers,
        auth_token=token,
        peer_token=peer_token,
        admin_token=admin_token,
        auto_create_topics_enable=getattr(args, "auto_create_topics_enable", True),
        tls=tls,
        default_partitions=args.default_partitions,
        max_batch_bytes=args.max_batch_bytes,
        peer_routes=peer_routes,
        transaction_timeout_ms=txn_timeout,
        max_transaction_timeout_ms=max_txn_timeout,
        retention_check_interval_ms=retention_interval,
        file_delete_delay_ms=file_delete_delay,
        transaction_state_log_segment_bytes=txn_segment,
        leader_balance_interval_ms=balance_interval,
        leader_balance_pin_ms=pin_ms,
        replica_lag_time_max_ms=lag_max,
        shards=shards,
        shard_index=shard_index,
        flush_scope=getattr(args, "flush_scope", FLUSH_SCOPE_NODE),
        allow_plaintext=allow_plaintext,
        min_free_bytes=min_free,
        edge=_edge_limits(args),
        kafka_listen=kafka_listen,
        kafka_peers=kafka_peers,
        kafka_max_request_bytes=kafka_max,
        kafka_max_connections=kafka_connections,
        kafka_group_limits=_group_limits(args),
        quiesce=getattr(args, "quiesce", True),
        console=getattr(args, "console", False),
        max_open_segment_files=max_open,
    )


def _kafka_flags(
    args: argparse.Namespace, client_token: str | None, tls: TlsFiles | None, allow_plaintext: bool
) -> tuple[str | None, dict[int, str], int, int]:
    """(--kafka-listen, every node's Kafka address, --kafka-max-request-bytes or 0 for
    the node's own limit, --kafka-max-connections); ValueError naming the flag and the
    expected form."""
    listen = getattr(args, "kafka_listen", None)
    peers_arg = getattr(args, "kafka_peers", "") or ""
    max_bytes = getattr(args, "kafka_max_request_bytes", None)
    max_connections = getattr(args, "kafka_max_connections", None)
    if listen is None:
        if peers_arg or max_bytes is not None or max_connections is not None:
            raise ValueError(
                "--kafka-peers, --kafka-max-request-bytes and --kafka-max-connections "
                "need --kafka-listen"
            )
        return None, {}, 0, 1024
    host, _ = host_port(listen, "--kafka-listen")
    if not is_loopback(host):
        if not client_token:
            raise ValueError(
                f"--kafka-listen: {listen!r} is beyond loopback, where Kafka clients must "
                "authenticate with SASL/PLAIN, the client token as the password: pass "
                "--client-token (or RAFTLOG_CLIENT_TOKEN)"
            )
        if tls is None and not allow_plaintext:
            raise ValueError(
                f"--kafka-listen: {listen!r} is beyond loopback, where SASL/PLAIN without "
                "TLS sends the token across the network in plain text: pass "
                "--tls-cert/--tls-key/--tls-ca, or --allow-plaintext on a network you trust"
            )
    peers = parse_peers(peers_arg, "--kafka-peers") if peers_arg else {}
    if peers.get(args.node_id, listen) != listen:
        raise ValueError(
            f"--kafka-peers: node {args.node_id} is listed as {peers[args.node_id]} but its "
            f"--kafka-listen is {listen}"
        )
    peers[args.node_id] = listen
    if max_bytes is not None and not 1024 <= max_bytes <= 2**31 - 1:
        raise ValueError(
            f"--kafka-max-request-bytes: expected 1024..2147483647 bytes, got {max_bytes}"
        )
    if max_connections is not None and not 1 <= max_connections <= 1_000_000:
        raise ValueError(
            f"--kafka-max-connections: expected 1..1000000 connections, got {max_connections}"
        )
    return listen, peers, max_bytes or 0, max_connections or 1024


def plaintext_warning(config: NodeConfig) -> str | None:
    """What a node that serves or peers beyond loopback without TLS (allowed by
    ``--allow-plaintext``) logs at every start; None for a node on loopback or with TLS."""
    if config.tls is not None:
        return None
    beyond = beyond_loopback([config.listen, *config.peers.values()])
    if not beyond:
        return None
    return (
        f"--allow-plaintext: serving and peering without TLS beyond loopback "
        f"({', '.join(beyond)}): the client and peer tokens cross the network in plain "
        "text, readable by anyone on the path; give --tls-cert/--tls-key/--tls-ca instead"
    )


def _boolean(flag: str) -> Any:
    def parse(text: str) -> bool:
        value = text.strip().lower()
        if value not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{flag}: expected true or false, got {text!r}")
        return value == "true"

    return parse


def add_token_arguments(p: argparse.ArgumentParser, roles: tuple[Role, ...]) -> None:
    """``--X-token`` and ``--X-token-file`` for each role X (``--auth-token`` is the
    client token's alias), read by :func:`resolve_token`."""
    for role in roles:
        flag, env = TOKEN_FLAGS[role]
        names = [flag, *([CLIENT_TOKEN_ALIAS[0]] if role is Role.CLIENT else [])]
        alias = f" ({CLIENT_TOKEN_ALIAS[0]} is its older name)" if role is Role.CLIENT else ""
        p.add_argument(
            *names,
            dest=f"{role.value}_token",
            default=None,
            help=f"the {role.value} role's token{alias}; visible in ps: prefer "
            f"{flag}-file or ${env}",
        )
        p.add_argument(
            f"{flag}-file",
            dest=f"{role.value}_token_file",
            default=None,
            metavar="PATH",
            help=f"read the {role.value} token from PATH (its first line)",
        )


def resolve_token(args: argparse.Namespace, role: Role) -> str | None:
    """``role``'s token: its flag, else its file's first line, else its environment
    variable (the client's: RAFTLOG_CLIENT_TOKEN, else RAFTLOG_AUTH_TOKEN), else None.
    ValueError names the flag when both flag and file are given, or the file cannot
    be read or is empty."""
    flag, env = TOKEN_FLAGS[role]
    given = getattr(args, f"{role.value}_token", None)
    if role is Role.CLIENT and given is None:
        given = getattr(args, "auth_token", None)  # a namespace built by older callers
    path = getattr(args, f"{role.value}_token_file", None)
    if given and path:
        raise ValueError(f"{flag} and {flag}-file: give one of them, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{flag}-file: cannot read {path}: {exc}") from None
        if not text:
            raise ValueError(f"{flag}-file: {path} is empty; expected the token on its first line")
        return text
    if given:
        return str(given)
    names = [env, *([CLIENT_TOKEN_ALIAS[1]] if role is Role.CLIENT else [])]
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """The three TLS flags, all or none, each file checked now (TlsConfigError names it)."""
    given = {
        flag: str(getattr(args, attr, None) or "")
        for flag, attr in (
            ("--tls-cert", "tls_cert"),
            ("--tls-key", "tls_key"),
            ("--tls-ca", "tls_ca"),
        )
    }
    if not any(given.values()):
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise TlsConfigError(
            f"--tls-cert, --tls-key and --tls-ca go together (PEM files); missing: "
            f"{', '.join(missing)}"
        )
    files = TlsFiles(given["--tls-cert"], given["--tls-key"], given["--tls-ca"])
    server_context(files)
    client_context(files.ca_file)
    return files
