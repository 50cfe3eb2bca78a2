"""Goals judged on results data, the goals table, HISTORY.md, summary.png and the report command.

Pure functions on results.json-shaped data, and the files ``python -m benchmarks
report`` and a run write (PNG bytes read back, markdown rows compared exactly).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import _bench_repo_path  # puts the repo root on sys.path
import pytest

from benchmarks import report_files
from benchmarks.goals import TIMES as T
from benchmarks.goals import Goal, Pick, evaluate, evaluate_run, row
from benchmarks.plots import is_measure
from benchmarks.registry import load_all
from benchmarks.report import (
    BEGIN,
    END,
    Judged,
    cells,
    goals_table,
    history_row,
    latest,
    merge_history,
    run_info,
    splice,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(_bench_repo_path.REPO_ROOT)

SINK = Goal(
    "sink",
    "Spark sink",
    ours=(Pick("raftlog", row(case="write -> raftlog"), "rows/s"),),
    peers=(Pick("Python writer", row(case="write -> python"), "rows/s"),),
    target=0.8,
)
RESTART = Goal(
    "restart",
    "1 GiB open against 10 MiB",
    ours=(Pick("1 GiB", row(log="1 GiB"), "open s"),),
    peers=(Pick("10 MiB", row(log="10 MiB"), "open s"),),
    target=1.5,
    higher_is_better=False,
    unit="s",
)
FAILOVER = Goal(
    "p99",
    "failover p99",
    ours=(Pick("p99", row(case="* leader kills"), "p99 s"),),
    bound=2.0,
    target=1.0,
    higher_is_better=False,
    unit="s",
)
ETCD = Goal(
    "etcd",
    "small writes, 1 client",
    ours=(Pick("raftlog", row(system="raftlog"), "requests/s"),),
    peers=(Pick("etcd", row(system="etcd*"), "requests/s", detail="system"),),
    target=1.0,
)
REELECT = Goal(
    "reelect",
    "re-election p99 at 3,000",
    ours=tuple(Pick(f"{n} partitions", row(partitions=str(n)), "p99 s") for n in (3000, 1000)),
    bound=5.0,
    target=1.0,
    higher_is_better=False,
    unit="s",
)
DECLARED = [("spark", SINK), ("restart", RESTART), ("failover", FAILOVER), ("peers", ETCD)]


def _scenario(name: str, rows: list[dict[str, Any]], status: str = "ok") -> dict[str, Any]:
    return {"name": name, "status": status, "rows": rows if status == "ok" else []}


def _run_doc(started: str, scenarios: list[dict[str, Any]], commit: str = "abc123") -> dict:
    return {
        "started": started,
        "quick": False,
        "command": "python -m benchmarks",
        "commit": commit,
        "machine": {
            "cores": 2,
            "cpu": "Xeon",
            "memory_gib": 23.5,
            "disk_filesystem": "ext4",
            "disk_device": "/dev/vda",
            "disk_kind": "ssd",
        },
        "load": [1.0, 2.5],
        "versions": {},
        "scenarios": scenarios,
    }


SPARK = _scenario(
    "spark",
    [
        {"case": "write -> python", "rows/s": 1_000_000.0, "micro-batches": 58},
        {"case": "write -> raftlog", "rows/s": 700_000.0, "micro-batches": 41},
    ],
)
RESTART_OK = _scenario(
    "restart", [{"log": "10 MiB", "open s": 0.010}, {"log": "1 GiB", "open s": 0.014}]
)
FAILOVER_OK = _scenario("failover", [{"case": "20 leader kills", "p50 s": 0.8, "p99 s": 2.5}])
PEERS = _scenario(
    "peers",
    [
        {"system": "etcd 3.4.23", "requests/s": 700.0},
        {"system": "etcd 3.4.23 gRPC", "requests/s": 800.0},
        {"system": "raftlog", "requests/s": 760.0},
    ],
)


def test_a_ratio_goal_is_met_at_the_target_and_missed_below() -> None:
    outcome = evaluate(SINK, "spark", {"spark": SPARK})
    assert (outcome.ours, outcome.peer) == (700_000.0, 1_000_000.0)
    assert outcome.peer_name == "Python writer"
    assert outcome.ratio == pytest.approx(0.7)
    assert outcome.met is False
    at_target = _scenario(
        "spark",
        [
            {"case": "write -> python", "rows/s": 1000.0},
            {"case": "write -> raftlog", "rows/s": 800.0},
        ],
    )
    assert evaluate(SINK, "spark", {"spark": at_target}).met is True


def test_lower_is_better_goals_invert_the_score() -> None:
    restart = evaluate(RESTART, "restart", {"restart": RESTART_OK})
    assert restart.ratio == pytest.approx(1.4)
    assert restart.met is True
    assert restart.score == pytest.approx(1.5 / 1.4)
    failover = evaluate(FAILOVER, "failover", {"failover": FAILOVER_OK})
    assert (failover.ours, failover.peer, failover.peer_name) == (2.5, 2.0, "bound")
    assert failover.ratio == pytest.approx(1.25)
    assert failover.met is False


def test_the_fastest_peer_is_the_reference_and_is_named() -> None:
    outcome = evaluate(ETCD, "peers", {"peers": PEERS})
    assert outcome.peer == 800.0
    assert outcome.peer_name == "etcd (etcd 3.4.23 gRPC)"
    assert outcome.ratio == pytest.approx(0.95)
    assert outcome.met is False


def test_ours_falls_back_to_the_next_size_and_says_which() -> None:
    only_1000 = _scenario("partitions", [{"partitions": "1000", "p99 s": 56.0}])
    outcome = evaluate(REELECT, "partitions", {"partitions": only_1000})
    assert (outcome.ours, outcome.ours_name, outcome.met) == (56.0, "1000 partitions", False)
    assert "56 s (1000 partitions)" in cells(outcome)[2]


def test_a_failed_or_absent_scenario_is_not_measured() -> None:
    failed = _scenario("spark", [], status="failed")
    for scenarios in ({"spark": failed}, {}):
        outcome = evaluate(SINK, "spark", scenarios)
        assert (outcome.ratio, outcome.met, outcome.measured) == (None, None, False)
        assert cells(outcome)[2:] == ["not measured", f"- (goal ≥ 0.8{T})", "not measured"]


def test_goals_table_of_one_run_names_the_run_and_has_exact_rows() -> None:
    doc = _run_doc("2026-11-28T08:28:40+00:00", [SPARK, RESTART_OK, FAILOVER_OK, PEERS])
    info = run_info(doc)
    outcomes = evaluate_run(DECLARED, doc["scenarios"])
    table = goals_table([Judged(o, info) for o in outcomes])
    lines = table.splitlines()
    assert lines[0] == (
        "Run of 2026-11-28 08:28 UTC, commit `abc123`, on 2 cores (Xeon), 23.5 GiB, ext4 on "
        "/dev/vda (ssd), load average 1.0 → 2.5."
    )
    assert lines[2:8] == [
        "| what | peer | ours | ratio | met |",
        "|---|---|---|---|---|",
        "| Spark sink | Python writer: 1,000,000 rows/s | 700,000 rows/s "
        f"| 0.70{T} (goal ≥ 0.8{T}) | **no** |",
        f"| 1 GiB open against 10 MiB | 10 MiB: 0.01 s | 0.014 s | 1.40{T} (goal ≤ 1.5{T}) | yes |",
        f"| failover p99 | bound: 2 s | 2.5 s | 1.25{T} (goal ≤ 1{T}) | **no** |",
        "| small writes, 1 client | etcd (etcd 3.4.23 gRPC): 800 requests/s | 760 requests/s "
        f"| 0.95{T} (goal ≥ 1{T}) | **no** |",
    ]
    assert lines[-1] == "1 of 4 measured goals met (4 declared)."


def test_latest_takes_each_goal_from_the_newest_run_measuring_it_and_dates_each_row() -> None:
    old = _run_doc("2026-11-27T07:54:00+00:00", [SPARK, RESTART_OK], commit="old1")
    new_spark = _scenario(
        "spark",
        [
            {"case": "write -> python", "rows/s": 1000.0},
            {"case": "write -> raftlog", "rows/s": 900.0},
        ],
    )
    new = _run_doc("2026-11-28T09:08:00+00:00", [new_spark], commit="new2")
    runs = [(run_info(d), d["scenarios"]) for d in (old, new)]
    judged = latest(DECLARED, runs)
    assert [j.run.commit if j.run else None for j in judged] == ["new2", "old1", None, None]
    assert judged[0].outcome.met is True
    table = goals_table(judged).splitlines()
    assert table[2] == "| what | peer | ours | ratio | met | run |"
    assert table[4].endswith("| yes | 2026-11-28 09:08 UTC |")
    assert table[5].endswith("| yes | 2026-11-27 07:54 UTC |")
    assert table[6].endswith("| not measured | - |")
    assert "- 2026-11-28 09:08 UTC: commit `new2`, on 2 cores (Xeon)" in "\n".join(table)
    assert "- 2026-11-27 07:54 UTC: commit `old1`, on 2 cores (Xeon)" in "\n".join(table)


def test_a_run_without_a_recorded_commit_names_the_commit_that_added_it_as_such() -> None:
    doc = _run_doc("2026-11-27T07:54:00+00:00", [SPARK], commit="")
    info = run_info(doc, commit="67dfb39")
    assert (info.commit, info.commit_recorded) == ("67dfb39", False)
    assert info.source.startswith("files committed in `67dfb39` (code at or before it), on 2")


def test_splice_replaces_only_between_the_markers_and_names_them_when_missing() -> None:
    text = f"# Title\n\n## Performance\n\n{BEGIN}\nold table\n{END}\n\n## Next\n"
    out = splice(text, "new table\n")
    assert out == f"# Title\n\n## Performance\n\n{BEGIN}\nnew table\n{END}\n\n## Next\n"
    assert splice(out, "new table\n") == out
    with pytest.raises(ValueError, match="benchmarks-goals:begin"):
        splice("# no markers\n", "x")


def test_history_rows_are_newest_first_and_a_rerun_replaces_its_row() -> None:
    older = _run_doc("2026-11-27T07:54:00+00:00", [SPARK])
    newer = _run_doc("2026-11-28T09:08:00+00:00", [RESTART_OK, FAILOVER_OK])
    row_old = history_row(run_info(older), evaluate_run(DECLARED, older["scenarios"]))
    row_new = history_row(run_info(newer), evaluate_run(DECLARED, newer["scenarios"]))
    assert row_old == f"| 2026-11-27 07:54 UTC | `abc123` | spark | 0 / 1 | sink 0.70{T} (missed) |"
    assert row_new == (
        "| 2026-11-28 09:08 UTC | `abc123` | restart failover | 1 / 2 "
        f"| restart 1.40{T}, p99 1.25{T} (missed) |"
    )
    text = merge_history("", [row_old])
    text = merge_history(text, [row_new])
    body = [line for line in text.splitlines() if line.startswith("| 2026")]
    assert body == [row_new, row_old]
    replaced = row_old.replace("`abc123`", "`def456`")
    again = merge_history(text, [replaced])
    assert [line for line in again.splitlines() if line.startswith("| 2026")] == [
        row_new,
        replaced,
    ]


def test_a_run_writes_goals_md_summary_and_one_png_per_measured_goal(tmp_path: Path) -> None:
    doc = _run_doc("2026-11-28T08:28:40+00:00", [SPARK, RESTART_OK, FAILOVER_OK])
    written = report_files.write_run_goals(tmp_path, doc, DECLARED)
    names = sorted(p.name for p in written)
    assert names == [
        "goal-p99.png",
        "goal-restart.png",
        "goal-sink.png",
        "goals.md",
        "summary.png",
    ]
    for path in written:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC, path
    goals_md = (tmp_path / "goals.md").read_text()
    assert "| Spark sink | Python writer: 1,000,000 rows/s | 700,000 rows/s |" in goals_md
    assert "small writes" not in goals_md  # peers did not run: the run says nothing of it
    assert "![every goal at a glance](summary.png)" in goals_md


def _write_run(directory: Path, doc: dict) -> Path:
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(doc))
    return directory


def test_report_command_writes_readme_table_history_and_summary(tmp_path: Path) -> None:
    restart = _scenario(
        "restart",
        [{"log": "10 MiB", "open s (median)": 0.010}, {"log": "1 GiB", "open s (median)": 0.020}],
    )
    run_dir = _write_run(
        tmp_path / "run", _run_doc("2026-11-28T08:28:40+00:00", [restart], commit="c0ffee")
    )
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Performance\n\n{BEGIN}\n{END}\n\n## After\n")
    history, summary = tmp_path / "HISTORY.md", tmp_path / "summary.png"
    args = [str(run_dir), "--readme", str(readme), "--history", str(history)]
    assert report_files.main([*args, "--summary", str(summary)]) == 0
    text = readme.read_text()
    assert text.startswith(f"# x\n\n## Performance\n\n{BEGIN}\nRun of 2026-11-28 08:28 UTC")
    assert text.endswith(f"![every goal at a glance](summary.png)\n{END}\n\n## After\n")
    assert "| what | peer | ours | ratio | met |" in text
    # the real declarations drive the command: restart's goal, and the others not measured
    assert (
        "| opening a 1 GiB log against a 10 MiB one | 10 MiB: 0.01 s | 0.02 s (1 GiB) "
        f"| 2.00{T} (goal ≤ 1.5{T}) | **no** |"
    ) in text
    assert "| not measured |" in text
    assert summary.read_bytes()[:8] == PNG_MAGIC
    rows = [line for line in history.read_text().splitlines() if line.startswith("| 2026")]
    assert rows == [
        f"| 2026-11-28 08:28 UTC | `c0ffee` | restart | 0 / 1 | restart 2.00{T} (missed) |"
    ]


def test_report_refuses_a_readme_without_markers_and_a_dir_without_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _write_run(tmp_path / "run", _run_doc("2026-11-28T08:28:40+00:00", [RESTART_OK]))
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    history = tmp_path / "HISTORY.md"
    with pytest.raises(SystemExit) as exc:
        report_files.main([str(run_dir), "--readme", str(readme), "--history", str(history)])
    assert exc.value.code == 2
    assert "benchmarks-goals:begin" in capsys.readouterr().err
    assert readme.read_text() == "# no markers\n"
    assert not history.exists()
    with pytest.raises(SystemExit) as exc:
        report_files.main([str(tmp_path / "nothing"), "--readme", str(readme)])
    assert exc.value.code == 2
    assert "nothing/results.json: not a results.json" in capsys.readouterr().err


def test_help_lists_profile_report_and_every_scenario_with_a_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = proc.stdout.splitlines()
    assert any(line.strip().startswith("python -m benchmarks profile SCENARIO") for line in lines)
    assert any(line.strip().startswith("python -m benchmarks report") for line in lines)
    scenarios = lines[lines.index("scenarios:") + 1 :]
    for entry in load_all().all():
        assert any(line.split()[:1] == [entry.name] for line in scenarios), entry.name


def test_declared_goal_keys_are_unique_and_read_real_row_labels() -> None:
    declared = load_all().goals()
    keys = [goal.key for _, goal in declared]
    assert len(keys) == len(set(keys))
    # The kept reference run's figures answer the goals of the scenarios it ran.
    ref = sorted((REPO / "benchmarks" / "reference").glob("*/results.json"))
    assert ref, "benchmarks/reference/ holds the latest full run's results.json"
    doc = json.loads(ref[-1].read_text())
    ok = {s["name"] for s in doc["scenarios"] if s["status"] == "ok"}
    outcomes = [o for o in evaluate_run(declared, doc["scenarios"]) if o.scenario in ok]
    measured = [o.goal.key for o in outcomes if o.measured]
    assert len(measured) >= len(outcomes) - 2, [o.goal.key for o in outcomes if not o.measured]


@pytest.mark.parametrize(
    ("column", "drawn"),
    [
        ("rows/s", True),
        ("p99 ms", True),
        ("open s (median)", True),
        ("s to first ack", True),
        ("raftlog / python ceiling", True),
        ("of R=3 disk ceiling", True),
        ("MiB per node", True),
        ("rows", False),
        ("micro-batches", False),
        ("rows read back once", False),
        ("errors", False),
        ("operations", False),
        ("MiB written", False),
        ("s", False),
    ],
)
def test_bar_charts_draw_measures_not_counts(column: str, drawn: bool) -> None:
    assert is_measure(column) is drawn
