"""A node's data calls, a part of :class:`raftlog.node.process.Node`: produce, fetch,
offsets, producer sessions, transaction markers and the coordinator, each at the
partition's leader replica."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.faults.failpoints import PRODUCE_SKIP_BATCH_CHECK, FailpointError, failpoint
from raftlog.node.context import NodeContext
from raftlog.node.internal_topics import refuse_internal
from raftlog.node.metadata import MetadataApi
from raftlog.node.partition_replica import PartitionReplica
from raftlog.records.payload_check import PayloadError, check_payload
from raftlog.records.topic_schema import typed_schema
from raftlog.rpc.messages import (
    AbortRunRequest,
    ConsistentCutRequest,
    CoordinatorEndTxnRequest,
    DescribeWriterRequest,
    EndTxnRequest,
    EndTxnResponse,
    ErrorCode,
    FetchRequest,
    InitProducerRequest,
    ListOffsetsRequest,
    OffsetForTimestampRequest,
    ProduceRequest,
    RegisterParticipantRequest,
)
from raftlog.rpc.peer import WriteTxnMarkerReply, WriteTxnMarkerRequest
from raftlog.rpc.server import RequestError

log = logging.getLogger("raftlog.node")
_T = TypeVar("_T")

READ_BARRIER_WAIT_S = 1.0
"""How long a read (fetch, list offsets, a time lookup, a coordinator read) waits for
its partition's read barrier before LEADER_NOT_AVAILABLE: a new leader's no-op commits
within a round trip, so its first reads wait for it rather than make the client retry."""


class DataApi:
    """Partition calls: routed to the local replica that leads the partition, found
    through ``metadata``'s assignments."""

    def __init__(self, ctx: NodeContext, metadata: MetadataApi) -> None:
        self._ctx = ctx
        self._metadata = metadata

    # ------------------------------------------------------------ partition calls

    def _replica(self, topic: str, partition: int) -> PartitionReplica:
        _t, p = self._metadata.assignment(topic, partition)
        rep = self._ctx.partitions.get(p.group_id)
        if rep is None:
            raise RequestError(
                ErrorCode.NOT_LEADER,
                f"node {self._ctx.node_id} hosts no replica of {topic}/{partition}",
                -1,
            )
        return rep

    def _refuse_when_disk_full(self, route: str) -> None:
        """Refuse a client write at once while this node is degraded (its disk is full:
        raftlog.node.disk_space); nothing is written, reads go on."""
        if self._ctx.disk.degraded:
            self._ctx.metrics.storage_refusals.labels(route).inc()
            raise RequestError(ErrorCode.KAFKA_STORAGE_ERROR, self._ctx.disk.reason())

    async def _writing(self, route: str, call: Awaitable[_T]) -> _T:
        """``call``, a client write; a write that found the disk full (refused with
        KAFKA_STORAGE_ERROR by the partition) puts the node in degraded mode."""
        try:
            return await call
        except RequestError as exc:
            if exc.code is ErrorCode.KAFKA_STORAGE_ERROR:
                self._ctx.disk.note_disk_full()
                self._ctx.metrics.storage_refusals.labels(route).inc()
            raise

    def _leader_replica(self, topic: str, partition: int) -> PartitionReplica:
        rep = self._replica(topic, partition)
        rep.require_leader(self._ctx.config.peers)
        return rep

    async def _readable_replica(self, topic: str, partition: int) -> PartitionReplica:
        """The replica of ``topic/partition`` once it passed the group's read barrier
        (waiting up to ``READ_BARRIER_WAIT_S``: a new leader's first reads wait for its
        no-op instead of bouncing); NOT_LEADER or LEADER_NOT_AVAILABLE otherwise."""
        rep = self._replica(topic, partition)
        await rep.read_barrier(self._ctx.config.peers, READ_BARRIER_WAIT_S)
        return rep

    async def produce(self, req: ProduceRequest) -> Any:
        # internal topics' records are the node's own (__transactions: the coordinator's
        # commands, written by tm_stm only)
        refuse_internal(req.topic, "produced to")
        if len(req.batches) > self._ctx.config.edge.max_batches_per_produce:
            why = self._ctx.edge.refusal(
                "max_batches_per_produce",
                "batches",
                len(req.batches),
                "per produce",
                "send them in several produces",
            )
            raise RequestError(ErrorCode.INVALID_REQUEST, why)
        rep = self._leader_replica(req.topic, req.partition)
        self._refuse_when_disk_full("produce")
        for i, b in enumerate(req.batches):
            if len(b.payload) > self._ctx.config.max_batch_bytes:
                raise RequestError(
                    ErrorCode.RECORD_TOO_LARGE,
                    f"batches[{i}]: payload of {len(b.payload)} bytes exceeds the limit of "
                    f"{self._ctx.config.max_batch_bytes} bytes (--max-batch-bytes)",
                )
        if _checks_batches():
            self._check_batches(req)
        started = time.perf_counter()
        resp = await self._writing("produce", rep.produce(req))
        self._ctx.metrics.append_latency.labels(str(req.acks)).observe(
            time.perf_counter() - started
        )
        return resp

    def _check_batches(self, req: ProduceRequest) -> None:
        """Refuse the whole produce, before anything enters the log, when one of its
        batches does not hold its record count (raftlog.records.payload_check): what
        Kafka's broker answers CORRUPT_MESSAGE. A compressed payload is decoded into at
        most 64 MiB (the engine's payload limit, which every reader keeps too), so a
        small bomb costs the node no more than that. On a typed topic each payload must
        be an Arrow IPC stream of one record batch with the topic's columns
        (raftlog.records.topic_schema): what the Spark source reads."""
        try:
            schema = typed_schema(self._metadata.assignment(req.topic, req.partition)[0].schema)
        except ValueError as exc:  # a topic created before create_topic checked its schema
            raise RequestError(ErrorCode.INVALID_REQUEST, f"topic {req.topic!r}: {exc}") from None
        for i, b in enumerate(req.batches):
            try:
                check_payload(b.payload, b.record_count, b.compression, schema=schema)
            except PayloadError as exc:
                self._ctx.metrics.corrupt_batches.labels(req.topic).inc()
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"CORRUPT_MESSAGE: topic {req.topic!r} partition {req.partition} "
                    f"batches[{i}] (record_count {b.record_count}, {len(b.payload)} bytes): "
                    f"{exc}",
                ) from None

    async def fetch(self, req: FetchRequest) -> Any:
        return await (await self._readable_replica(req.topic, req.partition)).fetch(req)

    async def list_offsets(self, req: ListOffsetsRequest) -> Any:
        return (await self._readable_replica(req.topic, req.partition)).list_offsets()

    async def offset_for_timestamp(self, req: OffsetForTimestampRequest) -> Any:
        replica = await self._readable_replica(req.topic, req.partition)
        return replica.offset_for_timestamp(req.timestamp_ms)

    async def init_producer(self, req: InitProducerRequest) -> Any:
        topic = self._metadata.assignment(req.topic, req.partition)[0]
        topic_id = topic.topic_id
        if req.topic_id >= 0 and topic_id != req.topic_id:
            # the replica below is of this incarnation of the topic: not the one planned
            raise RequestError(
                ErrorCode.UNKNOWN_TOPIC,
                f"topic {req.topic!r} is not the one this write was planned against: its id "
                f"is {topic_id}, not {req.topic_id} (the topic was deleted and created again "
                "since)",
            )
        rep = self._leader_replica(req.topic, req.partition)
        self._refuse_when_disk_full("init_producer")
        return await self._writing("init_producer", rep.init_producer(req))

    async def end_txn(self, req: EndTxnRequest) -> Any:
        # Not refused while degraded: a commit or abort marker is small, and ending a
        # transaction lets the last stable offset (and readers) move on.
        return await self._leader_replica(req.topic, req.partition).end_txn(req)

    async def write_txn_marker(self, req: WriteTxnMarkerRequest) -> WriteTxnMarkerReply:
        """A transaction coordinator's marker (on the peer stream): written as a client's
        ``end_txn`` is, by the shard that owns the partition; a refusal is answered with
        its code (never raised: the coordinator tells "not the leader" from "fenced")."""
        end = EndTxnRequest(
            req.topic,
            req.partition,
            req.producer_id,
            req.producer_epoch,
            req.commit,
            record_count=req.record_count,
            last_sequence=req.last_sequence,
        )
        try:
            gid = self._metadata.assignment(req.topic, req.partition)[1].group_id
            if self._ctx.shards is not None and not self._ctx.owns(gid):
                resp = await self._ctx.shards.call(self._ctx.shards.owner(gid), end, EndTxnResponse)
            else:
                resp = await self.end_txn(end)
        except RequestError as exc:
            return WriteTxnMarkerReply(-1, exc.code, exc.leader_id, str(exc))
        return WriteTxnMarkerReply(resp.offset)

    async def marker_here(self, req: WriteTxnMarkerRequest) -> WriteTxnMarkerReply:
        """A marker whose partition this node leads (or may), for the node's
        :class:`~raftlog.node.txn_markers.PeerMarkers`: this process writes it when it
        owns the partition's group or is shard 0 (which forwards to the owner); a shard
        K > 0 hands it to its node's shard 0, on the peer stream."""
        ctx = self._ctx
        try:
            gid = self._metadata.assignment(req.topic, req.partition)[1].group_id
        except RequestError as exc:
            return WriteTxnMarkerReply(-1, exc.code, exc.leader_id, str(exc))
        if ctx.shards is not None or ctx.owns(gid):
            return await self.write_txn_marker(req)
        reply: WriteTxnMarkerReply = await ctx.transport.send(ctx.node_id, req)
        return reply

    def marker_targets(self, topic: str, partition: int) -> list[int]:
        """The replicas of ``topic/partition``, the leader this node knows first (a
        LookupError for a partition the controller does not know), for the node's
        :class:`~raftlog.node.txn_markers.PeerMarkers`."""
        try:
            _t, part = self._metadata.assignment(topic, partition)
        except RequestError as exc:
            raise LookupError(str(exc)) from exc
        rep = self._ctx.partitions.get(part.group_id)
        leader = -1
        if rep is not None:
            leader = self._ctx.node_id if rep.consensus.is_leader else rep.consensus.live_leader_id
        rest = [r for r in part.replicas if r != leader]
        return [leader, *rest] if leader >= 0 else rest

    # -- the transaction coordinator, at the leader of its __transactions partition --

    def _coordinator_replica(self, partition: int) -> PartitionReplica:
        rep = self._leader_replica(TRANSACTIONS_TOPIC, partition)
        self._refuse_when_disk_full("txn_register")
        return rep

    async def txn_register(self, req: RegisterParticipantRequest) -> Any:
        rep = self._coordinator_replica(req.partition)
        return await self._writing("txn_register", rep.txn_register(req))

    async def txn_end(self, req: CoordinatorEndTxnRequest) -> Any:
        # Not refused while degraded beyond the check above: ending a transaction lets
        # the last stable offset (and readers) move on.
        rep = self._leader_replica(TRANSACTIONS_TOPIC, req.partition)
        return await self._writing("coordinator", rep.txn_end(req))

    async def txn_abort_run(self, req: AbortRunRequest) -> Any:
        rep = self._leader_replica(TRANSACTIONS_TOPIC, req.partition)
        return await self._writing("txn_abort_run", rep.txn_abort_run(req))

    async def txn_cut(self, req: ConsistentCutRequest) -> Any:
        rep = await self._readable_replica(TRANSACTIONS_TOPIC, req.partition)
        return await rep.txn_cut(req)

    async def txn_describe_writer(self, req: DescribeWriterRequest) -> Any:
        rep = await self._readable_replica(TRANSACTIONS_TOPIC, req.partition)
        return await rep.txn_describe_writer(req)


def _checks_batches() -> bool:
    """False when the ``produce.skip_batch_check`` failpoint is set to ``error`` (tests
    writing batches as nodes before the check did)."""
    try:
        failpoint(PRODUCE_SKIP_BATCH_CHECK)
    except FailpointError:
        return False
    return True
