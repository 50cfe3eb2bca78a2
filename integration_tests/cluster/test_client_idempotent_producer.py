"""The client's IdempotentProducer on a real 3-node cluster: kill -9 the partition leader
while 500 sends are outstanding 5 at a time; every send is acknowledged and the log holds
each value exactly once, in sequence order."""

from __future__ import annotations

import asyncio
import signal

from raftlog.client import BlockingRaftlogClient, RaftlogClient, unframe_records

SENDS = 500
KILL_AFTER = 150  # acknowledged sends before the leader is killed


async def _leader(client: RaftlogClient, topic: str, exclude: int = -1) -> int:
    for _ in range(300):  # bounded: 30 s
        meta = await client.describe_topic(topic)
        leader = meta.partitions[0].leader
        if leader > 0 and leader != exclude:
            return leader
        await asyncio.sleep(0.1)
    raise AssertionError(f"{topic}/0 has no leader other than {exclude}")


async def _read_all(client: RaftlogClient, topic: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    offset = 0
    _, hwm, _ = await client.list_offsets(topic, 0)
    for _ in range(10_000):  # bounded
        if offset >= hwm:
            break
        f = await client.fetch(topic, 0, offset)
        for b in f.batches:
            vals = unframe_records(b.payload, b.record_count)
            assert vals is not None, f"batch at {b.base_offset} is not framed records"
            out += [(b.base_offset + i, v.decode()) for i, v in enumerate(vals)]
        offset = f.next_offset
    return out


async def test_idempotent_producer_through_a_leader_kill_is_exactly_once(fresh_cluster) -> None:
    topic = "idem-kill"
    async with RaftlogClient(fresh_cluster.servers, request_timeout_s=30.0) as client:
        await client.create_topic(topic, partitions=1, replication_factor=3)
        victim = await _leader(client, topic)
        producer = await client.idempotent_producer(topic, 0, producer_id=77, max_in_flight=5)
        window = asyncio.Semaphore(5)  # 5 sends outstanding at a time
        results: list[asyncio.Future] = []
        acked = 0
        killed = False

        def on_done(_f: asyncio.Future) -> None:
            nonlocal acked
            acked += 1
            window.release()

        for i in range(SENDS):
            await window.acquire()
            if not killed and acked >= KILL_AFTER:
                fresh_cluster.kill(victim, signal.SIGKILL)
                killed = True
            fut = producer.send([f"v{i:04d}".encode()])
            fut.add_done_callback(on_done)
            results.append(fut)
        await producer.flush()
        assert killed
        offsets = [f.result() for f in results]  # raises if any send failed
        print(
            f"sends {producer.sends} (resends {producer.sends - SENDS}), retries {producer.retries}"
        )
        await producer.close()
        assert await _leader(client, topic, exclude=victim) != victim

        log = await _read_all(client, topic)
        values = [v for _, v in log]
        assert values == [f"v{i:04d}" for i in range(SENDS)], (
            "not exactly once in order: "
            f"{len(values)} values, {len(set(values))} distinct, first bad at "
            f"{next((i for i, v in enumerate(values) if v != f'v{i:04d}'), None)}"
        )
        by_value = {v: off for off, v in log}
        for i, r in enumerate(offsets):
            assert r.base_offset == by_value[f"v{i:04d}"], f"send {i}: wrong offset {r}"


def test_blocking_idempotent_producer_writes_in_order(raftlog_cluster) -> None:
    topic = "idem-blocking"
    with BlockingRaftlogClient(raftlog_cluster.servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=1, replication_factor=3)
        with client.idempotent_producer(topic, 0, producer_id=78) as producer:
            futures = [producer.send([f"b{i}".encode()]) for i in range(50)]
            producer.flush()
            offsets = [f.result(timeout=30).base_offset for f in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == 50
        got = []
        offset = 0
        for _ in range(100):  # bounded
            f = client.fetch(topic, 0, offset)
            for b in f.batches:
                got += [v.decode() for v in unframe_records(b.payload, b.record_count) or []]
            offset = f.next_offset
            if offset >= f.high_watermark:
                break
        assert got == [f"b{i}" for i in range(50)]
