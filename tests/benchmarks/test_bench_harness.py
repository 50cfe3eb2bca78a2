"""The harness in-process: registry, skip/fail handling, row validation, report files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks import cli, machine
from benchmarks.context import RunContext
from benchmarks.registry import Registry, Scenario, Skip, UnknownScenario, require
from benchmarks.results import format_figure, validate_rows


def _registry(*entries: Scenario) -> Registry:
    registry = Registry()
    for entry in entries:
        registry.register(entry)
    return registry


def _ok(ctx: RunContext) -> list[dict]:
    ctx.set_total(2)
    ctx.advance(2)
    ctx.note("measured nothing real")
    return [{"case": "a", "ops/s": 10.0}, {"case": "b", "ops/s": 20, "extra": 1.5}]


def _skip(ctx: RunContext) -> list[dict]:
    raise Skip("needs a thing that is not here")


def _boom(ctx: RunContext) -> list[dict]:
    raise RuntimeError("kaput")


def _bad_rows(ctx: RunContext) -> list[dict]:
    return [{"case": "only a label"}]


def test_skip_does_not_fail_the_run_and_is_reported(tmp_path: Path) -> None:
    registry = _registry(Scenario("good", "ok one", _ok), Scenario("later", "skips", _skip))
    assert cli.main(["--quick", "--out", str(tmp_path)], registry) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    good, later = doc["scenarios"]
    assert good["status"] == "ok"
    assert good["rows"] == [{"case": "a", "ops/s": 10.0}, {"case": "b", "ops/s": 20, "extra": 1.5}]
    assert good["notes"] == ["measured nothing real"]
    assert good["plot"] == "good.png" and (tmp_path / "good.png").exists()
    assert later["status"] == "skipped"
    assert later["reason"] == "needs a thing that is not here"
    assert later["plot"] is None and not (tmp_path / "later.png").exists()
    markdown = (tmp_path / "results.md").read_text()
    assert "**skipped: needs a thing that is not here**" in markdown
    assert "| case | ops/s | extra |" in markdown
    assert "| b | 20 | 1.5 |" in markdown


def test_a_failing_scenario_exits_1_but_the_others_are_written(tmp_path: Path) -> None:
    registry = _registry(
        Scenario("boom", "raises", _boom),
        Scenario("bad", "returns rows without figures", _bad_rows),
        Scenario("good", "ok one", _ok),
    )
    assert cli.main(["--out", str(tmp_path)], registry) == 1
    doc = json.loads((tmp_path / "results.json").read_text())
    status = {s["name"]: (s["status"], s["reason"]) for s in doc["scenarios"]}
    assert status["boom"] == ("failed", "RuntimeError: kaput")
    assert status["bad"][0] == "failed" and "no numeric figure" in status["bad"][1]
    assert status["good"] == ("ok", "")


def test_selection_order_and_unknown_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    registry = _registry(Scenario("a", "", _ok), Scenario("b", "", _ok))
    assert [s.name for s in registry.select([])] == ["a", "b"]
    assert [s.name for s in registry.select(["b", "a", "b"])] == ["b", "a"]
    with pytest.raises(UnknownScenario) as err:
        registry.select(["a", "zz"])
    assert str(err.value) == "unknown scenario(s): zz; valid names: a, b"
    assert cli.main(["zz", "--out", str(tmp_path)], registry) == 2
    assert "valid names: a, b" in capsys.readouterr().err


def test_register_rejects_duplicates_and_bad_names() -> None:
    registry = _registry(Scenario("a", "", _ok))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(Scenario("a", "", _ok))
    with pytest.raises(ValueError, match="scenario name"):
        registry.register(Scenario("has space", "", _ok))


def test_scenario_flags_reach_the_context(tmp_path: Path) -> None:
    seen: list[int] = []

    def add(group: argparse._ArgumentGroup) -> None:
        group.add_argument("--widgets", type=int, default=None)

    def run(ctx: RunContext) -> list[dict]:
        seen.append(ctx.option("widgets", quick=1, full=100))
        return [{"n": float(seen[-1])}]

    registry = _registry(Scenario("w", "", run, add_arguments=add))
    assert cli.main(["--quick", "--out", str(tmp_path)], registry) == 0
    assert cli.main(["--out", str(tmp_path)], registry) == 0
    assert cli.main(["--quick", "--widgets", "7", "--out", str(tmp_path)], registry) == 0
    assert seen == [1, 100, 7]


def test_require_skips_only_what_is_missing() -> None:
    with pytest.raises(Skip, match=r"raftlog\.no_such_module is not built yet"):
        require("raftlog.no_such_module", "Thing")
    with pytest.raises(Skip, match=r"raftlog\.storage\.batch\.NoSuchThing is not built yet"):
        require("raftlog.storage.batch", "NoSuchThing")
    from raftlog.storage.batch import RecordBatch

    assert require("raftlog.storage.batch", "RecordBatch") is RecordBatch


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ({"a": 1}, "must return a list"),
        ([{}], "non-empty dict"),
        ([{"case": "x"}], "no numeric figure"),
        ([{"ok": True}], "str label or a number"),
        ([{"x": float("nan")}], "not finite"),
        ([{1: 2.0}], "must be a str"),
    ],
)
def test_validate_rows_rejects_bad_rows(rows: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        validate_rows(rows)


def test_format_figure() -> None:
    assert format_figure(1234567.8) == "1,234,568"
    assert format_figure(12) == "12"
    assert format_figure(0.0123456) == "0.01235"
    assert format_figure(3.14159) == "3.142"
    assert format_figure("label") == "label"


def test_machine_reports_cores_memory_and_the_out_dirs_disk(tmp_path: Path) -> None:
    info = machine.machine(tmp_path)
    assert isinstance(info["cores"], int) and info["cores"] >= 1
    assert info["disk_path"] == str(tmp_path.resolve())
    if Path("/proc/self/mountinfo").exists():
        assert info["disk_filesystem"] != machine.UNKNOWN
        assert str(tmp_path.resolve()).startswith(str(info["disk_mount"]))
    assert machine.versions()["raftlog"] != "not installed"


def test_default_out_dir_is_dated_under_benchmarks_results() -> None:
    import datetime

    path = cli.default_out_dir(datetime.date(2031, 2, 3))
    assert path.parts[-3:] == ("benchmarks", "results", "2031-02-03")


def _lines(ctx: RunContext) -> list[dict]:
    ctx.add_series("throughput against clients", "sys a", "clients", "req/s", [(1, 5), (4, 9)])
    ctx.add_series("throughput against clients", "sys b", "clients", "req/s", [(1, 3), (4, 0)])
    ctx.add_series("throughput against clients", "never measured", "clients", "req/s", [(1, 0)])
    ctx.add_series("latency CDF", "sys a", "ms", "fraction", [(1.0, 0.5), (2.0, 1.0)], log_x=True)
    ctx.add_series("empty", "sys a", "x", "y", [])
    return [{"case": "a", "req/s": 9.0}]


def test_series_are_kept_with_the_results_and_drawn_as_line_panels(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from benchmarks.plots import series_plot
    from benchmarks.results import ScenarioResult

    assert cli.main(["--quick", "--out", str(tmp_path)], _registry(Scenario("l", "d", _lines))) == 0
    (entry,) = json.loads((tmp_path / "results.json").read_text())["scenarios"]
    # an all-zero or empty line is never recorded: a plot shows only what was measured
    assert [(s["panel"], s["line"]) for s in entry["series"]] == [
        ("throughput against clients", "sys a"),
        ("throughput against clients", "sys b"),
        ("latency CDF", "sys a"),
    ]
    assert entry["series"][0]["points"] == [[1.0, 5.0], [4.0, 9.0]]
    assert (tmp_path / "l.png").stat().st_size > 0
    ctx = RunContext(True, tmp_path, argparse.Namespace())
    _lines(ctx)
    fig = plt.figure()
    try:
        series_plot(ScenarioResult("l", "d", "ok", series=ctx.series), fig)
        throughput, cdf = fig.axes
        assert [line.get_label() for line in throughput.lines] == ["sys a", "sys b"]
        assert list(throughput.lines[0].get_xdata()) == [1.0, 4.0]
        assert cdf.get_xscale() == "log" and throughput.get_xscale() == "linear"
    finally:
        plt.close(fig)
