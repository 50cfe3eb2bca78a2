"""Kafka's wire messages through kio: the APIs and versions this listener answers,
request decoding, response encoding.

kio (Apache-2.0, Aiven) generates a frozen dataclass per message, version and nested
struct from Kafka's own JSON message schemas, with encoders and decoders that follow
the schemas' flexible versions, tagged fields and nullability. This module adds only
what sits around it: the version table, the header dispatch (v1 or v2 by the
request's flexibility, as the schema says) and :func:`build`, which fills a response
of any version from one set of values (fields a version lacks are left out).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import typing
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KafkaError
from kio.serial import entity_reader, entity_writer

__all__ = [
    "API_VERSIONS",
    "KafkaError",
    "RequestHead",
    "build",
    "encode_response",
    "read_head",
    "read_request",
]

#: api key -> (name, lowest version, highest version) this listener answers. Metadata
#: stops below v7: v7+ carries leader epochs, which would ask for OffsetForLeaderEpoch.
API_VERSIONS: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 8),
    1: ("Fetch", 4, 11),
    2: ("ListOffsets", 1, 5),
    3: ("Metadata", 0, 6),
    # consumer groups (raftlog.kafka.groups)
    8: ("OffsetCommit", 2, 7),
    9: ("OffsetFetch", 1, 5),
    10: ("FindCoordinator", 0, 2),
    11: ("JoinGroup", 0, 5),
    12: ("Heartbeat", 0, 3),
    13: ("LeaveGroup", 0, 3),
    14: ("SyncGroup", 0, 3),
    15: ("DescribeGroups", 0, 6),
    16: ("ListGroups", 0, 5),
    # v1 only: v0 sends the SASL tokens after the handshake without Kafka's framing
    17: ("SaslHandshake", 1, 1),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 4),
    20: ("DeleteTopics", 1, 3),
    22: ("InitProducerId", 0, 1),
    # v0 is gone from Kafka's schemas (Kafka 4 dropped it); every current client sends v1+
    32: ("DescribeConfigs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    42: ("DeleteGroups", 0, 2),
    47: ("OffsetDelete", 0, 0),
}

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
_KEY_VERSION = struct.Struct(">hh")


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHead:
    """A request's header: which API, version, correlation id, client id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class UnsupportedRequest(Exception):
    """A request of an API or version not in :data:`API_VERSIONS` (``head`` says which)."""

    def __init__(self, head: RequestHead, message: str) -> None:
        super().__init__(message)
        self.head = head


def read_head(frame: bytes) -> tuple[RequestHead, int]:
    """The request header of ``frame`` (a request without its size prefix) and where
    its body starts.

    The header's version follows the body's schema (v2 for flexible versions, else
    v1); an API or version not answered here raises UnsupportedRequest once the
    correlation id is known (v1's fields are a prefix of v2's). ValueError (or kio's
    decoding errors) for a frame too short for its header.
    """
    if len(frame) < _KEY_VERSION.size + 4:
        raise ValueError(f"a request of {len(frame)} bytes is shorter than its header")
    key, version = _KEY_VERSION.unpack_from(frame, 0)
    known = API_VERSIONS.get(key)
    if known is None or not known[1] <= version <= known[2]:
        from kio.schema.request_header.v1.header import RequestHeader

        h, _ = entity_reader(RequestHeader)(frame, 0)
        head = RequestHead(key, version, int(h.correlation_id), h.client_id)
        what = "unknown API key" if known is None else f"{known[0]} version"
        raise UnsupportedRequest(head, f"{what} {key if known is None else version}")
    schema = load_request_schema(key, version)
    h, size = entity_reader(schema.__header_schema__)(frame, 0)
    return RequestHead(key, version, int(h.correlation_id), h.client_id), size


def read_request(head: RequestHead, frame: bytes, offset: int) -> Any:
    """The request body of ``frame`` from ``offset``, decoded by its kio schema; the
    body must end where the frame does."""
    body, size = entity_reader(load_request_schema(head.api_key, head.api_version))(frame, offset)
    if offset + size != len(frame):
        raise ValueError(f"{len(frame) - offset - size} bytes follow the request body")
    return body


def encode_response(head: RequestHead, body: Any) -> bytes:
    """Response header (v0 or v1, as ``body``'s schema says) and ``body``, without the
    size prefix."""
    schema = type(body)
    out = io.BytesIO()
    header = schema.__header_schema__
    entity_writer(header)(out, header(correlation_id=head.correlation_id))
    entity_writer(schema)(out, body)
    return out.getvalue()


def response_schema(head: RequestHead) -> type:
    """The kio response class of ``head``'s API and version."""
    return load_response_schema(head.api_key, head.api_version)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _nested(hint: Any) -> type | None:
    """The entity class inside ``tuple[X, ...]`` / ``X | None`` hints, if any."""
    for arg in typing.get_args(hint) or ():
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
        inner = _nested(arg)
        if inner is not None:
            return inner
    return None


def build(cls: type, values: dict[str, Any]) -> Any:
    """An instance of kio entity ``cls`` from ``values``: keys ``cls`` has no field for
    are dropped (another version's), nested entities come as dicts or lists of dicts,
    error codes as ints, durations as milliseconds; absent fields take their default."""
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        hint = hints[f.name]
        inner = _nested(hint)
        if inner is not None and value is not None:
            if isinstance(value, dict):
                value = build(inner, value)
            else:
                value = tuple(build(inner, v) for v in value)
        elif f.metadata.get("kafka_type") == "error_code":
            value = KafkaError(value)
        elif f.metadata.get("kafka_type") in ("timedelta_i32", "timedelta_i64"):
            value = datetime.timedelta(milliseconds=value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)
