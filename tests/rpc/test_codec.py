"""The wire codec: round trips, and bad bodies raise CodecError (never anything else)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.messages import (
    ErrorCode,
    ErrorResponse,
    FetchResponse,
    PartitionInfo,
    ProduceBatch,
    ProduceRequest,
    TopicInfo,
)
from raftlog.storage.batch import RecordBatch


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    term: int
    ok: bool
    note: str


@dataclasses.dataclass(frozen=True, slots=True)
class SampleAppend:
    """Shaped like raft's append_entries: scalars, batches, nested lists."""

    group: int
    term: int
    prev_log_index: int
    prev_log_term: int
    commit_index: int
    flush: bool
    batches: list[RecordBatch]
    members: list[int]
    entries: list[Entry]
    hint: str | None
    blob: bytes
    ratio: float


codec.register(9001, SampleAppend)
codec.register(9002, Entry)


def _batch(payload: bytes, base: int = 0, count: int = 1) -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=1).stamped(base, 7)


SAMPLE = SampleAppend(
    group=3,
    term=7,
    prev_log_index=41,
    prev_log_term=6,
    commit_index=40,
    flush=True,
    batches=[_batch(b"\x00\xffpayload", 42, 3), _batch(b"", 45)],
    members=[1, 2, 3],
    entries=[Entry(1, False, "é")],
    hint=None,
    blob=b"\x01\x02",
    ratio=0.5,
)


def test_round_trip_preserves_every_field_and_payload_bytes() -> None:
    raw = codec.encode(SAMPLE)
    back = codec.decode(raw)
    assert back == SAMPLE
    assert back.batches[0].payload == b"\x00\xffpayload"
    assert back.batches[0].last_offset == 44
    assert codec.encode(back) == raw


def test_client_messages_round_trip() -> None:
    msgs = [
        ProduceRequest("t", 2, -1, [ProduceBatch(b"abc", 1)], 5, 0, 10, True),
        FetchResponse([_batch(b"x", 3)], 4, 4, 0, 4),
        ErrorResponse(ErrorCode.NOT_LEADER, "not leader", 2, "127.0.0.1:1"),
        TopicInfo("t", 3, [PartitionInfo(0, 1, 2, [1, 2, 3])], schema=b"arrow"),
    ]
    for m in msgs:
        assert codec.decode(codec.encode(m)) == m


def test_a_produced_payload_is_a_view_of_an_immutable_frame_and_a_copy_of_a_mutable_one() -> None:
    """The node appends a produced payload without copying it out of the request."""
    payload = bytes(range(256)) * 300
    frame = codec.encode(ProduceRequest("t", 0, -1, [ProduceBatch(payload, 7)]))
    got = codec.decode(frame, ProduceRequest).batches[0].payload
    assert isinstance(got, memoryview) and got.obj is frame and got == payload
    mutable = bytearray(frame)
    copied = codec.decode(mutable, ProduceRequest).batches[0].payload
    mutable[-1] ^= 0xFF
    assert type(copied) is bytes and copied == payload


def test_a_payload_is_sent_as_it_is_unless_it_could_change() -> None:
    """encode_parts passes bytes and read-only views through; a writable buffer is copied."""
    data = bytes(100_000)
    view = memoryview(data)
    writable = memoryview(bytearray(100_000))
    for payload, passed in ((data, True), (view, True), (writable, False)):
        parts = codec.encode_parts(ProduceRequest("t", 0, -1, [ProduceBatch(payload, 1)]))
        assert any(part is payload for part in parts) is passed
        assert codec.decode(b"".join(parts), ProduceRequest).batches[0].payload == payload


def test_expected_type_mismatch_names_both_types() -> None:
    raw = codec.encode(SAMPLE)
    with pytest.raises(CodecError, match="expected a ProduceRequest message, got SampleAppend"):
        codec.decode(raw, ProduceRequest)


def test_unknown_type_id() -> None:
    with pytest.raises(CodecError, match="unknown message type id 65000"):
        codec.decode(b"\xe8\xfd")


def test_truncated_names_the_field() -> None:
    raw = codec.encode(SAMPLE)
    with pytest.raises(CodecError, match=r"SampleAppend\.group: truncated"):
        codec.decode(raw[:5])


def test_trailing_bytes_rejected() -> None:
    with pytest.raises(CodecError, match="1 unexpected trailing bytes"):
        codec.decode(codec.encode(SAMPLE) + b"\x00")


def test_bad_bool_byte() -> None:
    raw = bytearray(codec.encode(SAMPLE))
    # the bool follows 2 bytes of type id and five int64 fields
    raw[2 + 40] = 2
    with pytest.raises(CodecError, match=r"SampleAppend\.flush: expected a bool byte 0 or 1"):
        codec.decode(bytes(raw))


def test_huge_list_count_rejected_without_allocating() -> None:
    body = codec.encode(ProduceRequest("t", 0, -1, []))
    # the batches count sits after topic (4+1), partition (8), acks (8)
    pos = 2 + 5 + 16
    raw = body[:pos] + b"\xff\xff\xff\xff" + body[pos + 4 :]
    with pytest.raises(CodecError, match=r"ProduceRequest\.batches: list count 4294967295"):
        codec.decode(raw)


def test_corrupt_batch_crc_is_reported() -> None:
    """Anything but a fetch answer (a replication append here) is refused whole."""
    sample = dataclasses.replace(SAMPLE, batches=[_batch(b"abcdef", 0)])
    raw = bytearray(codec.encode(sample))
    at = bytes(raw).index(b"abcdef")
    raw[at + 2] ^= 0xFF  # a payload byte of the first batch
    with pytest.raises(CodecError, match=r"SampleAppend\.batches\[0\]: CRC mismatch"):
        codec.decode(bytes(raw))


def test_a_fetch_answers_batches_are_left_to_their_reader_to_check() -> None:
    """A fetch answer decodes with a damaged batch in it (its reader, the client, checks
    each batch and names the bad one, ``RecordBatch.check_crc``); the batch keeps the
    bytes it came with, so re-encoding it sends the damage on, never a fresh CRC."""
    good, bad = _batch(b"abcdef", 0), _batch(b"ghijkl", 1)
    raw = bytearray(codec.encode(FetchResponse([good, bad], 2, 2, 0, 2)))
    at = bytes(raw).index(b"ghijkl")
    raw[at + 2] ^= 0xFF
    resp = codec.decode(bytes(raw), FetchResponse)
    first, damaged = resp.batches
    first.check_crc()
    assert bytes(damaged.payload) == b"gh" + bytes([ord("i") ^ 0xFF]) + b"jkl"
    with pytest.raises(
        ValueError, match=r"CRC mismatch in batch at base offset 1 \(offsets 1\.\.1\)"
    ):
        damaged.check_crc()
    assert codec.encode(resp) == bytes(raw)


def test_encode_rejects_wrong_field_type() -> None:
    with pytest.raises(CodecError, match=r"ProduceRequest\.partition: expected an int, got str"):
        codec.encode(ProduceRequest("t", "0", -1, []))  # type: ignore[arg-type]


def test_register_conflict() -> None:
    with pytest.raises(ValueError, match="type id 9001 is already SampleAppend"):
        codec.register(9001, Entry)


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_every_truncation_raises_codec_error(cut: int) -> None:
    raw = codec.encode(SAMPLE)
    cut = cut % len(raw)
    with pytest.raises(CodecError):
        codec.decode(raw[:cut])


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_mutated_bodies_decode_or_raise_codec_error(data: st.DataObject) -> None:
    raw = bytearray(codec.encode(SAMPLE))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    try:
        msg = codec.decode(bytes(raw))
    except CodecError:
        return
    # anything that decodes must re-encode to the same bytes
    assert codec.encode(msg) == bytes(raw)


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(max_size=200))
def test_random_bytes_decode_or_raise_codec_error(junk: bytes) -> None:
    try:
        msg = codec.decode(junk)
    except CodecError:
        return
    assert codec.encode(msg) == junk


@given(st.integers(-1, 2**31 - 1), st.integers(0, 5))
@settings(max_examples=200)
def test_leading_int_reads_a_messages_group_as_decode_does(group: int, n: int) -> None:
    from raftlog.raft.messages import AppendEntriesRequest, HeartbeatBatchRequest, VoteRequest

    batches = [RecordBatch.create(b"x" * (i + 1)).stamped(i, 1) for i in range(n)]
    for msg in (
        AppendEntriesRequest(group, 1, 2, 3, -1, 0, 0, False, batches),
        VoteRequest(group, 1, 2, 3, False, 0, 0, False),
    ):
        encoded = codec.encode(msg)
        assert codec.leading_int(encoded) == (type(msg), codec.decode(encoded).group)
    # its first field is an int, but not a group: the caller checks the type
    assert codec.leading_int(codec.encode(HeartbeatBatchRequest(4, 5, []))) == (
        HeartbeatBatchRequest,
        4,
    )


def test_leading_int_of_a_bad_frame_is_a_codec_error() -> None:
    from raftlog.raft.messages import VoteRequest

    with pytest.raises(CodecError, match="message truncated"):
        codec.leading_int(b"\x01\x00\x02")
    with pytest.raises(CodecError, match="unknown message type id 65535"):
        codec.leading_int(b"\xff\xff" + bytes(8))
    lo, _hi = codec.field_range(VoteRequest, "group")
    bad = bytearray(codec.encode(VoteRequest(1, 1, 2, 3, False, 0, 0, False)))
    bad[2:10] = (lo - 1).to_bytes(8, "little", signed=True)
    with pytest.raises(CodecError, match=r"VoteRequest\.group"):
        codec.leading_int(bytes(bad))
    with pytest.raises(CodecError, match=r"VoteRequest\.group"):
        codec.decode(bytes(bad))


def test_type_of_names_a_frames_type_without_decoding_it() -> None:
    from raftlog.raft.messages import VoteRequest
    from raftlog.rpc.messages import ErrorCode, ErrorResponse

    encoded = codec.encode(ErrorResponse(ErrorCode.NOT_LEADER, "not the leader"))
    assert codec.type_of(encoded) is ErrorResponse
    # the body is not read: a frame cut after its type id still has a type
    vote = codec.encode(VoteRequest(1, 1, 2, 3, False, 0, 0, False))
    assert codec.type_of(memoryview(vote)[:2]) is VoteRequest
    with pytest.raises(CodecError, match="message truncated: 1 bytes"):
        codec.type_of(b"\x01")
    with pytest.raises(CodecError, match="unknown message type id 65535"):
        codec.type_of(b"\xff\xff")


def test_every_error_code_has_a_status_and_only_internal_is_the_servers_fault() -> None:
    """A refused request (a bad field, a replication factor above the nodes) is the
    client's: 4xx, or 5xx for the cluster's own state; never the 500 of a bug."""
    from raftlog.rpc.messages import ErrorCode
    from raftlog.rpc.server import STATUS

    for code in ErrorCode:
        if code is not ErrorCode.NONE:
            assert code in STATUS, code
            assert (STATUS[code] == 500) == (code is ErrorCode.INTERNAL), (code, STATUS[code])


def test_a_forwarded_answer_gets_its_error_codes_http_status() -> None:
    from raftlog.rpc.messages import ErrorCode, ErrorResponse, ProduceResponse
    from raftlog.rpc.server import STATUS, status_of_answer

    for code in (ErrorCode.NOT_LEADER, ErrorCode.INVALID_REQUEST, ErrorCode.INTERNAL):
        answer = codec.encode(ErrorResponse(code, "why"))
        assert status_of_answer(answer) == STATUS[code]
    assert STATUS[ErrorCode.NOT_LEADER] != 200
    ok = codec.encode(ProduceResponse(base_offset=5, last_offset=9))
    assert status_of_answer(ok) == 200
    # an answer that is not a frame is the shard's fault, not a success
    assert status_of_answer(b"\xff\xff") == 500
    assert status_of_answer(codec.encode(ErrorResponse(ErrorCode.INTERNAL, "x"))[:5]) == 500
