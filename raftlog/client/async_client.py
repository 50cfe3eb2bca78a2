"""The async client: produce, fetch, producer sessions and transactions, on top of
the admin calls (:mod:`raftlog.client.admin_calls`) and the routing and retries that
every call shares (:mod:`raftlog.client.calls`, whose docstring gives the contract).
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp

from raftlog.client.admin_calls import AdminCalls
from raftlog.client.calls import MAX_ATTEMPT_TIMEOUT_S, CallRouting, parse_servers
from raftlog.client.compression import decompressed, produce_batch
from raftlog.client.errors import (
    CorruptBatchError,
    InvalidRequestError,
)
from raftlog.client.producer import IdempotentProducer, check_acks
from raftlog.client.results import FetchResult, ProduceResult, ProducerSession
from raftlog.records.compression import Compression, codec_named
from raftlog.rpc.messages import (
    ACKS,
    ISOLATION,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    InitProducerRequest,
    InitProducerResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForTimestampRequest,
    OffsetForTimestampResponse,
    ProduceRequest,
    ProduceResponse,
    TopicInfo,
)
from raftlog.rpc.tls import client_context, scheme
from raftlog.rpc.transport import StreamPool
from raftlog.storage.batch import RecordBatch


class RaftlogClient(AdminCalls, CallRouting):
    """Async client. Safe to share between tasks of one event loop."""

    def __init__(
        self,
        servers: str | list[str],
        *,
        auth_token: str | None = None,
        tls_ca_file: str | None = None,
        request_timeout_s: float = 30.0,
        attempt_timeout_s: float | None = None,
        admin_token: str | None = None,
    ) -> None:
        """``tls_ca_file``: a PEM CA file; given, every node is reached over HTTPS and
        verified against it (TlsConfigError, a ValueError, when it is unusable).

        ``auth_token`` is the client token, ``admin_token`` the admin token: admin
        calls (delete a topic, alter configs, add partitions, moves, leadership,
        membership; create a topic too) carry the admin token when it is given, every
        other call the client token (the admin token when only it is given)."""
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        if attempt_timeout_s is None:
            attempt_timeout_s = min(request_timeout_s / 3, MAX_ATTEMPT_TIMEOUT_S)
        if attempt_timeout_s <= 0:
            raise ValueError(f"attempt_timeout_s must be > 0, got {attempt_timeout_s}")
        self._seeds = parse_servers(servers)
        self._auth_token = auth_token
        self._admin_token = admin_token
        self._ssl: ssl.SSLContext | None = (
            client_context(tls_ca_file, "tls_ca_file") if tls_ca_file else None
        )
        self._scheme = scheme(self._ssl)
        self._timeout_s = float(request_timeout_s)
        self._attempt_timeout_s = min(float(attempt_timeout_s), self._timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._nodes: dict[int, str] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._controller_leader = -1
        self._leader_hints: dict[tuple[str, int], int] = {}
        self._refreshing: dict[str, asyncio.Future[Any]] = {}
        self._answered = False  # some server has answered this client (see the module doc)
        # address -> when a request to it last timed out: tried last for a while
        self._timed_out: dict[str, float] = {}
        # address -> the open client stream to that node
        self._streams = StreamPool[str]("the client is closed")

    async def __aenter__(self) -> RaftlogClient:
        return self

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The context that verifies the nodes (None: plain HTTP)."""
        return self._ssl

    def url(self, address: str, path: str) -> str:
        """The URL of ``path`` (``/health``, ``/v1/fetch``) on the node at ``address``."""
        return f"{self._scheme}://{address}{path}"

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._streams.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------ data

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | bytearray | memoryview, int]],
        acks: str | int = "all",
        producer_id: int = -1,
        producer_epoch: int = -1,
        first_sequence: int = -1,
        transactional: bool = False,
        compression: Compression | str = Compression.NONE,
    ) -> ProduceResult:
        """Append one RecordBatch per ``(payload, record_count)``; return the offsets.

        With acks "all" the call returns once the batches are committed on a
        majority; "1" once on the leader; "0" once the leader has enqueued them.
        ``compression`` (none, lz4, zstd) compresses each payload before it is
        sent; the batch records the codec and every fetch decompresses it.
        """
        try:
            codec = codec_named(compression)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from None
        ack = _acks(acks)
        if not records:
            raise InvalidRequestError("records: expected at least one (payload, record_count)")
        batches = []
        for i, item in enumerate(records):
            try:
                payload, count = item
            except (TypeError, ValueError):
                raise InvalidRequestError(
                    f"records[{i}]: expected a (payload bytes, record_count int) tuple"
                ) from None
            if not isinstance(payload, bytes | bytearray | memoryview):
                raise InvalidRequestError(f"records[{i}]: payload must be bytes")
            if not isinstance(count, int) or count < 1:
                raise InvalidRequestError(f"records[{i}]: record_count must be >= 1, got {count}")
            batches.append(produce_batch(payload, count, codec))
        req = ProduceRequest(
            topic,
            partition,
            ack,
            batches,
            producer_id,
            producer_epoch,
            first_sequence,
            transactional,
        )
        resp = await self.partition_call(topic, partition, req, ProduceResponse)
        return ProduceResult(resp.base_offset, resp.last_offset)

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1024 * 1024,
        isolation: str = "read_committed",
    ) -> FetchResult:
        """Committed data batches from ``offset`` (the batch holding it first), up to
        ``max_bytes`` (at least one batch when any is available).

        A batch whose CRC does not match its bytes, or whose payload does not
        decompress, ends the result before it
        (``next_offset`` is its base offset); asked for first, it raises
        :class:`CorruptBatchError` naming it, so one bad batch never hides the rest
        and is never skipped unseen."""
        if isolation not in ISOLATION:
            raise InvalidRequestError(
                f"isolation: expected one of {sorted(ISOLATION)}, got {isolation!r}"
            )
        if max_bytes < 1:
            raise InvalidRequestError(f"max_bytes must be >= 1, got {max_bytes}")
        req = FetchRequest(topic, partition, offset, max_bytes, ISOLATION[isolation])
        r = await self.partition_call(topic, partition, req, FetchResponse)
        batches: list[RecordBatch] = []
        for b in r.batches:
            try:
                # The one CRC check of a fetched batch (the node serving it does not
                # check it again: see ARCHITECTURE.md), as Kafka's consumer's check.crcs.
                b.check_crc()
                batches.append(decompressed(b))
            except ValueError as exc:
                if not batches:  # the batch asked for: the caller skips it knowingly
                    raise CorruptBatchError(
                        topic, partition, b.base_offset, b.last_offset, str(exc)
                    ) from None
                # the good batches before it, and the next fetch starts at it
                return FetchResult(
                    batches,
                    r.high_watermark,
                    r.last_stable_offset,
                    r.start_offset,
                    b.base_offset,
                    stored_bytes=tuple(s.size_bytes for s in r.batches[: len(batches)]),
                )
        return FetchResult(
            batches,
            r.high_watermark,
            r.last_stable_offset,
            r.start_offset,
            r.next_offset,
            stored_bytes=tuple(b.size_bytes for b in r.batches),
        )

    async def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        """``(start_offset, high_watermark, last_stable_offset)`` from the leader."""
        r = await self.partition_call(
            topic, partition, ListOffsetsRequest(topic, partition), ListOffsetsResponse
        )
        return r.start_offset, r.high_watermark, r.last_stable_offset

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int
    ) -> tuple[int, int, int]:
        """``(offset, batch timestamp, last stable offset)``: the first committed offset
        whose batch timestamp (the leader's append time) is at least ``timestamp_ms``,
        from the partition leader's time index; offset -1 (and timestamp -1) when none
        is, below the last stable offset."""
        r = await self.partition_call(
            topic,
            partition,
            OffsetForTimestampRequest(topic, partition, int(timestamp_ms)),
            OffsetForTimestampResponse,
        )
        return r.offset, r.timestamp_ms, r.last_stable_offset

    async def init_producer(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        *,
        transaction_timeout_ms: int | None = None,
        topic_id: int = -1,
    ) -> ProducerSession:
        """Start a new session of ``producer_id`` on the partition: bump its epoch
        (fencing older sessions) and abort their open transaction.

        ``topic_id`` (>= 0: the id the caller read from the topic's metadata) makes the
        session start only on that topic: once it was deleted and created again under
        its name, UnknownTopicError naming both ids.

        ``transaction_timeout_ms`` (None or -1: the server's
        ``--transaction-timeout-ms``) is how long each transaction of this
        session may stay open before the partition aborts it (bumping the
        epoch, so the writer is fenced). The server refuses a value above its
        ``--max-transaction-timeout-ms`` (15 minutes by default) or below 1 with
        an InvalidRequestError naming ``transaction_timeout_ms`` and the range.
        """
        timeout = -1 if transaction_timeout_ms is None else transaction_timeout_ms
        if not isinstance(timeout, int) or isinstance(timeout, bool):
            raise InvalidRequestError(
                f"transaction_timeout_ms must be an int (milliseconds) or None, got {timeout!r}"
            )
        r = await self.partition_call(
            topic,
            partition,
            InitProducerRequest(topic, partition, producer_id, timeout, topic_id),
            InitProducerResponse,
        )
        return ProducerSession(
            r.producer_id, r.epoch, r.last_committed_version, r.transaction_timeout_ms
        )

    async def end_transaction(
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
    ) -> int:
        """Write a commit or abort marker (durable on a quorum); return its offset.

        - ``acks`` must be "all": the server refuses others (INVALID_REQUEST
          naming ``acks``), as a marker acknowledged by the leader alone may be lost.
        - An abort bumps the producer's epoch (the marker is written at
          ``producer_epoch + 1``): later produce or commit at ``producer_epoch``
          fail with FencedError. It succeeds with or without an open
          transaction.
        - A commit needs an open transaction (else InvalidTxnStateError), except
          the exact retry of the last commit applied (same epoch and version,
          and the same ``record_count``/``last_sequence`` when given), which
          returns that marker's offset. The retry of the last abort (same
          ``producer_epoch``) likewise returns the abort marker's offset.
        - ``record_count``/``last_sequence`` (-1: unchecked) are what the writer
          saw acknowledged in the transaction; a commit whose open transaction
          holds another number of records or ends at another sequence is
          refused (InvalidTxnStateError naming the field, with both values).
        - ``version`` (-1: none) is recorded as the producer's last committed
          application version, which ``init_producer`` reports.
        """
        r = await self.end_txn_response(
            topic,
            partition,
            producer_id,
            producer_epoch,
            commit,
            version,
            acks,
            record_count=record_count,
            last_sequence=last_sequence,
        )
        return r.offset

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
    ) -> EndTxnResponse:
        """``end_transaction`` returning the whole response (with the epoch after it)."""
        req = EndTxnRequest(
            topic,
            partition,
            producer_id,
            producer_epoch,
            commit,
            version,
            _acks(acks),
            record_count,
            last_sequence,
        )
        return await self.partition_call(topic, partition, req, EndTxnResponse)

    async def idempotent_producer(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int | None = None,
        max_in_flight: int = 5,
        transactional: bool = False,
        acks: str | int = "all",
        delivery_timeout_s: float = 120.0,
        transaction_timeout_ms: int | None = None,
    ) -> IdempotentProducer:
        """Start a producer session on one partition (``init_producer``: bumps the epoch,
        fencing older sessions of ``producer_id``, and aborts their open transaction).

        ``producer_id`` None picks a random one. A ``transactional`` producer needs
        ``acks`` "all"; ``transaction_timeout_ms`` is its transactions' timeout (see
        :meth:`init_producer`). The producer sends its batches in
        sequence order, up to ``max_in_flight`` at once, retrying in order through
        leader changes (see :mod:`raftlog.client.producer`). Close it when done.
        """
        if producer_id is None:
            producer_id = random.getrandbits(62)
        if not isinstance(producer_id, int) or not 0 <= producer_id < 2**63:
            raise InvalidRequestError(
                f"producer_id must be an int in [0, 2**63 - 1], got {producer_id!r}"
            )
        if not isinstance(max_in_flight, int) or not 1 <= max_in_flight <= 5:
            raise InvalidRequestError(f"max_in_flight must be in [1, 5], got {max_in_flight!r}")
        ack = _acks(acks)
        check_acks(ack, transactional)  # before init_producer bumps the epoch
        session = await self.init_producer(
            topic, partition, producer_id, transaction_timeout_ms=transaction_timeout_ms
        )
        return IdempotentProducer(
            self,
            topic,
            partition,
            session,
            max_in_flight=max_in_flight,
            transactional=transactional,
            acks=ack,
            delivery_timeout_s=delivery_timeout_s,
        )


def _acks(acks: str | int) -> int:
    key = str(acks)
    if key not in ACKS:
        raise InvalidRequestError(f"acks: expected one of 'all', '1', '0', got {acks!r}")
    return ACKS[key]
