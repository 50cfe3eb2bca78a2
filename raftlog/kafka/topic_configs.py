"""DescribeConfigs' answer for a topic: raftlog's topic configs (the ones
``raftlog topic describe`` prints, :mod:`raftlog.controller.topic_config`) as Kafka's
config entries.

Every key of :data:`raftlog.controller.topic_config.SPECS` is listed with its
effective value; one set on the topic is a ``DYNAMIC_TOPIC_CONFIG``, one left at its
default a ``DEFAULT_CONFIG`` (v0's ``is_default``). None is read-only (``raftlog topic
alter-config`` changes them) or sensitive. Synonyms (v1+, when asked) list the
override, then the default, in Kafka's order of precedence; types and documentation
(v3+) come from the key's spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raftlog.controller.topic_config import SPECS, ConfigSpec
from raftlog.rpc.messages import TopicConfigs

# Kafka's ConfigResource.Type (the request's resource_type)
RESOURCE_TOPIC = 2
RESOURCE_NAMES = {2: "topic", 4: "broker", 8: "broker logger"}

# Kafka's DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5

# Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers it
_STRING, _INT, _LONG = 2, 3, 5
_INT_KEYS = {"segment.bytes"}  # an int in Kafka's TopicConfig; the other numbers are longs


def _config_type(spec: ConfigSpec) -> int:
    if spec.choices:
        return _STRING
    return _INT if spec.key in _INT_KEYS else _LONG


def _documentation(spec: ConfigSpec) -> str:
    if spec.choices:
        return f"one of {', '.join(spec.choices)} (default {spec.default})"
    return f"{spec.form}, from {spec.low} to {spec.high} (default {spec.default})"


def config_entries(
    configs: TopicConfigs, keys: Iterable[str] | None, include_synonyms: bool
) -> list[dict[str, Any]]:
    """The entries of ``configs`` (one topic's, every key with its effective value)
    that ``keys`` names (None: all; an unknown key is left out, as Kafka does), each a
    dict of every version's fields (:func:`raftlog.kafka.protocol.build` keeps the
    requested version's)."""
    wanted = None if keys is None else set(keys)
    out = []
    for entry in configs.configs:
        if wanted is not None and entry.key not in wanted:
            continue
        spec = SPECS[entry.key]
        source = DEFAULT_CONFIG if entry.is_default else DYNAMIC_TOPIC_CONFIG
        synonyms = []
        if include_synonyms:
            if not entry.is_default:
                synonyms.append(
                    {"name": entry.key, "value": entry.value, "source": DYNAMIC_TOPIC_CONFIG}
                )
            default = {"name": entry.key, "value": str(spec.default), "source": DEFAULT_CONFIG}
            synonyms.append(default)
        out.append(
            {
                "name": entry.key,
                "value": entry.value,
                "read_only": False,
                "is_default": entry.is_default,  # v0
                "config_source": source,
                "is_sensitive": False,
                "synonyms": synonyms,
                "config_type": _config_type(spec),
                "documentation": _documentation(spec),
            }
        )
    return out
