"""The demo deletes its topic at the end unless ``--keep-topic`` (issue 49), and its
normal run logs no WARN line.

The demo is a program (``python -m pyspark_raftlog.demo``) that starts the embedded
local cluster from Spark's Python workers, which see only the environment the JVM
started with: so it runs here as a subprocess, with a RAFTLOG_HOME of the test's own,
twice (small micro-batches; the second on the cluster the first left running).
Every node recorded there is stopped by PID at the end.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from raftlog.cluster import load_cluster, stop_cluster, topic_disk_usage

DEMO_TIMEOUT_S = 400
ARGS = ["--seconds", "1", "--rows-per-batch", "5000", "--trigger-seconds", "1"]


@pytest.fixture
def home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    root = tmp_path / "raftlog-home"
    try:
        yield root
    finally:
        stop_cluster(root, timeout_s=10.0)


def _demo(home: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    env["RAFTLOG_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-m", "pyspark_raftlog.demo", *ARGS, *args],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "check: OK (duplicates 0, missing 0)" in done.stdout
    warns = [
        line for line in (done.stdout + done.stderr).splitlines() if re.search(r"\bWARN\b", line)
    ]
    assert not warns, warns
    return done


def _replicas(home: pathlib.Path, topic: str) -> tuple[int, int]:
    """(live replicas, bytes of moved-aside ones) of ``topic`` on the nodes' disks."""
    cluster = load_cluster(home)
    assert cluster is not None
    for usage in topic_disk_usage(cluster):
        if usage.topic == topic:
            return usage.replicas, usage.deleted_bytes
    return 0, 0


def test_demo_keeps_its_topic_with_keep_topic_and_deletes_it_without(home: pathlib.Path) -> None:
    kept = _demo(home, "--topic", "demo-kept", "--keep-topic", "--keep-cluster")
    out = kept.stdout
    assert "the first micro-batch also starts the local 3-node cluster" in out
    assert "raftlog consume demo-kept" in out and "raftlog console" in out
    assert "deleted topic" not in out
    assert "the local cluster is still running" in out
    assert _replicas(home, "demo-kept") == (18, 0)  # 6 partitions, 3 replicas each

    # the cluster runs: this run does not start it, deletes its own topic through the
    # API, and the nodes move its replicas aside (removed after --file-delete-delay-ms)
    gone = _demo(home, "--topic", "demo-gone")
    assert "the first micro-batch also creates the topic" in gone.stdout
    assert "deleted topic 'demo-gone' (--keep-topic keeps it)" in gone.stdout
    replicas, deleted = _replicas(home, "demo-gone")
    assert replicas == 0 and deleted > 0
    assert _replicas(home, "demo-kept") == (18, 0)  # another run's topic is not touched
