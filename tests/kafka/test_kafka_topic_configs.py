"""DescribeConfigs' entries (raftlog.kafka.topic_configs): every key with its value,
the source by whether it is set on the topic, synonyms in Kafka's order, types."""

from __future__ import annotations

from raftlog.controller import topic_config
from raftlog.kafka.topic_configs import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, config_entries
from raftlog.rpc.messages import ConfigEntry, TopicConfigs


def _configs(overrides: dict[str, str]) -> TopicConfigs:
    described = topic_config.described(overrides)
    return TopicConfigs("t", [ConfigEntry(k, v, default) for k, v, default in described])


def test_every_key_with_its_source_and_synonyms() -> None:
    entries = config_entries(_configs({"retention.ms": "1000"}), None, include_synonyms=True)
    by_name = {e["name"]: e for e in entries}
    assert list(by_name) == list(topic_config.SPECS)
    set_, default = by_name["retention.ms"], by_name["retention.bytes"]
    assert (set_["value"], set_["config_source"], set_["is_default"]) == (
        "1000",
        DYNAMIC_TOPIC_CONFIG,
        False,
    )
    assert [(s["value"], s["source"]) for s in set_["synonyms"]] == [
        ("1000", DYNAMIC_TOPIC_CONFIG),
        ("604800000", DEFAULT_CONFIG),
    ]
    assert (default["value"], default["config_source"], default["is_default"]) == (
        "-1",
        DEFAULT_CONFIG,
        True,
    )
    assert [s["source"] for s in default["synonyms"]] == [DEFAULT_CONFIG]
    # Kafka's ConfigType: LONG 5, INT 3 (segment.bytes is an int), STRING 2
    types = {e["name"]: e["config_type"] for e in entries}
    assert types == {
        "retention.bytes": 5,
        "retention.ms": 5,
        "segment.bytes": 3,
        "segment.ms": 5,
        "compression.type": 2,
    }
    assert "lz4" in by_name["compression.type"]["documentation"]


def test_keys_filter_and_no_synonyms_unless_asked() -> None:
    entries = config_entries(_configs({}), ["segment.ms", "no.such.key"], include_synonyms=False)
    assert [(e["name"], e["synonyms"]) for e in entries] == [("segment.ms", [])]
    assert config_entries(_configs({}), [], include_synonyms=False) == []
