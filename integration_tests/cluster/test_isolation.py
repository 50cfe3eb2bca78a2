"""Issue 44 item 4 on a real 3-node cluster: one bad thing never stops the rest.

- topics named like a node's own files (``node_id``, ``_controller``, ``partitions``)
  open and serve on every node, and so do topics created after them;
- a replica that cannot open on one node is reported by ``cluster health`` (node,
  topic/partition, error) and retried: the node opens every other group meanwhile,
  and opens that one without a restart once it is fixed;
- a malformed coordinator command is refused (INVALID_REQUEST naming the field)
  before anything is written to ``__transactions``;
- an explicit replication factor above the node count is refused; the default is
  capped at it;
- a deleted topic's replicas are deleted from every node's disk after
  ``--file-delete-delay-ms`` (other moved-aside directories are kept).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator

import pytest
from ops_helpers import node_health, read_partition, run_cli, wait_until

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import (
    BlockingRaftlogClient,
    InvalidReplicationFactorError,
    InvalidRequestError,
    frame_records,
)
from raftlog.client.coordinator import CoordinatorClient
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.rpc.messages import (
    CoordinatorEndTxnRequest,
    CoordinatorEndTxnResponse,
    Participant,
    RegisterParticipantRequest,
)
from raftlog.storage import identity

DELETE_DELAY_MS = 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A 3-node cluster deleting deleted topics' replicas after 1 s; stopped by PID."""
    with running_cluster(
        tmp_path_factory.mktemp("isolation") / "cluster",
        extra_args=["--file-delete-delay-ms", str(DELETE_DELAY_MS)],
    ) as handle:
        yield handle


@pytest.fixture
def client(cluster: ClusterHandle) -> Iterator[BlockingRaftlogClient]:
    with BlockingRaftlogClient(cluster.servers, request_timeout_s=60.0) as c:
        yield c


def _node_dir(cluster: ClusterHandle, node: int) -> pathlib.Path:
    return cluster.data_dir / f"node-{node}"


def _write_and_read(client: BlockingRaftlogClient, topic: str, partitions: int) -> None:
    """Produce to every partition of ``topic`` and read it all back (every leader serves)."""
    for p in range(partitions):
        values = [f"{topic}/{p}/{i}".encode() for i in range(5)]
        client.produce(topic, p, [(frame_records(values), len(values))])
        assert read_partition(client, topic, p)[-len(values) :] == values


def _hosted(cluster: ClusterHandle, node: int, topic: str, partition: int) -> bool:
    d = identity.partition_dir(_node_dir(cluster, node), topic, partition)
    return identity.read_marker(d, identity.GROUP_MARKER) is not None


def test_topics_named_like_a_nodes_files_serve_and_so_do_later_ones(cluster, client) -> None:
    names = ["node_id", "_controller", "partitions", "group_id", "later.topic"]
    for name in names:
        client.create_topic(name, partitions=3)
        _write_and_read(client, name, 3)
    for node in (1, 2, 3):
        d = _node_dir(cluster, node)
        assert identity.read_marker(d, identity.NODE_MARKER) == str(node)
        for name in names:
            wait_until(
                lambda n=node, t=name: all(_hosted(cluster, n, t, p) for p in range(3)),
                30,
                f"node {node} opening every partition of {name}",
            )
        assert node_health(cluster.address(node))["open_failures"] == []


@pytest.mark.parametrize(
    ("name", "why"),
    [(".", "invalid topic name"), ("..", "invalid topic name"), ("a/b", "invalid topic name")],
)
def test_names_that_escape_the_directory_are_refused_by_the_cli(cluster, name, why) -> None:
    r = run_cli(cluster.servers, "topic", "create", name)
    assert r.returncode != 0
    assert why in r.stderr and "expected 1-249 characters" in r.stderr


def test_a_name_differing_only_in_dot_vs_underscore_is_refused(cluster, client) -> None:
    client.create_topic("metrics_a", partitions=1)
    with pytest.raises(InvalidRequestError, match="collides with the existing topic 'metrics_a'"):
        client.create_topic("metrics.a", partitions=1)


def test_a_replica_that_cannot_open_is_reported_retried_and_never_stops_the_rest(
    cluster, client
) -> None:
    client.create_topic("opened-before", partitions=3)
    victim = 2
    # a file where node 2's directory for topic 'unopenable' must go: its replica
    # there cannot open (NotADirectoryError / FileExistsError) until the file is gone
    blocker = identity.partitions_root(_node_dir(cluster, victim)) / "unopenable"
    blocker.write_bytes(b"in the way")
    client.create_topic("unopenable", partitions=1)
    client.create_topic("opened-after", partitions=3)
    for topic in ("opened-before", "opened-after"):
        wait_until(
            lambda t=topic: all(_hosted(cluster, victim, t, p) for p in range(3)),
            30,
            f"node {victim} opening {topic}",
        )
        _write_and_read(client, topic, 3)
    # node 2 serves: it leads one of opened-after's partitions after a transfer there
    client.call(lambda c: c.transfer_leadership("opened-after", 0, victim))
    _write_and_read(client, "opened-after", 1)
    # the healthy majority of 'unopenable' serves too
    _write_and_read(client, "unopenable", 1)

    def reported() -> dict | None:
        r = run_cli(cluster.servers, "cluster", "health", "--format", "json")
        doc = json.loads(r.stdout)
        return doc if r.returncode == 1 and doc["unopened_replicas"] else None

    doc = wait_until(reported, 30, "cluster health reporting the unopened replica")
    (u,) = doc["unopened_replicas"]
    assert (u["node"], u["topic"], u["partition"]) == (victim, "unopenable", 0)
    assert "Error" in u["error"] and str(blocker) in u["error"], u
    assert any("node 2 failed to open its replica of unopenable/0" in p for p in doc["problems"])
    text = run_cli(cluster.servers, "cluster", "health")
    assert text.returncode == 1
    assert "unopened replicas: 1" in text.stdout
    assert "unopenable/0  node 2  failed to open" in text.stdout
    first = u["attempts"]
    wait_until(
        lambda: node_health(cluster.address(victim))["open_failures"][0]["attempts"] > first,
        30,
        "another attempt (retried with backoff)",
    )

    blocker.unlink()  # fixed: opened by the next attempt, no restart
    wait_until(lambda: _hosted(cluster, victim, "unopenable", 0), 60, "the replica opening")
    wait_until(
        lambda: run_cli(cluster.servers, "cluster", "health").returncode == 0,
        60,
        "the cluster healthy again",
    )
    assert node_health(cluster.address(victim))["open_failures"] == []
    client.call(lambda c: c.transfer_leadership("unopenable", 0, victim))
    _write_and_read(client, "unopenable", 1)


def _transactions_end(client: BlockingRaftlogClient) -> int:
    return client.list_offsets(TRANSACTIONS_TOPIC, 0)[1]


def _raw_call(client: BlockingRaftlogClient, req: object) -> object:
    return client.call(
        lambda c: c.partition_call(TRANSACTIONS_TOPIC, 0, req, CoordinatorEndTxnResponse)
    )


def _participant(**fields: object) -> Participant:
    base: dict[str, object] = dict(
        attempt="a", run="r", topic="t", partition=0, producer_id=7, epoch=0
    )
    return Participant(**{**base, **fields})  # type: ignore[arg-type]


def _end_txn(**fields: object) -> CoordinatorEndTxnRequest:
    base: dict[str, object] = dict(
        partition=0, writer="w", version=1, run="r", commit=True, participants=[]
    )
    return CoordinatorEndTxnRequest(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (_end_txn(writer="y" * (4 << 20)), "writer: expected a string of 1..256"),
        (_end_txn(writer=""), "writer: expected a string of 1..256"),
        (_end_txn(version=-1), "version: -1 is out of range"),
        (_end_txn(participants=[_participant(epoch=1 << 15)]), "epoch: 32768 is out of range"),
        (_end_txn(participants=[_participant(partition=-1)]), "partition: -1 is out of range"),
        (_end_txn(participants=[_participant(attempt="")]), "attempt: expected a string of 1..256"),
        (_end_txn(participants=[_participant(run="x" * 300)]), "run: expected a string"),
        (
            RegisterParticipantRequest(0, "w", 1, _participant(topic="")),
            "topic: expected a string of 1..256",
        ),
    ],
    ids=["4MB", "empty-writer", "version-range", "epoch-range", "partition-range",
         "empty-attempt", "long-run", "register-empty-topic"],
)  # fmt: skip
def test_a_bad_coordinator_command_is_refused_before_it_is_written(client, request_, named) -> None:
    client.call(lambda c: CoordinatorClient(c).describe_writer("w"))  # the topic exists
    before = _transactions_end(client)
    for _ in range(3):
        with pytest.raises(InvalidRequestError) as err:
            _raw_call(client, request_)
        assert named in str(err.value)
    assert _transactions_end(client) == before  # nothing written
    # a good call still goes through, and is written (a read goes through the log)
    reply = client.call(lambda c: CoordinatorClient(c).describe_writer("w"))
    assert reply.last_committed == -1
    assert _transactions_end(client) > before


def test_an_explicit_replication_factor_above_the_node_count_is_refused(cluster, client) -> None:
    r = run_cli(cluster.servers, "topic", "create", "too-wide", "--replication-factor", "4")
    assert r.returncode != 0
    assert "--replication-factor" in r.stderr and "3 node(s)" in r.stderr, r.stderr
    with pytest.raises(InvalidReplicationFactorError, match=r"replication_factor .*3 node\(s\)"):
        client.create_topic("too-wide", partitions=1, replication_factor=4)
    assert "too-wide" not in client.list_topics()
    assert client.create_topic("defaulted", partitions=1).replication_factor == 3
    assert client.create_topic("two", partitions=1, replication_factor=2).replication_factor == 2
    ok = run_cli(cluster.servers, "topic", "create", "cli-default", "--format", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["replication_factor"] == 3


def test_the_connectors_auto_create_refuses_an_explicit_factor_and_caps_its_default(
    cluster, client
) -> None:
    import pyarrow

    from connector.options import parse_sink_options
    from connector.topics import ensure_topic

    schema = pyarrow.schema([("v", pyarrow.int64())])
    wide = parse_sink_options(
        {"topic": "sink-wide", "servers": cluster.bootstrap, "replicationFactor": "4"},
        streaming=False,
    )
    with pytest.raises(InvalidReplicationFactorError, match="3 node"):
        ensure_topic(client, wide, schema)
    default = parse_sink_options(
        {"topic": "sink-default", "servers": cluster.bootstrap}, streaming=False
    )
    ensure_topic(client, default, schema)
    assert client.describe_topic("sink-default").replication_factor == 3


def test_a_deleted_topics_replicas_leave_every_disk_after_the_delay(cluster, client) -> None:
    client.create_topic("doomed", partitions=3)
    _write_and_read(client, "doomed", 3)
    for node in (1, 2, 3):
        wait_until(
            lambda n=node: all(_hosted(cluster, n, "doomed", p) for p in range(3)),
            30,
            f"node {node} hosting doomed",
        )
    # a damaged log set aside on node 1: kept for purge-moved-aside
    kept = (
        identity.partitions_root(_node_dir(cluster, 1))
        / "doomed"
        / (f"9{identity.MOVED_ASIDE}corrupt-group-99-20260101T000000")
    )
    kept.mkdir()
    (kept / "data").write_bytes(b"kept")
    began = time.monotonic()
    client.delete_topic("doomed")

    def gone() -> bool:
        for node in (1, 2, 3):
            left = [
                p
                for p in (identity.partitions_root(_node_dir(cluster, node)) / "doomed").glob("*")
                if p != kept
            ]
            if left:
                return False
        return True

    wait_until(gone, 30, "every node deleting the deleted topic's replicas")
    assert time.monotonic() - began >= DELETE_DELAY_MS / 1000 - 1.0  # not before the delay
    assert (kept / "data").read_bytes() == b"kept"
