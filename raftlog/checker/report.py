"""The checker's verdict: counts, examples of each anomaly, and a short text rendering."""

from __future__ import annotations

import dataclasses

from raftlog.checker.history import TopicPartition

LOST = "lost"
DUPLICATED = "duplicated"
INCONSISTENT = "inconsistent"
FAILED_VISIBLE = "failed_visible"
ORDER = "order"
NONMONOTONIC = "nonmonotonic"

#: Anomaly kinds that make a run fail. Non-monotonic reads are reported but do not
#: fail a run: a new leader's high watermark may briefly lag the old leader's (as
#: in Kafka), so a reader that follows a leader change can see it step back.
FATAL_KINDS = (LOST, DUPLICATED, INCONSISTENT, FAILED_VISIBLE, ORDER)


@dataclasses.dataclass(frozen=True, slots=True)
class Anomaly:
    """One finding: its kind, where, which value (when one is involved), and the evidence.

    ``op_ids`` are the operations whose results show it (for replaying the history).
    """

    kind: str
    tp: TopicPartition
    value: str | None
    detail: str
    op_ids: tuple[int, ...] = ()

    def render(self) -> str:
        where = f"{self.tp[0]}/{self.tp[1]}"
        value = f" value {self.value!r}" if self.value is not None else ""
        ops = f" (ops {', '.join(map(str, self.op_ids))})" if self.op_ids else ""
        return f"{self.kind}: {where}{value}: {self.detail}{ops}"


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """What :func:`raftlog.checker.check` found.

    ``anomalies`` maps each kind in :data:`FATAL_KINDS` and :data:`NONMONOTONIC`
    to every finding of that kind (so ``len`` is the count and the first few
    are the examples). The ``unknown_*`` counts are informational: a produce whose
    outcome was unknown may or may not have landed, and either is correct, as
    long as it landed whole.
    """

    operations: int
    produce_ok: int
    produce_failed: int
    produce_unknown: int
    reads: int
    values_written: int
    values_in_final_reads: int
    unknown_landed: int
    unknown_not_landed: int
    anomalies: dict[str, tuple[Anomaly, ...]]

    def count(self, kind: str) -> int:
        return len(self.anomalies.get(kind, ()))

    @property
    def lost(self) -> int:
        return self.count(LOST)

    @property
    def duplicated(self) -> int:
        return self.count(DUPLICATED)

    @property
    def inconsistent(self) -> int:
        return self.count(INCONSISTENT)

    @property
    def failed_visible(self) -> int:
        return self.count(FAILED_VISIBLE)

    @property
    def order_violations(self) -> int:
        return self.count(ORDER)

    @property
    def nonmonotonic(self) -> int:
        return self.count(NONMONOTONIC)

    @property
    def ok(self) -> bool:
        """True iff no lost, duplicated, inconsistent, failed-visible or out-of-order value."""
        return all(self.count(kind) == 0 for kind in FATAL_KINDS)

    def counts(self) -> dict[str, int]:
        """Every count, flat (for logs, benchmarks and the issue's closing note)."""
        out = {
            "operations": self.operations,
            "produce_ok": self.produce_ok,
            "produce_failed": self.produce_failed,
            "produce_unknown": self.produce_unknown,
            "reads": self.reads,
            "values_written": self.values_written,
            "values_in_final_reads": self.values_in_final_reads,
            "unknown_landed": self.unknown_landed,
            "unknown_not_landed": self.unknown_not_landed,
        }
        out.update({kind: self.count(kind) for kind in (*FATAL_KINDS, NONMONOTONIC)})
        return out

    def render(self, max_examples: int = 3) -> str:
        """A short human-readable report: verdict, counts, a few examples of each anomaly."""
        lines = [
            f"checker: {'OK' if self.ok else 'FAILED'}",
            f"  operations {self.operations}: produce ok {self.produce_ok}, failed "
            f"{self.produce_failed}, unknown {self.produce_unknown}; reads {self.reads}",
            f"  values written {self.values_written}, in final reads {self.values_in_final_reads}",
            "  " + ", ".join(f"{kind} {self.count(kind)}" for kind in (*FATAL_KINDS, NONMONOTONIC)),
            f"  unknown writes: landed {self.unknown_landed}, not landed {self.unknown_not_landed}",
        ]
        for kind in (*FATAL_KINDS, NONMONOTONIC):
            found = self.anomalies.get(kind, ())
            for anomaly in found[:max_examples]:
                lines.append(f"    {anomaly.render()}")
            if len(found) > max_examples:
                lines.append(f"    ... and {len(found) - max_examples} more {kind}")
        return "\n".join(lines)
