"""A topic deleted and created again under its name is data loss for a stream reading it,
told by the topic id recorded in the offsets (Kafka's failOnDataLoss), not a stall."""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_raftlog.errors import DataLossError
from pyspark_raftlog.offsets import OffsetDocumentError, format_topic_offsets, parse_topic_ids
from pyspark_raftlog.options import parse_source_options
from pyspark_raftlog.source import RaftlogStreamReader

from tests.connector.test_connector_stream_planning import FakeClient, Partition


@dataclasses.dataclass
class MetaWithId:
    partitions: list[Partition]
    topic_id: int


class Topic(FakeClient):
    """FakeClient whose topic has an id: a recreate is a new id and new, smaller offsets."""

    def __init__(self, lso: dict[int, int], topic_id: int) -> None:
        super().__init__(lso)
        self.topic_id = topic_id

    def describe_topic(self, topic: str) -> MetaWithId:
        return MetaWithId([Partition(p) for p in sorted(self.lso)], self.topic_id)


def _reader(client: Topic, **opts: str) -> RaftlogStreamReader:
    o = parse_source_options({"topic": "t", **opts}, streaming=True)
    r = RaftlogStreamReader(o, ["h:1"], StructType([StructField("v", LongType())]))
    r._client = client
    return r


def test_offsets_record_the_topic_id_and_old_documents_still_parse() -> None:
    doc = format_topic_offsets({("t", 0): 5, ("t", 1): 7}, {"t": 17, "gone": 3})
    assert doc == {"t": {"0": 5, "1": 7}, "__topic_ids": {"t": 17}}
    assert parse_topic_ids(doc) == {"t": 17}
    assert parse_topic_ids({"t": {"0": 5}}) == {}  # a checkpoint from before ids
    with pytest.raises(OffsetDocumentError, match="__topic_ids"):
        parse_topic_ids({"t": {"0": 5}, "__topic_ids": {"t": -4}})


def test_a_recreated_topic_fails_the_query_naming_both_ids_and_the_offsets() -> None:
    client = Topic({0: 500, 1: 300}, topic_id=17)
    r = _reader(client)
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert start["__topic_ids"] == {"t": 17}
    client.lso, client.topic_id = {0: 40, 1: 10}, 23  # deleted, created, 50 new records
    with pytest.raises(DataLossError) as err:
        r.latestOffset(start, ReadAllAvailable())
    text = str(err.value)
    assert "topic 't' was deleted and created again (topic id 17, now 23)" in text
    assert "{0: 500, 1: 300}" in text and "failOnDataLoss" in text


def test_with_fail_on_data_loss_false_the_new_topic_is_read_from_its_beginning() -> None:
    client = Topic({0: 500, 1: 300}, topic_id=17)
    r = _reader(client, failOnDataLoss="false")
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    client.lso, client.topic_id = {0: 40, 1: 10}, 23
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 40, "1": 10}, "__topic_ids": {"t": 23}}
    assert _covered(r.partitions(start, end)) == {0: [(0, 40)], 1: [(0, 10)]}
    # the same topic again: nothing lost, nothing read twice
    client.lso = {0: 45, 1: 10}
    later = r.latestOffset(end, ReadAllAvailable())
    assert _covered(r.partitions(end, later)) == {0: [(40, 45)]}


def _covered(planned) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the offset ranges the planned splits read, adjacent ones merged."""
    out: dict[int, list[tuple[int, int]]] = {}
    for s in sorted(planned, key=lambda s: (s.partition, s.start)):
        ranges = out.setdefault(s.partition, [])
        if ranges and ranges[-1][1] == s.start:
            ranges[-1] = (ranges[-1][0], s.end)
        else:
            ranges.append((s.start, s.end))
    return out
