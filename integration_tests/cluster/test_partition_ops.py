"""``raftlog partition transfer-leadership TOPIC/PARTITION --to NODE`` and ``raftlog
topic add-partitions NAME --partitions N`` on a real 3-node cluster: the leader
becomes NODE and stays, new partitions take writes and read them back, and bad input
is refused naming the flag.
"""

from __future__ import annotations

import json
import time
import uuid

from ops_helpers import read_partition, run_cli

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import BlockingRaftlogClient, frame_records


def _leader(client: BlockingRaftlogClient, topic: str, partition: int) -> int:
    return client.describe_topic(topic).partitions[partition].leader


def _wait_leader(client: BlockingRaftlogClient, topic: str, partition: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leader = _leader(client, topic, partition)
        if leader >= 0:
            return leader
        time.sleep(0.2)
    raise AssertionError(f"{topic}/{partition} elected no leader in 30 s")


def test_transfer_leadership_moves_it_to_the_node_and_keeps_it_there(
    raftlog_cluster: ClusterHandle,
) -> None:
    servers = raftlog_cluster.servers
    topic = f"lead-{uuid.uuid4().hex[:8]}"
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=2, replication_factor=3)
        old = _wait_leader(client, topic, 1)
        replicas = client.describe_topic(topic).partitions[1].replicas
        target = next(r for r in replicas if r != old)
        client.produce(topic, 1, [(frame_records([b"before"]), 1)])

        r = run_cli(
            servers, "partition", "transfer-leadership", f"{topic}/1", "--to", str(target),
            "--format", "json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"topic": topic, "partition": 1, "leader": target}
        meta = client.describe_topic(topic).partitions[1]
        assert meta.leader == target
        # the controller keeps the choice: target first, the other replicas as they were
        assert meta.replicas == [target] + [n for n in replicas if n != target]
        # the balancer (every second) does not move it back to the old preferred replica
        time.sleep(3.0)
        assert _leader(client, topic, 1) == target
        # the new leader takes writes; every record reads back once, in order
        client.produce(topic, 1, [(frame_records([b"after-1", b"after-2"]), 2)])
        assert read_partition(client, topic, 1) == [b"before", b"after-1", b"after-2"]

        # already the leader: nothing to do, same answer; text output names it
        again = run_cli(
            servers, "partition", "transfer-leadership", f"{topic}/1", "--to", str(target)
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"{topic}/1: node {target} leads"

        outsider = max(replicas) + 5
        bad = run_cli(
            servers, "partition", "transfer-leadership", f"{topic}/0", "--to", str(outsider)
        )
        assert bad.returncode == 1
        assert f"--to: node {outsider} is not a replica of {topic}/0 (replicas: " in bad.stderr
        assert "Traceback" not in bad.stderr
    bad = run_cli(servers, "partition", "transfer-leadership", topic, "--to", "1")
    assert bad.returncode == 2 and "TOPIC/PARTITION: expected a topic and a partition" in bad.stderr
    bad = run_cli(servers, "partition", "transfer-leadership", f"{topic}/7", "--to", "1")
    assert bad.returncode == 1 and f"topic {topic!r} has no partition 7" in bad.stderr
    bad = run_cli(servers, "partition", "transfer-leadership", f"{topic}/0", "--to", "x")
    assert bad.returncode == 2 and "--to must be an integer >= 0" in bad.stderr


def test_add_partitions_grows_the_topic_and_new_partitions_take_writes(
    raftlog_cluster: ClusterHandle,
) -> None:
    servers = raftlog_cluster.servers
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=2, replication_factor=3)
        before = client.describe_topic(topic)
        for p in (0, 1):
            client.produce(topic, p, [(frame_records([f"old-{p}".encode()]), 1)])

        r = run_cli(
            servers, "topic", "add-partitions", topic, "--partitions", "5", "--format", "json"
        )
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["topic"] == topic and doc["partitions"] == 5
        assert [a["partition"] for a in doc["added"]] == [2, 3, 4]
        assert all(len(set(a["replicas"])) == 3 for a in doc["added"])

        # the client, whose metadata still says 2 partitions, writes to the new ones
        for p in (2, 3, 4):
            client.produce(
                topic, p, [(frame_records([f"new-{p}-a".encode(), f"new-{p}-b".encode()]), 2)]
            )
        meta = client.describe_topic(topic)
        assert [p.partition for p in meta.partitions] == [0, 1, 2, 3, 4]
        # the old partitions untouched, the topic the same (its id is its first group's)
        assert [p.replicas for p in meta.partitions[:2]] == [p.replicas for p in before.partitions]
        assert meta.topic_id == before.topic_id
        for p in (0, 1):
            assert read_partition(client, topic, p) == [f"old-{p}".encode()]
        for p in (2, 3, 4):
            assert read_partition(client, topic, p) == [
                f"new-{p}-a".encode(),
                f"new-{p}-b".encode(),
            ]
            # every replica of a new partition opened its group on its node
            for node in meta.partitions[p].replicas:
                assert (
                    raftlog_cluster.data_dir / f"node-{node}" / "partitions" / topic / str(p)
                ).is_dir()

    same = run_cli(servers, "topic", "add-partitions", topic, "--partitions", "5")
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith(f"topic {topic}: 5 partitions (0 added)")
    fewer = run_cli(servers, "topic", "add-partitions", topic, "--partitions", "3")
    assert fewer.returncode == 1
    assert (
        f"--partitions: topic {topic!r} has 5 partitions and a count can only grow; "
        "3 would remove some" in fewer.stderr
    )
    assert "Traceback" not in fewer.stderr
    bad = run_cli(servers, "topic", "add-partitions", topic, "--partitions", "0")
    assert bad.returncode == 2 and "--partitions: expected an integer >= 1, got 0" in bad.stderr
    missing = run_cli(servers, "topic", "add-partitions", f"{topic}-none", "--partitions", "4")
    assert missing.returncode == 1 and "unknown topic" in missing.stderr
