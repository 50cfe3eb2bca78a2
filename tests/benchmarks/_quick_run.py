"""The background ``python -m benchmarks --quick`` of the suite (see conftest.py): how it
is waited for and stopped."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK_ALL_FILE = "test_bench_quick_all.py"
QUICK_RUN_TIMEOUT_S = 900
"""A safety bound only: --quick takes about 6 minutes alone (the latency scenario's
Spark queries are 100 s of it), longer beside other tests."""
STOP_GRACE_S = 60


@dataclasses.dataclass
class QuickRun:
    """The background ``python -m benchmarks --quick`` and where it writes."""

    proc: subprocess.Popen[bytes]
    out: Path
    stdout: Path
    stderr: Path
    deadline: float

    def finished(self) -> subprocess.CompletedProcess[str]:
        """Wait for the run (until its deadline; then stop it and fail the test)."""
        try:
            self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop(self.proc)
            pytest.fail(f"python -m benchmarks --quick ran past {QUICK_RUN_TIMEOUT_S} s")
        return subprocess.CompletedProcess(
            self.proc.args,
            self.proc.returncode,
            self.stdout.read_text(errors="replace"),
            self.stderr.read_text(errors="replace"),
        )


def start(base: Path) -> QuickRun:
    """Start the run, writing into ``base`` (results/, stdout.txt, stderr.txt)."""
    stdout, stderr = base / "stdout.txt", base / "stderr.txt"
    # one chaos order for every run (each nemesis once, as seed 7 shuffles them)
    args = ["--quick", "--chaos-seed", "7", "--out", str(base / "results")]
    with stdout.open("wb") as out_fh, stderr.open("wb") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out_fh,
            stderr=err_fh,
            start_new_session=True,  # its own process group, stopped as one
        )
    return QuickRun(proc, base / "results", stdout, stderr, time.monotonic() + QUICK_RUN_TIMEOUT_S)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the run's process group: SIGINT (its clusters stop in their finally blocks),
    then SIGKILL after STOP_GRACE_S."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_GRACE_S)
