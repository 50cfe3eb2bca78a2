"""The controller group's state machine: topics, partitions, placement, schemas.

As in Redpanda, cluster metadata is itself a Raft group (group 0) over every
node. Commands are CONTROLLER batches in that group's log; every replica
applies them in log order, so every node derives the same topic table.
"""

from raftlog.controller.commands import (
    CONTROLLER_GROUP,
    AlterTopicConfigCmd,
    BalanceLeaderCmd,
    CompleteMoveCmd,
    CreatePartitionsCmd,
    CreateTopicCmd,
    DecommissionNodeCmd,
    DeleteTopicCmd,
    MovePartitionCmd,
    PartitionAssignment,
    PreferReplicaCmd,
    RegisterNodeCmd,
    RemoveNodeCmd,
    TopicAssignment,
    colliding_topic,
    command_batch,
    config_values,
    decode_command,
    validate_topic_name,
)
from raftlog.controller.placement import place_partitions
from raftlog.controller.stm import ControllerStm

__all__ = [
    "CONTROLLER_GROUP",
    "AlterTopicConfigCmd",
    "BalanceLeaderCmd",
    "CompleteMoveCmd",
    "ControllerStm",
    "CreatePartitionsCmd",
    "CreateTopicCmd",
    "DecommissionNodeCmd",
    "DeleteTopicCmd",
    "MovePartitionCmd",
    "PartitionAssignment",
    "PreferReplicaCmd",
    "RegisterNodeCmd",
    "RemoveNodeCmd",
    "TopicAssignment",
    "colliding_topic",
    "command_batch",
    "config_values",
    "decode_command",
    "place_partitions",
    "validate_topic_name",
]
