"""The ``latency`` scenario's parts that need no Spark: the clock source's rows, the
reader sink's tallies and their window, the counted percentiles, the flags."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
import pyarrow as pa
import pytest

from benchmarks.scenarios import latency as scenario
from benchmarks.workloads import spark_clock_source as clock
from benchmarks.workloads import spark_latency_sink as sink
from benchmarks.workloads.latency import latency_columns

T0_US = 1_800_000_000_000_000  # an epoch second boundary


def test_clock_rows_are_due_at_t0_plus_i_over_rate_with_fixed_width_payloads() -> None:
    batch = clock.clock_batch(10, 15, T0_US, 1_000.0, b"p" * 100)
    assert batch.column("value").to_pylist() == [10, 11, 12, 13, 14]
    due = batch.column("generated").cast(pa.int64()).to_pylist()
    assert due == [T0_US + i * 1_000 for i in range(10, 15)]
    assert batch.column("payload").to_pylist() == ["p" * 100] * 5


def test_clock_offsets_never_go_back_and_count_the_rows_due() -> None:
    reader = clock.ClockStreamReader({"rowspersecond": "1000"})
    start = reader.initialOffset()
    time.sleep(0.05)
    end = reader.latestOffset(start, None)
    assert end["t0"] == start["t0"]
    assert 40 <= end["row"] <= 1_000  # 50 ms at 1,000 rows/s, however slow the machine
    assert reader.latestOffset(end, None)["row"] >= end["row"]
    parts = reader.partitions(start, end)
    assert sum(p.end - p.start for p in parts) == end["row"]


@pytest.mark.parametrize(
    "options",
    [{}, {"rowspersecond": "0"}, {"rowspersecond": "x"}, {"rowspersecond": "5", "partitions": "0"}],
)
def test_clock_options_are_checked_by_name(options: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"bench_clock: .*rowsPerSecond"):
        clock.ClockStreamReader(options)


def _batch(generated_us: list[int], appended_ms: list[int] | None = None) -> pa.RecordBatch:
    columns = {"generated": pa.array(generated_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))}
    if appended_ms is not None:
        columns[sink.APPENDED] = pa.array([m * 1000 for m in appended_ms], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        )
    return pa.RecordBatch.from_pydict(columns)


def test_the_sink_tallies_every_row_and_collect_keeps_the_window(tmp_path: Path) -> None:
    now_us = time.time_ns() // 1000
    second = now_us // 1_000_000
    # rows due 3 s, 2 s and 1 s ago, in the seconds second-3, second-2, second-1 (about)
    due = [now_us - 3_000_000, now_us - 2_000_000, now_us - 2_000_000, now_us - 1_000_000]
    writer = sink.LatencyStreamWriter(str(tmp_path))
    message = writer.write(iter([_batch(due, [d // 1000 + 5 for d in due]), _batch([])]))
    assert message.rows == 4
    assert [p.suffix for p in tmp_path.iterdir()] == [".npy"]  # written aside, then renamed
    everything = sink.collect(tmp_path, 0, second + 10)
    seen_values, seen_counts = everything[sink.SEEN]
    assert int(seen_counts.sum()) == 4
    assert min(seen_values) >= 0.99 and max(seen_values) <= 3.0 + 60  # seconds, by wall clock
    stored_values, stored_counts = everything[sink.STORED]
    assert int(stored_counts.sum()) == 4
    assert list(stored_values) == pytest.approx([0.0049], abs=1e-3)  # 5 ms, in 100 µs units
    first = (now_us - 2_000_000) // 1_000_000
    window = sink.collect(tmp_path, first, first + 1)
    assert int(window[sink.SEEN][1].sum()) == 2  # only the two rows due in that second


def test_counted_percentiles_equal_the_expanded_ones() -> None:
    values, counts = [0.001, 0.010, 0.100], [90, 9, 1]
    expanded = [v for v, n in zip(values, counts, strict=True) for _ in range(n)]
    assert latency_columns(values, counts=counts) == latency_columns(expanded)
    with pytest.raises(ValueError, match="counts: expected 3"):
        latency_columns(values, counts=[1, 2])


def test_rows_due_in_a_window_of_the_clock() -> None:
    t0 = 1_000 * 1_000_000  # µs
    # 100 rows/s from t0 = 1000 s: rows 100..199 are due in [1001, 1002)
    assert scenario.rows_due(t0, 100.0, 1001.0, 1002.0) == 100
    assert scenario.rows_due(t0, 100.0, 990.0, 1000.5) == 50  # none before t0


@pytest.mark.parametrize("text", ["", "0", "10,x", "-5", "10,,20"])
def test_rates_flag_refuses_anything_but_positive_integers(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated positive integers"):
        scenario.rates_arg(text)
    assert scenario.rates_arg("10000,100000") == (10_000, 100_000)


def test_fixed_cost_rows_give_each_sink_its_ratio_to_the_empty_writer() -> None:
    rows = scenario.fixed_cost_rows(
        {scenario.EMPTY: [0.5, 0.4, 0.6], "raftlog exactly-once": [0.8, 0.7, 0.9]},
        {scenario.EMPTY: [], "raftlog exactly-once": []},
        {scenario.EMPTY: 100.0, "raftlog exactly-once": 140.0},
    )
    by_case = {r["case"]: r for r in rows}
    assert by_case["df.write 1,000 rows: raftlog exactly-once"]["/ empty writer"] == pytest.approx(
        0.8 / 0.5
    )
    assert by_case["micro-batch of 1,000 rows: raftlog exactly-once"]["/ empty writer"] == 1.4
    assert not any("first df.write" in c for c in by_case)  # not measured: no row
    assert np.isclose(by_case["df.write 1,000 rows: raftlog exactly-once"]["goal ratio"], 1.5)
