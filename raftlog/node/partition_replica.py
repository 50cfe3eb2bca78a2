"""One partition's replica on a node, and its request handling.

:class:`PartitionReplica` is one partition's group with rm_stm in front:
produce goes replica -> rm_stm -> consensus.replicate, fetch reads committed
batches below the last stable offset and lets rm_stm drop control batches and
aborted data. It also runs the group's membership moves, its metrics and lag
samples, and (on ``__transactions``) the transaction coordinator's calls; the
errors its handlers raise are mapped to wire codes by
:mod:`raftlog.node.request_errors`. :mod:`raftlog.node.group_host` opens it.
"""

from __future__ import annotations

import asyncio
import pathlib

from raftlog.controller.topic_config import TopicConfig
from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC, GroupStm
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC, TmStm
from raftlog.coordinator.txn_coordinator import TxnCoordinator
from raftlog.node.config import DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES
from raftlog.node.replica_lag import FollowerLag, FollowerLagTracker
from raftlog.node.request_errors import REQUEST_TIMEOUT_S, RequestErrors
from raftlog.node.retention import Retention, RetentionPolicy
from raftlog.producers.rm_stm import RmStm, check_transactional_acks
from raftlog.raft.consensus import Consensus
from raftlog.raft.errors import ConfigurationChangeError, RaftError, ReadNotReadyError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.rpc.messages import (
    AbortRunRequest,
    AbortRunResponse,
    ConsistentCutRequest,
    ConsistentCutResponse,
    CoordinatorEndTxnRequest,
    CoordinatorEndTxnResponse,
    DescribeWriterRequest,
    DescribeWriterResponse,
    EndTxnRequest,
    EndTxnResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    InitProducerRequest,
    InitProducerResponse,
    ListOffsetsResponse,
    OffsetForTimestampResponse,
    PartitionStatus,
    ProduceRequest,
    ProduceResponse,
    RegisterParticipantRequest,
    RegisterParticipantResponse,
)
from raftlog.rpc.server import RequestError
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog

TRANSACTIONS_RETENTION = RetentionPolicy(retention_bytes=0)
"""Every closed segment below the leader's limit goes (see ``PartitionReplica.configure``)."""

_SNAPSHOTTED_TOPICS = (TRANSACTIONS_TOPIC, CONSUMER_OFFSETS_TOPIC)
"""Internal topics whose state machine's snapshot holds all their state: closed
segments below the leader's limit all go (``PartitionReplica.configure``)."""

CONSISTENCY = {-1: Consistency.QUORUM_ACK, 1: Consistency.LEADER_ACK, 0: Consistency.NO_ACK}


class PartitionReplica:
    """One partition's replica on this node: consensus plus rm_stm."""

    def __init__(
        self,
        topic: str,
        partition: int,
        group_id: int,
        directory: pathlib.Path,
        replicas: list[int],
        consensus: Consensus,
        rm: RmStm,
        tm: TmStm | None = None,
        retention: Retention | None = None,
        transactions_segment_bytes: int = DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES,
        group_stm: GroupStm | None = None,
    ) -> None:
        self.topic = topic
        self.group_stm = group_stm
        self.transactions_segment_bytes = transactions_segment_bytes
        self.partition = partition
        self.group_id = group_id
        self.directory = directory
        self.replicas = replicas
        self.consensus = consensus
        self.rm = rm
        self.tm = tm
        # the transaction coordinator on tm (the node attaches it: it writes markers
        # through the node's peer stream)
        self.txn: TxnCoordinator | None = None
        self.retention = retention
        # when each follower last caught up (on the leader; sampled by the node)
        self.lag = FollowerLagTracker()
        #: the topic settings it runs with (:meth:`configure`); None until configured
        self.config: TopicConfig | None = None

    def _errors(self) -> RequestErrors:
        return RequestErrors(f"{self.topic}/{self.partition}", self.consensus.node_id)

    @property
    def log_start(self) -> int:
        """The partition's log start: the first offset a reader may fetch."""
        if self.retention is not None:
            return self.retention.log_start
        return self.consensus.log.start_offset

    def configure(self, config: TopicConfig) -> None:
        """Run with a topic's settings (segment rolls and retention), from the next
        append and the next retention round.

        The coordinator's topic keeps only what its state needs: tm_stm's snapshot
        (saved with the commit context, installed on a replica behind the log start)
        holds every transaction still open and every decision kept, so the commands
        below it are redundant. Its closed segments (at most
        ``transactions_segment_bytes`` each: the node's
        ``--transaction-state-log-segment-bytes``) all go, up to the leader's limit (the
        high watermark and its saved commit context): completed transactions' records
        are dropped, an open one's state survives in the snapshot. ``__consumer_offsets``
        likewise: group_stm's snapshot holds every group's offsets and metadata (what
        Kafka's log compaction keeps)."""
        self.config = config
        log = self.consensus.log
        segment_bytes = config.segment_bytes
        if self.topic in _SNAPSHOTTED_TOPICS:
            segment_bytes = min(segment_bytes, self.transactions_segment_bytes)
        if isinstance(log, SegmentedLog):
            log.configure(segment_bytes=segment_bytes, segment_ms=config.segment_ms)
        if self.retention is not None:
            self.retention.policy = (
                TRANSACTIONS_RETENTION
                if self.topic in _SNAPSHOTTED_TOPICS
                else RetentionPolicy(config.retention_bytes, config.retention_ms)
            )

    # -- replica moves -------------------------------------------------------

    async def move_step(self, target: list[int]) -> bool:
        """On the leader, one step of moving the group's members to ``target``, one
        configuration change at a time (single-server changes, so any two successive
        majorities overlap): add a missing node as a learner (the core promotes it to a
        voter once it has caught up, so a voter never joins behind), wait for its
        promotion, then remove a member that is to go, the leader last, after it has
        handed the leadership to a caught-up voter of the target. True once the
        voters are exactly ``target`` and no learner is left; False when a step was
        taken or is in progress (call again), also on a follower.
        """
        c = self.consensus
        if not c.is_leader:
            return False
        cfg = c.configuration
        want = set(target)
        missing = [n for n in target if n not in cfg.members]
        extra = [n for n in cfg.members if n not in want and n != c.node_id]
        try:
            if cfg.learners and set(cfg.learners) <= want:
                return False  # catching up: promoted by the core when it has
            if extra and (not missing or any(n in cfg.learners for n in extra)):
                # a learner that is not wanted (a changed target), or a voter to go
                # once every new node votes: removed one by one
                await c.remove_member(extra[0])
                return False
            if missing:
                await c.add_member(missing[0], learner_first=True)
                return False
            if c.node_id not in want:
                await self._hand_over(target)
                return False
        except ConfigurationChangeError:
            return False  # another change (a promotion) is in flight: next round
        return set(cfg.voters) == want and not cfg.learners

    async def _hand_over(self, target: list[int]) -> None:
        """The leader is to leave the group: hand the leadership to the caught-up voter
        of ``target`` that comes first (the new leader finishes the move)."""
        c = self.consensus
        progress = c.status().peers
        ready = [
            n
            for n in target
            if n in c.configuration.voters
            and n in progress
            and progress[n].match_offset >= c.log.dirty_offset
        ]
        if ready:
            await c.transfer_leadership(ready[0])

    # -- metrics / status ----------------------------------------------------

    def gauges(self) -> dict[str, float]:
        c = self.consensus
        batcher = getattr(c, "batcher", None)
        queued = batcher.memory.capacity - batcher.memory.available if batcher else 0
        return {
            "is_leader": 1.0 if c.is_leader else 0.0,
            "term": c.term,
            "commit_index": c.commit_index,
            "flushed_offset": c.flushed_offset,
            "dirty_offset": c.dirty_offset,
            "batcher_queue_bytes": queued,
            "fsyncs": getattr(c.log, "fsyncs", 0),
            "recovery_requests": c.recovery.requests_sent,
            "stm_apply_errors": c.stm_apply_errors,
            "log_start_offset": self.log_start,
            "log_end_offset": c.dirty_offset + 1,
            "high_watermark": c.high_watermark,
            "last_stable_offset": self.rm.last_stable_offset,
            "size_bytes": getattr(c.log, "size_bytes", 0),
            "replication_lag": max(self.follower_lags().values(), default=0),
        }

    def follower_lags(self) -> dict[int, int]:
        """On the leader, per follower (learners included): its last offset minus the
        follower's matched offset (-1 when unknown, so a follower never heard from lags
        by the whole log). Empty on a follower, whose view of the others is stale."""
        c = self.consensus
        if not c.is_leader:
            return {}
        end = c.dirty_offset
        return {node: max(0, end - p.match_offset) for node, p in c.status().peers.items()}

    def sample_lag(self, now_s: float) -> bool:
        """Feed the follower lag tracker one sample of the leader's progress (forgets
        every follower on a follower); whether it sampled (False: it forgot them)."""
        c = self.consensus
        if not c.is_leader or (c.quiescent and not c.quiescent_without_dead):
            # Quiescent with every member: each holds the whole log, so none lags; the
            # tracker starts afresh, all caught up, when the group wakes. An idle node
            # then samples nothing per partition. A leader that quiesced without the
            # members on nodes declared dead is sampled on: those may be behind.
            self.lag.reset()
            return False
        matched = {node: p.match_offset for node, p in c.status().peers.items()}
        self.lag.observe(now_s, c.term, c.dirty_offset, matched)
        return True

    def lagging_followers(self, now_s: float, max_lag_ms: int) -> list[FollowerLag]:
        """On the leader, the followers (learners included) not caught up to its last
        offset for more than ``max_lag_ms`` (see ``raftlog.node.replica_lag``)."""
        if not self.consensus.is_leader:
            return []
        return self.lag.lagging(now_s, max_lag_ms)

    def status(self) -> PartitionStatus:
        c = self.consensus
        leader = self._leader()
        return PartitionStatus(
            self.group_id,
            leader,
            self.log_start,
            c.high_watermark,
            self.rm.last_stable_offset,
            c.leader_since_ms if leader >= 0 else -1,
        )

    def _leader(self) -> int:
        c = self.consensus
        return c.node_id if c.is_leader else c.live_leader_id

    def require_leader(self, peers: dict[int, str]) -> None:
        """Raise NOT_LEADER (naming the leader) unless this replica leads."""
        if not self.consensus.is_leader:
            raise self._not_leader(peers)

    async def read_barrier(self, peers: dict[int, str], timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until this leader may answer a read from its state:
        the group's one read barrier (:meth:`Consensus.read_barrier`: an entry of its
        term committed, a quorum heard lately, and rm_stm and the other state machines
        applied the term's read index). Without it a new leader's high watermark, and
        its last stable offset, may lag records its predecessor acknowledged: a time
        lookup found nothing and answered offset 0. Raises NOT_LEADER (naming the
        leader), or LEADER_NOT_AVAILABLE saying what the read still waits for."""
        try:
            await self.consensus.read_barrier(timeout_s)
        except ReadNotReadyError as exc:
            raise self._not_readable(peers, exc) from None
        except RaftError:
            raise self._not_leader(peers) from None

    def check_readable(self, peers: dict[int, str]) -> None:
        """:meth:`read_barrier` for a handler that answers at once (no wait)."""
        try:
            self.consensus.check_readable()
        except ReadNotReadyError as exc:
            raise self._not_readable(peers, exc) from None
        except RaftError:
            raise self._not_leader(peers) from None

    def _not_readable(self, peers: dict[int, str], exc: ReadNotReadyError) -> RequestError:
        c = self.consensus
        return RequestError(
            ErrorCode.LEADER_NOT_AVAILABLE,
            f"{self.topic}/{self.partition}: {exc}; retry",
            c.node_id,
            peers.get(c.node_id, ""),
        )

    def _not_leader(self, peers: dict[int, str]) -> RequestError:
        c = self.consensus
        leader = c.live_leader_id if not c.is_leader else -1
        code = ErrorCode.NOT_LEADER if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        return RequestError(
            code,
            f"node {c.node_id} is not the leader of {self.topic}/{self.partition} "
            f"(leader: {leader if leader >= 0 else 'unknown, election in progress'})",
            leader,
            peers.get(leader, ""),
        )

    # -- requests ------------------------------------------------------------

    async def produce(self, req: ProduceRequest) -> ProduceResponse:
        consistency = CONSISTENCY.get(req.acks)
        if consistency is None:
            raise RequestError(
                ErrorCode.INVALID_REQUEST, f"acks: expected -1 (all), 1 or 0, got {req.acks}"
            )
        # Transactional batches at acks other than all: refused by rm_stm (RmStm.replicate).
        if not req.batches:
            raise RequestError(ErrorCode.INVALID_REQUEST, "batches: expected at least one batch")
        for i, b in enumerate(req.batches):
            if b.record_count < 1:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"batches[{i}].record_count: expected >= 1, got {b.record_count}",
                )
        try:
            batches = [
                RecordBatch.create(
                    b.payload,
                    b.record_count,
                    transactional=req.transactional,
                    producer_id=req.producer_id,
                    producer_epoch=req.producer_epoch,
                    first_sequence=req.first_sequence,
                    compression=b.compression,
                )
                for b in req.batches
            ]
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        async with self._errors():
            if req.producer_id < 0 and not req.transactional:
                # Plain writes: one replicate call keeps the request's batches contiguous.
                term = await self.rm.sync()
                stages = self.consensus.replicate(batches, consistency, term)
                if consistency is Consistency.NO_ACK:
                    await asyncio.wait_for(stages.enqueued, REQUEST_TIMEOUT_S)
                    return ProduceResponse(-1, -1)
                res = await asyncio.wait_for(stages.finished, REQUEST_TIMEOUT_S)
                return ProduceResponse(res.base_offset, res.last_offset)
            if len(batches) != 1:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"batches: an idempotent or transactional produce carries exactly one "
                    f"batch, got {len(batches)}",
                )
            r = await self.rm.replicate(batches[0], consistency)
            return ProduceResponse(r.base_offset, r.last_offset)
        raise AssertionError("unreachable")

    async def fetch(self, req: FetchRequest) -> FetchResponse:
        c = self.consensus
        start = self.log_start
        hwm = c.high_watermark
        lso = self.rm.last_stable_offset
        if req.max_bytes < 1:
            raise RequestError(
                ErrorCode.INVALID_REQUEST, f"max_bytes: expected >= 1, got {req.max_bytes}"
            )
        if req.isolation not in (0, 1):
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"isolation: expected 1 (read_committed) or 0 (read_uncommitted), "
                f"got {req.isolation}",
            )
        if req.offset < start:
            raise RequestError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {req.offset} of {self.topic}/{self.partition} is below the log start "
                f"{start} (offsets {req.offset}..{start - 1} were deleted by retention); "
                f"the partition holds [{start}, {hwm}] (start offset, high watermark)",
            )
        if req.offset > hwm:
            raise RequestError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {req.offset} of {self.topic}/{self.partition} is outside "
                f"[{start}, {hwm}] (start offset, high watermark)",
            )
        limit = lso if req.isolation == 1 else hwm
        batches: list[RecordBatch] = []
        next_offset = req.offset
        budget = req.max_bytes
        # Skip runs of control batches (bounded), so a reader never stalls on them.
        # No CRC check of what is read: every batch was checked before it entered the
        # log, and the reader checks each one it gets (as Kafka's broker leaves it to
        # the consumer); it was a quarter of a leader's CPU serving the source.
        for _ in range(64):
            if next_offset >= limit:
                break
            raw = c.read(next_offset, budget, limit - 1, verify=False)
            if not raw:
                break
            visible = (
                self.rm.visible(raw) if req.isolation == 1 else [b for b in raw if not b.is_control]
            )
            batches.extend(visible)
            next_offset = raw[-1].last_offset + 1
            budget -= sum(b.size_bytes for b in raw)
            if batches or budget <= 0:
                break
        return FetchResponse(batches, hwm, lso, start, next_offset)

    def list_offsets(self) -> ListOffsetsResponse:
        c = self.consensus
        return ListOffsetsResponse(self.log_start, c.high_watermark, self.rm.last_stable_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetForTimestampResponse:
        """The first batch below the LSO with a timestamp >= ``timestamp_ms``, found through
        the log's per-segment time index (never a scan from the log start)."""
        lso = self.rm.last_stable_offset
        segments = self.consensus.log
        assert isinstance(segments, SegmentedLog)  # as open_group made it
        found = segments.offset_for_timestamp(timestamp_ms, lso - 1)
        if found is None:
            return OffsetForTimestampResponse(-1, -1, lso)
        return OffsetForTimestampResponse(max(found[0], self.log_start), found[1], lso)

    async def init_producer(self, req: InitProducerRequest) -> InitProducerResponse:
        async with self._errors():
            r = await self.rm.init_producer(req.producer_id, req.transaction_timeout_ms)
            return InitProducerResponse(
                r.producer_id, r.epoch, r.last_committed_version, r.transaction_timeout_ms
            )
        raise AssertionError("unreachable")

    async def end_txn(self, req: EndTxnRequest) -> EndTxnResponse:
        try:
            check_transactional_acks(req.acks, "transaction markers")
        except ValueError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        async with self._errors():
            r = await self.rm.end_transaction(
                req.producer_id,
                req.producer_epoch,
                req.commit,
                req.version,
                record_count=req.record_count,
                last_sequence=req.last_sequence,
            )
            return EndTxnResponse(r.offset, r.producer_epoch)
        raise AssertionError("unreachable")

    # -- the transaction coordinator (on a __transactions partition) -------------------

    def _coordinator(self) -> TxnCoordinator:
        if self.txn is None:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partition: {self.topic}/{self.partition} runs no transaction coordinator "
                f"(only {TRANSACTIONS_TOPIC} does)",
            )
        return self.txn

    async def txn_register(self, req: RegisterParticipantRequest) -> RegisterParticipantResponse:
        coordinator = self._coordinator()
        async with self._errors():
            return await coordinator.register(req.writer, req.version, req.participant)
        raise AssertionError("unreachable")

    async def txn_end(self, req: CoordinatorEndTxnRequest) -> CoordinatorEndTxnResponse:
        coordinator = self._coordinator()
        async with self._errors():
            status, decision = await coordinator.end_txn(
                req.writer, req.version, req.run, req.commit, list(req.participants)
            )
            return CoordinatorEndTxnResponse(status, decision)
        raise AssertionError("unreachable")

    async def txn_abort_run(self, req: AbortRunRequest) -> AbortRunResponse:
        coordinator = self._coordinator()
        async with self._errors():
            return AbortRunResponse(await coordinator.abort_run(req.run, req.version))
        raise AssertionError("unreachable")

    async def txn_cut(self, req: ConsistentCutRequest) -> ConsistentCutResponse:
        coordinator = self._coordinator()
        async with self._errors():
            return ConsistentCutResponse(await coordinator.cut(req.topic, req.topic_id))
        raise AssertionError("unreachable")

    async def txn_describe_writer(self, req: DescribeWriterRequest) -> DescribeWriterResponse:
        coordinator = self._coordinator()
        async with self._errors():
            return await coordinator.describe(req.writer)
        raise AssertionError("unreachable")
