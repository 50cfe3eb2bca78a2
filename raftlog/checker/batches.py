"""Check exactly-once *batches*: the atomic visibility of a writer's committed versions.

A writer (a streaming query, or a ``df.write`` job) writes *versions* (micro-batches);
each version is a fixed set of rows, spread over the partitions of a topic by
several task attempts, and committed or aborted as a whole by the coordinator's
two-phase commit. Every row a task attempt writes carries a value made by
:func:`row_value`: which writer, which version, which row of the version, and
which task attempt wrote it (so that two attempts' copies of one row differ as
records but share the row's identity).

A :class:`BatchHistory` records what the workload declared (the rows of each
version), which versions were committed, every *cut* a reader took (the end
offsets it chose and the rows it read below them) and the final cut, read after
the faults healed and every decision was rolled forward.

:func:`check_batches` reports, with evidence:

- **fractured_batch**: a cut (or the final read) shows some of a version's rows
  but not all of them. A reader must see a batch whole or not at all.
- **lost_batch**: a committed version whose rows are not all in the final read.
- **duplicated_row**: a row of a version is in one cut (or the final read) more
  than once (two attempts' copies, or a replay's).
- **uncommitted_batch**: rows of a version that was never committed are visible
  (an aborted decision's, or a version no decision covers).

A version counts as committed when the history says so (:meth:`BatchHistory.commit`)
or when the caller passes it in ``committed`` (for example the coordinator's
final state, which knows about commits whose driver died before hearing back).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping

from raftlog.checker.history import TopicPartition
from raftlog.checker.report import Anomaly

FRACTURED_BATCH = "fractured_batch"
LOST_BATCH = "lost_batch"
DUPLICATED_ROW = "duplicated_row"
UNCOMMITTED_BATCH = "uncommitted_batch"

#: Every kind :func:`check_batches` reports; each one fails a run.
BATCH_KINDS = (FRACTURED_BATCH, LOST_BATCH, DUPLICATED_ROW, UNCOMMITTED_BATCH)

_SEP = "|"

VersionKey = tuple[str, int]
"""(writer id, version)."""
RowKey = tuple[str, int, int]
"""(writer id, version, row index)."""


def row_value(writer: str, version: int, row: int, attempt: str) -> str:
    """The record value of row ``row`` of ``writer``'s ``version`` as ``attempt`` wrote it.

    ``writer`` and ``attempt`` must not contain ``|``; ``version`` and ``row`` are >= 0.
    """
    if _SEP in writer or _SEP in attempt:
        raise ValueError(f"writer and attempt must not contain {_SEP!r}: {writer!r}, {attempt!r}")
    if version < 0 or row < 0:
        raise ValueError(f"version and row must be >= 0, got {version}, {row}")
    return f"{writer}{_SEP}{version}{_SEP}{row}{_SEP}{attempt}"


def parse_row_value(value: str) -> tuple[RowKey, str]:
    """``((writer, version, row), attempt)`` of a :func:`row_value`; ValueError otherwise."""
    parts = value.split(_SEP)
    if len(parts) != 4:
        raise ValueError(f"not a batch row value: {value!r}")
    writer, version, row, attempt = parts
    return (writer, int(version), int(row)), attempt


@dataclasses.dataclass(frozen=True, slots=True)
class Cut:
    """One reader's cut: the end offset it chose per partition, and the records it read
    below them (``(topic partition, offset, value)``), at virtual or real ``time``."""

    cut_id: int
    process: str
    time: float
    ends: Mapping[TopicPartition, int]
    records: tuple[tuple[TopicPartition, int, str], ...]


@dataclasses.dataclass(slots=True)
class BatchHistory:
    """What a run of exactly-once writers and cut-taking readers did (see the module doc).

    Not thread-safe: record from one event loop.
    """

    rows: dict[VersionKey, int] = dataclasses.field(default_factory=dict)
    committed: dict[VersionKey, str] = dataclasses.field(default_factory=dict)  # -> run
    cuts: list[Cut] = dataclasses.field(default_factory=list)
    final: Cut | None = None
    _ids: int = 0

    def declare(self, writer: str, version: int, rows: int) -> None:
        """Version ``version`` of ``writer`` holds rows ``0..rows-1`` (the same on a replay)."""
        known = self.rows.setdefault((writer, version), rows)
        if known != rows:
            raise ValueError(
                f"writer {writer!r} version {version} was declared with {known} rows, "
                f"now {rows}: a replay must hold the same rows"
            )

    def commit(self, writer: str, version: int, run: str) -> None:
        """The driver of ``run`` was told that ``version`` is committed."""
        self.committed.setdefault((writer, version), run)

    def cut(
        self,
        process: str,
        time: float,
        ends: Mapping[TopicPartition, int],
        records: Iterable[tuple[TopicPartition, int, str]],
        *,
        final: bool = False,
    ) -> Cut:
        """Record a cut (``final``: the read after healing, checked for lost batches)."""
        c = Cut(self._ids, process, time, dict(ends), tuple(records))
        self._ids += 1
        if final:
            self.final = c
        else:
            self.cuts.append(c)
        return c


@dataclasses.dataclass(frozen=True, slots=True)
class BatchReport:
    """What :func:`check_batches` found; ``anomalies`` maps each of :data:`BATCH_KINDS`."""

    versions: int
    versions_committed: int
    cuts: int
    rows_in_final_read: int
    anomalies: dict[str, tuple[Anomaly, ...]]

    def count(self, kind: str) -> int:
        return len(self.anomalies.get(kind, ()))

    @property
    def ok(self) -> bool:
        return all(self.count(kind) == 0 for kind in BATCH_KINDS)

    def counts(self) -> dict[str, int]:
        out = {
            "versions": self.versions,
            "versions_committed": self.versions_committed,
            "cuts": self.cuts,
            "rows_in_final_read": self.rows_in_final_read,
        }
        out.update({kind: self.count(kind) for kind in BATCH_KINDS})
        return out

    def render(self, max_examples: int = 3) -> str:
        lines = [
            f"batch checker: {'OK' if self.ok else 'FAILED'}",
            f"  versions {self.versions} (committed {self.versions_committed}), cuts {self.cuts}, "
            f"rows in the final read {self.rows_in_final_read}",
            "  " + ", ".join(f"{kind} {self.count(kind)}" for kind in BATCH_KINDS),
        ]
        for kind in BATCH_KINDS:
            found = self.anomalies.get(kind, ())
            lines += [f"    {a.render()}" for a in found[:max_examples]]
            if len(found) > max_examples:
                lines.append(f"    ... and {len(found) - max_examples} more {kind}")
        return "\n".join(lines)


def check_batches(history: BatchHistory, committed: Iterable[VersionKey] = ()) -> BatchReport:
    """Check every cut of ``history`` and its final read (see the module doc).

    ``committed`` adds versions known committed by other means (the coordinator's
    final state). A history without a final read reports no lost batch (there is
    nothing to check it against) but everything else. Raises ValueError for a
    record whose value is not a :func:`row_value`, or of an undeclared version.
    """
    done = set(history.committed) | set(committed)
    found: dict[str, list[Anomaly]] = collections.defaultdict(list)
    cuts = list(history.cuts) + ([history.final] if history.final is not None else [])
    for c in cuts:
        _check_cut(history, c, done, found)
    final_rows = 0
    if history.final is not None:
        seen: dict[VersionKey, set[int]] = collections.defaultdict(set)
        where: dict[VersionKey, TopicPartition] = {}
        for tp, _, value in history.final.records:
            (writer, version, row), _ = parse_row_value(value)
            seen[(writer, version)].add(row)
            where.setdefault((writer, version), tp)
            final_rows += 1
        for key in sorted(done):
            want = history.rows.get(key)
            if want is None:
                raise ValueError(f"committed version {key} was never declared")
            missing = [r for r in range(want) if r not in seen.get(key, ())]
            if missing:
                found[LOST_BATCH].append(
                    Anomaly(
                        LOST_BATCH,
                        where.get(key, ("", -1)),
                        None,
                        f"writer {key[0]!r} version {key[1]} is committed (by run "
                        f"{history.committed.get(key, '?')!r}) but {len(missing)} of its "
                        f"{want} rows are not in the final read (rows {missing[:5]})",
                        (history.final.cut_id,),
                    )
                )
    return BatchReport(
        versions=len(history.rows),
        versions_committed=len(done),
        cuts=len(cuts),
        rows_in_final_read=final_rows,
        anomalies={kind: tuple(found.get(kind, ())) for kind in BATCH_KINDS},
    )


def _check_cut(
    history: BatchHistory, c: Cut, committed: set[VersionKey], found: dict[str, list[Anomaly]]
) -> None:
    copies: dict[RowKey, list[tuple[TopicPartition, int, str]]] = collections.defaultdict(list)
    for tp, offset, value in c.records:
        key, attempt = parse_row_value(value)
        copies[key].append((tp, offset, attempt))
    by_version: dict[VersionKey, set[int]] = collections.defaultdict(set)
    for (writer, version, row), where in sorted(copies.items()):
        by_version[(writer, version)].add(row)
        if len(where) > 1:
            at = ", ".join(f"{tp[0]}/{tp[1]}@{o} by {a}" for tp, o, a in where)
            found[DUPLICATED_ROW].append(
                Anomaly(
                    DUPLICATED_ROW,
                    where[0][0],
                    f"{writer}{_SEP}{version}{_SEP}{row}",
                    f"cut {c.cut_id} ({c.process}) holds row {row} of writer {writer!r} "
                    f"version {version} {len(where)} times: {at}",
                    (c.cut_id,),
                )
            )
    for vkey, rows in sorted(by_version.items()):
        want = history.rows.get(vkey)
        if want is None:
            raise ValueError(f"cut {c.cut_id} holds rows of undeclared version {vkey}")
        tp = next(w[0][0] for k, w in copies.items() if k[:2] == vkey)
        if vkey not in committed:
            found[UNCOMMITTED_BATCH].append(
                Anomaly(
                    UNCOMMITTED_BATCH,
                    tp,
                    None,
                    f"cut {c.cut_id} ({c.process}) shows {len(rows)} rows of writer "
                    f"{vkey[0]!r} version {vkey[1]}, which was never committed",
                    (c.cut_id,),
                )
            )
        if len(rows) < want:
            missing = [r for r in range(want) if r not in rows]
            found[FRACTURED_BATCH].append(
                Anomaly(
                    FRACTURED_BATCH,
                    tp,
                    None,
                    f"cut {c.cut_id} ({c.process}, ends "
                    f"{ {f'{t[0]}/{t[1]}': e for t, e in sorted(c.ends.items())} }) shows "
                    f"{len(rows)} of the {want} rows of writer {vkey[0]!r} version {vkey[1]}: "
                    f"missing rows {missing[:5]}",
                    (c.cut_id,),
                )
            )
