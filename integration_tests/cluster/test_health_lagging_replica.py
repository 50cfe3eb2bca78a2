"""``raftlog cluster health`` on a real 3-node cluster whose raft links run through a
proxy: a follower cut off from its peers while it is up (its ``/health`` answers) falls
behind under writes; after ``--replica-lag-time-max-ms`` it is reported lagging (JSON
``lagging_replicas``, exit status 1), and once the links heal it catches up and the
report is healthy again."""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from ops_helpers import run_cli, wait_until

from benchmarks.workloads.nemesis_cluster import ProxiedCluster, proxied_cluster
from raftlog.client import BlockingRaftlogClient, frame_records

LAG_MAX_MS = 1500
TOPIC = "lagged"


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ProxiedCluster]:
    flags = ["--replica-lag-time-max-ms", str(LAG_MAX_MS)]
    with proxied_cluster(tmp_path / "cluster", extra_args=flags) as handle:
        yield handle


def _health(servers: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    r = run_cli(servers, "cluster", "health", "--format", "json")
    return r, json.loads(r.stdout)


def test_a_follower_cut_off_while_up_is_reported_lagging_then_recovers(
    cluster: ProxiedCluster,
) -> None:
    servers = cluster.servers
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = wait_until(
            lambda: max(client.describe_topic(TOPIC).partitions[0].leader, 0), 30, "a leader"
        )
        client.produce(TOPIC, 0, [(frame_records([b"first"]), 1)], acks="all")
        _, doc = wait_until(lambda: (h := _health(servers))[0].returncode == 0 and h, 30, "ok")
        assert doc["lagging_replicas"] == []
        controller = doc["controller_leader"]
        victim = next(n for n in (1, 2, 3) if n not in (leader, controller))
        others = {1, 2, 3} - {victim}
        for link in cluster.links_between({victim}, others):
            cluster.proxy.cut(link)

        def reported() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]] | None:
            # writes go on (acks=all: the leader and the third node), the victim misses them
            client.produce(TOPIC, 0, [(frame_records([b"more"] * 10), 10)], acks="all")
            r, doc = _health(servers)
            return (r, doc) if doc["lagging_replicas"] else None

        r, doc = wait_until(reported, 30, f"node {victim} reported lagging")
        assert r.returncode == 1, r.stdout
        assert not doc["healthy"]
        [lag] = doc["lagging_replicas"]
        assert (lag["topic"], lag["partition"], lag["node"]) == (TOPIC, 0, victim)
        assert lag["leader"] == leader
        assert lag["behind_records"] >= 10 and lag["not_caught_up_ms"] > LAG_MAX_MS
        # the victim is up (its /health answers), not down: not under-replicated as such
        assert all(n["up"] for n in doc["nodes"]), doc["nodes"]
        assert doc["under_replicated_partitions"] == []
        assert any("under-replicated by lagging replicas" in p for p in doc["problems"])

        cluster.proxy.heal()
        r, doc = wait_until(
            lambda: (h := _health(servers))[0].returncode == 0 and h, 30, "a healthy report"
        )
        assert doc["lagging_replicas"] == [] and doc["healthy"]
