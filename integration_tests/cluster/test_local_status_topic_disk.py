"""``raftlog local status`` shows the disk each topic of the local cluster takes, and
what a deleted topic still holds until it is removed (issue 49).

One cluster in a RAFTLOG_HOME of the test's own; its nodes are stopped by PID at the
end. The figures are checked against the files, walked here independently.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from raftlog.cluster import (
    load_cluster,
    remove_deleted_topic_files,
    start_cluster,
    stop_cluster,
)
from raftlog.health import format_bytes

TOPIC = "disk-shown"
RECORDS = 2000
VALUE = "v" * 500


@pytest.fixture
def home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    root = tmp_path / "raftlog-home"
    monkeypatch.setenv("RAFTLOG_HOME", str(root))
    for name in ("RAFTLOG_SERVERS", "RAFTLOG_AUTH_TOKEN", "RAFTLOG_CLIENT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield root
    finally:
        stop_cluster(root, timeout_s=10.0)


def _cli(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, f"raftlog {' '.join(args)}: {done.stderr}"
    return done.stdout


def _files_bytes(home: pathlib.Path, topic: str, live: bool) -> int:
    """Bytes of the topic's live replicas (or of its moved-aside ones) on every node."""
    total = 0
    for topic_dir in home.glob(f"node-*/partitions/{topic}"):
        for part in topic_dir.iterdir():
            if part.name.isdigit() == live:
                total += sum(f.stat().st_size for f in part.rglob("*") if f.is_file())
    return total


def _topic_row(status: str, topic: str) -> list[str] | None:
    for line in status.splitlines():
        if line.split()[:1] == [topic]:
            return line.split()
    return None


def test_local_status_shows_each_topics_disk_and_deleted_leftovers(home: pathlib.Path) -> None:
    start_cluster(home)
    _cli("topic", "create", TOPIC, "--partitions", "2")
    _cli("produce", TOPIC, stdin="".join(f"{VALUE}{i}\n" for i in range(RECORDS)))

    status = _cli("local", "status")
    header = next(line for line in status.splitlines() if line.startswith("topic "))
    assert header.split() == ["topic", "partitions", "replicas", "disk"]
    row = _topic_row(status, TOPIC)
    assert row is not None, status
    on_disk = _files_bytes(home, TOPIC, live=True)
    # every replica holds the records: at least the values, three times
    assert on_disk >= 3 * RECORDS * len(VALUE)
    assert row[1:3] == ["2", "6"]
    assert " ".join(row[3:]) == format_bytes(on_disk)
    assert _topic_row(status, "total") is not None

    # Deleted: no live replica is shown any more, its files are named as not yet removed
    _cli("topic", "delete", TOPIC)
    deadline = time.monotonic() + 30
    while _files_bytes(home, TOPIC, live=True) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _files_bytes(home, TOPIC, live=False)
    assert left >= on_disk  # moved aside whole, removed only after the delay (60 s)
    status = _cli("local", "status")
    assert _topic_row(status, TOPIC) is None, status
    assert re.search(rf"deleted topics, not yet removed: {re.escape(format_bytes(left))} ", status)

    # Once the cluster is stopped, the demo's clean-up removes them at once
    cluster = load_cluster(home)
    assert cluster is not None
    with pytest.raises(Exception, match="is running"):
        remove_deleted_topic_files(cluster, TOPIC)
    stop_cluster(home)
    assert remove_deleted_topic_files(cluster, TOPIC) == left
    assert _files_bytes(home, TOPIC, live=False) == 0
    assert "deleted topics" not in _cli("local", "status")
