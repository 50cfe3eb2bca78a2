"""check_batches: fractured, lost, duplicated and uncommitted batches, on small histories."""

from __future__ import annotations

import pytest

from raftlog.checker import BATCH_KINDS, BatchHistory, check_batches, row_value
from raftlog.checker.batches import parse_row_value

TP0, TP1 = ("t", 0), ("t", 1)


def _rows(writer: str, version: int, rows: range, attempt: str = "a") -> list[str]:
    return [row_value(writer, version, r, attempt) for r in rows]


def _history() -> BatchHistory:
    """q0 version 0 (4 rows over two partitions) committed, version 1 (2 rows) declared."""
    h = BatchHistory()
    h.declare("q0", 0, 4)
    h.declare("q0", 1, 2)
    h.commit("q0", 0, "run1")
    return h


def _records(*placed: tuple[tuple[str, int], list[str]]) -> list[tuple[tuple[str, int], int, str]]:
    out = []
    for tp, values in placed:
        out += [(tp, i, v) for i, v in enumerate(values)]
    return out


def test_a_clean_history_passes() -> None:
    h = _history()
    h.cut("r", 0.0, {TP0: 0, TP1: 0}, [])  # before the commit: nothing
    whole = _records((TP0, _rows("q0", 0, range(2))), (TP1, _rows("q0", 0, range(2, 4))))
    h.cut("r", 1.0, {TP0: 3, TP1: 3}, whole)
    h.cut("f", 2.0, {TP0: 3, TP1: 3}, whole, final=True)
    report = check_batches(h)
    assert report.ok, report.render()
    assert report.counts() == {
        "versions": 2,
        "versions_committed": 1,
        "cuts": 3,
        "rows_in_final_read": 4,
        **{k: 0 for k in BATCH_KINDS},
    }


def test_a_cut_showing_part_of_a_batch_is_fractured() -> None:
    h = _history()
    part = _records((TP0, _rows("q0", 0, range(2))))  # partition 1's rows are missing
    h.cut("reader1", 1.0, {TP0: 3, TP1: 0}, part)
    report = check_batches(h)
    assert report.count("fractured_batch") == 1
    assert not report.ok
    detail = report.anomalies["fractured_batch"][0].detail
    assert "2 of the 4 rows" in detail and "missing rows [2, 3]" in detail
    assert "reader1" in detail


def test_a_committed_version_missing_from_the_final_read_is_lost() -> None:
    h = _history()
    h.cut("f", 2.0, {TP0: 0, TP1: 0}, [], final=True)
    report = check_batches(h)
    assert report.count("lost_batch") == 1
    assert report.count("fractured_batch") == 0  # nothing of it shows: not fractured
    assert "4 rows are not in the final read" in report.anomalies["lost_batch"][0].detail


def test_committed_from_outside_the_history_counts() -> None:
    """A commit whose driver died before hearing back is known from the coordinator."""
    h = _history()
    h.cut("f", 2.0, {TP0: 9, TP1: 9}, _records((TP0, _rows("q0", 0, range(4)))), final=True)
    assert check_batches(h).ok
    assert check_batches(h, committed=[("q0", 1)]).count("lost_batch") == 1


def test_a_row_seen_twice_is_duplicated() -> None:
    h = _history()
    rows = _rows("q0", 0, range(4), "a1") + _rows("q0", 0, range(1), "a2")  # a replay's copy
    h.cut("f", 2.0, {TP0: 9}, _records((TP0, rows)), final=True)
    report = check_batches(h)
    assert report.count("duplicated_row") == 1
    anomaly = report.anomalies["duplicated_row"][0]
    assert anomaly.value == "q0|0|0"
    assert "by a1" in anomaly.detail and "by a2" in anomaly.detail


def test_rows_of_a_version_never_committed_are_reported() -> None:
    h = _history()
    h.cut("r", 1.0, {TP0: 9}, _records((TP0, _rows("q0", 1, range(2)))))
    report = check_batches(h)
    assert report.count("uncommitted_batch") == 1
    assert report.count("fractured_batch") == 0


def test_values_and_declarations_are_validated() -> None:
    with pytest.raises(ValueError, match="must not contain"):
        row_value("q|0", 0, 0, "a")
    with pytest.raises(ValueError, match="not a batch row value"):
        parse_row_value("plain")
    assert parse_row_value(row_value("q", 3, 7, "a")) == (("q", 3, 7), "a")
    h = _history()
    with pytest.raises(ValueError, match="same rows"):
        h.declare("q0", 0, 5)
    h.cut("r", 0.0, {TP0: 1}, [(TP0, 0, row_value("q9", 0, 0, "a"))])
    with pytest.raises(ValueError, match="undeclared"):
        check_batches(h)


def test_render_names_each_kind() -> None:
    h = _history()
    h.cut("r", 1.0, {TP0: 3}, _records((TP0, _rows("q0", 0, range(1)))))
    text = check_batches(h).render()
    assert text.startswith("batch checker: FAILED")
    assert "fractured_batch 1" in text
