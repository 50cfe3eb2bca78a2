"""A node's data calls, mixed into :class:`raftlog.node.process.Node`: produce, fetch,
offsets, producer sessions, transaction markers and the coordinator, each at the
partition's leader replica."""

from __future__ import annotations

import logging
import time
from typing import Any

from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.node.groups import PartitionReplica
from raftlog.rpc.messages import (
    CoordinatorRequest,
    EndTxnRequest,
    ErrorCode,
    FetchRequest,
    InitProducerRequest,
    ListOffsetsRequest,
    OffsetForTimestampRequest,
    ProduceRequest,
)
from raftlog.rpc.server import RequestError

log = logging.getLogger("raftlog.node")


class DataApi:
    """Partition calls: routed to the local replica that leads the partition."""

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

    def _leader_replica(
        self, topic: str, partition: int, *, read: bool = False
    ) -> PartitionReplica:
        rep = self._replica(topic, partition)
        rep.require_leader(self.config.peers, read=read)
        return rep

    async def produce(self, req: ProduceRequest) -> Any:
        if req.topic == TRANSACTIONS_TOPIC:
            # its records are the coordinator's commands: only tm_stm writes them
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"topic: {TRANSACTIONS_TOPIC} is internal to the transaction coordinator "
                f"and takes no produce",
            )
        if len(req.batches) > self.config.edge.max_batches_per_produce:
            why = self.edge.refusal(
                "max_batches_per_produce",
                "batches",
                len(req.batches),
                "per produce",
                "send them in several produces",
            )
            raise RequestError(ErrorCode.INVALID_REQUEST, why)
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
        return await self._leader_replica(req.topic, req.partition, read=True).fetch(req)

    async def list_offsets(self, req: ListOffsetsRequest) -> Any:
        return self._leader_replica(req.topic, req.partition, read=True).list_offsets()

    async def offset_for_timestamp(self, req: OffsetForTimestampRequest) -> Any:
        replica = self._leader_replica(req.topic, req.partition, read=True)
        return replica.offset_for_timestamp(req.timestamp_ms)

    async def init_producer(self, req: InitProducerRequest) -> Any:
        return await self._leader_replica(req.topic, req.partition).init_producer(req)

    async def end_txn(self, req: EndTxnRequest) -> Any:
        return await self._leader_replica(req.topic, req.partition).end_txn(req)

    async def coordinate(self, req: CoordinatorRequest) -> Any:
        return await self._leader_replica(TRANSACTIONS_TOPIC, req.partition).coordinate(req)
