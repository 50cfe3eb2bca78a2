"""Check a history against the final read of every partition (Jepsen-style).

Definitions (a *value* is unique per written record; see :mod:`history`):

- **lost**: a value that a produce had acknowledged ``ok``, or that any ``ok``
  read returned (a read sees committed data only), is not in the final reads.
- **duplicated**: a value sits at more than one offset in the final reads.
- **inconsistent**: two different values at one offset, across any reads,
  acknowledgements and the final reads (an ``ok`` produce acknowledged at
  offset ``o`` counts as "value at ``o``"); or one value at two offsets across
  them when the final reads hold it once (it moved); or a produce whose
  outcome was unknown landed only in part (a batch is atomic).
- **failed_visible**: a value whose every produce was ``failed`` is visible.
- **order**: for idempotent producers, within a partition's final read the
  values of one producer do not appear in strictly increasing (epoch,
  sequence) order.
- **nonmonotonic** (informational): one read's offsets are not strictly
  increasing, or a process's read reports a lower high watermark than its
  previous read that completed before it was invoked.

Unknown (and never completed) produces are counted as landed or not landed.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence

from raftlog.checker.history import History, OffsetValue, Operation, OpKind, Outcome, TopicPartition
from raftlog.checker.report import (
    DUPLICATED,
    FAILED_VISIBLE,
    INCONSISTENT,
    LOST,
    NONMONOTONIC,
    ORDER,
    Anomaly,
    Report,
)

Position = tuple[TopicPartition, int]


def check(
    history: History,
    final_reads: Mapping[TopicPartition, Sequence[OffsetValue]] | None = None,
) -> Report:
    """Check ``history``; ``final_reads`` defaults to those recorded in the history.

    ``final_reads`` must hold every partition written to, each read completely
    (every committed offset from the log start) after the faults healed: a
    partition missing from it makes each value acknowledged there lost.
    Raises ValueError naming the entry when ``final_reads`` is malformed.
    """
    finals = _validate_finals(history.final_reads if final_reads is None else final_reads)
    ops = history.operations
    produces = [op for op in ops if op.kind is OpKind.PRODUCE]
    reads = [op for op in ops if op.kind is OpKind.READ and op.outcome is Outcome.OK]
    found: dict[str, list[Anomaly]] = collections.defaultdict(list)

    # Where each value sits in the final reads, and what each final offset holds.
    final_at: dict[Position, str] = {}
    final_pos: dict[str, list[Position]] = collections.defaultdict(list)
    for tp, records in finals.items():
        for offset, value in records:
            pos = (tp, offset)
            if pos in final_at:
                continue  # a second copy of the same (offset, value): same record read twice
            final_at[pos] = value
            final_pos[value].append(pos)

    # Every (position, value) claim, with its evidence, from acks, reads and final reads.
    seen_at: dict[Position, dict[str, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    seen_pos: dict[str, set[Position]] = collections.defaultdict(set)
    ops_of_value: dict[str, list[Operation]] = collections.defaultdict(list)
    for op in produces:
        for i, value in enumerate(op.values):
            ops_of_value[value].append(op)
            if op.outcome is Outcome.OK:
                assert op.offset is not None  # an ok produce has one (History checks it)
                pos = (op.tp, op.offset + i)
                seen_at[pos][value].append(f"acked by op {op.op_id}")
                seen_pos[value].add(pos)
    for op in reads:
        for offset, value in op.records:
            pos = (op.tp, offset)
            seen_at[pos][value].append(f"read by op {op.op_id}")
            seen_pos[value].add(pos)
    for pos, value in final_at.items():
        seen_at[pos][value].append("final read")
        seen_pos[value].add(pos)

    # lost
    for value, positions in sorted(seen_pos.items()):
        if value in final_pos:
            continue
        evidence = [
            f"{how} at offset {pos[1]}" for pos in sorted(positions) for how in seen_at[pos][value]
        ]
        acked = [op.op_id for op in ops_of_value.get(value, ()) if op.outcome is Outcome.OK]
        read_by = [op.op_id for op in reads if value in _values(op)]
        tp = min(positions)[0]
        why = "" if tp in finals else " (partition missing from the final reads)"
        found[LOST].append(
            Anomaly(
                LOST,
                tp,
                value,
                f"{'; '.join(evidence)}, but not in the final read{why}",
                tuple(sorted({*acked, *read_by})),
            )
        )

    # duplicated
    for value, places in sorted(final_pos.items()):
        if len(places) > 1:
            offsets = ", ".join(f"{tp[0]}/{tp[1]}@{o}" for tp, o in sorted(places))
            found[DUPLICATED].append(
                Anomaly(
                    DUPLICATED,
                    places[0][0],
                    value,
                    f"at {len(places)} offsets in the final reads: {offsets}",
                    tuple(op.op_id for op in ops_of_value.get(value, ())),
                )
            )

    # inconsistent: two values at one offset
    for pos in sorted(seen_at):
        claims = seen_at[pos]
        if len(claims) > 1:
            detail = "; ".join(f"{v!r} ({', '.join(ev)})" for v, ev in sorted(claims.items()))
            found[INCONSISTENT].append(
                Anomaly(
                    INCONSISTENT,
                    pos[0],
                    None,
                    f"offset {pos[1]} holds {len(claims)} different values: {detail}",
                    _op_ids_in(claims),
                )
            )
    # inconsistent: one value at two offsets, though the final reads hold it once
    for value, positions in sorted(seen_pos.items()):
        if len(positions) > 1 and len(final_pos.get(value, ())) <= 1:
            detail = "; ".join(
                f"offset {o} ({', '.join(seen_at[(tp, o)][value])})" for tp, o in sorted(positions)
            )
            found[INCONSISTENT].append(
                Anomaly(
                    INCONSISTENT,
                    min(positions)[0],
                    value,
                    f"seen at {len(positions)} offsets: {detail}",
                    _op_ids_in({value: [ev for p in positions for ev in seen_at[p][value]]}),
                )
            )

    # failed writes that became visible
    for value, value_ops in sorted(ops_of_value.items()):
        if all(op.outcome is Outcome.FAILED for op in value_ops) and value in seen_pos:
            where = ", ".join(f"offset {o}" for _, o in sorted(seen_pos[value]))
            found[FAILED_VISIBLE].append(
                Anomaly(
                    FAILED_VISIBLE,
                    value_ops[0].tp,
                    value,
                    f"every produce of it failed ({value_ops[-1].error}), yet it is at {where}",
                    tuple(op.op_id for op in value_ops),
                )
            )

    # unknown produces: landed, not landed, or (an anomaly) in part
    landed = not_landed = 0
    for op in produces:
        if op.outcome not in (Outcome.UNKNOWN, Outcome.PENDING):
            continue
        present = [v for v in op.values if v in final_pos]
        if len(present) == len(op.values):
            landed += 1
        elif not present:
            not_landed += 1
        else:
            missing = [v for v in op.values if v not in final_pos]
            found[INCONSISTENT].append(
                Anomaly(
                    INCONSISTENT,
                    op.tp,
                    missing[0],
                    f"a produce of unknown outcome landed in part: {len(present)} of "
                    f"{len(op.values)} values are in the final read, missing {missing[:3]}",
                    (op.op_id,),
                )
            )

    found[ORDER].extend(_order_violations(produces, finals))
    found[NONMONOTONIC].extend(_nonmonotonic(reads))

    return Report(
        operations=len(ops),
        produce_ok=sum(op.outcome is Outcome.OK for op in produces),
        produce_failed=sum(op.outcome is Outcome.FAILED for op in produces),
        produce_unknown=sum(op.outcome in (Outcome.UNKNOWN, Outcome.PENDING) for op in produces),
        reads=sum(op.kind is OpKind.READ for op in ops),
        values_written=len(ops_of_value),
        values_in_final_reads=len(final_pos),
        unknown_landed=landed,
        unknown_not_landed=not_landed,
        anomalies={kind: tuple(items) for kind, items in found.items()},
    )


def _values(op: Operation) -> set[str]:
    return {value for _, value in op.records}


def _op_ids_in(claims: Mapping[str, list[str]]) -> tuple[int, ...]:
    ids = set()
    for evidence in claims.values():
        for ev in evidence:
            if " by op " in ev:
                ids.add(int(ev.rsplit(" ", 1)[1]))
    return tuple(sorted(ids))


def _order_violations(
    produces: list[Operation], finals: Mapping[TopicPartition, Sequence[OffsetValue]]
) -> list[Anomaly]:
    """Per partition, each idempotent producer's values must rise in (epoch, sequence)."""
    seq_of: dict[str, tuple[str, tuple[int, int], int]] = {}
    for op in produces:
        if op.producer is None or op.first_sequence is None:
            continue
        for i, value in enumerate(op.values):
            seq_of[value] = (op.producer, (op.epoch or 0, op.first_sequence + i), op.op_id)
    out = []
    for tp, records in sorted(finals.items()):
        last: dict[str, tuple[int, tuple[int, int], str, int]] = {}
        for offset, value in sorted(set(records)):
            if value not in seq_of:
                continue
            producer, seq, op_id = seq_of[value]
            prev = last.get(producer)
            if prev is not None and seq <= prev[1]:
                out.append(
                    Anomaly(
                        ORDER,
                        tp,
                        value,
                        f"producer {producer!r}: (epoch, seq) {seq} at offset {offset} follows "
                        f"{prev[1]} ({prev[2]!r}) at offset {prev[0]}",
                        tuple(sorted({prev[3], op_id})),
                    )
                )
            if prev is None or seq > prev[1]:
                last[producer] = (offset, seq, value, op_id)
    return out


def _nonmonotonic(reads: list[Operation]) -> list[Anomaly]:
    out = []
    previous: dict[tuple[str, TopicPartition], Operation] = {}
    for op in sorted(reads, key=lambda o: o.invoke_time):
        offsets = [o for o, _ in op.records]
        for a, b in itertools.pairwise(offsets):
            if b <= a:
                out.append(
                    Anomaly(
                        NONMONOTONIC, op.tp, None, f"offset {b} follows offset {a} in one read",
                        (op.op_id,),
                    )
                )  # fmt: skip
                break
        key = (op.process, op.tp)
        prev = previous.get(key)
        if (
            prev is not None
            and prev.complete_time is not None
            and prev.complete_time <= op.invoke_time
            and prev.high_watermark is not None
            and op.high_watermark is not None
            and op.high_watermark < prev.high_watermark
        ):
            out.append(
                Anomaly(
                    NONMONOTONIC,
                    op.tp,
                    None,
                    f"process {op.process!r}: high watermark went back from "
                    f"{prev.high_watermark} to {op.high_watermark}",
                    (prev.op_id, op.op_id),
                )
            )
        if op.high_watermark is not None:
            previous[key] = op
    return out


def _validate_finals(
    finals: Mapping[TopicPartition, Sequence[OffsetValue]],
) -> dict[TopicPartition, list[OffsetValue]]:
    if not isinstance(finals, Mapping):
        raise ValueError(
            f"final_reads must be a dict of (topic, partition) -> [(offset, value)], "
            f"got {type(finals).__name__}"
        )
    out: dict[TopicPartition, list[OffsetValue]] = {}
    for key, records in finals.items():
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not isinstance(key[0], str)
            or not isinstance(key[1], int)
        ):
            raise ValueError(f"final_reads key must be (topic: str, partition: int), got {key!r}")
        recs = []
        for i, rec in enumerate(records):
            ok = (
                isinstance(rec, tuple | list)
                and len(rec) == 2
                and isinstance(rec[0], int)
                and isinstance(rec[1], str)
            )
            if not ok:
                raise ValueError(
                    f"final_reads[{key!r}][{i}] must be (offset: int, value: str), got {rec!r}"
                )
            recs.append((rec[0], rec[1]))
        out[(key[0], key[1])] = recs
    return out
