"""Driver scripts that the Spark tests run in their own interpreter, and how to run them.

A JVM holds one SparkContext, and the tests share one local session; a test that needs
a SparkSession of its own (a plain one, or one on a standalone cluster) runs its driver
here, in a subprocess of the venv's python, bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent


def driver_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a driver: this venv's python everywhere, no PYTHONPATH or
    SPARK_CONF_DIR inherited (so nothing but the installed package is found), loopback."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra or {})
    return env


def run_driver(
    script: str, *args: str, cwd: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``spark_drivers/<script>`` with ``args``; its exit code and output are returned.

    The driver runs in a process group of its own (its id is the driver's PID), with the
    JVM it launches; whatever of that group is left when it ends, times out or the test
    is interrupted is killed.
    """
    cmd = [sys.executable, str(HERE / script), *args]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=driver_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        # whatever of the group is left (the driver on timeout, a lingering JVM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
