"""Every int field of every wire message is range-checked when decoded."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

import pytest

import raftlog.controller.commands
import raftlog.rpc.messages
import raftlog.rpc.peer
from raftlog.raft.messages import AppendEntriesRequest
from raftlog.rpc import codec
from raftlog.rpc.messages import ProduceBatch, ProduceRequest
from raftlog.storage.batch import RecordBatch


def _valid(tp: Any, lo_hi: tuple[int, int]) -> Any:
    """A small valid value of type ``tp`` (ints inside ``lo_hi``)."""
    if tp is int:
        return max(lo_hi[0], min(0, lo_hi[1])) if lo_hi[0] > 0 or lo_hi[1] < 0 else 0
    if tp is bool:
        return False
    if tp is float:
        return 0.0
    if tp is str:
        return "t"
    if tp is bytes or tp == bytes | memoryview:
        return b"x"
    if tp is RecordBatch:
        return RecordBatch.create(b"x", 1, timestamp_ms=0).stamped(0, 1)
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return next(iter(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _instance(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return [_valid(args[0], lo_hi)]
    return None  # an optional


def _instance(cls: type, **override: Any) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {
        f.name: _valid(hints[f.name], codec.field_range(cls, f.name))
        for f in dataclasses.fields(cls)
        if f.init
    }
    kwargs.update(override)
    return cls(**kwargs)


def _int_fields() -> list[tuple[type, str, bool]]:
    out = []
    for _, cls in sorted(codec.registered_types().items()):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if tp is int:
                out.append((cls, f.name, False))
            elif typing.get_origin(tp) is list and typing.get_args(tp) == (int,):
                out.append((cls, f.name, True))
    return out


INT_FIELDS = _int_fields()


def test_every_registered_message_has_int_fields_to_check() -> None:
    assert len(INT_FIELDS) > 60
    assert raftlog.rpc.messages.ProduceRequest in {c for c, _, _ in INT_FIELDS}


@pytest.mark.parametrize(
    ("cls", "name", "is_list"), INT_FIELDS, ids=[f"{c.__name__}.{n}" for c, n, _ in INT_FIELDS]
)
def test_out_of_range_int_is_refused_naming_field_and_range(
    cls: type, name: str, is_list: bool
) -> None:
    lo, hi = codec.field_range(cls, name)
    good = _instance(cls)
    assert codec.decode(codec.encode(good)) == good
    for bad in (lo - 1, hi + 1):
        if not -(1 << 63) <= bad <= codec.I64_MAX:
            continue  # int64 cannot even carry it: encode refuses
        msg = _instance(cls, **{name: [bad] if is_list else bad})
        with pytest.raises(codec.CodecError) as err:
            codec.decode(codec.encode(msg))
        text = str(err.value)
        assert f"{cls.__name__}.{name}" in text and f"allowed {lo}..{hi}" in text, text


@pytest.mark.parametrize(
    ("override", "field", "allowed"),
    [
        ({"batches": [ProduceBatch(b"x", 1 << 31)]}, "batches[0].record_count", "1..2147483647"),
        ({"first_sequence": -5}, "first_sequence", "-1..2147483647"),
        ({"producer_epoch": 1 << 15}, "producer_epoch", "-1..32767"),
        ({"acks": 2}, "acks", "-1..1"),
        ({"partition": -2}, "partition", "-1..2147483647"),
    ],
)
def test_bad_produce_fields(override: dict[str, Any], field: str, allowed: str) -> None:
    req = ProduceRequest("t", 0, -1, [ProduceBatch(b"x", 1)])
    body = codec.encode(dataclasses.replace(req, **override))
    with pytest.raises(codec.CodecError) as err:
        codec.decode(body)
    assert f"ProduceRequest.{field}: " in str(err.value)
    assert str(err.value).endswith(f"allowed {allowed}")


def test_values_past_int64_cannot_even_be_encoded() -> None:
    """A timestamp, offset or id past 2^63 never reaches a decoder: int64 cannot carry it."""
    req = ProduceRequest("t", 0, -1, [ProduceBatch(b"x", 1)], producer_id=1 << 63)
    expected = r"ProduceRequest\.producer_id: 9223372036854775808 does not fit in int64"
    with pytest.raises(codec.CodecError, match=expected):
        codec.encode(req)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("producer_epoch", -2, "-1..32767"),
        ("first_sequence", -7, "-1..2147483647"),
        ("term", -3, f"-1..{codec.I64_MAX}"),
        ("timestamp_ms", -9, f"-1..{codec.I64_MAX}"),
    ],
)
def test_batch_headers_inside_peer_messages_are_range_checked(
    field: str, value: int, allowed: str
) -> None:
    kwargs: dict[str, Any] = {"timestamp_ms": 0}
    if field != "term":
        kwargs[field] = value
    batch = RecordBatch.create(b"x", 1, **kwargs).stamped(5, value if field == "term" else 1)
    req = AppendEntriesRequest(1, 1, 2, 1, 4, 1, 0, True, [batch], seq=1)
    with pytest.raises(codec.CodecError) as err:
        codec.decode(codec.encode(req))
    assert f"AppendEntriesRequest.batches[0].{field}: {value} " in str(err.value)
    assert str(err.value).endswith(f"allowed {allowed}")


def test_last_offset_past_int64_is_refused() -> None:
    batch = RecordBatch.create(b"x", 10, timestamp_ms=0).stamped(codec.I64_MAX - 3, 1)
    req = AppendEntriesRequest(1, 1, 2, 1, 4, 1, 0, True, [batch], seq=1)
    with pytest.raises(codec.CodecError, match="record_count: 10 records"):
        codec.decode(codec.encode(req))


def test_field_metadata_overrides_the_name_rule() -> None:
    @dataclasses.dataclass(frozen=True)
    class Probe:
        record_count: int = dataclasses.field(metadata={"range": (0, 9)})

    assert codec.field_range(Probe, "record_count") == (0, 9)
    with pytest.raises(codec.CodecError, match=r"Probe\.record_count: 10 .* allowed 0\.\.9"):
        codec.decode_body(Probe, codec.encode_body(Probe(10)))
    assert codec.decode_body(Probe, codec.encode_body(Probe(0))) == Probe(0)
