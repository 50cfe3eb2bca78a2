"""``group_stm``: the consumer groups' state machine on a partition of ``__consumer_offsets``.

It runs :class:`~raftlog.coordinator.offsets_state.OffsetsState` the way ``tm_stm``
runs the transaction coordinator's state: each command is one non-transactional
DATA batch of JSON, replicated at ``quorum_ack`` (Kafka's acks=all), applied in log
order on every replica, and the leader hands back the result its own apply computed.
The group coordinator (:mod:`raftlog.kafka.groups.coordinator`) writes through
:meth:`execute` with the term it loaded its groups in, so a coordinator that lost
the leadership in between appends nothing (``TermMismatchError``).

Like ``__transactions``, the topic keeps only what its state needs: the snapshot
(every group's committed offsets and last metadata) is saved with the commit
context, so closed segments below it all go.
"""

from __future__ import annotations

import json
from typing import Any

from raftlog.coordinator.offsets_state import OffsetsState
from raftlog.coordinator.tm_stm import TmStm

__all__ = ["CONSUMER_OFFSETS_PARTITIONS", "CONSUMER_OFFSETS_TOPIC", "GroupStm", "partition_for"]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
"""The internal topic whose partitions run group_stm (Kafka's name)."""

CONSUMER_OFFSETS_PARTITIONS = 8
"""Its partitions, when the first FindCoordinator creates it (Kafka's
``offsets.topic.num.partitions`` is 50: each partition here is a Raft group, so fewer;
a group never moves once placed, so the count is fixed at creation)."""


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: ``abs`` of Java's
    ``String.hashCode`` of the id (0 for the smallest int), modulo ``partitions``, as
    Kafka's ``GroupMetadataManager.partitionFor`` (so tools that compute it agree)."""
    h = 0
    for unit in _utf16_units(group_id):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


class GroupStm(TmStm):
    """The group state machine of one ``__consumer_offsets`` partition."""

    def __init__(self, consensus: Any, *, replicate_timeout_s: float = 30.0) -> None:
        super().__init__(consensus, replicate_timeout_s=replicate_timeout_s)
        # TmStm's machinery (apply, snapshots) over the groups' state, not CoordinatorState
        self.state: OffsetsState = OffsetsState()  # type: ignore[assignment]

    def encode(self, command: Any) -> bytes:
        """A group command as its log entry: canonical JSON (OffsetsState validates it
        when applied)."""
        return json.dumps(command, sort_keys=True, separators=(",", ":")).encode()

    def decode(self, payload: bytes | memoryview) -> Any:
        try:
            # bytes(): a follower's batch holds a view of the frame it came in
            return json.loads(bytes(payload))
        except ValueError:
            return None  # apply() answers with an error; the log moves on

    @property
    def term(self) -> int:
        return int(self._c.term)
