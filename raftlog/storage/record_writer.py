"""Many groups' small durable records saved together, off the event loop.

The node saves its groups' commit contexts through it (each group quiescing at
once after a creation or a failover saves one). Saved one by one on the event
loop (write, fsync, rename, fsync the directory: two fsyncs each) they serialise
the whole node: a profile at 3,000 partitions had 43-58% of the loop's samples in
such saves (then of the votes, which now go to one append-only file per node:
:mod:`raftlog.storage.vote_log`). Redpanda batches its groups' writes behind one
flush per disk; this does the same for a node's records.

Contract: :meth:`RecordWriter.save` returns once ``path`` durably holds
``data`` (a crash after that finds it; a crash before finds the old record or
the new one, never a mix, plus maybe a ``.tmp`` file). Saves that arrive while
a batch is being written join the next batch; a batch is written in a worker
thread:

- without a ``barrier`` (the node's choice): each record as
  :func:`~raftlog.storage.durable_record.save_record` does it (fsync the file,
  rename, fsync each directory once per batch), the batch shared among
  ``FSYNC_THREADS`` threads of the writer's own, whose concurrent fsyncs the
  journal commits together. Its own: in the event loop's default executor (six
  threads on two cores) a failover's votes queued behind the thousand segment
  seals and start snapshots of the groups elected before them, and 1,000 votes
  in four threads took seconds; the elections of a kill -9 at 3,000 partitions
  finished in waves, when a batch did (p50 4-13 s from run to run);
- with a ``barrier`` (a syncfs, :class:`raftlog.raft.node_flush.NodeFlush`):
  every ``.tmp`` is written, one barrier makes them durable, every rename is done,
  and one more barrier makes the renames durable: two syncfs calls for any number
  of records. The node does not use it: a syncfs also writes back the
  other writers' dirty pages on that disk (0.6 s a round on the shared machine at
  3,000 partitions), and a vote behind two of them outlived the election timeout.

A write error fails that batch's callers (nothing was renamed over a record whose
new bytes were not durable); a failed fsync or syncfs goes to the process's fatal
handler as every fsync does (:func:`raftlog.storage.fs.set_fatal_handler`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pathlib
from collections.abc import Awaitable, Callable

from raftlog.storage.durable_record import tmp_path
from raftlog.storage.fs import REAL_FS, FileSystem
from raftlog.storage.save_batches import SaveBatches

Barrier = Callable[[], Awaitable[None]]
# Threads that fsync one batch's records without a barrier (each its share): many, as
# the journal commits concurrent fsyncs together (a syscall in a thread holds no GIL).
FSYNC_THREADS = 16


class RecordWriter:
    """One batch of record saves in flight at a time, for the records of one node."""

    def __init__(self, fs: FileSystem = REAL_FS, barrier: Barrier | None = None) -> None:
        self._fs = fs
        self._barrier = barrier
        self._batches: SaveBatches[pathlib.Path, bytes] = SaveBatches(self._write)
        # Started on the first batch (a writer that never saves starts none), ended by
        # close(); not the loop's default executor (see the module doc).
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self.batches = 0  # batches written (each: two barriers, or one fsync per record)
        self.records = 0  # records made durable

    async def save(self, path: pathlib.Path, data: bytes) -> None:
        """Durably replace ``path``'s content with ``data`` (see the module's contract)."""
        await self._batches.save(path, data)

    def close(self) -> None:
        """End the writer's threads (those running finish their records first)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False)
            self._threads = None

    async def _in_thread(self, fn: Callable[..., None], *args: object) -> None:
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(
                FSYNC_THREADS, thread_name_prefix="record-writer"
            )
        await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def _write(self, batch: dict[pathlib.Path, bytes]) -> None:
        items = list(batch.items())
        if self._barrier is None:
            # Chunks in parallel threads: the filesystem's journal commits the
            # concurrent fsyncs together (ext4's jbd2 batches them).
            n = min(FSYNC_THREADS, len(items))
            await asyncio.gather(
                *(self._in_thread(self._write_fsynced, items[i::n]) for i in range(n))
            )
        else:
            await self._in_thread(self._write_tmps, items)
            await self._barrier()  # every .tmp durable before it replaces a record
            await self._in_thread(self._rename, items)
            await self._barrier()  # the renames durable
        self.batches += 1
        self.records += len(items)

    def _write_tmps(self, items: list[tuple[pathlib.Path, bytes]]) -> None:
        for path, data in items:
            self._fs.write_file(tmp_path(path), data, fsync=False)

    def _rename(self, items: list[tuple[pathlib.Path, bytes]]) -> None:
        for path, _ in items:
            self._fs.rename(tmp_path(path), path)

    def _write_fsynced(self, items: list[tuple[pathlib.Path, bytes]]) -> None:
        for path, data in items:
            self._fs.write_file(tmp_path(path), data, fsync=True)
            self._fs.rename(tmp_path(path), path)
        for directory in dict.fromkeys(path.parent for path, _ in items):
            self._fs.fsync_dir(directory)
