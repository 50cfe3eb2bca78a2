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
import logging
import os
import signal
import sys
import time
from typing import Any

from aiohttp import web

from raftlog.controller import (
    CONTROLLER_GROUP,
    ControllerStm,
)
from raftlog.metrics import NodeMetrics
from raftlog.node.admin import AdminApi
from raftlog.node.config import (
    NodeConfig,
    config_from_args,
    is_loopback,
)
from raftlog.node.data_api import DataApi
from raftlog.node.groups import GroupHost, PartitionReplica, last_heard_ms
from raftlog.node.metadata import MetadataApi
from raftlog.node.upkeep import Upkeep
from raftlog.producers.rm_stm import (
    RmStmConfig,
)
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    AlterConfigRequest,
    CompleteMoveRequest,
    CoordinatorRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DecommissionNodeRequest,
    DeleteTopicRequest,
    DescribeConfigsRequest,
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
    TransferLeadershipRequest,
)
from raftlog.rpc.server import AuthPolicy, RequestError, make_app
from raftlog.rpc.tls import client_context, server_context
from raftlog.rpc.transport import StreamTransport
from raftlog.storage import fs as storage_fs
from raftlog.storage import identity

log = logging.getLogger("raftlog.node")


class Node(Upkeep, AdminApi, MetadataApi, DataApi):
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
            open_status=is_loopback(self.config.host),
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
            loop.create_task(self._leader_balancer_loop()),
            loop.create_task(self._replica_lag_loop()),
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
            # followers of the partitions this node leads that have not caught up for
            # over --replica-lag-time-max-ms (health reports them as lagging)
            "lagging_replicas": self._lagging_replicas(),
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
