"""The exactly-once task protocol (txn_writer) against an in-memory model of rm_stm.

The fake models what the protocol relies on: init_producer bumps the epoch and
aborts the open transaction; sequences count records and must follow without
gaps (an overtaking request gets OutOfOrderSequenceError); a commit marker
records the version; readers see committed data only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest
from pyspark_raftlog.txn_writer import producer_id_for, write_plain, write_transaction

from raftlog.client import FencedError, OutOfOrderSequenceError, ProduceResult, ProducerSession


@dataclasses.dataclass
class _Producer:
    epoch: int = -1
    next_seq: int = 0
    version: int = -1
    open_tx: list[tuple[int, bytes, int]] = dataclasses.field(default_factory=list)


class FakeRmStm:
    """One partition's log and producer table."""

    def __init__(self, *, fail_after: int | None = None, reorder: bool = False) -> None:
        self.next_offset = 0
        self.committed: list[bytes] = []  # payloads visible to read_committed readers
        self.producers: dict[int, _Producer] = {}
        self.fail_after = fail_after  # raise on the n-th produce (simulates a dying task)
        self.reorder = reorder
        self.produces = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.out_of_order_replies = 0

    async def init_producer(self, topic: str, partition: int, producer_id: int):
        p = self.producers.setdefault(producer_id, _Producer())
        p.open_tx.clear()  # the bump aborts the open transaction
        p.epoch += 1
        p.next_seq = 0
        return ProducerSession(producer_id, p.epoch, p.version)

    async def produce(
        self,
        topic,
        partition,
        records,
        acks="all",
        producer_id=-1,
        producer_epoch=-1,
        first_sequence=-1,
        transactional=False,
    ):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.produces += 1
            if self.fail_after is not None and self.produces > self.fail_after:
                raise ConnectionError("task died")
            if self.reorder:  # later sequences yield less, so they overtake earlier ones
                for _ in range(max(0, 8 - first_sequence % 8)):
                    await asyncio.sleep(0)
            ((payload, count),) = records
            base = self.next_offset
            if producer_id < 0:
                self.committed.append(payload)
            else:
                p = self.producers[producer_id]
                if producer_epoch != p.epoch:
                    raise FencedError("old epoch")
                if first_sequence != p.next_seq:
                    self.out_of_order_replies += 1
                    raise OutOfOrderSequenceError(f"expected {p.next_seq}, got {first_sequence}")
                p.next_seq += count
                p.open_tx.append((base, payload, count))
            self.next_offset += count
            return ProduceResult(base, base + count - 1)
        finally:
            self.in_flight -= 1

    async def end_transaction(
        self, topic, partition, producer_id, producer_epoch, commit, version=-1, acks="all"
    ):
        p = self.producers[producer_id]
        if producer_epoch != p.epoch:
            raise FencedError("old epoch")
        if commit:
            self.committed.extend(payload for _, payload, _ in p.open_tx)
            p.version = max(p.version, version)
        p.open_tx.clear()
        marker = self.next_offset
        self.next_offset += 1
        return marker


def chunks(values: list[int]) -> list[tuple[bytes, int]]:
    return [(str(v).encode(), 1) for v in values]


def run(coro):
    return asyncio.run(coro)


def test_producer_id_is_stable_and_positive() -> None:
    # A changed hash would break exactly-once for queries restarted across upgrades.
    assert producer_id_for("q", 0) == 2281987367106911770
    assert producer_id_for("q", 1) != producer_id_for("q", 0)
    assert all(0 < producer_id_for("query", i) < 2**63 for i in range(100))


def test_fresh_write_commits_with_version() -> None:
    fake = FakeRmStm()
    res = run(
        write_transaction(
            fake,
            topic="t",
            partition=2,
            producer_id=7,
            version=0,
            chunks=chunks(list(range(12))),
            max_in_flight=5,
        )
    )
    assert fake.committed == [str(i).encode() for i in range(12)]
    assert (res.topic_partition, res.records, res.base_offset, res.last_offset) == (2, 12, 0, 11)
    assert res.bytes == sum(len(str(i)) for i in range(12))
    assert res.commit_offset == 12 and not res.replayed
    assert fake.producers[7].version == 0
    assert fake.max_in_flight <= 5


def test_replayed_batch_writes_nothing() -> None:
    fake = FakeRmStm()
    run(
        write_transaction(
            fake, topic="t", partition=0, producer_id=7, version=3, chunks=chunks([1, 2])
        )
    )
    again = run(
        write_transaction(
            fake, topic="t", partition=0, producer_id=7, version=3, chunks=chunks([2, 1])
        )
    )
    older = run(
        write_transaction(
            fake, topic="t", partition=0, producer_id=7, version=1, chunks=chunks([9])
        )
    )
    assert again.replayed and older.replayed and again.records == 0
    assert fake.committed == [b"1", b"2"]


def test_failed_attempt_then_retry_in_another_order_lands_once() -> None:
    fake = FakeRmStm(fail_after=3)
    rows = list(range(10))
    with pytest.raises(ConnectionError, match="task died"):
        run(
            write_transaction(
                fake,
                topic="t",
                partition=0,
                producer_id=9,
                version=4,
                chunks=chunks(rows),
                max_in_flight=2,
            )
        )
    assert fake.committed == []  # nothing of the failed attempt is visible
    fake.fail_after = None
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    res = run(
        write_transaction(
            fake, topic="t", partition=0, producer_id=9, version=4, chunks=chunks(shuffled)
        )
    )
    assert sorted(int(p) for p in fake.committed) == rows
    assert res.records == 10


def test_overtaking_requests_are_resent_in_order() -> None:
    fake = FakeRmStm(reorder=True)
    run(
        write_transaction(
            fake,
            topic="t",
            partition=0,
            producer_id=1,
            version=0,
            chunks=chunks(list(range(20))),
            max_in_flight=5,
        )
    )
    assert fake.out_of_order_replies > 0  # the pipeline really was reordered
    assert fake.committed == [str(i).encode() for i in range(20)]


def test_max_in_flight_one_is_sequential() -> None:
    fake = FakeRmStm(reorder=True)
    run(
        write_transaction(
            fake,
            topic="t",
            partition=0,
            producer_id=1,
            version=0,
            chunks=chunks(list(range(6))),
            max_in_flight=1,
        )
    )
    assert fake.max_in_flight == 1 and fake.out_of_order_replies == 0


def test_empty_task_contacts_nobody() -> None:
    fake = FakeRmStm()
    res = run(write_transaction(fake, topic="t", partition=5, producer_id=1, version=0, chunks=[]))
    assert res.records == 0 and res.base_offset == -1 and fake.producers == {}


def test_plain_write_is_pipelined_and_counts() -> None:
    fake = FakeRmStm()
    res = run(
        write_plain(fake, topic="t", partition=1, chunks=chunks(list(range(7))), max_in_flight=3)
    )
    assert sorted(int(p) for p in fake.committed) == list(range(7))
    assert (res.records, res.base_offset, res.last_offset) == (7, 0, 6)
    assert fake.max_in_flight <= 3
