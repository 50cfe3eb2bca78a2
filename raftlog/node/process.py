"""One node process: many Raft groups, the controller, and the aiohttp server.

``raftlog server --node-id N --listen 127.0.0.1:PORT --data-dir DIR --peers ID=HOST:PORT,...``
``[--advertise HOST:PORT] [--tls-cert F --tls-key F --tls-ca F] [--auth-token T --peer-token P]``

- Group 0 is the controller (a Raft group over every node, as Redpanda's);
  its state machine (:class:`raftlog.controller.ControllerStm`) holds topics,
  partitions, placement and schemas.
- Every partition replica placed on this node is one Raft group with its
  log in ``DIR/<topic>/<partition>/``, fronted by rm_stm (produce goes
  node -> partition -> rm_stm -> consensus.replicate). The node reconciles
  its local groups with the controller state after every change.
- Leaders are balanced towards each partition's preferred replica (the first
  of its replica list) by leadership transfer.
- Retention (``raftlog.node.retention``): every ``--retention-check-interval-ms``
  each partition leader moves its log start forward through the Raft log by the
  topic's ``retention.bytes``/``retention.ms``, and every replica deletes the
  whole segments below it. Topic configs live in the controller state; the node
  applies them to its partitions whenever the controller state changes.
- Addresses: the node binds ``--listen`` and is known to peers and clients by
  ``--advertise`` (default: the listen address); ``--peers`` lists every node by
  its advertised address, and clients learn leaders' addresses from it.
- Auth (:class:`raftlog.rpc.server.AuthPolicy`): clients send the client token
  (``--auth-token``/``RAFTLOG_AUTH_TOKEN``), nodes the peer token
  (``--peer-token``/``RAFTLOG_PEER_TOKEN``); neither is accepted where the other
  belongs. A client token needs a (different) peer token. Binding or peering
  beyond loopback needs both, and then ``/health`` and ``/metrics`` need one too.
- TLS (:mod:`raftlog.rpc.tls`): with ``--tls-cert/--tls-key/--tls-ca`` the node
  serves HTTPS and verifies its peers against the CA.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import pathlib
import signal
import sys
import time
from typing import Any

from aiohttp import web
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_fixed,
)

from raftlog.controller import (
    CONTROLLER_GROUP,
    AlterTopicConfigCmd,
    CompleteMoveCmd,
    ControllerStm,
    CreatePartitionsCmd,
    CreateTopicCmd,
    DecommissionNodeCmd,
    DeleteTopicCmd,
    MovePartitionCmd,
    PartitionAssignment,
    PreferReplicaCmd,
    RegisterNodeCmd,
    RemoveNodeCmd,
    TopicAssignment,
    command_batch,
    config_values,
    topic_config,
    validate_topic_name,
)
from raftlog.controller.commands import Command
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.metrics import NodeMetrics
from raftlog.node.groups import GroupHost, PartitionReplica, last_heard_ms
from raftlog.producers.rm_stm import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    RmStmConfig,
)
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    AlterConfigRequest,
    AlterConfigResponse,
    CompleteMoveRequest,
    ConfigEntry,
    CoordinatorRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    EndTxnRequest,
    ErrorCode,
    FetchRequest,
    InitProducerRequest,
    ListOffsetsRequest,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    MovePartitionRequest,
    MovePartitionResponse,
    NodeInfo,
    OffsetForTimestampRequest,
    PartitionInfo,
    PartitionStatus,
    PartitionStatusRequest,
    PartitionStatusResponse,
    ProduceRequest,
    RegisterNodeRequest,
    RegisterNodeResponse,
    TopicConfigs,
    TopicInfo,
    TransferLeadershipRequest,
    TransferLeadershipResponse,
)
from raftlog.rpc.server import AuthPolicy, RequestError, make_app
from raftlog.rpc.tls import TlsConfigError, TlsFiles, client_context, server_context
from raftlog.rpc.transport import StreamTransport
from raftlog.storage import fs as storage_fs
from raftlog.storage import identity
from raftlog.storage.api import StorageCorruption

log = logging.getLogger("raftlog.node")

DEFAULT_PARTITIONS = 6
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_PARTITIONS = 10_000
COORDINATOR_ROLL_FORWARD_S = 5.0
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 10_000
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


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    host: str
    port: int
    data_dir: pathlib.Path
    peers: dict[int, str]  # every node's advertised address, this one included
    auth_token: str | None = None  # the client token
    # the nodes' own secret for /raft/*; never accepted from clients, nor theirs here
    peer_token: str | None = None
    tls: TlsFiles | None = None
    default_partitions: int = DEFAULT_PARTITIONS
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    heartbeat_interval_s: float = 0.05
    # Open transactions older than this are aborted by the partition leader, so
    # that a dead writer cannot hold back the last stable offset (and readers).
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # The largest per-session transaction timeout a client may ask for (init_producer).
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    # Where to send peer (raft) traffic for a node when not its address: e.g. a
    # fault-injecting proxy per link. Clients are still told ``peers``.
    peer_routes: dict[int, str] = dataclasses.field(default_factory=dict)
    # How often partition leaders apply retention and every replica deletes below the
    # log start (Kafka's log.retention.check.interval.ms).
    retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS

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


def _is_loopback(host: str) -> bool:
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


def _host_port(value: str, flag: str) -> tuple[str, int]:
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
    p.add_argument(
        "--auth-token", default=None, help="the clients' token (else $RAFTLOG_AUTH_TOKEN)"
    )
    p.add_argument(
        "--peer-token",
        default=None,
        help="the nodes' own token for raft traffic, unlike --auth-token "
        "(else $RAFTLOG_PEER_TOKEN)",
    )
    p.add_argument("--tls-cert", default=None, help="this node's PEM certificate (chain)")
    p.add_argument("--tls-key", default=None, help="the PEM private key of --tls-cert")
    p.add_argument("--tls-ca", default=None, help="the cluster's PEM CA: peers are verified by it")
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
        default=DEFAULT_TRANSACTION_TIMEOUT_MS,
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
    p.add_argument("--log-level", default="INFO")


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    """Validate the server flags; ValueError names the flag and the expected form."""
    if args.node_id < 0:
        raise ValueError(f"--node-id: expected an integer >= 0, got {args.node_id}")
    host, port = _host_port(args.listen, "--listen")
    advertise = getattr(args, "advertise", None) or args.listen
    advertised_host, _ = _host_port(advertise, "--advertise")
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
    token = args.auth_token or os.environ.get("RAFTLOG_AUTH_TOKEN") or None
    peer_token = getattr(args, "peer_token", None) or os.environ.get("RAFTLOG_PEER_TOKEN") or None
    non_loopback = [
        a for a in [args.listen, *peers.values()] if not _is_loopback(a.rpartition(":")[0])
    ]
    if non_loopback and not (token and peer_token):
        raise ValueError(
            f"binding or peering beyond loopback ({', '.join(sorted(set(non_loopback)))}) "
            "requires a client token and a peer token: pass --auth-token (or set "
            "RAFTLOG_AUTH_TOKEN) and --peer-token (or set RAFTLOG_PEER_TOKEN)"
        )
    if token and not peer_token:
        raise ValueError(
            "--auth-token needs --peer-token too (or RAFTLOG_PEER_TOKEN): the nodes' own "
            "secret for raft traffic, which clients never get"
        )
    if token and token == peer_token:
        raise ValueError(
            "--peer-token must differ from --auth-token: a client token must not open the "
            "raft routes"
        )
    tls = _tls_files(args)
    if not 1 <= args.default_partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"--default-partitions: expected 1..{MAX_PARTITIONS}, got {args.default_partitions}"
        )
    if not 1 <= args.max_batch_bytes <= 64 * 1024 * 1024:
        raise ValueError(
            f"--max-batch-bytes: expected 1..67108864 bytes, got {args.max_batch_bytes}"
        )
    txn_timeout = getattr(args, "transaction_timeout_ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
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
    return NodeConfig(
        node_id=args.node_id,
        host=host,
        port=int(port),
        data_dir=pathlib.Path(args.data_dir),
        peers=peers,
        auth_token=token,
        peer_token=peer_token,
        tls=tls,
        default_partitions=args.default_partitions,
        max_batch_bytes=args.max_batch_bytes,
        peer_routes=peer_routes,
        transaction_timeout_ms=txn_timeout,
        max_transaction_timeout_ms=max_txn_timeout,
        retention_check_interval_ms=retention_interval,
    )


def _tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """The three TLS flags, all or none, each file checked now (TlsConfigError names it)."""
    given = {
        flag: getattr(args, attr, None)
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


class Node:
    """One node: hosts groups, serves RPC; ``start()``/``stop()`` are idempotent."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        # The CA that verifies peers also verifies the nodes this one calls as a client.
        peer_ssl = client_context(config.tls.ca_file) if config.tls else None
        self.transport = StreamTransport(
            config.node_id,
            config.peers,
            routes=config.peer_routes,
            peer_token=config.peer_token,
            ssl_context=peer_ssl,
            timeout_s=5.0,
        )
        self.host = GroupHost(
            config.node_id,
            self.transport,
            config.heartbeat_interval_s,
            RmStmConfig(
                transaction_timeout_ms=config.transaction_timeout_ms,
                max_transaction_timeout_ms=config.max_transaction_timeout_ms,
            ),
        )
        self.controller_stm = ControllerStm()
        self.controller: Any = None
        self.partitions: dict[int, PartitionReplica] = {}
        self.metrics = NodeMetrics(config.node_id, self._group_views)
        self._reconcile_needed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self._transfer_attempts: dict[int, float] = {}

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # Refuse another node's data directory (a mistyped --data-dir); never delete it.
        # Directories from before markers existed are adopted.
        await asyncio.to_thread(
            identity.claim_directory,
            self.config.data_dir,
            identity.NODE_MARKER,
            str(self.node_id),
            "node",
            adopt_unmarked=True,
        )
        await self.host.start()
        self.controller_stm.add_listener(self._reconcile_needed.set)
        self.controller = await self.host.open_group(
            CONTROLLER_GROUP,
            self.config.data_dir / "_controller",
            sorted(self.config.peers),
            state_machines=[self.controller_stm],
        )
        auth = AuthPolicy(
            client_token=self.config.auth_token,
            peer_token=self.config.peer_token,
            open_status=_is_loopback(self.config.host),
        )
        app = make_app(self, auth=auth, max_request_bytes=self._max_request_bytes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.config.host,
            self.config.port,
            reuse_address=True,
            ssl_context=server_context(self.config.tls) if self.config.tls else None,
        )
        await site.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._reconcile_loop()),
            loop.create_task(self._balance_loop()),
            loop.create_task(self._transaction_timeout_loop()),
            loop.create_task(self._coordinator_roll_forward_loop()),
            loop.create_task(self._retention_loop()),
            loop.create_task(self._move_loop()),
        ]
        self._reconcile_needed.set()
        log.info(
            "node %d serving %s on %s, advertised as %s",
            self.node_id,
            "https" if self.config.tls else "http",
            self.config.listen,
            self.config.address,
        )

    @property
    def _ca_file(self) -> str | None:
        # The node calls other nodes' client routes (roll-forward, partition status)
        # as a client: with the client token, over TLS verified by the cluster's CA.
        return self.config.tls.ca_file if self.config.tls else None

    def _max_request_bytes(self) -> int:
        # room for the request's own fields around the largest batch accepted
        return self.config.max_batch_bytes * 2 + 1024 * 1024

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        for gid in list(self.partitions):
            await self._close_partition(gid, delete=False)
        await self.host.stop()
        await self.transport.close()

    # ------------------------------------------------------------ reconcile

    async def _reconcile_loop(self) -> None:
        while True:
            await self._reconcile_needed.wait()
            self._reconcile_needed.clear()
            try:
                await self._reconcile()
            except Exception:
                log.exception("reconciling local groups failed; retrying")
                await asyncio.sleep(0.5)
                self._reconcile_needed.set()

    def _learn_nodes(self) -> None:
        """Add the nodes registered through the controller to this node's peers (also
        when it was started with an older ``--peers``): raft traffic and clients
        (metadata) reach them from now on."""
        for node, address in sorted(self.controller_stm.nodes.items()):
            if node != self.node_id and self.config.peers.get(node) != address:
                log.info("node %d joined the cluster at %s", node, address)
                self.config.peers[node] = address
                self.transport.add_peer(node, address)

    async def _reconcile(self) -> None:
        self._learn_nodes()
        desired = self.controller_stm.assignments_for(self.node_id)
        for gid in [g for g in self.partitions if g not in desired]:
            await self._close_partition(gid, delete=True)
        for gid, (topic, part) in sorted(desired.items()):
            if gid not in self.partitions:
                await self._open_partition(topic, part)
            rep = self.partitions.get(gid)
            if rep is not None:  # configs changed, or a partition just opened
                rep.configure(self.controller_stm.topic_config(topic.name))
                if rep.replicas != part.replicas:
                    # a new preferred replica: the balancer moves the leadership at once
                    rep.replicas = list(part.replicas)
                    self._transfer_attempts.pop(gid, None)

    def _partition_dir(self, topic: str, partition: int) -> pathlib.Path:
        return self.config.data_dir / topic / str(partition)

    async def _open_partition(self, topic: TopicAssignment, part: PartitionAssignment) -> None:
        directory = self._partition_dir(topic.name, part.partition)
        await asyncio.to_thread(self._claim_partition_dir, directory, part.group_id)
        try:
            replica = await self.host.open_partition(
                topic.name, part.partition, part.group_id, directory, part.replicas
            )
        except StorageCorruption as exc:
            # Damage in data this replica had flushed: never truncated silently. The log
            # is set aside (kept, vote carried over) and the group fetched again.
            log.error("group %d: %s; setting the log aside to refetch it", part.group_id, exc)
            await asyncio.to_thread(identity.set_aside_damaged_log, directory, part.group_id)
            replica = await self.host.open_partition(
                topic.name, part.partition, part.group_id, directory, part.replicas
            )
        self.partitions[part.group_id] = replica

    def _claim_partition_dir(self, directory: pathlib.Path, group_id: int) -> None:
        """Make ``directory`` group ``group_id``'s (durable marker); never delete a log.

        A log of a group the controller no longer has (a deleted topic of the same
        name, dropped while this node was down), or an unmarked one, is moved aside
        under a name that says so; the log of a group that still exists is refused.
        """
        try:
            identity.claim_directory(directory, identity.GROUP_MARKER, str(group_id), "group")
        except identity.ForeignDataDirectory as exc:
            old = exc.found
            dropped = old == "unmarked" or (
                old.isdigit()
                and int(old) < group_id
                and self.controller_stm.find_group(int(old)) is None
            )
            if not dropped:
                raise
            identity.move_aside(directory, f"dropped-group-{old}")
            identity.claim_directory(directory, identity.GROUP_MARKER, str(group_id), "group")

    async def _close_partition(self, gid: int, *, delete: bool) -> None:
        replica = self.partitions.pop(gid, None)
        if replica is None:
            return
        await self.host.close_group(gid)
        if delete:
            # Moved aside, not deleted: only an explicit purge removes a group's data.
            await asyncio.to_thread(identity.move_aside, replica.directory, f"dropped-group-{gid}")

    async def _balance_loop(self) -> None:
        """Move each partition's leadership to its preferred replica when possible."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for gid, rep in list(self.partitions.items()):
                preferred = rep.replicas[0]
                if preferred == self.node_id or not rep.consensus.is_leader:
                    continue
                if now - self._transfer_attempts.get(gid, 0.0) < 10.0:
                    continue
                self._transfer_attempts[gid] = now
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.host.transfer(rep.consensus, preferred), 3.0)

    async def _coordinator_roll_forward_loop(self) -> None:
        """On the coordinator partition this node leads, complete stale decisions.

        A decision whose markers are not all written after two rounds (a writer's
        driver died between its decision and its markers, and nobody has touched
        that writer since) is rolled forward here, through the public client, as
        a restarted writer would do it: markers before each partition's
        transaction timeout can abort a committed participant. Idempotent, so a
        race with the writer itself is harmless.
        """
        from raftlog.client.async_client import RaftlogClient
        from raftlog.client.coordinator import CoordinatorClient
        from raftlog.client.transactions import roll_forward_stale

        seen: set[tuple[str, int, str]] = set()
        client: RaftlogClient | None = None
        try:
            while True:
                await asyncio.sleep(COORDINATOR_ROLL_FORWARD_S)
                leads = any(
                    rep.topic == TRANSACTIONS_TOPIC and rep.consensus.is_leader
                    for rep in self.partitions.values()
                )
                if not leads:
                    seen.clear()
                    continue
                if client is None:
                    client = self._cluster_client()
                try:
                    seen, done = await roll_forward_stale(client, CoordinatorClient(client), seen)
                except Exception as exc:  # unreachable partitions, leadership moved: retry
                    log.warning("transaction coordinator: roll-forward failed: %s", exc)
                    continue
                if done:
                    log.info("transaction coordinator: rolled forward %d stale decisions", done)
        finally:
            if client is not None:
                await client.close()

    async def _retention_loop(self) -> None:
        """Every interval, each partition applies retention (see raftlog.node.retention).

        Partitions run concurrently, each bounded in time; a failure (leadership
        lost, a timeout) is logged and retried on the next round.
        """
        interval = self.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            reps = [r for r in self.partitions.values() if r.retention is not None]

            async def run(rep: PartitionReplica, now_ms: int) -> None:
                assert rep.retention is not None
                try:
                    await asyncio.wait_for(rep.retention.run(now_ms), 30.0)
                except Exception as exc:  # leadership moved, a timeout: the next round retries
                    log.warning("%s/%d: retention: %r", rep.topic, rep.partition, exc)

            await asyncio.gather(*(run(r, now_ms) for r in reps))

    async def _transaction_timeout_loop(self) -> None:
        """On the partitions this node leads, abort transactions open past the timeout.

        Checked several times per timeout so an expired transaction is aborted
        within about a quarter of the timeout after it expires; the shortest
        timeout is the server's or that of any open transaction's session.
        """
        interval = min(1.0, self.config.transaction_timeout_ms / 4000)
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            shortest = min(
                (t for rep in self.partitions.values() if (t := rep.rm.min_open_timeout_ms())),
                default=self.config.transaction_timeout_ms,
            )
            interval = max(0.01, min(1.0, min(self.config.transaction_timeout_ms, shortest) / 4000))
            for rep in list(self.partitions.values()):
                if not rep.consensus.is_leader:
                    continue
                try:
                    aborted = await rep.rm.abort_expired(now_ms)
                except Exception as exc:  # leadership moved, stopping: next round retries
                    log.debug("%s/%d: expiring transactions: %s", rep.topic, rep.partition, exc)
                    continue
                if aborted:
                    log.info(
                        "%s/%d: aborted expired transactions of producers %s",
                        rep.topic,
                        rep.partition,
                        aborted,
                    )

    # ------------------------------------------------------------ server hooks

    async def handle_peer(self, message: Any) -> Any:
        return await self.host.dispatcher.handle(message)

    def health(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.config.address,
            "controller_leader": self._controller_leader(),
            "groups": len(self.partitions),
            "leader_of": sum(1 for r in self.partitions.values() if r.consensus.is_leader),
            "topics": len(self.controller_stm.topics),
            # the controller leader's view of every node's last heartbeat (health reports it)
            "last_heard_ms": {
                str(n): ms
                for n, ms in (last_heard_ms(self.controller) if self.controller else {}).items()
            },
        }

    def render_metrics(self) -> bytes:
        return self.metrics.render()

    def count_request(self, route: str, status: int) -> None:
        self.metrics.rpc_requests.labels(route, str(status)).inc()

    def _group_views(self) -> list[Any]:
        return list(self.partitions.values())

    def _controller_leader(self) -> int:
        c = self.controller
        if c is None:
            return -1
        return self.node_id if c.is_leader else c.leader_id

    async def handle_client(self, msg: Any) -> Any:
        handler = _CLIENT_HANDLERS.get(type(msg))
        if handler is None:
            raise RequestError(ErrorCode.INVALID_REQUEST, f"unsupported {type(msg).__name__}")
        return await handler(self, msg)

    # ------------------------------------------------------------ controller calls

    def _require_controller_leader(self) -> None:
        if not self.controller.is_leader:
            leader = self.controller.leader_id
            raise RequestError(
                ErrorCode.NOT_LEADER,
                f"node {self.node_id} is not the controller leader (leader: {leader})",
                leader,
                self.config.peers.get(leader, ""),
            )

    def _controller_moved(self, exc: Any) -> RequestError:
        """NOT_LEADER naming the controller's leader (a NotLeaderError's) for the client."""
        return RequestError(
            ErrorCode.NOT_LEADER, str(exc), exc.leader_id, self.config.peers.get(exc.leader_id, "")
        )

    async def _replicate_controller(self, cmd: Command) -> None:
        from raftlog.raft.errors import NotLeaderError
        from raftlog.raft.replicate_batcher import Consistency

        try:
            stages = self.controller.replicate([command_batch(cmd)], Consistency.QUORUM_ACK)
            res = await asyncio.wait_for(stages.finished, 10.0)
        except NotLeaderError as exc:
            raise self._controller_moved(exc) from exc
        except TimeoutError as exc:
            raise RequestError(ErrorCode.TIMEOUT, "the controller did not commit in 10s") from exc
        if not await self.controller_stm.wait_applied(res.last_offset, 10.0):
            raise RequestError(ErrorCode.TIMEOUT, "the controller did not apply the command in 10s")

    async def create_topic(self, req: CreateTopicRequest) -> CreateTopicResponse:
        try:
            if req.name != TRANSACTIONS_TOPIC:  # internal names start with "__"
                validate_topic_name(req.name)
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        partitions = self.config.default_partitions if req.partitions == -1 else req.partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: expected 1..{MAX_PARTITIONS} (or -1 for the default), "
                f"got {req.partitions}",
            )
        if req.replication_factor < 1:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replication_factor: expected >= 1, got {req.replication_factor}",
            )
        overrides = _config_changes(req.configs)
        self._require_controller_leader()
        existing = self.controller_stm.topics.get(req.name)
        if existing is None:
            placeable = self._placeable_nodes()
            rf = min(req.replication_factor, len(placeable))
            await self._replicate_controller(
                CreateTopicCmd(
                    req.name,
                    partitions,
                    rf,
                    placeable,
                    req.schema,
                    config_values(overrides),
                )
            )
        elif not req.exist_ok:
            raise RequestError(ErrorCode.TOPIC_EXISTS, f"topic {req.name!r} already exists")
        topic = self.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.INTERNAL, f"topic {req.name!r} was not created")
        return CreateTopicResponse(self._topic_info(topic))

    async def delete_topic(self, req: DeleteTopicRequest) -> DeleteTopicResponse:
        self._require_controller_leader()
        if req.name not in self.controller_stm.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        await self._replicate_controller(DeleteTopicCmd(req.name))
        return DeleteTopicResponse(req.name)

    async def alter_config(self, req: AlterConfigRequest) -> AlterConfigResponse:
        """Set and delete config overrides of a topic through the controller's log.

        Unknown keys and bad values are refused by name before anything is
        replicated; the response carries every key's value after the change.
        """
        changes = _config_changes(req.set)
        try:
            topic_config.apply_changes(
                self.controller_stm.topic_overrides(req.name), changes, req.delete
            )
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        self._require_controller_leader()
        if req.name not in self.controller_stm.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        await self._replicate_controller(
            AlterTopicConfigCmd(req.name, config_values(changes), sorted(set(req.delete)))
        )
        return AlterConfigResponse(self._topic_configs(req.name))

    async def describe_configs(self, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
        names = req.names or sorted(self.controller_stm.topics)
        unknown = [n for n in names if n not in self.controller_stm.topics]
        if unknown:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {unknown[0]!r}")
        return DescribeConfigsResponse([self._topic_configs(n) for n in names])

    async def transfer_leadership(
        self, req: TransferLeadershipRequest
    ) -> TransferLeadershipResponse:
        """Make ``target_node`` the partition's preferred replica through the controller,
        then wait (bounded) until it leads: the node leading the partition hands the
        leadership over (see ``_balance_loop``), and the balancer keeps it there."""
        self._require_controller_leader()
        topic, part = self._assignment(req.topic, req.partition)
        where = f"{req.topic}/{req.partition}"
        if req.target_node not in part.replicas:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"target_node: node {req.target_node} is not a replica of {where} "
                f"(replicas: {','.join(map(str, part.replicas))})",
            )
        if part.replicas[0] != req.target_node:
            await self._replicate_controller(
                PreferReplicaCmd(req.topic, req.partition, req.target_node)
            )
        deadline = time.monotonic() + LEADERSHIP_TRANSFER_WAIT_S
        leader = -1
        while time.monotonic() < deadline:
            topic, part = self._assignment(req.topic, req.partition)
            one = dataclasses.replace(topic, partitions=[part])
            leader = self._topic_info(one, await self._remote_statuses([one])).partitions[0].leader
            if leader == req.target_node:
                return TransferLeadershipResponse(leader)
            await asyncio.sleep(0.1)
        raise RequestError(
            ErrorCode.TIMEOUT,
            f"{where}: node {req.target_node} did not take the leadership within "
            f"{LEADERSHIP_TRANSFER_WAIT_S:g}s (leader: {leader}); it is the preferred replica, "
            "so the leader moves to it as soon as it has caught up",
        )

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        """Grow a topic to ``partitions`` partitions in all through the controller; the
        nodes open the new groups when they apply it. A smaller count is refused (Kafka's
        rule: partitions are never removed); the current count changes nothing."""
        self._require_controller_leader()
        topic = self.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {req.name!r}")
        have = len(topic.partitions)
        if req.partitions < have:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: topic {req.name!r} has {have} partitions and a count can only "
                f"grow; {req.partitions} would remove some (give the new total, >= {have})",
            )
        if req.partitions > MAX_PARTITIONS:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partitions: expected {have}..{MAX_PARTITIONS}, got {req.partitions}",
            )
        if req.partitions > have:
            await self._replicate_controller(
                CreatePartitionsCmd(req.name, req.partitions, self._placeable_nodes())
            )
        topic = self.controller_stm.topics.get(req.name)
        if topic is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"topic {req.name!r} was deleted")
        return CreatePartitionsResponse(self._topic_info(topic))

    async def register_node(self, req: RegisterNodeRequest) -> RegisterNodeResponse:
        """A new node joins: its address goes into the controller state (every node
        adds it to its peers), then it joins the controller group as a learner, which
        the controller's leader promotes to a voter once it has caught up. Repeating
        the call for a registered node changes nothing."""
        try:
            _host_port(req.address, "address")
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        self._require_controller_leader()
        members = self.controller.configuration.members
        known = self.config.peers.get(req.node_id)
        if known is not None and known != req.address and req.node_id in members:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"node_id: node {req.node_id} is already in the cluster at {known}, "
                f"not {req.address}",
            )
        if known != req.address:
            await self._replicate_controller(RegisterNodeCmd(req.node_id, req.address))
            self._learn_nodes()  # the listener does it too: the learner needs it now
        if req.node_id not in self.controller.configuration.members:
            await self._change_controller_members(req.node_id, add=True)
        return RegisterNodeResponse(self._node_infos())

    async def move_partition(self, req: MovePartitionRequest) -> MovePartitionResponse:
        """Start a move of a partition's replicas through the controller (see
        ``_move_loop``), or answer whether the same move is done. Refused by name: an
        empty, repeated or unknown target, another move of the partition in progress,
        and a partition whose log no longer starts at 0 (a new replica would need a
        snapshot install, not built yet)."""
        topic, part = self._assignment(req.topic, req.partition)
        where = f"{req.topic}/{req.partition}"
        target = list(req.replicas)
        if not target:
            raise RequestError(ErrorCode.INVALID_REQUEST, "replicas: expected at least one node id")
        repeated = sorted({n for n in target if target.count(n) > 1})
        if repeated:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: node(s) {','.join(map(str, repeated))} listed twice",
            )
        placeable = self._placeable_nodes()
        unknown = [n for n in target if n not in placeable]
        if unknown:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: node(s) {','.join(map(str, unknown))} are not in the cluster "
                f"(nodes: {','.join(map(str, placeable))})",
            )
        self._require_controller_leader()
        pending = self.controller_stm.moves.get(part.group_id)
        if pending is None and part.replicas == target:
            return MovePartitionResponse(target, True)
        if pending is not None and pending != target:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"replicas: {where} is already moving to {','.join(map(str, pending))}; "
                "wait until that move is done",
            )
        if pending is None:
            one = dataclasses.replace(topic, partitions=[part])
            start = self._topic_info(one, await self._remote_statuses([one])).partitions[0]
            if start.start_offset < 0:
                raise RequestError(
                    ErrorCode.LEADER_NOT_AVAILABLE, f"{where} has no leader to carry out a move"
                )
            if start.start_offset > 0 and any(n not in part.replicas for n in target):
                raise RequestError(
                    ErrorCode.NOT_SUPPORTED,
                    f"{where}: its log starts at offset {start.start_offset} (retention "
                    "deleted below it), so a new replica could only be caught up by a "
                    "snapshot install, which is not built yet",
                )
            await self._replicate_controller(MovePartitionCmd(req.topic, req.partition, target))
        return MovePartitionResponse(target, False)

    async def complete_move(self, req: CompleteMoveRequest) -> MovePartitionResponse:
        """A partition's leader reports its group runs with a move's target: end it."""
        self._require_controller_leader()
        _topic, part = self._assignment(req.topic, req.partition)
        target = list(req.replicas)
        if self.controller_stm.moves.get(part.group_id) == target:
            await self._replicate_controller(CompleteMoveCmd(req.topic, req.partition, target))
        _topic, part = self._assignment(req.topic, req.partition)
        done = part.group_id not in self.controller_stm.moves and part.replicas == target
        return MovePartitionResponse(target, done)

    def _cluster_client(self) -> Any:
        """A client of this cluster, as the node's own jobs use it (the roll-forward, the
        moves): every node's address, the client token and CA, 30 s per request. The
        caller closes it."""
        from raftlog.client.async_client import RaftlogClient

        return RaftlogClient(
            sorted(self.config.peers.values()),
            auth_token=self.config.auth_token,
            tls_ca_file=self._ca_file,
            request_timeout_s=30.0,
        )

    def _node_infos(self) -> list[NodeInfo]:
        """The nodes of the cluster as clients are told them (removed ones left out)."""
        gone = self.controller_stm.removed
        return [NodeInfo(i, a) for i, a in sorted(self.config.peers.items()) if i not in gone]

    def _placeable_nodes(self) -> list[int]:
        """The nodes new replicas may go to: neither removed nor being drained."""
        out = set(self.config.peers) - self.controller_stm.removed
        return sorted(out - self.controller_stm.decommissioning)

    async def decommission_node(self, req: DecommissionNodeRequest) -> DecommissionNodeResponse:
        """Drain a node through the controller, then remove it; repeated, it answers how
        far that has got (the CLI polls it). Its partitions are moved (``_move_loop``)
        to the node with the fewest replicas that does not hold them, which takes the
        leaving node's place in the replica list (its preference included). When none
        is left, the node leaves the controller group and is recorded as removed."""
        node = req.node_id
        if node not in self.config.peers:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"node_id: node {node} is not in the cluster "
                f"(nodes: {','.join(str(n.node_id) for n in self._node_infos())})",
            )
        # only the controller's leader answers, also for a removed node: it alone knows
        # whether the node has left the controller group yet
        self._require_controller_leader()
        if node == self.node_id:
            # the controller's leader leaves last: hand the leadership over, and let the
            # client ask the new leader (NOT_LEADER is retried)
            others = [v for v in self.controller.configuration.voters if v != node]
            if others:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.controller.transfer_leadership(others[0]), 5.0)
            raise self._controller_moved(self.controller.not_leader_error())
        if node not in self.controller_stm.removed:
            if node not in self.controller_stm.decommissioning:
                await self._replicate_controller(DecommissionNodeCmd(node))
            remaining = await self._drain(node)
            if remaining:
                return DecommissionNodeResponse(remaining, False)
            # Recorded first, while the node still gets the controller's log: it learns
            # it was removed (its own metadata leaves it out, so a client that still asks
            # it is not told of it); then it leaves the controller group.
            await self._replicate_controller(RemoveNodeCmd(node))
            await self._until_caught_up(node, DECOMMISSION_CATCH_UP_S)
        if node in self.controller.configuration.members:
            await self._change_controller_members(node, add=False)
        return DecommissionNodeResponse(0, True)

    async def _until_caught_up(self, node: int, timeout_s: float) -> None:
        """Wait (bounded; a node that is down is not waited for longer) until ``node``
        has applied the controller's log up to its commit index: it matched it, then
        answered heartbeats sent after that (which carry the commit index)."""
        matched_at: list[int] = []

        async def behind() -> bool:
            core = self.controller.core
            p = core.progress.get(node)
            if p is None:
                return False
            if not matched_at:
                if p.match_offset < self.controller.commit_index:
                    return True
                matched_at.append(core.ticks)
            return p.last_heard_tick < matched_at[0] + HEARD_AFTER_TICKS

        await AsyncRetrying(
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(0.05),
            retry=retry_if_result(bool),
            retry_error_callback=lambda _state: True,  # not caught up in time: go on
        )(behind)

    async def _drain(self, node: int) -> int:
        """Start a move away from ``node`` of each partition on it that is not moving
        yet; the number of partitions with a replica on it."""
        load: dict[int, int] = dict.fromkeys(self._placeable_nodes(), 0)
        on_node: list[tuple[TopicAssignment, PartitionAssignment]] = []
        for t in self.controller_stm.topics.values():
            for p in t.partitions:
                for r in p.replicas:
                    if r in load:
                        load[r] += 1
                if node in p.replicas:
                    on_node.append((t, p))
        for t, p in on_node:
            if p.group_id in self.controller_stm.moves:
                continue  # moving already (this drain's, or an operator's)
            spare = sorted((n for n in load if n not in p.replicas), key=lambda n: (load[n], n))
            if not spare:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"node_id: node {node} cannot leave: {t.name}/{p.partition} already has a "
                    f"replica on every other node ({','.join(map(str, p.replicas))})",
                )
            target = [spare[0] if r == node else r for r in p.replicas]
            load[spare[0]] += 1
            await self.move_partition(MovePartitionRequest(t.name, p.partition, target))
        return len(on_node)

    async def _move_loop(self) -> None:
        """Carry out the moves of the partitions this node leads, a step each round
        (``PartitionReplica.move_step``: learners first, promoted once caught up, then
        the old members removed, the leader last). A new leader picks a move up where
        the group's configuration stands. Once the group runs with the target, the
        controller ends the move and the dropped nodes close their replicas."""
        from raftlog.client.async_client import RaftlogClient

        client: RaftlogClient | None = None
        try:
            while True:
                await asyncio.sleep(MOVE_STEP_INTERVAL_S)
                for gid, target in list(self.controller_stm.moves.items()):
                    rep = self.partitions.get(gid)
                    if rep is None or not rep.consensus.is_leader:
                        continue
                    try:
                        if not await asyncio.wait_for(rep.move_step(list(target)), 30.0):
                            continue
                        if client is None:
                            client = self._cluster_client()
                        await client.complete_move(rep.topic, rep.partition, list(target))
                        log.info("%s/%d: moved to %s", rep.topic, rep.partition, target)
                    except Exception as exc:  # leadership moved, a timeout: next round
                        log.warning(
                            "%s/%d: moving to %s: %r", rep.topic, rep.partition, target, exc
                        )
        finally:
            if client is not None:
                await client.close()

    async def _change_controller_members(self, node: int, *, add: bool) -> None:
        """Add ``node`` to the controller group as a learner, or remove it (one
        configuration change at a time: retried while another, e.g. a promotion, is in
        flight)."""
        from raftlog.raft.errors import ConfigurationChangeError, NotLeaderError

        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_delay(10.0),
                wait=wait_fixed(0.2),
                retry=retry_if_exception_type(ConfigurationChangeError),
                reraise=True,
            ):
                with attempt:
                    if (node in self.controller.configuration.members) == add:
                        return
                    change = (
                        self.controller.add_member(node)
                        if add
                        else self.controller.remove_member(node)
                    )
                    await asyncio.wait_for(change, 10.0)
        except NotLeaderError as exc:
            raise self._controller_moved(exc) from exc
        except ConfigurationChangeError as exc:
            raise RequestError(ErrorCode.TIMEOUT, f"controller member {node}: {exc}") from exc
        except TimeoutError as exc:
            raise RequestError(
                ErrorCode.TIMEOUT,
                f"{'adding' if add else 'removing'} node {node} (controller group) did not "
                "commit in 10s",
            ) from exc

    def _assignment(
        self, topic: str, partition: int
    ) -> tuple[TopicAssignment, PartitionAssignment]:
        """The controller's assignment of ``topic/partition``; UNKNOWN_* errors name it."""
        t = self.controller_stm.topics.get(topic)
        if t is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        if not 0 <= partition < len(t.partitions):
            raise RequestError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic!r} has no partition {partition} "
                f"(it has partitions 0..{len(t.partitions) - 1})",
            )
        return t, t.partitions[partition]

    def _topic_configs(self, name: str) -> TopicConfigs:
        overrides = self.controller_stm.topic_overrides(name)
        described = topic_config.described(overrides)
        return TopicConfigs(name, [ConfigEntry(k, v, default) for k, v, default in described])

    async def list_topics(self, req: ListTopicsRequest) -> ListTopicsResponse:
        return ListTopicsResponse(sorted(self.controller_stm.topics))

    async def metadata(self, req: MetadataRequest) -> MetadataResponse:
        names = req.topics or sorted(self.controller_stm.topics)
        topics = [self.controller_stm.topics[n] for n in names if n in self.controller_stm.topics]
        remote: dict[int, PartitionStatus] = {}
        if req.with_offsets:
            remote = await self._remote_statuses(topics)
        return MetadataResponse(
            self.node_id,
            self._controller_leader(),
            self._node_infos(),
            [self._topic_info(t, remote) for t in topics],
        )

    def _topic_info(
        self, t: TopicAssignment, remote: dict[int, PartitionStatus] | None = None
    ) -> TopicInfo:
        parts = []
        for p in t.partitions:
            local = self._local_status(p.group_id)
            # Offsets are the leader's: a follower's high watermark lags.
            if local is not None and local.leader == self.node_id:
                st: PartitionStatus | None = local
            else:
                st = (remote or {}).get(p.group_id) or local
            if st is None:
                parts.append(PartitionInfo(p.partition, p.group_id, -1, list(p.replicas)))
            else:
                parts.append(
                    PartitionInfo(
                        p.partition,
                        p.group_id,
                        st.leader,
                        list(p.replicas),
                        st.start_offset,
                        st.high_watermark,
                        st.last_stable_offset,
                    )
                )
        topic_id = t.partitions[0].group_id if t.partitions else -1
        return TopicInfo(t.name, t.replication_factor, parts, t.schema, topic_id)

    def _local_status(self, gid: int) -> PartitionStatus | None:
        rep = self.partitions.get(gid)
        if rep is None:
            return None
        return rep.status()

    async def _remote_statuses(self, topics: list[TopicAssignment]) -> dict[int, PartitionStatus]:
        """Ask one replica of each partition not hosted here (bounded, best effort)."""
        wanted: dict[int, list[int]] = {}
        for t in topics:
            for p in t.partitions:
                rep = self.partitions.get(p.group_id)
                if rep is None:
                    target = p.replicas[0]
                else:
                    target = rep.consensus.leader_id
                    if rep.consensus.is_leader or target < 0:
                        continue
                wanted.setdefault(target, []).append(p.group_id)
        if not wanted:
            return {}
        from raftlog.client.async_client import RaftlogClient

        out: dict[int, PartitionStatus] = {}

        async def ask(node: int, gids: list[int]) -> None:
            addr = self.config.peers.get(node)
            if addr is None:
                return
            client = RaftlogClient(
                [addr],
                auth_token=self.config.auth_token,
                tls_ca_file=self._ca_file,
                request_timeout_s=1.0,
            )
            try:
                resp = await client._send(
                    addr, PartitionStatusRequest(gids), PartitionStatusResponse
                )
                for st in resp.statuses:
                    out[st.group_id] = st
            except Exception:
                return
            finally:
                await client.close()

        await asyncio.gather(*(ask(n, g) for n, g in wanted.items()))
        return out

    async def partition_status(self, req: PartitionStatusRequest) -> PartitionStatusResponse:
        return PartitionStatusResponse(
            [st for st in (self._local_status(g) for g in req.group_ids) if st is not None]
        )

    # ------------------------------------------------------------ partition calls

    def _replica(self, topic: str, partition: int) -> PartitionReplica:
        _t, p = self._assignment(topic, partition)
        rep = self.partitions.get(p.group_id)
        if rep is None:
            raise RequestError(
                ErrorCode.NOT_LEADER,
                f"node {self.node_id} hosts no replica of {topic}/{partition}",
                -1,
            )
        return rep

    def _leader_replica(self, topic: str, partition: int) -> PartitionReplica:
        rep = self._replica(topic, partition)
        rep.require_leader(self.config.peers)
        return rep

    async def produce(self, req: ProduceRequest) -> Any:
        if req.topic == TRANSACTIONS_TOPIC:
            # its records are the coordinator's commands: only tm_stm writes them
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"topic: {TRANSACTIONS_TOPIC} is internal to the transaction coordinator "
                f"and takes no produce",
            )
        rep = self._leader_replica(req.topic, req.partition)
        for i, b in enumerate(req.batches):
            if len(b.payload) > self.config.max_batch_bytes:
                raise RequestError(
                    ErrorCode.RECORD_TOO_LARGE,
                    f"batches[{i}]: payload of {len(b.payload)} bytes exceeds the limit of "
                    f"{self.config.max_batch_bytes} bytes (--max-batch-bytes)",
                )
        started = time.perf_counter()
        resp = await rep.produce(req)
        self.metrics.append_latency.labels(str(req.acks)).observe(time.perf_counter() - started)
        return resp

    async def fetch(self, req: FetchRequest) -> Any:
        return await self._leader_replica(req.topic, req.partition).fetch(req)

    async def list_offsets(self, req: ListOffsetsRequest) -> Any:
        return self._leader_replica(req.topic, req.partition).list_offsets()

    async def offset_for_timestamp(self, req: OffsetForTimestampRequest) -> Any:
        replica = self._leader_replica(req.topic, req.partition)
        return replica.offset_for_timestamp(req.timestamp_ms)

    async def init_producer(self, req: InitProducerRequest) -> Any:
        return await self._leader_replica(req.topic, req.partition).init_producer(req)

    async def end_txn(self, req: EndTxnRequest) -> Any:
        return await self._leader_replica(req.topic, req.partition).end_txn(req)

    async def coordinate(self, req: CoordinatorRequest) -> Any:
        return await self._leader_replica(TRANSACTIONS_TOPIC, req.partition).coordinate(req)


_CLIENT_HANDLERS: dict[type, Any] = {
    CreateTopicRequest: Node.create_topic,
    DeleteTopicRequest: Node.delete_topic,
    ListTopicsRequest: Node.list_topics,
    MetadataRequest: Node.metadata,
    PartitionStatusRequest: Node.partition_status,
    ProduceRequest: Node.produce,
    FetchRequest: Node.fetch,
    ListOffsetsRequest: Node.list_offsets,
    OffsetForTimestampRequest: Node.offset_for_timestamp,
    InitProducerRequest: Node.init_producer,
    EndTxnRequest: Node.end_txn,
    CoordinatorRequest: Node.coordinate,
    AlterConfigRequest: Node.alter_config,
    DescribeConfigsRequest: Node.describe_configs,
    TransferLeadershipRequest: Node.transfer_leadership,
    CreatePartitionsRequest: Node.create_partitions,
    RegisterNodeRequest: Node.register_node,
    MovePartitionRequest: Node.move_partition,
    CompleteMoveRequest: Node.complete_move,
    DecommissionNodeRequest: Node.decommission_node,
}


def _config_changes(entries: list[ConfigEntry]) -> dict[str, str]:
    """Config entries of a request as validated overrides; INVALID_REQUEST names a bad one."""
    out: dict[str, str] = {}
    try:
        for e in entries:
            if e.key in out:
                raise ValueError(f"configs: {e.key} is given twice")
            out[e.key] = topic_config.validate_value(e.key, e.value)
    except ValueError as exc:
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
    return out


async def serve(config: NodeConfig) -> None:
    """Run a node until SIGTERM or SIGINT, then stop it cleanly."""
    node = Node(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    try:
        await stop.wait()
    finally:
        await asyncio.wait_for(node.stop(), 10.0)


def run_server(args: argparse.Namespace) -> int:
    """The ``raftlog server`` command."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format=f"%(asctime)s node-{args.node_id} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = config_from_args(args)
    storage_fs.set_fatal_handler(_stop_on_failed_fsync)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
    return 0


def _stop_on_failed_fsync(message: str) -> None:
    """A failed fsync stops the node at once: never retried, a restart recovers from disk."""
    log.critical("stopping node: %s", message)
    logging.shutdown()
    os._exit(70)  # EX_SOFTWARE; from whichever thread the fsync ran in


# keep the codec registrations of controller commands and peer messages loaded
_ = codec
