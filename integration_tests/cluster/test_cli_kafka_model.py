"""The CLI speaks Kafka's record model: keys placed by murmur2, headers, consume --format json,
--partition/--offset, and the offsets command (a 3-node cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
