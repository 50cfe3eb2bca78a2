"""The idempotent (and single-partition transactional) producer of the client.

:meth:`RaftlogClient.idempotent_producer` starts a session with rm_stm's
``init_producer`` (which bumps the producer's epoch and fences older sessions)
and returns an :class:`IdempotentProducer`. Each :meth:`~IdempotentProducer.send`
queues one batch and returns a future of its :class:`ProduceResult`.

One ordered pipeline per producer, as Kafka's producer does it:

- Sequences are assigned by a :class:`~raftlog.producers.sequencer.Sequencer`
  in send order. A single sender task dispatches requests in sequence order,
  at most ``max_in_flight`` (5) counted from the oldest unacknowledged batch.
- Each request is one attempt at the partition's leader: the sender, not the
  client's own retry loop, retries, so resends cannot overtake each other.
- After any retriable failure (not leader, no leader, timeout, refused
  connection, an out-of-order answer for a batch that overtook its
  predecessor) the batch and every later one in flight are resent in order,
  one at a time (window 1, with backoff) until a send succeeds; then the
  window opens again.
- DUPLICATE_SEQUENCE counts as written (its offsets are unknown: -1).
- Fatal errors (fenced, an out-of-order answer for the oldest batch, a batch
  not acknowledged within ``delivery_timeout_s``, invalid requests) fail every
  unacknowledged send and every later call with that error; start a new
  producer (a new ``init_producer``) to continue.

With ``transactional=True`` the batches are written as transaction data, and
:meth:`~IdempotentProducer.commit` / :meth:`~IdempotentProducer.abort` flush
and then write the marker (one partition, so no two-phase commit):

- A transactional producer writes with ``acks="all"`` only (data and markers).
- :meth:`~IdempotentProducer.commit` names the record count and last sequence
  of the batches the producer sent in the transaction (all acknowledged by
  the flush), so the partition refuses the commit if the transaction it
  holds differs. Committing with nothing sent is refused by the partition
  (there is no open transaction).
- :meth:`~IdempotentProducer.abort` bumps the producer's epoch on the
  partition (a late commit of the aborted transaction is fenced); the
  producer adopts the new epoch (sequences restart at 0) and can go on with
  the next transaction.
- Each transaction must end within the session's ``transaction_timeout_ms``
  (see :meth:`RaftlogClient.init_producer`), else the partition aborts it and
  the producer is fenced.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from raftlog.client.calls import CallState, retriable
from raftlog.client.compression import produce_batch
from raftlog.client.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    RaftlogError,
    RequestTimeoutError,
    StaleTermError,
)
from raftlog.client.results import ProduceResult, ProducerSession
from raftlog.producers.sequencer import MAX_IN_FLIGHT, Send, Sequencer, SequencerError
from raftlog.producers.serial import NO_SEQUENCE, last_sequence_of
from raftlog.records.compression import Compression, codec_named
from raftlog.records.framing import frame_records
from raftlog.rpc.messages import EndTxnResponse, ProduceBatch, ProduceRequest, ProduceResponse

DEFAULT_DELIVERY_TIMEOUT_S = 120.0
RETRY_BACKOFF_S = 0.05
MAX_RETRY_BACKOFF_S = 1.0


class ProducerClosedError(RaftlogError):
    """The producer was closed before the batch was acknowledged."""


@dataclasses.dataclass(slots=True)
class _Pending:
    batch: ProduceBatch
    future: asyncio.Future[ProduceResult]
    added: float  # time.monotonic() of send()


def _resend(exc: BaseException) -> bool:
    """Whether the sender resends after ``exc``: whenever a call would retry
    (:func:`raftlog.client.calls.retriable`), and also when the outcome is unknown
    (INTERNAL, STALE_TERM: the leader's term changed under the write), which the
    partition's sequence checks make safe to resend."""
    return retriable(exc) or type(exc) is RaftlogError or isinstance(exc, StaleTermError)


_R = TypeVar("_R")


def check_acks(acks: int, transactional: bool) -> None:
    """The client's one check of a producer's ``acks`` (the wire value: -1 all, 1, 0):
    an idempotent producer needs an answer (all or 1), a transactional one all, since a
    batch or marker acknowledged by the leader alone may vanish with it (the partition
    refuses it too). Raises InvalidRequestError naming ``acks``."""
    if acks == 0:
        raise InvalidRequestError("acks: an idempotent producer needs acks 'all' or '1'")
    if transactional and acks != -1:
        raise InvalidRequestError(f"acks: transactional writes require acks=all (-1), got {acks}")


class ProducerClient(Protocol):
    """What a producer needs of its client (:class:`raftlog.client.RaftlogClient` is the
    one): the client's deadline for a call, one attempt of a partition call at the
    leader as last seen (the producer's sender retries, not the client), and the end of
    a transaction. A protocol, so that this module does not import the client that
    makes its producers."""

    def deadline(self) -> AbstractContextManager[float]: ...

    async def partition_attempt(
        self, topic: str, partition: int, req: object, resp_type: type[_R], state: CallState
    ) -> _R: ...

    async def end_txn_response(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        version: int = -1,
        acks: str | int = "all",
        *,
        record_count: int = -1,
        last_sequence: int = -1,
    ) -> EndTxnResponse: ...


class IdempotentProducer:
    """One producer session on one partition (see the module doc). Use from one event loop."""

    def __init__(
        self,
        client: ProducerClient,
        topic: str,
        partition: int,
        session: ProducerSession,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        transactional: bool = False,
        acks: int = -1,
        delivery_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S,
        compression: Compression = Compression.NONE,
    ) -> None:
        """``compression``: the codec every batch's payload is compressed with before it
        is sent (raftlog.records.compression); readers decompress."""
        if delivery_timeout_s <= 0:
            raise ValueError(f"delivery_timeout_s must be > 0, got {delivery_timeout_s}")
        check_acks(acks, transactional)
        self._client = client
        self.topic = topic
        self.partition = partition
        self.session = session
        self.transactional = transactional
        self.compression = codec_named(compression)
        self._acks = acks
        self._delivery_timeout_s = float(delivery_timeout_s)
        self._max_in_flight = max_in_flight
        self._seq = Sequencer(session.producer_id, session.epoch, max_in_flight=max_in_flight)
        self._pending: collections.OrderedDict[int, _Pending] = collections.OrderedDict()
        self._attempts: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._fatal: BaseException | None = None
        self._closed = False
        self._backoff = 0.0
        self._not_before = 0.0
        self._call_state = CallState()
        # the sender's wake-up timer (see _wake_by) and when it fires (time.monotonic())
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        # the open transaction as sent: records and last sequence (what commit names)
        self._tx_records = 0
        self._tx_last_sequence = NO_SEQUENCE
        self.sends = 0
        """Requests sent, resends included."""
        self.retries = 0
        """Retriable failures (each rewinds the window and resends in order)."""
        self._sender = asyncio.create_task(self._run(), name=f"producer-{self.producer_id}")

    # -- queries -------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self.session.producer_id

    @property
    def epoch(self) -> int:
        return self.session.epoch

    @property
    def last_committed_version(self) -> int:
        """The application version of the last commit before this session (-1: none)."""
        return self.session.last_committed_version

    @property
    def unacknowledged(self) -> int:
        return self._seq.unacknowledged

    @property
    def error(self) -> BaseException | None:
        """The fatal error that stopped the producer, if any."""
        return self._fatal

    # -- sending -------------------------------------------------------------------------

    def send(self, values: list[bytes]) -> asyncio.Future[ProduceResult]:
        """Queue ``values`` as one batch of framed records (see ``frame_records``)."""
        if not values:
            raise InvalidRequestError("values: expected at least one record")
        return self.send_batch(frame_records(values), len(values))

    def send_batch(self, payload: bytes, record_count: int) -> asyncio.Future[ProduceResult]:
        """Queue one batch of ``record_count`` records; the future resolves to its offsets
        once it is acknowledged (``-1, -1`` if only known as an older duplicate), or fails
        with the producer's fatal error."""
        self._check_open()
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise InvalidRequestError("payload must be bytes")
        if not isinstance(record_count, int) or record_count < 1:
            raise InvalidRequestError(f"record_count must be >= 1, got {record_count!r}")
        fut: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        first = self._seq.add(record_count)
        self._tx_records += record_count
        self._tx_last_sequence = last_sequence_of(first, record_count)
        self._pending[first] = _Pending(
            produce_batch(payload, record_count, self.compression), fut, time.monotonic()
        )
        self._idle.clear()
        self._wake.set()
        return fut

    async def flush(self) -> None:
        """Wait until every batch sent so far is acknowledged (or raise the fatal error)."""
        await self._idle.wait()
        if self._fatal is not None:
            raise self._fatal

    async def commit(self, version: int = -1) -> int:
        """Flush, then commit the open transaction with application ``version``;
        return the commit marker's offset.

        The commit names the transaction's record count and last sequence, so
        the partition refuses it (InvalidTxnStateError) unless it holds exactly
        the batches this producer sent; with nothing sent it is refused too.
        """
        return await self._end(True, version)

    async def abort(self) -> int:
        """Abort the open transaction (after the batches in flight are settled); return the
        abort marker's offset. The partition bumps the producer's epoch; this producer
        adopts it and may start the next transaction."""
        return await self._end(False, -1)

    async def _end(self, commit: bool, version: int) -> int:
        if not self.transactional:
            raise InvalidRequestError("commit/abort need a producer made with transactional=True")
        if self._closed:
            raise ProducerClosedError(f"producer {self.producer_id} is closed")
        if commit:
            await self.flush()
        else:
            await self._idle.wait()
        sent = self._tx_records > 0
        r = await self._client.end_txn_response(
            self.topic,
            self.partition,
            self.producer_id,
            self.epoch,
            commit,
            version,
            self._acks,
            record_count=self._tx_records if sent else -1,
            last_sequence=self._tx_last_sequence if sent else -1,
        )
        self._tx_records = 0
        if not commit and r.producer_epoch >= 0 and r.producer_epoch != self.epoch:
            # the abort bumped the epoch: go on at the new one, sequences from 0
            if self._fatal is None:
                try:
                    self._seq.reset(r.producer_epoch)
                except SequencerError as exc:  # sends raced the abort: they are fenced
                    self._set_fatal(exc)
            self.session = dataclasses.replace(self.session, epoch=r.producer_epoch)
            self._tx_last_sequence = NO_SEQUENCE
        return r.offset

    async def close(self, *, flush: bool = True) -> None:
        """Stop the producer; with ``flush``, first wait (bounded by the delivery timeout)
        for the batches sent so far. Batches still unacknowledged fail with
        ProducerClosedError. Idempotent."""
        if self._closed:
            return
        if flush and self._fatal is None:
            with contextlib.suppress(RaftlogError):
                await self.flush()
        self._closed = True
        self._fail_all(ProducerClosedError(f"producer {self.producer_id} was closed"))
        tasks = [self._sender, *self._attempts]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> IdempotentProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise ProducerClosedError(f"producer {self.producer_id} is closed")

    # -- the sender ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self._fatal is None and not self._closed:
                now = time.monotonic()
                self._check_delivery_timeout(now)
                if self._fatal is not None:
                    break
                wait_s: float | None = None
                if now < self._not_before:
                    wait_s = self._not_before - now
                else:
                    send = self._seq.next_to_send()
                    if send is not None:
                        self._dispatch(send)
                        # let the request start on its connection before the next one, so
                        # they leave (and, mostly, arrive) in sequence order
                        await asyncio.sleep(0)
                        continue
                oldest = next(iter(self._pending.values()), None)
                if oldest is not None:
                    left = oldest.added + self._delivery_timeout_s - now
                    wait_s = left if wait_s is None else min(wait_s, left)
                self._wake.clear()
                if wait_s is not None:
                    self._wake_by(now + max(wait_s, 0.001))
                await self._wake.wait()
        except Exception as exc:  # a bug here must not leave callers waiting forever
            self._set_fatal(exc)
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _wake_by(self, at: float) -> None:
        """Make sure the sender wakes by ``at`` (time.monotonic()).

        One timer serves many waits: it is replaced only when it would fire later
        than ``at``. A timer that fires earlier than needed wakes the sender, which
        looks again and waits again. (A timeout per wait cost the sender a timer
        set and cancelled for every acknowledged batch: 6% of a producer's CPU.)
        """
        timer = self._timer
        if timer is not None:
            if time.monotonic() < self._timer_at <= at:  # pending, and early enough
                return
            timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, at - time.monotonic()), self._wake.set
        )

    def _check_delivery_timeout(self, now: float) -> None:
        oldest = next(iter(self._pending.items()), None)
        if oldest is not None and now - oldest[1].added >= self._delivery_timeout_s:
            self._set_fatal(
                RequestTimeoutError(
                    f"producer {self.producer_id} on {self.topic}/{self.partition}: batch at "
                    f"sequence {oldest[0]} not acknowledged within {self._delivery_timeout_s}s "
                    f"(delivery timeout); start a new producer"
                )
            )

    def _dispatch(self, send: Send) -> None:
        self.sends += 1
        task = asyncio.create_task(self._attempt(send))
        self._attempts.add(task)
        task.add_done_callback(self._attempts.discard)

    async def _attempt(self, send: Send) -> None:
        pending = self._pending.get(send.first_sequence)
        if pending is None:
            return  # acknowledged meanwhile (by an abandoned attempt)
        req = ProduceRequest(
            self.topic,
            self.partition,
            self._acks,
            [pending.batch],
            send.producer_id,
            send.epoch,
            send.first_sequence,
            self.transactional,
        )
        try:
            with self._client.deadline():
                r = await self._client.partition_attempt(
                    self.topic, self.partition, req, ProduceResponse, self._call_state
                )
        except DuplicateSequenceError:
            self._succeeded(send, -1, -1)
        except OutOfOrderSequenceError as exc:
            try:
                current = self._seq.on_out_of_order(send.first_sequence, send.attempt)
            except SequencerError as fatal:
                self._set_fatal(OutOfOrderSequenceError(f"{fatal} (server: {exc})"))
            else:
                if current:
                    self._retry_later()
        except asyncio.CancelledError:
            raise
        except RaftlogError as exc:
            if not _resend(exc):
                self._set_fatal(exc)
            elif self._seq.on_retriable(send.first_sequence, send.attempt):
                self._retry_later()  # (an abandoned attempt's failure changes nothing)
        except Exception as exc:
            self._set_fatal(exc)
        else:
            self._succeeded(send, r.base_offset, r.last_offset)
        finally:
            self._wake.set()

    def _retry_later(self) -> None:
        """A retriable failure: resend in order, one at a time, after a backoff."""
        self.retries += 1
        self._seq.max_in_flight = 1
        self._backoff = min(MAX_RETRY_BACKOFF_S, max(RETRY_BACKOFF_S, self._backoff * 2))
        self._not_before = time.monotonic() + self._backoff

    def _succeeded(self, send: Send, base_offset: int, last_offset: int) -> None:
        self._seq.on_success(send.first_sequence, send.attempt, base_offset)
        self._seq.max_in_flight = self._max_in_flight
        self._backoff = 0.0
        self._not_before = 0.0
        self._call_state = CallState()
        pending = self._pending.pop(send.first_sequence, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result(ProduceResult(base_offset, last_offset))
        if not self._pending:
            self._idle.set()

    def _set_fatal(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._fail_all(self._fatal)
        self._wake.set()

    def _fail_all(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, collections.OrderedDict()
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(exc)
                p.future.exception()  # retrieved: callers may never await it
        self._idle.set()
