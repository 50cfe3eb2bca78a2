"""Option parsing of the Spark connector: values, defaults, and the text of every error."""

from __future__ import annotations

import pytest
from pyspark_raftlog.options import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_LINGER_MS,
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    OffsetSpec,
    OptionError,
    parse_sink_options,
    parse_source_options,
)


def sink(**opts: str):
    return parse_sink_options({"topic": "events", **opts}, streaming=True)


def source(streaming: bool = True, **opts: str):
    return parse_source_options({"topic": "events", **opts}, streaming=streaming)


def test_sink_defaults() -> None:
    o = sink()
    assert (o.topic, o.servers, o.acks, o.partitions, o.replication_factor) == (
        "events",
        None,
        "all",
        None,
        None,  # the cluster's default, capped at its node count
    )
    assert (o.chunk_bytes, o.max_in_flight, o.request_timeout_ms) == (DEFAULT_CHUNK_BYTES, 5, 30000)
    assert o.txn_app_id is None and o.txn_version is None


def test_keys_are_case_insensitive_as_spark_lowercases_them() -> None:
    o = parse_sink_options(
        {"TOPIC": "t", "replicationfactor": "1", "ChunkBytes": "64k", "maxinflight": "2"},
        streaming=True,
    )
    assert (o.topic, o.replication_factor, o.chunk_bytes, o.max_in_flight) == ("t", 1, 65536, 2)


@pytest.mark.parametrize(("raw", "want"), [("all", "all"), ("-1", "all"), ("1", "1"), ("0", "0")])
def test_acks_values(raw: str, want: str) -> None:
    assert sink(acks=raw, deliveryGuarantee="at-least-once").acks == want
    if want == "all":
        assert sink(acks=raw).acks == "all"


@pytest.mark.parametrize("raw", ["1", "0"])
def test_exactly_once_refuses_acks_other_than_all(raw: str) -> None:
    with pytest.raises(
        OptionError, match=rf"option 'acks' must be 'all' for exactly-once writes .*got '{raw}'"
    ):
        sink(acks=raw)


def test_delivery_guarantee_and_transaction_timeout() -> None:
    assert sink().exactly_once and sink().transaction_timeout_ms == 15 * 60 * 1000
    assert not sink(deliveryGuarantee="AT-LEAST-ONCE").exactly_once
    assert sink(transactionTimeoutMs="60000").transaction_timeout_ms == 60000
    with pytest.raises(OptionError, match="option 'deliveryGuarantee' must be one of"):
        sink(deliveryGuarantee="maybe")
    with pytest.raises(OptionError, match="transactionTimeoutMs"):
        sink(transactionTimeoutMs="0")


def test_bad_acks_names_option_and_choices() -> None:
    with pytest.raises(OptionError, match=r"option 'acks' must be one of all, 1, 0; got 'two'"):
        sink(acks="two")


def test_missing_topic() -> None:
    # a write may name its topics in a `topic` column instead (checked with the schema)
    assert parse_sink_options({}, streaming=True).topic is None
    with pytest.raises(OptionError, match=r"exactly one of the options 'topic'"):
        parse_source_options({}, streaming=True)


@pytest.mark.parametrize("bad", ["", "a b", "x/y", "..", "t" * 250])
def test_bad_topic(bad: str) -> None:
    with pytest.raises(OptionError, match=r"option 'topic'"):
        parse_sink_options({"topic": bad}, streaming=True)


def test_servers_parsed_and_validated() -> None:
    assert sink(servers=" a:1, b.example:9092 ,http://c:80").servers == (
        "a:1",
        "b.example:9092",
        "http://c:80",
    )
    with pytest.raises(OptionError, match=r"option 'servers' .*host:port.*got 'nohost'"):
        sink(servers="a:1,nohost")
    with pytest.raises(OptionError, match=r"option 'servers' .*got 'a:70000'"):
        sink(servers="a:70000")
    with pytest.raises(OptionError, match=r"option 'servers' .*empty value"):
        sink(servers=" , ")


@pytest.mark.parametrize(
    ("name", "raw", "pattern"),
    [
        ("partitions", "0", r"option 'partitions' must be an integer between 1 and 10000; got '0'"),
        ("partitions", "six", r"option 'partitions' must be an integer"),
        ("replicationFactor", "-1", r"option 'replicationFactor' must be an integer"),
        ("maxInFlight", "6", r"option 'maxInFlight' must be an integer between 1 and 5; got '6'"),
        ("requestTimeoutMs", "1.5", r"option 'requestTimeoutMs' must be an integer"),
        ("chunkBytes", "12", r"option 'chunkBytes' must be a size in bytes between 1024 and"),
        ("chunkBytes", "1 parsec", r"option 'chunkBytes' must be a size in bytes .* '1m'"),
        ("chunkBytes", "65m", r"option 'chunkBytes' .*got '65m' \(68157440 bytes\)"),
        ("lingerMs", "-1", r"option 'lingerMs' must be an integer between 0 and 3600000; got '-1'"),
        ("lingerMs", "1s", r"option 'lingerMs' must be an integer between 0 and 3600000"),
    ],
)
def test_bad_sink_numbers(name: str, raw: str, pattern: str) -> None:
    with pytest.raises(OptionError, match=pattern):
        sink(**{name: raw})


@pytest.mark.parametrize(("raw", "want"), [("2048", 2048), ("1m", 1 << 20), ("512KiB", 512 << 10)])
def test_chunk_bytes_units(raw: str, want: int) -> None:
    assert sink(chunkBytes=raw).chunk_bytes == want


def test_txn_options_batch_only_and_together() -> None:
    o = parse_sink_options({"topic": "t", "txnAppId": "app", "txnVersion": "7"}, streaming=False)
    assert (o.txn_app_id, o.txn_version) == ("app", 7)
    with pytest.raises(OptionError, match=r"'txnAppId' and 'txnVersion' must be given together"):
        parse_sink_options({"topic": "t", "txnAppId": "app"}, streaming=False)
    with pytest.raises(OptionError, match=r"apply to batch writes \(df.write\) only"):
        parse_sink_options({"topic": "t", "txnAppId": "a", "txnVersion": "1"}, streaming=True)
    with pytest.raises(OptionError, match=r"option 'txnVersion' must be an integer >= 0"):
        parse_sink_options({"topic": "t", "txnAppId": "a", "txnVersion": "-3"}, streaming=False)


def test_unknown_options_from_spark_are_ignored() -> None:
    assert sink(checkpointLocation="/tmp/x", path="p").topic == "events"


def test_typo_of_a_known_option_is_an_error() -> None:
    with pytest.raises(OptionError, match=r"unknown option 'chunkbyte'; did you mean 'chunkBytes'"):
        sink(chunkByte="1m")
    with pytest.raises(OptionError, match=r"did you mean 'maxRecordsPerTrigger'"):
        source(maxRecordsPerTriger="5")


def test_option_of_the_other_direction_is_an_error() -> None:
    with pytest.raises(OptionError, match=r"option 'acks' applies to writes, not reads"):
        source(acks="all")
    with pytest.raises(OptionError, match=r"option 'startingOffsets' applies to reads, not writes"):
        sink(startingOffsets="earliest")


def test_source_defaults() -> None:
    o = source()
    assert o.starting_offsets is None and o.ending_offsets is None
    assert o.fail_on_data_loss is True
    assert o.max_records_per_trigger is None and o.max_bytes_per_trigger is None
    assert o.min_partitions is None


def test_source_values() -> None:
    o = source(
        startingOffsets="EARLIEST",
        maxRecordsPerTrigger="100",
        maxBytesPerTrigger="2m",
        minPartitions="4",
        failOnDataLoss="False",
    )
    assert o.starting_offsets == OffsetSpec("earliest")
    assert (o.max_records_per_trigger, o.max_bytes_per_trigger, o.min_partitions) == (
        100,
        2 << 20,
        4,
    )
    assert o.fail_on_data_loss is False


def test_starting_offsets_json() -> None:
    spec = source(startingOffsets='{"events": {"0": 5, "2": -2, "1": -1}}').starting_offsets
    assert spec is not None and spec.kind == "json" and spec.topic == "events"
    assert dict(spec.offsets) == {0: 5, 1: -1, 2: -2}


@pytest.mark.parametrize(
    ("raw", "pattern"),
    [
        ("soonest", r"option 'startingOffsets': expected 'earliest' or 'latest', or JSON"),
        ("{bad json", r"option 'startingOffsets' is not valid JSON"),
        ('{"a": {"0": 1}, "b": {"0": 1}}', r"names topic\(s\) \['a', 'b'\] that are not read"),
        ('{"events": {"x": 1}}', r"partition keys must be non-negative integers"),
        ('{"events": {"0": -3}}', r"offset of partition 0 must be an integer >= -2"),
        ('{"events": {"0": true}}', r"offset of partition 0 must be an integer"),
        ('{"other": {"0": 1}}', r"names topic\(s\) \['other'\] that are not read"),
    ],
)
def test_bad_starting_offsets(raw: str, pattern: str) -> None:
    with pytest.raises(OptionError, match=pattern):
        source(startingOffsets=raw)


def test_ending_offsets_rules() -> None:
    o = source(streaming=False, endingOffsets='{"events": {"0": 10, "1": -1}}')
    assert o.ending_offsets is not None and dict(o.ending_offsets.offsets) == {0: 10, 1: -1}
    with pytest.raises(OptionError, match=r"'endingOffsets' applies to batch reads"):
        source(endingOffsets="latest")
    with pytest.raises(OptionError, match=r"option 'endingOffsets': expected 'latest', or JSON"):
        source(streaming=False, endingOffsets="earliest")
    with pytest.raises(OptionError, match=r"offset of partition 0 must be an integer >= -1"):
        source(streaming=False, endingOffsets='{"events": {"0": -2}}')


def test_batch_read_rejects_trigger_limits_and_latest_start() -> None:
    with pytest.raises(OptionError, match=r"apply to streaming reads only"):
        source(streaming=False, maxRecordsPerTrigger="5")
    with pytest.raises(OptionError, match=r"cannot be 'latest' for a batch read"):
        source(streaming=False, startingOffsets="latest")


def test_bad_fail_on_data_loss() -> None:
    with pytest.raises(OptionError, match=r"'failOnDataLoss' must be true or false; got 'y'"):
        source(failOnDataLoss="y")


def test_direction_unknown_skips_direction_checks() -> None:
    o = parse_source_options(
        {"topic": "t", "endingOffsets": "latest", "maxRecordsPerTrigger": "3"}, streaming=None
    )
    assert o.ending_offsets == OffsetSpec("latest") and o.max_records_per_trigger == 3


# ------------------------------------ compression, minOffsetsPerTrigger, maxTriggerDelay
def test_compression_defaults_to_the_topic_config_and_takes_kafkas_codec_names() -> None:
    assert sink().compression is None  # the topic's compression.type decides
    assert sink(compression="ZSTD").compression == "zstd"
    assert sink(compression=" lz4 ").compression == "lz4"
    assert sink(compression="none").compression == "none"
    assert parse_sink_options({"topic": "t", "compression": "lz4"}, streaming=False).compression


@pytest.mark.parametrize("bad", ["gzip", "snappy", "", "zstd,lz4"])
def test_bad_compression_is_refused_naming_the_allowed_values(bad: str) -> None:
    with pytest.raises(OptionError) as err:
        sink(compression=bad)
    assert str(err.value) == f"option 'compression' must be one of none, lz4, zstd, got {bad!r}"


def test_linger_ms_default_zero_and_kafkas_name_points_to_it() -> None:
    assert sink().linger_ms == DEFAULT_LINGER_MS == 1000
    assert (sink(lingerMs="0").linger_ms, sink(lingerms="250").linger_ms) == (0, 250)
    with pytest.raises(OptionError, match="use option 'lingerMs' instead"):
        sink(**{"kafka.linger.ms": "5"})
    with pytest.raises(OptionError, match="option 'lingerMs' applies to writes, not reads"):
        source(lingerMs="5")


def test_compression_is_a_write_option_and_kafkas_name_points_to_it() -> None:
    with pytest.raises(OptionError, match="option 'compression' applies to writes, not reads"):
        source(compression="lz4")
    with pytest.raises(OptionError, match="use option 'compression' instead"):
        sink(**{"kafka.compression.type": "lz4"})


def test_min_offsets_and_max_trigger_delay() -> None:
    o = source()
    assert o.min_offsets_per_trigger is None
    assert o.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60 * 1000
    o = source(minOffsetsPerTrigger="500")
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (500, 15 * 60 * 1000)
    for raw, ms in [("30s", 30_000), ("15m", 900_000), ("100ms", 100), ("1h", 3_600_000)]:
        assert source(minOffsetsPerTrigger="1", maxTriggerDelay=raw).max_trigger_delay_ms == ms


@pytest.mark.parametrize("bad", ["900", "soon", "-5m", ""])
def test_bad_max_trigger_delay_names_the_form(bad: str) -> None:
    with pytest.raises(OptionError) as err:
        source(minOffsetsPerTrigger="1", maxTriggerDelay=bad)
    assert str(err.value) == (
        "option 'maxTriggerDelay' must be a duration >= 0 with a unit, e.g. '15m', '30s' or "
        f"'100ms'; got {bad!r}"
    )


def test_trigger_options_fit_together() -> None:
    with pytest.raises(OptionError, match="give 'minOffsetsPerTrigger' too"):
        source(maxTriggerDelay="1m")
    with pytest.raises(OptionError, match=r"'minOffsetsPerTrigger' \(50\) must not exceed"):
        source(minOffsetsPerTrigger="50", maxOffsetsPerTrigger="10")
    with pytest.raises(OptionError, match="must be an integer >= 1; got '0'"):
        source(minOffsetsPerTrigger="0")
    with pytest.raises(OptionError, match="apply to streaming reads only"):
        source(streaming=False, minOffsetsPerTrigger="5")
