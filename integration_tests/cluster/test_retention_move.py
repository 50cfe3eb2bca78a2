"""Issue 17's whole scenario on a real cluster: 40 MB into a topic with
``retention.bytes`` 8 MiB leaves every node's directory under 24 MiB; a fourth
node joins (``raftlog local add-node``) and the partition moves onto it although
its log no longer starts at 0 (the new replica gets the snapshot as of the log
start installed, then the log); an old node is killed, ``raftlog cluster health``
reports it with a nonzero exit; the retained tail reads back intact, in order,
without duplicates, also from the new node as the leader.
"""

from __future__ import annotations

import json
import struct

from ops_helpers import (
    assert_health_reports_down,
    ops_cluster,
    read_partition,
    run_cli,
    wait_until,
)
from test_retention import MIB, RECORD_BYTES, RECORDS_PER_BATCH, TOTAL_BYTES, _dir_bytes, _record

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import BlockingRaftlogClient, frame_records
from raftlog.cluster import load_cluster

__all__ = ["ops_cluster"]  # the fixture, imported for pytest

TOPIC = "retained-moving"


def _produce(client: BlockingRaftlogClient, first: int, total_bytes: int) -> int:
    """Records ``first..`` (acks=all) until ``total_bytes`` more are written; the next seq."""
    seq = first
    while (seq - first) * RECORD_BYTES < total_bytes:
        records = [_record(seq + i) for i in range(RECORDS_PER_BATCH)]
        client.produce(TOPIC, 0, [(frame_records(records), len(records))], acks="all")
        seq += len(records)
    return seq


def _check_tail(client: BlockingRaftlogClient, written: int) -> list[int]:
    tail = read_partition(client, TOPIC, 0)
    seqs = [struct.unpack_from("<Q", rec)[0] for rec in tail]
    assert seqs, "nothing read back"
    assert seqs == list(range(seqs[0], written)), "the retained tail has gaps or duplicates"
    assert all(rec == _record(s) for s, rec in zip(seqs, tail, strict=True)), "damaged records"
    return seqs


def test_retention_then_move_onto_a_new_node_then_kill_an_old_one(
    ops_cluster: ClusterHandle,
) -> None:
    cluster = ops_cluster
    servers = list(cluster.servers)
    created = run_cli(
        servers, "topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "3",
        "--config", f"retention.bytes={8 * MIB}", "--config", f"segment.bytes={MIB}",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr

    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        written = _produce(client, 0, TOTAL_BYTES)
        dirs = {n.node_id: cluster.data_dir / f"node-{n.node_id}" for n in cluster.nodes}
        wait_until(
            lambda: all(_dir_bytes(d) < 24 * MIB for d in dirs.values()),
            60.0,
            "every node's directory under 24 MiB",
        )
        start, _hwm, _ = client.list_offsets(TOPIC, 0)
        assert start > 0, "retention deleted nothing"

        added = run_cli(servers, "local", "add-node", "--data-dir", str(cluster.data_dir))
        assert added.returncode == 0, added.stderr
        recorded = load_cluster(cluster.data_dir)
        assert recorded is not None
        cluster.cluster.nodes[:] = recorded.nodes  # the handle kills by its own record

        old = client.describe_topic(TOPIC).partitions[0].replicas
        leader = wait_until(
            lambda: max(client.describe_topic(TOPIC).partitions[0].leader, 0), 30.0, "a leader"
        )
        target = [4] + [n for n in old if n != leader]
        moved = run_cli(
            servers, "partition", "move", f"{TOPIC}/0",
            "--replicas", ",".join(map(str, target)), "--format", "json", timeout_s=120,
        )  # fmt: skip
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert json.loads(moved.stdout)["done"] is True
        assert client.describe_topic(TOPIC).partitions[0].replicas == target

        # the new replica's log starts where the leader's did, not at 0
        new_dir = cluster.data_dir / "node-4" / "partitions" / TOPIC / "0"
        bases = sorted(int(p.name.split("-")[0]) for p in new_dir.glob("*.log"))
        assert bases and bases[0] > 0, bases[:3]
        assert list(new_dir.glob("start-snapshot-*")), "the installed snapshot is not kept"

        written = _produce(client, written, MIB)  # writes go on with the new replica set
        victim = target[1]
        cluster.kill(victim)
        assert_health_reports_down(servers, victim)

        # node 4 leads (the preferred replica): it serves the whole retained tail
        wait_until(
            lambda: client.describe_topic(TOPIC).partitions[0].leader == 4,
            60.0,
            "node 4 to lead the moved partition",
        )
        written = _produce(client, written, MIB)
        seqs = _check_tail(client, written)
        assert len(seqs) * RECORD_BYTES >= 8 * MIB * 0.95, len(seqs)
