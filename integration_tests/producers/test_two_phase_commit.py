"""The two-phase commit (raftlog.client.transactions, the coordinator's EndTxn) against a
real 3-node cluster.

What the Spark sink relies on, driven without Spark so each race is exact:
zombie and speculative attempts that keep writing around the decision, a
coordinator that dies between the decision and the markers, replays, and
readers that take a consistent cut while decisions are taken.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from benchmarks.workloads.cluster_handle import running_cluster
from raftlog.client import FencedError, RaftlogClient, unframe_records
from raftlog.client.coordinator import CoordinatorClient
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
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.faults.failpoints import ENV_VAR, TXN_AFTER_DECISION
from raftlog.records.framing import frame_records

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
        reply = await decide(coord, key, [*b.participants, *c.participants], commit=True)
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


@pytest.fixture
def crashing_coordinator(tmp_path, monkeypatch):
    """A private cluster whose nodes die (kill -9) right after the first decision each
    takes is durable, before any marker: the coordinator's leader crashes mid-EndTxn."""
    monkeypatch.setenv(ENV_VAR, f"{TXN_AFTER_DECISION}=kill@1")
    with running_cluster(tmp_path / "cluster") as handle:
        monkeypatch.delenv(ENV_VAR)  # restarted nodes run without it
        yield handle


async def test_a_coordinator_dead_between_decision_and_markers_is_rolled_forward(
    crashing_coordinator,
) -> None:
    cluster = crashing_coordinator
    async with RaftlogClient(cluster.servers, request_timeout_s=60.0) as client:
        coord = CoordinatorClient(client)
        topic = f"tpc-{uuid.uuid4().hex[:8]}"
        await client.create_topic(topic, partitions=2, replication_factor=3)
        writer = f"q-{topic}"
        key = TxnKey(writer, 7, "run-1")
        p0 = await prepare(client, coord, key, "t0", topic, 0, chunks(list(range(0, 40))))
        p1 = await prepare(client, coord, key, "t1", topic, 1, chunks(list(range(40, 100))))
        leader = (await client.describe_topic(TRANSACTIONS_TOPIC)).partitions[0].leader
        # the leader records the decision and dies before any marker; the call is
        # retried at the next leader, which finishes the recorded decision
        reply = await decide(coord, key, [*p0.participants, *p1.participants], commit=True)
        assert reply["status"] == "committed" and reply["decision"]["complete"]
        assert not cluster.alive(leader), "the coordinator's leader did not crash"
        assert sorted(await read_all(client, topic)) == list(range(100))
        assert (await coord.describe_writer(writer)).pending == []
        # the restarted query (a new run) replays version 7: it writes nothing ...
        replay = TxnKey(writer, 7, "run-2")
        again = await prepare(
            client, coord, replay, "t0-replay", topic, 0, chunks(list(range(0, 40)))
        )
        assert again.replayed and again.participants == ()
        # ... and its commit returns the recorded decision
        done = await decide(coord, replay, [], commit=True)
        assert done["status"] == "committed" and done["decision"]["run"] == "run-1"
        assert sorted(await read_all(client, topic)) == list(range(100))
        # a commit of the version by its own run again is idempotent
        assert (await decide(coord, key, [], commit=True))["status"] == "committed"
        cluster.restart(leader)


async def test_abort_then_replay_commits_and_abort_after_commit_completes(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    first = TxnKey(writer, 0, "run-1")
    p = await prepare(client, coord, first, "t0", topic, 0, chunks(list(range(10))))
    assert (await decide(coord, first, [], commit=False))["status"] == "aborted"
    # a failed attempt of the same run registering late is refused: the run decided
    with pytest.raises(TxnRefusedError, match="already decided by run 'run-1'"):
        await prepare(client, coord, first, "t0-late", topic, 0, chunks([5]))
    with pytest.raises(TxnAbortedError):
        await decide(coord, first, p.participants, commit=True)
    assert await read_all(client, topic) == []
    second = TxnKey(writer, 0, "run-2")
    q = await prepare(client, coord, second, "t0", topic, 0, chunks(list(range(10))))
    await decide(coord, second, q.participants, commit=True)
    # Spark's abort() after a commit() that raised: the recorded commit stands
    assert (await decide(coord, second, [], commit=False))["status"] == "committed"
    seen = sorted(await read_all(client, topic))
    if seen != list(range(10)):  # what the partitions hold, to tell a lost commit from a read
        offsets = [await client.list_offsets(topic, p) for p in (0, 1)]
        raw = [
            (b.base_offset, b.producer_id, b.is_control, b.record_count)
            for p in (0, 1)
            for b in (await client.fetch(topic, p, 0, isolation="read_uncommitted")).batches
        ]
        raise AssertionError(
            f"read {seen}; prepared {q}; offsets (start, hwm, lso) {offsets}; "
            f"batches read uncommitted (base, producer, control, records) {raw}"
        )


async def test_an_abort_on_a_topic_just_created_writes_its_marker(raftlog_cluster) -> None:
    """Prepare and abort right after the topic's creation, many times: a node that has not
    applied the creation yet calls the topic unknown, and the coordinator must not take
    that for a deletion (the abort counted done, no marker written, the open transaction
    holding the partition's last stable offset until its timeout)."""
    async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=20.0) as client:
        coord = CoordinatorClient(client)
        for round_ in range(ROUNDS * 4):
            topic = f"tpc-new-{uuid.uuid4().hex[:8]}"
            await client.create_topic(topic, partitions=2, replication_factor=3)
            key = TxnKey(f"q-{topic}", 0, "run-1")
            p = await prepare(client, coord, key, "t0", topic, round_ % 2, chunks([round_]))
            assert (await decide(coord, key, [], commit=False))["status"] == "aborted"
            _start, hwm, lso = await client.list_offsets(topic, round_ % 2)
            assert lso == hwm, (
                f"round {round_}: the aborted transaction at {p.participants[0].first_offset} "
                f"holds the last stable offset at {lso} (high watermark {hwm})"
            )
            assert await read_all(client, topic) == []
            await client.delete_topic(topic)


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
        # readers take cuts while the coordinator decides and writes the markers
        deciding = asyncio.ensure_future(decide(coord, key, parts, commit=True))
        for _ in range(200):  # bounded: the decision ends well within
            lso = {p: (await client.list_offsets(topic, p))[2] for p in (0, 1)}
            cut = await committed_cut(client, topic, lso)
            seen = set(await read_all(client, topic, cut))
            assert seen in (set(range(base)), set(range(base + 100))), (
                f"version {version}: fractured read"
            )
            if deciding.done():
                break
        await deciding
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
        # two drivers (a retry and a replay's roll-forward) race to finish the decision
        both = await asyncio.gather(
            decide(coord, key, p.participants, commit=True),
            decide(coord, key, p.participants, commit=True),
            roll_forward(coord, writer),
        )
        assert [r["status"] for r in both[:2]] == ["committed", "committed"]
    assert sorted(await read_all(client, topic)) == list(range(ROUNDS))
    assert (await coord.describe_writer(writer)).pending == []


async def test_abort_without_commit_messages_releases_the_readers(env) -> None:
    client, coord, topic = env
    writer = f"q-{topic}"
    done = await prepare(client, coord, TxnKey(writer, 0, "run-1"), "t0", topic, 0, chunks([1]))
    await decide(coord, TxnKey(writer, 0, "run-1"), done.participants, commit=True)
    # the query stops in the middle of batch 1: its task prepared, Spark's abort() gets
    # no message, only the batch id; the run's registrations are aborted by run
    await prepare(client, coord, TxnKey(writer, 1, "run-1"), "t1", topic, 0, chunks([2, 3]))
    lso_held = (await client.list_offsets(topic, 0))[2]
    assert await abort_run(coord, "run-1", 1) == 1
    lso = (await client.list_offsets(topic, 0))[2]
    assert lso > lso_held  # the open transaction no longer holds readers back
    assert sorted(await read_all(client, topic)) == [1]
