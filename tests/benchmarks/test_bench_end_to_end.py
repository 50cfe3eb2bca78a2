"""``python -m benchmarks`` as a user runs it: a subprocess from the repository root."""

from __future__ import annotations

import json
import numbers
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["disk", "restart", "sim"]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    # subprocess.run kills the child on timeout, so nothing outlives the test.
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_quick_run_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = _run(*SCENARIOS, "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    doc = json.loads((out / "results.json").read_text())
    assert doc["quick"] is True
    assert doc["machine"]["cores"] >= 1
    assert doc["machine"]["disk_filesystem"]
    assert set(doc["versions"]) >= {"python", "raftlog", "pyspark", "pyarrow", "aiohttp"}
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert list(by_name) == SCENARIOS

    # disk needs nothing from raftlog, so it always runs and measures.
    disk = by_name["disk"]
    assert disk["status"] == "ok", disk
    cases = {row["case"]: row for row in disk["rows"]}
    assert set(cases) == {
        "sequential write, fsync every 1 MiB",
        "sequential write, fsync every 16 MiB",
        "4 KiB append + fsync",
    }
    for row in cases.values():
        assert isinstance(row["MB/s"], numbers.Real) and row["MB/s"] > 0
        assert isinstance(row["fsyncs/s"], numbers.Real) and row["fsyncs/s"] > 0
    one_mib = cases["sequential write, fsync every 1 MiB"]
    assert one_mib["R=3 ceiling MB/s"] == pytest.approx(one_mib["MB/s"] / 3)

    # The others run once their raftlog piece exists, and say why not until then.
    for name in ("restart", "sim"):
        entry = by_name[name]
        assert entry["status"] in ("ok", "skipped"), entry
        if entry["status"] == "skipped":
            assert "not built yet" in entry["reason"]
        else:
            assert entry["rows"]
            assert all(
                isinstance(v, numbers.Real)
                for row in entry["rows"]
                for v in row.values()
                if not isinstance(v, str)
            )

    markdown = (out / "results.md").read_text()
    assert "## Machine" in markdown and "## disk" in markdown
    assert "| sequential write, fsync every 1 MiB |" in markdown
    pngs = list(out.glob("*.png"))
    assert out / "disk.png" in pngs
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    # The table is printed, and the scratch files are gone.
    assert "raftlog benchmarks" in proc.stdout
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def test_unknown_scenario_exits_2_and_lists_valid_names(tmp_path: Path) -> None:
    proc = _run("disk", "no-such-scenario", "--quick", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "unknown scenario(s): no-such-scenario" in proc.stderr
    assert "valid names: disk" in proc.stderr
    assert not (tmp_path / "results.json").exists()  # nothing ran


def test_bad_scenario_flag_exits_2(tmp_path: Path) -> None:
    proc = _run("sim", "--seeds", "0", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "--seeds" in proc.stderr and "positive integer" in proc.stderr
