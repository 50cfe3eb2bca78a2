"""What a Kafka client can make a node's group coordinator hold: the limits of
:mod:`raftlog.kafka.groups.coordinator`, set by the node's ``--kafka-max-*`` flags."""

from __future__ import annotations

import dataclasses

__all__ = ["GroupLimits"]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupLimits:
    """What a Kafka client can make a coordinator hold (flags ``--kafka-max-*``)."""

    #: groups with members (or a rebalance) one node coordinates at once
    max_groups: int = 10_000
    #: members (and pending member ids) of one group: Kafka's ``group.max.size``
    max_members: int = 1000
    #: bytes of one member's protocol metadata (its subscriptions) in a JoinGroup
    max_member_metadata_bytes: int = 64 * 1024
    #: bytes of one member's assignment in the leader's SyncGroup
    max_assignment_bytes: int = 64 * 1024
    #: bytes of a committed offset's metadata: Kafka's ``offset.metadata.max.bytes``
    max_offset_metadata_bytes: int = 4096
    #: a group id's bytes (Kafka has no bound; a topic name has 249)
    max_group_id_bytes: int = 255
    #: Kafka's ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``;
    #: a rebalance timeout is capped at the latter (a JoinGroup waits at most that)
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    #: Kafka's ``group.initial.rebalance.delay.ms``
    initial_rebalance_delay_ms: int = 3000
