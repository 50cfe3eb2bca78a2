"""The consumer groups' durable state: what ``group_stm`` rebuilds from a partition of
``__consumer_offsets``.

No IO, no clock: :meth:`OffsetsState.apply` takes one command (a dict decoded from a
committed batch) and its offset, changes the state and returns the command's
result, as :class:`raftlog.coordinator.state.CoordinatorState` does for
``__transactions``. Every replica applies the same commands in the same order, so a
new leader already holds what its predecessor committed. ``apply`` never raises.

Four commands: Kafka's two record kinds of ``__consumer_offsets`` and their
tombstones:

- ``{"op": "commit", "group": G, "offsets": [[topic, partition, offset,
  leader_epoch, metadata], ...]}``: committed offsets (OffsetCommit), each replacing
  the partition's previous one;
- ``{"op": "group", "group": G, "generation": N, "protocol_type": ..., "protocol":
  ..., "leader": ..., "members": [...]}``: the group's metadata as a completed
  rebalance left it (Kafka's GroupMetadata record: each member's id, client, session
  and rebalance timeouts, subscription and assignment, bytes as base64), or an empty
  group's generation. The coordinator loads it on a leader change, so members keep
  their generation across a coordinator failover;
- ``{"op": "delete_group", "group": G}``: DeleteGroups of an empty group (Kafka's
  tombstones of its metadata and every offset): the group is gone, an OffsetFetch
  of it finds nothing committed;
- ``{"op": "delete_offsets", "group": G, "offsets": [[topic, partition], ...]}``:
  OffsetDelete (a partition without a committed offset is no error).

Kafka transactions will add a third pair (a transactional commit held per producer
id until its EndTxn marker, then moved into ``offsets`` or dropped), beside these:
nothing here assumes an offset is visible the moment its command applies but the
``commit`` op itself.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raftlog.coordinator.state import CommandError, command_error

__all__ = ["CommittedOffset", "GroupLog", "OffsetsState", "validate_offsets_command"]

_OPS = ("commit", "group", "delete_group", "delete_offsets")
_I32 = 2**31 - 1
_I63 = 2**63 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's committed position: the next offset the group reads."""

    offset: int
    leader_epoch: int
    metadata: str


@dataclasses.dataclass(slots=True)
class GroupLog:
    """A group as ``__consumer_offsets`` holds it: its committed offsets by (topic,
    partition) and its metadata record (None: only offsets were ever committed)."""

    offsets: dict[tuple[str, int], CommittedOffset] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] | None = None


class OffsetsState:
    """The groups of one ``__consumer_offsets`` partition, by group id."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupLog] = {}
        self.applied_offset = -1

    def apply(self, command: Any, offset: int) -> dict[str, Any]:
        """Apply one command at ``offset``; return its result. Never raises."""
        if offset <= self.applied_offset:
            return command_error(f"offset {offset} already applied")
        self.applied_offset = offset
        try:
            validate_offsets_command(command)
        except CommandError as exc:
            return command_error(str(exc))
        op = command["op"]
        if op == "delete_group":
            self.groups.pop(command["group"], None)
            return {"status": "ok"}
        group = self.groups.setdefault(command["group"], GroupLog())
        if op == "delete_offsets":
            for topic, partition in command["offsets"]:
                group.offsets.pop((topic, partition), None)
        elif op == "commit":
            for topic, partition, position, epoch, metadata in command["offsets"]:
                group.offsets[(topic, partition)] = CommittedOffset(position, epoch, metadata)
        else:
            group.metadata = {k: v for k, v in command.items() if k not in ("op", "group")}
        return {"status": "ok"}

    def snapshot(self) -> bytes:
        doc = {
            "applied_offset": self.applied_offset,
            "groups": {
                gid: {
                    "offsets": [
                        [t, p, o.offset, o.leader_epoch, o.metadata]
                        for (t, p), o in sorted(g.offsets.items())
                    ],
                    "metadata": g.metadata,
                }
                for gid, g in sorted(self.groups.items())
            },
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        doc = json.loads(data) if data else {"applied_offset": -1, "groups": {}}
        self.applied_offset = doc["applied_offset"]
        self.groups = {}
        for gid, g in doc["groups"].items():
            log = GroupLog(metadata=g["metadata"])
            for t, p, o, e, m in g["offsets"]:
                log.offsets[(t, p)] = CommittedOffset(o, e, m)
            self.groups[gid] = log


def validate_offsets_command(command: Any) -> None:
    """CommandError naming the field unless ``command`` is a well-formed command."""
    if not isinstance(command, dict):
        raise CommandError("command: expected a JSON object")
    op = command.get("op")
    if op not in _OPS:
        raise CommandError(f"op: expected one of {', '.join(map(repr, _OPS))}, got {op!r}")
    if not isinstance(command.get("group"), str):
        raise CommandError("group: expected the group id (a string)")
    if op == "delete_group":
        return
    if op == "delete_offsets":
        offsets = command.get("offsets")
        if not isinstance(offsets, list) or not all(
            isinstance(row, list)
            and len(row) == 2
            and isinstance(row[0], str)
            and _is_int(row[1], 0, _I32)
            for row in offsets
        ):
            raise CommandError(
                f"offsets: expected a list of [topic, partition 0..2^31-1], got {offsets!r}"[:300]
            )
        return
    if op == "commit":
        offsets = command.get("offsets")
        if not isinstance(offsets, list):
            raise CommandError("offsets: expected a list of [topic, partition, offset, epoch, md]")
        for i, row in enumerate(offsets):
            if not (
                isinstance(row, list)
                and len(row) == 5
                and isinstance(row[0], str)
                and _is_int(row[1], 0, _I32)
                and _is_int(row[2], -1, _I63)
                and _is_int(row[3], -1, _I32)
                and isinstance(row[4], str)
            ):
                raise CommandError(
                    f"offsets[{i}]: expected [topic, partition 0..2^31-1, offset -1..2^63-1, "
                    f"leader epoch -1..2^31-1, metadata string], got {row!r}"[:300]
                )
        return
    if not _is_int(command.get("generation"), -1, _I32):
        raise CommandError("generation: expected an int -1..2^31-1")
    if not isinstance(command.get("members"), list):
        raise CommandError("members: expected a list")


def _is_int(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
