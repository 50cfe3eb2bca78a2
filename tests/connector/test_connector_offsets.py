"""Offset documents, startingOffsets resolution and admission-control arithmetic."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark_raftlog.admission import limit_end_offsets, spread_budget
from pyspark_raftlog.offsets import (
    OffsetDocumentError,
    format_offsets,
    parse_offsets,
    resolve_spec,
)
from pyspark_raftlog.options import OffsetSpec


def test_format_is_kafka_style_and_stable() -> None:
    doc = format_offsets("events", {10: 3, 2: 7, 0: 0})
    assert json.dumps(doc) == '{"events": {"0": 0, "2": 7, "10": 3}}'
    assert parse_offsets("events", json.loads(json.dumps(doc))) == {0: 0, 2: 7, 10: 3}


@pytest.mark.parametrize(
    ("doc", "pattern"),
    [
        ({"other": {"0": 1}}, r"for topic 'other', but this query reads topic 'events'"),
        ({"events": {"a": 1}}, r"partition key must be a non-negative integer; got 'a'"),
        ({"events": {"0": -1}}, r"offset of partition 0 must be an integer >= 0; got -1"),
        ({"events": {"0": 1}, "x": {}}, r"offset document must be"),
        ([1, 2], r"offset document must be"),
    ],
)
def test_parse_rejects_malformed(doc: object, pattern: str) -> None:
    with pytest.raises(OffsetDocumentError, match=pattern):
        parse_offsets("events", doc)


BOUNDS = {0: (5, 100), 1: (0, 0), 2: (10, 20)}


def test_resolve_words() -> None:
    assert resolve_spec(OffsetSpec("earliest"), BOUNDS, "startingOffsets") == {0: 5, 1: 0, 2: 10}
    assert resolve_spec(OffsetSpec("latest"), BOUNDS, "startingOffsets") == {0: 100, 1: 0, 2: 20}


def test_resolve_json_with_sentinels() -> None:
    spec = OffsetSpec("json", {0: 42, 1: -1, 2: -2}, "events")
    assert resolve_spec(spec, BOUNDS, "startingOffsets") == {0: 42, 1: 0, 2: 10}


def test_resolve_json_must_name_every_partition() -> None:
    spec = OffsetSpec("json", {0: 1, 7: 1}, "events")
    with pytest.raises(
        OffsetDocumentError,
        match=r"option 'startingOffsets' must give an offset for each of the topic's partitions "
        r"\[0, 1, 2\]; unknown: \[7\]; missing: \[1, 2\]",
    ):
        resolve_spec(spec, BOUNDS, "startingOffsets")


def test_spread_proportional_to_backlog() -> None:
    # floor = 100 // (2*2) = 25 each, then 50 more split 875:75 by remaining backlog.
    shares = spread_budget(100, {0: 900, 1: 100})
    assert sum(shares.values()) == 100
    assert shares[0] > shares[1] >= 25


def test_spread_does_not_starve_small_partition() -> None:
    shares = spread_budget(10, {0: 1_000_000, 1: 1})
    assert shares == {0: 9, 1: 1}


def test_spread_all_fits() -> None:
    assert spread_budget(50, {0: 10, 1: 0, 2: 5}) == {0: 10, 1: 0, 2: 5}


def test_spread_small_budget_rotates() -> None:
    backlog = {0: 5, 1: 5, 2: 5}
    picked = [tuple(p for p, s in spread_budget(1, backlog, r).items() if s) for r in range(3)]
    assert picked == [(0,), (1,), (2,)]


def test_spread_rejects_negative() -> None:
    with pytest.raises(ValueError, match="budget must be >= 0"):
        spread_budget(-1, {0: 1})


@given(
    budget=st.integers(0, 10_000),
    backlog=st.dictionaries(st.integers(0, 20), st.integers(0, 5_000), max_size=12),
    rotation=st.integers(0, 1_000),
)
def test_spread_contract(budget: int, backlog: dict[int, int], rotation: int) -> None:
    shares = spread_budget(budget, backlog, rotation)
    assert set(shares) == set(backlog)
    assert all(0 <= shares[p] <= backlog[p] for p in backlog)
    assert sum(shares.values()) == min(budget, sum(backlog.values()))
    waiting = [p for p, b in backlog.items() if b > 0]
    if budget >= len(waiting):
        assert all(shares[p] >= 1 for p in waiting)


def test_limit_end_offsets() -> None:
    end = limit_end_offsets({0: 10, 1: 50}, {0: 1010, 1: 60, 2: 4}, max_records=30)
    assert all(end[p] >= s for p, s in {0: 10, 1: 50, 2: 0}.items())
    assert (end[0] - 10) + (end[1] - 50) + end[2] == 30
    assert end[1] > 50 and end[2] > 0  # small partitions are not starved
