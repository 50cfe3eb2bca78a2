"""Topic configs: validation by name, and the controller state machine that keeps them
(create with configs, alter-config, snapshots and commands of the older form)."""

from __future__ import annotations

import pytest

from raftlog.controller import ControllerStm, command_batch, config_values, topic_config
from raftlog.controller.commands import (
    AlterTopicConfigCmd,
    ConfigValue,
    ControllerSnapshot,
    CreateTopicCmd,
    CreateTopicCmdV1,
    DeleteTopicCmd,
)
from raftlog.rpc import codec
from raftlog.storage.batch import BatchKind, RecordBatch

MIB = 1024 * 1024


# ---------------------------------------------------------------- validation


def test_unknown_key_is_refused_by_name_listing_the_known_ones() -> None:
    with pytest.raises(ValueError) as err:
        topic_config.parse_assignments(["retention.byte=5"])
    assert str(err.value) == (
        "unknown topic config 'retention.byte': expected one of retention.bytes, "
        "retention.ms, segment.bytes, segment.ms, compression.type"
    )


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("retention.bytes=8MiB", "retention.bytes: expected an integer from -1 to "),
        ("retention.ms=-2", "retention.ms: expected an integer from -1 to "),
        ("segment.bytes=1023", "segment.bytes: expected an integer from 1024 to 2147483647"),
        ("segment.bytes=2147483648", "segment.bytes: expected an integer from 1024 to "),
        ("segment.ms=0", "segment.ms: expected an integer from 1 to "),
        ("segment.ms=", "segment.ms: expected an integer from 1 to "),
        ("retention.bytes", "--config: expected KEY=VALUE (e.g. retention.bytes=1048576)"),
        ("=5", "--config: expected KEY=VALUE"),
    ],
)
def test_bad_values_name_the_key_and_the_expected_form(item: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        topic_config.parse_assignments([item])
    assert message in str(err.value)
    if "=" in item and item.split("=", 1)[0]:
        assert repr(item.split("=", 1)[1]) in str(err.value)  # the value given is quoted


def test_assignments_canonical_and_changes_validated() -> None:
    got = topic_config.parse_assignments([" retention.bytes = 0100", "segment.ms=60000"])
    assert got == {"retention.bytes": "100", "segment.ms": "60000"}
    with pytest.raises(ValueError, match=r"retention\.bytes is given twice"):
        topic_config.parse_assignments(["retention.bytes=1", "retention.bytes=2"])
    after = topic_config.apply_changes(got, {"retention.ms": "-1"}, ["segment.ms"])
    assert after == {"retention.bytes": "100", "retention.ms": "-1"}
    with pytest.raises(ValueError, match=r"unknown topic config 'cleanup\.policy'"):
        topic_config.apply_changes(got, {}, ["cleanup.policy"])
    with pytest.raises(ValueError, match=r"retention\.ms: both set and deleted"):
        topic_config.apply_changes(got, {"retention.ms": "5"}, ["retention.ms"])


def test_effective_defaults_are_kafkas_where_kafka_has_one() -> None:
    cfg = topic_config.effective({})
    assert (cfg.retention_bytes, cfg.retention_ms, cfg.segment_ms) == (-1, 604_800_000, 604_800_000)
    assert cfg.segment_bytes == 128 * MIB
    cfg = topic_config.effective({"retention.bytes": str(8 * MIB), "segment.bytes": "bad"})
    assert cfg.retention_bytes == 8 * MIB and cfg.segment_bytes == 128 * MIB
    assert topic_config.described({"retention.ms": "-1"})[:2] == [
        ("retention.bytes", "-1", True),
        ("retention.ms", "-1", False),
    ]


def test_compression_type_is_a_codec_name() -> None:
    assert topic_config.effective({}).compression_type == "none"
    got = topic_config.parse_assignments(["compression.type= ZSTD "])
    assert got == {"compression.type": "zstd"}
    assert topic_config.effective(got).compression_type == "zstd"
    assert ("compression.type", "zstd", False) in topic_config.described(got)
    with pytest.raises(ValueError) as err:
        topic_config.parse_assignments(["compression.type=gzip"])
    assert str(err.value) == (
        "compression.type: expected one of none, lz4, zstd, producer, got 'gzip'"
    )
    # Kafka's default value, so that a config ported from Kafka is accepted
    assert topic_config.effective({"compression.type": "producer"}).compression_type == "producer"
    # an invalid override (kept out of the state by validation) falls back to the default
    assert topic_config.effective({"compression.type": "snappy"}).compression_type == "none"


# ---------------------------------------------------------------- state machine


class _Log:
    """Feeds a ControllerStm committed batches at increasing offsets."""

    def __init__(self, stm: ControllerStm) -> None:
        self.stm = stm
        self.offset = 0

    def apply(self, cmd: object) -> None:
        batch = (
            cmd if isinstance(cmd, RecordBatch) else command_batch(cmd)  # type: ignore[arg-type]
        )
        self.stm.apply(batch.stamped(self.offset, 1))
        self.offset += batch.record_count


def test_create_alter_and_delete_configs_in_log_order() -> None:
    stm = ControllerStm()
    log = _Log(stm)
    configs = {"retention.bytes": str(8 * MIB), "segment.bytes": str(MIB)}
    log.apply(CreateTopicCmd("t", 2, 3, [1, 2, 3], None, config_values(configs)))
    assert stm.topic_overrides("t") == configs
    assert stm.topic_config("t").retention_bytes == 8 * MIB
    log.apply(AlterTopicConfigCmd("t", [ConfigValue("retention.ms", "60000")], ["retention.bytes"]))
    assert stm.topic_overrides("t") == {"retention.ms": "60000", "segment.bytes": str(MIB)}
    assert stm.topic_config("t").retention_bytes == -1
    # a change with a bad value changes nothing (on every replica alike)
    log.apply(AlterTopicConfigCmd("t", [ConfigValue("retention.ms", "soon")], ["segment.bytes"]))
    assert stm.topic_overrides("t") == {"retention.ms": "60000", "segment.bytes": str(MIB)}
    # a create with a bad config creates nothing
    log.apply(CreateTopicCmd("u", 1, 1, [1], None, [ConfigValue("cleanup.policy", "compact")]))
    assert "u" not in stm.topics
    # a deleted and recreated topic starts with defaults and a new topic id (group ids)
    first_group = stm.topics["t"].partitions[0].group_id
    log.apply(DeleteTopicCmd("t"))
    assert stm.topic_overrides("t") == {}
    log.apply(CreateTopicCmd("t", 2, 3, [1, 2, 3]))
    assert stm.topic_overrides("t") == {}
    assert stm.topics["t"].partitions[0].group_id > first_group


def test_snapshot_round_trip_keeps_configs() -> None:
    stm = ControllerStm()
    log = _Log(stm)
    log.apply(CreateTopicCmd("a", 1, 1, [1], b"schema", config_values({"segment.ms": "1000"})))
    log.apply(CreateTopicCmd("b", 3, 1, [1]))
    restored = ControllerStm()
    restored.restore(stm.snapshot())
    assert restored.topics == stm.topics
    assert restored.configs == {"a": {"segment.ms": "1000"}}
    assert restored.next_group_id == stm.next_group_id == 5


def test_state_from_before_topic_configs_still_restores_and_decodes() -> None:
    stm = ControllerStm()
    log = _Log(stm)
    # a create command of the older form, as older logs hold it
    old = RecordBatch.create(
        codec.encode(CreateTopicCmdV1("old", 2, 1, [1], b"s")), kind=BatchKind.CONTROLLER
    )
    log.apply(old)
    assert [p.group_id for p in stm.topics["old"].partitions] == [1, 2]
    assert stm.topic_overrides("old") == {}
    # a snapshot of the older form (an unframed body without configs)
    v1 = codec.encode_body(ControllerSnapshot(stm.next_group_id, list(stm.topics.values())))
    restored = ControllerStm()
    restored.restore(v1)
    assert restored.topics == stm.topics and restored.configs == {}
    assert restored.next_group_id == 3
