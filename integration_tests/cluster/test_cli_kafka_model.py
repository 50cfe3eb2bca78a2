"""The CLI speaks Kafka's record model: keys placed by murmur2, headers, consume --format json,
--partition/--offset/--from-timestamp, the offsets command, and compression.type with
compressed records read back (a 3-node cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from raftlog.client.partitioner import murmur2 as _murmur2


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


def test_keyed_produce_consume_json_and_offsets(raftlog_cluster) -> None:
    servers = raftlog_cluster.servers
    topic = f"cli-kafka-{uuid.uuid4().hex[:8]}"
    assert _cli(servers, "topic", "create", topic, "--partitions", "3").returncode == 0
    lines = b"".join(f"user{i % 5}|v{i}\n".encode() for i in range(20))
    r = _cli(servers, "produce", topic, "--key-separator", "|", "--header", "app=test", stdin=lines)
    assert r.returncode == 0, r.stderr
    out = _cli(servers, "consume", topic, "--offset", "earliest", "--format", "json", "--max", "20")
    assert out.returncode == 0, out.stderr
    docs = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert len(docs) == 20
    for d in docs:
        # the partition Kafka's default partitioner gives the key
        assert d["partition"] == (_murmur2(d["key"].encode()) & 0x7FFFFFFF) % 3
        assert d["headers"] == [{"key": "app", "value": "test"}]
        assert d["timestampType"] == "LogAppendTime"
    assert sorted(int(d["value"][1:]) for d in docs) == list(range(20))
    # one partition from an offset; keys printed
    first = min(docs, key=lambda d: (d["partition"], d["offset"]))
    p = first["partition"]
    in_p = sorted(d["offset"] for d in docs if d["partition"] == p)
    r = _cli(
        servers,
        "consume",
        topic,
        "--partition",
        str(p),
        "--offset",
        str(in_p[1]),
        "--print-key",
        "--max",
        str(len(in_p) - 1),
    )
    assert r.returncode == 0, r.stderr
    printed = r.stdout.decode().splitlines()
    assert len(printed) == len(in_p) - 1 and all("\t" in x for x in printed)
    offsets = json.loads(_cli(servers, "offsets", topic, "--format", "json").stdout)
    parts = offsets["partitions"]
    assert offsets["topic"] == topic and [o["partition"] for o in parts] == [0, 1, 2]
    # nothing transactional is open: the LSO is the high watermark, past every record read
    for o in parts:
        assert o["last_stable_offset"] == o["high_watermark"] >= o["log_start"]
        assert all(
            d["offset"] < o["high_watermark"] for d in docs if d["partition"] == o["partition"]
        )
    text = _cli(servers, "offsets", topic).stdout.decode().splitlines()
    assert text[0].split("\t") == ["partition", "log_start", "high_watermark", "last_stable_offset"]
    bad = _cli(servers, "produce", topic, "--partition", "7", stdin=b"x\n")
    assert bad.returncode == 1 and b"--partition 7 is out of range" in bad.stderr


def test_produce_with_acks_all_writes_under_an_idempotent_producer(raftlog_cluster) -> None:
    """As Kafka's console producer (idempotent by default since 3.0), ``produce`` with
    acks=all sends each partition's lines through a producer session, so that a request
    retried after its first attempt was written is not stored twice: its batches carry a
    producer id and consecutive sequences. acks=1 writes plainly (no producer id)."""
    from raftlog.client import BlockingRaftlogClient

    servers = raftlog_cluster.servers
    topic = f"cli-idem-{uuid.uuid4().hex[:8]}"
    assert _cli(servers, "topic", "create", topic, "--partitions", "2").returncode == 0
    lines = b"".join(f"v{i}\n".encode() for i in range(10))
    r = _cli(servers, "produce", topic, "--batch-lines", "2", stdin=lines)
    assert r.returncode == 0, r.stderr
    assert b"produced 10 records" in r.stderr
    r = _cli(servers, "produce", topic, "--partition", "1", "--acks", "1", stdin=b"plain\n")
    assert r.returncode == 0, r.stderr
    with BlockingRaftlogClient(raftlog_cluster.bootstrap) as client:
        for p in (0, 1):
            want = 6 if p == 1 else 5
            # acks=1 answers before the line is committed: wait for it to be readable, bounded
            for _ in range(100):
                data = [b for b in client.fetch(topic, p, 0).batches if b.kind.name == "DATA"]
                if len(data) >= want:
                    break
                time.sleep(0.05)
            idempotent = data[:5]  # 10 lines, 2 per request, round-robin over 2 partitions
            assert len({b.producer_id for b in idempotent}) == 1
            assert idempotent[0].producer_id >= 0
            assert [b.first_sequence for b in idempotent] == list(range(5))
            assert [b.record_count for b in idempotent] == [1] * 5
            if p == 1:
                assert len(data) == 6 and data[5].producer_id == -1  # the acks=1 line
            else:
                assert len(data) == 5


def _consume_json(servers: list[str], topic: str, *args: str) -> list[dict]:
    """Every record ``consume`` prints (json) until 2 s pass without one."""
    r = _cli(servers, "consume", topic, "--format", "json", "--timeout-ms", "2000", *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def test_consume_from_timestamp_starts_each_partition_at_the_first_later_record(
    raftlog_cluster,
) -> None:
    servers = raftlog_cluster.servers
    topic = f"cli-from-ts-{uuid.uuid4().hex[:8]}"
    assert _cli(servers, "topic", "create", topic, "--partitions", "2").returncode == 0
    for p in ("0", "1"):
        earlier = b"".join(f"early-{p}-{i}\n".encode() for i in range(5))
        r = _cli(servers, "produce", topic, "--partition", p, stdin=earlier)
        assert r.returncode == 0, r.stderr
    early = _consume_json(servers, topic, "--offset", "earliest")
    assert len(early) == 10
    cut = max(d["timestamp"] for d in early) + 1
    # the later records must be appended at or after `cut` by the leader's clock (a local
    # cluster: this machine's); wait for it to pass, bounded
    for _ in range(200):
        if time.time() * 1000 > cut:
            break
        time.sleep(0.01)
    for p in ("0", "1"):
        later = b"".join(f"late-{p}-{i}\n".encode() for i in range(3))
        r = _cli(servers, "produce", topic, "--partition", p, stdin=later)
        assert r.returncode == 0, r.stderr
    got = _consume_json(servers, topic, "--from-timestamp", str(cut))
    assert sorted(d["value"] for d in got) == sorted(
        f"late-{p}-{i}" for p in (0, 1) for i in range(3)
    )
    assert all(d["timestamp"] >= cut for d in got)
    # the same records (offsets, timestamps) as a read from the beginning finds after `cut`
    everything = _consume_json(servers, topic, "--offset", "earliest")
    key = lambda d: (d["partition"], d["offset"])  # noqa: E731
    assert sorted(got, key=key) == sorted(
        (d for d in everything if d["value"].startswith("late")), key=key
    )
    # one partition; from before everything reads everything there
    only = _consume_json(servers, topic, "--partition", "1", "--from-timestamp", "0")
    assert [d["value"] for d in only] == [f"early-1-{i}" for i in range(5)] + [
        f"late-1-{i}" for i in range(3)
    ]
    # past every record: each partition starts at its end, nothing is printed
    assert (
        _consume_json(servers, topic, "--from-timestamp", str(int(time.time() * 1000) + 10**7))
        == []
    )
    both = _cli(servers, "consume", topic, "--offset", "earliest", "--from-timestamp", "1")
    assert both.returncode == 2
    assert b"--from-timestamp: not allowed with argument --offset" in both.stderr
    bad = _cli(servers, "consume", topic, "--from-timestamp", "yesterday")
    assert bad.returncode == 2 and b"--from-timestamp" in bad.stderr


def test_compression_type_config_and_compressed_records_read_back(raftlog_cluster) -> None:
    import asyncio

    from raftlog.client import RaftlogClient, frame_records

    servers = raftlog_cluster.servers
    topic = f"cli-zstd-{uuid.uuid4().hex[:8]}"
    r = _cli(servers, "topic", "create", topic, "--config", "compression.type=zstd")
    assert r.returncode == 0, r.stderr
    desc = json.loads(_cli(servers, "topic", "describe", topic, "--format", "json").stdout)
    assert desc["configs"]["compression.type"] == "zstd"
    bad = _cli(servers, "topic", "alter-config", topic, "--config", "compression.type=gzip")
    assert bad.returncode != 0
    assert b"compression.type: expected one of none, lz4, zstd, producer, got 'gzip'" in bad.stderr
    r = _cli(servers, "topic", "alter-config", topic, "--config", "compression.type=LZ4")
    assert r.returncode == 0, r.stderr
    desc = json.loads(_cli(servers, "topic", "describe", topic, "--format", "json").stdout)
    assert desc["configs"]["compression.type"] == "lz4"

    values = [f"value {i} ".encode() * 40 for i in range(50)]

    async def write_and_fetch() -> tuple[int, int]:
        async with RaftlogClient(servers, request_timeout_s=30.0) as client:
            for codec in ("zstd", "lz4", "none"):
                await client.produce(topic, 0, [(frame_records(values), 50)], compression=codec)
            fetched = await client.fetch(topic, 0, 0)
            sizes = fetched.stored_bytes
            # decompressed for the reader, whatever the codec
            assert [b.payload for b in fetched.batches] == [frame_records(values)] * 3
            assert [b.compression.name for b in fetched.batches] == ["NONE"] * 3
            return sizes[0], sizes[2]

    zstd_size, plain_size = asyncio.run(write_and_fetch())
    assert zstd_size * 10 < plain_size  # stored compressed
    got = _consume_json(servers, topic, "--offset", "earliest")
    assert [d["value"] for d in got] == [v.decode() for v in values] * 3
    offsets = [d["offset"] for d in got]
    # three batches of 50 consecutive offsets each (control batches may sit between them)
    assert all(offsets[i + 1] - offsets[i] == 1 for i in range(150 - 1) if (i + 1) % 50)
