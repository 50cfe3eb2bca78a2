"""``python -m benchmarks chaos --quick``: every nemesis once against idempotent producers,
and the checker's report in results.json shows nothing lost, duplicated or inconsistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NEMESES = {"crash", "drop", "kill", "partition", "sigstop", "torn"}
FATAL = ("lost", "duplicated", "inconsistent", "failed_visible", "order")


def test_quick_chaos_reports_zero_anomalies(tmp_path: Path) -> None:
    out = tmp_path / "results"
    # subprocess.run kills the child on timeout; the scenario stops its nodes and proxy by PID.
    argv = ["chaos", "--quick", "--chaos-seed", "7", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    doc = json.loads((out / "results.json").read_text())
    (chaos,) = doc["scenarios"]
    assert chaos["status"] == "ok", chaos
    rows = {row["nemesis"]: row for row in chaos["rows"]}
    assert set(rows) == NEMESES | {"all"}, rows
    for name, row in rows.items():
        for kind in FATAL:
            assert row[kind] == 0, (name, kind, row, proc.stdout[-5000:])
        assert row["incomplete rounds"] == 0, (name, row, proc.stdout[-5000:])
        assert row["operations"] > 0 and row["produce_ok"] > 0, row
        # every value the producers wrote is read back exactly once
        assert row["values_in_final_reads"] == row["values expected"], row
    assert rows["all"]["rounds"] == len(NEMESES)
    assert proc.stdout.count("checker: OK") == len(NEMESES), proc.stdout[-5000:]
    assert not (out / "chaos-histories").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
