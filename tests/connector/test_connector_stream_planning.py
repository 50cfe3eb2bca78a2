"""The stream reader's planning on the driver (latestOffset, AvailableNow, partitions),
against a fake client: no Spark session and no cluster."""

from __future__ import annotations

import asyncio
import dataclasses

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_raftlog.options import parse_source_options
from pyspark_raftlog.source import RaftlogStreamReader

from raftlog.client import UnknownTopicError


@dataclasses.dataclass
class Batch:
    base_offset: int
    record_count: int
    payload: bytes


@dataclasses.dataclass
class Partition:
    partition: int


@dataclasses.dataclass
class Meta:
    partitions: list[Partition]


@dataclasses.dataclass
class Fetched:
    batches: list[Batch]


class FakeClient:
    """Partition p holds batches of 10 records with 100-byte payloads, offsets [0, lso)."""

    def __init__(self, lso: dict[int, int]) -> None:
        self.lso = lso

    def describe_topic(self, topic: str) -> Meta:
        return Meta([Partition(p) for p in sorted(self.lso)])

    def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        return 0, self.lso[partition], self.lso[partition]

    def call(self, fn):
        """The blocking client's way to run an async helper (the consistent cut)."""
        return asyncio.run(fn(self))

    async def _partition_call(self, topic, partition, req, resp_type):
        # no transaction coordinator on this cluster: the cut is the LSOs as they are
        raise UnknownTopicError(f"unknown topic {topic!r}")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> Fetched:
        first = offset - offset % 10
        out, size = [], 0
        for base in range(first, self.lso[partition], 10):
            if out and size + 100 > max_bytes:
                break
            out.append(Batch(base, 10, b"x" * 100))
            size += 100
        return Fetched(out)


def reader(lso: dict[int, int], **opts: str) -> RaftlogStreamReader:
    o = parse_source_options({"topic": "t", **opts}, streaming=True)
    r = RaftlogStreamReader(o, ["h:1"], StructType([StructField("v", LongType())]))
    r._client = FakeClient(lso)
    return r


def test_initial_offset_defaults_to_latest_and_earliest_works() -> None:
    assert reader({0: 50, 1: 7}).initialOffset() == {"t": {"0": 50, "1": 7}}
    r = reader({0: 50, 1: 7}, startingOffsets="earliest")
    assert r.initialOffset() == {"t": {"0": 0, "1": 0}}


def test_read_all_available_ignores_option_limits() -> None:
    r = reader({0: 500, 1: 40}, maxRecordsPerTrigger="10")
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"t": {"0": 500, "1": 40}}
    assert r.reportLatestOffset() == {"t": {"0": 500, "1": 40}}


def test_max_rows_spreads_over_partitions() -> None:
    r = reader({0: 500, 1: 40}, maxRecordsPerTrigger="100")
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    end = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(100))["t"]
    assert end["0"] + end["1"] == 100 and end["1"] >= 1


def test_max_bytes_admits_whole_batches_within_budget() -> None:
    r = reader({0: 100, 1: 100}, maxBytesPerTrigger="400")
    assert r.getDefaultReadLimit() == ReadMaxBytes(400)
    end = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxBytes(400))["t"]
    assert end == {"0": 20, "1": 20}  # 200 bytes each = two 10-record batches each


def test_max_bytes_below_one_batch_still_progresses_round_robin() -> None:
    r = reader({0: 100, 1: 100}, maxBytesPerTrigger="10")
    first = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxBytes(10))["t"]
    assert sorted(first.values()) == [0, 10]  # exactly one batch admitted
    start, advanced = first, set()
    for _ in range(10):
        end = r.latestOffset({"t": start}, ReadMaxBytes(10))["t"]
        assert sum(end.values()) - sum(start.values()) == 10  # one batch per trigger
        advanced |= {p for p in end if end[p] > start[p]}
        start = end
    assert advanced == {"0", "1"}  # neither partition is starved


def test_available_now_stops_at_the_offsets_seen_at_start() -> None:
    r = reader({0: 30})
    r.prepareForTriggerAvailableNow()
    r._client.lso[0] = 90  # written after the query started
    assert r.latestOffset({"t": {"0": 0}}, ReadAllAvailable()) == {"t": {"0": 30}}


def test_partitions_plan_ranges_and_split_for_min_partitions() -> None:
    r = reader({0: 100, 1: 10}, minPartitions="4")
    parts = r.partitions({"t": {"0": 0, "1": 0}}, {"t": {"0": 100, "1": 10}})
    ranges = [(p.partition, p.start, p.end) for p in parts]
    assert sum(e - s for _, s, e in ranges) == 110
    assert len([x for x in ranges if x[0] == 0]) >= 3
