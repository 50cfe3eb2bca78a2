"""The sink's one-line commit summary."""

from __future__ import annotations

from pyspark_raftlog.commit_summary import summarize
from pyspark_raftlog.sink import RaftlogCommitMessage
from pyspark_raftlog.txn_writer import PartitionWrite


def msg(spark_p: int, **kw: object) -> RaftlogCommitMessage:
    return RaftlogCommitMessage(spark_p, PartitionWrite(**kw))  # type: ignore[arg-type]


def test_summary_merges_ranges_and_counts() -> None:
    line = summarize(
        "events",
        "batch 7",
        [
            msg(0, topic_partition=0, records=10, bytes=2048, base_offset=0, last_offset=9),
            msg(2, topic_partition=0, records=5, bytes=1024, base_offset=11, last_offset=15),
            msg(1, topic_partition=1, records=0, replayed=True),
            None,
        ],
    )
    assert line == (
        "raftlog sink: topic 'events' batch 7: 15 records, 3.0 KiB in 3 tasks "
        "to partitions p0 [0..15]; 1 tasks replayed (already committed, skipped); "
        "1 tasks failed"
    )


def test_summary_of_empty_batch() -> None:
    assert (
        summarize("t", "batch 0", [])
        == "raftlog sink: topic 't' batch 0: 0 records, 0 B in 0 tasks"
    )
