"""Controller commands of the operations tools: a partition's preferred replica
(``partition transfer-leadership``), new partitions of a topic (``topic
add-partitions``) and nodes that join (``local add-node``), applied the same on
every replica, kept in snapshots, and refused by name when they do not fit the
state."""

from __future__ import annotations

import pytest

from raftlog.controller import (
    CompleteMoveCmd,
    ControllerStm,
    CreatePartitionsCmd,
    CreateTopicCmd,
    DecommissionNodeCmd,
    DeleteTopicCmd,
    MovePartitionCmd,
    PreferReplicaCmd,
    RegisterNodeCmd,
    RemoveNodeCmd,
    command_batch,
)
from raftlog.controller.commands import (
    SNAPSHOT_V2_MAGIC,
    SNAPSHOT_V5_MAGIC,
    SNAPSHOT_V6_MAGIC,
    BalanceLeaderCmd,
    ControllerSnapshotV2,
    ControllerSnapshotV5,
    decode_command,
)
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError

NODES = [1, 2, 3, 4]


def _apply(stm: ControllerStm, *cmds: object) -> None:
    for cmd in cmds:
        stm.apply(command_batch(cmd).stamped(stm.last_applied + 1, 1))  # type: ignore[arg-type]


def _replicas(stm: ControllerStm, topic: str) -> list[list[int]]:
    return [p.replicas for p in stm.topics[topic].partitions]


def test_prefer_replica_moves_it_first_and_keeps_the_rest_in_order() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 2, 3, NODES))
    before = _replicas(stm, "t")
    target = before[1][2]
    _apply(stm, PreferReplicaCmd("t", 1, target))
    after = _replicas(stm, "t")
    assert after[0] == before[0]
    assert after[1] == [target, before[1][0], before[1][1]]
    assert stm.topics["t"].partitions[1].group_id == 2  # same group: only the order moved


def test_prefer_replica_that_does_not_fit_changes_nothing() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 1, 3, NODES))
    before = _replicas(stm, "t")
    outsider = next(n for n in NODES if n not in before[0])
    _apply(
        stm,
        PreferReplicaCmd("t", 0, outsider),  # not a replica
        PreferReplicaCmd("t", 5, before[0][1]),  # no such partition
        PreferReplicaCmd("nope", 0, 1),  # no such topic
    )
    assert _replicas(stm, "t") == before
    assert stm.last_applied == 3  # applied (and skipped) in log order


def test_create_partitions_grows_to_the_total_with_new_groups() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 2, 3, NODES), CreateTopicCmd("u", 1, 2, NODES))
    old = [(p.partition, p.group_id, p.replicas) for p in stm.topics["t"].partitions]
    _apply(stm, CreatePartitionsCmd("t", 5, NODES))
    parts = stm.topics["t"].partitions
    assert [(p.partition, p.group_id, p.replicas) for p in parts[:2]] == old
    assert [p.partition for p in parts] == [0, 1, 2, 3, 4]
    # new group ids after every id given so far (u's included), never reused
    assert [p.group_id for p in parts[2:]] == [4, 5, 6]
    assert all(len(p.replicas) == 3 == len(set(p.replicas)) for p in parts)
    assert {p.replicas[0] for p in parts[2:]} == {4, 1, 2}  # leaders keep rotating
    assert stm.next_group_id == 7
    # every node hosts what the placement gave it
    for node in NODES:
        hosted = stm.assignments_for(node)
        assert all(node in p.replicas for _t, p in hosted.values())


def test_create_partitions_never_shrinks_nor_adds_twice() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 3, 3, NODES))
    _apply(stm, CreatePartitionsCmd("t", 4, NODES), CreatePartitionsCmd("t", 4, NODES))
    assert len(stm.topics["t"].partitions) == 4  # the retried command added nothing
    _apply(stm, CreatePartitionsCmd("t", 2, NODES))
    assert len(stm.topics["t"].partitions) == 4
    _apply(stm, CreatePartitionsCmd("missing", 9, NODES))
    assert "missing" not in stm.topics


def test_snapshot_keeps_preferences_and_new_partitions() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 1, 3, NODES), CreatePartitionsCmd("t", 3, NODES))
    target = stm.topics["t"].partitions[2].replicas[1]
    _apply(stm, PreferReplicaCmd("t", 2, target))
    copy = ControllerStm()
    copy.restore(stm.snapshot())
    assert copy.topics == stm.topics and copy.next_group_id == stm.next_group_id
    assert copy.topics["t"].partitions[2].replicas[0] == target


def test_commands_round_trip_and_refuse_out_of_range_fields_by_name() -> None:
    for cmd in (PreferReplicaCmd("t", 3, 2), CreatePartitionsCmd("t", 8, [1, 2])):
        assert decode_command(command_batch(cmd)) == cmd
    with pytest.raises(CodecError, match=r"PreferReplicaCmd\.node: -1 is out of range"):
        codec.decode(codec.encode(PreferReplicaCmd("t", 0, -1)))
    with pytest.raises(CodecError, match=r"CreatePartitionsCmd\.partitions: 0 is out of range"):
        codec.decode(codec.encode(CreatePartitionsCmd("t", 0, [1])))


def test_registered_nodes_are_kept_in_order_and_in_snapshots() -> None:
    stm = ControllerStm()
    _apply(stm, RegisterNodeCmd(4, "127.0.0.1:9004"), RegisterNodeCmd(5, "127.0.0.1:9005"))
    _apply(stm, RegisterNodeCmd(4, "127.0.0.1:9444"))  # re-registered: its new address
    assert stm.nodes == {4: "127.0.0.1:9444", 5: "127.0.0.1:9005"}
    snap = stm.snapshot()
    assert snap.startswith(SNAPSHOT_V6_MAGIC)
    copy = ControllerStm()
    copy.restore(snap)
    assert copy.nodes == stm.nodes
    # a V2 snapshot (from before registered nodes) restores with none
    v2 = SNAPSHOT_V2_MAGIC + codec.encode(ControllerSnapshotV2(7, [], []))
    old = ControllerStm()
    old.restore(v2)
    assert old.nodes == {} and old.next_group_id == 7
    with pytest.raises(CodecError, match=r"RegisterNodeCmd\.node_id: -1 is out of range"):
        codec.decode(codec.encode(RegisterNodeCmd(-1, "x:1")))


def test_a_move_lists_the_target_first_until_it_completes() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 1, 3, [1, 2, 3]))
    assert _replicas(stm, "t") == [[1, 2, 3]]
    _apply(stm, MovePartitionCmd("t", 0, [4, 2, 3]))
    # the new node opens the group, the leaving one keeps its replica until the end
    assert _replicas(stm, "t") == [[4, 2, 3, 1]]
    assert stm.moves == {1: [4, 2, 3]}
    assert 1 in stm.assignments_for(4) and 1 in stm.assignments_for(1)
    copy = ControllerStm()
    copy.restore(stm.snapshot())
    assert copy.moves == stm.moves and copy.topics == stm.topics
    _apply(stm, CompleteMoveCmd("t", 0, [4, 2]))  # not the target: nothing ends
    assert stm.moves == {1: [4, 2, 3]}
    _apply(stm, CompleteMoveCmd("t", 0, [4, 2, 3]))
    assert _replicas(stm, "t") == [[4, 2, 3]] and stm.moves == {}
    assert 1 not in stm.assignments_for(1)  # the node that left closes its replica
    _apply(stm, CompleteMoveCmd("t", 0, [4, 2, 3]))  # repeated: changes nothing
    assert _replicas(stm, "t") == [[4, 2, 3]]


def test_a_bad_move_changes_nothing_and_a_deleted_topic_ends_its_move() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 1, 3, [1, 2, 3]))
    _apply(stm, MovePartitionCmd("t", 0, []), MovePartitionCmd("t", 0, [2, 2]))
    _apply(stm, MovePartitionCmd("t", 4, [1]), MovePartitionCmd("u", 0, [1]))
    assert _replicas(stm, "t") == [[1, 2, 3]] and stm.moves == {}
    _apply(stm, MovePartitionCmd("t", 0, [1, 2, 4]))
    _apply(stm, DeleteTopicCmd("t"))
    assert stm.moves == {} and "t" not in stm.topics


def test_decommissioning_then_removed_nodes_are_kept_in_snapshots() -> None:
    stm = ControllerStm()
    _apply(stm, DecommissionNodeCmd(2))
    assert stm.decommissioning == {2} and stm.removed == set()
    copy = ControllerStm()
    copy.restore(stm.snapshot())
    assert copy.decommissioning == {2}
    _apply(stm, RemoveNodeCmd(2), DecommissionNodeCmd(2))  # a late repeat: stays removed
    assert stm.decommissioning == set() and stm.removed == {2}
    copy = ControllerStm()
    copy.restore(stm.snapshot())
    assert copy.removed == {2} and copy.decommissioning == set()


def _apply_at(stm: ControllerStm, cmd: object, at_ms: int) -> None:
    batch = command_batch(cmd)  # type: ignore[arg-type]
    batch = type(batch).create(batch.payload, 1, kind=batch.kind, timestamp_ms=at_ms)
    stm.apply(batch.stamped(stm.last_applied + 1, 1))


def test_a_users_preference_pins_the_partition_and_the_balancers_does_not() -> None:
    stm = ControllerStm()
    _apply(stm, CreateTopicCmd("t", 3, 3, NODES))
    before = _replicas(stm, "t")
    _apply_at(stm, PreferReplicaCmd("t", 0, before[0][1]), 1_000)
    _apply_at(stm, BalanceLeaderCmd("t", 1, before[1][2]), 2_000)
    after = _replicas(stm, "t")
    # both reorder the replicas the same way; only the user's choice is a pin
    assert after[0] == [before[0][1], before[0][0], before[0][2]]
    assert after[1] == [before[1][2], before[1][0], before[1][1]]
    assert stm.pinned == {1: 1_000}
    # the balancer changing a pinned partition later keeps the pin's time
    _apply_at(stm, BalanceLeaderCmd("t", 0, before[0][2]), 3_000)
    assert stm.pinned == {1: 1_000}
    # a preference that does not fit pins nothing
    _apply_at(stm, PreferReplicaCmd("t", 2, 99), 4_000)
    assert stm.pinned == {1: 1_000}
    _apply_at(stm, PreferReplicaCmd("t", 2, before[2][1]), 5_000)
    assert stm.pinned == {1: 1_000, 3: 5_000}

    snap = stm.snapshot()
    assert snap.startswith(SNAPSHOT_V6_MAGIC)
    copy = ControllerStm()
    copy.restore(snap)
    assert copy.pinned == stm.pinned and copy.topics == stm.topics
    # deleting the topic drops its pins (in snapshots too)
    _apply(stm, DeleteTopicCmd("t"))
    assert stm.pinned == {}
    # a V5 snapshot (from before pins) restores with none
    v5 = SNAPSHOT_V5_MAGIC + codec.encode(ControllerSnapshotV5(7, [], [], [], [], [], []))
    old = ControllerStm()
    old.restore(v5)
    assert old.pinned == {} and old.next_group_id == 7
    assert decode_command(command_batch(BalanceLeaderCmd("t", 1, 2))) == BalanceLeaderCmd("t", 1, 2)
