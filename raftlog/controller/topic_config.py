"""Topic configs: Kafka's names, meanings and defaults, and their validation.

A topic keeps only its *overrides* (the keys set with ``--config`` or
``alter-config``), as strings, in the controller's replicated state; every
other key takes its default. :func:`effective` turns overrides into the
integers a partition runs with.

====================  ===================  =========================================
key                   default              meaning
====================  ===================  =========================================
``retention.bytes``   -1 (no limit)        bytes a partition keeps before its oldest
                                           closed segments are deleted
``retention.ms``      604800000 (7 days)   age (the newest timestamp in a closed
                                           segment) past which the segment is
                                           deleted; -1: forever
``segment.bytes``     134217728 (128 MiB)  size at which a partition's log rolls to a
                                           new segment
``segment.ms``        604800000 (7 days)   time after a segment's first batch at
                                           which the log rolls, even when the
                                           segment is not full
``compression.type``  none                 the codec writers compress payloads with
                                           when they are not told one (none, lz4,
                                           zstd; ``producer``, Kafka's "as the
                                           producer sent it", is accepted and means
                                           the writer's own choice: none for the
                                           sink): the Spark sink's default for its
                                           option ``compression``. Readers
                                           decompress whatever codec each batch
                                           records; the engine never recompresses
                                           (unlike a Kafka broker)
====================  ===================  =========================================

Validation refuses an unknown key by name (listing the known ones) and a bad
value naming the key and the expected form; the same checks run in the CLI,
on the controller leader before a command is replicated, and when a command
is applied (so that a replica never runs with a value it would refuse).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping

from raftlog.records.compression import CODEC_NAMES

RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"
SEGMENT_BYTES = "segment.bytes"
SEGMENT_MS = "segment.ms"
COMPRESSION_TYPE = "compression.type"
# the writers' codecs, and Kafka's "producer": whatever each writer chooses (Kafka's
# default; accepted so that a config ported from Kafka is not refused)
COMPRESSION_CODECS = (*CODEC_NAMES, "producer")

_I64_MAX = (1 << 63) - 1
# Kafka's segment.bytes is an int; the floor keeps a segment larger than a batch header.
MIN_SEGMENT_BYTES = 1024
MAX_SEGMENT_BYTES = (1 << 31) - 1


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigSpec:
    """One key: an integer from ``low`` to ``high``, or (``choices`` given) one of those
    words, lowercase."""

    key: str
    default: int | str
    low: int
    high: int
    form: str  # what the value means, for error messages and help
    choices: tuple[str, ...] = ()


SPECS: dict[str, ConfigSpec] = {
    s.key: s
    for s in (
        ConfigSpec(RETENTION_BYTES, -1, -1, _I64_MAX, "bytes per partition; -1: no limit"),
        ConfigSpec(RETENTION_MS, 604_800_000, -1, _I64_MAX, "milliseconds; -1: no limit"),
        ConfigSpec(SEGMENT_BYTES, 128 * 1024 * 1024, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES, "bytes"),
        ConfigSpec(SEGMENT_MS, 604_800_000, 1, _I64_MAX, "milliseconds"),
        ConfigSpec(COMPRESSION_TYPE, "none", 0, 0, "a codec", COMPRESSION_CODECS),
    )
}
"""Every topic config key, in the order they are listed."""


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    """A partition's effective settings (every key resolved to its value)."""

    # a spec's default is int | str; each is of its field's type (its spec's kind)
    retention_bytes: int = SPECS[RETENTION_BYTES].default  # type: ignore[assignment]
    retention_ms: int = SPECS[RETENTION_MS].default  # type: ignore[assignment]
    segment_bytes: int = SPECS[SEGMENT_BYTES].default  # type: ignore[assignment]
    segment_ms: int = SPECS[SEGMENT_MS].default  # type: ignore[assignment]
    compression_type: str = SPECS[COMPRESSION_TYPE].default  # type: ignore[assignment]


def check_key(key: str) -> ConfigSpec:
    """The spec of ``key``; ValueError naming it and the known keys when unknown."""
    spec = SPECS.get(key)
    if spec is None:
        raise ValueError(f"unknown topic config {key!r}: expected one of {', '.join(SPECS)}")
    return spec


def validate_value(key: str, value: str) -> str:
    """``value`` of ``key`` in canonical form (a decimal integer, or a lowercase word of
    the key's choices), or ValueError naming the key, the allowed values and ``value``."""
    spec = check_key(key)
    text = value.strip() if isinstance(value, str) else value
    if spec.choices:
        word = text.lower() if isinstance(text, str) else None
        if word not in spec.choices:
            raise ValueError(f"{key}: expected one of {', '.join(spec.choices)}, got {value!r}")
        return word
    try:
        number = int(text) if isinstance(text, str) else None
    except ValueError:
        number = None
    if number is None or not spec.low <= number <= spec.high:
        raise ValueError(
            f"{key}: expected an integer from {spec.low} to {spec.high} ({spec.form}), "
            f"got {value!r}"
        )
    return str(number)


def validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Every key known and every value valid: the canonical overrides, or ValueError."""
    return {key: validate_value(key, value) for key, value in configs.items()}


def parse_assignments(items: Iterable[str], option: str = "--config") -> dict[str, str]:
    """``["K=V", ...]`` (the CLI's repeatable ``--config``) as validated overrides.

    ValueError names the option and the expected form for an item without ``=``,
    and the key for an unknown key, a bad value or a key given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(
                f"{option}: expected KEY=VALUE (e.g. retention.bytes=1048576), got {item!r}"
            )
        if key in out:
            raise ValueError(f"{option}: {key} is given twice")
        out[key] = validate_value(key, value)
    return out


def apply_changes(
    overrides: Mapping[str, str], set_: Mapping[str, str], delete: Iterable[str]
) -> dict[str, str]:
    """``overrides`` after deleting ``delete`` (back to defaults) and setting ``set_``.

    Raises ValueError for an unknown key or bad value in either, and for a key
    both set and deleted.
    """
    delete = list(delete)
    for key in delete:
        check_key(key)
    both = sorted(set(delete) & set(set_))
    if both:
        raise ValueError(f"{', '.join(both)}: both set and deleted in one change")
    out = {k: v for k, v in overrides.items() if k not in delete}
    out.update(validate_configs(set_))
    return out


def effective(overrides: Mapping[str, str]) -> TopicConfig:
    """The settings a partition runs with: overrides over the defaults.

    An invalid override (which validation keeps out of the state) falls back to
    the default rather than raising: a replica must always be able to run.
    """
    values: dict[str, int | str] = {}
    for key, spec in SPECS.items():
        values[key] = spec.default
        if key in overrides:
            with contextlib.suppress(ValueError):
                value = validate_value(key, overrides[key])
                values[key] = value if spec.choices else int(value)
    # every key resolved to a value of its field's type (see above)
    return TopicConfig(**{key.replace(".", "_"): value for key, value in values.items()})  # type: ignore[arg-type]


def described(overrides: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """(key, value, is default) for every key, in :data:`SPECS` order."""
    eff = dataclasses.asdict(effective(overrides))
    return [(key, str(eff[key.replace(".", "_")]), key not in overrides) for key in SPECS]
