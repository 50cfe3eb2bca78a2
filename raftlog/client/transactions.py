"""Two-phase commit across partitions through the transaction coordinator: the writer's side.

The protocol of Spark's file sink and of Kafka's transactions together (see
docs/ARCHITECTURE.md, "Exactly-once from Spark"); free of Spark so that the
connector, the simulation and tests run the same code:

- :func:`prepare` runs in a task attempt. It starts a fresh producer session
  for (writer, version, run, attempt, topic partition), registers it with the
  coordinator, writes the rows in an open transaction through the client's
  one producer pipeline (:class:`~raftlog.client.producer.IdempotentProducer`),
  and returns the :class:`~raftlog.rpc.messages.Participant` it wrote:
  ids and counts, never rows. It never commits: a task cannot tell a finished
  input from an interrupted one. When the coordinator says the version is
  already committed it writes nothing.
- :func:`decide` runs on the driver with the participants of the successful
  attempts: one call to the coordinator (``CoordinatorEndTxnRequest``, Kafka's
  ``EndTxn``). The coordinator records the decision, writes every marker
  (commits for the named participants, aborts for every other registered one)
  and records it complete before it answers
  (:mod:`raftlog.coordinator.txn_coordinator`); it finishes, on its own, a
  decision whose caller went away, and after a failover.

Invariants: a participant is registered before it writes; a decision is
durable before any marker; a marker is written only as the recorded decision
says (all three kept by the coordinator).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any

from raftlog.client.async_client import RaftlogClient
from raftlog.client.coordinator import CoordinatorClient, CoordinatorError
from raftlog.client.errors import RaftlogError, TxnLostError, UnknownTopicError
from raftlog.client.producer import IdempotentProducer
from raftlog.faults import failpoints
from raftlog.producers.rm_stm import DEFAULT_TRANSACTION_TIMEOUT_MS
from raftlog.records.compression import Compression, codec_named
from raftlog.rpc.messages import CutTransaction, Participant

__all__ = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "Participant",
    "Prepared",
    "TxnAbortedError",
    "TxnKey",
    "TxnLostError",
    "TxnRefusedError",
    "decide",
    "prepare",
    "producer_id_for",
    "roll_forward",
]

_SEQUENCE_MOD = 1 << 31  # sequences wrap as Kafka's do


class TxnRefusedError(RaftlogError):
    """The coordinator refused the registration: this run already decided the version."""


class TxnAbortedError(RaftlogError):
    """A commit was asked for a version that this run had already decided to abort."""


@dataclasses.dataclass(frozen=True, slots=True)
class TxnKey:
    """Which transaction: a writer's version, as decided by one run of the writer."""

    writer: str
    version: int
    run: str


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """What one task attempt prepared: its participants, or ``replayed`` (nothing written
    because the version is already committed)."""

    participants: tuple[Participant, ...] = ()
    replayed: bool = False
    bytes: int = 0


def producer_id_for(*key: object) -> int:
    """A stable, positive 63-bit producer id from ``key``.

    blake2b, not ``hash()``: Python's string hash is salted per process, and the
    id must be equal in every worker and across restarts.
    """
    text = "\x1f".join(str(k) for k in key).encode("utf-8")
    pid = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") & ((1 << 63) - 1)
    return pid or 1


async def prepare(
    client: RaftlogClient,
    coordinator: CoordinatorClient,
    key: TxnKey,
    attempt: str,
    topic: str,
    partition: int,
    chunks: Iterable[tuple[bytes, int]] | AsyncIterator[tuple[bytes, int]],
    *,
    max_in_flight: int = 5,
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
    compression: Compression | str | Awaitable[Compression | str] = Compression.NONE,
    topic_id: int = -1,
) -> Prepared:
    """Write ``chunks`` (payload, record count) as one open transaction; never commit.

    ``compression`` (none, lz4, zstd) compresses every payload on the way out
    (:mod:`raftlog.records.compression`); given as an awaitable (a lookup of the
    topic's config), it is awaited only once the participant is registered, so the
    lookup runs beside the registration's round trips.

    ``topic_id`` (>= 0): the topic's id as the caller planned the write (from its
    metadata); the producer session then starts only on that topic (a topic deleted
    and created again under its name raises UnknownTopicError), and no lookup of the
    id is made. -1: the id is looked up once the session started.

    An empty ``chunks`` registers nothing and contacts no server. Raises
    :class:`TxnRefusedError` when the run already decided this version, and
    the producer's error when a write fails (the open transaction is left to
    the decision, which aborts every registered participant it does not name,
    or to the partition's transaction timeout).
    """
    it = _aiter(chunks)
    first = await anext(it, None)
    if first is None:
        return Prepared()
    pid = producer_id_for(key.writer, key.run, attempt, topic, partition)
    session = await client.init_producer(
        topic, partition, pid, transaction_timeout_ms=transaction_timeout_ms, topic_id=topic_id
    )
    if topic_id < 0:
        # Read after the session started: a topic created again since then is another
        # id, and this session's writes fail there (it has no such producer).
        topic_id = await client.topic_id(topic)  # per task: no fan-out for offsets
    participant = Participant(
        attempt, key.run, topic, partition, pid, session.epoch, topic_id=topic_id
    )
    reply = await coordinator.register(key.writer, key.version, participant)
    if reply.status == "committed":
        return Prepared(replayed=True)
    if reply.status != "registered":
        raise TxnRefusedError(reply.error or f"registration refused: {reply}")
    if not isinstance(compression, (Compression, str)):
        compression = await compression
    producer = IdempotentProducer(
        client,
        topic,
        partition,
        session,
        max_in_flight=max_in_flight,
        transactional=True,
        compression=codec_named(compression),
    )
    records = size = 0
    first_offset, last_offset = -1, -1
    window: list[asyncio.Future[Any]] = []
    try:

        def settle(fut: asyncio.Future[Any]) -> None:
            nonlocal first_offset, last_offset
            r = fut.result()
            if r.base_offset >= 0 and (first_offset < 0 or r.base_offset < first_offset):
                first_offset = r.base_offset
            last_offset = max(last_offset, r.last_offset)

        chunk: tuple[bytes, int] | None = first
        while chunk is not None:
            payload, rows = chunk
            window.append(producer.send_batch(payload, rows))
            records += rows
            size += len(payload)
            # bound the memory queued in the producer: wait for the oldest batch
            if len(window) > 2 * max_in_flight:
                oldest = window.pop(0)
                await oldest
                settle(oldest)
            chunk = await anext(it, None)
        await producer.flush()
        for fut in window:
            settle(fut)
    finally:
        await producer.close(flush=False)
    return Prepared(
        (
            dataclasses.replace(
                participant,
                records=records,
                last_sequence=(records - 1) % _SEQUENCE_MOD,
                first_offset=first_offset,
                last_offset=last_offset,
            ),
        ),
        bytes=size,
    )


async def decide(
    coordinator: CoordinatorClient,
    key: TxnKey,
    participants: Iterable[Participant],
    *,
    commit: bool,
) -> dict[str, Any]:
    """Decide ``key`` with one call to the coordinator; return the decision.

    ``participants`` are exactly the ones to commit (the successful attempts'). The
    coordinator answers once the decision is durable and every marker of it is
    durable on its partition (the batch visible, whole); an error means the outcome
    is unknown, and calling again is safe (the recorded decision is returned and
    finished, never taken again). A version already committed (by this run or a
    replay's earlier run) returns that decision. An abort of a committed version
    returns the commit (a recorded commit is final). Raises :class:`TxnAbortedError`
    for a commit after this run decided abort, and :class:`TxnLostError` if a
    committed participant was aborted meanwhile.

    Returns ``{"status": "committed" | "aborted", "decision": ...}``: the decision's
    ``run``, ``commit``, ``named`` and ``aborts`` (participants as dicts), ``complete``.
    """
    named = list(participants) if commit else []
    reply = await coordinator.end_txn(key.writer, key.version, key.run, commit, named)
    failpoints.failpoint(failpoints.TXN_AFTER_END_TXN)
    if commit and reply.status != "committed":
        raise TxnAbortedError(
            f"writer {key.writer!r} version {key.version}: run {key.run!r} already decided "
            f"to abort it; the commit is refused"
        )
    d = reply.decision
    decision = None
    if d is not None:
        decision = {
            "run": d.run,
            "commit": d.commit,
            "named": [p.to_json() for p in d.named],
            "aborts": [p.to_json() for p in d.aborts],
            "complete": d.complete,
        }
    return {"status": reply.status, "decision": decision}


async def abort_run(coordinator: CoordinatorClient, run: str, version: int) -> int:
    """Abort, and have the coordinator write the abort markers of, whatever ``run``
    registered for ``version`` and has not decided (a driver's abort() without commit
    messages); return how many transactions."""
    return await coordinator.abort_run(run, version)


async def roll_forward(coordinator: CoordinatorClient, writer: str) -> int:
    """Have the coordinator finish every decision of ``writer`` whose markers are not
    all written (it does so on its own after a failover and on a timer; this asks now).

    Returns how many decisions were pending.
    """
    described = await coordinator.describe_writer(writer)
    for item in described.pending:
        d = item.decision
        await coordinator.end_txn(writer, item.version, d.run, d.commit, list(d.named))
    return len(described.pending)


async def committed_cut(
    client: RaftlogClient, topic: str, ends: dict[int, int], topic_id: int = -1
) -> dict[int, int]:
    """Lower ``ends`` (partition -> last stable offset, read *before* this call) to a
    consistent cut of ``topic``: see :func:`consistent_cut`. ``topic_id`` (the topic's
    id from its metadata) leaves out the transactions of an earlier topic of that name."""
    try:
        reply = await CoordinatorClient(client).cut(topic, topic_id)
    except UnknownTopicError:
        return dict(ends)  # no coordinator yet: no coordinated transaction exists
    return consistent_cut(ends, reply.transactions)


def consistent_cut(ends: dict[int, int], transactions: list[CutTransaction]) -> dict[int, int]:
    """End offsets at which every committed transaction is all in or all out.

    ``ends`` must have been read before ``transactions`` (the coordinator's
    cut answer): a marker is written only after its decision is recorded,
    so every transaction whose marker is below an end is in the answer. A
    transaction that is neither all in (end past every participant's marker)
    nor all out (end at or below every participant's first data offset: data of
    a committed participant below the end is read even when its marker is past
    it), or not yet complete (a marker may be written that the
    coordinator does not know yet), is taken out: each of its partitions is
    cut at the transaction's first data offset there. Cutting can take another
    transaction's marker out, so this repeats until nothing changes (at most
    once per transaction). Ends only go down.
    """
    out = dict(ends)
    for _ in range(len(transactions) + 1):
        changed = False
        for t in transactions:
            parts = [q for q in t.participants if q.partition in out]
            if t.complete:
                inside = [q for q in parts if 0 <= q.marker < out[q.partition]]
                # Out only when no data of it is below the end: a committed participant's
                # data below the LSO is visible even when its marker is past the end.
                outside = [
                    q for q in parts if q.first_offset >= 0 and out[q.partition] <= q.first_offset
                ]
                if len(outside) == len(parts) or len(inside) == len(parts):
                    continue
            for q in parts:
                p, cap = q.partition, q.first_offset
                if cap >= 0 and out[p] > cap:
                    out[p] = cap
                    changed = True
        if not changed:
            break
    return out


async def _aiter(
    chunks: Iterable[tuple[bytes, int]] | AsyncIterator[tuple[bytes, int]],
) -> AsyncIterator[tuple[bytes, int]]:
    if hasattr(chunks, "__anext__"):
        async for c in chunks:  # type: ignore[union-attr]
            yield c
    else:
        for c in chunks:
            yield c


__all__ += ["CoordinatorError", "abort_run", "committed_cut", "consistent_cut"]
