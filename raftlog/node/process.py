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
  of its replica list) by leadership transfer; the controller leader's leader
  balancer (``--leader-balance-interval-ms``) changes preferred replicas so every
  live node leads about as many partitions (``raftlog.controller.leader_balancer``).
- ``/health`` lists the followers of the partitions this node leads that have not
  caught up for over ``--replica-lag-time-max-ms`` (``raftlog.node.replica_lag``).
- Retention (``raftlog.node.retention``): every ``--retention-check-interval-ms``
  each partition leader moves its log start forward through the Raft log by the
  topic's ``retention.bytes``/``retention.ms``, and every replica deletes the
  whole segments below it. Topic configs live in the controller state; the node
  applies them to its partitions whenever the controller state changes.
- Addresses: the node binds ``--listen`` and is known to peers and clients by
  ``--advertise`` (default: the listen address); ``--peers`` lists every node by
  its advertised address, and clients learn leaders' addresses from it.
- Auth (:class:`raftlog.rpc.server.AuthPolicy`, roles in :mod:`raftlog.rpc.roles`):
  clients send the client token (``--client-token``, alias ``--auth-token``), admins
  the admin token (``--admin-token``), nodes the peer token (``--peer-token``); each
  also from ``--X-token-file`` or ``RAFTLOG_X_TOKEN``. The three differ; a client or
  admin token needs a peer token. Binding or peering beyond loopback needs the
  client and peer tokens, and then ``/health`` and ``/metrics`` need one too.
- TLS (:mod:`raftlog.rpc.tls`): with ``--tls-cert/--tls-key/--tls-ca`` the node
  serves HTTPS and verifies its peers against the CA. Binding or peering beyond
  loopback needs TLS too, unless ``--allow-plaintext`` (then a warning at every
  start: the tokens cross the network in plain text); a ``--tls-key`` that group
  or others can read gets a warning at start.
- Files (:mod:`raftlog.node.file_modes`): the data directory and everything the
  node creates in it are its user's only (0700 directories, 0600 files); an
  existing data directory open to others is tightened at start, with a warning.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from raftlog.allocator import keep_large_buffers_in_heap
from raftlog.controller import (
    CONTROLLER_GROUP,
    ControllerStm,
)
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.metrics import NodeMetrics, in_render_thread, merge_shard_metrics
from raftlog.node import gc_policy
from raftlog.node.admin import AdminApi
from raftlog.node.config import (
    NodeConfig,
    config_from_args,
    is_loopback,
    plaintext_warning,
)
from raftlog.node.context import NodeContext
from raftlog.node.data_api import DataApi
from raftlog.node.disk_space import DiskSpace
from raftlog.node.file_modes import tighten_data_dir, warn_if_readable_by_others
from raftlog.node.group_host import GroupHost, last_heard_ms
from raftlog.node.heap import release_freed_memory
from raftlog.node.membership import Membership
from raftlog.node.metadata import MetadataApi
from raftlog.node.partition_replica import PartitionReplica
from raftlog.node.shards import (
    FrontWatch,
    ShardError,
    ShardSet,
    die_with_parent,
    report_serving,
)
from raftlog.node.transactions_view import coordinator_view
from raftlog.node.txn_markers import PeerMarkers
from raftlog.node.upkeep import Upkeep
from raftlog.producers.rm_stm import (
    RmStmConfig,
)
from raftlog.rpc import codec
from raftlog.rpc.edge_limits import EdgeGuard
from raftlog.rpc.messages import (
    COORDINATOR_CALLS,
    AbortRunRequest,
    AlterConfigRequest,
    CompleteMoveRequest,
    ConsistentCutRequest,
    CoordinatorEndTxnRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DecommissionNodeRequest,
    DeleteTopicRequest,
    DescribeConfigsRequest,
    DescribeWriterRequest,
    EndTxnRequest,
    ErrorCode,
    FetchRequest,
    InitProducerRequest,
    ListOffsetsRequest,
    ListTopicsRequest,
    MetadataRequest,
    MovePartitionRequest,
    OffsetForTimestampRequest,
    PartitionStatusRequest,
    ProduceRequest,
    RegisterNodeRequest,
    RegisterParticipantRequest,
    TransferLeadershipRequest,
)
from raftlog.rpc.peer import (
    ShardStateReply,
    ShardStateRequest,
    WriteTxnMarkerRequest,
)
from raftlog.rpc.server import AuthPolicy, RequestError, make_app
from raftlog.rpc.tls import client_context, server_context
from raftlog.rpc.transport import StreamTransport
from raftlog.storage import fs as storage_fs
from raftlog.storage import identity
from raftlog.storage.fs import DiskFull
from raftlog.storage.open_files import check_budget, raise_fd_limit

log = logging.getLogger("raftlog.node")

# client calls on one partition (a shard of several answers those of its groups)
_PARTITION_CALLS = (
    ProduceRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForTimestampRequest,
    InitProducerRequest,
    EndTxnRequest,
)


class Node:
    """One node: hosts groups, serves RPC; ``start()``/``stop()`` are idempotent.

    Made of parts over one :class:`~raftlog.node.context.NodeContext`, each given the
    parts it calls in ``__init__``: ``membership`` (the cluster's nodes), ``metadata``
    (topics, statuses), ``data`` (partition calls), ``admin`` (controller calls),
    ``txn_markers`` (the coordinators' markers) and ``upkeep`` (the background loops,
    which open and close the partition replicas). The node itself routes requests to
    them and runs the server."""

    def __init__(self, config: NodeConfig, shards: ShardSet | None = None) -> None:
        """``shards``: on shard 0 of a node of several processes, the others
        (:mod:`raftlog.node.shards`); None on a node of one process and on shards K > 0."""
        self._mirrored_version = 0  # shards K > 0: the controller state they mirror
        # shards K > 0: whether shard 0 still runs; while it is silent, no raft traffic
        self._front = FrontWatch() if config.shard_index > 0 else None
        # The CA that verifies peers also verifies the nodes this one calls as a client.
        peer_ssl = client_context(config.tls.ca_file) if config.tls else None
        transport = StreamTransport(
            config.node_id,
            config.peers,
            routes=config.peer_routes,
            peer_token=config.peer_token,
            ssl_context=peer_ssl,
            timeout_s=5.0,
            gate=self._front.refusal if self._front is not None else None,
        )
        host = GroupHost(
            config.node_id,
            transport,
            config.heartbeat_interval_s,
            RmStmConfig(
                transaction_timeout_ms=config.transaction_timeout_ms,
                max_transaction_timeout_ms=config.max_transaction_timeout_ms,
            ),
            data_dir=config.data_dir,
            shard=config.shard_index,
            flush_scope=config.flush_scope,
            transactions_segment_bytes=config.transaction_state_log_segment_bytes,
            quiesce=config.quiesce,
            max_open_segment_files=config.max_open_segment_files or None,
        )
        # Free space and degraded mode (client writes refused while the disk is full).
        disk = DiskSpace(config.node_id, config.data_dir, config.min_free_bytes)
        edge = EdgeGuard(config.edge)
        # the node's shared state under the names other modules and tests use (set
        # before the metrics: their collector reads the partitions and the host at once)
        self.config = config
        self.node_id = config.node_id
        self.shards = shards
        self.transport = transport
        self.host = host
        self.controller_stm = ControllerStm()
        self.partitions: dict[int, PartitionReplica] = {}
        self.disk = disk
        self.edge = edge
        self.metrics = NodeMetrics(
            config.node_id,
            self._group_views,
            self._syncfs_calls,
            disk=disk.status,
            edge=edge,
            raft_clock=host.clock_stats,
            open_files=host.open_files_stats,
            gc=gc_policy.stats if gc_policy.installed() else None,
        )
        self.ctx = NodeContext(
            config,
            shards,
            transport,
            host,
            self.controller_stm,
            self.partitions,
            disk,
            edge,
            self.metrics,
        )
        # the parts, each given what it calls
        self.membership = Membership(self.ctx)
        self.metadata = MetadataApi(self.ctx, self.membership)
        self.data = DataApi(self.ctx, self.metadata)
        self.admin = AdminApi(self.ctx, self.metadata, self.membership)
        # the transaction coordinator's markers go node to node, on the peer stream
        self.txn_markers = PeerMarkers(
            config.node_id,
            self.data.marker_targets,
            self.data.marker_here,
            transport.send,
            self.metadata.topic_gone,
        )
        self.upkeep = Upkeep(self.ctx, self.metadata, self.membership, self.admin, self.txn_markers)
        self._client_handlers: dict[type, Callable[[Any], Awaitable[Any]]] = {
            CreateTopicRequest: self.admin.create_topic,
            DeleteTopicRequest: self.admin.delete_topic,
            ListTopicsRequest: self.metadata.list_topics,
            MetadataRequest: self.metadata.metadata,
            PartitionStatusRequest: self.metadata.partition_status,
            ProduceRequest: self.data.produce,
            FetchRequest: self.data.fetch,
            ListOffsetsRequest: self.data.list_offsets,
            OffsetForTimestampRequest: self.data.offset_for_timestamp,
            InitProducerRequest: self.data.init_producer,
            EndTxnRequest: self.data.end_txn,
            RegisterParticipantRequest: self.data.txn_register,
            CoordinatorEndTxnRequest: self.data.txn_end,
            AbortRunRequest: self.data.txn_abort_run,
            ConsistentCutRequest: self.data.txn_cut,
            DescribeWriterRequest: self.data.txn_describe_writer,
            AlterConfigRequest: self.admin.alter_config,
            DescribeConfigsRequest: self.admin.describe_configs,
            TransferLeadershipRequest: self.admin.transfer_leadership,
            CreatePartitionsRequest: self.admin.create_partitions,
            RegisterNodeRequest: self.admin.register_node,
            MovePartitionRequest: self.admin.move_partition,
            CompleteMoveRequest: self.admin.complete_move,
            DecommissionNodeRequest: self.admin.decommission_node,
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self._kafka: Any = None  # the Kafka listener (raftlog.kafka.listener), if any

    @property
    def controller(self) -> Any:
        """The controller group's Consensus (None on shards K > 0, and before start)."""
        return self.ctx.controller

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # One made by an older version, or by hand, may be open to other users. Every
        # shard may look (the first one there tightens it, the others find it private).
        await asyncio.to_thread(tighten_data_dir, self.config.data_dir)
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
        if self.config.shard_index == 0:  # the other shards open groups only after it
            await asyncio.to_thread(identity.migrate_layout, self.config.data_dir)
        await self.host.start()
        self.controller_stm.add_listener(self.upkeep.reconcile_needed.set)
        self.controller_stm.add_listener(self.host.leader_notices.topics_changed)
        internal = self.config.shard_index > 0
        if not internal:
            self.ctx.controller = await self.host.open_group(
                CONTROLLER_GROUP,
                self.config.data_dir / identity.CONTROLLER_DIR,
                sorted(self.config.peers),
                state_machines=[self.controller_stm],
                controller=True,
            )
        if self.shards is not None:
            self.controller_stm.add_listener(self.shards.controller_changed)
            self.shards.mirror_controller(self.controller_stm.snapshot)
        auth = AuthPolicy(
            client_token=self.config.auth_token,
            peer_token=self.config.peer_token,
            open_status=internal or is_loopback(self.config.host),
            admin_token=self.config.admin_token,
            auto_create_topics=self.config.auto_create_topics_enable,
        )
        app = make_app(
            self, auth=auth, max_request_bytes=self._max_request_bytes(), guard=self.edge
        )
        app.router.add_get("/transactions", self._transactions)
        if self.config.console and not internal:
            from raftlog.console.app import serve_on_node

            serve_on_node(
                app,
                [
                    self.config.address,
                    *(a for i, a in sorted(self.config.peers.items()) if i != self.node_id),
                ],
                self.config.auth_token,
                self.config.tls.ca_file if self.config.tls else None,
            )
        # aiohttp's own idle timer between keep-alive requests: its default (75 s), or
        # the guard's idle timeout when shorter
        idle_s = min(75.0, self.config.edge.connections_max_idle_ms / 1000)
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=idle_s)
        await self._runner.setup()
        assert self._runner.server is not None
        self.edge.install(self._runner.server)
        # a shard K > 0 serves shard 0 alone, on a loopback port of its own, in plain HTTP
        site = web.TCPSite(
            self._runner,
            "127.0.0.1" if internal else self.config.host,
            0 if internal else self.config.port,
            reuse_address=True,
            ssl_context=server_context(self.config.tls)
            if self.config.tls and not internal
            else None,
        )
        await site.start()
        if self.config.kafka_listen and not internal:
            await self._start_kafka(auth)
        loop = asyncio.get_running_loop()
        loops = [
            *self.upkeep.loops(
                # one process per node deletes its deleted topics' replicas
                delete_files=not internal,
                balance_leaders=self.controller is not None,
            ),
            self.admin.move_loop(),
        ]
        self._tasks = [loop.create_task(c) for c in loops]
        self.upkeep.reconcile_needed.set()
        log.info(
            "node %d%s serving %s on %s, advertised as %s",
            self.node_id,
            f" shard {self.config.shard_index}/{self.config.shards}"
            if self.config.shards > 1
            else "",
            "https" if self.config.tls and not internal else "http",
            self.bound_address,
            self.config.address,
        )

    async def _start_kafka(self, auth: AuthPolicy) -> None:
        """The Kafka protocol listener (``--kafka-listen``): another door onto this
        node's handlers, under the same roles (:mod:`raftlog.kafka`)."""
        from raftlog.kafka.apis import KafkaApis
        from raftlog.kafka.listener import KafkaListener

        assert self.config.kafka_listen is not None
        host, _, port = self.config.kafka_listen.rpartition(":")
        self._kafka = KafkaListener(
            KafkaApis(self, self.config.kafka_peers, auth),
            self.config.kafka_max_request_bytes or self._max_request_bytes(),
            self.metrics,
            max_connections=self.config.kafka_max_connections,
            idle_timeout_s=self.config.edge.connections_max_idle_ms / 1000,
            request_budget=self.config.edge.queued_max_request_bytes,
            # the node's certificate, as its HTTPS: SASL/PLAIN's password is a token
            ssl_context=server_context(self.config.tls) if self.config.tls else None,
        )
        await self._kafka.start(host, int(port))
        log.info("node %d serving Kafka clients on %s", self.node_id, self._kafka.address)

    @property
    def bound_address(self) -> str:
        """HOST:PORT this process serves on (a shard K > 0: its loopback port)."""
        assert self._runner is not None
        host, port = self._runner.addresses[0][:2]
        return f"{host}:{port}"

    def owns(self, group_id: int) -> bool:
        """Whether this process hosts ``group_id`` (the node's only one, or its shard)."""
        return self.ctx.owns(group_id)

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
        await self.edge.stop()
        if self._kafka is not None:
            await self._kafka.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.upkeep.close_all()
        await self.host.stop()
        await self.transport.close()

    # ------------------------------------------------------------ server hooks

    async def handle_peer(self, message: Any) -> Any:
        if isinstance(message, ShardStateRequest):
            return self._mirror_controller(message)
        if isinstance(message, WriteTxnMarkerRequest):
            return await self.data.write_txn_marker(message)
        if isinstance(message, PartitionStatusRequest):
            return await self.metadata.partition_status(message)
        if isinstance(message, CompleteMoveRequest):
            return await self.admin.complete_move(message)
        try:
            if self.shards is not None:
                return await self.shards.route_peer(message, self.host.dispatcher.handle)
            return await self.host.dispatcher.handle(message)
        except DiskFull as exc:
            # A follower's append found the disk full: its log is as before (the append
            # is undone whole); the leader retries and recovery catches this replica up
            # once space is freed. Refused by name, without a traceback per retry.
            self.disk.note_disk_full()
            raise RequestError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"node {self.node_id}: {exc}"
            ) from exc

    async def relay_peer(self, body: memoryview) -> memoryview | None:
        if self.shards is None:
            return None
        return await self.shards.relay_peer(body)

    def _mirror_controller(self, req: ShardStateRequest) -> ShardStateReply:
        """A shard K > 0 takes shard 0's controller state (a newer one only)."""
        if self.config.shard_index == 0:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"node {self.node_id} is shard 0 of its node: it hosts the controller itself",
            )
        if self._front is not None:
            self._front.heard()
        if req.version > self._mirrored_version:
            self.controller_stm.restore(req.snapshot)
            self._mirrored_version = req.version
        return ShardStateReply(self._mirrored_version)

    async def forward_client(
        self, route: str, message: Any, body: bytes | memoryview, authorization: str
    ) -> tuple[int, bytes | memoryview] | None:
        if self.shards is None:
            return None
        gid = self._client_group(message)
        if gid is None or self.owns(gid):
            return None
        return await self.shards.forward_client(self.shards.owner(gid), route, body, authorization)

    def _client_group(self, message: Any) -> int | None:
        """The group of a client call on one partition; None for any other call (and
        for an unknown topic or partition, which this process refuses by name)."""
        if isinstance(message, COORDINATOR_CALLS):
            topic, partition = TRANSACTIONS_TOPIC, message.partition
        elif isinstance(message, _PARTITION_CALLS):
            topic, partition = message.topic, message.partition
        else:
            return None
        try:
            return self.metadata.assignment(topic, partition)[1].group_id
        except RequestError:
            return None

    async def health(self) -> dict[str, Any]:
        """This node's health; shard 0 of several adds up what its shards report."""
        report = self._health_here()
        if self.shards is None:
            return report
        shards = [{"shard": 0, "pid": os.getpid(), "groups": report["groups"]}]
        infos = self.shards.describe()
        answers = await asyncio.gather(
            *(self.shards.get(info["shard"], "/health") for info in infos),
            return_exceptions=True,
        )
        for info, answer in zip(infos, answers, strict=True):
            shards.append(info)
            if isinstance(answer, ShardError):
                info["error"] = str(answer)
                continue
            if isinstance(answer, BaseException):
                raise answer
            theirs = json.loads(answer)
            info["groups"] = theirs["groups"]
            report["groups"] += theirs["groups"]
            report["leader_of"] += theirs["leader_of"]
            report["lagging_replicas"] += theirs["lagging_replicas"]
            report["open_failures"] += theirs.get("open_failures", [])
        report["shards"] = shards
        return report

    async def _transactions(self, request: web.Request) -> web.Response:
        """``GET /transactions`` (client role): the coordinator partitions led here, and
        by this node's other shards (:mod:`raftlog.node.transactions_view`)."""
        report = coordinator_view(self.node_id, list(self.partitions.values()))
        if self.shards is not None:
            others = self.shards.others
            answers = await asyncio.gather(
                *(self.shards.get(k, "/transactions") for k in others), return_exceptions=True
            )
            for answer in answers:
                if isinstance(answer, ShardError):
                    log.warning("transactions of %s", answer)
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    report["coordinators"] += json.loads(answer)["coordinators"]
        return web.json_response(report)

    def _health_here(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.config.address,
            "controller_leader": self.controller_leader(),
            "groups": len(self.partitions),
            "leader_of": sum(1 for r in self.partitions.values() if r.consensus.is_leader),
            "topics": len(self.controller_stm.topics),
            # the controller leader's view of every node's last heartbeat (health reports it)
            "last_heard_ms": {
                str(n): ms
                for n, ms in (last_heard_ms(self.controller) if self.controller else {}).items()
            },
            # followers of the partitions this node leads that have not caught up for
            # over --replica-lag-time-max-ms (health reports them as lagging)
            "lagging_replicas": self._lagging_replicas(),
            # free space and degraded mode (cluster health names a degraded node)
            "disk": self.disk.status(),
            # partition replicas that failed to open (retried with backoff)
            "open_failures": [f.to_json() for _, f in sorted(self.upkeep.open_failures.items())],
        }

    def _lagging_replicas(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        max_ms = self.config.replica_lag_time_max_ms
        return [
            {
                "topic": rep.topic,
                "partition": rep.partition,
                "node": lag.node,
                "behind_records": lag.behind_records,
                "not_caught_up_ms": lag.not_caught_up_ms,
            }
            for _, rep in sorted(self.partitions.items())
            for lag in rep.lagging_followers(now, max_ms)
        ]

    async def render_metrics(self) -> bytes:
        """The node's ``/metrics`` text (every shard's, merged), built off the loop; the
        heap the scrape freed is then handed back to the system (raftlog.node.heap)."""
        try:
            return await self._render_metrics()
        finally:
            await in_render_thread(release_freed_memory)

    async def _render_metrics(self) -> bytes:
        if self.shards is None:
            return await self.metrics.render_async()
        texts = {0: await self.metrics.render_async()}
        others = self.shards.others
        answers = await asyncio.gather(
            *(self.shards.get(k, "/metrics") for k in others), return_exceptions=True
        )
        for k, answer in zip(others, answers, strict=True):
            if isinstance(answer, ShardError):
                log.warning("metrics of %s", answer)  # the other shards' still go out
            elif isinstance(answer, BaseException):
                raise answer
            else:
                texts[k] = answer
        # parses and renders every shard's text: megabytes at thousands of partitions
        return await in_render_thread(merge_shard_metrics, texts)

    def count_request(self, route: str, status: int) -> None:
        self.metrics.rpc_requests.labels(route, str(status)).inc()

    def _group_views(self) -> list[Any]:
        return list(self.partitions.values())

    def _syncfs_calls(self) -> int | None:
        """The node's syncfs calls (``--flush-scope node``); None when it makes none."""
        flush = self.host.node_flush
        return None if flush is None else flush.syncs

    def controller_leader(self) -> int:
        """The controller group's leader as this node knows it; -1 when unknown."""
        return self.ctx.controller_leader()

    def handler_for(self, message_type: type) -> Callable[[Any], Awaitable[Any]] | None:
        """The part's method that answers a client call of ``message_type`` (one per
        type of :data:`raftlog.rpc.messages.CLIENT_ROUTES`); None for any other type."""
        return self._client_handlers.get(message_type)

    async def handle_client(self, msg: Any) -> Any:
        handler = self.handler_for(type(msg))
        if handler is None:
            raise RequestError(ErrorCode.INVALID_REQUEST, f"unsupported {type(msg).__name__}")
        return await handler(msg)


async def serve(config: NodeConfig, argv: list[str] | None = None) -> int:
    """Run a node until SIGTERM or SIGINT, then stop it cleanly; its exit status.

    With ``config.shards`` > 1, shard 0 (this process) first starts the node's
    other shards with ``argv`` (its own command line after the program, see
    :mod:`raftlog.node.shards`); a shard K > 0 dies with shard 0."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    internal = config.shard_index > 0
    if internal:
        die_with_parent()
    shards = None
    if config.shards > 1 and not internal:
        shards = ShardSet(config, argv or [])
        await shards.start(on_exit=stop.set)
    node = Node(config, shards)
    try:
        await node.start()
        if internal:
            report_serving(int(node.bound_address.rpartition(":")[2]))
        await stop.wait()
    finally:
        try:
            await asyncio.wait_for(node.stop(), 10.0)
        finally:
            if shards is not None:
                await shards.stop()
    return 1 if shards is not None and shards.failed else 0


def run_server(args: argparse.Namespace) -> int:
    """The ``raftlog server`` command."""
    config = config_from_args(args)
    # Thousands of partitions need thousands of descriptors: up to the hard limit
    # (refused, naming ulimit -n, below the minimum), before any file is opened.
    fd_limit = raise_fd_limit()
    if config.max_open_segment_files:
        check_budget(config.max_open_segment_files, fd_limit)
    shard = f".{config.shard_index}" if config.shard_index else ""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format=f"%(asctime)s node-{args.node_id}{shard} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    storage_fs.set_fatal_handler(_stop_on_failed_fsync)
    if config.shard_index == 0:  # once per node and start, not once per shard
        warning = plaintext_warning(config)
        if warning is not None:
            log.warning("%s", warning)
        if config.tls is not None:
            warn_if_readable_by_others(config.tls.key_file, "--tls-key")
    keep_large_buffers_in_heap()
    gc_policy.install()
    running = serve(config, getattr(args, "argv", None))
    try:
        import uvloop
    except ImportError:
        return asyncio.run(running)
    return uvloop.run(running)


def _stop_on_failed_fsync(message: str) -> None:
    """A failed fsync stops the node at once: never retried, a restart recovers from disk."""
    log.critical("stopping node: %s", message)
    logging.shutdown()
    os._exit(70)  # EX_SOFTWARE; from whichever thread the fsync ran in


# keep the codec registrations of controller commands and peer messages loaded
_ = codec
