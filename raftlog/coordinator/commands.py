"""tm_stm's commands as typed records: what the coordinator writes to its log.

Each command is a frozen dataclass registered with the wire codec
(:mod:`raftlog.rpc.codec`, ids 300-307), so a command in the log is one codec frame:
its integers are range-checked when it is decoded (a participant's partition, epoch
and producer id by :class:`~raftlog.rpc.messages.Participant`'s own ranges, a version
at >= 0, an offset at >= -1), and :func:`encode_command` checks a command the same way,
and its shape (:func:`raftlog.coordinator.state.validate_command`: string lengths,
participant counts), before anything is written.

:func:`decode_command` reads a log entry back as the dict that
:meth:`raftlog.coordinator.state.CoordinatorState.apply` takes: a codec frame, or a
JSON object as nodes wrote before commands were typed (a data directory may hold
those), told apart by the first byte (``{`` starts JSON; no id in 300-307 encodes to
it).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raftlog.coordinator.state import CommandError, validate_command
from raftlog.rpc import codec
from raftlog.rpc.codec import I64_MAX, CodecError, register
from raftlog.rpc.messages import Participant

__all__ = [
    "AbortRun",
    "AllPending",
    "Command",
    "Complete",
    "Cut",
    "Decide",
    "DeleteWriter",
    "MarkerOffset",
    "Pending",
    "Register",
    "decode_command",
    "encode_command",
]

_VERSION = {"range": (0, I64_MAX)}


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerOffset:
    """Where a participant's marker is (-1: none was needed)."""

    producer_id: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    offset: int = dataclasses.field(metadata={"range": (-1, I64_MAX)})


@register(300)
@dataclasses.dataclass(frozen=True, slots=True)
class Register:
    """Register ``participant`` for ``version`` of ``writer`` (before it writes)."""

    writer: str
    version: int = dataclasses.field(metadata=_VERSION)
    participant: Participant

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "register",
            "writer": self.writer,
            "version": self.version,
            "participant": self.participant.to_json(),
        }


@register(301)
@dataclasses.dataclass(frozen=True, slots=True)
class Decide:
    """``run`` decides ``version`` of ``writer``: commit ``named``, or abort."""

    writer: str
    version: int = dataclasses.field(metadata=_VERSION)
    run: str
    commit: bool
    named: list[Participant] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "decide",
            "writer": self.writer,
            "version": self.version,
            "run": self.run,
            "commit": self.commit,
            "named": [p.to_json() for p in self.named],
        }


@register(302)
@dataclasses.dataclass(frozen=True, slots=True)
class Complete:
    """The markers of ``run``'s decision on ``version`` of ``writer`` are durable."""

    writer: str
    version: int = dataclasses.field(metadata=_VERSION)
    run: str
    markers: list[MarkerOffset]

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "complete",
            "writer": self.writer,
            "version": self.version,
            "run": self.run,
            "markers": {str(m.producer_id): m.offset for m in self.markers},
        }


@register(303)
@dataclasses.dataclass(frozen=True, slots=True)
class AbortRun:
    """Abort what ``run`` registered for ``version`` of any writer and did not decide."""

    run: str
    version: int = dataclasses.field(metadata=_VERSION)

    def to_dict(self) -> dict[str, Any]:
        return {"op": "abort_run", "run": self.run, "version": self.version}


@register(304)
@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """``writer``'s last committed version and incomplete decisions (a read)."""

    writer: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": "pending", "writer": self.writer}


@register(305)
@dataclasses.dataclass(frozen=True, slots=True)
class AllPending:
    """Every writer's incomplete decisions (a read)."""

    def to_dict(self) -> dict[str, Any]:
        return {"op": "all_pending"}


@register(306)
@dataclasses.dataclass(frozen=True, slots=True)
class Cut:
    """The kept commit decisions with a participant on ``topic`` (a read); ``topic_id``
    -1: any incarnation."""

    topic: str
    topic_id: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"op": "cut", "topic": self.topic, "topic_id": self.topic_id}


@register(307)
@dataclasses.dataclass(frozen=True, slots=True)
class DeleteWriter:
    """Forget ``writer`` and all its transactions."""

    writer: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": "delete_writer", "writer": self.writer}


Command = Register | Decide | Complete | AbortRun | Pending | AllPending | Cut | DeleteWriter
_TYPES = (Register, Decide, Complete, AbortRun, Pending, AllPending, Cut, DeleteWriter)


def encode_command(command: Command) -> bytes:
    """``command`` as the bytes of its log entry, checked first as the log's reader will
    check it: the codec's ranges (a decode of the encoded frame) and the command's shape.
    Raises :class:`CommandError` naming the field; nothing is written then."""
    if not isinstance(command, _TYPES):
        raise CommandError(f"command: expected a tm_stm command, got {type(command).__name__}")
    try:
        frame = codec.encode(command)
        codec.decode(frame)
    except (CodecError, TypeError, ValueError, OverflowError) as exc:
        raise CommandError(f"{type(command).__name__}: {exc}") from None
    validate_command(command.to_dict())
    return frame


def decode_command(payload: bytes | memoryview) -> Any:
    """The dict a log entry's command is applied as (a codec frame, or the JSON object
    of a node that predates typed commands); None when it is neither (applying None
    answers an error, and the log moves on)."""
    data = bytes(payload)  # a follower's batch holds a view of the frame it came in
    if data[:1] == b"{":
        try:
            return json.loads(data)
        except ValueError:
            return None
    try:
        command = codec.decode(data)
    except CodecError:
        return None
    return command.to_dict() if isinstance(command, _TYPES) else None
