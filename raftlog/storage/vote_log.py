"""Every Raft group's term and vote on one node, in one append-only file.

When thousands of groups change term at once (a node died and a third of the
partitions elect), each must make its vote durable before it sends anything in
the new term. A file per group, replaced atomically, costs each save a create,
a write, an fsync, a rename and a directory fsync: at 3,000 partitions a batch of
a thousand took 0.8-3 s (about 1 s even without the fsyncs, each system call of
the worker threads waiting for the GIL of a busy event loop), and the elections
of a failover finished in waves, one per batch. etcd keeps each round's
HardState in its WAL and TiKV its Raft states in one engine, one fsync for every
group; this does the same: a batch of saves is one write and one fsync.

File ``votes.<shard>.log`` (:func:`log_name`) of 32-byte records, little-endian:
``group:i64 term:i64 voted_for:i64 batch:u32 crc32c:u32``, the CRC over the first
28 bytes. A group's vote is its newest record. Records are only appended, in
batches numbered from 1 (a compacted file holds batch 0): a batch is one write
then one fsync, and the next batch is written only after that fsync returned.

Contract: :meth:`VoteLog.save` returns once the vote survives a crash; a crash
before that finds the group's previous vote or the new one. Saves asked for
while a batch is being written join the next batch (a newer vote of a group
replaces the older one waiting: every caller then gets the newer one durable).

Recovery (:meth:`VoteLog.open`): the first bad record (short, or its CRC wrong)
starts a torn tail when no valid record after it belongs to a batch later than
the one being written when the power went (the batch after the last good
record's): the tail is cut, with a warning. Otherwise an acknowledged batch was
damaged and :class:`StorageCorruption` names the file and the position: a vote
is never guessed at, or a node could vote twice in a term.

Compaction: once the file holds ``compact_records`` records and four times as
many as it has groups, the newest record of each group is written to
``<name>.tmp``, fsynced and renamed over the log, and the directory fsynced, in
a batch's turn.

A node in several processes (:mod:`raftlog.node.shards`): each appends to its own
file, and each reads the others' too on open (read-only, up to their first bad
record), so a group that another shard hosted before a change of ``--shards``
keeps its vote. The per-group vote files of earlier versions are read by the
caller: :func:`newer` picks the group's vote from the two.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import pathlib
import re
import struct

import crc32c

from raftlog.storage.api import StorageCorruption, VoteState
from raftlog.storage.durable_record import TMP_SUFFIX
from raftlog.storage.fs import REAL_FS, FileHandle, FileSystem
from raftlog.storage.save_batches import SaveBatches

log = logging.getLogger(__name__)

_RECORD = struct.Struct("<qqqII")
RECORD_SIZE = _RECORD.size  # 32: a 512-byte sector holds whole records
_BODY = struct.Struct("<qqqI")
# Below this many records the file is never compacted (a rewrite costs more than it saves).
COMPACT_RECORDS = 100_000
_NAME = re.compile(r"votes\.(\d+)\.log")


def log_name(shard: int) -> str:
    """The file of shard ``shard``'s votes (0 for a node of one process)."""
    return f"votes.{shard}.log"


def newer(a: VoteState, b: VoteState) -> VoteState:
    """The later of two votes of one group: a term only grows, and within a term a
    vote is only ever cast once (from none to someone)."""
    return max(a, b, key=lambda v: (v.term, v.voted_for != -1))


def _record(group: int, vote: VoteState, batch: int) -> bytes:
    body = _BODY.pack(group, vote.term, vote.voted_for, batch)
    return body + struct.pack("<I", crc32c.crc32c(body))


def _parse(data: bytes, position: int) -> tuple[int, VoteState, int] | None:
    """The record at ``position`` (group, vote, batch), or None when it is bad."""
    if position + RECORD_SIZE > len(data):
        return None
    group, term, voted_for, batch, crc = _RECORD.unpack_from(data, position)
    if crc32c.crc32c(data[position : position + _BODY.size]) != crc:
        return None
    return group, VoteState(term=term, voted_for=voted_for), batch


def _scan(data: bytes) -> tuple[dict[int, VoteState], int, int]:
    """The newest vote of each group, the last batch read, and the end of the good
    records (where the first bad record starts; ``len(data)`` when there is none)."""
    votes: dict[int, VoteState] = {}
    batch = 0
    for position in range(0, len(data), RECORD_SIZE):
        parsed = _parse(data, position)
        if parsed is None:
            return votes, batch, position
        group, vote, batch = parsed
        votes[group] = vote
    return votes, batch, len(data)


class VoteLog:
    """A node's (or shard's) votes of all its groups. Create with :meth:`open`.

    :meth:`vote` and :meth:`save` are called on the event loop; a batch is written
    in the log's own thread, one batch at a time."""

    def __init__(
        self,
        path: pathlib.Path,
        fs: FileSystem,
        file: FileHandle,
        votes: dict[int, VoteState],
        size: int,
        batch: int,
        compact_records: int,
    ) -> None:
        self.path = path
        self._fs = fs
        self._file = file
        self._votes = votes  # group -> newest vote asked for (durable once its save returned)
        self._size = size  # the file's length: where the next batch is written
        self._records = size // RECORD_SIZE
        self._batch = batch  # the last batch written
        self._compact_records = compact_records
        self._batches: SaveBatches[int, VoteState] = SaveBatches(self._write)
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._failed: str | None = None  # why the log refuses saves (its tail is unknown)
        self.batches = 0  # batches written since open
        self.saved = 0  # records made durable since open
        self.compactions = 0

    @classmethod
    def open(
        cls,
        directory: pathlib.Path,
        shard: int = 0,
        fs: FileSystem = REAL_FS,
        compact_records: int = COMPACT_RECORDS,
    ) -> VoteLog:
        """Open (creating if needed) shard ``shard``'s log in ``directory`` and recover
        it (see the module doc); the other shards' logs there are read too."""
        directory = pathlib.Path(directory)
        path = directory / log_name(shard)
        fs.unlink(directory / (log_name(shard) + TMP_SUFFIX), missing_ok=True)
        votes: dict[int, VoteState] = {}
        for name in fs.listdir(directory):
            match = _NAME.fullmatch(name)
            if match is None or int(match.group(1)) == shard:
                continue
            other = fs.read_file(directory / name) or b""
            theirs, _, end = _scan(other)
            if end < len(other):
                log.warning(
                    "%s: read up to its first bad record at position %d of %d",
                    directory / name, end, len(other),
                )  # fmt: skip
            for group, vote in theirs.items():
                votes[group] = newer(votes.get(group, VoteState()), vote)
        created = not fs.exists(path)
        file = fs.open(path, create=True)
        try:
            data = file.pread(file.size(), 0)
            mine, batch, end = _scan(data)
            if end < len(data):
                _check_torn(path, data, end, batch)
                log.warning(
                    "%s: cut a torn tail of %d bytes at position %d (a batch the power "
                    "cut before its fsync returned)",
                    path, len(data) - end, end,
                )  # fmt: skip
                file.truncate(end)
            if created:
                fs.fsync_dir(directory)  # the new name must survive a power cut
        except BaseException:
            file.close()
            raise
        for group, vote in mine.items():
            votes[group] = newer(votes.get(group, VoteState()), vote)
        return cls(path, fs, file, votes, end, batch, compact_records)

    def vote(self, group: int) -> VoteState:
        """``group``'s newest vote asked to be saved (``VoteState()`` if none was)."""
        return self._votes.get(group, VoteState())

    @property
    def groups(self) -> int:
        return len(self._votes)

    async def save(self, group: int, vote: VoteState) -> None:
        """Return once ``group``'s vote ``vote`` is durable (see the module's contract).
        Raises the write's error (nothing of the batch counts as saved), or
        ``OSError`` when an earlier failure left the log's tail unknown."""
        if vote.term < 0:
            raise ValueError(f"vote.term must be >= 0, got {vote.term}")
        if self._failed is not None:
            raise OSError(f"{self.path}: refusing votes after a failed write: {self._failed}")
        self._votes[group] = newer(self._votes.get(group, VoteState()), vote)
        await self._batches.save(group, vote)

    async def _write(self, batch: dict[int, VoteState]) -> None:
        if self._failed is not None:
            raise OSError(f"{self.path}: refusing votes: {self._failed}")
        number = self._batch + 1
        data = b"".join(_record(g, v, number) for g, v in batch.items())
        compact = None
        if self._records + len(batch) >= self._compact_records and self._records + len(
            batch
        ) >= 4 * len(self._votes):
            compact = dict(self._votes)  # a copy: the loop goes on changing its own
        if self._thread is None:
            # Its own thread, not the loop's default executor: a failover's votes must
            # not queue behind segment seals and snapshots (see the module doc).
            self._thread = concurrent.futures.ThreadPoolExecutor(1, "vote-log")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._append, data)
        self._batch = number  # only once written: a failed batch leaves no gap in numbers
        self.batches += 1
        self.saved += len(batch)
        if compact is not None:
            await loop.run_in_executor(self._thread, self._compact, compact)

    def _append(self, data: bytes) -> None:
        try:
            self._file.pwrite(data, self._size)
        except OSError as exc:
            try:
                self._file.truncate(self._size)  # no partial record stays before the next
            except OSError as again:
                self._failed = f"undoing a failed write: {again}"
            raise exc
        try:
            self._file.fsync()
        except BaseException as exc:
            self._failed = f"fsync: {exc}"  # the fatal handler stops the node
            raise
        self._size += len(data)
        self._records += len(data) // RECORD_SIZE

    def _compact(self, votes: dict[int, VoteState]) -> None:
        tmp = self.path.with_name(self.path.name + TMP_SUFFIX)
        data = b"".join(_record(g, v, 0) for g, v in sorted(votes.items()))
        self._fs.write_file(tmp, data, fsync=True)
        self._fs.rename(tmp, self.path)
        self._fs.fsync_dir(self.path.parent)
        self._file.close()
        self._file = self._fs.open(self.path)
        self._size, self._records, self._batch = len(data), len(votes), 0
        self.compactions += 1

    def close(self) -> None:
        """Close the file and end the thread (a batch being written finishes first)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        self._file.close()


def _check_torn(path: pathlib.Path, data: bytes, end: int, last_batch: int) -> None:
    """Raise unless the bad record at ``end`` starts a torn tail (see the module doc)."""
    for position in range(end + RECORD_SIZE, len(data) - RECORD_SIZE + 1, RECORD_SIZE):
        parsed = _parse(data, position)
        if parsed is not None and parsed[2] > last_batch + 1:
            raise StorageCorruption(
                f"{path}: bad vote record at position {end}, followed by batch {parsed[2]} "
                f"at position {position}: an acknowledged batch is damaged",
                str(path),
                end,
            )
