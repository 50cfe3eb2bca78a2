"""A small exactly-once write's round trips (issue 48: its fixed cost), against a real
3-node cluster: what a Spark task sends, and that what the driver handed it is checked.

* A partition call that finds no leader for a topic just created asks the metadata once:
  the node holds that answer until the first election is over
  (``MetadataRequest.wait_for_leaders_ms``), instead of the client polling with its
  backoff.
* A task prepares with the topic id the driver planned against: no id lookup of its
  own, and a topic deleted and created again since then is refused by name (its
  InitProducer carries the id), with nothing written to the new topic.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from raftlog.client import RaftlogClient, UnknownTopicError
from raftlog.client.calls import CallRouting
from raftlog.client.coordinator import CoordinatorClient
from raftlog.client.transactions import TxnKey, decide, prepare
from raftlog.records.framing import frame_records
from raftlog.rpc.messages import InitProducerRequest, MetadataRequest

TOPICS = 4
"""New topics per test: each one's first election is a fresh race with the calls."""


@pytest.fixture
def sent() -> Iterator[list[Any]]:
    """Every request any client of this process sends during the test, in order."""
    requests: list[Any] = []
    original = CallRouting.send

    async def recording(self: Any, address: str, req: Any, resp_type: Any) -> Any:
        requests.append(req)
        return await original(self, address, req, resp_type)

    CallRouting.send = recording  # type: ignore[method-assign]
    try:
        yield requests
    finally:
        CallRouting.send = original  # type: ignore[method-assign]


def _chunks(values: list[int]) -> list[tuple[bytes, int]]:
    return [(frame_records([str(v).encode() for v in values]), len(values))]


async def _leaders_known(client: RaftlogClient, topic: str) -> None:
    """Until every partition of ``topic`` has a leader in the client's view (bounded)."""
    for _ in range(200):
        meta = await client.describe_topic(topic)
        if all(p.leader >= 0 for p in meta.partitions):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic}: no leader for every partition within 10 s")


def _kinds(requests: list[Any]) -> list[str]:
    return [type(r).__name__ for r in requests]


async def test_a_new_topics_leader_is_looked_up_once(raftlog_cluster, sent) -> None:
    for i in range(TOPICS):
        async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=20.0) as client:
            topic = f"planned-{uuid.uuid4().hex[:8]}"
            await client.create_topic(topic, partitions=2, replication_factor=3)
            sent.clear()
            # both partitions at once, as a write's two tasks (they share the one lookup)
            sessions = await asyncio.gather(
                *(client.init_producer(topic, p, 1000 + p) for p in range(2))
            )
            assert [s.epoch for s in sessions] == [0, 0]
            lookups = [r for r in sent if isinstance(r, MetadataRequest)]
            assert len(lookups) == 1, (i, _kinds(sent))
            assert lookups[0].with_offsets and lookups[0].wait_for_leaders_ms > 0
            assert _kinds(sent).count("InitProducerRequest") == 2, _kinds(sent)


async def test_a_task_prepares_with_the_planned_topic_id_and_no_lookup(
    raftlog_cluster, sent
) -> None:
    async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=20.0) as client:
        coordinator = CoordinatorClient(client)
        topic = f"planned-{uuid.uuid4().hex[:8]}"
        planned = (await client.create_topic(topic, partitions=2, replication_factor=3)).topic_id
        assert planned >= 0
        await _leaders_known(client, topic)  # then only the task's own calls follow
        await coordinator.describe_writer("planned-warm-up")  # the coordinator found
        key = TxnKey(f"planned-{topic}", 0, "run-1")
        codec = asyncio.get_running_loop().create_future()
        sent.clear()
        task = asyncio.ensure_future(
            prepare(
                client,
                coordinator,
                key,
                "a0",
                topic,
                0,
                _chunks(list(range(20))),
                compression=codec,
                topic_id=planned,
            )
        )
        # the codec is awaited once registered: the registration does not wait for it
        for _ in range(200):
            if "RegisterParticipantRequest" in _kinds(sent) or task.done():
                break
            await asyncio.sleep(0.05)
        assert not task.done()
        assert _kinds(sent) == ["InitProducerRequest", "RegisterParticipantRequest"]
        codec.set_result("lz4")
        prepared = await task
        init = sent[0]
        assert isinstance(init, InitProducerRequest) and init.topic_id == planned
        assert [type(r).__name__ for r in sent[2:]] == ["ProduceRequest"]
        assert sent[2].batches[0].compression != 0  # written with the codec handed over
        (participant,) = prepared.participants
        assert participant.topic_id == planned and participant.records == 20
        reply = await decide(coordinator, key, prepared.participants, commit=True)
        assert reply["status"] == "committed"
        fetched = await client.fetch(topic, 0, 0, max_bytes=1 << 20)
        assert sum(b.record_count for b in fetched.batches) == 20


async def test_a_topic_created_again_since_the_plan_is_refused_by_name(raftlog_cluster) -> None:
    async with RaftlogClient(raftlog_cluster.servers, request_timeout_s=20.0) as client:
        coordinator = CoordinatorClient(client)
        topic = f"planned-{uuid.uuid4().hex[:8]}"
        planned = (await client.create_topic(topic, partitions=2, replication_factor=3)).topic_id
        await client.delete_topic(topic)
        now = (await client.create_topic(topic, partitions=2, replication_factor=3)).topic_id
        assert now != planned
        key = TxnKey(f"planned-{topic}", 0, "run-1")
        with pytest.raises(UnknownTopicError) as err:
            await prepare(
                client, coordinator, key, "a0", topic, 1, _chunks([1, 2, 3]), topic_id=planned
            )
        text = str(err.value)
        assert f"topic {topic!r} is not the one this write was planned against" in text, text
        assert f"its id is {now}, not {planned}" in text, text
        # nothing written to the topic of the new id (its log holds the leader's no-op)
        assert (await client.fetch(topic, 1, 0, max_bytes=1 << 20)).batches == []
        _, high_watermark, _ = await client.list_offsets(topic, 1)
        assert high_watermark <= 1
        described = await coordinator.describe_writer(key.writer)
        assert described.last_committed == -1 and not described.pending
        # planned against the topic as it is now, the same write goes through
        prepared = await prepare(
            client, coordinator, key, "a1", topic, 1, _chunks([1, 2, 3]), topic_id=now
        )
        assert prepared.participants[0].topic_id == now
        assert (await decide(coordinator, key, prepared.participants, commit=True))[
            "status"
        ] == "committed"
