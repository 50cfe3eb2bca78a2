"""Input partition planning (minPartitions)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyspark_raftlog.splits import split_ranges


def test_one_split_per_partition_by_default() -> None:
    assert split_ranges({1: (5, 10), 0: (0, 3), 2: (7, 7)}) == [(0, 0, 3), (1, 5, 10)]


def test_min_partitions_cuts_big_ranges_proportionally() -> None:
    splits = split_ranges({0: (0, 900), 1: (0, 100)}, min_partitions=10)
    assert [s for s in splits if s[0] == 0] == [(0, i * 100, (i + 1) * 100) for i in range(9)]
    assert [s for s in splits if s[0] == 1] == [(1, 0, 100)]


@given(
    ranges=st.dictionaries(
        st.integers(0, 10),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(lambda t: (min(t), max(t))),
        max_size=8,
    ),
    min_partitions=st.none() | st.integers(1, 50),
)
def test_splits_cover_each_offset_exactly_once(ranges, min_partitions) -> None:
    splits = split_ranges(ranges, min_partitions)
    covered = sorted((p, o) for p, s, e in splits for o in range(s, e))
    expected = sorted((p, o) for p, (s, e) in ranges.items() for o in range(s, e))
    assert covered == expected
    assert all(e > s for _, s, e in splits)
