"""Parsing and validation of the connector's options (sink and source).

Spark hands a data source its options as strings under lowercased keys, so
every option here is matched case-insensitively and converted from a string.
A bad value raises :class:`OptionError`, whose text names the option (in its
documented spelling) and the expected form, e.g.::

    option 'acks' must be one of all, 1, 0; got 'two'

Where the cluster is: option ``servers``, else the environment variable
``RAFTLOG_SERVERS``, else (None) the embedded local cluster; the auth token:
option ``authToken``, else ``RAFTLOG_AUTH_TOKEN``; the CA file that turns on
TLS: option ``tlsCaFile``, else ``RAFTLOG_TLS_CA`` (checked here: it must be a
readable file). The environment read is the
one of the Python process that parses the options: a planner worker of the
Spark driver, which inherits the environment that the driver was started with.
(Spark confs such as ``spark.raftlog.servers`` cannot be read there: Spark hands
a Python data source its options only, and its planner workers have no session.)

Unknown options are refused, each by its name: a pipeline ported from
``format("kafka")`` must not run with settings that nobody chose. Where a
raftlog option does the job of a Kafka one (``kafka.bootstrap.servers`` ->
``servers``), the error names it; otherwise it suggests the closest known
name (difflib). Kafka's ``maxOffsetsPerTrigger`` is accepted as an alias of
``maxRecordsPerTrigger``. Durations (``maxTriggerDelay``) are Spark's spelling,
a number with a unit (``15m``, ``30s``, ``100ms``), parsed by pytimeparse2.
Accepted without a meaning here: the options Spark itself hands a data source
(:data:`SPARK_OPTIONS`, and keys starting with ``__``, Spark's internal ones).
Options of the other direction (``acks`` on a read, ``startingOffsets`` on a
write) are refused naming the direction.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Mapping

import pytimeparse2
from pyspark_raftlog.errors import OptionError

from raftlog.client.transactions import DEFAULT_TRANSACTION_TIMEOUT_MS
from raftlog.records.compression import CODEC_NAMES

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_LINGER_MS",
    "KAFKA_COLUMNS",
    "OffsetSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "WriteLayout",
    "check_write_columns",
    "parse_sink_options",
    "parse_source_options",
]

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
MIN_CHUNK_BYTES = 1024
# The engine rejects payloads above 64 MiB (raftlog.storage.batch.MAX_PAYLOAD_BYTES);
# the connector may not import the engine, so the bound is restated here.
MAX_CHUNK_BYTES = 64 * 1024 * 1024
# Kafka caps in-flight requests of an idempotent producer at 5; rm_stm keeps the
# last 5 batches per producer for deduplication, so more could not be retried safely.
MAX_IN_FLIGHT = 5
# The longest rows wait in a task for a full ``chunkBytes`` payload (Kafka's linger.ms,
# counted, as there, from the first row that waits). Long enough that Spark's input, which
# comes in Arrow batches of 10,000 rows some 50-100 ms apart per task, fills 4 MiB payloads:
# with 20 ms, every Spark batch (1.2 MB of the benchmark's rows) went alone, and the nodes
# spent 1.7 CPU-s per million rows against 1.1 with full payloads (benchmarks spark). It
# delays nothing a reader sees under exactly-once (rows show at the micro-batch's commit);
# at-least-once rows of a slow upstream show up to this much later.
DEFAULT_LINGER_MS = 1000
MAX_TRANSACTION_TIMEOUT_MS = 24 * 3600 * 1000
# Kafka's source default for maxTriggerDelay
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

SINK_OPTIONS = (
    "topic",
    "servers",
    "authToken",
    "tlsCaFile",
    "acks",
    "partitions",
    "replicationFactor",
    "chunkBytes",
    "lingerMs",
    "maxInFlight",
    "requestTimeoutMs",
    "txnAppId",
    "txnVersion",
    "deliveryGuarantee",
    "transactionTimeoutMs",
    "partitionBy",
    "compression",
)
SOURCE_OPTIONS = (
    "topic",
    "subscribe",
    "subscribePattern",
    "servers",
    "authToken",
    "tlsCaFile",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "maxRecordsPerTrigger",
    "maxOffsetsPerTrigger",
    "maxBytesPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "failOnDataLoss",
    "requestTimeoutMs",
)

# Options that Spark itself puts into a data source's options (DataFrameReader.load(path),
# DataStreamWriter.option("checkpointLocation"), queryName): accepted and ignored. Keys
# starting with "__" are Spark's internal ones (e.g. "__partition_columns").
SPARK_OPTIONS = ("path", "paths", "checkpointLocation", "queryName")

# The columns Kafka's sink reads: a DataFrame with ``value`` and only these is written
# as raw records (raftlog.records.framing); ``topic`` and ``partition`` route rows.
KAFKA_COLUMNS = ("key", "value", "headers", "topic", "partition", "timestamp")

# Kafka's options (lowercased) whose job a raftlog option does: the refusal names it.
_KAFKA_EQUIVALENTS = {
    "kafka.bootstrap.servers": "servers",
    "kafka.ssl.truststore.location": "tlsCaFile",
    "kafka.acks": "acks",
    "kafka.request.timeout.ms": "requestTimeoutMs",
    "kafka.default.api.timeout.ms": "requestTimeoutMs",
    "kafka.delivery.timeout.ms": "requestTimeoutMs",
    "kafka.max.in.flight.requests.per.connection": "maxInFlight",
    "kafka.batch.size": "chunkBytes",
    "kafka.max.request.size": "chunkBytes",
    "kafka.linger.ms": "lingerMs",
    "kafka.transaction.timeout.ms": "transactionTimeoutMs",
    "kafka.compression.type": "compression",
    "kafka.transactional.id": "txnAppId",
    "kafka.security.protocol": "authToken",
    "kafka.sasl.jaas.config": "authToken",
    "kafka.sasl.mechanism": "authToken",
    "kafka.max.partition.fetch.bytes": "maxBytesPerTrigger",
    "fetchoffset.numretries": "requestTimeoutMs",
    "fetchoffset.retryintervalms": "requestTimeoutMs",
    "kafkaconsumer.polltimeoutms": "requestTimeoutMs",
    "assign": "startingOffsets",
}
# Kafka options with no raftlog counterpart, and why (the refusal says so).
_KAFKA_WITHOUT_EQUIVALENT = {
    "kafka.isolation.level": "raftlog always reads committed data (read_committed)",
    "kafka.group.id": "raftlog has no consumer groups: a query's position is its checkpoint",
    "groupidprefix": "raftlog has no consumer groups: a query's position is its checkpoint",
    "includeheaders": "headers are always read where they were written",
    "kafka.enable.idempotence": "raftlog writes are always idempotent",
    "startingoffsetsbytimestampstrategy": "not supported yet",
    "endingoffsetsbytimestamp": "not supported yet",
}

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
    topic: str | None = None  # the (first) topic the JSON is keyed by (kind "json" only)
    # kind "json": topic -> partition -> offset, for every topic the JSON names
    by_topic: Mapping[str, Mapping[int, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write (stream or batch).

    ``topic`` is None when the rows name their topic in a ``topic`` column
    (checked when the DataFrame's schema is known). ``partition_by`` holds the
    ``partitionBy`` column names, in order (empty: not given).
    ``compression`` is the codec payloads are compressed with (none, lz4,
    zstd), or None when not given: then each topic's ``compression.type``.
    """

    topic: str | None
    servers: tuple[str, ...] | None = None
    auth_token: str | None = dataclasses.field(default=None, repr=False)  # a secret: no repr
    tls_ca_file: str | None = None  # PEM CA: HTTPS to every node, verified by it
    acks: str = "all"
    partitions: int | None = None
    # None: the cluster's default (3, capped at the node count); an explicit one above
    # the node count is refused when the sink creates the topic
    replication_factor: int | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    linger_ms: int = DEFAULT_LINGER_MS
    max_in_flight: int = MAX_IN_FLIGHT
    request_timeout_ms: int = 30_000
    txn_app_id: str | None = None
    txn_version: int | None = None
    exactly_once: bool = True  # deliveryGuarantee
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    partition_by: tuple[str, ...] = ()
    compression: str | None = None

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """Validated options of a read (stream or batch).

    Exactly one of ``topic``/``subscribe`` (both give ``topics``) and
    ``subscribePattern`` (``pattern``, a regex that must match a whole topic
    name, as Kafka's does) is set.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    servers: tuple[str, ...] | None = None
    auth_token: str | None = dataclasses.field(default=None, repr=False)  # a secret: no repr
    tls_ca_file: str | None = None  # PEM CA: HTTPS to every node, verified by it
    starting_offsets: OffsetSpec | None = None  # None: the direction's default
    ending_offsets: OffsetSpec | None = None
    # ms since the epoch: start each partition at its first batch appended at or after it
    # (through the partition's time index); takes precedence over starting_offsets, as
    # Kafka's startingTimestamp does. A partition with no such batch starts at its end.
    starting_timestamp: int | None = None
    # topic -> partition -> ms: the same per partition (startingOffsetsByTimestamp); it
    # must name every partition read. Below starting_timestamp, above starting_offsets.
    starting_offsets_by_timestamp: Mapping[str, Mapping[int, int]] | None = None
    # batch reads: each partition ends before its first batch appended at or after it
    # (endingTimestamp; at its end when there is none), as Kafka's does
    ending_timestamp: int | None = None
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    # minOffsetsPerTrigger: a trigger finding fewer new offsets is skipped until
    # maxTriggerDelay (ms) has passed since the last batch (Kafka's rule)
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    request_timeout_ms: int = 30_000

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0

    @property
    def topic(self) -> str:
        """A label for messages: the one topic, the list, or the pattern."""
        if self.pattern is not None:
            return f"pattern {self.pattern}"
        return ",".join(self.topics)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this read subscribes to."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


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
    compression = opts.get("compression")
    if compression is not None:
        compression = compression.strip().lower()
        if compression not in CODEC_NAMES:
            raise OptionError(
                f"option 'compression' must be one of {', '.join(CODEC_NAMES)}, "
                f"got {opts['compression']!r}"
            )
    linger_ms = _opt_int(opts, "lingerMs", minimum=0, maximum=3_600_000)  # 0 is valid
    return SinkOptions(
        topic=_topic(opts, required=False),
        compression=compression,
        partition_by=_opt_columns(opts, "partitionBy"),
        servers=_servers(opts),
        auth_token=_auth_token(opts),
        tls_ca_file=_tls_ca_file(opts),
        acks=acks,
        partitions=_opt_int(opts, "partitions", minimum=1, maximum=10_000),
        replication_factor=_opt_int(opts, "replicationFactor", minimum=1, maximum=64),
        chunk_bytes=_opt_size(opts, "chunkBytes", MIN_CHUNK_BYTES, MAX_CHUNK_BYTES)
        or DEFAULT_CHUNK_BYTES,
        linger_ms=DEFAULT_LINGER_MS if linger_ms is None else linger_ms,
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
    per_trigger = (
        "maxrecordspertrigger",
        "maxoffsetspertrigger",
        "maxbytespertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
    )
    if streaming is False and any(k in opts for k in per_trigger):
        raise OptionError(
            "options 'maxRecordsPerTrigger' (alias 'maxOffsetsPerTrigger'), "
            "'maxBytesPerTrigger', 'minOffsetsPerTrigger' and 'maxTriggerDelay' apply to "
            "streaming reads only; a batch read reads from startingOffsets to endingOffsets"
        )
    topics, pattern = _subscription(opts)
    by_timestamp = _opt_timestamps_by_partition(opts, "startingOffsetsByTimestamp")
    ending_timestamp = _opt_int(opts, "endingTimestamp", minimum=0)
    if streaming is True and ending_timestamp is not None:
        raise OptionError(
            "option 'endingTimestamp' applies to batch reads (spark.read) only; "
            "a stream has no end (use Trigger.AvailableNow to read what is there and stop)"
        )
    if by_timestamp is not None:
        if pattern is not None:
            raise OptionError(
                "option 'startingOffsetsByTimestamp' cannot be used with 'subscribePattern' "
                "(the topics are not known in advance); use 'startingTimestamp'"
            )
        strangers = sorted(set(by_timestamp) - set(topics))
        if strangers:
            raise OptionError(
                f"option 'startingOffsetsByTimestamp' names topic(s) {strangers} that are not "
                f"read (topics read: {', '.join(topics)})"
            )
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if spec is None or spec.kind != "json":
            continue
        if pattern is not None:
            raise OptionError(
                f"option '{name}' cannot be JSON with 'subscribePattern' (the topics are not "
                "known in advance); use 'earliest' or 'latest'"
            )
        strangers = sorted(set(spec.by_topic) - set(topics))
        if strangers:
            raise OptionError(
                f"option '{name}' names topic(s) {strangers} that are not read "
                f"(topics read: {', '.join(topics)}); the JSON must be keyed by the topics read"
            )
    records = _opt_int(opts, "maxRecordsPerTrigger", minimum=1)
    alias = _opt_int(opts, "maxOffsetsPerTrigger", minimum=1)
    if records is not None and alias is not None and records != alias:
        raise OptionError(
            "options 'maxRecordsPerTrigger' and 'maxOffsetsPerTrigger' (its Kafka alias) "
            f"disagree ({records} vs {alias}); give one of them"
        )
    max_records = records if records is not None else alias
    min_offsets = _opt_int(opts, "minOffsetsPerTrigger", minimum=1)
    delay_ms = _opt_duration_ms(opts, "maxTriggerDelay")
    if delay_ms is not None and min_offsets is None:
        raise OptionError(
            "option 'maxTriggerDelay' bounds how long 'minOffsetsPerTrigger' holds a batch "
            "back; give 'minOffsetsPerTrigger' too, or leave 'maxTriggerDelay' out"
        )
    if min_offsets is not None and max_records is not None and min_offsets > max_records:
        raise OptionError(
            f"option 'minOffsetsPerTrigger' ({min_offsets}) must not exceed "
            f"'maxOffsetsPerTrigger'/'maxRecordsPerTrigger' ({max_records})"
        )
    return SourceOptions(
        topics=topics,
        pattern=pattern,
        servers=_servers(opts),
        auth_token=_auth_token(opts),
        tls_ca_file=_tls_ca_file(opts),
        starting_offsets=starting,
        starting_timestamp=_opt_int(opts, "startingTimestamp", minimum=0),
        starting_offsets_by_timestamp=by_timestamp,
        ending_offsets=ending,
        ending_timestamp=ending_timestamp,
        max_records_per_trigger=max_records,
        max_bytes_per_trigger=_opt_size(opts, "maxBytesPerTrigger", 1, None),
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if delay_ms is None else delay_ms,
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
    """Lowercase the keys; refuse every key that is not an option of ``direction``.

    Spark's own options (:data:`SPARK_OPTIONS`, ``__``-prefixed keys) pass. The
    error names the key, and where one exists the raftlog option that does its job.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    known_lower = {k.lower(): k for k in known}
    other_lower = {k.lower(): k for k in other_direction if k.lower() not in known_lower}
    spark_lower = {k.lower() for k in SPARK_OPTIONS}
    listing = f"options for {direction}: {', '.join(known)}"
    for key in opts:
        if key in known_lower or key in spark_lower or key.startswith("__"):
            continue
        if key in other_lower:
            other = "reads" if direction == "writes" else "writes"
            raise OptionError(
                f"option '{other_lower[key]}' applies to {other}, not {direction}; {listing}"
            )
        equivalent = _KAFKA_EQUIVALENTS.get(key)
        if equivalent is not None:
            raise OptionError(
                f"option '{key}' is Kafka's; raftlog does not know it: use option "
                f"'{equivalent}' instead (see docs/kafka.md)"
            )
        why = _KAFKA_WITHOUT_EQUIVALENT.get(key)
        if why is not None:
            raise OptionError(
                f"option '{key}' is not supported by raftlog: {why} (see docs/kafka.md)"
            )
        if key.startswith("kafka."):
            raise OptionError(
                f"option '{key}' is a Kafka client setting; raftlog has no Kafka client, so it "
                f"is refused rather than ignored (see docs/kafka.md); {listing}"
            )
        close = difflib.get_close_matches(key, list(known_lower), n=1, cutoff=0.75)
        hint = f"did you mean '{known_lower[close[0]]}'? " if close else ""
        raise OptionError(f"unknown option '{key}'; {hint}{listing}")
    return opts


def check_topic_name(topic: str, option: str) -> str:
    if not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise OptionError(
            f"option '{option}' must name topics of 1 to 249 characters of letters, digits, "
            f"'.', '_' or '-'; got {topic!r}"
        )
    return topic


def _topic(opts: Mapping[str, str], *, required: bool = True) -> str | None:
    topic = opts.get("topic")
    if topic is None:
        if not required:
            return None
        raise OptionError(
            "option 'topic' is required: the name of the raftlog topic "
            "(letters, digits, '.', '_', '-'; at most 249 characters)"
        )
    return check_topic_name(topic, "topic")


def _subscription(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """(topics, pattern) from exactly one of ``topic``, ``subscribe``, ``subscribePattern``."""
    given = [n for n in ("topic", "subscribe", "subscribePattern") if n.lower() in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'topic' (one topic), 'subscribe' (comma-separated "
            "topics) or 'subscribePattern' (a regex matching whole topic names) must be given; "
            + (f"got {', '.join(repr(g) for g in given)}" if given else "got none")
        )
    if given[0] == "topic":
        return (_topic(opts) or "",), None
    if given[0] == "subscribe":
        names = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not names:
            raise OptionError(
                "option 'subscribe' must be a comma-separated list of topic names; got "
                f"{opts['subscribe']!r}"
            )
        return tuple(dict.fromkeys(check_topic_name(t, "subscribe") for t in names)), None
    raw = opts["subscribepattern"]
    try:
        re.compile(raw)
    except (re.error, RecursionError, OverflowError) as exc:
        raise OptionError(
            f"option 'subscribePattern' must be a regular expression (Python re syntax) "
            f"matching whole topic names; got {raw!r}: {exc}"
        ) from None
    if not raw:
        raise OptionError("option 'subscribePattern' must be a non-empty regular expression")
    return (), raw


def _opt_columns(opts: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = opts.get(name.lower())
    if raw is None:
        return ()
    cols = tuple(c.strip() for c in raw.split(","))
    if not cols or any(not c for c in cols) or len(set(cols)) != len(cols):
        raise OptionError(
            f"option '{name}' must be a comma-separated list of distinct column names, "
            f"e.g. 'user_id' or 'country,city'; got {raw!r}"
        )
    return cols


def _option_or_env(opts: Mapping[str, str], name: str, env: str) -> tuple[str, str] | None:
    """(raw value, where it came from, for errors): option ``name``, else ``$env`` (blank
    counts as unset), else None."""
    raw = opts.get(name.lower())
    if raw is not None:
        return raw, f"option '{name}'"
    raw = os.environ.get(env, "")
    if not raw.strip():
        return None
    return raw, f"{env} (read because option '{name}' is not set)"


def _servers(opts: Mapping[str, str]) -> tuple[str, ...] | None:
    """Option ``servers``, else ``$RAFTLOG_SERVERS``, else None (the embedded cluster)."""
    found = _option_or_env(opts, "servers", "RAFTLOG_SERVERS")
    if found is None:
        return None
    raw, source = found
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
    """Option ``authToken``, else ``$RAFTLOG_CLIENT_TOKEN``, else its older name
    ``$RAFTLOG_AUTH_TOKEN``, else None (no auth): the client token, read as the CLI
    and the nodes read it.

    The token is sent as ``Authorization: Bearer <token>``, so it must be one
    header-safe word: printable ASCII without spaces.
    """
    found = _option_or_env(opts, "authToken", "RAFTLOG_CLIENT_TOKEN") or _option_or_env(
        opts, "authToken", "RAFTLOG_AUTH_TOKEN"
    )
    if found is None:
        return None
    raw, source = found
    token = raw.strip()
    # Never echo the value: it is a secret, and error messages end up in logs.
    if not token:
        raise OptionError(
            f"{source} must be a non-empty token (the cluster's client token); got an empty value"
        )
    if len(token) > 4096 or not all(33 <= ord(c) <= 126 for c in token):
        raise OptionError(
            f"{source} must be at most 4096 printable ASCII characters without spaces "
            "(the cluster's client token); the value given is not"
        )
    return token


def _tls_ca_file(opts: Mapping[str, str]) -> str | None:
    """Option ``tlsCaFile``, else ``$RAFTLOG_TLS_CA``, else None (plain HTTP).

    The path must name a readable file on the driver; the executors read the same
    path (a file shipped with the job, or on a shared filesystem).
    """
    found = _option_or_env(opts, "tlsCaFile", "RAFTLOG_TLS_CA")
    if found is None:
        return None
    raw, source = found
    path = raw.strip()
    if not path:
        raise OptionError(f"{source} must be the path of a PEM CA file; got an empty value")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise OptionError(
            f"{source} must be the path of a readable PEM CA file (the CA that signed the "
            f"nodes' --tls-cert); got {path!r}, which "
            + ("is not readable" if os.path.isfile(path) else "does not exist")
        )
    return path


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


def _opt_duration_ms(opts: Mapping[str, str], name: str) -> int | None:
    """A duration with a unit (Spark's form: '15m', '30s', '100ms', '1h'), in ms.

    A bare number is refused: Spark would read it as milliseconds, pytimeparse2
    as seconds, so the unit is required rather than guessed.
    """
    raw = opts.get(name.lower())
    if raw is None:
        return None
    text = raw.strip()
    seconds = None if _INT_RE.match(text) else pytimeparse2.parse(text)
    if seconds is None or seconds < 0:
        raise OptionError(
            f"option '{name}' must be a duration >= 0 with a unit, e.g. '15m', '30s' or "
            f"'100ms'; got {raw!r}"
        )
    return round(seconds * 1000)


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
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f"option '{name}' must map topics to partitions; {expected}; got {raw!r}")
    by_topic: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        by_topic[topic] = _json_partition_offsets(name, topic, parts, expected, allow_earliest)
    first = next(iter(by_topic))
    return OffsetSpec(kind="json", offsets=by_topic[first], topic=first, by_topic=by_topic)


def _opt_timestamps_by_partition(
    opts: Mapping[str, str], name: str
) -> dict[str, dict[int, int]] | None:
    """JSON ``{"<topic>": {"<partition>": <ms since the epoch>}}``; None when not given."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    expected = 'expected JSON like {"<topic>": {"0": 1700000000000}} (ms since the epoch)'
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise OptionError(f"option '{name}' is not valid JSON; {expected}") from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f"option '{name}' must map topics to partitions; {expected}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        stamps = _json_partition_offsets(name, topic, parts, expected, True)
        negative = sorted(p for p, ts in stamps.items() if ts < 0)
        if negative:
            raise OptionError(
                f"option '{name}': the timestamp of partition(s) {negative} of topic {topic!r} "
                f"must be >= 0 (ms since the epoch)"
            )
        out[topic] = stamps
    return out


def _json_partition_offsets(
    name: str, topic: object, parts: object, expected: str, allow_earliest: bool
) -> dict[int, int]:
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
    return offsets


@dataclasses.dataclass(frozen=True)
class WriteLayout:
    """How a DataFrame is written, from its column names (see :func:`check_write_columns`).

    ``raw``: ``value`` and only Kafka's columns, written as raw records;
    else typed Arrow data of ``data_columns`` (every column but the routing
    ones, ``topic`` and ``partition``). ``topic_column``/``partition_column``/
    ``key_column``: whether those columns route rows.
    """

    raw: bool
    data_columns: tuple[str, ...]
    topic_column: bool = False
    partition_column: bool = False
    key_column: bool = False


def check_write_columns(opts: SinkOptions, columns: list[str] | tuple[str, ...]) -> WriteLayout:
    """The layout of a write of ``columns``; OptionError when the options do not fit them.

    A topic comes from option ``topic`` (which wins, as in Kafka's sink) or a
    ``topic`` column; ``partitionBy`` must name existing columns.
    """
    names = list(columns)
    has_topic = "topic" in names
    if opts.topic is None and not has_topic:
        raise OptionError(
            "option 'topic' is required unless the DataFrame has a 'topic' column (string) "
            "naming each row's topic; got columns " + ", ".join(names)
        )
    missing = [c for c in opts.partition_by if c not in names]
    if missing:
        hints = {c: difflib.get_close_matches(c, names, n=1) for c in missing}
        hint = "; ".join(f"did you mean '{h[0]}' for '{c}'?" for c, h in hints.items() if h)
        raise OptionError(
            f"option 'partitionBy' names column(s) {missing} that the DataFrame does not have "
            f"(columns: {', '.join(names)})" + (f"; {hint}" if hint else "")
        )
    raw = "value" in names and set(names) <= set(KAFKA_COLUMNS)
    routing = {"topic", "partition"}
    data = tuple(c for c in names if c not in routing)
    if not data:
        raise OptionError(
            "the DataFrame has no data columns besides 'topic'/'partition' (which only route "
            "rows); add a 'value' column or typed columns"
        )
    return WriteLayout(
        raw=raw,
        data_columns=data,
        topic_column=has_topic and opts.topic is None,
        partition_column="partition" in names,
        key_column="key" in names,
    )
