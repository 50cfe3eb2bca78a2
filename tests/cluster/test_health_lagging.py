"""``cluster health`` and lagging replicas: the replicas a partition's leader reports in
its ``/health`` as not caught up in time are listed (``lagging_replicas`` in JSON, a
section in text), count as under-replicated (the report is not healthy), and every
existing key and line stays as it was. The nodes' ``/health`` are served by small
aiohttp apps on 127.0.0.1; the metadata comes from a stub client."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from raftlog.health import HealthReport, LaggingReplica, check_health
from raftlog.rpc.messages import NodeInfo, PartitionInfo, TopicInfo

EXISTING_KEYS = [
    "healthy",
    "controller_leader",
    "nodes",
    "leaderless_partitions",
    "under_replicated_partitions",
    "problems",
]


@dataclasses.dataclass
class _Meta:
    nodes: list[NodeInfo]
    topics: list[TopicInfo]


class _StubClient:
    """What check_health asks of a client: metadata (with the partitions' leaders),
    plain-HTTP URLs."""

    tls_context = None

    def __init__(self, nodes: list[NodeInfo], topics: list[TopicInfo]) -> None:
        self._nodes = nodes
        self._topics = topics

    async def metadata(self, *, with_offsets: bool = False) -> _Meta:
        # without offsets a node knows only its own replicas' leaders: none here
        return _Meta(self._nodes, self._topics if with_offsets else [])

    def url(self, address: str, path: str) -> str:
        return f"http://{address}{path}"


@pytest.fixture
async def nodes() -> AsyncIterator[tuple[list[NodeInfo], dict[int, dict[str, Any]]]]:
    """Three nodes whose /health answers the document in ``docs[node]`` (set by the
    test); stopped on exit."""
    docs: dict[int, dict[str, Any]] = {}
    runners: list[web.AppRunner] = []
    infos = []
    try:
        for node in (1, 2, 3):

            async def health(_req: web.Request, node: int = node) -> web.Response:
                return web.json_response(docs[node])

            app = web.Application()
            app.router.add_get("/health", health)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            infos.append(NodeInfo(node, f"127.0.0.1:{port}"))
        yield infos, docs
    finally:
        for runner in runners:
            await runner.cleanup()


def _doc(node: int, lagging: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"node_id": node, "controller_leader": 1}
    if node == 1:
        doc["last_heard_ms"] = {"2": 40, "3": 45}
    if lagging is not None:
        doc["lagging_replicas"] = lagging
    return doc


def _topic(leaders: list[int]) -> TopicInfo:
    parts = [PartitionInfo(p, 100 + p, n, [1, 2, 3], 0, 10, 10) for p, n in enumerate(leaders)]
    return TopicInfo("t", 3, parts)


def _lag(partition: int, node: int, behind: int = 500, ms: int = 31_000) -> dict[str, Any]:
    return {
        "topic": "t",
        "partition": partition,
        "node": node,
        "behind_records": behind,
        "not_caught_up_ms": ms,
    }


async def test_a_lagging_replica_is_listed_and_makes_the_cluster_unhealthy(
    nodes: tuple[list[NodeInfo], dict[int, dict[str, Any]]],
) -> None:
    infos, docs = nodes
    # node 2 leads t/1 and reports node 3 lagging; node 1 (which leads t/0) a stale
    # entry for t/1, which it no longer leads: only the leader's report counts
    docs.update(
        {
            1: _doc(1, [_lag(1, 2, 1, 1)]),
            2: _doc(2, [_lag(1, 3, 500, 31_000)]),
            3: _doc(3, []),
        }
    )
    client = _StubClient(infos, [_topic([1, 2])])
    report = await check_health(client, [i.address for i in infos])  # type: ignore[arg-type]
    assert report.lagging == [LaggingReplica("t", 1, 2, 3, 500, 31_000)]
    assert not report.healthy
    assert report.problems == [
        "1 partition(s) are under-replicated by lagging replicas (up, but not caught up "
        "to the leader in time): t/1"
    ]
    doc = report.to_dict()
    assert list(doc) == [*EXISTING_KEYS, "lagging_replicas", "unopened_replicas"]
    assert doc["under_replicated_partitions"] == [] and doc["leaderless_partitions"] == []
    assert doc["lagging_replicas"] == [
        {
            "topic": "t",
            "partition": 1,
            "leader": 2,
            "node": 3,
            "behind_records": 500,
            "not_caught_up_ms": 31_000,
        }
    ]
    text = report.render().splitlines()
    assert text[0] == "healthy: no"
    i = text.index("lagging replicas: 1")
    assert text[i - 1] == "under-replicated partitions: 0"
    assert text[i + 1] == (
        "  t/1  node 3  leader 2  500 records behind  not caught up for 31000 ms"
    )
    assert text[i + 2].startswith("problem: 1 partition(s) are under-replicated by lagging")


async def test_nothing_lagging_is_healthy_and_down_replicas_are_not_lagging(
    nodes: tuple[list[NodeInfo], dict[int, dict[str, Any]]],
) -> None:
    infos, docs = nodes
    # a node of an older version reports no key at all: nothing lags
    docs.update({1: _doc(1, []), 2: _doc(2), 3: _doc(3, [])})
    client = _StubClient(infos, [_topic([1, 2])])
    report = await check_health(client, [i.address for i in infos])  # type: ignore[arg-type]
    assert report.healthy and report.lagging == [] and report.problems == []
    assert report.to_dict()["lagging_replicas"] == []
    # the text of a report without lagging replicas is as it always was
    assert report.render().splitlines() == [
        "healthy: yes",
        "controller leader: 1",
        f"node 1  {infos[0].address}  up  last heartbeat 0 ms ago",
        f"node 2  {infos[1].address}  up  last heartbeat 40 ms ago",
        f"node 3  {infos[2].address}  up  last heartbeat 45 ms ago",
        "leaderless partitions: 0",
        "under-replicated partitions: 0",
    ]

    # node 3 is down (its /health fails): the leader's report of it lagging is not a
    # lagging replica, it is a down one (under-replicated as before)
    docs[1] = _doc(1, [_lag(0, 3)])
    del docs[3]
    report = await check_health(client, [i.address for i in infos])  # type: ignore[arg-type]
    assert report.lagging == []
    assert [p.partition for p in report.under_replicated] == [0, 1]
    assert "1 partition(s) are under-replicated by lagging" not in " ".join(report.problems)


def test_a_report_built_without_lagging_replicas_keeps_its_old_form() -> None:
    report = HealthReport([], -1, [], [], ["no node answers: x"])
    assert report.lagging == [] and report.to_dict()["lagging_replicas"] == []


def _disk(free: int, min_free: int = 64 << 20, node: int = 2) -> dict[str, Any]:
    degraded = free < min_free
    reason = (
        f"KAFKA_STORAGE_ERROR: node {node}'s data dir /d{node} has {free >> 20} MiB free, "
        "below --min-free-bytes 64 MiB"
    )
    return {
        "free_bytes": free,
        "min_free_bytes": min_free,
        "degraded": degraded,
        "reason": reason if degraded else "",
    }


async def test_a_degraded_node_is_named_with_its_free_space_and_fails_the_report(
    nodes: tuple[list[NodeInfo], dict[int, dict[str, Any]]],
) -> None:
    """Issue 44: a node whose disk is full (below --min-free-bytes) is up and serves
    reads, but refuses writes: health names it and its free space, and is not healthy."""
    infos, docs = nodes
    docs.update(
        {
            1: {**_doc(1, []), "disk": _disk(500 << 20, node=1)},
            2: {**_doc(2, []), "disk": _disk(12 << 20)},
            3: {**_doc(3, []), "disk": _disk(300 << 20, node=3)},
        }
    )
    client = _StubClient(infos, [_topic([1, 2])])
    report = await check_health(client, [i.address for i in infos])  # type: ignore[arg-type]
    assert not report.healthy
    assert report.problems == [
        f"node 2 ({infos[1].address}) is degraded: 12 MiB free, refuses writes: "
        "KAFKA_STORAGE_ERROR: node 2's data dir /d2 has 12 MiB free, below --min-free-bytes "
        "64 MiB"
    ]
    doc = report.to_dict()
    assert [(n["node_id"], n["free_bytes"], n["degraded"]) for n in doc["nodes"]] == [
        (1, 500 << 20, False),
        (2, 12 << 20, True),
        (3, 300 << 20, False),
    ]
    assert doc["nodes"][1]["degraded_reason"].startswith("KAFKA_STORAGE_ERROR: node 2's")
    text = report.render().splitlines()
    assert text[2:5] == [
        f"node 1  {infos[0].address}  up  last heartbeat 0 ms ago  disk free 500 MiB",
        f"node 2  {infos[1].address}  up  last heartbeat 40 ms ago  disk free 12 MiB  "
        "DEGRADED (refuses writes: disk full)",
        f"node 3  {infos[2].address}  up  last heartbeat 45 ms ago  disk free 300 MiB",
    ]
    assert text[-1].startswith("problem: node 2 (")


async def test_a_replica_a_node_failed_to_open_is_reported_with_its_error(
    nodes: tuple[list[NodeInfo], dict[int, dict[str, Any]]],
) -> None:
    infos, docs = nodes
    error = "NotADirectoryError: [Errno 20] Not a directory: '/d/partitions/t/1'"
    failure = {"topic": "t", "partition": 1, "group_id": 9, "attempts": 4, "error": error}
    docs.update({1: _doc(1, []), 2: {**_doc(2, []), "open_failures": [failure]}, 3: _doc(3, [])})
    client = _StubClient(infos, [_topic([1, 1])])
    report = await check_health(client, [i.address for i in infos])  # type: ignore[arg-type]
    assert not report.healthy
    assert report.to_dict()["unopened_replicas"] == [
        {"node": 2, "topic": "t", "partition": 1, "error": failure["error"], "attempts": 4}
    ]
    assert report.problems == [
        f"node 2 failed to open its replica of t/1 (4 attempts, retrying): {failure['error']}"
    ]
    text = report.render().splitlines()
    assert text[-3:-1] == [
        "unopened replicas: 1",
        f"  t/1  node 2  failed to open (4 attempts): {failure['error']}",
    ]
