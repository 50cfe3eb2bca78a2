"""Helpers of the operations tests (metrics, health, leadership, partitions): the
``raftlog`` command run against a cluster, and a private cluster that checks
retention often.

One copy for those tests; the cluster itself comes from the shared launcher
(:mod:`benchmarks.workloads.cluster_handle`), stopped by PID on exit.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import BlockingRaftlogClient, OffsetOutOfRangeError, unframe_records

T = TypeVar("T")

CLI_TIMEOUT_S = 60


def run_cli(
    servers: list[str], *args: str, timeout_s: float = CLI_TIMEOUT_S, home: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m raftlog ARGS`` with ``RAFTLOG_SERVERS`` set to ``servers`` (and
    ``RAFTLOG_HOME``, the local cluster's directory, to ``home`` when given); never
    raises on a nonzero exit (tests assert on it), bounded by ``timeout_s``."""
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    if home is not None:
        env["RAFTLOG_HOME"] = home
    for role in ("AUTH", "CLIENT", "ADMIN"):
        env.pop(f"RAFTLOG_{role}_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture
def ops_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private 3-node cluster (tests kill its nodes) that checks retention every
    200 ms, so a log start moves within a test."""
    with running_cluster(
        tmp_path / "cluster", extra_args=["--retention-check-interval-ms", "200"]
    ) as handle:
        yield handle


def wait_until(check: Callable[[], T], timeout_s: float, what: str) -> T:
    """Call ``check`` every 0.2 s until it returns a truthy value, and return that;
    AssertionError naming ``what`` and the last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


def read_partition(client: BlockingRaftlogClient, topic: str, partition: int) -> list[bytes]:
    """Every record of ``topic/partition`` from its log start to its high watermark
    (CLI framing), in offset order; each fetch must make progress. When retention
    moves the log start past the reader meanwhile (the partition is being written),
    the read starts over from the new start, as a Kafka consumer reset to earliest
    would (at most 5 times)."""
    retrying = Retrying(
        stop=stop_after_attempt(5), retry=retry_if_exception_type(OffsetOutOfRangeError)
    )
    try:
        return retrying(_read_from_start, client, topic, partition)
    except RetryError as exc:
        raise AssertionError(
            f"retention outran every read of {topic}/{partition} from its start"
        ) from exc


def _read_from_start(client: BlockingRaftlogClient, topic: str, partition: int) -> list[bytes]:
    start, hwm, _lso = client.list_offsets(topic, partition)
    out: list[bytes] = []
    offset = start
    for _ in range(10_000):
        if offset >= hwm:
            break
        r = client.fetch(topic, partition, offset)
        for b in r.batches:
            out.extend(unframe_records(b.payload, b.record_count) or [])
        assert r.next_offset > offset, f"fetch at {offset} of {topic}/{partition} made no progress"
        offset = r.next_offset
    return out


def assert_health_reports_down(servers: list[str], down: int) -> dict[str, Any]:
    """``raftlog cluster health`` (JSON) against ``servers`` exits 1 and reports node
    ``down``, and no other, as not up; its report, for a test's further assertions."""
    health = run_cli(servers, "cluster", "health", "--format", "json")
    assert health.returncode == 1, health.stdout
    report = json.loads(health.stdout)
    # a helper's asserts are not rewritten by pytest: the message shows what was down
    reported = [n["node_id"] for n in report["nodes"] if not n["up"]]
    assert reported == [down], f"down: {reported}, expected [{down}]"
    return report


def node_health(address: str) -> dict[str, Any]:
    """A node's ``/health`` document (plain HTTP on loopback, no token), in 5 s."""
    with urllib.request.urlopen(f"http://{address}/health", timeout=5) as resp:
        return json.loads(resp.read())


def node_health_once_up(address: str) -> dict[str, Any]:
    """``node_health``, or ``{}`` while the node does not listen yet: a restarted node
    moves or opens its data before it serves, so a wait after a restart polls this."""
    try:
        return node_health(address)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return {}
