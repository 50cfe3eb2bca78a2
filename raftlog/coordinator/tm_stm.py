"""``tm_stm``: the transaction coordinator's state machine on its own Raft group.

Redpanda's name for the coordinator state machine. It runs on every replica
of a partition of the internal topic ``__transactions`` (created on demand by
the client), beside that partition's rm_stm. Every command is one
non-transactional DATA batch whose payload is the command as a typed record
(:mod:`raftlog.coordinator.commands`: a codec frame, range-checked and validated
before it is written; entries a node wrote as JSON before are still read); it is
replicated at ``quorum_ack``, applied in log order to a
:class:`~raftlog.coordinator.state.CoordinatorState` on every replica, and the
leader returns the result that its own apply computed. Reads (``pending``,
``cut``) go through the log too, so every answer is linearizable: a leader
that lost its leadership cannot commit the command, and the caller retries at
the new leader.

The results of the latest commands are kept by the offset of their batch until
the caller that replicated one picks it up (at most ``KEPT_RESULTS``).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
from typing import Any

from raftlog.coordinator.commands import Command, decode_command, encode_command
from raftlog.coordinator.state import CoordinatorState, command_error
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.storage.batch import NO_PRODUCER, BatchKind, RecordBatch

__all__ = ["MAX_COMMAND_BYTES", "TRANSACTIONS_TOPIC", "TmStm"]

TRANSACTIONS_TOPIC = "__transactions"
"""The internal topic whose partitions run tm_stm."""

MAX_COMMAND_BYTES = 4 << 20
KEPT_RESULTS = 4096

log_ = logging.getLogger(__name__)


class TmStm:
    """The coordinator state machine of one ``__transactions`` partition."""

    def __init__(self, consensus: Any, *, replicate_timeout_s: float = 30.0) -> None:
        self.state = CoordinatorState()
        self._c = consensus
        self._timeout_s = replicate_timeout_s
        # results of the latest commands by offset, for the callers that replicated them
        self._results: collections.OrderedDict[int, dict[str, Any]] = collections.OrderedDict()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        consensus.add_state_machine(self)

    @property
    def is_leader(self) -> bool:
        return bool(self._c.is_leader)

    # -- the state machine interface (called by consensus) -------------------

    def apply(self, batch: RecordBatch) -> None:
        """Apply a committed batch: a coordinator command when it is plain DATA."""
        if batch.kind is BatchKind.DATA and batch.producer_id == NO_PRODUCER:
            if batch.last_offset > self.state.applied_offset:
                # None when unreadable: apply() answers with an error; the log moves on
                command = self.decode(batch.payload)
                self._results[batch.last_offset] = self.state.apply(command, batch.last_offset)
                while len(self._results) > KEPT_RESULTS:
                    self._results.popitem(last=False)
        else:
            # control batches (no-op barriers, configurations) advance the applied offset
            self.state.applied_offset = max(self.state.applied_offset, batch.last_offset)
        applied = self.state.applied_offset
        while self._waiters and self._waiters[0][0] <= applied:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    # -- the log's form of a command ---------------------------------------------

    def encode(self, command: Any) -> bytes:
        """``command``'s log entry, checked before anything is written (CommandError
        naming the field): a typed record (:func:`encode_command`)."""
        return encode_command(command)

    def decode(self, payload: bytes | memoryview) -> Any:
        """What a log entry is applied as; None when unreadable (:func:`decode_command`)."""
        return decode_command(payload)

    def restore(self, data: bytes) -> None:
        self.state.restore(data)

    # -- commands ------------------------------------------------------------

    async def execute(
        self, command: Command | Any, expected_term: int | None = None
    ) -> dict[str, Any]:
        """Replicate ``command`` and return its result, as applied on this leader.

        Raises :class:`~raftlog.coordinator.state.CommandError` naming the field when
        the command is out of range or malformed (checked before anything is written),
        :class:`~raftlog.raft.errors.NotLeaderError` on a follower, and
        TimeoutError or a RaftError when the command's outcome is unknown (the
        caller retries: every command is idempotent). ``expected_term``: append only
        in that term (TermMismatchError otherwise, nothing appended); None: the
        current one.
        """
        payload = self.encode(command)
        if len(payload) > MAX_COMMAND_BYTES:
            return command_error(
                f"command: {len(payload)} bytes exceeds the limit of {MAX_COMMAND_BYTES}"
            )
        if not self._c.is_leader:
            raise NotLeaderError(getattr(self._c, "group", -1), getattr(self._c, "leader_id", -1))
        batch = RecordBatch.create(payload, 1)
        term = self._c.term if expected_term is None else expected_term
        stages = self._c.replicate([batch], Consistency.QUORUM_ACK, term)
        res = await asyncio.wait_for(asyncio.shield(stages.finished), self._timeout_s)
        offset = res.last_offset
        # The applier may run before or after this task resumes: results are kept by
        # offset (the last KEPT_RESULTS of them) so either order finds its own.
        await self._wait_applied(offset)
        result = self._results.pop(offset, None)
        if result is None:
            raise TimeoutError(f"the result of the coordinator command at offset {offset} is lost")
        return result

    async def barrier(self) -> None:
        """Make the state reflect every entry of earlier terms: the group's read barrier
        (:meth:`Consensus.read_barrier`: an entry of this term committed and applied
        up to the term's read index). Raises NotLeaderError on a follower, and a
        TimeoutError (ReadBarrierTimeout) or a RaftError when that does not happen in
        time."""
        await self._c.read_barrier(self._timeout_s)

    async def _wait_applied(self, offset: int) -> None:
        if self.state.applied_offset >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._ids), fut))
        await asyncio.wait_for(fut, self._timeout_s)
