"""The operation history of a Jepsen-style run: what was asked, when, and what came back.

Every client operation is recorded twice: once when it is *invoked* and once
when it *completes*. The result is one of

- ``ok``: the operation took effect (a produce carries the base offset the
  server acknowledged; a read carries the records it saw);
- ``failed``: the operation definitely did not take effect (the server said
  so before applying it: fenced, out-of-order sequence, invalid request);
- ``unknown``: it may or may not have taken effect (timeout, connection
  reset, a leader that died mid-request). An operation that never completes
  (the run stopped first) is also unknown.

Invariants: operation ids are unique and increase in invocation order; an
operation completes at most once; completion time >= invocation time (both
from the same monotonic clock, in seconds since the history was created).

Appends take a ``threading.Lock`` held only for a few dict updates and never
across an ``await``, so the same history may be shared by threads and by
asyncio tasks. When created with a ``path``, every event is also appended to
a JSONL file as it happens (flushed per line), so a run that crashes still
leaves a replayable history; :func:`load_history` reads it back.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import pathlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

TopicPartition = tuple[str, int]
"""(topic, partition)."""

OffsetValue = tuple[int, str]
"""(offset, value): one record as a read saw it."""


class OpKind(enum.StrEnum):
    PRODUCE = "produce"
    READ = "read"


class Outcome(enum.StrEnum):
    PENDING = "pending"  # invoked, not completed (treated as unknown by the checker)
    OK = "ok"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """One operation of the run (a snapshot; the history replaces it on completion).

    For a produce, ``values`` are the unique values written, one per offset: on
    ``ok``, value ``i`` is expected at ``offset + i``. ``producer``/``epoch``/
    ``first_sequence`` are set for idempotent producers: value ``i`` has
    sequence ``first_sequence + i``. For a read, ``from_offset`` is the offset
    asked for and, on ``ok``, ``records`` what came back (and
    ``high_watermark`` when the server reported one).
    """

    op_id: int
    process: str
    kind: OpKind
    topic: str
    partition: int
    invoke_time: float
    values: tuple[str, ...] = ()
    producer: str | None = None
    epoch: int | None = None
    first_sequence: int | None = None
    from_offset: int | None = None
    outcome: Outcome = Outcome.PENDING
    complete_time: float | None = None
    offset: int | None = None
    records: tuple[OffsetValue, ...] = ()
    high_watermark: int | None = None
    error: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


def _check_str(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty str, got {value!r}")
    return value


def _check_int(field: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}, got {value!r}")
    return value


def _check_records(records: Iterable[Sequence[object]]) -> tuple[OffsetValue, ...]:
    out = []
    for i, rec in enumerate(records):
        if len(rec) != 2:
            raise ValueError(f"records[{i}] must be an (offset, value) pair, got {rec!r}")
        offset, value = rec
        out.append(
            (
                _check_int(f"records[{i}] offset", offset, 0),
                _check_str(f"records[{i}] value", value),
            )
        )
    return tuple(out)


class History:
    """A thread- and asyncio-safe recorder of operations (see the module docstring).

    ``clock`` returns seconds and must be monotonic; it is injectable for tests.
    """

    def __init__(
        self,
        path: str | pathlib.Path | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._t0 = clock()
        self._ops: dict[int, Operation] = {}
        self._next_id = 0
        self._final_reads: dict[TopicPartition, tuple[OffsetValue, ...]] = {}
        self._file: IO[str] | None = None
        if path is not None:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the JSONL file, if any. Recording after close keeps working in memory."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- invocation ------------------------------------------------------------------------

    def invoke_produce(
        self,
        process: str,
        topic: str,
        partition: int,
        values: Sequence[str],
        *,
        producer: str | None = None,
        epoch: int | None = None,
        first_sequence: int | None = None,
    ) -> int:
        """Record a produce of ``values`` (unique across the run) being sent; return its op id.

        ``producer`` and ``first_sequence`` go together (an idempotent producer):
        giving one without the other is a ValueError.
        """
        vals = tuple(_check_str(f"values[{i}]", v) for i, v in enumerate(values))
        if not vals:
            raise ValueError("values must hold at least one value")
        if (producer is None) != (first_sequence is None):
            raise ValueError(
                "producer and first_sequence must be given together (an idempotent producer), "
                f"got producer={producer!r} first_sequence={first_sequence!r}"
            )
        if producer is not None:
            _check_str("producer", producer)
            _check_int("first_sequence", first_sequence, 0)
        if epoch is not None:
            _check_int("epoch", epoch, 0)
        return self._invoke(
            process,
            OpKind.PRODUCE,
            topic,
            partition,
            values=vals,
            producer=producer,
            epoch=epoch,
            first_sequence=first_sequence,
        )

    def invoke_read(self, process: str, topic: str, partition: int, from_offset: int) -> int:
        """Record a read of ``topic``/``partition`` from ``from_offset`` being sent."""
        _check_int("from_offset", from_offset, 0)
        return self._invoke(process, OpKind.READ, topic, partition, from_offset=from_offset)

    def _invoke(self, process: str, kind: OpKind, topic: str, partition: int, **fields: Any) -> int:
        _check_str("process", process)
        _check_str("topic", topic)
        _check_int("partition", partition, 0)
        with self._lock:
            op = Operation(
                op_id=self._next_id,
                process=process,
                kind=kind,
                topic=topic,
                partition=partition,
                invoke_time=self._clock() - self._t0,
                **fields,
            )
            self._next_id += 1
            self._ops[op.op_id] = op
            self._write({"event": "invoke", **_op_fields(op)})
            return op.op_id

    # -- completion ------------------------------------------------------------------------

    def ok_produce(self, op_id: int, offset: int) -> None:
        """The produce ``op_id`` was acknowledged with base offset ``offset``."""
        _check_int("offset", offset, 0)
        self._complete(op_id, OpKind.PRODUCE, Outcome.OK, offset=offset)

    def ok_read(
        self,
        op_id: int,
        records: Iterable[Sequence[object]],
        high_watermark: int | None = None,
    ) -> None:
        """The read ``op_id`` returned ``records`` ((offset, value) pairs, in returned order)."""
        recs = _check_records(records)
        if high_watermark is not None:
            _check_int("high_watermark", high_watermark, 0)
        self._complete(op_id, OpKind.READ, Outcome.OK, records=recs, high_watermark=high_watermark)

    def fail(self, op_id: int, error: str) -> None:
        """``op_id`` definitely did not take effect; ``error`` says why."""
        self._complete(op_id, None, Outcome.FAILED, error=str(error))

    def unknown(self, op_id: int, error: str) -> None:
        """``op_id`` may or may not have taken effect (timeout, connection lost)."""
        self._complete(op_id, None, Outcome.UNKNOWN, error=str(error))

    def _complete(self, op_id: int, kind: OpKind | None, outcome: Outcome, **fields: Any) -> None:
        with self._lock:
            op = self._ops.get(op_id)
            if op is None:
                raise ValueError(f"op_id {op_id!r} was never invoked in this history")
            if op.outcome is not Outcome.PENDING:
                raise ValueError(f"op_id {op_id} already completed as {op.outcome.value}")
            if kind is not None and op.kind is not kind:
                raise ValueError(f"op_id {op_id} is a {op.kind.value}, not a {kind.value}")
            done = dataclasses.replace(
                op, outcome=outcome, complete_time=self._clock() - self._t0, **fields
            )
            self._ops[op_id] = done
            self._write({"event": "complete", **_completion_fields(done)})

    # -- final reads -----------------------------------------------------------------------

    def record_final_read(
        self, topic: str, partition: int, records: Iterable[Sequence[object]]
    ) -> None:
        """Record the full read of a partition after the run healed (used by ``check``)."""
        _check_str("topic", topic)
        _check_int("partition", partition, 0)
        recs = _check_records(records)
        with self._lock:
            self._final_reads[(topic, partition)] = recs
            self._write(
                {"event": "final_read", "topic": topic, "partition": partition,
                 "records": [list(r) for r in recs]}
            )  # fmt: skip

    # -- views -----------------------------------------------------------------------------

    @property
    def operations(self) -> list[Operation]:
        """A snapshot of every operation, in invocation order."""
        with self._lock:
            return [self._ops[i] for i in sorted(self._ops)]

    @property
    def final_reads(self) -> dict[TopicPartition, list[OffsetValue]]:
        with self._lock:
            return {tp: list(recs) for tp, recs in self._final_reads.items()}

    def save(self, path: str | pathlib.Path) -> None:
        """Write the whole history (invocations, completions, final reads) as JSONL."""
        with self._lock:
            ops = [self._ops[i] for i in sorted(self._ops)]
            finals = dict(self._final_reads)
        with open(path, "w", encoding="utf-8") as f:
            for op in ops:
                f.write(json.dumps({"event": "invoke", **_op_fields(op)}) + "\n")
                if op.outcome is not Outcome.PENDING:
                    f.write(json.dumps({"event": "complete", **_completion_fields(op)}) + "\n")
            for (topic, partition), recs in finals.items():
                line = {"event": "final_read", "topic": topic, "partition": partition,
                        "records": [list(r) for r in recs]}  # fmt: skip
                f.write(json.dumps(line) + "\n")

    def _write(self, event: dict[str, Any]) -> None:
        # Called with the lock held, so lines never interleave.
        if self._file is not None:
            self._file.write(json.dumps(event) + "\n")
            self._file.flush()

    # -- replay ----------------------------------------------------------------------------

    @classmethod
    def _from_events(cls, events: Iterable[tuple[int, dict[str, Any]]], source: str) -> History:
        hist = cls()
        for line_no, ev in events:
            where = f"{source}:{line_no}"
            try:
                kind = ev["event"]
                if kind == "invoke":
                    op = Operation(
                        op_id=int(ev["op_id"]),
                        process=ev["process"],
                        kind=OpKind(ev["kind"]),
                        topic=ev["topic"],
                        partition=int(ev["partition"]),
                        invoke_time=float(ev["invoke_time"]),
                        values=tuple(ev.get("values", ())),
                        producer=ev.get("producer"),
                        epoch=ev.get("epoch"),
                        first_sequence=ev.get("first_sequence"),
                        from_offset=ev.get("from_offset"),
                    )
                    if op.op_id in hist._ops:
                        raise ValueError(f"op_id {op.op_id} invoked twice")
                    hist._ops[op.op_id] = op
                    hist._next_id = max(hist._next_id, op.op_id + 1)
                elif kind == "complete":
                    op_id = int(ev["op_id"])
                    if op_id not in hist._ops:
                        raise ValueError(f"op_id {op_id} completes before it is invoked")
                    outcome = Outcome(ev["outcome"])
                    if outcome is Outcome.OK and hist._ops[op_id].kind is OpKind.PRODUCE:
                        # its values are checked at offset + i (as ok_produce requires)
                        _check_int("offset", ev.get("offset"), 0)
                    hist._ops[op_id] = dataclasses.replace(
                        hist._ops[op_id],
                        outcome=outcome,
                        complete_time=float(ev["complete_time"]),
                        offset=ev.get("offset"),
                        records=tuple((int(o), str(v)) for o, v in ev.get("records", ())),
                        high_watermark=ev.get("high_watermark"),
                        error=ev.get("error"),
                    )
                elif kind == "final_read":
                    tp = (ev["topic"], int(ev["partition"]))
                    hist._final_reads[tp] = tuple((int(o), str(v)) for o, v in ev["records"])
                else:
                    raise ValueError(f"unknown event {kind!r}")
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{where}: not a history event ({type(exc).__name__}: {exc}); expected a JSON "
                    "object with event = invoke, complete or final_read"
                ) from exc
        return hist


def load_history(path: str | pathlib.Path) -> History:
    """Read a JSONL history written by :class:`History` (streamed or ``save``d).

    A malformed line raises ValueError naming the file and line. A last line cut
    off mid-write (the run was killed) is ignored, since streaming writes whole
    lines and only the final one can be torn.
    """
    text = pathlib.Path(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    events: list[tuple[int, dict[str, Any]]] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines):  # no newline after it: a torn final line
                break
            raise ValueError(f"{path}:{i}: not valid JSON: {exc}") from exc
        if not isinstance(ev, dict):
            raise ValueError(f"{path}:{i}: expected a JSON object, got {type(ev).__name__}")
        events.append((i, ev))
    return History._from_events(events, str(path))


def _op_fields(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "op_id": op.op_id,
        "process": op.process,
        "kind": op.kind.value,
        "topic": op.topic,
        "partition": op.partition,
        "invoke_time": op.invoke_time,
    }
    if op.kind is OpKind.PRODUCE:
        out["values"] = list(op.values)
        if op.producer is not None:
            out.update(producer=op.producer, epoch=op.epoch, first_sequence=op.first_sequence)
    else:
        out["from_offset"] = op.from_offset
    return out


def _completion_fields(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "op_id": op.op_id,
        "outcome": op.outcome.value,
        "complete_time": op.complete_time,
    }
    if op.offset is not None:
        out["offset"] = op.offset
    if op.records:
        out["records"] = [list(r) for r in op.records]
    if op.high_watermark is not None:
        out["high_watermark"] = op.high_watermark
    if op.error is not None:
        out["error"] = op.error
    return out
