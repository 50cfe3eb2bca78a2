"""Source offsets: Kafka-style JSON ``{"<topic>": {"<partition>": next_offset}}``.

An offset document names, per partition, the next offset to read (so the
range a micro-batch reads is ``[start[p], end[p])``). Spark stores these
documents in the checkpoint's offset log as JSON, so partition keys are
strings, as in Kafka's source.

Resolving ``startingOffsets``/``endingOffsets`` against the partitions' live
bounds also lives here: ``earliest`` is a partition's log start offset,
``latest`` its last stable offset (only committed, non-transactional-pending
records are ever read), and in JSON -2 means earliest and -1 latest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark_raftlog.options import OffsetSpec

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetDocumentError",
    "PartitionBounds",
    "format_offsets",
    "format_topic_offsets",
    "parse_offsets",
    "parse_topic_ids",
    "parse_topic_offsets",
    "resolve_spec",
]

EARLIEST = -2
LATEST = -1

PartitionBounds = tuple[int, int]
"""(log start offset, last stable offset) of one partition."""


class OffsetDocumentError(ValueError):
    """An offset document (from Spark's checkpoint) is malformed or names another topic."""


def format_offsets(topic: str, offsets: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """The JSON-able offset document for ``offsets`` (partition -> next offset).

    Partitions are ordered numerically so equal offsets always serialize to equal
    JSON (Spark compares serialized offsets to detect "no new data").
    """
    return {topic: {str(p): int(offsets[p]) for p in sorted(offsets)}}


def parse_offsets(topic: str, doc: object) -> dict[int, int]:
    """Partition -> next offset from an offset document; strict, as it comes from a checkpoint."""
    if not isinstance(doc, Mapping) or len(doc) != 1:
        raise OffsetDocumentError(
            f'offset document must be {{"<topic>": {{"<partition>": <offset>}}}}; got {doc!r}'
        )
    ((name, parts),) = doc.items()
    if name != topic:
        raise OffsetDocumentError(
            f"offset document is for topic {name!r}, but this query reads topic {topic!r}; "
            "use a new checkpointLocation when changing the topic"
        )
    if not isinstance(parts, Mapping):
        raise OffsetDocumentError(f"offset document for {topic!r} must map partitions to offsets")
    out: dict[int, int] = {}
    for key, off in parts.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise OffsetDocumentError(f"partition key must be a non-negative integer; got {key!r}")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise OffsetDocumentError(
                f"offset of partition {key} must be an integer >= 0; got {off!r}"
            )
        out[int(key)] = off
    return out


def resolve_spec(
    spec: OffsetSpec, bounds: Mapping[int, PartitionBounds], option: str
) -> dict[int, int]:
    """Concrete next offsets for every partition in ``bounds`` from ``spec``.

    ``option`` names the option the spec came from, for error text. A JSON spec
    must name exactly the topic's partitions (as Kafka's source requires): a
    missing partition would otherwise silently start at a guess.
    """
    if spec.kind == "earliest":
        return {p: b[0] for p, b in bounds.items()}
    if spec.kind == "latest":
        return {p: b[1] for p, b in bounds.items()}
    unknown = sorted(set(spec.offsets) - set(bounds))
    missing = sorted(set(bounds) - set(spec.offsets))
    if unknown or missing:
        raise OffsetDocumentError(
            f"option '{option}' must give an offset for each of the topic's partitions "
            f"{sorted(bounds)}; "
            + (f"unknown: {unknown}" if unknown else "")
            + ("; " if unknown and missing else "")
            + (f"missing: {missing}" if missing else "")
        )
    out: dict[int, int] = {}
    for p, off in spec.offsets.items():
        start, lso = bounds[p]
        out[p] = start if off == EARLIEST else lso if off == LATEST else off
    return out


TopicPartition = tuple[str, int]


TOPIC_IDS_KEY = "__topic_ids"
"""The offset document's entry of topic ids: ``{"__topic_ids": {"<topic>": id}}``. No
topic name can take it (names start with a letter or digit)."""


def format_topic_offsets(
    offsets: Mapping[TopicPartition, int], topic_ids: Mapping[str, int] | None = None
) -> dict[str, dict[str, int]]:
    """The offset document of several topics: ``{"<topic>": {"<partition>": next}}``,
    plus, under ``__topic_ids``, the id of each topic read (``topic_ids``; unknown ids,
    -1, are left out).

    The ids let a later micro-batch, or a restart from the checkpoint, tell that a topic
    was deleted and created again: its offsets then name records of a topic that is
    gone. Topics and partitions are ordered so equal offsets serialize to equal JSON.
    """
    doc: dict[str, dict[str, int]] = {}
    for topic, p in sorted(offsets):
        doc.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    ids = {t: int(i) for t, i in sorted((topic_ids or {}).items()) if i >= 0 and t in doc}
    if ids:
        doc[TOPIC_IDS_KEY] = ids
    return doc


def parse_topic_ids(doc: object) -> dict[str, int]:
    """Topic -> id recorded in an offset document (empty for documents written before ids
    were recorded, and for topics whose id was not known)."""
    ids = doc.get(TOPIC_IDS_KEY, {}) if isinstance(doc, Mapping) else {}
    if not isinstance(ids, Mapping) or not all(
        isinstance(t, str) and isinstance(i, int) and not isinstance(i, bool) and i >= 0
        for t, i in ids.items()
    ):
        raise OffsetDocumentError(
            f'"{TOPIC_IDS_KEY}" of an offset document must map topics to ids >= 0; got {ids!r}'
        )
    return dict(ids)


def parse_topic_offsets(doc: object, reads: Callable[[str], bool]) -> dict[TopicPartition, int]:
    """(topic, partition) -> next offset from a checkpoint's document; strict.

    ``reads`` tells whether the query reads a topic: a document naming a topic
    it does not read comes from another query's checkpoint.
    """
    if not isinstance(doc, Mapping):
        raise OffsetDocumentError(
            f'offset document must be {{"<topic>": {{"<partition>": <offset>}}}}; got {doc!r}'
        )
    out: dict[TopicPartition, int] = {}
    parse_topic_ids(doc)  # checked here too: a checkpoint's document is parsed strictly
    for name in doc:
        if name == TOPIC_IDS_KEY:
            continue
        if not isinstance(name, str) or not reads(name):
            raise OffsetDocumentError(
                f"offset document names topic {name!r}, which this query does not read; "
                "use a new checkpointLocation when changing the topics"
            )
        for p, off in parse_offsets(name, {name: doc[name]}).items():
            out[(name, p)] = off
    return out


def resolve_topic_spec(
    spec: OffsetSpec, bounds: Mapping[TopicPartition, PartitionBounds], option: str
) -> dict[TopicPartition, int]:
    """:func:`resolve_spec` for every topic in ``bounds``; a JSON spec must name each."""
    topics = sorted({t for t, _ in bounds})
    out: dict[TopicPartition, int] = {}
    for topic in topics:
        mine = {p: b for (t, p), b in bounds.items() if t == topic}
        if spec.kind == "json":
            if topic not in spec.by_topic:
                raise OffsetDocumentError(
                    f"option '{option}' must give offsets for every topic read; "
                    f"topic {topic!r} is missing"
                )
            sub = OffsetSpec("json", spec.by_topic[topic], topic, {topic: spec.by_topic[topic]})
        else:
            sub = spec
        for p, off in resolve_spec(sub, mine, option).items():
            out[(topic, p)] = off
    return out
