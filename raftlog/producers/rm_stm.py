"""``rm_stm``: the producer state machine of one partition and its pipelined front.

Follows Redpanda's ``rm_stm`` (with the pipelining of PR #5157) and Kafka's
idempotent and transactional producer (KIP-98).

State: a :class:`~raftlog.producers.producer_table.ProducerTable`, changed
only by :meth:`RmStm.apply` with committed batches in log order, so every
replica rebuilds the same table; :meth:`snapshot`/:meth:`restore` save it with
the storage commit context.

The leader's front adds, per producer, the requests *in flight*: enqueued in
the replicate batcher but not yet applied. Invariants:

- A producer's lock is held from the sequence check until ``enqueued`` and no
  longer. Order in the log is fixed at ``enqueued``, so the in-flight list of
  a producer is in log order and its tail is what the next request must
  follow; a producer can keep up to 5 requests in flight.
- A retry of an in-flight request parks on the original and gets its result.
- A request that arrives *ahead* of its predecessor (a gap in the same epoch:
  a producer's concurrent requests travel on separate connections and may
  overtake each other) waits up to ``reorder_wait_s`` for the gap to close,
  re-checking whenever the producer's tail changes, before it is rejected as
  out of order. At most ``SEQUENCE_CACHE - 1`` requests of a producer wait.
  Without this an overtaking request, and every later one in flight behind
  it, would fail and be resent, which cost idempotent producers more than
  half their throughput.
- Every replicate is conditional on the term the stm has *synced* to
  (``expected_term``). Syncing to a new term passes the group's read barrier
  (``Consensus.read_barrier``: an entry of the term committed, and applied up
  to the term's read index), so the table holds everything earlier leaders
  committed; in-flight lists of older terms are dropped then. Nothing is
  written for it.
- When a request's outcome is unknown (``finished`` failed or timed out after
  ``enqueued``), the leader steps down. The next leader syncs, and a retry is
  resolved from the log: written (original offsets) or not (written now).

Transactions (one partition's side; a coordinator, if any, decides across
partitions):

- Transactional data and markers are written with ``acks=all`` only
  (Consistency.QUORUM_ACK): a marker acknowledged by the leader alone could
  vanish with it. Anything else is refused with a ValueError naming ``acks``.
- Each session has its own transaction timeout, set by ``init_producer`` and
  replicated in its PRODUCER_FENCE (so every replica, and any later leader,
  applies the same one); -1 means ``RmStmConfig.transaction_timeout_ms``, and
  a request above ``max_transaction_timeout_ms`` (or < 1) is refused.
- An abort bumps the epoch: the abort marker of a request at epoch ``e`` is
  written at ``e + 1``, so a late produce or commit at ``e`` is fenced. The
  caller continues at ``e + 1`` (``EndTxnResult.producer_epoch``).
- A commit needs an open transaction; a commit naming ``record_count`` /
  ``last_sequence`` (>= 0) must match what the open transaction holds (the
  applied state plus the producer's data in flight), else it is refused
  before anything is written (and the table aborts such a marker, should one
  reach the log).
- The exact retry of the last commit or abort applied (same epoch as
  requested, and for a commit the same version and, when given, record count
  and last sequence) returns that marker's offset instead of an error; a
  retry of a marker still in flight parks on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import inspect
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

from raftlog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
)
from raftlog.producers.fetch_filter import visible_batches
from raftlog.producers.markers import (
    DEFAULT_TIMEOUT,
    NO_COUNT,
    NO_VERSION,
    REASON_END_TXN,
    REASON_FENCE,
    REASON_TIMEOUT,
    check_transaction_timeout,
    make_fence,
    make_marker,
)
from raftlog.producers.outcomes import (
    AlreadyWritten,
    ProduceResult,
    UnknownOutcomeError,
    fenced,
    raise_for,
)
from raftlog.producers.producer_locks import ProducerLocks
from raftlog.producers.producer_state import SEQUENCE_CACHE, SequenceTail
from raftlog.producers.producer_table import ProducerTable, ProducerTableConfig
from raftlog.producers.serial import (
    NO_EPOCH,
    NO_SEQUENCE,
    add_sequence,
    check_epoch,
    check_producer_id,
    epoch_compare,
    last_sequence_of,
    next_epoch,
    sequence_ahead,
)
from raftlog.raft.errors import NotLeaderError, RaftError
from raftlog.raft.replicate_batcher import Consistency, ReplicateStages
from raftlog.storage.batch import NO_PRODUCER, BatchKind, RecordBatch

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""The largest per-session transaction timeout a client may ask for (15 minutes)."""
DEFAULT_TRANSACTION_TIMEOUT_MS = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
"""The transaction timeout of a two-phase commit's participant (a Spark micro-batch: the
sink's ``transactionTimeoutMs`` and ``raftlog.client.transactions.prepare``): 15 minutes,
the longest a server allows by default. A participant stays open from its task's first
write to the driver's EndTxn: the micro-batch's whole write stage, with task retries,
stragglers and speculation, which on a backlog or a loaded cluster runs for minutes. A
timeout that fires first aborts a participant the driver then commits (TxnLostError: the
query fails and replays, and fails again if every batch is that slow); a long one costs
only how long a query that dies before deciding holds readers' LSO back, and its replay
aborts those transactions as soon as it decides. The one home of this default."""
SESSION_TRANSACTION_TIMEOUT_MS = 60_000
"""The server's timeout for a session that states none (``--transaction-timeout-ms``;
Kafka's ``transaction.timeout.ms`` default): a client other than the two-phase commit."""
REORDER_POLL_S = 0.05
"""A request waiting for a gap to close re-checks at least this often."""


_ACKS = {Consistency.QUORUM_ACK: -1, Consistency.LEADER_ACK: 1, Consistency.NO_ACK: 0}


def check_transactional_acks(acks: int, what: str = "transactional writes") -> None:
    """The server's one check that a transactional write (``what``: its data, or its
    markers) is acknowledged by a quorum: ``acks`` (the wire value) must be -1 (all), as
    a batch or marker acknowledged by the leader alone may vanish with it. ValueError
    naming ``acks`` otherwise. (The client checks the same before it writes:
    ``raftlog.client.producer.check_acks``.)"""
    if acks != -1:
        raise ValueError(f"acks: {what} require acks=all (-1), got {acks}")


class ConsensusLike(Protocol):
    """What rm_stm uses of :class:`raftlog.raft.consensus.Consensus`."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def replicate(
        self, batches: list[RecordBatch], consistency: Consistency, expected_term: int
    ) -> ReplicateStages: ...

    def step_down(self) -> Any: ...

    async def read_barrier(self, timeout_s: float, *, quorum_round: bool = False) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RmStmConfig:
    """rm_stm settings; ``table`` must be the same on every replica of a partition."""

    transaction_timeout_ms: int = SESSION_TRANSACTION_TIMEOUT_MS
    """The timeout of sessions that did not ask for their own (``init_producer``)."""
    sync_timeout_s: float = 10.0
    replicate_timeout_s: float = 30.0
    reorder_wait_s: float = 0.5  # 0: reject a gap at once
    table: ProducerTableConfig = dataclasses.field(default_factory=ProducerTableConfig)
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    """The cap of the per-session timeout a client may ask for (not of the default)."""

    def __post_init__(self) -> None:
        for name in ("transaction_timeout_ms", "max_transaction_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1 (milliseconds), got {value!r}")
        for name in ("sync_timeout_s", "replicate_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if not isinstance(self.reorder_wait_s, int | float) or self.reorder_wait_s < 0:
            raise ValueError(
                f"reorder_wait_s must be a number of seconds >= 0, got {self.reorder_wait_s!r}"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class InitProducerResult:
    """A new producer session: its epoch, the last committed application version, and
    the transaction timeout in force for the session (milliseconds)."""

    producer_id: int
    epoch: int
    last_committed_version: int
    transaction_timeout_ms: int = SESSION_TRANSACTION_TIMEOUT_MS


@dataclasses.dataclass(frozen=True, slots=True)
class EndTxnResult:
    """A written (or retried) marker: its offset, and the producer's epoch after it
    (the request's for a commit, the next one for an abort)."""

    offset: int
    producer_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class _MarkerKey:
    """What identifies an end_transaction request, to recognise its retry."""

    commit: bool
    requested_epoch: int
    version: int = NO_VERSION
    record_count: int = NO_COUNT
    last_sequence: int = NO_SEQUENCE

    def answers(self, req: _MarkerKey) -> bool:
        """True when a marker written for ``self`` is the outcome of request ``req``
        (an abort: same epoch; a commit: same epoch and version, and the same record
        count and last sequence where ``req`` names them)."""
        if (
            self.commit != req.commit
            or self.requested_epoch == NO_EPOCH  # a fence's abort answers no request
            or self.requested_epoch != req.requested_epoch
        ):
            return False
        return not self.commit or (
            self.version == req.version
            and (req.record_count < 0 or self.record_count == req.record_count)
            and (req.last_sequence < 0 or self.last_sequence == req.last_sequence)
        )

    def result(self, offset: int) -> EndTxnResult:
        epoch = self.requested_epoch if self.commit else next_epoch(self.requested_epoch)
        return EndTxnResult(offset, epoch)


class SyncError(LeaderNotAvailableError):
    """rm_stm could not catch up with the log in a new term; retry (maybe elsewhere)."""


@dataclasses.dataclass(slots=True)
class _InFlight:
    """A request of one producer between its sequence check and its apply."""

    kind: BatchKind
    epoch: int
    first_sequence: int  # -1 for markers and fences
    last_sequence: int
    transactional: bool
    result: asyncio.Future[ProduceResult]
    record_count: int = 0  # of a data batch
    marker: _MarkerKey | None = None  # of a marker a client's retry may park on


def _consume(fut: asyncio.Future[Any]) -> None:
    # parked retries may never come; don't warn about an unretrieved error
    if not fut.cancelled():
        fut.exception()


class RmStm:
    """The producer state machine of one partition (see the module doc)."""

    # apply() reads producer fields, sequences and offsets: never a data payload
    reads_data_payloads = False

    def __init__(
        self,
        consensus: ConsensusLike,
        config: RmStmConfig | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config or RmStmConfig()
        self.table = ProducerTable(self.config.table)
        self._c = consensus
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._locks = ProducerLocks()
        self._inflight: dict[int, collections.deque[_InFlight]] = {}
        self._synced_term: int | None = None
        self._sync_lock = asyncio.Lock()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        # requests waiting for a gap before them to close, per producer (see the module doc)
        self._reorder: dict[int, list[asyncio.Future[None]]] = {}
        add = getattr(consensus, "add_state_machine", None)
        if add is not None:
            add(self)

    # -- the state machine interface (called by consensus) -------------------

    def apply(self, batch: RecordBatch) -> None:
        """Apply a committed batch: update the table, retire its in-flight entry.

        The callers waiting for the table to reach this batch (a new leader's read
        barrier among them) are woken even when the table raises on it: the applier
        then skips the batch (``raftlog/raft/state_machines.py``), and nothing else would
        wake them until the partition's next batch."""
        try:
            self.table.apply(batch)
            entries = self._inflight.get(batch.producer_id)
            if entries:
                for i, e in enumerate(entries):
                    if (
                        e.kind is batch.kind
                        and e.epoch == batch.producer_epoch
                        and e.first_sequence == batch.first_sequence
                    ):
                        del entries[i]
                        break
                if not entries:
                    del self._inflight[batch.producer_id]
            if batch.producer_id in self._reorder:
                self._tail_changed(batch.producer_id)
        finally:
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        applied = self.table.applied_offset
        while self._waiters and self._waiters[0][0] <= applied:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)

    def snapshot(self) -> bytes:
        """The producer table as bytes, as of ``table.applied_offset``."""
        return self.table.snapshot()

    def restore(self, data: bytes) -> None:
        """Replace the table with a snapshot; the front re-syncs before its next request."""
        self.table.restore(data)
        self._inflight.clear()
        self._synced_term = None

    # -- reads ---------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset readers may not see (see ``ProducerTable.last_stable_offset``)."""
        return min(self.table.last_stable_offset(), self._c.high_watermark)

    def visible(self, batches: list[RecordBatch]) -> list[RecordBatch]:
        """What a fetch returns of ``batches`` (read in offset order): see ``fetch_filter``."""
        return visible_batches(batches, self.last_stable_offset, self.table.aborted)

    # -- sync ----------------------------------------------------------------

    async def sync(self) -> int:
        """Make sure the table reflects every entry of earlier terms; return the term.

        Raises :class:`~raftlog.raft.errors.NotLeaderError` on a follower.
        """
        term = self._leader_term()
        if self._synced_term == term:
            return term
        async with self._sync_lock:
            term = self._leader_term()
            if self._synced_term == term:
                return term
            self._synced_term = None
            self._inflight.clear()  # requests of older terms resolve through their own stages
            for pid in list(self._reorder):
                self._tail_changed(pid)
            try:
                # The group's one read barrier: an entry of this term committed (the
                # leader's no-op) and the state machines applied the term's read index.
                index = await self._c.read_barrier(self.config.sync_timeout_s)
                await self._wait_applied(index, self.config.sync_timeout_s)
            except (TimeoutError, RaftError) as exc:
                raise SyncError(f"rm_stm could not sync to term {term}: {exc!r}") from exc
            if self._c.term == term:
                self._synced_term = term
            return term

    async def _confirm_term(self, term: int) -> None:
        """Prove with a quorum round that no newer leader has been elected, before an
        answer that one could contradict: a session or an epoch unknown here may have
        been granted by a newer leader while this one, cut off, still leads in its own
        view (seed 131 of the producer simulation: its "epoch 2 was never granted here"
        was a stale leader's). The group's read barrier with ``quorum_round``: a quorum
        of voters answered this leader in ``term`` after the question was asked (not
        the lease, which assumes ticks of bounded drift), and nothing is written.
        Raises SyncError (retriable: the client tries the newer leader) when the round
        fails, or when the term changed meanwhile."""
        what = f"rm_stm could not confirm its leadership in term {term}"
        try:
            await self._c.read_barrier(self.config.sync_timeout_s, quorum_round=True)
        except (TimeoutError, RaftError) as exc:
            raise SyncError(f"{what}: {exc!r}") from exc
        if self._c.term != term:
            raise SyncError(f"{what}: the group is in term {self._c.term} now")

    def _leader_term(self) -> int:
        if not self._c.is_leader:
            raise NotLeaderError(
                getattr(self._c, "group", -1),
                getattr(self._c, "leader_id", -1),
            )
        return self._c.term

    async def _wait_applied(self, offset: int, timeout: float) -> None:
        if self.table.applied_offset >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._waiter_ids), fut))
        await asyncio.wait_for(fut, timeout)

    # -- produce -------------------------------------------------------------

    async def replicate(self, batch: RecordBatch, consistency: Consistency) -> ProduceResult:
        """Write one data batch, deduplicated by (producer id, epoch, sequence).

        Returns the batch's offsets, or its original offsets when it was
        already written. Raises :class:`DuplicateSequenceError` (older
        duplicate), :class:`OutOfOrderSequenceError`, :class:`~raftlog.errors.FencedError`,
        :class:`UnknownOutcomeError` (retry), NotLeaderError, or ValueError for a
        malformed request.
        """
        if batch.kind is not BatchKind.DATA:
            raise ValueError(f"batch kind must be DATA for a produce, got {batch.kind.name}")
        if batch.is_transactional:
            check_transactional_acks(_ACKS[consistency])
        if batch.producer_id == NO_PRODUCER:
            if batch.is_transactional:
                raise ValueError("a transactional batch needs a producer_id (got -1)")
            term = await self.sync()
            stages = self._c.replicate([batch], consistency, term)
            res = await asyncio.wait_for(stages.finished, self.config.replicate_timeout_s)
            return ProduceResult(res.base_offset, res.last_offset)
        pid, epoch, first = batch.producer_id, batch.producer_epoch, batch.first_sequence
        # validates the fields with errors that name them, before any waiting
        self.table.check(pid, epoch, first, batch.record_count)
        last = last_sequence_of(first, batch.record_count)
        loop = asyncio.get_running_loop()
        reorder_deadline: float | None = None
        for _ in range(10_000):  # bounded: each pass but the last waits for a tail change
            term = await self.sync()
            gap: asyncio.Future[None] | None = None
            async with self._locks.hold(pid):
                original = self._find_inflight(pid, epoch, first, last)
                if original is None:
                    tail = self._tail(pid)
                    outcome = self.table.check(pid, epoch, first, batch.record_count, tail)
                    if isinstance(outcome, AlreadyWritten):
                        return ProduceResult(outcome.base_offset, outcome.last_offset)
                    if reorder_deadline is None:
                        reorder_deadline = loop.time() + self.config.reorder_wait_s
                    if loop.time() < reorder_deadline and self._overtook(pid, epoch, first, tail):
                        gap = loop.create_future()
                        self._reorder.setdefault(pid, []).append(gap)
                    else:
                        raise_for(outcome, pid, first)
                        entry = self._track(
                            pid,
                            batch.kind,
                            epoch,
                            first,
                            last,
                            batch.is_transactional,
                            record_count=batch.record_count,
                        )
                        stages = await self._enqueue(pid, [entry], [batch], consistency, term)
            if gap is None:
                break
            try:
                # in slices, so a lost leadership is noticed (by sync) while waiting;
                # asyncio.timeout, as wait_for may swallow a cancel racing its timeout (3.11)
                assert reorder_deadline is not None  # set before any gap is waited for
                left = max(0.0, reorder_deadline - loop.time())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, REORDER_POLL_S)):
                        await gap
            finally:
                waiting = self._reorder.get(pid, [])
                if gap in waiting:
                    waiting.remove(gap)
                if not waiting:
                    self._reorder.pop(pid, None)
        else:
            raise AssertionError("unreachable: the reorder wait is bounded by its deadline")
        if original is not None:
            return await asyncio.shield(original.result)
        res = await self._finish([entry], stages)
        return ProduceResult(res.base_offset, res.last_offset)

    def _overtook(self, pid: int, epoch: int, first: int, tail: SequenceTail | None) -> bool:
        """True when the request is ahead of its producer's tail in the same epoch (its
        predecessor may still arrive), and fewer than SEQUENCE_CACHE - 1 already wait."""
        if tail is None or epoch_compare(epoch, tail.epoch) != 0:
            return False
        if len(self._reorder.get(pid, ())) >= SEQUENCE_CACHE - 1:
            return False
        expected = 0 if tail.last_sequence == NO_SEQUENCE else add_sequence(tail.last_sequence, 1)
        return sequence_ahead(first, expected) > 0

    def _tail_changed(self, pid: int) -> None:
        """Wake the requests of ``pid`` waiting for a gap to close; they check again."""
        for fut in self._reorder.pop(pid, ()):
            if not fut.done():
                fut.set_result(None)

    # -- transactions --------------------------------------------------------

    async def init_producer(
        self, producer_id: int, transaction_timeout_ms: int | None = None
    ) -> InitProducerResult:
        """Start a new session of ``producer_id``: bump and return its epoch.

        Fences every older session, aborts the producer's open transaction
        (an abort marker, then a PRODUCER_FENCE batch, both at the new epoch),
        and returns the last committed application version (-1: none). An
        unknown producer starts at epoch 0. ``transaction_timeout_ms`` (None or
        -1: ``config.transaction_timeout_ms``) is how long the session's
        transactions may stay open; it travels in the fence, so every replica
        holds it. Raises ValueError naming ``transaction_timeout_ms`` outside
        ``[1, config.max_transaction_timeout_ms]``.
        """
        check_producer_id("producer_id", producer_id)
        timeout = DEFAULT_TIMEOUT if transaction_timeout_ms is None else transaction_timeout_ms
        check_transaction_timeout(timeout, self.config.max_transaction_timeout_ms)
        term = await self.sync()
        async with self._locks.hold(producer_id):
            tail = self._tail(producer_id)
            epoch = next_epoch(NO_EPOCH if tail is None else tail.epoch)
            now = self._clock_ms()
            batches, entries = [], []
            if self._pending_tx(producer_id)[0]:
                # no client request is answered by this abort (requested epoch -1): the
                # new epoch belongs to the new session, never to a retry of the old one
                batches.append(
                    make_marker(
                        producer_id, epoch, commit=False, timestamp_ms=now, reason=REASON_FENCE
                    )
                )
                entries.append(self._track(producer_id, BatchKind.TX_ABORT, epoch))
            batches.append(
                make_fence(producer_id, epoch, timestamp_ms=now, transaction_timeout_ms=timeout)
            )
            entries.append(self._track(producer_id, BatchKind.PRODUCER_FENCE, epoch))
            stages = await self._enqueue(
                producer_id, entries, batches, Consistency.QUORUM_ACK, term
            )
        res = await self._finish(entries, stages)
        await self._wait_applied(res.last_offset, self.config.replicate_timeout_s)
        state = self.table.get(producer_id)
        version = NO_VERSION if state is None else state.last_committed_version
        effective = self.table.transaction_timeout_ms(
            producer_id, self.config.transaction_timeout_ms
        )
        return InitProducerResult(producer_id, epoch, version, effective)

    async def end_transaction(
        self,
        producer_id: int,
        epoch: int,
        commit: bool,
        version: int = NO_VERSION,
        *,
        record_count: int = NO_COUNT,
        last_sequence: int = NO_SEQUENCE,
    ) -> EndTxnResult:
        """Write a commit (with ``version``) or abort marker; return its offset and the
        producer's epoch after it.

        Returns once the marker is applied, so the LSO has moved past the
        transaction. An abort is written at the next epoch (the caller goes on
        at ``producer_epoch``), with or without an open transaction. A commit
        needs an open transaction; ``record_count`` / ``last_sequence`` (-1:
        unchecked) must match it. The exact retry of the last applied (or an
        in-flight) commit or abort returns that marker's offset (see the
        module doc).

        Raises FencedError for an older epoch (a late commit after an
        abort, a timeout or a newer session), InvalidProducerEpochError for an
        epoch never granted, InvalidTxnStateError for no session here, a
        commit with no open transaction, a commit whose ``record_count`` or
        ``last_sequence`` differs, or a marker of the producer still in
        flight; ValueError naming a malformed field.
        """
        check_producer_id("producer_id", producer_id)
        check_epoch("producer_epoch", epoch)
        marker_epoch = epoch if commit else next_epoch(epoch)
        marker = make_marker(  # validates version, record_count and last_sequence
            producer_id,
            marker_epoch,
            commit=commit,
            version=version,
            record_count=record_count,
            last_sequence=last_sequence,
            requested_epoch=epoch,
            reason=REASON_END_TXN,
            timestamp_ms=self._clock_ms(),
        )
        key = _MarkerKey(commit, epoch, version, record_count, last_sequence)
        term = await self.sync()
        async with self._locks.hold(producer_id):
            original = self._find_inflight_marker(producer_id, key)
            if original is None:
                retried = self._applied_retry(producer_id, key)
                tail = self._tail(producer_id)
                if tail is None:
                    await self._confirm_term(term)
                    raise InvalidTxnStateError(
                        f"producer {producer_id} has no session on this partition: "
                        f"call init_producer first"
                    )
                order = epoch_compare(epoch, tail.epoch)
                if order < 0:
                    if retried is not None:
                        return retried
                    raise fenced(producer_id, tail.epoch, epoch)
                if order > 0:
                    await self._confirm_term(term)
                    raise InvalidProducerEpochError(
                        f"producer {producer_id}: epoch {epoch} was never granted here "
                        f"(current epoch {tail.epoch}); call init_producer"
                    )
                if any(e.kind is BatchKind.TX_COMMIT for e in self._inflight.get(producer_id, ())):
                    raise InvalidTxnStateError(
                        f"producer {producer_id}: a commit of epoch {epoch} is in flight; "
                        f"only its exact retry is accepted until it is written"
                    )
                if commit:
                    if retried is not None and not self._pending_tx(producer_id)[0]:
                        return retried  # the commit was applied, nothing opened since
                    self._check_commit(producer_id, epoch, tail, key)
                entry = self._track(producer_id, marker.kind, marker_epoch, marker=key)
                stages = await self._enqueue(
                    producer_id, [entry], [marker], Consistency.QUORUM_ACK, term
                )
        if original is not None:
            res = await asyncio.shield(original.result)
            await self._wait_applied(res.last_offset, self.config.replicate_timeout_s)
            return key.result(res.last_offset)
        res = await self._finish([entry], stages)
        await self._wait_applied(res.last_offset, self.config.replicate_timeout_s)
        return key.result(res.last_offset)

    def _check_commit(
        self,
        pid: int,
        epoch: int,
        tail: SequenceTail,
        key: _MarkerKey,
    ) -> None:
        """Refuse a commit that has nothing to commit or does not match its transaction."""
        is_open, held = self._pending_tx(pid)
        if not is_open:
            raise InvalidTxnStateError(
                f"producer {pid} has no open transaction at epoch {epoch} on this partition: "
                f"nothing to commit (it was committed, aborted, or never written)"
            )
        if key.record_count >= 0 and key.record_count != held:
            raise InvalidTxnStateError(
                f"record_count: the commit of producer {pid} epoch {epoch} names "
                f"{key.record_count} records, the open transaction holds {held}"
            )
        if key.last_sequence >= 0 and key.last_sequence != tail.last_sequence:
            raise InvalidTxnStateError(
                f"last_sequence: the commit of producer {pid} epoch {epoch} names "
                f"{key.last_sequence}, the open transaction's last sequence is "
                f"{tail.last_sequence}"
            )

    def _applied_retry(self, pid: int, key: _MarkerKey) -> EndTxnResult | None:
        """The result of the last applied marker when ``key`` is its exact retry."""
        state = self.table.get(pid)
        m = None if state is None else state.last_marker
        if m is None:
            return None
        applied = _MarkerKey(
            m.commit, m.requested_epoch, m.version, m.record_count, m.last_sequence
        )
        return applied.result(m.offset) if applied.answers(key) else None

    def _find_inflight_marker(self, pid: int, key: _MarkerKey) -> _InFlight | None:
        for e in self._inflight.get(pid, ()):
            if e.marker is not None and e.marker.answers(key):
                return e
        return None

    def min_open_timeout_ms(self) -> int | None:
        """The shortest transaction timeout among open transactions (None: none open);
        the expiry loop checks often enough for it."""
        return self.table.min_open_timeout_ms(self.config.transaction_timeout_ms)

    async def abort_expired(self, now_ms: int) -> list[int]:
        """Abort transactions open for at least their timeout; return their producer ids.

        The timeout is the session's (from its fence), else
        ``config.transaction_timeout_ms``. The leader calls this periodically (a
        no-op on followers). The abort marker carries the next epoch, which
        fences the (presumably dead) writer: its next produce or commit fails
        with PRODUCER_FENCED; its abort at the old epoch is answered as the
        retry of this one. A producer whose commit or abort is already in
        flight is left alone.
        """
        if not self._c.is_leader:
            return []
        term = await self.sync()
        aborted = []
        for pid in self.table.expired_transactions(now_ms, self.config.transaction_timeout_ms):
            async with self._locks.hold(pid):
                state = self.table.get(pid)
                if state is None or state.open_tx is None:
                    continue  # ended while we waited for the lock
                if any(e.kind is not BatchKind.DATA for e in self._inflight.get(pid, ())):
                    continue
                tail = self._tail(pid)
                old = state.epoch if tail is None else tail.epoch
                epoch = next_epoch(old)
                marker = make_marker(
                    pid,
                    epoch,
                    commit=False,
                    timestamp_ms=now_ms,
                    requested_epoch=old,
                    reason=REASON_TIMEOUT,
                )
                key = _MarkerKey(False, old)
                entry = self._track(pid, BatchKind.TX_ABORT, epoch, marker=key)
                stages = await self._enqueue(pid, [entry], [marker], Consistency.QUORUM_ACK, term)
            res = await self._finish([entry], stages)
            await self._wait_applied(res.last_offset, self.config.replicate_timeout_s)
            aborted.append(pid)
        return aborted

    # -- in-flight bookkeeping -----------------------------------------------

    def _find_inflight(self, pid: int, epoch: int, first: int, last: int) -> _InFlight | None:
        for e in self._inflight.get(pid, ()):
            if e.epoch == epoch and e.first_sequence == first and e.last_sequence == last:
                return e
        return None

    def _tail(self, pid: int) -> SequenceTail | None:
        """The (epoch, last sequence) after the applied state and every in-flight request."""
        state = self.table.get(pid)
        tail = None if state is None else state.tail()
        for e in self._inflight.get(pid, ()):
            if (
                tail is None
                or e.kind is BatchKind.PRODUCER_FENCE
                or (epoch_compare(e.epoch, tail.epoch) > 0)
            ):
                tail = SequenceTail(e.epoch, NO_SEQUENCE)
            if e.first_sequence != NO_SEQUENCE:
                tail = SequenceTail(tail.epoch, e.last_sequence)
        return tail

    def _pending_tx(self, pid: int) -> tuple[bool, int]:
        """(open, record count) of ``pid``'s transaction after the applied state and every
        in-flight request (in log order: a marker or fence in flight closes it)."""
        state = self.table.get(pid)
        tx = None if state is None else state.open_tx
        is_open, count = tx is not None, 0 if tx is None else tx.record_count
        for e in self._inflight.get(pid, ()):
            if e.kind is BatchKind.DATA:
                if e.transactional:
                    is_open, count = True, count + e.record_count
            else:
                is_open, count = False, 0
        return is_open, count

    def _track(
        self,
        pid: int,
        kind: BatchKind,
        epoch: int,
        first: int = NO_SEQUENCE,
        last: int = NO_SEQUENCE,
        transactional: bool = False,
        *,
        record_count: int = 0,
        marker: _MarkerKey | None = None,
    ) -> _InFlight:
        fut: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_consume)
        entry = _InFlight(kind, epoch, first, last, transactional, fut, record_count, marker)
        self._inflight.setdefault(pid, collections.deque()).append(entry)
        if pid in self._reorder:
            # the waiters re-check under the lock, so after this entry is enqueued
            self._tail_changed(pid)
        return entry

    async def _enqueue(
        self,
        pid: int,
        entries: list[_InFlight],
        batches: list[RecordBatch],
        consistency: Consistency,
        term: int,
    ) -> ReplicateStages:
        """Replicate in ``term`` and wait for ``enqueued`` (under the producer's lock)."""
        try:
            stages = self._c.replicate(batches, consistency, term)
            await stages.enqueued
        except BaseException as exc:
            # not enqueued: nothing was written, so the outcome is known
            queue = self._inflight.get(pid)
            for e in entries:
                if queue is not None and e in queue:
                    queue.remove(e)
                if e.result.done():
                    continue
                if isinstance(exc, Exception):
                    e.result.set_exception(exc)
                else:
                    e.result.cancel()
            if queue is not None and not queue:
                del self._inflight[pid]
            raise
        return stages

    async def _finish(self, entries: list[_InFlight], stages: ReplicateStages) -> Any:
        """Wait for ``finished``; on failure the outcome is unknown, so step down."""
        try:
            res = await asyncio.wait_for(
                asyncio.shield(stages.finished), self.config.replicate_timeout_s
            )
        except Exception as exc:
            err = UnknownOutcomeError(
                f"outcome unknown after enqueue ({exc!r}); the leader stepped down, "
                f"retry with the same producer id, epoch and sequence"
            )
            await self._step_down()
            for e in entries:
                if not e.result.done():
                    e.result.set_exception(err)
            raise err from exc
        result = ProduceResult(res.base_offset, res.last_offset)
        for e in entries:
            if not e.result.done():
                e.result.set_result(result)
        return res

    async def _step_down(self) -> None:
        self._synced_term = None
        outcome = self._c.step_down()
        if inspect.isawaitable(outcome):
            await outcome
