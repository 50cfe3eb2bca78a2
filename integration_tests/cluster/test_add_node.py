"""``raftlog local add-node``: a fourth node joins a running 3-node cluster, every
node learns its address through the controller, new partitions are placed on it and
it leads one of them; killed, ``raftlog cluster health`` reports it with a nonzero
exit, and every acknowledged record reads back once.
"""

from __future__ import annotations

import json

from ops_helpers import node_health, ops_cluster, read_partition, run_cli, wait_until

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import BlockingRaftlogClient, frame_records
from raftlog.cluster import load_cluster

__all__ = ["ops_cluster"]  # the fixture, imported for pytest


def test_a_fourth_node_joins_takes_partitions_and_its_death_is_reported(
    ops_cluster: ClusterHandle,
) -> None:
    cluster = ops_cluster
    old = list(cluster.servers)
    r = run_cli(old, "local", "add-node", "--data-dir", str(cluster.data_dir), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["node_id"] == 4 and doc["address"].startswith("127.0.0.1:")
    assert doc["address"] not in old
    recorded = load_cluster(cluster.data_dir)
    assert recorded is not None
    assert [n.node_id for n in recorded.nodes] == [1, 2, 3, 4]
    assert recorded.node(4).address == doc["address"] and recorded.node(4).pid == doc["pid"]

    # every node is up, and the controller's leader hears from the new one
    def healthy() -> dict | None:
        h = run_cli(old, "cluster", "health", "--format", "json")
        report = json.loads(h.stdout)
        return report if h.returncode == 0 and len(report["nodes"]) == 4 else None

    report = wait_until(healthy, 30.0, "a healthy 4-node cluster")
    assert {n["node_id"]: n["address"] for n in report["nodes"]}[4] == doc["address"]
    leader = report["controller_leader"]
    assert "4" in node_health(recorded.node(leader).address)["last_heard_ms"]

    # a new topic is placed over the four nodes; node 4 is preferred for one partition
    with BlockingRaftlogClient(old, request_timeout_s=30.0) as client:
        client.create_topic("spread", partitions=4, replication_factor=3)
        meta = client.describe_topic("spread")
        on_new = [p.partition for p in meta.partitions if 4 in p.replicas]
        assert len(on_new) == 3
        led_by_new = next(p.partition for p in meta.partitions if p.replicas[0] == 4)
        wait_until(
            lambda: client.describe_topic("spread").partitions[led_by_new].leader == 4,
            30.0,
            "node 4 to lead its preferred partition",
        )
        written: dict[int, list[bytes]] = {p: [] for p in range(4)}
        for p in range(4):
            records = [f"{p}-{i}".encode() for i in range(50)]
            client.produce("spread", p, [(frame_records(records), len(records))], acks="all")
            written[p] += records
        for p in on_new:
            assert (cluster.data_dir / "node-4" / "partitions" / "spread" / str(p)).is_dir()

        # node 4 dies: health names it, with a nonzero exit
        cluster.cluster.nodes[:] = recorded.nodes  # the handle kills by its own record
        cluster.kill(4)
        down = run_cli(old, "cluster", "health", "--format", "json")
        assert down.returncode == 1, down.stdout
        report = json.loads(down.stdout)
        assert [n["node_id"] for n in report["nodes"] if not n["up"]] == [4]
        assert sorted(
            (p["topic"], p["partition"])
            for p in report["under_replicated_partitions"]
            if p["topic"] == "spread"
        ) == [("spread", p) for p in on_new]

        # the partition it led elects another leader; writes go on everywhere
        for p in range(4):
            records = [f"{p}-after-{i}".encode() for i in range(20)]
            client.produce("spread", p, [(frame_records(records), len(records))], acks="all")
            written[p] += records
        for p in range(4):
            assert read_partition(client, "spread", p) == written[p]
