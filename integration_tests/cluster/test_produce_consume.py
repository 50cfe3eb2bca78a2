"""A 3-node cluster: topics, produce and consume through the client and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from raftlog.client import (
    BlockingRaftlogClient,
    RaftlogClient,
    TopicExistsError,
    UnknownTopicError,
    frame_records,
    unframe_records,
)
from raftlog.records.topic_schema import RECORDS_FORMAT_KEY


def _cli(servers: list[str], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


async def test_produce_fetch_bytes_equal_offsets_contiguous(raftlog_cluster) -> None:
    async with RaftlogClient(raftlog_cluster.servers) as client:
        meta = await client.create_topic("orders", partitions=6, replication_factor=3)
        assert meta.name == "orders"
        assert len(meta.partitions) == 6
        assert all(sorted(p.replicas) == [1, 2, 3] for p in meta.partitions)
        # preferred leaders rotate over the nodes
        assert sorted(p.replicas[0] for p in meta.partitions) == [1, 1, 2, 2, 3, 3]
        assert "orders" in await client.list_topics()

        written: dict[int, list[tuple[int, bytes]]] = {}
        for p in range(6):
            for i in range(5):
                payload = bytes([p, i]) * (i + 1) + b"\x00\xff"
                r = await client.produce("orders", p, [(payload, 1)], acks="all")
                assert r.last_offset == r.base_offset
                written.setdefault(p, []).append((r.base_offset, payload))

        for p, items in written.items():
            offsets = [o for o, _ in items]
            assert offsets == list(range(offsets[0], offsets[0] + 5)), offsets
            start, hwm, lso = await client.list_offsets("orders", p)
            assert hwm == offsets[-1] + 1 and lso == hwm and start == 0
            got = []
            offset = 0
            for _ in range(20):
                r = await client.fetch("orders", p, offset)
                got += [(b.base_offset, b.payload) for b in r.batches]
                offset = r.next_offset
                if offset >= r.high_watermark:
                    break
            assert got == items

        desc = await client.describe_topic("orders")
        assert all(p.leader in (1, 2, 3) for p in desc.partitions)
        assert [p.high_watermark for p in desc.partitions] == [
            written[p][-1][0] + 1 for p in range(6)
        ]

        with pytest.raises(TopicExistsError, match="orders"):
            await client.create_topic("orders", partitions=6)
        again = await client.create_topic("orders", partitions=6, exist_ok=True)
        assert len(again.partitions) == 6


async def test_multi_record_batch_and_default_partitions(raftlog_cluster) -> None:
    async with RaftlogClient(raftlog_cluster.servers) as client:
        # a raw-records topic's schema (a typed one takes only Arrow payloads of its columns)
        schema = pa.schema([], metadata={RECORDS_FORMAT_KEY: b"records"}).serialize().to_pybytes()
        meta = await client.create_topic("defaults", schema=schema)
        assert len(meta.partitions) == 6  # the cluster default
        values = [b"a", b"", b"ccc"]
        r = await client.produce("defaults", 2, [(frame_records(values), 3)])
        assert r.last_offset - r.base_offset == 2
        f = await client.fetch("defaults", 2, r.base_offset)
        assert len(f.batches) == 1 and f.batches[0].record_count == 3
        assert unframe_records(f.batches[0].payload, 3) == values
        assert (await client.describe_topic("defaults")).schema == schema
        await client.delete_topic("defaults")
        assert "defaults" not in await client.list_topics()
        with pytest.raises(UnknownTopicError, match="'defaults'"):
            await client.describe_topic("defaults")


def test_blocking_client(raftlog_cluster) -> None:
    with BlockingRaftlogClient(raftlog_cluster.bootstrap) as client:
        client.create_topic("blocking", partitions=2, replication_factor=3)
        r1 = client.produce("blocking", 1, [(b"x", 1)])
        r2 = client.produce("blocking", 1, [(b"y", 1)], acks="1")
        assert r2.base_offset == r1.base_offset + 1
        f = client.fetch("blocking", 1, r1.base_offset)
        assert [b.payload for b in f.batches][:1] == [b"x"]


def test_cli_produce_consume(raftlog_cluster) -> None:
    servers = raftlog_cluster.servers
    r = _cli(servers, "topic", "create", "cli", "--partitions", "3", "--replication-factor", "3")
    assert r.returncode == 0, r.stderr
    lines = [f"line-{i}".encode() for i in range(30)]
    r = _cli(servers, "produce", "cli", "--acks", "all", stdin=b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr
    r = _cli(servers, "consume", "cli", "--from-beginning", "--max", "30", "--print-offsets")
    assert r.returncode == 0, r.stderr
    rows = [line.split(b"\t") for line in r.stdout.splitlines()]
    assert sorted(v for _, _, v in rows) == sorted(lines)
    for part in (b"0", b"1", b"2"):
        offs = [int(o) for p, o, _ in rows if p == part]
        assert offs == list(range(offs[0], offs[0] + 10))
    r = _cli(servers, "topic", "list")
    assert "cli" in r.stdout.decode().split()
    r = _cli(servers, "topic", "describe", "nope")
    assert r.returncode == 1 and "unknown topic 'nope'" in r.stderr.decode()


def test_cli_without_cluster_says_how_to_start(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_SERVERS"}
    env["RAFTLOG_HOME"] = str(tmp_path)
    env["HOME"] = str(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "raftlog", "topic", "list"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1
    assert "raftlog local start" in r.stderr.decode()
