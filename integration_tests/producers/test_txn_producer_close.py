"""``IdempotentProducer.close()`` with requests in flight must return (it hung: a bug).

Found by test_txn_leader_kills.py: a session abandoned mid-transaction
(``close(flush=False)`` while sends are in flight) sometimes never returned.
The sender task (``raftlog/client/producer.py``, ``IdempotentProducer._run``)
loops ``while self._fatal is None`` and relies on ``close()`` cancelling it;
close cancels the sender and then the attempts, whose ``finally`` sets
``_wake``. On Python 3.11 ``asyncio.wait_for(self._wake.wait(), ...)`` returns
the result instead of raising when its inner wait completes in the same step
as the cancellation, so the sender swallows the cancel, loops, finds nothing
pending and waits on ``self._wake.wait()`` forever; ``close()`` waits on it.
"""

from __future__ import annotations

import asyncio

from raftlog.client import RaftlogClient

TOPIC = "txn-close"
ROUNDS = 20


async def test_txn_close_with_requests_in_flight_returns(raftlog_cluster) -> None:
    async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=10.0) as client:
        await client.create_topic(TOPIC, partitions=1, replication_factor=3)
        hung = 0
        for r in range(ROUNDS):
            prod = await client.idempotent_producer(
                TOPIC, 0, producer_id=900, max_in_flight=5, transactional=True
            )
            for i in range(10):
                prod.send([f"r{r}-{i}".encode()])
            await asyncio.sleep(0.002 * (r % 5))  # some requests on the wire
            close = asyncio.ensure_future(prod.close(flush=False))
            done, _ = await asyncio.wait([close], timeout=5.0)
            if not done:
                hung += 1
                close.cancel()  # a second cancellation ends the sender
                await asyncio.gather(close, return_exceptions=True)
        assert hung == 0, f"close(flush=False) hung in {hung} of {ROUNDS} rounds"
