"""The snapshots a partition replica keeps at its segments' ends, for its log start.

A follower behind the leader's log start (retention deleted what it lacks) is
sent the group's snapshot as of the log start minus one (``recovery``). State
machines only ever snapshot their current state, so that state is taken when
it passes: as of the last offset of every segment (at the roll that closes the
segment when the state machines have applied up to it already, else when the
applier applies that offset), and saved durably beside the segments as
``start-snapshot-<offset>``. Retention then deletes segments only up to a
segment start whose snapshot is kept (:meth:`StartSnapshots.usable_start`), so
the snapshot as of the log start minus one always exists once the log start
moved, and drops the snapshots below the new start.

Snapshots missed while a replica was down (the applier restarts from its
commit context, past some segment ends) just mean that its retention deletes
a little later, at a segment end it did snapshot.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from raftlog.storage.durable_record import load_record, save_record
from raftlog.storage.log import SegmentedLog

if TYPE_CHECKING:
    from raftlog.raft.consensus import Consensus

log = logging.getLogger(__name__)

PREFIX = "start-snapshot-"
_MAGIC = b"RLSS"


def file_name(offset: int) -> str:
    return f"{PREFIX}{offset:020d}"


def parse_file_name(name: str) -> int | None:
    """The offset a snapshot file is as of; None for any other name."""
    if not name.startswith(PREFIX):
        return None
    digits = name[len(PREFIX) :]
    return int(digits) if digits.isdigit() else None


class StartSnapshots:
    """One partition replica's snapshots at its segments' ends (a
    :class:`raftlog.raft.group_snapshot.SnapshotStore`). Construct before
    ``consensus.start()``: it listens to the applier and to segment rolls."""

    def __init__(self, consensus: Consensus, log_: SegmentedLog, name: str) -> None:
        self._c = consensus
        self._log = log_
        self._name = name
        self._dir = log_.directory
        self._fs = log_.fs
        self.kept: list[int] = sorted(
            o for n in self._fs.listdir(self._dir) if (o := parse_file_name(n)) is not None
        )
        # segment ends the applier has not reached yet: snapshotted when it does
        restored = max(log_.commit_context_offset, log_.start_offset - 1)
        self._pending = {
            s.base_offset - 1 for s in log_.segment_infos()[1:] if s.base_offset - 1 > restored
        }
        # Saves running in a thread (offset -> its task), and how many times the log was
        # replaced by a snapshot: a save begun before that is of a log that is gone.
        self._saving: dict[int, asyncio.Task[None]] = {}
        self._generation = 0
        log_.roll_listeners.append(self._on_roll)
        consensus.add_applied_listener(self._on_applied)
        consensus.snapshot_store = self

    # -- SnapshotStore ------------------------------------------------------------------

    def at(self, offset: int) -> bytes | None:
        if offset not in self.kept:
            return None
        return load_record(self._dir / file_name(offset), _MAGIC, self._fs)

    def installed(self, offset: int, data: bytes) -> None:
        """The log was replaced by a snapshot as of ``offset``: every other snapshot is of
        a log that no longer exists."""
        self._pending.clear()
        self._generation += 1
        self._save(offset, data)
        self._drop(lambda o: o != offset)

    # -- taking them --------------------------------------------------------------------

    def _on_roll(self, base: int) -> None:
        if base <= 0:
            return  # the log's first segment: nothing before it to stand in for
        if self._c.last_applied == base - 1:
            self._take(base - 1)
        elif base - 1 > self._c.last_applied:
            self._pending.add(base - 1)

    def _on_applied(self, offset: int) -> None:
        if offset in self._pending:
            self._pending.discard(offset)
            self._take(offset)

    def _take(self, offset: int) -> None:
        """Take the state as of ``offset`` now and save it in a thread: a segment roll
        (every new term rolls one) must not wait for the record's fsyncs on the event
        loop, where a failover's thousands of rolls would queue behind each other.
        Retention counts it (``kept``) only once it is durable."""
        applied, data = self._c.state_snapshot()
        if applied != offset or offset in self.kept or offset in self._saving:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a tool, a test driving the log by hand)
            self._save_or_warn(offset, data)
            return
        self._saving[offset] = loop.create_task(self._save_in_thread(offset, data))

    async def _save_in_thread(self, offset: int, data: bytes) -> None:
        generation = self._generation
        path = self._dir / file_name(offset)
        try:
            await asyncio.to_thread(save_record, path, _MAGIC, data, self._fs)
        except OSError as exc:  # retention waits for the next segment end
            log.warning("%s: could not save the snapshot at offset %d: %s", self._name, offset, exc)
            return
        finally:
            self._saving.pop(offset, None)
        if generation != self._generation:  # the log was replaced meanwhile
            self._fs.unlink(path, missing_ok=True)
        elif offset not in self.kept:
            bisect.insort(self.kept, offset)

    def _save_or_warn(self, offset: int, data: bytes) -> None:
        try:
            self._save(offset, data)
        except OSError as exc:  # retention waits for the next segment end
            log.warning("%s: could not save the snapshot at offset %d: %s", self._name, offset, exc)

    def _save(self, offset: int, data: bytes) -> None:
        save_record(self._dir / file_name(offset), _MAGIC, data, self._fs)
        if offset not in self.kept:
            bisect.insort(self.kept, offset)

    # -- retention ----------------------------------------------------------------------

    def usable_start(self, target: int) -> int:
        """The highest log start up to ``target`` that leaves a snapshot as of the offset
        before it: a segment's base whose previous offset was snapshotted (or the
        current start: nothing deleted)."""
        best = self._log.start_offset
        kept = set(self.kept)
        for seg in self._log.segment_infos():
            if seg.base_offset > target:
                break
            if seg.base_offset - 1 in kept:
                best = max(best, seg.base_offset)
        return best

    def drop_below_start(self) -> None:
        """Delete the snapshots before the log start minus one (no longer needed)."""
        floor = self._log.start_offset - 1
        self._drop(lambda o: o < floor)

    def _drop(self, doomed: Callable[[int], bool]) -> None:
        gone = [o for o in self.kept if doomed(o)]
        for o in gone:
            self._fs.unlink(self._dir / file_name(o), missing_ok=True)
        if gone:
            self._fs.fsync_dir(self._dir)
        self.kept = [o for o in self.kept if o not in gone]
