"""Mutated and random RPC bodies against a live node; unauthenticated requests.

Bodies start as valid codec encodings of every client and peer request, then
are truncated, bit-flipped, spliced with random bytes, cut and extended, or
replaced by random bytes, and POSTed to every ``/v1/*`` route (any body to
any route) or sent as one frame on the replication stream (``/raft/stream``).
Only bodies the codec rejects for that route are sent (a mutation that still
decodes is a valid request, not bad input; on the stream, any peer request is
valid). Each must get a 4xx (on the stream: an INVALID_REQUEST reply under its
request id) with a framed ErrorResponse whose message names the problem;
the node stays up and answers in time (every request has a client timeout);
and the log is unchanged: the topics and every partition's high watermark
are what they were before. A node started with ``--auth-token`` (and a peer
token) answers 401 with a message naming the token each route takes to
requests without it, and changes nothing.
"""

from __future__ import annotations

import asyncio
import http.client
import pathlib
import signal
import struct
from collections.abc import Iterator

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.client import BlockingRaftlogClient, frame_records
from raftlog.cluster import pid_alive, start_cluster, stop_cluster, stop_node
from raftlog.raft import messages as m
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.messages import (
    CLIENT_ROUTES,
    AlterConfigRequest,
    CompleteMoveRequest,
    ConfigEntry,
    CoordinatorEndTxnRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DecommissionNodeRequest,
    DeleteTopicRequest,
    DescribeConfigsRequest,
    DescribeWriterRequest,
    EndTxnRequest,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    InitProducerRequest,
    ListOffsetsRequest,
    ListTopicsRequest,
    MetadataRequest,
    MovePartitionRequest,
    OffsetForTimestampRequest,
    Participant,
    PartitionStatusRequest,
    ProduceBatch,
    ProduceRequest,
    RegisterNodeRequest,
    RegisterParticipantRequest,
    TransferLeadershipRequest,
)
from raftlog.rpc.peer import REPLY_TYPES, STREAM_PATH, split_frame
from raftlog.rpc.roles import role_of
from raftlog.storage.batch import RecordBatch

TIMEOUT_S = 10.0
GUARD = "fuzzguard"
TOKEN = "fuzz-secret-token"

# the stream takes any peer request: its "class" is None
ROUTES: list[tuple[str, type | None]] = [(f"/v1/{r}", c) for c, r in CLIENT_ROUTES.items()] + [
    (STREAM_PATH, None)
]


def _samples(group: int) -> list[bytes]:
    batch = RecordBatch.create(frame_records([b"fuzz"]), 1)
    msgs = [
        MetadataRequest([GUARD], True),
        CreateTopicRequest("fuzzcreated", 2, 3, b"schema", False),
        DeleteTopicRequest(GUARD),
        ListTopicsRequest(),
        ProduceRequest(GUARD, 0, -1, [ProduceBatch(frame_records([b"x", b"y"]), 2)], -1, -1, -1),
        ProduceRequest(GUARD, 1, 1, [ProduceBatch(b"payload", 1)], 7, 0, 0, True),
        FetchRequest(GUARD, 0, 0, 1 << 20, 1),
        ListOffsetsRequest(GUARD, 1),
        InitProducerRequest(GUARD, 0, 42),
        EndTxnRequest(GUARD, 0, 42, 0, True, 3, -1),
        PartitionStatusRequest([group, 0]),
        RegisterParticipantRequest(0, "fuzz", 1, Participant("a", "r", GUARD, 0, 7, 0)),
        CoordinatorEndTxnRequest(0, "fuzz", 1, "r", False, [Participant("a", "r", GUARD, 0, 7, 0)]),
        DescribeWriterRequest(0, "fuzz"),
        OffsetForTimestampRequest(GUARD, 0, 0),
        AlterConfigRequest(GUARD, [ConfigEntry("retention.bytes", "1")], []),
        DescribeConfigsRequest([GUARD]),
        TransferLeadershipRequest(GUARD, 0, 2),
        CreatePartitionsRequest(GUARD, 4),
        RegisterNodeRequest(9, "127.0.0.1:9"),
        MovePartitionRequest(GUARD, 0, [3, 2, 1]),
        CompleteMoveRequest(GUARD, 0, [3, 2, 1]),
        DecommissionNodeRequest(9),
        m.AppendEntriesRequest(group, 2, 1, 99, 0, 1, 0, True, [batch]),
        m.VoteRequest(group, 2, 1, 99, False, 1000, 99, True),
        m.TimeoutNowRequest(group, 2, 1, 99),
        m.HeartbeatBatchRequest(2, 1, [m.Heartbeat(group, 99, 0, 1, 0)]),
    ]
    return [codec.encode(msg) for msg in msgs]


@st.composite
def _mutated(draw: st.DrawFn, samples: list[bytes]) -> bytes:
    body = bytearray(draw(st.sampled_from(samples)))
    kind = draw(st.sampled_from(["truncate", "flip", "splice", "extend", "random", "zero"]))
    if kind == "truncate":
        del body[draw(st.integers(0, max(0, len(body) - 1))) :]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(body) - 1))
            body[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "splice":
        i = draw(st.integers(0, len(body)))
        j = draw(st.integers(i, min(len(body), i + 16)))
        body[i:j] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "extend":
        body += draw(st.binary(min_size=1, max_size=32))
    elif kind == "zero":
        i = draw(st.integers(0, max(0, len(body) - 4)))
        body[i : i + 4] = b"\xff\xff\xff\x7f"  # a huge length or count
    else:
        body = bytearray(draw(st.binary(max_size=200)))
    return bytes(body)


def _rejected(body: bytes, cls: type | None) -> bool:
    """The codec refuses ``body`` for ``cls`` (None: for any peer request)."""
    try:
        msg = codec.decode(body, cls)
    except CodecError:
        return True
    return cls is None and type(msg) not in REPLY_TYPES


def _stream_call(address: str, body: bytes) -> ErrorResponse:
    """``body`` as one frame (id 7) on a new replication stream; the reply to it."""

    async def call() -> ErrorResponse:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as s,
            s.ws_connect(f"ws://{address}{STREAM_PATH}") as ws,
        ):
            await ws.send_bytes(struct.pack("<Q", 7) + body)
            frame = await ws.receive(timeout=TIMEOUT_S)
            assert frame.type is aiohttp.WSMsgType.BINARY, frame
            request_id, reply = split_frame(frame.data)
            assert request_id == 7
            return codec.decode(reply, ErrorResponse)

    return asyncio.run(call())


def _post(address: str, path: str, body: bytes, headers: dict[str, str] | None = None):
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _group_of(client: BlockingRaftlogClient) -> int:
    meta = client._run(client._client.metadata())
    return next(t for t in meta.topics if t.name == GUARD).partitions[0].group_id


def _state(client: BlockingRaftlogClient) -> tuple[list[str], list[int]]:
    topics = client.list_topics()
    hwms = [client.list_offsets(GUARD, p)[1] for p in range(2)]
    return topics, hwms


@pytest.fixture(scope="module")
def guarded(raftlog_cluster) -> Iterator[tuple[object, BlockingRaftlogClient, int]]:
    with BlockingRaftlogClient(raftlog_cluster.servers, request_timeout_s=30.0) as client:
        client.create_topic(GUARD, partitions=2, replication_factor=3, exist_ok=True)
        for p in range(2):
            for i in range(5):
                client.produce(GUARD, p, [(frame_records([f"g{p}-{i}".encode()]), 1)])
        yield raftlog_cluster, client, _group_of(client)


def _fuzz(guarded, bodies_and_routes_strategy, label: str) -> None:
    cluster, client, _ = guarded
    before = _state(client)
    assert min(before[1]) >= 5, before
    sent: list[int] = []

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        path, cls = data.draw(bodies_and_routes_strategy[0])
        body = data.draw(bodies_and_routes_strategy[1])
        if not _rejected(body, cls):
            return  # still a valid request for this route: not bad input
        address = data.draw(st.sampled_from(cluster.servers))
        if path == STREAM_PATH:
            err = _stream_call(address, body)
            assert err.code == ErrorCode.INVALID_REQUEST, (body[:80], err)
            sent.append(int(err.code))
        else:
            status, reply = _post(address, path, body)
            sent.append(status)
            assert 400 <= status < 500, (path, body[:80], status, reply[:300])
            err = codec.decode(reply, ErrorResponse)
        assert err.message, path
        assert "malformed" in err.message and path.rsplit("/", 1)[1] in err.message, err.message

    run()
    print(f"[{label}] sent {len(sent)} rejected bodies; statuses {sorted(set(sent))}")
    assert len(sent) >= 50, f"only {len(sent)} mutated bodies were invalid"
    for n in cluster.nodes:
        assert pid_alive(n.pid), f"node {n.node_id} died under fuzzing (see {n.log_file})"
    assert _state(client) == before


def test_fuzz_client_routes_mutated_bodies(guarded) -> None:
    samples = _samples(guarded[2])
    routes = st.sampled_from([r for r in ROUTES if r[0].startswith("/v1/")])
    _fuzz(guarded, (routes, _mutated(samples)), "/v1 fuzz")


def test_fuzz_the_replication_stream_mutated_frames(guarded) -> None:
    samples = _samples(guarded[2])
    _fuzz(guarded, (st.just((STREAM_PATH, None)), _mutated(samples)), "/raft/stream fuzz")


def test_fuzz_unknown_routes_get_404_with_message(guarded) -> None:
    cluster = guarded[0]
    for path in ("/v1/nope", "/raft/nope"):
        status, reply = _post(cluster.servers[0], path, b"\x00\x01")
        assert status == 404
        assert "unknown" in codec.decode(reply, ErrorResponse).message


# -- authentication --------------------------------------------------------------------------


@pytest.fixture
def token_node(tmp_path: pathlib.Path) -> Iterator[object]:
    cluster = start_cluster(
        tmp_path / "auth", 1, extra_args=["--auth-token", TOKEN], auth_token=TOKEN, timeout_s=60.0
    )
    try:
        yield cluster
    finally:
        stop_cluster(cluster.data_dir, timeout_s=10.0)
        for n in cluster.nodes:
            if pid_alive(n.pid):
                stop_node(n, signal.SIGKILL, timeout_s=5.0)


def test_fuzz_unauthenticated_requests_get_401_and_change_nothing(token_node) -> None:
    address = token_node.servers[0]
    with BlockingRaftlogClient([address], auth_token=TOKEN, request_timeout_s=30.0) as client:
        client.create_topic(GUARD, partitions=2, replication_factor=1)
        for p in range(2):
            client.produce(GUARD, p, [(frame_records([b"before"]), 1)])
        before = _state(client)
        bodies = _samples(_group_of(client))
        attempts = 0
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            for path, cls in ROUTES:
                for body in bodies:
                    if _rejected(body, cls):
                        continue  # a valid request for this route: the dangerous kind
                    status, reply = _post(address, path, body, headers)
                    attempts += 1
                    assert status == 401, (path, status, reply[:200])
                    # each route names the token it takes: the peer token on /raft/*
                    needed = (
                        "the peer token"
                        if path.startswith("/raft/")
                        else f"needs the {role_of(path.rpartition('/')[2]).value} role"
                    )
                    assert needed in codec.decode(reply, ErrorResponse).message
        assert attempts >= 3 * len(ROUTES)
        host, _, port = address.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
        try:
            # a node bound to 127.0.0.1 shows its metrics to anyone local (issue 17);
            # off loopback they need a token (integration_tests/cluster/test_several_hosts_tls.py)
            conn.request("GET", "/metrics")
            assert conn.getresponse().status == 200
        finally:
            conn.close()
        assert pid_alive(token_node.nodes[0].pid)
        after = _state(client)
        assert after == before, (before, after)
        assert "fuzzcreated" not in after[0]
        fetched = client.fetch(GUARD, 0, 0)
        assert [b.payload for b in fetched.batches] == [frame_records([b"before"])]
