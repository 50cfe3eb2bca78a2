"""``python -m benchmarks`` as a user runs it: a subprocess from the repository root.

The exit status of usage errors; the full ``--quick`` run of every scenario, its
files and the ``disk`` figures are checked once in ``test_bench_quick_all.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def test_unknown_scenario_exits_2_and_lists_valid_names(tmp_path: Path) -> None:
    proc = _run("disk", "no-such-scenario", "--quick", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "unknown scenario(s): no-such-scenario" in proc.stderr
    valid = proc.stderr.split("valid names: ", 1)[1].split()
    assert {"disk", "restart", "sim", "spark"} <= {name.rstrip(",") for name in valid}
    assert not (tmp_path / "results.json").exists()  # nothing ran


def test_bad_scenario_flag_exits_2(tmp_path: Path) -> None:
    proc = _run("sim", "--seeds", "0", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "--seeds" in proc.stderr and "positive integer" in proc.stderr
