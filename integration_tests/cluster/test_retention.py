"""Retention on a real 3-node cluster: Kafka's topic configs, the log start moved
through the Raft log, whole segments deleted on every replica, readers below the
log start refused with both offsets, and the retained tail intact.

The nodes check retention every 200 ms (``--retention-check-interval-ms``) and
topics use 1 MiB segments, so a 40 MB run settles in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from ops_helpers import read_partition

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import (
    BlockingRaftlogClient,
    OffsetOutOfRangeError,
    RaftlogClient,
    frame_records,
)

MIB = 1024 * 1024
RECORD_BYTES = 4096
RECORDS_PER_BATCH = 64  # 256 KiB per produce call
TOTAL_BYTES = 40 * 1000 * 1000  # "40 MB"


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private cluster (the test fills its disks); every node stopped by PID on exit."""
    with running_cluster(
        tmp_path / "cluster", extra_args=["--retention-check-interval-ms", "200"]
    ) as handle:
        yield handle


def _cli(servers: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _record(seq: int) -> bytes:
    """Record ``seq``: its number, then bytes derived from it (so damage is visible)."""
    head = struct.pack("<Q", seq)
    return head + (head * (RECORD_BYTES // 8))[: RECORD_BYTES - 8]


def _dir_bytes(path: pathlib.Path) -> int:
    """Bytes of every file under ``path`` (apparent size)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted by retention meanwhile
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _node_dirs(cluster: ClusterHandle) -> dict[int, pathlib.Path]:
    return {n.node_id: cluster.data_dir / f"node-{n.node_id}" for n in cluster.nodes}


async def _produce_sequence(client: RaftlogClient, topic: str, total_bytes: int) -> int:
    """Write records 0..n-1 in order (acks=all); return n."""
    seq = 0
    while seq * RECORD_BYTES < total_bytes:
        records = [_record(seq + i) for i in range(RECORDS_PER_BATCH)]
        await client.produce(topic, 0, [(frame_records(records), len(records))], acks="all")
        seq += len(records)
    return seq


def _read_tail(servers: list[str], topic: str) -> list[bytes]:
    """Every record of ``topic``/0 from its log start to its high watermark
    (:func:`ops_helpers.read_partition`, which starts over when retention deletes past
    the reader meanwhile)."""
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as reader:
        return read_partition(reader, topic, 0)


async def _wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        if await predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.2)


async def test_40mb_into_8mib_retention_keeps_every_node_under_24mib(cluster) -> None:
    servers = cluster.servers
    created = _cli(
        servers,
        "topic",
        "create",
        "retained",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        f"retention.bytes={8 * MIB}",
        "--config",
        f"segment.bytes={MIB}",
        "--format",
        "json",
    )
    assert created.returncode == 0, created.stderr
    doc = json.loads(created.stdout)
    assert doc["topic"] == "retained" and doc["partitions"] == 1
    assert doc["configs"] == {"retention.bytes": str(8 * MIB), "segment.bytes": str(MIB)}

    async with RaftlogClient(servers, request_timeout_s=30.0) as client:
        written = await _produce_sequence(client, "retained", TOTAL_BYTES)
        start, hwm, _lso = await client.list_offsets("retained", 0)
        assert hwm >= written

        dirs = _node_dirs(cluster)

        async def all_under_24mib() -> bool:
            return all(_dir_bytes(d) < 24 * MIB for d in dirs.values())

        await _wait_for(all_under_24mib, 30.0, "every node's directory to shrink under 24 MiB")
        sizes = {node: _dir_bytes(d) for node, d in dirs.items()}
        print(f"node directory sizes after writing {TOTAL_BYTES} bytes: {sizes}")
        assert all(size < 24 * MIB for size in sizes.values()), sizes

        start, _hwm, _lso = await client.list_offsets("retained", 0)
        assert start > 0, "nothing was deleted"
        # Every replica deleted whole segments: each one's first segment starts above 0,
        # and none starts past the agreed log start (a replica keeps more, never less).
        for node, d in dirs.items():
            bases = sorted(
                int(p.name.split("-")[0])
                for p in (d / "partitions" / "retained" / "0").glob("*.log")
            )
            assert bases and 0 < bases[0] <= start, (node, bases[:3], start)

        # A reader below the log start gets Kafka's OFFSET_OUT_OF_RANGE with both offsets.
        with pytest.raises(OffsetOutOfRangeError) as err:
            await client.fetch("retained", 0, 0)
        assert "offset 0 " in str(err.value) and f"log start {start}" in str(err.value)

        # The retained tail reads back intact, in order, without duplicates or gaps,
        # and it ends with the last record written.
        tail = _read_tail(cluster.servers, "retained")
        seqs = [struct.unpack_from("<Q", rec)[0] for rec in tail]
        assert seqs == list(range(seqs[0], written)), "retained tail has gaps or duplicates"
        assert all(rec == _record(s) for s, rec in zip(seqs, tail, strict=True))
        # Kafka's retention.bytes keeps at least that many bytes (whole segments go only
        # while what remains is still at least the limit).
        assert len(tail) * RECORD_BYTES >= 8 * MIB * 0.95, len(tail)


async def test_alter_config_live_and_bad_input_refused_by_name(cluster) -> None:
    servers = cluster.servers
    created = _cli(
        servers, "topic", "create", "live", "--partitions", "1", "--config", "segment.bytes=65536"
    )
    assert created.returncode == 0, created.stderr

    async with RaftlogClient(servers, request_timeout_s=30.0) as client:
        written = await _produce_sequence(client, "live", 2 * MIB)
        # no retention configured: nothing is deleted however long we wait
        await asyncio.sleep(1.0)
        start, hwm, _ = await client.list_offsets("live", 0)
        assert start == 0 and hwm >= written

        altered = _cli(
            servers,
            "topic",
            "alter-config",
            "live",
            "--config",
            "retention.bytes=262144",
            "--format",
            "json",
        )
        assert altered.returncode == 0, altered.stderr
        doc = json.loads(altered.stdout)
        assert doc["overrides"] == {"retention.bytes": "262144", "segment.bytes": "65536"}
        assert doc["configs"]["retention.ms"] == "604800000"  # Kafka's default, 7 days

        async def moved() -> bool:
            return (await client.list_offsets("live", 0))[0] > 0

        await _wait_for(moved, 20.0, "the log start to move after alter-config")
        start, _hwm, _ = await client.list_offsets("live", 0)
        tail = _read_tail(servers, "live")
        seqs = [struct.unpack_from("<Q", rec)[0] for rec in tail]
        assert seqs == list(range(seqs[0], written))
        assert 262144 * 0.9 <= len(tail) * RECORD_BYTES < 2 * MIB

        # back to the default: describe shows it as such
        deleted = _cli(
            servers, "topic", "alter-config", "live", "--delete-config", "retention.bytes"
        )
        assert deleted.returncode == 0, deleted.stderr
        desc = json.loads(_cli(servers, "topic", "describe", "live", "--format", "json").stdout)
        assert desc["overrides"] == {"segment.bytes": "65536"}
        assert desc["configs"]["retention.bytes"] == "-1"
        assert desc["partitions"][0]["log_start"] == start
        assert desc["topic_id"] >= 1

    # unknown keys and bad values are refused by name, client side and server side
    bad = _cli(servers, "topic", "alter-config", "live", "--config", "retention.byte=5")
    assert bad.returncode == 1
    assert "unknown topic config 'retention.byte'" in bad.stderr and "retention.bytes" in bad.stderr
    bad = _cli(servers, "topic", "create", "other", "--config", "segment.ms=soon")
    assert bad.returncode == 1
    assert "segment.ms: expected an integer" in bad.stderr and "'soon'" in bad.stderr
    async with RaftlogClient(servers) as client:
        from raftlog.client import InvalidRequestError

        with pytest.raises(InvalidRequestError, match=r"retention\.ms: expected an integer"):
            await client.alter_config("live", {"retention.ms": "-5"})
        with pytest.raises(InvalidRequestError, match=r"unknown topic config 'cleanup\.policy'"):
            await client.create_topic("other", 1, configs={"cleanup.policy": "compact"})
        assert "other" not in await client.list_topics()


async def test_retention_ms_deletes_old_segments_and_restart_keeps_log_start(cluster) -> None:
    async with RaftlogClient(cluster.servers, request_timeout_s=30.0) as client:
        await client.create_topic(
            "aged", 1, configs={"retention.ms": "1500", "segment.bytes": "65536"}
        )
        written = await _produce_sequence(client, "aged", MIB)

        async def old_batches_gone() -> bool:
            start, _, _ = await client.list_offsets("aged", 0)
            # offsets count control entries too, so a record's offset is at least its seq
            return start >= written - RECORDS_PER_BATCH

        await _wait_for(old_batches_gone, 20.0, "segments older than retention.ms to go")
        start, hwm, _ = await client.list_offsets("aged", 0)

        # A replica restarted after the deletions comes back with its log start (its
        # start record and its snapshot) and the cluster serves the same tail.
        meta = await client.describe_topic("aged")
        follower = next(n for n in meta.partitions[0].replicas if n != meta.partitions[0].leader)
        cluster.kill(follower)
        cluster.restart(follower)

        def bases() -> dict[int, list[int]]:
            return {
                node: sorted(
                    int(p.name.split("-")[0])
                    for p in (d / "partitions" / "aged" / "0").glob("*.log")
                )
                for node, d in _node_dirs(cluster).items()
            }

        async def every_replica_deleted() -> bool:
            # each replica deletes on its own once it has applied the new log start
            return all(b and min(b) > 0 for b in bases().values())

        await _wait_for(every_replica_deleted, 20.0, "every replica to delete below the log start")
        assert all(b and min(b) > 0 for b in bases().values()), bases()
        again, hwm2, _ = await client.list_offsets("aged", 0)
        assert again >= start and hwm2 >= hwm
        tail = _read_tail(cluster.servers, "aged")
        seqs = [struct.unpack_from("<Q", rec)[0] for rec in tail]
        assert seqs == list(range(written - len(seqs), written))
        assert all(rec == _record(s) for s, rec in zip(seqs, tail, strict=True))
