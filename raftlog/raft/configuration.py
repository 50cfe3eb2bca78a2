"""Group configuration: voters, learners and voter priorities.

A configuration lives in the log as a ``BatchKind.RAFT_CONFIG`` batch whose
payload is JSON. The latest configuration in the log is effective at once,
committed or not (single-server changes: only one change is in flight, so any
two successive configurations' majorities overlap). Truncating the log below a
configuration's offset reverts to the previous one, which is why the whole
history above the commit index is kept (:class:`ConfigurationHistory`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from raftlog.storage.batch import BatchKind, RecordBatch

DEFAULT_PRIORITY = 1
MIN_PRIORITY = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Configuration:
    """Members of a group. ``voters`` and ``learners`` are disjoint, sorted tuples."""

    voters: tuple[int, ...]
    learners: tuple[int, ...] = ()
    # Node -> voting priority; higher wins elections first. Absent: DEFAULT_PRIORITY.
    priorities: Mapping[int, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        voters: Iterable[int],
        learners: Iterable[int] = (),
        priorities: Mapping[int, int] | None = None,
    ) -> Configuration:
        """A normalised configuration; raises ValueError when voters and learners overlap."""
        v = tuple(sorted(set(voters)))
        learner_set = tuple(sorted(set(learners)))
        if set(v) & set(learner_set):
            raise ValueError(f"nodes {sorted(set(v) & set(learner_set))} are voters and learners")
        return cls(v, learner_set, dict(priorities or {}))

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(sorted(self.voters + self.learners))

    def priority(self, node: int) -> int:
        return self.priorities.get(node, DEFAULT_PRIORITY)

    @property
    def max_priority(self) -> int:
        return max((self.priority(v) for v in self.voters), default=DEFAULT_PRIORITY)

    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "voters": list(self.voters),
                "learners": list(self.learners),
                "priorities": {str(k): v for k, v in sorted(self.priorities.items())},
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, payload: bytes) -> Configuration:
        """Raises ValueError naming the problem when the payload is not a configuration."""
        try:
            doc = json.loads(payload)
            return cls.of(
                [int(n) for n in doc["voters"]],
                [int(n) for n in doc.get("learners", [])],
                {int(k): int(p) for k, p in doc.get("priorities", {}).items()},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"invalid raft configuration payload {payload[:80]!r}: {exc}") from exc

    def to_batch(self) -> RecordBatch:
        """An unplaced RAFT_CONFIG batch (the leader stamps offset and term)."""
        return RecordBatch.create(self.encode(), kind=BatchKind.RAFT_CONFIG, timestamp_ms=0)

    def with_learner(self, node: int) -> Configuration:
        return Configuration.of(self.voters, (*self.learners, node), self.priorities)

    def with_voter(self, node: int) -> Configuration:
        """``node`` as a voter (promoting it when it is a learner)."""
        learners = [n for n in self.learners if n != node]
        return Configuration.of((*self.voters, node), learners, self.priorities)

    def without(self, node: int) -> Configuration:
        return Configuration.of(
            [n for n in self.voters if n != node],
            [n for n in self.learners if n != node],
            {k: p for k, p in self.priorities.items() if k != node},
        )


class ConfigurationHistory:
    """Configurations by the offset of the batch that carries them.

    The initial configuration sits at offset -1 and is never truncated.
    Invariant: offsets strictly increase along the history.
    """

    def __init__(self, initial: Configuration) -> None:
        self._entries: list[tuple[int, Configuration]] = [(-1, initial)]

    @property
    def latest(self) -> Configuration:
        return self._entries[-1][1]

    @property
    def latest_offset(self) -> int:
        return self._entries[-1][0]

    def at(self, offset: int) -> tuple[int, Configuration]:
        """The configuration effective at ``offset`` and the offset that carries it."""
        for entry_offset, config in reversed(self._entries):
            if entry_offset <= offset:
                return entry_offset, config
        return self._entries[0]

    def add(self, offset: int, config: Configuration) -> None:
        if offset <= self._entries[-1][0]:
            raise ValueError(
                f"configuration at offset {offset} is not after offset {self._entries[-1][0]}"
            )
        self._entries.append((offset, config))

    def observe(self, batches: Iterable[RecordBatch]) -> bool:
        """Add every RAFT_CONFIG batch among ``batches``; True when any was added."""
        added = False
        for b in batches:
            if b.kind is BatchKind.RAFT_CONFIG and b.base_offset > self.latest_offset:
                # bytes() of a control batch's payload is the payload itself (it is bytes, see
                # RecordBatch); json.loads reads no memoryview
                self.add(b.base_offset, Configuration.decode(bytes(b.payload)))
                added = True
        return added

    def truncate(self, offset: int) -> bool:
        """Forget configurations at or after ``offset``; True when the latest changed."""
        before = len(self._entries)
        while len(self._entries) > 1 and self._entries[-1][0] >= offset:
            self._entries.pop()
        return len(self._entries) != before

    def restart(self, offset: int, config: Configuration) -> None:
        """Forget everything but the initial entry and the configuration ``config``
        effective from ``offset`` (a snapshot installed; ``offset < 0``: it replaces
        the initial one)."""
        if offset < 0:
            self._entries = [(-1, config)]
        else:
            self._entries = [self._entries[0], (offset, config)]
