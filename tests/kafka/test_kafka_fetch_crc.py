"""The Kafka door is the reader of what the node's fetch sends: the node no longer
checks CRCs on a fetch (ARCHITECTURE.md, who checks a batch's CRC), and the door
re-encodes each batch under a new Kafka CRC, which would hide the damage from the
Kafka consumer's check. So it checks each batch first: a damaged one is never
answered, the batches before it are, and alone it is CORRUPT_MESSAGE."""

from __future__ import annotations

import datetime
import types
from typing import Any

from raftlog.kafka.apis import KafkaApis
from raftlog.kafka.records import CORRUPT_MESSAGE, split_batches
from raftlog.records.framing import frame_records
from raftlog.rpc import codec
from raftlog.rpc.messages import FetchRequest, FetchResponse
from raftlog.rpc.server import AuthPolicy
from raftlog.storage.batch import RecordBatch

GOOD, BAD = b"good-record", b"damaged-record"


def _stored() -> list[RecordBatch]:
    """Two batches as a leader's fetch sends them (decoded from the answer's frame,
    unchecked), the second damaged on disk after its CRC was written."""
    batches = [
        RecordBatch.create(frame_records([v]), 1, timestamp_ms=5).stamped(i, 1)
        for i, v in enumerate((GOOD, BAD))
    ]
    raw = bytearray(codec.encode(FetchResponse(batches, 2, 2, 0, 2)))
    at = bytes(raw).index(BAD)
    raw[at] ^= 0x01
    return codec.decode(bytes(raw), FetchResponse).batches


class _Node:
    shards = None
    controller_stm = types.SimpleNamespace(topics={})

    async def handle_client(self, msg: Any) -> Any:
        assert isinstance(msg, FetchRequest)
        found = [b for b in _stored() if b.last_offset >= msg.offset]
        return FetchResponse(found, 2, 2, 0, 2)


def _request(offset: int) -> Any:
    part = types.SimpleNamespace(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return types.SimpleNamespace(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[types.SimpleNamespace(topic="t", partitions=[part])],
    )


async def test_a_damaged_batch_is_never_answered_under_a_new_crc() -> None:
    apis = KafkaApis(_Node(), {}, AuthPolicy())
    first = (await apis.fetch(None, _request(0)))["responses"][0]["partitions"][0]
    assert first["error_code"] == 0
    (only,) = split_batches(first["records"])  # the good batch alone, no skip past the bad
    assert GOOD in bytes(only) and BAD[1:] not in first["records"]
    alone = (await apis.fetch(None, _request(1)))["responses"][0]["partitions"][0]
    assert alone["error_code"] == CORRUPT_MESSAGE and not alone["records"]
