"""The transaction coordinator's pure state: what ``tm_stm`` rebuilds from its log.

No IO, no clock, no randomness: :meth:`CoordinatorState.apply` takes one
command (a dict decoded from a committed batch) and its offset, changes the
state and returns the command's result. Every replica of the coordinator's
group applies the same commands in the same order, so every replica holds the
same state and computes the same results; the leader hands the result of the
command it replicated back to the caller. ``apply`` never raises on a command
(a replica must never get stuck on its log): a malformed or refused command
is answered with ``{"status": "error", "error": ...}`` and changes nothing.

A transaction is keyed by (writer id, version): for a streaming query, the
query id and the micro-batch id; for ``df.write``, ``txnAppId`` and
``txnVersion``. Per key the state holds:

- the *participants* that task attempts registered before they wrote: one
  per (task attempt, topic partition), each with its own producer id and the
  epoch of its session, tagged with the *run* that registered it (a streaming
  query's ``runId``, a batch write job's id);
- the *decisions*: at most one per run, commit or abort. A commit names
  exactly the participants that commit (from the commit messages the driver
  was given) and lists every other registered participant of the version as
  to abort. An abort lists the registered participants of its run;
- per decision, the marker offset of each participant once its marker is
  durable, and ``complete`` when all are.

Rules (what the protocol relies on; see docs/ARCHITECTURE.md, "Exactly-once
from Spark"):

- A version at or below the writer's last committed version is *committed*:
  registering for it answers ``committed`` (the task writes nothing), and
  deciding it returns the commit decision already recorded, so a replay rolls
  it forward instead of writing again, whatever its partitioning.
- Once a run has decided a version, registrations for it from that run are
  refused; once the version is committed, from any run.
- A recorded commit is final: an abort of a committed version returns the
  commit decision (the caller completes it). An abort decision ends that
  run's transactions, not the version: another run may still commit it.
- The writer's last committed version is kept until the writer is deleted;
  it never expires. Decided versions older than the newest ``KEEP_VERSIONS``
  committed ones are dropped once complete (their markers are all written,
  so readers no longer need them for a consistent cut).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raftlog.rpc.messages import MAX_TXN_ID_CHARS, MAX_TXN_PARTICIPANTS, Participant, TxnDecision

__all__ = [
    "KEEP_VERSIONS",
    "CommandError",
    "CoordinatorState",
    "Decision",
    "Participant",
    "command_error",
    "validate_command",
]

KEEP_VERSIONS = 64
"""Complete decisions kept per writer below its last committed version."""

MAX_ID_LENGTH = MAX_TXN_ID_CHARS
MAX_PARTICIPANTS = MAX_TXN_PARTICIPANTS
_I63 = (1 << 63) - 1


@dataclasses.dataclass(slots=True)
class Decision:
    """A run's decision on a version, and how far its markers are written."""

    run: str
    commit: bool
    named: list[Participant]  # commit: the participants that commit
    aborts: list[Participant]  # the registered participants this decision aborts
    markers: dict[str, int] = dataclasses.field(default_factory=dict)  # producer id -> offset
    complete: bool = False
    offset: int = -1  # where the decision is in the coordinator's log

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "commit": self.commit,
            "named": [p.to_json() for p in self.named],
            "aborts": [p.to_json() for p in self.aborts],
            "markers": dict(self.markers),
            "complete": self.complete,
            "offset": self.offset,
        }

    def to_wire(self) -> TxnDecision:
        return TxnDecision(
            self.run, self.commit, list(self.named), list(self.aborts), self.complete
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Decision:
        return cls(
            d["run"],
            d["commit"],
            [Participant(**p) for p in d["named"]],
            [Participant(**p) for p in d["aborts"]],
            {str(k): int(v) for k, v in d["markers"].items()},
            d["complete"],
            d["offset"],
        )


@dataclasses.dataclass(slots=True)
class _Version:
    participants: dict[int, Participant] = dataclasses.field(default_factory=dict)  # by pid
    decisions: dict[str, Decision] = dataclasses.field(default_factory=dict)  # by run
    committed_by: str | None = None  # the run whose decision committed the version

    def committed(self) -> Decision | None:
        return None if self.committed_by is None else self.decisions[self.committed_by]


@dataclasses.dataclass(slots=True)
class _Writer:
    last_committed: int = -1
    versions: dict[int, _Version] = dataclasses.field(default_factory=dict)


class CommandError(ValueError):
    """A command that is malformed or not allowed; its text names the field."""


def command_error(message: str) -> dict[str, Any]:
    return {"status": "error", "error": message}


class CoordinatorState:
    """Every writer's transactions (see the module doc)."""

    def __init__(self) -> None:
        self.writers: dict[str, _Writer] = {}
        self.applied_offset = -1

    def incomplete(self, writer: str | None = None) -> list[tuple[str, int, Decision]]:
        """(writer, version, decision) of every decision whose markers are not all durable
        (of ``writer`` only, when given), oldest version first: what the coordinator's
        leader completes. A read of this replica's state: current on the leader once it
        applied a command of its own term."""
        out = []
        for writer_id, w in sorted(self.writers.items()):
            if writer is not None and writer_id != writer:
                continue
            for version, v in sorted(w.versions.items()):
                out += [(writer_id, version, d) for d in v.decisions.values() if not d.complete]
        return out

    # -- applying ------------------------------------------------------------

    def apply(self, command: Any, offset: int) -> dict[str, Any]:
        """Apply one command at ``offset``; return its result. Never raises."""
        if offset <= self.applied_offset:
            return command_error(f"offset {offset} already applied")
        self.applied_offset = offset
        try:
            if not isinstance(command, dict):
                raise CommandError("command: expected a JSON object")
            op = command.get("op")
            handler = _HANDLERS.get(op) if isinstance(op, str) else None
            if handler is None:
                raise CommandError(f"op: expected one of {sorted(_HANDLERS)}, got {op!r}")
            return handler(self, command, offset)
        except CommandError as exc:
            return command_error(str(exc))

    def _register(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        writer_id = _text(cmd, "writer")
        version = _int(cmd, "version", 0, _I63)
        p = _participant(cmd.get("participant"), "participant")
        writer = self.writers.get(writer_id) or _Writer()
        if version <= writer.last_committed:
            return {"status": "committed", "last_committed": writer.last_committed}
        v = writer.versions.get(version) or _Version()
        if p.run in v.decisions:
            return {
                "status": "refused",
                "error": f"version {version} of writer {writer_id!r} was already decided "
                f"by run {p.run!r}; this attempt may not write",
            }
        known = v.participants.get(p.producer_id)
        if known is not None and (known.attempt, known.run) != (p.attempt, p.run):
            raise CommandError(
                f"participant.producer_id: {p.producer_id} is already registered by "
                f"attempt {known.attempt!r} of run {known.run!r}"
            )
        if len(v.participants) >= MAX_PARTICIPANTS:
            raise CommandError(f"participants: at most {MAX_PARTICIPANTS} per version")
        self.writers[writer_id] = writer
        writer.versions[version] = v
        v.participants[p.producer_id] = p
        return {"status": "registered"}

    def _decide(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        writer_id = _text(cmd, "writer")
        version = _int(cmd, "version", 0, _I63)
        run = _text(cmd, "run")
        commit = cmd.get("commit")
        if not isinstance(commit, bool):
            raise CommandError(f"commit: expected true or false, got {commit!r}")
        raw = cmd.get("named", [])
        if not isinstance(raw, list) or len(raw) > MAX_PARTICIPANTS:
            raise CommandError(f"named: expected a list of at most {MAX_PARTICIPANTS} participants")
        named = [_participant(p, f"named[{i}]") for i, p in enumerate(raw)]
        writer = self.writers.get(writer_id) or _Writer()
        v = writer.versions.get(version)
        if version <= writer.last_committed:
            done = v.committed() if v is not None else None
            return {
                "status": "committed",
                "decision": None if done is None else done.to_json(),
            }
        v = v or _Version()
        earlier = v.decisions.get(run)
        if earlier is not None:  # this run decided already: its decision stands
            return {
                "status": "committed" if earlier.commit else "aborted",
                "decision": earlier.to_json(),
            }
        if commit:
            for i, p in enumerate(named):
                known = v.participants.get(p.producer_id)
                if known is None or (known.attempt, known.run, known.epoch) != (
                    p.attempt,
                    p.run,
                    p.epoch,
                ):
                    raise CommandError(
                        f"named[{i}]: producer {p.producer_id} of attempt {p.attempt!r} "
                        f"(epoch {p.epoch}) was never registered for version {version}"
                    )
        already = {q.producer_id for d in v.decisions.values() for q in d.aborts}
        names = {p.producer_id for p in named} if commit else set()
        aborts = [
            q
            for pid, q in sorted(v.participants.items())
            if pid not in names and pid not in already and (commit or q.run == run)
        ]
        decision = Decision(run, commit, named if commit else [], aborts, offset=offset)
        self.writers[writer_id] = writer  # validated: from here on the command takes effect
        writer.versions[version] = v
        v.decisions[run] = decision
        if commit:
            v.committed_by = run
            writer.last_committed = version
            self._prune(writer)
        # "taken": this command took the decision (not one recorded before it)
        return {
            "status": "committed" if commit else "aborted",
            "decision": decision.to_json(),
            "taken": True,
        }

    def _abort_run(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        """Abort what ``run`` registered for ``version`` of any writer it has not decided.

        For a driver whose ``abort()`` got no commit message (a query stopped in the
        middle of a batch): it knows its run and the version, not the writer.
        """
        run = _text(cmd, "run")
        version = _int(cmd, "version", 0, _I63)
        out = []
        for writer_id, writer in sorted(self.writers.items()):
            v = writer.versions.get(version)
            if v is None or run in v.decisions or version <= writer.last_committed:
                continue
            if not any(p.run == run for p in v.participants.values()):
                continue
            reply = self._decide(
                {"writer": writer_id, "version": version, "run": run, "commit": False}, offset
            )
            out.append({"writer": writer_id, "version": version, "decision": reply["decision"]})
        return {"status": "ok", "aborted": out}

    def _complete(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        writer_id = _text(cmd, "writer")
        version = _int(cmd, "version", 0, _I63)
        run = _text(cmd, "run")
        markers = cmd.get("markers")
        if not isinstance(markers, dict):
            raise CommandError("markers: expected an object of producer id -> marker offset")
        writer = self.writers.get(writer_id)
        v = None if writer is None else writer.versions.get(version)
        d = None if v is None else v.decisions.get(run)
        if d is None:
            # pruned: complete long ago, or never decided (nothing to record)
            return {"status": "ok", "complete": True}
        for k, off in markers.items():
            pid = str(k)
            if not isinstance(off, int) or isinstance(off, bool) or not -1 <= off <= _I63:
                raise CommandError(f"markers[{pid}]: expected an offset >= -1, got {off!r}")
            d.markers[pid] = off
        wanted = {str(p.producer_id) for p in d.named + d.aborts}
        d.complete = wanted <= d.markers.keys()
        if d.complete and writer is not None:
            self._prune(writer)
        return {"status": "ok", "complete": d.complete}

    def _pending(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        """The decisions of a writer whose markers are not all written (to roll forward)."""
        writer_id = _text(cmd, "writer")
        writer = self.writers.get(writer_id)
        out = []
        last = -1
        if writer is not None:
            last = writer.last_committed
            for version, v in sorted(writer.versions.items()):
                for d in v.decisions.values():
                    if not d.complete:
                        out.append({"version": version, "decision": d.to_json()})
        return {"status": "ok", "last_committed": last, "pending": out}

    def _all_pending(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        """Every writer's incomplete decisions (the coordinator's own roll-forward)."""
        out = []
        for writer_id, writer in sorted(self.writers.items()):
            for version, v in sorted(writer.versions.items()):
                for d in v.decisions.values():
                    if not d.complete:
                        out.append(
                            {"writer": writer_id, "version": version, "decision": d.to_json()}
                        )
        return {"status": "ok", "pending": out}

    def _cut(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        """Every kept commit decision with a participant on ``topic`` (for a consistent cut).

        With ``topic_id`` (>= 0), only participants on that incarnation of the topic (or
        of unknown id) count: a deleted topic's transactions never cut its successor.
        """
        topic = _text(cmd, "topic")
        topic_id = _int(cmd, "topic_id", -1, _I63) if "topic_id" in cmd else -1
        out = []
        for writer_id, writer in sorted(self.writers.items()):
            for version, v in sorted(writer.versions.items()):
                d = v.committed()
                if d is None:
                    continue
                parts = [
                    p
                    for p in d.named
                    if p.topic == topic and (topic_id < 0 or p.topic_id in (-1, topic_id))
                ]
                if not parts:
                    continue
                out.append(
                    {
                        "writer": writer_id,
                        "version": version,
                        "complete": d.complete,
                        "participants": [
                            {
                                "partition": p.partition,
                                "first_offset": p.first_offset,
                                "marker": d.markers.get(str(p.producer_id), -1),
                            }
                            for p in parts
                        ],
                    }
                )
        return {"status": "ok", "transactions": out}

    def _delete_writer(self, cmd: dict[str, Any], offset: int) -> dict[str, Any]:
        existed = self.writers.pop(_text(cmd, "writer"), None) is not None
        return {"status": "ok", "deleted": existed}

    def _prune(self, writer: _Writer) -> None:
        """Drop complete, decided versions far below the last committed one."""
        floor = writer.last_committed - KEEP_VERSIONS
        for version in [n for n in writer.versions if n < floor]:
            v = writer.versions[version]
            if v.decisions and all(d.complete for d in v.decisions.values()):
                del writer.versions[version]

    # -- snapshot ------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as canonical JSON bytes (equal states give equal bytes)."""
        doc = {
            "applied_offset": self.applied_offset,
            "writers": {
                w: {
                    "last_committed": s.last_committed,
                    "versions": {
                        str(n): {
                            "participants": [
                                p.to_json() for _, p in sorted(v.participants.items())
                            ],
                            "decisions": {r: d.to_json() for r, d in sorted(v.decisions.items())},
                            "committed_by": v.committed_by,
                        }
                        for n, v in sorted(s.versions.items())
                    },
                }
                for w, s in sorted(self.writers.items())
            },
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the state with a :meth:`snapshot`'s."""
        doc: dict[str, Any] = json.loads(data) if data else {"applied_offset": -1, "writers": {}}
        self.applied_offset = doc["applied_offset"]
        self.writers = {}
        for w, s in doc["writers"].items():
            writer = _Writer(s["last_committed"])
            for n, v in s["versions"].items():
                ver = _Version(
                    {p["producer_id"]: Participant(**p) for p in v["participants"]},
                    {r: Decision.from_json(d) for r, d in v["decisions"].items()},
                    v["committed_by"],
                )
                writer.versions[int(n)] = ver
            self.writers[w] = writer


_HANDLERS = {
    "register": CoordinatorState._register,
    "decide": CoordinatorState._decide,
    "complete": CoordinatorState._complete,
    "abort_run": CoordinatorState._abort_run,
    "pending": CoordinatorState._pending,
    "all_pending": CoordinatorState._all_pending,
    "cut": CoordinatorState._cut,
    "delete_writer": CoordinatorState._delete_writer,
}

READ_ONLY_OPS = frozenset({"pending", "all_pending", "cut"})

_PARTICIPANT_FIELDS = frozenset(f.name for f in dataclasses.fields(Participant))
# op -> (its required fields, its optional ones); "op" itself is implied
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "register": (frozenset({"writer", "version", "participant"}), frozenset()),
    "decide": (frozenset({"writer", "version", "run", "commit"}), frozenset({"named"})),
    "complete": (frozenset({"writer", "version", "run", "markers"}), frozenset()),
    "abort_run": (frozenset({"run", "version"}), frozenset()),
    "pending": (frozenset({"writer"}), frozenset()),
    "all_pending": (frozenset(), frozenset()),
    "cut": (frozenset({"topic"}), frozenset({"topic_id"})),
    "delete_writer": (frozenset({"writer"}), frozenset()),
}
assert _FIELDS.keys() == _HANDLERS.keys()


def validate_command(command: Any) -> None:
    """Check a command's shape before it is written to the coordinator's log.

    Stateless and bounded: a known ``op``, exactly its fields (no others), each of
    its type and range, participants' fields too, at most ``MAX_PARTICIPANTS``
    participants or markers. Raises :class:`CommandError` naming the field and the
    expected form. A command that passes may still be refused when applied (by the
    state: an unregistered participant, a decided version), never for its shape.
    """
    if not isinstance(command, dict):
        raise CommandError("command: expected a JSON object")
    op = command.get("op")
    fields = _FIELDS.get(op) if isinstance(op, str) else None
    if fields is None:
        raise CommandError(f"op: expected one of {sorted(_FIELDS)}, got {_short(op)}")
    required, optional = fields
    missing = sorted(required - command.keys())
    if missing:
        raise CommandError(f"{missing[0]}: required by op {op!r}")
    extra = sorted(command.keys() - required - optional - {"op"})
    if extra:
        raise CommandError(
            f"{_short(extra[0])}: not a field of op {op!r} (expected only "
            f"{sorted(required | optional)})"
        )
    for name in ("writer", "run", "topic"):
        if name in command:
            _text(command, name)
    if "version" in command:
        _int(command, "version", 0, _I63)
    if "topic_id" in command:
        _int(command, "topic_id", -1, _I63)
    if "commit" in command and not isinstance(command["commit"], bool):
        raise CommandError(f"commit: expected true or false, got {_short(command['commit'])}")
    if "participant" in command:
        _checked_participant(command["participant"], "participant")
    if "named" in command:
        named = command["named"]
        if not isinstance(named, list) or len(named) > MAX_PARTICIPANTS:
            raise CommandError(f"named: expected a list of at most {MAX_PARTICIPANTS} participants")
        for i, raw in enumerate(named):
            _checked_participant(raw, f"named[{i}]")
    if "markers" in command:
        markers = command["markers"]
        if not isinstance(markers, dict) or len(markers) > 2 * MAX_PARTICIPANTS:
            raise CommandError(
                f"markers: expected an object of at most {2 * MAX_PARTICIPANTS} "
                "producer id -> marker offset"
            )
        for k, off in markers.items():
            if not str(k).isdigit() or len(str(k)) > 19:
                raise CommandError(f"markers: key {_short(k)}: expected a producer id")
            if not isinstance(off, int) or isinstance(off, bool) or not -1 <= off <= _I63:
                raise CommandError(f"markers[{k}]: expected an offset >= -1, got {_short(off)}")


def _checked_participant(raw: Any, field: str) -> Participant:
    if isinstance(raw, dict):
        extra = sorted(raw.keys() - _PARTICIPANT_FIELDS)
        if extra:
            raise CommandError(
                f"{field}.{_short(extra[0])}: not a participant field (expected only "
                f"{sorted(_PARTICIPANT_FIELDS)})"
            )
    return _participant(raw, field)


def _short(value: Any) -> str:
    """``value`` for an error message, cut short (a refused value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(cmd: dict[str, Any], field: str) -> str:
    value = cmd.get(field)
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise CommandError(f"{field}: expected a string of 1..{MAX_ID_LENGTH} characters")
    return value


def _int(cmd: dict[str, Any], field: str, lo: int, hi: int) -> int:
    value = cmd.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise CommandError(f"{field}: expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def _participant(raw: Any, field: str) -> Participant:
    if not isinstance(raw, dict):
        raise CommandError(f"{field}: expected an object")
    return Participant(
        attempt=_text(raw, "attempt"),
        run=_text(raw, "run"),
        topic=_text(raw, "topic"),
        partition=_int(raw, "partition", 0, (1 << 31) - 1),
        producer_id=_int(raw, "producer_id", 0, _I63),
        epoch=_int(raw, "epoch", 0, (1 << 15) - 1),
        records=_int(raw, "records", -1, _I63) if "records" in raw else -1,
        last_sequence=_int(raw, "last_sequence", -1, (1 << 31) - 1)
        if "last_sequence" in raw
        else -1,
        first_offset=_int(raw, "first_offset", -1, _I63) if "first_offset" in raw else -1,
        last_offset=_int(raw, "last_offset", -1, _I63) if "last_offset" in raw else -1,
        topic_id=_int(raw, "topic_id", -1, _I63) if "topic_id" in raw else -1,
    )
