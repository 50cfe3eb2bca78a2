"""The two-phase commit of raftlog.client.transactions against a real 3-node cluster.

What the Spark sink relies on, driven without Spark so each race is exact:
zombie and speculative attempts that keep writing around the decision, a driver
that dies between the decision and the markers, replays, and readers that take
a consistent cut while a decision's markers are half written.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from raftlog.client import FencedError, RaftlogClient, unframe_records
from raftlog.client.coordinator import CoordinatorClient
from raftlog.client.framing import frame_records
from raftlog.client.transactions import (
    TxnAbortedError,
    TxnKey,
    TxnRefusedError,
    abort_run,
    committed_cut,
    decide,
    prepare,
    producer_id_for,
    roll_forward,
)

ROUNDS = 5


def chunks(values: list[int], per_chunk: int = 10) -> list[tuple[bytes, int]]:
    out = []
    for i in range(0, len(values), per_chunk):
        part = values[i : i + per_chunk]
        out.append((frame_records([str(v).encode() for v in part]), len(part)))
    return out


async def read_all(
    client: RaftlogClient, topic: str, ends: dict[int, int] | None = None
) -> list[int]:
    """Every committed value of ``topic`` below ``ends`` (default: each partition's LSO)."""
    meta = await client.describe_topic(topic)
    values = []
    for p in meta.partitions:
        end = (
            (await client.list_offsets(topic, p.partition))[2]
            if ends is None
            else ends[p.partition]
        )
        offset = 0
        for _ in range(10_000):
            if offset >= end:
                break
            r = await client.fetch(topic, p.partition, offset, max_bytes=1 << 20)
            for b in r.batches:
                if b.base_offset >= end:
                    break
                values += [int(v) for v in unframe_records(b.payload, b.record_count)]
            if r.next_offset <= offset:
                break
            offset = r.next_offset
    return values


@pytest.fixture
async def env(raftlog_cluster):
    async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=20.0) as client:
        topic = f"tpc-{uuid.uuid4().hex[:8]}"
        await client.create_topic(topic, partitions=2, replication_factor=3)
        yield client, CoordinatorClient(client), topic


async def test_only_the_named_attempts_commit_and_zombies_are_fenced(env) -> None:
    client, coord, topic = env
    for r in range(ROUNDS):
        key = TxnKey(f"q-{topic}", r, "run-1")
        base = r * 1000
        # partition 0: attempt "a" (the speculative loser / failed one) and "b" (the winner)
        a = await prepare(
            client, coord, key, f"a{r}", topic, 0, chunks(list(range(base, base + 50)))
        )
        b = await prepare(
            client, coord, key, f"b{r}", topic, 0, chunks(list(range(base, base + 50)))
        )
        c = await prepare(
            client, coord, key, f"c{r}", topic, 1, chunks(list(range(base + 50, base + 80)))
        )
        assert a.participants[0].records == 50 and not b.replayed
        reply = await decide(client, coord, key, [*b.participants, *c.participants], commit=True)
        assert reply["status"] == "committed"
        aborted = [p["producer_id"] for p in reply["decision"]["aborts"]]
        assert aborted == [a.participants[0].producer_id]
        # the zombie goes on writing after the decision: its epoch was bumped, so it is fenced
        zombie = a.participants[0]
        with pytest.raises(FencedError):
            await client.produce(
                topic,
                0,
                chunks([999_999]),
                producer_id=zombie.producer_id,
                producer_epoch=zombie.epoch,
                first_sequence=50,
                transactional=True,
            )
        # and a late attempt of the committed version writes nothing
        late = await prepare(client, coord, key, f"late{r}", topic, 1, chunks([123]))
        assert late.replayed and late.participants == ()
    values = await read_all(client, topic)
    counts = Counter(values)
    assert [v for v, n in counts.items() if n > 1] == []
    expected = {r * 1000 + i for r in range(ROUNDS) for i in range(80)}
    assert set(values) == expected


async def test_a_dead_driver_between_decision_and_markers_is_rolled_forward(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    key = TxnKey(writer, 7, "run-1")
    p0 = await prepare(client, coord, key, "t0", topic, 0, chunks(list(range(0, 40))))
    p1 = await prepare(client, coord, key, "t1", topic, 1, chunks(list(range(40, 100))))
    named = [p.to_json() for p in (*p0.participants, *p1.participants)]
    # the driver records the decision and dies before any marker
    reply = await coord.call(
        "decide", writer=writer, version=7, run="run-1", commit=True, named=named
    )
    assert reply["status"] == "committed"
    # the batch is invisible: both transactions are open, so each LSO is held below them
    assert await read_all(client, topic) == []
    # the restarted query (a new run) replays version 7: it writes nothing ...
    replay = TxnKey(writer, 7, "run-2")
    again = await prepare(client, coord, replay, "t0-replay", topic, 0, chunks(list(range(0, 40))))
    assert again.replayed and again.participants == ()
    # ... and its commit rolls the recorded decision forward
    done = await decide(client, coord, replay, [], commit=True)
    assert done["status"] == "committed" and done["decision"]["run"] == "run-1"
    assert sorted(await read_all(client, topic)) == list(range(100))
    assert (await coord.call("pending", writer=writer))["pending"] == []
    # a commit of the aborted-by-nobody version by its own run is idempotent
    assert (await decide(client, coord, key, [], commit=True))["status"] == "committed"


async def test_abort_then_replay_commits_and_abort_after_commit_completes(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    first = TxnKey(writer, 0, "run-1")
    p = await prepare(client, coord, first, "t0", topic, 0, chunks(list(range(10))))
    assert (await decide(client, coord, first, [], commit=False))["status"] == "aborted"
    # a failed attempt of the same run registering late is refused: the run decided
    with pytest.raises(TxnRefusedError, match="already decided by run 'run-1'"):
        await prepare(client, coord, first, "t0-late", topic, 0, chunks([5]))
    with pytest.raises(TxnAbortedError):
        await decide(client, coord, first, p.participants, commit=True)
    assert await read_all(client, topic) == []
    second = TxnKey(writer, 0, "run-2")
    q = await prepare(client, coord, second, "t0", topic, 0, chunks(list(range(10))))
    await decide(client, coord, second, q.participants, commit=True)
    # Spark's abort() after a commit() that raised: the recorded commit stands
    assert (await decide(client, coord, second, [], commit=False))["status"] == "committed"
    assert sorted(await read_all(client, topic)) == list(range(10))


async def test_a_reader_never_sees_part_of_a_committed_batch(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    for version in range(ROUNDS):
        key = TxnKey(writer, version, "run-1")
        base = version * 100
        p0 = await prepare(client, coord, key, "t0", topic, 0, chunks(list(range(base, base + 30))))
        p1 = await prepare(
            client, coord, key, "t1", topic, 1, chunks(list(range(base + 30, base + 100)))
        )
        parts = [*p0.participants, *p1.participants]
        await coord.call(
            "decide",
            writer=writer,
            version=version,
            run="run-1",
            commit=True,
            named=[x.to_json() for x in parts],
        )
        # write the marker of partition 0 only, as a driver that died half-way would
        x = parts[0]
        await client.end_transaction(
            topic,
            0,
            x.producer_id,
            x.epoch,
            True,
            record_count=x.records,
            last_sequence=x.last_sequence,
        )
        lso = {p: (await client.list_offsets(topic, p))[2] for p in (0, 1)}
        assert lso[0] > x.first_offset  # partition 0 alone would show its part of the batch
        cut = await committed_cut(client, topic, lso)
        seen = await read_all(client, topic, cut)
        assert set(seen) == set(range(base)), f"version {version}: fractured read"
        assert await roll_forward(client, coord, writer) == 1
        lso = {p: (await client.list_offsets(topic, p))[2] for p in (0, 1)}
        whole = await read_all(client, topic, await committed_cut(client, topic, lso))
        assert sorted(whole) == list(range(base + 100))


async def test_producer_ids_are_distinct_per_attempt_and_partition() -> None:
    ids = {producer_id_for("q", "run", a, "t", p) for a in range(200) for p in range(8)}
    assert len(ids) == 1600 and all(0 < i < 2**63 for i in ids)


async def test_concurrent_roll_forwards_are_idempotent(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    for version in range(ROUNDS):
        key = TxnKey(writer, version, "run-1")
        p = await prepare(client, coord, key, "t0", topic, version % 2, chunks([version]))
        await coord.call(
            "decide",
            writer=writer,
            version=version,
            run="run-1",
            commit=True,
            named=[x.to_json() for x in p.participants],
        )
        # two drivers (the replay and the coordinator's timer) race to complete it
        await asyncio.gather(
            roll_forward(client, coord, writer), roll_forward(client, coord, writer)
        )
    assert sorted(await read_all(client, topic)) == list(range(ROUNDS))


async def test_the_coordinator_rolls_a_stale_decision_forward_on_its_own(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    key = TxnKey(writer, 0, "run-1")
    p = await prepare(client, coord, key, "t0", topic, 0, chunks(list(range(25))))
    named = [x.to_json() for x in p.participants]
    await coord.call("decide", writer=writer, version=0, run="run-1", commit=True, named=named)
    # the driver is gone and nobody touches the writer again: the coordinator's leader
    # completes the decision after two rounds of its timer (5 s each)
    for _ in range(100):  # bounded: 30 s
        if not (await coord.call("pending", writer=writer))["pending"]:
            break
        await asyncio.sleep(0.3)
    assert (await coord.call("pending", writer=writer))["pending"] == []
    assert sorted(await read_all(client, topic)) == list(range(25))


async def test_abort_without_commit_messages_releases_the_readers(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    done = await prepare(client, coord, TxnKey(writer, 0, "run-1"), "t0", topic, 0, chunks([1]))
    await decide(client, coord, TxnKey(writer, 0, "run-1"), done.participants, commit=True)
    # the query stops in the middle of batch 1: its task prepared, Spark's abort() gets
    # no message, only the batch id; the run's registrations are aborted by run
    await prepare(client, coord, TxnKey(writer, 1, "run-1"), "t1", topic, 0, chunks([2, 3]))
    lso_held = (await client.list_offsets(topic, 0))[2]
    assert await abort_run(client, coord, "run-1", 1) == 1
    lso = (await client.list_offsets(topic, 0))[2]
    assert lso > lso_held  # the open transaction no longer holds readers back
    assert sorted(await read_all(client, topic)) == [1]
