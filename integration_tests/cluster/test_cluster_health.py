"""``raftlog cluster health [--format json] [--watch]`` on a real 3-node cluster: the
nodes up or down with their last heartbeat, the controller, under-replicated and
leaderless partitions, exit status 0 only when all is well; ``--watch`` reports
again every ``--interval`` seconds, bounded here by ``--count``.
"""

from __future__ import annotations

import json
import time

from ops_helpers import ops_cluster, run_cli

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import BlockingRaftlogClient

__all__ = ["ops_cluster"]  # the fixture, imported for pytest


def _health(servers: list[str], *args: str, want_rc: int, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    """Run health until it exits with ``want_rc`` (elections settle), bounded in time;
    returns the last run."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = run_cli(servers, "cluster", "health", *args)
        if r.returncode == want_rc or time.monotonic() > deadline:
            return r
        time.sleep(0.3)


def test_health_watch_reports_nodes_heartbeats_and_a_dead_node(ops_cluster: ClusterHandle) -> None:
    cluster = ops_cluster
    servers = cluster.servers
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic("watched", partitions=3, replication_factor=3)
    ok = _health(servers, "--format", "json", want_rc=0)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["healthy"] and doc["problems"] == []
    assert doc["controller_leader"] in {1, 2, 3}
    assert sorted(n["node_id"] for n in doc["nodes"]) == [1, 2, 3]
    for n in doc["nodes"]:
        assert n["up"] and n["controller_leader"] == doc["controller_leader"]
        # the controller leader hears from every node each heartbeat interval (50 ms)
        assert 0 <= n["last_heartbeat_ms"] < 2000, n

    # --watch --count 3: three reports, one JSON document per line, 0 when all is well
    began = time.monotonic()
    watched = run_cli(
        servers,
        "cluster",
        "health",
        "--watch",
        "--interval",
        "0.5",
        "--count",
        "3",
        "--format",
        "json",
    )
    took = time.monotonic() - began
    assert watched.returncode == 0, watched.stdout + watched.stderr
    reports = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(reports) == 3 and all(r["healthy"] for r in reports)
    assert len({r["time"] for r in reports}) >= 2  # printed at different times
    assert took >= 1.0  # two intervals of 0.5 s between three reports

    # a dead node: reported down with the heartbeat the controller last had of it,
    # its partitions under-replicated, exit status nonzero
    meta_leader = doc["controller_leader"]
    victim = next(n for n in (1, 2, 3) if n != meta_leader)
    cluster.kill(victim)
    time.sleep(1.0)
    down = _health(servers, "--format", "json", want_rc=1)
    assert down.returncode == 1, down.stdout + down.stderr
    report = json.loads(down.stdout)
    assert not report["healthy"]
    dead = [n for n in report["nodes"] if not n["up"]]
    assert [n["node_id"] for n in dead] == [victim]
    # a follower of the controller died: the leader stays, and it last heard from the
    # victim before the kill, at least the second slept since
    assert report["controller_leader"] == meta_leader
    assert dead[0]["last_heartbeat_ms"] >= 900, dead[0]
    under = report["under_replicated_partitions"]
    assert {p["topic"] for p in under} >= {"watched"}
    assert all(p["down_replicas"] == [victim] for p in under)
    assert any(f"node {victim}" in p and "is down" in p for p in report["problems"])

    text = run_cli(servers, "cluster", "health", "--watch", "--interval", "0.2", "--count", "2")
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert sum(line.startswith("--- ") for line in lines) == 2
    assert sum(line == "healthy: no" for line in lines) == 2
    assert any(
        line.startswith(f"node {victim}  ") and "  down" in line and "last heartbeat" in line
        for line in lines
    )


def test_health_bad_flags_are_named() -> None:
    servers = ["127.0.0.1:9"]  # refused before anything connects
    r = run_cli(servers, "cluster", "health", "--watch", "--interval", "0")
    assert r.returncode == 2 and "--interval: expected a number > 0, got '0'" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli(servers, "cluster", "health", "--watch", "--count", "none")
    assert r.returncode == 2 and "--count: expected an integer >= 1, got 'none'" in r.stderr
    r = run_cli(servers, "cluster", "health", "--count", "2")
    assert r.returncode == 1 and "--count: only with --watch" in r.stderr
    assert "Traceback" not in r.stderr
