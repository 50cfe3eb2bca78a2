"""The Kafka APIs of :data:`raftlog.kafka.protocol.API_VERSIONS`, answered by the
node's own handlers: the Kafka door is another front onto the same calls as
``POST /v1/<route>`` (produce, fetch, list_offsets, offset_for_timestamp, metadata,
create_topic, delete_topic), with the same roles (:mod:`raftlog.rpc.roles`), the same
batch check before the log (the node's produce runs
:func:`raftlog.records.payload_check.check_payload`) and, on a node of several
processes, the same forwarding to the shard that owns a partition.

Each handler takes the decoded kio request and returns a dict of the response's
values (:func:`raftlog.kafka.protocol.build` fits it to the version), or None for a
produce with acks=0, which Kafka answers with nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import logging
import secrets
from typing import Any

from raftlog.kafka.groups.handlers import GROUP_APIS, GroupApis
from raftlog.kafka.protocol import API_VERSIONS, RequestHead
from raftlog.kafka.records import (
    KafkaRecordError,
    ProducedBatch,
    ProducedBytes,
    decode_batch,
    encode_batch,
    skip_batch,
    split_batches,
)
from raftlog.kafka.topic_configs import RESOURCE_NAMES, RESOURCE_TOPIC, config_entries
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    ConfigEntry,
    CreateTopicRequest,
    DeleteTopicRequest,
    DescribeConfigsRequest,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForTimestampRequest,
    ProduceBatch,
    ProduceRequest,
)
from raftlog.rpc.roles import Role
from raftlog.rpc.server import AuthPolicy, RequestError

log = logging.getLogger("raftlog.kafka")

# Kafka error codes (Kafka's Errors.java); the partition-level ones of records.py too
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_REQUIRED_ACKS = 21
TOPIC_AUTHORIZATION_FAILED = 29
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
KAFKA_STORAGE_ERROR = 56

#: The role the current request's connection authenticated as with SASL/PLAIN (None:
#: not authenticated). The listener sets it in each request's task; the handlers'
#: own tasks inherit it.
CALLER: contextvars.ContextVar[Role | None] = contextvars.ContextVar("kafka_caller", default=None)
UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2

#: raftlog's error codes -> Kafka's, for a partition's answer
KAFKA_CODE: dict[ErrorCode, int] = {
    ErrorCode.NOT_LEADER: NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE: LEADER_NOT_AVAILABLE,
    ErrorCode.TIMEOUT: REQUEST_TIMED_OUT,
    ErrorCode.UNKNOWN_TOPIC: UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_PARTITION: UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.TOPIC_EXISTS: TOPIC_ALREADY_EXISTS,
    ErrorCode.INVALID_REQUEST: INVALID_REQUEST,
    ErrorCode.RECORD_TOO_LARGE: MESSAGE_TOO_LARGE,
    ErrorCode.OFFSET_OUT_OF_RANGE: OFFSET_OUT_OF_RANGE,
    ErrorCode.NOT_SUPPORTED: INVALID_REQUEST,
    ErrorCode.UNAUTHORIZED: TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.FENCED: PRODUCER_FENCED,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.DUPLICATE_SEQUENCE: DUPLICATE_SEQUENCE_NUMBER,
    ErrorCode.INVALID_TXN_STATE: INVALID_TXN_STATE,
    # a committed participant aborted by its timeout: Kafka has no closer code
    ErrorCode.TRANSACTION_LOST: INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_EPOCH: INVALID_PRODUCER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR: KAFKA_STORAGE_ERROR,
    # a leader that lost its term mid-request: the client refreshes metadata, retries
    ErrorCode.STALE_TERM: NOT_LEADER_OR_FOLLOWER,
    ErrorCode.INVALID_REPLICATION_FACTOR: INVALID_REPLICATION_FACTOR,
}

#: The longest a fetch waits for ``min_bytes`` whatever its ``max_wait_ms`` says.
MAX_FETCH_WAIT_S = 30.0
#: How often a waiting fetch looks again (the node's fetch is a read of its log).
FETCH_POLL_S = 0.02
_EARLIEST, _LATEST = -2, -1


def kafka_code(exc: Exception) -> tuple[int, str]:
    """(Kafka error code, message) of a failed node call."""
    if isinstance(exc, KafkaRecordError):
        return exc.code, str(exc)
    if isinstance(exc, RequestError):
        if exc.code is ErrorCode.INVALID_REQUEST and str(exc).startswith("CORRUPT_MESSAGE"):
            return CORRUPT_MESSAGE, str(exc)
        return KAFKA_CODE.get(exc.code, UNKNOWN_SERVER_ERROR), str(exc)
    log.exception("kafka: a node call failed", exc_info=exc)
    return UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def _crc_checked(batches: list[Any]) -> list[Any]:
    """``batches`` up to the first whose CRC does not match (a fetch answer's, as the
    node read them from its log unchecked: see ARCHITECTURE.md). The Kafka door is
    their reader: it re-encodes them under a new Kafka CRC, which would hide the
    damage from the Kafka consumer's check, so it checks them first, and answers
    CORRUPT_MESSAGE when the first one is bad (the consumer sees the error at that
    offset, as it would see Kafka's own CRC fail)."""
    for i, b in enumerate(batches):
        try:
            b.check_crc()
        except ValueError as exc:
            if i == 0:
                raise KafkaRecordError(
                    CORRUPT_MESSAGE,
                    f"the batch at offsets {b.base_offset}..{b.last_offset} is corrupt: {exc}",
                ) from None
            return batches[:i]
    return batches


class KafkaApis:
    """The Kafka APIs of one node. ``node``: the :class:`raftlog.node.process.Node`;
    ``brokers``: every node's Kafka address (node id -> HOST:PORT), what Metadata lists;
    ``policy``: the node's roles, applied to the Kafka door's callers as to the HTTP
    door's: a caller's role is the token it sent as its SASL/PLAIN password (client or
    admin; never the peer token), which a node with a client or admin token requires
    before any request but ApiVersions and the SASL exchange (``sasl_required``).
    """

    def __init__(self, node: Any, brokers: dict[int, str], policy: AuthPolicy) -> None:
        self.node = node
        self.brokers = brokers
        self.policy = policy
        self.sasl_required = policy.client_token is not None or policy.admin_token is not None
        self.groups = GroupApis(node, brokers, self._call, self._create_as_caller, self._refused)
        metrics = getattr(node, "metrics", None)  # None: a test's listener without a node
        self.produced = ProducedBytes(
            gauge=None if metrics is None else metrics.kafka_produced_cache_bytes
        )

    def authenticate(self, auth_bytes: bytes) -> tuple[dict[str, Any], Role | None]:
        """A SaslAuthenticate's answer and the role it grants (None: refused). PLAIN's
        message is ``authzid NUL username NUL password``; the password is compared, in
        constant time, with the client and admin tokens; the names are not checked."""
        parts = bytes(auth_bytes).split(b"\0")
        role = None
        if len(parts) == 3:
            password = parts[2]
            for candidate, token in (
                (Role.CLIENT, self.policy.client_token),
                (Role.ADMIN, self.policy.admin_token),
            ):
                if token is not None and hmac.compare_digest(password, token.encode()):
                    role = candidate
        if role is None:
            why = (
                "expected PLAIN's authzid NUL username NUL password"
                if len(parts) != 3
                else "the password is neither the client token nor the admin token"
            )
            answer = {
                "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": f"SASL/PLAIN authentication failed: {why}",
                "auth_bytes": b"",
                "session_lifetime": 0,
            }
            return answer, None
        answer = {
            "error_code": NONE,
            "error_message": None,
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
        return answer, role

    # -- plumbing ----------------------------------------------------------------

    def _refused(self, route: str) -> str | None:
        why = "" if CALLER.get() else "the connection has not authenticated (SASL/PLAIN)"
        refusal = self.policy.route_refusal(route, CALLER.get(), why)
        return None if refusal is None else refusal[1]

    async def _call(self, route: str, msg: Any) -> Any:
        """The node's answer to ``msg``, as ``POST /v1/<route>`` gets it: forwarded to
        the shard that owns its partition on a node of several processes."""
        refused = self._refused(route)
        if refused is not None:
            raise RequestError(ErrorCode.UNAUTHORIZED, refused)
        node = self.node
        if node.shards is not None:
            token = node.config.peer_token
            forwarded = await node.forward_client(
                route, msg, codec.encode(msg), f"Bearer {token}" if token else ""
            )
            if forwarded is not None:
                answer = forwarded[1]
                if codec.type_of(answer) is ErrorResponse:
                    err = codec.decode(answer, ErrorResponse)
                    raise RequestError(err.code, err.message, err.leader_id)
                return codec.decode(answer)
        return await node.handle_client(msg)

    async def _create_as_caller(self, req: CreateTopicRequest) -> None:
        """Create a topic the Kafka door itself needs (``__consumer_offsets``, on a
        group's first FindCoordinator) at the controller's leader, with the token the
        caller authenticated with: the same role check as the caller's own create."""
        from raftlog.client.async_client import RaftlogClient

        role = CALLER.get()
        tokens = {Role.CLIENT: self.policy.client_token, Role.ADMIN: self.policy.admin_token}
        node = self.node
        async with RaftlogClient(
            sorted(node.config.peers.values()),
            auth_token=None if role is None else tokens.get(role),
            tls_ca_file=node.config.tls.ca_file if node.config.tls else None,
            request_timeout_s=10.0,
        ) as client:
            await client.create_topic(req.name, req.partitions, None, exist_ok=True)

    async def handle(self, head: RequestHead, req: Any) -> dict[str, Any] | None:
        if head.api_key in GROUP_APIS:
            return await self.groups.handle(head, req)
        handler = _HANDLERS[head.api_key]
        return await handler(self, head, req)

    # -- ApiVersions ----------------------------------------------------------------

    async def api_versions(self, head: RequestHead, req: Any) -> dict[str, Any]:
        return api_versions_body(NONE)

    async def sasl_handshake(self, head: RequestHead, req: Any) -> dict[str, Any]:
        ok = req.mechanism == "PLAIN"
        return {"error_code": NONE if ok else UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN"]}

    # -- Metadata -------------------------------------------------------------------

    async def metadata(self, head: RequestHead, req: Any) -> dict[str, Any]:
        """Brokers and the topics asked for, each once: a name asked for twice is answered
        once, as Kafka's broker answers a set. More distinct names than
        ``--max-topics-per-metadata`` close the connection (Metadata has no error of its
        own below v10, and an error per name would be an answer as large as the ask)."""
        # duplicates dropped first: one name 1,000,000 times made a 138 MB answer
        wanted = None if req.topics is None else list(dict.fromkeys(t.name for t in req.topics))
        if head.api_version == 0 and wanted == []:
            wanted = None  # v0: an empty list means every topic
        limit = self.node.config.edge.max_topics_per_metadata
        if wanted is not None and len(wanted) > limit:
            raise ClosingRefusal(
                "max_topics_per_metadata",
                self.node.edge.refusal(
                    "max_topics_per_metadata",
                    "topics (distinct names)",
                    len(wanted),
                    "per metadata request",
                    "ask in several requests, or name none for all",
                ),
            )
        live = self._live_brokers()
        brokers = []
        for node_id, address in sorted(self.brokers.items()):
            if node_id not in live:
                continue
            host, _, port = address.rpartition(":")
            brokers.append({"node_id": node_id, "host": host, "port": int(port), "rack": None})
        controller = -1
        topics: list[dict[str, Any]] = []
        if wanted != []:
            try:
                meta = await self._call("metadata", MetadataRequest(wanted or [], True))
            except Exception as exc:
                code, _ = kafka_code(exc)
                meta = None
                topics = [_topic_error(n, code) for n in wanted or []]
            if meta is not None:
                controller = meta.controller_leader
                found = {t.name: t for t in meta.topics}
                for name in wanted if wanted is not None else sorted(found):
                    t = found.get(name)
                    if t is None:
                        topics.append(_topic_error(name, UNKNOWN_TOPIC_OR_PARTITION))
                        continue
                    topics.append(
                        {
                            "error_code": NONE,
                            "name": t.name,
                            "is_internal": t.name.startswith("__"),
                            "partitions": [self._partition(p, live) for p in t.partitions],
                        }
                    )
        else:
            controller = self.node.controller_leader()
        return {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": "raftlog",
            "controller_id": controller,
            "topics": topics,
        }

    def _live_brokers(self) -> set[int]:
        """The brokers Metadata lists, as a Kafka broker lists the live ones: this node,
        and every other that this node's heartbeats have not declared dead (silent for
        two election timeouts: ``HeartbeatManager.is_alive``; heard again, listed
        again). A node without heartbeats (a test's) lists them all."""
        beats = getattr(getattr(self.node, "host", None), "heartbeats", None)
        me = getattr(self.node, "node_id", None)
        if beats is None:
            return set(self.brokers)
        return {n for n in self.brokers if n == me or beats.is_alive(n)}

    def _partition(self, p: Any, live: set[int]) -> dict[str, Any]:
        """A partition's answer: its Raft leader when that broker is listed (else -1,
        LEADER_NOT_AVAILABLE, and clients ask again), every replica, and those not
        live as offline (Raft has no ISR: every live replica of the group may be
        elected, so the live ones are given as in sync)."""
        leader = p.leader if p.leader in self.brokers and p.leader in live else -1
        return {
            "error_code": NONE if leader >= 0 else LEADER_NOT_AVAILABLE,
            "partition_index": p.partition,
            "leader_id": leader,
            "replica_nodes": list(p.replicas),
            "isr_nodes": [r for r in p.replicas if r in live],
            "offline_replicas": [r for r in p.replicas if r not in live],
        }

    # -- Produce ---------------------------------------------------------------------

    async def produce(self, head: RequestHead, req: Any) -> dict[str, Any] | None:
        acks = int(req.acks)

        async def one(topic: str, part: Any) -> dict[str, Any]:
            out: dict[str, Any] = {
                "index": part.index,
                "error_code": NONE,
                "base_offset": -1,
                "log_append_time": None,
                "log_start_offset": -1,
                "record_errors": [],
                "error_message": None,
            }
            try:
                if acks not in (-1, 0, 1):
                    out["error_code"] = INVALID_REQUIRED_ACKS
                    out["error_message"] = f"acks: expected -1 (all), 1 or 0, got {acks}"
                    return out
                if part.records is None:
                    raise KafkaRecordError(CORRUPT_MESSAGE, "the partition's records are null")
                self._refuse_typed(topic)
                decoded = [decode_batch(b) for b in split_batches(part.records)]
                _refuse_transactional(decoded)
                first = decoded[0]
                resp = await self._call(
                    "produce",
                    ProduceRequest(
                        topic,
                        int(part.index),
                        acks,
                        [ProduceBatch(d.payload, d.record_count) for d in decoded],
                        producer_id=first.producer_id,
                        producer_epoch=first.producer_epoch,
                        first_sequence=first.base_sequence,
                        transactional=first.transactional,
                    ),
                )
                out["base_offset"] = resp.base_offset
                at = resp.base_offset
                for d in decoded:  # one stored batch per Kafka batch, in order
                    self.produced.add(topic, int(part.index), at, d)
                    at += d.record_count
            except Exception as exc:
                out["error_code"], out["error_message"] = kafka_code(exc)
                if isinstance(exc, KafkaRecordError) and exc.code == CORRUPT_MESSAGE:
                    # the node's own check counts those it refuses; these never reached it
                    self.node.metrics.corrupt_batches.labels(topic).inc()
            return out

        work = [
            (t.name, asyncio.ensure_future(one(t.name, p)))
            for t in req.topic_data
            for p in t.partition_data
        ]
        await asyncio.gather(*(f for _, f in work))
        if acks == 0:
            return None
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, f in work:
            by_topic.setdefault(name, []).append(f.result())
        return {
            "responses": [{"name": n, "partition_responses": ps} for n, ps in by_topic.items()],
            "throttle_time": 0,
        }

    # -- Fetch ------------------------------------------------------------------------

    async def fetch(self, head: RequestHead, req: Any) -> dict[str, Any]:
        """Every partition read at once; while fewer than ``min_bytes`` came and no
        partition failed, read again until ``max_wait_ms`` (at most MAX_FETCH_WAIT_S)."""
        loop = asyncio.get_running_loop()
        wait_s = min(max(req.max_wait.total_seconds(), 0.0), MAX_FETCH_WAIT_S)
        deadline = loop.time() + wait_s
        isolation = int(getattr(req, "isolation_level", 0))
        # each partition once, at its first position (Kafka's fetch keeps a map): one
        # partition named K times was read, and answered, K times
        unique: dict[tuple[str, int], tuple[str, Any]] = {}
        for t in req.topics:
            for p in t.partitions:
                unique.setdefault((t.topic, int(p.partition)), (t.topic, p))
        wanted = list(unique.values())
        answers: list[dict[str, Any]] = []
        for _ in range(int(wait_s / FETCH_POLL_S) + 2):
            answers = await asyncio.gather(
                *(self._fetch_one(topic, p, isolation) for topic, p in wanted)
            )
            size = sum(len(a["records"] or b"") for a in answers)
            failed = any(a["error_code"] != NONE for a in answers)
            if size >= max(1, req.min_bytes) or failed or loop.time() >= deadline:
                break
            await asyncio.sleep(min(FETCH_POLL_S, max(0.0, deadline - loop.time())))
        # the response's max_bytes: whole partitions while they fit, the first always
        budget = int(getattr(req, "max_bytes", 2**31 - 1))
        for a in answers:
            size = len(a["records"] or b"")
            if size and budget <= 0:
                a["records"] = b""
            budget -= size
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, _), a in zip(wanted, answers, strict=True):
            by_topic.setdefault(topic, []).append(a)
        return {
            "throttle_time": 0,
            "error_code": NONE,
            "session_id": 0,
            "responses": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }

    def _refuse_typed(self, topic: str) -> None:
        """A typed topic (one with a schema: Arrow IPC payloads, the Spark sink's) is
        neither read nor written through Kafka: its records have columns, not a key and
        a value. UNSUPPORTED_FOR_MESSAGE_FORMAT naming the format."""
        t = self.node.controller_stm.topics.get(topic)
        if t is not None and t.schema is not None:
            raise KafkaRecordError(
                UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"topic {topic!r} is a typed topic (Arrow IPC records with a schema); "
                "Kafka clients read and write only topics of keyed or plain records",
            )

    async def _fetch_one(self, topic: str, p: Any, isolation: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partition_index": p.partition,
            "error_code": NONE,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            # read_committed: the node's fetch leaves aborted data out already, and the
            # control batch that covers it (skip_batch) is no producer's: none to list
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            "records": b"",
        }
        try:
            self._refuse_typed(topic)
            resp = await self._call(
                "fetch",
                FetchRequest(
                    topic,
                    int(p.partition),
                    int(p.fetch_offset),
                    max(1, int(p.partition_max_bytes)),
                    1 if isolation == 1 else 0,
                ),
            )
            out["high_watermark"] = resp.high_watermark
            out["last_stable_offset"] = resp.last_stable_offset
            out["log_start_offset"] = resp.start_offset
            wanted = [b for b in resp.batches if b.last_offset >= p.fetch_offset]
            batches = _crc_checked(wanted)
            index = int(p.partition)
            chunks = [
                self.produced.encoded(b, topic, index) or encode_batch(b, topic) for b in batches
            ]
            seen_to = batches[-1].last_offset + 1 if batches else int(p.fetch_offset)
            if resp.next_offset > seen_to and len(batches) == len(wanted):
                # offsets the reader never sees follow (none of a bad batch's: it comes
                # next): a control batch moves it past them
                stamp = batches[-1].timestamp_ms if batches else 0
                chunks.append(skip_batch(seen_to, resp.next_offset - 1, stamp))
            out["records"] = b"".join(chunks)
        except Exception as exc:
            out["error_code"], message = kafka_code(exc)
            if out["error_code"] == UNSUPPORTED_FOR_MESSAGE_FORMAT:
                log.warning("kafka fetch of %s/%s refused: %s", topic, p.partition, message)
        return out

    # -- ListOffsets ---------------------------------------------------------------

    async def list_offsets(self, head: RequestHead, req: Any) -> dict[str, Any]:
        committed = int(getattr(req, "isolation_level", 0)) == 1

        async def one(topic: str, p: Any) -> dict[str, Any]:
            out = {
                "partition_index": p.partition_index,
                "error_code": NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            try:
                ts = int(p.timestamp)
                if ts in (_EARLIEST, _LATEST):
                    r = await self._call(
                        "list_offsets", ListOffsetsRequest(topic, int(p.partition_index))
                    )
                    if ts == _EARLIEST:
                        out["offset"] = r.start_offset
                    else:
                        out["offset"] = r.last_stable_offset if committed else r.high_watermark
                else:
                    r = await self._call(
                        "offset_for_timestamp",
                        OffsetForTimestampRequest(topic, int(p.partition_index), ts),
                    )
                    out["offset"], out["timestamp"] = r.offset, r.timestamp_ms
            except Exception as exc:
                out["error_code"], _ = kafka_code(exc)
            return out

        topics = []
        for t in req.topics:
            parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
            topics.append({"name": t.name, "partitions": list(parts)})
        return {"throttle_time": 0, "topics": topics}

    # -- CreateTopics / DeleteTopics ---------------------------------------------------

    async def create_topics(self, head: RequestHead, req: Any) -> dict[str, Any]:
        results = []
        for t in req.topics:
            code, message = NONE, None
            try:
                if req.validate_only:
                    raise RequestError(
                        ErrorCode.INVALID_REQUEST, "validate_only is not supported yet"
                    )
                if t.assignments:
                    raise RequestError(
                        ErrorCode.INVALID_REQUEST,
                        "assignments: manual replica assignment is not supported; "
                        "give num_partitions and replication_factor",
                    )
                rf = int(t.replication_factor)
                await self._call(
                    "create_topic",
                    CreateTopicRequest(
                        t.name,
                        int(t.num_partitions),
                        len(self.node.config.peers) if rf == -1 else rf,
                        configs=[ConfigEntry(c.name, c.value or "") for c in t.configs],
                    ),
                )
            except Exception as exc:
                code, message = _admin_code(exc)
            results.append({"name": t.name, "error_code": code, "error_message": message})
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, head: RequestHead, req: Any) -> dict[str, Any]:
        results = []
        for name in req.topic_names:
            code = NONE
            try:
                await self._call("delete_topic", DeleteTopicRequest(name))
            except Exception as exc:
                code, _ = _admin_code(exc)
            results.append({"name": name, "error_code": code})
        return {"throttle_time": 0, "responses": results}

    # -- DescribeConfigs -----------------------------------------------------------

    async def describe_configs(self, head: RequestHead, req: Any) -> dict[str, Any]:
        """Topic configs, as ``raftlog topic describe`` shows them
        (:mod:`raftlog.kafka.topic_configs`); an unknown topic gets
        UNKNOWN_TOPIC_OR_PARTITION, a broker resource INVALID_REQUEST (raftlog's node
        settings are its command line, not configs)."""
        synonyms = bool(getattr(req, "include_synonyms", False))

        async def one(resource: Any) -> dict[str, Any]:
            out: dict[str, Any] = {
                "error_code": NONE,
                "error_message": None,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": [],
            }
            kind = int(resource.resource_type)
            if kind != RESOURCE_TOPIC:
                what = RESOURCE_NAMES.get(kind, f"type {kind}")
                out["error_code"] = INVALID_REQUEST
                out["error_message"] = (
                    f"resource_type: {what} configs are not described; "
                    f"expected a topic ({RESOURCE_TOPIC})"
                )
                return out
            try:
                if not resource.resource_name:
                    raise RequestError(ErrorCode.UNKNOWN_TOPIC, "resource_name: a topic name")
                answer = await self._call(
                    "describe_configs", DescribeConfigsRequest([resource.resource_name])
                )
                (configs,) = answer.topics
                out["configs"] = config_entries(configs, resource.configuration_keys, synonyms)
            except Exception as exc:
                out["error_code"], out["error_message"] = kafka_code(exc)
            return out

        results = await asyncio.gather(*(one(r) for r in req.resources))
        return {"throttle_time": 0, "results": list(results)}

    # -- InitProducerId ------------------------------------------------------------

    async def init_producer_id(self, head: RequestHead, req: Any) -> dict[str, Any]:
        """An idempotent producer's id: a random 62-bit id at epoch 0, as raftlog's own
        client picks one. Each partition's rm_stm meets the id with its first batch and
        from then on dedups by (id, epoch, sequence), answering
        OUT_OF_ORDER_SEQUENCE_NUMBER and DUPLICATE_SEQUENCE_NUMBER as Kafka does.
        A transactional id is refused: Kafka transactions are a later slice."""
        out: dict[str, Any] = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
        refused = self._refused("init_producer")
        if refused is not None:
            out["error_code"] = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif req.transactional_id is not None:
            out["error_code"] = INVALID_REQUEST
        else:
            out.update(error_code=NONE, producer_id=secrets.randbits(62), producer_epoch=0)
        return out


class ClosingRefusal(Exception):
    """A request refused by closing its connection, where the API has no error to answer
    with; ``reason`` is the ``raftlog_kafka_connections_closed`` label, the message says
    what was refused and how to ask instead (the listener logs it)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _refuse_transactional(decoded: list[ProducedBatch]) -> None:
    """Refuse a produce with a transactional batch: this door has no Kafka
    transactions (InitProducerId with a transactional id is refused), so no
    coordinator would ever end one. Stored, it would open a transaction on the
    partition and hold its last stable offset, and every read_committed reader
    (the Spark source among them), until the partition's transaction timeout, and a
    client could open another each time. Kafka's leader refuses a transactional batch
    of a transaction the partition was not added to the same way (KIP-890)."""
    for i, d in enumerate(decoded):
        if d.transactional:
            raise KafkaRecordError(
                INVALID_TXN_STATE,
                f"batch {i} of the partition's records is transactional (attributes bit 4); "
                "this listener has no Kafka transactions (a transactional.id is refused), "
                "so only non-transactional batches are accepted",
            )


def _admin_code(exc: Exception) -> tuple[int, str]:
    """A controller call's Kafka code: NOT_CONTROLLER when this node does not lead it."""
    if isinstance(exc, RequestError) and exc.code is ErrorCode.NOT_LEADER:
        return NOT_CONTROLLER, str(exc)
    return kafka_code(exc)


def _topic_error(name: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "is_internal": False, "partitions": []}


def api_versions_body(error_code: int) -> dict[str, Any]:
    """An ApiVersions answer: every API and version range of this listener."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (_, low, high) in sorted(API_VERSIONS.items())
        ],
        "throttle_time": 0,
    }


_HANDLERS = {
    0: KafkaApis.produce,
    1: KafkaApis.fetch,
    2: KafkaApis.list_offsets,
    3: KafkaApis.metadata,
    17: KafkaApis.sasl_handshake,
    18: KafkaApis.api_versions,
    19: KafkaApis.create_topics,
    20: KafkaApis.delete_topics,
    22: KafkaApis.init_producer_id,
    32: KafkaApis.describe_configs,
}
