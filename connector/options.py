"""Parsing and validation of the connector's options (sink and source).

Spark hands a data source its options as strings under lowercased keys, so
every option here is matched case-insensitively and converted from a string.
A bad value raises :class:`OptionError`, whose text names the option (in its
documented spelling) and the expected form, e.g.::

    option 'acks' must be one of all, 1, 0; got 'two'

Where the cluster is: option ``servers``, else the environment variable
``RAFTLOG_SERVERS``, else (None) the embedded local cluster; the auth token:
option ``authToken``, else ``RAFTLOG_AUTH_TOKEN``. The environment read is the
one of the Python process that parses the options: a planner worker of the
Spark driver, which inherits the environment that the driver was started with.
(Spark confs such as ``spark.raftlog.servers`` cannot be read there: Spark hands
a Python data source its options only, and its planner workers have no session.)

Unknown options: Spark itself passes options of its own (``path``,
``checkpointLocation``, ...), and Kafka's source ignores what it does not
know, so unknown keys are ignored -- except those that look like a typo of one
of ours (edit distance <= 2, e.g. ``maxRecordsPerTriger``), and those that
belong to the other direction (``acks`` on a read, ``startingOffsets`` on a
write). Those fail loudly, because silently ignoring them would run the job
with a setting the user did not ask for.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping

from pyspark_raftlog.errors import OptionError

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "OffsetSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "parse_sink_options",
    "parse_source_options",
]

DEFAULT_CHUNK_BYTES = 1024 * 1024
MIN_CHUNK_BYTES = 1024
# The engine rejects payloads above 64 MiB (raftlog.storage.batch.MAX_PAYLOAD_BYTES);
# the connector may not import the engine, so the bound is restated here.
MAX_CHUNK_BYTES = 64 * 1024 * 1024
# Kafka caps in-flight requests of an idempotent producer at 5; rm_stm keeps the
# last 5 batches per producer for deduplication, so more could not be retried safely.
MAX_IN_FLIGHT = 5
# A prepared transaction stays open from the task's first write to the driver's
# decision; the partition aborts it after this long (capped by the server's
# --max-transaction-timeout-ms). Restated from raftlog.client.transactions.
DEFAULT_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
MAX_TRANSACTION_TIMEOUT_MS = 24 * 3600 * 1000

SINK_OPTIONS = (
    "topic",
    "servers",
    "authToken",
    "acks",
    "partitions",
    "replicationFactor",
    "chunkBytes",
    "maxInFlight",
    "requestTimeoutMs",
    "txnAppId",
    "txnVersion",
    "deliveryGuarantee",
    "transactionTimeoutMs",
)
SOURCE_OPTIONS = (
    "topic",
    "servers",
    "authToken",
    "startingOffsets",
    "endingOffsets",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "requestTimeoutMs",
)

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# ASCII digits with bounded length: `\d` admits other scripts' digits, and int() of
# thousands of digits raises ValueError (or is slow) instead of an OptionError.
_SERVER_RE = re.compile(
    r"^(?:http://)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})$"
)
_SIZE_RE = re.compile(r"^(?P<num>[0-9]{1,18})\s*(?P<unit>[kmg]i?b?|b)?$", re.IGNORECASE)
_INT_RE = re.compile(r"^[+-]?[0-9]{1,18}$")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


@dataclasses.dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    ``kind`` is ``"earliest"``, ``"latest"`` or ``"json"``; for ``"json"``,
    ``offsets`` maps partition -> offset, where -2 means earliest and -1 latest
    (Kafka's convention).
    """

    kind: str
    offsets: Mapping[int, int] = dataclasses.field(default_factory=dict)
    topic: str | None = None  # the topic the JSON is keyed by (kind "json" only)


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write (stream or batch)."""

    topic: str
    servers: tuple[str, ...] | None = None
    auth_token: str | None = dataclasses.field(default=None, repr=False)  # a secret: no repr
    acks: str = "all"
    partitions: int | None = None
    replication_factor: int = 3
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    max_in_flight: int = MAX_IN_FLIGHT
    request_timeout_ms: int = 30_000
    txn_app_id: str | None = None
    txn_version: int | None = None
    exactly_once: bool = True  # deliveryGuarantee
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """Validated options of a read (stream or batch)."""

    topic: str
    servers: tuple[str, ...] | None = None
    auth_token: str | None = dataclasses.field(default=None, repr=False)  # a secret: no repr
    starting_offsets: OffsetSpec | None = None  # None: the direction's default
    ending_offsets: OffsetSpec | None = None
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    request_timeout_ms: int = 30_000

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Validate the options of a write; raise :class:`OptionError` on the first bad one.

    ``streaming`` is False for ``df.write`` (where ``txnAppId``/``txnVersion``
    make the write idempotent) and True for ``df.writeStream`` (where the
    micro-batch id plays that role, so the two options are rejected).
    """
    opts = _normalize(options, SINK_OPTIONS, SOURCE_OPTIONS, direction="writes")
    txn_app_id = _opt_str(opts, "txnAppId")
    txn_version = _opt_int(opts, "txnVersion", minimum=0)
    if streaming and (txn_app_id is not None or txn_version is not None):
        raise OptionError(
            "options 'txnAppId' and 'txnVersion' apply to batch writes (df.write) only; "
            "a streaming write is already exactly-once by its micro-batch id"
        )
    if (txn_app_id is None) != (txn_version is None):
        raise OptionError(
            "options 'txnAppId' and 'txnVersion' must be given together "
            "(txnAppId: a non-empty string, txnVersion: an integer >= 0)"
        )
    acks = opts.get("acks", "all").strip().lower()
    if acks == "-1":  # Kafka's spelling of all
        acks = "all"
    if acks not in ("all", "1", "0"):
        raise OptionError(f"option 'acks' must be one of all, 1, 0; got {opts['acks']!r}")
    guarantee = opts.get("deliveryguarantee", "exactly-once").strip().lower()
    if guarantee not in ("exactly-once", "at-least-once"):
        raise OptionError(
            f"option 'deliveryGuarantee' must be one of exactly-once, at-least-once; "
            f"got {opts['deliveryguarantee']!r}"
        )
    exactly_once = guarantee == "exactly-once"
    if exactly_once and acks != "all":
        # a commit marker acknowledged by the leader alone can vanish with it
        raise OptionError(
            f"option 'acks' must be 'all' for exactly-once writes (deliveryGuarantee "
            f"exactly-once, the default); got {opts['acks']!r}. acks 1 and 0 are for "
            f"deliveryGuarantee at-least-once"
        )
    if not exactly_once and txn_app_id is not None:
        raise OptionError(
            "options 'txnAppId' and 'txnVersion' need deliveryGuarantee exactly-once "
            "(the default); got deliveryGuarantee at-least-once"
        )
    return SinkOptions(
        topic=_topic(opts),
        servers=_servers(opts),
        auth_token=_auth_token(opts),
        acks=acks,
        partitions=_opt_int(opts, "partitions", minimum=1, maximum=10_000),
        replication_factor=_opt_int(opts, "replicationFactor", minimum=1, maximum=64) or 3,
        chunk_bytes=_opt_size(opts, "chunkBytes", MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        or DEFAULT_CHUNK_BYTES,
        max_in_flight=_opt_int(opts, "maxInFlight", minimum=1, maximum=MAX_IN_FLIGHT)
        or MAX_IN_FLIGHT,
        request_timeout_ms=_opt_int(opts, "requestTimeoutMs", minimum=1, maximum=3_600_000)
        or 30_000,
        txn_app_id=txn_app_id,
        txn_version=txn_version,
        exactly_once=exactly_once,
        transaction_timeout_ms=_opt_int(
            opts, "transactionTimeoutMs", minimum=1, maximum=MAX_TRANSACTION_TIMEOUT_MS
        )
        or DEFAULT_TRANSACTION_TIMEOUT_MS,
    )


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate the options of a read; raise :class:`OptionError` on the first bad one.

    ``endingOffsets`` is for batch reads only, as in Kafka's source;
    ``streaming=None`` (not yet known, as in ``DataSource.schema()``) skips the
    checks that depend on the direction.
    """
    opts = _normalize(options, SOURCE_OPTIONS, SINK_OPTIONS, direction="reads")
    starting = _opt_offset_spec(opts, "startingOffsets", allow_earliest=True)
    ending = _opt_offset_spec(opts, "endingOffsets", allow_earliest=False)
    if streaming is True and ending is not None:
        raise OptionError(
            "option 'endingOffsets' applies to batch reads (spark.read) only; "
            "a stream has no end (use Trigger.AvailableNow to read what is there and stop)"
        )
    if streaming is False and starting is not None and starting.kind == "latest":
        raise OptionError(
            "option 'startingOffsets' cannot be 'latest' for a batch read; "
            'expected \'earliest\' or JSON like {"<topic>": {"0": 42}}'
        )
    if streaming is False and ("maxrecordspertrigger" in opts or "maxbytespertrigger" in opts):
        raise OptionError(
            "options 'maxRecordsPerTrigger' and 'maxBytesPerTrigger' apply to streaming reads "
            "only; a batch read reads from startingOffsets to endingOffsets"
        )
    topic = _topic(opts)
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if spec is not None and spec.kind == "json" and spec.topic != topic:
            raise OptionError(
                f"option '{name}' names topic {spec.topic!r}, "
                f"but option 'topic' is {topic!r}; the JSON must be keyed by the topic read"
            )
    return SourceOptions(
        topic=topic,
        servers=_servers(opts),
        auth_token=_auth_token(opts),
        starting_offsets=starting,
        ending_offsets=ending,
        max_records_per_trigger=_opt_int(opts, "maxRecordsPerTrigger", minimum=1),
        max_bytes_per_trigger=_opt_size(opts, "maxBytesPerTrigger", 1, None),
        min_partitions=_opt_int(opts, "minPartitions", minimum=1, maximum=100_000),
        fail_on_data_loss=_opt_bool(opts, "failOnDataLoss", default=True),
        request_timeout_ms=_opt_int(opts, "requestTimeoutMs", minimum=1, maximum=3_600_000)
        or 30_000,
    )


# --- helpers -----------------------------------------------------------------------------


def _normalize(
    options: Mapping[str, str],
    known: tuple[str, ...],
    other_direction: tuple[str, ...],
    *,
    direction: str,
) -> dict[str, str]:
    """Lowercase the keys; reject typos of known options and options of the other direction."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    known_lower = {k.lower(): k for k in known}
    other_lower = {k.lower(): k for k in other_direction if k.lower() not in known_lower}
    for key in opts:
        if key in known_lower:
            continue
        if key in other_lower:
            other = "reads" if direction == "writes" else "writes"
            raise OptionError(
                f"option '{other_lower[key]}' applies to {other}, not {direction}; "
                f"options for {direction}: {', '.join(known)}"
            )
        close = [name for low, name in known_lower.items() if _edit_distance(key, low) <= 2]
        if close and len(key) >= 4:
            raise OptionError(
                f"unknown option '{key}'; did you mean '{close[0]}'? "
                f"options for {direction}: {', '.join(known)}"
            )
    return opts


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance; both strings are option names (short), so O(len^2) is fine."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _topic(opts: Mapping[str, str]) -> str:
    topic = opts.get("topic")
    if topic is None:
        raise OptionError(
            "option 'topic' is required: the name of the raftlog topic "
            "(letters, digits, '.', '_', '-'; at most 249 characters)"
        )
    if not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise OptionError(
            "option 'topic' must be 1 to 249 characters of letters, digits, '.', '_' or '-'; "
            f"got {topic!r}"
        )
    return topic


def _servers(opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """Option ``servers``, else ``$RAFTLOG_SERVERS``, else None (the embedded cluster)."""
    raw = opts.get("servers")
    source = "option 'servers'"
    if raw is None:
        raw = os.environ.get("RAFTLOG_SERVERS", "").strip() or None
        if raw is None:
            return None
        source = "RAFTLOG_SERVERS (read because option 'servers' is not set)"
    servers = tuple(s.strip() for s in raw.split(",") if s.strip())
    if not servers:
        raise OptionError(
            "option 'servers' must be a comma-separated list of host:port; got an empty value "
            "(leave the option out to use the embedded local cluster)"
        )
    for server in servers:
        m = _SERVER_RE.match(server)
        if not m or not 1 <= int(m.group("port")) <= 65535:
            raise OptionError(
                f"{source} must be a comma-separated list of host:port "
                f"(port 1-65535), e.g. 'localhost:9092,localhost:9093'; got {server!r}"
            )
    return servers


def _auth_token(opts: Mapping[str, str]) -> str | None:
    """Option ``authToken``, else ``$RAFTLOG_AUTH_TOKEN``, else None (no auth).

    The token is sent as ``Authorization: Bearer <token>``, so it must be one
    header-safe word: printable ASCII without spaces.
    """
    raw = opts.get("authtoken")
    source = "option 'authToken'"
    if raw is None:
        raw = os.environ.get("RAFTLOG_AUTH_TOKEN") or None
        if raw is None:
            return None
        source = "RAFTLOG_AUTH_TOKEN (read because option 'authToken' is not set)"
    token = raw.strip()
    # Never echo the value: it is a secret, and error messages end up in logs.
    if not token:
        raise OptionError(
            f"{source} must be a non-empty token (the cluster's --auth-token); got an empty value"
        )
    if len(token) > 4096 or not all(33 <= ord(c) <= 126 for c in token):
        raise OptionError(
            f"{source} must be at most 4096 printable ASCII characters without spaces "
            "(the cluster's --auth-token); the value given is not"
        )
    return token


def _opt_str(opts: Mapping[str, str], name: str) -> str | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    if not raw.strip():
        raise OptionError(f"option '{name}' must be a non-empty string; got {raw!r}")
    return raw.strip()


def _opt_int(
    opts: Mapping[str, str], name: str, *, minimum: int, maximum: int | None = None
) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
    if not _INT_RE.match(raw.strip()):
        raise OptionError(f"option '{name}' must be an integer {bound}; got {raw!r}")
    value = int(raw.strip())
    if value < minimum or (maximum is not None and value > maximum):
        raise OptionError(f"option '{name}' must be an integer {bound}; got {raw!r}")
    return value


def _opt_size(opts: Mapping[str, str], name: str, minimum: int, maximum: int | None) -> int | None:
    """A byte size: a plain integer, or with a unit k, m or g (KiB, MiB, GiB), e.g. '512k'."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
    m = _SIZE_RE.match(raw.strip())
    if not m:
        raise OptionError(
            f"option '{name}' must be a size in bytes {bound}, as an integer or with a unit "
            f"k, m or g (e.g. '1048576' or '1m'); got {raw!r}"
        )
    unit = (m.group("unit") or "").lower()[:1]
    value = int(m.group("num")) * _SIZE_UNITS[unit]
    if value < minimum or (maximum is not None and value > maximum):
        raise OptionError(
            f"option '{name}' must be a size in bytes {bound}; got {raw!r} ({value} bytes)"
        )
    return value


def _opt_bool(opts: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false; got {raw!r}")
    return value == "true"


def _opt_offset_spec(
    opts: Mapping[str, str], name: str, *, allow_earliest: bool
) -> OffsetSpec | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    value = raw.strip()
    words = ("earliest", "latest") if allow_earliest else ("latest",)
    expected = (
        f"expected {' or '.join(repr(w) for w in words)}, or JSON like "
        '{"<topic>": {"0": 42, "1": -2}} (-2 = earliest, -1 = latest)'
    )
    if value.lower() in words:
        return OffsetSpec(kind=value.lower())
    if not value.startswith("{"):
        raise OptionError(f"option '{name}': {expected}; got {raw!r}")
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError is a ValueError; an integer too long to convert raises a plain
        # ValueError and deep nesting a RecursionError: all are bad input, not crashes.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise OptionError(f"option '{name}' is not valid JSON ({reason}); {expected}") from None
    if not isinstance(doc, dict) or len(doc) != 1:
        raise OptionError(f"option '{name}' must hold exactly one topic; {expected}; got {raw!r}")
    ((topic, parts),) = doc.items()
    if not isinstance(parts, dict) or not parts:
        raise OptionError(
            f"option '{name}' must map topic {topic!r} to partition offsets; {expected}"
        )
    offsets: dict[int, int] = {}
    for key, off in parts.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 9):
            raise OptionError(
                f"option '{name}': partition keys must be non-negative integers as strings; "
                f"got {key!r}"
            )
        lowest = -2 if allow_earliest else -1
        if isinstance(off, bool) or not isinstance(off, int) or off < lowest:
            raise OptionError(
                f"option '{name}': the offset of partition {key} must be an integer >= {lowest} "
                f"(-2 = earliest, -1 = latest); got {off!r}"
            )
        offsets[int(key)] = off
    return OffsetSpec(kind="json", offsets=offsets, topic=topic)
