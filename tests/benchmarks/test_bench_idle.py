"""The ``idle`` scenario's CPU reading: a node is a process tree (its shards), so its CPU
is counted over every live descendant. (The scenario itself runs in the quick run.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)

from benchmarks.workloads.process_cpu import tree_cpu_seconds

BURN_S = 0.6
CHILD = textwrap.dedent(f"""
    import time
    start = time.process_time()
    for _ in range(10**9):  # bounded: about {BURN_S} s of CPU, then a wait
        if time.process_time() - start >= {BURN_S}:
            break
    print("burnt", flush=True)
    time.sleep(60)
""")


def test_the_cpu_of_a_child_counts_for_its_idle_parent() -> None:
    # The parent only waits; its child burns BURN_S of CPU, says so, then waits too.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # one process group, stopped as one
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "burnt"
        whole = tree_cpu_seconds([parent.pid])
        assert whole >= BURN_S * 0.9, whole
        # the same tree listed twice counts once
        assert tree_cpu_seconds([parent.pid, parent.pid]) < whole + BURN_S / 2
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
    # a process that is gone counts nothing
    assert tree_cpu_seconds([parent.pid]) == 0.0
