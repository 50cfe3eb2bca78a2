"""raftlog workloads through its client: small requests, large batches, idempotent producers.

All of them run on :func:`run_closed_loop`, so raftlog's figures and etcd's
come from the same measuring code.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from benchmarks.workloads.closed_loop import LoadResult, run_closed_loop
from benchmarks.workloads.raftlog_local import ClientPool

OUT_OF_ORDER_RETRIES = 20
"""An idempotent send that overtook its predecessor waits for it and is sent again;
bounded so that a real gap fails the run instead of looping."""


async def small_load(
    servers: list[str], topic: str, clients: int, duration_s: float, max_requests: int
) -> LoadResult:
    """One 100-byte record per request to partition 0 at acks=all, ``clients`` at once."""
    payload = os.urandom(100)
    pool = ClientPool(servers, clients)
    try:

        async def produce(worker: int, _n: int) -> None:
            await pool.for_worker(worker).produce(topic, 0, [(payload, 1)], acks="all")

        return await run_closed_loop(produce, clients, duration_s, max_requests)
    finally:
        await pool.close()


async def batched_load(
    servers: list[str],
    topic: str,
    partitions: int,
    batch: tuple[bytes, int],
    acks: str,
    in_flight: int,
    duration_s: float,
    max_requests: int,
) -> LoadResult:
    """Large batches (``batch`` = (payload, record count), one per request) to every
    partition, ``in_flight`` requests outstanding per partition."""
    workers = partitions * in_flight
    pool = ClientPool(servers, workers)
    try:

        async def produce(worker: int, _n: int) -> None:
            client = pool.for_worker(worker)
            await client.produce(topic, worker % partitions, [batch], acks=acks)

        return await run_closed_loop(produce, workers, duration_s, max_requests)
    finally:
        await pool.close()


class IdempotentProducer:
    """One idempotent producer on one partition with up to ``in_flight`` requests out.

    Sequences are assigned in send order. Concurrent requests can overtake each
    other on their way to the leader; rm_stm rejects the one that arrives early
    (out of order sequence), and it is sent again once its predecessor is
    answered, as the connector's transactional writer does.
    """

    def __init__(
        self, client: Any, topic: str, partition: int, producer_id: int, in_flight: int
    ) -> None:
        self.client, self.topic, self.partition = client, topic, partition
        self.producer_id = producer_id
        self.epoch = -1
        self.next_seq = 0
        self.slots = asyncio.Semaphore(in_flight)
        self.last: asyncio.Future[None] | None = None
        self.resends = 0
        """Sends repeated because they overtook their predecessor (out of order sequence)."""

    async def init(self) -> None:
        session = await self.client.init_producer(self.topic, self.partition, self.producer_id)
        self.epoch = session.epoch

    async def send(self, batch: tuple[bytes, int]) -> None:
        """Send one batch; returns once it is acknowledged."""
        from raftlog.client import OutOfOrderSequenceError

        async with self.slots:
            seq, before = self.next_seq, self.last
            self.next_seq += batch[1]
            mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.last = mine
            try:
                for attempt in range(OUT_OF_ORDER_RETRIES + 1):
                    try:
                        await self.client.produce(
                            self.topic,
                            self.partition,
                            [batch],
                            acks="all",
                            producer_id=self.producer_id,
                            producer_epoch=self.epoch,
                            first_sequence=seq,
                        )
                        break
                    except OutOfOrderSequenceError:
                        if attempt == OUT_OF_ORDER_RETRIES or before is None:
                            raise
                        self.resends += 1
                        await asyncio.wait([before])  # overtook its predecessor
            finally:
                mine.set_result(None)


async def producers_load(
    servers: list[str],
    topic: str,
    producers: int,
    in_flight: int,
    batch: tuple[bytes, int],
    idempotent: bool,
    duration_s: float,
    max_requests: int,
    first_producer_id: int,
) -> LoadResult:
    """``producers`` producers on partition 0, each ``in_flight`` requests at once,
    plain or idempotent; one closed-loop worker per in-flight slot."""
    pool = ClientPool(servers, producers * in_flight)
    try:
        sessions: list[IdempotentProducer] = []
        if idempotent:
            for i in range(producers):
                client = pool.for_worker(i * in_flight)
                p = IdempotentProducer(client, topic, 0, first_producer_id + i, in_flight)
                await p.init()
                sessions.append(p)

        async def produce(worker: int, _n: int) -> None:
            if idempotent:
                await sessions[worker // in_flight].send(batch)
            else:
                await pool.for_worker(worker).produce(topic, 0, [batch], acks="all")

        result = await run_closed_loop(produce, producers * in_flight, duration_s, max_requests)
        result.resends = sum(p.resends for p in sessions)
        return result
    finally:
        await pool.close()
