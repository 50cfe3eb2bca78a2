"""The scenarios' bodies, against fakes where the raftlog piece may not exist yet."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.context import RunContext
from benchmarks.scenarios import disk, restart, sim


def _ctx(tmp_path: Path, quick: bool = True, **flags: object) -> RunContext:
    return RunContext(quick=quick, out_dir=tmp_path, args=argparse.Namespace(**flags))


def test_sequential_write_writes_everything_and_cleans_up(tmp_path: Path) -> None:
    ticks: list[float] = []
    path = tmp_path / "f"
    written, seconds, fsyncs = disk.sequential_write(path, 4 * disk.MIB, disk.MIB, 60, ticks.append)
    assert (written, fsyncs, len(ticks)) == (4 * disk.MIB, 4, 4)
    assert seconds > 0
    assert not path.exists()


def test_sequential_write_stops_at_the_deadline(tmp_path: Path) -> None:
    # A deadline already passed: exactly one fsync interval is written, then it stops.
    written, _, fsyncs = disk.sequential_write(
        tmp_path / "f", 8 * disk.MIB, 2 * disk.MIB, -1.0, lambda _: None
    )
    assert (written, fsyncs) == (2 * disk.MIB, 1)


def test_sequential_write_rejects_a_bad_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 1 MiB"):
        disk.sequential_write(tmp_path / "f", disk.MIB, 4096, 1, lambda _: None)


def test_small_fsyncs_counts(tmp_path: Path) -> None:
    done, seconds = disk.small_fsyncs(tmp_path / "f", 5, 60, lambda _: None)
    assert done == 5 and seconds > 0
    assert not (tmp_path / "f").exists()


class FakeLog:
    """Just enough of SegmentedLog: offsets survive close/open in a class-level table.

    ``lose_on_reopen`` makes a reopen come back shorter, like a broken recovery.
    """

    logs: ClassVar[dict[Path, int]] = {}
    lose_on_reopen = False

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)  # the cold opens drop its files' pages
        (path / "segment.log").touch()
        known = self.logs.get(path)
        self.dirty_offset = -1 if known is None else known - (1 if self.lose_on_reopen else 0)

    @classmethod
    def open(cls, path: Path) -> FakeLog:
        return cls(path)

    def append(self, batches: list) -> int:
        assert batches[0].base_offset == self.dirty_offset + 1
        self.dirty_offset = batches[-1].last_offset
        return self.dirty_offset

    def flush(self) -> int:
        return self.dirty_offset

    def close(self) -> None:
        self.logs[self.path] = self.dirty_offset


def test_restart_reports_each_size_and_the_ratio(tmp_path: Path) -> None:
    rows = restart.measure(_ctx(tmp_path), FakeLog)
    assert [r["log"] for r in rows] == ["10 MiB", "100 MiB", "100 MiB / 10 MiB"]
    small, large, ratio = rows
    assert small["opens"] == large["opens"] == restart.QUICK_OPENS
    assert small["open s (median)"] <= small["open s (max)"]
    assert small["open s cold (median)"] <= small["open s cold (max)"]
    assert ratio["ratio"] == pytest.approx(large["open s (median)"] / small["open s (median)"])
    assert ratio["ratio cold"] == pytest.approx(
        large["open s cold (median)"] / small["open s cold (median)"]
    )
    assert ratio["goal ratio"] == restart.GOAL_RATIO
    # 100 MiB of 1 KiB records were written, then every open recovered all of them.
    assert FakeLog.logs[max(FakeLog.logs, key=FakeLog.logs.get)] == 100 * 1024 - 1


def test_restart_refuses_a_log_that_reopens_short(tmp_path: Path) -> None:
    class Lossy(FakeLog):
        lose_on_reopen = True
        logs: ClassVar[dict[Path, int]] = {}

    with pytest.raises(RuntimeError, match=r"reopened log .* ends at"):
        restart.measure(_ctx(tmp_path), Lossy)


def test_sim_counts_seeds_and_failures(tmp_path: Path) -> None:
    calls: list[list[int]] = []

    def run_seeds(seeds: list[int]) -> SimpleNamespace:
        calls.append(seeds)
        return SimpleNamespace(failed=[SimpleNamespace(seed=s) for s in seeds if s in (7, 40)])

    ctx = _ctx(tmp_path, seeds=None)
    (row,) = sim.measure(ctx, run_seeds)
    assert sorted(s for chunk in calls for s in chunk) == list(range(sim.QUICK_SEEDS))
    assert row["failures"] == 2 and row["seeds/s"] > 0
    assert "[7, 40]" in ctx.notes[0]

    calls.clear()
    (row,) = sim.measure(_ctx(tmp_path, seeds=3), run_seeds)
    assert calls == [[0, 1, 2]] and row["failures"] == 0 and row["case"] == "3 seeds"
