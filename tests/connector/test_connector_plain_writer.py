"""The at-least-once task write (``deliveryGuarantee`` at-least-once): pipelined plain
produces, bounded in flight, counted. The exactly-once path is the two-phase commit of
raftlog.client.transactions, tested against a real cluster in
integration_tests/producers/test_two_phase_commit.py."""

from __future__ import annotations

import asyncio

import pytest
from pyspark_raftlog.txn_writer import write_plain

from raftlog.client import ProduceResult


class FakePartition:
    """One partition that appends plain batches, yielding so that requests overlap."""

    def __init__(self, *, fail_after: int | None = None) -> None:
        self.next_offset = 0
        self.payloads: list[bytes] = []
        self.in_flight = self.max_in_flight = self.produces = 0
        self.fail_after = fail_after

    async def produce(self, topic, partition, records, acks="all", **kw):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.produces += 1
            for _ in range(3):
                await asyncio.sleep(0)
            if self.fail_after is not None and self.produces > self.fail_after:
                raise ConnectionError("task died")
            ((payload, count),) = records
            base = self.next_offset
            self.next_offset += count
            self.payloads.append(payload)
            return ProduceResult(base, base + count - 1)
        finally:
            self.in_flight -= 1


def chunks(values: list[int]) -> list[tuple[bytes, int]]:
    return [(str(v).encode(), 1) for v in values]


def test_plain_write_is_pipelined_and_counts() -> None:
    fake = FakePartition()
    res = asyncio.run(
        write_plain(fake, topic="t", partition=1, chunks=chunks(list(range(7))), max_in_flight=3)
    )
    assert sorted(int(p) for p in fake.payloads) == list(range(7))
    assert (res.records, res.base_offset, res.last_offset) == (7, 0, 6)
    assert fake.max_in_flight == 3


def test_plain_write_failure_cancels_the_window_and_raises() -> None:
    fake = FakePartition(fail_after=4)
    with pytest.raises(ConnectionError, match="task died"):
        asyncio.run(write_plain(fake, topic="t", partition=1, chunks=chunks(list(range(20)))))
    assert fake.in_flight == 0
