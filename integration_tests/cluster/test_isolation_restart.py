"""Issue 44 item 4 across restarts on a real 3-node cluster: a node started on a data
directory of the old layout (``<topic>/<partition>`` at the top) moves its partitions
under ``partitions/`` and keeps their logs (the same files, not refetched); the
coordinator's ``__transactions`` log drops completed transactions' records (its log
start advances) while an open transaction's state survives, also a restart."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from ops_helpers import node_health, node_health_once_up, read_partition, wait_until

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import BlockingRaftlogClient, frame_records
from raftlog.client.coordinator import CoordinatorClient
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.rpc.messages import Participant
from raftlog.storage import identity


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private cluster (the tests restart its nodes); every node stopped by PID."""
    with running_cluster(
        tmp_path / "cluster",
        # small coordinator segments: retention has closed ones to drop within a test
        extra_args=[
            "--retention-check-interval-ms",
            "200",
            "--transaction-state-log-segment-bytes",
            "4096",
        ],
    ) as handle:
        yield handle


def _segments(d: pathlib.Path) -> dict[str, int]:
    """Each segment file of a log directory -> its inode (a refetched log has new ones)."""
    return {p.name: p.stat().st_ino for p in sorted(d.glob("*.log"))}


def test_a_node_on_the_old_layout_moves_its_partitions_and_keeps_their_logs(cluster) -> None:
    node = 3
    home = cluster.data_dir / f"node-{node}"
    values = [f"kept-{i}".encode() for i in range(60)]
    with BlockingRaftlogClient(cluster.servers, request_timeout_s=60.0) as client:
        client.create_topic("kept", partitions=1)
        client.create_topic("node_id", partitions=1)  # fine in the new layout only
        for i in range(0, len(values), 10):
            chunk = values[i : i + 10]
            client.produce("kept", 0, [(frame_records(chunk), len(chunk))])
        new = identity.partition_dir(home, "kept", 0)
        wait_until(lambda: _segments(new), 30, "node 3's replica of kept/0")
        wait_until(
            lambda: node_health(cluster.address(node)).get("groups", 0) >= 2, 30, "node 3 groups"
        )
        cluster.kill(node)
        before = _segments(new)
        # back to the old layout: every topic directory at the top of the data directory
        # (the topic named node_id cannot be there: it is the marker's name; dropped)
        root = identity.partitions_root(home)
        for topic in list(root.iterdir()):
            if topic.name == "node_id":
                continue
            topic.rename(home / topic.name)
        for leftover in sorted(root.rglob("*"), reverse=True):
            leftover.unlink() if leftover.is_file() else leftover.rmdir()
        root.rmdir()
        assert (home / "kept" / "0").is_dir() and not root.exists()

        cluster.restart(node)
        wait_until(lambda: not (home / "kept").exists(), 30, "the old layout moved")
        assert _segments(new) == before  # the same files: moved, not refetched
        assert identity.moved_aside(home) == []
        wait_until(
            lambda: node_health_once_up(cluster.address(node)).get("groups", 0) >= 2,
            60,
            "node 3 reopening",
        )
        assert node_health(cluster.address(node))["open_failures"] == []
        client.call(lambda c: c.transfer_leadership("kept", 0, node))
        assert read_partition(client, "kept", 0) == values  # served by node 3


def _coordinator(client: BlockingRaftlogClient, call: Any) -> Any:
    return client.call(lambda c: call(CoordinatorClient(c)))


def test_completed_transactions_leave_the_coordinators_log_and_open_ones_survive(
    cluster,
) -> None:
    with BlockingRaftlogClient(cluster.servers, request_timeout_s=60.0) as client:
        client.call(lambda c: c.create_topic(TRANSACTIONS_TOPIC, 1))
        # a real open transaction of producer 7 on events/0: the one registered below
        client.create_topic("events", partitions=1, replication_factor=3)
        session = client.init_producer("events", 0, 7)
        client.produce(
            "events",
            0,
            [(frame_records([b"x"]), 1)],
            producer_id=7,
            producer_epoch=session.epoch,
            first_sequence=0,
            transactional=True,
        )
        participant = Participant(
            "attempt-0", "run-0", "events", 0, 7, session.epoch, records=1, last_sequence=0
        )
        reply = _coordinator(client, lambda k: k.register("open", 0, participant))
        assert reply.status == "registered"
        for version in range(200):
            done = _coordinator(client, lambda k, v=version: k.end_txn("w", v, "run-0", True, []))
            assert done.status == "committed" and done.decision.complete
        start = wait_until(
            lambda: client.list_offsets(TRANSACTIONS_TOPIC, 0)[0] > 100,
            60,
            "the __transactions log start advancing past completed transactions",
        )
        assert start
        # the leader restarts: its state comes back from the snapshot and the log after it
        leader = client.describe_topic(TRANSACTIONS_TOPIC).partitions[0].leader
        cluster.kill(leader)
        cluster.restart(leader)
        # the open transaction's registration survived: its commit names it
        decided = _coordinator(client, lambda k: k.end_txn("open", 0, "run-0", True, [participant]))
        assert decided.status == "committed"
        assert [p.producer_id for p in decided.decision.named] == [7]
        # the coordinator wrote its marker before answering: nothing is pending
        assert _coordinator(client, lambda k: k.describe_writer("open")).pending == []
        assert read_partition(client, "events", 0) == [b"x"]
        # a new transaction completes
        new = _coordinator(client, lambda k: k.end_txn("w", 200, "run-0", True, []))
        assert new.status == "committed"
        described = _coordinator(client, lambda k: k.describe_writer("w"))
        assert (described.last_committed, described.pending) == (200, [])
