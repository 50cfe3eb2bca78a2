"""A full disk, as issue 44 found it: three local nodes on one 256 MiB filesystem, 1 KiB
lines produced with ``raftlog produce`` in chunks of 5,000 until the disk fills.

Then (``raftlog.node.disk_space``): every produce fails within a bounded time with
``KAFKA_STORAGE_ERROR`` naming the node and its free space (it hung until its 60 s
timeout before); every acknowledged line reads back with ``raftlog consume
--from-beginning``, once each; ``cluster health`` (text and json) names the degraded
nodes and their free space and exits non-zero; ``/metrics`` has the gauges; and after
``topic alter-config --config retention.bytes=...`` frees space, produce succeeds again
without restarting any node.

The filesystem is a loop-mounted ext4 image (a size-limited tmpfs when no loop device
can be had; tmpfs ignores syncfs, ext4 does not), made and removed by the fixture; the
nodes are stopped by PID before it is unmounted, even when the test fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster

MIB = 1024 * 1024
FS_BYTES = 256 * MIB
MIN_FREE_BYTES = 64 * MIB
LINE_BYTES = 1024  # with its newline
CHUNK_LINES = 5000
MAX_CHUNKS = 60  # 300 MB: more than the filesystem holds three times over
REFUSAL_BOUND_S = 20.0  # a refused produce returns within this (it hung 60 s before)
TOOLS = {
    "truncate": "apt-get install -y coreutils",
    "mkfs.ext4": "apt-get install -y e2fsprogs",
    "mount": "apt-get install -y mount",
    "umount": "apt-get install -y mount",
}


def _run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def small_filesystem(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A 256 MiB filesystem mounted at a fresh directory (ext4 on a loop device, else
    tmpfs); unmounted and its image removed on exit, whatever the test did."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"the full-disk test needs {', '.join(missing)}: "
            + "; ".join(sorted({TOOLS[t] for t in missing}))
        )
    if os.geteuid() != 0:
        pytest.fail("the full-disk test mounts a filesystem: run it as root (sudo)")
    image = tmp_path / "disk.img"
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    mounted = False
    try:
        made = _run("truncate", "-s", str(FS_BYTES), str(image))
        assert made.returncode == 0, made.stderr
        # -m 0: no blocks reserved for root (the nodes run as root here), so the
        # filesystem fills as it would for any user
        made = _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
        assert made.returncode == 0, made.stderr
        loop = _run("mount", "-o", "loop", str(image), str(mount_point))
        if loop.returncode != 0:
            tmpfs = _run(
                "mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount_point)
            )
            assert tmpfs.returncode == 0, (
                f"neither a loop-mounted ext4 ({loop.stderr.strip()}) nor a tmpfs "
                f"({tmpfs.stderr.strip()}) could be mounted at {mount_point}"
            )
        mounted = True
        yield mount_point
    finally:
        if mounted:
            done = _run("umount", str(mount_point))
            if done.returncode != 0:  # something still holds it: detach it lazily
                _run("umount", "-l", str(mount_point))
        image.unlink(missing_ok=True)


@pytest.fixture
def cluster_on_small_disk(small_filesystem: pathlib.Path) -> Iterator[ClusterHandle]:
    """3 nodes with their data directories on the small filesystem; stopped by PID on
    exit (before the filesystem is unmounted: fixtures end in reverse order)."""
    with running_cluster(
        small_filesystem / "cluster",
        extra_args=[
            "--min-free-bytes",
            str(MIN_FREE_BYTES),
            "--retention-check-interval-ms",
            "200",
        ],
    ) as handle:
        yield handle


def _cli(
    servers: list[str], *args: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _chunk(n: int) -> list[str]:
    """Chunk ``n``'s lines: each unique, LINE_BYTES with its newline."""
    return [
        f"chunk {n:04d} line {i:05d} ".ljust(LINE_BYTES - 1, chr(ord("a") + (n + i) % 26))
        for i in range(CHUNK_LINES)
    ]


def _produce(servers: list[str], topic: str, n: int) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = _cli(servers, "produce", topic, stdin="\n".join(_chunk(n)) + "\n")
    return done, time.monotonic() - started


def _consume_all(servers: list[str], topic: str) -> list[str]:
    done = _cli(servers, "consume", topic, "--from-beginning", "--timeout-ms", "5000", timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _health(servers: list[str], *fmt: str) -> subprocess.CompletedProcess[str]:
    return _cli(servers, "cluster", "health", *fmt, timeout=60)


def _metric(address: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")
    ]
    assert values, f"{name} is not in {address}'s /metrics"
    return min(values) if "free" in name else max(values)


def test_a_full_disk_refuses_writes_keeps_reads_and_heals_after_retention(
    cluster_on_small_disk: ClusterHandle,
) -> None:
    cluster = cluster_on_small_disk
    servers = cluster.servers
    topic = "filler"
    made = _cli(
        servers, "topic", "create", topic, "--partitions", "1", "--replication-factor", "3",
        "--config", f"segment.bytes={MIB}",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    pids = {n.node_id: n.pid for n in cluster.nodes}

    acknowledged: list[str] = []
    refused_chunks: list[int] = []
    for n in range(MAX_CHUNKS):
        done, took = _produce(servers, topic, n)
        if done.returncode == 0:
            assert not refused_chunks, (
                f"chunk {n} was acknowledged after chunk {refused_chunks[0]} was refused, "
                "with nothing freed"
            )
            acknowledged += _chunk(n)
            continue
        # Refused at once, with the storage error naming the node and its free space.
        assert took < REFUSAL_BOUND_S, f"produce took {took:.1f}s to fail: {done.stderr}"
        assert "KAFKA_STORAGE_ERROR" in done.stderr, done.stderr
        assert "--min-free-bytes" in done.stderr and "MiB free" in done.stderr, done.stderr
        assert "node " in done.stderr and "data dir" in done.stderr, done.stderr
        refused_chunks.append(n)
        if len(refused_chunks) == 3:
            break
    assert len(refused_chunks) == 3, f"the disk never filled in {MAX_CHUNKS} chunks"
    assert len(acknowledged) >= 5 * CHUNK_LINES, "the disk filled too early to mean anything"

    # No node stopped, and each one still serves reads: every acknowledged line once.
    for node_id in pids:
        assert cluster.alive(node_id), f"node {node_id} stopped on a full disk"
    read = _consume_all(servers, topic)
    assert len(read) == len(set(read)), "a line was read twice"
    missing = set(acknowledged) - set(read)
    assert not missing, f"{len(missing)} acknowledged lines did not read back"
    # Whatever else was read is from a refused chunk (its first batches may have gone in).
    extra = set(read) - set(acknowledged)
    assert all(line.split()[1] in {f"{c:04d}" for c in refused_chunks} for line in extra)

    # cluster health names the degraded nodes with their free space, and fails.
    text = _health(servers)
    assert text.returncode != 0, text.stdout
    assert "DEGRADED" in text.stdout and "disk free" in text.stdout, text.stdout
    assert "is degraded" in text.stdout and "KAFKA_STORAGE_ERROR" in text.stdout, text.stdout
    doc = json.loads(_health(servers, "--format", "json").stdout)
    degraded = [n for n in doc["nodes"] if n["degraded"]]
    assert degraded, doc
    for n in degraded:
        assert 0 <= n["free_bytes"] < MIN_FREE_BYTES, n
        assert f"node {n['node_id']}" in n["degraded_reason"], n
    assert doc["controller_leader"] >= 0, doc  # elections and the controller go on
    assert not doc["leaderless_partitions"], doc
    first = next(n for n in cluster.nodes if n.node_id == degraded[0]["node_id"])
    assert _metric(first.address, "raftlog_disk_degraded") == 1.0
    assert 0 <= _metric(first.address, "raftlog_disk_free_bytes") < MIN_FREE_BYTES

    # Retention frees space (it runs in degraded mode: a tiny raft write and unlinks);
    # the nodes leave degraded mode by themselves and take writes again.
    altered = _cli(
        servers, "topic", "alter-config", topic, "--config", f"retention.bytes={16 * MIB}"
    )
    assert altered.returncode == 0, altered.stderr
    deadline = time.monotonic() + 120
    while True:
        health = _health(servers)
        if health.returncode == 0:
            break
        assert time.monotonic() < deadline, f"never healthy again:\n{health.stdout}"
        time.sleep(1)
    after = MAX_CHUNKS + 1
    done, _took = _produce(servers, topic, after)
    assert done.returncode == 0, done.stderr
    assert {n.node_id: n.pid for n in cluster.nodes} == pids  # no node was restarted
    assert _metric(first.address, "raftlog_disk_degraded") == 0.0
    # Above the new log start, every acknowledged line reads back, the new chunk too.
    read = _consume_all(servers, topic)
    assert len(read) == len(set(read))
    assert set(_chunk(after)) <= set(read)
    kept = [line for line in acknowledged if line in set(read)]
    assert kept and acknowledged[-len(kept) :] == kept, "a hole below the log end"
