"""The async client: admin, produce, fetch, with leader discovery and retries.

Every call is one HTTP POST of a codec-framed request to ``/v1/<call>`` on a
node; the reply is the framed response (200) or a framed ErrorResponse.

Routing: partition calls go to the partition's leader as last seen in
metadata; controller calls (create/delete topic) go to the controller leader.
A NOT_LEADER reply carries the leader when the node knows it, and the client
follows it. Retriable failures (not leader, no leader yet, timeouts, refused
connections) are retried with exponential backoff (tenacity) until
``request_timeout_s`` has passed in total; every other error surfaces at once
as a :class:`RaftlogError` subclass with the server's message.

Refused connections fail fast. When every server the client knows refuses the
connection (nothing listens: a wrong address, a cluster not started) and no
server has ever answered this client, the call fails at once with a
:class:`ClusterUnavailableError` naming the addresses: nothing suggests that
anything will come up there, and waiting the whole request timeout only hides
the mistake. Once any server has answered this client, a refusal means a node
that is restarting (or a leader that just died while others live), so it is
retried as above until the request timeout.

Each HTTP attempt has its own, shorter bound (``attempt_timeout_s``, by
default ``min(request_timeout_s / 3, 10 s)``) and never outlives the call's
overall deadline, so one hung connection costs an attempt, not the whole
budget: the call is retried (on a fresh leader lookup) within the deadline.

Security: ``auth_token`` is sent as ``Authorization: Bearer`` on every call
(the cluster's client token, never its peer token); with ``tls_ca_file`` every
node is reached over HTTPS and verified against that CA. A refusal (401 or 403)
surfaces at once as :class:`UnauthorizedError` with the node's message, which
names the token that is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import errno
import random
import ssl
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    wait_random_exponential,
)

from raftlog.client.compression import Compression, codec_named, decompressed, produce_batch
from raftlog.client.errors import (
    ClusterUnavailableError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderError,
    RaftlogError,
    RequestTimeoutError,
    UnauthorizedError,
    UnknownPartitionError,
    UnknownTopicError,
    error_for,
)
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.messages import (
    ACKS,
    CLIENT_ROUTES,
    ISOLATION,
    AlterConfigRequest,
    AlterConfigResponse,
    CompleteMoveRequest,
    ConfigEntry,
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
    EndTxnResponse,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    InitProducerRequest,
    InitProducerResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    MovePartitionRequest,
    MovePartitionResponse,
    OffsetForTimestampRequest,
    OffsetForTimestampResponse,
    ProduceRequest,
    ProduceResponse,
    RegisterNodeRequest,
    RegisterNodeResponse,
    TopicConfigs,
    TopicInfo,
    TransferLeadershipRequest,
    TransferLeadershipResponse,
)
from raftlog.rpc.tls import client_context, scheme
from raftlog.storage.batch import RecordBatch

if TYPE_CHECKING:
    from raftlog.client.producer import IdempotentProducer

R = TypeVar("R")

AUTH_HEADER = "Authorization"
CONTENT_TYPE = "application/x-raftlog"

ROUTES = CLIENT_ROUTES

#: Upper bound of the default per-attempt timeout (see the module doc).
MAX_ATTEMPT_TIMEOUT_S = 10.0
#: The least time an attempt is given even when the call's deadline is (nearly) spent.
MIN_ATTEMPT_TIMEOUT_S = 0.05

#: Redirects per call that retry at once (see ``_CallState.backoff``).
FREE_REDIRECTS = 3
# A partition call backs off at most 0.25 s between attempts: while its leader is
# being elected it must notice the new one within a fraction of the election
# timeout, not sleep through it (the failover benchmark's first ack).
_PARTITION_BACKOFF = wait_random_exponential(multiplier=0.05, max=0.25)

# The deadline (time.monotonic()) of the outermost client call running in this task;
# nested retry loops (a metadata refresh inside a produce) share it.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "raftlog_client_deadline", default=None
)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # node id, -1 when unknown
    replicas: list[int]
    start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: list[PartitionMetadata]
    replication_factor: int
    schema: bytes | None
    # a topic deleted and created again under its name gets a new id (-1: unknown)
    topic_id: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfigDescription:
    """A topic's configs: every key's effective value, and which ones the topic sets."""

    name: str
    configs: dict[str, str]  # every key (Kafka's names) -> its effective value
    overrides: dict[str, str]  # the keys set on the topic (the others are defaults)


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    last_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerSession:
    """A producer session on one partition (from ``init_producer``).

    ``transaction_timeout_ms`` is the timeout of the session's transactions as
    the server resolved it (its default when the session asked for none).
    """

    producer_id: int
    epoch: int
    last_committed_version: int
    transaction_timeout_ms: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class FetchResult:
    """Committed data batches from the requested offset.

    Payloads are decompressed (``raftlog.client.compression``), whatever codec
    the writer chose. Control batches (markers, raft configuration, no-ops) and
    aborted data are not returned, so offsets may have gaps; continue from ``next_offset``
    (which is past every batch returned and every batch skipped).
    """

    batches: list[RecordBatch]
    high_watermark: int
    last_stable_offset: int
    start_offset: int
    next_offset: int = -1
    # each batch's size as stored (header and compressed payload), in ``batches`` order:
    # a reader's payloads are decompressed, but fetch limits count stored bytes
    stored_bytes: tuple[int, ...] = ()


def parse_servers(servers: str | list[str]) -> list[str]:
    """``"h:p,h:p"`` or a list -> ``["h:p", ...]``; raises ValueError naming ``servers``.

    A leading ``http://`` or ``https://`` is dropped: TLS is chosen by the CA file.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for raw in items:
        s = raw.strip()
        for prefix in ("http://", "https://"):
            if s.startswith(prefix):
                s = s[len(prefix) :]
        host, sep, port = s.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"servers: expected a comma-separated list of HOST:PORT, got {raw!r}")
        out.append(s)
    if not out:
        raise ValueError("servers: expected at least one HOST:PORT, got none")
    return out


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, _NothingListening):
        return False
    return isinstance(
        exc,
        NotLeaderError
        | LeaderNotAvailableError
        | RequestTimeoutError
        | ClusterUnavailableError
        | _StaleMetadata,
    )


class _StaleMetadata(RaftlogError):
    """Internal: the cached metadata lacks what the call needs; refresh and retry."""


class _ConnectionRefused(ClusterUnavailableError):
    """Internal: nothing listens at the address (ECONNREFUSED); retriable like any
    unreachable node."""


class _NothingListening(ClusterUnavailableError):
    """Every known server refused the connection and none ever answered this client:
    not retried (see the module doc). Callers see a ClusterUnavailableError."""


def _is_refused(exc: aiohttp.ClientError) -> bool:
    """True when the connection was refused (not a reset, timeout or DNS failure)."""
    err = getattr(exc, "os_error", None)
    if not isinstance(err, OSError):
        return False
    if isinstance(err, ConnectionRefusedError) or err.errno == errno.ECONNREFUSED:
        return True
    # asyncio joins the failures of a name resolving to several addresses (localhost:
    # ::1 and 127.0.0.1) into one OSError without an errno: refused only if all were.
    text = str(err)
    return (
        err.errno is None
        and text.count("[Errno") == text.count(f"[Errno {errno.ECONNREFUSED}]") > 0
    )


@dataclasses.dataclass(slots=True)
class _CallState:
    """What the attempts of one partition call share."""

    refreshed: bool = False  # the topic's metadata was fetched during this call
    redirected: bool = False  # the last attempt's error named a new leader
    free_redirects: int = FREE_REDIRECTS  # redirects left that skip the backoff

    def backoff(self, retry_state: Any) -> float:
        """The pause before the next attempt: none right after an error named a new
        leader (the hint is fresh: go there at once), else the random exponential
        backoff. Free redirects are few, so two stale nodes naming each other cannot
        make a busy loop."""
        if self.redirected and self.free_redirects > 0:
            self.redirected = False
            self.free_redirects -= 1
            return 0.0
        self.redirected = False
        return _PARTITION_BACKOFF(retry_state)


class RaftlogClient:
    """Async client. Safe to share between tasks of one event loop."""

    def __init__(
        self,
        servers: str | list[str],
        *,
        auth_token: str | None = None,
        tls_ca_file: str | None = None,
        request_timeout_s: float = 30.0,
        attempt_timeout_s: float | None = None,
    ) -> None:
        """``tls_ca_file``: a PEM CA file; given, every node is reached over HTTPS and
        verified against it (TlsConfigError, a ValueError, when it is unusable)."""
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        if attempt_timeout_s is None:
            attempt_timeout_s = min(request_timeout_s / 3, MAX_ATTEMPT_TIMEOUT_S)
        if attempt_timeout_s <= 0:
            raise ValueError(f"attempt_timeout_s must be > 0, got {attempt_timeout_s}")
        self._seeds = parse_servers(servers)
        self._auth_token = auth_token
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
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------ admin

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int = 3,
        schema: bytes | None = None,
        exist_ok: bool = False,
        configs: dict[str, str] | None = None,
    ) -> TopicMetadata:
        """Create a topic; ``partitions=None`` takes the cluster default.

        The replication factor is capped at the node count. ``configs`` are
        the topic's config overrides by Kafka's names (``retention.bytes``,
        ``retention.ms``, ``segment.bytes``, ``segment.ms``). Raises
        TopicExistsError unless ``exist_ok``; InvalidRequestError for a bad
        name, partition count, replication factor, or config key or value.
        """
        if partitions is not None and partitions < 1:
            raise InvalidRequestError(f"partitions must be >= 1, got {partitions}")
        if replication_factor < 1:
            raise InvalidRequestError(f"replication_factor must be >= 1, got {replication_factor}")
        req = CreateTopicRequest(
            name,
            -1 if partitions is None else partitions,
            replication_factor,
            schema,
            exist_ok,
            [ConfigEntry(k, str(v)) for k, v in (configs or {}).items()],
        )
        resp = await self._controller_call(req, CreateTopicResponse)
        self._topics[name] = resp.topic
        return _topic_metadata(resp.topic)

    async def describe_topic(self, name: str) -> TopicMetadata:
        """The topic's partitions with leaders and watermarks; UnknownTopicError if absent."""
        meta = await self._metadata([name], with_offsets=True)
        for t in meta.topics:
            if t.name == name:
                return _topic_metadata(t)
        raise UnknownTopicError(f"unknown topic {name!r}")

    async def list_topics(self) -> list[str]:
        resp = await self._prefer_controller(ListTopicsRequest(), ListTopicsResponse)
        return sorted(resp.names)

    async def delete_topic(self, name: str) -> None:
        await self._controller_call(DeleteTopicRequest(name), DeleteTopicResponse)
        self._topics.pop(name, None)

    async def alter_config(
        self,
        name: str,
        set_configs: dict[str, str] | None = None,
        delete: list[str] | None = None,
    ) -> TopicConfigDescription:
        """Set config overrides of topic ``name`` and delete others (back to the default).

        One atomic change through the controller. Raises InvalidRequestError
        naming an unknown key or a bad value (nothing changes then),
        UnknownTopicError when the topic does not exist. Returns the configs
        after the change.
        """
        req = AlterConfigRequest(
            name,
            [ConfigEntry(k, str(v)) for k, v in (set_configs or {}).items()],
            list(delete or []),
        )
        resp = await self._controller_call(req, AlterConfigResponse)
        return _config_description(resp.topic)

    async def describe_configs(self, name: str) -> TopicConfigDescription:
        """Every config of topic ``name`` with its effective value; UnknownTopicError if absent."""
        resp = await self._prefer_controller(
            DescribeConfigsRequest([name]), DescribeConfigsResponse
        )
        for t in resp.topics:
            if t.name == name:
                return _config_description(t)
        raise UnknownTopicError(f"unknown topic {name!r}")

    async def create_partitions(self, name: str, partitions: int) -> TopicMetadata:
        """Grow topic ``name`` to ``partitions`` partitions in all (Kafka's semantics: the
        new total) through the controller; the new partitions are placed over the nodes
        as a create's are. Asking for the current count changes nothing. Raises
        InvalidRequestError for a smaller count (partitions are never removed),
        UnknownTopicError when the topic does not exist."""
        if partitions < 1:
            raise InvalidRequestError(f"partitions: expected an integer >= 1, got {partitions}")
        resp = await self._controller_call(
            CreatePartitionsRequest(name, partitions), CreatePartitionsResponse
        )
        self._topics[name] = resp.topic
        return _topic_metadata(resp.topic)

    async def transfer_leadership(self, topic: str, partition: int, target: int) -> int:
        """Move the leadership of ``topic/partition`` to node ``target``, one of its
        replicas, and keep it there: the controller makes ``target`` the partition's
        preferred replica, which the nodes' leader balancer follows. Returns once
        ``target`` leads (its id). Raises InvalidRequestError when ``target`` is not
        a replica, UnknownTopicError/UnknownPartitionError, and RequestTimeoutError
        when ``target`` did not take over within the request timeout (it stays
        preferred, so the leadership moves once it has caught up)."""
        if target < 0 or partition < 0:
            raise InvalidRequestError(
                f"expected a partition >= 0 and a node id >= 0, got {partition} and {target}"
            )
        resp = await self._controller_call(
            TransferLeadershipRequest(topic, partition, target), TransferLeadershipResponse
        )
        self._leader_hints[(topic, partition)] = resp.leader
        return resp.leader

    async def register_node(self, node_id: int, address: str) -> dict[int, str]:
        """Add node ``node_id``, serving at ``address`` (HOST:PORT, as it advertises
        itself), to the running cluster: every node learns its address through the
        controller, and it joins the controller group (a learner, promoted once caught
        up). Returns every node's address after the change. Registering a node again
        with the same address changes nothing; InvalidRequestError when the id is a
        member at another address or the address is malformed."""
        if node_id < 0:
            raise InvalidRequestError(f"node_id: expected an integer >= 0, got {node_id}")
        resp = await self._controller_call(
            RegisterNodeRequest(node_id, address), RegisterNodeResponse
        )
        self._nodes = {n.node_id: n.address for n in resp.nodes}
        return dict(self._nodes)

    async def move_partition(self, topic: str, partition: int, replicas: list[int]) -> bool:
        """Start moving ``topic/partition`` to ``replicas`` (node ids, the first the new
        preferred leader), or, asked again with the same target, learn whether the move
        is done: True once the partition runs with exactly ``replicas``. The move goes on
        in the cluster (the partition's leader adds each new node as a learner, promotes
        it once caught up, then removes the old ones) while writes continue.
        InvalidRequestError names a bad target (empty, repeated or unknown nodes, or
        another move of the partition in progress)."""
        resp = await self._controller_call(
            MovePartitionRequest(topic, partition, list(replicas)), MovePartitionResponse
        )
        return resp.done

    async def complete_move(self, topic: str, partition: int, replicas: list[int]) -> bool:
        """For nodes: the leader of ``topic/partition`` reports that its group runs with
        exactly ``replicas``, a move's target; True once the controller has ended it."""
        resp = await self._controller_call(
            CompleteMoveRequest(topic, partition, list(replicas)), MovePartitionResponse
        )
        return resp.done

    async def decommission_node(self, node_id: int) -> tuple[int, bool]:
        """Drain node ``node_id`` and then remove it from the cluster, or, asked again,
        learn how far that has got: (partitions still on it, removed). The controller
        stops placing replicas on it and moves each of its partitions to another node
        (as ``move_partition``, writes going on); once none is left, the node leaves the
        controller group and the cluster. InvalidRequestError names a node that is not
        in the cluster or a partition no other node can take."""
        resp = await self._controller_call(
            DecommissionNodeRequest(node_id), DecommissionNodeResponse
        )
        return resp.remaining, resp.removed

    async def metadata(self) -> MetadataResponse:
        """The raw cluster metadata (nodes, controller leader, topics)."""
        return await self._metadata([], with_offsets=False)

    # ------------------------------------------------------------ data

    async def produce(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes, int]],
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
        resp = await self._partition_call(topic, partition, req, ProduceResponse)
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
        ``max_bytes`` (at least one batch when any is available)."""
        if isolation not in ISOLATION:
            raise InvalidRequestError(
                f"isolation: expected one of {sorted(ISOLATION)}, got {isolation!r}"
            )
        if max_bytes < 1:
            raise InvalidRequestError(f"max_bytes must be >= 1, got {max_bytes}")
        req = FetchRequest(topic, partition, offset, max_bytes, ISOLATION[isolation])
        r = await self._partition_call(topic, partition, req, FetchResponse)
        try:
            batches = [decompressed(b) for b in r.batches]
        except ValueError as exc:
            raise RaftlogError(f"topic {topic!r} partition {partition}: {exc}") from None
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
        r = await self._partition_call(
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
        r = await self._partition_call(
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
    ) -> ProducerSession:
        """Start a new session of ``producer_id`` on the partition: bump its epoch
        (fencing older sessions) and abort their open transaction.

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
        r = await self._partition_call(
            topic,
            partition,
            InitProducerRequest(topic, partition, producer_id, timeout),
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
          fail with ProducerFencedError. It succeeds with or without an open
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
        r = await self._end_txn(
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

    async def _end_txn(
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
        return await self._partition_call(topic, partition, req, EndTxnResponse)

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
        from raftlog.client.producer import IdempotentProducer

        if producer_id is None:
            producer_id = random.getrandbits(62)
        if not isinstance(producer_id, int) or not 0 <= producer_id < 2**63:
            raise InvalidRequestError(
                f"producer_id must be an int in [0, 2**63 - 1], got {producer_id!r}"
            )
        if not isinstance(max_in_flight, int) or not 1 <= max_in_flight <= 5:
            raise InvalidRequestError(f"max_in_flight must be in [1, 5], got {max_in_flight!r}")
        ack = _acks(acks)
        if transactional and ack != -1:
            raise InvalidRequestError(
                f"acks: transactional writes require acks=all (-1), got {acks!r}"
            )
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

    # ------------------------------------------------------------ routing

    @property
    def request_timeout_s(self) -> float:
        return self._timeout_s

    @property
    def attempt_timeout_s(self) -> float:
        return self._attempt_timeout_s

    @contextlib.contextmanager
    def _deadline(self) -> Iterator[float]:
        """The call's overall deadline: ``request_timeout_s`` from now, or the enclosing
        call's when this one is nested in it (whichever is sooner)."""
        outer = _DEADLINE.get()
        mine = time.monotonic() + self._timeout_s
        deadline = mine if outer is None else min(outer, mine)
        token = _DEADLINE.set(deadline)
        try:
            yield deadline
        finally:
            _DEADLINE.reset(token)

    def _retrying(self, deadline: float, wait: Any = None) -> AsyncRetrying:
        return AsyncRetrying(
            stop=lambda _state: time.monotonic() >= deadline,
            wait=wait or wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(_retriable),
            reraise=True,
        )

    def _attempt_timeout(self) -> float:
        """This attempt's bound: the per-attempt timeout, cut to what is left of the
        call's deadline (at least MIN_ATTEMPT_TIMEOUT_S)."""
        deadline = _DEADLINE.get()
        if deadline is None:
            return self._attempt_timeout_s
        left = deadline - time.monotonic()
        return max(MIN_ATTEMPT_TIMEOUT_S, min(self._attempt_timeout_s, left))

    async def _metadata(self, topics: list[str], with_offsets: bool) -> MetadataResponse:
        resp = await self._prefer_controller(
            MetadataRequest(topics, with_offsets), MetadataResponse
        )
        self._absorb(resp)
        return resp

    def _absorb(self, meta: MetadataResponse) -> None:
        if meta.nodes:
            self._nodes = {n.node_id: n.address for n in meta.nodes}
        self._controller_leader = meta.controller_leader
        for t in meta.topics:
            self._topics[t.name] = t
            for p in t.partitions:
                if p.leader >= 0:
                    self._leader_hints[(t.name, p.partition)] = p.leader

    async def _prefer_controller(self, req: Any, resp_type: type[R]) -> R:
        """Ask the controller leader when known (it has applied every acknowledged
        topic change, so reads follow writes), else any node."""
        with self._deadline():
            addr = self._nodes.get(self._controller_leader)
            if addr is not None:
                try:
                    return await self._send(addr, req, resp_type)
                except (ClusterUnavailableError, RequestTimeoutError):
                    self._controller_leader = -1
            return await self._any_call(req, resp_type)

    def _candidates(self) -> list[str]:
        known = list(self._nodes.values())
        seeds = [s for s in self._seeds if s not in known]
        out = known + seeds
        random.shuffle(out)
        return out

    async def _any_call(self, req: Any, resp_type: type[R]) -> R:
        """Send to any reachable node, trying each before backing off."""
        with self._deadline() as deadline:
            async for attempt in self._retrying(deadline):
                with attempt:
                    last: RaftlogError | None = None
                    candidates = self._candidates()
                    refused = []
                    for addr in candidates:
                        try:
                            return await self._send(addr, req, resp_type)
                        except ClusterUnavailableError as exc:
                            last = exc
                            if isinstance(exc, _ConnectionRefused):
                                refused.append(addr)
                    if refused and len(refused) == len(candidates) and not self._answered:
                        raise _NothingListening(
                            f"cannot reach {', '.join(sorted(refused))}: connection refused "
                            "(nothing listens there); check the server addresses (--servers, "
                            "RAFTLOG_SERVERS or the connector's 'servers' option) and that the "
                            "cluster runs (`raftlog local start` starts a local one)"
                        )
                    raise last or ClusterUnavailableError("no servers configured")
        raise AssertionError("unreachable")

    async def _controller_call(self, req: Any, resp_type: type[R]) -> R:
        with self._deadline() as deadline:
            async for attempt in self._retrying(deadline):
                with attempt:
                    addr = self._nodes.get(self._controller_leader)
                    if addr is None:
                        await self._metadata([], with_offsets=False)
                        addr = self._nodes.get(self._controller_leader)
                        if addr is None:
                            raise LeaderNotAvailableError("the controller has no leader yet")
                    try:
                        return await self._send(addr, req, resp_type)
                    except (NotLeaderError, ClusterUnavailableError, RequestTimeoutError) as exc:
                        self._controller_leader = getattr(exc, "leader_id", -1)
                        raise
        raise AssertionError("unreachable")

    async def _partition_call(self, topic: str, partition: int, req: Any, resp_type: type[R]) -> R:
        state = _CallState()
        with self._deadline() as deadline:
            async for attempt in self._retrying(deadline, state.backoff):
                with attempt:
                    return await self._partition_attempt(topic, partition, req, resp_type, state)
        raise AssertionError("unreachable")

    async def _partition_attempt(
        self, topic: str, partition: int, req: Any, resp_type: type[R], state: _CallState
    ) -> R:
        """One attempt of a partition call at the leader as last seen (looked up first when
        unknown). Retriable errors (see ``_retriable``) are raised for the caller to retry,
        after the leader hint was updated from them."""
        key = (topic, partition)
        leader = self._leader_hints.get(key, -1)
        if leader < 0 or leader not in self._nodes:
            await self._refresh_topic(topic)
            state.refreshed = True
            info = self._topics.get(topic)
            if info is None:
                raise UnknownTopicError(f"unknown topic {topic!r}")
            if not 0 <= partition < len(info.partitions):
                raise UnknownPartitionError(
                    f"topic {topic!r} has no partition {partition} "
                    f"(it has partitions 0..{len(info.partitions) - 1})"
                )
            leader = self._leader_hints.get(key, -1)
            if leader < 0 or leader not in self._nodes:
                raise LeaderNotAvailableError(f"partition {topic}/{partition} has no leader yet")
        try:
            return await self._send(self._nodes[leader], req, resp_type)
        except (NotLeaderError, LeaderNotAvailableError) as exc:
            if exc.leader_id >= 0 and exc.leader_id != leader:
                self._leader_hints[key] = exc.leader_id
                state.redirected = True
                if exc.leader_address:
                    self._nodes.setdefault(exc.leader_id, exc.leader_address)
            elif self._leader_hints.get(key) == leader:
                self._leader_hints.pop(key, None)
            raise
        except (ClusterUnavailableError, RequestTimeoutError):
            if self._leader_hints.get(key) == leader:
                self._leader_hints.pop(key, None)
            raise
        except UnknownTopicError:
            # The cache may predate a delete and recreate; check once.
            if state.refreshed:
                raise
            self._topics.pop(topic, None)
            self._leader_hints.pop(key, None)
            state.refreshed = True
            raise _StaleMetadata(f"unknown topic {topic!r}") from None

    async def _refresh_topic(self, topic: str) -> None:
        """Refresh ``topic``'s metadata; concurrent callers share one request."""
        fut = self._refreshing.get(topic)
        if fut is None or fut.done():
            fut = asyncio.ensure_future(self._metadata([topic], with_offsets=True))
            self._refreshing[topic] = fut

            def _forget(f: asyncio.Future[Any], t: str = topic) -> None:
                if self._refreshing.get(t) is f:
                    del self._refreshing[t]

            fut.add_done_callback(_forget)
        await asyncio.shield(fut)

    async def _send(self, address: str, req: Any, resp_type: type[R]) -> R:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=64, limit_per_host=16, ssl=self._ssl if self._ssl else False
                ),
            )
        headers = {"Content-Type": CONTENT_TYPE}
        if self._auth_token:
            headers[AUTH_HEADER] = f"Bearer {self._auth_token}"
        url = self.url(address, f"/v1/{ROUTES[type(req)]}")
        bound = self._attempt_timeout()
        timeout = aiohttp.ClientTimeout(total=bound, connect=min(5.0, bound))
        try:
            async with self._session.post(
                url, data=codec.encode(req), headers=headers, timeout=timeout
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError as exc:
            raise RequestTimeoutError(f"request to {address} timed out after {bound:.3g}s") from exc
        except aiohttp.ClientSSLError as exc:
            # Not retried: the same handshake fails the same way every time.
            raise RaftlogError(_tls_failure(address, exc)) from exc
        except aiohttp.ClientError as exc:
            if _is_refused(exc):
                raise _ConnectionRefused(
                    f"cannot reach {address}: connection refused (nothing listens there)"
                ) from exc
            hint = ""
            if self._ssl is None and isinstance(exc, aiohttp.ServerDisconnectedError):
                hint = (
                    " (a node that serves HTTPS drops plain HTTP requests: give the client "
                    "the cluster's CA, tls_ca_file / --tls-ca / tlsCaFile)"
                )
            raise ClusterUnavailableError(f"cannot reach {address}: {exc}{hint}") from exc
        self._answered = True
        try:
            msg = codec.decode(body)
        except CodecError as exc:
            if status in (401, 403):
                raise UnauthorizedError(
                    f"{address} refused the request (HTTP {status}): missing or wrong auth "
                    "token (pass auth_token= or set RAFTLOG_AUTH_TOKEN)"
                ) from exc
            raise RaftlogError(
                f"{address} answered HTTP {status} with an undecodable body: {exc}; {body[:200]!r}"
            ) from exc
        if isinstance(msg, ErrorResponse):
            raise error_for(msg.code, msg.message, msg.leader_id, msg.leader_address)
        if not isinstance(msg, resp_type):
            raise RaftlogError(
                f"{address} answered a {type(msg).__name__}, expected a {resp_type.__name__}"
            )
        return msg


def _tls_failure(address: str, exc: aiohttp.ClientSSLError) -> str:
    """Why a TLS handshake with ``address`` failed, and what to check."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (
            f"TLS to {address} failed: {exc.certificate_error}; the node's certificate must be "
            f"signed by the CA given as tls_ca_file (--tls-ca, RAFTLOG_TLS_CA, tlsCaFile) and "
            f"name the host {address.rpartition(':')[0]}"
        )
    return (
        f"TLS to {address} failed: {exc}; does the node serve TLS (--tls-cert)? "
        "For a node without it, leave tls_ca_file out"
    )


def _acks(acks: str | int) -> int:
    key = str(acks)
    if key not in ACKS:
        raise InvalidRequestError(f"acks: expected one of 'all', '1', '0', got {acks!r}")
    return ACKS[key]


def _topic_metadata(t: TopicInfo) -> TopicMetadata:
    return TopicMetadata(
        name=t.name,
        partitions=[
            PartitionMetadata(
                p.partition,
                p.leader,
                list(p.replicas),
                p.start_offset,
                p.high_watermark,
                p.last_stable_offset,
            )
            for p in t.partitions
        ],
        replication_factor=t.replication_factor,
        schema=t.schema,
        topic_id=t.topic_id,
    )


def _config_description(t: TopicConfigs) -> TopicConfigDescription:
    return TopicConfigDescription(
        t.name,
        {e.key: e.value for e in t.configs},
        {e.key: e.value for e in t.configs if not e.is_default},
    )
