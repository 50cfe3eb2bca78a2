"""The stream reader's planning on the driver (latestOffset, AvailableNow, partitions),
against a fake client: no Spark session and no cluster."""

from __future__ import annotations

import asyncio
import dataclasses

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_raftlog.admission import TriggerDelay
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
    stored_bytes: tuple[int, ...]  # as the client reports them: compressed sizes


class FakeClient:
    """Partition p holds batches of 10 records with 100-byte payloads, offsets [0, lso),
    stored in ``stored`` bytes each (less than 100: compressed)."""

    def __init__(self, lso: dict[int, int], stored: int = 100) -> None:
        self.lso = lso
        self.stored = stored

    def describe_topic(self, topic: str) -> Meta:
        return Meta([Partition(p) for p in sorted(self.lso)])

    def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        return 0, self.lso[partition], self.lso[partition]

    def call(self, fn):
        """The blocking client's way to run an async helper (the consistent cut)."""
        return asyncio.run(fn(self))

    async def partition_call(self, topic, partition, req, resp_type):
        # no transaction coordinator on this cluster: the cut is the LSOs as they are
        raise UnknownTopicError(f"unknown topic {topic!r}")

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> Fetched:
        first = offset - offset % 10
        out, size = [], 0
        for base in range(first, self.lso[partition], 10):
            if out and size + self.stored > max_bytes:
                break
            out.append(Batch(base, 10, b"x" * 100))
            size += self.stored
        return Fetched(out, (self.stored,) * len(out))


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


def test_max_bytes_counts_stored_compressed_bytes_not_decompressed_payloads() -> None:
    r = reader({0: 100, 1: 100}, maxBytesPerTrigger="400")
    r._client = FakeClient({0: 100, 1: 100}, stored=50)  # each 100-byte payload stored in 50
    end = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxBytes(400))["t"]
    assert end == {"0": 40, "1": 40}  # 200 stored bytes each = four batches each


# ---------------------------------------------------- minOffsetsPerTrigger, maxTriggerDelay


def test_trigger_delay_rule() -> None:
    d = TriggerDelay(min_offsets=100, max_delay_ms=60_000)
    assert d.admit(5, now_ms=1_000)  # the first batch of a run is never held back
    assert d.last_batch_ms == 1_000
    assert not d.admit(99, now_ms=2_000)  # too few, delay not over
    assert not d.admit(99, now_ms=60_999)
    assert d.last_batch_ms == 1_000  # a skipped trigger does not restart the delay
    assert d.admit(100, now_ms=3_000)  # enough: runs at once, restarts the delay
    assert d.last_batch_ms == 3_000
    assert not d.admit(1, now_ms=62_999)
    assert d.admit(1, now_ms=63_000)  # the delay passed: runs with what there is
    assert d.admit(0, now_ms=200_000) and d.last_batch_ms == 63_000  # empty: not a batch


def test_trigger_delay_before_any_batch_waits_for_nothing() -> None:
    d = TriggerDelay(min_offsets=10, max_delay_ms=1_000)
    assert d.admit(0, now_ms=5) and d.last_batch_ms is None  # nothing to read yet
    assert d.admit(3, now_ms=6) and d.last_batch_ms == 6


def test_min_offsets_skips_a_trigger_by_returning_the_previous_end() -> None:
    r = reader({0: 30, 1: 30}, minOffsetsPerTrigger="50", maxTriggerDelay="10m")
    assert r._delay is not None and r._delay.max_delay_ms == 600_000
    first = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable())
    assert first == {"t": {"0": 30, "1": 30}}  # the first batch runs with 60 new offsets
    r._client.lso.update({0: 50, 1: 49})  # 39 new: fewer than 50
    assert r.latestOffset(first, ReadAllAvailable()) is first  # held back: no batch
    assert r.reportLatestOffset() == {"t": {"0": 50, "1": 49}}  # still reports what exists
    r._client.lso[1] = 50  # 40 new
    assert r.latestOffset(first, ReadAllAvailable()) is first
    r._client.lso[0] = 60  # 50 new: enough
    assert r.latestOffset(first, ReadAllAvailable()) == {"t": {"0": 60, "1": 50}}


def test_min_offsets_runs_once_max_trigger_delay_passed() -> None:
    r = reader({0: 10}, minOffsetsPerTrigger="1000", maxTriggerDelay="30s")
    start = r.latestOffset({"t": {"0": 0}}, ReadAllAvailable())  # first batch
    r._client.lso[0] = 15
    assert r.latestOffset(start, ReadAllAvailable()) is start
    assert r._delay is not None
    r._delay.last_batch_ms -= 30_000  # as if the last batch ran 30 s ago
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 15}}


def test_min_offsets_with_max_rows_caps_a_batch_that_runs() -> None:
    r = reader({0: 500}, minOffsetsPerTrigger="20", maxOffsetsPerTrigger="100")
    first = r.latestOffset({"t": {"0": 0}}, ReadMaxRows(100))
    assert first == {"t": {"0": 100}}
    assert r.latestOffset({"t": {"0": 490}}, ReadMaxRows(100)) == {"t": {"0": 490}}  # 10 < 20


def test_available_now_is_never_held_back() -> None:
    r = reader({0: 30}, minOffsetsPerTrigger="1000")
    r.prepareForTriggerAvailableNow()
    r.latestOffset({"t": {"0": 0}}, ReadAllAvailable())
    assert r.latestOffset({"t": {"0": 20}}, ReadAllAvailable()) == {"t": {"0": 30}}
