"""The Kafka listener's edge on a real node: ApiVersions of a newer version (KIP-511),
and bad input (a truncated frame, a huge declared size, an unknown API key, a wrong
CRC, a record count that does not fit) gets Kafka's error code or a clean close, and
the node keeps serving: a later request, on the same connection where it stays
usable and on a new one where it closed, succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import pathlib
import struct
import time
import urllib.request

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c
from kafka_wire import (
    Wire,
    decode_response,
    encode_request,
    frame,
    leader_address,
    produce_request,
    raw_header,
    record_batch,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
from kio.schema.metadata.v6.request import MetadataRequest, MetadataRequestTopic

from benchmarks.workloads.cluster_handle import running_cluster
from raftlog.client import BlockingRaftlogClient
from raftlog.kafka.protocol import API_VERSIONS

UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
_API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _api_versions_ok(address: str) -> None:
    """A fresh connection gets a full ApiVersions v3 answer: the node still serves."""
    with Wire(address) as wire:
        answer = wire.call(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    assert answer.error_code == 0
    assert {k.api_key for k in answer.api_keys} >= {0, 1, 2, 3, 18, 19, 20}


def test_api_versions_v4_gets_unsupported_version_and_the_api_list(bootstrap) -> None:
    with Wire(bootstrap[0]) as wire:
        # a v4 request: header v2 (flexible) of api 18 version 4, then an empty tagged body
        head = struct.pack(">hhih", 18, 4, 77, 3) + b"raw" + b"\x00"
        wire.send(frame(head + b"\x00\x00\x00"))
        answer = wire.read_frame()
        assert answer is not None
        body = decode_response(answer, 18, 0, 77)  # KIP-511: the answer is a v0 body
        assert body.error_code == UNSUPPORTED_VERSION
        versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert versions[18] == (0, 3)
        assert versions[0] == (3, 8) and versions[1] == (4, 11) and versions[3] == (0, 6)
        assert versions[32] == (1, 4)  # DescribeConfigs
        # the full list: every API the listener answers, at the versions it answers
        assert versions == {key: (low, high) for key, (_, low, high) in API_VERSIONS.items()}
        # the connection stays usable: the client retries with a version listed
        again = wire.call(_API_VERSIONS)
        assert again.error_code == 0
    _api_versions_ok(bootstrap[1])  # and another connection is served


@pytest.mark.parametrize(
    "case",
    ["truncated frame", "huge declared size", "negative size", "unknown api key", "bad header"],
)
def test_bad_frames_close_the_connection_and_the_node_keeps_serving(bootstrap, case) -> None:
    address = bootstrap[1]
    with Wire(address) as wire:
        if case == "truncated frame":
            wire.send(struct.pack(">i", 100) + raw_header(18, 0, 1)[:6])
            wire.sock.shutdown(1)  # the client stops mid-frame
        elif case == "huge declared size":
            wire.send(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
        elif case == "negative size":
            wire.send(struct.pack(">i", -5))
        elif case == "unknown api key":
            wire.send(frame(raw_header(9999, 0, 1)))
        else:  # a client id length past the frame's end
            wire.send(frame(struct.pack(">hhih", 18, 0, 1, 500)))
        assert wire.closed_by_server()
    _api_versions_ok(address)


#: record counts that do not fit the 3 records of :func:`record_batch` (the CRC is
#: recomputed, so that only the count is wrong), and the message each gets
_COUNTS = {
    "record count huge": (2**31 - 1, "does not fit"),  # 2**31-1 records in a few bytes
    "record count zero": (0, "does not fit"),
    "record count negative": (-1, "does not fit"),
    "record count too high": (5, "do not decode"),  # the bytes end after the third
    "record count too low": (2, "bytes follow the last of 2 records"),
    # the header's last offset delta (2) disagrees with the count: Kafka's LogValidator
    "last offset delta wrong": (4, "last offset delta 2 does not match the record count 4"),
}


@pytest.mark.parametrize("case", ["wrong crc", "truncated batch", *_COUNTS])
def test_corrupt_batches_get_corrupt_message_and_the_connection_stays_usable(
    kafka_cluster, bootstrap, case
) -> None:
    topic = "edge-" + case.replace(" ", "-")
    address = leader_address(kafka_cluster, bootstrap, topic)
    batch = record_batch()
    if case == "wrong crc":
        batch[-2] ^= 0xFF  # the last value byte (the records still parse): CRC mismatch
    elif case in _COUNTS:
        count = _COUNTS[case][0]
        struct.pack_into(">i", batch, 57, count)
        if case != "last offset delta wrong":  # the header's offset range agrees
            struct.pack_into(">i", batch, 23, count - 1)
        struct.pack_into(">I", batch, 17, calc_crc32c(memoryview(batch)[21:]))
    else:
        batch = batch[:-5]  # the declared length runs past the bytes sent
    with Wire(address) as wire:
        answer = wire.call(produce_request(topic, bytes(batch)), correlation_id=5)
        (part,) = answer.responses[0].partition_responses
        assert part.error_code == CORRUPT_MESSAGE, part
        assert part.error_message
        if case in _COUNTS:
            assert _COUNTS[case][1] in part.error_message, part.error_message
        # nothing entered the log, and the same connection still produces
        good = wire.call(produce_request(topic, bytes(record_batch())), correlation_id=6)
        (ok,) = good.responses[0].partition_responses
        assert ok.error_code == 0, ok
    _api_versions_ok(address)  # another connection is served too
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        _, hwm, _ = client.list_offsets(topic, 0)
        fetched = client.fetch(topic, 0, 0)
    data = [b for b in fetched.batches if b.record_count == 3]
    assert len(data) == 1 and data[0].last_offset + 1 == hwm


def test_pipelined_requests_are_answered_in_request_order(kafka_cluster, bootstrap) -> None:
    """A long-polling fetch (nothing to read: it waits max_wait_ms) and an ApiVersions
    sent right after it on one connection: the fetch's answer comes first, after its
    wait, then the other's, though that one was ready at once."""
    topic = "edge-pipeline"
    address = leader_address(kafka_cluster, bootstrap, topic)
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        _, hwm, _ = client.list_offsets(topic, 0)
    fetch = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=1500),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=hwm,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    with Wire(address) as wire:
        started = time.monotonic()
        wire.send(encode_request(fetch, correlation_id=1) + encode_request(_API_VERSIONS, 2))
        first = wire.read_frame()
        waited = time.monotonic() - started
        second = wire.read_frame()
    assert first is not None and second is not None
    answer = decode_response(first, 1, 11, 1)  # asserts correlation id 1 came first
    (part,) = answer.responses[0].partitions
    assert part.error_code == 0 and part.high_watermark >= hwm and not part.records
    assert waited >= 1.4, f"the fetch answered after {waited:.2f}s, before its max_wait_ms"
    assert decode_response(second, 18, 3, 2).error_code == 0


def _idempotent_batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, epoch, sequence, 2**20)
    for i in range(3):
        builder.append(i, 1_700_000_000_000 + i, b"k", b"value-%d" % i, [])
    return bytes(builder.build())


def test_idempotent_produce_dedups_and_refuses_a_sequence_gap(kafka_cluster, bootstrap) -> None:
    """InitProducerId, then a batch, the same batch again (a retry: answered with the
    first offset, stored once), then a batch with a gap in its sequence:
    OUT_OF_ORDER_SEQUENCE_NUMBER."""
    topic = "edge-idempotent"
    address = leader_address(kafka_cluster, bootstrap, topic)
    with Wire(address) as wire:
        init = wire.call(
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)
            )
        )
        assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
        pid, epoch = init.producer_id, init.producer_epoch
        first = wire.call(
            produce_request(topic, _idempotent_batch(pid, epoch, 0)), correlation_id=2
        )
        (a,) = first.responses[0].partition_responses
        assert a.error_code == 0
        again = wire.call(
            produce_request(topic, _idempotent_batch(pid, epoch, 0)), correlation_id=3
        )
        (b,) = again.responses[0].partition_responses
        assert (b.error_code, b.base_offset) == (0, a.base_offset)
        gap = wire.call(produce_request(topic, _idempotent_batch(pid, epoch, 10)), correlation_id=4)
        (c,) = gap.responses[0].partition_responses
        assert c.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, c
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        fetched = client.fetch(topic, 0, 0)
    assert [b.base_offset for b in fetched.batches if b.record_count == 3] == [a.base_offset]


def test_a_name_asked_for_many_times_is_answered_once(kafka_cluster, bootstrap) -> None:
    """Metadata naming one topic 100,000 times, and Fetch naming one partition 50 times,
    each answered once, as Kafka's broker answers a set: the probes' 1,000,000 names made
    a 138 MB answer and kept the node from its peers for 137 s, and 200 copies of one
    partition a 200 MB fetch answer. More distinct names than --max-topics-per-metadata
    (10,000) close the connection, and the node serves the next one."""
    topic = "edge-dup-names"
    address = leader_address(kafka_cluster, bootstrap, topic)
    with Wire(address) as wire:
        asked = MetadataRequest(
            topics=tuple(MetadataRequestTopic(name=topic) for _ in range(100_000)),
            allow_auto_topic_creation=False,
        )
        answer = wire.call(asked)
        assert [t.name for t in answer.topics] == [topic]
        produced = wire.call(produce_request(topic, bytes(record_batch())), correlation_id=2)
        assert produced.responses[0].partition_responses[0].error_code == 0
        fetch = FetchRequest(
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=1,
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=tuple(
                        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                        for _ in range(50)
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        fetched = wire.call(fetch, correlation_id=3)
        assert [len(r.partitions) for r in fetched.responses] == [1]
        assert fetched.responses[0].partitions[0].records
    with Wire(address) as wire:
        too_many = MetadataRequest(
            topics=tuple(MetadataRequestTopic(name=f"t{i}") for i in range(10_001)),
            allow_auto_topic_creation=False,
        )
        wire.send(encode_request(too_many, 4))
        assert wire.read_frame() is None  # closed: no Metadata error below v10
    _api_versions_ok(address)


def test_a_connection_silent_between_or_inside_requests_is_closed(tmp_path) -> None:
    """--connections-max-idle-ms (Kafka's connections.max.idle.ms) on the Kafka door: a
    connection that sent nothing, one cut inside its size prefix and one inside its
    body are closed once idle that long; each was held open before (a hostile client
    held 24 bodies of 33 MB for as long as it liked)."""
    with running_cluster(tmp_path / "idle", extra_args=["--connections-max-idle-ms", "1500"]) as c:
        address = c.cluster.kafka_bootstrap[0]
        _api_versions_ok(address)
        wires = [Wire(address) for _ in range(3)]
        try:
            wires[1].send(b"\x00\x00")  # half a size prefix
            wires[2].send(struct.pack(">i", 1 << 20) + b"\x00" * 1000)  # a body cut short
            started = time.monotonic()
            for wire in wires:
                assert wire.read_frame() is None  # closed, not answered
            assert time.monotonic() - started < 10
        finally:
            for wire in wires:
                wire.sock.close()
        _api_versions_ok(address)


def _rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _kafka_request_bytes(address: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("raftlog_kafka_request_bytes ")]
    return float(line.split()[1])


def test_many_bodies_sent_at_once_hold_no_more_than_the_request_budget(tmp_path) -> None:
    """12 connections each send 25 MB of a request declaring 30 MB, and stop: the listener
    reads a request only while its declared size fits --queued-max-request-bytes (here
    32 MiB) beside those held, as Kafka's memory pool does, so the node holds about one of
    them. A hostile client's 24 such bodies took a node from 108 to 892 MiB before."""
    budget, declared, sent = 32 << 20, 30_000_000, 25_000_000
    args = ["--queued-max-request-bytes", str(budget)]
    with running_cluster(tmp_path / "budget", extra_args=args) as c:
        address, pid = c.cluster.kafka_bootstrap[0], c.pid(1)
        _api_versions_ok(address)
        before = _rss_mib(pid)

        async def flood() -> tuple[float, float]:
            host, port = address.rsplit(":", 1)
            writers = []
            for _ in range(12):
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(struct.pack(">i", declared) + b"\x01" * sent)
                writers.append(writer)
            for writer in writers:  # the node reads what fits; the rest waits in sockets
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(writer.drain(), 0.5)
            await asyncio.sleep(2.0)
            held = await asyncio.to_thread(_kafka_request_bytes, c.address(1))
            grown = _rss_mib(pid) - before
            _api_versions_ok(address)  # a small request still fits beside the one held
            for writer in writers:
                writer.transport.abort()
            return held, grown

        held, grown = asyncio.run(flood())
        assert held <= budget + declared, held
        assert grown < 150, f"the node's RSS grew by {grown:.0f} MiB"
        _api_versions_ok(address)
