"""The client-side sequencer: unit behaviour, and end to end through leader changes."""

from __future__ import annotations

import asyncio
import random

import pytest

from raftlog.errors import DuplicateSequenceError, OutOfOrderSequenceError, RaftlogError
from raftlog.producers.rm_stm import RmStm
from raftlog.producers.sequencer import Send, Sequencer, SequencerError
from raftlog.producers.serial import SEQUENCE_MODULUS
from raftlog.raft.errors import RaftError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.storage.batch import BatchKind, RecordBatch
from tests.producers.fake_consensus import FakeConsensus


def drain(seq: Sequencer) -> list[Send]:
    out = []
    for _ in range(100):
        send = seq.next_to_send()
        if send is None:
            return out
        out.append(send)
    raise AssertionError("next_to_send never ran dry")


def test_assigns_consecutive_sequences_and_caps_in_flight_at_five() -> None:
    seq = Sequencer(7, 0)
    firsts = [seq.add(n) for n in (1, 2, 3, 1, 1, 4)]
    assert firsts == [0, 1, 3, 6, 7, 8]
    sent = drain(seq)
    assert [s.first_sequence for s in sent] == [0, 1, 3, 6, 7]
    assert seq.in_flight == 5
    seq.on_success(0, sent[0].attempt, 100)
    assert [s.first_sequence for s in drain(seq)] == [8]


def test_retriable_failure_resends_it_and_everything_after_in_order() -> None:
    seq = Sequencer(7, 0)
    for _ in range(4):
        seq.add(1)
    sent = drain(seq)
    seq.on_success(0, sent[0].attempt, 10)
    seq.on_retriable(1, sent[1].attempt)
    resent = drain(seq)
    assert [s.first_sequence for s in resent] == [1, 2, 3]
    assert all(r.attempt > s.attempt for r, s in zip(resent, sent[1:], strict=True))
    # answers to the abandoned attempts are ignored (a failure), or taken (a success)
    seq.on_retriable(2, sent[2].attempt)
    assert seq.in_flight == 3
    seq.on_success(3, sent[3].attempt, 13)
    assert seq.unacknowledged == 3  # 1 and 2 still unacknowledged, 3 acked out of order
    seq.on_success(1, resent[0].attempt, 11)
    seq.on_success(2, resent[1].attempt, None)  # an older duplicate counts as written
    assert seq.idle


def test_out_of_order_rewinds_unless_it_is_the_oldest_batch() -> None:
    seq = Sequencer(7, 3)
    seq.add(1)
    seq.add(1)
    sent = drain(seq)
    seq.on_out_of_order(1, sent[1].attempt)
    assert seq.in_flight == 1
    with pytest.raises(SequencerError, match="oldest unacknowledged batch"):
        seq.on_out_of_order(0, sent[0].attempt)


def test_reset_requires_no_unacknowledged_batches_and_restarts_at_zero() -> None:
    seq = Sequencer(7, 0)
    seq.add(3)
    with pytest.raises(SequencerError, match="1 batches are unacknowledged"):
        seq.reset(1)
    (send,) = drain(seq)
    seq.on_success(0, send.attempt, 0)
    seq.reset(1)
    assert (seq.epoch, seq.next_sequence, seq.add(1)) == (1, 0, 0)


def test_sequences_wrap_and_bad_arguments_are_named() -> None:
    seq = Sequencer(7, 0, first_sequence=SEQUENCE_MODULUS - 1)
    assert [seq.add(1), seq.add(1)] == [SEQUENCE_MODULUS - 1, 0]
    with pytest.raises(ValueError, match="max_in_flight"):
        Sequencer(7, 0, max_in_flight=6)
    with pytest.raises(ValueError, match="producer_epoch"):
        Sequencer(7, -1)
    with pytest.raises(ValueError, match="record_count"):
        seq.add(0)


async def _settle() -> None:
    for _ in range(8):  # bounded: lets tasks run to their next await
        await asyncio.sleep(0)


@pytest.mark.parametrize("seed", range(8))
async def test_no_duplicates_and_no_gaps_through_leader_changes(seed: int) -> None:
    rng = random.Random(seed)
    c = FakeConsensus()
    stm = RmStm(c)
    # a session starts with a committed fence, so every later leader knows the producer
    session = await stm.init_producer(5)
    c.auto_commit = False
    seq = Sequencer(5, session.epoch)
    for _ in range(25):
        seq.add(rng.randint(1, 3))
    pending: list[tuple[Send, asyncio.Task]] = []
    for _ in range(500):  # bounded; each step makes progress with high probability
        if seq.idle:
            break
        while (send := seq.next_to_send()) is not None:
            batch = RecordBatch.create(
                b"r",
                send.record_count,
                producer_id=send.producer_id,
                producer_epoch=send.epoch,
                first_sequence=send.first_sequence,
            )
            task = asyncio.create_task(stm.replicate(batch, Consistency.QUORUM_ACK))
            pending.append((send, task))
        await _settle()
        roll = rng.random()
        if roll < 0.7:
            c.commit()
        elif roll < 0.85 or not c.is_leader:
            c.new_term(keep_uncommitted=rng.random() < 0.5)
        await _settle()
        still = []
        for send, task in pending:
            if not task.done():
                still.append((send, task))
                continue
            try:
                res = task.result()
            except DuplicateSequenceError:
                seq.on_success(send.first_sequence, send.attempt, None)
            except OutOfOrderSequenceError:
                seq.on_out_of_order(send.first_sequence, send.attempt)
            except (RaftlogError, RaftError):
                seq.on_retriable(send.first_sequence, send.attempt)
            else:
                seq.on_success(send.first_sequence, send.attempt, res.base_offset)
        pending = still
    assert seq.idle
    c.commit()
    for _, task in pending:
        task.cancel()
    written = [
        (b.first_sequence, b.record_count)
        for b in c.log[: c.commit_index + 1]
        if b.kind is BatchKind.DATA and b.producer_id == 5
    ]
    expected_next = 0
    for first, count in written:
        assert first == expected_next, f"gap or duplicate at sequence {first}"
        expected_next = first + count
    assert expected_next == seq.next_sequence


def test_window_counts_from_the_oldest_unacknowledged_batch() -> None:
    # Batches acknowledged behind an unacknowledged one still occupy the window.
    seq = Sequencer(7, 0)
    for _ in range(8):
        seq.add(1)
    sent = drain(seq)
    assert [s.first_sequence for s in sent] == [0, 1, 2, 3, 4]
    seq.on_retriable(0, sent[0].attempt)  # rewinds 0..4
    for s in sent[1:]:
        seq.on_success(s.first_sequence, s.attempt, 10 + s.first_sequence)
    assert seq.unacknowledged == 8
    assert [s.first_sequence for s in drain(seq)] == [0]  # not 5, 6, 7 too
    assert seq.in_flight == 1
    with_window_1 = Sequencer(7, 0, max_in_flight=1)
    for _ in range(3):
        with_window_1.add(1)
    (only,) = drain(with_window_1)
    with_window_1.on_retriable(0, only.attempt)
    assert [s.first_sequence for s in drain(with_window_1)] == [0]


async def test_resent_oldest_batch_gets_its_original_offset_when_it_lands_last() -> None:
    """The nemesis failure: batch 0 is written but its answer is lost; batches 1..4 are
    acknowledged. Whatever else the sequencer hands out next may land before the resend of 0
    (separate connections); the resend of 0 must still find 0 among rm_stm's last 5 batches and get
    its offset, not an offset-less DUPLICATE_SEQUENCE."""
    c = FakeConsensus()
    stm = RmStm(c)
    session = await stm.init_producer(5)
    seq = Sequencer(5, session.epoch)
    for _ in range(10):
        seq.add(1)

    def batch(send: Send) -> RecordBatch:
        return RecordBatch.create(
            b"r",
            send.record_count,
            producer_id=send.producer_id,
            producer_epoch=send.epoch,
            first_sequence=send.first_sequence,
        )

    first = drain(seq)
    offsets = {}
    for send in first:
        offsets[send.first_sequence] = (
            await stm.replicate(batch(send), Consistency.QUORUM_ACK)
        ).base_offset
    seq.on_retriable(0, first[0].attempt)  # the answer for 0 was lost (a timeout)
    for send in first[1:]:
        seq.on_success(send.first_sequence, send.attempt, offsets[send.first_sequence])
    resent = drain(seq)
    # the resend of 0 is slow: every other send handed out now lands before it
    results = {}
    for send in resent[1:] + resent[:1]:
        try:
            res = await stm.replicate(batch(send), Consistency.QUORUM_ACK)
        except DuplicateSequenceError as exc:
            raise AssertionError(f"sequence {send.first_sequence} lost its offset: {exc}") from exc
        results[send.first_sequence] = res.base_offset
        seq.on_success(send.first_sequence, send.attempt, res.base_offset)
    assert results[0] == offsets[0]
    assert seq.unacknowledged == 5
    rest = drain(seq)
    assert [s.first_sequence for s in rest] == [5, 6, 7, 8, 9]
