"""Bad input gets a clear error, nothing written is lost, and the node keeps serving."""

from __future__ import annotations

import struct

import aiohttp
import pytest

from raftlog.client import (
    InvalidRequestError,
    RaftlogClient,
    RecordTooLargeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raftlog.raft.messages import APPEND_FAILURE, AppendEntriesReply, AppendEntriesRequest
from raftlog.rpc import codec
from raftlog.rpc.messages import ErrorCode, ErrorResponse, ProduceBatch, ProduceRequest
from raftlog.rpc.peer import STREAM_PATH, split_frame
from raftlog.storage.batch import RecordBatch


async def _post(address: str, path: str, body: bytes) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}{path}", data=body) as r:
        return r.status, await r.read()


async def _peer_call(address: str, message: bytes) -> object:
    """One request on a raw replication stream (id 1); the decoded reply."""
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(f"ws://{address}{STREAM_PATH}") as ws,
    ):
        await ws.send_bytes(struct.pack("<Q", 1) + message)
        frame = await ws.receive(timeout=10.0)
        request_id, reply = split_frame(frame.data)
        assert request_id == 1
        return codec.decode(reply)


async def test_bad_input_is_rejected_and_the_node_keeps_serving(raftlog_cluster) -> None:
    async with RaftlogClient(raftlog_cluster.servers) as client:
        await client.create_topic("bad", partitions=1, replication_factor=3, exist_ok=True)
        first = await client.produce("bad", 0, [(b"before", 1)])
        meta = await client.describe_topic("bad")
        leader = meta.partitions[0].leader
        addr = raftlog_cluster.address(leader)

        # malformed and truncated bodies: 400 naming the field
        good = codec.encode(ProduceRequest("bad", 0, -1, [ProduceBatch(b"x", 1)]))
        status, body = await _post(addr, "/v1/produce", good[:9])
        assert status == 400
        err = codec.decode(body)
        assert isinstance(err, ErrorResponse)
        assert "malformed produce body" in err.message and "truncated" in err.message
        err = await _peer_call(addr, b"\x64\x00garbage")
        assert isinstance(err, ErrorResponse) and err.code == ErrorCode.INVALID_REQUEST
        assert "AppendEntriesRequest" in err.message
        status, _ = await _post(addr, "/v1/produce", b"")
        assert status == 400

        # unknown topic / partition, bad acks
        with pytest.raises(UnknownTopicError, match="'no-such-topic'"):
            await client.produce("no-such-topic", 0, [(b"x", 1)])
        with pytest.raises(UnknownPartitionError, match="no partition 7"):
            await client.produce("bad", 7, [(b"x", 1)])
        with pytest.raises(InvalidRequestError, match="acks"):
            await client.produce("bad", 0, [(b"x", 1)], acks="2")
        with pytest.raises(InvalidRequestError, match="invalid topic name"):
            await client.create_topic("../etc", partitions=1)

        # an oversized record
        with pytest.raises(RecordTooLargeError, match="exceeds the limit"):
            await client.produce("bad", 0, [(b"\0" * (16 * 1024 * 1024 + 1), 1)])

        # a stale term: the follower refuses and reports its term; nothing is appended
        follower = next(n for n in (1, 2, 3) if n != leader)
        topics = (await client.metadata()).topics
        gid = next(t for t in topics if t.name == "bad").partitions[0].group_id
        stale = AppendEntriesRequest(
            gid, leader, follower, 0, first.base_offset, 0, 0, True,
            [RecordBatch.create(b"stale", 1).stamped(first.base_offset + 1, 0)],
        )  # fmt: skip
        reply = await _peer_call(raftlog_cluster.address(follower), codec.encode(stale))
        assert isinstance(reply, AppendEntriesReply)
        assert reply.result == APPEND_FAILURE and reply.term >= 1

        # still serving, nothing lost
        after = await client.produce("bad", 0, [(b"after", 1)])
        assert after.base_offset > first.base_offset
        f = await client.fetch("bad", 0, first.base_offset)
        payloads = [b.payload for b in f.batches]
        assert payloads[0] == b"before" and b"after" in payloads and b"stale" not in payloads


@pytest.mark.parametrize(
    ("kwargs", "field", "allowed"),
    [
        ({"records": [(b"huge", 1 << 31)]}, "batches[0].record_count", "1..2147483647"),
        ({"producer_id": 7, "producer_epoch": 0, "first_sequence": -5}, "first_sequence", "-1.."),
        ({"producer_id": 7, "producer_epoch": 1 << 15}, "producer_epoch", "-1..32767"),
    ],
)
async def test_out_of_range_produce_is_refused_and_the_partition_keeps_writing(
    raftlog_cluster, kwargs, field, allowed
) -> None:
    """Range checks at decoding: the error names the field and its range, nothing stalls."""
    async with RaftlogClient(raftlog_cluster.servers) as client:
        await client.create_topic("ranges", partitions=1, replication_factor=3, exist_ok=True)
        before = await client.produce("ranges", 0, [(b"before", 1)])
        args = {"records": [(b"x", 1)], **kwargs}
        records = args.pop("records")
        with pytest.raises(InvalidRequestError) as err:
            await client.produce("ranges", 0, records, **args)
        message = str(err.value)
        assert f"ProduceRequest.{field}" in message and f"allowed {allowed}" in message
        # The partition keeps taking writes at once (well within one produce timeout).
        for i in range(3):
            after = await client.produce("ranges", 0, [(f"after{i}".encode(), 1)])
            assert after.base_offset > before.base_offset
