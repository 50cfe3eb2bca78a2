"""Batches are checked on the way in, and one bad batch never poisons a partition
(issue 44): real node processes, the CLI as a user runs it."""

from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator

import aiohttp
import pyarrow as pa
import pytest
import zstandard

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import CorruptBatchError, RaftlogClient
from raftlog.faults.failpoints import ENV_VAR, PRODUCE_SKIP_BATCH_CHECK
from raftlog.records.framing import frame_records
from raftlog.records.payload_check import PayloadError
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    CreateTopicRequest,
    ErrorCode,
    ErrorResponse,
    ProduceBatch,
    ProduceRequest,
)
from raftlog.storage.batch import Compression

GARBAGE_LZ4 = ProduceBatch(bytes(range(7)), 1, int(Compression.LZ4))
HUGE_COUNT = ProduceBatch(b"x", 2**31 - 1)
KEYED_HUGE_COUNT = ProduceBatch(struct.pack("<4sII", b"\xffRK1", 2**31 - 1, 0), 2**31 - 1)
GIB, MIB = 1 << 30, 1 << 20


def _cli(servers: list[str], *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAFTLOG_SERVERS=",".join(servers))
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


async def _produce_raw(client: RaftlogClient, cluster: ClusterHandle, topic: str, *batches):
    """A produce of ``batches`` as they are (no compression by the client, whatever the
    codec they name), sent to the partition's leader as a hostile client would."""
    leader = (await client.describe_topic(topic)).partitions[0].leader
    body = codec.encode(ProduceRequest(topic, 0, -1, list(batches)))
    url = f"http://{cluster.address(leader)}/v1/produce"
    async with aiohttp.ClientSession() as s, s.post(url, data=body) as r:
        return r.status, codec.decode(await r.read()), leader


def _rss(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _zstd_bomb() -> bytes:
    """1 GiB of zeros in about 32 KB, declaring no size (decoded until it ends)."""
    c = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    zeros = bytes(MIB)
    return b"".join(c.compress(zeros) for _ in range(GIB // MIB)) + c.flush()


async def test_corrupt_batches_are_refused_and_the_partition_keeps_serving(
    raftlog_cluster,
) -> None:
    servers = raftlog_cluster.servers
    topic = f"corrupt-{uuid.uuid4().hex[:8]}"
    async with RaftlogClient(servers) as client:
        await client.create_topic(topic, partitions=1, replication_factor=3)
        await client.produce(topic, 0, [(frame_records([b"before"]), 1)], acks="all")
        _start, end_before, _lso = await client.list_offsets(topic, 0)

        # seven bytes of garbage marked lz4, as the second batch of a produce
        good = ProduceBatch(frame_records([b"never"]), 1)
        status, err, _ = await _produce_raw(client, raftlog_cluster, topic, good, GARBAGE_LZ4)
        assert status == 400 and isinstance(err, ErrorResponse), err
        assert err.code == ErrorCode.INVALID_REQUEST
        assert err.message.startswith("CORRUPT_MESSAGE:"), err.message
        assert f"topic {topic!r} partition 0 batches[1]" in err.message
        assert "lz4 payload is corrupt" in err.message

        # a 1-byte payload claiming 2**31-1 records, and a 12-byte keyed one
        for batch, why in [
            (HUGE_COUNT, "does not fit a payload of 1 bytes"),
            (KEYED_HUGE_COUNT, "does not fit a keyed payload of 12 bytes"),
        ]:
            status, err, _ = await _produce_raw(client, raftlog_cluster, topic, batch)
            assert isinstance(err, ErrorResponse) and why in err.message, err
            assert f"topic {topic!r} partition 0 batches[0]" in err.message

        # a zstd bomb: refused, the leader's memory growing by no more than the cap
        bomb = ProduceBatch(_zstd_bomb(), 1, int(Compression.ZSTD))
        leader = (await client.describe_topic(topic)).partitions[0].leader
        rss_before = _rss(raftlog_cluster.pid(leader))
        status, err, _ = await _produce_raw(client, raftlog_cluster, topic, bomb)
        grown = _rss(raftlog_cluster.pid(leader)) - rss_before
        assert isinstance(err, ErrorResponse), err
        assert "does not decode within the limit of 67108864 bytes" in err.message
        assert grown < 64 * MIB + 48 * MIB, f"leader RSS grew by {grown} bytes"

        # each refusal is counted, by the node that refused it (all four, on any leader)
        counted = 0.0
        line = f'raftlog_produce_corrupt_batches_total{{topic="{topic}"}} '
        async with aiohttp.ClientSession() as s:
            for node in (1, 2, 3):
                async with s.get(f"http://{raftlog_cluster.address(node)}/metrics") as r:
                    text = await r.text()
                counted += sum(
                    float(x[len(line) :]) for x in text.splitlines() if x.startswith(line)
                )
        assert counted == 4.0

        # nothing of them entered the log; the partition keeps writing and serving
        assert (await client.list_offsets(topic, 0))[1] == end_before
        await client.produce(topic, 0, [(frame_records([b"after"]), 1)], acks="all")
    out = _cli(servers, "consume", topic, "--from-beginning", "--timeout-ms", "2000")
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"before\nafter\n"


def _ipc(*batches: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


async def test_a_typed_topic_takes_only_one_arrow_batch_of_its_columns(raftlog_cluster) -> None:
    """A Spark-typed topic (an Arrow schema in its metadata), written as a hostile client
    with the client token would: two record batches in a payload, other columns, plain
    bytes. Each was stored before, and every Spark reader of the topic then failed on
    it; each is refused now, naming the batch and what the topic expects, and the
    batch the sink would write still goes in. A schema that is not one is refused when
    the topic is created."""
    servers = raftlog_cluster.servers
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    schema = pa.schema([("s", pa.string())])
    rows = pa.record_batch({"s": pa.array(["a", "b"])})
    async with RaftlogClient(servers) as client:
        await client.create_topic(
            topic, partitions=1, replication_factor=3, schema=schema.serialize().to_pybytes()
        )
        await client.produce(topic, 0, [(_ipc(rows), 2)], acks="all")
        end = (await client.list_offsets(topic, 0))[1]
        cases = [
            (ProduceBatch(_ipc(rows, rows), 4), "holds 2 record batches"),
            (
                ProduceBatch(_ipc(pa.record_batch({"s": pa.array([1, 2])})), 2),
                "columns do not match the topic's schema: expected (s: string), got (s: int64)",
            ),
            (ProduceBatch(b"hello", 1), "this is a plain payload"),
        ]
        for batch, why in cases:
            status, err, _ = await _produce_raw(client, raftlog_cluster, topic, batch)
            assert status == 400 and isinstance(err, ErrorResponse), err
            assert err.message.startswith("CORRUPT_MESSAGE:"), err.message
            assert f"topic {topic!r} partition 0 batches[0]" in err.message
            assert why in err.message, err.message
        assert (await client.list_offsets(topic, 0))[1] == end  # nothing refused went in
        body = codec.encode(
            CreateTopicRequest(f"{topic}-bad-schema", 1, 3, schema=b"garbage", exist_ok=False)
        )
        url = f"http://{raftlog_cluster.address(1)}/v1/create_topic"
        async with aiohttp.ClientSession() as s, s.post(url, data=body) as r:
            status, err = r.status, codec.decode(await r.read())
        assert status == 400 and isinstance(err, ErrorResponse), err
        assert err.message.startswith("schema: topic metadata holds 7 bytes that are not"), err


@pytest.fixture
def unchecked_cluster(tmp_path: pathlib.Path, monkeypatch) -> Iterator[ClusterHandle]:
    """A cluster whose nodes append produced batches unchecked, as nodes did before the
    check existed (the failpoint is read from the environment the nodes inherit)."""
    monkeypatch.setenv(ENV_VAR, f"{PRODUCE_SKIP_BATCH_CHECK}=error")
    with running_cluster(tmp_path / "cluster") as handle:
        yield handle


async def test_readers_get_past_a_bad_batch_already_in_the_log(unchecked_cluster) -> None:
    """Bad batches written by an older node: each reader fails that batch, naming it,
    and reads the good records before and after it."""
    servers = unchecked_cluster.servers
    topic = "poisoned"
    async with RaftlogClient(servers) as client:
        await client.create_topic(topic, partitions=1, replication_factor=3)
        one = await client.produce(topic, 0, [(frame_records([b"one"]), 1)], acks="all")
        offsets = []
        for bad in (GARBAGE_LZ4, KEYED_HUGE_COUNT):
            status, reply, _ = await _produce_raw(client, unchecked_cluster, topic, bad)
            assert status == 200, reply  # the check is off: written as before
            offsets.append(reply.base_offset)
        garbage, keyed_at = offsets
        two = await client.produce(topic, 0, [(frame_records([b"two"]), 1)], acks="all")

        # the client: the good batch before, then the bad one alone, named
        first = await client.fetch(topic, 0, one.base_offset)
        assert [b.base_offset for b in first.batches] == [one.base_offset]
        assert first.next_offset == garbage
        named = rf"offsets {garbage}\.\.{garbage} of topic '{topic}' partition 0"
        with pytest.raises(CorruptBatchError, match=named) as e:
            await client.fetch(topic, 0, garbage)
        assert "lz4 payload is corrupt" in str(e.value) and e.value.last_offset == garbage
        rest = await client.fetch(topic, 0, keyed_at)
        keyed, last = rest.batches
        assert keyed.record_count == 2**31 - 1 and last.base_offset == two.base_offset

        # the connector's decoder: a clear error, not MemoryError
        from pyspark_raftlog.raw_records import decode_records

        with pytest.raises(PayloadError, match="does not fit a keyed payload of 12 bytes"):
            decode_records(keyed.payload, keyed.record_count)

    out = _cli(servers, "consume", topic, "--from-beginning", "--timeout-ms", "2000")
    assert out.stdout == b"one\ntwo\n", out.stderr
    assert out.returncode == 1
    err = out.stderr.decode()
    assert f"corrupt batch at offsets {garbage}..{garbage} of topic '{topic}' partition 0" in err
    last_keyed = keyed_at + 2**31 - 2
    assert (
        f"corrupt batch at offsets {keyed_at}..{last_keyed} of topic '{topic}' partition 0" in err
    )
    assert "MemoryError" not in err and "Traceback" not in err


async def test_a_batch_damaged_on_the_leaders_disk_is_sent_as_stored_and_its_reader_refuses_it(
    raftlog_cluster,
) -> None:
    """The leader serves a fetch without checking CRCs (Kafka's broker does not either;
    every batch was checked before it entered the log): a batch damaged on its disk
    after that goes out as stored, and the client, which checks every fetched batch,
    returns the good batch before it, names it in CorruptBatchError, and reads on
    past it. A leader that checked would fail the first fetch whole."""
    servers = raftlog_cluster.servers
    topic = f"damaged-{uuid.uuid4().hex[:8]}"
    marker = b"damaged-on-disk-" * 8
    async with RaftlogClient(servers) as client:
        # one replica: no other copy to read from, the leader's file is the log
        await client.create_topic(topic, partitions=1, replication_factor=1)
        one = await client.produce(topic, 0, [(frame_records([b"one"]), 1)], acks="all")
        hurt = await client.produce(topic, 0, [(frame_records([marker]), 1)], acks="all")
        two = await client.produce(topic, 0, [(frame_records([b"two"]), 1)], acks="all")
        leader = (await client.describe_topic(topic)).partitions[0].leader
        part_dir = raftlog_cluster.data_dir / f"node-{leader}" / "partitions" / topic / "0"
        (segment,) = part_dir.glob("*.log")
        at = segment.read_bytes().index(marker) + 5
        fd = os.open(segment, os.O_RDWR)
        try:  # in place: the node's open descriptor reads the damage through the page cache
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x20]), at)
        finally:
            os.close(fd)

        first = await client.fetch(topic, 0, one.base_offset)
        assert [b.base_offset for b in first.batches] == [one.base_offset]
        assert first.next_offset == hurt.base_offset
        named = rf"offsets {hurt.base_offset}\.\.{hurt.base_offset} of topic '{topic}' partition 0"
        with pytest.raises(CorruptBatchError, match=named + ": CRC mismatch") as e:
            await client.fetch(topic, 0, hurt.base_offset)
        assert e.value.last_offset == hurt.base_offset
        rest = await client.fetch(topic, 0, hurt.base_offset + 1)
        assert [b.base_offset for b in rest.batches] == [two.base_offset]
        # the leader goes on serving and writing the partition
        three = await client.produce(topic, 0, [(frame_records([b"three"]), 1)], acks="all")
        after = await client.fetch(topic, 0, two.base_offset)
        assert [b.base_offset for b in after.batches] == [two.base_offset, three.base_offset]
    out = _cli(servers, "consume", topic, "--from-beginning", "--timeout-ms", "2000")
    assert out.stdout == b"one\ntwo\nthree\n", out.stderr
    assert out.returncode == 1
    assert f"corrupt batch at offsets {hurt.base_offset}..{hurt.base_offset}" in out.stderr.decode()
