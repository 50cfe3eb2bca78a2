"""The transaction coordinator at work: the ``__transactions`` leader runs each transaction.

:class:`TxnCoordinator` sits on one ``__transactions`` partition, over its
:class:`~raftlog.coordinator.tm_stm.TmStm`, as Kafka's and Redpanda's transaction
coordinators do. A writer's tasks register their participants
(:meth:`TxnCoordinator.register`); the writer's driver then makes one call,
:meth:`TxnCoordinator.end_txn` (Kafka's ``EndTxn``), and the coordinator

1. records the decision in its log (durable on a quorum before anything else),
2. writes every marker: a commit marker for each named participant and an abort
   marker for every other registered one, on the participants' partitions,
   through a :class:`MarkerWriter` (on a node: the peer stream to each partition's
   leader; in the simulation: its network),
3. records the decision complete,

and answers only then. A leader that is elected resumes every decision it finds
incomplete (:meth:`resume`); the node calls it on election and on a timer, so a
coordinator that died between its steps, or a marker that could not be written
for a while, is finished by whichever node leads next.

Contract of ``end_txn`` for the caller: an answer means the decision is durable
and every marker of it is durable on its partition's quorum (the batch is
visible to readers, whole). An error (leadership lost, a timeout, a partition
unreachable) means the outcome is unknown: the decision may be recorded and its
markers partly written. The caller retries the same call (every step is
idempotent: a recorded decision is returned, not taken again, and a marker
already written is answered with its offset or counted as done); if the caller
never comes back, the leader finishes a recorded decision on its own.

Invariants: a participant is registered before it writes; a decision is durable
before any marker; a marker is written only as the recorded decision says; a
decision is recorded complete only once each of its markers is durable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from raftlog.coordinator.commands import (
    AbortRun,
    Command,
    Complete,
    Cut,
    Decide,
    MarkerOffset,
    Pending,
    Register,
)
from raftlog.coordinator.state import CommandError, Decision
from raftlog.coordinator.tm_stm import TmStm
from raftlog.errors import (
    FencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TxnLostError,
)
from raftlog.faults import failpoints
from raftlog.rpc.messages import (
    CutParticipant,
    CutTransaction,
    DescribeWriterResponse,
    Participant,
    PendingDecision,
    RegisterParticipantResponse,
    TxnDecision,
)

__all__ = [
    "CoordinatorRefusedError",
    "MarkerWriter",
    "TxnCoordinator",
]

log = logging.getLogger(__name__)

Step = Callable[[str], Awaitable[None]]


class CoordinatorRefusedError(ValueError):
    """A call the coordinator refuses (a bad field, a participant never registered); the
    message names the field. Nothing was written."""


class MarkerWriter(Protocol):
    """Writes one marker on a participant's partition and returns its offset.

    Raises :class:`~raftlog.errors.FencedError`,
    :class:`~raftlog.errors.InvalidTxnStateError` or
    :class:`~raftlog.errors.InvalidProducerEpochError` when the
    partition refuses it for those reasons, and anything else when the outcome is
    unknown (the coordinator tries again later).
    """

    async def write_marker(self, participant: Participant, commit: bool) -> int: ...


async def _no_step(name: str) -> None:
    return None


class TxnCoordinator:
    """Runs the transactions of one ``__transactions`` partition (see the module doc)."""

    def __init__(
        self,
        tm: TmStm,
        markers: MarkerWriter,
        *,
        step: Step = _no_step,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]] = asyncio.ensure_future,
    ) -> None:
        """``step`` is awaited between the steps of a decision ("decided", "marker",
        "markers", "completed"): the simulation crashes the coordinator there.
        ``spawn`` starts the task that finishes a decision (the simulation's node owns
        it, so that a crash of the node ends it)."""
        self.tm = tm
        self.markers = markers
        self._step = step
        self._spawn = spawn
        # one task per decision being completed: an EndTxn, its retry and the resume
        # loop share it instead of racing
        self._finishing: dict[tuple[str, int, str], asyncio.Task[None]] = {}

    # -- calls ---------------------------------------------------------------

    async def register(
        self, writer: str, version: int, participant: Participant
    ) -> RegisterParticipantResponse:
        """Register ``participant`` for ``version`` of ``writer`` (before it writes)."""
        result = await self._execute(Register(writer, version, participant))
        return RegisterParticipantResponse(
            result["status"], result.get("last_committed", -1), result.get("error", "")
        )

    async def end_txn(
        self, writer: str, version: int, run: str, commit: bool, participants: list[Participant]
    ) -> tuple[str, TxnDecision | None]:
        """Decide ``version`` of ``writer`` as ``run`` and finish it (the module doc's
        contract): returns ("committed" | "aborted", the recorded decision, complete).

        ``participants`` are exactly the ones to commit. Every earlier incomplete
        decision of ``writer`` is finished too (oldest first), so a replay completes
        what a dead coordinator left. Raises :class:`CoordinatorRefusedError` for a
        bad call, :class:`TxnLostError` when a committed participant was aborted.
        """
        result = await self._execute(
            Decide(writer, version, run, commit, list(participants) if commit else [])
        )
        if result.get("taken"):  # this call took it (a retry finds it recorded)
            failpoints.failpoint(failpoints.TXN_AFTER_DECISION)
        await self._step("decided")
        await self._finish_writer(writer, run)
        raw = result.get("decision")
        if raw is None:  # a version committed and pruned long ago: nothing left to do
            return result["status"], None
        done = Decision.from_json(raw)
        done.complete = True  # _finish_all returned: every marker of it is durable
        return result["status"], done.to_wire()

    async def abort_run(self, run: str, version: int) -> int:
        """Abort, and write the abort markers of, whatever ``run`` registered for
        ``version`` and has not decided; return how many transactions."""
        result = await self._execute(AbortRun(run, version))
        for writer in sorted({item["writer"] for item in result["aborted"]}):
            await self._finish_all(writer)
        return len(result["aborted"])

    async def cut(self, topic: str, topic_id: int) -> list[CutTransaction]:
        """The committed transactions touching ``topic`` (linearizable: through the log)."""
        result = await self._execute(Cut(topic, topic_id))
        return [
            CutTransaction(
                t["writer"],
                t["version"],
                t["complete"],
                [
                    CutParticipant(q["partition"], q["first_offset"], q["marker"])
                    for q in t["participants"]
                ],
            )
            for t in result["transactions"]
        ]

    async def describe(self, writer: str) -> DescribeWriterResponse:
        """``writer``'s last committed version and its incomplete decisions."""
        result = await self._execute(Pending(writer))
        return DescribeWriterResponse(
            result["last_committed"],
            [
                PendingDecision(item["version"], Decision.from_json(item["decision"]).to_wire())
                for item in result["pending"]
            ],
        )

    async def resume(self) -> int:
        """Finish every incomplete decision of every writer; return how many were
        finished. For a newly elected leader (after a command of its own term is applied,
        so its state holds every recorded decision) and its timer. A decision that
        cannot be finished now (a partition unreachable, a lost commit) is logged and
        left to the next call."""
        if not self.tm.is_leader:
            return 0
        await self.tm.barrier()
        done = 0
        for writer in sorted({w for w, _, _ in self.tm.state.incomplete()}):
            try:
                done += await self._finish_all(writer)
            except Exception as exc:  # the next round retries; the writer's retry too
                log.warning("transaction coordinator: finishing writer %r: %r", writer, exc)
        return done

    def close(self) -> None:
        """Stop finishing decisions (the replica closes): the next leader resumes them."""
        for task in self._finishing.values():
            task.cancel()
        self._finishing.clear()

    # -- the steps -----------------------------------------------------------

    async def _execute(self, command: Command) -> dict[str, Any]:
        """Replicate ``command`` and return its result; a command out of range or
        malformed (checked by tm_stm before anything reaches the log) or refused by the
        state raises CoordinatorRefusedError."""
        try:
            result = await self.tm.execute(command)
        except CommandError as exc:
            raise CoordinatorRefusedError(str(exc)) from exc
        if result.get("status") == "error":
            raise CoordinatorRefusedError(result["error"])
        return result

    async def _finish_writer(self, writer: str, run: str) -> int:
        """What an EndTxn of ``run`` finishes: every incomplete decision of ``writer``
        (a replay's call finishes what an earlier run's coordinator left)."""
        return await self._finish_all(writer)

    async def _finish_all(self, writer: str) -> int:
        """Finish ``writer``'s incomplete decisions, oldest version first."""
        todo = self.tm.state.incomplete(writer)
        for w, version, decision in todo:
            await self._finish(w, version, decision)
        return len(todo)

    async def _finish(self, writer: str, version: int, decision: Decision) -> None:
        key = (writer, version, decision.run)
        task = self._finishing.get(key)
        if task is None or task.done():
            task = self._spawn(self._write_markers(writer, version, decision))
            self._finishing[key] = task
            task.add_done_callback(functools.partial(self._forget, key))
        # shielded: a caller that goes away (a client disconnect) leaves the markers going
        await asyncio.shield(task)

    def _forget(self, key: tuple[str, int, str], task: asyncio.Task[None]) -> None:
        if self._finishing.get(key) is task:
            del self._finishing[key]
        if not task.cancelled():
            task.exception()  # retrieved: its awaiters (if any) got it

    async def _write_markers(self, writer: str, version: int, decision: Decision) -> None:
        commits = list(decision.named) if decision.commit else []
        aborts = list(decision.aborts)
        offsets = await asyncio.gather(
            *(self._commit_marker(p) for p in commits),
            *(self._abort_marker(p) for p in aborts),
        )
        await self._step("markers")
        markers = [
            MarkerOffset(p.producer_id, o) for p, o in zip(commits + aborts, offsets, strict=True)
        ]
        await self._execute(Complete(writer, version, decision.run, markers))
        await self._step("completed")

    async def _commit_marker(self, p: Participant) -> int:
        try:
            offset = await self.markers.write_marker(p, True)
        except FencedError as exc:
            raise TxnLostError(
                f"{p.topic}/{p.partition}: the transaction of producer {p.producer_id} "
                f"(attempt {p.attempt}, {p.records} records) was aborted before its commit "
                f"marker was written, most likely by its transaction timeout: {exc}"
            ) from exc
        except Exception as exc:
            raise _unknown(p, exc) from exc
        await self._step("marker")
        return offset

    async def _abort_marker(self, p: Participant) -> int:
        """Abort ``p``'s transaction and fence its epoch. A producer already past that epoch
        (aborted by an earlier marker, its timeout, or never opened) counts as aborted."""
        try:
            offset = await self.markers.write_marker(p, False)
        except (FencedError, InvalidTxnStateError, InvalidProducerEpochError):
            offset = -1
        except Exception as exc:
            raise _unknown(p, exc) from exc
        await self._step("marker")
        return offset


def _unknown(p: Participant, exc: Exception) -> TimeoutError:
    """A marker whose outcome is unknown: a timeout for the caller (it retries)."""
    return TimeoutError(
        f"{p.topic}/{p.partition}: the marker of producer {p.producer_id} "
        f"is not known to be written: {exc!r}"
    )
