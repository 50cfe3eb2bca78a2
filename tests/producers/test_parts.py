"""The small pieces: serial arithmetic, markers, the aborted index, producer locks."""

from __future__ import annotations

import asyncio
import struct

import pytest

from raftlog.producers.aborted_index import AbortedIndex
from raftlog.producers.markers import (
    REASON_END_TXN,
    MarkerPayload,
    check_transaction_timeout,
    decode_fence_payload,
    decode_marker,
    decode_marker_payload,
    encode_marker_payload,
    make_fence,
    make_marker,
)
from raftlog.producers.producer_locks import ProducerLocks
from raftlog.producers.serial import (
    EPOCH_MODULUS,
    NO_EPOCH,
    epoch_compare,
    last_sequence_of,
    next_epoch,
    sequence_ahead,
)
from raftlog.storage.batch import BatchKind


def test_epochs_wrap_and_compare_serially() -> None:
    assert next_epoch(NO_EPOCH) == 0
    assert next_epoch(EPOCH_MODULUS - 1) == 0
    assert epoch_compare(0, EPOCH_MODULUS - 1) == 1  # 0 follows the last epoch
    assert epoch_compare(EPOCH_MODULUS - 1, 0) == -1
    assert epoch_compare(5, NO_EPOCH) == 1 and epoch_compare(NO_EPOCH, 5) == -1
    assert epoch_compare(7, 7) == 0


def test_sequence_distance_wraps() -> None:
    assert last_sequence_of(2**31 - 1, 3) == 1
    assert sequence_ahead(1, 2**31 - 1) == 2
    assert sequence_ahead(2**31 - 1, 1) == -2


def test_marker_payload_round_trips_and_rejects_bad_input() -> None:
    assert decode_marker_payload(encode_marker_payload(123)) == 123
    marker = make_marker(1, 2, commit=True, version=9, timestamp_ms=0)
    assert (marker.kind, marker.is_transactional, marker.producer_epoch) == (
        BatchKind.TX_COMMIT,
        True,
        2,
    )
    with pytest.raises(ValueError, match="must be 9 or 24 bytes, got 2"):
        decode_marker_payload(b"ab")
    with pytest.raises(ValueError, match="format must be 0 or 1, got 7"):
        decode_marker_payload(b"\x07" + bytes(8))
    with pytest.raises(ValueError, match="version must be an int"):
        encode_marker_payload(-2)
    # format 0 (written before record counts) still decodes, unchecked
    assert decode_marker(struct.pack("<Bq", 0, 5)) == MarkerPayload(5)
    full = make_marker(
        1,
        3,
        commit=False,
        record_count=7,
        last_sequence=2**31 - 1,
        requested_epoch=2,
        reason=REASON_END_TXN,
        timestamp_ms=0,
    )
    assert decode_marker(full.payload) == MarkerPayload(-1, 7, 2**31 - 1, 2, REASON_END_TXN)
    with pytest.raises(ValueError, match="record_count must be an int in \\[-1"):
        make_marker(1, 0, commit=True, record_count=-2, timestamp_ms=0)
    with pytest.raises(ValueError, match="last_sequence must be an int in \\[-1, 2147483647\\]"):
        make_marker(1, 0, commit=True, last_sequence=2**31, timestamp_ms=0)


def test_fence_payload_carries_the_session_transaction_timeout() -> None:
    assert decode_fence_payload(make_fence(1, 0, timestamp_ms=0).payload) == -1
    fence = make_fence(1, 0, timestamp_ms=0, transaction_timeout_ms=500)
    assert decode_fence_payload(fence.payload) == 500
    assert decode_fence_payload(b"") == -1  # fences written before timeouts
    with pytest.raises(ValueError, match="fence payload must be 0 or 9 bytes, got 3"):
        decode_fence_payload(b"abc")
    with pytest.raises(ValueError, match="transaction_timeout_ms must be an int in \\[1, 900\\]"):
        check_transaction_timeout(901, 900)
    assert check_transaction_timeout(-1, 900) == -1


def test_aborted_index_lookup_and_prefix_truncate() -> None:
    index = AbortedIndex()
    index.add(1, 10, 20)
    index.add(1, 30, 40)
    index.add(2, 15, 16)
    assert [index.is_aborted(1, o) for o in (9, 10, 20, 21, 35, 41)] == [
        False,
        True,
        True,
        False,
        True,
        False,
    ]
    assert index.is_aborted(2, 16) and not index.is_aborted(3, 16)
    index.prefix_truncate(21)
    assert list(index.entries()) == [(1, 30, 40)]
    with pytest.raises(ValueError, match="overlaps or precedes"):
        index.add(1, 35, 50)
    with pytest.raises(ValueError, match="before first_offset"):
        index.add(1, 60, 50)


async def test_producer_locks_serialize_one_producer_and_are_dropped_when_unused() -> None:
    locks = ProducerLocks()
    order: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold(1):
            order.append("a in")
            await release.wait()
            order.append("a out")

    async def waiter() -> None:
        async with locks.hold(1):
            order.append("b in")

    a = asyncio.create_task(holder())
    await asyncio.sleep(0)
    b = asyncio.create_task(waiter())
    async with locks.hold(2):  # another producer is not blocked
        order.append("other")
    release.set()
    await asyncio.gather(a, b)
    assert order == ["a in", "other", "a out", "b in"]
    assert len(locks) == 0


async def test_producer_lock_of_a_cancelled_waiter_is_dropped() -> None:
    locks = ProducerLocks()
    entered = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold(1):
            entered.set()
            await release.wait()

    a = asyncio.create_task(holder())
    await entered.wait()

    async def waiter() -> None:
        async with locks.hold(1):
            raise AssertionError("a cancelled waiter must not get the lock")

    b = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b
    assert len(locks) == 1  # the holder still holds it
    release.set()
    await a
    assert len(locks) == 0
    async with locks.hold(1):  # and it can be taken again
        assert len(locks) == 1
