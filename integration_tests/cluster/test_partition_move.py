"""``raftlog partition move TOPIC/PARTITION --replicas ...`` on a real cluster: a fourth
node joins (``raftlog local add-node``), a partition moves onto it, away from its
leader, while a writer keeps producing; then an old node is killed, ``raftlog
cluster health`` reports it with a nonzero exit, and every acknowledged record reads
back exactly once, in order. ``raftlog cluster decommission NODE`` drains a node the
same way, under writes, and then removes it from the cluster.
"""

from __future__ import annotations

import json
import struct
import threading

import pytest
from ops_helpers import (
    assert_health_reports_down,
    node_health,
    ops_cluster,
    read_partition,
    run_cli,
    wait_until,
)

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import BlockingRaftlogClient, RaftlogError
from raftlog.cluster import add_node, load_cluster, pid_alive, start_cluster

__all__ = ["ops_cluster"]  # the fixture, imported for pytest

TOPIC = "moving"


class _Writer(threading.Thread):
    """Produces numbered records (an idempotent producer, acks=all, 5 per send) until
    stopped; keeps the numbers of every record whose send was acknowledged.

    Idempotent because the tests assert exactly once: a plain producer's client
    retries a produce whose outcome it does not know (a timeout, a leader that stepped
    down after appending), and the retry may land a second copy, as Kafka's plain
    producer may. Sequences make the leader drop that copy."""

    def __init__(self, servers: list[str]) -> None:
        super().__init__(daemon=True)
        self.servers = servers
        self.stop = threading.Event()
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.next = 0

    def run(self) -> None:
        with BlockingRaftlogClient(self.servers, request_timeout_s=20.0) as client:
            producer = client.idempotent_producer(TOPIC, 0, delivery_timeout_s=60.0)
            for _ in range(100_000):  # bounded; stopped by the test long before
                if self.stop.is_set():
                    return
                seqs = list(range(self.next, self.next + 5))
                self.next += 5
                try:
                    producer.send([struct.pack("<Q", s) for s in seqs]).result(timeout=90)
                except (RaftlogError, TimeoutError) as exc:  # not acknowledged
                    self.errors.append(str(exc))
                    # its sequence may now have a gap: a new producer starts afresh
                    producer = client.idempotent_producer(TOPIC, 0, delivery_timeout_s=60.0)
                    continue
                self.acked.extend(seqs)


def test_a_partition_moves_onto_a_new_node_under_writes_and_loses_nothing(
    ops_cluster: ClusterHandle,
) -> None:
    cluster = ops_cluster
    servers = list(cluster.servers)
    added = run_cli(servers, "local", "add-node", "--data-dir", str(cluster.data_dir))
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("node 4 127.0.0.1:")
    recorded = load_cluster(cluster.data_dir)
    assert recorded is not None
    cluster.cluster.nodes[:] = recorded.nodes  # the handle kills and stops by its record

    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=3)
        old = client.describe_topic(TOPIC).partitions[0].replicas
        assert 4 not in old
        leader = wait_until(
            lambda: max(client.describe_topic(TOPIC).partitions[0].leader, 0), 30.0, "a leader"
        )  # node ids start at 1: 0 is "none yet"
        assert leader in old
        # the new node first (the preferred leader), and the current leader leaves
        target = [4] + [n for n in old if n != leader]
        writer = _Writer(servers)
        writer.start()
        try:
            wait_until(lambda: len(writer.acked) >= 200, 30.0, "writes before the move")
            before = len(writer.acked)
            moved = run_cli(
                servers, "partition", "move", f"{TOPIC}/0",
                "--replicas", ",".join(map(str, target)), "--format", "json",
            )  # fmt: skip
            assert moved.returncode == 0, moved.stdout + moved.stderr
            assert json.loads(moved.stdout) == {
                "topic": TOPIC, "partition": 0, "replicas": target, "done": True,
            }  # fmt: skip
            during = len(writer.acked)
            # writes went on while the move ran (acknowledged between its start and end)
            assert during > before, (before, during)
            meta = client.describe_topic(TOPIC).partitions[0]
            assert meta.replicas == target
            # the preferred replica, the new node, takes the leadership
            wait_until(
                lambda: client.describe_topic(TOPIC).partitions[0].leader == 4,
                30.0,
                "node 4 to lead the moved partition",
            )
            # the node that left set its replica aside (never deletes it)
            gone = cluster.data_dir / f"node-{leader}" / "partitions" / TOPIC / "0"
            wait_until(lambda: not gone.exists(), 30.0, f"node {leader} to close its replica")
            assert list(gone.parent.glob("0.moved-aside-*"))

            # an old node that stays dies: the partition goes on with 4 and the other
            victim = target[1]
            cluster.kill(victim)
            report = assert_health_reports_down(servers, victim)
            assert any(
                p["topic"] == TOPIC and p["down_replicas"] == [victim]
                for p in report["under_replicated_partitions"]
            )
            wait_until(lambda: len(writer.acked) >= during + 200, 60.0, "writes after the kill")
        finally:
            writer.stop.set()
            writer.join(timeout=60)
        assert not writer.is_alive()
        assert writer.acked, writer.errors[-3:]

        got = [struct.unpack("<Q", r)[0] for r in read_partition(client, TOPIC, 0)]
        print(
            f"acked before the move {before}, by its end {during}, in all {len(writer.acked)}; "
            f"read back {len(got)}; writer errors {len(writer.errors)}"
        )
        assert len(got) == len(set(got)), "duplicated records"
        assert got == sorted(got), "records out of order"
        missing = set(writer.acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        # what was not acknowledged is whole requests at most, never a torn one
        assert all(s in got for s in range(0, max(got) + 1) if s // 5 in {a // 5 for a in got})


def test_partition_move_refuses_bad_targets_by_name(raftlog_cluster: ClusterHandle) -> None:
    servers = raftlog_cluster.servers
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic("stay", partitions=1, replication_factor=3, exist_ok=True)
    r = run_cli(servers, "partition", "move", "stay/0", "--replicas", "1,1,2")
    assert r.returncode == 1 and "--replicas: node(s) 1 listed twice" in r.stderr
    r = run_cli(servers, "partition", "move", "stay/0", "--replicas", "1,2,9")
    assert r.returncode == 1
    assert "--replicas: node(s) 9 are not in the cluster (nodes: 1,2,3)" in r.stderr
    r = run_cli(servers, "partition", "move", "stay/0", "--replicas", "two")
    assert r.returncode == 2 and "--replicas: expected node ids as NODE[,NODE...]" in r.stderr
    r = run_cli(servers, "partition", "move", "stay/3", "--replicas", "1,2,3")
    assert r.returncode == 1 and "topic 'stay' has no partition 3" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("which", ["a follower of the controller", "the controller's leader"])
def test_decommission_drains_a_node_under_writes_then_removes_it(
    ops_cluster: ClusterHandle, which: str
) -> None:
    cluster = ops_cluster
    servers = list(cluster.servers)
    add_node(cluster.data_dir)
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(TOPIC, partitions=4, replication_factor=3)
        controller = client.call(lambda c: c.metadata()).controller_leader
        meta = client.describe_topic(TOPIC)
        if which == "the controller's leader":
            victim = controller  # hands the controller's leadership over, then leaves
        else:  # a node that is not the controller's leader
            victim = next(n for n in (1, 2, 3, 4) if n != controller)
        held = [p.partition for p in meta.partitions if victim in p.replicas]
        writer = _Writer(servers)
        writer.start()
        try:
            wait_until(lambda: len(writer.acked) >= 200, 30.0, "writes before the draining")
            before = len(writer.acked)
            victim_node = load_cluster(cluster.data_dir).node(victim)  # type: ignore[union-attr]
            # told the local cluster's directory (the follower case), the command also
            # stops the node and drops it from cluster.json; else the node runs on
            local = which == "a follower of the controller"
            r = run_cli(
                servers, "cluster", "decommission", str(victim), "--format", "json",
                home=str(cluster.data_dir) if local else str(cluster.data_dir / "elsewhere"),
            )  # fmt: skip
            assert r.returncode == 0, r.stdout + r.stderr
            expected = {"node": victim, "removed": True, "remaining": 0}
            if local:
                expected["stopped_pid"] = victim_node.pid
            assert json.loads(r.stdout) == expected
            assert pid_alive(victim_node.pid) != local
            recorded = load_cluster(cluster.data_dir)
            assert recorded is not None
            assert (victim in [n.node_id for n in recorded.nodes]) != local
            assert len(writer.acked) > before  # writes went on while it drained
            after = len(writer.acked)
            wait_until(lambda: len(writer.acked) >= after + 100, 30.0, "writes after it")
        finally:
            writer.stop.set()
            writer.join(timeout=60)
        assert not writer.is_alive() and writer.acked

        meta = client.describe_topic(TOPIC)
        assert all(victim not in p.replicas and len(p.replicas) == 3 for p in meta.partitions)
        assert held  # it held partitions, now moved to the others
        # the cluster no longer lists it: health counts the other three, all up
        report = wait_until(
            lambda: (
                (h := run_cli(servers, "cluster", "health", "--format", "json")).returncode == 0
                and json.loads(h.stdout)
            ),
            30.0,
            "a healthy cluster without the node",
        )
        assert sorted(n["node_id"] for n in report["nodes"]) == sorted({1, 2, 3, 4} - {victim})
        if not local:
            # the node learnt it was removed: asked alone, it leaves itself out
            alone = run_cli([victim_node.address], "cluster", "health", "--format", "json")
            assert victim not in [n["node_id"] for n in json.loads(alone.stdout)["nodes"]]
        # the controller's leader no longer tracks it: it left the controller group
        leader_seen = node_health(
            load_cluster(cluster.data_dir).node(report["controller_leader"]).address
        )  # type: ignore[union-attr]
        assert str(victim) not in leader_seen["last_heard_ms"]
        # new placements leave it out; asking again answers at once
        client.create_topic("after", partitions=4, replication_factor=3)
        assert all(victim not in p.replicas for p in client.describe_topic("after").partitions)
        again = run_cli(servers, "cluster", "decommission", str(victim))
        assert again.returncode == 0 and "decommissioned" in again.stdout
        if local:
            # `local start` finds every recorded node serving: nothing to start, none down
            restarted = start_cluster(cluster.data_dir, timeout_s=30.0)
            assert restarted.started == [] and restarted.down == []

        got = [struct.unpack("<Q", r)[0] for r in read_partition(client, TOPIC, 0)]
        assert len(got) == len(set(got)) and got == sorted(got)
        assert not set(writer.acked) - set(got), "acknowledged records lost"
        if which == "the controller's leader":
            assert report["controller_leader"] != victim
    bad = run_cli(servers, "cluster", "decommission", "9")
    assert bad.returncode == 1 and "NODE: node 9 is not in the cluster (nodes: " in bad.stderr
